"""Run the CPU regression suite (tests/regression) on the patched checkout, in one leg.

  stock  real vllm CPU build, stock torch, no torch_npu: `Tensor.is_npu` does not exist.
  npu    the pinned torch_npu. Mode `real` when it imports (CANN present), else
         `simulated`: tests/regression/npu_standin/simulated_npu.py stands in for the cards, in CPU.

The mode is decided by what imports, printed, and recorded; never assumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from scripts.checks.rules import npu_only_lines
from scripts.diffparse import parse
from scripts.digests import sha256_file
from scripts.errors import KitError
from scripts.legs import legenv, modes, probe
from scripts.report import progress, table
from scripts.workspace import Workspace

SUITE = "tests/regression"


@dataclass(frozen=True)
class Counts:
    passed: int
    failed: int
    errors: int
    skipped: int

    @property
    def ok(self) -> bool:
        return self.failed == 0 and self.errors == 0 and self.passed > 0


class SuiteDidNotRun(KitError):
    """pytest ended without a report (collection crashed, or the env is broken)."""


def npu_mode(leg: str, versions: dict[str, str]) -> str:
    """none for stock; real only when torch_npu really imported in the env and sees a card; else
    simulated."""
    if leg == "stock":
        return "none"
    return "real" if probe.has_card(versions) else "simulated"


def leg_env(
    leg: str, mode: str, checkout: Path, pristine: Path, out: Path, pycache: Path
) -> dict[str, str]:
    leg_vars = {
        "KIT_LEG_REPORT_DIR": str(out),
        "COVERAGE_FILE": str(out / ".coverage"),  # two legs at once must not share coverage data
        "KIT_LEG": leg,
        "KIT_NPU_MODE": mode,
        "KIT_CHECKOUT": str(checkout),
        "KIT_PRISTINE": str(pristine),
    }
    # .pyc of what the leg imports, compiled on its first run and kept with its env; never in the
    # checkout.
    env = legenv.bytecode_env({**os.environ, **leg_vars}, pycache)
    if mode == "simulated":
        # torch_npu is installed but cannot load without CANN; stop torch from auto-loading it.
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


def coverage_config(files: list[Path]) -> str:
    """coverage.py settings measuring only these files: reporting on every file of the tree costs a
    minute.

    Per-test contexts in the JSON report say which tests executed each file (what --changed maps
    by).
    """
    return (
        "[run]\ninclude =\n"
        + "".join(f"    {f}\n" for f in files)
        + "[json]\nshow_contexts = True\n"
    )


# Plugins the suite's runs go without. The cache: the legs keep no state between runs. Logging:
# pytest's log capture attaches its handler to every non-propagating logger around each test phase,
# and vllm's imports leave thousands of loggers (about a tenth of a leg's tests' time); a record
# still reaches the test's captured output through vllm's own handler or Python's last-resort one.
PLUGINS_OFF = ["-p", "no:cacheprovider", "-p", "no:logging"]


def pytest_command(
    python: Path,
    junit: Path,
    cov_json: Path,
    cov_config: Path | None,
    targets: list[str],
    extra: list[str],
) -> list[str]:
    """The leg's pytest; coverage (per-test contexts, JSON report) only when a coverage config is
    given."""
    cov = (
        [
            "--cov",
            f"--cov-config={cov_config}",
            "--cov-context=test",
            f"--cov-report=json:{cov_json}",
            "--cov-report=",
        ]
        if cov_config
        else []
    )
    return [
        str(python),
        "-m",
        "pytest",
        *targets,
        *PLUGINS_OFF,
        f"--junitxml={junit}",
        *cov,
        *extra,
    ]


def counts_from_junit(xml_text: str) -> Counts:
    """Tests by outcome, each test counted once. pytest writes a second <testcase> for an error in a
    test's teardown and counts it in the suite's totals: a leg whose every test erred twice showed
    passed below zero."""
    kinds: dict[tuple[str | None, str | None], set[str]] = {}
    for case in ET.fromstring(xml_text).iter("testcase"):
        kinds.setdefault((case.get("classname"), case.get("name")), set()).update(
            child.tag for child in case
        )
    worst = ("failure", "error", "skipped")  # a test that failed and then erred in teardown failed
    outcomes = Counter(next((k for k in worst if k in seen), "passed") for seen in kinds.values())
    return Counts(outcomes["passed"], outcomes["failure"], outcomes["error"], outcomes["skipped"])


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


def executed(
    cov_json_text: str, cwd: Path, checkout: Path, wanted: dict[str, set[int]]
) -> tuple[int, int]:
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


def suite_command(
    python: Path, out: Path, measured: list[Path] | None, targets: list[str], extra: list[str]
) -> list[str]:
    """pytest on the targets (the suite, or modules of it), its junit.xml and coverage.json to land in
    out.

    ``measured``: the files coverage.py measures; None measures nothing (no coverage.json).
    """
    junit, cov_json, cov_config = out / "junit.xml", out / "coverage.json", None
    for stale in (junit, cov_json):
        stale.unlink(missing_ok=True)
    if measured is not None:
        cov_config = out / "coveragerc"
        cov_config.write_text(coverage_config(measured), encoding="utf-8")
    return pytest_command(python, junit, cov_json, cov_config, targets, extra)


def record(
    leg: str,
    mode: str,
    versions: dict[str, str],
    counts: Counts,
    coverage: tuple[int, int] | None,
    series_digest: str,
) -> dict[str, object]:
    """The leg's record; coverage None (not measured) is written as null, never as 0 lines run."""
    return {
        "leg": leg,
        "mode": mode,
        "versions": versions,
        **asdict(counts),
        "npu_branch_lines_executed": None if coverage is None else coverage[0],
        "npu_branch_lines_total": None if coverage is None else coverage[1],
        "series_digest": series_digest,
        "passed_all": counts.ok,
    }


