"""nox -s pr -- --onto URL REF [--push-to FORK]: the real series as a branch on upstream's
main that moved past the release, pushed to a bare fork; a conflict pushes nothing."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from conftest import AUTHOR, ME, Kit, Proc, copy_kit
from upstreams import ROPE, commit_all, edit, patch, real_wheel, release_repo

from scripts.gitcmd import git
from scripts.pr import stack
from scripts.pr.cover import load
from scripts.records import write as write_record
from scripts.series import load_series

Env = dict[str, str]
# the real pinned wheel: from .work/downloads when cached, else the registry
pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Upstream whose main moved past v0.30.0: an unrelated commit, then one touching rope.py (a series
    file)."""
    root = tmp_path_factory.mktemp("onto")
    repo = release_repo(root / "vllm-omni", real_wheel(root / "downloads"))
    (repo / "docs").mkdir()
    (repo / "RELEASING.md").write_text("How to release.\n")
    commit_all(repo, "docs: how to release")
    edit(
        repo,
        ROPE,
        "class RotaryEmbeddingWan(",
        "# Wan 2.x rotary embedding.\nclass RotaryEmbeddingWan(",
    )
    commit_all(repo, "rope: document RotaryEmbeddingWan")
    git("checkout", "-q", "-b", "conflicting", "main", cwd=repo)
    edit(
        repo,
        ROPE,
        "        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)\n        rotated",
        "        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(dim=-1)\n        rotated",
    )
    commit_all(repo, "rope: unbind by keyword")
    git("checkout", "-q", "main", cwd=repo)
    return repo


@pytest.fixture
def kit(tmp_path: Path, upstream: Path) -> Kit:
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    kit.seed_wheel(real_wheel(upstream.parent / "downloads"))
    kit.run("apply", check=True)
    return kit


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    fork = tmp_path / "fork.git"
    git("init", "-q", "--bare", str(fork), cwd=tmp_path)
    return fork


