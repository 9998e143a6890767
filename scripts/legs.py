"""Run the CPU regression suite (tests/regression) on the patched checkout, in one leg.

  stock  real vllm CPU build, stock torch, no torch_npu: `Tensor.is_npu` does not exist.
  npu    the pinned torch_npu. Mode `real` when it imports (CANN present), else
         `simulated`: tests/regression/npu_standin/simulated_npu.py stands in for the cards, in CPU.

The mode is decided by what imports, printed, and recorded; never assumed.
"""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from scripts.diffparse import parse
from scripts.errors import KitError
from scripts.lint import npu_only_lines

SUITE = "tests/regression"


class SuiteDidNotRun(KitError):
    """pytest ended without a report (collection crashed, or the env is broken)."""


@dataclass(frozen=True)
class Counts:
    passed: int
    failed: int
    errors: int
    skipped: int

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.errors == 0 and self.passed > 0


def npu_mode(leg: str, versions: dict[str, str]) -> str:
    """none for stock; real only when torch_npu really imported in the env; else simulated."""
    if leg == "stock":
        return "none"
    return "real" if versions.get("torch_npu_import") == "ok" else "simulated"


def leg_env(leg: str, mode: str, checkout: Path, pristine: Path, out: Path, pycache: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "KIT_LEG_REPORT_DIR": str(out),
        "COVERAGE_FILE": str(out / ".coverage"),  # two legs at once must not share coverage data
        "KIT_LEG": leg,
        "KIT_NPU_MODE": mode,
        "KIT_CHECKOUT": str(checkout),
        "KIT_PRISTINE": str(pristine),
        # .pyc of what the leg imports, compiled on its first run and kept with its env; never in the checkout.
        "PYTHONPYCACHEPREFIX": str(pycache),
    }
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if mode == "simulated":
        # torch_npu is installed but cannot load without CANN; stop torch from auto-loading it.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


def coverage_config(files: list[Path]) -> str:
    """coverage.py settings measuring only these files: reporting on every file of the tree costs a minute."""
    return "[run]\ninclude =\n" + "".join(f"    {f}\n" for f in files)


def pytest_command(python: Path, junit: Path, cov_json: Path, cov_config: Path, extra: list[str]) -> list[str]:
    return [
        str(python), "-m", "pytest", SUITE, "-p", "no:cacheprovider", f"--junitxml={junit}",
        "--cov", f"--cov-config={cov_config}", f"--cov-report=json:{cov_json}", "--cov-report=", *extra,
    ]  # fmt: skip


def counts_from_junit(xml_text: str) -> Counts:
    root = ET.fromstring(xml_text)
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
    total = {k: sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")}
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return Counts(passed, total["failures"], total["errors"], total["skipped"])


def npu_branch_lines(series_diff: str, checkout: Path) -> dict[str, set[int]]:
    """Lines the series adds inside NPU-only branches, per file: what the npu leg must execute."""
    out: dict[str, set[int]] = {}
    for diff in parse(series_diff):
        path = checkout / diff.path
        if diff.path.endswith(".py") and path.is_file():
            inside = npu_only_lines(path.read_text(encoding="utf-8")) & {n for n, _ in diff.added}
            if inside:
                out[diff.path] = inside
    return out


def executed(cov_json_text: str, cwd: Path, checkout: Path, wanted: dict[str, set[int]]) -> tuple[int, int]:
    """(executed, total) of the wanted lines, from coverage.py's JSON report (paths relative to cwd)."""
    files = json.loads(cov_json_text).get("files", {})
    by_rel = {}
    for name, data in files.items():
        path = (cwd / name).resolve()
        if path.is_relative_to(checkout.resolve()):
            by_rel[str(path.relative_to(checkout.resolve()))] = set(data.get("executed_lines", []))
    total = sum(len(lines) for lines in wanted.values())
    hit = sum(len(lines & by_rel.get(path, set())) for path, lines in wanted.items())
    return hit, total


def run_suite(python: Path, env: dict[str, str], cwd: Path, out: Path, measured: list[Path], extra: list[str]) -> int:
    """pytest on the suite; junit.xml and coverage.json (of the measured files) land in out."""
    junit, cov_json, cov_config = out / "junit.xml", out / "coverage.json", out / "coveragerc"
    for stale in (junit, cov_json):
        stale.unlink(missing_ok=True)
    cov_config.write_text(coverage_config(measured), encoding="utf-8")
    return subprocess.run(pytest_command(python, junit, cov_json, cov_config, extra), cwd=cwd, env=env).returncode


def record(leg: str, mode: str, versions: dict[str, str], counts: Counts, coverage: tuple[int, int],
           series_digest: str) -> dict[str, object]:  # fmt: skip
    return {
        "leg": leg,
        "mode": mode,
        "versions": versions,
        **asdict(counts),
        "npu_branch_lines_executed": coverage[0],
        "npu_branch_lines_total": coverage[1],
        "series_digest": series_digest,
        "passed_all": counts.ok,
    }
