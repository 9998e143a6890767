"""Upstream's own CPU tests in each leg, where the source carries them (git source: `tests/`).

The wheel has no tests; a git checkout of upstream does. Each leg then also runs
the upstream test files that import a module the series touches and carry the
`cpu` marker, on the pristine tree and on the patched tree, each in a process
where only that tree provides vllm_omni (prepared like the leg: the npu leg's
simulated NPU included). A test that passes on pristine and fails on patched
fails the leg and is named. Tests that fail on both are reported, not counted
against the series.
"""

from __future__ import annotations

import re
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from scripts.diffparse import touched
from scripts.legs.suite import stopped_if_left
from scripts.report import progress, table

# runs a command in a process prepared like the leg's
BOOTSTRAP = Path("tests") / "regression" / "_npu_leg.py"


@dataclass(frozen=True)
class Comparison:
    files: list[str]
    regressions: list[str] = field(default_factory=list)  # passed on pristine, failed on patched
    both_fail: list[str] = field(default_factory=list)
    passed: int = 0  # passed on patched

    @property
    def ok(self) -> bool:
        return not self.regressions

    def as_record(self) -> dict[str, object]:
        return {
            "files": self.files,
            "regressions": self.regressions,
            "failing_on_both": self.both_fail,
            "passed": self.passed,
            "ok": self.ok,
        }


def module_name(path: str) -> str | None:
    """vllm_omni/a/b.py -> vllm_omni.a.b (packages by their __init__)."""
    if not path.startswith("vllm_omni/") or not path.endswith(".py"):
        return None
    return path[: -len(".py")].removesuffix("/__init__").replace("/", ".")


def select(test_files: dict[str, str], touched_paths: list[str]) -> list[str]:
    """The CPU-marked test files that import a touched module (by its dotted name)."""
    modules = [m for m in map(module_name, touched_paths) if m]
    if not modules:
        return []
    names = re.compile(r"\b(" + "|".join(re.escape(m) for m in modules) + r")\b")
    return sorted(n for n, text in test_files.items() if "mark.cpu" in text and names.search(text))


def test_files(tree: Path) -> dict[str, str]:
    return {
        str(f.relative_to(tree)): f.read_text(encoding="utf-8", errors="replace")
        for f in sorted((tree / "tests").rglob("test_*.py"))
    }


def outcomes(junit_text: str) -> dict[str, str]:
    """{test id: passed | failed | skipped} from a JUnit report (errors count as failed)."""
    out = {}
    for case in ET.fromstring(junit_text).iter("testcase"):
        kinds = {child.tag for child in case}
        state = (
            "failed"
            if kinds & {"failure", "error"}
            else "skipped"
            if "skipped" in kinds
            else "passed"
        )
        out[f"{case.get('classname', '')}::{case.get('name', '')}"] = state
    return out


NO_REPORT = "(pytest wrote no report)"


def compare(files: list[str], pristine: dict[str, str], patched: dict[str, str]) -> Comparison:
    """Regressions: failing on patched but not on pristine (a collection error included), or gone from
    patched."""
    regressions = sorted(
        t for t, s in patched.items() if s == "failed" and pristine.get(t) != "failed"
    )
    regressions += sorted(t for t, s in pristine.items() if s == "passed" and t not in patched)
    both = sorted(t for t, s in patched.items() if s == "failed" and pristine.get(t) == "failed")
    return Comparison(files, regressions, both, sum(s == "passed" for s in patched.values()))


def run_both(
    trees: dict[str, Path],
    python: Path,
    env: dict[str, str],
    kit_root: Path,
    files: list[str],
    out: Path,
) -> dict[str, Path]:
    """pytest on files inside each tree, with only that tree on the import path, the trees side by side
    (the leg waits for the slower run, not for both); the JUnit report of each lands in out (name ->
    path)."""
    junits = {name: out / f"upstream-{name}.xml" for name in trees}
    with stopped_if_left() as owned:
        for name, tree in trees.items():
            junits[name].unlink(missing_ok=True)
            cmd = [
                str(python),
                str(kit_root / BOOTSTRAP),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-m",
                "cpu",
                f"--junitxml={junits[name]}",
                *files,
            ]
            owned.append(
                subprocess.Popen(
                    cmd,
                    cwd=tree,
                    env={**env, "PYTHONPATH": str(tree)},
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        for proc in owned:
            proc.wait()
    return junits


def in_leg(
    python: Path,
    env: dict[str, str],
    kit_root: Path,
    pristine: Path,
    checkout: Path,
    out: Path,
    series_diff: str,
) -> Comparison | None:
    """Run and compare upstream's tests for the touched modules; None where the source has no tests/."""
    if not (pristine / "tests").is_dir():
        return None
    files = select(test_files(pristine), touched([series_diff]))
    if not files:
        progress("upstream's tests: none of them imports a module the series touches")
        return Comparison([])
    progress(
        f"upstream's tests: {len(files)} CPU test file(s) for the touched modules, on pristine and "
        "on patched"
    )
    junits = run_both(
        {"pristine": pristine, "patched": checkout}, python, env, kit_root, files, out
    )
    # No report at all (pytest itself broke) counts as one failed test, never as a pass.
    results = {
        name: outcomes(junit.read_text(encoding="utf-8"))
        if junit.is_file()
        else {NO_REPORT: "failed"}
        for name, junit in junits.items()
    }
    found = compare(files, results["pristine"], results["patched"])
    rows = [(t, "FAILS ON PATCHED ONLY") for t in found.regressions] + [
        (t, "fails on both") for t in found.both_fail
    ]
    if rows:
        print(table(["upstream test", "result"], rows))
    progress(
        f"upstream's tests: {found.passed} passed on patched, {len(found.regressions)} "
        "regression(s), "
        f"{len(found.both_fail)} failing on pristine too (not counted)"
    )
    return found
