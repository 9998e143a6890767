"""The git source as a first-class pin: every command of the edit loop run on a git pin as on the
wheel, from a full upstream repository and from a shallow clone of it (what a CI checkout or a
`git clone --depth=1` gives), the kit's own checkout being fetched shallow in both."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SMALL_UPSTREAM, Kit, commit_patch
from upstreams import commit_all, git_pin, upstream_repo

from scripts.gitcmd import git


def ok(proc: object) -> str:
    out = proc.stdout + proc.stderr  # type: ignore[attr-defined]
    assert proc.returncode == 0 and "Traceback" not in out and "kit: error" not in out, out  # type: ignore[attr-defined]
    return out


@pytest.fixture(params=["full", "shallow"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, Path]:
    """(the upstream repository, the URL the pin names: it, or a depth-1 clone of it)."""
    repo = upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)
    (repo / "README.md").write_text("vllm-omni\n", encoding="utf-8")
    commit_all(repo, "A second commit: a shallow clone lacks the first")
    if request.param == "full":
        return repo, repo
    url = tmp_path / "shallow"
    git("clone", "-q", "--depth=1", "--no-local", f"file://{repo}", str(url), cwd=tmp_path)
    assert git("rev-parse", "--is-shallow-repository", cwd=url).strip() == "true"
    return repo, url


@pytest.fixture
def git_kit(small_kit: Kit, source: tuple[Path, Path]) -> Kit:
    """The small kit pinned to the upstream's head by git, its checkout applied."""
    _, url = source
    commit = git("rev-parse", "HEAD", cwd=url).strip()
    small_kit.write_pin(
        git_pin((small_kit.patches / "upstream.toml").read_text(encoding="utf-8"), url, commit)
    )
    assert "(git)" in ok(small_kit.run("apply"))
    assert git("rev-parse", "--is-shallow-repository", cwd=small_kit.checkout).strip() == "true"
    return small_kit


def test_apply_refresh_and_lint_on_a_git_pin(git_kit: Kit) -> None:
    commit_patch(git_kit.checkout, {"notes/npu.md": "# NPU\n"}, "[NPU] Notes", "npu-notes")
    ok(git_kit.run("refresh"))
    patch = git_kit.patches / "0001-npu-notes.patch"
    assert "+# NPU" in patch.read_text(encoding="utf-8")
    # a refresh of an unchanged checkout writes nothing; apply rebuilds it from the git pin
    before = patch.read_bytes()
    ok(git_kit.run("refresh"))
    assert patch.read_bytes() == before
    assert "reusing pristine" in ok(git_kit.run("apply", "--force"))
    ok(git_kit.run("lint"))
    assert "1 patches" in ok(git_kit.run("--version"))


def test_rebase_and_move_on_a_git_pin(git_kit: Kit, source: tuple[Path, Path]) -> None:
    repo, url = source
    commit_patch(git_kit.checkout, {"notes/npu.md": "# NPU\n"}, "[NPU] Notes", "npu-notes")
    ok(git_kit.run("refresh"))
    (repo / "vllm_omni/attn.py").write_text("def attend(q):\n    return q + 0\n", encoding="utf-8")
    moved = commit_all(repo, "Upstream moves on")
    if url != repo:  # the shallow clone follows upstream, shallow
        git("fetch", "-q", "--depth=1", "origin", "main", cwd=url)
        git("update-ref", "refs/heads/main", moved, cwd=url)
    out = ok(git_kit.run("rebase", "--git", str(url), "main"))
    assert "0001-npu-notes.patch" in out
    ok(git_kit.run("rebase", "--git", str(url), "main", "--move"))
    pin = (git_kit.patches / "upstream.toml").read_text(encoding="utf-8")
    assert f'commit = "{moved}"' in pin
    ok(git_kit.run("apply"))
    assert (git_kit.checkout / "notes/npu.md").read_text(encoding="utf-8") == "# NPU\n"
    assert "return q + 0" in (git_kit.checkout / "vllm_omni/attn.py").read_text(encoding="utf-8")
    ok(git_kit.run("lint"))
    assert not list((git_kit.root / ".work").glob(".rebase-*"))
