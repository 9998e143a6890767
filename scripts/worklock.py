"""One lock per thing the kit writes (the checkout, the download cache), taken by
every command that uses it: writers exclusively, readers (lint, test) shared.

A second caller waits, saying once for whom (pid and command, read from the
lock file), and gives up with that same line after KIT_LOCK_TIMEOUT seconds.
flock(2) locks die with their process, so a crashed holder never blocks anyone. The same lock
tells the scratch folder of a live run from one a killed run left (scratch, sweep_scratch).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from scripts.errors import KitError

DEFAULT_TIMEOUT_S = 600.0
MAX_TIMEOUT_S = 86400.0  # a day: longer is a typo (or nan/inf), and would wait forever in effect
POLL_S = 0.2


class Busy(KitError):
    """Another kit process holds the lock for too long."""


class BadTimeout(KitError):
    """KIT_LOCK_TIMEOUT is not a usable number of seconds."""


def parse_timeout(raw: str) -> float:
    """Seconds to wait for a lock, from KIT_LOCK_TIMEOUT's text ("" is the default); BadTimeout outside
    0..a day."""
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= MAX_TIMEOUT_S:  # also false for nan
        raise BadTimeout(
            f"KIT_LOCK_TIMEOUT={raw!r} is not a number of seconds from 0 to {MAX_TIMEOUT_S:.0f}",
            f"set it to e.g. {DEFAULT_TIMEOUT_S:.0f}, or unset it",
        )
    return value


def timeout_s() -> float:
    return parse_timeout(os.environ.get("KIT_LOCK_TIMEOUT", ""))


def holder_line(text: str) -> str:
    """Who holds a lock, from what the holder wrote into the lock file: a file anyone can write, so
    shown as printable text of one short line (never a terminal's escape sequence)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    shown = "".join(c if c.isprintable() else "?" for c in line[:120])
    return shown or "another kit process"


def me_line() -> str:
    """What a kit process writes into a lock it holds: pid and command."""
    return f"pid {os.getpid()} ({' '.join(['kit', *sys.argv[1:2]]) if sys.argv[1:] else 'kit'})"


@contextlib.contextmanager
def locked(
    lock_file: Path,
    *,
    stamp: str,
    wait_s: float | None,
    busy: Callable[[str], Exception] | None = None,
    shared: bool = False,
    on_wait: Callable[[str], None] | None = None,
    poll_s: float = POLL_S,
) -> Iterator[None]:
    """The kit's one flock: hold lock_file (exclusive, or shared with other readers) for the block.

    wait_s: 0 tries once, None waits for good; past it `busy(text)` is raised (by default Busy
    naming the file), text being what the holder wrote into the file. on_wait(text) is told
    once, when the lock is first found taken. Once held, the file says `stamp`, for whoever
    waits next.
    """
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    with open(lock_file, "a+", encoding="utf-8") as handle:
        deadline, told = None if wait_s is None else time.monotonic() + wait_s, False
        while True:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                handle.seek(0)
                text = handle.read()
                if deadline is not None and time.monotonic() >= deadline:
                    if busy:
                        raise busy(text) from None
                    raise Busy(
                        f"{lock_file.name} is in use by {holder_line(text)}",
                        "wait for it to finish",
                    ) from None
                if on_wait and not told:
                    on_wait(text)
                    told = True
                time.sleep(poll_s)
        handle.seek(0)
        handle.truncate()
        handle.write(f"{stamp}\n")
        handle.flush()
        yield  # the lock goes with the file handle


def hold(
    lock_file: Path, what: str, *, shared: bool = False, say: Callable[[str], None]
) -> contextlib.AbstractContextManager[None]:
    """Hold one of the kit's work locks, waiting up to KIT_LOCK_TIMEOUT and saying once for whom."""

    def busy(text: str) -> Busy:
        return Busy(
            f"{what} is in use by {holder_line(text)}",
            "wait for it to finish and run again (or raise KIT_LOCK_TIMEOUT)",
        )

    return locked(
        lock_file,
        stamp=me_line(),
        wait_s=timeout_s(),
        busy=busy,
        shared=shared,
        on_wait=lambda text: say(f"waiting for {what}: in use by {holder_line(text)}"),
    )


# ---- scratch folders: held while their run lives, swept once it is gone -------------------------

SCRATCH_LOCK = ".kit-scratch.lock"  # in a scratch folder: flocked by the run that uses it


@contextlib.contextmanager
def scratch(parent: Path, prefix: str) -> Iterator[Path]:
    """A new scratch folder parent/<prefix>XXXXXXXX, held for the block (an flock on its lock file)
    and removed after it. A run killed outright (kill -9) leaves it; its lock then dies with the
    process, and sweep_scratch tells it from the folder of a live run by that lock.

    The lock file gets its name only once it is locked, so a sweep never finds it free in between.
    """
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        making = path / f"{SCRATCH_LOCK}.new"
        with open(making, "a+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            handle.write(f"{me_line()}\n")
            handle.flush()
            os.replace(making, path / SCRATCH_LOCK)
            yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def sweep_scratch(
    parent: Path, prefix: str, is_own: Callable[[Path], bool], say: Callable[[str], None]
) -> list[Path]:
    """Remove the scratch folders parent/<prefix>* that no live run holds: those with a free lock,
    and, without one (made by a kit before the lock), those is_own recognises as the kit's; a folder
    of anyone else's, a link or a held one is left as it is. The removed ones."""
    removed = []
    for path in sorted(parent.glob(f"{prefix}*")):
        if path.is_symlink() or not path.is_dir():
            continue
        lock = path / SCRATCH_LOCK
        if lock.is_file() and not lock.is_symlink():
            with open(lock, "a+", encoding="utf-8") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a live run's
                shutil.rmtree(path, ignore_errors=True)
        elif not lock.exists() and is_own(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            continue
        removed.append(path)
        say(f"removed {parent.name}/{path.name}: the scratch of a kit run that was killed")
    return removed
