"""git at the edge: every kit call ignores the user's global/system config, so
results (commit ids, exported patches) do not depend on it, and every call
carries the kit's own identity, so a host where git cannot guess an e-mail
(a container hostname without a domain) can still commit, am and abort."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from scripts.errors import KitError

# A fixed identity for commits the kit makes (with fixed dates, re-applying gives the same ids).
# Explicit env passed by a caller (e.g. the user's identity for the PR branch) takes precedence.
KIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "vLLM-Omni NPU kit",
    "GIT_AUTHOR_EMAIL": "npu-kit@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "vLLM-Omni NPU kit",
    "GIT_COMMITTER_EMAIL": "npu-kit@users.noreply.github.com",
}


def last_line(*outputs: str) -> str:
    """The last non-empty line of the first output that has one: what a tool said last, for a one-line error."""
    for text in outputs:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return "no output"


class GitFailed(KitError):
    def __init__(self, args: tuple[str, ...], stdout: str, stderr: str) -> None:
        what = f"git {' '.join(args[:2])} failed: {last_line(stderr, stdout)}"
        super().__init__(what, "see git's message; nothing else was changed")
        self.stdout = stdout
        self.stderr = stderr


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **KIT_IDENTITY,
        **(extra or {}),
    }


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=cwd, env=git_env(env), capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """stdout of a git command that must succeed."""
    proc = run(*args, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise GitFailed(args, proc.stdout, proc.stderr)
    return proc.stdout


def git_bytes(*args: str, cwd: Path) -> bytes:
    proc = subprocess.run(["git", *args], cwd=cwd, env=git_env(), capture_output=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise GitFailed(args, "", proc.stderr.decode(errors="replace"))
    return proc.stdout


# ---- named helpers: what each git call is for --------------------------------------

# Fixed export options: the same commits always give the same bytes, whatever the user's git config.
FORMAT_PATCH = (
    "format-patch", "--stdout", "-k", "--zero-commit", "--no-signature", "--no-stat", "--full-index",
    "--no-renames", "--src-prefix=a/", "--dst-prefix=b/", "--diff-algorithm=myers", "--no-color", "--binary",
)  # fmt: skip


def head(repo: Path) -> str:
    return rev_parse(repo, "HEAD")


def rev_parse(repo: Path, rev: str) -> str:
    return git("rev-parse", rev, cwd=repo).strip()


def exists(repo: Path, rev: str) -> bool:
    return run("rev-parse", "-q", "--verify", rev, cwd=repo).returncode == 0


def rev_list(repo: Path, revs: str) -> list[str]:
    """Commit ids in revs (e.g. "pristine..HEAD"), oldest first."""
    return git("rev-list", "--reverse", revs, cwd=repo).split()


def format_patch(repo: Path, commit: str) -> str:
    """One commit as a patch file, with the kit's fixed options (byte-stable; apply with `git am -k`)."""
    return git(*FORMAT_PATCH, "-1", commit, cwd=repo)


def apply_check(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git apply --check` (verbose): would the patch apply to the work tree, and how."""
    return run("apply", "--check", "-v", *options, str(patch), cwd=repo)


def am(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git am` of one patch file, keeping its subject and author date as the committer date (stable ids)."""
    return run("am", "-q", "-k", "--committer-date-is-author-date", *options, str(patch), cwd=repo)


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return run("merge-base", "--is-ancestor", older, newer, cwd=repo).returncode == 0


def fetch_commit(dest: Path, url: str, commit: str, *options: str) -> None:
    """A new repository at dest holding one commit fetched from url (FETCH_HEAD); GitFailed if it cannot."""
    dest.mkdir(parents=True, exist_ok=True)
    git("init", "-q", cwd=dest)
    git("fetch", "-q", *options, url, commit, cwd=dest)
    got = rev_parse(dest, "FETCH_HEAD")
    if got != commit:
        raise GitFailed(("fetch", url), "", f"{url} served {got}, not {commit}")
