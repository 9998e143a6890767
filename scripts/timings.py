"""Timings of the kit's slow steps, measured on a fresh copy of the kit (never asserted in tests).

    python -m scripts timings [--cold-envs]

apply cold: empty download cache and no checkout (the registry is asked for the wheel);
apply warm: the same copy again (cached wheel, pristine reused). Leg environments: warm
(reuse) always; cold (a new venv from ci/leg-*.txt, pip's own cache allowed) with --cold-envs.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import paths
from scripts.report import progress, table

KIT_PARTS = ("scripts", "ci", "patches")


def copy_kit(dest: Path) -> Path:
    for part in KIT_PARTS:
        shutil.copytree(paths.ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def timed(cmd: list[str], cwd: Path) -> float:
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"kit: error: {' '.join(cmd[2:])} failed in the timing copy:\n{proc.stderr}")
    return time.monotonic() - started


def ratio(cold: float, warm: float) -> str:
    return f"{cold / warm:.1f}x" if warm > 0 else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts timings")
    parser.add_argument("--cold-envs", action="store_true", help="also build each leg env from scratch (minutes, GBs)")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kit-timings-") as tmp:
        kit = copy_kit(Path(tmp))
        apply = [sys.executable, "-m", "scripts", "apply"]
        progress("apply, cold (empty download cache, no checkout)")
        cold = timed(apply, kit)
        progress("apply, warm")
        warm = timed(apply, kit)
        rows.append(("apply", f"{cold:.1f}", f"{warm:.1f}", ratio(cold, warm)))
        for leg in ("stock", "npu"):
            ensure = [sys.executable, "-m", "scripts.legenv", leg]
            env_cold = None
            if args.cold_envs:
                progress(f"leg env {leg}, cold (new venv in the timing copy)")
                env_cold = timed(ensure, kit)
            progress(f"leg env {leg}, warm (reuse, {'the timing copy' if args.cold_envs else 'this checkout'})")
            env_warm = timed(ensure, kit if args.cold_envs else paths.ROOT)
            shown_cold = f"{env_cold:.1f}" if env_cold is not None else "not run (--cold-envs)"
            rows.append((f"env {leg}", shown_cold, f"{env_warm:.1f}", ratio(env_cold or 0, env_warm)))
    print(table(["step", "cold s", "warm s", "cold/warm"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
