"""Test-leg environments: one reused virtualenv per CPU regression leg.

Each leg (`stock`, `npu`) gets a venv at .work/envs/<leg>, made with uv (`uv venv`,
then `uv pip sync` of ci/leg-<leg>.txt: the pins are the whole closure, so the env
is exactly the file) and uv's per-user cache, so a second clone links its files
from the cache instead of downloading them again. The user's package index
(scripts/pipindex.py: pip's settings, read once) is carried over to uv. Without
uv, or when uv fails, pip builds the env instead and says so. A stamp inside the
venv holds a hash of the pin files; the env is rebuilt only when it changes, and
the stamp is written last, so a half-built env never looks complete.

A leg can also run in an existing interpreter (`--python`, e.g. an Ascend image's
python that already carries torch, torch_npu, vllm and vllm-ascend): the kit then
makes a small overlay venv on top of it (`--system-site-packages`) holding only the
pinned test tools, so that interpreter's own environment is never changed.

    python -m scripts legenv stock|npu [--python PATH] [--versions]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from scripts import pipindex, worklock
from scripts.errors import KitError
from scripts.kittools import normalize
from scripts.legs.modes import ABSENT
from scripts.legs.probe import PROBE_CACHE, versions
from scripts.workspace import Workspace

LEGS = ("stock", "npu")
STAMP_NAME = "kit-leg.stamp"
# Bumped when the way an env is laid out changes, so that older envs are rebuilt once.
LAYOUT = "uv-sync-1"
# A leg whose pins are another leg's plus a few (leg-npu.txt: leg-stock.txt and torch-npu) is a
# layer on that leg's env: its venv holds only the pins the lower env lacks, and a .pth file puts
# the lower env's site-packages after its own. The two legs then share one copy of torch and vllm
# whatever made them: uv links them from its cache, but pip (or uv with its cache on another file
# system) copies them, 6 GB per env.
LAYERS = {"npu": "stock"}
LAYER_PTH = "kit-layer.pth"

# Pin files each leg reads, in include order (leg-npu.txt does `-r leg-stock.txt`).
_PIN_FILES = {"stock": ("leg-stock.txt",), "npu": ("leg-stock.txt", "leg-npu.txt")}
# What an overlay venv on an existing interpreter adds: the test runner and its closure,
# at the versions of ci/leg-stock.txt.
TEST_TOOLS = (
    "pytest",
    "pytest-benchmark",
    "pytest-cov",
    "coverage",
    "iniconfig",
    "pluggy",
    "packaging",
    "py-cpuinfo",
    "pygments",
    "pip",
)


@dataclass(frozen=True)
class LegOptions:
    """Options of a leg run that are the kit's, not pytest's."""

    python: Path | None = (
        None  # run in this interpreter (an overlay venv on it) instead of the leg's venv
    )
    require: str | None = None  # fail unless the leg's mode is this one


@dataclass(frozen=True)
class Interpreter:
    """The python a leg runs in, and how it came to be (recorded with the leg's results)."""

    python: Path
    origin: str  # "venv .work/envs/npu (uv 0.13.9)", "/usr/bin/python3 + overlay ...", ...
    pycache: Path  # PYTHONPYCACHEPREFIX of the leg's runs (see pycache_dir)
    probe_cache: Path | None = (
        None  # where the kit's own venv keeps its probe's answer (scripts/legs/probe.py)
    )


def check_leg(leg: str) -> str:
    """The leg name, or a KitError naming the valid ones."""
    if leg not in LEGS:
        raise KitError(f"unknown test leg {leg!r}", f"use one of: {', '.join(LEGS)}")
    return leg


def env_dir(ws: Workspace, leg: str) -> Path:
    return ws.envs / check_leg(leg)


def overlay_dir(ws: Workspace, leg: str, base: Path) -> Path:
    """Where the overlay venv on an existing interpreter lives (one per leg and interpreter path)."""
    return ws.envs / f"{check_leg(leg)}-on-{hashlib.sha256(str(base).encode()).hexdigest()[:10]}"


def env_python(env: Path) -> Path:
    """The env's interpreter by the env's real path: its .pyc go by source path (pycache_dir), so a
    copy of the kit that links .work/envs and ran python through the link would compile all of
    site-packages again (5.3k modules, 26 s on 2 cores at an e2e stand-in's first start in each
    copy)."""
    return env.resolve() / "bin" / "python"


def pycache_dir(env: Path) -> Path:
    """Where a leg's .pyc go: inside its env, so they are compiled once per env and go when it is
    rebuilt.

    Nothing is compiled at install: a leg imports a fraction of the env's 23k modules. The legs run
    the env by its real path, so copies of the kit that link .work/envs share these files too.
    """
    return env.resolve() / "pycache"


def bytecode_env(environ: Mapping[str, str], pycache: Path) -> dict[str, str]:
    """``environ`` for a python of a leg env: .pyc in its ``pycache`` (pycache_dir), written even where
    the caller sets PYTHONDONTWRITEBYTECODE (CI images do): torch and vllm compile once per env, not
    per start."""
    out = {**environ, "PYTHONPYCACHEPREFIX": str(pycache)}
    out.pop("PYTHONDONTWRITEBYTECODE", None)
    return out


def pin_files(ws: Workspace, leg: str) -> list[Path]:
    return [ws.ci_dir / name for name in _PIN_FILES[check_leg(leg)]]


def leg_pins(ws: Workspace, leg: str) -> dict[str, str]:
    """The leg's pins (ci/leg-*.txt, includes and all)."""
    pins: dict[str, str] = {}
    for path in pin_files(ws, leg):
        pins |= parse_pins(path.read_text(encoding="utf-8"))
    return pins


def layer_pins(upper: dict[str, str], lower: dict[str, str]) -> str:
    """What a layer installs: the pins of its leg that the lower env does not already hold, as a
    requirements file."""
    return "".join(
        f"{name}=={version}\n"
        for name, version in sorted(upper.items())
        if lower.get(name) != version
    )


def pins_digest(leg: str, pin_texts: list[bytes], python_version: str, base: str = "") -> str:
    """Hash of everything that defines the env; the checkout's path is left out so a moved checkout
    still matches."""
    h = hashlib.sha256()
    h.update(f"leg={leg}\npython={python_version}\nlayout={LAYOUT}\nbase={base}\n".encode())
    for text in pin_texts:
        h.update(hashlib.sha256(text).hexdigest().encode() + b"\n")
    return h.hexdigest()


def leg_problems(leg: str, versions_seen: dict[str, str]) -> list[str]:
    """What makes a built env unfit for its leg (empty when fine)."""
    problems = []
    if versions_seen.get("vllm", ABSENT) == ABSENT:
        problems.append("vllm is not installed")
    has_npu = versions_seen.get("torch_npu", ABSENT) != ABSENT
    if leg == "stock" and has_npu:
        problems.append("torch_npu is installed in the stock leg")
    if leg == "npu" and not has_npu:
        problems.append("torch_npu is missing from the npu leg")
    return problems


def shown(ws: Workspace, path: Path) -> str:
    """A path as users see it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(ws.root))
    except ValueError:
        return str(path)


def format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


# --- how an env is built: uv, or pip as the fallback ------------------------------


@dataclass(frozen=True)
class Plan:
    """The commands that make one env, with the tool that runs them."""

    tool: str  # "uv 0.13.9" or "pip"
    steps: tuple[tuple[str, tuple[str, ...]], ...]  # (what, argv)


def uv_plan(
    uv: str,
    version: str,
    base: Path,
    env: Path,
    pins: Path | None,
    tools: Path | None,
    index_args: list[str],
) -> Plan:
    """`uv venv` then `uv pip sync` of the leg's pins (exact closure), or the test tools into an
    overlay."""
    python = str(env_python(env))
    create = [uv, "venv", "--quiet", "--python", str(base), str(env)]
    if tools is not None:
        create.insert(2, "--system-site-packages")
        fill = (
            "install the test tools",
            (uv, "pip", "install", "--python", python, "--no-deps", *index_args, "-r", str(tools)),
        )
    else:
        fill = ("sync the pins", (uv, "pip", "sync", "--python", python, *index_args, str(pins)))
    return Plan(f"uv {version}", (("create the venv", tuple(create)), fill))


def pip_plan(base: Path, env: Path, pins: Path | None, tools: Path | None) -> Plan:
    """The same with venv and pip (slower: no shared cache of unpacked wheels, pip's own index
    settings)."""
    create = [str(base), "-m", "venv", str(env)]
    if tools is not None:
        create.insert(3, "--system-site-packages")
    pip = [
        str(env_python(env)),
        "-m",
        "pip",
        "--disable-pip-version-check",
        "--no-input",
        "install",
        "--require-virtualenv",
        "--no-deps",
        "--no-compile",
        "--progress-bar",
        "off",
        "-r",
        str(tools or pins),
    ]
    return Plan("pip", (("create the venv", tuple(create)), ("install the pins", tuple(pip))))


def stamp_text(digest: str, tool: str) -> str:
    return f"{digest}\n{tool}\n"


def stamp_fields(text: str) -> tuple[str, str]:
    """(digest, tool) from a stamp; older stamps hold the digest only."""
    lines = text.strip().splitlines() or [""]
    return lines[0], (lines[1] if len(lines) > 1 else "pip")


def progress_line(leg: str, elapsed: float, line: str) -> str:
    return f"[legenv {leg} {format_seconds(elapsed):>6}] {line}"


def is_package_list_line(line: str) -> bool:
    """uv lists every package it installs (` + name==1.0`): counted in its summary line, not printed."""
    return bool(re.match(r"^ [+-~] \S+==", line))


# --- edges: filesystem and subprocess -------------------------------------------


def uv_executable() -> tuple[str, str] | None:
    """(path, version) of uv: beside this interpreter (the kit's tools), else on PATH; None when
    missing."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        return None
    done = subprocess.run(
        [found, "--version"], capture_output=True, encoding="utf-8", errors="replace"
    )
    if done.returncode != 0:
        return None
    return found, done.stdout.split()[1] if len(done.stdout.split()) > 1 else "?"


def current_digest(ws: Workspace, leg: str, base: Path | None = None) -> str:
    texts = [path.read_bytes() for path in pin_files(ws, leg)]
    if base is None:
        return pins_digest(
            leg, texts, sys.version.split()[0], f"layer on {LAYERS[leg]}" if leg in LAYERS else ""
        )
    # The real path: a base python upgraded in place (python3 -> python3.12) gets a new overlay.
    return pins_digest(leg, [tools_text(ws).encode()], "base", os.path.realpath(base))


def is_ready(ws: Workspace, leg: str, base: Path | None = None) -> bool:
    """True when the env exists, is complete and matches the current pins."""
    env = env_dir(ws, leg) if base is None else overlay_dir(ws, leg, base)
    stamp = env / STAMP_NAME
    if not (stamp.is_file() and env_python(env).exists()):
        return False
    return stamp_fields(stamp.read_text())[0] == current_digest(ws, leg, base)


def parse_pins(text: str) -> dict[str, str]:
    """{normalized name (PEP 503): version} of the `name==version` lines (markers ignored, includes not
    followed)."""
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9][\w.-]*)==([^\s,;]+)", line)
        if match:
            pins[normalize(match[1])] = match[2]
    return pins


