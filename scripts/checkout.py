"""The working checkout: pristine pin as first commit (tag `pristine`), then one
commit per patch in series order: apply, --continue, --abort, and the guards (refresh.py exports it).

The record of what was applied lives in the checkout's own .git (kit-state.json),
so it can never outlive or disagree with the checkout it describes.
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import io
import json
import os
import re
import shutil
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path

from scripts import diffparse, gitcmd
from scripts.digests import sha256_text
from scripts.errors import KitError
from scripts.gitcmd import (
    GitFailed,
    am,
    apply_check,
    exists,
    git_reason,
    head,
    is_ancestor,
    last_line,
    rev_list,
    tree_blobs,
)
from scripts.pin import Pin, extract_wheel, fetch_git, fetch_wheel, wheel_blobs
from scripts.report import step
from scripts.series import (
    Patch,
    series_digest,
    trailer,
)

PRISTINE_TAG = "pristine"
BRANCH = "series"
OFFSET = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", re.M)
FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
FILE_ERROR = re.compile(r"^error: (?!patch failed: )([^:\n]+): (.+)$", re.M)  # "error: x.py: already exists in ..."
CORRUPT = re.compile(r"corrupt patch at line (\d+)")
Progress = Callable[[str], None]


class CheckoutError(KitError):
    """The checkout cannot be used or changed as asked."""


class StaleCheckout(CheckoutError):
    """The checkout does not match the current pin and patches/."""


class LocalEdits(CheckoutError):
    """The checkout holds work that is not in patches/."""


class PatchConflict(CheckoutError):
    """A patch does not apply; the checkout is left mid-`git am` for the user to resolve."""

    exit_code = 1  # the work ran and found something, as a conflicting rebase (README, "Exit codes")


class CorruptPatch(PatchConflict):
    """A patch file git cannot read: bad input, refused before any `git am` starts."""

    exit_code = 2


class NeedsRefresh(CheckoutError):
    """Patches applied only with line offsets: their context is stale."""


class CorruptState(CheckoutError):
    """The checkout's record of itself cannot be read."""


class NotKitMade(CheckoutError):
    """A path under .work/ holds something the kit did not make: it is never deleted."""


class IncompleteCheckout(CheckoutError):
    """The checkout does not hold every patch of the series: exporting it would lose patches."""


STATUSES = ("applying", "conflict", "applied", "aborted")


@dataclass
class State:
    pin: str
    pin_digest: str
    pristine_commit: str
    series_digest: str
    patches: dict[str, str]
    head: str | None  # the commit at which the checkout equals patches/; None while it holds unexported work
    status: str  # applying | conflict | applied | aborted
    failed_patch: str | None = None
    offsets: dict[str, list[str]] = field(default_factory=dict)
    applied: list[str] = field(default_factory=list)  # patch names committed so far, in order


@dataclass(frozen=True)
class PatchResult:
    name: str
    outcome: str  # clean | offset | 3-way | conflict | resolved | skipped
    detail: str = ""


# ---- pure helpers --------------------------------------------------------------


def pin_digest(pin: Pin) -> str:
    """What identifies the pristine content: the wheel digest or the git commit."""
    return pin.wheel_sha256 if pin.source == "wheel" else pin.git_commit


def offsets_in(check_output: str) -> list[str]:
    return [f"hunk #{m[0]} at line {m[1]} (offset {m[2]})" for m in OFFSET.findall(check_output)]


def failed_hunk(check_output: str, patch_text: str) -> tuple[str, str] | None:
    """(file, hunk description or git's reason) of the first failure `git apply --check` reports."""
    m = FAILED_AT.search(check_output)
    if not m:
        other = FILE_ERROR.search(check_output)
        return (other[1], f"({other[2]})") if other else None
    path, line = m[1], int(m[2])
    starts = [h.old_start for f in diffparse.parse(patch_text) if f.apply_name == path for h in f.hunks]
    number = next((i for i, start in enumerate(starts, 1) if start == line), None)
    return path, f"hunk #{number} (@@ -{line})" if number else f"hunk at line {line}"


