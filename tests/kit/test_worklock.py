"""The kit's one flock (worklock.locked): a try, a timeout, waiting for good, shared readers."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from scripts import worklock


def test_a_try_on_a_held_lock_fails_at_once_naming_the_holder_and_readers_share(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock_file, told, slept = tmp_path / "locks" / "x.lock", [], []
    with worklock.locked(lock_file, stamp="pid 1 (first)", wait_s=None):
        refusal = lambda holder: LookupError(holder.strip())  # noqa: E731  (the caller's own refusal)
        with (
            monkeypatch.context() as patched,
            pytest.raises(LookupError, match=r"^pid 1 \(first\)$"),
        ):
            # at once: it never waits for the holder
            patched.setattr(worklock.time, "sleep", slept.append)
            with worklock.locked(
                lock_file, stamp="second", wait_s=0, busy=refusal, on_wait=told.append
            ):
                pass
        assert slept == [] and told == []  # a try tells no one it waits
        # the wait on a clock of its own: it polls until the deadline, then gives up
        clock = [100.0]

        def sleep(seconds: float) -> None:
            slept.append(seconds)
            clock[0] += seconds

        with (
            monkeypatch.context() as patched,
            pytest.raises(worklock.Busy, match="x.lock is in use by pid 1"),
        ):
            patched.setattr(worklock.time, "monotonic", lambda: clock[0])
            patched.setattr(worklock.time, "sleep", sleep)
            with worklock.locked(lock_file, stamp="third", wait_s=3, poll_s=1, on_wait=told.append):
                pass  # (the default refusal)
        assert slept == [1, 1, 1] and told == ["pid 1 (first)\n"]  # the whole timeout, told once
    with worklock.locked(lock_file, stamp="free", wait_s=0):  # released with its block
        assert lock_file.read_text(encoding="utf-8") == "free\n"
    # shared holders share; a writer waits
    with worklock.locked(lock_file, stamp="r1", wait_s=0, shared=True):
        with (
            worklock.locked(lock_file, stamp="r2", wait_s=0, shared=True),
            pytest.raises(worklock.Busy),
        ):
            with worklock.locked(lock_file, stamp="w", wait_s=0):
                pass


def test_waiting_for_good_takes_the_lock_when_its_holder_lets_go(tmp_path: Path) -> None:
    lock_file, held, told = tmp_path / "x.lock", threading.Event(), []

    def holder() -> None:
        with worklock.locked(lock_file, stamp="holder", wait_s=0):
            held.set()
            time.sleep(0.4)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait()
    with worklock.locked(lock_file, stamp="waiter", wait_s=None, poll_s=0.05, on_wait=told.append):
        assert lock_file.read_text(encoding="utf-8") == "waiter\n"
    thread.join()
    assert told == ["holder\n"]


@pytest.mark.parametrize(
    ("raw", "ok"),
    [(raw, True) for raw in ("", "0", "2.5", "86400")]
    + [(r, False) for r in ("86401", "nan", "inf", "1e309", "-1", "x")],
)
def test_lock_timeout_range(raw: str, ok: bool) -> None:
    if ok:
        assert 0 <= worklock.parse_timeout(raw) <= worklock.MAX_TIMEOUT_S
    else:
        with pytest.raises(worklock.BadTimeout, match="KIT_LOCK_TIMEOUT"):
            worklock.parse_timeout(raw)


def test_a_lock_files_text_is_shown_as_one_printable_line() -> None:
    """Anyone can write a lock file: what it says reaches the user's terminal as printable text only."""
    assert worklock.holder_line("pid 7 (kit refresh)\nmore\n") == "pid 7 (kit refresh)"
    assert worklock.holder_line("pid \x1b]0;owned\x07 7") == "pid ?]0;owned? 7"
    assert len(worklock.holder_line("x" * 1000)) == 120
    assert worklock.holder_line(" \n") == "another kit process"


def test_a_scratch_is_held_while_its_run_lives_and_swept_once_it_is_gone(tmp_path: Path) -> None:
    said: list[str] = []
    with worklock.scratch(tmp_path, ".rebase-") as live:
        assert (live / worklock.SCRATCH_LOCK).is_file()
        assert worklock.sweep_scratch(tmp_path, ".rebase-", lambda _p: True, said.append) == []
        assert live.is_dir()
    assert not live.exists()  # its run removes it
    dead = tmp_path / ".rebase-deadbeef"
    dead.mkdir()
    (dead / worklock.SCRATCH_LOCK).write_text("pid 1 (kit rebase)\n")  # its holder is gone
    mine = tmp_path / ".rebase-mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    assert worklock.sweep_scratch(tmp_path, ".rebase-", lambda _p: False, said.append) == [dead]
    assert mine.is_dir() and len(said) == 1 and ".rebase-deadbeef" in said[0]
