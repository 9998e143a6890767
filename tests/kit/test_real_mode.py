"""The npu leg's selection in mode real, checked on CPU by collection only:
tests/kit/real_card_standin.py (the card, for the suite's conftest; test_probe.py's "card" row is
the probe answer that makes mode real). Mode real must collect the npu leg's tests and none that
need the simulator; a conftest that forgets the simulator-only marker must fail the same check."""

import ast
import re
import subprocess
from pathlib import Path

import pytest
from conftest import KIT_ROOT, Kit
from kithelpers import leg_kit

from scripts.legs import legenv, suite

pytestmark = pytest.mark.legs

SIMULATOR_MODULE = "test_simulated_npu_selfcheck.py"


def functions_where(
    suite_dir: Path, called: str | None = None, marker: str | None = None
) -> set[str]:
    names = set()
    for path in suite_dir.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            calls = {
                c.func.id
                for c in ast.walk(node)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
            marks = {d.attr for d in node.decorator_list if isinstance(d, ast.Attribute)}
            if called in calls or marker in marks:
                names.add(node.name)
    return names


def real_selection_problems(collected: list[str], suite_dir: Path) -> list[str]:
    names = {n.split("::")[-1].split("[")[0] for n in collected}
    counted = sorted(names & functions_where(suite_dir, called="sync_counter"))
    stock = sorted(names & functions_where(suite_dir, marker="stock_leg"))
    checks = {
        f"{SIMULATOR_MODULE} is collected": any(SIMULATOR_MODULE in node for node in collected),
        f"tests reading the simulator's counters are collected: {counted}": bool(counted),
        f"stock-leg tests are collected: {stock}": bool(stock),
        "the npu leg's tests are not collected": not any(
            "test_npu_paged_attention.py::" in n for n in collected
        ),
    }
    return [f"{problem} in mode real" for problem, found in checks.items() if found]


def collect(kit: Kit, mode: str) -> list[str]:
    python = legenv.ensure_env(kit, "npu")
    out = kit.root / ".work" / "records" / f"collect-{mode}"
    env = suite.leg_env(
        "npu", mode, kit.checkout, kit.pristine_tree, out, legenv.pycache_dir(python.parent.parent)
    )
    # torch_npu cannot load without CANN: torch must not autoload it here, in either mode.
    env |= {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": str(KIT_ROOT / "tests" / "kit")}
    standin = ["-p", "real_card_standin"] if mode == "real" else []
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            suite.SUITE,
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            *standin,
        ],
        cwd=kit.root,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if re.match(r"^tests/regression/\S+::", line)]


def test_mode_real_collects_the_npu_leg_and_nothing_simulator_only(tmp_path: Path) -> None:
    kit = leg_kit(tmp_path / "kit")
    kit.run("apply", check=True)
    suite_dir = kit.root / suite.SUITE
    # the scan finds the counter tests it must
    assert len(functions_where(suite_dir, called="sync_counter")) >= 5
    assert len(functions_where(suite_dir, marker="stock_leg")) >= 2
    real = collect(kit, "real")
    assert real_selection_problems(real, suite_dir) == []
    simulated = collect(kit, "simulated")
    # the same suite, simulated: the self-check runs
    assert any(SIMULATOR_MODULE in node for node in simulated)
    print(
        f"mode real collects {len(real)} of the {len(simulated)} tests mode simulated collects:",
        *real,
        sep="\n  ",
    )
    # Bites: a conftest that forgets the marker in mode real collects the simulator's tests there.
    conftest = kit.root / suite.SUITE / "conftest.py"
    text = conftest.read_text(encoding="utf-8")
    broken = text.replace(
        '"simulated_npu", "simulator_only", "pinned_env"),', '"simulated_npu", "pinned_env"),'
    )
    assert broken != text
    conftest.write_text(broken, encoding="utf-8")
    problems = real_selection_problems(collect(kit, "real"), suite_dir)
    assert any(SIMULATOR_MODULE in p for p in problems) and any(
        "counters" in p for p in problems
    ), problems
