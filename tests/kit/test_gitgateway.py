"""One git gateway: scripts/gitcmd.py is the only module of scripts/ that builds a git command line (a
list or tuple starting with "git", or a call of its raw functions), so every git call of the kit
ignores the user's config, hooks and repository-locating variables in one place; and how that
gateway runs git."""

from __future__ import annotations

import ast
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AUTHOR, KIT_ROOT

from scripts import gitcmd, gitproc
from scripts.gitcmd import LOCATING, git_env
from scripts.pin import git_blob_id

GATEWAY = "gitcmd.py"  # the one module of scripts/ allowed to build git argv
# gitcmd's and gitproc's functions that take git argv
RAW = {"run", "git", "git_bytes", "spawn", "as_user"}
RUNNERS = {"gitcmd", "gitproc"}  # gitproc runs the process gitcmd builds


def argv_findings(source: str, name: str) -> list[str]:
    """`file:line: what` for each git command line a source file builds itself."""
    tree = ast.parse(source)
    runners = {f"scripts.{name}" for name in RUNNERS}
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module in runners]
    # `run as git_run` -> git_run
    raw = {a.asname or a.name for n in imports for a in n.names if a.name in RAW}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        first = node.elts[0] if isinstance(node, ast.List | ast.Tuple) and node.elts else None
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(first, ast.Constant) and first.value == "git":
            found.append((node.lineno, "a command line starting with 'git'"))
        elif isinstance(func, ast.Name) and func.id in raw:
            found.append((node.lineno, f"{func.id}(...) of scripts.gitcmd or gitproc"))
        elif (
            isinstance(func, ast.Attribute)
            and func.attr in RAW
            and (owner := getattr(func.value, "id", None)) in RUNNERS
        ):
            found.append((node.lineno, f"{owner}.{func.attr}(...)"))
    return [f"{name}:{line}: {what}" for line, what in sorted(found)]


def git_argv_outside_gateway(scripts: Path) -> list[str]:
    named = {path.relative_to(scripts).as_posix(): path for path in sorted(scripts.rglob("*.py"))}
    return [
        f
        for n, path in named.items()
        if n != GATEWAY
        for f in argv_findings(path.read_text("utf-8"), n)
    ]


PLANTED = """
import subprocess
from scripts import gitcmd, gitproc
from scripts.gitcmd import run as git_run, head

def status(repo):
    subprocess.run(["git", "status", "--porcelain"], cwd=repo)
    base = ("git", "-c", "user.name=x")
    git_run("log", cwd=repo)
    gitcmd.git("rev-parse", "HEAD", cwd=repo)
    return head(repo), gitcmd.head(repo)  # named operations: fine

def raw(repo, argv):
    return gitproc.spawn(argv, repo, {})
"""


def test_only_gitcmd_builds_git_command_lines(tmp_path: Path) -> None:
    assert git_argv_outside_gateway(KIT_ROOT / "scripts") == []
    scripts = tmp_path / "scripts"
    (scripts / "stage").mkdir(parents=True)
    (scripts / GATEWAY).write_text('def run(*args):\n    return ["git", *args]\n', encoding="utf-8")
    (scripts / "stage" / "planted.py").write_text(PLANTED, encoding="utf-8")
    found = git_argv_outside_gateway(scripts)
    assert [f.split(": ", 1)[0] for f in found] == [
        f"stage/planted.py:{n}" for n in (7, 8, 9, 10, 14)
    ], found


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    gitcmd.init(repo, "main")
    (repo / "a.txt").write_text("one\ntwo\n", encoding="utf-8")
    gitcmd.commit_everything(repo, "first\n", "2024-01-01T00:00:00Z")
    (repo / "a.txt").write_text("one\ntwo, changed\nthree\n", encoding="utf-8")
    gitcmd.commit_everything(repo, "second\n", "2024-01-02T00:00:00Z")
    return repo


