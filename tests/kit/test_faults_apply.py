"""The apply side's fault table: git isolation (hooks, GIT_* variables, a missing git), any bytes and
any locale, a disk that fills, odd things at the checkout's path, the lock's timeout, and every
signal that ends a run. The contract and the runner are faulttable's (for work that must succeed:
exit 0 and no error line).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Kit, commit_patch, make_series
from faulttable import (
    C_LOCALE,
    P1,
    P2_STOPS,
    SERIES,
    STATE,
    Env,
    Row,
    check,
    commit_bytes,
    edit,
    finished,
    inject,
    interrupted_apply,
    lock_held,
    lock_wait,
    moved,
    one_line_error,
    pin_files,
    popen,
    put,
    run_row,
    snapshot,
    state_of,
)

from scripts.checkout.pristine import EXPORTED
from scripts.gitcmd import git


def hook(name: str, body: str = "echo HOOK-RAN >&2") -> Callable[[Kit, Path], None]:
    """A failing hook of that name in the checkout's .git/hooks (as a user or a template may install)."""

    def setup(kit: Kit, _tmp: Path) -> None:
        path = kit.checkout / ".git/hooks" / name
        path.write_text(f"#!/bin/sh\n{body}\nexit 1\n", encoding="utf-8")
        path.chmod(0o755)

    return setup


def leaked(variable: str, value: Callable[[Path], str]) -> Callable[[Kit, Path], Env]:
    """variable set to value of another repository (like the kit's own, on branch main)."""

    def setup(_kit: Kit, tmp_path: Path) -> Env:
        repo = tmp_path / "kit-repo"
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        commit_patch(repo, {"README": "kit\n"}, "kit", "kit")
        return {variable: value(repo)}

    return setup


def no_git_on_path(_kit: Kit, tmp_path: Path) -> Env:
    bare = tmp_path / "bin-without-git"
    bare.mkdir(exist_ok=True)
    return {"PATH": str(bare)}


def bom(path: str) -> Callable[[Kit, Path], None]:
    return edit(path, lambda b: b"\xef\xbb\xbf" + b)


def checkout_is_symlink(kit: Kit, tmp_path: Path) -> None:
    """A working kit checkout moved elsewhere and linked back: refused the same way by every command."""
    shutil.move(kit.checkout, tmp_path / "moved-checkout")
    kit.checkout.symlink_to(tmp_path / "moved-checkout")


# The lock file of another git (the user's, or one of theirs that died): never taken for the kit's
# own.
INDEX_LOCKED = put(".work/vllm-omni/.git/index.lock", b"")


def creates_existing_file(kit: Kit, tmp_path: Path) -> None:
    commit_patch(kit.checkout, {"vllm_omni/extra.py": "ours = 1\n"}, "[NPU] Extra", "extra")
    kit.run("refresh", check=True)
    pin_files(kit, tmp_path, {"vllm_omni/extra.py": b"theirs = 1\n"})


# The new pin changes line 17 (in patch 0002's context, not next to its change): only 3-way applies
# it.
CONTEXT_MOVED = moved({17: "line 17 upstream"})
# 3-way cannot merge a change next to patch 0002's: the error names the patch, its hunk and git's
# reason.
GITS_REASON = f"{P2_STOPS}: vllm_omni/layers/rope.py hunk #1 (@@ -17); git: "


def non_ascii_patch(kit: Kit, _tmp: Path) -> None:
    commit_patch(
        kit.checkout,
        {"vllm_omni/names.py": "NAME = 'Müller – 東京'\n"},
        "[NPU] Grüße, ünïcode",
        "unicode",
    )
    kit.run("refresh", check=True)