@pytest.fixture
def identity(identity: Env) -> Env:
    return {**identity, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # no gh on it


def pr(kit: Kit, identity: Env, *args: str) -> Proc:
    return kit.run("pr", *args, env=identity)


def branches(fork: Path) -> list[str]:
    return git("for-each-ref", "--format=%(refname)", cwd=fork).split()


def test_onto_main_pushes_a_signed_branch_on_upstream_history(
    kit: Kit, upstream: Path, fork: Path, identity: Env
) -> None:
    # first, a folder of the user's own where the kit's clone goes is refused
    mine = kit.root / ".work/upstream"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    proc = pr(kit, identity, "--onto", str(upstream), "main", "--force")
    assert (
        proc.returncode == 2 and ".work/upstream exists and was not made by the kit" in proc.stderr
    )
    assert (mine / "notes.txt").read_text() == "mine"
    shutil.rmtree(mine)
    url = upstream.as_uri()
    declared = stack.load(kit.patches, load_series(kit.patches), load(kit.patches).title)
    # Stand-in for the stack check's leg runs (torch is not in this tier's interpreter; the legs
    # run it in .ci/run's pr step): its record, passed, for this series and stack.
    state = json.loads((kit.checkout / ".git/kit-state.json").read_text())
    passed = {"passed": True, "summary": "stand-in", "tests": ["t"]}
    write_record(
        kit.records,
        stack.CHECK_RECORD,
        {
            "series_digest": state["series_digest"],
            "stack_digest": declared.digest,
            "prs": {x.name: passed for x in declared.prs},
        },
    )
    proc = pr(kit, identity, "--onto", url, "main", "--push-to", str(fork))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pushed = [b.removeprefix("refs/heads/") for b in branches(fork)]
    assert len(pushed) == len(declared.prs) > 1 and all(
        re.fullmatch(r"pr/[a-z0-9-]+/v\d+", b) for b in pushed
    )
    label = pushed[0].rsplit("/", 1)[1]
    main = git("rev-parse", "main", cwd=upstream).strip()
    base = main
    for one in declared.prs:  # PR k sits on the PRs before it, which sit on upstream's main
        branch = one.branch(label)
        log = git("log", "--format=%B%x00", f"{base}..{branch}", cwd=fork)
        messages = [m.strip() for m in log.split("\x00") if m.strip()]
        assert len(messages) == len(one.patches)
        for m in messages:
            assert (
                m.endswith(f"Signed-off-by: {ME}")
                and "Kit-Patch" not in m
                and "Upstream-Status" not in m
            )
        # The DCO app's rule: every pushed commit is authored by the identity that signs it off.
        authors = git("log", "--format=%an <%ae>", f"{base}..{branch}", cwd=fork).split("\n")
        assert [a for a in authors if a] == [ME] * len(messages)
        base = git("rev-parse", branch, cwd=fork).strip()
    held = {p.name for p, _ in declared.held}
    for branch in pushed:  # a held patch (0006) is on no branch
        subjects = git("log", "--format=%s", f"{main}..{branch}", cwd=fork)
        assert not any(
            p.subject[:40] in subjects for p in load_series(kit.patches) if p.name in held
        )
    last = declared.prs[-1].branch(label)
    assert "RELEASING.md" in git("ls-tree", "-r", "--name-only", last, cwd=fork)
    out = kit.root / ".work/pr" / label
    first, second = declared.prs[:2]
    body = (out / first.folder / "pr-body.md").read_text()
    assert body.startswith("## Purpose\n\n**[Bugfix] Broadcast 2-D cos/sin over batch and heads in")
    second_body = (out / second.folder / "pr-body.md").read_text()
    assert second_body.startswith(f"## Purpose\n\nDepends on: {first.title} (")
    gh = [shlex.split(line) for line in proc.stdout.splitlines() if line.startswith("gh pr create")]
    assert [g[g.index("--title") + 1] for g in gh] == [x.title for x in declared.prs]
    assert all(g[g.index("--base") + 1] == "main" for g in gh)
    assert [g[g.index("--body-file") + 1] for g in gh] == [
        str(out / x.folder / "pr-body.md") for x in declared.prs
    ]
    cover_txt = (out / "cover.txt").read_text()
    assert f"Each patch on {url} main ({main[:12]}):" in cover_txt
    assert re.search(
        r"^1  0001-rope-2d-cos-sin\.patch +offset +hunk #1 at line \d+ \(offset 1\)$",
        cover_txt,
        re.M,
    )
    # prepared again without --push-to: the same revision, the same ids, in the kit's clone only
    proc = pr(kit, identity, "--onto", str(upstream), "main", "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "nothing pushed" in proc.stdout + proc.stderr and "gh pr create" not in proc.stdout
    assert (mine / ".git/kit-upstream-clone").is_file() and git(
        "branch", "--show-current", cwd=mine
    ).strip() == last
    assert git("rev-parse", "HEAD", cwd=mine).strip() == base


def test_onto_a_target_that_has_the_first_pr_leaves_it_out_and_the_next_body_does_not_mention_it(
    kit: Kit, upstream: Path, identity: Env
) -> None:
    git("checkout", "-q", "-b", "rope-merged", "main", cwd=upstream)
    for name in ("0001", "0002"):
        git("am", "-q", "-k", patch(name).as_posix(), cwd=upstream, env=AUTHOR)
    git("checkout", "-q", "main", cwd=upstream)
    proc = pr(kit, identity, "--onto", str(upstream), "rope-merged")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    declared = stack.load(kit.patches, load_series(kit.patches), load(kit.patches).title)
    out = next((kit.root / ".work/pr").glob("v*"))
    folders = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name != "series")
    assert folders == [x.folder for x in declared.prs[1:]]  # the first PR is not sent
    body = (out / declared.prs[1].folder / "pr-body.md").read_text()
    for word in ("RotaryEmbeddingWan", "cos/sin", "Depends on"):
        assert word not in body, word
    assert "the target has every patch of it" in (out / "cover.txt").read_text()


CONFLICT = (
    "0001-rope-2d-cos-sin.patch conflicts with upstream: vllm_omni/diffusion/layers/rope.py hunk #1"
)
NO_GH = "cannot open the PR: gh is not installed; nothing was made or pushed"
# case -> (what follows --onto URL, None for no --onto; what stderr says), each with --push-to FORK
REFUSALS = {
    "conflict": (["conflicting"], [CONFLICT]),
    "open without gh": (
        ["main", "--open"],
        [NO_GH, "after the push, run: gh pr create --repo ", "--head "],
    ),
    "push flags need onto": (None, ["--push-to work only with --onto URL REF"]),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refusal_pushes_nothing(
    kit: Kit, upstream: Path, fork: Path, identity: Env, case: str
) -> None:
    onto, said = REFUSALS[case]
    assert shutil.which("gh", path=identity["PATH"]) is None
    proc = pr(
        kit, identity, *(["--onto", str(upstream), *onto] if onto else []), "--push-to", str(fork)
    )
    assert proc.returncode == 2 and all(line in proc.stderr for line in said), (
        proc.stdout + proc.stderr
    )
    assert (
        "Traceback" not in proc.stderr
        and branches(fork) == []
        and not (kit.root / ".work/pr").exists()
    )
