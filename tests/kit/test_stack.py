"""The series as a stack of PRs (patches/stack.toml): the file read against its schema, one branch
and one body per PR on the PRs before it, the stack's invariants (size, tests that need a later PR)
refused by name, pushes leased per fork and branch, a fork's own refusal quoted, the next-step hint
run as printed, a refused --onto leaving nothing, and the range-diff per PR on a git pin."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from conftest import KIT_AUTHOR, MARKED_TEST, ME, SMALL_UPSTREAM, SPDX, Kit, make_series
from upstreams import (
    CHECK_ARGS,
    add_gates,
    checked_stack,
    commit_all,
    gated_config,
    git_pin,
    pytest_here,
    upstream_repo,
)

from scripts.gitcmd import git
from scripts.pr import revision, stack
from scripts.series import Patch

COVER = "[NPU] Attend on Ascend NPU\n\nAttention on NPU takes its own branch, tested on CPU.\n"
ATTN = 'def attend(q):\n    if q.device.type == "npu":\n        return q * 2\n    return q\n'
NOTES = "# Ascend NPU\n\nLine three reads better spelled out.\n"
# three patches: the NPU branch, its test, and an unrelated edit a second PR carries
SERIES = [
    ({"vllm_omni/attn.py": ATTN}, "[NPU] Attend on NPU", "npu-attend"),
    ({"tests/test_attn_npu_guard.py": MARKED_TEST}, "[NPU] Test the NPU guard", "npu-attend-test"),
    ({"notes/npu.md": NOTES}, "[Bugfix] Spell out line three", "rope-three"),
]
TWO_PRS = """[[pr]]
name = "attend"
title = "[NPU] Attend on NPU"
patches = ["npu-attend", "0002-npu-attend-test"]

