"""A leg's mode (real NPU or simulated) against the one the caller demanded (`--require`)."""

from __future__ import annotations

from scripts.errors import KitError

MODES = ("real", "simulated")
ABSENT = "absent"


class ModeNotMet(KitError):
    """The caller demanded a mode (`--require real`) that the leg cannot run in here."""


def mode_shortfall(mode: str, required: str | None, versions_seen: dict[str, str]) -> str | None:
    """Why the leg's mode is not the required one (None when it is, or nothing was required)."""
    if required is None or mode == required:
        return None
    if required == "real":
        if versions_seen.get("torch_npu", ABSENT) == ABSENT:
            return "torch_npu is not installed in that python"
        if versions_seen.get("torch_npu_import") != "ok":
            return f"import torch_npu failed: {versions_seen.get('torch_npu_import', 'not tried')}"
        return (
            "torch_npu imports but sees no NPU (torch.npu.is_available() "
            f"{versions_seen.get('npu_available')}, "
            f"{versions_seen.get('npu_devices', '0')} devices)"
        )
    return "torch_npu imported, so the leg runs on the real NPU, not the simulated one"


def require_mode(leg: str, mode: str, required: str | None, versions_seen: dict[str, str]) -> None:
    """Refuse a leg whose mode is not the one the caller demanded, naming the reason."""
    reason = mode_shortfall(mode, required, versions_seen)
    if reason:
        fix = {
            "real": "source CANN (set_env.sh) and use a python with the real torch_npu, e.g. --python /usr/bin/python3",
            "simulated": "run where torch_npu cannot load (no CANN), or drop --require simulated",
        }[str(required)]
        raise ModeNotMet(f"leg {leg}: mode {mode}, but --require {required}: {reason}", fix)
