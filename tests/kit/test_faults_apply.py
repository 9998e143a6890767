"""The apply side's fault table: git isolation (hooks, GIT_* variables, a missing git),
any bytes and any locale, a disk that fills, odd things at the checkout's path, the lock's
timeout, and every signal that ends a run.

Each case drives the real CLI on a small upstream and asserts the contract: the exit code,
exactly one `kit: error: <thing> -- <fix>` line (or, for work that must succeed, exit 0 and
no error line), no traceback, and patches/ byte-identical. Faults that cannot be made for
real here (a full disk, a signal during one git call) are injected at the one call they hit,
in a real kit process (test_faults.inject).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import AUTHOR, FRONT_DOOR, SMALL_UPSTREAM, Kit, commit_patch, make_series, pin_toml
from test_faults import (
    HELD,
    TERM_WHILE_SWAPPING,
    fixup_commit,
    inject,
    interrupted_apply,
    lock_held,
    new_upstream,
    one_line_error,
    snapshot,
    stop_at_twenty,
)

from scripts import worklock
from scripts.checkout.apply import failed_hunk
from scripts.checkout.foreign import is_generated
from scripts.gitcmd import LOCATING, git, git_env
from scripts.pin import git_blob_id

C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
Env = dict[str, str]


@dataclass(frozen=True)
class Case:
    id: str
    setup: Callable[[Kit, Path], Env | None]  # may return environment variables for the run
    args: tuple[str, ...]
    code: int  # 0: the work must succeed
    needle: str  # in the one error line, or (code 0) in the output
    env: tuple[tuple[str, str], ...] = ()
    inject: str = ""  # code that replaces one call in the kit process (see test_faults.inject)


def state_of(kit: Kit) -> dict[str, object]:
    return json.loads((kit.checkout / ".git/kit-state.json").read_text(encoding="utf-8"))


def run_case(kit: Kit, case: Case, extra: Env) -> subprocess.CompletedProcess[str]:
    env = {**dict(case.env), **extra}
    if not case.inject:  # a C locale takes effect at an interpreter's start only
        return (kit.spawn if any(k in env for k in C_LOCALE) else kit.run)(*case.args, env=env)
    return subprocess.run(
        [sys.executable, "-c", injected(case.inject), *case.args],
        cwd=kit.root,
        capture_output=True,
        text=True,
        env={**os.environ, "CI": "", **env},
    )


def injected(code: str) -> str:
    return f"import errno, os, signal, sys\n{code}\n" + FRONT_DOOR


def check(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    if code:
        one_line_error(proc, code, needle)
        return
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in out and "kit: error:" not in out, out
    assert needle in out, out


# ---- setups ----------------------------------------------------------------------------


def nothing(_kit: Kit, _tmp: Path) -> None:
    return None


def pin_files(kit: Kit, tmp_path: Path, files: dict[str, bytes], version: str = "0.2.0") -> None:
    """Pin the kit to a release holding SMALL_UPSTREAM plus files (any bytes)."""
    where = tmp_path / f"release-{version}"
    where.mkdir(exist_ok=True)
    wheel = where / f"vllm_omni-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in sorted({**{k: v.encode() for k, v in SMALL_UPSTREAM.items()}, **files}.items()):
            zf.writestr(zipfile.ZipInfo(name, (2026, 1, 1, 0, 0, 0)), data)
        zf.writestr(zipfile.ZipInfo(f"vllm_omni-{version}.dist-info/METADATA", (2026, 1, 1, 0, 0, 0)), "Name: x\n")
    kit.write_pin(pin_toml(version, wheel.name, hashlib.sha256(wheel.read_bytes()).hexdigest()))
    kit.seed_wheel(wheel)


def hook(name: str) -> Callable[[Kit, Path], None]:
    """A failing hook of that name in the checkout's .git/hooks (as a user or a template may install)."""

    def setup(kit: Kit, _tmp: Path) -> None:
        path = kit.checkout / ".git/hooks" / name
        path.write_text("#!/bin/sh\necho HOOK-RAN >&2\nexit 1\n", encoding="utf-8")
        path.chmod(0o755)

    return setup