def prepare(
    ws: Workspace, leg: str, out: Path, options: legenv.LegOptions | None = None
) -> tuple[Path, str, dict[str, str], dict[str, str]]:
    """(python, mode, versions, process env) for one leg on the kit's checkout, after saying which mode
    it runs in."""
    options = options or legenv.LegOptions()
    found = legenv.interpreter(ws, legenv.check_leg(leg), options)
    versions, cached = probe.leg_versions(found.python, found.pycache, found.probe_cache)
    mode = npu_mode(leg, versions)
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "torch_npu_import")
    reused = " (versions from the probe cache: env unchanged)" if cached else ""
    progress(f"leg {leg}: mode {mode}; {shown}; in {found.origin}{reused}")
    modes.require_mode(leg, mode, options.require, versions)
    if mode == "simulated":
        why = modes.mode_shortfall(mode, "real", versions)
        progress(
            f"leg {leg}: {why}; the NPU branches run on the simulated NPU "
            "(tests/regression/npu_standin), "
            "not on Ascend"
        )
    if mode == "real":
        # An image's torch / torch_npu / vllm may not be the pinned ones: the record says which
        # stack ran.
        versions = {**versions, "stack": probe.stack_note(versions, legenv.leg_pins(ws, leg))}
        progress(f"leg {leg}: stack {versions['stack']}")
    out.mkdir(parents=True, exist_ok=True)
    # recorded with the versions, shown in the PR body
    versions = {**versions, "interpreter": found.origin}
    env = leg_env(leg, mode, ws.checkout, ws.pristine_tree, out, found.pycache)
    return found.python, mode, versions, env


# --- pristine oracle cache ------------------------------------------------------ The suite's
# conftest keeps the pristine tree's results under .work/cache (KIT_ORACLE_CACHE); its rules live
# with the suite (tests/regression/oracle_cache.py). The runner only reads what the suite reports.

ORACLE_REPORT = (
    "oracle.json"  # in the leg's report dir: whether this run used the cache, and why not
)


