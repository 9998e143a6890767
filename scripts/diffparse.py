"""Read unified diffs (format-patch files): touched files, added lines, +/- counts."""

from __future__ import annotations

import re
from dataclasses import dataclass

# `@@ -old[,count] +new[,count] @@`; a missing count means 1.
HUNK = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class FileDiff:
    path: str  # repository-relative, new name
    new_file: bool
    added: tuple[tuple[int, str], ...]  # (line number in the new file, text)
    removed: int


def parse(patch_text: str) -> list[FileDiff]:
    """Per-file changes of one patch, in order of appearance.

    Inside a hunk the header's line counts, not the text, say where it ends: an added
    line `++ x` reads `+++ x` and a removed `-- x` reads `--- x`, like file headers.
    """
    files: list[FileDiff] = []
    path, new_file, added, removed = "", False, [], 0
    line_no = old_left = new_left = 0

    def close() -> None:
        if path:
            files.append(FileDiff(path, new_file, tuple(added), removed))

    for line in patch_text.splitlines():
        tag = line[:1]
        if (old_left > 0 or new_left > 0) and tag in ("+", "-", " ", "", "\\"):
            if tag == "+":
                added.append((line_no, line[1:]))
                line_no, new_left = line_no + 1, new_left - 1
            elif tag == "-":
                removed, old_left = removed + 1, old_left - 1
            elif tag != "\\":  # context (a blank line is context whose space was stripped); `\ No newline`
                line_no, old_left, new_left = line_no + 1, old_left - 1, new_left - 1
            continue
        old_left = new_left = 0  # a hunk shorter than its header says ends at the first line no hunk has
        if line.startswith("diff --git "):
            close()
            path, new_file, added, removed = line.split(" b/", 1)[1], False, [], 0
        elif not path:
            continue
        elif line == "-- ":  # a mail signature follows the last hunk
            close()
            path = ""
        elif line.startswith("new file mode"):
            new_file = True
        elif hunk := HUNK.match(line):
            old_left = int(hunk[1] or 1)
            line_no, new_left = int(hunk[2]), int(hunk[3] or 1)
    close()
    return files


def touched(patch_texts: list[str]) -> list[str]:
    """Files the series touches, first-seen order, no repeats."""
    seen: dict[str, None] = {}
    for text in patch_texts:
        for f in parse(text):
            seen.setdefault(f.path)
    return list(seen)
