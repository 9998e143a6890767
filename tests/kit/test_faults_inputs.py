"""The fault table of what the kit reads (docs/recovery.md, "Everything the kit reads is input"): its
own state files (a swap's journal, the checkout's state, refresh's marker, the way back), the
hand-edited pin, the user's ignored folders a pin change moves, and what a fault leaves for the
next command (a killed rebase's scratch, a second rebase --move, a git repository of the user's in
the checkout). Each row runs the real CLI on the three-patch kit: exit code, one line, nothing lost
(patches/ byte-identical, the files a tampered entry names still there).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import SMALL_UPSTREAM, Kit
from faulttable import (
    PIN,
    STATE,
    Row,
    Setup,
    finished,
    inject,
    interrupted_apply,
    lock_held,
    lock_wait,
    new_upstream,
    pin_files,
    popen,
    replaced,
    run_row,
    state_of,
    write_files,
)
from upstreams import commit_all, upstream_repo

from scripts.gitcmd import git

JOURNAL = "patches/.kit-swap.json"
VICTIMS = {"README.md": b"the kit's readme\n", "noxfile.py": b"# the kit's sessions\n"}
OUTSIDE = "outside.txt"  # beside the kit: an absolute path a journal may name


def victims(kit: Kit, tmp_path: Path) -> None:
    """Files outside patches/ a tampered state file names: the kit's own and one beside it."""
    write_files(kit.root, dict(VICTIMS))
    (tmp_path / OUTSIDE).write_bytes(b"not the kit's\n")


def journal(**fields: object) -> Setup:
    """A swap's journal as a tampered one (or one committed in a PR) holds it."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        victims(kit, tmp_path)
        data = {"by": "refresh", "writes": [], "removals": []} | {
            k: [str(tmp_path / OUTSIDE)] if v == "ABSOLUTE" else v for k, v in fields.items()
        }
        (kit.root / JOURNAL).write_text(json.dumps(data), encoding="utf-8")

    return setup


def journal_text(text: str) -> Setup:
    def setup(kit: Kit, tmp_path: Path) -> None:
        victims(kit, tmp_path)
        (kit.root / JOURNAL).write_text(text, encoding="utf-8")

    return setup


def journal_link(kit: Kit, tmp_path: Path) -> None:
    victims(kit, tmp_path)
    (tmp_path / "elsewhere.json").write_text(
        json.dumps({"by": "refresh", "writes": [], "removals": []}), encoding="utf-8"
    )
    (kit.root / JOURNAL).symlink_to(tmp_path / "elsewhere.json")


def nothing_touched(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
    """Every file a tampered entry named is still there, and the state file is left to the user."""
    for name, data in VICTIMS.items():
        assert (kit.root / name).read_bytes() == data, name
    assert (kit.root.parent / OUTSIDE).is_file()


def journal_kept(kit: Kit, proc: subprocess.CompletedProcess[str]) -> None:
    nothing_touched(kit, proc)
    assert (kit.root / JOURNAL).exists() or (kit.root / JOURNAL).is_symlink()


def state_with(**fields: object) -> Setup:
    """The checkout's kit-state.json with fields set as a tampered one holds them."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        victims(kit, tmp_path)
        path = kit.root / STATE
        path.write_text(json.dumps({**state_of(kit), **fields}), encoding="utf-8")

    return setup