def conflict_detail(check_output: str, am_stderr: str, am_stdout: str, patch_text: str) -> str:
    """Where a patch failed (file and hunk, or git's reason for the file) and, after a 3-way merge, why."""
    where = failed_hunk(check_output, patch_text)
    reason = git_reason(am_stderr, am_stdout)
    if where is None:
        return f"git: {reason}"
    merged = FAILED_AT.search(check_output) and not reason.startswith("error: patch failed")
    return f"{where[0]} {where[1]}" + (f"; git: {reason}" if merged else "")


# ---- the checkout on disk -------------------------------------------------------

KIT_MARK = "kit-made"  # in .git/: the kit made this repository and may replace it
STATE_BACKUP = "kit-state.last-good.json"
LAST_GOOD_REF = "refs/kit/last-good"
PREVIOUS_REF = "refs/kit/previous-pin"  # the checkout this one replaced: blobs for `git am -3` across a pin change
# Files that running code leaves in a tree; never "edits" (git clean -x still removes them on reset).
GENERATED = ("__pycache__/", "*.py[co]", ".pytest_cache/", ".coverage*", ".benchmarks/")
IN_PROGRESS = {  # .git entry -> the git operation it means
    "rebase-apply": "git am",
    "rebase-merge": "git rebase",
    "MERGE_HEAD": "git merge",
    "CHERRY_PICK_HEAD": "git cherry-pick",
    "REVERT_HEAD": "git revert",
    "BISECT_LOG": "git bisect",
}


def shown(checkout: Path) -> str:
    return f"{checkout.parent.name}/{checkout.name}"


def state_file(checkout: Path) -> Path:
    return checkout / ".git" / "kit-state.json"


def parse_state(text: str) -> State:
    """A State from kit-state.json's text; ValueError/TypeError/KeyError on anything else."""
    data = json.loads(text)
    names = {f.name for f in fields(State)}
    if not isinstance(data, dict) or set(data) - names:
        raise ValueError(f"unexpected keys {sorted(set(data) - names) if isinstance(data, dict) else data!r}")
    state = State(**data)
    state.head = state.head or None  # an older kit wrote "" for "holds unexported work"
    if state.status not in STATUSES or not isinstance(state.patches, dict) or not isinstance(state.head, str | None):
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
    except OSError as exc:  # write(2) errors name no file: name it (the old state stays, and stays true)
        tmp.unlink(missing_ok=True)
        raise CheckoutError(
            f"cannot write {shown(checkout)}/.git/{target.name} ({exc.strerror or exc})",
            f"free disk space on {checkout.parent.name}/ (df -h {checkout.parent.name}), then run the command again",
        ) from None
    os.replace(tmp, target)


def in_progress(checkout: Path) -> str | None:
    """The git operation paused in the checkout (am, rebase, merge, ...), if any."""
    return next((op for entry, op in IN_PROGRESS.items() if (checkout / ".git" / entry).exists()), None)


def branch(checkout: Path) -> str | None:
    """The checked-out branch, None on a detached HEAD."""
    return gitcmd.current_branch(checkout)


def dirty_paths(checkout: Path) -> list[str]:
    return [line[3:] for line in gitcmd.status_porcelain(checkout)]


def is_kit_made(path: Path) -> bool:
    """True when the kit made path (its marker is there) or path holds nothing of anyone's."""
    if path.is_symlink() or not path.is_dir():
        return False
    git_dir = path / ".git"
    if (git_dir / KIT_MARK).is_file() or (git_dir / "kit-state.json").is_file():
        return True
    return all(entry.name == ".git" for entry in path.iterdir())


