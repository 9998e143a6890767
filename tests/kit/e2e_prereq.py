"""What the e2e tests against vllm-omni's handler need: the patched checkout and the stock leg's env.

On a clean clone the kit's tests run before ``nox -s apply``; these tests then
apply the series themselves (apply refuses to discard local edits, so a
developer's work is never lost) and build or reuse ``.work/envs/stock``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from scripts import checkout
from scripts.errors import KitError
from scripts.legs import legenv
from scripts.pin import load_pin
from scripts.series import load_series
from scripts.workspace import Workspace

KIT = Workspace(Path(__file__).resolve().parents[2])  # the developer's kit: its checkout and stock env


def checkout_is_current() -> bool:
    try:
        checkout.verify_current(KIT.checkout, load_pin(KIT.pin_file), load_series(KIT.patches))
    except KitError:
        return False
    return True


def ensure_checkout() -> None:
    """``KIT.checkout`` exactly the pin + the series (CI runs the kit's tests before `apply`)."""
    if not checkout_is_current():
        apply = [sys.executable, "-m", "scripts", "apply"]
        done = subprocess.run(apply, cwd=KIT.root, capture_output=True, text=True)
        assert done.returncode == 0 and checkout_is_current(), done.stdout + done.stderr


def ensure_checkout_and_stock_env() -> Path:
    """The stock leg's python, with ``KIT.checkout`` exactly the pin + the series."""
    ensure_checkout()
    return legenv.ensure_env(KIT, "stock")