def test_git_reads_stdin_and_keeps_a_message_byte_for_byte(repo: Path) -> None:
    diff = gitcmd.diff(repo, "HEAD~1", "HEAD")
    pid = gitcmd.patch_id(repo, diff)
    piped = subprocess.run(  # the same diff through git itself, piped by hand
        ["git", "patch-id", "--stable"],
        input=diff,
        cwd=repo,
        env=gitcmd.git_env(),
        capture_output=True,
        text=True,
    )
    assert len(pid) == 40 and pid == piped.stdout.split()[0]
    assert dict(gitcmd.patch_ids(repo, gitcmd.history_diffs(repo, ["a.txt"])))[pid] == gitcmd.head(
        repo
    )
    assert gitcmd.patch_id(repo, "") == ""
    # stdin as bytes and as text
    data = b"not utf-8: \xff\xfe\n"
    assert gitcmd.git_bytes(
        "hash-object", "--stdin", cwd=repo, stdin=data
    ).decode().strip() == git_blob_id(data)
    assert gitcmd.git("hash-object", "--stdin", cwd=repo, stdin="text\n").strip() == git_blob_id(
        b"text\n"
    )
    assert gitcmd.applies(repo, diff, "-R") and not gitcmd.applies(repo, diff)
    message = "subject\n\nbody without a final newline"
    sha = gitcmd.commit_object(
        repo, gitcmd.rev_parse(repo, "HEAD^{tree}"), gitcmd.head(repo), message, AUTHOR
    )
    assert gitcmd.cat_commit(repo, sha).split(b"\n\n", 1)[1] == message.encode()


def test_a_remote_ref_is_the_peeled_tag_first_and_a_branch_only_where_asked(repo: Path) -> None:
    first, second = gitcmd.rev_parse(repo, "HEAD~1"), gitcmd.head(repo)
    user = ["git", "-c", "user.name=U", "-c", "user.email=u@example.org"]
    for argv in (
        ["tag", "-a", "v1", "-m", "v1"],
        ["tag", "light", first],
        ["branch", "topic", first],
        ["tag", "same", first],
        ["branch", "same", second],
    ):
        subprocess.run([*user, *argv], cwd=repo, env=gitcmd.git_env(), check=True)
    url = str(repo)
    at = lambda ref, branches: gitcmd.remote_commit(url, ref, branches=branches, cwd=repo)  # noqa: E731
    # the commit, not the annotated tag's own object
    assert at("v1", False) == at("v1", True) == second
    assert gitcmd.rev_parse(repo, "refs/tags/v1") != second
    assert at("light", False) == first and at("topic", True) == first and at("topic", False) is None
    # a tag wins over a branch of the same name
    assert at("same", True) == at("same", False) == first
    assert at("absent", True) is None


def test_user_git_is_the_users_own_but_not_another_repository(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    (home / ".gitconfig").write_text(
        "[user]\n\tname = Real Person\n\temail = real@example.org\n", encoding="utf-8"
    )
    gitcmd.init(elsewhere)
    subprocess.run(["git", "config", "user.name", "Wrong Repo"], cwd=elsewhere, check=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    # e.g. exported by a hook: never followed
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    assert gitcmd.user_config(repo, "user.name") == "Real Person"
    assert gitcmd.user_config(repo, "user.email") == "real@example.org"
    # the kit's own git sees neither the user's config nor their identity
    assert gitcmd.run("config", "--get", "user.name", cwd=repo).stdout == ""


# In its own process group (a terminal's foreground job): a Ctrl-C to the group while the kit waits
# on a child.
CTRL_C_DURING_A_CHILD = """
import contextlib, os, signal, sys, threading
from pathlib import Path
from scripts import gitproc, signals

threading.Timer(0.5, lambda: os.killpg(0, signal.SIGINT)).start()
try:
    with signals.held() if sys.argv[1] == "held" else contextlib.nullcontext():
        done = gitproc.spawn(["sh", "-c", "sleep 1.5; echo whole"], Path("."), dict(os.environ))
        print(done.returncode, done.stdout.decode().strip(), flush=True)
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.parametrize(("where", "expected"), [("held", "0 whole"), ("free", "interrupted")])
def test_a_ctrl_c_never_cuts_a_git_the_kit_waits_out(where: str, expected: str) -> None:
    """While the signals are held (refresh undoing its steps) the kit's git finishes and the signal is
    raised after the block; elsewhere a Ctrl-C still stops the command at once (the check bites both
    ways)."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_A_CHILD, where],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        start_new_session=True,
    )
    # held: the signal comes after the block
    wanted = [expected, "interrupted"] if where == "held" else [expected]
    assert done.stdout.strip().splitlines() == wanted, done.stdout + done.stderr


# The front door's handlers in a kit started with SIGHUP ignored (as `nohup` starts it), then a
# SIGHUP to the kit and one to the git it waits on: both run on. Started with SIGHUP at its default,
# the kit stops.
HANGUP_UNDER_NOHUP = """
import os, signal, sys
from pathlib import Path
import scripts.__main__ as front
from scripts import gitproc
front.install_run_handlers()
try:
    done = gitproc.spawn(["sh", "-c", "kill -HUP $$; echo git ran on"], Path("."), dict(os.environ))
    print(done.returncode, done.stdout.decode().strip(), flush=True)
    os.kill(os.getpid(), signal.SIGHUP)
    print("kit ran on", flush=True)
except KeyboardInterrupt as stop:
    print("interrupted by", stop, flush=True)
"""


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (signal.SIG_IGN, ["0 git ran on", "kit ran on"]),
        (signal.SIG_DFL, ["-1 ", "interrupted by SIGHUP"]),
    ],
    ids=["nohup", "default"],
)
def test_a_signal_ignored_as_the_kit_started_stays_ignored_by_it_and_its_git(
    start: int, expected: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", HANGUP_UNDER_NOHUP],
        cwd=KIT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, start),
    )
    assert done.stdout.splitlines() == expected, done.stdout + done.stderr


