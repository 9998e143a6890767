"""vllm-omni's own realtime video handler, served with a fake engine client: the e2e's test server.

What is real: ``OmniStreamingVideoOutputHandler`` from the patched checkout
(``vllm_omni/entrypoints/openai/serving_video_output_stream.py``): the protocol,
request validation, the model-name check, the fMP4 encoder and its trailer,
``session.done``, the stall timeout and ``session.ping``/``session.pong``. It runs
on the stack upstream's API server uses for ``/v1/realtime/video``: a FastAPI
WebSocket route served by uvicorn.

What stands in: the engine client (``FakeEngineClient``), because the 14B model and
the Ascend cards do not exist here. It follows the contract the handler calls
(``stage_configs``, ``default_sampling_params_list``, ``generate(prompt=...,
request_id=..., sampling_params_list=...)`` yielding ``OmniRequestOutput`` built as
the diffusion output formatter builds it, ``abort``, ``submit_interaction_async``)
and yields small deterministic frames: 9 for chunk 0, then 12 per chunk.

Two routes are the kit's own, ten lines each in upstream's api_server.py: ``GET
/health`` (200, or 503 under the never-healthy fault) and the WebSocket route
that hands the session to the handler. Upstream's api_server.py itself is not
imported: it pulls in every serving class (speech, chat, ...) and their
dependencies (torchaudio among them), which the stock leg does not have. For the
same reason ``vllm_omni.entrypoints.openai`` is registered as a bare package, so
its ``__init__`` (which imports api_server.py) does not run; the handler's own
imports run unchanged.

A/B knobs: ``--latency-scale`` (STANDIN_LATENCY_SCALE) multiplies every delay,
``--alter-frame`` (STANDIN_ALTER_FRAME) changes one frame; the A/B passes
``STANDIN_A_*`` / ``STANDIN_B_*`` to one variant's servers only.

Faults (``--fault`` or STANDIN_FAULT), all through the fake engine or the health
route, so the handler's real reaction is what the client sees:
nondeterministic (noise from frame ``--nondet-from-frame`` on), never-healthy,
die-mid-session (the process exits after ``--fault-after-chunks`` chunks), error
(the engine output carries an error there: the handler sends ``error``), stall
(the engine stops yielding there: the handler's stall timeout fires).

Run by the stock leg's python with the checkout on ``sys.path``
(``--checkout``). Binds loopback addresses only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import types
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, WebSocket
from fastapi.responses import PlainTextResponse

FAULTS = ("none", "nondeterministic", "never-healthy", "die-mid-session", "error", "stall")
HANDLER_MODULE = "vllm_omni.entrypoints.openai.serving_video_output_stream"


def chunk_frame_counts(num_frames: int) -> list[int]:
    """Chunk 0 has 9 frames, later chunks 12, as num_frames = (chunks*3 - 1)*4 + 1."""
    chunks = ((num_frames - 1) // 4 + 1) // 3
    return [9] + [12] * (chunks - 1) if chunks else []


def frames(start: int, count: int, width: int, height: int, seed: int) -> np.ndarray:
    """(count, height, width, 3) uint8: a moving gradient fully determined by (frame index, seed)."""
    index = np.arange(start, start + count, dtype=np.int64)[:, None, None, None]
    y = np.arange(height, dtype=np.int64)[None, :, None, None]
    x = np.arange(width, dtype=np.int64)[None, None, :, None]
    channel = np.array([0, 85, 170], dtype=np.int64)[None, None, None, :]
    return ((x * 4 + y * 2 + index * 5 + seed + channel) & 0xFF).astype(np.uint8)


def add_noise(video: np.ndarray) -> np.ndarray:
    """Strong per-process random noise: survives compression, differs between servers."""
    noise = np.frombuffer(os.urandom(video.size), dtype=np.uint8).reshape(video.shape) & 0x3F
    return video ^ noise


class FakeEngineClient:
    """The part of AsyncOmni that OmniStreamingVideoOutputHandler calls; generation is a gradient."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        self.args = args
        self.stage_configs = [{"stage_type": "diffusion", "final_output": True, "final_output_type": "video"}]
        self.default_sampling_params_list = [OmniDiffusionSamplingParams()]
        self.aborted: list[str] = []

    def _delay_s(self, index: int) -> float:
        delay_ms = self.args.first_chunk_delay_ms if index == 0 else self.args.chunk_interval_ms
        return delay_ms * self.args.latency_scale / 1000.0

    async def generate(
        self, prompt: Any, request_id: str = "", *, sampling_params_list: Sequence[Any] | None = None, **_: Any
    ) -> AsyncGenerator[Any, None]:
        from vllm_omni.outputs import OmniRequestOutput

        params = (sampling_params_list or self.default_sampling_params_list)[0]
        counts = chunk_frame_counts(int(params.num_frames))
        start = 0
        for index, count in enumerate(counts):
            await self._fault(index)
            await asyncio.sleep(self._delay_s(index))
            video = frames(start, count, int(params.width), int(params.height), int(params.seed or 0))
            if start <= self.args.alter_frame < start + count:
                video[self.args.alter_frame - start] ^= 0x80  # one frame visibly different, the rest unchanged
            noisy_from = max(0, self.args.nondet_from_frame - start)
            if self.args.fault == "nondeterministic" and noisy_from < count:
                video[noisy_from:] = add_noise(video[noisy_from:])
            start += count
            stream = {"generation_chunk_index": index, "started_event_ids": [], "active_event_ids": []}
            yield OmniRequestOutput.from_diffusion(
                request_id=request_id,
                images=[video],
                prompt=prompt,
                multimodal_output={"metadata": {"stream": {**stream, "completed_event_ids": []}}},
                final_output_type="video",
                finished=index == len(counts) - 1,
            )

    async def _fault(self, index: int) -> None:
        if index != self.args.fault_after_chunks:
            return
        if self.args.fault == "die-mid-session":
            os._exit(3)
        if self.args.fault == "error":
            raise RuntimeError("stand-in engine fault: injected error")
        if self.args.fault == "stall":
            await asyncio.Event().wait()

    async def abort(self, request_id: str, **_: Any) -> None:
        self.aborted.append(request_id)

    async def submit_interaction_async(self, request_id: str, *, interaction: Any) -> None:
        raise RuntimeError("the stand-in engine does not take interactions")


