"""apply, --continue, --abort: pristine, then `git am` per patch, each recorded in the state; a new
pin's checkout built beside the old one and swapped in; the way back (refs/kit/last-good); what a
killed kit left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts import diffparse, gitcmd, gitproc, records, signals
from scripts.checkout import (
    BRANCH,
    PRISTINE_TAG,
    CheckoutError,
    CorruptPatch,
    CorruptState,
    IncompleteCheckout,
    LocalEdits,
    PatchConflict,
    Progress,
    StaleCheckout,
    shown,
)
from scripts.checkout.foreign import (
    KIT_MARK,
    carry_git_files,
    move_over,
    refuse_foreign,
    refuse_unmovable,
    remove_kit_made,
    users_ignored,
    users_refs,
)
from scripts.checkout.guards import Inspection, guard
from scripts.checkout.pristine import build_pristine, retag_pristine
from scripts.checkout.state import (
    REFRESHING,
    State,
    dirty_paths,
    in_progress,
    load_state,
    pin_digest,
    read_state,
    state_file,
    write_state,
)
from scripts.digests import sha256_text
from scripts.errors import KitError
from scripts.gitcmd import GitFailed, am, apply_check, exists, git_reason, head, last_line, rev_list
from scripts.pin import Pin
from scripts.report import step
from scripts.series import ENTRY, Patch, series_digest, trailer

OFFSET = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", re.M)
FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
# "error: x.py: already exists in ..."
FILE_ERROR = re.compile(r"^error: (?!patch failed: )([^:\n]+): (.+)$", re.M)
CORRUPT = re.compile(r"corrupt patch at line (\d+)")


@dataclass(frozen=True)
class PatchResult:
    name: str
    outcome: str  # clean | offset | 3-way | conflict | resolved | skipped
    detail: str = ""


def offsets_in(check_output: str) -> list[str]:
    return [f"hunk #{m[0]} at line {m[1]} (offset {m[2]})" for m in OFFSET.findall(check_output)]


def failed_hunk(check_output: str, patch_text: str) -> tuple[str, str] | None:
    """(file, hunk description or git's reason) of the first failure `git apply --check` reports."""
    m = FAILED_AT.search(check_output)
    if not m:
        other = FILE_ERROR.search(check_output)
        return (other[1], f"({other[2]})") if other else None
    path, line = m[1], int(m[2])
    starts = [
        h.old_start for f in diffparse.parse(patch_text) if f.apply_name == path for h in f.hunks
    ]
    number = next((i for i, start in enumerate(starts, 1) if start == line), None)
    return path, f"hunk #{number} (@@ -{line})" if number else f"hunk at line {line}"


def conflict_detail(check_output: str, am_stderr: str, am_stdout: str, patch_text: str) -> str:
    """Where a patch failed (file and hunk, or git's reason for the file) and, after a 3-way merge,
    why."""
    where = failed_hunk(check_output, patch_text)
    reason = git_reason(am_stderr, am_stdout)
    if where is None:
        return f"git: {reason}"
    merged = FAILED_AT.search(check_output) and not reason.startswith("error: patch failed")
    return f"{where[0]} {where[1]}" + (f"; git: {reason}" if merged else "")


STATE_BACKUP = "kit-state.last-good.json"
LAST_GOOD_REF = "refs/kit/last-good"
# the checkout this one replaced: blobs for `git am -3` across a pin change
PREVIOUS_REF = "refs/kit/previous-pin"


def abort_paused(checkout: Path) -> None:
    """Abort whatever git operation is paused in the checkout (with the kit's identity, see gitcmd)."""
    op = in_progress(checkout)
    if op == "git am" and gitcmd.abort(checkout, "am").returncode != 0:
        # a `git am` killed part way (Ctrl-C reaches its whole process group) can leave a folder git
        # no longer reads
        shutil.rmtree(checkout / ".git" / "rebase-apply", ignore_errors=True)
    elif op in ("git rebase", "git merge", "git cherry-pick", "git revert", "git bisect"):
        gitcmd.must(gitcmd.abort(checkout, op.split()[1]))


def reset_to(checkout: Path, rev: str) -> None:
    abort_paused(checkout)
    gitcmd.start_branch(checkout, BRANCH, rev, force=True)
    gitcmd.clean(checkout)


def is_good(checkout: Path, state: State | None) -> bool:
    """A checkout that equals its patches/ (applied and exported): worth going back to."""
    return (
        state is not None
        and state.status == "applied"
        and state.head is not None
        and head(checkout) == state.head
    )


def keep_last_good(repo: Path, old: Path, state: State | None, rev: str) -> None:
    """The one way back for `apply --abort`: in repo (the checkout apply works on), LAST_GOOD_REF at
    rev, the head of the checkout `old` as it was before this apply, and its state beside it; only
    when that was complete."""
    if is_good(old, state):
        drop_ref_lock(repo, LAST_GOOD_REF)
        gitcmd.update_ref(repo, LAST_GOOD_REF, rev)
        shutil.copyfile(state_file(old), repo / ".git" / STATE_BACKUP)


def drop_ref_lock(repo: Path, ref: str) -> None:
    """The lock file of one of the kit's own refs that a signal left (Ctrl-C reaches the git the kit
    runs): no one else writes refs/kit/, and the kit holds the checkout's lock, so it is stale."""
    (repo / ".git" / f"{ref}.lock").unlink(missing_ok=True)


def prepare_checkout(
    pin: Pin,
    checkout: Path,
    downloads: Path,
    state: State | None,
    new: State,
    progress: Progress,
    force: bool,
) -> None:
    """Reset a matching checkout to pristine, or build a new one beside it and swap it in.

    The checkout says "applying" (new, with its pristine commit) before anything in it changes,
    so a build that fails or is cut short anywhere is never taken for a complete one.
    """
    refuse_foreign(checkout)
    # else rebuilt, as for a new pin
    same_pin = (
        state is not None
        and state.pin_digest == pin_digest(pin)
        and state.pin == pin.label
        and exists(checkout, f"{state.pristine_commit}^{{commit}}")
    )
    if same_pin and state is not None:
        if force:
            retag_pristine(checkout, state)
        keep_last_good(checkout, checkout, state, "HEAD")
        new.pristine_commit = state.pristine_commit
        write_state(checkout, new)
        reset_to(checkout, PRISTINE_TAG)
        progress(f"reusing pristine {pin.label} at {state.pristine_commit[:12]}")
        return
    staging = staging_of(checkout)
    remove_kit_made(staging)
    old_repo = (checkout / ".git").is_dir() and not checkout.is_symlink()
    if old_repo:
        refuse_unmovable(checkout)
    try:
        new.pristine_commit = build_pristine(pin, staging, downloads, progress)
        if old_repo:
            gitcmd.fetch_refs(staging, checkout.resolve(), users_refs(checkout))
        if borrow_objects(staging, checkout):
            keep_last_good(staging, checkout, state, PREVIOUS_REF)
        write_state(staging, new)
        kept = users_ignored(checkout, staging) if old_repo else []
        if old_repo:  # what ignores them goes with them, and the user's own attributes and hooks
            carry_git_files(checkout, staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    # the user's ignored files move over, the old checkout goes: both, or neither
    with signals.held():
        try:
            move_over(checkout, staging, kept)
        except BaseException:
            # every file moved went back: the new checkout holds nothing of the user's, and goes
            shutil.rmtree(staging, ignore_errors=True)
            raise
        if checkout.exists():
            remove_kit_made(checkout)
        staging.rename(checkout)
    progress(
        f"pristine {pin.label} committed as {new.pristine_commit[:12]}, tagged {PRISTINE_TAG}"
        + (f"; kept {len(kept)} ignored file(s)/folder(s) of yours" if kept else "")
    )


def staging_of(checkout: Path) -> Path:
    """Where a new pin's checkout is built before it is swapped in."""
    return checkout.with_name(f".{checkout.name}.new")


def finish_pin_swap(checkout: Path, progress: Progress) -> None:
    """Roll forward a pin change a kill -9 cut short once its new checkout was whole (its state
    written, before any of the user's files moved into it): the rest of the user's ignored files
    move over, the old checkout goes, the new one takes its place. Never a removal of the new one,
    which may already hold files of the user's."""
    staging = staging_of(checkout)
    if staging.is_symlink() or not (staging / ".git" / KIT_MARK).is_file():
        return
    if not state_file(staging).is_file():
        return  # cut short while it was built: nothing of the user's is in it, the next build replaces it
    refuse_foreign(checkout)
    kept = users_ignored(checkout, staging) if (checkout / ".git").is_dir() else []
    with signals.held():
        try:
            move_over(checkout, staging, kept)
        except CheckoutError as exc:
            raise CheckoutError(
                exc.what, exc.fix.replace("nothing was changed", "the pin change waits")
            ) from None
        if checkout.exists():
            remove_kit_made(checkout)
        staging.rename(checkout)
    progress(
        f"finished the pin change a stopped apply had begun ({shown(checkout)} is the new pin's, "
        f"{len(kept)} more ignored file(s)/folder(s) of yours moved into it)"
    )


def heal_killed(checkout: Path, state: State | None, series_now: str, progress: Progress) -> None:
    """Undo what a kit process killed outright (kill -9 of its process group) left in the checkout: its
    gits' lock files (never another git's: see gitproc.kit_own_locks), and a refresh's paused rebase
    and moved HEAD, or, when that refresh had swapped its files into patches/ (series_now is their
    digest), its record. Called by the commands that write the checkout, under its lock, before
    anything else reads it."""
    own, markers, _ = gitproc.kit_own_locks(checkout)
    for path in [*own, *markers]:
        path.unlink(missing_ok=True)
    marker = checkout / ".git" / REFRESHING
    plan = read_refresh_marker(checkout)
    if plan is None:
        return
    if state is not None and plan.get("series_digest") == series_now != state.series_digest:
        state.series_digest, state.patches = plan["series_digest"], plan["patches"]
        finish(checkout, state, exported_head=plan["head"])
        progress("recorded a refresh that was killed after it wrote patches/")
    elif (
        state is not None
        and head(checkout) != state.head
        and exists(checkout, f"{plan['start']}^{{commit}}")
    ):
        undo_to(checkout, plan["start"])
        progress(
            f"undid a refresh that was killed part way (HEAD back at {plan['start'][:12]}, "
            "patches/ unchanged)"
        )
    marker.unlink()


# What refresh writes into its marker: where it started, then what it will record.
REFRESH_MARKER: records.Schema = {
    "start": records.commit,
    "head": records.commit,
    "series_digest": records.digest,
    "patches": records.dict_of(records.file_name(ENTRY, "patches/"), records.digest),
}


def read_refresh_marker(checkout: Path) -> dict[str, Any] | None:
    """refresh's marker (None: none), every entry checked before the kit resets or records by it."""
    where = f"{shown(checkout)}/.git/{REFRESHING}"
    plan = records.load(
        checkout / ".git" / REFRESHING,
        f"{where} (a refresh's marker)",
        REFRESH_MARKER,
        f"nothing was touched: remove it (rm {where}), then nox -s apply -- --force rebuilds the "
        "checkout",
        optional=("head", "series_digest", "patches"),
        error=CorruptState,
    )
    if plan is not None and "series_digest" in plan and not {"head", "patches"} <= set(plan):
        raise CorruptState(
            f"{where} (a refresh's marker) has a series_digest without its head and patches",
            f"nothing was touched: remove it (rm {where}), then nox -s apply -- --force",
        )
    return plan


def write_refresh_marker(checkout: Path, plan: dict[str, object]) -> None:
    """What refresh has started (and, once known, what it will record) added to the marker, written
    aside and renamed."""
    marker = checkout / ".git" / REFRESHING
    tmp = marker.with_name(marker.name + ".tmp")
    before = read_refresh_marker(checkout) or {}
    tmp.write_text(json.dumps(before | plan), encoding="utf-8")
    tmp.rename(marker)


def undo_to(checkout: Path, start: str) -> None:
    """The kit's own paused git operation aborted and HEAD back at start (what refresh found, clean).

    The reset also clears what an abort leaves of a sequencer a kill cut short (CHERRY_PICK_HEAD):
    refresh starts only on a clean checkout with nothing paused, so all of it is the kit's."""
    # a rebase killed part way may not abort: the reset below ends it
    with contextlib.suppress(KitError):
        abort_paused(checkout)
    gitcmd.reset_hard(checkout, start)
    left = in_progress(checkout)
    if left:
        raise CheckoutError(
            f"{shown(checkout)}: the kit's own {left} could not be undone",
            f"run: cd {shown(checkout)} && {left} --abort; then run the command again",
        )


def borrow_objects(new: Path, old: Path) -> bool:
    """The old checkout's history (its pristine and patches) fetched into the new one, under
    PREVIOUS_REF; whether it came (then `apply --abort` can go back to it, in the new repository).

    Patches were made against the old pin: `git am -3` needs those blobs to merge them onto the new
    one. Best effort: an old checkout git cannot read only means 3-way has less to work with. A git
    pin is fetched shallow, so both repositories may be: the old one's shallow roots come along
    (else git drops the ref with a warning and exit 0), and the ref is written only once its commit
    is here.
    """
    if not (old / ".git").is_dir() or old.is_symlink():
        return False
    try:
        commit = head(old)
        gitcmd.fetch_commit(new, str(old.resolve()), commit, "--no-tags", "--update-shallow")
    except GitFailed:
        return False
    gitcmd.update_ref(new, PREVIOUS_REF, commit)
    return True


def apply_one(checkout: Path, patch: Patch, threeway: bool) -> PatchResult:
    """git am one patch; a failure leaves the am in progress, as git does, for the user to resolve."""
    probe = apply_check(checkout, patch.path)
    corrupt = CORRUPT.search(probe.stderr)
    if corrupt:
        raise CorruptPatch(
            f"patch {patch.name} is corrupt (git: corrupt patch at line {corrupt[1]})",
            "restore it from git (git checkout -- patches/) or re-export it with nox -s refresh",
        )
    applied = am(checkout, patch.path, *(["-3"] if threeway else []))
    if applied.returncode != 0:
        return PatchResult(
            patch.name,
            "conflict",
            conflict_detail(probe.stderr, applied.stderr, applied.stdout, patch.text),
        )
    if probe.returncode != 0:
        return PatchResult(patch.name, "3-way", "context differed; merged with --3way")
    offs = offsets_in(probe.stderr)
    return (
        PatchResult(patch.name, "offset", "; ".join(offs))
        if offs
        else PatchResult(patch.name, "clean")
    )


def commit_all(
    repo: Path,
    patches: list[Patch],
    threeway: bool,
    on_conflict: Callable[[Patch, PatchResult], KitError],
) -> list[str]:
    """Apply every patch on repo's HEAD (a scratch copy: nothing is recorded); their commits, oldest
    first.

    The first conflict raises on_conflict's error: rebase and the PR's range-diff each say what it
    means.
    """
    for patch in patches:
        result = apply_one(repo, patch, threeway)
        if result.outcome == "conflict":
            raise on_conflict(patch, result)
    return rev_list(repo, f"{PRISTINE_TAG}..HEAD")


def apply_patches(
    checkout: Path,
    patches: list[Patch],
    state: State,
    threeway: bool,
    progress: Progress,
    done: int = 0,
) -> list[PatchResult]:
    """Apply patches in order on the checkout as it is, recording each in the state; stops at a
    conflict."""
    results: list[PatchResult] = []
    total = done + len(patches)
    for i, patch in enumerate(patches, done + 1):
        result = apply_one(checkout, patch, threeway)
        results.append(result)
        progress(step(i, total, patch.name, result.outcome, result.detail))
        if result.outcome == "conflict":
            state.status, state.failed_patch = "conflict", patch.name
            write_state(checkout, state)
            raise PatchConflict(
                f"patch {patch.name} does not apply: {result.detail}",
                f"resolve it in {shown(checkout)} (git am --show-current-patch=diff; edit; git "
                "add), then "
                "nox -s apply -- --continue; or nox -s apply -- --abort"
                + ("" if threeway else "; or retry with nox -s apply -- --3way"),
            )
        state.applied.append(patch.name)
        if result.outcome == "offset":
            state.offsets[patch.name] = [result.detail]
    return results


def apply_series(
    pin: Pin,
    patches: list[Patch],
    checkout: Path,
    downloads: Path,
    *,
    threeway: bool = False,
    force: bool = False,
    progress: Progress,
) -> list[PatchResult]:
    """Pristine pin, then every patch in order. Raises PatchConflict on the first that fails.

    The state says "applying" before anything changes, so an interrupted apply is
    recognised by every command (and never taken for a complete one).
    """
    refuse_foreign(checkout)
    finish_pin_swap(checkout, progress)
    try:
        state = read_state(checkout) if (checkout / ".git").is_dir() else None
    except CorruptState:
        if not force:
            raise
        state = None  # --force: rebuilt from scratch below
    if (checkout / ".git").is_dir() and not checkout.is_symlink():
        heal_killed(checkout, state, series_digest(patches), progress)
        # what --force does not override: a setting or a git of the user's is never the kit's to
        # discard
        guard("foreign", Inspection(checkout, state))
    if not force:
        guard("replace", Inspection(checkout, state))
    if state is not None and state.status != "applying" and not is_good(checkout, state) and force:
        progress(f"--force: discarding {shown(checkout)}'s work that is not in patches/")
    progress(f"applying {len(patches)} patches to {pin.label}")  # once the checkout may be replaced
    new = State(
        pin=pin.label,
        pin_digest=pin_digest(pin),
        pristine_commit="",  # prepare_checkout fills it in
        series_digest=series_digest(patches),
        patches={p.name: sha256_text(p.text) for p in patches},
        head=None,
        status="applying",
    )
    try:
        prepare_checkout(pin, checkout, downloads, state, new, progress, force)
        with no_paused_am_left(checkout):
            results = apply_patches(checkout, patches, new, threeway, progress)
    # the state says "applying": every command refuses the checkout until a full apply
    except GitFailed as exc:
        raise CheckoutError(exc.what, "fix what git names, then run nox -s apply again") from None
    # "applied" is written last, only over a tree that holds what apply made
    verify_complete(checkout, new)
    finish(checkout, new, exported_head=head(checkout))
    forget_last_good(checkout)
    return results


@contextlib.contextmanager
def no_paused_am_left(checkout: Path) -> Iterator[None]:
    """Anything but a conflict (a signal, a git error) that ends a run of `git am`s leaves none paused.

    A conflict is left paused on purpose, for the user to resolve; any other end aborts the am the
    kit started (the state still says "applying": the next command says to apply again).
    """
    try:
        yield
    except PatchConflict:
        raise
    except BaseException:
        with contextlib.suppress(KitError):
            abort_paused(checkout)
        raise


def finish(checkout: Path, state: State, *, exported_head: str | None) -> None:
    """Record a checkout that holds the whole series; the previous one is no longer needed to go back
    to.

    exported_head: the commit patches/ was made from (None: the checkout holds work not in patches/
    yet). The caller passes it in: refresh records with the signals held, and a Ctrl-C to the
    process group would kill a git started here after patches/ was swapped in, leaving patches/ new
    and the state old.
    """
    state.status, state.failed_patch = "applied", None
    state.head = exported_head
    write_state(checkout, state)
    # After the state (an interrupted finish still knows the way back): abort takes the way back
    # only with the backup and the ref both, so the unlink alone ends it; forget_last_good deletes
    # the ref, with git.
    (checkout / ".git" / STATE_BACKUP).unlink(missing_ok=True)


def forget_last_good(checkout: Path) -> None:
    """Delete the way back that finish ended (a git call: never inside a stretch that holds the
    signals)."""
    drop_ref_lock(checkout, LAST_GOOD_REF)
    gitcmd.delete_ref(checkout, LAST_GOOD_REF)


def verify_complete(checkout: Path, state: State) -> None:
    """Refuse to record as applied a checkout whose commits or files are not what apply made."""
    commits = rev_list(checkout, f"{PRISTINE_TAG}..HEAD")
    dirty = dirty_paths(checkout)
    paused = in_progress(checkout)
    if len(commits) == len(state.applied) and not paused and dirty:
        # every patch went in and nothing is paused: what is left is no short write but a path git
        # would not remove, named as it is
        raise IncompleteCheckout(
            f"{shown(checkout)} holds every patch, and also {len(dirty)} path(s) apply did not make "
            f"(first: {dirty[0]})",
            f"move {shown(checkout)}/{dirty[0].strip(chr(34))} out of the checkout, then run nox -s "
            "apply again",
        )
    if len(commits) != len(state.applied) or dirty or paused:
        raise IncompleteCheckout(
            f"{shown(checkout)} holds {len(commits)} of {len(state.applied)} patch commits and "
            f"{len(dirty)} changed files after apply; the disk may be full",
            f"free disk space on {checkout.parent.name}/ (df -h {checkout.parent.name}), then run "
            "nox -s apply again",
        )


def commit_slugs(checkout: Path) -> list[tuple[str, str | None]]:
    """(commit, Kit-Patch slug or None) for each commit after pristine, oldest first; fixup commits
    left out."""
    return [
        (commit, trailer(message, "Kit-Patch"))
        for commit, message in gitcmd.messages(checkout, f"{PRISTINE_TAG}..HEAD")
        if not message.startswith(("fixup! ", "squash! ", "amend! "))
    ]


def continue_series(
    checkout: Path, patches: list[Patch], *, threeway: bool, progress: Progress
) -> list[PatchResult]:
    """After a conflict: finish the paused `git am` (if the user has not), then apply the remaining
    patches."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is None or state.status != "conflict" or state.failed_patch is None:
        raise CheckoutError(
            f"nothing to continue: {shown(checkout)} is not stopped at a patch", "run: nox -s apply"
        )
    # git am --continue reads the checkout's config too
    guard("foreign", Inspection(checkout, state))
    if state.series_digest != series_digest(patches):
        raise StaleCheckout(
            f"patches/ changed since apply stopped at {state.failed_patch}",
            "restore patches/ (git checkout -- patches), or start again with nox -s apply -- "
            "--force",
        )
    op = in_progress(checkout)
    if op not in (None, "git am"):
        raise LocalEdits(
            f"{shown(checkout)} is in the middle of a {op}",
            f"finish or abort it ({op} --abort) first",
        )
    if op == "git am":
        unmerged = gitcmd.unmerged(checkout)
        staged = gitcmd.has_staged(checkout)
        if unmerged or not staged:
            why = f"conflicts in {', '.join(unmerged[:3])}" if unmerged else "nothing staged"
            raise LocalEdits(
                f"{state.failed_patch} is not resolved yet ({why})",
                "apply it by hand (git am --show-current-patch=diff), git add the result, then run "
                "nox -s apply -- --continue again (or nox -s apply -- --abort)",
            )
        proc = gitcmd.am_continue(checkout)
        if proc.returncode != 0:
            raise LocalEdits(
                f"git am --continue failed: {last_line(proc.stdout, proc.stderr)}",
                "git add the resolved files (or git am --skip to leave the patch out), then run "
                "again",
            )
    names = [p.name for p in patches]
    if state.failed_patch not in names:
        raise CorruptState(
            f"{shown(checkout)}/.git/kit-state.json says apply stopped at {state.failed_patch}, "
            "which is not in the series",
            "nox -s apply -- --abort to go back, or nox -s apply -- --force to start again",
        )
    failed = names.index(state.failed_patch)
    have = [slug for _, slug in commit_slugs(checkout)]
    wanted = [p.slug for p in patches]
    if have not in (wanted[: failed + 1], wanted[:failed]):
        raise LocalEdits(
            f"{shown(checkout)} holds patches {', '.join(str(s) for s in have) or 'none'}, "
            f"not the series up to {state.failed_patch}",
            "nox -s apply -- --abort to go back, or nox -s apply -- --force to start again",
        )
    resolved = len(have) == failed + 1
    result = PatchResult(
        state.failed_patch,
        "resolved" if resolved else "skipped",
        "resolved by hand: nox -s refresh writes it back"
        if resolved
        else "left out with git am --skip: nox -s refresh -- --drop it",
    )
    progress(step(failed + 1, len(patches), result.name, result.outcome, result.detail))
    if resolved:
        state.applied.append(state.failed_patch)
    state.status, state.failed_patch = "applying", None
    write_state(checkout, state)
    with no_paused_am_left(checkout):
        rest = apply_patches(
            checkout, patches[failed + 1 :], state, threeway, progress, done=failed + 1
        )
    results = [result, *rest]
    verify_complete(checkout, state)
    finish(checkout, state, exported_head=None)  # the hand-made commit is not in patches/ yet
    forget_last_good(checkout)
    return results


def abort_series(checkout: Path, progress: Progress) -> str:
    """Go back to the checkout as it was before the apply that stopped (or was interrupted)."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is None or state.status not in ("conflict", "applying"):
        raise CheckoutError(
            f"nothing to abort: {shown(checkout)} is not stopped in an apply", "run: nox -s apply"
        )
    backup = checkout / ".git" / STATE_BACKUP
    before = load_state(
        backup,
        f"{shown(checkout)}/.git/{STATE_BACKUP} (the way back)",
        f"remove it (rm {shown(checkout)}/.git/{STATE_BACKUP}), then nox -s apply -- --abort "
        "goes back to pristine",
    )
    if exists(checkout, LAST_GOOD_REF) and before is not None:
        reset_to(checkout, LAST_GOOD_REF)
        # apply across a pin change moved it
        gitcmd.tag(checkout, PRISTINE_TAG, before.pristine_commit)
        os.replace(backup, state_file(checkout))
        if before.pin_digest != state.pin_digest:
            return f"restored the checkout of the previous pin ({before.pin}, at {head(checkout)[:12]})"
        return f"back at {head(checkout)[:12]}, as before the apply"
    reset_to(checkout, PRISTINE_TAG)
    state.status, state.failed_patch, state.head, state.applied = "aborted", None, None, []
    write_state(checkout, state)
    return "no earlier complete checkout: left at pristine (run nox -s apply)"