def refuse_foreign(path: Path) -> None:
    """Refuse to replace or delete something under .work/ that the kit did not make."""
    if not (path.exists() or path.is_symlink()) or is_kit_made(path):
        return
    kind = "a symbolic link" if path.is_symlink() else "a file" if path.is_file() else "a folder the kit did not make"
    raise NotKitMade(
        f".work/{path.name} is {kind}, not a kit checkout",
        "move it away (the kit never deletes it, nor works through a link), then run again",
    )


def remove_kit_made(path: Path) -> None:
    refuse_foreign(path)
    if path.exists():
        shutil.rmtree(path)


def wheel_date(wheel: Path) -> str:
    """The newest entry date of the wheel: a fixed, meaningful date for the pristine commit."""
    with zipfile.ZipFile(wheel) as zf:
        newest = max(info.date_time for info in zf.infolist())
    return datetime(*newest, tzinfo=timezone.utc).isoformat()


def init_repo(dest: Path) -> None:
    """An empty repository marked as the kit's, ignoring what running code leaves behind."""
    dest.mkdir(parents=True)
    gitcmd.init(dest, BRANCH)
    (dest / ".git" / KIT_MARK).write_text(
        "made by the vllm-omni NPU kit; nox -s apply may replace it\n", encoding="utf-8"
    )
    (dest / ".git" / "info").mkdir(exist_ok=True)
    (dest / ".git" / "info" / "exclude").write_text("".join(f"{g}\n" for g in GENERATED), encoding="utf-8")


def build_pristine(pin: Pin, dest: Path, downloads: Path, progress: Progress) -> str:
    """A new repository at dest whose first commit is the pristine pin, tagged; returns the commit."""
    init_repo(dest)
    if pin.source == "git":
        progress(f"fetching {pin.git_url} at {pin.git_commit[:12]}")
        commit = fetch_git(pin, dest)
        gitcmd.start_branch(dest, BRANCH)
    else:
        wheel = fetch_wheel(pin, downloads)
        progress(f"{wheel.name}: sha256 verified, extracting")
        extract_wheel(wheel, dest)
        message = f"{pin.project} {pin.version}, pristine\n\nFrom {wheel.name}, sha256 {pin.wheel_sha256}.\n"
        gitcmd.commit_everything(dest, message, wheel_date(wheel))
        commit = head(dest)
        refuse_short_tree(dest, tree_differs(wheel_blobs(wheel), tree_blobs(dest, commit)), wheel.name)
    refuse_short_tree(dest, dirty_paths(dest), "its commit")
    gitcmd.tag(dest, PRISTINE_TAG, commit)
    return commit


def tree_differs(wanted: dict[str, str], tree: dict[str, str]) -> list[str]:
    """Paths whose blob in tree is missing or not the wanted one (files the kit never commits aside)."""
    return sorted(path for path, blob in wanted.items() if tree.get(path) != blob and not is_generated(path))


def is_generated(path: str) -> bool:
    """A path that .git/info/exclude (GENERATED) keeps out of every commit."""
    parts = path.split("/")
    return any(
        any(fnmatch.fnmatch(part, g.rstrip("/")) for part in (parts[:-1] if g.endswith("/") else parts[-1:]))
        for g in GENERATED
    )


def refuse_short_tree(repo: Path, differing: list[str], source: str) -> None:
    """A pristine tree that is not all of its source (a disk that filled while it was written) is never used."""
    if differing:
        raise IncompleteCheckout(
            f"the pristine tree in {shown(repo)} differs from {source} in {len(differing)} files "
            f"(first: {differing[0]}); the disk may be full",
            f"free disk space on {repo.parent.name}/ (df -h {repo.parent.name}), then run nox -s apply again",
        )


