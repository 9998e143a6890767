"""The refresh side of the edit loop: every way a user can reshape the checkout's commits. Each row
runs the real CLI on the three-patch kit: exit code, one error line, no traceback, patches/
byte-identical, HEAD where the user left it, no git operation left paused that the user did not
start (DESIGN invariants 1, 2, 4, 6)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import AUTHOR, Kit, rope_with
from faulttable import (
    ATTN,
    EXTRA,
    ROPE,
    commit,
    fixup,
    inject,
    one_line_error,
    paused,
    sha_of,
    snapshot,
    steps,
    write_files,
)

from scripts import gitcmd, signals
from scripts.checkout.refresh import CONFLICT_MARKER, Commit, FoldError, fold_of, plan_folds
from scripts.gitcmd import git
from scripts.series import with_one_identity

Setup = Callable[[Kit, Path], object]


def rebase_i(kit: Kit, todo_editor: str, *flags: str) -> None:
    """The user's `git rebase -i pristine`, the todo edited by todo_editor, messages kept as git joins
    them."""
    git(
        "rebase",
        "-q",
        "-i",
        *flags,
        "pristine",
        cwd=kit.checkout,
        env={**AUTHOR, "GIT_SEQUENCE_EDITOR": todo_editor, "GIT_EDITOR": "true"},
    )


def squash_0003_into_0002(kit: Kit, _tmp: Path) -> None:
    rebase_i(kit, "sed -i '3s/^pick/squash/'")


LATER = (
    (
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "[NPU] Later\n\nUpstream-Status: Pending\nKit-Patch: later",
    ),
)
TRIPLE = {ATTN: "def attend(q):\n    return q * 3\n"}
UNDONE = {
    "double-attn": {ATTN: "def attend(q):\n    return q\n"},
    "twenty": {ROPE: rope_with({10: "line 10 fixed"})},
}
# a fixup that makes slug's patch empty
undo = {slug: fixup(slug, edits) for slug, edits in UNDONE.items()}
TRAILERS = "\n\nUpstream-Status: Pending\nKit-Patch: extra\n"
fix_ten_again = fixup(
    "fix-ten", {ROPE: rope_with({10: "line 10 fixed twice", 20: "line 20 fixed"})}
)
# 0002 again, new files, and a fixup aimed at it by commit (it would apply anywhere)
same_subject_patch = steps(
    commit(EXTRA, "[NPU] Twenty\n\nWhy this change.", "twenty-again"),
    fixup("twenty-again", {"vllm_omni/extra2.py": "x = 2\n"}, add=True),
)
# a fourth patch whose subject 0003's subject prefixes, and a fixup aimed at 0003 by commit
prefix_subject_patch = steps(
    commit(EXTRA, "[NPU] Double attention twice\n\nWhy this change.", "double-twice"),
    fixup("double-attn", TRIPLE),
)
fold_naming_nothing = steps(TRIPLE, ("commit", "-qam", "fixup! [NPU] Something else entirely"))
EMPTY = ("commit", "-q", "--allow-empty", "-m")
empty_commit_new_slug = steps(
    (*EMPTY, "[NPU] Nothing yet\n\nUpstream-Status: Pending\nKit-Patch: later")
)
TWO_SLUGS = (
    "[NPU] Nothing\n\nUpstream-Status: Pending\nKit-Patch: nothing-a\n\nUpstream-Status: Pending\n"
)
empty_commit_two_slugs = steps((*EMPTY, TWO_SLUGS + "Kit-Patch: nothing-b"))
# a fixup aimed at 0001 that edits 0002's line: it cannot move under 0001 without a conflict
fold_conflicts_when_moved = fixup(
    "fix-ten", {ROPE: rope_with({10: "line 10 fixed", 20: "line 20 fixed again"})}
)
MARKERS = "a: 1\n<<<<<<< HEAD\nb: 2\n=======\nb: 3\n>>>>>>> theirs\n"


def marker_in(name: str, slug: str | None = None) -> Setup:
    """A resolution committed with its conflict markers left in, as a fixup of slug or as a new patch."""
    if slug:
        return fixup(slug, {name: MARKERS}, add=True)
    return commit({name: MARKERS}, "[NPU] Config\n\nWhy this change.", "config")


# markers in a file .gitattributes calls binary, and in one git calls binary (a NUL byte, invalid
# UTF-8)
marker_in_binary_attributed = steps(
    marker_in("vllm_omni/table.cfg"),
    fixup("config", {".gitattributes": "*.cfg binary\n"}, add=True),
)
BLOB = {"vllm_omni/blob.bin": b"\x00\xff\n<<<<<<< HEAD\n\x01\n=======\n\x02\n>>>>>>> x\n"}
marker_in_binary_file = commit(BLOB, "[NPU] Blob\n\nWhy this change.", "blob")


def fold_naming_pristine(kit: Kit, _tmp: Path) -> None:
    """`fixup! <sha>` of a commit that is no patch (the pristine one)."""
    write_files(kit.checkout, TRIPLE)
    kit.git("commit", "-qam", f"fixup! {kit.git('rev-parse', 'pristine').strip()}")


def message_patch(body: str) -> Setup:
    """A new patch whose message is exactly body + TRAILERS (no cleanup), as a user's editor could
    leave it."""
    return steps(
        EXTRA, ("add", "-A"), ("commit", "-q", "--cleanup=verbatim", "-m", body + TRAILERS)
    )


def hand_edited_patch(kit: Kit, tmp_path: Path) -> None:
    path = kit.patches / "0003-double-attn.patch"
    path.write_text(
        path.read_text().replace("Why this change.", "Why this change, edited by hand.")
    )
    fixup("twenty", {ROPE: rope_with({10: "line 10 fixed", 20: "line 20 better"})})(kit, tmp_path)


def pin_moved(kit: Kit, _tmp: Path) -> None:
    """The pin now names other bytes (another build of the same release)."""
    text = (kit.patches / "upstream.toml").read_text()
    write_files(
        kit.patches, {"upstream.toml": text.replace(text.split('sha256 = "')[1][:64], "0" * 64)}
    )


def renamed_patch(kit: Kit, _tmp: Path) -> None:
    (kit.patches / "0002-twenty.patch").rename(kit.patches / "0002-my-twenty.patch")
    series = (kit.patches / "series").read_text()
    write_files(
        kit.patches, {"series": series.replace("0002-twenty.patch", "0002-my-twenty.patch")}
    )


@dataclass(frozen=True)
class Row:
    id: str
    setup: Setup
    needle: str  # in the one error line; every row exits 2
    args: str = "refresh"


ROWS = [
    # 1. a squash of two patches is named, with the one --drop that finishes it
    Row(
        "squash-two-patches",
        squash_0003_into_0002,
        "holds patches twenty and double-attn (a squash) -- keep one identity: nox -s refresh -- "
        "--drop double-attn",
    ),
    Row(
        "squash-drop-both",
        squash_0003_into_0002,
        "holds patches twenty and double-attn",
        "refresh --drop twenty --drop double-attn",
    ),
    Row("squash-not-lacking", squash_0003_into_0002, "(keeps twenty, whose subject it has)"),
    # 2. a patch that became empty: one line, one --drop, no paused rebase
    Row("fixup-reverts-last-patch", undo["double-attn"], "patch double-attn became empty: commit"),
    Row("fixup-reverts-middle-patch", undo["twenty"], "patch twenty became empty"),
    Row(
        "empty-fixup-the-drop-it-names",
        undo["twenty"],
        "-- leave it out: nox -s refresh -- --drop twenty",
    ),
    Row("allow-empty-commit", empty_commit_new_slug, "patch later became empty"),
    Row("allow-empty-two-slugs", empty_commit_two_slugs, "became empty: commit"),
    Row(
        "allow-empty-two-slugs-fix",
        empty_commit_two_slugs,
        "-- leave it out: nox -s refresh -- --drop nothing-a --drop nothing-b",
    ),
    Row(
        "drop-a-patch-still-held-with-content",
        fixup("twenty", {ROPE: rope_with({10: "line 10 fixed", 20: "x"})}),
        "--drop twenty: the checkout still holds that patch",
        "refresh --drop twenty",
    ),
    # 4. aim: a fold lands where the user aimed it, by commit, or is refused
    Row("fold-same-subject", same_subject_patch, "matches 2 patches by subject"),
    Row(
        "fold-same-subject-fix",
        same_subject_patch,
        "reword it to 'fixup! <commit>' with <commit> =",
    ),
    Row("fold-prefix-subject", prefix_subject_patch, "matches 2 patches by subject"),
    Row("fold-names-nothing", fold_naming_nothing, "names no patch before it"),
    Row("fold-names-no-patch-commit", fold_naming_pristine, "names no patch before it"),
    Row(
        "fold-conflicts-when-moved",
        fold_conflicts_when_moved,
        "moving the folds under their patches conflicts in vllm_omni/layers/rope.py",
    ),
    # 7. resolutions: no conflict marker is exported, whatever the file type
    Row(
        "marker-in-yaml-new-patch",
        marker_in("vllm_omni/deploy.yaml"),
        "leaves a conflict marker at vllm_omni/deploy.yaml:2",
    ),
    Row(
        "marker-in-fixup", marker_in(ATTN, "double-attn"), "conflict marker at vllm_omni/attn.py:2"
    ),
    Row(
        "marker-in-binary-attributed-file",
        marker_in_binary_attributed,
        "conflict marker at vllm_omni/table.cfg:2",
    ),
    Row("marker-in-binary-file", marker_in_binary_file, "conflict marker at vllm_omni/blob.bin:2"),
    Row("marker-in-text-file", marker_in("vllm_omni/NOTES.txt"), "vllm_omni/NOTES.txt:2"),
    # 5. round trip: what format-patch/am cannot carry is refused before writing, naming the line
    Row(
        "body-line-dashes",
        message_patch("[NPU] Extra\n\nWhy.\n---\nMore."),
        "message line 4 '---' comes back as ''",
    ),
    Row(
        "body-line-diff",
        message_patch("[NPU] Extra\n\nWhy.\ndiff --git a/x b/x\nMore."),
        "message line 4 'diff --git a/x b/x' comes back as ''",
    ),
    Row(
        "trailing-space",
        message_patch("[NPU] Extra\n\nWhy.  \nMore."),
        "message line 3 'Why.  ' comes back as 'Why.'",
    ),
    Row(
        "carriage-return",
        message_patch("[NPU] Extra\n\nWhy.\r\nMore."),
        "message line 3 'Why.\\r' comes back as",
    ),
    Row(
        "leading-blank-line",
        message_patch("\n[NPU] Extra\n\nWhy."),
        "message line 1 '' comes back as '[NPU] Extra'",
    ),
    # 8. provenance
    Row(
        "patches-edited-by-hand",
        hand_edited_patch,
        "does not match patches/ (differs in 0003-double-attn.patch) -- refresh would export it "
        "over other inputs",
    ),
    Row("pin-changed", pin_moved, "the pin is now vllm-omni 0.1.0 (wheel) 000000000000"),
    # 6. a renamed patch file is refused at load, by refresh and apply alike
    Row(
        "renamed-patch-refresh",
        renamed_patch,
        "carries Kit-Patch: twenty, so its name is 0002-twenty.patch -- rename it back: git mv",
    ),
    Row("renamed-patch-apply", renamed_patch, "so its name is 0002-twenty.patch", "apply"),
    # 9. a commit's Kit-Patch: bounded and of a slug's characters, with a fix that replaces the
    # trailer
    Row(
        "commit-slug-with-slash",
        commit(EXTRA, "[NPU] Extra", "a/b"),
        "holds characters a slug may not -- a slug is 1 to 60 characters of a-z, 0-9 and '-'",
    ),
    Row(
        "commit-slug-300-characters",
        commit(EXTRA, "[NPU] Extra", "y" * 300),
        "a Kit-Patch: slug of 300 characters (yyyyyyyyyyyyyyyyyyyyyyyy...), over 60",
    ),
    Row(
        "commit-slug-unicode", commit(EXTRA, "[NPU] Extra", "caf\u00e9"), "'caf\u00e9', which holds"
    ),
    Row("commit-slug-not-on-head", commit(EXTRA, "[NPU] Extra", "a b", *LATER), "(mark "),
    Row(
        "commit-without-trailers",
        steps(EXTRA, ("add", "-A"), ("commit", "-q", "-m", "[NPU] Extra")),
        "has no Kit-Patch: trailer",
    ),
]


@pytest.mark.parametrize(
    ("slug", "message"),
    [
        ("a/b", "Upstream-Status: Pending\nKit-Patch: a/b"),
        ("z" * 300, f"Upstream-Status: Pending\nKit-Patch: {'z' * 300}"),
        ("", "no trailers at all"),
        (
            "a/b",
            "Upstream-Status: Pending\nKit-Patch: a/b\nKit-Patch: a-b",
        ),  # the old advice's loop, followed
        ("Two Words", "Upstream-Status: Submitted [https://example.org/1]\nKit-Patch: Two Words"),
    ],
    ids=["slash", "300-characters", "no-trailer", "after-the-old-advice", "upper-case-and-space"],
)
def test_the_slug_fix_refresh_gives_works_as_written(kit3: Kit, slug: str, message: str) -> None:
    """The measured loop: the fix `git commit --amend --trailer` added a second Kit-Patch: and refresh
    refused again."""
    steps(EXTRA, ("add", "-A"), ("commit", "-q", "-m", f"[NPU] Extra thing\n\n{message}"))(
        kit3, Path()
    )
    said = kit3.run("refresh").stderr
    one_line_error(subprocess.CompletedProcess([], 2, "", said), 2, "fix it: cd ")
    command = said.split("fix it: ", 1)[1].split("; then nox -s refresh")[0]
    subprocess.run(command, shell=True, cwd=kit3.root, env={**os.environ, **AUTHOR}, check=True)
    out = kit3.run("refresh", check=True).stdout
    slugs = kit3.git("log", "-1", "--format=%(trailers:key=Kit-Patch,valueonly)").split()
    assert "0004-" in out and len(slugs) == 1, slugs  # one trailer: replaced, not added
    if "Submitted" in message:  # the user's Upstream-Status kept
        assert (
            "Upstream-Status: Submitted [https://example.org/1]"
            in kit3.patches.joinpath(f"0004-{slugs[0]}.patch").read_text()
        )


def as_found(kit: Kit) -> tuple[dict[str, bytes], str]:
    return snapshot(kit.patches), kit.git("rev-parse", "HEAD")


def left_as_found(kit: Kit, found: tuple[dict[str, bytes], str]) -> None:
    """patches/ unwritten, HEAD where the user left it, no git operation of the kit's paused, no
    scratch tree."""
    assert as_found(kit) == found
    assert paused(kit) == [] and not (kit.root / ".work/.vllm-omni.roundtrip").exists()
    assert len(kit.git("worktree", "list").splitlines()) == 1


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_refresh_fault_row(row: Row, kit3: Kit, tmp_path: Path) -> None:
    row.setup(kit3, tmp_path)
    found = as_found(kit3)
    one_line_error(kit3.run(*row.args.split()), 2, row.needle)
    left_as_found(kit3, found)


# ---- the fixes the rows name do finish the job
@pytest.mark.parametrize(
    ("dropped", "kept"), [("0003-double-attn", "twenty"), ("0002-twenty", "double-attn")]
)
def test_squash_then_the_named_drop_keeps_one_identity(kit3: Kit, dropped: str, kept: str) -> None:
    squash_0003_into_0002(kit3, Path())
    out = kit3.run("refresh", "--drop", dropped[5:], check=True).stdout
    assert f"{dropped}.patch: dropped" in out
    text = (kit3.patches / f"0002-{kept}.patch").read_text()
    assert (
        text.count("Kit-Patch:") == 1
        and text.count("Upstream-Status:") == 1
        and f"Kit-Patch: {kept}\n" in text
    )
    assert "return q * 2" in text and "line 20 fixed" in text  # both contents kept
    assert sorted(p.name for p in kit3.patches.glob("*.patch")) == [
        "0001-fix-ten.patch",
        f"0002-{kept}.patch",
    ]
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout


@pytest.mark.parametrize("slug", ["double-attn", "twenty", "later"])
def test_an_empty_patch_goes_with_the_named_drop(kit3: Kit, slug: str) -> None:
    """A patch a fixup emptied, or a new empty commit (later): patches/ then stays as it was."""
    before = snapshot(kit3.patches)
    {**undo, "later": empty_commit_new_slug}[slug](kit3, Path())
    out = kit3.run("refresh", "--drop", slug, check=True).stdout
    if slug == "later":
        assert snapshot(kit3.patches) == before
        return
    assert "dropped" in out and not list(kit3.patches.glob(f"*-{slug}.patch"))
    # the checkout lost the empty commit too
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 2
    assert kit3.run("apply", check=True).returncode == 0
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout


@pytest.mark.parametrize("by", ["kit-by-commit", "git-autosquash"])
def test_a_fold_named_by_commit_lands_there(kit3: Kit, by: str) -> None:
    """The fix the refusal names: `fixup! <sha>` lands in the patch it names, not in the first same
    subject. Why the kit plans folds itself: git alone matches `fixup! <subject>` to the FIRST such
    subject, with exit 0."""
    same_subject_patch(kit3, Path())
    if by == "git-autosquash":
        rebase_i(kit3, "true", "--autosquash")
        # the wrong patch
        assert "extra2.py" in kit3.git("show", "--format=", "--name-only", sha_of(kit3, "twenty"))
        return
    kit3.git("commit", "-q", "--amend", "-m", f"fixup! {sha_of(kit3, 'twenty-again')[:12]}")
    kit3.run("refresh", check=True)
    assert "extra2.py" in (kit3.patches / "0004-twenty-again.patch").read_text()
    assert "extra2.py" not in (kit3.patches / "0002-twenty.patch").read_text()


@pytest.mark.parametrize("kind", ["fixup", "squash", "amend"])
def test_each_fold_kind_lands_in_its_patch(kit3: Kit, kind: str) -> None:
    fixup("fix-ten", {ROPE: rope_with({10: "line 10 fixed twice", 20: "line 20 fixed"})}, kind)(
        kit3, Path()
    )
    out = kit3.run("refresh", check=True).stdout
    assert "folded fixup!/squash!/amend! commits" in out and "0001-fix-ten.patch: updated" in out
    # the fold is gone from the checkout too
    assert len(kit3.git("rev-list", "pristine..HEAD").split()) == 3
    first = (kit3.patches / "0001-fix-ten.patch").read_text()
    assert "+line 10 fixed twice" in first and first.count("Kit-Patch: fix-ten") == 1
    assert ("Why, amended." in first) == (kind == "amend") and ("\nmore\n" in first) == (
        kind == "squash"
    )
    assert "line 10 fixed twice" not in (kit3.patches / "0002-twenty.patch").read_text()
    assert kit3.run("apply", check=True).returncode == 0
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout


# ---- round trip: an invariant over messages, not a list of cases
MESSAGES = [
    "[NPU] Extra\n\nWhy.\n---\nMore.",
    "[NPU] Extra\n\nWhy.\ndiff --git a/x b/x\nMore.",
    "[NPU] Extra\n\nFrom the paper:\nFrom here on.",
    "[NPU] Extra\nsecond subject line\n\nWhy.",
    "[NPU] Extra\n\nWhy.  \nMore.",
    "[NPU] Extra\n\nWhy.\r\nMore.",
    "\n\n[NPU] Extra\n\nWhy.",
    "[PATCH] [NPU] Extra\n\nWhy.",
    "[NPU] Extra\n\n    indented code\n\n\n\nthree blank lines above.",
    "[NPU] Überall\n\nnon-ASCII: é ü 中文.",
]


@pytest.mark.parametrize("body", MESSAGES, ids=range(len(MESSAGES)))
def test_a_message_survives_the_loop_or_refresh_refuses(kit3: Kit, body: str) -> None:
    """Invariant 1: commit -> refresh -> apply -> commit gives the same message bytes, or refresh
    refuses naming the commit and the line, and writes nothing."""
    message_patch(body)(kit3, Path())
    before = snapshot(kit3.patches)
    proc = kit3.run("refresh")
    if proc.returncode != 0:
        one_line_error(proc, 2, "message line")
        assert "commit " in proc.stderr and snapshot(kit3.patches) == before
        return
    kit3.run("apply", check=True)
    assert kit3.git("cat-file", "commit", "HEAD").split("\n\n", 1)[1] == body + TRAILERS


# ---- endings: a signal while the kit's rebase is paused or its scratch tree exists
PAUSE_THE_REBASE = """
import scripts.gitcmd as g
real = g.run
def run(*args, cwd, env=None, stdin=None):
    if args[:3] == ("rebase", "-q", "-i"):  # the kit's replay, paused after its first pick, then the signal
        cp = env["GIT_SEQUENCE_EDITOR"]
        env = {**env, "GIT_SEQUENCE_EDITOR": "f() { " + cp + ' "$1" && sed -i "1a break" "$1"; }; f'}
        proc = real(*args, cwd=cwd, env=env, stdin=stdin)
        assert os.path.isdir(os.path.join(cwd, ".git", "rebase-merge"))
        os.kill(os.getpid(), signal.SIG%s)
        return proc
    return real(*args, cwd=cwd, env=env, stdin=stdin)
