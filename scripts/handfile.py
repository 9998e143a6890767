"""Files a user edits by hand (patches/series, upstream.toml, revisions.toml, cover.md): read as text
or refused.

An editor can add what the kit must not read as content: a UTF-8 byte order mark (it would land in
the first entry, key or title), bytes that are not UTF-8. Each is refused in one line naming the
file and the fix; the file is never rewritten by the reader.
"""

from __future__ import annotations

from pathlib import Path

from scripts.errors import KitError

BOM = b"\xef\xbb\xbf"


class HandFileError(KitError):
    """A hand-edited file holds bytes the kit cannot read as its content."""


def check_bytes(shown: str, data: bytes) -> str:
    """The text of a hand-edited file named `shown` (e.g. patches/series), or HandFileError."""
    if data.startswith(BOM):
        raise HandFileError(
            f"{shown} starts with a UTF-8 byte order mark (BOM, an editor added it)",
            f"save it without BOM, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' {shown}",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise HandFileError(
            f"{shown} is not valid UTF-8 (line {line}, byte {exc.start})",
            f"save it as UTF-8, or restore it: git checkout -- {shown}",
        ) from None


def read(path: Path, shown: str) -> str:
    """The text of a hand-edited file (newlines as written: CRLF stays CRLF)."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise HandFileError(
            f"cannot read {shown} ({exc.strerror or exc})", f"check {shown} and its permissions"
        ) from None
    return check_bytes(shown, data)
