"""apply / refresh / conflict / stale / dirty, on small upstreams the tests build (kit3: three patches,
the first two in rope.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Kit, commit_patch, rope_with
from faulttable import new_upstream, pin_files


def test_an_unchanged_series_exports_applies_and_refreshes_to_the_same_bytes(kit3: Kit) -> None:
    series = (kit3.patches / "series").read_text()
    assert series.splitlines()[-3:] == [
        "0001-fix-ten.patch",
        "0002-twenty.patch",
        "0003-double-attn.patch",
    ]
    assert series.startswith("# test series")  # the header comment survives refresh
    text = (kit3.patches / "0001-fix-ten.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")  # no commit-id noise
    assert "Subject: [Bugfix] Fix line ten" in text  # upstream prefix kept, no [PATCH]
    assert "Upstream-Status: Pending" in text
    kit3.run("apply", check=True)
    first = kit3.git("log", "--format=%H %T %s")
    state = json.loads((kit3.checkout / ".git/kit-state.json").read_text())
    assert state["pin"] == "vllm-omni 0.1.0 (wheel)"
    assert set(state["patches"]) == {
        "0001-fix-ten.patch",
        "0002-twenty.patch",
        "0003-double-attn.patch",
    }
    assert state["head"] == kit3.git("rev-parse", "HEAD").strip()
    out = kit3.run("apply", check=True).stdout
    assert kit3.git("log", "--format=%H %T %s") == first  # the same tree and commit ids
    assert "[3/3] 0003-double-attn.patch: clean" in out and "reusing pristine" in out
    assert len(first.splitlines()) == 4  # pristine + one commit per patch
    assert kit3.git("rev-list", "-1", "pristine").strip() == first.splitlines()[-1].split()[0]
    before = {p.name: p.read_bytes() for p in kit3.patches.iterdir()}
    assert "patches/ unchanged" in kit3.run("refresh", check=True).stdout
    assert {p.name: p.read_bytes() for p in kit3.patches.iterdir()} == before


def test_conflict_names_patch_file_and_hunk_and_keeps_pristine(kit3: Kit, tmp_path: Path) -> None:
    # patch 1's context moves
    new_upstream(kit3, tmp_path, {9: "line 9 upstream", 11: "line 11 upstream"})
    proc = kit3.run("apply")
    assert proc.returncode == 1  # a conflict: the work ran and found it (as rebase's)
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "--3way" in err[0]
    assert "0001-fix-ten.patch does not apply: vllm_omni/layers/rope.py hunk #1" in err[0]
    state = json.loads((kit3.checkout / ".git/kit-state.json").read_text())
    assert state["status"] == "conflict" and state["failed_patch"] == "0001-fix-ten.patch"
    assert (kit3.checkout / ".git/rebase-apply").exists()  # left for the user, as git am does
    assert "0.2.0, pristine" in kit3.git("log", "-1", "--format=%s", "pristine")
    lint = kit3.run("lint")  # lint/test refuse a checkout that stopped half way
    assert lint.returncode == 2 and "stopped at patch 0001-fix-ten.patch" in lint.stderr
    assert (
        "restored the checkout of the previous pin"
        in kit3.run("apply", "--abort", check=True).stdout
    )


def test_offset_is_reported_as_needs_refresh_and_fails_in_ci(kit3: Kit, tmp_path: Path) -> None:
    pin_files(
        kit3,
        tmp_path,
        {"vllm_omni/layers/rope.py": ("extra 1\nextra 2\n" + rope_with({})).encode()},
    )
    local = kit3.run("apply")
    assert local.returncode == 0 and "needs refresh" in local.stdout and "offset 2" in local.stdout
    ci = kit3.run("apply", env={"CI": "true"})
    assert ci.returncode == 2 and "needs refresh" in ci.stderr


def test_dirty_checkout_is_not_thrown_away(kit3: Kit) -> None:
    (kit3.checkout / "vllm_omni/attn.py").write_text("precious edit\n")
    proc = kit3.run("apply")
    assert proc.returncode == 2 and "uncommitted edits" in proc.stderr and "refresh" in proc.stderr
    assert (kit3.checkout / "vllm_omni/attn.py").read_text() == "precious edit\n"
    assert kit3.run("apply", "--force").returncode == 0
    assert "return q * 2" in (kit3.checkout / "vllm_omni/attn.py").read_text()


def test_unexported_commit_is_not_thrown_away(kit3: Kit) -> None:
    commit_patch(kit3.checkout, {"vllm_omni/new.py": "x = 1\n"}, "[NPU] New", "new-file")
    proc = kit3.run("apply")
    assert (
        proc.returncode == 2
        and "not exported to patches/" in proc.stderr
        and "nox -s refresh" in proc.stderr
    )
    lint = kit3.run("lint")
    assert lint.returncode == 2 and "not exported" in lint.stderr
    kit3.run("refresh", check=True)
    assert (kit3.patches / "0004-new-file.patch").is_file()


def test_stale_checkout_is_refused_until_apply(kit3: Kit) -> None:
    patch = kit3.patches / "0003-double-attn.patch"
    patch.write_text(patch.read_text().replace("q * 2", "q * 3"))
    proc = kit3.run("lint")
    assert proc.returncode == 2 and "does not match patches/" in proc.stderr
    assert "0003-double-attn.patch" in proc.stderr and "run: nox -s apply" in proc.stderr
