"""The series' own upstream-style tests (every test file it adds under tests/) run and pass from the
checkout.

Each runs in this process through ``pytest.main`` (the checkout's ``vllm_omni`` is already imported
here; a fresh interpreter would pay ~12 s to import torch and vllm again), under upstream's marker
list with ``--strict-markers``, outcomes counted from pytest's reports. In the npu leg they run
beside the simulated NPU.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from _upstream import UPSTREAM_MARKERS

pytestmark = [pytest.mark.core_model, pytest.mark.cpu]


def added_test_files(checkout: Path, pristine: Path) -> list[str]:
    """Test files of the checkout that the pristine tree lacks: the ones the series adds."""
    tests = checkout / "tests"
    found = tests.rglob("test_*.py") if tests.is_dir() else []
    return sorted(
        str(p.relative_to(checkout))
        for p in found
        if not (pristine / p.relative_to(checkout)).exists()
    )


SERIES_TESTS = added_test_files(Path(os.environ["KIT_CHECKOUT"]), Path(os.environ["KIT_PRISTINE"]))


class Outcomes:
    """A pytest plugin counting the inner run's test outcomes from its reports."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.seen[report.outcome] += 1


def test_series_adds_upstream_tests() -> None:
    # Without this, a series that lost its tests would parametrize the test below with nothing.
    assert SERIES_TESTS, "the series should add its own upstream-style tests under tests/"


@pytest.mark.parametrize("test_file", SERIES_TESTS)
def test_series_upstream_test_passes_from_checkout(
    test_file, checkout_root, tmp_path, monkeypatch, capsys
):
    import vllm_omni

    assert Path(vllm_omni.__file__).resolve().is_relative_to(checkout_root)
    # Upstream's pytest settings, reduced to what the tests need: its marker list, strict markers.
    ini = tmp_path / "pytest.ini"
    markers = "".join(f"    {name}: {text}\n" for name, text in UPSTREAM_MARKERS.items())
    ini.write_text(f"[pytest]\nmarkers =\n{markers}")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the inner run prepends the test's folder
    outcomes = Outcomes()
    rc = pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "--strict-markers",
            "-c",
            str(ini),
            str(checkout_root / test_file),
        ],
        plugins=[outcomes],
    )
    output = capsys.readouterr().out
    assert rc == 0, output
    assert outcomes.seen["passed"] > 0 and set(outcomes.seen) == {"passed"}, (
        dict(outcomes.seen),
        output,
    )
