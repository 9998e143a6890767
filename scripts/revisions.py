"""Revisions of the series sent upstream (v1, v2, ...): where each one's patches can be found again.

patches/revisions.toml (committed) maps each revision to its series digest, the
pin it was made on, and the kit commit whose patches/ held it ("" when patches/
was not committed at the time). To range-diff against revision N, its kit
patches are found by digest: in the snapshot `nox -s pr` keeps in
.work/pr/vN/series/, else in the kit's git history (the recorded commit first,
then every commit touching patches/). The PR's range-diff (scripts/pr/rangediff.py)
and the e2e A/B (scripts/e2e/ab.py) both start from here.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time
from pathlib import Path

from scripts import gitcmd, handfile
from scripts.digests import sha256_text
from scripts.errors import KitError
from scripts.series import Patch, SeriesError, load_series, series_digest

HEADER = (
    "# Revisions of the series prepared for upstream by `nox -s pr` (v1, v2, ...).\n"
    "# Written by the kit; commit it with patches/. kit_commit is empty when patches/\n"
    "# was not committed when the revision was prepared (then found by digest).\n"
)


class RevisionsError(KitError):
    """patches/revisions.toml cannot be read."""


@dataclass(frozen=True)
class Revision:
    number: int
    series_digest: str
    pin: str
    kit_commit: str
    prepared: str
    cover_digest: str = (
        ""  # sha256 of patches/cover.md ("" for revisions made before the cover existed)
    )
    stack_digest: str = ""  # sha256 of patches/stack.toml ("" for revisions made before the stack)

    @property
    def label(self) -> str:
        return f"v{self.number}"


DIGEST = re.compile(r"^[0-9a-f]{64}$")


LABEL = re.compile(r"^v[1-9][0-9]*$")
REQUIRED = ("series_digest", "pin", "prepared")
WHERE = "patches/revisions.toml"
RESTORE = f"or restore it: git checkout -- {WHERE}"


def parse(text: str) -> list[Revision]:
    """The revisions a hand-edited file records; a user's own keys and comments are allowed (and kept
    by append()), anything the kit would misread is refused naming the entry."""
    data = handfile.load_toml(text, WHERE, RevisionsError)
    return sorted(
        (revision(key, value, text) for key, value in data.items()), key=lambda r: r.number
    )


def revision(key: str, table: object, text: str = "") -> Revision:
    """One [vN] table as a Revision, or the one-line refusal of what is wrong in it."""
    if not LABEL.match(key) or not isinstance(table, dict):
        raise RevisionsError(
            f"{WHERE}: {key!r} is not a revision table [vN] (v1, v2, ... without leading zeros)",
            "rename or remove it (notes of yours go in # comments or as keys inside a [vN] "
            f"table), {RESTORE}",
        )
    missing = [k for k in REQUIRED if k not in table]
    if missing:
        raise RevisionsError(
            f"{WHERE}: [{key}] has no {missing[0]} = line", f"put it back, {RESTORE}"
        )
    fields = {
        k: table.get(k, "") for k in (*REQUIRED, "kit_commit", "cover_digest", "stack_digest")
    }
    for name, value in fields.items():
        if not isinstance(value, str):
            shown = handfile.raw_value(text, key, name) or (
                value.isoformat() if isinstance(value, (datetime, date, time)) else value
            )
            raise RevisionsError(
                f"{WHERE}: [{key}] {name} = {shown} is a TOML {type(value).__name__}, not a string",
                f'quote it: {name} = "{shown}"',
            )
    if not DIGEST.match(fields["series_digest"]) or any(
        fields[k] and not DIGEST.match(fields[k]) for k in ("cover_digest", "stack_digest")
    ):
        raise RevisionsError(
            f"{WHERE}: [{key}] has a digest that is not 64 hex digits", f"put it back, {RESTORE}"
        )
    try:
        datetime.fromisoformat(fields["prepared"])
    except ValueError:
        raise RevisionsError(
            f"{WHERE}: [{key}] prepared = {fields['prepared']!r} is not an ISO 8601 date and time",
            f'write it as "2026-01-31T12:00:00+00:00" (the commits of {key} are dated by it), '
            f"{RESTORE}",
        ) from None
    return Revision(
        int(key[1:]),
        fields["series_digest"],
        fields["pin"],
        fields["kit_commit"],
        fields["prepared"],
        fields["cover_digest"],
        fields["stack_digest"],
    )


def block(r: Revision) -> str:
    cover = f'cover_digest = "{r.cover_digest}"\n' if r.cover_digest else ""
    cover += f'stack_digest = "{r.stack_digest}"\n' if r.stack_digest else ""
    return (
        f'[{r.label}]\nseries_digest = "{r.series_digest}"\npin = "{r.pin}"\nkit_commit = '
        f'"{r.kit_commit}"\n'
        f'prepared = "{r.prepared}"\n{cover}'
    )


def appended(text: str, rev: Revision) -> str:
    """The file's text with rev's table added at its end: every byte the user wrote stays as it was."""
    if not text.strip():
        return HEADER + "\n" + block(rev)
    newline = "\r\n" if "\r\n" in text else "\n"
    tail = text if text.endswith("\n") else text + newline
    new = tail + newline + block(rev).replace("\n", newline)
    if [r.number for r in parse(new)][-1:] != [rev.number]:
        raise RevisionsError(
            f"{WHERE}: recording {rev.label} would not read back", f"check the file, {RESTORE}"
        )
    return new


def load(path: Path) -> list[Revision]:
    return parse(handfile.read(path, WHERE)) if path.is_file() else []


def record(path: Path, rev: Revision) -> None:
    """Append rev to the file (written aside, then renamed into place: never half-written)."""
    text = handfile.read(path, WHERE) if path.is_file() else ""
    tmp = path.with_name(f".{path.name}.kit-tmp")
    tmp.write_bytes(appended(text, rev).encode("utf-8"))
    os.replace(tmp, path)


def current(
    revs: Sequence[Revision],
    digest: str,
    pin: str,
    kit_commit: str,
    now: str,
    cover_digest: str = "",
    stack_digest: str = "",
) -> tuple[Revision, bool]:
    """(the revision for this series, cover and stack, whether it is new): new only when one of them
    changed since the last."""
    last = revs[-1] if revs else None
    if last and (last.series_digest, last.cover_digest, last.stack_digest) == (
        digest,
        cover_digest,
        stack_digest,
    ):
        return last, False
    number = (last.number if last else 0) + 1
    return Revision(number, digest, pin, kit_commit, now, cover_digest, stack_digest), True


# ---- finding an older revision's patches ----------------------------------------


def is_own_repo(root: Path) -> bool:
    top = gitcmd.toplevel(root)
    return top is not None and top.resolve() == root.resolve()


def patches_at(root: Path, commit: str, dest: Path) -> list[Patch] | None:
    """The series as patches/ held it at a kit commit, written under dest; None if it was not a valid
    series."""
    listing = gitcmd.names_in(root, f"{commit}:patches")
    if listing is None:
        return None
    dest.mkdir(parents=True)
    for name in listing:
        if name == "series" or name.endswith(".patch"):
            (dest / name).write_bytes(gitcmd.blob(root, commit, f"patches/{name}"))
    try:
        return load_series(dest)
    except SeriesError:
        return None


def head_commit_holding(root: Path, digest: str) -> str:
    """HEAD of the kit repo if its committed patches/ are this series, else ""."""
    commit = gitcmd.verify(root, "HEAD") if is_own_repo(root) else None
    if commit is None:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        found = patches_at(root, commit, Path(tmp) / "p")
        return commit if found is not None and series_digest(found) == digest else ""


def find_series(
    rev: Revision, snapshot: Path, root: Path, scratch: Path
) -> tuple[list[Patch], str] | None:
    """(the revision's kit patches, where they were found), or None."""
    if (snapshot / "series").is_file():
        found = load_series(snapshot)
        if series_digest(found) == rev.series_digest:
            return found, f"snapshot .work/pr/{rev.label}/series"
    if not is_own_repo(root):
        return None
    history = gitcmd.commits_touching(root, "patches")
    for i, commit in enumerate(dict.fromkeys([c for c in [rev.kit_commit, *history] if c])):
        found = patches_at(root, commit, scratch / f"c{i}")
        if found is not None and series_digest(found) == rev.series_digest:
            return found, f"kit commit {commit[:12]}"
    return None


def find_cover(rev: Revision, snapshot: Path, root: Path) -> str | None:
    """The revision's cover text, by digest: from the snapshot, else from the kit's git history."""
    if not rev.cover_digest:
        return None
    snap = snapshot / "cover.md"
    if snap.is_file() and sha256_text(snap.read_text(encoding="utf-8")) == rev.cover_digest:
        return snap.read_text(encoding="utf-8")
    if not is_own_repo(root):
        return None
    for commit in gitcmd.commits_touching(root, "patches/cover.md"):
        text = gitcmd.show_file(root, commit, "patches/cover.md")
        if text is not None and sha256_text(text) == rev.cover_digest:
            return text
    return None
