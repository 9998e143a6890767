"""Determinism: container md5, then hashes of the decoded frames (muxer versions can change the bytes)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import zip_longest
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Frame:
    width: int
    height: int
    rgb: bytes  # packed RGB24, no row padding


@dataclass(frozen=True)
class FrameDiff:
    index: int
    max_abs_diff: int
    psnr_db: float  # inf when equal


@dataclass(frozen=True)
class Comparison:
    md5: tuple[str, ...]
    md5_equal: bool
    frame_counts: tuple[int, ...]
    frames_equal: bool
    first_diff_frame: int | None
    differing_frames: int
    worst: FrameDiff | None  # the differing frame with the largest max abs diff


def md5_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "md5").hexdigest()


def decode_frames(path: Path) -> Iterator[Frame]:
    """Decoded frames in presentation order, as packed RGB24."""
    import av  # the e2e's tool env has PyAV; nothing else in the kit needs it

    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            rgb = frame.to_rgb()
            plane, row = rgb.planes[0], rgb.width * 3
            data = bytes(plane)
            packed = b"".join(
                data[y * plane.line_size : y * plane.line_size + row] for y in range(rgb.height)
            )
            yield Frame(rgb.width, rgb.height, packed)


def frame_hash(frame: Frame) -> str:
    return hashlib.sha256(f"{frame.width}x{frame.height}:".encode() + frame.rgb).hexdigest()


def diff(index: int, a: Frame, b: Frame) -> FrameDiff:
    """Max abs diff and PSNR (8-bit peak) of two frames; a size mismatch counts as maximal."""
    if (a.width, a.height) != (b.width, b.height):
        return FrameDiff(index, 255, 0.0)
    sse, peak = 0, 0
    for x, y in zip(a.rgb, b.rgb, strict=True):
        d = x - y if x > y else y - x
        sse += d * d
        peak = d if d > peak else peak
    mse = sse / len(a.rgb) if a.rgb else 0.0
    psnr = math.inf if mse == 0 else 10 * math.log10(255 * 255 / mse)
    return FrameDiff(index, peak, psnr)


# Pure-Python pixel diffs are slow at 832x480: detail the first few, count them all.
DETAILED_DIFFS = 32


def compare_frames(
    pairs: Iterable[tuple[Frame | None, Frame | None]],
) -> tuple[int, int | None, int, FrameDiff | None]:
    """(frames seen, first differing index, how many differ, worst of the detailed diffs).

    ``None`` stands for a missing frame (one video is shorter) and counts as differing.
    """
    seen, first_diff, count, worst = 0, None, 0, None
    for index, (a, b) in enumerate(pairs):
        seen += 1
        if a is not None and b is not None and a == b:
            continue
        first_diff = index if first_diff is None else first_diff
        count += 1
        if a is None or b is None or count > DETAILED_DIFFS:
            continue
        d = diff(index, a, b)
        worst = d if worst is None or d.max_abs_diff > worst.max_abs_diff else worst
    return seen, first_diff, count, worst


def hashed(frames: Iterable[Frame], sink: IO[str]) -> Iterator[Frame]:
    """Pass frames through, writing ``index sha256`` lines to ``sink``."""
    for index, frame in enumerate(frames):
        sink.write(f"{index} {frame_hash(frame)}\n")
        yield frame


def compare_pair(
    reference: Path, candidate: Path, ref_hashes: Path, cand_hashes: Path
) -> Comparison:
    """Stream both videos frame by frame (a long 832x480 rollout does not fit twice in memory)."""
    md5 = (md5_file(reference), md5_file(candidate))
    with ref_hashes.open("w") as ref_sink, cand_hashes.open("w") as cand_sink:
        pairs = zip_longest(
            hashed(decode_frames(reference), ref_sink), hashed(decode_frames(candidate), cand_sink)
        )
        seen, first_diff, count, worst = compare_frames(pairs)
    counts = _count_lines(ref_hashes), _count_lines(cand_hashes)
    return Comparison(
        md5=md5,
        md5_equal=md5[0] == md5[1],
        frame_counts=counts,
        frames_equal=count == 0 and seen == counts[0],
        first_diff_frame=first_diff,
        differing_frames=count,
        worst=worst,
    )


def against_first(videos: Sequence[Path]) -> list[Comparison]:
    """Every video after the first against the first; each one's frame hashes land in frames.sha256
    beside it."""
    hashes = [v.with_name("frames.sha256") for v in videos]
    return [
        compare_pair(videos[0], v, hashes[0], h)
        for v, h in zip(videos[1:], hashes[1:], strict=True)
    ]


def frame_counts(results: Sequence[Comparison]) -> list[int]:
    """Decoded frames per video, the first one's included ([] when nothing was compared)."""
    return [results[0].frame_counts[0], *(r.frame_counts[1] for r in results)] if results else []


def _count_lines(path: Path) -> int:
    with path.open() as handle:
        return sum(1 for _ in handle)