def export_tree(checkout: Path, rev: str, dest: Path) -> None:
    """A plain copy of the tree at rev (e.g. the pristine tree for side-by-side tests)."""
    data = gitcmd.archive(checkout, rev)
    remove_kit_made(dest) if (dest / ".git").exists() else shutil.rmtree(dest, ignore_errors=True)
    try:
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
    except OSError as exc:  # named here: a failed write(2) names no file of its own
        shutil.rmtree(dest, ignore_errors=True)  # no partial copy left to be taken for the whole tree
        raise CheckoutError(
            f"cannot write {dest.parent.name}/{dest.name} ({exc.strerror or exc})",
            f"free disk space on {dest.parent.name}/ (df -h {dest.parent.name}), then run the command again",
        ) from None


def abort_paused(checkout: Path) -> None:
    """Abort whatever git operation is paused in the checkout (with the kit's identity, see gitcmd)."""
    op = in_progress(checkout)
    if op == "git am" and gitcmd.abort(checkout, "am").returncode != 0:
        # a `git am` killed part way (Ctrl-C reaches its whole process group) can leave a folder git no longer reads
        shutil.rmtree(checkout / ".git" / "rebase-apply", ignore_errors=True)
    elif op in ("git rebase", "git merge", "git cherry-pick", "git revert", "git bisect"):
        gitcmd.must(gitcmd.abort(checkout, op.split()[1]))


def reset_to(checkout: Path, rev: str) -> None:
    abort_paused(checkout)
    gitcmd.start_branch(checkout, BRANCH, rev, force=True)
    gitcmd.clean(checkout)


def is_good(checkout: Path, state: State | None) -> bool:
    """A checkout that equals its patches/ (applied and exported): worth going back to."""
    return state is not None and state.status == "applied" and state.head is not None and head(checkout) == state.head


def keep_last_good(repo: Path, old: Path, state: State | None, rev: str) -> None:
    """The one way back for `apply --abort`: in repo (the checkout apply works on), LAST_GOOD_REF at rev, the head
    of the checkout `old` as it was before this apply, and its state beside it; only when that was complete."""
    if is_good(old, state):
        drop_ref_lock(repo, LAST_GOOD_REF)
        gitcmd.update_ref(repo, LAST_GOOD_REF, rev)
        shutil.copyfile(state_file(old), repo / ".git" / STATE_BACKUP)


def drop_ref_lock(repo: Path, ref: str) -> None:
    """The lock file of one of the kit's own refs that a signal left (Ctrl-C reaches the git the kit runs):
    no one else writes refs/kit/, and the kit holds the checkout's lock, so it is stale."""
    (repo / ".git" / f"{ref}.lock").unlink(missing_ok=True)


def prepare_checkout(
    pin: Pin, checkout: Path, downloads: Path, state: State | None, new: State, progress: Progress
) -> None:
    """Reset a matching checkout to pristine, or build a new one beside it and swap it in.

    The checkout says "applying" (new, with its pristine commit) before anything in it changes,
    so a build that fails or is cut short anywhere is never taken for a complete one.
    """
    refuse_foreign(checkout)
    same_pin = state is not None and state.pin_digest == pin_digest(pin) and state.pin == pin.label
    if same_pin and state is not None:
        keep_last_good(checkout, checkout, state, "HEAD")
        new.pristine_commit = state.pristine_commit
        if state.status == "applying":
            drop_git_locks(checkout)
        write_state(checkout, new)
        reset_to(checkout, PRISTINE_TAG)
        progress(f"reusing pristine {pin.label} at {state.pristine_commit[:12]}")
        return
    staging = checkout.with_name(f".{checkout.name}.new")
    remove_kit_made(staging)
    try:
        new.pristine_commit = build_pristine(pin, staging, downloads, progress)
        if borrow_objects(staging, checkout):
            keep_last_good(staging, checkout, state, PREVIOUS_REF)
        write_state(staging, new)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if checkout.exists():
        remove_kit_made(checkout)
    staging.rename(checkout)
    progress(f"pristine {pin.label} committed as {new.pristine_commit[:12]}, tagged {PRISTINE_TAG}")