def tools_text(ws: Workspace) -> str:
    """The pinned test tools, as a requirements file, taken from ci/leg-stock.txt."""
    pins = parse_pins((ws.ci_dir / "leg-stock.txt").read_text(encoding="utf-8"))
    missing = [name for name in TEST_TOOLS if name not in pins]
    if missing:
        raise KitError(
            f"ci/leg-stock.txt does not pin {', '.join(missing)}", "pin the test tools there"
        )
    return "".join(f"{name}=={pins[name]}\n" for name in TEST_TOOLS)


def stream(
    leg: str, what: str, argv: tuple[str, ...], env: dict[str, str], heartbeat_s: float = 20.0
) -> int:
    """Run one build step, echoing its output with the elapsed time; a line every heartbeat_s when it
    is quiet."""
    started = time.monotonic()
    print(
        progress_line(
            leg,
            0,
            f"{what}: {' '.join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))}",
        ),
        flush=True,
    )
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    assert proc.stdout is not None
    pending, listed, last_output = b"", 0, time.monotonic()
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], heartbeat_s)
        now = time.monotonic()
        if not ready:
            if now - last_output >= heartbeat_s:
                print(progress_line(leg, now - started, f"{what}: still working"), flush=True)
                last_output = now
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for raw in lines:
            line = raw.decode(errors="replace").rstrip()
            if not line:
                continue
            if is_package_list_line(line):
                listed += 1
                continue
            print(progress_line(leg, now - started, line), flush=True)
            last_output = now
    rc = proc.wait()
    note = f" ({listed} packages listed by uv)" if listed else ""
    print(
        progress_line(
            leg, time.monotonic() - started, f"{what}: {'done' if rc == 0 else f'exit {rc}'}{note}"
        ),
        flush=True,
    )
    return rc


