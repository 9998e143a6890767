"""Checks before anything starts; each failure is one KitError line with its fix.

The run's own inputs come first (model, checkout, deploy config, server command, first frame,
the benchmark client's websockets), so a typo is found on any host and before any server
starts; then, in Ascend mode, the machine (cards, CANN, torch_npu, vLLM's release) and the port.
Stand-in mode (asked for explicitly) needs no model and no card: a model given must exist, the
rest of the inputs are checked as on Ascend. An external server (--server-url) is checked by
nobody here; the client's first frame and websockets still are.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts import ascendci
from scripts.checkout.guards import verify_current
from scripts.e2e import benchclient, server
from scripts.e2e.config import E2EConfig, parse_cards
from scripts.e2e.evidence import run_python
from scripts.errors import KitError
from scripts.pin import load_pin
from scripts.series import load_series
from scripts.workspace import Workspace


class PreflightError(KitError):
    """The runner is not ready for the e2e."""


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok" or "skipped"
    detail: str


# npu-smi info's device table, two lines per chip: "| NPU  Name | Health | ..." then "| Chip [Phy-ID]
# | Bus-Id | ...". Atlas A2 (910B1-B4) has one chip per NPU id ("| 0  | 0000:C1:00.0 |"); Atlas A3
# lists two chips under each NPU id, both named "Ascend910", with their Phy-ID ("| 1  1 | ..."). A name
# holds a letter, so rows some npu-smi releases add under a chip ("| 0  0 | OK |") are not chips.
_CHIP_HEAD = re.compile(r"^\|\s*(\d+)\s+([A-Za-z0-9]*[A-Za-z][A-Za-z0-9]*)\s+\|\s*([A-Za-z]+)\s+\|")
_CHIP_BUS = re.compile(r"^\|\s*(\d+)(?:\s+(\d+))?\s+\|\s*([0-9A-Fa-f]{4}:[0-9A-Fa-f:.]+|NA)\s+\|")
# The process table: "| NPU  Chip | Process id | ...", the chip as the device table numbers it.
_PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+\|\s*(\d+)\s+\|")


@dataclass(frozen=True)
class Chip:
    """One chip of ``npu-smi info``: a logical device (what ASCEND_RT_VISIBLE_DEVICES and npu:N
    count), under its NPU id (A3: two chips per id)."""

    npu: int
    chip: int  # the chip's number under its NPU id: 0 on A2, 0 and 1 on A3
    name: str  # the chip model, npu-smi's Name: 910B1..910B4, Ascend910 (A3)
    health: str
    phy: int | None  # npu-smi's Phy-ID, where it shows one

    def shown(self, per_npu: int) -> str:
        where = f"npu-smi id {self.npu}" + (f" chip {self.chip}" if per_npu > 1 else "")
        return f"{where} {self.name} {self.health}"


def parse_chips(npu_smi_info: str) -> list[Chip]:
    """Every chip of ``npu-smi info``'s device table, in (NPU id, chip) order."""
    chips, head = [], None
    for line in npu_smi_info.splitlines():
        if m := _CHIP_HEAD.match(line):
            head = m
        elif head and (b := _CHIP_BUS.match(line)):
            phy = int(b[2]) if b[2] is not None else None
            chips.append(Chip(int(head[1]), int(b[1]), head[2], head[3], phy))
            head = None
    return sorted(chips, key=lambda c: (c.npu, c.chip))


def parse_npu_ids(npu_smi_info: str) -> dict[int, str]:
    """NPU id -> "name health" of its first chip, from ``npu-smi info``'s device table."""
    ids: dict[int, str] = {}
    for chip in parse_chips(npu_smi_info):
        ids.setdefault(chip.npu, f"{chip.name} {chip.health}")
    return ids


def parse_busy_chips(npu_smi_info: str) -> dict[tuple[int, int], list[int]]:
    """(NPU id, chip) -> pids from ``npu-smi info``'s process table."""
    busy: dict[tuple[int, int], list[int]] = {}
    for line in npu_smi_info.splitlines():
        if m := _PROC_ROW.match(line):
            busy.setdefault((int(m[1]), int(m[2])), []).append(int(m[3]))
    return busy