def other_repo(tmp_path: Path) -> Path:
    """Another repository (like the kit's own), on branch main: what a leaked GIT_* variable points at."""
    repo = tmp_path / "kit-repo"
    if not repo.exists():
        repo.mkdir()
        git("init", "-q", "-b", "main", cwd=repo)
        (repo / "README").write_text("kit\n", encoding="utf-8")
        git("add", "-A", cwd=repo)
        git("commit", "-q", "-m", "kit", cwd=repo, env=AUTHOR)
    return repo


def leaked(variable: str, value: Callable[[Path], str]) -> Callable[[Kit, Path], Env]:
    def setup(_kit: Kit, tmp_path: Path) -> Env:
        return {variable: value(other_repo(tmp_path))}

    return setup


def no_git_on_path(_kit: Kit, tmp_path: Path) -> Env:
    bare = tmp_path / "bin-without-git"
    bare.mkdir(exist_ok=True)
    return {"PATH": str(bare)}


def bom_series(kit: Kit, _tmp: Path) -> None:
    series = kit.patches / "series"
    series.write_bytes(b"\xef\xbb\xbf" + series.read_bytes())


def bom_patch(kit: Kit, _tmp: Path) -> None:
    patch = kit.patches / "0001-fix-ten.patch"
    patch.write_bytes(b"\xef\xbb\xbf" + patch.read_bytes())


def checkout_is_symlink(kit: Kit, tmp_path: Path) -> None:
    """A working kit checkout moved elsewhere and linked back: refused the same way by every command."""
    elsewhere = tmp_path / "moved-checkout"
    shutil.move(kit.checkout, elsewhere)
    kit.checkout.symlink_to(elsewhere)


def index_locked(kit: Kit, _tmp: Path) -> None:
    """The lock file of another git (the user's, or one of theirs that died): never taken for the kit's own."""
    (kit.checkout / ".git/index.lock").write_text("", encoding="utf-8")


