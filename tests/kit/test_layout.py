"""The layout shows the pipeline: no module of scripts/ imports from a later stage (STAGES, the list of
docs/internals.md's "Layout", checked both ways), the regression suite never imports the kit, no
test module imports another (shared helpers live in conftest.py or a helpers module), and an import
names what it defines. One test per rule, each also run on planted sources it must catch."""

from __future__ import annotations

import ast
import graphlib
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from conftest import KIT_ROOT

# stage number -> modules (a name ending in "." is a whole subpackage); 0 is the plumbing.
STAGES: dict[int, tuple[str, ...]] = {
    0: (
        *"errors workspace digests report records childenv gitcmd gitproc worklock".split(),
        *"diffparse kittools signals handfile procgroup pipindex".split(),
    ),
    1: ("pin", "registry"),
    2: ("series", "revisions"),
    3: ("checkout.",),
    4: ("checks.",),
    5: ("legs.",),
    6: ("e2e.", "ascendci", "mutation."),
    7: ("rebase.",),
    8: ("pr.",),
    9: ("readme", "policy"),
    10: ("commands.", "__main__"),
}


def stage_of(module: str) -> int | None:
    for number, names in STAGES.items():
        for name in names:
            if module in (name, name.rstrip(".")) or (
                name.endswith(".") and module.startswith(name)
            ):
                return number
    return None