def marker(plan: dict[str, object]) -> Setup:
    """refresh's marker (.git/kit-refresh-start) as a kill -9 would leave it, tampered."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        victims(kit, tmp_path)
        (kit.checkout / ".git/kit-refresh-start").write_text(json.dumps(plan), encoding="utf-8")

    return setup


def way_back(text: str = "", **tampered: object) -> Setup:
    """An interrupted apply whose way back (refs/kit/last-good and its state copy) is tampered: the
    copy's text, or the checkout's state with fields set."""

    def setup(kit: Kit, tmp_path: Path) -> None:
        victims(kit, tmp_path)
        head = kit.git("rev-parse", "HEAD").strip()
        copy = text or json.dumps({**state_of(kit), **tampered})
        interrupted_apply(kit, tmp_path)
        kit.git("update-ref", "refs/kit/last-good", head)
        (kit.checkout / ".git/kit-state.last-good.json").write_text(copy, encoding="utf-8")

    return setup


COMMIT_40 = "0" * 40
STATE_ROWS = [
    # 1. the kit's own state is input: a swap's journal
    Row(
        "journal-removes-outside-patches",
        "--version",
        'removals entry "../README.md" is not a file of patches/',
        journal(removals=["../README.md", "../noxfile.py"]),
        then=journal_kept,
    ),
    Row(
        "journal-removes-an-absolute-path",
        "apply",
        "is not a file of patches/ the kit writes",
        journal(removals="ABSOLUTE"),
        then=journal_kept,
    ),
    Row(
        "journal-writes-outside-patches",
        "apply",
        'writes entry "../README.md"',
        journal(writes=["../README.md"]),
        then=journal_kept,
    ),
    Row(
        "journal-removes-the-series",
        "--version",
        'removals entry "series"',
        journal(removals=["series"]),
        then=journal_kept,
    ),
    Row(
        "journal-removes-a-hidden-name",
        "apply",
        'removals entry ".git"',
        journal(removals=[".git"]),
        then=journal_kept,
    ),
    Row(
        "journal-names-a-folder",
        "apply",
        'removals entry "sub/0001-fix-ten.patch"',
        journal(removals=["sub/0001-fix-ten.patch"]),
        then=journal_kept,
    ),
    Row("journal-by-unknown", "apply", 'by is "evil"', journal(by="evil"), then=journal_kept),
    Row(
        "journal-removals-not-a-list",
        "apply",
        'removals is "../README.md", not a list',
        journal(removals="../README.md"),
        then=journal_kept,
    ),
    Row(
        "journal-extra-key",
        "apply",
        "unexpected keys ['then']",
        journal(then="rm -rf ~"),
        then=journal_kept,
    ),
    Row("journal-not-an-object", "apply", "JSON list", journal_text("[]"), then=journal_kept),
    Row("journal-not-json", "apply", "unreadable", journal_text("{"), then=journal_kept),
    Row("journal-a-link", "apply", "symbolic link", journal_link, then=journal_kept),
    # 1. the checkout's state, refresh's marker, the way back
    Row(
        "state-pristine-commit-an-option",
        "apply",
        'pristine_commit is "--output=../README.md", not a full commit id',
        state_with(pristine_commit="--output=../README.md"),
        then=nothing_touched,
    ),
    Row(
        "state-head-not-a-commit",
        "apply",
        'head is "HEAD~1"',
        state_with(head="HEAD~1"),
        then=nothing_touched,
    ),
    Row(
        "state-failed-patch-outside-patches",
        "apply --continue",
        'failed_patch "../../README.md" is not a file of patches/',
        state_with(status="conflict", failed_patch="../../README.md"),
        then=nothing_touched,
    ),
    Row(
        "state-patches-key-outside-patches",
        "apply",
        'patches entry "../x.patch"',
        state_with(patches={"../x.patch": "0" * 64}),
        then=nothing_touched,
    ),
    Row(
        "state-status-unknown",
        "apply",
        'status is "done"',
        state_with(status="done"),
        then=nothing_touched,
    ),
    Row(
        "state-applied-not-a-list",
        "apply",
        "applied is",
        state_with(applied={"a": 1}),
        then=nothing_touched,
    ),
    Row(
        "refresh-marker-start-an-option",
        "apply",
        'kit-refresh-start (a refresh\'s marker): start is "--hard"',
        marker({"start": "--hard"}),
        then=nothing_touched,
    ),
    Row(
        "refresh-marker-patches-outside",
        "refresh",
        'patches entry "../../README.md"',
        marker(
            {
                "start": COMMIT_40,
                "head": COMMIT_40,
                "series_digest": "0" * 64,
                "patches": {"../../README.md": "0" * 64},
            }
        ),
        then=nothing_touched,
    ),
    Row(
        "refresh-marker-digest-alone",
        "apply",
        "a series_digest without its head",
        marker({"start": COMMIT_40, "series_digest": "0" * 64}),
        then=nothing_touched,
    ),
    Row(
        "way-back-state-tampered",
        "apply --abort",
        "kit-state.last-good.json (the way back): pristine_commit",
        way_back(pristine_commit="-f"),
        then=nothing_touched,
    ),
    Row(
        "way-back-state-not-json",
        "apply --abort",
        "kit-state.last-good.json (the way back) is unreadable",
        way_back(text="{"),
        then=nothing_touched,
    ),
]


@pytest.mark.parametrize("row", STATE_ROWS, ids=[r.id for r in STATE_ROWS])
def test_state_file_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


def test_an_untampered_journal_is_still_finished(kit3: Kit, tmp_path: Path) -> None:
    """The check bites only on what the kit never writes: a journal a kill -9 left is rolled forward."""
    victims(kit3, tmp_path)
    series = (kit3.patches / "series").read_text(encoding="utf-8")
    (kit3.patches / ".series.kit-tmp").write_text(series + "# moved\n", encoding="utf-8")
    (kit3.root / JOURNAL).write_text(
        json.dumps({"by": "refresh", "writes": ["series"], "removals": []}), encoding="utf-8"
    )
    proc = kit3.run("--version")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "finished the swap" in out, out
    assert (kit3.patches / "series").read_text(encoding="utf-8").endswith("# moved\n")
    assert not (kit3.root / JOURNAL).exists()


# ---- 2. the hand-edited pin, read against its schema -----------------------------------------------

PIN_ROWS = [
    Row(
        "pin-project-a-table-version",
        "--version",
        'write it as a quoted string: project = "vllm-omni"',
        replaced(PIN, b'project = "vllm-omni"', b'project = { name = "vllm-omni" }'),
    ),
    Row(
        "pin-project-a-table-apply",
        "apply",
        'project = { name = "vllm-omni" } is not a string (a table)',
        replaced(PIN, b'project = "vllm-omni"', b'project = { name = "vllm-omni" }'),
    ),
    Row(
        "pin-version-a-float",
        "apply",
        'quote it: version = "0.10"',
        replaced(PIN, b'version = "0.1.0"', b"version = 0.10"),
    ),
    Row(
        "pin-version-a-table",
        "apply",
        'version = { v = "0.1.0" } is not a string (a table) -- write it as a quoted string: '
        'version = "0.1.0"',
        replaced(PIN, b'version = "0.1.0"', b'version = { v = "0.1.0" }'),
    ),
    Row(
        "pin-version-twice",
        "--version",
        'version = "0.1.0"',
        replaced(PIN, b'version = "0.1.0"', b'version = "0.1.0"\nversion = "0.1.0"'),
    ),
    Row(
        "pin-wheel-an-array",
        "apply",
        "wheel is not a table (an array)",
        replaced(PIN, b"[wheel]", b"[[wheel]]"),
    ),
    Row(
        "pin-commit-an-integer",
        "apply",
        'quote it: commit = "12"',
        replaced(PIN, b'commit = ""', b"commit = 12"),
    ),
    Row(
        "pin-source-out-of-range",
        "apply",
        "source = 'svn' is not one of wheel, git",
        replaced(PIN, b'source = "wheel"', b'source = "svn"'),
    ),
    Row(
        "pin-extra-field",
        "--version",
        "wheel.size is not a field of the pin",
        replaced(PIN, b"[wheel]\n", b"[wheel]\nsize = 3\n"),
    ),
    Row(
        "pin-table-misspelt",
        "apply",
        "gitt is not a field of the pin",
        replaced(PIN, b"[git]", b"[gitt]"),
    ),
    Row("pin-tag-missing", "apply", "git.tag is missing", replaced(PIN, b'tag = "v0.1.0"\n', b"")),
]


@pytest.mark.parametrize("row", PIN_ROWS, ids=[r.id for r in PIN_ROWS])
def test_pin_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


# ---- 4. the user's ignored folders a pin change moves -------------------------------------------------

# Folders that carry their own .gitignore (`*`): git lists the folder and each entry in it.
SELF_IGNORED = {
    ".ruff_cache/.gitignore": "# Automatically created by ruff.\n*\n",
    ".ruff_cache/CACHEDIR.TAG": "Signature: 8a477f597d28d172789f06886806bc55\n",
    ".ruff_cache/0.14.10/123": "cache\n",
    ".mypy_cache/.gitignore": "# Automatically created by mypy\n*\n",
    ".mypy_cache/3.11/x.json": "{}\n",
    ".venv/.gitignore": "*\n",
    ".venv/pyvenv.cfg": "home = /usr/bin\n",
    ".venv/lib/python3.11/site-packages/x.py": "x = 1\n",
    "vllm_omni/.mypy_cache/.gitignore": "*\n",
    "vllm_omni/.mypy_cache/y.json": "{}\n",
}


def self_ignored(kit: Kit, tmp_path: Path) -> None:
    write_files(kit.checkout, dict(SELF_IGNORED))
    new_upstream(kit, tmp_path, {})


def all_moved(kit: Kit, proc: subprocess.CompletedProcess[str]) -> None:
    for name, text in SELF_IGNORED.items():
        assert (kit.checkout / name).read_text(encoding="utf-8") == text, name
    assert not (kit.root / ".work/.vllm-omni.new").exists()
    assert state_of(kit)["status"] == "applied", proc.stderr


def rename_fails_on(name: str) -> str:
    """os.rename fails (EXDEV, as across file systems) for the user's path `name`."""
    return (
        "real = os.rename\n"
        "def rename(src, dst, *a, **k):\n"
        f"    if str(src).endswith({name!r}):\n"
        "        raise OSError(errno.EXDEV, 'Invalid cross-device link')\n"
        "    return real(src, dst, *a, **k)\n"
        "os.rename = rename\n"
        "import pathlib\n"
        "pathlib.Path.rename = lambda self, t: (rename(self, t), pathlib.Path(t))[1]\n"
    )


