"""The pristine tree: the pin as the first commit of a new repository (tag `pristine`), checked against
its source, exported as a plain copy, and the series as one diff from it."""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import (
    BRANCH,
    PRISTINE_TAG,
    CheckoutError,
    IncompleteCheckout,
    NotKitMade,
    Progress,
    shown,
)
from scripts.checkout.foreign import GENERATED, KIT_MARK, is_generated, remove_kit_made
from scripts.checkout.state import State, dirty_paths
from scripts.gitcmd import head, tree_blobs
from scripts.pin import Pin, extract_wheel, fetch_git, fetch_wheel, wheel_blobs


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
    (dest / ".git" / "info" / "exclude").write_text(
        "".join(f"{g}\n" for g in GENERATED), encoding="utf-8"
    )


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
        refuse_short_tree(
            dest, tree_differs(wheel_blobs(wheel), tree_blobs(dest, commit)), wheel.name
        )
    refuse_short_tree(dest, dirty_paths(dest), "its commit")
    gitcmd.tag(dest, PRISTINE_TAG, commit)
    return commit


def tree_differs(wanted: dict[str, str], tree: dict[str, str]) -> list[str]:
    """Paths whose blob in tree is missing or not the wanted one (files the kit never commits aside)."""
    return sorted(
        path for path, blob in wanted.items() if tree.get(path) != blob and not is_generated(path)
    )


def refuse_short_tree(repo: Path, differing: list[str], source: str) -> None:
    """A pristine tree that is not all of its source (a disk that filled while it was written) is never
    used."""
    if differing:
        raise IncompleteCheckout(
            f"the pristine tree in {shown(repo)} differs from {source} in {len(differing)} files "
            f"(first: {differing[0]}); the disk may be full",
            f"free disk space on {repo.parent.name}/ (df -h {repo.parent.name}), then run nox -s "
            "apply again",
        )


EXPORTED = (
    ".kit-exported"  # in an exported tree: the tree id it holds, written once all of it is there
)


def refuse_linked(dest: Path) -> None:
    """The copy's folder is the kit's: a link (or a file) there is refused, never written through."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        # the kit writes its copy there, never through a link (or over a file) to somewhere else
        raise NotKitMade(
            f"{dest.parent.name}/{dest.name} is {'a symbolic link' if dest.is_symlink() else 'a file'}"
            ", not the kit's copy of the pristine tree",
            "move it away (the kit never writes through it), then run again",
        )


def export_tree(checkout: Path, rev: str, dest: Path) -> None:
    """A plain copy of the tree at rev (e.g. the pristine tree for side-by-side tests); a copy of that
    same tree, whole, is kept (writing 2k files again was most of an apply that changed nothing)."""
    refuse_linked(dest)
    tree = gitcmd.rev_parse(checkout, f"{rev}^{{tree}}")
    stamp = dest / EXPORTED
    if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == tree:
        return
    data = gitcmd.archive(checkout, rev)
    remove_kit_made(dest) if (dest / ".git").exists() else shutil.rmtree(dest, ignore_errors=True)
    try:
        dest.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
        stamp.write_text(f"{tree}\n", encoding="utf-8")
    except OSError as exc:  # named here: a failed write(2) names no file of its own
        # no partial copy left to be taken for the whole tree
        shutil.rmtree(dest, ignore_errors=True)
        raise CheckoutError(
            f"cannot write {dest.parent.name}/{dest.name} ({exc.strerror or exc})",
            f"free disk space on {dest.parent.name}/ (df -h {dest.parent.name}), then run the "
            "command again",
        ) from None


def retag_pristine(checkout: Path, state: State) -> None:
    """apply --force puts the kit's own pristine tag back where apply made it (the "replace" guard
    names the command to do so without --force), before the state says "applying"."""
    if gitcmd.verify(checkout, f"refs/tags/{PRISTINE_TAG}^{{commit}}") != state.pristine_commit:
        gitcmd.tag(checkout, PRISTINE_TAG, state.pristine_commit)


def combined_diff(checkout: Path) -> str:
    """pristine..HEAD as one diff: line numbers are those of the final patched tree."""
    return gitcmd.diff(checkout, PRISTINE_TAG, "HEAD")
