"""The signals that end a run (INT, TERM, HUP, QUIT): one home for how the kit handles them.

The front door turns each into a KeyboardInterrupt naming it, so every `finally` runs; a few
steps that must not be cut in half (renames into patches/, stopping a server) hold them back.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
Handler = Callable[[int, FrameType | None], object]


@contextmanager
def handled(handler: Handler, signals: tuple[signal.Signals, ...] = ENDING) -> Iterator[None]:
    """`handler` for the ending signals inside the block; the previous handlers again after it."""
    previous = {sig: signal.signal(sig, handler) for sig in signals}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


_holding: list[bool] = []  # one entry per held() block open now


def holding() -> bool:
    """Whether a held() block is open: a git started now must not be cut by a Ctrl-C either (gitcmd.spawn)."""
    return bool(_holding)


@contextmanager
def held() -> Iterator[None]:
    """Hold the ending signals back for the block; the first that arrived is raised again after it, to the
    handler there was. (Recorded by a handler, not masked: a mask would pass on to the children started in
    the block, and a server deaf to SIGTERM is what holding guards against.)"""
    arrived: list[int] = []
    _holding.append(True)
    try:
        with handled(lambda signum, _frame: arrived.append(signum)):
            yield
    finally:
        _holding.pop()
        if arrived:
            signal.raise_signal(arrived[0])
