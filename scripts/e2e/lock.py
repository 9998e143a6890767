"""One lock file per card, so two e2e jobs on one runner never share a card.

Locks are ``flock``s (scripts.worklock.locked): the kernel drops them when the holder dies, so a
killed job never leaves a stale lock. Cards are taken in ascending order (no deadlock between
overlapping sets). The lock directory must be shared by every job of the runner (a host path mounted
into job containers).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path

from scripts import worklock
from scripts.errors import KitError

POLL_S = 0.5


class CardsBusyError(KitError):
    """Another job holds one of the cards."""


def lock_path(lock_dir: Path, card: int) -> Path:
    return lock_dir / f"npu{card}.lock"


def _take(path: Path, wait_s: float) -> AbstractContextManager[None]:
    def busy(text: str) -> CardsBusyError:
        return CardsBusyError(
            f"{path.stem} is held by another e2e job ({text.strip() or 'unknown'})",
            "wait for it to finish, pass --lock-wait-s, or choose free cards with --cards",
        )

    stamp = f"pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}"
    return worklock.locked(path, stamp=stamp, wait_s=wait_s, busy=busy, poll_s=POLL_S)


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
