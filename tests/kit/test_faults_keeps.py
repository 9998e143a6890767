"""The fault table of invariants 7-10 (docs/recovery.md) and the edit-loop cases behind them: what the
user keeps in and around the checkout, its git config, the lock, stdout, names, contents, trailer
lookalikes, merges, recoveries. Each row runs the real CLI on the three-patch kit: exit code, one
error line (or exit 0 and the needle), no traceback, patches/ as the row says, and what the user
kept (files, refs) byte for byte."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Kit, clone, rope_with
from faulttable import (
    ATTN,
    EXTRA,
    ROPE,
    Row,
    Setup,
    commit,
    fixup,
    new_upstream,
    paused,
    pin_files,
    run_row,
    snapshot,
    state_of,
    steps,
    write_files,
)

from scripts.commands.common import checkout_lock

IDEA = {".idea/workspace.xml": "<project/>\n"}


def users_things(kit: Kit) -> dict[str, bytes | str]:
    found: dict[str, bytes | str] = {}
    for folder in (".idea", "notes", ".venv"):
        for path in sorted((kit.checkout / folder).rglob("*")):
            if path.is_file():
                found[str(path.relative_to(kit.checkout))] = path.read_bytes()
    found["refs"] = kit.git(
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/keep",
        "refs/tags/mine",
        "refs/notes",
    )
    return found


def global_excludes(kit: Kit, tmp_path: Path) -> dict[str, str]:
    """An editor's folder, ignored by the user's global excludes file ($XDG_CONFIG_HOME/git/ignore)."""
    write_files(tmp_path, {"xdg/git/ignore": ".idea/\n"})
    write_files(kit.checkout, IDEA)
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def global_excludes_file_setting(kit: Kit, tmp_path: Path) -> dict[str, str]:
    """The same folder, ignored by an excludes file the user's ~/.gitconfig names (core.excludesFile)."""
    write_files(
        tmp_path,
        {
            "home/my-ignores": ".idea/\n",
            "home/.gitconfig": "[core]\n\texcludesFile = ~/my-ignores\n",
        },
    )
    write_files(kit.checkout, IDEA)
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "no-xdg")}


# the checkout's exclude ignores
OWN = {"notes/todo.txt": b"do not lose me\n", ".venv/pyvenv.cfg": b"home = /usr\n"}
EXCLUDE = ".git/info/exclude"
own_exclude = steps({EXCLUDE: "notes/\n.venv/\n", **OWN})
users_refs = steps(
    ("branch", "keep", "HEAD~1"),
    ("tag", "mine", "HEAD~2"),
    ("notes", "add", "-m", "a note of mine"),
)
HOOK = ".git/hooks/pre-push"


def own_git_files(kit: Kit, _tmp: Path) -> None:
    write_files(
        kit.checkout, {".git/info/attributes": ATTRIBUTE_NOTES, HOOK: "#!/bin/sh\nexit 0\n"}
    )
    (kit.checkout / HOOK).chmod(0o755)


ATTRIBUTE_NOTES = "# notes of mine, no attribute (one would be refused: invariant 12)\n\n"


def info_attributes(kit: Kit, _tmp: Path) -> None:
    write_files(kit.checkout, {".git/info/attributes": "*.py diff=python\n"})


def pin_changed_with(*setups: Setup) -> Setup:
    def setup(kit: Kit, tmp_path: Path) -> dict[str, str]:
        env = {k: v for one in setups for k, v in (one(kit, tmp_path) or {}).items()}
        new_upstream(kit, tmp_path, {})
        return env

    return setup


def worktree(kit: Kit, tmp_path: Path) -> None:
    kit.git("worktree", "add", "-q", "--detach", str(tmp_path / "elsewhere"), "HEAD")


def ignored_clash(kit: Kit, tmp_path: Path) -> None:
    """An ignored file of the user's whose name the new pin's tree also has."""
    write_files(
        kit.checkout,
        {EXCLUDE: "notes/\n.venv/\nvllm_omni/extra.py\n", **OWN, "vllm_omni/extra.py": "mine\n"},
    )
    pin_files(kit, tmp_path, {"vllm_omni/extra.py": b"upstream's\n"})


