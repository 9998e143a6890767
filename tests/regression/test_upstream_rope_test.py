"""The series' own upstream test (patch rope-2d-cos-sin-test) runs and passes from the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest
from _upstream import UPSTREAM_MARKERS

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

UPSTREAM_TEST = Path("tests/diffusion/layers/test_rope_wan_2d_cos_sin.py")


def test_upstream_rope_test_passes_from_checkout(checkout_root, run_in_tree, tmp_path):
    test_file = checkout_root / UPSTREAM_TEST
    assert test_file.is_file(), f"the series should add {UPSTREAM_TEST}"
    # Upstream's pytest settings, reduced to what the test needs: its marker list, strict markers.
    ini = tmp_path / "pytest.ini"
    ini.write_text(
        "[pytest]\nmarkers =\n" + "".join(f"    {name}: {text}\n" for name, text in UPSTREAM_MARKERS.items())
    )
    proc = run_in_tree(
        checkout_root,
        [
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--strict-markers",
            "-c",
            str(ini),
            str(test_file),
        ],
        tmp_path,
    )
    summary = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert " passed" in summary and "failed" not in summary and "error" not in summary, summary
    assert "skipped" not in summary, summary