def oracle_use(report_dir: Path) -> dict[str, str]:
    """What the suite reported about the pristine oracle this run (cache / computed and why)."""
    path = report_dir / ORACLE_REPORT
    if not path.is_file():
        return {"source": "not used", "reason": "no selected test needed the pristine results"}
    return json.loads(path.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class TestArgs:
    """One `test` run's choices (scripts/commands/test.py declares and parses them)."""

    legs: tuple[str, ...]
    jobs: int | None
    changed: bool
    options: legenv.LegOptions  # --python / --require
    pytest_args: list[str]


def plan_jobs(legs: int, jobs: int | None, cores: int) -> tuple[int, int]:
    """(legs at once, threads per leg): in parallel when the cores allow, each leg a share of them."""
    at_once = max(1, min(legs, jobs or cores))
    return at_once, max(1, cores // at_once)


def thread_env(threads: int) -> dict[str, str]:
    """One leg's thread budget for torch (OpenMP) and MKL; the oracle cache key reads it back from
    torch."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


PERCENT = re.compile(rb"\[\s*(\d+)%\]")


def status_line(running: dict[str, tuple[float, bytes]], now: float) -> str:
    """``stock 23s 41% | npu 23s 12%``: elapsed time and pytest's last progress mark per running leg."""
    parts = []
    for leg, (started, tail) in running.items():
        marks = PERCENT.findall(tail)
        parts.append(
            f"{leg} {now - started:.0f}s" + (f" {int(marks[-1])}%" if marks else " starting")
        )
    return "running: " + " | ".join(parts)


def _tail(path: Path, size: int = 4096) -> bytes:
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - size))
        return handle.read()


# A leg's end is seen within POLL_S (the job ends with its last leg); the status line changes every
# STATUS_S.
POLL_S, STATUS_S = 0.05, 0.5


def run_parallel(
    commands: dict[str, list[str]],
    envs: dict[str, dict[str, str]],
    logs: dict[str, Path],
    cwd: Path,
    *,
    live: bool,
) -> dict[str, tuple[int, float]]:
    """Run each leg's command at once; print each leg's output as one block when it ends.

    While they run, one status line (rewritten in place on a terminal) says where each leg is.
    Returns (exit code, seconds) per leg.
    """
    procs: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
    done: dict[str, tuple[int, float]] = {}
    shown = 0.0
    with stopped_if_left() as owned:
        for leg, cmd in commands.items():
            logs[leg].parent.mkdir(parents=True, exist_ok=True)
            with logs[leg].open("wb") as log:
                owned.append(
                    subprocess.Popen(
                        cmd, cwd=cwd, env=envs[leg], stdout=log, stderr=subprocess.STDOUT
                    )
                )
            procs[leg] = (owned[-1], time.monotonic())
        while len(done) < len(procs):
            time.sleep(POLL_S)
            now = time.monotonic()
            for leg, (proc, started) in procs.items():
                if leg in done or proc.poll() is None:
                    continue
                done[leg] = (proc.returncode, now - started)
                if live:
                    sys.stdout.write("\r\x1b[2K")
                verdict = "passed" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                print(f"===== leg {leg}: {verdict} in {now - started:.1f} s =====", flush=True)
                sys.stdout.write(logs[leg].read_text(encoding="utf-8", errors="replace"))
                print(f"===== end of leg {leg} (kept in {logs[leg]}) =====", flush=True)
            # the logs' tails read only for it
            if live and len(done) < len(procs) and now - shown >= STATUS_S:
                shown = now
                running = {
                    leg: (started, _tail(logs[leg]))
                    for leg, (_, started) in procs.items()
                    if leg not in done
                }
                sys.stdout.write("\r\x1b[2K" + status_line(running, now)[:200])
                sys.stdout.flush()
    return done


@contextlib.contextmanager
def stopped_if_left() -> Iterator[list[subprocess.Popen[bytes]]]:
    """A list for the processes started inside the block; those still running when it is left (an
    interrupt, an error) are stopped: none outlives the kit command that started it."""
    owned: list[subprocess.Popen[bytes]] = []
    try:
        yield owned
    finally:
        for proc in owned:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()


# --- --changed: only the tests that cover the patches changed since the last green run ---------
# After a green full run the leg keeps, in GREEN, each patch's digest and files and, from
# coverage.py's per-test contexts, which test modules executed each file the series touches. A later
# --changed run selects the modules that executed a file some changed patch touches (before or after
# the change). Whole modules, not single tests: a module-scoped fixture's setup is counted for its
# first test only.

GREEN = "green.json"


@dataclass(frozen=True)
class Selection:
    targets: list[str] | None  # test modules to run; None: the full suite
    reason: str
    rows: list[tuple[str, str, str]]  # (patch, files it touches, test modules that cover them)
    skipped: list[str]  # modules not run


