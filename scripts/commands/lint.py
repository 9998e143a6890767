"""Upstream's pre-commit gate, the kit's checks and the off-NPU proof, on what the series touches."""

from __future__ import annotations

import argparse

from scripts import records
from scripts.checks.lint import lint_checkout, tools_for
from scripts.checks.rules import RULE_IDS
from scripts.commands.common import checkout_lock, current
from scripts.report import progress, table
from scripts.series import load_series
from scripts.workspace import Workspace


def add_arguments(p: argparse.ArgumentParser) -> None:
    """No options: pre-commit (pinned in ci/kit-dev-tools.txt, installed by nox -s lint) runs the
    gates, each hook at its config's rev."""


def run(args: argparse.Namespace, ws: Workspace) -> int:
    tools = tools_for(ws)  # once, before anything runs
    with checkout_lock(ws, shared=True):
        state = current(ws)
        progress(f"upstream's pre-commit hooks, and {RULE_IDS}, on what the series touches")
        result, ruff = lint_checkout(ws, tools, load_series(ws.patches))
    for finding in result.findings:
        print(finding)
    for finding in result.pre_existing:
        print(f"{finding} [pre-existing upstream, not counted]")
    print(f"gates: {result.gates}")
    print(table(["upstream hook", "version", "here"], result.hook_rows))
    print(table(["check", "findings"], result.rows()))
    print(result.off_npu.claim())
    records.write(
        ws.records,
        "lint",
        {
            "series_digest": state.series_digest,
            "files": result.files,
            "findings": [str(f) for f in result.findings],
            "pre_existing": len(result.pre_existing),
            "ruff": ruff,
            "gates": result.gates,
            "hooks": [list(row) for row in result.hook_rows],
            "off_npu": result.off_npu.claim(),
            "passed": not result.findings,
        },
    )
    count = len(result.findings)
    progress(
        f"lint clean ({len(result.files)} files, ruff {ruff})"
        if not count
        else f"lint: {count} finding(s)"
    )
    return 0 if not count else 1
