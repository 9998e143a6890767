"""The serve process: its own process group, bounded health wait, stop by group, port checks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts import signals

POLL_S = 0.25


class ServerDiedError(Exception):
    """The server exited on its own; carries the exit code."""

    def __init__(self, returncode: int) -> None:
        super().__init__(f"server exited with code {returncode}")
        self.returncode = returncode


class ServerUnhealthyError(Exception):
    """No healthy answer within the bound."""


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pgid(self) -> int:
        # start_new_session makes the child the leader of a group with its own pid.
        return self.proc.pid


def start(cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Server:
    """Start ``cmd`` in a new session (own process group), output into ``log_path``."""
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    return Server(proc=proc, log_path=log_path)


def probe_health(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_healthy(server: Server | None, url: str, timeout_s: float) -> float:
    """Seconds until ``url`` answered 200; raises ServerDiedError or ServerUnhealthyError (None:
    started elsewhere)."""
    started = time.monotonic()
    while True:
        code = None if server is None else server.proc.poll()
        if code is not None:
            raise ServerDiedError(code)
        if probe_health(url):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            raise ServerUnhealthyError(f"{url} not healthy after {timeout_s:g} s")
        time.sleep(POLL_S)


def group_members(pgid: int, proc_root: Path = Path("/proc")) -> list[int]:
    """Live (non-zombie) pids whose process group is ``pgid``, read from /proc."""
    members = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command: state ppid pgrp ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(POLL_S)
    return True


def stop(server: Server, timeout_s: float) -> list[int]:
    """SIGTERM the whole group, SIGKILL what is left after ``timeout_s``; returns survivors (pids).
    Bounded (timeout_s + 11 s at most) and not cut short by a signal (see scripts.signals.held)."""
    with signals.held():
        return _stop(server, timeout_s)


def _stop(server: Server, timeout_s: float) -> list[int]:
    _signal_group(server.pgid, signal.SIGTERM)
    try:
        server.proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    if not _wait_group_gone(server.pgid, 1.0):
        _signal_group(server.pgid, signal.SIGKILL)
        _wait_group_gone(server.pgid, 5.0)
    if server.proc.poll() is None:
        server.proc.wait(timeout=5.0)
    return group_members(server.pgid)


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on (host, port); TIME_WAIT leftovers do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
