"""git at the edge: every kit call ignores the user's global/system config, so
results (commit ids, exported patches) do not depend on it, and every call
carries the kit's own identity, so a host where git cannot guess an e-mail
(a container hostname without a domain) can still commit, am and abort.

Every call also ignores hooks (the checkout's own .git/hooks included) and the
variables that point git at another repository (an exported GIT_DIR, e.g. from a
hook of the kit's own repository): the kit's git calls act on the folder they
name, and nothing else. Output is decoded as UTF-8 whatever the locale, keeping
bytes that are not UTF-8 (surrogateescape): file content can be any bytes.

Nothing else of the user's changes what the kit's git writes or reads (invariant 12): git gets an
allow-list of the environment (scripts/childenv.py: no GIT_DIFF_OPTS, GIT_EXTERNAL_DIFF, LANG, TZ,
...), and no global attributes file. The one setting of the user's it honours grants access:
safe.directory from their global and system config, read (only that key) where the checkout is
another user's.

This module is the kit's one git gateway: no other module builds a git command
line (tests/kit/test_gitgateway.py), each calls the operation named here; scripts/gitproc.py
runs the process (signals, a killed git's locks). The one
exception to the isolation, as_user, is named too: the user's own identity and push."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from scripts import childenv, diffparse
from scripts.errors import KitError
from scripts.gitproc import GitMissing as GitMissing  # git's errors come from the gateway
from scripts.gitproc import Stdin, spawn

# A fixed identity for commits the kit makes (with fixed dates, re-applying gives the same ids).
# Explicit env passed by a caller (e.g. the user's identity for the PR branch) takes precedence.
KIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "vLLM-Omni NPU kit",
    "GIT_AUTHOR_EMAIL": "npu-kit@users.noreply.github.com",
    "GIT_COMMITTER_NAME": "vLLM-Omni NPU kit",
    "GIT_COMMITTER_EMAIL": "npu-kit@users.noreply.github.com",
}


def last_line(*outputs: str) -> str:
    """The last non-empty line of the first output that has one: what a tool said last, for a one-line
    error."""
    for text in outputs:
        lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return "no output"


# What git says went wrong, most telling first: a merge conflict names the file, error/fatal the
# rest.
GIT_REASONS = (
    re.compile(r"^CONFLICT [^:]*: .+$", re.M),
    re.compile(r"^(?:error|fatal): .+$", re.M),
)


def git_reason(*outputs: str) -> str:
    """What git said went wrong, in one line: its first CONFLICT line, else error/fatal line, else its
    last line."""
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
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_PREFIX",
    "GIT_GRAFT_FILE",
    "GIT_SHALLOW_FILE",
    "GIT_REPLACE_REF_BASE",
    "GIT_NO_REPLACE_OBJECTS",
    "GIT_QUARANTINE_PATH",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)
CONFIG_ENTRY = re.compile(r"^GIT_CONFIG_(KEY|VALUE)_\d+$")
# Config every kit call carries (as GIT_CONFIG_COUNT/KEY/VALUE): no hook runs, wherever it is
# installed; no automatic maintenance after a commit, am or rebase (`gc --auto` goes on in the
# background, detached, and holds .git locks such as HEAD.lock into the kit's next git: seen after
# an interrupted refresh). No global attributes file ($XDG_CONFIG_HOME/git/attributes is read even
# without a global config: `*.py diff=python` rewrote hunk headers, `*.yaml -diff` made a patch
# binary, `eol=crlf` checked the tree out with CRLF).
KIT_CONFIG = (
    ("core.hooksPath", os.devnull),
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
    ("color.ui", "never"),
    ("core.attributesFile", os.devnull),
)

# Keys a repository's own .git/config may set without changing what the kit's git writes or reads
# (`git init`'s own, who the user is (the kit's gits carry their identity in the environment, which
# wins), where remotes are, the user's tools, and what KIT_CONFIG sets (the command line wins over
# every file)). git offers no way to skip a repository's own config, so any other key (format.*,
# diff.*, core.autocrlf, i18n.*, commit.gpgsign, am.*, include.*, ...) is refused, named, before the
# kit runs a git that would read it (invariant 9).
HARMLESS_CONFIG = (
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.editor",
    "core.pager",
    "core.hookspath",
    "sequence.editor",
    "core.excludesfile",
    "user.*",
    "author.*",
    "committer.*",
    "remote.*",
    "branch.*",
    "url.*",
    "credential.*",
    "http.*",
    "alias.*",
    "pager.*",
    "color.*",
    "diff.tool",
    "diff.guitool",
    "merge.tool",
    "difftool.*",
    "mergetool.*",
    "gc.*",
    "maintenance.*",
    "push.*",
    "advice.*",
    "help.*",
    "init.defaultbranch",
)


# Files of a repository's .git/info/ that git reads besides its commits and config (exclude only
# ignores files).
INFO_FILES = ("attributes", "grafts")


def info_settings(repo: Path) -> list[str]:
    """The INFO_FILES of repo's git folder that hold a line other than a blank one or a # comment."""
    info = repo / ".git" / "info"
    found = []
    for name in INFO_FILES:
        lines = (info / name).read_bytes().splitlines() if (info / name).is_file() else []
        found += (
            [name]
            if any(line.strip() and not line.lstrip().startswith(b"#") for line in lines)
            else []
        )
    return found