def parse_busy_cards(npu_smi_info: str) -> dict[int, list[int]]:
    """NPU id -> pids from ``npu-smi info``'s process table."""
    busy: dict[int, list[int]] = {}
    for (npu, _), pids in parse_busy_chips(npu_smi_info).items():
        busy.setdefault(npu, []).extend(pids)
    return busy


NO_CARDS_FIX = "run on an Ascend runner with the driver mounted (npu-smi on PATH)"


def npu_smi_info(fix: str = NO_CARDS_FIX) -> str:
    """``npu-smi info``; ``fix``: what the caller's user can do without cards (e2e: its --standin)."""
    if shutil.which("npu-smi") is None:
        raise PreflightError("no Ascend cards visible: npu-smi not found", fix)
    done = subprocess.run(
        ["npu-smi", "info"],
        capture_output=True,
        encoding="utf-8",
        errors="replace",
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise PreflightError(
            f"npu-smi info failed (exit {done.returncode}): {done.stderr.strip()[:200]}",
            "check the Ascend driver and the devices mounted into the job",
        )
    return done.stdout


def logical_chips(npu_smi_info: str) -> dict[int, Chip]:
    """Logical id -> chip, for the devices this job sees.

    ``ASCEND_RT_VISIBLE_DEVICES`` and ``npu:N`` take logical ids: the job's visible chips numbered
    from 0 in npu-smi's order (on A3 two per NPU id). npu-smi shows the host's ids, which in a pod
    or a container given some chips need not start at 0. ``--cards`` is logical: the one source.
    """
    return dict(enumerate(parse_chips(npu_smi_info)))


def logical_cards(npu_smi_info: str) -> dict[int, int]:
    """Logical id -> npu-smi's NPU id of that chip (on A3 two logical ids share one)."""
    return {logical: chip.npu for logical, chip in logical_chips(npu_smi_info).items()}


def busy_cards(npu_smi_info: str, cards: Sequence[int]) -> dict[int, list[int]]:
    """Logical card -> pids running on it, for the given logical cards."""
    chips = logical_chips(npu_smi_info)
    busy = parse_busy_chips(npu_smi_info)
    return {
        c: busy[(chips[c].npu, chips[c].chip)]
        for c in cards
        if c in chips and (chips[c].npu, chips[c].chip) in busy
    }


VISIBLE = "ASCEND_RT_VISIBLE_DEVICES"


def check_preset_visible(cards: Sequence[int], env: Mapping[str, str]) -> str | None:
    """A pool that sets ASCEND_RT_VISIBLE_DEVICES itself (logical ids) may: it must name exactly the
    cards asked for, since the e2e's servers set it from --cards, its one source. Returns a note, or
    None when it is unset."""
    visible = env.get(VISIBLE, "").strip()
    if not visible:
        return None
    wanted = ",".join(map(str, cards))
    try:
        preset = parse_cards(visible)
    except KitError:
        preset = None
    if preset != tuple(sorted(cards)):
        raise PreflightError(
            f"{VISIBLE}={visible} is already set and names other cards than --cards {wanted}",
            f"pass --cards {visible} (KIT_E2E_CARDS), or unset {VISIBLE}",
        )
    return f"{VISIBLE}={visible} preset, the cards asked for"


def chip_model(chips: Mapping[int, Chip], cards: Sequence[int]) -> str:
    """The one chip model of the given logical cards (a band is per chip model)."""
    return ascendci.chip_of({c: chip.name for c, chip in chips.items()}, cards)


def check_cards(cards: Sequence[int], info: str, env: Mapping[str, str]) -> Check:
    chips = logical_chips(info)
    missing = [c for c in cards if c not in chips]
    if missing:
        npus = len({chip.npu for chip in chips.values()})
        raise PreflightError(
            f"cards {missing} not visible: this job sees {len(chips)} NPU chip(s) on {npus} NPU "
            f"id(s) (logical ids 0..{len(chips) - 1})",
            "ask the runner for more cards (resource class / label) or pass --cards with logical "
            "ids it has",
        )
    preset = check_preset_visible(cards, env)
    busy = busy_cards(info, cards)
    if busy:
        raise PreflightError(
            f"cards already in use: {busy}", "stop those processes or choose other --cards"
        )
    model = chip_model(chips, cards)
    per_npu = {c.npu: sum(o.npu == c.npu for o in chips.values()) for c in chips.values()}
    shown = ", ".join(f"{c}: {chips[c].shown(per_npu[chips[c].npu])}" for c in cards)
    return Check("cards", "ok", f"{model}: {shown}" + (f"; {preset}" if preset else ""))


def check_cann(env: Mapping[str, str]) -> Check:
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    if not home or not Path(home).is_dir():
        raise PreflightError(
            "CANN environment not sourced (ASCEND_HOME_PATH unset or missing)",
            "source the toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh) "
            "first",
        )
    atb = env.get("ATB_HOME_PATH")
    if not atb or not Path(atb).is_dir():
        raise PreflightError(
            "ATB environment not sourced (ATB_HOME_PATH unset or missing)",
            "source /usr/local/Ascend/nnal/atb/set_env.sh too (ci/ascend/env.sh sources both)",
        )
    return Check("cann", "ok", f"{home}; atb {atb}")


def check_torch_npu(python: str) -> Check:
    probe = "import torch, torch_npu, torch_npu._C; assert torch.npu.is_available(); print(torch_npu.__version__)"
    done = run_python(python, probe)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PreflightError(
            f"real torch_npu not importable with {python}: {last[:200]}",
            "install the pinned torch_npu into the runner's python (or pass --python) and source "
            "CANN",
        )
    return Check("torch_npu", "ok", f"{done.stdout.strip()} ({python})")


def check_model(model: str | None) -> Check:
    if not model:
        raise PreflightError(
            "no model path given", "pass the model directory as the first argument"
        )
    if not ascendci.is_model_dir(Path(model)):
        raise PreflightError(
            f"model path {model} is not a model directory (no "
            f"{' or '.join(ascendci.MODEL_MARKERS)})",
            "pass the model's directory (on Ascend CI: python -m scripts ascendci model)",
        )
    return Check("model", "ok", model)


PLACEHOLDERS = ("host", "port", "model", "deploy_config", "python", "checkout")


def check_server_cmd(template: Sequence[str] | None) -> Check:
    """--server-cmd: only known placeholders, and a program that exists (else Popen's error comes
    later)."""
    if template is None:
        return Check("server_cmd", "ok", "the kit's own")
    unknown = sorted(
        {m for arg in template for m in re.findall(r"\{(\w+)\}", arg)} - set(PLACEHOLDERS)
    )
    if unknown:
        raise PreflightError(
            "--server-cmd names unknown placeholder(s) "
            f"{', '.join('{' + u + '}' for u in unknown)}",
            f"use only {', '.join('{' + p + '}' for p in PLACEHOLDERS)}",
        )
    program = template[0] if template else ""
    filled_later = "{" in program  # e.g. {python}: known once the venv or the stock env exists
    if not filled_later and not (
        shutil.which(program) if "/" not in program else os.access(program, os.X_OK)
    ):
        raise PreflightError(
            f"--server-cmd program {program!r} is not an executable on PATH",
            "pass its full path, or fix its name",
        )
    return Check("server_cmd", "ok", " ".join(template))


def check_image(image: str | None) -> Check:
    """--image: a URL the client can send, or a readable file (else the client fails with the server
    up)."""
    if image is None:
        return Check("image", "ok", "the kit's grey first frame")
    if (
        image.partition(":")[0] in ("http", "https", "data")
        or os.access(image, os.R_OK)
        and Path(image).is_file()
    ):
        return Check("image", "ok", image)
    raise PreflightError(
        f"--image {image} is neither a readable file nor a URL",
        "pass a PNG/JPEG path or an http(s) URL",
    )


def check_client_python(python: str | None) -> Check:
    """The benchmark client's python can import websockets (else it fails with the server up)."""
    if python is None:
        ok = importlib.util.find_spec("websockets") is not None
        python = sys.executable
    else:
        ok = (
            subprocess.run(
                [python, "-c", "import websockets"], capture_output=True, timeout=120
            ).returncode
            == 0
        )
    if not ok:
        raise PreflightError(
            f"the benchmark client's python {python} cannot import websockets",
            f"install it there ({python} -m pip install websockets)",
        )
    return Check("client", "ok", f"websockets importable by {python}")


def check_vllm(python: str, omni_version: str) -> Check:
    """The image's vLLM is the major.minor the pinned vllm-omni release is made for."""
    probe = "import importlib.metadata as m; print(m.version('vllm'))"
    done = run_python(python, probe, timeout=120)
    version = done.stdout.strip() if done.returncode == 0 else "(not installed)"
    why = ascendci.vllm_mismatch(version, omni_version)
    if why:
        raise PreflightError(
            f"{why} ({python})", "run in the CI image built on the matching vllm-ascend release"
        )
    return Check("vllm", "ok", f"{version} ({python})")


def check_file(name: str, path: Path, fix: str) -> Check:
    if not path.is_file():
        raise PreflightError(f"{name} {path} not found", fix)
    return Check(name, "ok", str(path))


def check_port(host: str, port: int) -> Check:
    if not server.port_free(host, port):
        raise PreflightError(
            f"port {port} on {host} is already in use",
            f"stop what listens there (ss -ltnp 'sport = :{port}') or pass --port",
        )
    return Check("port", "ok", f"{host}:{port}")


def check_checkout(ws: Workspace) -> Check:
    """The workspace's checkout is the pin plus exactly the series, clean (else a KitError)."""
    state = verify_current(ws.checkout, load_pin(ws.pin_file), load_series(ws.patches))
    return Check("checkout", "ok", f"{state.pin} + series {state.series_digest[:12]}")


def inputs(config: E2EConfig, client_python: str | None) -> list[Check]:
    """The run's own inputs, checked before anything on the machine (after the checkout, which holds
    the default deploy config): a typo is found on any host, before a server starts."""
    return [
        check_file(
            "deploy_config", config.deploy_config, "run nox -s apply, or pass --deploy-config"
        ),
        check_server_cmd(config.server_cmd),
        check_image(config.image),
        check_client_python(client_python),
    ]


def run(
    ws: Workspace, config: E2EConfig, python: str | None, env: Mapping[str, str] = os.environ
) -> list[Check]:
    """All checks in order; the first failure raises."""
    if config.mode == "external":
        # Nothing is started here; the client still runs here, with its first frame.
        skipped = (
            "cards",
            "cann",
            "torch_npu",
            "vllm",
            "model",
            "checkout",
            "deploy_config",
            "port",
        )
        checks = [Check(n, "skipped", f"external server at {config.server_url}") for n in skipped]
        return [*checks, check_image(config.image), check_client_python(None)]
    if config.standin:
        # The stand-in serves upstream's handler from the checkout with a stand-in engine: it needs
        # no model (one given must exist) and no card, but the deploy config the Ascend run would
        # read must exist.
        skipped = ("cards", "cann", "torch_npu", "vllm")
        checks = [Check(n, "skipped", "stand-in mode") for n in skipped]
        model = (
            check_model(config.model)
            if config.model
            else Check("model", "skipped", "stand-in mode")
        )
        return [
            *checks,
            model,
            check_checkout(ws),
            *inputs(config, None),
            check_port(config.host, config.port),
        ]
    # Ascend: upstream's client runs in the e2e venv, which sees the base python's packages; the
    # kit's in this one.
    client_python = python if benchclient.choose_client(config) == "upstream" else None
    checks = [check_model(config.model), check_checkout(ws), *inputs(config, client_python)]
    checks += [
        check_cards(config.cards, npu_smi_info(f"{NO_CARDS_FIX}, or pass --standin"), env),
        check_cann(env),
    ]
    if python is None:
        raise PreflightError(
            "no base python found on PATH", "pass --python (the runner's python with torch_npu)"
        )
    checks.append(check_torch_npu(python))
    checks.append(check_vllm(python, load_pin(ws.pin_file).version))
    checks.append(check_port(config.host, config.port))
    return checks
