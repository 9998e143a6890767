"""Parameters of one e2e invocation: command-line flags, each with a KIT_E2E_* env default."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts import paths
from scripts.errors import KitError

DEPLOY_CONFIG_REL = Path("benchmarks/lingbot_world/configs/npu_usp4_eager.yaml")
BENCHMARK_REL = Path("benchmarks/lingbot_world/benchmark_lingbot_world_realtime.py")
STANDIN_SCRIPT = paths.ROOT / "tests" / "standins" / "omni_realtime_server.py"
WS_PATH = "/v1/realtime/video"
STANDIN_MODEL_NAME = "lingbot-world"

# Reference: steady chunk-interval median 3016.0 / 3016.4 ms on 4x 910B1, SP-4,
# eager, 32 chunks (docs/upstream-facts.md); the default band is that figure +-5 %.
ASCEND_BAND_MS = (2865.0, 3167.0)
# The stand-in engine paces chunks at 100 ms unless told otherwise.
STANDIN_BAND_MS = (50.0, 400.0)

CLIENTS = ("auto", "upstream", "kit")


@dataclass(frozen=True)
class E2EConfig:
    model: str | None
    deploy_config: Path
    host: str
    port: int
    chunks: int
    warmup_chunks: int
    warmup_sessions: int
    sessions: int
    runs: int
    band_ms: tuple[float, float]
    cards: tuple[int, ...]
    standin: bool
    server_url: str | None
    ab: str | None
    ab_repeats: int
    ab_confidence: float
    ping_interval_s: float
    server_cmd: tuple[str, ...] | None
    client: str
    width: int
    height: int
    fps: int
    seed: int
    image: str | None
    prompt: str | None
    python: str | None
    health_timeout_s: float
    bench_timeout_s: float
    stop_timeout_s: float
    lock_wait_s: float
    evidence_root: Path
    lock_dir: Path
    checkout: Path

    @property
    def mode(self) -> str:
        if self.server_url:
            return "external"
        return "standin" if self.standin else "ascend"

    @property
    def model_name(self) -> str:
        """What the client asks for and the stand-in serves; on Ascend the model path (vllm's default name)."""
        return self.model or STANDIN_MODEL_NAME

    @property
    def starts_server(self) -> bool:
        return self.server_url is None

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.port}/health"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}{WS_PATH}"


def parse_band(text: str) -> tuple[float, float]:
    """``"LO:HI"`` in milliseconds -> (lo, hi); lo <= hi."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo, hi = 1.0, 0.0
    if not sep or lo > hi or lo < 0:
        raise KitError(f"band {text!r} is not LO:HI in ms", "pass e.g. --band 2865:3167")
    return lo, hi


def parse_cards(text: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` -> (0, 1, 2, 3), sorted and unique."""
    try:
        cards = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        cards = ()
    if not cards or min(cards) < 0:
        raise KitError(f"card list {text!r} is not a comma-separated list of card ids", "pass e.g. --cards 0,1,2,3")
    return cards


