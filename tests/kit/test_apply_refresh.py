"""apply / refresh / conflict / stale / dirty, on small upstreams the tests build."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SMALL_UPSTREAM, Kit, build_wheel, commit_patch, make_series, pin_toml, rope_with

TWO_PATCHES = [
    ({"vllm_omni/layers/rope.py": rope_with({10: "line 10 fixed"})}, "[Bugfix] Fix line ten", "fix-ten"),
    ({"vllm_omni/attn.py": "def attend(q):\n    return q * 2\n"}, "[NPU] Double attention", "double-attn"),
]


@pytest.fixture
def kit(small_kit: Kit) -> Kit:
    """The small kit with TWO_PATCHES applied and exported."""
    make_series(small_kit, TWO_PATCHES)
    return small_kit


def repin(kit: Kit, where: Path, rope: str) -> None:
    """Pin the kit to a new upstream 0.2.0 whose rope.py is `rope`."""
    wheel, digest = build_wheel(where, {**SMALL_UPSTREAM, "vllm_omni/layers/rope.py": rope}, version="0.2.0")
    kit.write_pin(pin_toml("0.2.0", wheel.name, digest))
    kit.seed_wheel(wheel)


def test_apply_twice_gives_same_tree_and_commit_ids(kit: Kit) -> None:
    kit.run("apply", check=True)
    first = kit.git("log", "--format=%H %T %s")
    out = kit.run("apply", check=True).stdout
    assert kit.git("log", "--format=%H %T %s") == first
    assert "[2/2] 0002-double-attn.patch: clean" in out and "reusing pristine" in out
    assert len(first.splitlines()) == 3  # pristine + one commit per patch
    assert kit.git("rev-list", "-1", "pristine").strip() == first.splitlines()[-1].split()[0]


def test_patch_files_named_by_slug_in_series_order(kit: Kit) -> None:
    series = (kit.patches / "series").read_text()
    assert series.splitlines()[-2:] == ["0001-fix-ten.patch", "0002-double-attn.patch"]
    assert series.startswith("# test series")  # the header comment survives refresh
    text = (kit.patches / "0001-fix-ten.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")  # no commit-id noise
    assert "Subject: [Bugfix] Fix line ten" in text  # upstream prefix kept, no [PATCH]
    assert "Upstream-Status: Pending" in text


def test_refresh_of_unchanged_checkout_changes_no_byte(kit: Kit) -> None:
    kit.run("apply", check=True)
    before = {p.name: p.read_bytes() for p in kit.patches.iterdir()}
    assert "patches/ unchanged" in kit.run("refresh", check=True).stdout
    assert {p.name: p.read_bytes() for p in kit.patches.iterdir()} == before


def test_refresh_folds_fixup_commits(kit: Kit) -> None:
    target = kit.git("rev-list", "-1", "HEAD~1").strip()
    (kit.checkout / "vllm_omni/layers/rope.py").write_text(rope_with({10: "line 10 fixed better"}))
    kit.git("commit", "-qam", "tweak", f"--fixup={target}")
    out = kit.run("refresh", check=True).stdout
    assert "folded fixup!" in out and "0001-fix-ten.patch: updated" in out
    assert "line 10 fixed better" in (kit.patches / "0001-fix-ten.patch").read_text()
    assert len(kit.git("log", "--format=%H").split()) == 3


def test_conflict_names_patch_file_and_hunk_and_keeps_pristine(kit: Kit, tmp_path: Path) -> None:
    repin(kit, tmp_path, rope_with({9: "line 9 upstream", 11: "line 11 upstream"}))  # patch 1's context moves
    proc = kit.run("apply")
    assert proc.returncode == 1  # a conflict: the work ran and found it (as rebase's)
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "--3way" in err[0]
    assert "0001-fix-ten.patch does not apply: vllm_omni/layers/rope.py hunk #1" in err[0]
    state = json.loads((kit.checkout / ".git/kit-state.json").read_text())
    assert state["status"] == "conflict" and state["failed_patch"] == "0001-fix-ten.patch"
    assert (kit.checkout / ".git/rebase-apply").exists()  # left for the user, as git am does
    assert "0.2.0, pristine" in kit.git("log", "-1", "--format=%s", "pristine")
    lint = kit.run("lint")  # lint/test refuse a checkout that stopped half way
    assert lint.returncode == 2 and "stopped at patch 0001-fix-ten.patch" in lint.stderr


def test_offset_is_reported_as_needs_refresh_and_fails_in_ci(kit: Kit, tmp_path: Path) -> None:
    repin(kit, tmp_path, "extra 1\nextra 2\n" + rope_with({}))
    local = kit.run("apply")
    assert local.returncode == 0 and "needs refresh" in local.stdout and "offset 2" in local.stdout
    ci = kit.run("apply", env={"CI": "true"})
    assert ci.returncode == 2 and "needs refresh" in ci.stderr


def test_dirty_checkout_is_not_thrown_away(kit: Kit) -> None:
    (kit.checkout / "vllm_omni/attn.py").write_text("precious edit\n")
    proc = kit.run("apply")
    assert proc.returncode == 2 and "uncommitted edits" in proc.stderr and "refresh" in proc.stderr
    assert (kit.checkout / "vllm_omni/attn.py").read_text() == "precious edit\n"
    assert kit.run("apply", "--force").returncode == 0
    assert "return q * 2" in (kit.checkout / "vllm_omni/attn.py").read_text()


def test_unexported_commit_is_not_thrown_away(kit: Kit) -> None:
    commit_patch(kit.checkout, {"vllm_omni/new.py": "x = 1\n"}, "[NPU] New", "new-file")
    proc = kit.run("apply")
    assert proc.returncode == 2 and "not exported to patches/" in proc.stderr and "nox -s refresh" in proc.stderr
    lint = kit.run("lint")
    assert lint.returncode == 2 and "not exported" in lint.stderr
    kit.run("refresh", check=True)
    assert (kit.patches / "0003-new-file.patch").is_file()


def test_stale_checkout_is_refused_until_apply(kit: Kit) -> None:
    patch = kit.patches / "0002-double-attn.patch"
    patch.write_text(patch.read_text().replace("q * 2", "q * 3"))
    proc = kit.run("lint")
    assert proc.returncode == 2 and "does not match patches/" in proc.stderr
    assert "0002-double-attn.patch" in proc.stderr and "run: nox -s apply" in proc.stderr


def test_state_records_pin_and_patch_hashes(kit: Kit) -> None:
    kit.run("apply", check=True)
    state = json.loads((kit.checkout / ".git/kit-state.json").read_text())
    assert state["pin"] == "vllm-omni 0.1.0 (wheel)"
    assert set(state["patches"]) == {"0001-fix-ten.patch", "0002-double-attn.patch"}
    assert state["head"] == kit.git("rev-parse", "HEAD").strip()
