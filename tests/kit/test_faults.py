"""The fault table: every bad input or interruption of the apply/edit/refresh loop.

Each row drives the real CLI on kit3 and asserts the contract of faulttable.py (exit code, one line
naming the thing and the fix, no traceback, nothing lost); a row's `then` pins what that row adds to
it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import AUTHOR, Kit, commit_patch, rope_with
from faulttable import (
    CHECKOUT,
    NOTES,
    P1,
    P2_STOPS,
    P3,
    PIN,
    SERIES,
    STATE,
    Row,
    Then,
    commit_bytes,
    edit,
    inject,
    interrupted_apply,
    lock_held,
    lock_wait,
    new_upstream,
    one_line_error,
    put,
    replaced,
    run_row,
    snapshot,
)

from scripts.gitcmd import git


def stop_at_twenty(kit: Kit, tmp_path: Path) -> None:
    """An upstream move that makes patch 0002 conflict (0001 still applies)."""
    new_upstream(kit, tmp_path, {19: "line 19 upstream", 21: "line 21 upstream"})
    proc = kit.run("apply")
    assert proc.returncode == 1 and P2_STOPS in proc.stderr, proc.stderr


def resolve_twenty(kit: Kit) -> None:
    rope = rope_with(
        {10: "line 10 fixed", 19: "line 19 upstream", 20: "line 20 fixed", 21: "line 21 upstream"}
    )
    (kit.checkout / "vllm_omni/layers/rope.py").write_text(rope)
    kit.git("add", "vllm_omni/layers/rope.py")


def appended(path: str, tail: bytes) -> Callable[[Kit, Path], None]:
    return edit(path, lambda b: b + tail)


def user_git(*args: str) -> Callable[[Kit, Path], None]:
    def setup(kit: Kit, _tmp: Path) -> None:
        git(*args, cwd=kit.checkout, env={**AUTHOR, "GIT_SEQUENCE_EDITOR": "sed -i 1s/^pick/edit/"})

    return setup


PAUSED_REBASE = user_git("rebase", "-q", "-i", "pristine")
ON_BRANCH = user_git("checkout", "-q", "-b", "experiment")
# The user removed patch 0002's commit (as `git rebase -i` with a deleted line would).
DROPPED_COMMIT = user_git("rebase", "-q", "--onto", "HEAD~2", "HEAD~1")


def git_am_continue_by_hand(kit: Kit, tmp_path: Path) -> None:
    stop_at_twenty(kit, tmp_path)
    resolve_twenty(kit)
    kit.git("am", "--continue")


def fixup_commit(kit: Kit, _tmp: Path) -> None:
    """A real edit waiting to be exported, so refresh has files to write."""
    target = kit.git("rev-list", "-1", "HEAD~1").strip()
    (kit.checkout / "vllm_omni/layers/rope.py").write_text(
        rope_with({10: "line 10 fixed", 20: "line 20 better"})
    )
    kit.git("commit", "-qam", "tweak", f"--fixup={target}")


def checkout_is_file(kit: Kit, _tmp: Path) -> None:
    shutil.rmtree(kit.checkout)
    kit.checkout.write_text(NOTES)


def foreign_folder(kit: Kit, _tmp: Path) -> None:
    shutil.rmtree(kit.checkout)
    kit.checkout.mkdir()
    (kit.checkout / "notes.txt").write_text(NOTES)


def diffs_replaced(diffs: bytes) -> Callable[[Kit, Path], None]:
    """Patch 0003 with its message kept and its diffs replaced."""
    return edit(P3, lambda b: b[: b.index(b"diff --git")] + diffs)


PYC = put(f"{CHECKOUT}/vllm_omni/__pycache__/attn.cpython-311.pyc", b"\0")
NO_GUESSING = {
    "GIT_CONFIG_COUNT": "1",
    "GIT_CONFIG_KEY_0": "user.useConfigOnly",
    "GIT_CONFIG_VALUE_0": "true",
}
NO_GUESSING |= {"EMAIL": "", "GIT_AUTHOR_EMAIL": "", "GIT_COMMITTER_EMAIL": ""}
NO_DATA = (
    b"diff --git a/x.bin b/x.bin\nindex 1..2 100644\nBinary files a/x.bin and b/x.bin differ\n"
)


def symlinked_patch(kit: Kit, tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.patch"
    real.write_bytes((kit.root / P3).read_bytes())
    (kit.root / P3).unlink()
    (kit.root / P3).symlink_to(real)


BOM = b"\xef\xbb\xbf"
REBASE_BOTH = "rebase 0.28.0 --git https://example.invalid/vllm-omni main"


def SLUG_IS(value: bytes) -> Callable[[Kit, Path], None]:  # noqa: N802 -- reads as the rows' words
    return replaced(P3, b"Kit-Patch: double-attn", b"Kit-Patch: " + value)


def UNEXPORTED(kit: Kit, _tmp: Path) -> None:  # noqa: N802
    commit_bytes(kit, {"vllm_omni/new.py": b"x = 1\n"}, "mine")


def notes_kept(where: str) -> Then:
    """The user's own file at the checkout's path (relative to it) is untouched."""

    def then(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
        assert (kit.checkout / where).read_text() == NOTES

    return then


def said_whom_it_waited_for(_kit: Kit, proc: subprocess.CompletedProcess[str]) -> None:
    # how long: test_worklock
    assert "waiting for .work/vllm-omni: in use by pid 4242 (kit refresh)" in proc.stdout


ROWS = [
    # measured in the issue
    Row(
        "git-am-continue-by-hand-then-refresh",
        "refresh",
        "apply -- --continue",
        git_am_continue_by_hand,
    ),
    Row("interrupted-apply-then-refresh", "refresh", "an apply was interrupted", interrupted_apply),
    Row("interrupted-apply-then-lint", "lint", "an apply was interrupted", interrupted_apply),
    Row("paused-rebase-then-refresh", "refresh", "in the middle of a git rebase", PAUSED_REBASE),
    Row("crlf-patch", "apply", "CRLF line endings", replaced(P1, b"\n", b"\r\n")),
    Row(
        "series-entry-outside-patches",
        "apply",
        "not a plain NNNN-<slug>.patch file name",
        appended(SERIES, b"../x.patch\n"),
    ),
    Row(
        "corrupt-state-json", "lint", "kit-state.json is unreadable", edit(STATE, lambda b: b[:20])
    ),
    Row("corrupt-state-json-apply", "apply", "apply -- --force", edit(STATE, lambda b: b[:20])),
    Row(
        "state-extra-key",
        "apply",
        "unexpected keys ['extra']",
        replaced(STATE, b"{", b'{"extra": 1,', 1),
    ),
    Row("patch-not-utf8", "apply", "is not valid UTF-8", replaced(P3, b"Double", b"D\xffuble")),
    Row(
        "checkout-is-a-file",
        "apply",
        "is a file, not a kit checkout",
        checkout_is_file,
        then=notes_kept("."),
    ),
    Row(
        "two-callers",
        "apply",
        "in use by pid 4242 (kit refresh)",
        lock_held,
        env=lock_wait("1"),
        then=said_whom_it_waited_for,
    ),
    Row("truncated-patch", "apply", "is corrupt", edit(P3, lambda b: b[: b.index(b"@@ ") + 40])),
    Row(
        "version-mislabel",
        "apply",
        "version '9.9.9' but wheel.filename is version 0.1.0",
        replaced(PIN, b'version = "0.1.0"', b'version = "9.9.9"'),
    ),
    Row(
        "version-integer",
        "apply",
        "is not a string",
        replaced(PIN, b'version = "0.1.0"', b"version = 30"),
    ),
    Row(
        "foreign-folder-at-checkout",
        "apply --force",
        "a folder the kit did not make",
        foreign_folder,
        then=notes_kept("notes.txt"),
    ),
    Row(
        "reused-slug",
        "refresh",
        "both carry Kit-Patch: fix-ten",
        lambda kit, _t: commit_patch(
            kit.checkout, {"vllm_omni/new.py": "x = 1\n"}, "[NPU] Another", "fix-ten"
        ),
    ),
    # the kit's own
    Row("empty-patch", "apply", "holds no diff", diffs_replaced(b"")),
    Row(
        "binary-hunk-without-data", "apply", "binary file without its data", diffs_replaced(NO_DATA)
    ),
    Row("symlinked-patch", "apply", "is a symbolic link", symlinked_patch),
    Row(
        "checkout-on-another-branch-apply",
        "apply",
        "on branch experiment, not on series",
        ON_BRANCH,
    ),
    Row("checkout-on-another-branch-refresh", "refresh", "on branch experiment", ON_BRANCH),
    Row(
        "detached-head-refresh",
        "refresh",
        "a detached HEAD",
        user_git("checkout", "-q", "--detach", "HEAD~1"),
    ),
    Row("dropped-commit-refresh", "refresh", "refresh would delete it", DROPPED_COMMIT),
    Row("drop-unknown-slug", "refresh --drop nope", "--drop nope: no patch", DROPPED_COMMIT),
    Row("drop-slug-still-held", "refresh --drop twenty", "still holds that patch"),
    Row("continue-without-conflict", "apply --continue", "nothing to continue"),
    Row("abort-without-conflict", "apply --abort", "nothing to abort"),
    Row(
        "continue-unresolved",
        "apply --continue",
        "is not resolved yet (nothing staged)",
        stop_at_twenty,
    ),
    # --force gets past the am --abort where git cannot guess an identity
    Row(
        "force-where-git-cannot-guess-an-identity",
        "apply --force",
        P2_STOPS,
        stop_at_twenty,
        1,
        env=NO_GUESSING,
    ),
    Row("apply-while-stopped", "apply", "stopped at patch 0002-twenty.patch", stop_at_twenty),
    Row("lint-while-stopped", "lint", "-- --continue", stop_at_twenty),
    Row(
        "series-names-missing-file",
        "apply",
        "which is not in patches/",
        appended(SERIES, b"0009-gone.patch\n"),
    ),
    Row("series-not-utf8", "apply", "series is not valid UTF-8", put(SERIES, b"\xff\n")),
    Row(
        "no-upstream-status",
        "apply",
        "has no Upstream-Status",
        replaced(P3, b"Upstream-Status", b"X"),
    ),
    Row("lock-timeout-not-a-number", "apply", "KIT_LOCK_TIMEOUT='soon'", env=lock_wait("soon")),
    Row("generated-files-are-not-edits", "apply", "[3/3]", PYC, 0),
    Row(
        "pin-file-missing",
        "apply",
        "upstream.toml",
        lambda kit, _t: (kit.patches / "upstream.toml").unlink(),
    ),
    # every file a user edits by hand (invariant 12): refused in one line naming the file, the entry
    # and the fix
    Row(
        "series-bom",
        "apply",
        "patches/series starts with a UTF-8 byte order mark",
        edit(SERIES, BOM.__add__),
    ),
    Row(
        "pin-bom",
        "apply",
        "patches/upstream.toml starts with a UTF-8 byte order mark",
        edit(PIN, BOM.__add__),
    ),
    Row(
        "pin-key-typo",
        "apply",
        "wheel.sha265 is not a field of the pin",
        replaced(PIN, b"sha256 =", b"sha265 ="),
    ),
    Row(
        "pin-key-missing",
        "apply",
        "git.url is missing -- add it",
        replaced(PIN, b"url =", b"# url ="),
    ),
    Row(
        "pin-not-utf8",
        "apply",
        "upstream.toml is not valid UTF-8 (line 1",
        edit(PIN, b"#\xff\n".__add__),
    ),
    Row(
        "patch-bom",
        "apply",
        "0001-fix-ten.patch starts with a UTF-8 byte order mark",
        edit(P1, BOM.__add__),
    ),
    Row("slug-with-slash", "apply", "which holds characters a slug may not", SLUG_IS(b"a/b")),
    Row("slug-300-characters", "apply", "a Kit-Patch: slug of 300 characters", SLUG_IS(b"x" * 300)),
    Row("slug-empty", "apply", "has no Kit-Patch: trailer", SLUG_IS(b"")),
    Row(
        "two-slugs-in-a-patch",
        "apply",
        "carries 2 Kit-Patch: trailers (double-attn, other)",
        replaced(P3, b"Kit-Patch: double-attn", b"Kit-Patch: double-attn\nKit-Patch: other"),
    ),
    Row(
        "two-statuses-in-a-patch",
        "apply",
        "carries 2 Upstream-Status: trailers",
        replaced(
            P3, b"Upstream-Status: Pending", b"Upstream-Status: Pending\nUpstream-Status: Pending"
        ),
    ),
    Row(
        "slug-upper-case", "apply", "write 'Kit-Patch: double-attn' in it", SLUG_IS(b"Double-Attn")
    ),
    Row("series-crlf-kept-as-entries", "apply", "[3/3]", replaced(SERIES, b"\n", b"\r\n"), 0),
    Row(
        "series-names-a-folder",
        "apply",
        "not a plain NNNN-<slug>.patch",
        appended(SERIES, b"sub/0004-x.patch\n"),
    ),
    Row(
        "ci-targets-bom",
        "ascendci image github x",
        "ci/ascend/targets.toml starts with a UTF-8 byte order mark",
        edit("ci/ascend/targets.toml", BOM.__add__),
    ),
    Row(
        "ci-targets-not-utf8",
        "ascendci model",
        "ci/ascend/targets.toml is not valid UTF-8",
        edit("ci/ascend/targets.toml", b"# \xff\n".__add__),
    ),
    # rebase: what it was asked is checked before it downloads or reads anything
    Row("rebase-release-and-git", REBASE_BOTH, "only one can be tried"),
    Row(
        "rebase-baseline-missing",
        "rebase 0.2.0 --baseline typo.json",
        "--baseline typo.json: No such file",
    ),
    Row(
        "rebase-baseline-not-json",
        "rebase 0.2.0 --baseline notes.txt",
        "is not a rebase report",
        put("notes.txt", b"x"),
    ),
    Row(
        "rebase-baseline-bom",
        "rebase 0.2.0 --baseline r.json",
        "is not a rebase report",
        put("r.json", BOM + b"{}"),
    ),
    Row(
        "rebase-move-over-local-edits",
        "rebase 0.2.0 --move",
        "has uncommitted edits",
        put(f"{CHECKOUT}/x.py", b"1"),
    ),
    Row(
        "rebase-move-over-unexported-work",
        "rebase 0.2.0 --move",
        "not exported to patches/",
        UNEXPORTED,
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_fault_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


# ---- injected faults: the disk, the folder's permissions, a signal at an exact instant ----

ENOSPC = (
    "os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, 'No space left on device'))"
)
EROFS = "os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.EROFS, 'Read-only file system'))"
NAME_TOO_LONG = (
    "os.fsync = lambda fd: (_ for _ in ()).throw(OSError(errno.ENAMETOOLONG, 'File name too long'))"
)
TERM_WHILE_WRITING = "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGTERM)"
TERM_WHILE_SWAPPING = """real = os.replace
def replace(a, b):
    os.kill(os.getpid(), signal.SIGTERM)
    real(a, b)
