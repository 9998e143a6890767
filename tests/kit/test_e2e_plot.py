"""The chunk-interval plot (scripts/e2e/plot.py): its data from pure functions on known values, the PNG
from synthetic benchmark JSONs, and summary.md's plot faults (one line each, nothing lost), written
as `nox -s e2e` does."""

from __future__ import annotations

import statistics
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import captured_fds
from e2e_prereq import PARSING

from scripts.e2e import evidence, metrics, plot
from scripts.e2e.ab import abba, steady_intervals
from scripts.e2e.config import parse_args
from scripts.e2e.evidence import RunRecord

pytest.importorskip("matplotlib", reason="the plot needs matplotlib (ci/kit-dev-tools.txt)")

BAND = (50.0, 400.0)
WARMUP = 2
CHUNKS = 8
OK2 = (RunRecord(1, "ok"), RunRecord(2, "ok"))


def chunk_list(intervals_ms: list[float]) -> list[dict[str, Any]]:
    return [
        {"index": i, "inter_arrival_ms": ms, "num_frames": 12 if i else 9}
        for i, ms in enumerate(intervals_ms)
    ]


def benchmark(*sessions: list[float]) -> dict[str, Any]:
    """A benchmark JSON as the clients write it, reduced to what the plot and metrics read."""
    return {
        "config": {"target_fps": 16.0},
        "sessions": [{"chunks": chunk_list(s)} for s in sessions],
    }


def run_intervals(run: int) -> list[float]:
    """Known intervals: chunk 0 is a slow first chunk, then 300 + 10*run + chunk index ms."""
    return [900.0, *(300.0 + 10 * run + i for i in range(1, CHUNKS))]


def planned(label: str, status: str = "ok") -> plot.Planned:
    return plot.Planned(label, label, status, Path("unused"))


def test_figure_draws_intervals_after_chunk_zero_the_band_the_steady_window_and_a_line_per_session() -> (
    None
):
    runs = [(planned(f"run {r}"), benchmark(run_intervals(r)), "") for r in (1, 2)]
    fig = plot.figure("t", runs, BAND, WARMUP)
    assert [line.label for line in fig.lines] == ["run 1", "run 2"]
    assert fig.lines[0].chunks == tuple(range(1, CHUNKS))
    assert fig.lines[1].intervals_ms == tuple(320.0 + i for i in range(1, CHUNKS))
    assert fig.band_ms == BAND and fig.missing == ()
    # sessions are lines of their own, and chunks are ordered by index
    document = benchmark([900.0, 301.0, 302.0], [800.0, 311.0, 312.0])
    document["sessions"][1]["chunks"].reverse()
    fig = plot.figure("t", [(planned("run 1"), document, "")], BAND, 1)
    assert [(line.label, line.chunks, line.intervals_ms) for line in fig.lines] == [
        ("run 1, session 1", (1, 2), (301.0, 302.0)),
        ("run 1, session 2", (1, 2), (311.0, 312.0)),
    ]


@pytest.mark.parametrize(("warmup", "window"), [(0, (1, 7)), (1, (1, 7)), (7, (7, 7)), (8, None)])
def test_steady_window_is_the_chunks_the_verdict_pools(
    warmup: int, window: tuple[int, int] | None
) -> None:
    # the shaded chunks are exactly those metrics.steady_from_benchmark judges
    document = benchmark(run_intervals(1))
    fig = plot.figure("t", [(planned("run 1"), document, "")], BAND, warmup)
    assert fig.steady == window
    shaded = (
        []
        if fig.steady is None
        else [i for i in fig.lines[0].chunks if fig.steady[0] <= i <= fig.steady[1]]
    )
    steady = metrics.steady_from_benchmark(document, warmup)
    assert len(shaded) == steady.count
    assert fig.medians.get("run 1") == steady.median_ms


