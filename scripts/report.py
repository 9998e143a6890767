"""Output shared by every session: progress lines, summary tables, and the kit's one Markdown table."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


class Kept(io.TextIOBase):
    """A text stream whose write failures (a closed pipe, a full /dev/full) are kept, not raised: the
    kit's output is how it reports its work, never what stops it half way (invariant 10). Output
    after a failure is dropped."""

    def __init__(self, stream: io.TextIOBase) -> None:
        super().__init__()
        self.stream = stream
        self.failure: OSError | None = None

    def _do(self, call: object) -> None:
        if self.failure is None:
            try:
                call()  # type: ignore[operator]
            except OSError as exc:
                self.failure = exc

    def write(self, text: str) -> int:
        self._do(lambda: self.stream.write(text))
        return len(text)

    def flush(self) -> None:
        self._do(self.stream.flush)

    def fileno(self) -> int:
        return self.stream.fileno()

    def isatty(self) -> bool:
        return self.stream.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


@dataclass
class OutputFailures:
    """What went wrong writing the output of one command: {"stdout": error, ...}."""

    failed: dict[str, OSError] = field(default_factory=dict)

    def line(self) -> str:
        name, exc = next(iter(self.failed.items()))
        return f"its output could not be written ({exc.strerror or exc} on {name})"


@contextlib.contextmanager
def kept_output() -> Iterator[OutputFailures]:
    """sys.stdout and sys.stderr as Kept streams for the block, then as they were; what failed is said
    after.

    A stream that failed is pointed at /dev/null as the block ends, so that the interpreter's own
    last flush does not fail once more (Python's exit 120 and its 'Exception ignored' lines)."""
    found = OutputFailures()
    saved = sys.stdout, sys.stderr
    # None: the fd was closed at start
    out, err = (Kept(s) if s is not None else None for s in saved)
    sys.stdout, sys.stderr = out or saved[0], err or saved[1]  # type: ignore[assignment]
    try:
        yield found
    finally:
        sys.stdout, sys.stderr = saved
        for name, kept in (("stdout", out), ("stderr", err)):
            if kept is not None and kept.failure is not None:
                found.failed[name] = kept.failure
                with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):
                    null = os.open(os.devnull, os.O_WRONLY)
                    os.dup2(null, kept.fileno())
                    os.close(null)


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
    """One patch of a series tried (apply, --continue, rebase, pr --onto): `[i/total] name: outcome
    (detail)`."""
    return f"[{i}/{total}] {name}: {outcome}{f' ({detail})' if detail else ''}"


def outcomes_table(rows: Sequence[tuple[str, str, str]], heading: str = "outcome") -> str:
    """The closing table of a series tried: one numbered row per patch (name, outcome, detail)."""
    return table(["#", "patch", heading, "detail"], [(i, *row) for i, row in enumerate(rows, 1)])


def fail(message: str) -> None:
    print(f"kit: error: {message}", file=sys.stderr, flush=True)