def none_moved(kit: Kit, _proc: subprocess.CompletedProcess[str]) -> None:
    """Refused before moving any: every file in the old checkout, no new one left aside."""
    for name, text in SELF_IGNORED.items():
        assert (kit.checkout / name).read_text(encoding="utf-8") == text, name
    assert not (kit.root / ".work/.vllm-omni.new").exists()


def parent_clash(kit: Kit, tmp_path: Path) -> None:
    """An ignored file of the user's under a folder whose name the new pin's tree has as a file."""
    write_files(kit.checkout, {**SELF_IGNORED, "notes/todo.txt": "mine\n"})
    (kit.checkout / ".git/info/exclude").write_text(
        (kit.checkout / ".git/info/exclude").read_text(encoding="utf-8") + "notes/\n",
        encoding="utf-8",
    )
    pin_files(kit, tmp_path, {"notes": b"upstream's notes file\n"})


MOVE_ROWS = [
    Row("self-ignored-folders-move", "apply", "kept", self_ignored, 0, then=all_moved),
    Row(
        "self-ignored-folders-move-force", "apply --force", "kept", self_ignored, 0, then=all_moved
    ),
    Row(
        "a-move-that-fails-leaves-nothing-aside",
        "apply",
        "cannot move .venv (ignored, yours)",
        self_ignored,
        inject=rename_fails_on(".venv"),
        then=none_moved,
    ),
    Row(
        "a-parent-that-is-a-file-is-refused-first",
        "apply",
        "notes/ (ignored by git, yours) has the name of a file",
        parent_clash,
        then=none_moved,
    ),
]


