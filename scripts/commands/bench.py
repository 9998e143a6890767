"""The NPU gather/memory benchmark (pytest-benchmark) in the npu leg; figures go to .work/records."""

from __future__ import annotations

import argparse
import json
import subprocess

from scripts import records
from scripts.commands.common import current
from scripts.errors import ChildFailed, check_pytest
from scripts.legs import suite
from scripts.report import progress
from scripts.workspace import Workspace

PASSTHROUGH = True
RECORD = "bench-npu-gather"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest")


def record_name(pytest_args: list[str]) -> str:
    """A run given pytest arguments (-k, a test id) may measure part of the file: its figures never
    stand in for the whole benchmark's record."""
    return f"{RECORD}-narrowed" if pytest_args else RECORD


def run(args: argparse.Namespace, ws: Workspace) -> int:
    state = current(ws)
    out = ws.records / "bench"
    python, _, _, env = suite.prepare(ws, "npu", out)
    # The figures land aside first: a failed or empty run leaves the last real record as it was.
    figures = out / "figures.json"
    figures.unlink(missing_ok=True)
    env["KIT_BENCH_OUT"] = str(figures)
    cmd = [
        str(python),
        "-m",
        "pytest",
        "tests/regression/bench_npu_gather.py",
        "-p",
        "no:cacheprovider",
        "-q",
        "-s",
    ]
    try:
        rc = subprocess.run([*cmd, *args.pytest_args], cwd=ws.root, env=env).returncode
        check_pytest("bench's pytest", rc)
        data = json.loads(figures.read_text(encoding="utf-8")) if figures.is_file() else None
    finally:  # a refused run leaves no figures behind, not even aside
        figures.unlink(missing_ok=True)
    if data is None:
        raise ChildFailed(
            "bench measured nothing: every benchmark was deselected, so no figure is recorded",
            "run it without -k (python -m scripts bench), or select a benchmark of "
            "tests/regression/bench_npu_gather.py",
            1,
        )
    name = record_name(args.pytest_args)
    path = records.write(
        ws.records,
        name,
        {**data, "series_digest": state.series_digest, "pytest_args": args.pytest_args},
    )
    progress(
        f"figures recorded in {path}"
        + (" (narrowed by pytest arguments)" if name != RECORD else "")
    )
    return 0
