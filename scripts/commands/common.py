"""What several commands share: the checkout's lock, and the state that must match pin and patches/."""

from __future__ import annotations

import contextlib

from scripts import worklock
from scripts.checkout.guards import verify_current
from scripts.checkout.state import State
from scripts.pin import load_pin
from scripts.report import progress
from scripts.series import load_series
from scripts.workspace import Workspace


def checkout_lock(
    ws: Workspace, *, shared: bool = False
) -> contextlib.AbstractContextManager[None]:
    """The checkout's lock: apply/refresh/pr write (exclusive), lint/test read (shared)."""
    return worklock.hold(
        ws.locks / f"{ws.checkout.name}.lock",
        f".work/{ws.checkout.name}",
        shared=shared,
        say=progress,
    )


def current(ws: Workspace) -> State:
    """The checkout's state, refusing one that does not match the pin and patches/."""
    return verify_current(ws.checkout, load_pin(ws.pin_file), load_series(ws.patches))
