"""What the e2e tests need: a copy of the kit with its own .work (the developer's is never written),
the series applied there, the stock leg's env. Shared with the developer: the leg envs (a cache
keyed by the pin files, linked) and the pinned wheel (copied when downloaded, else the copy
downloads it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from scripts.checkout.guards import verify_current
from scripts.errors import KitError
from scripts.legs import legenv
from scripts.pin import load_pin
from scripts.series import load_series
from scripts.workspace import Workspace

# The kit itself, for parsing options (nothing is read or written under its .work).
PARSING = Workspace(Path(__file__).resolve().parents[2])


def e2e_copy(dest: Path) -> Workspace:
    for part in ("scripts", "ci", "patches", "tests/standins"):
        shutil.copytree(
            PARSING.root / part, dest / part, ignore=shutil.ignore_patterns("__pycache__")
        )
    ws = Workspace(dest)
    PARSING.envs.mkdir(parents=True, exist_ok=True)
    ws.work.mkdir()
    ws.envs.symlink_to(PARSING.envs.resolve(), target_is_directory=True)
    wheel = PARSING.downloads / load_pin(ws.pin_file).wheel_filename
    if wheel.is_file():
        ws.downloads.mkdir()
        shutil.copy2(wheel, ws.downloads / wheel.name)
    return ws


def ensure_checkout_and_stock_env(ws: Workspace) -> Path:
    """The stock leg's python, with ``ws.checkout`` exactly the pin + the series (applied once per
    copy)."""
    try:
        verify_current(ws.checkout, load_pin(ws.pin_file), load_series(ws.patches))
    except KitError:
        done = subprocess.run(
            [sys.executable, "-m", "scripts", "apply"], cwd=ws.root, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
        # raises unless current now
        verify_current(ws.checkout, load_pin(ws.pin_file), load_series(ws.patches))
    return legenv.ensure_env(ws, "stock")
