"""git at the edge: every kit call ignores the user's global/system config, so
results (commit ids, exported patches) do not depend on it, and every call
carries the kit's own identity, so a host where git cannot guess an e-mail
(a container hostname without a domain) can still commit, am and abort.

Every call also ignores hooks (the checkout's own .git/hooks included) and the
variables that point git at another repository (an exported GIT_DIR, e.g. from a
hook of the kit's own repository): the kit's git calls act on the folder they
name, and nothing else. Output is decoded as UTF-8 whatever the locale, keeping
bytes that are not UTF-8 (surrogateescape): file content can be any bytes."""

from __future__ import annotations

import os
import re
import shutil
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


# What git says went wrong, most telling first: a merge conflict names the file, error/fatal the rest.
GIT_REASONS = (re.compile(r"^CONFLICT [^:]*: .+$", re.M), re.compile(r"^(?:error|fatal): .+$", re.M))


def git_reason(*outputs: str) -> str:
    """What git said went wrong, in one line: its first CONFLICT line, else error/fatal line, else its last line."""
    for pattern in GIT_REASONS:
        for text in outputs:
            m = pattern.search(text)
            if m:
                return m[0].strip()
    return last_line(*outputs)


class GitFailed(KitError):
    def __init__(self, args: tuple[str, ...], stdout: str, stderr: str) -> None:
        what = f"git {' '.join(args[:2])} failed: {git_reason(stderr, stdout)}"
        super().__init__(what, "see git's message; nothing else was changed")
        self.stdout = stdout
        self.stderr = stderr


# Variables that make git use another repository, index, object store or config than the
# folder the kit names (`git rev-parse --local-env-vars`, and the discovery ones besides).
LOCATING = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_PREFIX", "GIT_GRAFT_FILE", "GIT_SHALLOW_FILE", "GIT_REPLACE_REF_BASE",
    "GIT_NO_REPLACE_OBJECTS", "GIT_QUARANTINE_PATH", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT",
)  # fmt: skip
CONFIG_ENTRY = re.compile(r"^GIT_CONFIG_(KEY|VALUE)_\d+$")
# Config every kit call carries (as GIT_CONFIG_COUNT/KEY/VALUE): no hook runs, wherever it is installed.
KIT_CONFIG = (("core.hooksPath", os.devnull),)


def kit_config_env() -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(KIT_CONFIG))}
    for i, (key, value) in enumerate(KIT_CONFIG):
        env |= {f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": value}
    return env


def git_env(extra: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    """base (the process environment) without what locates another repository or adds config, plus the kit's own."""
    inherited = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k not in LOCATING and not CONFIG_ENTRY.match(k)
    }
    return {
        **inherited,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        **kit_config_env(),
        **KIT_IDENTITY,
        **(extra or {}),
    }


class GitMissing(KitError):
    """git is not installed, or not on PATH."""


def spawn(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """One git process; a missing git or working folder is named in one line, not a traceback."""
    if shutil.which("git", path=env.get("PATH")) is None:
        raise GitMissing(
            "git was not found on PATH", "install git (apt-get install git, dnf install git or brew install git)"
        )
    if not cwd.is_dir():
        raise KitError(f"{cwd} is not a folder (git cannot run there)", "run nox -s apply to make it again")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL)


def decoded(data: bytes) -> str:
    """git's output as text: UTF-8 whatever the locale, other bytes kept (surrogateescape), CRs kept."""
    return data.decode("utf-8", errors="surrogateescape")


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Decoded here rather than in text mode: text mode would also turn CRLF into LF in diffs.
    proc = spawn(["git", *args], cwd, git_env(env))
    return subprocess.CompletedProcess(proc.args, proc.returncode, decoded(proc.stdout), decoded(proc.stderr))


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """stdout of a git command that must succeed."""
    proc = run(*args, cwd=cwd, env=env)
    if proc.returncode != 0:
        raise GitFailed(args, proc.stdout, proc.stderr)
    return proc.stdout


def git_bytes(*args: str, cwd: Path) -> bytes:
    proc = spawn(["git", *args], cwd, git_env())
    if proc.returncode != 0:
        raise GitFailed(args, "", decoded(proc.stderr))
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
    """One commit as a patch file, with the kit's fixed options (byte-stable; apply with `git am -k`).

    Patch files are UTF-8 text: a commit whose text diff holds other bytes is refused, naming the file.
    """
    data = git_bytes(*FORMAT_PATCH, "-1", commit, cwd=repo)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(commit, file_at(data, exc.start)) from None


class NotUtf8(KitError):
    def __init__(self, commit: str, file: str) -> None:
        super().__init__(
            f"commit {commit[:12]} changes {file}, whose diff is not UTF-8 text (patch files are UTF-8)",
            f"make the file UTF-8, or have git export it as binary: echo '{file} binary' >> .git/info/attributes "
            "in the checkout, then run refresh again",
        )


def file_at(patch: bytes, offset: int) -> str:
    """The file whose diff holds the byte at offset of a format-patch text ("its message" before any diff)."""
    start = patch.rfind(b"\ndiff --git a/", 0, offset)
    if start < 0:
        return "its message"
    header = patch[start + 1 :].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    return header.rsplit(" b/", 1)[-1]


def apply_check(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git apply --check` (verbose): would the patch apply to the work tree, and how."""
    return run("apply", "--check", "-v", *options, str(patch), cwd=repo)


def am(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git am` of one patch file, keeping its subject and author date as the committer date (stable ids).

    --keep-cr: the patch's bytes are the change; a file with CRLF endings keeps them (am strips CRs by default).
    """
    return run("am", "-q", "-k", "--keep-cr", "--committer-date-is-author-date", *options, str(patch), cwd=repo)


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
