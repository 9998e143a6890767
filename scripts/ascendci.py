"""Where the kit's Ascend CI runs, read from ci/ascend/: the fixed runner labels and Buildkite queues
(targets.toml), the CI image each runs, the model it takes from the pool's cache, and the
steady-median band per chip (bands.toml). The jobs ask `python -m scripts ascendci`; tests check
that the workflow and the pipeline offer exactly these labels and queues.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import tomllib

from scripts import handfile
from scripts.errors import KitError

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
        raise KitError(f"cannot read ci/{name}: {exc}", "restore it from git (git checkout -- ci/ascend)") from None


def targets(data: Mapping[str, Any], system: str) -> dict[str, dict[str, Any]]:
    """The labels (github) or queues (buildkite) the Ascend jobs may run on."""
    if system not in SYSTEMS:
        raise KitError(f"unknown CI system {system!r}", f"use one of: {', '.join(SYSTEMS)}")
    return dict(data.get(system, {}))


def image_for(data: Mapping[str, Any], system: str, name: str) -> str:
    """The CI image (name@sha256:...) a label or queue runs; refuses a name off the list or no image recorded."""
    known = targets(data, system)
    if name not in known:
        raise KitError(f"{system} target {name!r} is not in ci/{TARGETS}", f"use one of: {', '.join(sorted(known))}")
    hardware = known[name]["hardware"]
    image = data.get("image", {}).get(hardware, "")
    if not DIGEST_REF.match(image):
        raise KitError(
            f"no CI image recorded for hardware {hardware} ({name}): {image!r} is not name@sha256:<64 hex>",
            f"build ci/ascend/Dockerfile for {hardware}, push it, and record its digest in ci/{TARGETS} [image]",
        )
    return image


def chip_of(names: Mapping[int, str], cards: Sequence[int]) -> str:
    """The one chip (npu-smi's Name) of the given logical cards; ``names``: logical id -> "name health"."""
    chips = {names[c].split()[0] for c in cards if c in names}
    if len(chips) != 1 or any(c not in names for c in cards):
        raise KitError(f"cards {list(cards)} are not one visible chip model ({sorted(chips)})",
                       "run on a runner whose cards are all one model")  # fmt: skip
    return chips.pop()


def band_for(bands: Mapping[str, Any], chip: str) -> str | None:
    """``LO:HI`` (ms) recorded for the chip, or None when the chip has none yet."""
    entry = bands.get(chip)
    if entry is None:
        return None
    lo, hi = entry["band_ms"]
    return f"{lo:g}:{hi:g}"


def model_dir(repo: str) -> str:
    """The model's snapshot in the local Hugging Face cache (never downloaded: the pool's cache has it)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise KitError("huggingface_hub is not importable by this python", "run in the CI image's python3") from None
    try:
        return str(snapshot_download(repo, local_files_only=True))
    except Exception as exc:  # its errors differ by version; any of them means: not in the cache
        raise KitError(
            f"model {repo} is not in the local cache ({type(exc).__name__})",
            "add it to the runner pool's model list, or set HF_HOME to the cache that has it",
        ) from None
