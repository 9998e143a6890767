"""One lock file per card, so two e2e jobs on one runner never share a card.

Locks are ``flock``s: the kernel drops them when the holder dies, so a killed
job never leaves a stale lock. Cards are taken in ascending order (no deadlock
between overlapping sets). The lock directory must be shared by every job of
the runner (a host path mounted into job containers).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO

from scripts.errors import KitError

POLL_S = 0.5


class CardsBusyError(KitError):
    """Another job holds one of the cards."""


def lock_path(lock_dir: Path, card: int) -> Path:
    return lock_dir / f"npu{card}.lock"


def _take(path: Path, wait_s: float) -> IO[str]:
    handle = path.open("a+")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.seek(0)
                holder = handle.read().strip() or "unknown"
                handle.close()
                raise CardsBusyError(
                    f"{path.stem} is held by another e2e job ({holder})",
                    "wait for it to finish, pass --lock-wait-s, or choose free cards with --cards",
                ) from None
            time.sleep(POLL_S)
            continue
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        handle.flush()
        return handle


@contextmanager
def hold_cards(cards: Sequence[int], lock_dir: Path, wait_s: float) -> Iterator[list[Path]]:
    """Hold every card's lock for the block; all or none."""
    if cards:
        lock_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        taken = []
        for card in sorted(cards):
            path = lock_path(lock_dir, card)
            stack.enter_context(_take(path, wait_s))
            taken.append(path)
        yield taken