@pytest.mark.parametrize("row", MOVE_ROWS, ids=[r.id for r in MOVE_ROWS])
def test_move_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


# ---- 5. what a fault leaves, the next command understands ---------------------------------------------


def nested_repo(where: str) -> Setup:
    def setup(kit: Kit, _tmp: Path) -> None:
        repo = kit.checkout / where
        upstream_repo(repo, {"README.md": "a vendored tool of mine\n"})

    return setup


def nested_kept(where: str) -> object:
    def then(kit: Kit, proc: subprocess.CompletedProcess[str]) -> None:
        assert (kit.checkout / where / "README.md").is_file()
        assert git("rev-list", "--count", "HEAD", cwd=kit.checkout / where).strip() == "1"
        assert state_of(kit)["status"] == "applied", proc.stderr  # never left "applying"

    return then


NESTED_ROWS = [
    Row(
        "nested-repo-apply-force",
        "apply --force",
        ".work/vllm-omni/vendored is a git repository of yours",
        nested_repo("vendored"),
        then=nested_kept("vendored"),
    ),
    Row(
        "nested-repo-apply",
        "apply",
        ".work/vllm-omni/vendored is a git repository of yours",
        nested_repo("vendored"),
        then=nested_kept("vendored"),
    ),
    Row(
        "nested-repo-deeper-in-an-untracked-folder",
        "apply --force",
        ".work/vllm-omni/tools/mine is a git repository of yours",
        nested_repo("tools/mine"),
        then=nested_kept("tools/mine"),
    ),
    Row(
        "nested-repo-in-a-tracked-folder",
        "apply --force",
        ".work/vllm-omni/vllm_omni/sub is a git repository of yours",
        nested_repo("vllm_omni/sub"),
        then=nested_kept("vllm_omni/sub"),
    ),
    Row(
        "nested-repo-lint",
        "lint",
        ".work/vllm-omni/vendored is a git repository of yours",
        nested_repo("vendored"),
        then=nested_kept("vendored"),
    ),
]


