"""`git range-diff` of a previous revision of the series against the new one, as upstream commits."""

from __future__ import annotations

from pathlib import Path

from scripts import gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.apply import commit_all
from scripts.errors import KitError
from scripts.pr.branch import Signer, build_branch
from scripts.series import Patch


class RangeDiffUnavailableError(KitError):
    """The previous revision cannot be rebuilt here."""


def range_diff(
    checkout: Path, new_tip: str, old: list[Patch], signer: Signer, scratch: Path
) -> str:
    """`git range-diff` of the old revision's upstream commits against new_tip, both on the pristine."""
    clone = scratch / "clone"
    gitcmd.clone(checkout, clone)
    gitcmd.start_branch(clone, "old", PRISTINE_TAG)
    commits = commit_all(
        clone,
        old,
        True,
        lambda patch, result: RangeDiffUnavailableError(
            f"the previous revision's {patch.name} does not apply to the current pristine "
            f"({result.detail})",
            "the range-diff is left out; compare the two output folders by hand",
        ),
    )
    old_tip = (
        build_branch(clone, PRISTINE_TAG, commits, signer, "old-upstream")[-1]
        if commits
        else PRISTINE_TAG
    )
    return gitcmd.range_diff(clone, f"{PRISTINE_TAG}..{old_tip}", f"{PRISTINE_TAG}..{new_tip}")
