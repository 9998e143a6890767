"""Time `nox -s apply test` on fresh clones (and .ci/run), or the edit-test loop against a baseline; ratios."""

from __future__ import annotations

import argparse

from scripts.legs import looptimings, timings
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--empty-cache", action="store_true", help="also a fresh clone with an empty package cache")
    p.add_argument("--ci", action="store_true", help="also .ci/run on a fresh clone (about 10 minutes)")
    p.add_argument("--loop", metavar="BASELINE", help="time the edit-test loop here and at git revision BASELINE")
    p.add_argument("--repeat", type=int, default=3, help="warm runs per --loop figure")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    if args.loop:
        return looptimings.loop_main(ws, args.loop, args.repeat)
    return timings.fresh_clones(ws, args.empty_cache, args.ci)
