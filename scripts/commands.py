"""One function per command: wire paths, pin and series into the modules that do the work."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import checkout as co
from scripts import legenv, legs, paths, records, upstream_tests, worklock
from scripts import lint as lintmod
from scripts import pin as pinmod
from scripts.diffparse import touched
from scripts.report import progress, table
from scripts.series import load_series


def checkout_lock(*, shared: bool = False) -> contextlib.AbstractContextManager[None]:
    """The checkout's lock: apply/refresh/pr write (exclusive), lint/test read (shared)."""
    return worklock.hold(paths.WORK / "locks" / f"{paths.CHECKOUT.name}.lock", f".work/{paths.CHECKOUT.name}",
                         shared=shared, say=progress)  # fmt: skip


def current() -> co.State:
    """The checkout's state, refusing one that does not match the pin and patches/."""
    return co.verify_current(paths.CHECKOUT, pinmod.load_pin(paths.PIN_FILE), load_series(paths.PATCHES))


def apply(args: argparse.Namespace) -> int:
    started = time.monotonic()
    patches = load_series(paths.PATCHES)
    with checkout_lock():
        if args.abort:
            progress(f"apply --abort: {co.abort_series(paths.CHECKOUT, progress)}")
            return 0
        if args.resume:
            results = co.continue_series(paths.CHECKOUT, patches, threeway=args.threeway, progress=progress)
        else:
            pin = pinmod.load_pin(paths.PIN_FILE).with_source(args.source)
            progress(f"applying {len(patches)} patches to {pin.label}")
            results = co.apply_series(pin, patches, paths.CHECKOUT, paths.DOWNLOADS, threeway=args.threeway,
                                      force=args.force, progress=progress)  # fmt: skip
        co.export_tree(paths.CHECKOUT, co.PRISTINE_TAG, paths.PRISTINE_TREE)
    print(
        table(["#", "patch", "outcome", "detail"], [(i, r.name, r.outcome, r.detail) for i, r in enumerate(results, 1)])
    )
    elapsed = time.monotonic() - started
    progress(f"checkout at .work/{paths.CHECKOUT.name} ({co.head(paths.CHECKOUT)[:12]}) in {elapsed:.1f} s")
    if any(r.outcome in ("resolved", "skipped") for r in results):
        progress("next: nox -s refresh writes the hand-resolved patch back to patches/ (lint and test wait for it)")
    stale = [r.name for r in results if r.outcome in ("offset", "3-way")]
    if stale:
        message = f"{', '.join(stale)} applied only with offsets/3-way: needs refresh"
        if args.strict:
            raise co.NeedsRefresh(message, "run nox -s refresh and commit patches/")
        progress(f"warning: {message} (nox -s refresh)")
    return 0


def refresh(args: argparse.Namespace) -> int:
    with checkout_lock():
        rows = co.refresh(paths.CHECKOUT, paths.PATCHES, load_series(paths.PATCHES), progress=progress,
                          drop=tuple(args.drop))  # fmt: skip
    print(table(["patch", "outcome"], rows))
    changed = sum(1 for _, outcome in rows if outcome != "unchanged")
    progress(f"{changed} patch file(s) changed" if changed else "patches/ unchanged")
    return 0


def pin(args: argparse.Namespace) -> int:
    p = pinmod.load_pin(paths.PIN_FILE)
    if args.record_git:
        commit = pinmod.resolve_tag(p.git_url, p.git_tag, paths.ROOT)
        progress(f"{p.git_tag} at {p.git_url} is {commit}; comparing its tree with the pinned wheel")
        with tempfile.TemporaryDirectory() as tmp:
            pinmod.fetch_git(dataclasses.replace(p, git_commit=commit), Path(tmp) / "src")
            diffs = pinmod.wheel_matches_tree(pinmod.fetch_wheel(p, paths.DOWNLOADS), Path(tmp) / "src")
        if diffs:
            raise pinmod.PinError(
                f"{p.git_tag} differs from the pinned wheel in {len(diffs)} file(s), e.g. {diffs[0]}",
                "check that the tag names the release the wheel was built from; nothing was written",
            )
        pinmod.record_git_commit(paths.PIN_FILE, commit)
        progress(f"same files as {p.wheel_filename}; commit written to patches/upstream.toml")
        return 0
    print(table(["field", "value"], [(k, v) for k, v in vars(p).items()]))
    return 0