def drop_git_locks(checkout: Path) -> None:
    """Lock files (index.lock, HEAD.lock, ref locks) of a git the kit ran and a signal killed: Ctrl-C reaches
    the kit's whole process group. Called only on the kit's own unfinished apply, under its checkout lock."""
    git_dir = checkout / ".git"
    for lock in [*git_dir.glob("*.lock"), *(git_dir / "refs").rglob("*.lock")]:
        lock.unlink(missing_ok=True)


def borrow_objects(new: Path, old: Path) -> bool:
    """The old checkout's history (its pristine and patches) fetched into the new one, under PREVIOUS_REF;
    whether it came (then `apply --abort` can go back to it, in the new repository).

    Patches were made against the old pin: `git am -3` needs those blobs to merge them onto the new
    one. Best effort: an old checkout git cannot read only means 3-way has less to work with.
    """
    if not (old / ".git").is_dir() or old.is_symlink():
        return False
    return gitcmd.fetch_head(new, old.resolve(), PREVIOUS_REF).returncode == 0


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
            patch.name, "conflict", conflict_detail(probe.stderr, applied.stderr, applied.stdout, patch.text)
        )
    if probe.returncode != 0:
        return PatchResult(patch.name, "3-way", "context differed; merged with --3way")
    offs = offsets_in(probe.stderr)
    return PatchResult(patch.name, "offset", "; ".join(offs)) if offs else PatchResult(patch.name, "clean")


def commit_all(repo: Path, patches: list[Patch], threeway: bool,
               on_conflict: Callable[[Patch, PatchResult], KitError]) -> list[str]:  # fmt: skip
    """Apply every patch on repo's HEAD (a scratch copy: nothing is recorded); their commits, oldest first.

    The first conflict raises on_conflict's error: rebase and the PR's range-diff each say what it means.
    """
    for patch in patches:
        result = apply_one(repo, patch, threeway)
        if result.outcome == "conflict":
            raise on_conflict(patch, result)
    return rev_list(repo, f"{PRISTINE_TAG}..HEAD")


def apply_patches(
    checkout: Path, patches: list[Patch], state: State, threeway: bool, progress: Progress, done: int = 0
) -> list[PatchResult]:
    """Apply patches in order on the checkout as it is, recording each in the state; stops at a conflict."""
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
                f"resolve it in {shown(checkout)} (git am --show-current-patch=diff; edit; git add), then "
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
    try:
        state = read_state(checkout) if (checkout / ".git").is_dir() else None
    except CorruptState:
        if not force:
            raise
        state = None  # --force: rebuilt from scratch below
    if not force:
        guard("replace", Inspection(checkout, state))
    if state is not None and state.status != "applying" and not is_good(checkout, state) and force:
        progress(f"--force: discarding {shown(checkout)}'s work that is not in patches/")
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
        prepare_checkout(pin, checkout, downloads, state, new, progress)
        with no_paused_am_left(checkout):
            results = apply_patches(checkout, patches, new, threeway, progress)
    except GitFailed as exc:  # the state says "applying": every command refuses the checkout until a full apply
        raise CheckoutError(exc.what, "fix what git names, then run nox -s apply again") from None
    verify_complete(checkout, new)  # "applied" is written last, only over a tree that holds what apply made
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
    """Record a checkout that holds the whole series; the previous one is no longer needed to go back to.

    exported_head: the commit patches/ was made from (None: the checkout holds work not in patches/ yet).
    The caller passes it in: refresh records with the signals held, and a Ctrl-C to the process group
    would kill a git started here after patches/ was swapped in, leaving patches/ new and the state old.
    """
    state.status, state.failed_patch = "applied", None
    state.head = exported_head
    write_state(checkout, state)
    # After the state (an interrupted finish still knows the way back): abort takes the way back only with
    # the backup and the ref both, so the unlink alone ends it; forget_last_good deletes the ref, with git.
    (checkout / ".git" / STATE_BACKUP).unlink(missing_ok=True)


