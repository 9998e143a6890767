"""The signals that end a run (INT, TERM, HUP, QUIT): one home for how the kit handles them.

The front door turns each into a KeyboardInterrupt naming it, so every `finally` runs; a few
steps that must not be cut in half (renames into patches/, stopping a server) hold them back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

ENDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
Handler = Callable[[int, FrameType | None], object]


@contextmanager
def handled(handler: Handler, signals: tuple[signal.Signals, ...] = ENDING) -> Iterator[None]:
    """`handler` for the ending signals inside the block; the previous handlers again after it."""
    previous = {sig: signal.signal(sig, handler) for sig in takeable(signals)}
    try:
        yield
    finally:
        put_back(list(previous.items()))


def put_back(pending: list[tuple[int, signal.Handlers | Handler | int | None]]) -> None:
    """Restore every handler, even when one restored already raises (a signal that came meanwhile): a
    handler left behind would swallow that signal from then on. The first such exception is raised
    after."""
    first: BaseException | None = None
    while pending:
        try:
            while pending:
                sig, old = pending[0]
                # None: a handler not set from Python, which cannot be set back from it
                if old is not None:
                    signal.signal(sig, old)
                pending.pop(0)
        except BaseException as exc:  # noqa: BLE001 -- kept, raised once all are back
            first = first or exc
    if first is not None:
        raise first


def takeable(signals: tuple[signal.Signals, ...] = ENDING) -> list[signal.Signals]:
    """The signals not ignored: one the kit was started ignoring (SIGHUP under nohup, SIGINT and
    SIGQUIT in a script's background job) stays ignored, by the kit and by the gits it starts, which
    inherit the setting."""
    return [sig for sig in signals if signal.getsignal(sig) is not signal.SIG_IGN]


def can_handle() -> bool:
    """Whether this thread may set handlers (Python runs them in the main thread only)."""
    return threading.current_thread() is threading.main_thread()


_holding: list[bool] = []  # one entry per held() block open now


def holding() -> bool:
    """Whether a held() block is open: a git started now must not be cut by a Ctrl-C either
    (gitproc.spawn)."""
    return bool(_holding)


@contextmanager
def held() -> Iterator[None]:
    """Hold the ending signals back for the block; the first that arrived is raised again after it, to
    the handler there was. (Recorded by a handler, not masked: a mask would pass on to the children
    started in the block, and a server deaf to SIGTERM is what holding guards against.)"""
    arrived: list[int] = []
    _holding.append(True)
    try:
        with handled(lambda signum, _frame: arrived.append(signum)):
            yield
    finally:
        _holding.pop()
        if arrived:
            signal.raise_signal(arrived[0])
