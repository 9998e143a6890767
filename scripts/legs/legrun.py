"""One `test` run: plan each leg's pytest, run the legs (in parallel when the cores allow), record each
leg.

scripts/legs/suite.py holds the pieces (interpreters, commands, junit and coverage readers); this
module puts them in order for the legs a run names.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from scripts import records
from scripts.checkout.pristine import combined_diff
from scripts.checkout.state import State
from scripts.diffparse import touched
from scripts.errors import KitError, pytest_exit
from scripts.legs import legenv, suite, upstream_tests
from scripts.report import progress, table
from scripts.series import ENTRY, load_series
from scripts.workspace import Workspace

NO_TESTS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


def run_legs(ws: Workspace, state: State, opts: suite.TestArgs) -> int:
    """Each leg's pytest started directly, at once when the cores allow; the caller holds the
    checkout's lock."""
    series_diff = combined_diff(ws.checkout)
    planned = {leg: plan_leg(ws, state, leg, opts, series_diff) for leg in opts.legs}
    # None: nothing changed since green
    runs = {leg: run for leg, run in planned.items() if run is not None}
    done = start_legs(ws, runs, opts.jobs)
    codes, unreported = {}, []
    # the lines every measured leg is read against: one AST pass over the patched files for all legs
    measured = any(not r.why_not_measured for r in runs.values())
    wanted = suite.npu_branch_lines(series_diff, ws.checkout) if measured else {}
    for leg, r in runs.items():  # every leg's record, even when another leg's pytest left no report
        try:
            codes[leg] = finish_leg(ws, state, r, done[leg][0], wanted)
        except KitError as exc:  # pytest's own exit said why (errors.pytest_exit), or no report
            codes[leg] = exc.exit_code
            unreported.append(exc)
    if len(done) > 1:
        print(
            table(["leg", "result", "seconds", "pristine oracle"], summary_rows(runs, done, codes))
        )
    if unreported:  # the gravest one's line (130 over 2 over 1), as the command's exit
        raise max(unreported, key=lambda exc: exc.exit_code)
    return max(codes.values(), default=0)


def start_legs(
    ws: Workspace, runs: dict[str, LegRun], jobs: int | None
) -> dict[str, tuple[int, float]]:
    """Each leg's pytest: all at once when the cores allow, else one after the other (exit code,
    seconds)."""
    at_once, threads = suite.plan_jobs(len(runs), jobs, os.cpu_count() or 1)
    if at_once <= 1 or len(runs) <= 1:
        return {leg: run_one(ws, r) for leg, r in runs.items()}
    progress(
        f"legs {', '.join(runs)} in parallel, {threads} thread(s) each (-- --jobs 1: one after the "
        "other)"
    )
    return suite.run_parallel(
        {leg: r.command for leg, r in runs.items()},
        {leg: r.env | suite.thread_env(threads) for leg, r in runs.items()},
        {leg: r.out / "output.log" for leg, r in runs.items()},
        ws.root,
        live=sys.stdout.isatty(),
    )


def summary_rows(
    runs: dict[str, LegRun], done: dict[str, tuple[int, float]], codes: dict[str, int]
) -> list[tuple[str, str, str, str]]:
    """One row per leg run: its result, seconds and where its pristine oracle came from."""
    return [
        (
            leg,
            "passed" if codes[leg] == 0 else f"FAILED (pytest exit {rc})",
            f"{seconds:.1f}",
            suite.oracle_use(runs[leg].out)["source"],
        )
        for leg, (rc, seconds) in done.items()
    ]


@dataclass(frozen=True)
class LegRun:
    """One leg's planned pytest run: what it runs, in which interpreter and env, and what its record
    needs."""

    leg: str
    out: Path
    python: Path
    mode: str
    versions: dict[str, str]
    env: dict[str, str]
    command: list[str]
    targets: list[str]
    full: bool
    why_not_measured: str  # "" where coverage is measured, else why not (named in the leg's row)
    series_diff: str
    context: dict[str, str]
    patch_files: dict[str, list[str]]
    opts: suite.TestArgs


def plan_leg(
    ws: Workspace, state: State, leg: str, opts: suite.TestArgs, series_diff: str
) -> LegRun | None:
    """The leg's interpreter (built or reused), mode and pytest command; None when --changed finds
    nothing to run."""
    out = ws.records / f"test-{leg}"
    python, mode, versions, env = suite.prepare(ws, leg, out, opts.options)
    # the suite's pristine oracle cache (tests/regression/oracle_cache.py), and where it reports
    env |= {
        "KIT_ORACLE_CACHE": str(ws.cache / f"oracle-{leg}"),
        "KIT_ORACLE_REPORT": str(out / suite.ORACLE_REPORT),
        "KIT_ENV_STAMP_NAME": legenv.STAMP_NAME,
        "KIT_PRISTINE_COMMIT": state.pristine_commit,
    }
    for stale in (out / "npu-syncs.json", out / suite.ORACLE_REPORT):
        stale.unlink(missing_ok=True)
    patch_files = {p.name: touched([p.text]) for p in load_series(ws.patches)}
    context = {
        "pin": state.pin_digest,
        "env": legenv.current_digest(ws, leg),
        "mode": mode,
        "kit": suite.tree_digest(ws.root, ("scripts", "tests", "pytest.ini")),
    }
    targets = [suite.SUITE]
    if opts.changed:
        green_file = out / suite.GREEN
        green = read_green(green_file, f".work/records/{out.name}/{suite.GREEN}")
        targets = suite.changed_targets(leg, green, context, state.patches, patch_files, ws.root)
        if not targets:
            return None  # nothing changed since the last green run: its record stands
    full = targets == [suite.SUITE]
    # Only the whole suite measures coverage: a --changed subset runs what the last full run's map
    # selects, a run narrowed by pytest arguments is no full record either (full_suite false, no
    # green map), and coverage.py's tracer costs such a run half again its time.
    why_not_measured = "--changed" if not full else "pytest arguments" if opts.pytest_args else ""
    measured = (
        None
        if why_not_measured
        else [ws.checkout / f for f in touched([series_diff]) if f.endswith(".py")]
    )
    command = suite.suite_command(python, out, measured, targets, opts.pytest_args)
    return LegRun(
        leg,
        out,
        python,
        mode,
        versions,
        env,
        command,
        targets,
        full,
        why_not_measured,
        series_diff,
        context,
        patch_files,
        opts,
    )


