"""Timings of the main job on fresh clones of this checkout's HEAD (never asserted in tests).

    nox -s timings [-- --empty-cache] [--ci]
    nox -s timings -- --loop BASELINE [--repeat N]   (the edit-test loop: benchmarks/looptimings.py)

A benchmark of the kit's own development, not a command of the kit: `python -m benchmarks.timings`.

Always: `nox -s apply test` in a fresh clone with uv's package cache as it is ("warm
cache": the leg environments are built, their files linked from the cache), then again
in the same clone ("warm": everything reused). --empty-cache adds a fresh clone with an
empty package cache (UV_CACHE_DIR set to a new folder: several GB are downloaded).
--ci adds `.ci/run` on another fresh clone (the kit's tests by tier, then apply, lint, test).
Each run's output goes to .work/records/timings/<case>.log; a table of seconds and
ratios against the targets ends the run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import looptimings
from scripts import gitcmd
from scripts.errors import KitError
from scripts.report import fail, progress, table
from scripts.workspace import Workspace

MAIN_JOB = ("nox", "-s", "apply", "test")


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    target: str  # how the case is judged, as text for the table


@dataclass(frozen=True)
class Timing:
    case: Case
    seconds: float
    exit_code: int


COLD = Case("fresh-empty-cache", "fresh clone, empty package cache: nox -s apply test", "<= 360 s")
FRESH = Case("fresh-warm-cache", "fresh clone, warm package cache: nox -s apply test", "<= 1.5x warm")
WARM = Case("warm", "same clone again (warm): nox -s apply test", "-")
CI = Case("ci-clean-clone", "fresh clone: .ci/run", "<= 480 s")


def verdict(timing: Timing, warm_seconds: float | None) -> str:
    """met / missed / failed for one case, from its target."""
    if timing.exit_code != 0:
        return f"failed (exit {timing.exit_code})"
    target = timing.case.target
    if target.endswith("x warm"):
        if not warm_seconds:
            return "-"
        return "met" if timing.seconds <= float(target.split()[1].rstrip("x")) * warm_seconds else "missed"
    if target.endswith(" s"):
        return "met" if timing.seconds <= float(target.split()[1]) else "missed"
    return "-"


def rows(timings: list[Timing]) -> list[tuple[str, str, str, str, str]]:
    warm = next((t.seconds for t in timings if t.case is WARM and t.exit_code == 0), None)
    return [
        (t.case.what, f"{t.seconds:.0f}", f"{t.seconds / warm:.2f}x" if warm else "-", t.case.target, verdict(t, warm))
        for t in timings
    ]


# --- edges ----------------------------------------------------------------------


def fresh_clone(root: Path, dest: Path) -> Path:
    gitcmd.clone(root, dest, copy_objects=True)
    return dest


def timed(ws: Workspace, case: Case, cmd: list[str], cwd: Path, env: dict[str, str], logs: Path) -> Timing:
    log = logs / f"{case.name}.log"
    progress(f"{case.what} (output: {log.relative_to(ws.root)})")
    started = time.monotonic()
    with open(log, "w", encoding="utf-8") as out:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    seconds = time.monotonic() - started
    progress(f"{case.name}: {seconds:.0f} s, exit {rc}")
    return Timing(case, seconds, rc)


def fresh_clones(ws: Workspace, empty_cache: bool, ci: bool) -> int:
    """`nox -s apply test` on fresh clones of HEAD (and .ci/run with ci); 0 when every run passed."""
    if gitcmd.status_porcelain(ws.root):
        progress("warning: uncommitted changes are not in the clones; these figures are of HEAD")
    logs = ws.records / "timings"
    logs.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    main_job = [sys.executable, "-m", *MAIN_JOB]
    results = []
    with tempfile.TemporaryDirectory(prefix="kit-timings-") as tmp:
        if empty_cache:
            empty = dict(env, UV_CACHE_DIR=str(Path(tmp) / "uv-cache"), PIP_NO_CACHE_DIR="1")
            results.append(timed(COLD, main_job, fresh_clone(ws.root, Path(tmp) / "cold"), empty, logs))
        clone = fresh_clone(ws.root, Path(tmp) / "fresh")
        results.append(timed(FRESH, main_job, clone, env, logs))
        results.append(timed(WARM, main_job, clone, env, logs))
        if ci:
            results.append(timed(CI, ["bash", ".ci/run"], fresh_clone(ws.root, Path(tmp) / "ci"), env, logs))
    print(table(["run", "seconds", "vs warm", "target", "verdict"], rows(results)))
    return 0 if all(t.exit_code == 0 for t in results) else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.timings", description=__doc__.splitlines()[0])
    p.add_argument("--empty-cache", action="store_true", help="also a fresh clone with an empty package cache")
    p.add_argument("--ci", action="store_true", help="also .ci/run on a fresh clone (about 10 minutes)")
    p.add_argument("--loop", metavar="BASELINE", help="time the edit-test loop here and at git revision BASELINE")
    p.add_argument("--repeat", type=int, default=3, help="warm runs per --loop figure")
    return p


def main(argv: list[str], ws: Workspace) -> int:
    args = parser().parse_args(argv)
    try:
        if args.loop:
            return looptimings.loop_main(ws, args.loop, args.repeat)
        return fresh_clones(ws, args.empty_cache, args.ci)
    except KitError as exc:
        fail(str(exc))
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], Workspace.of_kit()))