g.run = run
"""
SIGNAL_IN_ROUND_TRIP = """
import scripts.gitcmd as g
real = g.am
def am(repo, patch, *options):
    os.kill(os.getpid(), signal.SIG%s)
    return real(repo, patch, *options)
g.am = am
"""


@pytest.mark.parametrize("sig", ["INT", "TERM", "HUP", "QUIT"])
@pytest.mark.parametrize("where", ["paused-rebase", "round-trip"])
def test_a_signal_undoes_the_kits_steps_and_says_so(kit3: Kit, sig: str, where: str) -> None:
    fix_ten_again(kit3, Path())
    found = as_found(kit3)
    code = (PAUSE_THE_REBASE if where == "paused-rebase" else SIGNAL_IN_ROUND_TRIP) % sig
    proc = inject(kit3, code, "refresh")
    one_line_error(proc, 130, f"refresh interrupted by SIG{sig}: the kit undid its own steps")
    assert "run nox -s refresh again" in proc.stderr
    left_as_found(kit3, found)
    # and running again works
    assert "0001-fix-ten.patch: updated" in kit3.run("refresh", check=True).stdout


# ---- the pure parts, case by case
@pytest.mark.parametrize(
    ("subject", "fold"),
    [
        ("fixup! [NPU] Twenty", ("fixup", "[NPU] Twenty")),
        ("squash! fixup! [NPU] Twenty", ("squash", "[NPU] Twenty")),
        ("amend! 1234abcd", ("amend", "1234abcd")),
        ("[NPU] fixup! in the middle", None),
    ],
)
def test_fold_of_reads_the_kind_and_the_name(subject: str, fold: tuple[str, str] | None) -> None:
    assert fold_of(subject) == fold


def a_commit(sha: str, message: str) -> Commit:
    return Commit(sha, "t" + sha, "", ("a", "a@b", "0 +0000"), message)


def test_plan_folds_follows_the_commit_named_not_the_first_subject() -> None:
    a, b = a_commit("a" * 40, "[NPU] Same\n"), a_commit("b" * 40, "[NPU] Same\n")
    by_commit = a_commit("c" * 40, f"fixup! {'b' * 12}\n")
    # a fold of the fold goes where that fold went
    chained = a_commit("d" * 40, f"fixup! {'c' * 12}\n")
    groups = plan_folds([a, b, by_commit, chained])
    assert [(g.patch.sha[0], [c.sha[0] for _, c in g.folds]) for g in groups] == [
        ("a", []),
        ("b", ["c", "d"]),
    ]
    with pytest.raises(FoldError, match="matches 2 patches by subject"):
        plan_folds([a, b, a_commit("e" * 40, "fixup! [NPU] Same\n")])


def test_with_one_identity_keeps_both_texts_and_one_trailer_block() -> None:
    a, b = "[NPU] A\n\nWhy A.\n\n", "[NPU] B\n\nWhy B.\n\n"
    b_trailers = "Upstream-Status: Submitted [https://x/1]\nKit-Patch: b\n"
    squash = a + "Upstream-Status: Pending\nKit-Patch: a\n\n" + b + b_trailers
    assert with_one_identity(squash, "b") == a + b + b_trailers
    assert with_one_identity(squash, "a").endswith("\n\nUpstream-Status: Pending\nKit-Patch: a\n")


@pytest.mark.parametrize(
    ("line", "marker"),
    [
        ("<<<<<<< HEAD", True),
        ("=======", False),
        (">>>>>>> theirs", True),
        ("||||||| base", True),
        ("<<<<<<<", True),
        ("======== heading", False),
        ("<<<<<<<< eight", False),
        ("a <<<<<<< b", False),
    ],
)
def test_conflict_marker_is_gits_marker_of_size_seven(line: str, marker: bool) -> None:
    """A lone `=======` (an RST underline) is text: between the others it is a marker, and they are
    refused."""
    assert bool(CONFLICT_MARKER.match(line)) is marker


def test_a_scratch_worktree_a_signal_left_locked_does_not_block_the_next_refresh(kit3: Kit) -> None:
    """Found by the edit-loop model: Ctrl-C inside refresh's `git worktree add` left the round trip's
    scratch worktree registered and locked; every later refresh then failed on `is a missing but
    locked worktree`."""
    fixup("double-attn", TRIPLE)(kit3, Path())
    scratch = kit3.checkout.with_name(f".{kit3.checkout.name}.roundtrip")
    kit3.git("worktree", "add", "-q", "--detach", str(scratch), "pristine")
    kit3.git("worktree", "lock", str(scratch))
    shutil.rmtree(scratch)
    kit3.run("refresh", check=True)
    assert "q * 3" in (kit3.patches / "0003-double-attn.patch").read_text()
    assert str(scratch) not in kit3.git("worktree", "list")


def test_no_process_starts_while_refresh_holds_the_signals(
    kit3: Kit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C goes to the whole process group: a git started while refresh swaps patches/ in and
    records the state would die of it, leaving patches/ new and the state old (the edit-loop model
    found it). So nothing in that stretch starts a process."""
    started: list[list[str]] = []
    real_spawn = gitcmd.spawn

    def spawn(
        argv: list[str], *args: object, **kwargs: object
    ) -> subprocess.CompletedProcess[bytes]:
        if signals.holding():
            started.append(argv)
        return real_spawn(argv, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(gitcmd, "spawn", spawn)
    fix_ten_again(kit3, Path())
    assert "0001-fix-ten.patch: updated" in kit3.run("refresh", check=True).stdout
    assert not signals.holding() and started == []
    with signals.held():  # the check bites: a git run inside the held stretch is seen
        git("rev-parse", "HEAD", cwd=kit3.checkout)
    assert len(started) == 1 and started[0][-2:] == ["rev-parse", "HEAD"]
