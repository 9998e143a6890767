"""Parameters of one e2e invocation: its options, declared once (OPTIONS) for argparse, each checked
against its rule; the few a workflow sets also read a KIT_E2E_* variable."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import tempfile
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from scripts.errors import KitError
from scripts.workspace import Workspace

DEPLOY_CONFIG_REL = Path("benchmarks/lingbot_world/configs/npu_usp4_eager.yaml")
BENCHMARK_REL = Path("benchmarks/lingbot_world/benchmark_lingbot_world_realtime.py")
WS_PATH = "/v1/realtime/video"
STANDIN_MODEL_NAME = "lingbot-world"

# Reference: steady chunk-interval median 3016.0 / 3016.4 ms on 4x 910B1, SP-4,
# eager, 32 chunks (docs/upstream-facts.md); the default band is that figure +-5 %.
ASCEND_BAND_MS = (2865.0, 3167.0)
# The stand-in engine paces chunks at 100 ms unless told otherwise.
STANDIN_BAND_MS = (50.0, 400.0)

CLIENTS = ("auto", "upstream", "kit")
LOCK_DIR_NAME = "vllm-omni-kit-locks"  # under the system's temporary folder, unless --lock-dir
BANDS_SHOWN = (
    "2865:3167 on Ascend, 50:400 with --standin"  # ASCEND_BAND_MS, STANDIN_BAND_MS (a test checks)
)


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
        """What the client asks for and the stand-in serves; on Ascend the model path (vllm's default
        name)."""
        return self.model or STANDIN_MODEL_NAME

    @property
    def starts_server(self) -> bool:
        return self.server_url is None

    @property
    def health_url(self) -> str:
        return f"http://{self.host}:{self.port}/health"


def parse_band(text: str) -> tuple[float, float]:
    """``"LO:HI"`` in milliseconds -> (lo, hi); finite, 0 <= lo <= hi."""
    lo_text, sep, hi_text = text.partition(":")
    try:
        lo, hi = float(lo_text), float(hi_text)
    except ValueError:
        lo, hi = 1.0, 0.0
    if not sep or not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi or lo < 0:
        raise KitError(f"band {text!r} is not LO:HI in ms", "pass e.g. --band 2865:3167")
    return lo, hi


def parse_cards(text: str) -> tuple[int, ...]:
    """``"0,1,2,3"`` -> (0, 1, 2, 3), sorted; a card named twice is refused (it would silently be one
    card less)."""
    try:
        listed = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        listed = []
    if not listed or min(listed) < 0:
        raise KitError(
            f"card list {text!r} is not a comma-separated list of card ids",
            "pass e.g. --cards 0,1,2,3",
        )
    twice = sorted({c for c in listed if listed.count(c) > 1})
    if twice:
        names = ", ".join(map(str, twice))
        raise KitError(
            f"card list {text!r} names card {names} more than once",
            "list each card once, e.g. 0,1,2,3",
        )
    return tuple(sorted(listed))


def number_text(x: float) -> str:
    """4294967295, not 4.29497e+09: a bound as the user types it."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


# the longest bound a time option takes: beyond it a value is a typo, not a plan
WEEK_S = 7 * 24 * 3600.0
# LingBot-World's latent: 8x VAE downsampling, then 2x2 patches (480x832 -> 30x52 = 1560 tokens)
PIXELS = 16


