"""The fault table: every bad input or interruption of the apply/edit/refresh loop.

Each row drives the real CLI (`python -m scripts ...`) on a small upstream and
asserts the contract of a careful patch queue: the exit code, one line naming the
thing and the fix, no Python traceback, and nothing lost: patches/ byte-identical
(unless the row is a change the user asked for) and the user's own files kept.
Faults that cannot be produced for real here (a full disk, a read-only folder as
root, a signal at an exact instant) are injected at the one filesystem call they
hit, in a real kit process (see `inject`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import (
    AUTHOR,
    FRONT_DOOR,
    SMALL_UPSTREAM,
    Kit,
    build_wheel,
    commit_patch,
    pin_toml,
    rope_with,
)

from scripts.commands.common import checkout_lock
from scripts.gitcmd import git


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def one_line_error(proc: subprocess.CompletedProcess[str], code: int, needle: str) -> None:
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out
    assert proc.returncode == code, out
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("kit: error: "), proc.stderr
    assert " -- " in errors[0], errors[0]  # the thing, then the fix
    assert needle in errors[0], errors[0]


def inject(kit: Kit, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the real kit CLI after `code` has replaced one filesystem call (the fault's only stand-in)."""
    program = f"import errno, os, signal, sys\n{code}\n" + FRONT_DOOR
    return subprocess.run([sys.executable, "-c", program, *args], cwd=kit.root, capture_output=True, text=True,
                          env={**os.environ, "CI": ""})  # fmt: skip


def new_upstream(kit: Kit, tmp_path: Path, rope: dict[int, str]) -> None:
    """Pin the kit to a 0.2.0 whose rope.py differs from 0.1.0 at the given lines."""
    where = tmp_path / "release-0.2.0"
    where.mkdir(exist_ok=True)
    wheel, digest = build_wheel(where, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope_with(rope)}, "0.2.0")
    kit.write_pin(pin_toml("0.2.0", wheel.name, digest))
    kit.seed_wheel(wheel)


def stop_at_twenty(kit: Kit, tmp_path: Path) -> None:
    """An upstream move that makes patch 0002 conflict (0001 still applies)."""
    new_upstream(kit, tmp_path, {19: "line 19 upstream", 21: "line 21 upstream"})
    proc = kit.run("apply")
    assert proc.returncode == 1 and "0002-twenty.patch does not apply" in proc.stderr, proc.stderr


def resolve_twenty(kit: Kit) -> None:
    rope = rope_with({10: "line 10 fixed", 19: "line 19 upstream", 20: "line 20 fixed", 21: "line 21 upstream"})
    (kit.checkout / "vllm_omni/layers/rope.py").write_text(rope)
    kit.git("add", "vllm_omni/layers/rope.py")


@dataclass(frozen=True)
class Row:
    id: str
    setup: Callable[[Kit, Path], object]
    args: tuple[str, ...]
    code: int
    needle: str
    env: tuple[tuple[str, str], ...] = ()


def edit_patch(name: str, change: Callable[[bytes], bytes]) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        path = kit.patches / name
        path.write_bytes(change(path.read_bytes()))

    return setup


def edit_series(change: Callable[[str], str]) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        series = kit.patches / "series"
        series.write_text(change(series.read_text()))

    return setup


def edit_state(change: Callable[[str], str]) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        state = kit.checkout / ".git/kit-state.json"
        state.write_text(change(state.read_text()))

    return setup


def edit_pin(old: str, new: str) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        pin = kit.patches / "upstream.toml"
        pin.write_text(pin.read_text().replace(old, new))

    return setup


