"""ruff at the edge: the executable resolved once, run with a clean home, its findings as the kit's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from scripts import childenv
from scripts.checks.rules import Finding
from scripts.errors import KitError
from scripts.gitcmd import last_line


class RuffError(KitError):
    """The ruff executable cannot be found or run."""


def resolve_ruff(ruff: str) -> str:
    """The absolute path of the ruff to run, resolved once from the caller's folder: a path (relative
    to the working directory, as a shell would read it) or a name on PATH. Every later call runs in
    other folders."""
    if os.sep in ruff or (os.altsep and os.altsep in ruff):
        path = os.path.abspath(os.path.expanduser(ruff))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise RuffError(
                f"--ruff {ruff}: no executable file at {path}",
                "pass the path of a ruff executable (e.g. .venv/bin/ruff) or a name on PATH",
            )
        return path
    found = shutil.which(ruff)
    if found is None:
        raise RuffError(
            f"--ruff {ruff}: not found on PATH",
            "use nox -s lint, or pip install -r ci/kit-dev-tools.txt, or pass --ruff PATH",
        )
    return os.path.abspath(found)


def run_ruff(
    ruff: str, args: list[str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """ruff (an absolute path from resolve_ruff) with args; exit codes are the caller's to judge."""
    with tempfile.TemporaryDirectory(prefix="kit-ruff-home-") as home:
        env = childenv.tool_env(Path(home))
        return subprocess.run(
            childenv.encoded_argv([ruff, *args]),
            cwd=cwd,
            env=childenv.encoded_env(env),
            capture_output=True,
            encoding="utf-8",
            errors="replace",
        )


def config_args(config: Path | None) -> list[str]:
    """ruff's --config (the kit's copy of upstream's settings); none: ruff finds the tree's own."""
    return ["--config", str(config)] if config else []


def ruff_check(ruff: str, config: Path | None, tree: Path, files: list[str]) -> list[Finding]:
    argv = ["check", *config_args(config), "--output-format", "json", "--no-cache", *files]
    proc = run_ruff(ruff, argv, tree)
    if proc.returncode not in (0, 1):
        raise RuffError(
            f"ruff check failed on .work/{tree.name}: {last_line(proc.stderr, proc.stdout)}",
            "read ruff's message above; --ruff must be ruff itself "
            "(the version upstream pins is in ci/kit-dev-tools.txt)",
        )
    return [
        Finding(
            str(Path(r["filename"]).relative_to(tree)),
            r["location"]["row"],
            f"ruff-check {r['code']}" if r["code"] else "ruff-check",
            r["message"],
            (r.get("fix") or {}).get("message") or "see ruff's rule docs",
        )
        for r in json.loads(proc.stdout or "[]")
    ]


def ruff_format_unclean(ruff: str, config: Path | None, tree: Path, files: list[str]) -> list[str]:
    """Files `ruff format --check` would reformat."""
    if not files:
        return []
    proc = run_ruff(ruff, ["format", "--check", *config_args(config), "--no-cache", *files], tree)
    return [
        line.split(" ", 2)[-1]
        for line in proc.stdout.splitlines()
        if line.startswith("Would reformat: ")
    ]


def ruff_version(ruff: str) -> str:
    proc = run_ruff(ruff, ["--version"])
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) < 2 or words[0] != "ruff":
        raise RuffError(
            f"--ruff {ruff} is not ruff (`{ruff} --version` said "
            f"{last_line(proc.stderr, proc.stdout)!r})",
            "pass the path of a ruff executable or a name on PATH",
        )
    return words[-1]