@pytest.mark.parametrize("row", NESTED_ROWS, ids=[r.id for r in NESTED_ROWS])
def test_nested_repo_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


def test_a_nested_repo_the_user_ignores_is_kept_by_apply_force(kit3: Kit) -> None:
    """The other way invariant 7 allows: ignored (as the refusal says), every command keeps it."""
    nested_repo("vendored")(kit3, kit3.root)
    exclude = kit3.checkout / ".git/info/exclude"
    exclude.write_text(exclude.read_text(encoding="utf-8") + "vendored/\n", encoding="utf-8")
    proc = kit3.run("apply", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    nested_kept("vendored")(kit3, proc)  # type: ignore[operator]


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)


def scratches(kit: Kit) -> list[str]:
    return sorted(p.name for p in (kit.root / ".work").glob(".rebase-*"))


def killed_rebases(kit: Kit, upstream: Path, count: int) -> list[str]:
    """count real rebases at once, each killed outright (SIGKILL) once its scratch is held (started
    together: each sweeps what an earlier dead one left); their scratch folders."""
    argv = [sys.executable, "-m", "scripts", "rebase", "--git", str(upstream), "main"]
    procs = [popen(argv, kit.root) for _ in range(count)]
    deadline, held = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(held) < count:
        held = [
            n for n in scratches(kit) if (kit.root / ".work" / n / ".kit-scratch.lock").is_file()
        ]
        time.sleep(0.02)
    for proc in procs:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=30)
    assert len(held) == count, f"the rebases held {held}"
    return held


def test_a_killed_rebases_scratch_is_removed_by_the_next_command(kit3: Kit, upstream: Path) -> None:
    """Three rebases killed with SIGKILL leave three scratch folders; the next command removes them,
    and only them: a live run's (its lock held) and a folder of the user's stay."""
    left = killed_rebases(kit3, upstream, 3)
    assert set(left) <= set(scratches(kit3))
    mine = kit3.root / ".work/.rebase-notes"
    write_files(mine, {"todo.txt": "mine\n"})
    live = popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom scripts import worklock\n"
            "with worklock.scratch(Path('.work'), '.rebase-') as p:\n"
            "    print(p.name, flush=True)\n    time.sleep(120)\n",
        ],
        kit3.root,
    )
    assert live.stdout is not None
    held = live.stdout.readline().strip()
    try:
        proc = kit3.run("apply")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = proc.stdout + proc.stderr
        assert out.count("the scratch of a kit run that was killed") == 3, out
        assert scratches(kit3) == sorted([".rebase-notes", held])
        assert (mine / "todo.txt").read_text(encoding="utf-8") == "mine\n"
    finally:
        live.kill()
        live.communicate(timeout=30)
    # the live run's is its own to remove, and a kill leaves it to the next command again
    proc = kit3.run("rebase", "--git", str(upstream), "main")
    assert proc.returncode == 0 and scratches(kit3) == [".rebase-notes"], proc.stderr


def test_a_scratch_made_before_the_lock_is_recognised_by_its_parts(kit3: Kit) -> None:
    """A scratch left by a kit that did not lock it yet: removed when it holds only a rebase's parts,
    the current series' repository marked as the kit's; kept otherwise."""
    old = kit3.root / ".work/.rebase-abcd1234"
    write_files(old, {"current/.git/kit-made": "made by the kit\n", "target/x": "y\n"})
    other = kit3.root / ".work/.rebase-efgh5678"
    write_files(other, {"current/.git/HEAD": "ref: refs/heads/main\n", "notes.txt": "mine\n"})
    proc = kit3.run("apply")
    assert proc.returncode == 0, proc.stderr
    assert not old.exists() and (other / "notes.txt").is_file()


def moved_upstream(upstream: Path) -> str:
    (upstream / "README.md").write_text("Upstream moved on.\n", encoding="utf-8")
    return commit_all(upstream, "Upstream moves on")


def test_rebase_move_waits_on_the_checkout_lock(kit3: Kit, upstream: Path, tmp_path: Path) -> None:
    """A --move is a writer of patches/: it waits for the lock a refresh (or another --move) holds,
    and says for whom, instead of racing it."""
    run_row(
        kit3,
        Row(
            "rebase-move-lock-held",
            ("rebase", "--git", str(upstream), "main", "--move"),
            ".work/vllm-omni is in use by pid 4242 (kit refresh)",
            lock_held,
            env=lock_wait("0.5"),
        ),
        tmp_path,
    )


