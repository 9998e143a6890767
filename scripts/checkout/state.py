"""The checkout's record of itself (.git/kit-state.json, written aside and renamed), and what its .git
shows: a paused git operation, the branch, uncommitted paths."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scripts import gitcmd, records
from scripts.checkout import CheckoutError, CorruptState, shown
from scripts.checkout.foreign import refuse_foreign
from scripts.pin import Pin
from scripts.series import ENTRY

STATUSES = ("applying", "conflict", "applied", "aborted")


@dataclass
class State:
    pin: str
    pin_digest: str
    pristine_commit: str
    series_digest: str
    patches: dict[str, str]
    # the commit at which the checkout equals patches/; None while it holds unexported work
    head: str | None
    status: str  # applying | conflict | applied | aborted
    failed_patch: str | None = None
    offsets: dict[str, list[str]] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)  # patch names committed so far, in order


def pin_digest(pin: Pin) -> str:
    """What identifies the pristine content: the wheel digest or the git commit."""
    return pin.wheel_sha256 if pin.source == "wheel" else pin.git_commit


# in .git/ while refresh runs: the commit it started at, then what it will record
REFRESHING = "kit-refresh-start"
IN_PROGRESS = {  # .git entry -> the git operation it means
    "rebase-apply": "git am",
    "rebase-merge": "git rebase",
    "MERGE_HEAD": "git merge",
    "CHERRY_PICK_HEAD": "git cherry-pick",
    "REVERT_HEAD": "git revert",
    "BISECT_LOG": "git bisect",
}


def state_file(checkout: Path) -> Path:
    return checkout / ".git" / "kit-state.json"


PATCH_NAME = records.file_name(ENTRY, "patches/")
STATE_SCHEMA: records.Schema = {
    "pin": records.text,
    # the wheel's sha256 or the git commit (pin_digest)
    "pin_digest": lambda v: records.commit(v) if len(str(v)) == 40 else records.digest(v),
    # "" before the pristine commit is made (a build cut short)
    "pristine_commit": lambda v: "" if v == "" else records.commit(v),
    "series_digest": lambda v: "" if v == "" else records.digest(v),
    "patches": records.dict_of(PATCH_NAME, records.digest),
    # an older kit wrote "" for "holds unexported work"
    "head": lambda v: None if v in ("", None) else records.commit(v),
    "status": records.one_of(*STATUSES),
    "failed_patch": records.maybe(PATCH_NAME),
    "offsets": records.dict_of(PATCH_NAME, records.list_of(records.text)),
    "applied": records.list_of(PATCH_NAME),
}
OPTIONAL = ("failed_patch", "offsets", "applied")


def parse_state(data: object, shown_as: str, fix: str) -> State:
    """A State from kit-state.json's JSON value, every field checked (CorruptState naming the first
    wrong one): a commit it names reaches git, a patch name the series."""
    return State(
        **records.check(data, shown_as, STATE_SCHEMA, fix, optional=OPTIONAL, error=CorruptState)
    )


REBUILD = "rebuild the checkout: nox -s apply -- --force (edits not in patches/ are discarded)"


def load_state(path: Path, shown_as: str, fix: str = REBUILD) -> State | None:
    """The State in a kit-state.json file (the checkout's, or the copy apply keeps to go back to)."""
    data = records.load(path, shown_as, STATE_SCHEMA, fix, optional=OPTIONAL, error=CorruptState)
    return None if data is None else State(**data)


def read_state(checkout: Path) -> State | None:
    """The checkout's record of itself, None where there is no checkout yet.

    Every command reads the checkout through here, so each applies the same rule to what is
    at its path: something the kit did not make (a file, a link, a foreign folder) is refused.
    """
    refuse_foreign(checkout)
    return load_state(state_file(checkout), f"{shown(checkout)}/.git/kit-state.json")


def write_state(checkout: Path, state: State) -> None:
    """Written aside and renamed: an interrupted write never leaves a half file."""
    target = state_file(checkout)
    tmp = target.with_name(target.name + ".tmp")
    try:
        tmp.write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    # write(2) errors name no file: name it (the old state stays, and stays true)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CheckoutError(
            f"cannot write {shown(checkout)}/.git/{target.name} ({exc.strerror or exc})",
            f"free disk space on {checkout.parent.name}/ (df -h {checkout.parent.name}), then run "
            "the command again",
        ) from None
    os.replace(tmp, target)


def in_progress(checkout: Path) -> str | None:
    """The git operation paused in the checkout (am, rebase, merge, ...), if any."""
    return next(
        (op for entry, op in IN_PROGRESS.items() if (checkout / ".git" / entry).exists()), None
    )


def branch(checkout: Path) -> str | None:
    """The checked-out branch, None on a detached HEAD."""
    return gitcmd.current_branch(checkout)


def dirty_paths(checkout: Path) -> list[str]:
    return [line[3:] for line in gitcmd.status_porcelain(checkout)]
