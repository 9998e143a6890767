"""The serve process: its own process group (scripts/procgroup.py), bounded health wait, stop by
group, port checks."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts import procgroup, signals
from scripts.procgroup import group_members

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
        # procgroup.start makes the child the leader of a group with its own pid.
        return self.proc.pid


def start(cmd: Sequence[str], env: Mapping[str, str], log_path: Path) -> Server:
    """Start ``cmd`` in a new session (own process group), output into ``log_path``."""
    with log_path.open("ab") as log:
        proc = procgroup.start(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=dict(env)
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


def stop(server: Server, timeout_s: float) -> list[int]:
    """SIGTERM the whole group, SIGKILL what is left after ``timeout_s``; returns survivors (pids).
    Bounded (timeout_s + 5 s at most) and not cut short by a signal (see scripts.signals.held)."""
    with signals.held():
        procgroup.end(server.proc, timeout_s)
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