def lint(args: argparse.Namespace) -> int:
    with checkout_lock(shared=True):
        return lint_locked(args)


def lint_locked(args: argparse.Namespace) -> int:
    state = current()
    ruff = lintmod.ruff_version(args.ruff)
    progress(f"ruff {ruff} with upstream's settings, and KIT001-KIT006, on the lines the series adds")
    result = lintmod.lint_series(
        args.ruff, paths.CI_DIR / "ruff-upstream.toml", paths.CHECKOUT, paths.PRISTINE_TREE,
        co.combined_diff(paths.CHECKOUT),
    )  # fmt: skip
    for finding in result.findings:
        print(finding)
    for finding in result.pre_existing:
        print(f"{finding} [pre-existing upstream, not counted]")
    print(table(["check", "findings"], result.rows()))
    records.write(paths.RECORDS, "lint", {"series_digest": state.series_digest, "files": result.files,
                  "findings": [str(f) for f in result.findings], "pre_existing": len(result.pre_existing),
                  "ruff": ruff, "passed": not result.findings})  # fmt: skip
    count = len(result.findings)
    progress(f"lint clean ({len(result.files)} files)" if not count else f"lint: {count} finding(s)")
    return 0 if not count else 1


def prepare_leg(
    leg: str, out: Path, options: legenv.LegOptions | None = None
) -> tuple[Path, str, dict[str, str], dict[str, str]]:
    """(python, mode, versions, process env) for one leg, after saying which mode it runs in."""
    options = options or legenv.LegOptions()
    found = legenv.interpreter(legenv.check_leg(leg), options)
    versions = legenv.versions(found.python)
    mode = legs.npu_mode(leg, versions)
    shown = ", ".join(f"{k} {v}" for k, v in versions.items() if k != "torch_npu_import")
    progress(f"leg {leg}: mode {mode}; {shown}; in {found.origin}")
    legenv.require_mode(leg, mode, options.require, versions)
    if mode == "simulated":
        progress(f"leg {leg}: torch_npu cannot load here ({versions.get('torch_npu_import', 'absent')}); "
                 "the NPU branches run on the simulated NPU (tests/regression/npu_standin), not on Ascend")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    versions = {**versions, "interpreter": found.origin}  # recorded with the versions, shown in the PR body
    env = legs.leg_env(leg, mode, paths.CHECKOUT, paths.PRISTINE_TREE, out, found.pycache)
    return found.python, mode, versions, env


def test(args: argparse.Namespace) -> int:
    """Both legs (or the ones named): in parallel when the cores allow, else one after the other."""
    opts = legs.parse_test_args(args.args)
    with checkout_lock(shared=True):
        current()
        at_once, threads = legs.plan_jobs(len(opts.legs), opts.jobs, os.cpu_count() or 1)
        if at_once > 1:
            return test_in_parallel(opts, threads)
        return max([test_leg(leg, opts) for leg in opts.legs])


def test_in_parallel(opts: legs.TestArgs, threads: int) -> int:
    """One child `test LEG --jobs 1` per leg, each with its share of the cores; one block per leg at its end."""
    progress(f"legs {', '.join(opts.legs)} in parallel, {threads} thread(s) each (-- --jobs 1: one after the other)")
    flags = ["--changed"] if opts.changed else []
    cmds = {leg: [sys.executable, "-m", "scripts", "test", leg, "--jobs", "1", *flags, *opts.pytest_args]
            for leg in opts.legs}  # fmt: skip
    envs = {leg: {**os.environ, **legs.thread_env(threads)} for leg in opts.legs}
    logs = {leg: paths.RECORDS / f"test-{leg}" / "output.log" for leg in opts.legs}
    done = legs.run_parallel(cmds, envs, logs, paths.ROOT, live=sys.stdout.isatty())
    rows = [(leg, "passed" if rc == 0 else f"FAILED (exit {rc})", f"{seconds:.1f}",
             legs.oracle_use(paths.RECORDS / f"test-{leg}")["source"])
            for leg, (rc, seconds) in done.items()]  # fmt: skip
    print(table(["leg", "result", "seconds", "pristine oracle"], rows))
    return max(rc for rc, _ in done.values())


