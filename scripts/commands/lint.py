"""ruff with upstream's settings, plus the kit's KIT checks, on the lines the series adds."""

from __future__ import annotations

import argparse

from scripts import kittools, paths, records
from scripts.checks import lint as lintmod
from scripts.commands.common import checkout_lock, current
from scripts.report import progress, table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ruff", default="ruff", help=f"the ruff executable (upstream pins v{kittools.version('ruff')})")


def run(args: argparse.Namespace) -> int:
    executable = lintmod.resolve_ruff(args.ruff)  # from the caller's folder, once, before anything runs
    with checkout_lock(shared=True):
        state = current()
        progress(f"ruff with upstream's settings, and {lintmod.RULE_IDS}, on the lines the series adds")
        result, ruff = lintmod.lint_checkout(executable)
    for finding in result.findings:
        print(finding)
    for finding in result.pre_existing:
        print(f"{finding} [pre-existing upstream, not counted]")
    print(table(["check", "findings"], result.rows()))
    records.write(paths.RECORDS, "lint", {"series_digest": state.series_digest, "files": result.files,
                  "findings": [str(f) for f in result.findings], "pre_existing": len(result.pre_existing),
                  "ruff": ruff, "passed": not result.findings})  # fmt: skip
    count = len(result.findings)
    progress(f"lint clean ({len(result.files)} files, ruff {ruff})" if not count else f"lint: {count} finding(s)")
    return 0 if not count else 1
