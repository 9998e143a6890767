"""The kit's realtime benchmark client, for checkouts without upstream's script.

Same flags (the subset the e2e passes) and the same ``--output-json`` fields as
``benchmarks/lingbot_world/benchmark_lingbot_world_realtime.py``; the video is
the streamed fMP4 bytes as received. Run as ``python -m scripts.e2e.client``.
Errors print ``ERROR: ...`` on stderr and exit 1, as upstream's script does.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import mimetypes
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from scripts.e2e.metrics import Chunk, session_metrics

DEFAULT_PROMPT = "The camera moves slowly forward through the scene."
FLOW_SHIFT = 5.0


class BenchmarkError(RuntimeError):
    """A session failed in a way that invalidates its numbers."""


def num_frames_for_chunks(chunks: int) -> int:
    return (chunks * 3 - 1) * 4 + 1


def gray_png(width: int, height: int) -> bytes:
    """A plain grey PNG: a first frame that needs no file and no network."""

    def block(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    raw = b"".join(b"\x00" + b"\x80" * (width * 3) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + block(b"IHDR", header)
        + block(b"IDAT", zlib.compress(raw))
        + block(b"IEND", b"")
    )


def image_url(value: str | None, width: int, height: int) -> str:
    if value is None:
        return "data:image/png;base64," + base64.b64encode(gray_png(width, height)).decode()
    if value.startswith(("http://", "https://", "data:")):
        return value
    path = Path(value)
    if not path.is_file():
        raise BenchmarkError(f"--image is neither a URL nor a readable file: {value}")
    media_type = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{media_type};base64,{base64.b64encode(path.read_bytes()).decode()}"


def session_start(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "type": "session.start",
        "model": args.model,
        "prompt": args.prompt or DEFAULT_PROMPT,
        "image_reference": {"image_url": image_url(args.image, args.width, args.height)},
        "width": args.width,
        "height": args.height,
        "num_frames": num_frames_for_chunks(args.num_chunks),
        "fps": args.fps,
        "seed": args.seed,
        "extra_params": {
            "flow_shift": FLOW_SHIFT,
            "camera_action_script": [[["w"]] * 3] * args.num_chunks,
        },
    }


@dataclass
class Session:
    request_id: str | None = None
    chunks: list[Chunk] = field(default_factory=list)
    media: bytearray = field(default_factory=bytearray)
    ttfc_s: float | None = None
    wall_s: float = 0.0


async def _keepalive(ws: Any, interval_s: float) -> None:
    """``session.ping`` every ``interval_s``: the server aborts a session without progress for its
    stall timeout."""
    while True:
        await asyncio.sleep(interval_s)
        await ws.send(json.dumps({"type": "session.ping"}))


def take_binary(
    result: Session, pending: dict[str, Any] | None, data: bytes, now: float, last: float
) -> float:
    """Add one binary frame; a ``media`` one is a chunk (contiguous index from 0). Returns the new
    ``last``."""
    if pending is None:
        raise BenchmarkError(
            "Received a binary frame with no preceding video.chunk_metadata event."
        )
    result.media.extend(data)  # the trailer too: it carries the muxer's last fragment
    if pending.get("kind", "media") != "media":
        return last
    index = pending.get("generation_chunk_index")
    if index != len(result.chunks):
        raise BenchmarkError(
            f"Chunk index {index!r} where {len(result.chunks)} was expected (indices not "
            "contiguous)."
        )
    result.chunks.append(Chunk(index, now, now - last, len(data), int(pending["num_frames"])))
    result.ttfc_s = now if result.ttfc_s is None else result.ttfc_s
    return now


def take_event(result: Session, event: dict[str, Any]) -> bool:
    """Handle one JSON event; True when the session is done."""
    kind = event.get("type")
    if kind == "video.start":
        result.request_id = event.get("request_id")
    elif kind == "error":
        raise BenchmarkError(
            f"Server rejected the session after {len(result.chunks)} chunk(s): "
            f"{event.get('message', event)}"
        )
    elif kind == "session.done":
        if event.get("stopped"):
            raise BenchmarkError(
                f"Session stopped after {len(result.chunks)} chunk(s) (session.done.stopped is "
                "true)."
            )
        return True
    return False


async def run_session(url: str, payload: dict[str, Any], args: argparse.Namespace) -> Session:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    result, pending, last = Session(), None, 0.0
    async with connect(url, max_size=None, ping_interval=None) as ws:
        await ws.send(json.dumps(payload))
        started = time.perf_counter()
        pinger = (
            asyncio.create_task(_keepalive(ws, args.ping_interval))
            if args.ping_interval > 0
            else None
        )
        try:
            while True:
                timeout = args.first_chunk_timeout if not result.chunks else args.chunk_timeout
                try:
                    message = await asyncio.wait_for(ws.recv(), timeout=timeout)
                except asyncio.TimeoutError as exc:
                    raise BenchmarkError(
                        f"No message for {timeout:.0f} s after {len(result.chunks)} chunk(s)"
                    ) from exc
                except ConnectionClosed as exc:
                    raise BenchmarkError(
                        f"Server closed the connection after {len(result.chunks)} chunk(s) without "
                        "session.done"
                    ) from exc
                now = time.perf_counter() - started
                if isinstance(message, bytes):
                    last, pending = take_binary(result, pending, message, now, last), None
                    continue
                event = json.loads(message)
                if event.get("type") == "video.chunk_metadata":
                    pending = event
                elif take_event(result, event):
                    break
        finally:
            if pinger is not None:
                pinger.cancel()
        result.wall_s = time.perf_counter() - started
    if len(result.chunks) != args.num_chunks:
        raise BenchmarkError(f"Expected {args.num_chunks} chunks, received {len(result.chunks)}.")
    return result


def document(args: argparse.Namespace, url: str, sessions: list[Session]) -> dict[str, Any]:
    per_session = [
        session_metrics(
            s.chunks,
            fps=args.fps,
            warmup_chunks=args.warmup_chunks,
            ttfc_s=s.ttfc_s,
            wall_s=s.wall_s,
        )
        for s in sessions
    ]
    return {
        "benchmark": "lingbot_world_realtime",
        "client": "kit",  # not upstream's script: the e2e records which one ran
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "endpoint": url,
        "model": args.model,
        "workload": {
            "num_chunks": args.num_chunks,
            "num_frames": num_frames_for_chunks(args.num_chunks),
            "width": args.width,
            "height": args.height,
            "fps": args.fps,
            "seed": args.seed,
            "flow_shift": FLOW_SHIFT,
            "video_seconds": num_frames_for_chunks(args.num_chunks) / args.fps,
        },
        "config": {
            "sessions": args.sessions,
            "warmup_sessions": args.warmup_sessions,
            "warmup_chunks": args.warmup_chunks,
            "camera_pattern": "forward",
            "target_fps": float(args.fps),
            "mux_fps": args.fps,
            "playback_buffer_chunks": 1,
        },
        "sessions": [
            {
                "session_index": i,
                "request_id": s.request_id,
                "chunks": [c.to_dict() for c in s.chunks],
                "metrics": m,
            }
            for i, (s, m) in enumerate(zip(sessions, per_session, strict=True))
        ],
        # One session: the aggregate is that session's metrics, as upstream reports it.
        "metrics": {**per_session[0], "sessions": 1}
        if len(per_session) == 1
        else {"sessions": len(per_session)},
    }


async def run(args: argparse.Namespace) -> None:
    url = args.base_url or f"ws://{args.host}:{args.port}/v1/realtime/video"
    payload = session_start(args)
    for index in range(args.warmup_sessions):
        print(f"Warmup session {index + 1}/{args.warmup_sessions} (not measured)...", flush=True)
        await run_session(url, payload, args)
    sessions = []
    for index in range(args.sessions):
        print(f"Session {index + 1}/{args.sessions}...", flush=True)
        sessions.append(await run_session(url, payload, args))
    if args.save_video:
        Path(args.save_video).write_bytes(bytes(sessions[-1].media))
    if args.output_json:
        text = json.dumps(document(args, url, sessions), indent=2, sort_keys=True) + "\n"
        Path(args.output_json).write_text(text)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m scripts.e2e.client", description=__doc__.splitlines()[0]
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--base-url", default=None)
    p.add_argument("--model", default="lingbot-world")
    p.add_argument("--image", default=None)
    p.add_argument("--prompt", default=None)
    p.add_argument("--num-chunks", type=int, default=16)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--fps", type=int, default=16)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--sessions", type=int, default=1)
    p.add_argument("--warmup-sessions", type=int, default=0)
    p.add_argument("--warmup-chunks", type=int, default=6)
    p.add_argument("--first-chunk-timeout", type=float, default=900.0)
    p.add_argument("--chunk-timeout", type=float, default=300.0)
    p.add_argument(
        "--ping-interval", type=float, default=20.0, help="seconds between session.ping; 0: never"
    )
    p.add_argument("--output-json", default=None)
    p.add_argument("--save-video", default=None)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    try:
        asyncio.run(run(parse_args(argv)))
    except (BenchmarkError, OSError) as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - a dropped connection is a verdict, not a traceback
        print(f"ERROR: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
