"""The series' own upstream test (patch rope-2d-cos-sin-test) runs and passes from the checkout.

It runs in this process, through ``pytest.main``: the checkout's ``vllm_omni`` is already the one
imported here (``test_stock_leg.py`` checks it), so a fresh interpreter would only pay for importing
torch and vllm a second time (about 12 s of a leg). Upstream's settings still apply: its own
marker list with ``--strict-markers``, its test file collected and run by pytest, outcomes
counted from pytest's own reports.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import pytest
from _upstream import UPSTREAM_MARKERS

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]

UPSTREAM_TEST = Path("tests/diffusion/layers/test_rope_wan_2d_cos_sin.py")


class Outcomes:
    """A pytest plugin counting the inner run's test outcomes from its reports."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.seen[report.outcome] += 1


def test_upstream_rope_test_passes_from_checkout(checkout_root, tmp_path, monkeypatch, capsys):
    import vllm_omni

    test_file = checkout_root / UPSTREAM_TEST
    assert test_file.is_file(), f"the series should add {UPSTREAM_TEST}"
    assert Path(vllm_omni.__file__).resolve().is_relative_to(checkout_root)
    # Upstream's pytest settings, reduced to what the test needs: its marker list, strict markers.
    ini = tmp_path / "pytest.ini"
    markers = "".join(f"    {name}: {text}\n" for name, text in UPSTREAM_MARKERS.items())
    ini.write_text(f"[pytest]\nmarkers =\n{markers}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the inner run prepends the test's folder
    outcomes = Outcomes()
    rc = pytest.main(
        ["-q", "-p", "no:cacheprovider", "--strict-markers", "-c", str(ini), str(test_file)], plugins=[outcomes]
    )
    output = capsys.readouterr().out
    assert rc == 0, output
    assert outcomes.seen["passed"] > 0 and set(outcomes.seen) == {"passed"}, (dict(outcomes.seen), output)
