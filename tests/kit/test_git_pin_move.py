"""A pin moved from or to a git commit: `apply` builds the new checkout beside the old one (a git pin
is fetched shallow) and borrows the old history for `git am -3` and the way back, instead of failing
on the ref it meant to borrow it under ("refs/kit/previous-pin: not a valid SHA1")."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import SMALL_UPSTREAM, Kit, make_series
from upstreams import commit_all, git_pin, upstream_repo

from scripts.gitcmd import git


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    """The small upstream's tree as a git repository, one commit on main."""
    return upstream_repo(tmp_path / "upstream", SMALL_UPSTREAM)


def ref(repo: Path, name: str) -> str:
    return git("rev-parse", "--verify", "-q", f"{name}^{{commit}}", cwd=repo).strip()


# (from, to, the file upstream changes): the pin's source before and after the move; notes/npu.md is
# the one the series adds, so the new pin conflicts with it (a wheel pin stays at the release: no
# conflict to make)
MOVES = [
    ("git", "git", "README.md"),
    ("git", "wheel", "README.md"),
    ("wheel", "git", "README.md"),
    ("git", "git", "notes/npu.md"),
    ("wheel", "git", "notes/npu.md"),
]


def pin(kit: Kit, upstream: Path, source: str, wheel_pin: str) -> None:
    commit = git("rev-parse", "HEAD", cwd=upstream).strip()
    kit.write_pin(git_pin(wheel_pin, upstream, commit) if source == "git" else wheel_pin)


@pytest.mark.parametrize(
    ("before", "after", "moved"), MOVES, ids=[f"{a}-to-{b}:{m}" for a, b, m in MOVES]
)
def test_apply_follows_a_moved_pin_and_keeps_the_way_back(
    small_kit: Kit, upstream: Path, before: str, after: str, moved: str
) -> None:
    wheel_pin = (small_kit.patches / "upstream.toml").read_text(encoding="utf-8")
    pin(small_kit, upstream, before, wheel_pin)
    make_series(small_kit, [({"notes/npu.md": "# NPU\n"}, "[NPU] Notes", "npu-notes")])
    series = {p.name: p.read_bytes() for p in small_kit.patches.glob("*.patch")}
    old_head = git("rev-parse", "HEAD", cwd=small_kit.checkout).strip()
    (upstream / moved).parent.mkdir(exist_ok=True)
    (upstream / moved).write_text("Upstream moved on.\n", encoding="utf-8")
    commit_all(upstream, "Upstream moves on")
    pin(small_kit, upstream, after, wheel_pin)
    proc = small_kit.run("apply")
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out and "not a valid SHA1" not in out, out
    # nothing lost
    assert {p.name: p.read_bytes() for p in small_kit.patches.glob("*.patch")} == series
    # the old checkout's history came along, for `git am -3` and the way back
    assert git("rev-parse", "refs/kit/previous-pin", cwd=small_kit.checkout).strip() == old_head
    if moved == "README.md":
        assert proc.returncode == 0 and "error" not in out, out
        assert (small_kit.checkout / "notes/npu.md").read_text(encoding="utf-8") == "# NPU\n"
        proc = small_kit.run("apply")  # the next apply on the same pin reuses the new checkout
        assert proc.returncode == 0 and "reusing pristine" in proc.stdout + proc.stderr, proc.stdout
        return
    errors = [line for line in out.splitlines() if line.startswith("kit: error:")]
    assert proc.returncode != 0 and len(errors) == 1 and "0001" in errors[0], out
    proc = small_kit.run("apply", "--abort")  # back to the checkout of the old pin, whole
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert git("rev-parse", "HEAD", cwd=small_kit.checkout).strip() == old_head