def upstream_with(
    files: dict[str, bytes], edits: dict[str, bytes], refresh: bool = True
) -> Callable[[Kit, Path], None]:
    """A pin whose release holds files (any bytes), and a commit (patch 0004 once refreshed) writing
    edits over them."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        pin_files(kit, tmp_path, files)
        kit.run("apply", check=True)
        commit_bytes(kit, edits, "bytes")
        if refresh:
            kit.run("refresh", check=True)

    return setup


UNTRACKED_ODD_NAME = put(
    os.fsdecode(b".work/vllm-omni/vllm_omni/\xff-notes.txt"), b"\xff\xfe latin-1 \xe9\n"
)


NO_SPACE = "(No space left on device)"
# Injected: the disk fills while the new pin's wheel is extracted (the 3rd file written fails).
FULL_EXTRACTING = """import pathlib
real, calls = pathlib.Path.write_bytes, []
def write_bytes(self, data):
    calls.append(self)
    if len(calls) == 3:
        raise OSError(errno.ENOSPC, 'No space left on device')
    return real(self, data)
pathlib.Path.write_bytes = write_bytes"""
# Injected: a write that loses its data without an error (a full disk under some file systems).
HALF_WRITES = """import pathlib
real = pathlib.Path.write_bytes
pathlib.Path.write_bytes = lambda self, data: real(self, data[: len(data) // 2])"""
# Injected: the disk is full when the checkout's state is written.
FULL_STATE = """import pathlib
real = pathlib.Path.write_text
def write_text(self, *a, **k):
    if self.name == 'kit-state.json.tmp':
        raise OSError(errno.ENOSPC, 'No space left on device')
    return real(self, *a, **k)
pathlib.Path.write_text = write_text"""


def export_cut_short(kit: Kit, _tmp: Path) -> None:
    """The last copy of the pristine tree never finished (its stamp is written last): apply copies it
    again."""
    (kit.root / ".work" / "pristine" / EXPORTED).unlink()


# Injected: the disk fills while the pristine tree is copied out for side-by-side tests.
FULL_EXPORT = """import tarfile
def extractall(self, *a, **k):
    raise OSError(errno.ENOSPC, 'No space left on device')
tarfile.TarFile.extractall = extractall"""

HOOKS = "post-checkout applypatch-msg pre-applypatch post-applypatch pre-commit commit-msg post-commit".split()
HOOKS += ["reference-transaction", "post-rewrite", "pre-auto-gc"]
VARIABLES = {
    "GIT_DIR": lambda r: str(r / ".git"),
    "GIT_WORK_TREE": str,
    "GIT_INDEX_FILE": lambda r: str(r / ".git/index"),
    "GIT_OBJECT_DIRECTORY": lambda r: str(r / ".git/objects"),
    "GIT_ALTERNATE_OBJECT_DIRECTORIES": lambda r: str(r / ".git/objects"),
    "GIT_COMMON_DIR": lambda r: str(r / ".git"),
    "GIT_NAMESPACE": lambda _r: "elsewhere",
    "GIT_CEILING_DIRECTORIES": lambda r: str(r.parent),
    "GIT_PREFIX": lambda _r: "vllm_omni/",
    "GIT_CONFIG_PARAMETERS": lambda _r: "'core.hookspath'='/nonexistent' 'core.bare'='true'",
}


UPGRADED = moved({})  # the pin moved to a new upstream release (nothing else changed)
# A latin-1 file upstream; the crlf and binary rows patch the file they add.
LATIN1 = (
    {"vllm_omni/legacy.py": b"# caf\xe9\nX = 1\n"},
    {"vllm_omni/attn.py": b"def attend(q):\n    return q * 3\n"},
)
CRLF = ({"vllm_omni/win.py": b"a = 1\r\nb = 2\r\n"}, {"vllm_omni/win.py": b"a = 1\r\nb = 3\r\n"})
# A commit that edits the latin-1 file as text: its diff cannot be a UTF-8 patch.
LATIN1_EDITED = upstream_with(
    LATIN1[0], {"vllm_omni/legacy.py": b"# caf\xe9\nX = 2\n"}, refresh=False
)
BINARY = (
    {"vllm_omni/table.bin": bytes(range(256))},
    {"vllm_omni/table.bin": bytes(reversed(range(256)))},
)
ROWS = [
    # measured in the issue: a disk that fills, or a write cut short, in the middle of an apply
    Row(
        "disk-full-while-extracting",
        "apply",
        "cannot write .work/.vllm-omni.new/",
        UPGRADED,
        inject=FULL_EXTRACTING,
    ),
    Row(
        "short-write-while-extracting",
        "apply",
        "differs from vllm_omni-0.2.0-py3-none-any.whl",
        UPGRADED,
        inject=HALF_WRITES,
    ),
    Row("disk-full-writing-state", "apply", f"cannot write {STATE} {NO_SPACE}", inject=FULL_STATE),
    Row(
        "disk-full-exporting-pristine",
        "apply",
        f"cannot write .work/pristine {NO_SPACE}",
        export_cut_short,
        inject=FULL_EXPORT,
    ),
    Row(
        "another-gits-index-lock",
        "apply",
        "another git is working in .work/vllm-omni",
        INDEX_LOCKED,
    ),
    Row(
        "bom-in-series", "apply", "patches/series starts with a UTF-8 byte order mark", bom(SERIES)
    ),
    Row(
        "bom-in-patch",
        "apply",
        "patches/0001-fix-ten.patch starts with a UTF-8 byte order mark",
        bom(P1),
    ),
    Row("no-git-on-path", "apply", "git was not found on PATH", no_git_on_path),
    Row("no-git-on-path-refresh", "refresh", "install git", no_git_on_path),
    Row(
        "creates-file-that-exists-upstream",
        "apply",
        "0004-extra.patch does not apply: vllm_omni/extra.py (already exists in working directory)",
        creates_existing_file,
        1,
    ),
    Row("3way-across-pin-change", "apply --3way", "0002-twenty.patch: 3-way", CONTEXT_MOVED, 0),
    Row(
        "3way-conflict-says-gits-reason",
        "apply --3way",
        GITS_REASON,
        moved({19: "x", 20: "y", 21: "z"}),
        1,
    ),
    *[
        Row(
            f"checkout-symlink-{a.replace(' ', '-')}",
            a,
            ".work/vllm-omni is a symbolic link",
            checkout_is_symlink,
        )
        for a in ("apply", "apply --force", "refresh", "lint", "apply --abort", "apply --continue")
    ],
    *[
        Row(
            f"lock-timeout-{v}",
            "apply",
            "is not a number of seconds from 0 to 86400",
            lock_held,
            env=lock_wait(v),
        )
        for v in ("nan", "1e309", "inf", "-1", "soon")
    ],
    # invariant 5: hooks, GIT_* variables, bytes, locales
    *[
        Row(f"failing-hook-{name}", "apply", "[3/3] 0003-double-attn.patch: clean", hook(name), 0)
        for name in HOOKS
    ],
    *[
        Row(f"leaked-{name}-refresh", "refresh", "patches/ unchanged", leaked(name, value), 0)
        for name, value in VARIABLES.items()
    ],
    Row("leaked-GIT_DIR-apply", "apply", "[3/3]", leaked("GIT_DIR", VARIABLES["GIT_DIR"]), 0),
    Row(
        "c-locale-refresh-non-ascii",
        "refresh",
        "patches/ unchanged",
        non_ascii_patch,
        0,
        env=C_LOCALE,
    ),
    Row(
        "c-locale-apply-non-ascii",
        "apply",
        "[4/4] 0004-unicode.patch: clean",
        non_ascii_patch,
        0,
        env=C_LOCALE,
    ),
    Row("c-locale-readme-non-ascii", "readme", "Gr\\xfc\\xdfe", non_ascii_patch, 0, env=C_LOCALE),
    Row("latin1-file-upstream", "apply --force", "0004-bytes.patch", upstream_with(*LATIN1), 0),
    Row(
        "crlf-file-upstream-patched",
        "apply --force",
        "0004-bytes.patch: clean",
        upstream_with(*CRLF),
        0,
    ),
    Row(
        "binary-file-upstream-patched",
        "apply --force",
        "0004-bytes.patch: clean",
        upstream_with(*BINARY),
        0,
    ),
    Row(
        "latin1-file-edited-then-refresh",
        "refresh",
        "changes vllm_omni/legacy.py, whose diff is not UTF-8 text",
        LATIN1_EDITED,
    ),
    Row(
        "untracked-non-utf8-name-c-locale",
        "apply",
        "has uncommitted edits",
        UNTRACKED_ODD_NAME,
        env=C_LOCALE,
    ),
]


@pytest.mark.parametrize("case", ROWS, ids=[c.id for c in ROWS])
def test_apply_fault(case: Row, kit3: Kit, tmp_path: Path) -> None:
    head = kit3.git("rev-parse", "HEAD")
    proc = run_row(kit3, case, tmp_path)
    # not advised to try what it tried
    assert "--3way" not in case.argv or "retry with" not in proc.stderr
    if case.id == "3way-across-pin-change":  # merged: upstream's new context and the patch's change
        rope = (kit3.checkout / "vllm_omni/layers/rope.py").read_text(encoding="utf-8")
        assert "line 17 upstream" in rope and "line 20 fixed" in rope
    # the old pin's checkout is kept, and never taken for current
    if case.id == "disk-full-while-extracting":
        assert kit3.git("rev-parse", "HEAD") == head and state_of(kit3)["status"] == "applied"
        one_line_error(kit3.run("lint"), 2, "the pin is now vllm-omni 0.2.0")
        check(kit3.run("apply"), 0, "[3/3]")
    assert not (kit3.root / ".work/.vllm-omni.new").exists()  # no half-built checkout left behind
    if kit3.checkout.is_dir() and not kit3.checkout.is_symlink():
        assert (
            not (kit3.checkout / ".git/rebase-apply").exists()
            or state_of(kit3)["status"] == "conflict"
        )
        # a run that failed never leaves a checkout that says it is complete and current
        if case.code:
            state = state_of(kit3)
            assert (
                state["status"] != "applied"
                or kit3.run("lint").returncode != 0
                or "0.1.0" in str(state["pin"])
            )


# ---- provenance: a build that did not finish is never "applied"; every command says apply again
# ----


# The kit's first git after the state says "applying" fails, as on a full disk
GIT_FAILS_ONCE_APPLYING = """import scripts.gitcmd as g
def failing(*args, **kwargs):
    raise g.GitFailed(('checkout', '-q'), '', 'fatal: Unable to write new index file')
g.start_branch = failing"""


@pytest.mark.parametrize("command", ["lint", "refresh", "test"])
def test_failed_apply_on_the_same_pin_makes_every_command_say_apply_again(
    kit3: Kit, command: str
) -> None:
    one_line_error(inject(kit3, GIT_FAILS_ONCE_APPLYING, "apply"), 2, "run nox -s apply again")
    assert state_of(kit3)["status"] == "applying"
    one_line_error(kit3.run(command), 2, "nox -s apply")
    check(kit3.run("apply"), 0, "[3/3]")


def test_hooks_never_run_and_state_tells_the_truth(kit3: Kit) -> None:
    marker = kit3.root / "hook-ran"
    for name in HOOKS:
        hook(name, f"touch {marker}")(kit3, Path())
    check(kit3.run("apply"), 0, "[3/3]")
    check(kit3.run("refresh"), 0, "patches/ unchanged")
    assert not marker.exists()
    assert (
        state_of(kit3)["status"] == "applied"
        and state_of(kit3)["head"] == kit3.git("rev-parse", "HEAD").strip()
    )


# ---- endings: every signal that ends a run ----------------------------------------------


def processes_in(folder: Path) -> list[str]:
    """Processes whose working folder is inside folder (a git left running by the kit)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if proc.name.isdigit() and cwd.startswith(str(folder)):
            found.append(proc.name)
    return found


# A signal that lands while `git am` runs: the am is left paused (as a killed am leaves it), then
# the signal.
SIGNAL_DURING_AM = """import scripts.gitcmd as g, time
real = g.spawn
def spawn(argv, cwd, env, stdin=None):
    if argv[1:2] == ['am'] and argv[-1].endswith('0001-fix-ten.patch'):
        bad = cwd / '.git' / 'bad.patch'
        bad.write_text(open(argv[-1]).read().replace('-line 10', '-line 10 elsewhere'))
        real([*argv[:-1], str(bad)], cwd, env)
        os.kill(os.getpid(), signal.SIG{name})
        time.sleep(5)
    return real(argv, cwd, env, stdin)
g.spawn = spawn"""


@pytest.mark.parametrize("during_am", [False, True], ids=["between-patches", "during-git-am"])
@pytest.mark.parametrize("name", ["HUP", "QUIT", "TERM", "INT"])
def test_every_ending_signal_during_apply_is_recognised(
    request: pytest.FixtureRequest, name: str, during_am: bool
) -> None:
    if during_am:
        kit, last = request.getfixturevalue("kit3"), "[3/3]"
        before = snapshot(kit.patches)
        proc = inject(kit, SIGNAL_DURING_AM.replace("{name}", name), "apply")
    else:
        kit, last = request.getfixturevalue("small_kit"), "[40/40]"
        make_series(
            kit,
            [
                ({f"vllm_omni/p{i}.py": f"x = {i}\n"}, f"[NPU] Part {i}", f"part-{i}")
                for i in range(40)
            ],
        )
        before = snapshot(kit.patches)
        running = popen([sys.executable, "-m", "scripts", "apply"], kit.root)
        assert running.stdout is not None
        next(line for line in running.stdout if "[2/40]" in line)
        running.send_signal(getattr(signal, f"SIG{name}"))
        proc = finished(running)
    one_line_error(proc, 130, "apply interrupted")
    assert not processes_in(kit.checkout)
    assert not (kit.checkout / ".git/rebase-apply").exists()  # no paused am the user did not start
    assert state_of(kit)["status"] == "applying"
    for command in ("lint", "refresh"):
        one_line_error(kit.run(command), 2, "an apply was interrupted")
    assert snapshot(kit.patches) == before
    check(kit.run("apply"), 0, last)


LEFT = "am-folder-git-reads am-folder-part-written dirty-file index.lock refs/heads/series.lock".split()


@pytest.mark.parametrize("left", LEFT)
def test_apply_again_rebuilds_what_an_interrupted_apply_left(kit3: Kit, left: str) -> None:
    # Found by the edit-loop model: Ctrl-C reaches git am's whole process group, and a kill part way
    # can leave .git/rebase-apply or touched files. The state says "applying": the next apply
    # rebuilds the kit's own tree.
    interrupted_apply(kit3, Path())
    before = snapshot(kit3.patches)
    if left == "am-folder-git-reads":
        # not the next one: it pauses
        kit3.git("am", "-q", "-k", str(kit3.patches / "0003-double-attn.patch"))
    elif left == "am-folder-part-written":
        (kit3.checkout / ".git" / "rebase-apply").mkdir()
        (kit3.checkout / ".git" / "rebase-apply" / "next").write_text("1\n")
    elif left == "dirty-file":
        (kit3.checkout / "vllm_omni" / "attn.py").write_text("half written\n")
    # the lock file of a git killed part way (kill -9 of the kit's process group), and the kit's
    # marker
    else:
        dead = subprocess.Popen(["true"])  # of that git: a pid now dead
        dead.wait()
        (kit3.checkout / ".git" / f"kit-git-running.{dead.pid}").write_text("", encoding="utf-8")
        (kit3.checkout / ".git" / left).write_text("")
    proc = kit3.run("apply")
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    assert (
        not (kit3.checkout / ".git" / "rebase-apply").exists()
        and not (kit3.checkout / ".git" / left).exists()
    )
    assert state_of(kit3)["status"] == "applied" and kit3.run("refresh").returncode == 0
    assert snapshot(kit3.patches) == before
