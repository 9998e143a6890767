"""ruff with upstream's settings, plus the kit's KIT checks, on the lines the series adds."""

from __future__ import annotations

import argparse

from scripts import records
from scripts.checks.lint import RULE_IDS, lint_checkout, resolve_ruff
from scripts.commands.common import checkout_lock, current
from scripts.report import progress, table
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ruff", default="ruff", help="the ruff executable (upstream's version: ci/kit-dev-tools.txt)")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    executable = resolve_ruff(args.ruff)  # from the caller's folder, once, before anything runs
    with checkout_lock(ws, shared=True):
        state = current(ws)
        progress(f"ruff with upstream's settings, and {RULE_IDS}, on the lines the series adds")
        result, ruff = lint_checkout(ws, executable)
    for finding in result.findings:
        print(finding)
    for finding in result.pre_existing:
        print(f"{finding} [pre-existing upstream, not counted]")
    print(table(["check", "findings"], result.rows()))
    records.write(ws.records, "lint", {"series_digest": state.series_digest, "files": result.files,
                  "findings": [str(f) for f in result.findings], "pre_existing": len(result.pre_existing),
                  "ruff": ruff, "passed": not result.findings})  # fmt: skip
    count = len(result.findings)
    progress(f"lint clean ({len(result.files)} files, ruff {ruff})" if not count else f"lint: {count} finding(s)")
    return 0 if not count else 1
