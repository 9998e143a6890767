"""Read unified diffs (format-patch files): touched files, added lines, +/- counts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FileDiff:
    path: str  # repository-relative, new name
    new_file: bool
    added: tuple[tuple[int, str], ...]  # (line number in the new file, text)
    removed: int


def parse(patch_text: str) -> list[FileDiff]:
    """Per-file changes of one patch, in order of appearance."""
    files: list[FileDiff] = []
    path, new_file, added, removed, line_no = "", False, [], 0, 0

    def close() -> None:
        if path:
            files.append(FileDiff(path, new_file, tuple(added), removed))

    for line in patch_text.splitlines():
        if line == "-- ":  # a mail signature ends the last hunk
            close()
            path = ""
        elif line.startswith("diff --git "):
            close()
            path, new_file, added, removed = line.split(" b/", 1)[1], False, [], 0
        elif not path:
            continue
        elif line.startswith("new file mode"):
            new_file = True
        elif line.startswith("+++ ") or line.startswith("--- "):
            continue
        elif line.startswith("@@ "):
            line_no = int(line.split()[2].lstrip("+").split(",")[0])
        elif line.startswith("+"):
            added.append((line_no, line[1:]))
            line_no += 1
        elif line.startswith("-"):
            removed += 1
        elif line.startswith(" "):
            line_no += 1
    close()
    return files


def touched(patch_texts: list[str]) -> list[str]:
    """Files the series touches, first-seen order, no repeats."""
    seen: dict[str, None] = {}
    for text in patch_texts:
        for f in parse(text):
            seen.setdefault(f.path)
    return list(seen)
