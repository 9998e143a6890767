"""Stand-in for ``vllm-omni serve`` on the realtime video route, for testing the e2e without Ascend.

Speaks upstream's documented protocol on ``ws://HOST:PORT/v1/realtime/video``
(``session.start`` -> ``video.start``, per chunk ``video.chunk_metadata`` + one
binary fMP4 fragment, ``session.done``; ``error`` carries ``message``) and answers
``GET /health``. The video is a real H.264 fragmented MP4 made with PyAV: the same
request gives the same bytes, unless a fault asks otherwise.

Faults (``--fault`` or STANDIN_FAULT): nondeterministic (random noise from frame
``--nondet-from-frame`` on), never-healthy (/health answers 503), die-mid-session
(exits after ``--fault-after-chunks`` chunks), error (sends ``error`` there),
stall (stops sending there, connection left open). Binds loopback addresses only.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
from collections.abc import Iterator
from http import HTTPStatus

import av
from websockets.asyncio.server import Request, Response, ServerConnection, serve

WS_PATH = "/v1/realtime/video"
FAULTS = ("none", "nondeterministic", "never-healthy", "die-mid-session", "error", "stall")


def chunk_frame_counts(num_frames: int) -> list[int]:
    """Chunk 0 has 9 frames, later chunks 12, as num_frames = (chunks*3 - 1)*4 + 1."""
    chunks = ((num_frames - 1) // 4 + 1) // 3
    return [9] + [12] * (chunks - 1) if chunks else []


def _row(offset: int, width: int) -> bytes:
    row = bytearray(width * 3)
    for x in range(width):
        base = (x * 4 + offset) & 0xFF
        row[x * 3 : x * 3 + 3] = bytes((base, (base + 85) & 0xFF, (255 - base) & 0xFF))
    return bytes(row)


def frame_pixels(index: int, width: int, height: int, seed: int, rows: dict[int, bytes]) -> bytes:
    """A moving gradient in RGB24, fully determined by (index, seed); ``rows`` caches the 256 row shapes."""
    out = []
    for y in range(height):
        offset = (y * 2 + index * 5 + seed) & 0xFF
        if offset not in rows:
            rows[offset] = _row(offset, width)
        out.append(rows[offset])
    return b"".join(out)


_LOW6 = bytes(n & 0x3F for n in range(256))


def add_noise(pixels: bytes) -> bytes:
    """Strong per-run random noise: survives compression, differs between processes."""
    noise = os.urandom(len(pixels)).translate(_LOW6)
    mixed = int.from_bytes(pixels, "big") ^ int.from_bytes(noise, "big")
    return mixed.to_bytes(len(pixels), "big")


def top_level_boxes(data: bytes) -> Iterator[tuple[bytes, bytes]]:
    """(type, whole box) for each top-level ISO-BMFF box."""
    pos = 0
    while pos + 8 <= len(data):
        size = int.from_bytes(data[pos : pos + 4], "big")
        if size < 8:
            raise ValueError(f"unsupported box size {size} at {pos}")
        yield data[pos + 4 : pos + 8], data[pos : pos + size]
        pos += size


def encode_fragments(frames: list[bytes], width: int, height: int, fps: int) -> tuple[bytes, list[bytes]]:
    """(init segment, one moof+mdat per frame): H.264, one fragment per frame, single thread."""
    out = io.BytesIO()
    options = {"movflags": "frag_every_frame+empty_moov+default_base_moof+skip_trailer"}
    with av.open(out, mode="w", format="mp4", options=options) as container:
        stream = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "tune": "zerolatency"})
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.codec_context.thread_count = 1  # threads would make bytes depend on scheduling
        for pixels in frames:
            frame = av.VideoFrame(width, height, "rgb24")
            frame.planes[0].update(pixels)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    init = b""
    fragments: list[bytes] = []
    for kind, box in top_level_boxes(out.getvalue()):
        if kind in (b"ftyp", b"moov"):
            init += box
        elif kind == b"moof":
            fragments.append(box)
        else:
            fragments[-1] += box  # mdat (and anything else) belongs to the fragment before it
    return init, fragments


def build_chunks(request: dict[str, object], args: argparse.Namespace) -> list[tuple[int, bytes]]:
    """(num_frames, fMP4 bytes) per chunk; chunk 0 carries the init segment."""
    width, height = int(str(request["width"])), int(str(request["height"]))
    fps, seed = int(str(request.get("fps", 16))), int(str(request.get("seed", 0)))
    counts = chunk_frame_counts(int(str(request["num_frames"])))
    frames, rows = [], {}
    for index in range(sum(counts)):
        pixels = frame_pixels(index, width, height, seed, rows)
        if args.fault == "nondeterministic" and index >= args.nondet_from_frame:
            pixels = add_noise(pixels)
        frames.append(pixels)
    init, fragments = encode_fragments(frames, width, height, fps)
    chunks, start = [], 0
    for count in counts:
        chunks.append((count, b"".join(fragments[start : start + count])))
        start += count
    chunks[0] = (chunks[0][0], init + chunks[0][1])
    return chunks


async def session(ws: ServerConnection, args: argparse.Namespace) -> None:
    request = json.loads(await ws.recv())
    if request.get("type") != "session.start":
        await ws.send(json.dumps({"type": "error", "message": "expected session.start"}))
        return
    chunks = build_chunks(request, args)
    await ws.send(json.dumps({"type": "video.start", "request_id": f"standin-{os.getpid()}"}))
    for index, (num_frames, data) in enumerate(chunks):
        if index == args.fault_after_chunks:
            if args.fault == "die-mid-session":
                os._exit(3)
            if args.fault == "error":
                await ws.send(json.dumps({"type": "error", "message": "stand-in fault: injected error"}))
                return
            if args.fault == "stall":
                await asyncio.Event().wait()
        await asyncio.sleep(args.chunk_interval_ms / 1000.0)
        meta = {
            "type": "video.chunk_metadata",
            "kind": "media",
            "generation_chunk_index": index,
            "num_frames": num_frames,
            "byte_length": len(data),
        }
        await ws.send(json.dumps(meta))
        await ws.send(data)
    await ws.send(json.dumps({"type": "session.done", "num_chunks": len(chunks)}))


def route(args: argparse.Namespace):  # noqa: ANN201 - websockets' hook signature
    def process_request(connection: ServerConnection, request: Request) -> Response | None:
        if request.path == "/health":
            healthy = args.fault != "never-healthy"
            status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
            return connection.respond(status, "ok\n" if healthy else "loading\n")
        if request.path != WS_PATH:
            return connection.respond(HTTPStatus.NOT_FOUND, "not found\n")
        return None

    return process_request


async def amain(args: argparse.Namespace) -> None:
    await asyncio.sleep(args.startup_delay_s)  # stands for model loading

    async def handler(ws: ServerConnection) -> None:
        await session(ws, args)

    async with serve(handler, args.host, args.port, process_request=route(args), max_size=None) as server:
        print(f"stand-in serving on {args.host}:{args.port} (fault={args.fault})", flush=True)
        await server.serve_forever()


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fault", choices=FAULTS, default=env.get("STANDIN_FAULT", "none"))
    p.add_argument("--fault-after-chunks", type=int, default=int(env.get("STANDIN_FAULT_AFTER_CHUNKS", "1")))
    p.add_argument("--nondet-from-frame", type=int, default=int(env.get("STANDIN_NONDET_FROM_FRAME", "9")))
    p.add_argument("--chunk-interval-ms", type=float, default=float(env.get("STANDIN_CHUNK_INTERVAL_MS", "100")))
    p.add_argument("--startup-delay-s", type=float, default=float(env.get("STANDIN_STARTUP_DELAY_S", "0.2")))
    args = p.parse_args(argv)
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        p.error("the stand-in binds loopback addresses only")
    return args


if __name__ == "__main__":
    try:
        asyncio.run(amain(parse_args(sys.argv[1:])))
    except KeyboardInterrupt:
        pass
