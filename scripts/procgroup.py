"""Children in a process group of their own, and the end of that whole group on every way out.

A child the kit starts (a git, a hook, the e2e server, the benchmark client, a mutation worker) may
start children of its own; ending only the child leaves those running, reparented to init. start()
makes the child the leader of a new session (its own process group, out of reach of a terminal's
Ctrl-C: the kit decides when it ends), end() ends the group, run() is start and communicate with
end() on every way out (an exception, a timeout, a KeyboardInterrupt from scripts/signals.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scripts import signals

POLL_S = 0.02
# After SIGKILL a member is gone once the kernel has torn it down: bounded, never a hang.
KILLED_GONE_S = 5.0


def start(argv: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Start argv as the leader of a process group of its own (its pid is the group's id)."""
    return subprocess.Popen(list(argv), start_new_session=True, **popen_kwargs)


def group_members(pgid: int, proc_root: Path = Path("/proc")) -> list[int]:
    """Live (not zombie) pids whose process group is pgid, read from /proc."""
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _gone(pgid: int, deadline: float) -> bool:
    """Wait until no live member of the group is left, or the deadline passed (False)."""
    while group_members(pgid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _leader_exited(proc: subprocess.Popen[Any]) -> bool:
    """Whether the leader has exited, without reaping it: an unreaped pid cannot be reused, so the
    group's id still names this group when it is signalled."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def end(proc: subprocess.Popen[Any], grace_s: float = 5.0) -> None:
    """SIGTERM to proc's group, up to grace_s for the group to go, SIGKILL to what is left, reap proc.

    Safe when the group has gone already. A KeyboardInterrupt that arrives meanwhile (a second Ctrl-C)
    does not cut the ending short: it is raised again once the group has gone.
    """
    pgid = proc.pid
    interrupted: KeyboardInterrupt | None = None
    stage = "term"
    while stage != "done":
        try:
            if stage == "term":
                _signal_group(pgid, signal.SIGTERM)
                stage = "grace"
            if stage == "grace":
                deadline = time.monotonic() + grace_s
                while not (_leader_exited(proc) and not group_members(pgid)):
                    if time.monotonic() >= deadline:
                        break
                    time.sleep(POLL_S)
                stage = "kill"
            if stage == "kill":
                # A member that ignored SIGTERM, or outlived its leader: the leader is not reaped
                # yet, so pgid is still this group's.
                if group_members(pgid):
                    _signal_group(pgid, signal.SIGKILL)
                stage = "reap"
            if stage == "reap":
                proc.wait()
                _gone(pgid, time.monotonic() + KILLED_GONE_S)
                stage = "done"
        except KeyboardInterrupt as again:
            interrupted = interrupted or again
    for pipe in (proc.stdin, proc.stdout, proc.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if interrupted is not None:
        raise interrupted


def run(
    argv: Sequence[str],
    *,
    input: Any = None,  # noqa: A002 -- subprocess.run's name for it
    timeout: float | None = None,
    **popen_kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """start() then communicate(); on any way out but the end of the child (an exception, a
    KeyboardInterrupt, subprocess.TimeoutExpired) the whole group is ended, then the exception goes
    on."""
    if input is not None:
        popen_kwargs.setdefault("stdin", subprocess.PIPE)
    arrived: list[int] = []
    proc: subprocess.Popen[Any] | None = None
    try:
        # An ending signal while Popen starts the child would leave it running unwatched: it is
        # taken once proc is known.
        with (
            signals.handled(lambda signum, _frame: arrived.append(signum))
            if signals.can_handle()
            else contextlib.nullcontext()
        ):
            proc = start(argv, **popen_kwargs)
        # to the handler there was: held() records it, the front door raises
        if arrived:
            signal.raise_signal(arrived[0])
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except BaseException:
        if proc is not None:
            end(proc)
        raise
    # The leader ended by itself; a member it left behind still goes with the group.
    if group_members(proc.pid):
        end(proc)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
