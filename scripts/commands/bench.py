"""The NPU gather/memory benchmark (pytest-benchmark) in the npu leg; figures go to .work/records."""

from __future__ import annotations

import argparse
import subprocess

from scripts.commands.common import current
from scripts.legs import suite
from scripts.workspace import Workspace

PASSTHROUGH = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed on to pytest")


def run(args: argparse.Namespace, ws: Workspace) -> int:
    current(ws)
    python, _, _, env = suite.prepare(ws, "npu", ws.records / "bench")
    env["KIT_BENCH_OUT"] = str(ws.records / "bench-npu-gather.json")
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
    return subprocess.run([*cmd, *args.pytest_args], cwd=ws.root, env=env).returncode
