"""Determinism settings pinned for every served run, and recorded in the manifest."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# HCCL/LCCL: deterministic collectives; ATB: no K-shuffled matmul, no LCOC
# (communication-compute overlap reorders reductions).
ASCEND_ENV: dict[str, str] = {
    "HCCL_DETERMINISTIC": "true",
    "LCCL_DETERMINISTIC": "1",
    "ATB_MATMUL_SHUFFLE_K_ENABLE": "0",
    "ATB_LLM_LCOC_ENABLE": "0",
    "PYTHONHASHSEED": "0",
    "KIT_E2E_DETERMINISTIC_TORCH": "1",
}

HOOK_MODULE = "_kit_e2e_determinism"

# Runs in every interpreter of the e2e venv (server and its spawned workers):
# once torch is imported, turn on deterministic algorithms (warn_only, as
# upstream kernels without a deterministic variant must still run).
HOOK_SOURCE = '''"""Written by the kit's e2e: torch.use_deterministic_algorithms(True, warn_only=True) after import."""
import importlib.abc
import importlib.util
import os
import sys


class _AfterTorchImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        exec_module = spec.loader.exec_module

        def exec_then_pin(module):
            exec_module(module)
            module.use_deterministic_algorithms(True, warn_only=True)

        spec.loader.exec_module = exec_then_pin
        return spec


if os.environ.get("KIT_E2E_DETERMINISTIC_TORCH") == "1":
    sys.meta_path.insert(0, _AfterTorchImport())
'''


def install_hook(site_packages: Path) -> None:
    (site_packages / f"{HOOK_MODULE}.py").write_text(HOOK_SOURCE)
    (site_packages / f"{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}\n")


# How Ascend CI runs vllm on cards: workers spawned (a forked child cannot use an NPU its parent
# initialised), and the model only from the runner's cache (no hub traffic mid-benchmark).
ASCEND_RUNTIME_ENV: dict[str, str] = {
    "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
    "HF_HUB_OFFLINE": "1",
}


def server_env(base: Mapping[str, str], cards: Sequence[int], ascend: bool) -> dict[str, str]:
    """The server's environment: the caller's, plus the pinned settings; on Ascend also spawn, the
    offline hub and the cards, as logical ids (the job's visible devices from 0: what CANN's
    variable takes)."""
    env = {**base, **ASCEND_ENV}
    if ascend:
        env |= ASCEND_RUNTIME_ENV
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(c) for c in cards)
    return env


def recorded(env: Mapping[str, str]) -> dict[str, str | None]:
    keys = [*ASCEND_ENV, *ASCEND_RUNTIME_ENV, "ASCEND_RT_VISIBLE_DEVICES"]
    return {key: env.get(key) for key in keys}
