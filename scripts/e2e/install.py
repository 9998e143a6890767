"""The patched vllm-omni, installed so that the runner's own environment stays untouched.

Choice: a venv made by the runner's base python with ``--system-site-packages``.
torch, torch_npu, vllm and vllm-ascend are built against the runner's CANN and
driver and are several GB: the venv sees them instead of reinstalling (or
replacing) them. Into the venv go the pinned release wheel, with ``--no-deps``
(its metadata gives the ``vllm-omni`` command and the vllm plugin entry point),
and then its ``vllm_omni`` package is swapped for a link to the checkout, so the
server runs exactly the patched tree. Deleting ``.work/e2e-venv`` undoes it all.
The venv also carries the determinism hook (scripts/e2e/determinism.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from scripts.e2e import determinism
from scripts.errors import KitError
from scripts.pin import fetch_wheel, load_pin
from scripts.workspace import Workspace


class InstallError(KitError):
    """The e2e venv could not be made."""


def base_python(explicit: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """The runner's python: ``--python``, else the first python3 on PATH outside the active venv
    (nox's)."""
    if explicit:
        return explicit
    active = Path(sys.prefix).resolve() if sys.prefix != sys.base_prefix else None
    for entry in env.get("PATH", "").split(os.pathsep):
        if not entry or (active and Path(entry).resolve().is_relative_to(active)):
            continue
        found = shutil.which("python3", path=entry)
        if found:
            return found
    return None


def pinned_wheel(ws: Workspace) -> Path:
    """The pin's release wheel (cached by apply), digest verified."""
    return fetch_wheel(load_pin(ws.pin_file), ws.downloads)


def _run(cmd: list[str], what: str) -> str:
    done = subprocess.run(cmd, capture_output=True, encoding="utf-8", errors="replace", check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(
            f"{what} failed: {last[:200]}", "see the command above; delete .work/e2e-venv and retry"
        )
    return done.stdout.strip()


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def install(ws: Workspace, python: str, checkout: Path, venv: Path) -> Path:
    """(Re)make the venv with the patched checkout; returns the venv's python."""
    if venv.exists():
        shutil.rmtree(venv)  # rebuilt each invocation: nothing from an older series survives
    _run([python, "-m", "venv", "--system-site-packages", str(venv)], "creating the e2e venv")
    vpy = str(venv_python(venv))
    _run(
        [vpy, "-m", "pip", "install", "--no-deps", "--no-index", str(pinned_wheel(ws))],
        "installing the pinned wheel",
    )
    site = Path(
        _run(
            [vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            "locating site-packages",
        )
    )
    package = site / "vllm_omni"
    shutil.rmtree(package)
    package.symlink_to(checkout / "vllm_omni", target_is_directory=True)
    determinism.install_hook(site)
    where = _run(
        [vpy, "-c", "import vllm_omni, os; print(os.path.realpath(vllm_omni.__file__))"],
        "importing vllm_omni",
    )
    if not Path(where).is_relative_to(checkout.resolve()):
        raise InstallError(
            f"vllm_omni resolves to {where}, not the checkout", "delete .work/e2e-venv and retry"
        )
    return Path(vpy)


def serve_command(venv: Path) -> tuple[str, ...]:
    """The serve command template for the patched install."""
    return (
        str(venv / "bin" / "vllm-omni"),
        "serve",
        "{model}",
        "--omni",
        "--deploy-config",
        "{deploy_config}",
        "--host",
        "{host}",
        "--port",
        "{port}",
    )
