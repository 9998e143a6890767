"""Scope figures of the series for reviewers: files and +/- lines per patch and in
total, new files, the share of tests/config, and upstream's RFC threshold."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from scripts.diffparse import parse

RFC_THRESHOLD = 500  # upstream: changes over 500 lines want an RFC first
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json", ".ini", ".cfg")


@dataclass(frozen=True)
class Scope:
    name: str
    files: tuple[str, ...]
    new_files: tuple[str, ...]
    added: int
    removed: int
    test_config_lines: int  # added + removed in tests/ or config files

    @property
    def changed(self) -> int:
        return self.added + self.removed


def is_test_or_config(path: str) -> bool:
    return path.startswith("tests/") or "/tests/" in path or path.endswith(CONFIG_SUFFIXES)


def of_patch(name: str, patch_text: str) -> Scope:
    diffs = parse(patch_text)
    return Scope(
        name=name,
        files=tuple(d.path for d in diffs),
        new_files=tuple(d.path for d in diffs if d.new_file),
        added=sum(len(d.added) for d in diffs),
        removed=sum(d.removed for d in diffs),
        test_config_lines=sum(len(d.added) + d.removed for d in diffs if is_test_or_config(d.path)),
    )


def total(scopes: Sequence[Scope]) -> Scope:
    """The series as a whole: each file counted once."""
    files = dict.fromkeys(f for s in scopes for f in s.files)
    new = dict.fromkeys(f for s in scopes for f in s.new_files)
    return Scope(
        "total",
        tuple(files),
        tuple(new),
        sum(s.added for s in scopes),
        sum(s.removed for s in scopes),
        sum(s.test_config_lines for s in scopes),
    )


def share(part: int, whole: int) -> str:
    return f"{100 * part // whole}%" if whole else "-"


def rows(scopes: Sequence[Scope]) -> list[tuple[object, ...]]:
    return [
        (
            s.name,
            len(s.files),
            f"+{s.added}",
            f"-{s.removed}",
            len(s.new_files),
            share(s.test_config_lines, s.changed),
        )
        for s in [*scopes, total(scopes)]
    ]


HEADERS = ("patch", "files", "added", "removed", "new files", "tests/config")


def rfc_warning(whole: Scope) -> str | None:
    if whole.changed <= RFC_THRESHOLD:
        return None
    return (
        f"{whole.changed} changed lines is over upstream's {RFC_THRESHOLD}-line threshold: "
        "open an RFC issue first, or split the series"
    )