def test_leg(leg: str, opts: legs.TestArgs) -> int:
    state = current()
    out = paths.RECORDS / f"test-{leg}"
    options, pytest_args = legenv.leg_options(leg, opts.pytest_args)
    python, mode, versions, env = prepare_leg(leg, out, options)
    env |= {"KIT_ORACLE_CACHE": str(paths.WORK / "cache" / f"oracle-{leg}"),
            "KIT_PRISTINE_COMMIT": state.pristine_commit}  # fmt: skip
    junit, cov_json, syncs = out / "junit.xml", out / "coverage.json", out / "npu-syncs.json"
    for stale in (syncs, out / legs.ORACLE_REPORT):
        stale.unlink(missing_ok=True)
    series = load_series(paths.PATCHES)
    patch_files = {p.name: touched([p.text]) for p in series}
    green_file = out / legs.GREEN
    context = {"pin": state.pin_digest, "env": legenv.current_digest(leg), "mode": mode,
               "kit": legs.tree_digest(paths.ROOT, ("scripts", "tests", "pytest.ini"))}  # fmt: skip
    targets = [legs.SUITE]
    if opts.changed:
        green = json.loads(green_file.read_text(encoding="utf-8")) if green_file.is_file() else None
        targets = legs.changed_targets(leg, green, context, state.patches, patch_files, paths.ROOT)
        if not targets:
            return 0  # nothing changed since the last green run: its record stands
    full = targets == [legs.SUITE]
    series_diff = co.combined_diff(paths.CHECKOUT)
    measured = [paths.CHECKOUT / f for f in touched([series_diff]) if f.endswith(".py")]
    rc = legs.run_suite(python, env, paths.ROOT, out, measured, targets, pytest_args)
    if not junit.is_file():
        raise legs.SuiteDidNotRun(f"leg {leg}: pytest exited {rc} without a report", "see pytest's output above")
    counts = legs.counts_from_junit(junit.read_text(encoding="utf-8"))
    wanted = legs.npu_branch_lines(series_diff, paths.CHECKOUT)
    cov_text = cov_json.read_text(encoding="utf-8") if cov_json.is_file() else '{"files": {}}'
    coverage = legs.executed(cov_text, paths.ROOT, paths.CHECKOUT, wanted)
    data = legs.record(leg, mode, versions, counts, coverage, state.series_digest)
    oracle = legs.oracle_use(out)
    data |= {"pristine_oracle": oracle, "full_suite": full and not pytest_args, "targets": targets,
             "required_mode": options.require or "any"}  # fmt: skip
    if syncs.is_file():  # written by the npu tests: host syncs per NPU attention call
        data["host_syncs"] = json.loads(syncs.read_text(encoding="utf-8"))
    # upstream's own CPU tests, where the source carries tests/ (scripts/upstream_tests.py)
    upstream = upstream_tests.in_leg(python, env, paths.ROOT, paths.PRISTINE_TREE, paths.CHECKOUT, out, series_diff)
    if upstream is not None:
        data["upstream_tests"] = upstream.as_record()
        data["passed_all"] = bool(data["passed_all"]) and upstream.ok
    # A --changed run never stands in for the full one in reports (the PR body reads test-<leg>).
    records.write(paths.RECORDS, f"test-{leg}" if full else f"test-{leg}-changed", data)
    if counts.ok and rc == 0 and not pytest_args:  # green, and not narrowed by pytest arguments
        by_file = legs.modules_by_file(cov_text, paths.ROOT, paths.CHECKOUT) if full else None
        legs.write_green(green_file, context, state.patches, patch_files, by_file)
    progress(f"leg {leg}: pristine oracle {oracle['source']} ({oracle['reason']})")
    print(table(["leg", "mode", "torch", "torch_npu", "passed", "failed", "errors", "skipped", "NPU-branch lines run"],
                [(leg, mode, versions.get("torch"), versions.get("torch_npu"), counts.passed, counts.failed,
                  counts.errors, counts.skipped, f"{coverage[0]}/{coverage[1]}")]))  # fmt: skip
    return 0 if data["passed_all"] and rc == 0 else 1


def bench(args: argparse.Namespace) -> int:
    """The NPU gather/memory benchmark (pytest-benchmark) in the npu leg; figures go to .work/records."""
    current()
    python, _, _, env = prepare_leg("npu", paths.RECORDS / "bench")
    env["KIT_BENCH_OUT"] = str(paths.RECORDS / "bench-npu-gather.json")
    cmd = [str(python), "-m", "pytest", "tests/regression/bench_npu_gather.py", "-p", "no:cacheprovider", "-q", "-s"]
    return subprocess.run([*cmd, *args.pytest_args], cwd=paths.ROOT, env=env).returncode
