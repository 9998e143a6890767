"""The working checkout: pristine pin as first commit (tag `pristine`), then one
commit per patch in series order. Apply, refresh and the staleness guard.

The record of what was applied lives in the checkout's own .git (kit-state.json),
so it can never outlive or disagree with the checkout it describes.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from scripts import pin as pinmod
from scripts.errors import KitError
from scripts.gitcmd import KIT_IDENTITY, git, git_bytes
from scripts.gitcmd import run as git_run
from scripts.pin import Pin
from scripts.series import Patch, describe, patch_file_name, series_digest, series_header, sha256_text

PRISTINE_TAG = "pristine"
BRANCH = "series"
# Fixed export options: the same commits always give the same bytes, whatever the user's git config.
FORMAT_PATCH = (
    "format-patch", "--stdout", "-k", "--zero-commit", "--no-signature", "--no-stat", "--full-index",
    "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", "--diff-algorithm=myers", "--no-color",
)  # fmt: skip
OFFSET = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)", re.M)
FAILED_AT = re.compile(r"^error: patch failed: (.+):(\d+)$", re.M)
Progress = Callable[[str], None]


class CheckoutError(KitError):
    """The checkout cannot be used or changed as asked."""


class StaleCheckout(CheckoutError):
    """The checkout does not match the current pin and patches/."""


class LocalEdits(CheckoutError):
    """The checkout holds work that is not in patches/."""


class PatchConflict(CheckoutError):
    """A patch does not apply; the checkout is left mid-`git am` for the user to resolve."""


class NeedsRefresh(CheckoutError):
    """Patches applied only with line offsets: their context is stale."""


@dataclass
class State:
    pin: str
    pin_digest: str
    pristine_commit: str
    series_digest: str
    patches: dict[str, str]
    head: str
    status: str  # applied | conflict
    failed_patch: str | None = None
    offsets: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class PatchResult:
    name: str
    outcome: str  # clean | offset | 3-way | conflict
    detail: str = ""


# ---- pure helpers --------------------------------------------------------------


def pin_digest(pin: Pin) -> str:
    """What identifies the pristine content: the wheel digest or the git commit."""
    return pin.wheel_sha256 if pin.source == "wheel" else pin.git_commit


def offsets_in(check_output: str) -> list[str]:
    return [f"hunk #{m[0]} at line {m[1]} (offset {m[2]})" for m in OFFSET.findall(check_output)]


def failed_hunk(check_output: str, patch_text: str) -> tuple[str, str]:
    """(file, hunk description) of the first failure `git apply --check` reports."""
    m = FAILED_AT.search(check_output)
    if not m:
        return "?", "?"
    path, line = m[1], int(m[2])
    hunks = hunk_starts(patch_text).get(path, [])
    number = next((i for i, start in enumerate(hunks, 1) if start == line), None)
    return path, f"hunk #{number} (@@ -{line})" if number else f"hunk at line {line}"


def hunk_starts(patch_text: str) -> dict[str, list[int]]:
    """Old-file start line of each hunk, per file, in a unified diff."""
    starts: dict[str, list[int]] = {}
    current = None
    for line in patch_text.splitlines():
        if line.startswith("--- "):
            current = None if line == "--- /dev/null" else line[len("--- a/") :]
        elif line.startswith("+++ ") and current is None:
            current = line[len("+++ b/") :]
        elif line.startswith("@@ ") and current is not None:
            starts.setdefault(current, []).append(int(line.split()[1].lstrip("-").split(",")[0]))
    return starts


# ---- the checkout on disk -------------------------------------------------------


def state_file(checkout: Path) -> Path:
    return checkout / ".git" / "kit-state.json"


def read_state(checkout: Path) -> State | None:
    f = state_file(checkout)
    if not f.is_file():
        return None
    return State(**json.loads(f.read_text(encoding="utf-8")))


def write_state(checkout: Path, state: State) -> None:
    state_file(checkout).write_text(json.dumps(asdict(state), indent=2, sort_keys=True) + "\n", encoding="utf-8")


def head(checkout: Path) -> str:
    return git("rev-parse", "HEAD", cwd=checkout).strip()


def am_in_progress(checkout: Path) -> bool:
    return (checkout / ".git" / "rebase-apply").exists()


def dirty_paths(checkout: Path) -> list[str]:
    return [line[3:] for line in git("status", "--porcelain", cwd=checkout).splitlines()]


def guard_local_edits(checkout: Path, state: State | None) -> None:
    """Refuse to discard work that exists only in the checkout."""
    if not (checkout / ".git").is_dir():
        return
    where = f"{checkout.parent.name}/{checkout.name}"
    if am_in_progress(checkout):
        raise LocalEdits(
            f"{where} is in the middle of a git am",
            "finish it (git am --continue, then nox -s refresh) or rerun apply with --force to discard it",
        )
    if dirty_paths(checkout):
        raise LocalEdits(
            f"{where} has uncommitted edits ({', '.join(dirty_paths(checkout)[:3])})",
            "commit them and run nox -s refresh to keep them, or rerun apply with --force to discard them",
        )
    if state is not None and head(checkout) != state.head:
        raise LocalEdits(
            f"{where} has commits that are not exported to patches/",
            "run nox -s refresh to keep them, or rerun apply with --force to discard them",
        )


def wheel_date(wheel: Path) -> str:
    """The newest entry date of the wheel: a fixed, meaningful date for the pristine commit."""
    with zipfile.ZipFile(wheel) as zf:
        newest = max(info.date_time for info in zf.infolist())
    return datetime(*newest, tzinfo=timezone.utc).isoformat()


def build_pristine(pin: Pin, dest: Path, downloads: Path, progress: Progress) -> str:
    """A new repository at dest whose first commit is the pristine pin, tagged; returns the commit."""
    if pin.source == "git":
        progress(f"fetching {pin.git_url} at {pin.git_commit[:12]}")
        commit = pinmod.fetch_git(pin, dest)
        git("checkout", "-q", "-b", BRANCH, cwd=dest)
    else:
        wheel = pinmod.fetch_wheel(pin, downloads)
        progress(f"{wheel.name}: sha256 verified, extracting")
        dest.mkdir(parents=True)
        pinmod.extract_wheel(wheel, dest)
        git("init", "-q", "-b", BRANCH, cwd=dest)
        git("add", "-A", cwd=dest)
        date = wheel_date(wheel)
        message = f"{pin.project} {pin.version}, pristine\n\nFrom {wheel.name}, sha256 {pin.wheel_sha256}.\n"
        git("commit", "-q", "--no-verify", "-m", message, cwd=dest,
            env={**KIT_IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})  # fmt: skip
        commit = head(dest)
    git("tag", "-f", PRISTINE_TAG, commit, cwd=dest)
    return commit


def export_tree(checkout: Path, rev: str, dest: Path) -> None:
    """A plain copy of the tree at rev (e.g. the pristine tree for side-by-side tests)."""
    data = git_bytes("archive", "--format=tar", rev, cwd=checkout)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(dest, filter="data")


def reset_to_pristine(checkout: Path) -> None:
    if am_in_progress(checkout):
        git("am", "--abort", cwd=checkout)
    git("checkout", "-q", "-f", "-B", BRANCH, PRISTINE_TAG, cwd=checkout)
    git("clean", "-qfdx", cwd=checkout)


def prepare_checkout(pin: Pin, checkout: Path, downloads: Path, progress: Progress) -> str:
    """Reset a matching checkout to pristine, or build a new one beside it and swap it in."""
    state = read_state(checkout)
    if state is not None and state.pin_digest == pin_digest(pin) and state.pin == pin.label:
        reset_to_pristine(checkout)
        progress(f"reusing pristine {pin.label} at {state.pristine_commit[:12]}")
        return state.pristine_commit
    staging = checkout.with_name(f".{checkout.name}.new")
    if staging.exists():
        shutil.rmtree(staging)
    try:
        commit = build_pristine(pin, staging, downloads, progress)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if checkout.exists():
        shutil.rmtree(checkout)
    staging.rename(checkout)
    progress(f"pristine {pin.label} committed as {commit[:12]}, tagged {PRISTINE_TAG}")
    return commit


def apply_one(checkout: Path, patch: Patch, threeway: bool) -> PatchResult:
    """git am one patch; a failure leaves the am in progress, as git does, for the user to resolve."""
    probe = git_run("apply", "--check", "-v", str(patch.path), cwd=checkout)
    am = ["am", "-q", "-k", "--committer-date-is-author-date", *(["-3"] if threeway else []), str(patch.path)]
    if git_run(*am, cwd=checkout, env=KIT_IDENTITY).returncode != 0:
        file, hunk = failed_hunk(probe.stderr, patch.text)
        return PatchResult(patch.name, "conflict", f"{file} {hunk}")
    if probe.returncode != 0:
        return PatchResult(patch.name, "3-way", "context differed; merged with --3way")
    offs = offsets_in(probe.stderr)
    return PatchResult(patch.name, "offset", "; ".join(offs)) if offs else PatchResult(patch.name, "clean")


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
    """Pristine pin, then every patch in order. Raises PatchConflict on the first that fails."""
    state = read_state(checkout)
    if not force:
        guard_local_edits(checkout, state)
    pristine = prepare_checkout(pin, checkout, downloads, progress)
    results: list[PatchResult] = []
    for i, patch in enumerate(patches, 1):
        result = apply_one(checkout, patch, threeway)
        results.append(result)
        progress(f"[{i}/{len(patches)}] {patch.name}: {result.outcome}{f' ({result.detail})' if result.detail else ''}")
        if result.outcome == "conflict":
            break
    conflict = next((r for r in results if r.outcome == "conflict"), None)
    write_state(
        checkout,
        State(
            pin=pin.label,
            pin_digest=pin_digest(pin),
            pristine_commit=pristine,
            series_digest=series_digest(patches),
            patches={p.name: sha256_text(p.text) for p in patches},
            head=head(checkout),
            status="conflict" if conflict else "applied",
            failed_patch=conflict.name if conflict else None,
            offsets={r.name: [r.detail] for r in results if r.outcome == "offset"},
        ),
    )
    if conflict:
        raise PatchConflict(
            f"patch {conflict.name} does not apply: {conflict.detail}",
            f"resolve it in {checkout.parent.name}/{checkout.name} (git am --show-current-patch; fix; git am "
            "--continue; nox -s refresh), or retry with: nox -s apply -- --3way",
        )
    return results


def verify_current(checkout: Path, pin: Pin, patches: list[Patch]) -> State:
    """The checkout's state if it is exactly pin + patches/, else a StaleCheckout/LocalEdits error."""
    where = f"{checkout.parent.name}/{checkout.name}"
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    if state is None:
        raise StaleCheckout(f"no checkout at {where}", "run: nox -s apply")
    if state.status != "applied":
        raise StaleCheckout(f"{where} stopped at patch {state.failed_patch}", "resolve it, or run: nox -s apply")
    if state.pin != pin.label or state.pin_digest != pin_digest(pin):
        raise StaleCheckout(f"{where} was built from {state.pin}, the pin is now {pin.label}", "run: nox -s apply")
    if state.series_digest != series_digest(patches):
        changed = sorted(set(state.patches.items()) ^ {(p.name, sha256_text(p.text)) for p in patches})
        raise StaleCheckout(f"{where} does not match patches/ (differs in {changed[0][0]})", "run: nox -s apply")
    guard_local_edits(checkout, state)
    return state