# a side branch off HEAD~1 with one patch commit, merged --no-ff into series (both with trailers)
merge = steps(
    ("checkout", "-q", "-b", "side", "HEAD~1"),
    commit({"vllm_omni/side.py": "y = 2\n"}, "[NPU] Side\n\nWhy this change.", "side"),
    ("checkout", "-q", "series"),
    (
        "merge",
        "-q",
        "--no-ff",
        "-m",
        "Merge side\n\nUpstream-Status: Pending\nKit-Patch: merged",
        "side",
    ),
)
ODD_NAMES = {
    "vllm_omni/ü.py": "u = 1\n",
    "vllm_omni/a b.py": "s = 1\n",
    'vllm_omni/q"t.py': "q = 1\n",
    "vllm_omni/x b/c.py": "c = 1\n",
}
odd_names = commit(ODD_NAMES, "[NPU] Odd names\n\nWhy this change.", "odd-names", "refresh")


def crlf_file(lines: int) -> Setup:
    script = {"tools/run.bat": b"".join(b"echo line %d\r\n" % i for i in range(lines))}
    return commit(script, "[NPU] A CRLF script\n\nWhy.", "bat", "refresh")


def config(key: str, value: str) -> Setup:
    return steps(("config", key, value))


pristine_deleted = steps(("tag", "-d", "pristine"))
coveragerc = steps({".coveragerc": "[run]\nbranch = true\n"})
KEPT_IGNORED = "kept 3 ignored file(s)/folder(s) of yours"
index_lock = steps({".git/index.lock": ""})  # another git's lock
signoff = config("format.signOff", "true")
autocrlf = config("core.autocrlf", "true")
stash = steps({"vllm_omni/attn.py": "half a thought\n"}, ("stash", "-q"))
latin1_file = commit(
    {"vllm_omni/legacy.txt": "caf\xe9\n".encode("latin-1")}, "[NPU] Legacy\n\nWhy.", "legacy"
)
rst_underline = commit(
    {"guides/npu.rst": "NPU\n=======\n\nHow to run it.\n"}, "[Doc] NPU page\n\nWhy.", "npu-doc"
)
lookalike_in_body = commit(EXTRA, "[NPU] Extra\n\nSee the doc.\nKit-Patch: x\nmore text.", "extra")
lookalike_paragraph = commit(EXTRA, "[NPU] Extra\n\nKit-Patch: x", "extra")
new_commit = commit(EXTRA, "[NPU] Extra\n\nWhy this change.", "extra")

Ran = subprocess.CompletedProcess[str]


def state_stays_applied(kit: Kit, _proc: Ran) -> None:
    assert state_of(kit)["status"] == "applied", "a refused apply flipped the state"


def others_lock_kept(kit: Kit, proc: Ran) -> None:
    state_stays_applied(kit, proc)
    assert list((kit.checkout / ".git").glob("*.lock")), "the kit deleted another git's lock"


def git_files_kept(kit: Kit, _proc: Ran) -> None:
    assert (kit.checkout / ".git/info/attributes").read_text(encoding="utf-8") == ATTRIBUTE_NOTES
    assert os.access(kit.checkout / HOOK, os.X_OK)


def refs_came_along(kit: Kit, _proc: Ran) -> None:
    """The refs' commits and the note came along; the pin moved."""
    assert kit.git("cat-file", "-t", "keep").strip() == "commit"
    assert kit.git("notes", "show", kit.git("notes", "list").split()[1]).strip() == "a note of mine"
    assert kit.git("rev-parse", "pristine") != kit.git("rev-parse", "mine")


def signoff_fix_works(kit: Kit, proc: Ran) -> None:
    """The refusal's own fix works: then refresh changes no byte."""
    assert "git -C .work/vllm-omni config --unset-all format.signoff" in proc.stderr
    kit.git("config", "--unset-all", "format.signoff")
    assert "patches/ unchanged" in kit.run("refresh").stdout


