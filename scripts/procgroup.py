"""Children in a process group of their own, ended as a group on every way out.

A hook (pre-commit and what it starts), a server or a bench client may start children of its own: ending
only the first process would leave them running, reparented to init. Each child here leads its own
session, so the kit can end everything it started with one signal to the group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any


def start(argv: Sequence[str | bytes], **popen_kwargs: Any) -> subprocess.Popen:
    """argv started as the leader of a session (and process group) of its own."""
    return subprocess.Popen(argv, start_new_session=True, **popen_kwargs)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    # the group may be gone already (every member exited): nothing is left to end
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def end(proc: subprocess.Popen, grace_s: float = 5.0) -> None:
    """TERM to proc's group, up to grace_s for proc to exit, then KILL to the group; proc reaped."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    # members that outlive their leader (or ignore TERM) are ended too
    _signal_group(proc, signal.SIGKILL)
    proc.wait()


def run(
    argv: Sequence[str | bytes],
    *,
    input: bytes | str | None = None,  # noqa: A002 -- subprocess.run's name
    timeout: float | None = None,
    **popen_kwargs: Any,
) -> subprocess.CompletedProcess:
    """subprocess.run in a group of its own: on any exception (a timeout, KeyboardInterrupt from a
    signal) the whole group is ended before the exception goes on."""
    if input is not None and "stdin" not in popen_kwargs:
        popen_kwargs["stdin"] = subprocess.PIPE
    proc = start(argv, **popen_kwargs)
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except BaseException:
        end(proc)
        raise
    # a hook's own children may outlive it (daemons, stray background jobs): none is left behind
    _signal_group(proc, signal.SIGKILL)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