# SIGTERM to the kit alone (`kill PID`, a CI's cancel) while it waits on its child ("running") or as
# Popen hands it over ("starting"). The child stands for a git: it cleans up on SIGTERM and would
# otherwise run on.
SIGTERM_TO_THE_KIT_ALONE = """
import os, signal, subprocess, sys, threading, time
from pathlib import Path
import scripts.__main__ as front
from scripts import gitproc

front.install_run_handlers()
ready = Path("ready")
def when_ready():
    while not ready.exists():
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGTERM)
if sys.argv[1] == "running":
    threading.Thread(target=when_ready, daemon=True).start()
else:
    class Starting(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            when_ready()
    subprocess.Popen = Starting
child = 'trap "echo cleaned > cleaned; exit 143" TERM; echo > ready; while :; do sleep 0.05; done'
try:
    gitproc.spawn(["sh", "-c", child], Path("."), dict(os.environ))
except KeyboardInterrupt as stop:
    print("interrupted", stop, flush=True)
"""


@pytest.mark.parametrize("when", ["running", "starting"])
def test_a_signal_to_the_kit_alone_ends_its_git_cleanly_and_waits_for_it(
    when: str, tmp_path: Path
) -> None:
    """The kit never goes on while a git it started still runs, and never SIGKILLs one (a killed git
    leaves HEAD.lock or index.lock behind, and the next command refuses)."""
    env = {**os.environ, "PYTHONPATH": str(KIT_ROOT)}
    argv = [sys.executable, "-c", SIGTERM_TO_THE_KIT_ALONE, when]
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        # a child the kit left running (the failure tested here)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert out.strip() == "interrupted SIGTERM", out + err
    assert (tmp_path / "cleaned").is_file(), (
        "the child was not ended by SIGTERM before the kit went on"
    )


@pytest.mark.parametrize("where", ["checkout", "worktree"])
def test_a_git_ended_by_a_signal_leaves_none_of_its_locks_and_no_older_one_is_touched(
    where: str, repo: Path, tmp_path: Path
) -> None:
    """git itself leaves its .lock files when a signal lands at the wrong moment, and the kit's next
    git then refuses the repository. The stand-in git makes its locks, then is killed by SIGINT as a
    Ctrl-C kills it."""
    cwd = repo
    if where == "worktree":
        cwd = tmp_path / "scratch"
        gitcmd.worktree_add(repo, cwd, "HEAD")
    own = gitproc.git_dirs(cwd)[0]
    older = repo / ".git" / "packed-refs.lock"  # the user's, from before: not the kit's to remove
    older.write_text("")
    os.utime(older, (1, 1))
    made = [
        own / "index.lock",
        repo / ".git" / "HEAD.lock",
        repo / ".git" / "refs" / "heads" / "main.lock",
    ]
    script = "; ".join(f"touch '{p}'" for p in made) + "; kill -INT $$"
    done = gitproc.spawn(["sh", "-c", script], cwd, dict(os.environ))
    assert done.returncode == -signal.SIGINT
    assert [p for p in made if p.exists()] == [] and older.exists()
    assert gitproc.spawn(["sh", "-c", f"touch '{made[0]}'"], cwd, dict(os.environ)).returncode == 0
    # a git that ended by itself keeps what it left: only a killed one is cleaned after
    assert made[0].exists()


@pytest.mark.parametrize("variable", LOCATING)
def test_git_env_drops_every_repository_locating_variable(variable: str) -> None:
    env = git_env(
        base={
            variable: "x",
            "GIT_CONFIG_KEY_7": "core.bare",
            "GIT_CONFIG_VALUE_7": "true",
            "HOME": "/h",
        }
    )
    assert env.get(variable) != "x"  # the user's value never reaches git (the kit may set its own)
    assert "GIT_CONFIG_KEY_7" not in env and env["HOME"] == "/h"
    carried = [
        (env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"])
        for i in range(int(env["GIT_CONFIG_COUNT"]))
    ]
    assert carried[0] == ("core.hooksPath", os.devnull) and ("maintenance.auto", "false") in carried