def modules_by_file(cov_json_text: str, cwd: Path, checkout: Path) -> dict[str, list[str]]:
    """checkout-relative file -> the test modules that executed a line of it (coverage.py test
    contexts)."""
    out: dict[str, list[str]] = {}
    for name, data in json.loads(cov_json_text).get("files", {}).items():
        path = (cwd / name).resolve()
        if not path.is_relative_to(checkout.resolve()):
            continue
        contexts = {ctx for names in data.get("contexts", {}).values() for ctx in names}
        out[str(path.relative_to(checkout.resolve()))] = sorted(
            {c.split("::")[0] for c in contexts if "::" in c}
        )
    return out


def select_changed(
    green: dict | None,
    context: dict[str, str],
    patches: dict[str, str],
    patch_files: dict[str, list[str]],
    modules: list[str],
) -> Selection:
    """What a --changed run must run, and why; the full suite whenever the record cannot answer."""
    if green is None:
        return Selection(None, "no green run of this leg recorded yet", [], [])
    for name in sorted(context):
        if green.get("context", {}).get(name) != context[name]:
            return Selection(None, f"{name} changed since the last green run", [], [])
    changed = sorted(
        p for p in set(patches) | set(green["patches"]) if green["patches"].get(p) != patches.get(p)
    )
    if not changed:
        return Selection([], "no patch changed since the last green run", [], list(modules))
    coverage: dict[str, list[str]] = green["coverage"]
    rows, selected = [], set()
    for patch in changed:
        files = sorted(set(patch_files.get(patch, [])) | set(green["files"].get(patch, [])))
        unknown = [f for f in files if f not in coverage]
        if unknown:
            why = (
                "not Python"
                if not unknown[0].endswith(".py")
                else "not measured in the last green run"
            )
            return Selection(
                None,
                f"{patch} touches {unknown[0]} ({why}): no coverage to map it to tests",
                [],
                [],
            )
        covering = sorted({m for f in files for m in coverage[f]})
        selected.update(covering)
        rows.append((patch, ", ".join(files), ", ".join(Path(m).name for m in covering) or "none"))
    return Selection(
        sorted(selected),
        f"{len(changed)} patch(es) changed since the last green run",
        rows,
        [m for m in modules if m not in selected],
    )


def green_record(
    context: dict[str, str],
    patches: dict[str, str],
    patch_files: dict[str, list[str]],
    coverage: dict[str, list[str]],
) -> dict[str, object]:
    return {"context": context, "patches": patches, "files": patch_files, "coverage": coverage}


def write_green(
    path: Path,
    context: dict[str, str],
    patches: dict[str, str],
    patch_files: dict[str, list[str]],
    coverage: dict[str, list[str]] | None,
) -> None:
    """Record a green run. A --changed run (coverage None) moves the patches on; the map stays the full
    run's."""
    if coverage is None:
        green = json.loads(path.read_text(encoding="utf-8")) | {
            "patches": patches,
            "files": patch_files,
        }
    else:
        green = green_record(context, patches, patch_files, coverage)
    path.write_text(json.dumps(green, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def tree_digest(root: Path, parts: tuple[str, ...]) -> str:
    """Digest of the kit files the suite runs with (its tests, the stand-ins, the kit it imports)."""
    h = hashlib.sha256()
    for part in parts:
        base = root / part
        files = sorted(base.rglob("*")) if base.is_dir() else [base]
        for path in files:
            if path.is_file() and "__pycache__" not in path.parts:
                h.update(f"{path.relative_to(root)}\0{sha256_file(path)}\n".encode())
    return h.hexdigest()


def changed_targets(
    leg: str,
    green: dict | None,
    context: dict[str, str],
    patches: dict[str, str],
    patch_files: dict[str, list[str]],
    root: Path,
) -> list[str]:
    """The pytest targets of a --changed run ([SUITE] for the full suite, [] for none), said out loud."""
    modules = sorted(str(p.relative_to(root)) for p in (root / SUITE).glob("test_*.py"))
    selection = select_changed(green, context, patches, patch_files, modules)
    progress(f"leg {leg}: --changed: {selection.reason}")
    if selection.rows:
        print(
            table(
                ["changed patch", "files it touches", "test modules that executed them"],
                selection.rows,
            )
        )
    if selection.targets is None:
        progress(f"leg {leg}: --changed: running the full suite")
        return [SUITE]
    if selection.skipped:
        progress(
            f"leg {leg}: not run, as they executed none of those files in the last green full run: "
            + ", ".join(Path(m).name for m in selection.skipped)
        )
    if not selection.targets:
        progress(f"leg {leg}: nothing to run; the last green record stands")
    return selection.targets