def record_name(leg: str, why_not_measured: str) -> str:
    """test-<leg> for the whole suite alone; a --changed run, or one narrowed by pytest arguments
    (-k rope), is recorded beside it, never over it."""
    if not why_not_measured:
        return f"test-{leg}"
    return f"test-{leg}-changed" if why_not_measured == "--changed" else f"test-{leg}-narrowed"


def run_one(ws: Workspace, run: LegRun) -> tuple[int, float]:
    """One leg's pytest in the foreground, its output live (exit code, seconds)."""
    started = time.monotonic()
    return subprocess.run(
        run.command, cwd=ws.root, env=run.env
    ).returncode, time.monotonic() - started


def finish_leg(
    ws: Workspace, state: State, run: LegRun, rc: int, wanted: dict[str, set[int]]
) -> int:
    """The leg's record (counts, coverage of the NPU branches, oracle use, upstream's tests), its green
    map, its row."""
    leg, out, opts = run.leg, run.out, run.opts
    junit, cov_json, syncs = out / "junit.xml", out / "coverage.json", out / "npu-syncs.json"
    # pytest's own exit first: a run that collected nothing, was refused or ended records nothing
    # (no figure without the work behind it); failed tests (1) and collection errors (2) are its
    # findings, recorded below.
    failed = pytest_exit(f"leg {leg}'s pytest", rc)
    if failed is not None and (failed.exit_code != 1 or rc == NO_TESTS):
        raise failed
    if not junit.is_file():
        raise suite.SuiteDidNotRun(
            f"leg {leg}: pytest exited {rc} without a report", "see pytest's output above"
        )
    counts = suite.counts_from_junit(junit.read_text(encoding="utf-8"))
    coverage, by_file = None, None
    if not run.why_not_measured:
        cov_text = cov_json.read_text(encoding="utf-8") if cov_json.is_file() else '{"files": {}}'
        coverage = suite.executed(cov_text, ws.root, ws.checkout, wanted)
        by_file = suite.modules_by_file(cov_text, ws.root, ws.checkout)
    data = suite.record(leg, run.mode, run.versions, counts, coverage, state.series_digest)
    oracle = suite.oracle_use(out)
    data |= {
        "pristine_oracle": oracle,
        "full_suite": not run.why_not_measured,
        "targets": run.targets,
        "required_mode": opts.options.require or "any",
    }
    if syncs.is_file():  # written by the npu tests: host syncs per NPU attention call
        data["host_syncs"] = json.loads(syncs.read_text(encoding="utf-8"))
    # upstream's own CPU tests, where the source carries tests/ (scripts/legs/upstream_tests.py)
    upstream = upstream_tests.in_leg(
        run.python, run.env, ws.root, ws.pristine_tree, ws.checkout, out, run.series_diff
    )
    if upstream is not None:
        data["upstream_tests"] = upstream.as_record()
        data["passed_all"] = bool(data["passed_all"]) and upstream.ok
    # A --changed or narrowed run never stands in for the full one in reports (the PR body reads
    # test-<leg>).
    records.write(ws.records, record_name(leg, run.why_not_measured), data)
    # green, and not narrowed by pytest arguments
    if counts.ok and rc == 0 and not opts.pytest_args:
        suite.write_green(out / suite.GREEN, run.context, state.patches, run.patch_files, by_file)
    progress(f"leg {leg}: pristine oracle {oracle['source']} ({oracle['reason']})")
    lines_run = (
        f"not measured ({run.why_not_measured})"
        if coverage is None
        else f"{coverage[0]}/{coverage[1]}"
    )
    print(
        table(
            [
                "leg",
                "mode",
                "torch",
                "torch_npu",
                "passed",
                "failed",
                "errors",
                "skipped",
                "NPU-branch lines run",
            ],
            [
                (
                    leg,
                    run.mode,
                    run.versions.get("torch"),
                    run.versions.get("torch_npu"),
                    counts.passed,
                    counts.failed,
                    counts.errors,
                    counts.skipped,
                    lines_run,
                )
            ],
        )
    )
    return 0 if data["passed_all"] and rc == 0 else 1


# What write_green records: every test module it names is one of the suite's, each patch one of
# patches/ (a module it names becomes a pytest target: never a path of the record's choosing).
SUITE_MODULE = re.compile(rf"^{re.escape(suite.SUITE)}/test_[A-Za-z0-9_]+\.py$")
GREEN_SCHEMA: records.Schema = {
    "context": records.dict_of(records.text, records.text),
    "patches": records.dict_of(records.file_name(ENTRY, "patches/"), records.digest),
    "files": records.dict_of(records.file_name(ENTRY, "patches/"), records.list_of(records.text)),
    "coverage": records.dict_of(
        records.text, records.list_of(records.matching(SUITE_MODULE, "a module of the suite"))
    ),
}


def read_green(path: Path, shown: str) -> dict[str, object] | None:
    """The last green run's map (None: none yet), checked before it selects any test."""
    fix = f"remove it (rm {shown}): the next --changed run then runs the whole suite"
    return records.load(path, shown, GREEN_SCHEMA, fix)