def _env_flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    def default(name: str, fallback: str | None) -> str | None:
        return env.get(f"KIT_E2E_{name}", fallback)

    p = argparse.ArgumentParser(
        prog="python -m scripts e2e",
        description="Serve the LingBot-World realtime benchmark N times with independent servers, "
        "compare the videos, judge the steady chunk interval, keep the evidence.",
    )
    p.add_argument("model", nargs="?", default=default("MODEL", None), help="model path [KIT_E2E_MODEL]")
    p.add_argument(
        "--deploy-config",
        default=default("DEPLOY_CONFIG", None),
        help=f"deploy YAML [default: <checkout>/{DEPLOY_CONFIG_REL}]",
    )
    p.add_argument("--host", default=default("HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(default("PORT", "8091") or 8091))
    p.add_argument("--chunks", type=int, default=int(default("CHUNKS", "32") or 32))
    p.add_argument("--warmup-chunks", type=int, default=int(default("WARMUP_CHUNKS", "6") or 6))
    p.add_argument("--warmup-sessions", type=int, default=int(default("WARMUP_SESSIONS", "1") or 1))
    p.add_argument("--sessions", type=int, default=int(default("SESSIONS", "1") or 1))
    p.add_argument("--runs", type=int, default=int(default("RUNS", "2") or 2))
    p.add_argument("--band", default=default("BAND", None), help="steady median band LO:HI in ms")
    p.add_argument("--cards", default=default("CARDS", "0,1,2,3"))
    p.add_argument(
        "--standin",
        action="store_true",
        default=_env_flag(env, "KIT_E2E_STANDIN"),
        help="serve with the test stand-in (no Ascend checks; reports say so) [KIT_E2E_STANDIN=1]",
    )
    p.add_argument(
        "--server-url",
        default=default("SERVER_URL", None),
        help="benchmark an already-running server at ws://HOST:PORT (nothing is started or stopped)",
    )
    p.add_argument(
        "--ab",
        default=default("AB", None),
        metavar="BASE",
        help="A/B: BASE (a patches/revisions.toml label, a git ref, or pristine) against the current series",
    )
    p.add_argument("--ab-repeats", type=int, default=int(default("AB_REPEATS", "3") or 3), help="ABBA repeats")
    p.add_argument(
        "--ab-confidence", type=float, default=float(default("AB_CONFIDENCE", "0.95") or 0.95), help="CI level"
    )
    p.add_argument(
        "--ping-interval-s",
        type=float,
        default=float(default("PING_INTERVAL_S", "20") or 20),
        help="the kit client's session.ping interval; 0: never (upstream's client pings every 20 s)",
    )
    p.add_argument(
        "--server-cmd",
        default=default("SERVER_CMD", None),
        help="serve command override; {host} {port} {model} {deploy_config} {python} are filled in",
    )
    p.add_argument("--client", choices=CLIENTS, default=default("CLIENT", "auto"))
    p.add_argument("--width", type=int, default=int(default("WIDTH", "832") or 832))
    p.add_argument("--height", type=int, default=int(default("HEIGHT", "480") or 480))
    p.add_argument("--fps", type=int, default=int(default("FPS", "16") or 16))
    p.add_argument("--seed", type=int, default=int(default("SEED", "42") or 42))
    p.add_argument("--image", default=default("IMAGE", None), help="first frame: path or URL")
    p.add_argument("--prompt", default=default("PROMPT", None))
    p.add_argument("--python", default=default("PYTHON", None), help="the runner's base python (has torch_npu)")
    p.add_argument("--health-timeout-s", type=float, default=float(default("HEALTH_TIMEOUT_S", "1800") or 1800))
    p.add_argument("--bench-timeout-s", type=float, default=float(default("BENCH_TIMEOUT_S", "3600") or 3600))
    p.add_argument("--stop-timeout-s", type=float, default=float(default("STOP_TIMEOUT_S", "60") or 60))
    p.add_argument("--lock-wait-s", type=float, default=float(default("LOCK_WAIT_S", "0") or 0))
    p.add_argument("--evidence-root", default=default("EVIDENCE_ROOT", str(paths.EVIDENCE)))
    p.add_argument("--lock-dir", default=default("LOCK_DIR", None), help="shared by all jobs of one runner")
    return p


def _positive(name: str, value: float, minimum: float = 1) -> None:
    if value < minimum:
        raise KitError(f"--{name} is {value:g}", f"pass a value of at least {minimum:g}")


def parse_args(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> E2EConfig:
    """Flags win over KIT_E2E_* variables, which win over the defaults."""
    ns = _parser(env).parse_args(list(argv))
    for name in ("chunks", "sessions", "runs", "port"):
        _positive(name, getattr(ns, name))
    _positive("warmup-chunks", ns.warmup_chunks, 0)
    _positive("warmup-sessions", ns.warmup_sessions, 0)
    _positive("ping-interval-s", ns.ping_interval_s, 0)
    _positive("ab-repeats", ns.ab_repeats)
    if not 0.5 <= ns.ab_confidence < 1:
        raise KitError(f"--ab-confidence is {ns.ab_confidence:g}", "pass a level in [0.5, 1), e.g. 0.95")
    if ns.ab and ns.server_url:
        raise KitError("--ab and --server-url both given", "an A/B starts a fresh server per trial: drop --server-url")
    checkout = paths.CHECKOUT
    host, port = parse_server_url(ns.server_url) if ns.server_url else (ns.host, ns.port)
    if ns.server_url and ns.standin:
        raise KitError("--server-url and --standin both given", "pass one: --standin starts the stand-in itself")
    band = parse_band(ns.band) if ns.band else (STANDIN_BAND_MS if ns.standin else ASCEND_BAND_MS)
    lock_dir = Path(ns.lock_dir) if ns.lock_dir else Path(tempfile.gettempdir()) / "vllm-omni-kit-locks"
    derived = {
        "deploy_config": Path(ns.deploy_config) if ns.deploy_config else checkout / DEPLOY_CONFIG_REL,
        "host": host,
        "port": port,
        "band_ms": band,
        "cards": parse_cards(ns.cards),
        "server_cmd": tuple(shlex.split(ns.server_cmd)) if ns.server_cmd else None,
        "evidence_root": Path(ns.evidence_root),
        "lock_dir": lock_dir,
        "checkout": checkout,
    }
    # Every other field is the flag of the same name, as parsed.
    same = {f.name: getattr(ns, f.name) for f in dataclasses.fields(E2EConfig) if f.name not in derived}
    return E2EConfig(**same, **derived)


def parse_server_url(text: str) -> tuple[str, int]:
    """``ws://HOST:PORT`` (optionally with the realtime video path) -> (host, port)."""
    url = urllib.parse.urlsplit(text)
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme != "ws" or not url.hostname or port is None or url.path not in ("", "/", WS_PATH) or url.query:
        raise KitError(
            f"server URL {text!r} is not ws://HOST:PORT", f"pass e.g. --server-url ws://127.0.0.1:8091{WS_PATH}"
        )
    return url.hostname, port


def standin_server_cmd() -> tuple[str, ...]:
    """vllm-omni's handler from the checkout with the stand-in engine, run by the stock leg's python."""
    return ("{python}", str(STANDIN_SCRIPT), "--host", "{host}", "--port", "{port}", "--checkout", "{checkout}",
            "--model", "{model}")  # fmt: skip


def fill_cmd(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Fill ``{name}`` placeholders; unknown braces stay as they are."""
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out
