"""Errors a user can act on: each names the thing that is wrong and the fix."""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path


class KitError(Exception):
    """Base of every error the kit reports; printed as one line, exit 2."""

    exit_code = 2

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what} -- {fix}")
        self.what = what
        self.fix = fix


def os_fix(exc: OSError, where: str) -> str:
    """What to do about a failed file operation in `where`, by its cause (errno): never "free space"
    for a name."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        return f"free disk space (df -h {where}), then run it again"
    if code in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"make {where} writable (check its permissions and mount), then run it again"
    if code == errno.ENAMETOOLONG:
        return "a file name is too long for the file system: shorten the name the kit was given"
    if code in (errno.ENOENT, errno.ENOTDIR):
        return f"a file or folder is missing in {where}: check the path"
    return f"check {where}: its free space (df -h {where}) and permissions"


def failed_where(exc: OSError, default: str) -> str:
    """The folder a failed file operation names, as the kit was given it: the nearest part of
    exc.filename that exists (what the user can make writable or free), else default."""
    if not exc.filename:
        return default
    path = Path(os.fsdecode(exc.filename))
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return str(candidate) if str(candidate) not in ("", ".") else default
    return default


# pytest's exit codes (pytest.ExitCode, stable since pytest 5): the kit's code and why, in one line.
# 2 is pytest's INTERRUPTED, which it also returns for errors during collection: a Ctrl-C reaches
# the kit itself (one process group), so a 2 the kit sees is a collection error, which the work
# found.
PYTEST_EXITS: dict[int, tuple[int, str, str]] = {
    0: (0, "", ""),
    1: (1, "tests failed (exit 1)", "see pytest's report above"),
    2: (1, "errors during collection (exit 2)", "see pytest's report above"),
    3: (2, "an internal error (exit 3)", "see its traceback above"),
    4: (
        2,
        "refused its command line (exit 4, a usage error)",
        "check the pytest arguments you gave against its message above",
    ),
    5: (
        1,
        "collected no test (exit 5): nothing ran, so nothing passed",
        "check what your -k / test paths select (add --collect-only to list them)",
    ),
}
# Signals that end a run the way Ctrl-C does: the kit's 130.
ENDING = frozenset({"SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"})


class ChildFailed(KitError):
    """A child tool (pytest, a server, a client) ended in a way the kit reports: the README's code
    (1, 2 or 130, by the tool's own table of codes) and one line why."""

    def __init__(self, what: str, fix: str, code: int) -> None:
        super().__init__(what, fix)
        self.exit_code = code


def child_exit(tool: str, rc: int, table: dict[int, tuple[int, str, str]]) -> ChildFailed | None:
    """The one mapping of a child's exit status (rc; negative: the signal that ended it) to the
    kit's exit codes, by the tool's own table; None for its success. A code outside the table is a
    setup error: the kit cannot say what the tool found."""
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else f"signal {-rc}"
        if name in ENDING:
            return ChildFailed(f"{tool} was ended by {name}", "run it again", 130)
        return ChildFailed(
            f"{tool} was killed by {name} (out of memory, or a crash)",
            "see its output above; check free memory (free -h), then run it again",
            2,
        )
    if rc in table:
        code, what, fix = table[rc]
        return ChildFailed(f"{tool}: {what}", fix, code) if code else None
    return ChildFailed(
        f"{tool} exited {rc}, not one of its documented exit codes", "see its output above", 2
    )


def pytest_exit(tool: str, rc: int) -> ChildFailed | None:
    """child_exit for a pytest run (tool names it: "bench's pytest", "leg npu's pytest")."""
    return child_exit(tool, rc, PYTEST_EXITS)


def check_pytest(tool: str, rc: int) -> None:
    """Raise pytest_exit's refusal, if any: the front door prints its line and exits its code."""
    failed = pytest_exit(tool, rc)
    if failed is not None:
        raise failed
