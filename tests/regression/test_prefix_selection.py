"""The suite on a prefix of the series: the patches a checkout holds are its Kit-Patch trailers after the
``pristine`` tag; a tree that is not such a checkout is None (every test runs)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from _prefix import applied_patches

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.org",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org",
}


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, env=GIT_ENV, capture_output=True)


def commit(repo: Path, name: str, message: str) -> None:
    (repo / name).write_text(name, encoding="utf-8")
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message)


def test_the_checkouts_kit_patch_trailers_after_pristine(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "base", "pristine\n\nKit-Patch: not-a-patch")
    git(tmp_path, "tag", "pristine")
    commit(tmp_path, "one", "[NPU] One\n\nUpstream-Status: Pending\nKit-Patch: one")
    commit(
        tmp_path,
        "two",
        "[NPU] Two\n\nKit-Patch: two is text here, not a trailer\n\nUpstream-Status: Pending",
    )
    commit(tmp_path, "three", "[NPU] Three\n\nUpstream-Status: Pending\nKit-Patch: three")
    assert applied_patches(tmp_path) == {"one", "three"}


def test_a_tree_without_a_pristine_tag_is_not_a_kit_checkout(tmp_path: Path) -> None:
    assert applied_patches(tmp_path) is None  # not a git repository
    git(tmp_path, "init", "-q")
    commit(tmp_path, "one", "[NPU] One\n\nKit-Patch: one")
    assert applied_patches(tmp_path) is None  # no pristine tag: every test runs