def test_a_variants_median_is_the_ab_summarys_pooled_median() -> None:
    order = abba(1)
    documents = {i: benchmark(run_intervals(i)) for i in range(1, len(order) + 1)}
    trials = plot.ab_trials(Path("f"), order, [], {"A": "v1", "B": "HEAD"})
    fig = plot.figure(
        "t", [(p, documents[i], "") for i, p in enumerate(trials, start=1)], BAND, WARMUP
    )
    for variant, group in (("A", "A = v1: trials 1, 4"), ("B", "B = HEAD: trials 2, 3")):
        pooled = [
            ms
            for i, v in enumerate(order, start=1)
            if v == variant
            for ms in steady_intervals(documents[i], WARMUP)
        ]
        assert fig.medians[group] == statistics.median(pooled)


def write_runs(folder: Path, runs: int) -> None:
    for r in range(1, runs + 1):
        (folder / f"run-{r}").mkdir(parents=True)
        evidence.write_json(folder / f"run-{r}" / "benchmark.json", benchmark(run_intervals(r)))


def test_ab_plot_names_the_failed_trial_and_those_never_run(tmp_path: Path) -> None:
    # An A/B stops at its first failed trial: the plot draws the trials before it and names the
    # rest.
    write_runs(tmp_path, 1)
    trials = plot.ab_trials(
        tmp_path,
        abba(1),
        [{"trial": 1, "status": "ok"}, {"trial": 2, "status": "server_died"}],
        {"A": "v1", "B": "HEAD"},
    )
    lines = plot.section(tmp_path, "A/B (standin)", trials, BAND, WARMUP)
    assert lines[-1].endswith(
        "Missing: trial 2 (B) (server_died: no benchmark.json); trial 3 (B) (not run); trial 4 (A) "
        "(not run)."
    )
    assert "for A = v1: trials 1, 4 (steady median 314.5 ms); dashed" in lines[-1]
    assert (tmp_path / plot.PNG).is_file()


WRITE_SUMMARY = """
import json, sys
from pathlib import Path
from scripts.e2e import evidence
def write(folder):
    summary, manifest = (json.loads((folder / name).read_text()) for name in ("summary.json", "manifest.json"))
    (folder / "summary.md").write_text(evidence.summary_markdown(summary, manifest))
if __name__ == "__main__":
    write(Path(sys.argv[1]))
"""


def e2e_folder(tmp_path: Path, records: list[RunRecord]) -> Path:
    """An e2e evidence folder of two planned stand-in runs: manifest, summary.json, each record's JSON."""
    folder = tmp_path / "e2e"
    config = parse_args(
        PARSING,
        ["--standin", "--chunks", str(CHUNKS), "--warmup-chunks", str(WARMUP), "--runs", "2"],
    )
    folder.mkdir()
    manifest = {
        "mode": "standin",
        "config": asdict(config),
        "client": "kit",
        "versions": {},
        "kit": {},
    }
    evidence.write_json(folder / "manifest.json", manifest)
    write_runs(folder, len(records))
    summary = evidence.summary_document(
        verdict="pass",
        reason="r",
        mode="standin",
        band_ms=BAND,
        runs=records,
        determinism=None,
        folder=folder,
    )
    evidence.write_json(folder / "summary.json", summary)
    return folder


def write_summary(folder: Path, *python_flags: str) -> subprocess.CompletedProcess[str]:
    """summary.md as `nox -s e2e` writes it: in this process (matplotlib imported once, not 3 s a row),
    or in a python of its own for a row that needs one (flags such as -S)."""
    if python_flags:
        cmd = [sys.executable, *python_flags, "-c", WRITE_SUMMARY, str(folder)]
        return subprocess.run(cmd, cwd=PARSING.root, capture_output=True, text=True, timeout=300)
    here: dict[str, Any] = {"__name__": "write_summary"}
    exec(WRITE_SUMMARY, here)  # the same lines, as a module of this process
    code = 1
    with captured_fds() as out:
        try:
            here["write"](folder)
            code = 0
        except Exception:  # noqa: BLE001 -- what the separate python would have printed and exited 1 with
            traceback.print_exc()
    return subprocess.CompletedProcess(["write-summary"], code, out.stdout, out.stderr)


