"""nox -s rebase -- --git URL REF: the real series judged on synthetic "next" upstreams built from the
real pinned release, and --move onto one of them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import AUTHOR, KIT_ROOT, Kit, copy_kit
from upstreams import CONFIG, LINGBOT, UPSTREAM_TEST, make_next_upstreams, real_wheel, release_repo

from scripts.gitcmd import git

# the real pinned wheel: from .work/downloads when cached, else the registry
pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("upstream")
    repo = release_repo(root / "vllm-omni", real_wheel(root / "downloads"))
    make_next_upstreams(repo)
    return repo


@pytest.fixture
def kit(tmp_path: Path, upstream: Path) -> Kit:
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    shutil.copytree(KIT_ROOT / "tests/regression", kit.root / "tests/regression")
    kit.seed_wheel(real_wheel(upstream.parent / "downloads"))
    return kit


def verdicts(kit: Kit, name: str) -> dict[str, tuple[str, str]]:
    data = json.loads((kit.root / ".work/rebase" / f"{name}.json").read_text())
    return {p["name"][5:-6]: (p["outcome"], p["detail"]) for p in data["patches"]}


def rebase(kit: Kit, upstream: Path, ref: str, *extra: str) -> str:
    proc = kit.run("rebase", "--git", f"file://{upstream}", ref, *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_merged_upstream_verdict_per_patch(kit: Kit, upstream: Path) -> None:
    out = rebase(kit, upstream, "merged")
    got = verdicts(kit, "vllm-omni-merged")
    merged = git("rev-parse", "merged~5", cwd=upstream).strip()
    assert got["rope-2d-cos-sin"] == (
        "upstream-verbatim",
        f"patch-id of upstream commit {merged[:12]}",
    )
    assert got["rope-2d-cos-sin-test"][0] == "clean"
    outcome, detail = got["paged-attention-npu"]
    assert (
        outcome == "upstream-partial"
        and "upstream has vllm_omni/experimental" in detail
        and "hunk #3" in detail
    )
    assert got["npu-empty-stage-buffers"][0] in ("clean", "offset")
    assert got["lingbot-npu-paged-replay"][0] == "upstream-equivalent"
    assert got["npu-usp4-eager-config"][0] == "upstream-equivalent"
    data = json.loads((kit.root / ".work/rebase/vllm-omni-merged.json").read_text())
    hunks = dict(data["patches"][2]["hunks"])
    # the merged upstream carries hunk #3 of 0003 only (the patch has more hunks since the review's
    # helper)
    assert [i for i, v in enumerate(hunks.values(), 1) if v != "not upstream"] == [3]
    assert set(hunks.values()) == {"upstream", "not upstream"} and len(hunks) >= 4
    assert data["target"]["git_commit"] == git("rev-parse", "merged", cwd=upstream).strip()
    report = (kit.root / ".work/rebase/vllm-omni-merged.md").read_text()
    assert "| 1 | `0001-rope-2d-cos-sin.patch` | already upstream (verbatim) |" in report
    assert "already upstream (partial)" in out and "already upstream (equivalent)" in out
    # a test that exercises the dropped rope patch is named
    assert "test_rope_regression.py" in report


def test_renamed_file_merges_three_way(kit: Kit, upstream: Path) -> None:
    rebase(kit, upstream, "renamed")
    got = verdicts(kit, "vllm-omni-renamed")
    outcome, detail = got.pop("lingbot-npu-paged-replay")
    renamed = LINGBOT.replace("transformer", "lingbot_transformer")
    assert outcome == "3-way" and f"renamed upstream to {renamed}" in detail
    clean = "rope-2d-cos-sin rope-2d-cos-sin-test paged-attention-npu paged-attention-npu-test"
    clean += " lingbot-npu-paged-replay-test npu-empty-stage-buffers npu-empty-stage-buffers-test"
    clean += " npu-usp4-eager-config"
    assert {k: v[0] for k, v in got.items()} == dict.fromkeys(clean.split(), "clean")


def test_reverted_patch_is_not_upstream(kit: Kit, upstream: Path) -> None:
    rebase(kit, upstream, "reverted")
    outcome, detail = verdicts(kit, "vllm-omni-reverted")["rope-2d-cos-sin"]
    assert outcome == "clean" and "reverted since" in detail


def test_config_in_other_data_is_not_equivalent(kit: Kit, upstream: Path, tmp_path: Path) -> None:
    """The check bites: the same YAML with one setting changed is a conflict, not 'already upstream'."""
    other = tmp_path / "other"
    git("clone", "-q", "--branch", "merged", str(upstream), str(other), cwd=tmp_path)
    cfg = other / CONFIG
    cfg.write_text(cfg.read_text().replace("ulysses_degree: 4", "ulysses_degree: 2"))
    git("commit", "-qam", "SP-2", cwd=other, env=AUTHOR)
    proc = kit.run("rebase", "--git", str(other), "merged")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    got = verdicts(kit, "other-merged")
    assert got["npu-usp4-eager-config"][0] == "conflict"
    assert got["lingbot-npu-paged-replay"][0] == "upstream-equivalent"


def test_unknown_ref_is_one_line(kit: Kit, upstream: Path) -> None:
    proc = kit.run("rebase", "--git", str(upstream), "no-such-branch")
    assert proc.returncode == 2 and "has no branch or tag no-such-branch" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.legs
def test_move_onto_merged_then_apply_and_both_legs_pass(kit: Kit, upstream: Path) -> None:
    """--move drops what upstream has, keeps the rest; the moved series applies strictly and passes
    both legs."""
    for leg in ("stock", "npu"):  # built (or reused) here: a skip would read as a pass
        subprocess.run([sys.executable, "-m", "scripts", "legenv", leg], cwd=KIT_ROOT, check=True)
    (kit.root / ".work/envs").symlink_to(KIT_ROOT / ".work/envs")
    url = f"file://{upstream}"
    rebase(kit, upstream, "merged", "--move")
    pin = (kit.patches / "upstream.toml").read_text()
    commit = git("rev-parse", "merged", cwd=upstream).strip()
    assert 'source = "git"' in pin and f'commit = "{commit}"' in pin and f'url = "{url}"' in pin
    series = (kit.patches / "series").read_text()
    where = f"in merged ({commit[:12]}) at {url}"
    for slug, how in (
        ("rope-2d-cos-sin", "verbatim"),
        ("lingbot-npu-paged-replay", "equivalent"),
        ("npu-usp4-eager-config", "equivalent"),
    ):
        assert f"# dropped {slug}: already upstream ({how}) {where}\n" in series
    names = [line for line in series.splitlines() if line and not line.startswith("#")]
    assert names == [
        "0001-rope-2d-cos-sin-test.patch",
        "0002-paged-attention-npu.patch",
        "0003-paged-attention-npu-test.patch",
        "0004-lingbot-npu-paged-replay-test.patch",
        "0005-npu-empty-stage-buffers.patch",
        "0006-npu-empty-stage-buffers-test.patch",
    ]
    report = (kit.root / ".work/rebase/vllm-omni-merged.md").read_text()
    assert f"The pin now names git `{url}` `merged` at commit `{commit}`" in report
    reduced = (kit.patches / "0002-paged-attention-npu.patch").read_text()
    original = (
        (KIT_ROOT / "patches" / "0003-paged-attention-npu.patch")
        .read_text(encoding="utf-8")
        .count("\n@@ ")
    )
    # hunk #3 is upstream's now: the moved patch keeps every other hunk
    assert reduced.count("\n@@ ") == original - 1 and "Kit-Patch: paged-attention-npu" in reduced
    applied = kit.run("apply", env={"CI": "true"})  # strict: offsets or 3-way would fail
    assert applied.returncode == 0, applied.stdout + applied.stderr
    proc = kit.run("test")  # both legs, at once where the cores allow (what a user runs)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for leg in ("stock", "npu"):
        record = json.loads((kit.root / f".work/records/test-{leg}.json").read_text())
        assert record["passed_all"] and record["failed"] == 0 and record["passed"] > 0
        # the git source carries upstream's tests: they ran on pristine and patched
        ran = record["upstream_tests"]
        assert (
            ran["files"] == [UPSTREAM_TEST]
            and ran["ok"]
            and ran["passed"] == 1
            and ran["regressions"] == []
        )
