"""Chunk-cadence arithmetic, with the definitions of upstream's realtime benchmark.

Steady state: chunks whose index >= warmup_chunks (the attention window has
saturated), intervals of chunk index > 0. RTF = wall seconds / video seconds
(lower is better, < 1 is real time).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Chunk:
    index: int
    arrival_s: float
    inter_arrival_s: float
    byte_length: int
    num_frames: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "arrival_s": self.arrival_s,
            "inter_arrival_ms": self.inter_arrival_s * 1000.0,
            "byte_length": self.byte_length,
            "num_frames": self.num_frames,
        }


def percentile(values: Sequence[float], point: int) -> float:
    """The ``point``-th percentile (1..99), linear between closest ranks (numpy's default), so short
    runs have a p99."""
    if not values:
        raise ValueError("percentile of no values")
    if len(values) == 1:
        return float(values[0])
    return statistics.quantiles(values, n=100, method="inclusive")[point - 1]


def summary_ms(values_ms: Sequence[float]) -> dict[str, float]:
    if not values_ms:
        return {}
    return {
        "count": float(len(values_ms)),
        "mean_ms": statistics.fmean(values_ms),
        "median_ms": statistics.median(values_ms),
        "std_ms": statistics.stdev(values_ms) if len(values_ms) > 1 else 0.0,
        "min_ms": min(values_ms),
        "p90_ms": percentile(values_ms, 90),
        "p95_ms": percentile(values_ms, 95),
        "p99_ms": percentile(values_ms, 99),
        "max_ms": max(values_ms),
    }


def steady_chunk_deadline_ms(fps: float) -> float:
    """A steady chunk is 12 frames of video: arriving slower than that is behind real time."""
    return 12 / fps * 1000.0


def playback(chunks: Sequence[Chunk], fps: float, buffer_chunks: int = 1) -> dict[str, Any]:
    """Simulated viewer: starts after ``buffer_chunks`` arrived, plays at ``fps``, stalls on a late
    chunk."""
    if not chunks:
        return {
            "underrun_count": 0,
            "total_stall_ms": 0.0,
            "playback_span_s": 0.0,
            "stall_ratio": 0.0,
        }
    start = chunks[min(buffer_chunks, len(chunks)) - 1].arrival_s
    clock, stalls, stall_s, first = start, 0, 0.0, None
    for chunk in chunks:
        if chunk.arrival_s > clock:
            stalls, stall_s = stalls + 1, stall_s + chunk.arrival_s - clock
            first = chunk.index if first is None else first
            clock = chunk.arrival_s
        clock += chunk.num_frames / fps
    span = clock - start
    return {
        "underrun_count": stalls,
        "total_stall_ms": stall_s * 1000.0,
        "playback_span_s": span,
        "stall_ratio": stall_s / span if span > 0 else 0.0,
        "first_underrun_chunk": first,
        "buffer_chunks": buffer_chunks,
    }


def session_metrics(
    chunks: Sequence[Chunk], *, fps: float, warmup_chunks: int, ttfc_s: float | None, wall_s: float
) -> dict[str, Any]:
    """One session's metrics under upstream's field names."""
    steady = [c for c in chunks if c.index >= warmup_chunks and c.index > 0]
    steady_wall = sum(c.inter_arrival_s for c in steady)
    steady_video = sum(c.num_frames for c in steady) / fps
    frames = sum(c.num_frames for c in chunks)
    video_s = frames / fps
    metrics: dict[str, Any] = {
        "chunks_received": len(chunks),
        "warmup_chunks": warmup_chunks,
        "steady_chunks": len(steady),
        "steady_state_reached": bool(steady),
        "total_frames": frames,
        "total_bytes": sum(c.byte_length for c in chunks),
        "video_seconds": video_s,
        "wall_seconds": wall_s,
        "video_rtf": wall_s / video_s if video_s else 0.0,
        "video_rtfx": video_s / wall_s if wall_s else 0.0,
        "frames_per_second": frames / wall_s if wall_s else 0.0,
        "chunk_deadline_ms": steady_chunk_deadline_ms(fps),
        "interval_all": summary_ms([c.inter_arrival_s * 1000.0 for c in chunks[1:]]),
        "interval_steady": summary_ms([c.inter_arrival_s * 1000.0 for c in steady]),
        "playback": playback(chunks, fps),
    }
    if ttfc_s is not None:
        metrics["ttfc_ms"] = ttfc_s * 1000.0
    if steady:
        metrics["steady_video_rtf"] = steady_wall / steady_video if steady_video else 0.0
        metrics["steady_video_rtfx"] = steady_video / steady_wall if steady_wall else 0.0
    return metrics


@dataclass(frozen=True)
class Steady:
    """The figures a run is judged on, pooled over its measured sessions.

    Two RTFs, not to be confused: ``rtf`` (steady RTF) is the sum of the steady
    intervals over the steady chunks' video seconds; ``session_rtf`` is a whole
    session's wall time (first chunk included) over its video seconds, averaged
    over the measured sessions. Only the median is judged against the band.
    """

    count: int
    median_ms: float | None
    p99_ms: float | None
    mean_ms: float | None
    rtf: float | None
    session_rtf: float | None


def steady_from_benchmark(document: Mapping[str, Any], warmup_chunks: int) -> Steady:
    """Recompute steady figures from a benchmark JSON's per-chunk records (either client's)."""
    fps = float(document.get("config", {}).get("target_fps") or document["workload"]["fps"])
    intervals_ms: list[float] = []
    frames = 0
    session_rtfs = []
    for session in document.get("sessions", []):
        if session.get("metrics", {}).get("video_rtf"):
            session_rtfs.append(float(session["metrics"]["video_rtf"]))
        for chunk in session.get("chunks", []):
            if int(chunk["index"]) >= warmup_chunks and int(chunk["index"]) > 0:
                intervals_ms.append(float(chunk["inter_arrival_ms"]))
                frames += int(chunk["num_frames"])
    session_rtf = statistics.fmean(session_rtfs) if session_rtfs else None
    if not intervals_ms:
        return Steady(0, None, None, None, None, session_rtf)
    rtf = (sum(intervals_ms) / 1000.0) / (frames / fps) if frames else None
    return Steady(
        count=len(intervals_ms),
        median_ms=statistics.median(intervals_ms),
        p99_ms=percentile(intervals_ms, 99),
        mean_ms=statistics.fmean(intervals_ms),
        rtf=rtf,
        session_rtf=session_rtf,
    )
