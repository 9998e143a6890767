"""nox -s pr -- --onto URL REF [--push-to FORK]: the real series as a branch on upstream's
main that moved past the release, pushed to a bare fork; a conflict pushes nothing."""

from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest
from conftest import ME, Kit, Proc, copy_kit
from upstreams import ROPE, commit_all, edit, real_wheel, release_repo

from scripts.gitcmd import git
from scripts.pr.cover import load
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
    proc = pr(kit, identity, "--onto", str(upstream), "main")
    assert (
        proc.returncode == 2 and ".work/upstream exists and was not made by the kit" in proc.stderr
    )
    assert (mine / "notes.txt").read_text() == "mine"
    shutil.rmtree(mine)
    url = upstream.as_uri()
    proc = pr(kit, identity, "--onto", url, "main", "--push-to", str(fork))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (branch,) = branches(fork)
    assert re.fullmatch(r"pr/v\d+", name := branch.removeprefix("refs/heads/"))
    main = git("rev-parse", "main", cwd=upstream).strip()
    assert git("merge-base", "--is-ancestor", main, branch, cwd=fork) == ""  # REF is an ancestor
    log = git("log", "--format=%B%x00", f"{main}..{branch}", cwd=fork)
    messages = [m.strip() for m in log.split("\x00") if m.strip()]
    sent = [
        p for p in load_series(kit.patches) if not p.already_upstream
    ]  # a Backport patch is upstream's already
    assert len(messages) == len(sent) < len(load_series(kit.patches))
    assert not any("deploy config" in m.splitlines()[0] for m in messages)  # 0006 is left out
    for m in messages:
        assert (
            m.endswith(f"Signed-off-by: {ME}")
            and "Kit-Patch" not in m
            and "Upstream-Status" not in m
        )
    # The DCO app's rule: every pushed commit is authored by the identity that signs it off.
    authors = git("log", "--format=%an <%ae>", f"{main}..{branch}", cwd=fork).split("\n")
    assert [a for a in authors if a] == [ME] * len(messages)
    pushed = git("rev-parse", branch, cwd=fork).strip()
    assert "RELEASING.md" in git(
        "ls-tree", "-r", "--name-only", branch, cwd=fork
    )  # upstream's own tree
    cover = load(kit.patches)
    out = kit.root / ".work/pr" / name.split("/")[1]
    body = (out / "pr-body.md").read_text()
    assert body.startswith(f"## Purpose\n\n{cover.purpose.splitlines()[0]}")
    assert (
        "Commits:\n\n- [Bugfix] Broadcast 2-D cos/sin over batch and heads in RotaryEmbeddingWan\n"
        in body
    )
    args = shlex.split(
        next(line for line in proc.stdout.splitlines() if line.startswith("gh pr create"))
    )
    assert args[args.index("--title") + 1] == cover.title
    assert args[args.index("--base") + 1] == "main" and args[args.index("--head") + 1].endswith(
        f":{name}"
    )
    assert args[args.index("--body-file") + 1] == str(out / "pr-body.md")
    assert f"pushed {name} to {fork}" in proc.stdout
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
    assert "nothing pushed" in proc.stdout and "gh pr create" not in proc.stdout
    assert (mine / ".git/kit-upstream-clone").is_file() and git(
        "branch", "--show-current", cwd=mine
    ).strip() == name
    assert git("rev-parse", "HEAD", cwd=mine).strip() == pushed
    assert (
        git("rev-parse", f"HEAD~{len(messages)}", cwd=mine).strip() == main
    )  # one upstream-form commit per patch


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
