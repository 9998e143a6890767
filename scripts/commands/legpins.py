"""Regenerate the leg pin closures in ci/leg-*.txt with uv (--check: compare as recorded; --newer:
drift report)."""

from __future__ import annotations

import argparse

from scripts.legs import legpins
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        dest="mode",
        action="store_const",
        const="check",
        help="resolve again as of each file's recorded time; exit 1 when a file is stale",
    )
    mode.add_argument(
        "--newer",
        dest="mode",
        action="store_const",
        const="newer",
        help="list what a resolve today would change (exit 1 if anything would)",
    )
    p.set_defaults(mode="write")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    return legpins.pins_main(ws.ci_dir, args.mode)
