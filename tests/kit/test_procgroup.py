"""A child and the grandchild it starts both go on every way out (scripts/procgroup.py): end(), a
KeyboardInterrupt inside run() (a signal to the kit, through the front door's handlers), a timeout.
Liveness is read from /proc, as the kernel sees it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts import procgroup
from scripts.e2e import benchclient, server

# The child starts a grandchild in its own group (a hook's tool, a server's worker), writes both
# pids, then waits; `trap '' TERM` in the ignoring form stands for a child deaf to SIGTERM.
FAMILY = """{trap}sleep 300 & echo "$$ $!" > {pids}.part && mv {pids}.part {pids}; wait"""


def family(pids: Path, deaf: bool = False) -> list[str]:
    return ["sh", "-c", FAMILY.format(trap="trap '' TERM; " if deaf else "", pids=pids)]


def alive(pid: int) -> bool:
    """Whether pid is a live process (a zombie has ended: only its exit status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def wait_pids(pids: Path) -> tuple[int, int]:
    deadline = time.monotonic() + 30
    while not pids.exists():
        assert time.monotonic() < deadline, "the child never wrote its pids"
        time.sleep(0.02)
    child, grandchild = (int(p) for p in pids.read_text().split())
    return child, grandchild


def test_end_leaves_neither_the_child_nor_its_grandchild(tmp_path: Path) -> None:
    proc = procgroup.start(family(tmp_path / "pids"))
    child, grandchild = wait_pids(tmp_path / "pids")
    assert alive(child) and alive(grandchild)
    procgroup.end(proc, grace_s=5.0)
    assert proc.returncode == -signal.SIGTERM
    assert not alive(child) and not alive(grandchild)
    assert procgroup.group_members(proc.pid) == []
    # Safe once gone: a second end() (the caller's finally after run()'s own) changes nothing.
    procgroup.end(proc)


def test_ending_the_child_alone_leaves_the_grandchild_running(tmp_path: Path) -> None:
    """The check above bites: what the four copies did before (the child's own pid only) leaves the
    grandchild, reparented, running."""
    proc = procgroup.start(family(tmp_path / "pids"))
    child, grandchild = wait_pids(tmp_path / "pids")
    proc.terminate()
    proc.wait()
    try:
        assert not alive(child)
        assert alive(grandchild)
    finally:
        procgroup.end(proc)
    assert not alive(grandchild)


def test_a_group_deaf_to_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = procgroup.start(family(tmp_path / "pids", deaf=True))
    child, grandchild = wait_pids(tmp_path / "pids")
    started = time.monotonic()
    procgroup.end(proc, grace_s=0.5)
    assert time.monotonic() - started >= 0.5
    assert proc.returncode == -signal.SIGKILL
    assert not alive(child) and not alive(grandchild)


def test_a_timeout_inside_run_ends_the_group_then_goes_on(tmp_path: Path) -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        procgroup.run(family(tmp_path / "pids"), timeout=1.0)
    child, grandchild = wait_pids(tmp_path / "pids")
    assert not alive(child) and not alive(grandchild)


def test_run_passes_input_and_gives_the_output_and_the_exit_code() -> None:
    done = procgroup.run(
        ["sh", "-c", "cat; exit 3"], input="through\n", stdout=subprocess.PIPE, text=True
    )
    assert (done.returncode, done.stdout) == (3, "through\n")


def test_a_grandchild_left_behind_by_a_child_that_exited_goes_with_the_group(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    done = procgroup.run(
        ["sh", "-c", f'sleep 300 >/dev/null 2>&1 & echo "$$ $!" > {pids}'], stdout=subprocess.PIPE
    )
    assert done.returncode == 0
    _, grandchild = wait_pids(pids)
    assert not alive(grandchild)


# The kit as the front door runs it: SIGTERM to the kit alone (`kill PID`, a CI's cancel) becomes a
# KeyboardInterrupt inside run(); the child's whole group must be gone before the kit goes on.
SIGTERM_INSIDE_RUN = """
import sys
from pathlib import Path
import scripts.__main__ as front
from scripts import procgroup
from scripts.e2e import benchclient, server
front.install_run_handlers()
try:
    procgroup.run(["sh", "-c", sys.argv[1]])
except KeyboardInterrupt as stop:
    print("interrupted", stop, flush=True)
"""


def test_a_keyboard_interrupt_inside_run_ends_the_group_then_goes_on(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = FAMILY.format(trap="", pids=pids)
    kit = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_INSIDE_RUN, script],
        cwd=KIT_ROOT,
        env={**os.environ, "PYTHONPATH": str(KIT_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        child, grandchild = wait_pids(pids)
        kit.send_signal(signal.SIGTERM)
        out, err = kit.communicate(timeout=30)
    finally:
        procgroup.end(kit)
    assert out.strip() == "interrupted SIGTERM", out + err
    assert not alive(child) and not alive(grandchild)


def test_the_e2e_server_and_benchmark_client_end_as_groups(tmp_path: Path) -> None:
    """The e2e's users of the helper: stop() returns no survivor; a client past its wall-clock bound
    is a timeout, its whole group gone."""
    srv = server.start(family(tmp_path / "srv"), dict(os.environ), tmp_path / "server.log")
    child, grandchild = wait_pids(tmp_path / "srv")
    assert server.stop(srv, 2.0) == [] and not alive(child) and not alive(grandchild)
    outcome = benchclient.run(
        family(tmp_path / "bench"), dict(os.environ), tmp_path / "bench.log", 1.0
    )
    assert (outcome.returncode, outcome.timed_out) == (None, True)
    child, grandchild = wait_pids(tmp_path / "bench")
    assert not alive(child) and not alive(grandchild)
