"""Plain-text output shared by every session: progress lines and summary tables."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def progress(message: str) -> None:
    """One line of progress, flushed at once so long work shows where it is."""
    print(f"kit: {message}", flush=True)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width table a person can read at a glance."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def fail(message: str) -> None:
    print(f"kit: error: {message}", file=sys.stderr, flush=True)
