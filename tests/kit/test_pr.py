"""nox -s pr: signed-off branch, upstream patch files, PR body from the records, precheck, range-diff."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import (
    AUTHOR,
    KIT_AUTHOR,
    MARKED_TEST,
    ME,
    SMALL_UPSTREAM,
    SPDX,
    Kit,
    commit_patch,
    make_series,
)
from upstreams import checked_stack, upstream_repo

from scripts.checks import scope
from scripts.gitcmd import git
from scripts.pr import body as pr_body
from scripts.pr.branch import dco_problem, sign_off, upstream_message
from scripts.records import write as write_record
from scripts.series import load_series

ATTN = 'def attend(q):\n    if q.device.type == "npu":\n        return q * 2\n    return q\n'
SERIES = [
    ({"vllm_omni/attn.py": ATTN}, "[NPU] Attend on NPU", "npu-attend"),
    ({"tests/test_attn_npu_guard.py": MARKED_TEST}, "[NPU] Test the NPU guard", "npu-attend-test"),
]
COVER = """[NPU][Hardware][Ascend] Attend on Ascend NPU

Attention fails on Ascend because the NPU takes the CPU path. This series
gives NPU its own branch, guarded by device.type, and tests it on CPU.

## Notes for reviewers

- Validated with a simulated NPU only.
"""


def with_cover(kit: Kit, series: list = SERIES) -> None:
    # the kit's own patches: the submitter authors them upstream
    make_series(kit, series, author=KIT_AUTHOR)
    (kit.patches / "cover.md").write_text(COVER)


AUTO_STACK = "# one PR of every patch (tests/kit/test_pr.py)\n"


def one_pr_stack(kit: Kit) -> None:
    """Unless the test wrote its own: the whole series as one PR, named npu-attend."""
    path = kit.patches / "stack.toml"
    if path.exists() and not path.read_text().startswith(AUTO_STACK):
        return
    slugs = ", ".join(f'"{p.slug}"' for p in load_series(kit.patches))
    path.write_text(
        f'{AUTO_STACK}[[pr]]\nname = "npu-attend"\ntitle = "[NPU] Attend on NPU"\npatches = [{slugs}]\n'
    )


def pr(kit: Kit, env: dict[str, str], *extra: str) -> tuple[int, str]:
    one_pr_stack(kit)
    proc = kit.run("pr", *extra, env=env)
    return proc.returncode, proc.stdout + proc.stderr


def made(kit: Kit, name: str) -> str:
    return (kit.root / ".work/pr" / name).read_text()


def digest(kit: Kit) -> str:
    return json.loads((kit.checkout / ".git/kit-state.json").read_text())["series_digest"]


def revisions(kit: Kit) -> str:
    return (kit.patches / "revisions.toml").read_text()


def nothing_made(kit: Kit) -> bool:
    return not (kit.root / ".work/pr").exists() and not (kit.patches / "revisions.toml").exists()


def test_pr_makes_signed_branch_clean_patches_and_body(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    with_cover(small_kit)
    head = small_kit.git("rev-parse", "HEAD")
    code, out = pr(small_kit, identity)
    assert code == 0, out
    assert small_kit.git("rev-parse", "HEAD") == head  # the checkout stays on the series
    log = small_kit.git("log", "--format=%B%x00", "pristine..pr/npu-attend/v1")
    for m in [m.strip() for m in log.split("\x00") if m.strip()]:
        assert (
            m.endswith(f"Signed-off-by: {ME}")
            and "Kit-Patch" not in m
            and "Upstream-Status" not in m
        )
    # The DCO app: each commit's sign-off matches its author. The kit is no person: its patches
    # become the submitter's, dated by the revision recorded in patches/revisions.toml, so preparing
    # again gives the same ids.
    prepared = revisions(small_kit).split('prepared = "')[1].split('"')[0]
    assert (
        authors_and_sign_offs(small_kit, "pristine..pr/npu-attend/v1") == [(ME, prepared, [ME])] * 2
    )
    ids = small_kit.git("rev-list", "pristine..pr/npu-attend/v1")
    assert small_kit.git("rev-parse", "pr/npu-attend/v1^{tree}") == small_kit.git(
        "rev-parse", "HEAD^{tree}"
    )
    for name in ("0001-npu-attend.patch", "0002-npu-attend-test.patch"):
        text = made(small_kit, f"v1/1-npu-attend/{name}")
        assert (
            f"Signed-off-by: {ME}" in text
            and "Kit-Patch:" not in text
            and "Upstream-Status:" not in text
        )
        assert "Kit-Patch:" in made(small_kit, f"v1/series/{name}")  # the kit's own copy keeps them
    body = made(small_kit, "v1/1-npu-attend/pr-body.md")
    assert all(section in body for section in ("## Purpose", "## Test Plan", "## Test Result"))
    purpose = body.split("## Purpose\n\n", 1)[1].split("\n## Test Plan", 1)[0]
    # the whole series as one PR: the series' cover is its text
    assert purpose.startswith("Attention fails on Ascend because the NPU takes the CPU path.")
    assert "### Notes for reviewers\n\n- Validated with a simulated NPU only." in purpose
    assert "Why this change." not in body  # the commit bodies are not pasted end to end
    # one line per commit
    assert "Commits:\n\n- [NPU] Attend on NPU\n- [NPU] Test the NPU guard\n" in purpose
    assert "Depends on" not in purpose  # the first PR of the stack depends on none
    # what ran and what did not: nothing is recorded, so each line is "not run" with its command
    result = body.split("## Test Result", 1)[1]
    assert result.count("not run; run: ") == 5, result  # own tests, lint, both legs, e2e
    assert "run: `pytest -v tests/test_attn_npu_guard.py  # stock torch" in result
    assert "run: `pre-commit run --files vllm_omni/attn.py tests/test_attn_npu_guard.py`" in result
    for word in ("kit", "series digest", "wheel", "Kit-Patch", "Upstream-Status"):
        assert word.lower() not in body.lower(), word  # no word of the contributor's tooling
    cover = made(small_kit, "v1/cover.txt")
    # the stack's cover: the title is the cover's
    assert cover.startswith("[NPU][Hardware][Ascend] Attend on Ascend NPU\n")
    assert "(for review)" in cover and "Cover: first revision." in cover
    assert "PR 1: [NPU] Attend on NPU\n  branch pr/npu-attend/v1" in cover
    # the next step names the pin's upstream (tests/kit/test_stack.py runs it as printed)
    assert (
        "are for review only" in out
        and "nox -s pr -- --force --onto https://example.invalid/x main" in out
    )
    assert "11 changed lines" in cover and "range-diff first revision: no range-diff" in cover
    assert "Precheck (nox -s lint): upstream's hooks, ruff" in cover and "no findings" in cover
    # every hook of upstream's gate, run or not, is listed
    assert "typos" in cover and "actionlint" in cover
    # the words about other devices come from the off-NPU proof, in the cover and in the body alike
    assert "Off NPU (CPU, CUDA, ROCm, XPU) nothing changes: checked by the kit" in cover
    assert "Off NPU (CPU, CUDA, ROCm, XPU) nothing changes: each touched `vllm_omni/`" in purpose
    revs = revisions(small_kit)
    assert '[v1]\nseries_digest = "' + digest(small_kit) in revs and 'cover_digest = "' in revs
    assert pr(small_kit, identity, "--force")[0] == 0  # same series: still v1, no new revision
    # the same revision: the same commit ids
    assert small_kit.git("rev-list", "pristine..pr/npu-attend/v1") == ids
    # a change of the cover alone is a new revision, compared with the last
    (small_kit.patches / "cover.md").write_text(
        COVER.replace("- Validated", "- Follow-up: fused RoPE.\n- Validated")
    )
    code, out = pr(small_kit, identity)
    assert code == 0, out
    cover = made(small_kit, "v2/cover.txt")
    assert "range-diff against v1" in cover and " = 1:  " in cover  # the patches did not change ...
    # ... the cover did
    assert "Cover against v1:" in cover and "+- Follow-up: fused RoPE." in cover
    assert "[v2]" in revisions(small_kit) and "- Follow-up: fused RoPE." in made(
        small_kit, "v2/1-npu-attend/pr-body.md"
    )
    # a change of a patch: range-diffed against the last revision's snapshot
    target = small_kit.git("rev-list", "-1", "HEAD~1").strip()
    (small_kit.checkout / "vllm_omni/attn.py").write_text(ATTN.replace("q * 2", "q * 3"))
    small_kit.git("commit", "-qam", "tweak", f"--fixup={target}")
    small_kit.run("refresh", check=True)
    code, out = pr(small_kit, identity)
    assert code == 0, out
    cover = made(small_kit, "v3/cover.txt")
    assert "range-diff against v2 (from snapshot .work/pr/v2/series)" in cover
    # patch 1 changed, patch 2 did not
    assert " ! 1:  " in cover and "q * 3" in cover and " = 2:  " in cover
    assert made(small_kit, "v1/1-npu-attend/0001-npu-attend.patch").count("q * 2") == 1  # v1 kept
    assert "[v3]" in revisions(small_kit) and "[v4]" not in revisions(small_kit)


def authors_and_sign_offs(kit: Kit, revs: str) -> list[tuple[str, str, list[str]]]:
    """(author, author date, Signed-off-by identities) of each commit in revs, oldest first."""
    out = []
    for entry in kit.git("log", "--reverse", "--format=%an <%ae>%x01%aI%x01%B%x00", revs).split(
        "\x00"
    ):
        if entry.strip():
            author, date, message = entry.strip().split("\x01")
            lines = message.splitlines()
            out.append((author, date, [x[15:] for x in lines if x.startswith("Signed-off-by: ")]))
    return out


def test_no_identity_and_a_patch_by_someone_else_without_their_sign_off_are_refused(
    small_kit: Kit, identity
) -> None:
    with_cover(small_kit)
    code, out = pr(small_kit, {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"})
    assert code == 2 and "no git identity" in out and "git config --global user.email" in out
    assert nothing_made(small_kit)
    other = {**AUTHOR, "GIT_AUTHOR_NAME": "Grace Hopper", "GIT_AUTHOR_EMAIL": "grace@example.org"}
    commit_patch(
        small_kit.checkout,
        {"vllm_omni/extra.py": SPDX},
        "[NPU] Grace's patch",
        "graces",
        author=other,
    )
    small_kit.run("refresh", check=True)
    code, out = pr(small_kit, identity)
    assert code == 2 and "Traceback" not in out, out
    said = "commit '[NPU] Grace's patch' is authored by <grace@example.org> but signed off only by <ada@example.org>"
    assert said in out
    # the fix names the line to ask for
    assert "Signed-off-by: Grace Hopper <grace@example.org>" in out
    assert nothing_made(small_kit)
    small_kit.git(
        "commit",
        "-q",
        "--amend",
        "-m",
        "[NPU] Grace's patch\n\nWhy.\n\nUpstream-Status: Pending\n"
        "Kit-Patch: graces\nSigned-off-by: Grace Hopper <grace@example.org>\n",
    )
    small_kit.run("refresh", check=True)
    code, out = pr(small_kit, identity)
    assert code == 0, out
    grace = "Grace Hopper <grace@example.org>"
    # her authorship kept, the submitter's sign-off added
    assert authors_and_sign_offs(small_kit, "pristine..pr/npu-attend/v1")[-1] == (
        grace,
        AUTHOR["GIT_AUTHOR_DATE"],
        [grace, ME],
    )


@pytest.mark.parametrize(
    ("email", "message", "problem"),
    [
        ("a@x", "S\n\nSigned-off-by: A <a@x>\n", None),
        ("A@X", "S\n\nSigned-off-by: A <a@x>\n", None),  # emails compare case-insensitively
        ("a@x", "S\n\nBody.\n", "has no Signed-off-by: line"),
        (
            "a@x",
            "S\n\nSigned-off-by: B <b@x>\n",
            "is authored by <a@x> but signed off only by <b@x>",
        ),
        ("a@x", "S\n\nNot Signed-off-by: A <a@x>\n", "has no Signed-off-by: line"),
    ],
)
def test_dco_rule(email: str, message: str, problem: str | None) -> None:
    assert dco_problem(email, message) == problem


def test_body_quotes_the_recorded_runs_and_follows_them(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    with_cover(small_kit)
    records = small_kit.root / ".work/records"
    current = digest(small_kit)
    write_record(
        records,
        "lint",
        {
            "series_digest": current,
            "files": ["vllm_omni/attn.py"],
            "findings": [],
            "pre_existing": 0,
            "ruff": "0.14.10",
            "passed": True,
        },
    )
    leg = {
        "leg": "npu",
        "mode": "simulated",
        "versions": {"torch": "2.13.0+cpu", "torch_npu": "2.13.0"},
        "passed": 12,
        "failed": 0,
        "errors": 0,
        "skipped": 3,
        "series_digest": current,
        "passed_all": True,
    }
    write_record(records, "test-npu", leg)
    write_record(records, "test-stock", {**leg, "leg": "stock", "series_digest": "f" * 64})
    assert pr(small_kit, identity)[0] == 0
    body = made(small_kit, "v1/1-npu-attend/pr-body.md")
    lint = "**upstream's pre-commit hooks**, with the whole stack applied: passed: upstream's hooks"
    assert lint in body and "(ruff 0.14.10 with upstream's settings)" in body
    assert "12 passed, 0 failed, 0 errors, 3 skipped (mode simulated: simulated NPU on CPU" in body
    assert (
        "**CPU tests, stock torch (no torch_npu)**: not run (the last run was on an earlier "
        "version); run: `pytest -v tests/test_attn_npu_guard.py" in body
    )
    assert (
        "**realtime benchmark on 4 Ascend cards, two independent servers**: not run; run:" in body
    )
    write_record(records, "test-npu", {**leg, "passed": 11, "failed": 1, "passed_all": False})
    runs = [{"index": 1, "steady_median_ms": 3016.0}, {"index": 2, "steady_median_ms": 3016.4}]
    e2e = {
        "series_digest": current,
        "verdict": "pass",
        "runs": runs,
        "determinism": {"md5_equal": True},
        "stand_in": True,
        "evidence": "evidence/e2e-1",
    }
    write_record(records, "e2e", e2e)
    code, out = pr(small_kit, identity)
    # never replaced silently
    assert code == 2 and "already holds this revision" in out and "--force" in out
    assert pr(small_kit, identity, "--force")[0] == 0
    body = made(small_kit, "v1/1-npu-attend/pr-body.md")
    assert "FAILED: 11 passed, 1 failed" in body and "12 passed" not in body
    assert (
        "pass: steady chunk-interval median per run 3016.0 ms, 3016.4 ms; video md5 equal; "
        "stand-in server" in body
    )
    assert "mutated" not in body  # no mutate-series record yet: no line, no figure
    outcomes = [
        {"path": "a.py", "line": 3, "status": "killed"},
        {"path": "a.py", "line": 3, "status": "equivalent"},
        {"path": "a.py", "line": 4, "status": "killed"},
    ]
    write_record(
        records,
        "mutate-series",
        {
            "series_digest": current,
            "complete": True,
            "lines": 2,
            "lines_run": 2,
            "outcomes": outcomes,
            "survivors": [],
        },
    )
    assert pr(small_kit, identity, "--force")[0] == 0
    assert (
        "the series' own tests run 2/2 NPU-branch lines and kill 2/2 mutants of them (1 more "
        "listed as equivalent"
    ) in made(small_kit, "v1/1-npu-attend/pr-body.md")


def test_test_plan_is_what_a_reviewer_runs_and_the_benchmark_only_where_the_stack_completes() -> (
    None
):
    last = pr_body.pr_plan(["tests/x/test_a.py"], with_e2e=True, has_config=False)
    assert (
        "pytest -v tests/x/test_a.py\n" in last
        and "--deploy-config " + pr_body.DEPLOY_CONFIG in last
    )
    assert f"(`{pr_body.DEPLOY_CONFIG}` is not in this branch's tree" in last
    first = pr_body.pr_plan([], with_e2e=False)
    assert "# this PR adds no test file" in first and "vllm-omni serve" not in first
    for text in (first, last):
        assert "nox -s" not in text  # a reviewer cannot run the kit's sessions


def test_co_authored_by_is_kept_byte_for_byte_and_dco_still_checks_the_author() -> None:
    message = (
        "[NPU] Carry\n\nWhy.\n\nCo-authored-by: Some One <one@example.org>\n"
        "Upstream-Status: Pending\nKit-Patch: carry\n"
    )
    upstream = upstream_message(message, "Me <me@example.org>")
    assert upstream == (
        "[NPU] Carry\n\nWhy.\n\nCo-authored-by: Some One <one@example.org>\nSigned-off-by: Me "
        "<me@example.org>\n"
    )
    assert dco_problem("me@example.org", upstream) is None
    assert dco_problem("one@example.org", upstream) is not None  # a co-author is no sign-off


def test_range_diff_from_kit_history_when_snapshot_is_gone(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    with_cover(small_kit)
    root = small_kit.root
    (root / ".gitignore").write_text("/.work/\n")
    git("init", "-q", cwd=root)
    git("add", "-A", cwd=root)
    git("commit", "-qm", "kit with series v1", cwd=root, env=AUTHOR)
    assert pr(small_kit, identity)[0] == 0
    assert f'kit_commit = "{git("rev-parse", "HEAD", cwd=root).strip()}"' in revisions(small_kit)
    shutil.rmtree(small_kit.root / ".work/pr/v1")
    patch = small_kit.patches / "0002-npu-attend-test.patch"
    patch.write_text(patch.read_text().replace("assert True", "assert 1"))
    small_kit.run("apply", check=True)
    code, out = pr(small_kit, identity)
    assert code == 0, out
    cover = made(small_kit, "v2/cover.txt")
    assert (
        "range-diff against v1 (from kit commit" in cover
        and " = 1:  " in cover
        and " ! 2:  " in cover
    )


def test_precheck_names_file_and_line(small_kit: Kit, identity: dict[str, str]) -> None:
    bad = "def attend(q):\n    if q.is_npu:\n        return q\n    return q\n"
    with_cover(small_kit, [({"vllm_omni/attn.py": bad}, "[NPU] Bad guard", "bad-guard")])
    code, out = pr(small_kit, identity)
    assert code == 1 and "vllm_omni/attn.py:2: KIT001" in out
    # compute first, record last: a revision unfit to send leaves no trace
    assert "nothing recorded or made" in out and "Traceback" not in out
    assert nothing_made(small_kit) and small_kit.git("branch", "--list", "pr/*").strip() == ""
    fixed = 'def attend(q):\n    if q.device.type == "npu":\n        return q\n    return q\n'
    (small_kit.checkout / "vllm_omni/attn.py").write_text(fixed)
    small_kit.git("commit", "-qa", "--amend", "--no-edit")
    small_kit.run("refresh", check=True)
    code, out = pr(small_kit, identity)
    assert code == 0 and "revision v1: new" in out, out  # the refused run used no number


def test_scope_figures_and_rfc_threshold() -> None:
    patch = (
        "diff --git a/tests/t.yaml b/tests/t.yaml\nnew file mode 100644\n--- /dev/null\n+++ "
        "b/tests/t.yaml\n"
        "@@ -0,0 +1,501 @@\n" + "+x\n" * 501 + "diff --git a/vllm_omni/a.py b/vllm_omni/a.py\n"
        "--- a/vllm_omni/a.py\n+++ b/vllm_omni/a.py\n@@ -1,2 +1,2 @@\n-a\n+b\n c\n"
    )
    s = scope.of_patch("0001-x.patch", patch)
    assert (s.added, s.removed, s.new_files, s.test_config_lines) == (
        502,
        1,
        ("tests/t.yaml",),
        501,
    )
    assert scope.rows([s])[-1] == ("total", 2, "+502", "-1", 1, "99%")
    assert "over upstream's 500-line threshold" in (scope.rfc_warning(scope.total([s])) or "")
    assert (
        scope.rfc_warning(scope.of_patch("small", patch.split("diff --git a/vllm_omni")[0][:200]))
        is None
    )


def test_sign_off_helper() -> None:
    assert sign_off("S\n\nBody.\n", ME) == f"S\n\nBody.\n\nSigned-off-by: {ME}\n"
    assert sign_off("S\n\nBody.\n\nCo-authored-by: B <b@x>\n", ME).endswith(
        f"<b@x>\nSigned-off-by: {ME}\n"
    )
    assert sign_off(f"S\n\nSigned-off-by: {ME}\n", ME).count("Signed-off-by") == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "patches/cover.md (the series cover: PR title, purpose, notes) is missing"),
        ("# Title\n\nPurpose.\n", "patches/cover.md does not start with the PR title"),
        (
            "[NPU] Title\n\n## Notes for reviewers\n\n- x\n",
            "patches/cover.md has no purpose paragraph",
        ),
        (
            "[NPU] " + "x" * 67 + "\n\nPurpose.\n",
            "patches/cover.md's title is 73 characters, over the 72",
        ),
        # measured: without its title line, the purpose's first line became the title, cut
        (
            "On Ascend, attention takes the CPU path\nbecause the NPU has no branch.\n\nMore.\n",
            "patches/cover.md has no title line: its first paragraph runs on past line 1",
        ),
        (
            "Attention on Ascend\n\nPurpose.\n",
            "patches/cover.md's first line 'Attention on Ascend' is no PR title: it has no upstream prefix",
        ),
    ],
)
def test_bad_cover_is_one_line_and_nothing_written(
    small_kit: Kit, identity: dict[str, str], text, message
) -> None:
    with_cover(small_kit)
    cover = small_kit.patches / "cover.md"
    cover.unlink() if text is None else cover.write_text(text)
    code, out = pr(small_kit, identity)
    assert code == 2 and message in out and "Traceback" not in out
    assert nothing_made(small_kit)


def test_a_co_authored_patch_keeps_its_credit_through_refresh_apply_and_pr(
    small_kit: Kit, identity
) -> None:
    with_cover(small_kit)
    credit = "Co-authored-by: Some One <one@example.org>"
    (small_kit.checkout / "tests/test_carried.py").write_text(MARKED_TEST, encoding="utf-8")
    git("add", "-A", cwd=small_kit.checkout)
    message = f"[NPU] Carry a fix\n\nFrom an approved PR.\n\n{credit}\nUpstream-Status: Pending\nKit-Patch: carry\n"
    git("commit", "-q", "-m", message, cwd=small_kit.checkout, env=KIT_AUTHOR)
    small_kit.run("refresh", check=True)
    exported = (small_kit.patches / "0003-carry.patch").read_bytes()
    assert f"\n\n{credit}\nUpstream-Status: Pending\n".encode() in exported
    small_kit.run("apply", check=True)
    small_kit.run("refresh", check=True)
    # the round trip keeps it byte for byte
    assert (small_kit.patches / "0003-carry.patch").read_bytes() == exported
    code, out = pr(small_kit, identity)
    assert code == 0, out
    upstream = made(small_kit, "v1/1-npu-attend/0003-carry.patch")
    # credit kept, the submitter's DCO sign-off added
    assert f"\n\n{credit}\nSigned-off-by: {ME}\n\ndiff --git" in upstream
    assert "Kit-Patch" not in upstream and "Upstream-Status" not in upstream


def test_a_new_revision_is_appended_and_the_users_notes_in_revisions_toml_are_kept(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    """Measured: a user's key and comment under [v1] vanished when pr recorded v2 (the file was
    rewritten)."""
    with_cover(small_kit)
    assert pr(small_kit, identity)[0] == 0
    path = small_kit.patches / "revisions.toml"
    mine = path.read_text().replace("\n[v1]\n", "\n# sent to the list on Monday\n[v1]\n")
    mine = (
        mine.replace('prepared = "', 'reviewer = "Grace" # asked for v2\nprepared = "')
        + "# the end, mine\n"
    )
    path.write_text(mine)
    (small_kit.patches / "cover.md").write_text(
        COVER.replace("tests it on CPU", "tests it on CPU and NPU")
    )
    code, out = pr(small_kit, identity)
    assert code == 0, out
    text = path.read_text()
    # every byte kept
    assert text.startswith(mine) and text.count("[v1]") == 1 and text.count("[v2]") == 1
    # and pr reads its own file back
    assert "revision v2: unchanged" in pr(small_kit, identity, "--force")[1]


def test_a_cover_with_a_bom_is_refused_not_put_in_the_title(
    small_kit: Kit, identity: dict[str, str]
) -> None:
    """The unclear outcome, decided: a BOM is refused (as in patches/series), never part of the PR
    title."""
    with_cover(small_kit)
    (small_kit.patches / "cover.md").write_bytes(b"\xef\xbb\xbf" + COVER.encode())
    code, out = pr(small_kit, identity)
    assert (
        code == 2
        and "patches/cover.md starts with a UTF-8 byte order mark" in out
        and nothing_made(small_kit)
    )
    fix = out.split("save it without BOM, e.g. ", 1)[1].strip()
    # the fix the line gives, as written
    subprocess.run(fix, shell=True, cwd=small_kit.root, check=True)
    assert (small_kit.patches / "cover.md").read_text() == COVER
    assert pr(small_kit, identity)[0] == 0
    assert made(small_kit, "v1/cover.txt").startswith("[NPU][Hardware][Ascend] Attend")


def test_a_push_replaces_only_what_the_kit_pushed_and_a_failed_one_records_nothing(
    small_kit: Kit, identity: dict[str, str], tmp_path: Path
) -> None:
    """Measured: pr --force force-pushed over a maintainer's commit on the fork's pr/v1, exit 0; and a
    failed push recorded the revision, so the retry needed --force."""
    with_cover(small_kit)
    upstream = upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)
    fork = tmp_path / "fork.git"
    onto = ["--onto", str(upstream), "main", "--push-to"]
    one_pr_stack(small_kit)
    checked_stack(small_kit, ME)  # a push needs the stack checked (else pr runs the legs itself)
    code, out = pr(small_kit, identity, *onto, str(tmp_path / "no-such-fork"))
    assert (
        code == 2
        and "git push to" in out
        and "nothing pushed or recorded" in out
        and nothing_made(small_kit)
    ), out
    git("init", "-q", "--bare", str(fork), cwd=tmp_path)
    code, out = pr(small_kit, identity, *onto, str(fork))  # the retry: no --force needed
    assert code == 0 and "recorded v1" in out, out
    # upstream moves on: the same revision re-prepared (--force) on it replaces what the kit itself
    # pushed
    (upstream / "NEWS").write_text("news\n")
    git("add", "-A", cwd=upstream)
    git("commit", "-qm", "news", cwd=upstream, env=AUTHOR)
    code, out = pr(small_kit, identity, "--force", *onto, str(fork))
    assert code == 0, out
    assert (
        git("rev-parse", "pr/npu-attend/v1~2", cwd=fork).strip()
        == git("rev-parse", "main", cwd=upstream).strip()
    )
    # a maintainer adds a commit to the fork's pr/v1: never replaced, the refusal names it
    mine = tmp_path / "maintainer"
    git("clone", "-q", "-b", "pr/npu-attend/v1", str(fork), str(mine), cwd=tmp_path)
    (mine / "FIX").write_text("fix\n")
    git("add", "-A", cwd=mine)
    git("commit", "-qm", "maintainer's fix", cwd=mine, env=AUTHOR)
    git("push", "-q", "origin", "pr/npu-attend/v1", cwd=mine)
    theirs = git("rev-parse", "pr/npu-attend/v1", cwd=fork).strip()
    (upstream / "NEWS").write_text("more news\n")
    git("commit", "-qam", "more news", cwd=upstream, env=AUTHOR)
    before = revisions(small_kit)
    code, out = pr(small_kit, identity, "--force", *onto, str(fork))
    assert code == 2 and f'holds commit {theirs[:12]} ("maintainer\'s fix")' in out, out
    assert (
        git("rev-parse", "pr/npu-attend/v1", cwd=fork).strip() == theirs
        and revisions(small_kit) == before
    )
