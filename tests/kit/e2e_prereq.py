"""What the e2e tests need: a copy of the kit with its own .work, the series applied there, the stock leg's env.

No e2e test writes into the developer's .work (their checkout, records, evidence, A/B trees): each session
copies the kit (scripts/, ci/, patches/, the stand-ins) into a temporary folder and applies the series
there. The one thing shared is the leg envs folder, a cache keyed by the pin files (`nox -s test` builds
and reuses it the same way), linked into the copy; the pinned wheel is copied from the developer's
download cache when it is there (else the copy downloads it).
"""

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

KIT_ROOT = Path(__file__).resolve().parents[2]
PARSING = Workspace(KIT_ROOT)  # for parsing options (nothing is read or written under its .work)
COPIED = ("scripts", "ci", "patches", "tests/standins")


def e2e_copy(dest: Path) -> Workspace:
    """A copy of the kit at dest, with its own .work but the developer's leg envs (linked: a shared cache)."""
    for part in COPIED:
        shutil.copytree(KIT_ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    ws = Workspace(dest)
    PARSING.envs.mkdir(parents=True, exist_ok=True)
    ws.work.mkdir()
    ws.envs.symlink_to(PARSING.envs.resolve(), target_is_directory=True)
    wheel = PARSING.downloads / load_pin(ws.pin_file).wheel_filename
    if wheel.is_file():
        ws.downloads.mkdir()
        shutil.copy2(wheel, ws.downloads / wheel.name)
    return ws


def checkout_is_current(ws: Workspace) -> bool:
    try:
        verify_current(ws.checkout, load_pin(ws.pin_file), load_series(ws.patches))
    except KitError:
        return False
    return True


def ensure_checkout(ws: Workspace) -> None:
    """``ws.checkout`` exactly the pin + the series (applied once per copy)."""
    if not checkout_is_current(ws):
        apply = [sys.executable, "-m", "scripts", "apply"]
        done = subprocess.run(apply, cwd=ws.root, capture_output=True, text=True)
        assert done.returncode == 0 and checkout_is_current(ws), done.stdout + done.stderr


def ensure_checkout_and_stock_env(ws: Workspace) -> Path:
    """The stock leg's python, with ``ws.checkout`` exactly the pin + the series."""
    ensure_checkout(ws)
    return legenv.ensure_env(ws, "stock")
