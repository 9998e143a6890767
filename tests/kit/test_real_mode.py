"""The npu leg's selection in mode real, checked on CPU: what a card would run, by collection only.

A stand-in probe answer (torch_npu imports, four cards) makes the runner choose mode real; the
leg's pytest then collects tests/regression in that mode, with tests/kit/real_card_standin.py
standing in for the card so that the suite's conftest accepts mode real here. Mode real must
collect the npu leg's tests and none that need the simulator (its self-check module, the tests
that read its sync counters). A copy whose conftest forgets the simulator-only marker in mode
real must fail the same check. Builds or reuses the npu leg env and applies the series: ``legs``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest
from conftest import KIT_ROOT, Kit
from test_leg_mutations import leg_kit

from scripts.legs import legenv, suite

pytestmark = pytest.mark.legs

# What the probe would say in the CI image on a 4-card runner (scripts/legs/probe.py).
STANDIN_PROBE = {"python": "3.11.7", "torch": "2.13.0", "torch_npu": "2.13.0", "vllm": "0.30.0",
                 "torch_npu_import": "ok", "npu_available": "True", "npu_devices": "4"}  # fmt: skip
SIMULATOR_MODULE = "test_simulated_npu_selfcheck.py"


def functions_where(suite_dir: Path, called: str | None = None, marker: str | None = None) -> set[str]:
    """Names of the suite's test functions that call ``called()`` or carry ``@pytest.mark.<marker>``."""
    names = set()
    for path in suite_dir.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            calls = {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}
            marks = {d.attr for d in node.decorator_list if isinstance(d, ast.Attribute)}
            if called in calls or marker in marks:
                names.add(node.name)
    return names


def real_selection_problems(collected: list[str], suite_dir: Path) -> list[str]:
    """What is wrong with a mode-real collection (node ids), empty when nothing is."""
    names = {n.split("::")[-1].split("[")[0] for n in collected}
    problems = []
    if any(SIMULATOR_MODULE in node for node in collected):
        problems.append(f"{SIMULATOR_MODULE} is collected in mode real")
    counted = sorted(names & functions_where(suite_dir, called="sync_counter"))
    if counted:
        problems.append(f"tests reading the simulator's counters are collected in mode real: {counted}")
    stock = sorted(names & functions_where(suite_dir, marker="stock_leg"))
    if stock:
        problems.append(f"stock-leg tests are collected in mode real: {stock}")
    if not any("test_npu_paged_attention.py::" in node for node in collected):
        problems.append("the npu leg's tests are not collected in mode real")
    return problems


def collect(kit: Kit, mode: str) -> list[str]:
    """The node ids the leg's pytest collects in ``mode``, in the npu leg env (collection only)."""
    python = legenv.ensure_env(kit, "npu")
    out = kit.root / ".work" / "records" / f"collect-{mode}"
    env = suite.leg_env("npu", mode, kit.checkout, kit.pristine_tree, out, legenv.pycache_dir(python.parent.parent))
    # torch_npu cannot load without CANN: torch must not autoload it here, in either mode.
    env |= {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(KIT_ROOT / "tests" / "kit")}
    standin = ["-p", "real_card_standin"] if mode == "real" else []
    done = subprocess.run([str(python), "-m", "pytest", suite.SUITE, "--collect-only", "-q", "-p", "no:cacheprovider",
                           *standin], cwd=kit.root, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if re.match(r"^tests/regression/\S+::", line)]


def test_mode_real_collects_the_npu_leg_and_nothing_simulator_only(tmp_path: Path) -> None:
    assert suite.npu_mode("npu", STANDIN_PROBE) == "real"
    kit = leg_kit(tmp_path / "kit")
    kit.run("apply", check=True)
    suite_dir = kit.root / suite.SUITE
    assert len(functions_where(suite_dir, called="sync_counter")) >= 5  # the scan finds the counter tests it must
    assert len(functions_where(suite_dir, marker="stock_leg")) >= 2
    real = collect(kit, "real")
    assert real_selection_problems(real, suite_dir) == []
    simulated = collect(kit, "simulated")
    assert any(SIMULATOR_MODULE in node for node in simulated)  # the same suite, simulated: the self-check runs
    print(f"mode real collects {len(real)} of the {len(simulated)} tests mode simulated collects:", *real, sep="\n  ")
    # Bites: a conftest that forgets the marker in mode real collects the simulator's tests there.
    conftest = kit.root / suite.SUITE / "conftest.py"
    text = conftest.read_text(encoding="utf-8")
    broken = text.replace('"simulated_npu", "simulator_only", "pinned_env"),', '"simulated_npu", "pinned_env"),')
    assert broken != text
    conftest.write_text(broken, encoding="utf-8")
    problems = real_selection_problems(collect(kit, "real"), suite_dir)
    assert any(SIMULATOR_MODULE in p for p in problems) and any("counters" in p for p in problems), problems
