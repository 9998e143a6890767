"""The chunk-interval plot of an e2e or A/B evidence folder (``chunk-intervals.png``).

One line per run (e2e) or trial (A/B, one colour per variant) of the time
between consecutive chunks per chunk index, from ``run-N/benchmark.json``; the
band the steady median is judged against; the steady window shaded (the chunks
``metrics.steady_from_benchmark`` pools: index >= warmup_chunks and > 0) and
each run's or variant's steady median over it, dashed.
Chunk 0 is not drawn: its interval is the time to first chunk.

The PNG is deterministic (fixed size and dpi, matplotlib's default style, no
version or time in its metadata). Drawing it never costs evidence: any failure
becomes one line in the summary, and a run without a readable benchmark.json
is named on the figure and in its caption.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PNG = "chunk-intervals.png"
SIZE_IN = (10.0, 5.5)
DPI = 100  # with SIZE_IN: 1000 x 550 pixels
BAND_COLOUR, WINDOW_COLOUR, MISSING_COLOUR = "tab:green", "0.85", "tab:red"


@dataclass(frozen=True)
class Planned:
    """A run the invocation meant to make, and where its benchmark JSON would be."""

    label: str  # "run 2", "trial 3 (B)"
    group: str  # legend entry and colour: the run itself in an e2e, the variant in an A/B
    status: str  # its verdict; "not run" when it never started
    path: Path


@dataclass(frozen=True)
class Line:
    label: str
    group: str
    chunks: tuple[int, ...]
    intervals_ms: tuple[float, ...]


@dataclass(frozen=True)
class Figure:
    """What the PNG shows, computed from the runs' documents alone."""

    title: str
    lines: tuple[Line, ...]
    missing: tuple[str, ...]  # "run 2 (server_died: no benchmark.json)"
    band_ms: tuple[float, float]
    steady: tuple[int, int] | None  # first and last steady chunk index drawn; None if none is
    medians: dict[str, float]  # group -> median of its steady intervals, the figure the band judges


# ---- pure ---------------------------------------------------------------------------------------


def one_line(text: str) -> str:
    return " ".join(text.split())


def session_lines(document: Mapping[str, Any], label: str, group: str) -> list[Line]:
    """One line per measured session; a document without the fields the clients write is a ValueError."""
    sessions = document.get("sessions")
    if not isinstance(sessions, list):
        raise ValueError("no sessions list")
    lines = []
    for number, session in enumerate(sessions, start=1):
        try:
            points = sorted(
                (int(c["index"]), float(c["inter_arrival_ms"])) for c in session["chunks"]
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                f"session {number}'s chunks lack index/inter_arrival_ms ({error})"
            ) from None
        drawn = [(i, ms) for i, ms in points if i > 0]
        if drawn:
            name = label if len(sessions) == 1 else f"{label}, session {number}"
            lines.append(
                Line(name, group, tuple(i for i, _ in drawn), tuple(ms for _, ms in drawn))
            )
    if not lines:
        raise ValueError("no chunk after chunk 0")
    return lines


def figure(
    title: str,
    runs: Sequence[tuple[Planned, Mapping[str, Any] | None, str]],
    band_ms: tuple[float, float],
    warmup_chunks: int,
) -> Figure:
    """``runs``: (planned run, its document or None, why it has none); the steady window spans the
    chunks drawn."""
    lines: list[Line] = []
    missing: list[str] = []
    for planned, document, why in runs:
        if document is None and planned.status == "not run":
            missing.append(f"{planned.label} (not run)")
            continue
        try:
            if document is None:
                raise ValueError(why)
            lines += session_lines(document, planned.label, planned.group)
        except ValueError as error:
            missing.append(f"{planned.label} ({planned.status}: {one_line(str(error))})")
    first = max(warmup_chunks, 1)
    last = max((c for line in lines for c in line.chunks), default=0)
    pooled: dict[str, list[float]] = {}
    for line in lines:
        steady = [ms for c, ms in zip(line.chunks, line.intervals_ms, strict=True) if c >= first]
        pooled.setdefault(line.group, []).extend(steady)
    medians = {group: statistics.median(values) for group, values in pooled.items() if values}
    return Figure(
        title,
        tuple(lines),
        tuple(missing),
        band_ms,
        (first, last) if last >= first else None,
        medians,
    )


def group_label(fig: Figure, group: str) -> str:
    """A group as the legend and the caption name it: with its steady median when it has one."""
    median = fig.medians.get(group)
    return group if median is None else f"{group} (steady median {median:.1f} ms)"


def caption(fig: Figure) -> list[str]:
    """The summary's lines about the plot: the image link and what it shows."""
    drawn = [group_label(fig, group) for group in dict.fromkeys(line.group for line in fig.lines)]
    lo, hi = fig.band_ms
    window = (
        "no steady chunk was drawn"
        if fig.steady is None
        else f"chunks {fig.steady[0]}-{fig.steady[1]}"
    )
    text = (
        f"Chunk intervals (`{PNG}`): time between consecutive chunks per chunk index "
        f"(chunk 0, the time to first chunk, is not drawn) for {'; '.join(drawn) or 'no run'}; "
        f"dashed: each one's steady median; green: the band {lo:g}-{hi:g} ms the steady median is "
        "judged against; "
        f"grey: the steady window, {window}."
    )
    if fig.missing:
        text += " Missing: " + "; ".join(fig.missing) + "."
    return [f"![{fig.title}]({PNG})", "", text]


