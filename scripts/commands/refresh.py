"""Export the checkout's commits back to patches/ and series, byte-stably (refuses to lose a patch)."""

from __future__ import annotations

import argparse

from scripts.checkout.refresh import refresh
from scripts.commands.common import checkout_lock
from scripts.pin import load_pin
from scripts.report import progress, table
from scripts.series import load_series
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="SLUG",
        help="a patch the checkout no longer holds, on purpose",
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    with checkout_lock(ws):
        rows = refresh(
            ws.checkout,
            ws.patches,
            load_series(ws.patches),
            progress=progress,
            drop=tuple(args.drop),
            pin=load_pin(ws.pin_file),
        )
    print(table(["patch", "outcome"], rows))
    changed = sum(1 for _, outcome in rows if outcome != "unchanged")
    progress(f"{changed} patch file(s) changed" if changed else "patches/ unchanged")
    return 0