def forget_last_good(checkout: Path) -> None:
    """Delete the way back that finish ended (a git call: never inside a stretch that holds the signals)."""
    drop_ref_lock(checkout, LAST_GOOD_REF)
    gitcmd.delete_ref(checkout, LAST_GOOD_REF)


def verify_complete(checkout: Path, state: State) -> None:
    """Refuse to record as applied a checkout whose commits or files are not what apply made."""
    commits = rev_list(checkout, f"{PRISTINE_TAG}..HEAD")
    dirty = dirty_paths(checkout)
    if len(commits) != len(state.applied) or dirty or in_progress(checkout):
        raise IncompleteCheckout(
            f"{shown(checkout)} holds {len(commits)} of {len(state.applied)} patch commits and "
            f"{len(dirty)} changed files after apply; the disk may be full",
            f"free disk space on {checkout.parent.name}/ (df -h {checkout.parent.name}), then run nox -s apply again",
        )


def commit_slugs(checkout: Path) -> list[tuple[str, str | None]]:
    """(commit, Kit-Patch slug or None) for each commit after pristine, oldest first; fixup commits left out."""
    return [
        (commit, trailer(message, "Kit-Patch"))
        for commit, message in gitcmd.messages(checkout, f"{PRISTINE_TAG}..HEAD")
        if not message.startswith(("fixup! ", "squash! ", "amend! "))
    ]


def continue_series(checkout: Path, patches: list[Patch], *, threeway: bool, progress: Progress) -> list[PatchResult]:
    """After a conflict: finish the paused `git am` (if the user has not), then apply the remaining patches."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is None or state.status != "conflict" or state.failed_patch is None:
        raise CheckoutError(f"nothing to continue: {shown(checkout)} is not stopped at a patch", "run: nox -s apply")
    if state.series_digest != series_digest(patches):
        raise StaleCheckout(
            f"patches/ changed since apply stopped at {state.failed_patch}",
            "restore patches/ (git checkout -- patches), or start again with nox -s apply -- --force",
        )
    op = in_progress(checkout)
    if op not in (None, "git am"):
        raise LocalEdits(f"{shown(checkout)} is in the middle of a {op}", f"finish or abort it ({op} --abort) first")
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
                "git add the resolved files (or git am --skip to leave the patch out), then run again",
            )
    names = [p.name for p in patches]
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
    result = PatchResult(state.failed_patch, "resolved" if resolved else "skipped",
                         "resolved by hand: nox -s refresh writes it back" if resolved
                         else "left out with git am --skip: nox -s refresh -- --drop it")  # fmt: skip
    progress(step(failed + 1, len(patches), result.name, result.outcome, result.detail))
    if resolved:
        state.applied.append(state.failed_patch)
    state.status, state.failed_patch = "applying", None
    write_state(checkout, state)
    with no_paused_am_left(checkout):
        rest = apply_patches(checkout, patches[failed + 1 :], state, threeway, progress, done=failed + 1)
    results = [result, *rest]
    verify_complete(checkout, state)
    finish(checkout, state, exported_head=None)  # the hand-made commit is not in patches/ yet
    forget_last_good(checkout)
    return results


def abort_series(checkout: Path, progress: Progress) -> str:
    """Go back to the checkout as it was before the apply that stopped (or was interrupted)."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is None or state.status not in ("conflict", "applying"):
        raise CheckoutError(f"nothing to abort: {shown(checkout)} is not stopped in an apply", "run: nox -s apply")
    backup = checkout / ".git" / STATE_BACKUP
    if exists(checkout, LAST_GOOD_REF) and backup.is_file():
        before = parse_state(backup.read_text(encoding="utf-8"))
        reset_to(checkout, LAST_GOOD_REF)
        gitcmd.tag(checkout, PRISTINE_TAG, before.pristine_commit)  # apply across a pin change moved it
        os.replace(backup, state_file(checkout))
        if before.pin_digest != state.pin_digest:
            return f"restored the checkout of the previous pin ({before.pin}, at {head(checkout)[:12]})"
        return f"back at {head(checkout)[:12]}, as before the apply"
    reset_to(checkout, PRISTINE_TAG)
    state.status, state.failed_patch, state.head, state.applied = "aborted", None, None, []
    write_state(checkout, state)
    return "no earlier complete checkout: left at pristine (run nox -s apply)"