os.replace = replace"""


@pytest.mark.parametrize(
    ("code", "exit_code", "needle"),
    [
        (ENOSPC, 2, "No space left on device"),
        (EROFS, 2, "Read-only file system"),
        (TERM_WHILE_WRITING, 130, "refresh interrupted by SIGTERM"),
        (NAME_TOO_LONG, 2, "a file name is too long for the file system"),  # not "free disk space"
    ],
    ids=[
        "disk-full-on-refresh",
        "read-only-patches-on-refresh",
        "sigterm-while-writing",
        "name-too-long",
    ],
)
def test_refresh_cut_short_changes_nothing(
    kit3: Kit, code: str, exit_code: int, needle: str
) -> None:
    fixup_commit(kit3, Path())  # a real edit to export
    before = snapshot(kit3.patches)
    proc = inject(kit3, code, "refresh")
    one_line_error(proc, exit_code, needle)
    assert "patches/ is unchanged" in proc.stderr and snapshot(kit3.patches) == before
    assert not list(kit3.patches.glob(".*kit-tmp"))


@pytest.mark.parametrize("name", ["TERM", "HUP", "QUIT"])
def test_a_signal_while_refresh_swaps_finishes_the_swap(kit3: Kit, name: str) -> None:
    fixup_commit(kit3, Path())
    proc = inject(kit3, TERM_WHILE_SWAPPING.replace("SIGTERM", f"SIG{name}"), "refresh")
    one_line_error(proc, 130, "refresh interrupted")
    # the swap completed
    assert "line 20 better" in (kit3.patches / "0002-twenty.patch").read_text()
    # and a rerun finds nothing to do
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout


# ---- the README's recovery, followed to the letter, keeps every patch ----------------


def patch_names(kit: Kit) -> list[str]:
    return [p.name for p in sorted(kit.patches.glob("*.patch"))]


@pytest.mark.parametrize("by_hand", [False, True], ids=["readme", "git-am-continue-by-hand"])
def test_conflict_recovery_keeps_every_patch(kit3: Kit, tmp_path: Path, by_hand: bool) -> None:
    stop_at_twenty(kit3, tmp_path)
    resolve_twenty(kit3)  # resolve; git add
    if by_hand:
        kit3.git("am", "--continue")
    proc = kit3.run("apply", "--continue", check=True)
    assert (
        "0002-twenty.patch: resolved" in proc.stdout
        and "[3/3] 0003-double-attn.patch: clean" in proc.stdout
    )
    one_line_error(kit3.run("lint"), 2, "not exported to patches/")  # lint waits for the refresh
    assert "0002-twenty.patch: updated" in kit3.run("refresh", check=True).stdout
    assert patch_names(kit3) == [
        "0001-fix-ten.patch",
        "0002-twenty.patch",
        "0003-double-attn.patch",
    ]
    assert "line 19 upstream" in (kit3.patches / "0002-twenty.patch").read_text()
    kit3.run("apply", check=True)  # the refreshed series applies cleanly on the new pin


def test_abort_goes_back_to_the_previous_pin(kit3: Kit, tmp_path: Path) -> None:
    head = kit3.git("rev-parse", "HEAD")
    stop_at_twenty(kit3, tmp_path)
    # no copy aside
    assert [p.name for p in kit3.checkout.parent.iterdir() if p.name.startswith(".vllm-omni")] == []
    assert (
        "restored the checkout of the previous pin"
        in kit3.run("apply", "--abort", check=True).stdout
    )
    assert kit3.git("rev-parse", "HEAD") == head
    assert "0.1.0, pristine" in kit3.git("log", "-1", "--format=%s", "pristine")
    # the previous pin's files, nothing of the new one's left
    assert kit3.git("status", "--porcelain") == ""


def test_a_finished_apply_leaves_no_way_back_nor_a_lock_a_signal_left_on_it(kit3: Kit) -> None:
    # The last-good head is kept for the apply that may be aborted; once an apply finished it is
    # gone, so an abort after a later apply that started from unexported work never goes back to an
    # older head. Ctrl-C reaching the git that moves or deletes refs/kit/last-good (found by the
    # edit-loop model) leaves its lock file: the ref is the kit's own and the kit holds the
    # checkout's lock, so the next apply goes on.
    refs = kit3.checkout / ".git" / "refs" / "kit"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "last-good.lock").write_text("", encoding="utf-8")
    kit3.run("apply", check=True)  # from a complete checkout: it keeps the way back while it runs
    assert kit3.git("for-each-ref", "refs/kit/") == "" and not list(refs.iterdir())
    assert not (kit3.checkout / ".git" / "kit-state.last-good.json").exists()


def test_abort_on_the_same_pin_goes_back_to_the_last_good_head(kit3: Kit) -> None:
    head = kit3.git("rev-parse", "HEAD")
    replaced("patches/0002-twenty.patch", b"-line 20\n", b"-line 20 (not there)\n")(kit3, Path())
    assert kit3.run("apply").returncode == 1
    kit3.run("apply", "--abort", check=True)
    assert kit3.git("rev-parse", "HEAD") == head
    # patches/ still holds the broken edit
    one_line_error(kit3.run("lint"), 2, "does not match patches/")


def test_comments_in_the_middle_of_the_series_survive_refresh(kit3: Kit) -> None:
    series = kit3.patches / "series"
    text = series.read_text().replace(
        "0002-twenty.patch", "# why twenty\n0002-twenty.patch  # keep"
    )
    series.write_text(text)
    kit3.run("apply", check=True)
    fixup_commit(kit3, Path())
    kit3.run("refresh", check=True)
    assert series.read_text() == text


def test_binary_changes_round_trip(kit3: Kit) -> None:
    data = bytes(range(256)) * 4
    commit_bytes(kit3, {"vllm_omni/table.bin": data}, "table")
    kit3.run("refresh", check=True)
    assert "GIT binary patch" in (kit3.patches / "0004-table.patch").read_text()
    kit3.run("apply", "--force", check=True)
    assert (kit3.checkout / "vllm_omni/table.bin").read_bytes() == data


def test_drop_names_what_refresh_removes(kit3: Kit) -> None:
    DROPPED_COMMIT(kit3, Path())
    assert (
        "0002-twenty.patch: dropped" in kit3.run("refresh", "--drop", "twenty", check=True).stdout
    )
    assert patch_names(kit3) == ["0001-fix-ten.patch", "0002-double-attn.patch"]


def test_an_interpreter_without_pip_is_named_with_the_fix(small_kit: Kit, tmp_path: Path) -> None:
    """uv-made environments (uvx, nox's uv backend) have no pip: the wheel download says so, in one
    line."""
    for wheel in (small_kit.root / ".work/downloads").glob("*.whl"):
        wheel.unlink()  # so that apply must download it
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "nopip")], check=True
    )
    python = tmp_path / "nopip" / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-m", "scripts", "apply"], cwd=small_kit.root, capture_output=True, text=True
    )
    one_line_error(proc, 2, "pip is not installed for")
    assert "uvx --with pip" in proc.stderr and not (small_kit.root / ".work/vllm-omni").exists()
