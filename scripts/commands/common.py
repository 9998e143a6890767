"""What several commands share: the checkout's lock, and the state that must match pin and patches/."""

from __future__ import annotations

import contextlib

from scripts import checkout as co
from scripts import paths, worklock
from scripts import pin as pinmod
from scripts.report import progress
from scripts.series import load_series


def checkout_lock(*, shared: bool = False) -> contextlib.AbstractContextManager[None]:
    """The checkout's lock: apply/refresh/pr write (exclusive), lint/test read (shared)."""
    return worklock.hold(paths.WORK / "locks" / f"{paths.CHECKOUT.name}.lock", f".work/{paths.CHECKOUT.name}",
                         shared=shared, say=progress)  # fmt: skip


def current() -> co.State:
    """The checkout's state, refusing one that does not match the pin and patches/."""
    return co.verify_current(paths.CHECKOUT, pinmod.load_pin(paths.PIN_FILE), load_series(paths.PATCHES))