def import_handler(checkout: Path) -> type:
    """Upstream's handler class from ``checkout``, without running the openai package's __init__."""
    sys.path.insert(0, str(checkout))
    package = types.ModuleType("vllm_omni.entrypoints.openai")
    package.__path__ = [str(checkout / "vllm_omni" / "entrypoints" / "openai")]
    sys.modules[package.__name__] = package
    module = __import__(HANDLER_MODULE, fromlist=["OmniStreamingVideoOutputHandler"])
    origin = Path(module.__file__ or "").resolve()
    if not origin.is_relative_to(checkout.resolve()):
        raise SystemExit(f"the handler was imported from {origin}, not from the checkout {checkout}")
    return module.OmniStreamingVideoOutputHandler  # type: ignore[no-any-return]


def build_app(args: argparse.Namespace) -> FastAPI:
    handler_class = import_handler(Path(args.checkout))
    app = FastAPI()
    app.state.openai_streaming_video_output = handler_class(
        engine_client=FakeEngineClient(args), model_name=args.model, stall_timeout=args.stall_timeout_s
    )

    @app.get("/health")
    async def health() -> PlainTextResponse:
        if args.fault == "never-healthy":
            return PlainTextResponse("loading\n", status_code=503)
        return PlainTextResponse("ok\n")

    # FastAPI reads the annotation to inject the WebSocket: it must resolve in this module's globals.
    @app.websocket("/v1/realtime/video")
    async def streaming_video_output(websocket: WebSocket) -> None:
        await websocket.app.state.openai_streaming_video_output.handle_session(websocket)

    return app


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--checkout", required=True, help="the patched vllm-omni tree")
    p.add_argument("--model", default=env.get("STANDIN_MODEL", "lingbot-world"), help="the served model name")
    p.add_argument("--fault", choices=FAULTS, default=env.get("STANDIN_FAULT", "none"))
    p.add_argument("--fault-after-chunks", type=int, default=int(env.get("STANDIN_FAULT_AFTER_CHUNKS", "1")))
    p.add_argument("--nondet-from-frame", type=int, default=int(env.get("STANDIN_NONDET_FROM_FRAME", "9")))
    p.add_argument("--chunk-interval-ms", type=float, default=float(env.get("STANDIN_CHUNK_INTERVAL_MS", "100")))
    p.add_argument("--first-chunk-delay-ms", type=float, default=None, help="[default: --chunk-interval-ms]")
    p.add_argument("--latency-scale", type=float, default=float(env.get("STANDIN_LATENCY_SCALE", "1")),
                   help="multiplies every delay (A/B: a known slowdown)")  # fmt: skip
    p.add_argument("--alter-frame", type=int, default=int(env.get("STANDIN_ALTER_FRAME", "-1")),
                   help="this frame differs (A/B: a known output change); -1: none")  # fmt: skip
    p.add_argument("--stall-timeout-s", type=float, default=float(env.get("STANDIN_STALL_TIMEOUT_S", "60")))
    args = p.parse_args(argv)
    if args.first_chunk_delay_ms is None:
        args.first_chunk_delay_ms = float(env.get("STANDIN_FIRST_CHUNK_DELAY_MS", args.chunk_interval_ms))
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        p.error("the stand-in binds loopback addresses only")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    # The handler's imports (torch, vllm) leave ~700k objects that the collector walks again and again while
    # they load: a fifth of the import's CPU. They stay for the server's life: frozen, not walked.
    gc.disable()
    app = build_app(args)
    gc.freeze()
    gc.enable()
    print(f"stand-in engine behind vllm-omni's handler on {args.host}:{args.port} (fault={args.fault})", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