def evidence_files(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_summary_md_links_a_byte_stable_png_of_the_fixed_size_with_a_caption(
    tmp_path: Path,
) -> None:
    from matplotlib.image import imread

    folder = e2e_folder(tmp_path, [RunRecord(1, "ok"), RunRecord(2, "ok")])
    done = write_summary(folder)
    assert done.returncode == 0, done.stderr
    text = (folder / "summary.md").read_text()
    assert f"![e2e (standin): chunk intervals per run]({plot.PNG})" in text.splitlines()
    caption = next(line for line in text.splitlines() if line.startswith("Chunk intervals"))
    # 300 + 10 * run + the median of chunks 2..7
    assert "run 1 (steady median 314.5 ms); run 2 (steady median 324.5 ms)" in caption
    assert (
        "band 50-400 ms" in caption
        and f"chunks {WARMUP}-{CHUNKS - 1}" in caption
        and "Missing" not in caption
    )
    first = (folder / plot.PNG).read_bytes()
    width, height = (round(side * plot.DPI) for side in plot.SIZE_IN)
    assert imread(folder / plot.PNG).shape[:2] == (height, width)
    assert b"matplotlib" not in first.lower()  # no version in the metadata: same data, same bytes
    assert write_summary(folder).returncode == 0 and (folder / plot.PNG).read_bytes() == first
    files = ["manifest.json", plot.PNG, "run-1", "run-2", "summary.json", "summary.md"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)  # no partial file left


def edit_run_1(change: Callable[[str], str]) -> Callable[[Path], None]:
    def setup(folder: Path) -> None:
        path = folder / "run-1" / "benchmark.json"
        path.write_text(change(path.read_text()))

    return setup


@dataclass(frozen=True)
class Row:
    name: str
    records: tuple[RunRecord, ...]
    setup: Callable[[Path], None]
    needle: str
    png: bool  # whether the PNG is drawn (from what exists)
    python_flags: tuple[str, ...] = ()


# -S: no site-packages
ROWS = [
    Row(
        "failed run without JSON",
        (RunRecord(1, "ok"), RunRecord(2, "server_died")),
        lambda f: (f / "run-2" / "benchmark.json").unlink(),
        "Missing: run 2 (server_died: no benchmark.json).",
        png=True,
    ),
    Row(
        "run after the failure never started",
        (RunRecord(1, "server_died"),),
        lambda _f: None,
        "Missing: run 2 (not run).",
        png=True,
    ),
    Row(
        "truncated JSON",
        OK2,
        edit_run_1(lambda t: t[: len(t) // 2]),
        "Missing: run 1 (ok: benchmark.json unreadable: ",
        png=True,
    ),
    Row(
        "JSON without sessions",
        OK2,
        edit_run_1(lambda t: t.replace('"sessions"', '"other"')),
        "Missing: run 1 (ok: no sessions list).",
        png=True,
    ),
    Row(
        "chunk without its interval",
        OK2,
        edit_run_1(lambda t: t.replace('"inter_arrival_ms"', '"x"', 1)),
        "Missing: run 1 (ok: session 1's chunks lack index/inter_arrival_ms ('inter_arrival_ms')).",
        png=True,
    ),
    Row(
        "PNG path taken by a folder",
        OK2,
        lambda f: (f / plot.PNG).mkdir(),
        "Chunk-interval plot not made: IsADirectoryError: ",
        png=False,
    ),
    Row(
        "python without matplotlib",
        OK2,
        lambda _f: None,
        "Chunk-interval plot not made: No module named 'matplotlib' -- install the kit's tools: "
        "pip install -r ci/kit-dev-tools.txt",
        png=False,
        python_flags=("-S",),
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_plot_fault_row(row: Row, tmp_path: Path) -> None:
    folder = e2e_folder(tmp_path, list(row.records))
    row.setup(folder)
    before = evidence_files(folder)
    done = write_summary(folder, *row.python_flags)
    out = done.stdout + done.stderr
    assert done.returncode == 0 and "Traceback" not in out, out
    text = (folder / "summary.md").read_text()
    # the rest of the summary is there
    assert text.startswith("## Test Result") and "Environment and logs" in text
    said = [line for line in text.splitlines() if row.needle in line]
    assert len(said) == 1, text
    # the thing, then the fix
    assert not said[0].startswith("Chunk-interval plot not made") or " -- " in said[0]
    assert (folder / plot.PNG).is_file() is row.png
    after = evidence_files(folder)
    # nothing lost
    assert {k: v for k, v in after.items() if k not in ("summary.md", plot.PNG)} == before
