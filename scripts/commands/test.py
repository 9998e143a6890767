"""The CPU regression suite on the checkout, in both legs or the ones named (stock|npu).

stock: no torch_npu; npu: real torch_npu, or the simulated NPU without CANN.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from scripts import checkout as co
from scripts import records
from scripts.commands.common import checkout_lock, current
from scripts.diffparse import touched
from scripts.legs import legenv, upstream_tests
from scripts.legs import suite as legs
from scripts.report import progress, table
from scripts.series import load_series
from scripts.workspace import Workspace

USAGE = "python -m scripts test [stock|npu]... [--jobs N] [--changed] [--python PATH] [--require MODE] [pytest args]"
PASSTHROUGH = True  # pytest's own arguments go on after the kit's (legs.parse_test_args sorts them)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.usage = USAGE
    p.epilog = ("--jobs N: at most N legs at once (default: as many as the cores allow; 1: one after the other). "
                "--changed: only the test modules that cover the patches changed since the last green run. "
                "--python PATH: run the npu leg in that interpreter (plus the test tools); "
                "--require real|simulated: any other mode is a failure.")  # fmt: skip
    p.add_argument("args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)


def run(args: argparse.Namespace, ws: Workspace) -> int:
    """Both legs (or the ones named): in parallel when the cores allow, else one after the other."""
    opts = legs.parse_test_args(args.args)
    with checkout_lock(ws, shared=True):
        current(ws)
        at_once, threads = legs.plan_jobs(len(opts.legs), opts.jobs, os.cpu_count() or 1)
        if at_once > 1:
            return test_in_parallel(ws, opts, threads)
        return max([test_leg(ws, leg, opts) for leg in opts.legs])


def test_in_parallel(ws: Workspace, opts: legs.TestArgs, threads: int) -> int:
    """One child `test LEG --jobs 1` per leg (in ws.root: the same workspace), each with its share of the cores;
    one block per leg at its end."""
    progress(f"legs {', '.join(opts.legs)} in parallel, {threads} thread(s) each (-- --jobs 1: one after the other)")
    flags = ["--changed"] if opts.changed else []
    cmds = {leg: [sys.executable, "-m", "scripts", "test", leg, "--jobs", "1", *flags, *opts.pytest_args]
            for leg in opts.legs}  # fmt: skip
    envs = {leg: {**os.environ, **legs.thread_env(threads)} for leg in opts.legs}
    logs = {leg: ws.records / f"test-{leg}" / "output.log" for leg in opts.legs}
    done = legs.run_parallel(cmds, envs, logs, ws.root, live=sys.stdout.isatty())
    rows = [(leg, "passed" if rc == 0 else f"FAILED (exit {rc})", f"{seconds:.1f}",
             legs.oracle_use(ws.records / f"test-{leg}")["source"])
            for leg, (rc, seconds) in done.items()]  # fmt: skip
    print(table(["leg", "result", "seconds", "pristine oracle"], rows))
    return max(rc for rc, _ in done.values())


def test_leg(ws: Workspace, leg: str, opts: legs.TestArgs) -> int:
    state = current(ws)
    out = ws.records / f"test-{leg}"
    options, pytest_args = legenv.leg_options(leg, opts.pytest_args)
    python, mode, versions, env = legs.prepare(ws, leg, out, options)
    env |= {  # the suite's pristine oracle cache (tests/regression/oracle_cache.py), and where it reports
        "KIT_ORACLE_CACHE": str(ws.cache / f"oracle-{leg}"),
        "KIT_ORACLE_REPORT": str(out / legs.ORACLE_REPORT),
        "KIT_ENV_STAMP_NAME": legenv.STAMP_NAME,
        "KIT_PRISTINE_COMMIT": state.pristine_commit,
    }
    junit, cov_json, syncs = out / "junit.xml", out / "coverage.json", out / "npu-syncs.json"
    for stale in (syncs, out / legs.ORACLE_REPORT):
        stale.unlink(missing_ok=True)
    series = load_series(ws.patches)
    patch_files = {p.name: touched([p.text]) for p in series}
    green_file = out / legs.GREEN
    context = {"pin": state.pin_digest, "env": legenv.current_digest(ws, leg), "mode": mode,
               "kit": legs.tree_digest(ws.root, ("scripts", "tests", "pytest.ini"))}  # fmt: skip
    targets = [legs.SUITE]
    if opts.changed:
        green = json.loads(green_file.read_text(encoding="utf-8")) if green_file.is_file() else None
        targets = legs.changed_targets(leg, green, context, state.patches, patch_files, ws.root)
        if not targets:
            return 0  # nothing changed since the last green run: its record stands
    full = targets == [legs.SUITE]
    series_diff = co.combined_diff(ws.checkout)
    # A --changed subset measures no coverage: what it runs comes from the last full run's map, and
    # coverage.py's tracer would nearly double the edit-test loop (docs/results.md).
    measured = [ws.checkout / f for f in touched([series_diff]) if f.endswith(".py")] if full else None
    rc = legs.run_suite(python, env, ws.root, out, measured, targets, pytest_args)
    if not junit.is_file():
        raise legs.SuiteDidNotRun(f"leg {leg}: pytest exited {rc} without a report", "see pytest's output above")
    counts = legs.counts_from_junit(junit.read_text(encoding="utf-8"))
    coverage, by_file = None, None
    if full:
        cov_text = cov_json.read_text(encoding="utf-8") if cov_json.is_file() else '{"files": {}}'
        wanted = legs.npu_branch_lines(series_diff, ws.checkout)
        coverage = legs.executed(cov_text, ws.root, ws.checkout, wanted)
        by_file = legs.modules_by_file(cov_text, ws.root, ws.checkout)
    data = legs.record(leg, mode, versions, counts, coverage, state.series_digest)
    oracle = legs.oracle_use(out)
    data |= {"pristine_oracle": oracle, "full_suite": full and not pytest_args, "targets": targets,
             "required_mode": options.require or "any"}  # fmt: skip
    if syncs.is_file():  # written by the npu tests: host syncs per NPU attention call
        data["host_syncs"] = json.loads(syncs.read_text(encoding="utf-8"))
    # upstream's own CPU tests, where the source carries tests/ (scripts/legs/upstream_tests.py)
    upstream = upstream_tests.in_leg(python, env, ws.root, ws.pristine_tree, ws.checkout, out, series_diff)
    if upstream is not None:
        data["upstream_tests"] = upstream.as_record()
        data["passed_all"] = bool(data["passed_all"]) and upstream.ok
    # A --changed run never stands in for the full one in reports (the PR body reads test-<leg>).
    records.write(ws.records, f"test-{leg}" if full else f"test-{leg}-changed", data)
    if counts.ok and rc == 0 and not pytest_args:  # green, and not narrowed by pytest arguments
        legs.write_green(green_file, context, state.patches, patch_files, by_file)
    progress(f"leg {leg}: pristine oracle {oracle['source']} ({oracle['reason']})")
    print(table(["leg", "mode", "torch", "torch_npu", "passed", "failed", "errors", "skipped", "NPU-branch lines run"],
                [(leg, mode, versions.get("torch"), versions.get("torch_npu"), counts.passed, counts.failed,
                  counts.errors, counts.skipped,
                  "not measured (--changed)" if coverage is None else f"{coverage[0]}/{coverage[1]}")]))  # fmt: skip
    return 0 if data["passed_all"] and rc == 0 else 1
