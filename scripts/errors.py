"""Errors a user can act on: each names the thing that is wrong and the fix."""

from __future__ import annotations

import errno


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
