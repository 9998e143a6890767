"""Process setup and shared helpers of the regression suite's ``npu`` leg.

``prepare(mode)`` runs from conftest, before anything imports vllm_omni:

* ``simulated`` (no CANN): install npu_standin/simulated_npu.py, so device ``npu:0`` exists and
  ``torch_npu`` is the CPU stand-in. It must come first: vllm_omni (and transformers, which
  vllm imports) look for torch_npu while they are imported.
* ``real`` (CANN present): the real torch_npu, auto-loaded by torch; nothing is simulated.

Both modes then resolve vllm-omni's platform as the stock leg does: the NPU is hidden while
``vllm_omni.platforms`` picks one, so the CPU platform is chosen even on a card in an image
that carries vllm-ascend. The leg checks the patched kernels on NPU tensors (the fused op,
the host<->device copies, the LingBot replay entry); vllm-omni's NPU platform (its worker,
attention backend selection, vllm-ascend's ops) is exercised only by the e2e, which serves
the model through it. The patches choose their branches by ``tensor.device.type``, never by
the platform, so hiding it hides nothing they depend on.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

SYNC_REPORT_NAME = "npu-syncs.json"
_sync_counts: dict[str, dict[str, Any]] = {}


def prepare(mode: str) -> Any:
    """Set this process up for ``mode``; returns the SimulatedNPU when simulating, else None."""
    if mode == "none":
        return None
    sim = None
    if mode == "simulated":
        from npu_standin import simulated_npu

        sim = simulated_npu.install()
    import torch

    if not (hasattr(torch, "npu") and torch.npu.is_available()):
        raise pytest.UsageError(f"KIT_NPU_MODE={mode} but torch has no available npu device")
    _resolve_omni_platform_without_npu(torch)
    return sim


# The modules the suite tests (they import what else it reaches): both legs import them up front
# when coverage.py measures, and benchmarks/main_job.py times the same imports as the legs' floor.
CODE_UNDER_TEST = (
    "vllm_omni.diffusion.models.lingbot_world.transformer",
    "vllm_omni.experimental.ar_diffusion.kv_cache.paged_attention",
)


def import_code_under_test() -> None:
    """Import CODE_UNDER_TEST now; a module that fails (a broken patch, a mutant) is left to the tests
    importing it, each of which then fails with the error."""
    for name in CODE_UNDER_TEST:
        with contextlib.suppress(Exception):
            importlib.import_module(name)


def _resolve_omni_platform_without_npu(torch: Any) -> None:
    available = torch.npu.is_available
    # only while vllm-omni picks its platform (see the docstring)
    torch.npu.is_available = lambda: False
    try:
        import vllm_omni.platforms as platforms

        platforms.current_omni_platform  # noqa: B018  (resolves it now, once per process)
    finally:
        torch.npu.is_available = available


def record_syncs(scenario: str, syncs: int | None, **details: Any) -> None:
    """Keep one measured host-sync count; printed at the end and written to $KIT_LEG_REPORT_DIR."""
    _sync_counts[scenario] = {"host_syncs_per_call": syncs, **details}
    print(f"host syncs per NPU attention call [{scenario}]: {syncs}")
    report_dir = os.environ.get("KIT_LEG_REPORT_DIR")
    if report_dir:
        path = Path(report_dir) / SYNC_REPORT_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "npu_mode": os.environ.get("KIT_NPU_MODE", "none"),
            "target_max": 0,
            "scenarios": _sync_counts,
        }
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show the measured sync counts in the leg's output (imported into conftest as a hook)."""
    if not _sync_counts:
        return
    terminalreporter.section("host<->device syncs per NPU attention call")
    for scenario, data in sorted(_sync_counts.items()):
        terminalreporter.write_line(f"{scenario}: {data['host_syncs_per_call']}")


@pytest.fixture(scope="session")
def npu_device() -> Any:
    """``npu:0``: the simulated device or the real card (built lazily: stock torch has no "npu")."""
    import torch

    return torch.device("npu", 0)


def sync_counter() -> Any:
    """The simulated NPU, whose counters see every host<->device sync; skips on a real NPU."""
    from npu_standin import simulated_npu

    sim = simulated_npu.installed()
    if sim is None:
        pytest.skip("real NPU: host<->device syncs are counted only on the simulated NPU")
    return sim


def subprocess_args(mode: str, args: list[str]) -> list[str]:
    """``python args...`` for a subprocess of the leg: in the npu leg, through this module's bootstrap."""
    if mode == "none":
        return args
    return [str(Path(__file__).resolve()), *args]


def _bootstrap(argv: list[str]) -> None:
    """``python _npu_leg.py (SCRIPT | -m MODULE) ARGS...``: run it in a process prepared like the leg's.

    Without it a subprocess of the npu leg cannot import vllm: vllm imports transformers, which
    imports torch_npu when it is installed (without CANN that fails), and vllm-omni would pick
    its NPU platform, which needs vllm-ascend.
    """
    import runpy
    import sys

    prepare(os.environ.get("KIT_NPU_MODE", "none"))
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(argv)
        runpy.run_path(argv[0], run_name="__main__")


if __name__ == "__main__":
    import sys

    _bootstrap(sys.argv[1:])


def moved_bytes() -> Any:
    """A dispatch mode that sums the bytes written by data-moving aten ops (gathers, copies,
    concatenations).

    ``with moved_bytes() as counter: ...; counter.bytes``. It sees every op before the NPU backend
    does, so it counts the same on the simulated NPU and on a card.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    moving = ("index_select", "index", "cat", "copy_", "clone", "_to_copy")

    class MovedBytes(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.bytes = 0

        def __torch_dispatch__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
        ) -> Any:
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in moving and hasattr(out, "element_size"):
                self.bytes += out.numel() * out.element_size()
            return out

    return MovedBytes()
