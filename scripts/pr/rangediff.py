"""The stack's commits on the pristine, and `git range-diff` per PR against a previous revision.

Everything is built in a scratch worktree of the checkout itself, never in a clone: the worktree
shares the checkout's objects, so the review commits (objects no ref names yet) and a shallow
checkout (a git pin fetched at depth 1) are seen as they are. A clone would copy only what refs
reach, and a clone of a shallow repository lacks the review tip (`invalid revision range`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from scripts import gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.apply import commit_all
from scripts.checkout.refresh import drop_worktree
from scripts.errors import KitError
from scripts.pr.branch import Signer, rewrite
from scripts.series import Patch


class RangeDiffUnavailableError(KitError):
    """The previous revision cannot be rebuilt here."""


@contextlib.contextmanager
def scratch_tree(checkout: Path, scratch: Path) -> Iterator[Path]:
    """A detached worktree of the checkout at the pristine commit, removed whatever happens."""
    drop_worktree(checkout, scratch)
    gitcmd.worktree_add(checkout, scratch, PRISTINE_TAG)
    try:
        yield scratch
    finally:
        drop_worktree(checkout, scratch)


def upstream_commits(
    checkout: Path, patches: Sequence[Patch], signer: Signer, scratch: Path, label: str
) -> list[str]:
    """patches applied in order on the pristine (a scratch worktree), then rewritten in upstream's
    form (objects only, in the checkout's object store): one commit per patch."""
    if not patches:
        return []
    with scratch_tree(checkout, scratch) as tree:
        commits = commit_all(
            tree,
            list(patches),
            True,
            lambda patch, result: RangeDiffUnavailableError(
                f"{label}'s {patch.name} does not apply to the current pristine ({result.detail})",
                "compare the two output folders by hand",
            ),
        )
    return rewrite(checkout, PRISTINE_TAG, commits, signer)


def pr_range_diff(
    checkout: Path,
    old: Sequence[Patch],
    before: set[str],
    own: set[str],
    new_range: tuple[str, str],
    signer: Signer,
    scratch: Path,
    label: str,
) -> str:
    """One PR's range-diff: the previous revision's patches of this PR (slugs `own`), rebuilt on its
    patches of the PRs before it (slugs `before`), against the PR's new commits base..tip."""
    prefix = [p for p in old if p.slug in before]
    mine = [p for p in old if p.slug in own]
    if not mine:
        return f"none of its patches was in {label}: all new"
    made = upstream_commits(checkout, [*prefix, *mine], signer, scratch, label)
    old_base = made[len(prefix) - 1] if prefix else PRISTINE_TAG
    return gitcmd.range_diff(
        checkout, f"{old_base}..{made[-1]}", f"{new_range[0]}..{new_range[1]}"
    ).rstrip()
