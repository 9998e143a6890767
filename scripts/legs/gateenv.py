"""The env of a git tree's gates (scripts/checks/precommit.py): its registry packages the kit's table
does not pin and its local python hooks' additional_dependencies, made with uv once per config
digest under .work/gate-envs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from scripts import gitcmd, pipindex, worklock
from scripts.checks.hooks import CONFIG, HooksError
from scripts.checks.precommit import GateSource
from scripts.legs.legenv import uv_executable
from scripts.report import progress
from scripts.workspace import Workspace

STAMP = "kit-gate-env.txt"  # holds the digest the env was made for, written last


def maker(ws: Workspace) -> Callable[[GateSource], Path]:
    """gate_env for ws, as the lint tools carry it."""
    return lambda source: gate_env(source, ws.work / "gate-envs" / source.digest[:16], ws.locks)


def gate_env(source: GateSource, env: Path, locks: Path) -> Path:
    """The venv of a tree's gates, made once (a stamp holds the digest it was made for)."""
    stamp = env / STAMP
    shown = f".work/{env.parent.name}/{env.name}"
    with worklock.hold(locks / "gate-envs.lock", ".work/gate-envs", say=progress):
        if stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == source.digest:
            progress(f"gate env {shown}: reused (config digest {source.digest[:12]})")
            return env
        uv = uv_executable()
        if uv is None:
            raise HooksError(
                "uv is not installed, and the tree's gates need an env of their own",
                "pip install -r ci/kit-tools.txt (it brings uv), or run through nox",
            )
        shutil.rmtree(env, ignore_errors=True)
        environ = {**os.environ, **pipindex.installer_env(os.environ)}
        steps = [[uv[0], "venv", "--quiet", "--python", sys.executable, str(env)]]
        if source.requirements:
            steps.append(
                [
                    uv[0],
                    "pip",
                    "install",
                    "--quiet",
                    "--python",
                    str(env / "bin" / "python"),
                    *source.requirements,
                ]
            )
        progress(
            f"gate env {shown}: {', '.join(source.requirements) or 'no packages'} (made once per "
            "config)"
        )
        for argv in steps:
            done = subprocess.run(argv, capture_output=True, text=True, env=environ)
            if done.returncode != 0:
                shutil.rmtree(env, ignore_errors=True)
                raise HooksError(
                    f"cannot make the gate env: {gitcmd.last_line(done.stderr, done.stdout)}",
                    f"check the registry and the additional_dependencies of the tree's {CONFIG}",
                )
        stamp.write_text(f"{source.digest}\n", encoding="utf-8")
    return env
