"""What a checkout is, for each purpose: one Inspection, read lazily, and one table of refusals
(GUARDS).

Each row holds its condition as a method of Inspection (typed, never looked up by name), the error
it raises and its what and fix; a purpose's guard refuses with the first row whose condition holds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts import gitcmd, gitproc
from scripts.checkout import (
    BRANCH,
    PRISTINE_TAG,
    CheckoutError,
    IncompleteCheckout,
    LocalEdits,
    StaleCheckout,
    shown,
)
from scripts.checkout.state import (
    REFRESHING,
    State,
    branch,
    dirty_paths,
    in_progress,
    pin_digest,
    read_state,
)
from scripts.digests import sha256_text
from scripts.gitcmd import head, is_ancestor
from scripts.pin import Pin
from scripts.series import Patch, series_digest

Facts = dict[str, str]
# a method of Inspection: its facts when it holds
Condition = Callable[["Inspection"], Facts | None]


@dataclass
class Inspection:
    """One checkout as the guards read it: each fact is read once, when a guard first asks for it (a
    paused or half-made checkout is refused before git is asked anything about its tree)."""

    checkout: Path
    state: State | None
    built_from: tuple[Pin, list[Patch]] | None = (
        None  # the inputs it must have been built from, if any
    )

    @functools.cached_property
    def where(self) -> str:
        return shown(self.checkout)

    def holds(self, condition: Condition) -> Facts | None:
        """The facts of `condition` (a row's: one of the methods below) when it holds, for the
        messages; None when it does not. Every guard reads its conditions through here (a test gives
        them instead)."""
        return condition(self)

    def configured(self) -> Facts | None:
        keys = gitcmd.foreign_config(self.checkout)
        more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
        return {"key": keys[0], "more": more} if keys else None

    def info_files(self) -> Facts | None:
        """A file of .git/info/ that git reads besides the commits (attributes, grafts), holding
        anything."""
        found = gitcmd.info_settings(self.checkout)
        return {"file": found[0]} if found else None

    def git_busy(self) -> Facts | None:
        other = gitproc.kit_own_locks(self.checkout)[2]
        return {"lock": os.path.relpath(other[0], self.checkout.parent.parent)} if other else None

    def nested_repo(self) -> Facts | None:
        """A git repository of the user's in the checkout's untracked folders: git clean never removes
        one (nor should the kit), so no rebuild could leave the tree as apply makes it."""
        if not (self.checkout / ".git").is_dir():
            return None
        found = next((p for p in untracked_repos(self.checkout, dirty_paths(self.checkout))), None)
        return {"file": found} if found else None

    def refresh_killed(self) -> Facts | None:
        return {} if (self.checkout / ".git" / REFRESHING).is_file() else None

    def pristine_moved(self) -> Facts | None:
        if self.state is None:
            return None
        at = gitcmd.verify(self.checkout, f"refs/tags/{PRISTINE_TAG}^{{commit}}")
        return None if at == self.state.pristine_commit else {"commit": self.state.pristine_commit}

    def no_repository(self) -> Facts | None:
        return None if (self.checkout / ".git").is_dir() else {}

    def absent(self) -> Facts | None:
        return {} if self.state is None else None

    def _status(self, status: str) -> Facts | None:
        held = self.state is not None and self.state.status == status
        return {"patch": str(self.state.failed_patch)} if held and self.state is not None else None

    def applying(self) -> Facts | None:
        return self._status("applying")

    def conflict(self) -> Facts | None:
        return self._status("conflict")

    def aborted(self) -> Facts | None:
        return self._status("aborted")

    def paused(self) -> Facts | None:
        op = in_progress(self.checkout)
        return {"op": op} if op else None

    def elsewhere(self) -> Facts | None:
        current = branch(self.checkout)
        return (
            None
            if current == BRANCH
            else {"on": f"branch {current}" if current else "a detached HEAD"}
        )

    def not_descended(self) -> Facts | None:
        return None if is_ancestor(self.checkout, PRISTINE_TAG, "HEAD") else {}

    def dirty(self) -> Facts | None:
        dirty = dirty_paths(self.checkout)
        return {"dirty": ", ".join(dirty[:3])} if dirty else None

    def unexported(self) -> Facts | None:
        state = self.state
        return (
            {}
            if state is not None and state.status == "applied" and head(self.checkout) != state.head
            else None
        )

    def other_pin(self) -> Facts | None:
        if self.built_from is None or self.state is None:
            return None
        state, pin = self.state, self.built_from[0]
        if state.pin == pin.label and state.pin_digest == pin_digest(pin):
            return None
        built, now = state.pin, pin.label
        if built == now:  # same release, other bytes: the digests tell them apart
            built, now = f"{built} {state.pin_digest[:12]}", f"{now} {pin_digest(pin)[:12]}"
        return {"built": built, "now": now}

    def other_pin_no_work(self) -> Facts | None:
        """other_pin, where the checkout holds no commit patches/ lacks (as rebase --move leaves it)."""
        return self.other_pin() if self.unexported() is None else None

    def other_patches_no_work(self) -> Facts | None:
        return self.other_patches() if self.unexported() is None else None

    def other_patches(self) -> Facts | None:
        if self.built_from is None or self.state is None:
            return None
        state, patches = self.state, self.built_from[1]
        if state.series_digest == series_digest(patches):
            return None
        changed = sorted(
            set(state.patches.items()) ^ {(p.name, sha256_text(p.text)) for p in patches}
        )
        return {"differs": changed[0][0] if changed else "order"}


def untracked_repos(checkout: Path, paths: list[str]) -> list[str]:
    """The git repositories (a .git folder or file) in the untracked folders git status shows, as
    paths relative to the checkout."""
    found = []
    for path in paths:
        folder = checkout / path.strip('"').rstrip("/")
        if not path.endswith("/") or folder.is_symlink() or not folder.is_dir():
            continue
        for root, dirs, files in os.walk(folder):
            if ".git" in dirs or ".git" in files:
                found.append(os.path.relpath(root, checkout))
                break
    return found


# (condition, error, what, fix): a purpose's guard refuses with the first row whose condition holds;
# an error of None accepts the checkout there. `{where}` is the checkout; the other fields are the
# condition's facts.
Row = tuple[Condition, type[CheckoutError] | None, str, str]
SWITCH_BACK = "switch back (cd {where} && git checkout " + BRANCH + ")"
DISCARD = "or rerun apply with --force to discard them"
# work that exists only in the checkout, or a git operation the user started
LOCAL_WORK: tuple[Row, ...] = (
    (
        Inspection.paused,
        LocalEdits,
        "{where} is in the middle of a {op}",
        "finish it ({op} --continue) or abort it ({op} --abort) first",
    ),
    (
        Inspection.elsewhere,
        LocalEdits,
        "{where} is on {on}, not on " + BRANCH,
        SWITCH_BACK + ", or rerun apply with --force to discard it",
    ),
    (
        Inspection.dirty,
        LocalEdits,
        "{where} has uncommitted edits ({dirty})",
        "commit them and run nox -s refresh to keep them, " + DISCARD,
    ),
    (
        Inspection.unexported,
        LocalEdits,
        "{where} has commits that are not exported to patches/",
        "run nox -s refresh to keep them, " + DISCARD,
    ),
)
NO_CHECKOUT: Row = (Inspection.absent, StaleCheckout, "no checkout at {where}", "run: nox -s apply")
PROVENANCE_FIX = (
    "refresh would export it over other inputs: put patches/ back as apply saw it, new files "
    "included "
    "(git stash push --include-untracked -- patches), nox -s refresh, git stash pop; or nox -s "
    "apply -- --force "
    "to discard the checkout's work"
)
NOTHING_TO_EXPORT = (
    "it holds nothing patches/ lacks, so there is nothing to export: run nox -s apply"
)


def provenance(fix: str) -> tuple[Row, ...]:
    """The checkout was built from this pin and these patch files (order, names, bytes)."""
    return (
        (
            Inspection.other_pin,
            StaleCheckout,
            "{where} was built from {built}, the pin is now {now}",
            fix,
        ),
        (
            Inspection.other_patches,
            StaleCheckout,
            "{where} does not match patches/ (differs in {differs})",
            fix,
        ),
    )


FINISH = "finish with nox -s apply -- --continue (or -- --abort); refresh writes nothing until then"
# What no command works through, --force included: the user's own git settings and a git of theirs
# at work.
FOREIGN: tuple[Row, ...] = (
    (
        Inspection.configured,
        LocalEdits,
        "{where}/.git/config sets {key}{more}, which would change what the kit's git writes (patch "
        "bytes, commit ids)",
        "remove it: git -C {where} config --unset-all {key} (settings of yours "
        "belong in your global git config, which the kit's git never reads)",
    ),
    (
        Inspection.info_files,
        LocalEdits,
        "{where}/.git/info/{file} holds settings: git reads it besides the commits, and it would "
        "change what the "
        "kit's git writes and what lint finds",
        "move attributes into the tree's .gitattributes (commit it into the patch it belongs to), "
        "then remove the file: rm {where}/.git/info/{file}",
    ),
    (
        Inspection.nested_repo,
        LocalEdits,
        "{where}/{file} is a git repository of yours inside the checkout (the kit did not make it, "
        "and never deletes it)",
        "move it out of {where}, or keep it there ignored (echo '{file}/' >> "
        "{where}/.git/info/exclude: every command then keeps it), then run again",
    ),
    (
        Inspection.git_busy,
        LocalEdits,
        "another git is working in {where}: {lock} exists (the kit did not make it)",
        "wait for that git to finish; if none runs, remove the stale lock: rm {lock}",
    ),
)
PRISTINE_MOVED: Row = (
    Inspection.pristine_moved,
    StaleCheckout,
    "{where}: the " + PRISTINE_TAG + " tag is gone or moved (apply made it at {commit:.12})",
    "put it back: git -C {where} tag -f " + PRISTINE_TAG + " {commit} (or nox -s apply -- --force)",
)
REFRESH_KILLED: Row = (
    Inspection.refresh_killed,
    StaleCheckout,
    "{where}: a refresh was killed part way",
    "run nox -s refresh (it undoes its own steps first) or nox -s apply",
)
GUARDS: dict[str, tuple[Row, ...]] = {
    "foreign": FOREIGN,
    # apply (without --force) replaces the checkout: never over work that exists only there
    "replace": (
        (Inspection.no_repository, None, "", ""),
        PRISTINE_MOVED,
        # the kit's own unfinished apply: a half-made tree (paused am, dirty files)
        (Inspection.applying, None, "", ""),
        (
            Inspection.conflict,
            LocalEdits,
            "{where} stopped at patch {patch}",
            "resolve it, then nox -s apply -- --continue; or nox -s apply -- --abort to go back",
        ),
        *LOCAL_WORK,
    ),
    # lint, test, pr, e2e run on the checkout: exactly the pin + patches/, as apply made it
    "use": (
        NO_CHECKOUT,
        *FOREIGN,
        REFRESH_KILLED,
        (
            Inspection.applying,
            StaleCheckout,
            "{where}: an apply was interrupted or failed before it finished",
            "run: nox -s apply (it starts again from pristine)",
        ),
        (
            Inspection.aborted,
            StaleCheckout,
            "{where} was left at pristine by apply --abort",
            "run: nox -s apply",
        ),
        (
            Inspection.conflict,
            StaleCheckout,
            "{where} stopped at patch {patch}",
            "resolve it and run nox -s apply -- --continue, or nox -s apply -- --abort",
        ),
        *provenance("run: nox -s apply"),
        PRISTINE_MOVED,
        *LOCAL_WORK,
    ),
    # refresh exports the checkout's commits: the whole series, committed, from the inputs apply saw
    "export": (
        NO_CHECKOUT,
        *FOREIGN,
        (
            Inspection.applying,
            IncompleteCheckout,
            "{where}: an apply was interrupted, the checkout does not hold the whole series",
            "run nox -s apply first (patches/ is untouched)",
        ),
        (
            Inspection.conflict,
            IncompleteCheckout,
            "{where} stopped at {patch}: it does not hold the whole series",
            FINISH,
        ),
        (
            Inspection.aborted,
            IncompleteCheckout,
            "{where} was aborted: it does not hold the whole series",
            FINISH,
        ),
        LOCAL_WORK[0],
        PRISTINE_MOVED,
        (Inspection.elsewhere, LocalEdits, "{where} is on {on}, not on " + BRANCH, SWITCH_BACK),
        (
            Inspection.not_descended,
            LocalEdits,
            "{where}: HEAD does not descend from the " + PRISTINE_TAG + " tag",
            "run nox -s apply -- --force",
        ),
        (
            Inspection.dirty,
            LocalEdits,
            "{where} has uncommitted edits",
            "commit them (git commit or git commit --fixup) first",
        ),
        (
            Inspection.other_pin_no_work,
            StaleCheckout,
            "{where} was built from {built}, the pin is now {now}",
            NOTHING_TO_EXPORT,
        ),
        (
            Inspection.other_patches_no_work,
            StaleCheckout,
            "{where} does not match patches/ (differs in {differs})",
            NOTHING_TO_EXPORT,
        ),
        *provenance(PROVENANCE_FIX),
    ),
}


def guard(purpose: str, seen: Inspection) -> None:
    """Refuse the checkout for `purpose` (a key of GUARDS) with the first row whose condition holds."""
    for condition, error, what, fix in GUARDS[purpose]:
        facts = seen.holds(condition)
        if facts is None:
            continue
        if error is None:
            return
        fields_ = {"where": seen.where, **facts}
        raise error(what.format(**fields_), fix.format(**fields_))


def verify_current(checkout: Path, pin: Pin, patches: list[Patch]) -> State:
    """The checkout's state if it is exactly pin + patches/, else a StaleCheckout/LocalEdits error."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    guard("use", Inspection(checkout, state, (pin, patches)))
    assert state is not None  # "use" refuses a missing state
    return state