@dataclass(frozen=True)
class Option:
    """One e2e option: its flag (`--name`), its KIT_E2E_NAME variable, its default, and the one rule
    its value must meet. Every value, from either source, is checked against the rule before
    anything starts."""

    name: str  # the flag without "--"; the field of E2EConfig is the same with "_"
    # "int", "float", "text", "flag" (a switch: given or not), "choice", or "parsed" (by `parse`)
    kind: str
    default: str | None
    help: str = ""
    lo: float | None = None  # smallest allowed value
    hi: float | None = None  # largest allowed value
    lo_open: bool = False  # lo itself is not allowed (a time that must be > 0)
    hi_open: bool = False
    multiple_of: int = 1
    choices: tuple[str, ...] = ()
    parse: Callable[[str], object] | None = None  # kind "parsed": raises KitError itself
    why: str = ""  # the reason for the rule, said in the fix
    positional: bool = False
    # also read KIT_E2E_<NAME>: only where an Ascend job sets it (workflow, pipeline, job.sh)
    from_env: bool = False
    shown_default: str = ""  # a default computed at run time, as --help says it

    @property
    def field(self) -> str:
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        return "KIT_E2E_" + self.name.upper().replace("-", "_")

    @property
    def flag(self) -> str:
        return self.name.upper() if self.positional else f"--{self.name}"

    def rule(self) -> str:
        """What a good value is, in words: `an integer from 1 to 65535`, `a number > 0`, `one of auto,
        kit`."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        noun = "an integer" if self.kind == "int" else "a number"
        if self.multiple_of > 1:
            noun += f" multiple of {self.multiple_of}"
        low = "" if self.lo is None else f"{'>' if self.lo_open else '>='} {number_text(self.lo)}"
        high = "" if self.hi is None else f"{'<' if self.hi_open else '<='} {number_text(self.hi)}"
        if self.lo is not None and self.hi is not None and not (self.lo_open or self.hi_open):
            return f"{noun} from {number_text(self.lo)} to {number_text(self.hi)}"
        return " ".join(filter(None, [noun, " and ".join(filter(None, [low, high]))]))

    def value(self, text: str, source: str) -> object:
        """text (from source: the flag or the variable) checked against the rule; KitError naming both."""
        if self.parse is not None:
            try:
                return self.parse(text)
            except KitError as exc:  # name where the value came from: the flag or the variable
                raise KitError(f"{source}: {exc.what}", exc.fix) from None
        if self.kind == "text":
            return text
        if self.kind == "choice":
            if text not in self.choices:
                raise self.refuse(text, source)
            return text
        try:
            number: float = int(text) if self.kind == "int" else float(text)
        except ValueError:
            raise self.refuse(text, source) from None
        if not self.allows(number):
            raise self.refuse(text, source)
        return number

    def allows(self, number: float) -> bool:
        if not math.isfinite(number) or (self.multiple_of > 1 and number % self.multiple_of):
            return False
        if self.lo is not None and (number < self.lo or (self.lo_open and number == self.lo)):
            return False
        return self.hi is None or not (number > self.hi or (self.hi_open and number == self.hi))

    def metavar(self) -> str:
        return (
            self.name.upper().replace("-", "_")
            if self.kind != "choice"
            else "{" + ",".join(self.choices) + "}"
        )

    def refuse(self, text: str, source: str) -> KitError:
        why = f" ({self.why})" if self.why else ""
        how = f"set {self.env} to" if source == self.env else f"pass {self.flag}"
        return KitError(f"{source} {text!r} is not {self.rule()}", f"{how} {self.rule()}{why}")


def _count(name: str, default: str, lo: int, text: str = "") -> Option:
    return Option(name, "int", default, text, lo=lo)


def _seconds(name: str, default: str, text: str = "", *, zero: bool = False) -> Option:
    return Option(
        name,
        "float",
        default,
        text,
        lo=0,
        lo_open=not zero,
        hi=WEEK_S,
        why="seconds, at most a week",
    )


def _pixels(name: str, default: str) -> Option:
    return Option(
        name,
        "int",
        default,
        lo=PIXELS,
        hi=8192,
        multiple_of=PIXELS,
        why=f"the model works on {PIXELS}-pixel patches",
    )


OPTIONS: tuple[Option, ...] = (
    Option("model", "text", None, "the model directory", positional=True),
    Option(
        "deploy-config",
        "text",
        None,
        "deploy YAML",
        shown_default=f"<checkout>/{DEPLOY_CONFIG_REL}",
    ),
    Option("host", "text", "127.0.0.1", "where the server listens"),
    Option("port", "int", "8091", lo=1, hi=65535, why="a TCP port"),
    _count("chunks", "32", 1),
    _count("warmup-chunks", "6", 0),
    _count("warmup-sessions", "1", 0),
    _count("sessions", "1", 1),
    _count("runs", "2", 1),
    Option(
        "band",
        "parsed",
        None,
        "steady median band LO:HI in ms",
        parse=parse_band,
        from_env=True,
        shown_default=BANDS_SHOWN,
    ),
    Option("cards", "parsed", "0,1,2,3", "physical card ids", parse=parse_cards, from_env=True),
    Option(
        "standin", "flag", None, "serve with the test stand-in (no Ascend checks; reports say so)"
    ),
    Option(
        "server-url",
        "parsed",
        None,
        "benchmark an already-running server at ws://HOST:PORT (nothing is started or stopped)",
        parse=lambda text: checked_server_url(text),
    ),
    Option(
        "ab",
        "text",
        None,
        "A/B: BASE (a patches/revisions.toml label, a git ref, or pristine) against the current "
        "series",
    ),
    _count("ab-repeats", "3", 1, "ABBA repeats"),
    Option(
        "ab-confidence",
        "float",
        "0.95",
        "CI level",
        lo=0.5,
        hi=1,
        hi_open=True,
        why="a confidence level",
    ),
    _seconds(
        "ping-interval-s",
        "20",
        "the kit client's session.ping interval; 0: never (upstream's client pings every 20 s)",
        zero=True,
    ),
    Option(
        "server-cmd",
        "text",
        None,
        "serve command override; {host} {port} {model} {deploy_config} {python} {checkout} are "
        "filled in",
    ),
    Option("client", "choice", "auto", choices=CLIENTS),
    _pixels("width", "832"),
    _pixels("height", "480"),
    Option("fps", "int", "16", lo=1, hi=120, why="frames per second of the video"),
    Option("seed", "int", "42", lo=0, hi=2**32 - 1, why="a 32-bit seed"),
    Option("image", "text", None, "first frame: path or URL"),
    Option("prompt", "text", None, "the text prompt", shown_default="upstream's benchmark prompt"),
    Option(
        "python",
        "text",
        None,
        "the runner's base python (has torch_npu)",
        shown_default="the first python3 on PATH outside the active venv",
    ),
    _seconds("health-timeout-s", "1800"),
    _seconds("bench-timeout-s", "3600"),
    _seconds("stop-timeout-s", "60"),
    _seconds("lock-wait-s", "0", zero=True),
    Option(
        "evidence-root",
        "text",
        None,
        "where evidence folders go",
        shown_default="<kit>/.work/evidence",
    ),
    Option(
        "lock-dir",
        "text",
        None,
        "card locks, shared by all jobs of one runner",
        from_env=True,
        shown_default=f"$TMPDIR/{LOCK_DIR_NAME}",
    ),
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # the kit's one line, not argparse's usage block
        raise KitError(f"e2e: {message}", "see python -m scripts e2e --help")


def help_text(o: Option) -> str:
    """What --help says of one option: its meaning, its rule, its default (as the run computes it), its
    variable."""
    rule = "" if o.kind in ("text", "parsed", "flag") else o.rule()
    default = o.shown_default or o.default or ""
    said = [
        o.help,
        rule,
        f"default: {default}" if default else "",
        f"or {o.env}" if o.from_env else "",
    ]
    return "; ".join(filter(None, said))


def add_options(p: argparse.ArgumentParser) -> None:
    """Every option on p, a given value checked by its rule (a KitError naming the flag); None when not
    given."""
    p.allow_abbrev = False  # `--chunk 4` is a typo to name, not --chunks
    for o in OPTIONS:
        if o.kind == "flag":  # False when not given: never None, so no variable or default is read
            p.add_argument(o.flag, action="store_true", help=help_text(o))
            continue
        checked = {"type": lambda text, o=o: o.value(text, o.flag), "help": help_text(o)}
        if o.positional:
            p.add_argument(o.field, nargs="?", metavar=o.flag, **checked)
        else:
            p.add_argument(o.flag, metavar=o.metavar(), **checked)


def option_values(ns: argparse.Namespace, env: Mapping[str, str]) -> dict[str, object]:
    """Each option's value: the flag if given, else its variable if it reads one and it is set, else
    the default."""
    values: dict[str, object] = {}
    for o in OPTIONS:
        # "": unset
        given, from_env = (getattr(ns, o.field), env.get(o.env, "") if o.from_env else "")
        text, source = (from_env, o.env) if from_env else (o.default, "default")
        values[o.field] = (
            given if given is not None else None if text is None else o.value(text, source)
        )
    return values


def parse_args(
    ws: Workspace, argv: Sequence[str], env: Mapping[str, str] = os.environ
) -> E2EConfig:
    """`python -m scripts e2e ARGV` as its run() reads it (tests; the front door parses the same
    options)."""
    p = _Parser(prog="python -m scripts e2e")
    add_options(p)
    return config_of(ws, p.parse_args(list(argv)), env)


def config_of(ws: Workspace, ns: argparse.Namespace, env: Mapping[str, str]) -> E2EConfig:
    """The run's configuration: the options as given or from their variables, then the defaults the
    workspace sets.

    Flags win over the KIT_E2E_* variables a workflow sets, which win over the defaults; every value
    is checked."""
    v = option_values(ns, env)
    if v["chunks"] <= v["warmup_chunks"]:
        raise KitError(
            f"--chunks {v['chunks']} leaves no steady chunk after --warmup-chunks "
            f"{v['warmup_chunks']}",
            "pass more --chunks than --warmup-chunks",
        )
    if v["ab"] and v["server_url"]:
        raise KitError(
            "--ab and --server-url both given",
            "an A/B starts a fresh server per trial: drop --server-url",
        )
    if v["server_url"] and v["standin"]:
        raise KitError(
            "--server-url and --standin both given",
            "pass one: --standin starts the stand-in itself",
        )
    checkout = ws.checkout
    host, port = (
        parse_server_url(str(v["server_url"])) if v["server_url"] else (v["host"], v["port"])
    )
    standin_band = STANDIN_BAND_MS if v["standin"] else ASCEND_BAND_MS
    derived = {
        "deploy_config": Path(str(v["deploy_config"]))
        if v["deploy_config"]
        else checkout / DEPLOY_CONFIG_REL,
        "host": host,
        "port": port,
        "band_ms": v["band"] or standin_band,
        "server_cmd": tuple(shlex.split(str(v["server_cmd"]))) if v["server_cmd"] else None,
        "evidence_root": Path(str(v["evidence_root"])) if v["evidence_root"] else ws.evidence,
        "lock_dir": Path(str(v["lock_dir"]))
        if v["lock_dir"]
        else Path(tempfile.gettempdir()) / LOCK_DIR_NAME,
        "checkout": checkout,
    }
    # Every other field is the option of the same name, as checked.
    same = {f.name: v[f.name] for f in dataclasses.fields(E2EConfig) if f.name not in derived}
    return E2EConfig(**same, **derived)


def parse_server_url(text: str) -> tuple[str, int]:
    """``ws://HOST:PORT`` (optionally with the realtime video path) -> (host, port)."""
    url = urllib.parse.urlsplit(text)
    try:
        port = url.port
    except ValueError:
        port = None
    if (
        url.scheme != "ws"
        or not url.hostname
        or port is None
        or url.path not in ("", "/", WS_PATH)
        or url.query
    ):
        raise KitError(
            f"server URL {text!r} is not ws://HOST:PORT",
            f"pass e.g. --server-url ws://127.0.0.1:8091{WS_PATH}",
        )
    return url.hostname, port


def checked_server_url(text: str) -> str:
    parse_server_url(text)
    return text


def standin_server_cmd(script: Path) -> tuple[str, ...]:
    """vllm-omni's handler from the checkout with the stand-in engine, run by the stock leg's python."""
    return (
        "{python}",
        str(script),
        "--host",
        "{host}",
        "--port",
        "{port}",
        "--checkout",
        "{checkout}",
        "--model",
        "{model}",
    )


def fill_cmd(template: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """Fill ``{name}`` placeholders; unknown braces stay as they are."""
    out = []
    for arg in template:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out
