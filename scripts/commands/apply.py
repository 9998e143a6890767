"""Pristine pin + the series -> .work/vllm-omni, one commit per patch."""

from __future__ import annotations

import argparse
import os
import time

from scripts.checkout import PRISTINE_TAG, NeedsRefresh
from scripts.checkout.apply import abort_series, apply_series, continue_series
from scripts.checkout.pristine import export_tree, refuse_linked
from scripts.commands.common import checkout_lock
from scripts.gitcmd import head
from scripts.pin import load_pin
from scripts.rebase.trial import sweep
from scripts.report import outcomes_table, progress
from scripts.series import load_series
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--3way", dest="threeway", action="store_true", help="let git am fall back to a 3-way merge"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="discard edits in the checkout that are not in patches/",
    )
    # one of them at most: `--continue --abort` is refused (argparse's one line), never taken as
    # either
    stopped = p.add_mutually_exclusive_group()
    stopped.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="after resolving a conflict: finish the paused git am, then apply the rest",
    )
    stopped.add_argument(
        "--abort",
        action="store_true",
        help="go back to the checkout as it was before the apply stopped",
    )
    p.add_argument("--source", choices=("wheel", "git"), default=os.environ.get("KIT_SOURCE"))
    p.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=bool(os.environ.get("CI")),
        help="patches that need line offsets are an error (default on in CI)",
    )


def run(args: argparse.Namespace, ws: Workspace) -> int:
    started = time.monotonic()
    with checkout_lock(ws):
        sweep(ws)  # what a rebase killed outright left under .work/
        if args.abort:
            progress(f"apply --abort: {abort_series(ws.checkout, progress)}")
            return 0
        # read once the lock is held: a refresh it waited for may have written it
        patches = load_series(ws.patches)
        refuse_linked(ws.pristine_tree)  # before the checkout changes, not after
        if args.resume:
            results = continue_series(
                ws.checkout, patches, threeway=args.threeway, progress=progress
            )
        else:
            pin = load_pin(ws.pin_file).with_source(args.source)
            results = apply_series(
                pin,
                patches,
                ws.checkout,
                ws.downloads,
                threeway=args.threeway,
                force=args.force,
                progress=progress,
            )
        export_tree(ws.checkout, PRISTINE_TAG, ws.pristine_tree)
    print(outcomes_table([(r.name, r.outcome, r.detail) for r in results]))
    elapsed = time.monotonic() - started
    progress(f"checkout at .work/{ws.checkout.name} ({head(ws.checkout)[:12]}) in {elapsed:.1f} s")
    if any(r.outcome in ("resolved", "skipped") for r in results):
        progress(
            "next: nox -s refresh writes the hand-resolved patch back to patches/ (lint and test "
            "wait for it)"
        )
    stale = [r.name for r in results if r.outcome in ("offset", "3-way")]
    if stale:
        message = f"{', '.join(stale)} applied only with offsets/3-way: needs refresh"
        if args.strict:
            raise NeedsRefresh(message, "run nox -s refresh and commit patches/")
        progress(f"warning: {message} (nox -s refresh)")
    return 0
