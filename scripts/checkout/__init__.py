"""The working checkout: pristine pin as first commit (tag `pristine`), then one commit per patch in
series order.

One module per job; each imports only those above it:
foreign.py    what the kit did not make: paths under .work/, the user's refs, ignored files, hooks
state.py      the checkout's record of itself (.git/kit-state.json) and what its .git shows
pristine.py   the pristine tree: built from the pin, tagged, exported, diffed against
guards.py     GUARDS: one table of refusals per purpose, each row a condition an Inspection reads
apply.py      apply, --continue, --abort: `git am` per patch, the swap to a new pin, the way back

The record of what was applied lives in the checkout's own .git (kit-state.json),
so it can never outlive or disagree with the checkout it describes. This file holds
what every part shares: the kit's names in the checkout and its errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from scripts.errors import KitError

PRISTINE_TAG = "pristine"
BRANCH = "series"
Progress = Callable[[str], None]


class CheckoutError(KitError):
    """The checkout cannot be used or changed as asked."""


class StaleCheckout(CheckoutError):
    """The checkout does not match the current pin and patches/."""


class LocalEdits(CheckoutError):
    """The checkout holds work that is not in patches/."""


class PatchConflict(CheckoutError):
    """A patch does not apply; the checkout is left mid-`git am` for the user to resolve."""

    exit_code = (
        1  # the work ran and found something, as a conflicting rebase (README, "Exit codes")
    )


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


def shown(checkout: Path) -> str:
    return f"{checkout.parent.name}/{checkout.name}"
