"""Files a user edits by hand (patches/series, upstream.toml, revisions.toml, cover.md): read as text
or refused, and a TOML one against its schema (check_table: each field's presence, type and range
checked before any use, the advice made from the text the user wrote).

An editor can add what the kit must not read as content: a UTF-8 byte order mark (it would land in
the first entry, key or title), bytes that are not UTF-8. Each is refused in one line naming the
file and the fix; the file is never rewritten by the reader.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

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


# ---- TOML files read against a schema ------------------------------------------------------------


@dataclass(frozen=True)
class Field:
    """One key of a hand-edited TOML table: its type (str, or dict for a sub-table), whether it must be
    there, and the check of its value's range (what is wrong with it, None when nothing)."""

    key: str
    kind: type = str
    required: bool = True
    check: Callable[[str], str | None] | None = None
    example: str = "..."


def load_toml(text: str, shown: str, error: type[KitError] = HandFileError) -> dict[str, Any]:
    """The TOML document of a hand-edited file, or one line naming the line tomllib stopped at (a key
    written twice among them)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib names the line, not what it holds: a key written twice is found by its line
        at = re.search(r"at line (\d+)", str(exc))
        lines = text.splitlines()
        line = lines[int(at[1]) - 1].strip() if at and 0 < int(at[1]) <= len(lines) else ""
        raise error(
            f"{shown} is not valid TOML ({exc}{f': {line}' if line else ''})",
            f"fix that line (each key once per table), or restore it: git checkout -- {shown}",
        ) from None


def raw_value(text: str, table: str, key: str) -> str | None:
    """What the user wrote after `key =` in [table] ("" for the top level), comments cut: the advice of
    an error quotes it, never the value tomllib made of it (0.30 is the float 0.3)."""
    current = ""
    for line in text.splitlines():
        header = TABLE_LINE.match(line)
        if header:
            current = header["name"].strip()
            continue
        found = KEY_LINE.match(line)
        if found and current == table and found["key"].strip("\"' ") == key:
            return found["value"].strip()
    return None


TABLE_LINE = re.compile(r"^\s*\[(?P<name>[^\[\]]+)\]\s*(#.*)?$")
KEY_LINE = re.compile(r"^\s*(?P<key>[A-Za-z0-9_\"' -]+?)\s*=\s*(?P<value>[^#]*?)\s*(#.*)?$")
TOML_TYPES = {str: "a string", dict: "a table", bool: "true/false", int: "an integer"}


def type_name(value: object) -> str:
    """What TOML made of a value, as a message names it."""
    for kind, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a float"),
        (str, "a string"),
    ):
        if isinstance(value, kind):
            return name
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return "a date/time" if value is not None else "missing"


def type_fix(key: str, raw: str | None, value: object, example: str) -> str:
    """How to write key as a string, from what the user wrote: `version = 0.30` -> quote "0.30"; a
    table holding one string -> that string."""
    if isinstance(value, dict):
        inner = [v for v in value.values() if isinstance(v, str)]
        suggested = inner[0] if len(value) == 1 and inner else example
        return f'write it as a quoted string: {key} = "{suggested}"'
    if isinstance(value, list):
        return f'write one quoted string: {key} = "{example}"'
    shown = raw if raw else str(value)
    return f'quote it: {key} = "{shown.strip(chr(34) + chr(39))}"'


def check_table(
    table: object,
    name: str,
    fields: tuple[Field, ...],
    text: str,
    shown: str,
    *,
    extra: bool = False,
    of: str = "the file",
    error: type[KitError] = HandFileError,
) -> dict[str, Any]:
    """table checked against fields, in order: a table at all, no key the schema lacks (unless extra),
    every required key there, each of its type and range. The first fault is one line naming
    `shown`, the table and the key, with a fix made from the text the user wrote (`of`: what the
    file is, for a key it does not have)."""
    where = f"[{name}]" if name else "the top level"
    dotted = f"{name}." if name else ""
    restore = f"or restore it: git checkout -- {shown}"
    if not isinstance(table, dict):
        raise error(
            f"{shown}: [{name}] is {type_name(table)}, not a table"
            if table is not None
            else f"{shown}: [{name}] is missing",
            f"write it as a [{name}] table, {restore}",
        )
    known = {f.key for f in fields}
    unknown = [k for k in table if k not in known]
    if unknown and not extra:
        raise error(
            f"{shown}: {dotted}{unknown[0]} is not a field of {of}",
            f"the fields of {where} are {', '.join(f.key for f in fields)}: fix its name, {restore}",
        )
    for f in fields:
        if f.key not in table:
            if f.required:
                raise error(
                    f"{shown}: {dotted}{f.key} is missing",
                    f'add it to {where}: {f.key} = "{f.example}"'
                    if f.kind is str
                    else f"add its [{dotted}{f.key}] table, {restore}",
                )
            continue
        value = table[f.key]
        if not isinstance(value, f.kind) or isinstance(value, bool) != (f.kind is bool):
            raw = raw_value(text, name, f.key)
            written = f" = {raw}" if raw and f.kind is str else ""
            raise error(
                f"{shown}: {dotted}{f.key}{written} is not "
                f"{TOML_TYPES.get(f.kind, f.kind.__name__)} ({type_name(value)})",
                type_fix(f.key, raw, value, f.example)
                if f.kind is str
                else f"write it as a [{dotted}{f.key}] table, {restore}",
            )
        why = f.check(value) if f.check is not None and isinstance(value, str) else None
        if why is not None:
            raise error(f"{shown}: {dotted}{f.key} = {value!r} {why}", f"fix it, {restore}")
    return table