def user_git(*args: str) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        git(*args, cwd=kit.checkout, env={**AUTHOR, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/"})

    return setup


def git_am_continue_by_hand(kit: Kit, tmp_path: Path) -> None:
    stop_at_twenty(kit, tmp_path)
    resolve_twenty(kit)
    kit.git("am", "--continue")


def interrupted_apply(kit: Kit, _tmp: Path) -> None:
    """What Ctrl-C after the first patch leaves: the state says applying, HEAD holds one patch."""
    state = json.loads((kit.checkout / ".git/kit-state.json").read_text())
    kit.git("reset", "-q", "--hard", "pristine")
    kit.git("am", "-q", "-k", str(kit.patches / "0001-fix-ten.patch"))
    (kit.checkout / ".git/kit-state.json").write_text(json.dumps({**state, "status": "applying", "head": ""}))


def fixup_commit(kit: Kit, _tmp: Path) -> None:
    """A real edit waiting to be exported, so refresh has files to write."""
    target = kit.git("rev-list", "-1", "HEAD~1").strip()
    (kit.checkout / "vllm_omni/layers/rope.py").write_text(rope_with({10: "line 10 fixed", 20: "line 20 better"}))
    kit.git("commit", "-qam", "tweak", f"--fixup={target}")


def checkout_is_file(kit: Kit, _tmp: Path) -> None:
    shutil.rmtree(kit.checkout)
    kit.checkout.write_text("a user's notes\n")


def foreign_folder(kit: Kit, _tmp: Path) -> None:
    shutil.rmtree(kit.checkout)
    kit.checkout.mkdir()
    (kit.checkout / "notes.txt").write_text("a user's notes\n")


def reused_slug(kit: Kit, _tmp: Path) -> None:
    commit_patch(kit.checkout, {"vllm_omni/new.py": "x = 1\n"}, "[NPU] Another", "fix-ten")


def lock_held(kit: Kit, _tmp: Path) -> None:
    lock = kit.root / ".work/locks/vllm-omni.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    handle = open(lock, "w")  # noqa: SIM115 -- held until the test process ends
    handle.write("pid 4242 (kit refresh)\n")
    handle.flush()
    fcntl.flock(handle, fcntl.LOCK_EX)
    HELD.append(handle)


HELD: list[object] = []


def binary_without_data(kit: Kit, _tmp: Path) -> None:
    path = kit.patches / "0003-double-attn.patch"
    text = path.read_text()
    head, _, _ = text.partition("diff --git ")
    path.write_text(head + "diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n")


def truncated(data: bytes) -> bytes:
    cut = data.index(b"@@ ")
    return data[: cut + 40]


def symlinked_patch(kit: Kit, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.patch"
    real.write_bytes((kit.patches / "0003-double-attn.patch").read_bytes())
    (kit.patches / "0003-double-attn.patch").unlink()
    (kit.patches / "0003-double-attn.patch").symlink_to(real)


def on_branch(kit: Kit, _tmp: Path) -> None:
    kit.git("checkout", "-q", "-b", "experiment")


def detached(kit: Kit, _tmp: Path) -> None:
    kit.git("checkout", "-q", "--detach", "HEAD~1")


def dropped_commit(kit: Kit, _tmp: Path) -> None:
    """The user removed patch 0002's commit (as `git rebase -i` with a deleted line would)."""
    kit.git("rebase", "-q", "--onto", "HEAD~2", "HEAD~1")


def nothing(_kit: Kit, _tmp: Path) -> None:
    return None


ROWS = [
    # measured in the issue
    Row("git-am-continue-by-hand-then-refresh", git_am_continue_by_hand, ("refresh",), 2, "apply -- --continue"),
    Row("interrupted-apply-then-refresh", interrupted_apply, ("refresh",), 2, "an apply was interrupted"),
    Row("interrupted-apply-then-lint", interrupted_apply, ("lint",), 2, "an apply was interrupted"),
    Row(
        "paused-rebase-then-refresh",
        user_git("rebase", "-q", "-i", "pristine"),
        ("refresh",),
        2,
        "in the middle of a git rebase",
    ),  # fmt: skip
    Row(
        "crlf-patch",
        edit_patch("0001-fix-ten.patch", lambda b: b.replace(b"\n", b"\r\n")),
        ("apply",),
        2,
        "CRLF line endings",
    ),  # fmt: skip
    Row(
        "series-entry-outside-patches",
        edit_series(lambda s: s + "../x.patch\n"),
        ("apply",),
        2,
        "not a plain NNNN-<slug>.patch file name",
    ),  # fmt: skip
    Row("corrupt-state-json", edit_state(lambda s: s[:20]), ("lint",), 2, "kit-state.json is unreadable"),
    Row("corrupt-state-json-apply", edit_state(lambda s: s[:20]), ("apply",), 2, "apply -- --force"),
    Row(
        "state-extra-key",
        edit_state(lambda s: s.replace("{", '{"extra": 1,', 1)),
        ("apply",),
        2,
        "unexpected keys ['extra']",
    ),  # fmt: skip
    Row(
        "patch-not-utf8",
        edit_patch("0003-double-attn.patch", lambda b: b.replace(b"Double", b"D\xffuble")),
        ("apply",),
        2,
        "is not valid UTF-8",
    ),  # fmt: skip
    Row("checkout-is-a-file", checkout_is_file, ("apply",), 2, "is a file, not a kit checkout"),
    Row("two-callers", lock_held, ("apply",), 2, "in use by pid 4242 (kit refresh)", (("KIT_LOCK_TIMEOUT", "1"),)),
    Row("truncated-patch", edit_patch("0003-double-attn.patch", truncated), ("apply",), 2, "is corrupt"),
    Row(
        "version-mislabel",
        edit_pin('version = "0.1.0"', 'version = "9.9.9"'),
        ("apply",),
        2,
        "version '9.9.9' but wheel.filename is version 0.1.0",
    ),  # fmt: skip
    Row("version-integer", edit_pin('version = "0.1.0"', "version = 30"), ("apply",), 2, "is not a string"),
    Row("foreign-folder-at-checkout", foreign_folder, ("apply", "--force"), 2, "a folder the kit did not make"),
    Row("reused-slug", reused_slug, ("refresh",), 2, "both carry Kit-Patch: fix-ten"),
    # the kit's own
    Row(
        "empty-patch",
        edit_patch("0003-double-attn.patch", lambda b: b[: b.index(b"diff --git")]),
        ("apply",),
        2,
        "holds no diff",
    ),  # fmt: skip
    Row("binary-hunk-without-data", binary_without_data, ("apply",), 2, "binary file without its data"),
    Row("symlinked-patch", symlinked_patch, ("apply",), 2, "is a symbolic link"),
    Row("checkout-on-another-branch-apply", on_branch, ("apply",), 2, "on branch experiment, not on series"),
    Row("checkout-on-another-branch-refresh", on_branch, ("refresh",), 2, "on branch experiment"),
    Row("detached-head-refresh", detached, ("refresh",), 2, "a detached HEAD"),
    Row("dropped-commit-refresh", dropped_commit, ("refresh",), 2, "refresh would delete it"),
    Row("drop-unknown-slug", dropped_commit, ("refresh", "--drop", "nope"), 2, "--drop nope: no patch"),
    Row("drop-slug-still-held", nothing, ("refresh", "--drop", "twenty"), 2, "still holds that patch"),
    Row("continue-without-conflict", nothing, ("apply", "--continue"), 2, "nothing to continue"),
    Row("abort-without-conflict", nothing, ("apply", "--abort"), 2, "nothing to abort"),
    Row("continue-unresolved", stop_at_twenty, ("apply", "--continue"), 2, "is not resolved yet (nothing staged)"),
    Row("apply-while-stopped", stop_at_twenty, ("apply",), 2, "stopped at patch 0002-twenty.patch"),
    Row("lint-while-stopped", stop_at_twenty, ("lint",), 2, "-- --continue"),
    Row(
        "series-names-missing-file",
        edit_series(lambda s: s + "0009-gone.patch\n"),
        ("apply",),
        2,
        "which is not in patches/",
    ),  # fmt: skip
    Row(
        "series-not-utf8",
        lambda kit, _t: (kit.patches / "series").write_bytes(b"\xff\n"),
        ("apply",),
        2,
        "series is not valid UTF-8",
    ),  # fmt: skip
    Row(
        "no-upstream-status",
        edit_patch("0003-double-attn.patch", lambda b: b.replace(b"Upstream-Status", b"X")),
        ("apply",),
        2,
        "has no Upstream-Status",
    ),  # fmt: skip
    Row(
        "lock-timeout-not-a-number", nothing, ("apply",), 2, "KIT_LOCK_TIMEOUT='soon'", (("KIT_LOCK_TIMEOUT", "soon"),)
    ),
    Row("pin-file-missing", lambda kit, _t: (kit.patches / "upstream.toml").unlink(), ("apply",), 2, "upstream.toml"),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_fault_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    row.setup(kit3, tmp_path)
    before = snapshot(kit3.patches)
    user_file = kit3.checkout / "notes.txt"
    user_text = user_file.read_text() if user_file.is_file() else None
    proc = kit3.run(*row.args, env=dict(row.env))
    one_line_error(proc, row.code, row.needle)
    assert snapshot(kit3.patches) == before  # nothing lost, nothing half-written
    if user_text is not None:
        assert user_file.read_text() == user_text
    if kit3.checkout.is_file():
        assert kit3.checkout.read_text() == "a user's notes\n"
    while HELD:
        HELD.pop().close()  # type: ignore[attr-defined]


# ---- injected faults: the disk, the folder's permissions, a signal at an exact instant ----

ENOSPC = "os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device'))"
EROFS = "os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.EROFS, 'Read-only file system'))"
TERM_WHILE_WRITING = "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGTERM)"
TERM_WHILE_SWAPPING = (
    "real = os.replace\n"
    "def replace(a, b):\n"
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "    real(a, b)\n"
    "os.replace = replace"
)


@pytest.mark.parametrize(
    ("code", "needle"),
    [(ENOSPC, "No space left on device"), (EROFS, "Read-only file system")],
    ids=["disk-full-on-refresh", "read-only-patches-on-refresh"],
)
def test_refresh_that_cannot_write_changes_nothing(kit3: Kit, tmp_path: Path, code: str, needle: str) -> None:
    fixup_commit(kit3, tmp_path)
    before = snapshot(kit3.patches)
    proc = inject(kit3, code, "refresh")
    one_line_error(proc, 2, needle)
    assert "patches/ is unchanged" in proc.stderr
    assert snapshot(kit3.patches) == before
    assert not list(kit3.patches.glob(".*kit-tmp"))


def test_sigterm_while_refresh_writes_changes_nothing(kit3: Kit, tmp_path: Path) -> None:
    fixup_commit(kit3, tmp_path)
    before = snapshot(kit3.patches)
    proc = inject(kit3, TERM_WHILE_WRITING, "refresh")
    one_line_error(proc, 130, "refresh interrupted")
    assert snapshot(kit3.patches) == before
    assert not list(kit3.patches.glob(".*kit-tmp"))


def test_sigterm_while_refresh_swaps_finishes_the_swap(kit3: Kit, tmp_path: Path) -> None:
    fixup_commit(kit3, tmp_path)
    proc = inject(kit3, TERM_WHILE_SWAPPING, "refresh")
    one_line_error(proc, 130, "refresh interrupted")
    assert "line 20 better" in (kit3.patches / "0002-twenty.patch").read_text()  # the swap completed
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout  # and a rerun finds nothing to do


def test_concurrent_applies_run_one_after_the_other(kit3: Kit) -> None:
    # The test holds the checkout's lock as a first apply would; the second apply says it waits (read before the
    # lock is let go: an event, not a sleep), is still running then, and finishes once the lock is free.
    cmd = [sys.executable, "-m", "scripts", "apply"]
    with checkout_lock(kit3):
        proc = subprocess.Popen(cmd, cwd=kit3.root, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={**os.environ, "CI": ""})  # fmt: skip
        assert proc.stdout is not None
        waiting = next((line for line in proc.stdout if "waiting for" in line), "it ended without waiting")
        assert f"waiting for .work/vllm-omni: in use by pid {os.getpid()}" in waiting
        assert proc.poll() is None  # it cannot go on while the lock is held
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in out + err, out + err
    state = json.loads((kit3.checkout / ".git/kit-state.json").read_text())
    assert state["status"] == "applied" and state["head"] == kit3.git("rev-parse", "HEAD").strip()
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 3


# ---- the README's recovery, followed to the letter, keeps every patch ----------------


def test_readme_conflict_recovery_keeps_every_patch(kit3: Kit, tmp_path: Path) -> None:
    stop_at_twenty(kit3, tmp_path)
    resolve_twenty(kit3)  # resolve; git add
    proc = kit3.run("apply", "--continue", check=True)
    assert "0002-twenty.patch: resolved" in proc.stdout and "[3/3] 0003-double-attn.patch: clean" in proc.stdout
    one_line_error(kit3.run("lint"), 2, "not exported to patches/")  # lint waits for the refresh
    out = kit3.run("refresh", check=True).stdout
    assert "0002-twenty.patch: updated" in out
    assert [p.name for p in sorted(kit3.patches.glob("*.patch"))] == [
        "0001-fix-ten.patch",
        "0002-twenty.patch",
        "0003-double-attn.patch",
    ]
    assert "line 19 upstream" in (kit3.patches / "0002-twenty.patch").read_text()
    assert kit3.run("apply", check=True).returncode == 0  # the refreshed series applies cleanly on the new pin


def test_git_am_continue_by_hand_then_apply_continue(kit3: Kit, tmp_path: Path) -> None:
    git_am_continue_by_hand(kit3, tmp_path)
    proc = kit3.run("apply", "--continue", check=True)
    assert "resolved" in proc.stdout and "[3/3]" in proc.stdout
    kit3.run("refresh", check=True)
    assert len(list(kit3.patches.glob("*.patch"))) == 3


def test_abort_goes_back_to_the_previous_pin(kit3: Kit, tmp_path: Path) -> None:
    head = kit3.git("rev-parse", "HEAD")
    stop_at_twenty(kit3, tmp_path)
    assert [p.name for p in kit3.checkout.parent.iterdir() if p.name.startswith(".vllm-omni")] == []  # no copy aside
    proc = kit3.run("apply", "--abort", check=True)
    assert "restored the checkout of the previous pin" in proc.stdout
    assert kit3.git("rev-parse", "HEAD") == head
    assert "0.1.0, pristine" in kit3.git("log", "-1", "--format=%s", "pristine")
    assert kit3.git("status", "--porcelain") == ""  # the previous pin's files, nothing of the new one's left


def test_a_finished_apply_leaves_no_way_back_that_a_later_abort_could_take(kit3: Kit) -> None:
    # The last-good head is kept for the apply that may be aborted; once an apply finished it is gone, so an
    # abort after a later apply that started from unexported work never goes back to an older head.
    kit3.run("apply", check=True)  # from a complete checkout: it keeps the way back while it runs
    assert kit3.git("for-each-ref", "refs/kit/last-good") == ""
    assert not (kit3.checkout / ".git" / "kit-state.last-good.json").exists()


def test_a_lock_a_signal_left_on_the_way_back_does_not_stop_the_next_apply(kit3: Kit) -> None:
    # Ctrl-C reaches the git that moves or deletes refs/kit/last-good (found by the edit-loop model): its lock file
    # stays. The ref is the kit's own and the kit holds the checkout's lock, so the next apply goes on.
    (kit3.checkout / ".git" / "refs" / "kit").mkdir(parents=True, exist_ok=True)
    (kit3.checkout / ".git" / "refs" / "kit" / "last-good.lock").write_text("", encoding="utf-8")
    assert kit3.run("apply", check=True).returncode == 0
    assert kit3.git("for-each-ref", "refs/kit/") == "" and not list((kit3.checkout / ".git" / "refs" / "kit").iterdir())


def test_abort_on_the_same_pin_goes_back_to_the_last_good_head(kit3: Kit) -> None:
    head = kit3.git("rev-parse", "HEAD")
    patch = kit3.patches / "0002-twenty.patch"
    patch.write_text(patch.read_text().replace("-line 20\n", "-line 20 (not there)\n"))
    assert kit3.run("apply").returncode == 1
    kit3.run("apply", "--abort", check=True)
    assert kit3.git("rev-parse", "HEAD") == head
    one_line_error(kit3.run("lint"), 2, "does not match patches/")  # patches/ still holds the broken edit


def test_force_leaves_a_paused_am_where_git_cannot_guess_an_identity(kit3: Kit, tmp_path: Path) -> None:
    stop_at_twenty(kit3, tmp_path)
    no_guessing = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.useConfigOnly", "GIT_CONFIG_VALUE_0": "true",
                   "EMAIL": "", "GIT_AUTHOR_EMAIL": "", "GIT_COMMITTER_EMAIL": ""}  # fmt: skip
    proc = kit3.run("apply", "--force", env=no_guessing)
    assert proc.returncode == 1 and "0002-twenty.patch does not apply" in proc.stderr  # got past the am --abort
    assert "Traceback" not in proc.stderr


def test_generated_files_in_the_checkout_are_not_edits(kit3: Kit) -> None:
    (kit3.checkout / "vllm_omni/__pycache__").mkdir()
    (kit3.checkout / "vllm_omni/__pycache__/attn.cpython-311.pyc").write_bytes(b"\0")
    assert kit3.run("apply").returncode == 0


def test_comments_in_the_middle_of_the_series_survive_refresh(kit3: Kit) -> None:
    series = kit3.patches / "series"
    text = series.read_text().replace("0002-twenty.patch", "# why twenty\n0002-twenty.patch  # keep")
    series.write_text(text)
    kit3.run("apply", check=True)
    fixup_commit(kit3, Path())
    kit3.run("refresh", check=True)
    assert series.read_text() == text


def test_binary_changes_round_trip(kit3: Kit) -> None:
    data = bytes(range(256)) * 4
    (kit3.checkout / "vllm_omni/table.bin").write_bytes(data)
    kit3.git("add", "-A")
    kit3.git("commit", "-q", "-m", "[NPU] Table\n\nUpstream-Status: Pending\nKit-Patch: table\n")
    kit3.run("refresh", check=True)
    assert "GIT binary patch" in (kit3.patches / "0004-table.patch").read_text()
    kit3.run("apply", "--force", check=True)
    assert (kit3.checkout / "vllm_omni/table.bin").read_bytes() == data


def test_drop_names_what_refresh_removes(kit3: Kit) -> None:
    dropped_commit(kit3, Path())
    out = kit3.run("refresh", "--drop", "twenty", check=True).stdout
    assert "0002-twenty.patch: dropped" in out
    assert [p.name for p in sorted(kit3.patches.glob("*.patch"))] == ["0001-fix-ten.patch", "0002-double-attn.patch"]


def test_a_waiting_caller_says_for_whom(kit3: Kit) -> None:
    lock_held(kit3, Path())
    started = time.monotonic()
    proc = kit3.run("apply", env={"KIT_LOCK_TIMEOUT": "1"})
    assert time.monotonic() - started >= 1
    assert "waiting for .work/vllm-omni: in use by pid 4242 (kit refresh)" in proc.stdout
    while HELD:
        HELD.pop().close()  # type: ignore[attr-defined]


def test_an_interpreter_without_pip_is_named_with_the_fix(small_kit: Kit, tmp_path: Path) -> None:
    """uv-made environments (uvx, nox's uv backend) have no pip: the wheel download says so, in one line."""
    for wheel in (small_kit.root / ".work/downloads").glob("*.whl"):
        wheel.unlink()  # so that apply must download it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "nopip")], check=True)
    python = tmp_path / "nopip" / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "scripts", "apply"], cwd=small_kit.root, capture_output=True, text=True)
    one_line_error(proc, 2, "pip is not installed for")
    assert "uvx --with pip" in proc.stderr and not (small_kit.root / ".work/vllm-omni").exists()