def e2e_runs(folder: Path, runs: Sequence[Mapping[str, Any]], planned: int) -> list[Planned]:
    """Runs 1..planned of an e2e; one past the first failure was never started."""
    status = {int(r["index"]): str(r["status"]) for r in runs}
    return [
        Planned(
            f"run {i}", f"run {i}", status.get(i, "not run"), folder / f"run-{i}" / "benchmark.json"
        )
        for i in range(1, planned + 1)
    ]


def ab_trials(
    folder: Path,
    order: Sequence[str],
    trials: Sequence[Mapping[str, Any]],
    names: Mapping[str, str],
) -> list[Planned]:
    """Trials in ABBA ``order``; a variant's legend entry names its revision and its trials."""
    status = {int(t["trial"]): str(t["status"]) for t in trials}
    numbers = {
        v: ", ".join(str(i) for i, w in enumerate(order, start=1) if w == v)
        for v in dict.fromkeys(order)
    }
    return [
        Planned(
            f"trial {i} ({v})",
            f"{v} = {names[v]}: trials {numbers[v]}",
            status.get(i, "not run"),
            folder / f"run-{i}" / "benchmark.json",
        )
        for i, v in enumerate(order, start=1)
    ]


# ---- edges
# ----------------------------------------------------------------------------------------


def load(path: Path) -> tuple[dict[str, Any] | None, str]:
    """(document, "") or (None, why not)."""
    try:
        return dict(json.loads(path.read_text(encoding="utf-8"))), ""
    except FileNotFoundError:
        return None, f"no {path.name}"
    except (OSError, UnicodeDecodeError, ValueError, TypeError) as error:
        return None, f"{path.name} unreadable: {error}"


def render(fig: Figure) -> bytes:
    """The PNG's bytes: Agg canvas, matplotlib's default style whatever the user's matplotlibrc says."""
    # Imported here: only a drawing pays matplotlib's import, and a missing install is one summary
    # line.
    import matplotlib.style
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as MplFigure

    with matplotlib.style.context("default"):
        canvas = FigureCanvasAgg(MplFigure(figsize=SIZE_IN, dpi=DPI))
        ax = canvas.figure.add_axes((0.08, 0.3, 0.9, 0.6))
        colours = {
            g: f"C{n % 10}" for n, g in enumerate(dict.fromkeys(line.group for line in fig.lines))
        }
        labelled: set[str] = set()
        for line in fig.lines:
            label = None if line.group in labelled else group_label(fig, line.group)
            ax.plot(
                line.chunks,
                line.intervals_ms,
                marker="o",
                markersize=3,
                linewidth=1,
                alpha=0.6,
                color=colours[line.group],
                label=label,
            )
            labelled.add(line.group)
        # Drawn after the runs: the legend's first column names the runs, the second the band and
        # the window.
        lo, hi = fig.band_ms
        ax.axhspan(
            lo, hi, color=BAND_COLOUR, alpha=0.15, label=f"band {lo:g}-{hi:g} ms (steady median)"
        )
        if fig.steady is not None:  # medians exist only with a steady window
            first, last = fig.steady
            ax.axvspan(
                first - 0.5,
                last + 0.5,
                color=WINDOW_COLOUR,
                alpha=0.5,
                zorder=0,
                label=f"steady window: chunks {first}-{last}",
            )
            for group, median in fig.medians.items():
                ax.hlines(
                    median,
                    first - 0.5,
                    last + 0.5,
                    colors=colours[group],
                    linestyles="--",
                    linewidth=2,
                    zorder=3,
                )
        if not fig.lines:
            ax.text(
                0.5,
                0.5,
                "no chunk intervals to draw",
                transform=ax.transAxes,
                ha="center",
                va="center",
            )
        ax.set_title(fig.title)
        ax.set_xlabel("chunk index")
        ax.set_ylabel("interval since previous chunk (ms)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(True, alpha=0.3)
        ax.legend(
            loc="upper left", bbox_to_anchor=(0.0, -0.13), ncol=2, fontsize="small", frameon=False
        )
        if fig.missing:
            note = "missing: " + "; ".join(fig.missing)
            canvas.figure.text(0.01, 0.02, note, color=MISSING_COLOUR, fontsize="small", wrap=True)
        out = io.BytesIO()
        canvas.print_png(out, metadata={"Software": None})
    return out.getvalue()


def section(
    folder: Path,
    title: str,
    planned: Sequence[Planned],
    band_ms: tuple[float, float],
    warmup_chunks: int,
) -> list[str]:
    """Draw ``folder/chunk-intervals.png`` and return the summary's lines about it, or one line saying
    why not."""
    partial = folder / f".{PNG}.partial"  # written, then renamed: a reader never sees half a PNG
    try:
        fig = figure(title, [(p, *load(p.path)) for p in planned], band_ms, warmup_chunks)
        partial.write_bytes(render(fig))
        os.replace(partial, folder / PNG)
    except ImportError as error:
        return [
            f"Chunk-interval plot not made: {one_line(str(error))} -- install the kit's tools: "
            "pip install -r ci/kit-dev-tools.txt"
        ]
    except Exception as error:  # noqa: BLE001 -- the plot is a view of evidence already written: never lose that
        return [
            f"Chunk-interval plot not made: {type(error).__name__}: {one_line(str(error))} -- the "
            "intervals "
            "are in run-N/benchmark.json (sessions[].chunks[].inter_arrival_ms)"
        ]
    finally:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
    return caption(fig)
