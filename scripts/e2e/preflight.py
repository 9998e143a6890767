"""Checks before anything starts; each failure is one KitError line with its fix.

Ascend mode checks cards, CANN, torch_npu, model, deploy config, port and the
checkout. Stand-in mode (asked for explicitly) checks the checkout (its handler
is served) and the port, and records the other checks as skipped; an external
server (--server-url) is checked by nobody here: all are recorded as skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scripts.checkout.guards import verify_current
from scripts.e2e import server
from scripts.e2e.config import E2EConfig
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


_NPU_ROW = re.compile(r"^\|\s*(\d+)\s+([A-Za-z0-9]+)\s+\|\s*([A-Za-z]+)\s+\|")
_PROC_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+\|\s*(\d+)\s+\|")


def parse_npu_ids(npu_smi_info: str) -> dict[int, str]:
    """NPU id -> "name health" from ``npu-smi info``'s device table."""
    return {int(m[1]): f"{m[2]} {m[3]}" for line in npu_smi_info.splitlines() if (m := _NPU_ROW.match(line))}


def parse_busy_cards(npu_smi_info: str) -> dict[int, list[int]]:
    """NPU id -> pids from ``npu-smi info``'s process table."""
    busy: dict[int, list[int]] = {}
    for line in npu_smi_info.splitlines():
        if m := _PROC_ROW.match(line):
            busy.setdefault(int(m[1]), []).append(int(m[3]))
    return busy


def npu_smi_info() -> str:
    if shutil.which("npu-smi") is None:
        raise PreflightError(
            "no Ascend cards visible: npu-smi not found",
            "run on an Ascend runner with the driver mounted, or pass --standin to use the test stand-in",
        )
    done = subprocess.run(
        ["npu-smi", "info"], capture_output=True, encoding="utf-8", errors="replace", timeout=60, check=False
    )
    if done.returncode != 0:
        raise PreflightError(
            f"npu-smi info failed (exit {done.returncode}): {done.stderr.strip()[:200]}",
            "check the Ascend driver and the devices mounted into the job",
        )
    return done.stdout


def logical_cards(npu_smi_info: str) -> dict[int, int]:
    """Logical id -> npu-smi's NPU id, for the devices this job sees.

    ``ASCEND_RT_VISIBLE_DEVICES`` and ``npu:N`` take logical ids: the job's visible devices
    numbered from 0 in npu-smi's order. npu-smi shows the host's (physical) ids, which in a pod
    or a container given some cards need not start at 0. ``--cards`` is logical: the one source.
    """
    return dict(enumerate(sorted(parse_npu_ids(npu_smi_info))))


def busy_cards(npu_smi_info: str, cards: Sequence[int]) -> dict[int, list[int]]:
    """Logical card -> pids running on it, for the given logical cards."""
    physical = logical_cards(npu_smi_info)
    busy = parse_busy_cards(npu_smi_info)
    return {c: busy[physical[c]] for c in cards if c in physical and physical[c] in busy}


def check_cards(cards: Sequence[int], info: str, env: Mapping[str, str]) -> Check:
    listed, physical = parse_npu_ids(info), logical_cards(info)
    missing = [c for c in cards if c not in physical]
    if missing:
        raise PreflightError(
            f"cards {missing} not visible: this job sees {len(physical)} NPU(s) (logical ids 0..{len(physical) - 1})",
            "ask the runner for more cards (resource class / label) or pass --cards with logical ids it has",
        )
    visible = env.get("ASCEND_RT_VISIBLE_DEVICES")
    if visible:
        raise PreflightError(
            f"ASCEND_RT_VISIBLE_DEVICES={visible} is already set",
            "unset it: the e2e sets it from --cards (logical ids), its one source",
        )
    busy = busy_cards(info, cards)
    if busy:
        raise PreflightError(f"cards already in use: {busy}", "stop those processes or choose other --cards")
    return Check("cards", "ok", ", ".join(f"{c}: npu-smi id {physical[c]} {listed[physical[c]]}" for c in cards))


def check_cann(env: Mapping[str, str]) -> Check:
    home = env.get("ASCEND_HOME_PATH") or env.get("ASCEND_TOOLKIT_HOME")
    if not home or not Path(home).is_dir():
        raise PreflightError(
            "CANN environment not sourced (ASCEND_HOME_PATH unset or missing)",
            "source the toolkit's set_env.sh (e.g. /usr/local/Ascend/ascend-toolkit/set_env.sh) first",
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
    done = subprocess.run(
        [python, "-c", probe], capture_output=True, encoding="utf-8", errors="replace", timeout=300, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise PreflightError(
            f"real torch_npu not importable with {python}: {last[:200]}",
            "install the pinned torch_npu into the runner's python (or pass --python) and source CANN",
        )
    return Check("torch_npu", "ok", f"{done.stdout.strip()} ({python})")


def check_model(model: str | None) -> Check:
    if not model:
        raise PreflightError("no model path given", "pass the model directory as the first argument")
    if not Path(model).is_dir():
        raise PreflightError(f"model path {model} is not a directory", "download the model there or fix the path")
    return Check("model", "ok", model)


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


def run(ws: Workspace, config: E2EConfig, python: str | None, env: Mapping[str, str] = os.environ) -> list[Check]:
    """All checks in order; the first failure raises."""
    if config.mode == "external":
        skipped = ("cards", "cann", "torch_npu", "model", "checkout", "deploy_config", "port")
        return [Check(n, "skipped", f"external server at {config.server_url}") for n in skipped]
    if config.standin:
        # The stand-in serves upstream's handler from the checkout: that one check stays.
        skipped = ("cards", "cann", "torch_npu", "model", "deploy_config")
        checks = [Check(n, "skipped", "stand-in mode") for n in skipped]
        return [*checks, check_checkout(ws), check_port(config.host, config.port)]
    checks = [check_cards(config.cards, npu_smi_info(), env), check_cann(env)]
    if python is None:
        raise PreflightError("no base python found on PATH", "pass --python (the runner's python with torch_npu)")
    checks.append(check_torch_npu(python))
    checks.append(check_model(config.model))
    checks.append(check_checkout(ws))
    checks.append(check_file("deploy_config", config.deploy_config, "run nox -s apply, or pass --deploy-config"))
    checks.append(check_port(config.host, config.port))
    return checks
