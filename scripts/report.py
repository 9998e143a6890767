"""Output shared by every session: progress lines, summary tables, and the kit's one Markdown table."""

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


def markdown_table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table (every one the kit writes: reports, summaries, the PR body, the README's).

    A `|` inside a cell is escaped, so that it stays one cell.
    """

    def line(cells: Sequence[object]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(headers), "|" + "---|" * len(headers), *(line(row) for row in rows)])


def step(i: int, total: int, name: str, outcome: str, detail: str = "") -> str:
    """One patch of a series tried (apply, --continue, rebase, pr --onto): `[i/total] name: outcome (detail)`."""
    return f"[{i}/{total}] {name}: {outcome}{f' ({detail})' if detail else ''}"


def outcomes_table(rows: Sequence[tuple[str, str, str]], heading: str = "outcome") -> str:
    """The closing table of a series tried: one numbered row per patch (name, outcome, detail)."""
    return table(["#", "patch", heading, "detail"], [(i, *row) for i, row in enumerate(rows, 1)])


def fail(message: str) -> None:
    print(f"kit: error: {message}", file=sys.stderr, flush=True)