def combined_diff(checkout: Path) -> str:
    """pristine..HEAD as one diff: line numbers are those of the final patched tree."""
    return git("diff", "--no-renames", "--no-color", "--src-prefix=a/", "--dst-prefix=b/", PRISTINE_TAG, "HEAD",
               cwd=checkout)  # fmt: skip


# ---- refresh --------------------------------------------------------------------


def export_commits(checkout: Path) -> list[tuple[str, str]]:
    """(file name, format-patch text) for each commit after pristine, in order."""
    commits = git("rev-list", "--reverse", f"{PRISTINE_TAG}..HEAD", cwd=checkout).split()
    exported = []
    for i, commit in enumerate(commits, 1):
        text = git(*FORMAT_PATCH, "-1", commit, cwd=checkout)
        name = patch_file_name(i, "pending")
        patch = describe(f"commit {commit[:12]}", text, checkout / name)
        exported.append((patch_file_name(i, patch.slug), text))
    return exported


def autosquash(checkout: Path) -> bool:
    """Fold `git commit --fixup/--squash` commits into their targets; True if there were any."""
    subjects = git("log", "--format=%s", f"{PRISTINE_TAG}..HEAD", cwd=checkout).splitlines()
    if not any(s.startswith(("fixup! ", "squash! ", "amend! ")) for s in subjects):
        return False
    git("rebase", "-q", "-i", "--autosquash", "--committer-date-is-author-date", PRISTINE_TAG, cwd=checkout,
        env={**KIT_IDENTITY, "GIT_SEQUENCE_EDITOR": "true", "GIT_EDITOR": "true"})  # fmt: skip
    return True


