"""The shipped pin and series on the real vllm-omni 0.30.0 wheel (from the download cache or the registry)."""

import shutil
from pathlib import Path

import pytest
from conftest import KIT_ROOT, copy_kit


@pytest.mark.network  # the real 0.30.0 wheel: cached in .work/downloads or from the registry
def test_real_wheel_apply_is_reproducible_and_refresh_is_byte_stable(tmp_path: Path) -> None:
    kit = copy_kit(tmp_path / "kit", with_patches=True)
    for wheel in (KIT_ROOT / ".work" / "downloads").glob("vllm_omni-0.30.0-*.whl"):
        kit.seed_wheel(wheel)  # a cached copy spares the registry; its sha256 is still checked
    first = kit.run("apply", check=True).stdout
    assert "sha256 verified" in first
    ids = kit.git("log", "--format=%H %T")
    assert len(ids.splitlines()) == 1 + len(list(kit.patches.glob("*.patch")))
    shutil.rmtree(kit.checkout)  # a fresh build, not a reuse, must give the same commit ids
    kit.run("apply", check=True)
    assert kit.git("log", "--format=%H %T") == ids
    kit.run("refresh", check=True)
    for patch in (KIT_ROOT / "patches").iterdir():
        assert (kit.patches / patch.name).read_bytes() == patch.read_bytes(), patch.name
    assert "0.30.0, pristine" in kit.git("log", "-1", "--format=%s", "pristine")