def kit_imports(source: str) -> set[str]:
    """Modules of scripts/ a source file imports, unprefixed: `from scripts.legs import suite` ->
    legs.suite."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.split(".")[0] == "scripts"
        ):
            sub = node.module.removeprefix("scripts").removeprefix(".")
            for alias in node.names:
                child = f"{sub}.{alias.name}".lstrip(".")
                where = KIT_ROOT / "scripts" / Path(*child.split("."))
                found.add(
                    child
                    if where.with_suffix(".py").is_file() or where.is_dir() or not sub
                    else sub
                )
        elif isinstance(node, ast.Import):
            found.update(
                a.name.removeprefix("scripts.")
                for a in node.names
                if a.name.split(".")[0] == "scripts"
            )
    return found


def backward_imports(modules: dict[str, str]) -> list[str]:
    problems = []
    for name, source in sorted(modules.items()):
        own = stage_of(name)
        if own is None:
            problems.append(
                f"{name}: no stage (add it to STAGES and to docs/internals.md's Layout)"
            )
            continue
        for imported in sorted(kit_imports(source)):
            theirs = stage_of(imported)
            if theirs is not None and theirs > own:
                problems.append(f"{name} (stage {own}) -> {imported} (stage {theirs})")
    return problems


def kit_modules() -> dict[str, str]:
    out = {}
    for path in sorted((KIT_ROOT / "scripts").rglob("*.py")):
        rel = path.relative_to(KIT_ROOT / "scripts").with_suffix("")
        if parts := rel.parts[:-1] if rel.name == "__init__" else rel.parts:
            out[".".join(parts)] = path.read_text(encoding="utf-8")
    return out


def layout_names(doc: str) -> set[str]:
    """The names in the first column of the docs' Layout block (an entry at indent 0 or 2, before its
    text)."""
    block = doc.split("## Layout", 1)[1].split("```")[1]
    entries = [
        re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        for line in block.splitlines()
        if line[:3].strip()
    ]
    return {name.removesuffix(".py").rstrip("/") for entry in entries for name in entry.split(", ")}


def unlisted(doc: str) -> list[str]:
    names = layout_names(doc)
    return [n for stage in STAGES.values() for n in stage if n.rstrip(".") not in names]


def catches_each(
    check: Callable[[str, str], list[str]], planted: list[tuple[str, str, str]]
) -> None:
    for name, source, expected in planted:
        problems = check(name, source)
        assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_no_module_imports_a_later_stage_and_the_docs_layout_names_every_stage() -> None:
    assert backward_imports(kit_modules()) == []
    planted = [
        (
            "checkout",
            "from scripts.legs import suite\n",
            "checkout (stage 3) -> legs.suite (stage 5)",
        ),
        (
            "series",
            "from scripts import checkout as co\n",
            "series (stage 2) -> checkout (stage 3)",
        ),
        (
            "legs.suite",
            "from scripts.commands.common import current\n",
            "legs.suite (stage 5) -> commands.common",
        ),
        ("pin", "import scripts.pr.branch\n", "pin (stage 1) -> pr.branch (stage 8)"),
        ("newthing", "", "newthing: no stage"),
    ]
    catches_each(lambda name, source: backward_imports({name: source}), planted)
    doc = (KIT_ROOT / "docs/internals.md").read_text(encoding="utf-8")
    assert unlisted(doc) == []
    assert unlisted(doc.replace("errors, digests, report", "errors, report")) == ["digests"]
    assert unlisted(doc.replace("  legs/  ", "  leg/   ")) == ["legs."]


def import_cycle(modules: dict[str, str]) -> list[str]:
    """One cycle of the import graph (late imports inside functions included: they hide a cycle, they
    do not remove it), as [a, b, ..., a]; [] when there is none. Same-stage imports are allowed,
    cycles are not."""
    graph = {
        name: (kit_imports(source) & modules.keys()) - {name} for name, source in modules.items()
    }
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as cycle:
        return list(cycle.args[1])
    return []


def test_no_import_cycle_even_inside_a_stage() -> None:
    assert import_cycle(kit_modules()) == []
    late = {
        "e2e.run": "from scripts.e2e import ab\n",
        "e2e.ab": "def f():\n    from scripts.e2e import run\n",
    }
    planted = {**late, "e2e.benchclient": ""}
    assert import_cycle(planted) == ["e2e.run", "e2e.ab", "e2e.run"]


def test_the_regression_suite_and_standins_never_import_the_kit() -> None:
    offenders = [
        f"{path.relative_to(KIT_ROOT)} imports {', '.join(sorted(found))}"
        for folder in ("tests/regression", "tests/standins")
        for path in sorted((KIT_ROOT / folder).rglob("*.py"))
        if (found := kit_imports(path.read_text(encoding="utf-8")))
    ]
    # kit_imports bites on each import form: the planted sources of the two tests above
    assert offenders == []


def located_at_import(name: str, source: str) -> list[str]:
    """Where a module finds the kit by itself instead of being passed a Workspace: `__file__` anywhere
    (only workspace.py may), and module-level code that makes a Workspace or a path under .work/ (a
    constant such as `REBASE_DIR = <workspace>.work / "rebase"` fixes one kit at import time)."""
    tree = ast.parse(source)
    found = []
    if name != "workspace":
        found += [
            f"{name}:{n.lineno}: __file__"
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id == "__file__"
        ]

    definitions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)

    def module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
        for stmt in body:
            if isinstance(stmt, ast.If | ast.Try | ast.With):  # their bodies run at import too
                yield from module_level([*getattr(stmt, "body", []), *getattr(stmt, "orelse", [])])
            elif not isinstance(stmt, definitions):
                yield stmt

    for stmt in module_level(tree.body):
        for n in ast.walk(stmt):
            makes = isinstance(n, ast.Name) and n.id == "Workspace" and name != "__main__"
            work = (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and n.value.split("/")[0] == ".work"
            )
            if makes or work:
                found.append(f"{name}:{stmt.lineno}: a workspace location at import time")
                break
    return found


def test_no_module_finds_the_kit_by_itself() -> None:
    assert [
        p for name, source in kit_modules().items() for p in located_at_import(name, source)
    ] == []
    ws = "from scripts.workspace import Workspace\n"
    made = ws + 'REBASE_DIR = Workspace.of_kit().work / "rebase"\n'
    in_if = 'import os\nif os.name:\n    EVIDENCE = Path(".work") / "evidence"\n'
    planted = [
        (
            "pin",
            "from pathlib import Path\nROOT = Path(__file__).parent.parent\n",
            "pin:2: __file__",
        ),
        ("legs.suite", "def f():\n    return __file__\n", "legs.suite:2: __file__"),
        ("rebase.trial", made, "rebase.trial:2: a workspace location"),
        (
            "e2e.install",
            'from pathlib import Path\nVENV = Path(".work/e2e-venv")\n',
            "e2e.install:2: a workspace",
        ),
        ("e2e.config", in_if, "e2e.config:3: a workspace"),
    ]
    catches_each(located_at_import, planted)
    passed_in = 'def reports(ws: Workspace) -> object:\n    return ws.work / "rebase"\n'
    assert (
        located_at_import("rebase.trial", ws + passed_in + 'NOTE = "written under .work/rebase"\n')
        == []
    )


def raw_installs(source: str) -> list[int]:
    """Lines of the noxfile that call ``session.install`` outside its ``install`` helper."""
    tree = ast.parse(source)
    helper = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "install"), None
    )
    inside = {id(n) for n in ast.walk(helper)} if helper else set()
    calls = [
        n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
    ]
    return [n.lineno for n in calls if n.func.attr == "install" and id(n) not in inside]


def test_every_nox_install_writes_bytecode() -> None:
    # uv writes no .pyc; under PYTHONDONTWRITEBYTECODE every xdist worker would compile pytest and
    # numpy again.
    import noxfile

    assert raw_installs((KIT_ROOT / "noxfile.py").read_text(encoding="utf-8")) == []
    assert raw_installs(
        "def install(s, *a):\n    s.install(*a, env={})\n\n\ndef kit(s):\n    s.install('x')\n"
    ) == [6]
    calls: list[tuple[tuple[str, ...], dict[str, object]]] = []

    class Session:  # records what nox's Session.install is given (nox itself is not run here)
        env: dict[str, str] = {}

        def install(self, *args: str, **kwargs: dict[str, str]) -> None:
            calls.append((args, kwargs))

    noxfile.install(Session(), "-r", "x.txt")  # type: ignore[arg-type]
    # the user's package index rides along (tests/kit/test_pipconfig.py)
    ((args, kwargs),) = calls
    assert args == ("-r", "x.txt") and kwargs["env"]["UV_COMPILE_BYTECODE"] == "1"


def unresolved_test_imports(sources: dict[str, str]) -> list[str]:
    """`from test_x import name` between the kit's test modules (by module name -> source) where test_x
    does not define name at its top level: an import inside a heavy-tier test would fail only in
    that tier."""
    trees = {module: ast.parse(source) for module, source in sources.items()}
    defined: dict[str, set[str]] = {}
    for module, tree in trees.items():
        names = defined.setdefault(module, set())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return [
        f"{module}: {node.module}.{alias.name}"
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in defined
        for alias in node.names
        if alias.name not in defined[node.module]
    ]


def test_every_import_between_test_modules_names_what_it_defines() -> None:
    sources = {
        path.stem: path.read_text(encoding="utf-8")
        for path in (KIT_ROOT / "tests" / "kit").glob("*.py")
    }
    assert unresolved_test_imports(sources) == []
    planted = {
        "test_a": "X = 1\n\ndef helper():\n    pass\n",
        "test_b": "def test():\n    from test_a import X, gone\n",
    }
    assert unresolved_test_imports(planted) == ["test_b: test_a.gone"]


def imports_of_test_modules(sources: dict[str, str]) -> list[str]:
    """`import test_x` / `from test_x import ...` in any module of tests/kit (module name -> source),
    at any depth."""
    return [
        f"{module}: {name}"
        for module, source in sorted(sources.items())
        for node in ast.walk(ast.parse(source))
        for name in (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in getattr(node, "names", [])]
        )
        if isinstance(node, ast.Import | ast.ImportFrom) and name.startswith("test_")
    ]


def test_no_test_module_imports_another() -> None:
    sources = {
        path.stem: path.read_text(encoding="utf-8")
        for path in (KIT_ROOT / "tests" / "kit").glob("*.py")
    }
    assert imports_of_test_modules(sources) == []
    planted = {
        "test_b": "def test():\n    from test_a import X\n",
        "test_c": "import test_a\nfrom faulttable import Row\n",
    }
    assert imports_of_test_modules(planted) == ["test_b: test_a", "test_c: test_a"]
