"""Mutation testing of the lines the series adds, against both legs (a JSON record in .work/records)."""

from __future__ import annotations

import argparse
import time

from scripts import records
from scripts.checkout.pristine import combined_diff
from scripts.commands.common import current
from scripts.mutation import mutate
from scripts.report import progress, table
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only mutants whose key contains this text (repeatable: any of them)",
    )
    p.add_argument(
        "--operator",
        action="append",
        choices=mutate.OPERATORS,
        default=[],
        help="run only this operator's mutants (repeatable)",
    )
    p.add_argument(
        "--list", action="store_true", help="list the mutants and their keys, run nothing"
    )
    p.add_argument(
        "--series-tests",
        action="store_true",
        help="the NPU-branch lines' mutants against the series' own tests alone, in the stock leg "
        "(as upstream's CPU CI runs them); record mutate-series",
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    started = time.monotonic()
    state = current(ws)
    series_diff = combined_diff(ws.checkout)
    every = mutate.series_mutants(series_diff, ws.checkout)
    chosen = mutate.npu_branch(every, ws.checkout) if args.series_tests else every
    mutants = mutate.select(chosen, args.only, args.operator)
    if args.list:
        print(table(["line", "operator", "key"], [(m.line, m.operator, m.key) for m in mutants]))
        return 0
    equivalent = mutate.load_equivalent(ws.equivalent_mutants)
    keys = {m.key for m in every}
    stale = sorted(k for k in equivalent if k not in keys)
    for key in stale:
        progress(f"allowlist entry matches no mutant (stale; remove it): {key}")
    tree = mutate.make_workspace(ws.mutate_dir / "workspace", ws.checkout, ws.root)
    legs = ("stock",) if args.series_tests else ("stock", "npu")
    workers = {leg: mutate.start_worker(ws, leg, tree) for leg in legs}
    try:
        series_tests = mutate.added_tests(series_diff, tree) if args.series_tests else None
        previous = (
            records.read(ws.records, "mutate-series", mutate.RECORD_SCHEMA, mutate.RECORD_OPTIONAL)
            if args.series_tests
            else None
        )
        kept = mutate.kills_to_keep(previous, state.series_digest)
        return mutate.run_all(
            ws.records,
            mutants,
            equivalent,
            stale,
            tree,
            workers,
            state.series_digest,
            started,
            series_tests,
            kept,
        )
    finally:
        for worker in workers.values():
            worker.close()
