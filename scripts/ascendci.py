"""Where the kit's Ascend CI runs, read from ci/ascend/: the fixed runner labels and Buildkite queues
(targets.toml), the CI image each runs, the model it takes from the pool's cache (in each layout the
pools use), the steady-median band per chip (bands.toml), and the version hold the CI image is built
under. The jobs ask `python -m scripts ascendci`; tests check that the workflow and the pipeline
offer exactly these labels and queues.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import tomllib

from scripts import handfile
from scripts.errors import KitError
from scripts.kittools import normalize

TARGETS = Path("ascend/targets.toml")
BANDS = Path("ascend/bands.toml")
SYSTEMS = ("github", "buildkite")
DIGEST_REF = re.compile(r"^[a-z0-9./_:-]+@sha256:[0-9a-f]{64}$")
# A chip with no band yet: its first green run is the baseline (the median is recorded, not judged).
BASELINE_BAND = "0:3600000"


def load(ci_dir: Path, name: Path) -> dict[str, Any]:
    path = ci_dir / name
    try:
        return tomllib.loads(handfile.read(path, f"ci/{name}"))
    except tomllib.TOMLDecodeError as exc:
        raise KitError(
            f"cannot read ci/{name}: {exc}", "restore it from git (git checkout -- ci/ascend)"
        ) from None


def targets(data: Mapping[str, Any], system: str) -> dict[str, dict[str, Any]]:
    """The labels (github) or queues (buildkite) the Ascend jobs may run on."""
    if system not in SYSTEMS:
        raise KitError(f"unknown CI system {system!r}", f"use one of: {', '.join(SYSTEMS)}")
    return dict(data.get(system, {}))


def image_for(data: Mapping[str, Any], system: str, name: str) -> str:
    """The CI image (name@sha256:...) a label or queue runs; refuses a name off the list or no image
    recorded."""
    known = targets(data, system)
    if name not in known:
        raise KitError(
            f"{system} target {name!r} is not in ci/{TARGETS}",
            f"use one of: {', '.join(sorted(known))}",
        )
    hardware = known[name]["hardware"]
    image = data.get("image", {}).get(hardware, "")
    if not DIGEST_REF.match(image):
        raise KitError(
            f"no CI image recorded for hardware {hardware} ({name}): {image!r} is not "
            "name@sha256:<64 hex>",
            f"build ci/ascend/Dockerfile for {hardware}, push it, and record its digest in "
            f"ci/{TARGETS} [image]",
        )
    return image


def chip_of(names: Mapping[int, str], cards: Sequence[int]) -> str:
    """The one chip (npu-smi's Name) of the given logical cards; ``names``: logical id -> "name
    health"."""
    chips = {names[c].split()[0] for c in cards if c in names}
    if len(chips) != 1 or any(c not in names for c in cards):
        raise KitError(
            f"cards {list(cards)} are not one visible chip model ({sorted(chips)})",
            "run on a runner whose cards are all one model",
        )
    return chips.pop()


def band_for(bands: Mapping[str, Any], chip: str) -> str | None:
    """``LO:HI`` (ms) recorded for the chip, or None when the chip has none yet."""
    entry = bands.get(chip)
    if entry is None:
        return None
    lo, hi = entry["band_ms"]
    return f"{lo:g}:{hi:g}"


# The pools mount their cache at root's home while a job may run with HOME elsewhere (GitHub's
# container jobs set /github/home): the job's own caches are read first, then the pool's.
POOL_HOME = Path("/root")
# A model directory has one of these at its top (diffusers pipelines: model_index.json).
MODEL_MARKERS = ("model_index.json", "config.json")
MODEL_LIST_FIX = (
    "put it in the pool's cache (vllm-ascend: its model list "
    ".github/workflows/misc/model_dataset_list.json, "
    "downloaded with modelscope), or pass --model-dir / KIT_ASCEND_MODEL_DIR"
)


@dataclass(frozen=True)
class ModelPlace:
    """One directory a pool's layout puts the model in."""

    layout: str  # explicit, hf-hub, local-dir, modelscope
    path: Path


def _hub_snapshot(repo_dir: Path) -> Path:
    """The snapshot ``refs/main`` names, else the only snapshot (huggingface_hub's hub-cache layout)."""
    snapshots = repo_dir / "snapshots"
    try:
        return snapshots / (repo_dir / "refs" / "main").read_text(encoding="utf-8").strip()
    except OSError:
        found = sorted(p for p in snapshots.iterdir() if p.is_dir()) if snapshots.is_dir() else []
        return found[0] if len(found) == 1 else snapshots / "<refs/main>"


def model_places(
    repo: str, env: Mapping[str, str], homes: Sequence[Path], explicit: str | None = None
) -> list[ModelPlace]:
    """Every directory where a pool may hold ``org/name``, in the order they are tried.

    An explicit directory is the only place. Otherwise: the Hugging Face hub cache
    (``models--org--name/snapshots/<rev>``), a ``local_dir`` tree (``huggingface/org/name``,
    vllm-omni's model sync), and ModelScope's cache (``modelscope download``:
    ``hub/models/org/name`` with dots written ``___``; older releases without ``models/``).
    """
    if explicit:
        return [ModelPlace("explicit", Path(explicit))]
    org, _, name = repo.partition("/")
    roots = list(dict.fromkeys(home / ".cache" for home in homes))
    hubs = [env.get("HF_HUB_CACHE"), env.get("HUGGINGFACE_HUB_CACHE")]
    hubs += [str(Path(env["HF_HOME"]) / "hub")] if env.get("HF_HOME") else []
    hf_homes = [Path(env["HF_HOME"])] if env.get("HF_HOME") else []
    ms_caches = [Path(env["MODELSCOPE_CACHE"])] if env.get("MODELSCOPE_CACHE") else []
    hubs += [str(root / "huggingface" / "hub") for root in roots]
    hf_homes += [root / "huggingface" for root in roots]
    ms_caches += [root / "modelscope" / "hub" for root in roots]
    masked = name.replace(".", "___")
    places = [
        ModelPlace("hf-hub", Path(h) / f"models--{org}--{name}")
        for h in dict.fromkeys(filter(None, hubs))
    ]
    places += [ModelPlace("local-dir", h / org / name) for h in dict.fromkeys(hf_homes)]
    for cache in dict.fromkeys(ms_caches):
        places += [ModelPlace("modelscope", cache / sub / org / masked) for sub in ("models", "")]
    return places


def is_model_dir(path: Path) -> bool:
    return any((path / marker).is_file() for marker in MODEL_MARKERS)


def find_model(repo: str, places: Sequence[ModelPlace]) -> Path:
    """The first place that holds the model (a hub-cache repository through its snapshot); else one
    line naming every place looked at."""
    looked = []
    for place in places:
        path = _hub_snapshot(place.path) if place.layout == "hf-hub" else place.path
        if is_model_dir(path):
            return path
        looked.append(f"{path} ({place.layout})")
    raise KitError(
        f"model {repo} is not in any place the pools use (no {' or '.join(MODEL_MARKERS)} in: "
        f"{', '.join(looked)})",
        MODEL_LIST_FIX,
    )


# The image's stack, built for the card, for CANN and for one another: pip may add packages beside
# them, never replace them. Read from each distribution's metadata, since vllm and vllm-ascend are
# editable installs in vllm-ascend's images (pip freeze prints `-e <path>` for them, never
# `vllm==`).
HELD = (
    "torch",
    "torch-npu",
    "torchvision",
    "torchaudio",
    "triton-ascend",
    "vllm",
    "vllm-ascend",
    "onnxruntime-cann",
)
REQUIRED = ("torch", "torch-npu", "vllm", "vllm-ascend")
# CUDA/CPU builds that would shadow the stack's own (vanilla onnxruntime over onnxruntime-cann): a
# constraint no version meets, so a requirement that pulls one in fails the build instead.
REFUSED = ("onnxruntime",)


def installed_versions(paths: Sequence[str] | None = None) -> dict[str, str]:
    """Normalized name -> version of every distribution on ``paths`` (default: this interpreter's
    sys.path)."""
    found = metadata.distributions() if paths is None else metadata.distributions(path=list(paths))
    return {normalize(d.metadata["Name"]): d.version for d in found if d.metadata["Name"]}


def release(version: str) -> str:
    """``major.minor`` of a version (``0.30.1.dev3+g1234`` -> ``0.30``), or the text itself if it has
    none."""
    match = re.match(r"^v?(\d+)\.(\d+)", version)
    return f"{match[1]}.{match[2]}" if match else version


def vllm_mismatch(vllm_version: str, omni_version: str) -> str | None:
    """Why this vLLM is not the one the pinned vllm-omni release is made for (its major.minor), or
    None."""
    if release(vllm_version) == release(omni_version):
        return None
    return f"vLLM {vllm_version} is not the {release(omni_version)} release vllm-omni {omni_version} is made for"


def held_constraints(installed: Mapping[str, str], omni_version: str) -> list[str]:
    """pip constraint lines that hold the image's stack at its versions and refuse the shadowing
    builds."""
    missing = [name for name in REQUIRED if name not in installed]
    if missing:
        raise KitError(
            f"the base image has no {', '.join(missing)} installed: not a vllm-ascend release "
            "image",
            "build on quay.io/atlas-ci/vllm-ascend:<release> (docs/ascend-ci.md, The CI image)",
        )
    why = vllm_mismatch(installed["vllm"], omni_version)
    if why:
        raise KitError(
            why,
            f"build on the vllm-ascend release for vLLM {release(omni_version)} "
            "(docs/ascend-ci.md)",
        )
    held = [f"{name}=={installed[name]}" for name in HELD if name in installed]
    return held + [f"{name}<0" for name in REFUSED]