def test_two_rebase_moves_started_together(kit3: Kit, upstream: Path) -> None:
    """The second waits for the first, then tries the pin the first left: both exit 0, the pin moves
    once, patches/ is one whole series."""
    moved_upstream(upstream)
    argv = [sys.executable, "-m", "scripts", "rebase", "--git", str(upstream), "main", "--move"]
    first, second = popen(argv, kit3.root), popen(argv, kit3.root)
    done = [finished(first), finished(second)]
    outs = [p.stdout + p.stderr for p in done]
    assert all(p.returncode == 0 for p in done), outs
    assert all("Traceback" not in o and "kit: error" not in o for o in outs), outs
    assert any("waiting for .work/vllm-omni" in o for o in outs), outs
    pin = (kit3.patches / "upstream.toml").read_text(encoding="utf-8")
    assert 'source = "git"' in pin and str(upstream) in pin
    assert not (kit3.patches / ".kit-swap.json").exists()
    proc = kit3.run("--version")
    assert proc.returncode == 0 and "3 patches" in proc.stdout, proc.stdout + proc.stderr


def kill_on_rename(when: str) -> str:
    """The kit process SIGKILLs itself at one rename of a pin change (`when`: a condition on the
    source path `src` and the count `n` of the user's paths moved so far)."""
    return (
        "import pathlib\n"
        "real, n = pathlib.Path.rename, [0]\n"
        "def rename(self, target):\n"
        "    src = str(self)\n"
        "    n[0] += '/.work/vllm-omni/' in src\n"
        f"    if {when}:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(self, target)\n"
        "pathlib.Path.rename = rename\n"
    )


@pytest.mark.parametrize(
    "when",
    ["n[0] == 2", "src.endswith('.vllm-omni.new')"],
    ids=["killed-between-moves", "killed-before-the-new-one-is-in-place"],
)
def test_a_pin_change_killed_part_way_is_finished_by_the_next_apply(
    kit3: Kit, tmp_path: Path, when: str
) -> None:
    """A kill -9 after some of the user's folders moved into the new checkout: the next apply rolls
    the pin change forward (never removes the new checkout, which holds files of the user's)."""
    self_ignored(kit3, tmp_path)
    proc = inject(kit3, kill_on_rename(when), "apply")
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert (kit3.root / ".work/.vllm-omni.new").is_dir()
    proc = kit3.run("apply")
    assert proc.returncode == 0 and "finished the pin change" in proc.stdout + proc.stderr, (
        proc.stdout + proc.stderr
    )
    all_moved(kit3, proc)
    assert "0.2.0" in str(state_of(kit3)["pin"])


# Every writer of patches/ waits on the checkout's lock, and says for whom (here past its wait).
WRITER_ROWS = [
    Row(
        "pin-record-git-lock-held",
        "pin --record-git",
        ".work/vllm-omni is in use by pid 4242 (kit refresh)",
        lock_held,
        env=lock_wait("0.5"),
    ),
    Row(
        "rebase-move-release-lock-held",
        "rebase 0.2.0 --move",
        ".work/vllm-omni is in use by pid 4242 (kit refresh)",
        lock_held,
        env=lock_wait("0.5"),
    ),
]


@pytest.mark.parametrize("row", WRITER_ROWS, ids=[r.id for r in WRITER_ROWS])
def test_writer_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)


def pristine_linked(kit: Kit, tmp_path: Path) -> None:
    """.work/pristine (the kit's copy of the pristine tree) replaced by a link to a folder elsewhere."""
    victims(kit, tmp_path)
    shutil.rmtree(kit.root / ".work/pristine", ignore_errors=True)
    (tmp_path / "elsewhere").mkdir()
    (kit.root / ".work/pristine").symlink_to(tmp_path / "elsewhere")


def nothing_written_through(kit: Kit, proc: subprocess.CompletedProcess[str]) -> None:
    assert list((kit.root.parent / "elsewhere").iterdir()) == []
    assert state_of(kit)["status"] == "applied", proc.stderr


CACHE_ROWS = [
    Row(
        "pristine-copy-a-link",
        "apply --force",
        ".work/pristine is a symbolic link, not the kit's copy",
        pristine_linked,
        then=nothing_written_through,
    )
]


@pytest.mark.parametrize("row", CACHE_ROWS, ids=[r.id for r in CACHE_ROWS])
def test_cache_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    run_row(kit3, row, tmp_path)