def run_plan(leg: str, plan: Plan, env: dict[str, str]) -> str | None:
    """Run a plan's steps; None when all succeeded, else which step failed."""
    for what, argv in plan.steps:
        rc = stream(leg, what, argv, env)
        if rc != 0:
            return f"{plan.tool}: {what} failed with exit {rc}"
    return None


def build_plans(
    leg: str, env: Path, base: Path, pins: Path | None, tools: Path | None
) -> list[Plan]:
    """uv's plan first when uv is there, then pip's as the fallback."""
    plans = [pip_plan(base, env, pins, tools)]
    uv = uv_executable()
    if uv is None:
        print(
            f"[legenv {leg}] uv not found (pip install -r ci/kit-tools.txt): building with pip "
            "instead",
            flush=True,
        )
        return plans
    # pip's index settings reach uv through its environment (installer_env, _build)
    carried = {k: v for k, v in pipindex.installer_env(os.environ).items() if k.startswith("UV_")}
    if carried:
        shown = " ".join(f"{k}={v}" for k, v in sorted(carried.items()))
        print(f"[legenv {leg}] uv uses pip's index settings: {shown}", flush=True)
    return [uv_plan(uv[0], uv[1], base, env, pins, tools, []), *plans]


def run_plans(leg: str, env: Path, plans: list[Plan], environ: dict[str, str]) -> str:
    """Make the env with the first plan that succeeds (a failed one is cleaned up); the tool that made
    it."""
    for plan in plans:
        failure = run_plan(leg, plan, environ)
        if failure is None:
            return plan.tool
        shutil.rmtree(env, ignore_errors=True)
        if plan is plans[-1]:
            raise KitError(
                f"leg {leg}: {failure}",
                "read the output above; check ci/leg-*.txt and the package index",
            )
        print(f"[legenv {leg}] {failure}: building with pip instead", flush=True)
    raise KitError(f"leg {leg}: no way to build {env}", "pip install -r ci/kit-tools.txt")