def refresh(checkout: Path, patches_dir: Path, old: list[Patch], *, progress: Progress) -> list[tuple[str, str]]:
    """Write the checkout's commits back to patches/ byte-stably; returns (name, outcome) rows."""
    state = read_state(checkout) if (checkout / ".git").is_dir() else None
    where = f"{checkout.parent.name}/{checkout.name}"
    if state is None:
        raise StaleCheckout(f"no checkout at {where}", "run: nox -s apply")
    if am_in_progress(checkout):
        raise LocalEdits(f"{where} is in the middle of a git am", "finish it with git am --continue first")
    if dirty_paths(checkout):
        raise LocalEdits(f"{where} has uncommitted edits", "commit them (git commit or git commit --fixup) first")
    if autosquash(checkout):
        progress("folded fixup!/squash! commits into their targets")
    exported = export_commits(checkout)
    old_texts = {p.name: p.text for p in old}
    rows = []
    for name, text in exported:
        outcome = "unchanged" if old_texts.get(name) == text else ("updated" if name in old_texts else "new")
        if outcome != "unchanged":
            (patches_dir / name).write_text(text, encoding="utf-8")
        rows.append((name, outcome))
        progress(f"{name}: {outcome}")
    kept = {name for name, _ in exported}
    for p in old:
        if p.name not in kept:
            p.path.unlink()
            rows.append((p.name, "removed"))
            progress(f"{p.name}: removed")
    series_file = patches_dir / "series"
    header = series_header(series_file.read_text(encoding="utf-8")) if series_file.is_file() else ""
    series_text = header + "".join(f"{name}\n" for name, _ in exported)
    if not series_file.is_file() or series_file.read_text(encoding="utf-8") != series_text:
        series_file.write_text(series_text, encoding="utf-8")
    new = [describe(name, text, patches_dir / name) for name, text in exported]
    state.series_digest = series_digest(new)
    state.patches = {p.name: sha256_text(p.text) for p in new}
    state.head = head(checkout)
    write_state(checkout, state)
    return rows
