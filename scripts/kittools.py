"""The kit's own tools, pinned once in ci/kit-tools.txt; noxfile.py and `pr` read their versions here."""

from __future__ import annotations

import re
from pathlib import Path

KIT_TOOLS = Path(__file__).resolve().parent.parent / "ci" / "kit-tools.txt"


def pinned(name: str, tools: Path = KIT_TOOLS) -> str:
    """The `name==version` line for one tool (a clear error when it is not pinned)."""
    match = re.search(rf"(?m)^{re.escape(name)}==\S+", tools.read_text(encoding="utf-8"))
    if not match:
        raise RuntimeError(f"{name} is not pinned in ci/{tools.name}: add `{name}==<version>` there")
    return match[0]


def version(name: str, tools: Path = KIT_TOOLS) -> str:
    return pinned(name, tools).partition("==")[2]
