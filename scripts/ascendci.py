"""Where the kit's Ascend CI runs, read from ci/ascend/: the fixed runner labels and Buildkite queues
(targets.toml), the CI image each runs, the model it takes from the pool's cache (in each layout the
pools use), the steady-median band per chip (bands.toml), and the version hold the CI image is built
under. The jobs ask `python -m scripts ascendci`; tests check that the workflow and the pipeline
offer exactly these labels and queues.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

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
    """ci/ascend/targets.toml or bands.toml, read against its schema: every refusal is one line that
    quotes what the file says."""
    path = ci_dir / name
    text = handfile.read(path, f"ci/{name}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KitError(
            f"cannot read ci/{name}: {exc}",
            "fix that line, or restore it: git checkout -- ci/ascend",
        ) from None
    check = check_bands if name == BANDS else check_targets
    check(data, lambda key: raw_line(text, key), f"ci/{name}")
    return data


def raw_line(text: str, key: str) -> str:
    """The line of the file that sets ``key`` (as the user wrote it), for the advice."""
    last = key.rpartition(".")[2].strip('"')
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("[", "#")) and not stripped.startswith(f"[{key}]"):
            continue
        if re.match(rf"^(\[{re.escape(key)}\]|\"?{re.escape(last)}\"?\s*=)", stripped):
            return f"line {number}: {stripped}"
    return f"[{key.rpartition('.')[0] or key}]"


Where = Callable[[str], str]
# org/name as the hubs spell a model: no empty part, no ".." or leading dot (the name becomes a path
# under each cache).
MODEL_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
TARGET_KEYS = {"model", "image", *SYSTEMS}


def _refuse(shown: str, where: str, what: str, fix: str) -> NoReturn:
    raise KitError(f"{shown} {where}: {what}", fix)


def _table(data: Mapping[str, Any], key: str, shown: str, where: Where) -> Mapping[str, Any]:
    value = data.get(key)
    if value is None:
        _refuse(shown, f"[{key}]", "missing", f"add the [{key}] table (docs/ascend-ci.md)")
    if not isinstance(value, dict):
        _refuse(shown, where(key), f"{key} is not a table", f"write it as a [{key}] table")
    return value


def _extra(
    table: Mapping[str, Any], allowed: set[str], what: str, shown: str, where: Where
) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        _refuse(
            shown,
            where(extra[0]),
            f"{what} has no key {extra[0]!r}",
            f"remove it (known: {', '.join(sorted(allowed))})",
        )


def check_targets(data: Mapping[str, Any], where: Where, shown: str) -> None:
    _extra(data, TARGET_KEYS, "the file", shown, where)
    model = _table(data, "model", shown, where)
    _extra(model, {"repo"}, "[model]", shown, where)
    repo = model.get("repo")
    if not isinstance(repo, str):
        _refuse(
            shown,
            where("model.repo") if "repo" in model else "[model]",
            f"repo is {'missing' if repo is None else 'not a string'}",
            'set repo = "org/name" (the model\'s hub id)',
        )
    if not MODEL_REPO.match(repo) or ".." in repo:
        _refuse(
            shown,
            where("model.repo"),
            f"repo {repo!r} is not a hub id org/name (it would name a folder outside the model "
            "caches)",
            'set repo = "org/name", e.g. "robbyant/lingbot-world-v2-14b-causal-fast-diffusers"',
        )
    images = _table(data, "image", shown, where)
    for hardware, image in images.items():
        if not isinstance(image, str):
            _refuse(
                shown,
                where(f"image.{hardware}"),
                f"[image] {hardware} is not a string",
                f'write it quoted: {hardware} = "name@sha256:<digest>" (or "" until one is built)',
            )
    for system in SYSTEMS:
        for name, target in _table(data, system, shown, where).items():
            if not isinstance(target, dict):
                _refuse(
                    shown,
                    where(f"{system}.{name}"),
                    f"{system} target {name!r} is not a table",
                    f'write it as [{system}.{name}] with hardware = "..."',
                )
            _extra(target, {"hardware"}, f"[{system}.{name}]", shown, where)
            hardware = target.get("hardware")
            if hardware not in images:
                _refuse(
                    shown,
                    where(f"{system}.{name}.hardware")
                    if "hardware" in target
                    else f"[{system}.{name}]",
                    f"{system} target {name!r} has "
                    + (
                        "no hardware"
                        if hardware is None
                        else f"hardware {hardware!r}, not in [image]"
                    ),
                    f"set hardware = one of {', '.join(map(repr, sorted(images)))}",
                )


def check_bands(data: Mapping[str, Any], where: Where, shown: str) -> None:
    for chip, entry in data.items():
        if not isinstance(entry, dict):
            _refuse(shown, where(chip), f"{chip} is not a table", f"write it as [{chip}]")
        _extra(entry, {"band_ms", "measured"}, f"[{chip}]", shown, where)
        band = entry.get("band_ms")
        ok = (
            isinstance(band, list)
            and len(band) == 2
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in band)
            and 0 < band[0] < band[1]
        )
        if not ok:
            _refuse(
                shown,
                where(f"{chip}.band_ms") if "band_ms" in entry else f"[{chip}]",
                f"[{chip}] band_ms is {'missing' if band is None else 'not [LO, HI] with 0 < LO < HI'}",
                "set band_ms = [LO, HI] in ms (the baseline's steady median +-5 %)",
            )


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


def baseline_band() -> list[float]:
    """BASELINE_BAND as an e2e summary records it."""
    return [float(x) for x in BASELINE_BAND.split(":")]


# A band is the steady median +-5 %, as the recorded ones are.
BAND_SPREAD = 0.05
BASELINES_DIR = Path("ascend-baselines")  # under .work/records unless KIT_ASCEND_BASELINES


def band_around(median_ms: float) -> tuple[float, float]:
    return (round(median_ms * (1 - BAND_SPREAD), 1), round(median_ms * (1 + BAND_SPREAD), 1))


@dataclass(frozen=True)
class Band:
    """The band a run is judged by, and where it comes from: bands.toml, a recorded baseline, or none
    (this run is the baseline)."""

    text: str  # LO:HI, what the e2e's --band takes
    source: str  # "bands", "baseline", "none"
    note: str = ""


def baseline_file(baselines: Path, chip: str) -> Path:
    return baselines / f"{re.sub(r'[^A-Za-z0-9._-]', '_', chip)}.json"


def choose_band(bands: Mapping[str, Any], chip: str, baselines: Path) -> Band:
    """bands.toml's entry for the chip; else the baseline a first run recorded under ``baselines``
    (judged, and said so); else none: this run is the baseline (recorded, not judged)."""
    recorded = band_for(bands, chip)
    if recorded:
        return Band(recorded, "bands")
    path = baseline_file(baselines, chip)
    entry = read_baseline(path)
    if entry is not None:
        lo, hi = band_around(entry["median_ms"])
        return Band(
            f"{lo:g}:{hi:g}",
            "baseline",
            f"kit: note: no band for {chip} in ci/{BANDS}: judged against the baseline {path} "
            f"recorded (steady median {entry['median_ms']:g} ms +-5 %); add it there: "
            f"{bands_entry(chip, entry)}",
        )
    return Band(
        BASELINE_BAND,
        "none",
        f"kit: note: no band for {chip} in ci/{BANDS} and no baseline in {baselines}: this run is "
        "its baseline (median recorded, not judged); the next run is judged against it",
    )


def read_baseline(path: Path) -> dict[str, Any] | None:
    """A baseline the kit wrote (chip, median_ms, runs); a file that is not one is refused by name."""
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        median = entry["median_ms"]
        ok = isinstance(entry["chip"], str) and isinstance(median, (int, float)) and median > 0
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise KitError(
            f"{path} is not a baseline the kit wrote (chip, median_ms > 0)",
            f"remove it; the next run records a new one: rm {path}",
        )
    return entry


def baseline_from(summary: Mapping[str, Any] | None, chip: str) -> dict[str, Any]:
    """The baseline of a passed e2e judged by no band: its runs' steady medians and their median."""
    if not summary or summary.get("verdict") != "pass" or summary.get("mode") != "ascend":
        raise KitError(
            f"no passed Ascend e2e to record as the {chip} baseline "
            f"(verdict {(summary or {}).get('verdict', 'none')})",
            "run the e2e on the cards first (ci/ascend/job.sh e2e)",
        )
    if summary.get("band_ms") != baseline_band():
        raise KitError(
            f"the last e2e was judged by the band {summary.get('band_ms')}, not run as a baseline",
            "record a baseline only from a run ascendci band gave no band",
        )
    medians = [r["steady_median_ms"] for r in summary.get("runs", []) if r.get("steady_median_ms")]
    if not medians:
        raise KitError("the last e2e has no steady median", "run it with more --chunks")
    ordered = sorted(medians)
    mid = len(ordered) // 2
    median = ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
    return {"chip": chip, "median_ms": round(median, 1), "runs_ms": medians}


def bands_toml(chip: str, entry: Mapping[str, Any]) -> str:
    """The ci/ascend/bands.toml entry for a recorded baseline."""
    lo, hi = band_around(entry["median_ms"])
    runs = " and ".join(f"{m:g}" for m in entry.get("runs_ms", [entry["median_ms"]]))
    return (
        f'\n["{chip}"]\nband_ms = [{lo}, {hi}]\n'
        f'measured = "{runs} ms, the baseline run on 4x {chip}, +-5 %"\n'
    )


def bands_entry(chip: str, entry: Mapping[str, Any]) -> str:
    lo, hi = band_around(entry["median_ms"])
    return f'["{chip}"] band_ms = [{lo}, {hi}]'


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