[[pr]]
name = "rope"
title = "[Bugfix] Spell out line three"
patches = ["rope-three"]
notes = ["Line three reads better spelled out."]
"""


def kit_with(kit: Kit, series: list, stack_text: str | None) -> Kit:
    make_series(kit, series, author=KIT_AUTHOR)
    (kit.patches / "cover.md").write_text(COVER)
    if stack_text is not None:
        (kit.patches / "stack.toml").write_text(stack_text)
    return kit


def pr(kit: Kit, env: dict[str, str], *extra: str) -> tuple[int, str]:
    proc = kit.run("pr", *extra, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def nothing_made(kit: Kit) -> bool:
    return (
        not (kit.root / ".work/pr").exists()
        and not (kit.patches / "revisions.toml").exists()
        and kit.git("branch", "--list", "pr/*").strip() == ""
    )


def one_kit_line(out: str) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith("kit: error:")]
    return line


# ---- the file and its schema -------------------------------------------------------------------


def fixture_patches(tmp_path: Path) -> list[Patch]:
    slugs = ["a", "b", "c", "d"]
    out = []
    for i, slug in enumerate(slugs, 1):
        path = tmp_path / f"{i:04d}-{slug}.patch"
        path.write_text(f"Subject: [NPU] {slug}\n\n---\n")
        out.append(Patch(path.name, path, slug, f"[NPU] {slug}", "Pending"))
    return out


def prs(*runs: list[str], held: str = "") -> str:
    tables = "".join(
        f'[[pr]]\nname = "p{i}"\ntitle = "[NPU] p{i}"\npatches = {run!r}\n\n'.replace("'", '"')
        for i, run in enumerate(runs, 1)
    )
    return tables + (f"[held]\n{held}\n" if held else "")


GOOD = prs(["a", "0002-b"], ["c", "d"])
# (the file's text, what the one line says): each fault refused by name, nothing else read
FAULTS = {
    "not toml": ("[[pr]\n", "is not valid TOML"),
    "no pr": ('[held]\n"a" = "x"\n', "declares no PR"),
    "unknown top key": (GOOD + 'owner = "me"\n', "unknown key 'owner'"),
    "unknown pr key": (
        GOOD.replace('name = "p1"', 'name = "p1"\nbranch = "x"'),
        "unknown key 'branch'",
    ),
    "name not a string": (
        GOOD.replace('name = "p1"', "name = 1"),
        "name is a TOML int, not a string",
    ),
    "patches not a list": (
        GOOD.replace('patches = ["c", "d"]', 'patches = "c"'),
        "patches is a TOML str, not a list",
    ),
    "patch not a string": (GOOD.replace('["c", "d"]', '["c", 4]'), "patches holds 4"),
    "no title": (GOOD.replace('title = "[NPU] p1"\n', ""), "[[pr]] #1 has no title = line"),
    "bad name": (GOOD.replace('"p1"', '"Rope_Fix"', 1), "the name must be 1 to 40 characters"),
    "title without prefix": (GOOD.replace("[NPU] p1", "p1"), "has no upstream prefix"),
    "title too long": (GOOD.replace("[NPU] p1", "[NPU] " + "x" * 95), "(it has 101)"),
    "empty over_limit": (
        GOOD.replace('name = "p1"', 'name = "p1"\nover_limit = " "'),
        "over_limit is empty",
    ),
    "duplicate name": (GOOD.replace('"p2"', '"p1"'), "two PRs are named 'p1'"),
    "unknown patch": (GOOD.replace('"d"]', '"zz"]'), "names 'zz', which is no patch"),
    "stale file name": (GOOD.replace('"0002-b"', '"0003-b"'), "names '0003-b', which is no patch"),
    "in two PRs": (prs(["a", "b"], ["b", "c", "d"]), "0002-b.patch is in PR 'p1' and in PR 'p2'"),
    "in none": (prs(["a", "b"], ["c"]), "0004-d.patch is in no PR and not in [held]"),
    "not contiguous": (prs(["a", "c"], ["b", "d"]), "PR 'p1' is not the next contiguous run"),
    "out of order": (prs(["c", "d"], ["a", "b"]), "PR 'p1' is not the next contiguous run"),
    "held and sent": (
        prs(["a", "b"], ["c", "d"], held='"d" = "why"'),
        "is in PR 'p2' and in [held]",
    ),
    "held without why": (prs(["a", "b"], ["c"], held='"d" = ""'), "[held] 'd' needs its reason"),
    "held not a table": ('held = "d"\n' + GOOD, "held is not a table"),
}


@pytest.mark.parametrize("case", FAULTS)
def test_each_fault_of_stack_toml_is_one_line(tmp_path: Path, case: str) -> None:
    text, said = FAULTS[case]
    patches = fixture_patches(tmp_path)
    (tmp_path / "stack.toml").write_text(text)
    with pytest.raises(stack.StackError) as caught:
        stack.load(tmp_path, patches, "[NPU] title")
    assert said in caught.value.what and "\n" not in str(caught.value), str(caught.value)
    assert caught.value.what.startswith("patches/stack.toml")


def test_a_stack_names_patches_by_slug_or_file_and_holds_one_between(tmp_path: Path) -> None:
    patches = fixture_patches(tmp_path)
    (tmp_path / "stack.toml").write_text(prs(["0001-a", "b"], ["d"], held='"c" = "later"'))
    s = stack.load(tmp_path, patches, "[NPU] title")
    assert [[p.slug for p in pr.patches] for pr in s.prs] == [["a", "b"], ["d"]]
    assert [(p.slug, why) for p, why in s.held] == [("c", "later")] and s.digest
    # no file: the whole series is one PR, titled by the cover
    (tmp_path / "stack.toml").unlink()
    (one,) = stack.load(tmp_path, patches, "[NPU] title").prs
    assert (one.name, one.title, len(one.patches)) == ("series", "[NPU] title", 4)


def test_a_bad_stack_toml_stops_pr_with_one_line_and_nothing_made(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    kit = kit_with(small_kit, SERIES, TWO_PRS.replace('"rope-three"', '"rope-3"'))
    code, out = pr(kit, identity)
    assert code == 2 and "Traceback" not in out
    assert "patches/stack.toml: [[pr]] 'rope' names 'rope-3', which is no patch" in one_kit_line(
        out
    )
    assert nothing_made(kit)


# ---- branches and bodies ----------------------------------------------------------------------


def test_each_pr_is_a_branch_on_the_ones_before_it_with_a_body_of_its_own(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    code, out = pr(kit, identity)
    assert code == 0, out
    first, second = "pr/attend/v1", "pr/rope/v1"
    assert kit.git("rev-list", "--count", f"pristine..{first}").strip() == "2"
    assert kit.git("rev-parse", f"{second}~1").strip() == kit.git("rev-parse", first).strip()
    assert kit.git("rev-parse", f"{second}^{{tree}}") == kit.git("rev-parse", "HEAD^{tree}")
    out_dir = kit.root / ".work/pr/v1"
    assert sorted(p.name for p in (out_dir / "2-rope").iterdir()) == [
        "0003-rope-three.patch",
        "pr-body.md",
    ]
    body = (out_dir / "2-rope/pr-body.md").read_text()
    purpose = body.split("## Test Plan")[0]
    assert purpose.startswith(
        "## Purpose\n\nDepends on: [NPU] Attend on NPU (branch `pr/attend/v1`); merge it first\n"
    )
    # it speaks of what it carries: its own commit, its own notes, not the PR before it
    assert (
        "- [Bugfix] Spell out line three\n" in purpose
        and "Attend on NPU\n" not in purpose.split("merge it first")[1]
    )
    assert "- Line three reads better spelled out." in purpose
    assert "Off NPU: this PR changes no `vllm_omni/` module." in purpose
    assert "# this PR adds no test file" in body  # its test plan: no test of its own
    assert "Depends on" not in (out_dir / "1-attend/pr-body.md").read_text()
    first_body = (out_dir / "1-attend/pr-body.md").read_text()
    assert "pytest -v tests/test_attn_npu_guard.py" in first_body
    assert "Off NPU (CPU, CUDA, ROCm, XPU) nothing changes" in first_body
    cover = (out_dir / "cover.txt").read_text()
    assert "PR 1: [NPU] Attend on NPU" in cover and "PR 2: [Bugfix] Spell out line three" in cover
    assert "[stack]" not in cover and 'name = "rope"' in (out_dir / "series/stack.toml").read_text()


def test_a_held_patch_is_on_no_branch_and_noted_where_it_would_sit(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    held = TWO_PRS.replace('"npu-attend", "0002-npu-attend-test"', '"npu-attend"') + (
        '\n[held]\n"npu-attend-test" = "waits for a marker upstream has not released"\n'
    )
    kit = kit_with(small_kit, SERIES, held)
    code, out = pr(kit, identity)
    assert code == 0, out
    files = kit.git("ls-tree", "-r", "--name-only", "pr/rope/v1").split()
    assert "tests/test_attn_npu_guard.py" not in files and "vllm_omni/attn.py" in files
    body = (kit.root / ".work/pr/v1/2-rope/pr-body.md").read_text()
    assert (
        "- Not part of this PR: [NPU] Test the NPU guard: waits for a marker upstream has not "
        "released" in body
    )


def test_an_over_size_pr_is_refused_by_name_unless_it_says_why(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    table = SPDX + "".join(f"X_{i} = {i}\n" for i in range(499))  # 501 added lines
    series = [*SERIES[:2], ({"tests/table_data.py": table}, "[NPU] Add the table", "big-table")]
    text = TWO_PRS.replace('"rope-three"', '"big-table"')
    kit = kit_with(small_kit, series, text)
    code, out = pr(kit, identity)
    assert code == 1 and "Traceback" not in out, out
    assert (
        "PR 'rope' changes 501 lines, over upstream's 500: split it, or say why in its over_limit"
        in out
    )
    assert nothing_made(kit)
    (kit.patches / "stack.toml").write_text(
        text.replace('name = "rope"', 'name = "rope"\nover_limit = "one generated table"')
    )
    code, out = pr(kit, identity)
    assert code == 0, out
    body = (kit.root / ".work/pr/v1/2-rope/pr-body.md").read_text()
    assert "- Size: 501 changed lines, over the 500-line guideline: one generated table" in body


NEEDS_LATER = (
    SPDX
    + "import pytest\n\nfrom vllm_omni.attn import attend_npu\n\n"
    + "pytestmark = [pytest.mark.core_model, pytest.mark.cpu]\n\n\n"
    + "def test_x():\n    assert attend_npu(2) == 4\n"
)


def test_a_pr_whose_test_needs_a_later_pr_is_refused_naming_both(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    later = "def attend(q):\n    return q\n\n\ndef attend_npu(q):\n    return q * 2\n"
    series = [
        ({"tests/test_attend_npu.py": NEEDS_LATER}, "[NPU] Test attend_npu", "attend-npu-test")
    ]
    text = (
        '[[pr]]\nname = "tests-first"\ntitle = "[NPU] Test attend_npu"\npatches = ["attend-npu-test"]\n'
        '[[pr]]\nname = "code"\ntitle = "[NPU] Add attend_npu"\npatches = ["attend-npu"]\n'
    )
    kit = kit_with(small_kit, series, text)
    (kit.checkout / "vllm_omni/attn.py").write_text(later)
    message = (
        "[NPU] Add attend_npu\n\nA helper.\n\nUpstream-Status: Pending\n"
        "Kit-Off-NPU: vllm_omni/attn.py::attend_npu: a new helper, called on NPU only\n"
        "Kit-Patch: attend-npu\n"
    )
    git("commit", "-qam", message, cwd=kit.checkout, env=KIT_AUTHOR)
    kit.run("refresh", check=True)
    code, out = pr(kit, identity)
    assert code == 1 and "Traceback" not in out, out
    assert (
        "PR 'tests-first': its test tests/test_attend_npu.py uses vllm_omni.attn.attend_npu, which "
        "only the later PR 'code' adds" in out
    )
    assert nothing_made(kit)
    # the check alone says the same, and makes nothing
    proc = kit.run("pr", "--check-stack", env=identity)
    assert proc.returncode == 1 and "only the later PR 'code' adds" in proc.stdout, proc.stderr
    assert nothing_made(kit)


def test_dependency_check_reads_module_attributes_and_never_flags_what_the_prefix_has(
    tmp_path: Path,
) -> None:
    test = (
        "from vllm_omni.layers import attn as pa\nimport vllm_omni.layers.rope as rope\n"
        "def test_x():\n    pa.new_op(); pa.old_op(); rope.spin(); getattr(pa, 'dynamic')()\n"
    )
    trees = {
        "t1": {
            "tests/test_x.py": test,
            "vllm_omni/layers/__init__.py": "",
            "vllm_omni/layers/attn.py": "def old_op(): ...\n",
            "vllm_omni/layers/rope.py": "from math import sin as spin\n",
        }
    }
    trees["t2"] = {
        **trees["t1"],
        "vllm_omni/layers/attn.py": "def old_op(): ...\nnew_op = old_op\n",
    }
    patches = fixture_patches(tmp_path)
    text = "diff --git a/tests/test_x.py b/tests/test_x.py\nnew file mode 100644\n--- /dev/null\n"
    patches[0].path.write_text(text + "+++ b/tests/test_x.py\n@@ -0,0 +1 @@\n+x\n")
    s = stack.Stack(
        (
            stack.Pr(1, "first", "[NPU] a", (patches[0],), "", ()),
            stack.Pr(2, "second", "[NPU] b", (patches[1],), "", ()),
        ),
        (),
    )

    def read(commit: str, path: str) -> str | None:
        return trees[commit].get(path)

    (problem,) = stack.dependency_problems(s, ["t1", "t2"], read)
    assert "uses vllm_omni.layers.attn.new_op, which only the later PR 'second' adds" in problem
    assert stack.dependency_problems(s, ["t2", "t2"], read) == []  # the prefix has it: no alarm


# ---- --onto: pushes, hints, refusals -----------------------------------------------------------


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    return upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)


def bare(path: Path) -> Path:
    git("init", "-q", "--bare", str(path), cwd=path.parent)
    return path


def heads(repo: Path) -> dict[str, str]:
    out = git("for-each-ref", "--format=%(refname) %(objectname)", "refs/heads", cwd=repo)
    return dict(line.split() for line in out.splitlines())


def test_the_printed_next_step_runs_as_printed_and_a_second_fork_gets_the_same_revision(
    small_kit: Kit, identity: dict[str, str], upstream: Path, tmp_path: Path
) -> None:
    pin = small_kit.patches / "upstream.toml"
    pin.write_text(re.sub(r'(?m)^url = ".*"$', f'url = "{upstream}"', pin.read_text()))
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    code, out = pr(kit, identity)  # for review: its hint names the pin's upstream
    assert code == 0, out
    hint = next(line for line in out.splitlines() if "are for review only" in line)
    code, out = pr(kit, identity, *shlex.split(hint.split("nox -s pr -- ", 1)[1]))
    assert code == 0, out  # as printed
    hint = next(line for line in out.splitlines() if "nothing pushed" in line)
    printed = hint.split("nox -s pr -- ", 1)[1]
    checked_stack(kit, ME)  # a push needs the stack checked (else pr runs the legs itself)
    fork = bare(tmp_path / "fork.git")
    args = [str(fork) if a == "YOUR_FORK_URL" else a for a in shlex.split(printed)]
    code, out = pr(kit, identity, *args)  # the printed command, the fork's URL filled in
    assert code == 0, out
    assert sorted(heads(fork)) == ["refs/heads/pr/attend/v1", "refs/heads/pr/rope/v1"]
    gh = [shlex.split(line) for line in out.splitlines() if line.startswith("gh pr create")]
    assert [g[g.index("--head") + 1].split(":")[1] for g in gh] == ["pr/attend/v1", "pr/rope/v1"]
    # the same revision to a second, empty fork: the first fork's lease is not this one's
    other = bare(tmp_path / "other.git")
    code, out = pr(kit, identity, "--onto", str(upstream), "main", "--push-to", str(other))
    assert code == 0, out
    assert heads(other) == heads(fork)
    # and again to the first: it holds what the kit pushed there, so the push is a no-op
    assert pr(kit, identity, "--onto", str(upstream), "main", "--push-to", str(fork))[0] == 0


def test_a_fork_that_refuses_the_push_is_quoted_and_nothing_is_recorded(
    small_kit: Kit, identity: dict[str, str], upstream: Path, tmp_path: Path
) -> None:
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    fork = bare(tmp_path / "fork.git")
    hook = fork / "hooks" / "pre-receive"
    hook.write_text(
        "#!/bin/sh\necho 'GH013: Repository rule violations: commits must be signed'\nexit 1\n"
    )
    hook.chmod(0o755)
    checked_stack(kit, ME)
    code, out = pr(kit, identity, "--onto", str(upstream), "main", "--push-to", str(fork))
    assert code == 2 and "Traceback" not in out, out
    line = one_kit_line(out)
    assert "[remote rejected] (pre-receive hook declined)" in line
    assert "the fork said: GH013: Repository rule violations: commits must be signed" in line
    assert "did not push" not in line and "nothing pushed or recorded" in line
    assert heads(fork) == {} and nothing_made(kit) and not (kit.root / ".work/upstream").exists()


def test_a_refused_onto_leaves_no_branch_ref_record_or_file(
    small_kit: Kit, identity: dict[str, str], upstream: Path, tmp_path: Path
) -> None:
    """Measured: pr --onto whose precheck found something exited 1 but left pr/vN made and checked
    out in .work/upstream."""
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    assert pr(kit, identity, "--onto", str(upstream), "main")[0] == 0
    clone = kit.root / ".work/upstream"
    refs = git("for-each-ref", cwd=clone)
    head = git("rev-parse", "HEAD", cwd=clone)
    before = {p: p.read_bytes() for p in (kit.root / ".work/pr").rglob("*") if p.is_file()}
    revs = (kit.patches / "revisions.toml").read_text()
    # a target whose own gate fails the series' lines (torch_npu outside the platform layer)
    gated = upstream_repo(tmp_path / "gated", SMALL_UPSTREAM)
    add_gates(gated, gated_config())
    npu_import = ATTN.replace("return q * 2", "import torch_npu\n\n        return torch_npu.f(q)")
    kit.checkout.joinpath("vllm_omni/attn.py").write_text(npu_import)
    kit.git("commit", "-qa", "--fixup", kit.git("rev-list", "-1", "HEAD~2").strip())
    kit.run("refresh", check=True)
    env = {**identity, "PATH": os.environ["PATH"]}
    code, out = pr(kit, env, "--onto", str(gated), "main", "--3way")
    assert code == 1 and "Traceback" not in out and "nothing recorded or made" in out, out
    assert git("for-each-ref", cwd=clone) == refs and git("rev-parse", "HEAD", cwd=clone) == head
    assert {p: p.read_bytes() for p in (kit.root / ".work/pr").rglob("*") if p.is_file()} == before
    assert (kit.patches / "revisions.toml").read_text() == revs
    assert "pr/attend/v2" not in kit.git("branch", "--list", "pr/*")


# ---- a git pin, shallow and full: a range-diff per PR against an earlier revision ----------------


@pytest.mark.parametrize("depth", ["shallow", "full"])
def test_pr_on_a_git_pin_range_diffs_each_pr_against_an_earlier_revision(
    small_kit: Kit, identity: dict[str, str], upstream: Path, depth: str
) -> None:
    """Measured: on a git pin, pr with an earlier revision failed (git range-diff: invalid revision
    range): the checkout is shallow, and the clone the range-diff used lacked the review tip."""
    (upstream / "NEWS").write_text("an earlier change\n")
    commit_all(upstream, "news")
    (upstream / "NEWS").write_text("the pinned change\n")
    commit = commit_all(upstream, "more news")
    wheel_pin = (small_kit.patches / "upstream.toml").read_text(encoding="utf-8")
    small_kit.write_pin(git_pin(wheel_pin, upstream, commit))
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    shallow = kit.checkout / ".git" / "shallow"
    if depth == "full":
        git("fetch", "-q", "--unshallow", str(upstream), cwd=kit.checkout)
    assert shallow.exists() == (depth == "shallow")
    assert pr(kit, identity)[0] == 0
    (kit.checkout / "notes/npu.md").write_text(NOTES.replace("three", "3"))
    kit.git("commit", "-qa", "--fixup", "HEAD")
    kit.run("refresh", check=True)
    code, out = pr(kit, identity)
    assert code == 0 and "invalid revision range" not in out, out
    cover = (kit.root / ".work/pr/v2/cover.txt").read_text()
    first, second = cover.split("PR 2: ")
    assert "range-diff against v1" in first and re.search(
        r"2:  \w+ = 2:  \w+ \[NPU\] Test", first
    ), first
    assert "range-diff against v1" in second and re.search(
        r"1:  \w+ ! 1:  \w+ \[Bugfix\]", second
    ), second
    assert ME in kit.git("log", "-1", "--format=%an <%ae>", "pr/rope/v2")


EVIDENCE_URL = (
    "https://github.com/vllm-project/vllm-omni/blob/992e0728e4a2ae3e68c8d60650eb3f50da20b450/"
    "notes/npu.md"
)


def test_upstream_evidence_is_a_note_with_its_check_and_never_a_status_nor_sent_upstream(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    """A stored upstream commit whose branch is unknown shows nothing to be upstream: the patch with
    it (and a Backport status) is still sent; the body says what the commit holds and how to check
    whether it is on main; the trailer, kit-internal, goes nowhere upstream."""
    kit = kit_with(small_kit, SERIES[:2], None)
    (kit.checkout / "notes").mkdir()
    (kit.checkout / "notes/npu.md").write_text(NOTES)
    git("add", "-A", cwd=kit.checkout)
    message = (
        "[Bugfix] Spell out line three\n\nReads better.\n\n"
        f"Upstream-Status: Backport [{EVIDENCE_URL}]\n"
        f"Upstream-Evidence: {EVIDENCE_URL} (holds this file)\nKit-Patch: rope-three\n"
    )
    git("commit", "-qm", message, cwd=kit.checkout, env=KIT_AUTHOR)
    kit.run("refresh", check=True)
    (kit.patches / "stack.toml").write_text(TWO_PRS)
    code, out = pr(kit, identity)
    assert code == 0, out
    sent = (kit.root / ".work/pr/v1/2-rope/0003-rope-three.patch").read_text()
    assert (
        "Upstream-Evidence" not in sent and "Upstream-Status" not in sent and "+Line three" in sent
    )
    body = (kit.root / ".work/pr/v1/2-rope/pr-body.md").read_text()
    assert (
        f'- Related upstream history for "[Bugfix] Spell out line three": {EVIDENCE_URL} (holds '
        "this file). Whether it is on main: `git merge-base --is-ancestor 992e0728e4a2 origin/main`"
    ) in body
    assert "already upstream" not in body.lower()


# ---- --check-stack: each PR's own tests on its base (the leg run injected: the kit's own python) --


def test_check_stack_runs_each_prs_own_tests_on_its_base_and_the_body_quotes_it(
    small_kit: Kit, identity: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    code = revision.check_stack(kit, CHECK_ARGS, ME, legs=("stock",), runner=pytest_here)
    assert code == 0
    record = json.loads((kit.records / "stack-check.json").read_text())
    assert record["prs"]["attend"]["passed"] and "rope" not in record["prs"]  # no test: not run
    assert pr(kit, identity)[0] == 0
    first = (kit.root / ".work/pr/v1/1-attend/pr-body.md").read_text()
    second = (kit.root / ".work/pr/v1/2-rope/pr-body.md").read_text()
    assert (
        "**this PR's own tests on its base (only the PRs it depends on)**: passed: leg stock: 1 passed"
        in first
    )
    assert (
        "**this PR's own tests on its base (only the PRs it depends on)**: not run; run:" in second
    )


def test_check_stack_refuses_a_test_that_needs_a_later_pr_at_run_time(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    """A need no import shows (a file a later PR adds): only running the test on its base finds it."""
    reads_later = MARKED_TEST.replace(
        "assert True", 'assert open("notes/npu.md").read().startswith("# Ascend")'
    )
    series = [SERIES[0], ({"tests/test_attn_npu_guard.py": reads_later}, *SERIES[1][1:]), SERIES[2]]
    kit = kit_with(small_kit, series, TWO_PRS)
    code = revision.check_stack(kit, CHECK_ARGS, ME, legs=("stock",), runner=pytest_here)
    assert code == 1
    record = json.loads((kit.records / "stack-check.json").read_text())
    assert record["prs"]["attend"]["passed"] is False
    code, out = pr(kit, identity)
    assert code == 0, out  # pr itself does not run tests: its body quotes the failure
    body = (kit.root / ".work/pr/v1/1-attend/pr-body.md").read_text()
    assert (
        "own tests on its base (only the PRs it depends on)**: FAILED: leg stock: 1 failed" in body
    )


def test_onto_a_target_that_has_the_first_pr_sends_only_the_rest_and_speaks_only_of_it(
    small_kit: Kit, identity: dict[str, str], upstream: Path
) -> None:
    """Measured: --onto a target that already had 0001 and 0002 left them out, but the body still
    spoke of them."""
    kit = kit_with(small_kit, SERIES, TWO_PRS)
    for patch in sorted(kit.patches.glob("000[12]-*.patch")):
        git("am", "-q", "-k", str(patch), cwd=upstream, env=KIT_AUTHOR)
    code, out = pr(kit, identity, "--onto", str(upstream), "main")
    assert code == 0, out
    made = kit.root / ".work/pr/v1"
    assert sorted(p.name for p in made.iterdir() if p.is_dir()) == ["2-rope", "series"]
    body = (made / "2-rope/pr-body.md").read_text()
    for word in ("Depends on", "Attend", "attn", "npu-attend"):
        assert word not in body, word
    clone = kit.root / ".work/upstream"
    assert sorted(heads(clone)) == ["refs/heads/pr/rope/v1"]
    assert (
        "PR 1 (attend): not sent, the target has every patch of it"
        in (made / "cover.txt").read_text()
    )


def test_a_pr_owns_the_test_files_it_adds_and_the_ones_it_changes(tmp_path: Path) -> None:
    """A PR whose tests extend an earlier PR's test file runs that file on its base: "no test of
    its own" is only for a PR that touches no test file."""
    added = "diff --git a/tests/test_new.py b/tests/test_new.py\nnew file mode 100644\n"
    added += "--- /dev/null\n+++ b/tests/test_new.py\n@@ -0,0 +1 @@\n+x = 1\n"
    changed = "diff --git a/tests/test_old.py b/tests/test_old.py\n"
    changed += "--- a/tests/test_old.py\n+++ b/tests/test_old.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    code = "diff --git a/vllm_omni/a.py b/vllm_omni/a.py\n"
    code += "--- a/vllm_omni/a.py\n+++ b/vllm_omni/a.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n"
    patches = []
    for i, diff in enumerate((code, added, changed), 1):
        path = tmp_path / f"{i:04d}-p{i}.patch"
        path.write_text(f"Subject: [NPU] p{i}\n\n---\n{diff}")
        patches.append(Patch(path.name, path, f"p{i}", f"[NPU] p{i}", "Pending"))

    def one(*ps: Patch) -> stack.Pr:
        return stack.Pr(1, "x", "[NPU] x", ps, "", ())

    assert stack.own_test_files(one(*patches)) == ["tests/test_new.py", "tests/test_old.py"]
    assert stack.own_test_files(one(patches[2])) == ["tests/test_old.py"]
    assert stack.own_test_files(one(patches[0])) == []