def odd_names_linted_and_listed(kit: Kit, _proc: Ran) -> None:
    """Quoted, spaced, " b/"-holding names: lint names each, readme lists them."""
    lint = kit.run("lint")
    out = lint.stdout + lint.stderr
    # findings (no SPDX header), not a crash
    assert lint.returncode == 1 and "Traceback" not in out, out
    for name in ODD_NAMES:
        assert f"{name}:1: KIT003" in out, name
    readme = kit.run("readme")
    assert readme.returncode == 0 and "odd-names" in readme.stdout, readme.stdout + readme.stderr


ROWS = [
    # 7: what the kit did not make, it keeps
    Row("global-excludes-kept-by-apply", "apply", "[3/3]", global_excludes, 0),
    Row("global-excludes-kept-by-apply-force", "apply --force", "[3/3]", global_excludes, 0),
    Row(
        "excludes-file-setting-kept-by-apply",
        "apply --force",
        "[3/3]",
        global_excludes_file_setting,
        0,
    ),
    Row(
        "excludes-file-setting-not-an-edit",
        "refresh",
        "patches/ unchanged",
        global_excludes_file_setting,
        0,
    ),
    Row("own-exclude-kept-by-apply-force", "apply --force", "[3/3]", own_exclude, 0),
    Row(
        "ignored-named-by-refresh",
        "refresh",
        "git ignores in .work/vllm-omni are in no patch",
        own_exclude,
        0,
    ),
    Row("coveragerc-is-not-ignored", "refresh", "uncommitted edits", coveragerc),
    Row("users-refs-kept-by-apply-force", "apply --force", "[3/3]", users_refs, 0),
    Row(
        "pin-change-keeps-refs",
        "apply",
        "[3/3]",
        pin_changed_with(users_refs),
        0,
        then=refs_came_along,
    ),
    Row(
        "pin-change-keeps-ignored",
        "apply",
        KEPT_IGNORED,
        pin_changed_with(own_exclude, global_excludes),
        0,
    ),
    Row(
        "pin-change-keeps-git-files",
        "apply",
        "[3/3]",
        pin_changed_with(own_git_files),
        0,
        then=git_files_kept,
    ),
    Row("pin-change-refuses-stash", "apply", "holds 1 stash entry", pin_changed_with(stash)),
    Row(
        "pin-change-refuses-worktree", "apply", "work tree(s) of yours", pin_changed_with(worktree)
    ),
    Row(
        "pin-change-refuses-ignored-clash",
        "apply",
        "vllm_omni/extra.py (ignored by git, yours)",
        ignored_clash,
    ),
    # 9: only the kit's settings shape what it writes
    Row(
        "config-format-signoff-refresh",
        "refresh",
        "sets format.signoff",
        signoff,
        then=signoff_fix_works,
    ),
    Row(
        "config-diff-noprefix-refresh",
        "refresh",
        "sets diff.noprefix",
        config("diff.noprefix", "true"),
    ),
    Row("config-autocrlf-apply", "apply", "sets core.autocrlf", autocrlf),
    Row("config-autocrlf-apply-force", "apply --force", "core.autocrlf", autocrlf),
    Row(
        "config-gpgsign-refresh", "refresh", "sets commit.gpgsign", config("commit.gpgsign", "true")
    ),
    Row(
        "config-encoding-lint",
        "lint",
        "i18n.commitencoding",
        config("i18n.commitEncoding", "latin1"),
    ),
    Row(
        "config-include-refresh",
        "refresh",
        "include.path",
        config("include.path", "/tmp/elsewhere"),
    ),
    Row("config-am-threeway-apply", "apply", "sets am.threeway", config("am.threeWay", "true")),
    Row(
        "info-attributes-apply-force",
        "apply --force",
        ".git/info/attributes holds settings",
        info_attributes,
    ),
    Row(
        "info-attributes-refresh",
        "refresh",
        "rm .work/vllm-omni/.git/info/attributes",
        info_attributes,
    ),
    Row(
        "config-user-name-is-harmless",
        "refresh",
        "patches/ unchanged",
        config("user.name", "Me Myself"),
        0,
    ),
    # merges, names, contents, trailers
    Row("merge-in-series", "refresh", "is a merge", merge),
    Row(
        "odd-names-refresh-again",
        "refresh",
        "patches/ unchanged",
        odd_names,
        0,
        then=odd_names_linted_and_listed,
    ),
    Row("crlf-file-60-lines-apply", "apply", "[4/4]", crlf_file(60), 0),
    Row("crlf-file-2-lines-refresh-again", "refresh", "patches/ unchanged", crlf_file(2), 0),
    Row(
        "trailer-lookalike-in-body",
        "refresh",
        "0004-extra.patch: new",
        lookalike_in_body,
        0,
        patches_kept=False,
    ),
    Row(
        "trailer-lookalike-paragraph",
        "refresh",
        "0004-extra.patch: new",
        lookalike_paragraph,
        0,
        patches_kept=False,
    ),
    Row(
        "rst-underline-is-text",
        "refresh",
        "0004-npu-doc.patch: new",
        rst_underline,
        0,
        patches_kept=False,
    ),
    Row(
        "latin1-file-refused-with-travelling-advice",
        "refresh",
        "tree's own .gitattributes",
        latin1_file,
    ),
    # recovery
    Row(
        "pristine-deleted-apply",
        "apply",
        "git -C .work/vllm-omni tag -f pristine",
        pristine_deleted,
        then=state_stays_applied,
    ),
    Row(
        "pristine-deleted-refresh",
        "refresh",
        "tag is gone or moved",
        pristine_deleted,
        then=state_stays_applied,
    ),
    Row(
        "pristine-deleted-lint",
        "lint",
        "tag is gone or moved",
        pristine_deleted,
        then=state_stays_applied,
    ),
    Row(
        "pristine-moved-apply",
        "apply",
        "tag is gone or moved",
        steps(("tag", "-f", "pristine", "HEAD~1")),
        then=state_stays_applied,
    ),
    Row("pristine-deleted-apply-force", "apply --force", "[3/3]", pristine_deleted, 0),
    Row(
        "others-index-lock-refresh",
        "refresh",
        "another git is working",
        index_lock,
        then=others_lock_kept,
    ),
    Row(
        "others-index-lock-apply",
        "apply",
        "rm .work/vllm-omni/.git/index.lock",
        index_lock,
        then=others_lock_kept,
    ),
    Row(
        "others-index-lock-apply-force",
        "apply --force",
        "another git",
        index_lock,
        then=others_lock_kept,
    ),
    Row(
        "others-head-lock-lint",
        "lint",
        "HEAD.lock exists",
        steps({".git/HEAD.lock": ""}),
        then=others_lock_kept,
    ),
    # unclear cases, decided
    Row("continue-and-abort", "apply --continue --abort", "not allowed with argument", steps()),
    Row(
        "refused-apply-says-nothing-of-applying",
        "apply",
        "uncommitted edits",
        steps({ATTN: "edited\n"}),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_keeps_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    env = row.setup(kit3, tmp_path)
    kept = users_things(kit3)  # what the setup left the user
    proc = run_row(kit3, replace(row, setup=lambda _kit, _tmp: env), tmp_path)
    # those refuse once the new pin is fetched
    refused_early = row.code and not row.id.startswith("pin-change")
    assert not refused_early or "applying" not in proc.stdout, proc.stdout
    assert users_things(kit3) == kept, "something the user kept in the checkout is gone or changed"


def popen(kit: Kit, *args: str, **options: object) -> subprocess.Popen[str]:
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **options}
    return subprocess.Popen(
        [sys.executable, "-m", "scripts", *args],
        cwd=kit.root,
        text=True,
        env={**os.environ, "CI": ""},
        **streams,
    )


# ---- 8: a command works on the inputs it holds the lock for
def test_an_apply_that_waited_for_a_refresh_applies_the_new_series(kit3: Kit) -> None:
    """apply started while the lock is held waits, naming the holder, and cannot go on; the series
    changes meanwhile (as the refresh it waited for writes it); once it has the lock, apply must
    build the new series, not the one it would have read before."""
    twin = clone(kit3, kit3.root.parent / "twin" / "kit")
    new_commit(twin, Path())
    twin.run("refresh", check=True)  # its patches/: what the refresh apply waits for writes
    with checkout_lock(kit3):  # held as a kit command holds it
        waiting = popen(kit3, "apply")
        assert (
            f"waiting for .work/vllm-omni: in use by pid {os.getpid()}" in waiting.stdout.readline()
        )
        write_files(kit3.patches, snapshot(twin.patches))
        assert waiting.poll() is None
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and "Traceback" not in out + err, out + err
    assert "[4/4]" in out and "0004-extra.patch" in out, out
    assert "Kit-Patch: extra" in kit3.git("log", "-1", "--format=%B")
    state = state_of(kit3)
    assert state["status"] == "applied" and state["head"] == kit3.git("rev-parse", "HEAD").strip()
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 4


# ---- 10: output failures are output failures (apply, which prints as it goes, does not stop
# between two patches)
@pytest.mark.parametrize("where", ["dev-full", "closed-pipe", "apply-dev-full"])
def test_an_output_failure_is_said_as_such_and_the_work_is_whole(kit3: Kit, where: str) -> None:
    command = "apply" if where.startswith("apply") else "refresh"
    if command == "refresh":
        new_commit(kit3, Path())
    if where.endswith("dev-full"):
        with open("/dev/full", "w", encoding="utf-8") as full:
            proc = popen(kit3, command, stdout=full)
            _, err = proc.communicate(timeout=120)
        said = "No space left on device on stdout"
    else:
        proc = popen(kit3, command)
        proc.stdout.close()  # the reader went away (`| head -0`)
        err = proc.stderr.read()
        said = "Broken pipe on stdout"
    lines = [line for line in err.splitlines() if line.strip()]
    assert proc.wait(timeout=120) == 2 and len(lines) == 1, err
    assert f"{command} finished, but its output could not be written ({said})" in lines[0], lines[0]
    assert "its work is done" in lines[0] and "free space" not in lines[0], lines[0]
    if command == "apply":
        assert state_of(kit3)["status"] == "applied"
        assert kit3.run("lint").returncode in (0, 1)  # the checkout is whole: lint works on it
    else:
        assert "0004-extra.patch" in (kit3.patches / "series").read_text(encoding="utf-8")
        # the state recorded what patches/ holds
        assert "patches/ unchanged" in kit3.run("refresh").stdout


# ---- kill -9 of the whole process group, at drawn moments
@pytest.mark.parametrize("fraction", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_a_refresh_killed_outright_is_healed_by_the_next(kit3: Kit, fraction: float) -> None:
    """refresh folding a fixup (a rebase of its own), its process group SIGKILLed at a fraction of its run time: the
    next refresh undoes or records what it left and writes exactly what an uninterrupted refresh writes."""
    fixup(
        "fix-ten",
        {ROPE: rope_with({10: "line 10 fixed", 20: "line 20 fixed", 30: "line 30 changed"})},
    )(kit3, Path())
    # the same checkout, patches/ and state: refreshed whole
    twin = clone(kit3, kit3.root.parent / "twin" / "kit")
    started = time.monotonic()
    twin.spawn("refresh", check=True)
    took = time.monotonic() - started
    proc = popen(
        kit3,
        "refresh",
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        proc.wait(timeout=fraction * took)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    after = kit3.run("refresh")
    out = after.stdout + after.stderr
    assert after.returncode == 0 and "Traceback" not in out, out
    assert paused(kit3) == []
    assert not list((kit3.checkout / ".git").glob("*.lock"))
    assert not list((kit3.checkout / ".git").glob("kit-git-running.*"))
    assert snapshot(kit3.patches) == snapshot(twin.patches)
    assert "patches/ unchanged" in kit3.run("refresh").stdout
