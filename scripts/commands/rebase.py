"""Try the series on another pin (a release or a git ref) and report each patch; --move makes it the
pin."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from scripts import worklock
from scripts.commands.common import checkout_lock
from scripts.pin import load_pin
from scripts.rebase import trial
from scripts.rebase.verdicts import DROPPED, SHOWN
from scripts.report import outcomes_table, progress
from scripts.series import load_series
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        help="a release on the package registry (e.g. 0.28.0, or latest), or a git tag/commit at the pin's git URL",
    )
    p.add_argument(
        "--git",
        nargs=2,
        metavar=("URL", "REF"),
        help="a git source instead: URL (https, file:// or a local path) and REF (branch, tag or sha)",
    )
    p.add_argument(
        "--move",
        action="store_true",
        help="when no patch conflicts: move the pin to the target, drop what upstream has, refresh the rest",
    )
    p.add_argument(
        "--report-name", help="file name (without .json/.md) of the reports in .work/rebase/"
    )
    p.add_argument(
        "--baseline",
        type=Path,
        help="an earlier JSON report: exit 1 only for patches that conflict now and did not then",
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    # --move writes patches/ and the pin, as refresh does: under the checkout's lock, the inputs read
    # once it is held (a second --move waits for the first, then tries the pin that one left)
    with checkout_lock(ws) if args.move else contextlib.nullcontext():
        return tried(args, ws)


def tried(args: argparse.Namespace, ws: Workspace) -> int:
    trial.sweep(ws)
    pin = load_pin(ws.pin_file)
    patches = load_series(ws.patches)
    # read first: a missing one is refused, never taken as empty
    before = trial.read_baseline(args.baseline)
    if args.move:
        trial.refuse_local_work(ws)
    target = trial.target_of(ws, pin, args)
    progress(
        f"trying {len(patches)} patch(es) from {pin.label} on {target.label} (the checkout is not "
        "touched)"
    )
    name = args.report_name or args.target or f"{Path(target.url).name}-{target.ref}"
    with worklock.scratch(ws.work, trial.SCRATCH_PREFIX) as tmp:
        repo, verdicts = trial.try_series(pin, target, patches, tmp, ws.downloads)
        print(outcomes_table([(v.name, v.shown, v.detail) for v in verdicts], "verdict"))
        dropped = [p for p, v in zip(patches, verdicts, strict=True) if v.outcome in DROPPED]
        kept = [p for p in patches if p not in dropped]
        depends = trial.dependent_tests(dropped, trial.test_texts(ws, kept))
        for patch_name, tests in depends.items():
            progress(f"{patch_name} is dropped; tests that exercise its files: {', '.join(tests)}")
        gates = trial.gates_of(target, repo, ws.ci_dir)
        data = trial.report(pin, target, verdicts, False, depends, gates)
        out = trial.write_report(ws.rebase_dir, name, data, trial.markdown(data, verdicts))
        counts = ", ".join(f"{n} {SHOWN.get(o, o)}" for o, n in data["counts"].items() if n)  # type: ignore[attr-defined]
        progress(
            f"{target.label}: {counts or 'empty series'}; report .work/rebase/{out.name} and "
            f"{out.stem}.md"
        )
        if args.move:
            trial.move(ws, pin, target, patches, repo, verdicts)
            data = trial.report(pin, target, verdicts, True, depends, gates)
            trial.write_report(ws.rebase_dir, name, data, trial.markdown(data, verdicts))
    fresh = trial.new_conflicts(verdicts, before)
    if args.baseline is not None and fresh:
        progress(f"newly conflicting since {args.baseline.name}: {', '.join(fresh)}")
    return 1 if fresh else 0
