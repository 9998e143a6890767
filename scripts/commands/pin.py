"""Show the pin, or record the git commit of its tag (checked against the pinned wheel)."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from scripts.commands.common import checkout_lock
from scripts.pin import (
    PinError,
    fetch_git,
    fetch_wheel,
    load_pin,
    record_git_commit,
    resolve_tag,
    wheel_matches_tree,
)
from scripts.report import progress, table
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--record-git", action="store_true", help="resolve git.tag at git.url and write git.commit"
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    if not args.record_git:
        p = load_pin(ws.pin_file)
        print(table(["field", "value"], [(k, v) for k, v in vars(p).items()]))
        return 0
    # a writer of patches/ as refresh and rebase --move are: under the same lock, the pin read
    # once it is held
    with checkout_lock(ws):
        return record_git(ws)


def record_git(ws: Workspace) -> int:
    p = load_pin(ws.pin_file)
    commit = resolve_tag(p.git_url, p.git_tag, ws.root)
    progress(f"{p.git_tag} at {p.git_url} is {commit}; comparing its tree with the pinned wheel")
    with tempfile.TemporaryDirectory() as tmp:
        fetch_git(dataclasses.replace(p, git_commit=commit), Path(tmp) / "src")
        diffs = wheel_matches_tree(fetch_wheel(p, ws.downloads), Path(tmp) / "src")
    if diffs:
        raise PinError(
            f"{p.git_tag} differs from the pinned wheel in {len(diffs)} file(s), e.g. {diffs[0]}",
            "check that the tag names the release the wheel was built from; nothing was written",
        )
    record_git_commit(ws.pin_file, commit)
    progress(f"same files as {p.wheel_filename}; commit written to patches/upstream.toml")
    return 0