# ---- what a checkout is: one inspection, one table of refusals per purpose ----------------------


Facts = dict[str, str]


@dataclass
class Inspection:
    """One checkout as the guards read it: each fact is read once, when a guard first asks for it (a paused
    or half-made checkout is refused before git is asked anything about its tree)."""

    checkout: Path
    state: State | None
    built_from: tuple[Pin, list[Patch]] | None = None  # the inputs it must have been built from, if any

    @functools.cached_property
    def where(self) -> str:
        return shown(self.checkout)

    def condition(self, name: str) -> Facts | None:
        """The facts of condition `name` when it holds (for the messages), None when it does not."""
        return getattr(self, "_" + name.replace("-", "_"))()

    def _no_repository(self) -> Facts | None:
        return None if (self.checkout / ".git").is_dir() else {}

    def _absent(self) -> Facts | None:
        return {} if self.state is None else None

    def _status(self, status: str) -> Facts | None:
        held = self.state is not None and self.state.status == status
        return {"patch": str(self.state.failed_patch)} if held and self.state is not None else None

    def _applying(self) -> Facts | None:
        return self._status("applying")

    def _conflict(self) -> Facts | None:
        return self._status("conflict")

    def _aborted(self) -> Facts | None:
        return self._status("aborted")

    def _paused(self) -> Facts | None:
        op = in_progress(self.checkout)
        return {"op": op} if op else None

    def _elsewhere(self) -> Facts | None:
        current = branch(self.checkout)
        return None if current == BRANCH else {"on": f"branch {current}" if current else "a detached HEAD"}

    def _not_descended(self) -> Facts | None:
        return None if is_ancestor(self.checkout, PRISTINE_TAG, "HEAD") else {}

    def _dirty(self) -> Facts | None:
        dirty = dirty_paths(self.checkout)
        return {"dirty": ", ".join(dirty[:3])} if dirty else None

    def _unexported(self) -> Facts | None:
        state = self.state
        return {} if state is not None and state.status == "applied" and head(self.checkout) != state.head else None

    def _other_pin(self) -> Facts | None:
        if self.built_from is None or self.state is None:
            return None
        state, pin = self.state, self.built_from[0]
        if state.pin == pin.label and state.pin_digest == pin_digest(pin):
            return None
        built, now = state.pin, pin.label
        if built == now:  # same release, other bytes: the digests tell them apart
            built, now = f"{built} {state.pin_digest[:12]}", f"{now} {pin_digest(pin)[:12]}"
        return {"built": built, "now": now}

    def _other_patches(self) -> Facts | None:
        if self.built_from is None or self.state is None:
            return None
        state, patches = self.state, self.built_from[1]
        if state.series_digest == series_digest(patches):
            return None
        changed = sorted(set(state.patches.items()) ^ {(p.name, sha256_text(p.text)) for p in patches})
        return {"differs": changed[0][0] if changed else "order"}


