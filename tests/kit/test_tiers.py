"""The tiers of the kit's own tests: pytest.ini's markers are the heavy tier's, and every test that
builds or uses a leg env, starts servers on the real checkout or fetches a real wheel carries one.
"""

import ast
import configparser
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import KIT_ROOT

from scripts.kittools import HEAVY_MARKERS, KIT_TIERS, kit_tests_command, missing

# Helpers whose use makes a test heavy, by the marker that says so.
HEAVY_CALLS = {
    "e2e": {"ensure_checkout_and_stock_env"},  # applies the series in a copy of the kit
    "legs": {"ensure_env", "leg_kit", "shared_env_ready"},
    "network": {"real_wheel", "urlopen"},  # the real release wheel: from the cache or the registry
}


def tier_problems(ini_text: str) -> list[str]:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(ini_text)
    lines = parser["pytest"].get("markers", "").splitlines()
    declared = {line.split(":", 1)[0].strip() for line in lines if line.strip()}
    problems = []
    if declared != set(HEAVY_MARKERS):
        problems.append(f"pytest.ini declares {sorted(declared)}, the tiers know {HEAVY_MARKERS}")
    for marks in [set(), *({m} for m in HEAVY_MARKERS)]:
        # pytest's -m expression on a test with these marks (the tiers' expressions are plain
        # Python)
        names = {m: m in marks for m in HEAVY_MARKERS}
        default, heavy = (bool(eval(KIT_TIERS[t][1], {}, names)) for t in ("default", "heavy"))  # noqa: S307
        if default == heavy:
            problems.append(f"a test marked {sorted(marks)} is in both tiers or in neither")
    return problems


def test_the_tiers_split_the_tests_by_pytest_ini_markers_and_the_check_bites() -> None:
    assert tier_problems((KIT_ROOT / "pytest.ini").read_text(encoding="utf-8")) == []
    assert kit_tests_command("default", ["-x"])[-2:] == [
        "--junitxml=.work/records/kit/junit.xml",
        "-x",
    ]
    assert "--junitxml=.work/records/kit-heavy/junit.xml" in kit_tests_command("heavy", [])
    # each test makes what it writes
    assert "-n" in KIT_TIERS["default"] and "-n" in KIT_TIERS["heavy"]
    # a module's servers / copies are set up once, on one worker
    assert "loadfile" in KIT_TIERS["heavy"]
    # no worker idles while the other still holds queued tests
    assert "worksteal" in KIT_TIERS["default"]
    # Bites on a marker no tier knows.
    ini = (KIT_ROOT / "pytest.ini").read_text(encoding="utf-8") + "    slow: takes long\n"
    declared = "['e2e', 'legs', 'network', 'slow']"
    assert tier_problems(ini) == [f"pytest.ini declares {declared}, the tiers know {HEAVY_MARKERS}"]


def _calls(node: ast.AST) -> set[str]:
    return {
        n.func.id if isinstance(n.func, ast.Name) else n.func.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name | ast.Attribute)
    }


def _marks(decorators: list[ast.expr]) -> set[str]:
    return {
        d.attr
        for dec in decorators
        for d in ast.walk(dec)
        if isinstance(d, ast.Attribute)
        and isinstance(d.value, ast.Attribute)
        and d.value.attr == "mark"
    }


def unmarked_heavy_tests(source: str) -> list[str]:
    """Tests of one module that reach a heavy helper (through the module's functions, classes and
    fixtures, autouse ones included) without a heavy marker on them or on the module."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    module_marks = {
        m
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name) and t.id == "pytestmark"
        for m in _marks([n.value])
    }
    fixtures = {
        name
        for name, n in defs.items()
        if isinstance(n, ast.FunctionDef) and "fixture" in ast.dump(n)
    }
    autouse = [name for name in fixtures if "autouse" in ast.dump(defs[name])]

    def reach(names: list[str]) -> set[str]:
        seen: set[str] = set()
        found: set[str] = set()
        while names:
            if (name := names.pop()) in seen or name not in defs:
                continue
            seen.add(name)
            found |= (calls := _calls(defs[name]))
            params = (
                [a.arg for a in defs[name].args.args]
                if isinstance(defs[name], ast.FunctionDef)
                else []
            )
            names += [c for c in calls if c in defs] + [p for p in params if p in fixtures]
        return found

    problems = []
    for name, node in defs.items():
        if name.startswith("test_") and isinstance(node, ast.FunctionDef):
            heavy = sorted(set().union(*HEAVY_CALLS.values()) & reach([name, *autouse]))
            if heavy and not (set(HEAVY_MARKERS) & (module_marks | _marks(node.decorator_list))):
                problems.append(
                    f"{name}: {', '.join(heavy)} without a {'/'.join(HEAVY_MARKERS)} marker"
                )
    return problems


def test_every_heavy_test_is_marked_and_the_check_bites() -> None:
    found = {
        p.name: unmarked_heavy_tests(p.read_text("utf-8"))
        for p in (KIT_ROOT / "tests/kit").glob("test_*.py")
    }
    assert {name: tests for name, tests in found.items() if tests} == {}
    # Bites through fixtures and helpers.
    source = (
        "import pytest\n"
        "def helper():\n    return legenv.ensure_env('stock')\n"
        "@pytest.fixture\ndef wheel(tmp_path):\n    return real_wheel(tmp_path)\n"
        "def test_a():\n    helper()\n"
        "def test_b(wheel):\n    pass\n"
        "@pytest.mark.legs\ndef test_c():\n    helper()\n"
        "def test_d():\n    pass\n"
    )
    assert unmarked_heavy_tests(source) == [
        "test_a: ensure_env without a legs/e2e/network marker",
        "test_b: real_wheel without a legs/e2e/network marker",
    ]
    assert (
        unmarked_heavy_tests(
            "import pytest\npytestmark = pytest.mark.network\n" + source.split("\n", 1)[1]
        )
        == []
    )


def test_the_kit_tests_without_their_tools_end_in_one_message_naming_them_and_nox(
    tmp_path: Path,
) -> None:
    # A copy of the kit whose ci/kit-dev-tools.txt pins a tool this interpreter lacks: pytest says
    # so, once.
    for part in ("scripts", "ci"):
        shutil.copytree(
            KIT_ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "tests" / "kit").mkdir(parents=True)
    for name in ("conftest.py", "e2e_prereq.py", "test_tiers.py"):
        shutil.copy2(KIT_ROOT / "tests" / "kit" / name, tmp_path / "tests" / "kit" / name)
    shutil.copy2(KIT_ROOT / "pytest.ini", tmp_path / "pytest.ini")
    with (tmp_path / "ci" / "kit-dev-tools.txt").open("a", encoding="utf-8") as tools:
        tools.write("kit-absent-tool==1.0\n")
    argv = [sys.executable, "-m", "pytest", "tests/kit", "-p", "no:cacheprovider"]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    lines = [line for line in out.splitlines() if "kit: error:" in line]
    assert done.returncode == 4, out  # pytest's usage error: no test ran
    assert len(lines) == 1 and "kit-absent-tool -- run: nox -s kit" in lines[0], out
    assert "Traceback" not in out and "passed" not in out, out
    assert missing(["pytest==1", "kit-absent-tool==1.0", "# a comment", "kit-absent-tool==2"]) == [
        "kit-absent-tool"
    ]