def site_packages(env: Path) -> Path:
    """The site-packages directory of a venv."""
    found = sorted(env.glob("lib/python*/site-packages"))
    if len(found) != 1:
        raise KitError(
            f"{env} has {len(found)} lib/python*/site-packages directories",
            f"delete {env}; it is rebuilt",
        )
    return found[0]


def layer_pth(layer_site: Path, lower_site: Path) -> str:
    """The .pth line that puts the lower env's site-packages on a layer's path: relative (site.py joins
    it to the layer's site-packages), so that .work/envs still works after the checkout moves."""
    return os.path.relpath(lower_site, layer_site) + "\n"


def _build(
    leg: str,
    env: Path,
    digest: str,
    base: Path,
    pins: Path | None,
    tools: Path | None,
    lower: Path | None = None,
) -> str:
    """Build the env with uv, falling back to pip (a layer on ``lower`` when given); returns the tool
    that built it."""
    environ = {**os.environ, **pipindex.installer_env(os.environ)}
    tool = run_plans(leg, env, build_plans(leg, env, base, pins, tools), environ)
    if lower is not None:
        layer_site = site_packages(env)
        (layer_site / LAYER_PTH).write_text(
            layer_pth(layer_site, site_packages(lower)), encoding="utf-8"
        )
    try:
        seen = versions(env_python(env), pycache_dir(env))
    except KitError as err:
        if tools is None:
            raise
        raise KitError(
            f"leg {leg}: {base} cannot run the leg: {err.what}",
            "use a python carrying torch, torch_npu, vllm and vllm-ascend (e.g. the CANN image's "
            "python3)",
        ) from None
    problems = leg_problems(leg, seen)
    if problems:
        raise KitError(
            f"leg {leg}: built env is wrong: {'; '.join(problems)}", "fix ci/leg-*.txt and rebuild"
        )
    print(f"[legenv {leg}] {json.dumps(seen)}", flush=True)
    (env / STAMP_NAME).write_text(stamp_text(digest, tool))  # last: only a complete env carries it
    return tool