def foreign_config(repo: Path) -> list[str]:
    """Keys of repo's own config that could change what the kit's git writes or reads (see
    HARMLESS_CONFIG)."""
    return [
        key
        for key in local_config_keys(repo)
        if not any(fnmatch.fnmatch(key, k) for k in HARMLESS_CONFIG)
    ]


def kit_config_env(granted: tuple[str, ...] = ()) -> dict[str, str]:
    """KIT_CONFIG as GIT_CONFIG_* variables, and a safe.directory entry for each folder in granted."""
    settings = [*KIT_CONFIG, *(("safe.directory", folder) for folder in granted)]
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for i, (key, value) in enumerate(settings):
        env |= {f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": value}
    return env


def git_env(
    extra: dict[str, str] | None = None,
    base: dict[str, str] | None = None,
    granted: tuple[str, ...] = (),
) -> dict[str, str]:
    """The allow-listed part of base (the process environment, scripts/childenv.py), plus the kit's own
    config and identity; granted: the user's safe.directory entries."""
    return {
        **childenv.child_env(base),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_NO_REPLACE_OBJECTS": "1",  # refs/replace/ would show other commits than the checkout's
        **kit_config_env(granted),
        **KIT_IDENTITY,
        **(extra or {}),
    }


def not_locating(base: dict[str, str] | None = None) -> dict[str, str]:
    """base (the process environment) without the variables that point git at another repository or
    config."""
    env = os.environ if base is None else base
    return {k: v for k, v in env.items() if k not in LOCATING and not CONFIG_ENTRY.match(k)}


def decoded(data: bytes) -> str:
    """git's output as text: UTF-8 whatever the locale, other bytes kept (surrogateescape), CRs kept."""
    return data.decode("utf-8", errors="surrogateescape")


def run(
    *args: str, cwd: Path, env: dict[str, str] | None = None, stdin: Stdin = None
) -> subprocess.CompletedProcess[str]:
    # Decoded here rather than in text mode: text mode would also turn CRLF into LF in diffs.
    return as_text(kit_git(args, cwd, env, stdin))


DUBIOUS = b"detected dubious ownership in repository at"


class ForeignOwned(KitError):
    """git refuses a repository another user owns, and the user's config does not declare it safe."""


def kit_git(
    args: tuple[str, ...], cwd: Path, env: dict[str, str] | None, stdin: Stdin
) -> subprocess.CompletedProcess[bytes]:
    """One kit git, with the user's safe.directory entries where the repository is another user's."""
    return spawn(["git", *args], cwd, git_env(env, granted=access_granted(cwd)), stdin)


def access_granted(cwd: Path) -> tuple[str, ...]:
    """The user's safe.directory entries where the repository around cwd is another user's (a CI
    container's mounted checkout; git refuses it, and some commands then act as if there were no
    repository); () where it is the user's own. A repository their config does not declare safe is
    named in one line."""
    top = next(
        (f for f in (cwd.absolute(), *cwd.absolute().parents) if (f / ".git").exists()), None
    )
    if top is None or all(p.stat().st_uid == os.geteuid() for p in (top, top / ".git")):
        return ()
    granted = users_safe_directories(cwd)
    probe = spawn(["git", "rev-parse", "--git-dir"], cwd, git_env(granted=granted))
    if DUBIOUS in probe.stderr:
        raise ForeignOwned(
            f"git refuses {top}: another user owns it, and no safe.directory of your git config "
            "names it",
            f"if you trust it: git config --global --add safe.directory {shlex.quote(str(top))}",
        )
    return granted


def users_safe_directories(cwd: Path) -> tuple[str, ...]:
    """safe.directory as the user's global and system git config set it (the one key of theirs the
    kit's git honours: it grants access and changes no output)."""
    found: list[str] = []
    for scope in ("--system", "--global"):
        proc = spawn(["git", "config", scope, "--get-all", "safe.directory"], cwd, not_locating())
        found += decoded(proc.stdout).splitlines() if proc.returncode == 0 else []
    return tuple(found)


def as_text(proc: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(
        proc.args, proc.returncode, decoded(proc.stdout), decoded(proc.stderr)
    )


def must(proc: subprocess.CompletedProcess[str]) -> str:
    """stdout of a git run that had to succeed; GitFailed (naming the subcommand) when it did not."""
    if proc.returncode != 0:
        raise GitFailed(tuple(proc.args[1:]), proc.stdout, proc.stderr)
    return proc.stdout


def git(*args: str, cwd: Path, env: dict[str, str] | None = None, stdin: Stdin = None) -> str:
    """stdout of a git command that must succeed."""
    return must(run(*args, cwd=cwd, env=env, stdin=stdin))


def git_bytes(*args: str, cwd: Path, stdin: Stdin = None) -> bytes:
    proc = kit_git(args, cwd, None, stdin)
    if proc.returncode != 0:
        raise GitFailed(args, "", decoded(proc.stderr))
    return proc.stdout


def as_user(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """git as the user's own: their global and system config and no KIT_IDENTITY.

    The one exception to the kit's isolated git, for what must be the user's: the identity the PR
    branch is signed off with (user.name/user.email) and the push to their fork (credentials and
    remotes live in their config). The variables that point git at another repository are still
    dropped: these calls act on the folder they name.
    """
    return as_text(spawn(["git", *args], cwd, not_locating()))


# ---- named helpers: what each git call is for --------------------------------------

# Fixed export options: the same commits always give the same bytes, whatever the user's git config.
FORMAT_PATCH = (
    "format-patch",
    "--stdout",
    "-k",
    "--zero-commit",
    "--no-signature",
    "--no-stat",
    "--full-index",
    "--no-renames",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--diff-algorithm=myers",
    "--no-color",
    "--binary",
)


# ---- revisions and refs ---------------------------------------------------------------


def head(repo: Path) -> str:
    return rev_parse(repo, "HEAD")


def rev_parse(repo: Path, rev: str) -> str:
    return git("rev-parse", rev, cwd=repo).strip()


def verify(repo: Path, rev: str) -> str | None:
    """The object id rev names (e.g. "v1^{commit}"), None when it names none."""
    proc = run("rev-parse", "-q", "--verify", rev, cwd=repo)
    return proc.stdout.strip() if proc.returncode == 0 else None


def exists(repo: Path, rev: str) -> bool:
    return verify(repo, rev) is not None


def current_branch(repo: Path) -> str | None:
    """The checked-out branch, None on a detached HEAD."""
    proc = run("symbolic-ref", "-q", "--short", "HEAD", cwd=repo)
    return proc.stdout.strip() if proc.returncode == 0 else None


def toplevel(folder: Path) -> Path | None:
    """The top of the work tree folder is in, None when it is in none."""
    proc = run("rev-parse", "--show-toplevel", cwd=folder)
    return Path(proc.stdout.strip()) if proc.returncode == 0 else None


def git_path(repo: Path, name: str) -> Path:
    """Where git keeps name (e.g. "rebase-apply/final-commit") for the work tree at repo."""
    return repo / git("rev-parse", "--git-path", name, cwd=repo).strip()


def rev_list(repo: Path, revs: str) -> list[str]:
    """Commit ids in revs (e.g. "pristine..HEAD"), oldest first."""
    return git("rev-list", "--reverse", revs, cwd=repo).split()


def merges(repo: Path, revs: str) -> list[str]:
    """Merge commits in revs (e.g. "pristine..HEAD"), oldest first."""
    return git("rev-list", "--reverse", "--merges", revs, cwd=repo).split()


def commits_touching(repo: Path, *paths: str) -> list[str]:
    """Commit ids of HEAD's history that change paths, newest first."""
    return git("log", "--format=%H", "--", *paths, cwd=repo).split()


def is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return run("merge-base", "--is-ancestor", older, newer, cwd=repo).returncode == 0


def tag(repo: Path, name: str, rev: str) -> None:
    git("tag", "-f", name, rev, cwd=repo)


def set_branch(repo: Path, branch: str, rev: str) -> None:
    """Point branch at rev (made or moved; the checked-out branch is never moved this way)."""
    git("branch", "-f", branch, rev, cwd=repo)


def delete_ref(repo: Path, ref: str) -> None:
    """Remove ref where it exists (no error where it does not)."""
    run("update-ref", "-d", ref, cwd=repo)


def update_ref(
    repo: Path, ref: str, new: str, old: str | None = None, message: str | None = None
) -> None:
    """Point ref at new; with old, only if it still points there (a moved ref fails instead)."""
    git(
        "update-ref",
        *(["-m", message] if message else []),
        ref,
        new,
        *([old] if old else []),
        cwd=repo,
    )


# ---- commits, trees and diffs ----------------------------------------------------------


def commit_format(repo: Path, commit: str, fmt: str) -> str:
    """One commit's fields, in `git log --format` placeholders (e.g. "%aI" for its author date)."""
    return git("log", "-1", f"--format={fmt}", commit, cwd=repo)


def messages(repo: Path, revs: str) -> list[tuple[str, str]]:
    """(commit id, message) of each commit in revs, oldest first."""
    out = git("log", "--reverse", "--format=%H%x00%B%x1e", revs, cwd=repo)
    rows = []
    for record in filter(None, (r.strip("\n") for r in out.split("\x1e"))):
        commit, message = record.split("\x00", 1)
        rows.append((commit, message))
    return rows


def cat_commit(repo: Path, rev: str) -> bytes:
    """The raw commit object rev names (headers and message, bytes as stored)."""
    return git_bytes("cat-file", "commit", rev, cwd=repo)


def tree_blobs(repo: Path, rev: str) -> dict[str, str]:
    """Path -> blob id of every file in rev's tree."""
    out = git("ls-tree", "-r", "-z", "--full-tree", rev, cwd=repo)
    return {
        path: meta.split()[2]
        for meta, path in (entry.split("\t", 1) for entry in out.split("\0") if entry)
    }


def names_in(repo: Path, tree: str) -> list[str] | None:
    """The names in a tree (e.g. "HEAD:patches"), None when there is no such tree."""
    proc = run("ls-tree", "--name-only", tree, cwd=repo)
    return proc.stdout.split() if proc.returncode == 0 else None


def blob(repo: Path, rev: str, path: str) -> bytes:
    """The bytes of path at rev (GitFailed when rev has no such file)."""
    return git_bytes("show", f"{rev}:{path}", cwd=repo)


def show_file(repo: Path, rev: str, path: str) -> str | None:
    """The text of path at rev, None when rev has no such file."""
    proc = run("show", f"{rev}:{path}", cwd=repo)
    return proc.stdout if proc.returncode == 0 else None


def changed_in(repo: Path, rev: str) -> list[str]:
    """The files commit rev changes (git's rename detection on: a renamed file is named by its new
    name)."""
    return names(git("show", "-z", "--name-only", "--format=", rev, cwd=repo))


def renamed_in(repo: Path, rev: str) -> dict[str, str]:
    """new name -> old name of each file commit rev renames (git's rename detection, as changed_in
    uses)."""
    return renames(git("show", "-z", "--name-status", "-M", "--format=", rev, cwd=repo))


def renamed_between(repo: Path, old: str, new: str) -> dict[str, str]:
    """new name -> old name of each file renamed from old to new."""
    return renames(git("diff", "-z", "--name-status", "-M", old, new, cwd=repo))


def renames(out: str) -> dict[str, str]:
    """The renames of a -z --name-status listing (status, name; R and C rows carry two names)."""
    fields, found, i = out.strip("\n").split("\0"), {}, 0
    while i < len(fields) - 1:
        status = fields[i].strip("\n")
        if status.startswith("R"):
            found[fields[i + 2]] = fields[i + 1]
        i += 3 if status.startswith(("R", "C")) else 2
    return found


def names(out: str) -> list[str]:
    """File names from a -z listing: as they are (spaces, non-ASCII), never C-quoted, no empty ones."""
    return [name for name in out.strip("\n").split("\0") if name]


def changed_between(repo: Path, old: str, new: str) -> list[str]:
    return names(git("diff", "-z", "--name-only", old, new, cwd=repo))


def unmerged(repo: Path) -> list[str]:
    """Files left with a merge conflict in the index."""
    return names(git("diff", "-z", "--name-only", "--diff-filter=U", cwd=repo))


def has_staged(repo: Path) -> bool:
    """Whether the index differs from HEAD."""
    return run("diff", "--cached", "--quiet", cwd=repo).returncode != 0


# Diffs as patch files read them, whatever the user's config: no colour, no renames, a/ and b/
# prefixes.
DIFF = ("diff", "--no-renames", "--no-color", "--src-prefix=a/", "--dst-prefix=b/")


def diff(repo: Path, old: str, new: str) -> str:
    """old..new as one diff (binary files as git marks them)."""
    return git(*DIFF, old, new, cwd=repo)


def diff_as_text(repo: Path, old: str, new: str) -> bytes:
    """old..new as one diff, every file as text (also those .gitattributes calls binary), no external
    diff."""
    return git_bytes(*DIFF, "--text", "--no-ext-diff", old, new, cwd=repo)


def range_diff(repo: Path, old: str, new: str) -> str:
    """`git range-diff` of two ranges ("base..tip"), matching commits as upstream reviewers would."""
    return git("range-diff", "--no-color", "--creation-factor=95", old, new, cwd=repo)


def commit_everything(repo: Path, message: str, date: str) -> None:
    """Every file of the work tree committed (hooks skipped), authored and committed at date."""
    git("add", "-A", cwd=repo)
    git(
        "commit",
        "-q",
        "--no-verify",
        "-m",
        message,
        cwd=repo,
        env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date},
    )


def recommit(repo: Path, commit: str) -> None:
    """The index committed with commit's message and author; its author date as committer date (stable
    ids)."""
    date = commit_format(repo, commit, "%aI").strip()
    git("commit", "-q", "--no-verify", "-C", commit, cwd=repo, env={"GIT_COMMITTER_DATE": date})


def commit_object(repo: Path, tree: str, parent: str, message: str, env: dict[str, str]) -> str:
    """A new commit object (no ref moves), its message as given, byte for byte; env names who and when."""
    return git(
        "commit-tree", "--no-gpg-sign", tree, "-p", parent, cwd=repo, env=env, stdin=message
    ).strip()


def patch_ids(repo: Path, text: str) -> list[tuple[str, str]]:
    """(`git patch-id --stable`, commit id) for each diff in text (a log with diffs, or one diff: id
    0...)."""
    out = git("patch-id", "--stable", cwd=repo, stdin=text)
    return [(pid, commit) for pid, commit in (line.split() for line in out.splitlines())]


def patch_id(repo: Path, diff_text: str) -> str:
    """The stable patch-id of a diff, "" when it holds no change."""
    found = patch_ids(repo, diff_text)
    return found[0][0] if found else ""


def history_diffs(repo: Path, files: list[str]) -> str:
    """HEAD's whole history touching files, as `commit <id>` lines each followed by its diff (for
    patch_ids)."""
    return git(
        "log",
        "-p",
        "--no-color",
        "--no-renames",
        "--format=commit %H",
        "HEAD",
        "--",
        *files,
        cwd=repo,
    )


def format_patch(repo: Path, commit: str) -> str:
    """One commit as a patch file, with the kit's fixed options (byte-stable; apply with `git am -k`).

    Patch files are UTF-8 text: a commit whose text diff holds other bytes is refused, naming the
    file.
    """
    data = git_bytes(*FORMAT_PATCH, "-1", commit, cwd=repo)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(commit, file_at(data, exc.start)) from None


class NotUtf8(KitError):
    def __init__(self, commit: str, file: str) -> None:
        super().__init__(
            f"commit {commit[:12]} changes {file}, whose diff is not UTF-8 text (patch files are "
            "UTF-8)",
            "make the file UTF-8, or have it travel as binary with the patch: add the line "
            f"'{file} binary' to the "
            "tree's own .gitattributes, commit it with the file (git commit --fixup), then run "
            "refresh again",
        )


def file_at(patch: bytes, offset: int) -> str:
    """The file whose diff holds the byte at offset of a format-patch text ("its message" before any
    diff)."""
    start = patch.rfind(b"\ndiff --git ", 0, offset)
    if start < 0:
        return "its message"
    header = patch[start + 1 :].split(b"\n", 1)[0].decode("utf-8", errors="replace")
    return diffparse.git_names(header[len("diff --git ") :])[1]


# ---- applying patches -----------------------------------------------------------------


def apply_check(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git apply --check` (verbose): would the patch apply to the work tree, and how."""
    return run("apply", "--check", "-v", *options, str(patch), cwd=repo)


def applies(repo: Path, text: str, *options: str) -> bool:
    """Whether a diff given as text (e.g. one hunk) would apply to the work tree (-R: reverse-apply)."""
    return run("apply", "--check", *options, "-", cwd=repo, stdin=text).returncode == 0


def apply_to_index(repo: Path, text: str, threeway: bool) -> subprocess.CompletedProcess[str]:
    """A diff given as text applied to the index and work tree (3-way: conflicts left in the files)."""
    return run("apply", "--index", *(["--3way"] if threeway else []), "-", cwd=repo, stdin=text)


def am(repo: Path, patch: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`git am` of one patch file, keeping its subject and author date as the committer date (stable
    ids).

    --keep-cr: the patch's bytes are the change; a file with CRLF endings keeps them (am strips CRs
    by default).
    """
    return run(
        "am",
        "-q",
        "-k",
        "--keep-cr",
        "--committer-date-is-author-date",
        *options,
        str(patch),
        cwd=repo,
    )


def am_continue(repo: Path) -> subprocess.CompletedProcess[str]:
    return run("am", "--continue", cwd=repo)


def abort(repo: Path, operation: str) -> subprocess.CompletedProcess[str]:
    """Undo the paused operation: "am", "rebase", "merge", "cherry-pick", "revert" (--abort) or
    "bisect" (reset)."""
    return run(
        *(("bisect", "reset") if operation == "bisect" else (operation, "--abort")), cwd=repo
    )


def rebase_todo(repo: Path, onto: str, todo: Path) -> subprocess.CompletedProcess[str]:
    """Replay the commits of the todo file (its own list, not git's subject matching) onto onto.

    Empty results are kept (the caller judges them), the committer date is the author date (stable
    ids).
    """
    return run(
        "rebase",
        "-q",
        "-i",
        "--keep-empty",
        "--empty=keep",
        "--no-autosquash",
        "--no-gpg-sign",
        "--committer-date-is-author-date",
        onto,
        cwd=repo,
        env={"GIT_SEQUENCE_EDITOR": f"cp {shlex.quote(str(todo))}", "GIT_EDITOR": "true"},
    )


def rebase_autosquash(repo: Path, onto: str, expected: Path) -> subprocess.CompletedProcess[str]:
    """git's own fold of `fixup!` commits (`rebase -i --autosquash`) onto onto, as rebase_todo keeps
    ids stable. The sequence editor accepts git's todo only where it is the expected one (the kit's
    aim, by commit: `<command> <full id>` lines); otherwise the rebase stops before it starts (exit
    non-zero, nothing changed)."""
    check = (
        "import sys; want = [l.split() for l in open(sys.argv[1]) if l.strip()]; "
        "got = [l.split()[:2] for l in open(sys.argv[2]) if l.strip() and not l.startswith('#')]; "
        "sys.exit(0 if len(want) == len(got) and all(g[0] == w[0] and w[1].startswith(g[1]) "
        "for w, g in zip(want, got)) else 1)"
    )
    editor = f"{shlex.quote(sys.executable)} -c {shlex.quote(check)} {shlex.quote(str(expected))}"
    return run(
        "rebase",
        "-q",
        "-i",
        "--autosquash",
        "--keep-empty",
        "--empty=keep",
        "--no-gpg-sign",
        "--committer-date-is-author-date",
        onto,
        cwd=repo,
        env={"GIT_SEQUENCE_EDITOR": editor, "GIT_EDITOR": "true"},
    )


# ---- work trees ------------------------------------------------------------------------


def init(repo: Path, branch: str | None = None) -> None:
    """A repository at repo (an existing one is left as it is), its first branch named branch."""
    git("init", "-q", *(["-b", branch] if branch else []), cwd=repo)


def start_branch(repo: Path, branch: str, rev: str = "HEAD", force: bool = False) -> None:
    """Check out branch, made or moved to rev (force: local changes are thrown away)."""
    git("checkout", "-q", *(["-f"] if force else []), "-B", branch, rev, cwd=repo)


def switch(repo: Path, branch: str, force: bool = False) -> None:
    git("checkout", "-q", *(["-f"] if force else []), branch, cwd=repo)


def detach(repo: Path, rev: str, force: bool = False) -> None:
    """Check out rev on a detached HEAD (force: local changes are thrown away)."""
    git("checkout", "-q", *(["-f"] if force else []), "--detach", rev, cwd=repo)


def users_excludes(repo: Path) -> tuple[str, ...]:
    """`-c core.excludesFile=<it>` when the user's global config names an excludes file: the kit's git
    reads no global config, but what the user ignores (an editor's .idea/) is theirs to keep, never
    an edit to refuse or clean away. (Without that setting git reads $XDG_CONFIG_HOME/git/ignore, as
    the kit's git does too.)"""
    proc = as_text(
        spawn(
            ["git", "config", "--global", "--path", "--get", "core.excludesFile"],
            repo,
            not_locating(),
        )
    )
    path = proc.stdout.strip()
    return ("-c", f"core.excludesFile={path}") if proc.returncode == 0 and path else ()


def clean(repo: Path) -> None:
    """Every untracked file removed; ignored ones (the user's excludes, the checkout's own) are kept."""
    git(*users_excludes(repo), "clean", "-qfd", cwd=repo)


def ignored(repo: Path) -> list[str]:
    """Untracked files git ignores in the work tree, a wholly ignored folder as one "name/"."""
    out = git(
        *users_excludes(repo),
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
        "--directory",
        cwd=repo,
    )
    return [name for name in out.split("\0") if name]


def stash_entries(repo: Path) -> int:
    """How many stash entries repo holds."""
    proc = run("rev-list", "--walk-reflogs", "--count", "refs/stash", cwd=repo)
    return int(proc.stdout.strip() or 0) if proc.returncode == 0 else 0


def linked_worktrees(repo: Path) -> list[Path]:
    """The work trees of repo other than its own (`git worktree add` ones), registered there."""
    out = git("worktree", "list", "--porcelain", "-z", cwd=repo)
    paths = [
        Path(field[len("worktree ") :])
        for field in out.split("\0")
        if field.startswith("worktree ")
    ]
    return [p for p in paths if p.resolve() != repo.resolve()]


def refs(repo: Path) -> list[str]:
    """Every ref name in repo (branches, tags, notes, stash, remotes, the kit's own)."""
    return git("for-each-ref", "--format=%(refname)", cwd=repo).split()


def fetch_refs(repo: Path, source: Path, names: list[str]) -> None:
    """The refs named (full names) fetched from source into repo under the same names, forced, with
    their history."""
    if names:
        git(
            "fetch",
            "-q",
            "--no-tags",
            str(source),
            *(f"+{name}:{name}" for name in names),
            cwd=repo,
        )


def local_config_keys(repo: Path) -> list[str]:
    """The keys set in repo's own config file (.git/config; not what it includes), lower-cased as git
    lists them."""
    config = git_path(repo, "config")
    out = (
        git("config", "--file", str(config), "--list", "--name-only", "-z", cwd=repo)
        if config.is_file()
        else ""
    )
    return list(dict.fromkeys(key for key in out.split("\0") if key))


def reset_hard(repo: Path, rev: str = "HEAD") -> None:
    git("reset", "-q", "--hard", rev, cwd=repo)


def status_porcelain(repo: Path) -> list[str]:
    """`git status --porcelain` lines: "XY path" for each changed or untracked file."""
    return git(*users_excludes(repo), "status", "--porcelain", cwd=repo).splitlines()


def archive(repo: Path, rev: str) -> bytes:
    """The tree at rev as a tar archive."""
    return git_bytes("archive", "--format=tar", rev, cwd=repo)


def worktree_add(repo: Path, path: Path, rev: str) -> None:
    """A second, detached work tree of repo at path (forced: a stale registration there is replaced)."""
    git("worktree", "add", "-q", "--detach", "-f", str(path), rev, cwd=repo)


def worktree_remove(repo: Path, path: Path) -> subprocess.CompletedProcess[str]:
    """Remove the work tree at path, also a locked one (fails when path is not registered)."""
    return run("worktree", "remove", "--force", "--force", str(path), cwd=repo)


def worktree_prune(repo: Path) -> None:
    git("worktree", "prune", cwd=repo)


def clone(source: Path, dest: Path, copy_objects: bool = False) -> None:
    """A clone of the repository at source into dest (copy_objects: no hard links into source's
    objects)."""
    git(
        "clone",
        "-q",
        *(["--no-hardlinks"] if copy_objects else []),
        str(source),
        str(dest),
        cwd=dest.parent,
    )


# ---- remotes ---------------------------------------------------------------------------


def ls_remote(url: str, *patterns: str, cwd: Path) -> dict[str, str]:
    """{ref name: commit id} of the refs url advertises that match patterns (peeled tags as
    "<tag>^{}")."""
    out = git("ls-remote", url, *patterns, cwd=cwd)
    return {
        name: commit
        for commit, name in (line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    }


def remote_commit(url: str, ref: str, *, branches: bool, cwd: Path) -> str | None:
    """The commit tag REF (peeled, for annotated tags) or, with branches, branch REF names at url; None
    if neither."""
    names = [
        f"refs/tags/{ref}^{{}}",
        f"refs/tags/{ref}",
        *([f"refs/heads/{ref}", ref] if branches else []),
    ]
    refs = ls_remote(url, *names, cwd=cwd)
    return next((refs[name] for name in names if name in refs), None)


class ServedOther(GitFailed):
    """The server sent another commit than the one asked for."""

    def __init__(self, url: str, got: str, wanted: str) -> None:
        super().__init__(("fetch", url), "", f"{url} served {got}, not {wanted}")
        self.got = got


def fetch_commit(dest: Path, url: str, commit: str, *options: str) -> None:
    """A repository at dest (made if missing) holding one commit fetched from url (FETCH_HEAD);
    GitFailed if it cannot, ServedOther when url sends another commit."""
    dest.mkdir(parents=True, exist_ok=True)
    init(dest)
    git("fetch", "-q", *options, url, commit, cwd=dest)
    got = rev_parse(dest, "FETCH_HEAD")
    if got != commit:
        raise ServedOther(url, got, commit)


def fetch_head(repo: Path, source: Path, ref: str) -> subprocess.CompletedProcess[str]:
    """source's HEAD (and its history) fetched into repo as ref, forced, without tags.
    --update-shallow: a shallow source (a git pin is fetched at depth 1) would otherwise have the
    ref rejected with exit 0."""
    return run(
        "fetch", "-q", "--no-tags", "--update-shallow", str(source), f"+HEAD:{ref}", cwd=repo
    )


def user_config(repo: Path, key: str) -> str:
    """The user's own setting of key (e.g. user.email) as seen from repo; "" when unset."""
    return as_user("config", "--get", key, cwd=repo).stdout.strip()


def push(repo: Path, remote: str, refspec: str, *options: str) -> subprocess.CompletedProcess[str]:
    """`git push --porcelain` to the user's remote, with the user's own config (credentials live
    there)."""
    return as_user("push", "--porcelain", *options, remote, refspec, cwd=repo)


def push_atomic(
    repo: Path, remote: str, refspecs: list[str], *options: str
) -> subprocess.CompletedProcess[str]:
    """push() of several refspecs at once, all or none (--atomic)."""
    return as_user("push", "--porcelain", "--atomic", *options, remote, *refspecs, cwd=repo)


def fetch_as_user(repo: Path, remote: str, refspec: str) -> subprocess.CompletedProcess[str]:
    """`git fetch` from the user's remote (their config: credentials), e.g. to show what a fork's
    branch holds."""
    return as_user("fetch", "--quiet", "--no-tags", remote, refspec, cwd=repo)
