"""Mutation testing of the lines the series adds, against both legs (a JSON record in .work/records)."""

from __future__ import annotations

import argparse
import shutil
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
    # Nothing to judge is refused before anything starts: no score of 0/0, no record over a real one.
    allowlist = ws.equivalent_mutants.relative_to(ws.root).as_posix()
    refuse_nothing(args, every, chosen, mutants, equivalent, allowlist)
    keys = {m.key for m in every}
    stale = sorted(k for k in equivalent if k not in keys)
    for key in stale:
        progress(f"allowlist entry matches no mutant (stale; remove it): {key}")
    tree = mutate.make_workspace(ws.mutate_dir / "workspace", ws.checkout, ws.root)
    legs = ("stock",) if args.series_tests else ("stock", "npu")
    workers: dict[str, mutate.Worker] = {}
    refused = False
    try:
        for leg in legs:  # one that fails to start: those started before it are closed below
            workers[leg] = mutate.start_worker(ws, leg, tree)
        series_tests = mutate.added_tests(series_diff, tree) if args.series_tests else None
        kept: dict[str, mutate.Outcome] = {}
        if args.series_tests:  # an interrupted run's kills too (its partial record)
            for earlier in ("mutate-series", mutate.partial_name("mutate-series")):
                previous = records.read(
                    ws.records, earlier, mutate.RECORD_SCHEMA, mutate.RECORD_OPTIONAL
                )
                kept |= mutate.kills_to_keep(previous, state.series_digest)
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
            record_name(args),
        )
    except mutate.MutateError:
        refused = True
        raise
    finally:
        for worker in workers.values():
            worker.close()
        if refused:  # a refusal leaves nothing made: the scratch copy goes, once no worker uses it
            shutil.rmtree(tree.parent, ignore_errors=True)


def record_name(args: argparse.Namespace) -> str:
    """mutate / mutate-series for every mutant of the scope; a run narrowed by --only or --operator
    is recorded beside it (-narrowed), never over it (the PR body quotes mutate-series)."""
    name = "mutate-series" if args.series_tests else "mutate"
    return f"{name}-narrowed" if args.only or args.operator else name


def refuse_nothing(
    args: argparse.Namespace,
    every: list[mutate.Mutant],
    chosen: list[mutate.Mutant],
    mutants: list[mutate.Mutant],
    equivalent: dict[str, str],
    allowlist: str,
) -> None:
    """A run with no mutant to judge is a refusal, not a score of 100 % of nothing."""
    scope = "mutate --series-tests" if args.series_tests else "mutate"
    if not every:
        raise mutate.MutateError(
            "the series adds no line under vllm_omni/ a mutant can change: nothing to mutate",
            "no mutation score is measured for it; add the code first",
        )
    if not chosen:
        raise mutate.MutateError(
            f"{scope}: the series adds no NPU-branch line: nothing to mutate",
            "run python -m scripts mutate (every added line) instead",
        )
    if not mutants:
        given = " ".join(
            [*(f"--only {t}" for t in args.only), *(f"--operator {o}" for o in args.operator)]
        )
        raise mutate.MutateError(
            f"{given} matches none of the {len(chosen)} mutants of {scope}",
            f"list their keys: python -m scripts {scope} --list",
        )
    if all(m.key in equivalent for m in mutants):
        raise mutate.MutateError(
            f"all {len(mutants)} chosen mutants are listed as equivalent "
            f"({allowlist}): nothing to run",
            "choose others (--list), or run without --only/--operator",
        )
