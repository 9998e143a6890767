"""The checkout's record of itself (.git/kit-state.json, written aside and renamed), and what its .git
shows: a paused git operation, the branch, uncommitted paths."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import CheckoutError, CorruptState, shown
from scripts.checkout.foreign import refuse_foreign
from scripts.pin import Pin

STATUSES = ("applying", "conflict", "applied", "aborted")


@dataclass
class State:
    pin: str
    pin_digest: str
    pristine_commit: str
    series_digest: str
    patches: dict[str, str]
    head: (
        str | None
    )  # the commit at which the checkout equals patches/; None while it holds unexported work
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


def parse_state(text: str) -> State:
    """A State from kit-state.json's text; ValueError/TypeError/KeyError on anything else."""
    data = json.loads(text)
    names = {f.name for f in fields(State)}
    if not isinstance(data, dict) or set(data) - names:
        raise ValueError(
            f"unexpected keys {sorted(set(data) - names) if isinstance(data, dict) else data!r}"
        )
    state = State(**data)
    state.head = state.head or None  # an older kit wrote "" for "holds unexported work"
    if (
        state.status not in STATUSES
        or not isinstance(state.patches, dict)
        or not isinstance(state.head, str | None)
    ):
        raise ValueError(f"status {state.status!r}")
    return state


def read_state(checkout: Path) -> State | None:
    """The checkout's record of itself, None where there is no checkout yet.

    Every command reads the checkout through here, so each applies the same rule to what is
    at its path: something the kit did not make (a file, a link, a foreign folder) is refused.
    """
    refuse_foreign(checkout)
    f = state_file(checkout)
    if not f.is_file():
        return None
    try:
        return parse_state(f.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise CorruptState(
            f"{shown(checkout)}/.git/kit-state.json is unreadable ({type(exc).__name__}: {exc})",
            "rebuild the checkout: nox -s apply -- --force (edits not in patches/ are discarded)",
        ) from None


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
