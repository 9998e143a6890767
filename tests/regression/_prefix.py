"""Which patches of the series a checkout holds, and which a test needs: how the suite runs on a prefix
of the series (a stack's PR on the target plus the PRs before it)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


def applied_patches(checkout: Path) -> frozenset[str] | None:
    """The Kit-Patch slugs of the checkout's commits after its ``pristine`` tag: the patches a stack's
    prefix (or the whole series) applied. None where the tree is not a kit checkout (no git, no tag):
    then every test runs, and a test of a patch the tree lacks fails rather than being left out."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    command = ["git", "-C", str(checkout), "log", "--format=%(trailers:key=Kit-Patch,valueonly)"]
    proc = subprocess.run(
        [*command, "pristine..HEAD"], capture_output=True, text=True, env=env, check=False
    )
    if proc.returncode != 0:
        return None
    return frozenset(line.strip() for line in proc.stdout.splitlines() if line.strip())


def needed_patches(item: pytest.Item) -> set[str]:
    """The slugs of every ``needs_patches`` marker on the test (module, class and function)."""
    return {slug for mark in item.iter_markers("needs_patches") for slug in mark.args}