@contextlib.contextmanager
def requirements_file(name: str, text: str) -> Iterator[Path]:
    """A requirements file the kit derives for one build (a layer's pins, an overlay's test tools)."""
    with tempfile.TemporaryDirectory(prefix="kit-") as tmp:
        path = Path(tmp) / name
        path.write_text(text, encoding="utf-8")
        yield path


def _leg_lock(envs: Path, name: str) -> contextlib.AbstractContextManager[None]:
    """One builder per leg env at a time: a second caller waits, then finds the env built."""

    def waiting(_holder: str) -> None:
        print(f"[legenv {name}] another process is building this env: waiting for it", flush=True)

    return worklock.locked(
        envs / f"{name}.lock", stamp=worklock.me_line(), wait_s=None, on_wait=waiting
    )


def _ensure(ws: Workspace, leg: str, env: Path, base: Path | None) -> str:
    """Build or reuse one env (a layer's lower env first); returns the tool that built it."""
    started = time.monotonic()
    lower = env_dir(ws, LAYERS[leg]) if base is None and leg in LAYERS else None
    if lower is not None:
        _ensure(ws, LAYERS[leg], lower, None)
    with _leg_lock(ws.envs, env.name):
        if is_ready(ws, leg, base):
            print(
                f"[legenv {leg}] reusing {shown(ws, env)} "
                f"({format_seconds(time.monotonic() - started)})",
                flush=True,
            )
            return stamp_fields((env / STAMP_NAME).read_text())[1]
        print(f"[legenv {leg}] pins changed or env missing: building {shown(ws, env)}", flush=True)
        if env.exists():
            shutil.rmtree(env)
        try:
            if lower is not None:
                layer = layer_pins(leg_pins(ws, leg), leg_pins(ws, LAYERS[leg]))
                with requirements_file(f"leg-{leg}-layer.txt", layer) as pins:
                    tool = _build(
                        leg, env, current_digest(ws, leg), Path(sys.executable), pins, None, lower
                    )
            elif base is None:
                pins = ws.ci_dir / f"leg-{leg}.txt"
                tool = _build(leg, env, current_digest(ws, leg), Path(sys.executable), pins, None)
            else:
                with requirements_file("test-tools.txt", tools_text(ws)) as tools:
                    tool = _build(leg, env, current_digest(ws, leg, base), base, None, tools)
        except BaseException:
            shutil.rmtree(env, ignore_errors=True)  # never leave a half-built env behind
            raise
    print(
        f"[legenv {leg}] ready in {format_seconds(time.monotonic() - started)} (built with {tool})",
        flush=True,
    )
    return tool


def ensure_env(ws: Workspace, leg: str) -> Path:
    """The leg's env python, building or rebuilding the venv when its pins changed."""
    env = env_dir(ws, leg)
    _ensure(ws, leg, env, None)
    return env_python(env)


def interpreter(ws: Workspace, leg: str, options: LegOptions) -> Interpreter:
    """The python a leg runs in: its own venv, or an overlay on the interpreter given with --python."""
    if options.python is None:
        env = env_dir(ws, leg)
        tool = _ensure(ws, leg, env, None)
        return Interpreter(
            env_python(env),
            f"venv {shown(ws, env)} ({tool})",
            pycache_dir(env),
            env.resolve() / PROBE_CACHE,
        )
    base = Path(shutil.which(str(options.python)) or options.python)
    if not (base.is_file() and os.access(base, os.X_OK)):
        raise KitError(
            f"--python {options.python}: no such interpreter",
            "give its path, e.g. /usr/bin/python3",
        )
    env = overlay_dir(ws, leg, base)
    tool = _ensure(ws, leg, env, base)
    return Interpreter(
        env_python(env), f"{base} + test tools in {shown(ws, env)} ({tool})", pycache_dir(env)
    )
