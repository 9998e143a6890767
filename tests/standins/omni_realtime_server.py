"""vllm-omni's own realtime video handler, served with a fake engine client: the e2e's test server.

Real: ``OmniStreamingVideoOutputHandler`` from the patched checkout (protocol, request validation,
model-name check, fMP4 encoder and trailer, ``session.done``, stall timeout, ping/pong), behind a
FastAPI WebSocket route under uvicorn, as upstream's API server serves ``/v1/realtime/video``.
Stand-in: the engine client (no 14B model, no Ascend cards here). It keeps the contract the handler
calls (``stage_configs``, ``default_sampling_params_list``, ``generate`` yielding
``OmniRequestOutput`` built as the diffusion output formatter builds it, ``abort``,
``submit_interaction_async``) and yields deterministic frames: 9 for chunk 0, then 12 per chunk.
``/health`` and the WebSocket route are the kit's (upstream's api_server.py imports every serving
class, torchaudio among their imports; so ``vllm_omni.entrypoints.openai`` is registered as a bare
package and its ``__init__`` does not run).

Knobs and faults (each flag also read from ``STANDIN_<FLAG>``; docs/e2e.md) act through the fake
engine or the health route, so the client sees the handler's real reaction. Binds loopback only.
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
# flag, type, default, help: the default is read from STANDIN_<FLAG> first
KNOBS = [
    ("model", str, "lingbot-world", "the served model name"),
    ("fault", str, "none", None),
    (
        "fault-after-chunks",
        int,
        "1",
        "the chunk a fault strikes at (die-mid-session exits with code 3)",
    ),
    ("nondet-from-frame", int, "9", "nondeterministic: noise from this frame on"),
    ("chunk-interval-ms", float, "100", None),
    ("first-chunk-delay-ms", float, "", "[default: --chunk-interval-ms]"),
    ("latency-scale", float, "1", "multiplies every delay (A/B: a known slowdown)"),
    ("alter-frame", int, "-1", "this frame differs (A/B: a known output change); -1: none"),
    ("stall-timeout-s", float, "60", None),
]


def chunk_frame_counts(num_frames: int) -> list[int]:
    """Chunk 0 has 9 frames, later chunks 12, as num_frames = (chunks*3 - 1)*4 + 1."""
    chunks = ((num_frames - 1) // 4 + 1) // 3
    return [9] + [12] * (chunks - 1) if chunks else []


def frames(start: int, count: int, width: int, height: int, seed: int) -> np.ndarray:
    """(count, height, width, 3) uint8: a moving gradient fully determined by (frame index, seed)."""
    # channel: 0, 85, 170
    index, y, x, channel = np.ogrid[start : start + count, :height, :width, 0:255:85]
    return ((x * 4 + y * 2 + index * 5 + seed + channel) & 0xFF).astype(np.uint8)


class FakeEngineClient:
    """The part of AsyncOmni that OmniStreamingVideoOutputHandler calls; generation is a gradient."""

    def __init__(self, args: argparse.Namespace) -> None:
        from vllm_omni.inputs.data import OmniDiffusionSamplingParams

        self.args = args
        self.stage_configs = [
            {"stage_type": "diffusion", "final_output": True, "final_output_type": "video"}
        ]
        self.default_sampling_params_list = [OmniDiffusionSamplingParams()]

    async def generate(
        self,
        prompt: Any,
        request_id: str = "",
        *,
        sampling_params_list: Sequence[Any] | None = None,
        **_: Any,
    ) -> AsyncGenerator[Any, None]:
        from vllm_omni.outputs import OmniRequestOutput

        args = self.args
        params = (sampling_params_list or self.default_sampling_params_list)[0]
        counts = chunk_frame_counts(int(params.num_frames))
        start = 0
        for index, count in enumerate(counts):
            await self._fault(index)
            delay_ms = args.chunk_interval_ms if index else args.first_chunk_delay_ms
            await asyncio.sleep(delay_ms * args.latency_scale / 1000.0)
            video = frames(
                start, count, int(params.width), int(params.height), int(params.seed or 0)
            )
            if start <= args.alter_frame < start + count:
                video[args.alter_frame - start] ^= (
                    0x80  # one frame visibly different, the rest unchanged
                )
            noisy = video[max(0, args.nondet_from_frame - start) :]
            # per-process noise: survives compression
            if args.fault == "nondeterministic" and noisy.size:
                noisy ^= (
                    np.frombuffer(os.urandom(noisy.size), dtype=np.uint8).reshape(noisy.shape)
                    & 0x3F
                )
            start += count
            stream = {
                "generation_chunk_index": index,
                "started_event_ids": [],
                "active_event_ids": [],
            }
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
        pass

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
        raise SystemExit(
            f"the handler was imported from {origin}, not from the checkout {checkout}"
        )
    return module.OmniStreamingVideoOutputHandler  # type: ignore[no-any-return]


def build_app(args: argparse.Namespace) -> FastAPI:
    handler_class = import_handler(Path(args.checkout))
    app = FastAPI()
    app.state.openai_streaming_video_output = handler_class(
        engine_client=FakeEngineClient(args),
        model_name=args.model,
        stall_timeout=args.stall_timeout_s,
    )

    @app.get("/health")
    async def health() -> PlainTextResponse:
        never = args.fault == "never-healthy"
        return (
            PlainTextResponse("loading\n", status_code=503) if never else PlainTextResponse("ok\n")
        )

    # FastAPI reads the annotation to inject the WebSocket: it must resolve in this module's
    # globals.
    @app.websocket("/v1/realtime/video")
    async def streaming_video_output(websocket: WebSocket) -> None:
        await websocket.app.state.openai_streaming_video_output.handle_session(websocket)

    return app


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--checkout", required=True, help="the patched vllm-omni tree")
    for flag, kind, default, help_text in KNOBS:
        value = os.environ.get("STANDIN_" + flag.upper().replace("-", "_"), default)
        choices = FAULTS if flag == "fault" else None
        p.add_argument(
            f"--{flag}",
            type=kind,
            default=kind(value) if value else None,
            choices=choices,
            help=help_text,
        )
    args = p.parse_args(argv)
    if args.first_chunk_delay_ms is None:
        args.first_chunk_delay_ms = args.chunk_interval_ms
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        p.error("the stand-in binds loopback addresses only")
    return args


def main(argv: list[str]) -> None:
    args = parse_args(argv)
    # The handler's imports (torch, vllm) leave ~700k objects that the collector walks again and
    # again while they load: a fifth of the import's CPU. They stay for the server's life: frozen,
    # not walked.
    gc.disable()
    app = build_app(args)
    gc.freeze()
    gc.enable()
    print(
        f"stand-in engine behind vllm-omni's handler on {args.host}:{args.port} "
        f"(fault={args.fault})",
        flush=True,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