def killed_kit_marker(kit: Kit) -> None:
    """What a kit process killed outright (kill -9) while its git ran leaves: the marker of a pid now dead."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    (kit.checkout / ".git" / f"kit-git-running.{dead.pid}").write_text("", encoding="utf-8")


def creates_existing_file(kit: Kit, tmp_path: Path) -> None:
    """Patch 0004 creates vllm_omni/extra.py; the new pin ships a file of that name."""
    commit_patch(kit.checkout, {"vllm_omni/extra.py": "ours = 1\n"}, "[NPU] Extra", "extra")
    kit.run("refresh", check=True)
    pin_files(kit, tmp_path, {"vllm_omni/extra.py": b"theirs = 1\n"})


def context_moved_near_twenty(kit: Kit, tmp_path: Path) -> None:
    """The new pin changes line 17 (in patch 0002's context, not next to its change): only 3-way applies it."""
    new_upstream(kit, tmp_path, {17: "line 17 upstream"})


def non_ascii_patch(kit: Kit, _tmp: Path) -> None:
    commit_patch(kit.checkout, {"vllm_omni/names.py": "NAME = 'Müller – 東京'\n"}, "[NPU] Grüße, ünïcode", "unicode")
    kit.run("refresh", check=True)


def upstream_with(files: dict[str, bytes], edits: dict[str, bytes]) -> Callable[[Kit, Path], None]:
    """A pin whose release holds files (any bytes), and a patch 0004 that writes edits over them."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        pin_files(kit, tmp_path, files)
        kit.run("apply", check=True)
        for name, data in edits.items():
            (kit.checkout / name).write_bytes(data)
        kit.git("add", "-A")
        kit.git("commit", "-q", "-m", "[NPU] Bytes\n\nUpstream-Status: Pending\nKit-Patch: bytes\n")
        kit.run("refresh", check=True)

    return setup


def latin1_edit(kit: Kit, tmp_path: Path) -> None:
    """A pin with a latin-1 file, and a commit that edits it as text: its diff cannot be a UTF-8 patch."""
    pin_files(kit, tmp_path, {"vllm_omni/legacy.py": b"# caf\xe9\nX = 1\n"})
    kit.run("apply", check=True)
    (kit.checkout / "vllm_omni/legacy.py").write_bytes(b"# caf\xe9\nX = 2\n")
    kit.git("commit", "-qam", "[NPU] Legacy\n\nUpstream-Status: Pending\nKit-Patch: legacy\n")


def untracked_odd_name(kit: Kit, _tmp: Path) -> None:
    (kit.checkout / os.fsdecode(b"vllm_omni/\xff-notes.txt")).write_bytes(b"\xff\xfe latin-1 \xe9\n")


# Injected: the disk fills while the new pin's wheel is extracted (the 3rd file written fails).
DISK_FULL_EXTRACTING = (
    "import pathlib\n"
    "real, calls = pathlib.Path.write_bytes, []\n"
    "def write_bytes(self, data):\n"
    "    calls.append(self)\n"
    "    if len(calls) == 3:\n"
    "        raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "    return real(self, data)\n"
    "pathlib.Path.write_bytes = write_bytes"
)
# Injected: a write that loses its data without an error (a full disk under some file systems).
SHORT_WRITE = (
    "import pathlib\n"
    "real = pathlib.Path.write_bytes\n"
    "pathlib.Path.write_bytes = lambda self, data: real(self, data[: len(data) // 2])"
)

# Injected: the disk is full when the checkout's state is written.
DISK_FULL_WRITING_STATE = (
    "import pathlib\n"
    "real = pathlib.Path.write_text\n"
    "def write_text(self, *a, **k):\n"
    "    if self.name == 'kit-state.json.tmp':\n"
    "        raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "    return real(self, *a, **k)\n"
    "pathlib.Path.write_text = write_text"
)

# Injected: the disk fills while the pristine tree is copied out for side-by-side tests.
DISK_FULL_EXPORTING = (
    "import tarfile\n"
    "def extractall(self, *a, **k):\n"
    "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
    "tarfile.TarFile.extractall = extractall"
)

HOOKS = (
    "post-checkout", "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "commit-msg",
    "post-commit", "reference-transaction", "post-rewrite", "pre-auto-gc",
)  # fmt: skip
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


def upgraded(kit: Kit, tmp_path: Path) -> None:
    """The pin moved to a new upstream release (nothing else changed)."""
    new_upstream(kit, tmp_path, {})


CASES = [
    # measured in the issue: a disk that fills, or a write cut short, in the middle of an apply
    *[
        Case(case_id, setup, ("apply",), 2, needle, inject=failure)
        for case_id, setup, needle, failure in (
            ("disk-full-while-extracting", upgraded, "cannot write .work/.vllm-omni.new/", DISK_FULL_EXTRACTING),
            ("short-write-while-extracting", upgraded, "differs from vllm_omni-0.2.0-py3-none-any.whl", SHORT_WRITE),
            (
                "disk-full-writing-state",
                nothing,
                "cannot write .work/vllm-omni/.git/kit-state.json (No space left on device)",
                DISK_FULL_WRITING_STATE,
            ),
            (
                "disk-full-exporting-pristine",
                nothing,
                "cannot write .work/pristine (No space left on device)",
                DISK_FULL_EXPORTING,
            ),
        )
    ],  # fmt: skip
    Case("another-gits-index-lock", index_locked, ("apply",), 2, "another git is working in .work/vllm-omni"),
    Case("bom-in-series", bom_series, ("apply",), 2, "patches/series starts with a UTF-8 byte order mark"),
    Case("bom-in-patch", bom_patch, ("apply",), 2, "patches/0001-fix-ten.patch starts with a UTF-8 byte order mark"),
    Case("no-git-on-path", no_git_on_path, ("apply",), 2, "git was not found on PATH"),
    Case("no-git-on-path-refresh", no_git_on_path, ("refresh",), 2, "install git"),
    Case(
        "creates-file-that-exists-upstream",
        creates_existing_file,
        ("apply",),
        1,
        "0004-extra.patch does not apply: vllm_omni/extra.py (already exists in working directory)",
    ),  # fmt: skip
    Case("3way-across-pin-change", context_moved_near_twenty, ("apply", "--3way"), 0, "0002-twenty.patch: 3-way"),
    Case(
        "3way-conflict-says-gits-reason",
        lambda k, t: new_upstream(k, t, {19: "x", 20: "y", 21: "z"}),
        ("apply", "--3way"),
        1,
        "git: ",
    ),  # fmt: skip
    *[
        Case(f"checkout-symlink-{'-'.join(args)}", checkout_is_symlink, args, 2, ".work/vllm-omni is a symbolic link")
        for args in (
            ("apply",),
            ("apply", "--force"),
            ("refresh",),
            ("lint",),
            ("apply", "--abort"),
            ("apply", "--continue"),
        )  # fmt: skip
    ],
    *[
        Case(
            f"lock-timeout-{value}",
            lock_held,
            ("apply",),
            2,
            "is not a number of seconds from 0 to 86400",
            (("KIT_LOCK_TIMEOUT", value),),
        )  # fmt: skip
        for value in ("nan", "1e309", "inf", "-1", "soon")
    ],
    # invariant 5: hooks, GIT_* variables, bytes, locales
    *[Case(f"failing-hook-{name}", hook(name), ("apply",), 0, "[3/3] 0003-double-attn.patch: clean") for name in HOOKS],
    *[
        Case(f"leaked-{name}-refresh", leaked(name, value), ("refresh",), 0, "patches/ unchanged")
        for name, value in VARIABLES.items()
    ],  # fmt: skip
    Case("leaked-GIT_DIR-apply", leaked("GIT_DIR", lambda r: str(r / ".git")), ("apply",), 0, "[3/3]"),
    Case("c-locale-refresh-non-ascii", non_ascii_patch, ("refresh",), 0, "patches/ unchanged", tuple(C_LOCALE.items())),
    Case(
        "c-locale-apply-non-ascii",
        non_ascii_patch,
        ("apply",),
        0,
        "[4/4] 0004-unicode.patch: clean",
        tuple(C_LOCALE.items()),
    ),  # fmt: skip
    Case("c-locale-readme-non-ascii", non_ascii_patch, ("readme",), 0, "Gr\\xfc\\xdfe", tuple(C_LOCALE.items())),
    Case(
        "latin1-file-upstream",
        upstream_with(
            {"vllm_omni/legacy.py": b"# caf\xe9\nX = 1\n"}, {"vllm_omni/attn.py": b"def attend(q):\n    return q * 3\n"}
        ),
        ("apply", "--force"),
        0,
        "0004-bytes.patch",
    ),  # fmt: skip
    Case(
        "crlf-file-upstream-patched",
        upstream_with({"vllm_omni/win.py": b"a = 1\r\nb = 2\r\n"}, {"vllm_omni/win.py": b"a = 1\r\nb = 3\r\n"}),
        ("apply", "--force"),
        0,
        "0004-bytes.patch: clean",
    ),  # fmt: skip
    Case(
        "binary-file-upstream-patched",
        upstream_with({"vllm_omni/table.bin": bytes(range(256))}, {"vllm_omni/table.bin": bytes(reversed(range(256)))}),
        ("apply", "--force"),
        0,
        "0004-bytes.patch: clean",
    ),  # fmt: skip
    Case(
        "latin1-file-edited-then-refresh",
        latin1_edit,
        ("refresh",),
        2,
        "changes vllm_omni/legacy.py, whose diff is not UTF-8 text",
    ),
    Case(
        "untracked-non-utf8-name-c-locale",
        untracked_odd_name,
        ("apply",),
        2,
        "has uncommitted edits",
        tuple(C_LOCALE.items()),
    ),  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_apply_fault(case: Case, kit3: Kit, tmp_path: Path) -> None:
    extra = case.setup(kit3, tmp_path) or {}
    before = snapshot(kit3.patches)
    try:
        proc = run_case(kit3, case, extra)
    finally:
        while HELD:
            HELD.pop().close()  # type: ignore[attr-defined]
    check(proc, case.code, case.needle)
    assert snapshot(kit3.patches) == before  # nothing lost, nothing half-written
    assert not (kit3.root / ".work/.vllm-omni.new").exists()  # no half-built checkout left behind
    checkout = kit3.checkout
    if checkout.is_dir() and not checkout.is_symlink():
        assert not (checkout / ".git/rebase-apply").exists() or state_of(kit3)["status"] == "conflict"
        if case.code:  # a run that failed never leaves a checkout that says it is complete and current
            state = state_of(kit3)
            assert state["status"] != "applied" or kit3.run("lint").returncode != 0 or "0.1.0" in str(state["pin"])


# ---- provenance: a build that did not finish is never "applied"; every command says apply again ----


GIT_FAILS_ONCE_APPLYING = (  # the kit's first git after the state says "applying" fails, as on a full disk
    "import scripts.gitcmd as g\n"
    "def failing(*args, **kwargs):\n"
    "    raise g.GitFailed(('checkout', '-q'), '', 'fatal: Unable to write new index file')\n"
    "g.start_branch = failing"
)


@pytest.mark.parametrize("command", ["lint", "refresh", "test"])
def test_failed_apply_on_the_same_pin_makes_every_command_say_apply_again(kit3: Kit, command: str) -> None:
    one_line_error(inject(kit3, GIT_FAILS_ONCE_APPLYING, "apply"), 2, "run nox -s apply again")
    assert state_of(kit3)["status"] == "applying"
    one_line_error(kit3.run(command), 2, "nox -s apply")
    check(kit3.run("apply"), 0, "[3/3]")


def test_disk_full_on_a_new_pin_keeps_the_old_checkout(kit3: Kit, tmp_path: Path) -> None:
    head = kit3.git("rev-parse", "HEAD")
    new_upstream(kit3, tmp_path, {})
    one_line_error(inject(kit3, DISK_FULL_EXTRACTING, "apply"), 2, "No space left on device")
    assert kit3.git("rev-parse", "HEAD") == head and state_of(kit3)["status"] == "applied"
    one_line_error(kit3.run("lint"), 2, "the pin is now vllm-omni 0.2.0")  # never "clean" for the old pin
    check(kit3.run("apply"), 0, "[3/3]")


def test_hooks_never_run_and_state_tells_the_truth(kit3: Kit) -> None:
    marker = kit3.root / "hook-ran"
    for name in HOOKS:
        path = kit3.checkout / ".git/hooks" / name
        path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n", encoding="utf-8")
        path.chmod(0o755)
    check(kit3.run("apply"), 0, "[3/3]")
    check(kit3.run("refresh"), 0, "patches/ unchanged")
    assert not marker.exists()
    assert state_of(kit3)["status"] == "applied" and state_of(kit3)["head"] == kit3.git("rev-parse", "HEAD").strip()


def test_three_way_across_a_pin_change_has_the_old_blobs(kit3: Kit, tmp_path: Path) -> None:
    context_moved_near_twenty(kit3, tmp_path)
    plain = kit3.run("apply")
    one_line_error(plain, 1, "0002-twenty.patch does not apply")
    assert "--3way" in plain.stderr
    kit3.run("apply", "--abort", check=True)
    merged = kit3.run("apply", "--3way", check=True).stdout
    assert "0002-twenty.patch: 3-way" in merged
    rope = (kit3.checkout / "vllm_omni/layers/rope.py").read_text(encoding="utf-8")
    assert "line 17 upstream" in rope and "line 20 fixed" in rope


def test_a_real_conflict_under_3way_shows_gits_reason_and_no_advice_to_retry_it(kit3: Kit, tmp_path: Path) -> None:
    stop_at_twenty(kit3, tmp_path)
    kit3.run("apply", "--abort", check=True)
    proc = kit3.run("apply", "--3way")
    one_line_error(proc, 1, "0002-twenty.patch does not apply")
    assert "CONFLICT" in proc.stderr or "git: " in proc.stderr, proc.stderr
    assert "retry with nox -s apply -- --3way" not in proc.stderr


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


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM, signal.SIGINT],
                         ids=["hup", "quit", "term", "int"])  # fmt: skip
def test_every_ending_signal_during_apply_is_recognised(small_kit: Kit, sig: signal.Signals) -> None:
    many = [({f"vllm_omni/p{i}.py": f"x = {i}\n"}, f"[NPU] Part {i}", f"part-{i}") for i in range(40)]
    make_series(small_kit, many)
    before = snapshot(small_kit.patches)
    proc = subprocess.Popen([sys.executable, "-m", "scripts", "apply"], cwd=small_kit.root, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "CI": ""})  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if "[2/40]" in line:
            proc.send_signal(sig)
            break
    out, err = proc.communicate(timeout=60)
    one_line_error(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 130, "apply interrupted")
    assert not processes_in(small_kit.checkout)
    assert not (small_kit.checkout / ".git/rebase-apply").exists()  # no paused am the user did not start
    assert state_of(small_kit)["status"] == "applying"
    one_line_error(small_kit.run("lint"), 2, "an apply was interrupted")
    one_line_error(small_kit.run("refresh"), 2, "an apply was interrupted")
    assert snapshot(small_kit.patches) == before
    assert small_kit.run("apply").returncode == 0


# A signal that lands while `git am` runs: the am is left paused (as a killed am leaves it), then the signal.
SIGNAL_DURING_AM = (
    "import scripts.gitcmd as g, time\n"
    "real = g.spawn\n"
    "def spawn(argv, cwd, env, stdin=None):\n"
    "    if argv[1:2] == ['am'] and argv[-1].endswith('0001-fix-ten.patch'):\n"
    "        bad = cwd / '.git' / 'bad.patch'\n"
    "        bad.write_text(open(argv[-1]).read().replace('-line 10', '-line 10 elsewhere'))\n"
    "        real([*argv[:-1], str(bad)], cwd, env)\n"
    "        os.kill(os.getpid(), signal.SIG{name})\n"
    "        time.sleep(5)\n"
    "    return real(argv, cwd, env, stdin)\n"
    "g.spawn = spawn"
)


@pytest.mark.parametrize("name", ["HUP", "QUIT", "TERM", "INT"])
def test_a_signal_during_git_am_leaves_no_paused_am(kit3: Kit, name: str) -> None:
    proc = inject(kit3, SIGNAL_DURING_AM.replace("{name}", name), "apply")
    one_line_error(proc, 130, "apply interrupted")
    assert not (kit3.checkout / ".git/rebase-apply").exists()
    assert state_of(kit3)["status"] == "applying"
    one_line_error(kit3.run("refresh"), 2, "an apply was interrupted")
    check(kit3.run("apply"), 0, "[3/3]")


@pytest.mark.parametrize("name", ["HUP", "QUIT"])
def test_a_signal_while_refresh_swaps_finishes_the_swap(kit3: Kit, name: str) -> None:
    fixup_commit(kit3, Path())
    proc = inject(kit3, TERM_WHILE_SWAPPING.replace("SIGTERM", f"SIG{name}"), "refresh")
    one_line_error(proc, 130, "refresh interrupted")
    assert "line 20 better" in (kit3.patches / "0002-twenty.patch").read_text(encoding="utf-8")
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout


# ---- the pure rules behind the table --------------------------------------------------------


@pytest.mark.parametrize("variable", LOCATING)
def test_git_env_drops_every_repository_locating_variable(variable: str) -> None:
    env = git_env(base={variable: "x", "GIT_CONFIG_KEY_7": "core.bare", "GIT_CONFIG_VALUE_7": "true", "HOME": "/h"})
    assert variable not in env or variable == "GIT_CONFIG_COUNT"
    assert "GIT_CONFIG_KEY_7" not in env and env["HOME"] == "/h"
    carried = [(env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"]) for i in range(int(env["GIT_CONFIG_COUNT"]))]
    assert carried[0] == ("core.hooksPath", os.devnull) and ("maintenance.auto", "false") in carried


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("", True),
        ("0", True),
        ("2.5", True),
        ("86400", True),
        ("86401", False),
        ("nan", False),
        ("inf", False),
        ("1e309", False),
        ("-1", False),
        ("x", False),
    ],
)
def test_lock_timeout_range(raw: str, ok: bool) -> None:
    if ok:
        assert 0 <= worklock.parse_timeout(raw) <= worklock.MAX_TIMEOUT_S
    else:
        with pytest.raises(worklock.BadTimeout, match="KIT_LOCK_TIMEOUT"):
            worklock.parse_timeout(raw)


def test_failed_hunk_names_the_file_and_gits_reason() -> None:
    out = "Checking patch vllm_omni/x.py...\nerror: vllm_omni/x.py: already exists in working directory\n"
    assert failed_hunk(out, "") == ("vllm_omni/x.py", "(already exists in working directory)")
    assert failed_hunk("Checking patch a.py...\n", "") is None


def test_failed_hunk_counts_the_hunks_of_the_file_git_names() -> None:
    patch = (
        "diff --git a/old.py b/new.py\nrename from old.py\nrename to new.py\n--- a/old.py\n+++ b/new.py\n"
        "@@ -1 +1 @@\n--- a\n+b\n@@ -7 +7 @@\n-c\n+d\n"
    )
    # git names a renamed file by its old name; `--- a` is a removed line, not a file header
    assert failed_hunk("error: patch failed: old.py:7\n", patch) == ("old.py", "hunk #2 (@@ -7)")
    assert failed_hunk("error: patch failed: old.py:4\n", patch) == ("old.py", "hunk at line 4")


@pytest.mark.parametrize(
    ("path", "generated"),
    [
        ("a/__pycache__/x.pyc", True),
        ("a/x.pyc", True),
        ("a/x.py", False),
        (".coverage.1", True),
        ("a/pycache.py", False),
    ],
)
def test_is_generated(path: str, generated: bool) -> None:
    assert is_generated(path) is generated


@pytest.mark.parametrize(
    "data", [b"", b"x\n", b"caf\xe9\r\n", bytes(range(256))], ids=["empty", "text", "latin1", "binary"]
)
def test_blob_ids_of_wheel_entries_are_gits(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(data)
    assert git_blob_id(data) == git("hash-object", "--no-filters", str(path), cwd=tmp_path).strip()


@pytest.mark.parametrize("left", ["am-folder-git-reads", "am-folder-part-written", "dirty-file", "index.lock",
                                  "refs/heads/series.lock"])  # fmt: skip
def test_apply_again_rebuilds_what_an_interrupted_apply_left(kit3: Kit, left: str) -> None:
    """Found by the edit-loop model: Ctrl-C reaches git am's whole process group, and a kill part way can
    leave .git/rebase-apply (read by git or not) or touched files. The state says "applying", so that is the
    kit's own half-made tree: the next apply rebuilds it instead of refusing what the kit itself left."""
    interrupted_apply(kit3, Path())
    before = snapshot(kit3.patches)
    if left == "am-folder-git-reads":
        kit3.git("am", "-q", "-k", str(kit3.patches / "0003-double-attn.patch"))  # not the next one: it pauses
    elif left == "am-folder-part-written":
        (kit3.checkout / ".git" / "rebase-apply").mkdir()
        (kit3.checkout / ".git" / "rebase-apply" / "next").write_text("1\n")
    elif left == "dirty-file":
        (kit3.checkout / "vllm_omni" / "attn.py").write_text("half written\n")
    else:  # the lock file of a git killed part way (kill -9 of the kit's process group)
        killed_kit_marker(kit3)
        (kit3.checkout / ".git" / left).write_text("")
    proc = kit3.run("apply")
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert not (kit3.checkout / ".git" / "rebase-apply").exists() and not (kit3.checkout / ".git" / left).exists()
    assert state_of(kit3)["status"] == "applied" and kit3.run("refresh").returncode == 0
    assert snapshot(kit3.patches) == before
