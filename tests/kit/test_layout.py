"""The layout shows the pipeline: no module of scripts/ imports from a later stage, and the
regression suite (which runs next to upstream's own `scripts/` folder) never imports the kit.

README.md, "Layout", explains the stages; STAGES below is the same list, checked both ways:
every module of scripts/ has a stage, and every import goes to the same or an earlier one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# stage number -> modules (a name ending in "." is a whole subpackage); 0 is the plumbing.
STAGES: dict[int, tuple[str, ...]] = {
    0: ("errors", "workspace", "report", "records", "gitcmd", "worklock", "diffparse", "kittools", "signals"),
    1: ("pin", "registry"),
    2: ("series", "revisions"),
    3: ("checkout",),
    4: ("checks.",),
    5: ("legs.",),
    6: ("e2e.",),
    7: ("pr.",),
    8: ("readme",),
    9: ("commands.", "__main__"),
}


def stage_of(module: str) -> int | None:
    """The stage of a module of scripts/ given without the `scripts.` prefix (None: not in the map)."""
    for number, names in STAGES.items():
        for name in names:
            if module == name or module == name.rstrip(".") or (name.endswith(".") and module.startswith(name)):
                return number
    return None


def kit_imports(source: str) -> set[str]:
    """Modules of scripts/ a source file imports, unprefixed: `from scripts.legs import suite` -> legs.suite."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "scripts":
            sub = node.module.removeprefix("scripts").removeprefix(".")
            for alias in node.names:
                child = f"{sub}.{alias.name}".lstrip(".")
                is_module = (ROOT / "scripts" / Path(*child.split("."))).with_suffix(".py").is_file() or (
                    ROOT / "scripts" / Path(*child.split("."))
                ).is_dir()
                found.add(child if is_module or not sub else sub)
        elif isinstance(node, ast.Import):
            found.update(a.name.removeprefix("scripts.") for a in node.names if a.name.split(".")[0] == "scripts")
    return found


def backward_imports(modules: dict[str, str]) -> list[str]:
    """`importer -> imported` for every import of a later stage, and `module: no stage` for unmapped ones."""
    problems = []
    for name, source in sorted(modules.items()):
        own = stage_of(name)
        if own is None:
            problems.append(f"{name}: no stage (add it to STAGES and to README's Layout)")
            continue
        for imported in sorted(kit_imports(source)):
            theirs = stage_of(imported)
            if theirs is not None and theirs > own:
                problems.append(f"{name} (stage {own}) -> {imported} (stage {theirs})")
    return problems


def kit_modules() -> dict[str, str]:
    out = {}
    for path in sorted((ROOT / "scripts").rglob("*.py")):
        rel = path.relative_to(ROOT / "scripts").with_suffix("")
        parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
        if parts:
            out[".".join(parts)] = path.read_text(encoding="utf-8")
    return out


def test_no_module_imports_a_later_stage() -> None:
    assert backward_imports(kit_modules()) == []


@pytest.mark.parametrize(
    ("name", "source", "expected"),
    [
        ("checkout", "from scripts.legs import suite\n", "checkout (stage 3) -> legs.suite (stage 5)"),
        ("series", "from scripts import checkout as co\n", "series (stage 2) -> checkout (stage 3)"),
        ("legs.suite", "from scripts.commands.common import current\n", "legs.suite (stage 5) -> commands.common"),
        ("pin", "import scripts.pr.branch\n", "pin (stage 1) -> pr.branch (stage 7)"),
        ("newthing", "", "newthing: no stage"),
    ],
)
def test_the_layering_check_bites(name: str, source: str, expected: str) -> None:
    problems = backward_imports({name: source})
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def import_cycle(modules: dict[str, str]) -> list[str]:
    """One cycle of the import graph (late imports inside functions included: they hide a cycle, they do not
    remove it), as [a, b, ..., a]; [] when there is none. Same-stage imports are allowed, cycles are not."""
    graph = {name: sorted(kit_imports(source) & modules.keys()) for name, source in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        for imported in graph.get(name, []):
            if imported != name and (cycle := visit(imported, [*path, name])):
                return cycle
        done.add(name)
        return []

    return next((cycle for name in sorted(graph) if (cycle := visit(name, []))), [])


def test_no_import_cycle_even_inside_a_stage() -> None:
    assert import_cycle(kit_modules()) == []


def test_the_cycle_check_bites_on_a_late_import_inside_a_stage() -> None:
    modules = {
        "e2e.run": "from scripts.e2e import ab\n",
        "e2e.ab": "def f():\n    from scripts.e2e import run\n",
        "e2e.bench": "",
    }
    assert import_cycle(modules) == ["e2e.ab", "e2e.run", "e2e.ab"]
    assert import_cycle({**modules, "e2e.ab": ""}) == []


def test_forward_imports_pass() -> None:
    source = "from scripts import checkout, pin\nfrom scripts.checks import lint\n"
    assert backward_imports({"pr.prepare": source}) == []


def test_the_regression_suite_and_standins_never_import_the_kit() -> None:
    offenders = [
        f"{path.relative_to(ROOT)} imports {', '.join(sorted(found))}"
        for folder in ("tests/regression", "tests/standins")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if (found := kit_imports(path.read_text(encoding="utf-8")))
    ]
    assert offenders == []


@pytest.mark.parametrize("source", ["from scripts import legenv\n", "import scripts.legs.suite\n",
                                    "def f():\n    from scripts.legs import suite\n"])  # fmt: skip
def test_the_suite_check_bites(source: str) -> None:
    assert kit_imports(source), source
