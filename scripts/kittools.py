"""The kit's own tools, each pinned once in ci/kit-dev-tools.txt or the file it includes (noxfile.py
and `pr` read the pins here), and pip (its index settings: scripts/pipindex.py)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from scripts.errors import KitError

PIN_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def normalize(name: str) -> str:
    """A package name as PEP 503 compares them (and the simple index spells it): runs of -_. are one -,
    lower case."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_name(name: str) -> str:
    """A package name as wheel file names spell it (PEP 427): the normalized name with _ for -."""
    return normalize(name).replace("-", "_")


def pin_lines(tools: Path) -> list[str]:
    """The lines of a requirements file, each `-r FILE` it holds replaced by that file's lines (as pip
    reads it)."""
    lines = []
    for line in tools.read_text(encoding="utf-8").splitlines():
        flag, _, included = line.partition(" ")
        lines += pin_lines(tools.parent / included.strip()) if flag == "-r" else [line]
    return lines


def pinned(name: str, tools: Path) -> str:
    """The `name==version` line for one tool, its name compared normalized (a clear error when it is
    not pinned)."""
    for line in pin_lines(tools):
        if (match := PIN_LINE.match(line)) and normalize(match[1]) == normalize(name):
            return match[0]
    raise RuntimeError(f"{name} is not pinned in ci/{tools.name}: add `{name}==<version>` there")


def version(name: str, tools: Path) -> str:
    return pinned(name, tools).partition("==")[2]


def missing(requirements: Sequence[str]) -> list[str]:
    """The pinned tools this interpreter lacks, by name: any installed version counts (`nox -s kit`
    pins them)."""
    names = dict.fromkeys(m[1] for line in requirements if (m := PIN_LINE.match(line)))
    lacking = []
    for name in names:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            lacking.append(name)
    return lacking


def pip_argv() -> list[str]:
    """pip of the interpreter running the kit: it downloads the pinned wheel.

    uv-made environments (`uvx`, nox's uv backend) have no pip unless asked for; say so in one line.
    """
    if importlib.util.find_spec("pip") is None:
        raise KitError(
            f"pip is not installed for {sys.executable}, which runs the kit (it downloads the "
            "pinned wheel)",
            "run nox from the README's venv (.venv/bin/nox), or add it: uvx --with pip ..., "
            f"or {sys.executable} -m ensurepip",
        )
    return [sys.executable, "-m", "pip"]


# The tiers of the kit's own tests (pytest.ini declares the markers). Both run in parallel
# (pytest-xdist); the heavy one keeps each module on one worker (its servers and leg copies are
# module fixtures): on 2 cores 7.2 min instead of about 11.
HEAVY_MARKERS = ("legs", "e2e", "network")
KIT_TIERS: dict[str, tuple[str, ...]] = {
    # worksteal: with xdist's default (load) a worker's prefetched tests still ran alone after the
    # other worker ran out, 6.5 s at the tier's end on 2 cores; a worker that runs out now takes the
    # other's.
    "default": (
        "-m",
        " and ".join(f"not {m}" for m in HEAVY_MARKERS),
        "-n",
        "auto",
        "--dist",
        "worksteal",
    ),
    "heavy": ("-m", " or ".join(HEAVY_MARKERS), "-n", "auto", "--dist", "loadfile"),
}


def kit_tests_command(tier: str, posargs: Sequence[str]) -> list[str]:
    """pytest's arguments for one tier; each tier keeps its own junit record (.ci/run counts them all)."""
    record = "kit" if tier == "default" else f"kit-{tier}"
    return [
        "pytest",
        "tests/kit",
        *KIT_TIERS[tier],
        f"--junitxml=.work/records/{record}/junit.xml",
        *posargs,
    ]
