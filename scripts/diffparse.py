"""Read unified diffs (format-patch files): the one diff model of the kit.

Per file: its names, the added lines, the removed count, and its hunks; each hunk with its
header's old start, its added/removed lines and its text as a patch of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# `@@ -old[,count] +new[,count] @@`; a missing count means 1.
ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    path: str  # the new name
    number: int  # 1-based, within its file
    old_start: int
    added: tuple[str, ...]
    removed: tuple[str, ...]
    text: str  # a patch holding this hunk alone (its file's headers + the hunk)

    @property
    def label(self) -> str:
        return f"{self.path} hunk #{self.number} (@@ -{self.old_start})"


@dataclass(frozen=True)
class FileDiff:
    path: str  # repository-relative, new name
    new_file: bool
    added: tuple[tuple[int, str], ...]  # (line number in the new file, text)
    removed: int
    hunks: tuple[Hunk, ...] = ()
    old_path: str = (
        ""  # the name before (`--- a/...`); "" for a new file, the new name when no `---` line
    )

    @property
    def apply_name(self) -> str:
        """The name git apply reports this file's failures under (the old one, a new file's new one)."""
        return self.old_path or self.path


@dataclass
class _File:
    """One file while it is read; frozen into a FileDiff when the next one starts."""

    path: str
    old_path: str
    new_file: bool = False
    header: list[str] = field(default_factory=list)
    added: list[tuple[int, str]] = field(default_factory=list)
    removed: int = 0
    hunks: list[Hunk] = field(default_factory=list)
    body: list[str] = field(default_factory=list)  # the hunk being read: its header and lines
    old_start: int = 0  # of the hunk being read

    def close_hunk(self) -> None:
        if not self.body:
            return
        lines = self.body[1:]
        self.hunks.append(
            Hunk(
                self.path,
                len(self.hunks) + 1,
                self.old_start,
                tuple(x[1:] for x in lines if x.startswith("+")),
                tuple(x[1:] for x in lines if x.startswith("-")),
                "".join(f"{x}\n" for x in [*self.header, *self.body]),
            )
        )
        self.body = []

    def frozen(self) -> FileDiff:
        self.close_hunk()
        return FileDiff(
            self.path,
            self.new_file,
            tuple(self.added),
            self.removed,
            tuple(self.hunks),
            self.old_path,
        )


def unquoted(text: str) -> tuple[str, str]:
    """(the name, the rest) of a name git wrote C-quoted (`"b/\\303\\274.py"`: octal bytes, \\t, \\",
    ...), as UTF-8 (other bytes kept, surrogate-escaped); text must start with the opening quote."""
    out, i = bytearray(), 1
    while i < len(text) and text[i] != '"':
        if text[i] == "\\" and text[i + 1 : i + 4].isdigit() and len(text[i + 1 : i + 4]) == 3:
            out.append(int(text[i + 1 : i + 4], 8) & 0xFF)
            i += 4
        elif text[i] == "\\" and text[i + 1 : i + 2] in ESCAPES:
            out.append(ESCAPES[text[i + 1]])
            i += 2
        else:
            out += text[i].encode("utf-8", "surrogateescape")
            i += 1
    return out.decode("utf-8", "surrogateescape"), text[i + 1 :]


def header_name(text: str) -> str:
    """The name in a `--- a/x` or `+++ b/x` line after its marker, prefix dropped (git ends a name
    holding a space with a tab there); "" for /dev/null."""
    if text.startswith('"'):
        text = unquoted(text)[0]
    text = text.removesuffix("\t")
    return "" if text == "/dev/null" else text[2:]


def git_names(rest: str) -> tuple[str, str]:
    """(old, new) names of a `diff --git ` line's rest: quoted names, or plain ones that may hold
    spaces and " b/" (then both names are the same, as in every diff without a rename)."""
    if rest.startswith('"'):
        old, rest = unquoted(rest)
        rest = rest.lstrip(" ")
        new = unquoted(rest)[0] if rest.startswith('"') else rest
        return old[2:], new[2:]
    if rest.endswith('"'):  # a plain old name, a quoted new one
        old, _, new = rest.partition(' "')
        return old[2:], unquoted('"' + new)[0][2:]
    half = (len(rest) - 5) // 2
    if len(rest) % 2 == 1 and rest == f"a/{rest[2 : 2 + half]} b/{rest[2 : 2 + half]}":
        return rest[2 : 2 + half], rest[2 : 2 + half]
    old, _, new = rest.partition(" b/")
    return old[2:], new


def parse(patch_text: str) -> list[FileDiff]:
    """Per-file changes of one patch, in order of appearance.

    Inside a hunk the header's line counts, not the text, say where it ends: an added
    line `++ x` reads `+++ x` and a removed `-- x` reads `--- x`, like file headers.
    """
    files: list[FileDiff] = []
    current: _File | None = None
    line_no = old_left = new_left = 0
    # Lines end at "\n" only: splitlines() would also end them at a CR, a form feed or U+2028 inside
    # a file's line.
    for line in patch_text.removesuffix("\n").split("\n"):
        tag = line[:1]
        if (
            current
            and current.body
            and (old_left > 0 or new_left > 0)
            and tag in ("+", "-", " ", "", "\\")
        ):
            current.body.append(line)
            if tag == "+":
                # a CRLF file's line, without its CR
                current.added.append((line_no, line[1:].removesuffix("\r")))
                line_no, new_left = line_no + 1, new_left - 1
            elif tag == "-":
                current.removed, old_left = current.removed + 1, old_left - 1
            # context (a blank line is context whose space was stripped); `\ No newline`
            elif tag != "\\":
                line_no, old_left, new_left = line_no + 1, old_left - 1, new_left - 1
            continue
        old_left = new_left = (
            0  # a hunk shorter than its header says ends at the first line no hunk has
        )
        # `\ No newline at end of file` after a hunk's last line
        if current and current.body and tag == "\\":
            current.body.append(line)
            continue
        if line.startswith("diff --git "):
            if current:
                files.append(current.frozen())
            old, path = git_names(line[len("diff --git ") :])
            current = _File(path, old, header=[line])
        elif current is None:
            continue
        elif line == "-- ":  # a mail signature follows the last hunk
            files.append(current.frozen())
            current = None
        elif hunk := HUNK.match(line):
            current.close_hunk()
            current.body, current.old_start = [line], int(hunk[1])
            old_left = int(hunk[2] or 1)
            line_no, new_left = int(hunk[3]), int(hunk[4] or 1)
        elif current.body:
            continue  # a line after a hunk ended that no hunk has: not part of the patch
        else:
            current.header.append(line)
            if line.startswith("new file mode"):
                current.new_file = True
            elif line.startswith("--- "):
                current.old_path = header_name(line[4:])
            elif line.startswith("+++ ") and header_name(line[4:]):
                current.path = header_name(line[4:])
    if current:
        files.append(current.frozen())
    return files


def hunks(patch_text: str) -> list[Hunk]:
    """Every hunk of a patch, each as a patch of its own, in order."""
    return [h for f in parse(patch_text) for h in f.hunks]


def touched(patch_texts: list[str]) -> list[str]:
    """Files the series touches, first-seen order, no repeats."""
    seen: dict[str, None] = {}
    for text in patch_texts:
        for f in parse(text):
            seen.setdefault(f.path)
    return list(seen)
