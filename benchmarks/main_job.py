"""The warm main job against its import floor: a developer's benchmark, not a kit command.

python benchmarks/main_job.py [--runs 3]

It needs the leg envs built (one `nox -s apply test`); a first, uncounted run rebuilds whatever the
last change invalidated (the pristine oracle cache, .pyc), so every counted run is warm. It prints
the import floor (`import torch, vllm` in the stock leg's env with its .pyc, as the leg starts it),
the warm main job (`nox -s apply test`) and their ratio, and where the job's time goes: the npu leg
(the longer one) alone, with and without coverage (coverage.py's tracer is called on every Python
call, imports and tests alike), and each leg's tests by module (from junit.xml; the rest is
interpreter start, imports, collection and reports). Medians of the runs.

Beside that floor it prints the code under test's own: what the npu leg imports before it can test
anything (the simulated NPU, then vllm-omni and its LingBot-World model, which import torch and
vllm), so the share of the job that is imports of vllm-omni, not the kit's tests, shows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scripts.legs import legenv, suite  # noqa: E402
from scripts.report import table  # noqa: E402
from scripts.workspace import Workspace  # noqa: E402

SUITE_IMPORTS = """
import sys
sys.path[:0] = sys.argv[1:]
import _npu_leg
_npu_leg.prepare("simulated")
_npu_leg.import_code_under_test()
"""


def seconds(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(
        cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def by_module(junit: Path) -> Counter[str]:
    """Seconds of pytest's tests (setup, call, teardown) per test module."""
    out: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        out[case.get("classname", "?").rsplit(".", 1)[-1]] += float(case.get("time", 0))
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each measurement (median)")
    runs = parser.parse_args(argv).runs
    ws = Workspace.of_kit()
    job_cmd = [sys.executable, "-m", "nox", "-s", "apply", "test"]
    # warm-up: whatever the last change left to rebuild (oracle, .pyc)
    seconds(job_cmd, dict(os.environ), ws.root)

    def median(cmd: list[str], env: dict[str, str]) -> float:
        return statistics.median(seconds(cmd, env, ws.root) for _ in range(runs))

    env = legenv.env_dir(ws, "stock")
    floor = median(
        [str(legenv.env_python(env)), "-c", "import torch, vllm"],
        legenv.bytecode_env(os.environ, legenv.pycache_dir(env)),
    )
    npu_env = legenv.env_dir(ws, "npu")
    npu_vars = suite.leg_env(
        "npu", "simulated", ws.checkout, ws.pristine_tree, ws.records, legenv.pycache_dir(npu_env)
    )
    suite_floor = median(
        [
            str(legenv.env_python(npu_env)),
            "-c",
            SUITE_IMPORTS,
            str(ws.checkout),
            str(ws.root / suite.SUITE),
        ],
        npu_vars,
    )
    kit = [sys.executable, "-m", "scripts", "test", "npu"]
    npu_leg = median(kit, dict(os.environ))
    # any pytest argument: coverage not measured
    npu_leg_bare = median([*kit, "-q"], dict(os.environ))
    # last: its records are the ones the per-module tables read
    job = median(job_cmd, dict(os.environ))
    print(
        table(
            ["measure", "seconds"],
            [
                ("import floor (import torch, vllm)", f"{floor:.1f}"),
                (
                    "the code under test's imports (npu leg: vllm-omni, LingBot-World)",
                    f"{suite_floor:.1f}",
                ),
                ("npu leg alone (test npu)", f"{npu_leg:.1f}"),
                ("npu leg alone, coverage not measured (test npu -q)", f"{npu_leg_bare:.1f}"),
                ("warm nox -s apply test", f"{job:.1f}"),
                ("ratio to the import floor", f"{job / floor:.1f}x"),
                ("ratio to the code under test's imports", f"{job / suite_floor:.1f}x"),
            ],
        )
    )
    for leg in legenv.LEGS:
        modules = by_module(ws.records / f"test-{leg}" / "junit.xml")
        rows = [(name, f"{secs:.1f}") for name, secs in modules.most_common()]
        print(f"\nleg {leg} (last run): tests {sum(modules.values()):.1f} s by module")
        print(table(["module", "seconds"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
