"""What the kit ran, kept as JSON under .work/records/ so later reports (the PR
body) quote real runs with their inputs, never a figure typed by hand; and the one
checked reader of every JSON state file the kit keeps (records, journals, markers,
the checkout's state).

A state file is input like any other: a journal committed in a PR, a record copied from another
machine or edited by hand reaches the kit as it is. So each reader declares what the kit writes
there (a Schema: key -> Check), and `load`/`check` refuse anything else by name, in one line,
before the caller acts on any of it. A name a state file holds is checked to be one the kit itself
may write (a plain file name of the right form, never a path out of its folder).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scripts.errors import KitError

Check = Callable[[object], object]  # the value as the kit wrote it, or ValueError(why not)
Schema = Mapping[str, Check]
COMMIT = re.compile(r"^[0-9a-f]{40}$")
DIGEST = re.compile(r"^[0-9a-f]{64}$")


class RecordError(KitError):
    """A state file of the kit's holds what the kit never writes there: refused before any use."""


def write(records: Path, name: str, data: dict[str, Any]) -> Path:
    records.mkdir(parents=True, exist_ok=True)
    path = records / f"{name}.json"
    body = {
        "name": name,
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        **data,
    }
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


RECORD: Schema = {"name": lambda v: text(v), "finished_at": lambda v: text(v)}


def read(
    records: Path, name: str, schema: Schema | None = None, optional: tuple[str, ...] = ()
) -> dict[str, Any] | None:
    """The record `name` (None when the kit has not written it); one that is not a record of that name,
    or whose keys of schema (the ones its reader uses) hold what the kit never writes, is refused."""
    shown = f".work/{records.name}/{name}.json"
    fix = f"remove it (rm {shown}) and run the command that writes it again"
    wanted = {**RECORD, **(schema or {})}
    data = load(records / f"{name}.json", shown, wanted, fix, optional=optional, extra=True)
    if data is not None and data["name"] != name:
        raise RecordError(f"{shown} is the record of {data['name']!r}, not of {name!r}", fix)
    return data


# ---- the checked reader --------------------------------------------------------------------------


def load(
    path: Path,
    shown: str,
    schema: Schema,
    fix: str,
    *,
    optional: tuple[str, ...] = (),
    extra: bool = False,
    error: type[KitError] = RecordError,
) -> dict[str, Any] | None:
    """The JSON object at path checked against schema (None when there is no file), or `error` naming
    the file, the entry and what is wrong with it."""
    if not (path.is_file() or path.is_symlink()):
        return None
    if path.is_symlink():
        raise error(f"{shown} is a symbolic link (the kit writes a plain file there)", fix)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise error(f"{shown} is unreadable ({type(exc).__name__}: {exc})", fix) from None
    return check(data, shown, schema, fix, optional=optional, extra=extra, error=error)


def check(
    data: object,
    shown: str,
    schema: Schema,
    fix: str,
    *,
    optional: tuple[str, ...] = (),
    extra: bool = False,
    error: type[KitError] = RecordError,
) -> dict[str, Any]:
    """data as a dict whose every key of schema holds what its Check accepts (keys in optional may be
    absent; others than schema's only with extra), or `error` naming the first wrong entry."""
    if not isinstance(data, dict):
        raise error(f"{shown} holds a JSON {type(data).__name__}, not the kit's object", fix)
    unknown = sorted(str(k) for k in data if k not in schema)
    if unknown and not extra:
        raise error(f"{shown} has unexpected keys {unknown} (the kit never writes them there)", fix)
    missing = [k for k in schema if k not in data and k not in optional]
    if missing:
        raise error(f"{shown} has no {missing[0]!r}", fix)
    out = dict(data)
    for key, accept in schema.items():
        if key in data:
            try:
                out[key] = accept(data[key])
            except ValueError as exc:
                raise error(f"{shown}: {key} {exc}", fix) from None
    return out


# ---- checks: each returns the value, or raises ValueError saying what is wrong ---------------------


def shown_value(value: object) -> str:
    """A value as a message shows it: short, on one line."""
    raw = json.dumps(value, ensure_ascii=True)
    return raw if len(raw) <= 60 else raw[:57] + "..."


def text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"is {shown_value(value)}, not a string")
    return value


def matching(pattern: re.Pattern[str], what: str) -> Check:
    """A string of pattern's form (what: its name in a message, e.g. "a commit id")."""

    def accept(value: object) -> str:
        if not isinstance(value, str) or not pattern.match(value):
            raise ValueError(f"is {shown_value(value)}, not {what}")
        return value

    return accept


def one_of(*allowed: str) -> Check:
    def accept(value: object) -> str:
        if value not in allowed:
            raise ValueError(f"is {shown_value(value)}, not one of {', '.join(allowed)}")
        assert isinstance(value, str)
        return value

    return accept


def maybe(inner: Check) -> Check:
    """inner's value, or None (JSON null)."""
    return lambda value: None if value is None else inner(value)


def list_of(inner: Check) -> Check:
    def accept(value: object) -> list[object]:
        if not isinstance(value, list):
            raise ValueError(f"is {shown_value(value)}, not a list")
        out = []
        for item in value:
            try:
                out.append(inner(item))
            except ValueError as exc:
                raise ValueError(f"entry {exc}") from None
        return out

    return accept


def dict_of(key: Check, inner: Check) -> Check:
    def accept(value: object) -> dict[object, object]:
        if not isinstance(value, dict):
            raise ValueError(f"is {shown_value(value)}, not an object")
        out = {}
        for k, v in value.items():
            try:
                name = key(k)
            except ValueError as exc:
                raise ValueError(f"entry {exc}") from None
            try:
                out[name] = inner(v)
            except ValueError as exc:
                raise ValueError(f"entry {shown_value(k)} {exc}") from None
        return out

    return accept


def file_name(pattern: re.Pattern[str], folder: str) -> Check:
    """A plain file name of folder that the kit writes (pattern: its form): never a path, '..', an
    absolute or hidden name, whatever pattern would let through."""

    def accept(value: object) -> str:
        plain = (
            isinstance(value, str)
            and value not in ("", ".", "..")
            and not value.startswith(".")
            and not any(c in value for c in "/\\\0")
        )
        if not plain or not pattern.match(str(value)):
            raise ValueError(f"{shown_value(value)} is not a file of {folder} the kit writes")
        assert isinstance(value, str)
        return value

    return accept


commit = matching(COMMIT, "a full commit id")
digest = matching(DIGEST, "a sha256 hex digest")
