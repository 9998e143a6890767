"""The git processes the kit starts, and what they leave when they are killed.

spawn runs one git (gitcmd builds its command line) in a process group of its own
(scripts/procgroup.py), ends that group cleanly when the run ends, and removes the .lock files of a
git a signal killed. A running marker in the git folder tells the next command which locks a killed kit's
git left (kit_own_locks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from scripts import childenv, procgroup, signals
from scripts.errors import KitError


class GitMissing(KitError):
    """git is not installed, or not on PATH."""


Stdin = bytes | str | None


def spawn(
    argv: list[str], cwd: Path, env: dict[str, str], stdin: Stdin = None
) -> subprocess.CompletedProcess[bytes]:
    """One git process; a missing git or working folder is named in one line, not a traceback.

    stdin (text is sent as UTF-8, other bytes kept) is what git reads; without it git reads nothing.
    """
    if shutil.which("git", path=env.get("PATH")) is None:
        raise GitMissing(
            "git was not found on PATH",
            "install git (apt-get install git, dnf install git or brew install git)",
        )
    if not cwd.is_dir():
        raise KitError(
            f"{cwd} is not a folder (git cannot run there)", "run nox -s apply to make it again"
        )
    data = stdin.encode("utf-8", "surrogateescape") if isinstance(stdin, str) else stdin
    arrived: list[int] = []
    proc: subprocess.Popen[bytes] | None = None
    started = time.time()
    marker = running_marker(cwd)
    try:
        # A signal handled while Popen starts git would leave git running unwatched: it is taken
        # after.
        with (
            signals.handled(lambda signum, _frame: arrived.append(signum))
            if signals.can_handle()
            else contextlib.nullcontext()
        ):
            # Its own process group: a terminal's Ctrl-C reaches the kit alone, which ends the git
            # with SIGTERM (git then removes its locks) or, while it holds the ending signals
            # (signals.held), waits it out.
            proc = procgroup.start(
                childenv.encoded_argv(argv),
                cwd=cwd,
                env=childenv.encoded_env(env),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
            )
        # to the handler there was: held() records it, the front door raises
        if arrived:
            signal.raise_signal(arrived[0])
        stdout, stderr = proc.communicate(data)
    except BaseException:
        # Also when the signal came as the handlers were put back. SIGTERM, which git answers by
        # removing its .lock files, where the SIGKILL of subprocess.run's clean-up would leave them
        # (seen: HEAD.lock and index.lock after a Ctrl-C, and the next command refused); a second
        # Ctrl-C waits too.
        if proc is not None:
            procgroup.end(proc, GIT_GRACE_S)
        raise
    finally:
        if proc is not None:
            clear_locks_of_a_killed_git(proc, cwd, started)
        if marker is not None:
            marker.unlink(missing_ok=True)
    return subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr)


# A git answers SIGTERM at once; one that does not within this is killed (its locks: below).
GIT_GRACE_S = 5.0
# + the kit's pid: in the git folder while a git of that kit process runs there
RUNNING = "kit-git-running."


def running_marker(cwd: Path) -> Path | None:
    """Say in cwd's git folder that a git of this kit process runs there (made before git starts,
    removed after it ended). A kill -9 of the kit and its git leaves it, and so tells the next
    command which lock files are the kit's own (made since) and which another git's (kit_own_locks).
    None where cwd has no git folder yet."""
    folders = git_dirs(cwd)
    if not folders:
        return None
    marker = folders[-1] / f"{RUNNING}{os.getpid()}"
    try:
        marker.touch()
    except OSError:  # a read-only repository: it can hold no lock of ours either
        return None
    return marker


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def kit_own_locks(repo: Path) -> tuple[list[Path], list[Path], list[Path]]:
    """(lock files a killed kit's git left, the markers that say so, lock files of another git) in
    repo's git folders. A lock is the kit's own when a dead kit process's marker is older than it,
    or under refs/kit/; a live kit process's (a lint reading beside this one) locks are neither:
    they go with their git."""
    folders = git_dirs(repo)
    markers = [m for f in folders for m in f.glob(f"{RUNNING}*")]
    pids = {
        m: int(m.name[len(RUNNING) :]) if m.name[len(RUNNING) :].isdigit() else 0 for m in markers
    }
    dead = [m for m in markers if pids[m] != os.getpid() and not alive(pids[m])]
    if any(pids[m] != os.getpid() and m not in dead for m in markers):
        return [], dead, []
    since = min((m.stat().st_mtime for m in dead), default=None)
    own, other = [], []
    for folder in folders:
        for lock in lock_files(folder):
            with contextlib.suppress(OSError):
                made = lock.stat().st_mtime
                kits = lock.is_relative_to(folder / "refs" / "kit")  # no one else writes refs/kit/
                (
                    own
                    if kits or (since is not None and made >= since - LOCK_CLOCK_SLACK_S)
                    else other
                ).append(lock)
    return own, dead, other


def clear_locks_of_a_killed_git(proc: subprocess.Popen[bytes], cwd: Path, started: float) -> None:
    """A git ended by a signal can leave its .lock files (measured: SIGINT at a random moment of `git
    status` left index.lock 47 times in 600), and the next git then refuses the repository. The
    kit's gits run one at a time, so a lock made since this one started is its own: removed. (A git
    the user ran in the same checkout at the same moment is the one case this would misjudge; the
    kit's work lock keeps its own out.)"""
    if proc.returncode is None or proc.returncode >= 0:
        return
    for folder in git_dirs(cwd):
        for lock in lock_files(folder):
            with contextlib.suppress(OSError):
                if lock.stat().st_mtime >= started - LOCK_CLOCK_SLACK_S:
                    lock.unlink()


LOCK_CLOCK_SLACK_S = 0.05  # file times come from a coarse kernel clock, a few ms behind time.time()


def git_dirs(cwd: Path) -> list[Path]:
    """The git folders a git run in cwd writes to: .git, or a worktree's own folder and the common one."""
    dot_git = cwd / ".git"
    if dot_git.is_dir():
        return [dot_git]
    try:
        own = Path(dot_git.read_text(encoding="utf-8").removeprefix("gitdir:").strip())
        common = own / (own / "commondir").read_text(encoding="utf-8").strip()
    except OSError:
        return []
    return [own, common.resolve()]


def lock_files(folder: Path) -> list[Path]:
    """*.lock in a git folder, its refs and its worktrees' folders (not under objects/: only its top)."""
    found = (
        list(folder.glob("*.lock"))
        + list(folder.glob("objects/*.lock"))
        + list(folder.glob("worktrees/*/*.lock"))
    )
    return found + list((folder / "refs").rglob("*.lock"))
