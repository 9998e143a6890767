"""Errors a user can act on: each names the thing that is wrong and the fix."""

from __future__ import annotations


class KitError(Exception):
    """Base of every error the kit reports; printed as one line, exit 2."""

    exit_code = 2

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what} -- {fix}")
        self.what = what
        self.fix = fix
