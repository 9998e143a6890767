"""Which benchmark client runs, its command line, and running it with a wall-clock bound."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts import procgroup
from scripts.e2e.client import gray_png
from scripts.e2e.config import BENCHMARK_REL, E2EConfig
from scripts.errors import KitError


@dataclass(frozen=True)
class BenchOutcome:
    returncode: int | None  # None: killed at the wall-clock bound
    timed_out: bool
    last_error: str  # last "ERROR:" line of the client's output, "" if none


def choose_client(config: E2EConfig) -> str:
    """``upstream`` when the checkout has upstream's script (or it is asked for), else ``kit``."""
    has_upstream = (config.checkout / BENCHMARK_REL).is_file()
    if config.client == "upstream" and not has_upstream:
        raise KitError(
            f"upstream's benchmark script is not in the checkout ({BENCHMARK_REL})",
            "use a git checkout of upstream, or pass --client kit",
        )
    if config.client == "auto":
        return "upstream" if has_upstream and not config.standin else "kit"
    return config.client


def first_frame(config: E2EConfig, folder: Path) -> str:
    """``--image`` as given, else the kit's grey PNG written into ``folder``: no client ever downloads
    one."""
    if config.image:
        return config.image
    path = folder / "first-frame.png"
    path.write_bytes(gray_png(config.width, config.height))
    return str(path)


def command(
    config: E2EConfig, client: str, python: str, json_path: Path, video_path: Path, image: str
) -> list[str]:
    """The benchmark command line; both clients take these flags (``--ping-interval``: the kit's only)."""
    if client == "upstream":
        head = [python, str(config.checkout / BENCHMARK_REL)]
    else:
        head = [sys.executable, "-m", "scripts.e2e.client"]
    args = [
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--model",
        config.model_name,
        "--num-chunks",
        str(config.chunks),
        "--warmup-chunks",
        str(config.warmup_chunks),
        "--warmup-sessions",
        str(config.warmup_sessions),
        "--sessions",
        str(config.sessions),
        "--width",
        str(config.width),
        "--height",
        str(config.height),
        "--fps",
        str(config.fps),
        "--seed",
        str(config.seed),
        "--output-json",
        str(json_path),
        "--save-video",
        str(video_path),
        "--image",
        image,
    ]
    if client == "kit":
        args += ["--ping-interval", str(config.ping_interval_s)]
    if config.prompt:
        args += ["--prompt", config.prompt]
    return head + args


def client_env(client: str, env: Mapping[str, str], kit_root: Path) -> dict[str, str]:
    """The kit client imports ``scripts``: put the kit on its path (upstream's script finds its own)."""
    if client != "kit":
        return dict(env)
    return {
        **env,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(kit_root), env.get("PYTHONPATH", "")])),
    }


def last_error_line(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line.strip() for line in lines if line.strip().startswith("ERROR:")]
    return errors[-1] if errors else ""


def run(cmd: list[str], env: Mapping[str, str], log_path: Path, timeout_s: float) -> BenchOutcome:
    """Run the client in its own process group; on timeout, or a signal that ends the e2e, the whole
    group is ended."""
    code: int | None = None
    timed_out = False
    with log_path.open("ab") as log:
        try:
            done = procgroup.run(
                cmd,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env),
            )
            code = done.returncode
        except subprocess.TimeoutExpired:
            timed_out = True
    return BenchOutcome(returncode=code, timed_out=timed_out, last_error=last_error_line(log_path))
