"""git at the edge: every kit call ignores the user's global/system config, so
results (commit ids, exported patches) do not depend on it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from scripts.errors import KitError

# A fixed identity and clock for commits the kit makes, so re-applying gives the same ids.
KIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "vLLM-Omni NPU kit",
    "GIT_AUTHOR_EMAIL": "npu-kit@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "vLLM-Omni NPU kit",
    "GIT_COMMITTER_EMAIL": "npu-kit@users.noreply.github.com",
}


class GitFailed(KitError):
    def __init__(self, args: tuple[str, ...], stdout: str, stderr: str) -> None:
        last = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        super().__init__(f"git {' '.join(args[:2])} failed: {last}", "see git's message; nothing else was changed")
        self.stdout = stdout
        self.stderr = stderr


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **(extra or {})}


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, env=git_env(env), capture_output=True, text=True)


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """stdout of a git command that must succeed."""
    proc = run(*args, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise GitFailed(args, proc.stdout, proc.stderr)
    return proc.stdout


def git_bytes(*args: str, cwd: Path) -> bytes:
    proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True)
    if proc.returncode != 0:
        raise GitFailed(args, "", proc.stderr.decode(errors="replace"))
    return proc.stdout