# (condition, error, what, fix): a purpose's guard refuses with the first row whose condition holds; an error
# of None accepts the checkout there. `{where}` is the checkout; the other fields are the condition's facts.
Row = tuple[str, type[CheckoutError] | None, str, str]
SWITCH_BACK = "switch back (cd {where} && git checkout " + BRANCH + ")"
DISCARD = "or rerun apply with --force to discard them"
LOCAL_WORK: tuple[Row, ...] = (  # work that exists only in the checkout, or a git operation the user started
    ("paused", LocalEdits, "{where} is in the middle of a {op}",
     "finish it ({op} --continue) or abort it ({op} --abort) first"),
    ("elsewhere", LocalEdits, "{where} is on {on}, not on " + BRANCH,
     SWITCH_BACK + ", or rerun apply with --force to discard it"),
    ("dirty", LocalEdits, "{where} has uncommitted edits ({dirty})",
     "commit them and run nox -s refresh to keep them, " + DISCARD),
    ("unexported", LocalEdits, "{where} has commits that are not exported to patches/",
     "run nox -s refresh to keep them, " + DISCARD),
)  # fmt: skip
NO_CHECKOUT: Row = ("absent", StaleCheckout, "no checkout at {where}", "run: nox -s apply")
PROVENANCE_FIX = (
    "refresh would export it over other inputs: put patches/ back as apply saw it (git stash), refresh, "
    "git stash pop; or nox -s apply -- --force to discard the checkout's work"
)


def provenance(fix: str) -> tuple[Row, ...]:
    """The checkout was built from this pin and these patch files (order, names, bytes)."""
    return (
        ("other-pin", StaleCheckout, "{where} was built from {built}, the pin is now {now}", fix),
        ("other-patches", StaleCheckout, "{where} does not match patches/ (differs in {differs})", fix),
    )


FINISH = "finish with nox -s apply -- --continue (or -- --abort); refresh writes nothing until then"
GUARDS: dict[str, tuple[Row, ...]] = {
    # apply (without --force) replaces the checkout: never over work that exists only there
    "replace": (
        ("no-repository", None, "", ""),
        ("applying", None, "", ""),  # the kit's own unfinished apply: a half-made tree (paused am, dirty files)
        ("conflict", LocalEdits, "{where} stopped at patch {patch}",
         "resolve it, then nox -s apply -- --continue; or nox -s apply -- --abort to go back"),
        *LOCAL_WORK,
    ),
    # lint, test, pr, e2e run on the checkout: exactly the pin + patches/, as apply made it
    "use": (
        NO_CHECKOUT,
        ("applying", StaleCheckout, "{where}: an apply was interrupted or failed before it finished",
         "run: nox -s apply (it starts again from pristine)"),
        ("aborted", StaleCheckout, "{where} was left at pristine by apply --abort", "run: nox -s apply"),
        ("conflict", StaleCheckout, "{where} stopped at patch {patch}",
         "resolve it and run nox -s apply -- --continue, or nox -s apply -- --abort"),
        *provenance("run: nox -s apply"),
        *LOCAL_WORK,
    ),
    # refresh exports the checkout's commits: the whole series, committed, from the inputs apply saw
    "export": (
        NO_CHECKOUT,
        ("applying", IncompleteCheckout, "{where}: an apply was interrupted, the checkout does not hold the whole "
         "series", "run nox -s apply first (patches/ is untouched)"),
        ("conflict", IncompleteCheckout, "{where} stopped at {patch}: it does not hold the whole series", FINISH),
        ("aborted", IncompleteCheckout, "{where} was aborted: it does not hold the whole series", FINISH),
        LOCAL_WORK[0],
        ("elsewhere", LocalEdits, "{where} is on {on}, not on " + BRANCH, SWITCH_BACK),
        ("not-descended", LocalEdits, "{where}: HEAD does not descend from the " + PRISTINE_TAG + " tag",
         "run nox -s apply -- --force"),
        ("dirty", LocalEdits, "{where} has uncommitted edits", "commit them (git commit or git commit --fixup) first"),
        *provenance(PROVENANCE_FIX),
    ),
}  # fmt: skip


def guard(purpose: str, seen: Inspection) -> None:
    """Refuse the checkout for `purpose` (a key of GUARDS) with the first row whose condition holds."""
    for condition, error, what, fix in GUARDS[purpose]:
        facts = seen.condition(condition)
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


def combined_diff(checkout: Path) -> str:
    """pristine..HEAD as one diff: line numbers are those of the final patched tree."""
    return gitcmd.diff(checkout, PRISTINE_TAG, "HEAD")
