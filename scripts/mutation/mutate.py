"""Mutation testing of the Python lines the series adds: does some leg test fail for every edit that
matters?

Each mutant is one small edit of one added line of the patched tree (pristine..HEAD of the
checkout, files under ``vllm_omni/``): a comparison or boolean flipped, a constant, slice
bound or index off by one, a statement removed, two call arguments swapped, a ``.to(...)`` /
``.float()`` / ``.long()`` dropped, ``.float()`` added to the fused kernel's inputs, a device
guard inverted or narrowed, a conditional expression reduced to one side, a name replaced by
another of the same kind, an arithmetic operator changed, a keyword argument dropped, a
returned value replaced. It is folded into a copy of the patched tree and the leg tests
for its file run against it (``-x``): the npu leg for a line that only runs on NPU, both legs
for device guards and shared lines. Outcome: killed (a test failed), survived, timeout, or
equivalent (listed in tests/regression/equivalent_mutants.toml with a reason: not run).

A registry tool (mutmut, cosmic-ray) mutates a project in place and selects by its own
coverage; neither restricts to a diff on a patched tree outside the kit, so this is the kit's
own small AST mutator.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import tomllib

from scripts import procgroup, records
from scripts.checks.rules import npu_only_lines
from scripts.diffparse import parse
from scripts.errors import KitError, pytest_exit
from scripts.legs import legenv, probe, suite
from scripts.report import progress, table
from scripts.workspace import Workspace

DEVICE_TYPES = {"cuda", "npu", "cpu"}
CASTS = {"to", "float", "long"}  # a dropped cast changes dtype or device
# whose tensor inputs get an added .float() (the kernel wants one dtype)
KERNEL_CALLS = {"npu_fusion_attention"}
SUITE = Path("tests/regression")
# Leg tests that exercise each patched file; other files run the whole suite. The series' own
# upstream-style tests come first, so a mutant's killed_by says whether they kill it without the
# kit's simulated suite.
TESTS_FOR = {
    "vllm_omni/diffusion/layers/rope.py": [
        "test_series_upstream_tests.py",
        "test_rope_regression.py",
        "test_lingbot_direct_replay.py",
        "test_npu_lingbot_replay.py",
    ],
    "vllm_omni/diffusion/models/lingbot_world/transformer.py": [
        "test_series_upstream_tests.py",
        "test_lingbot_direct_replay.py",
        "test_npu_lingbot_replay.py",
    ],
    "vllm_omni/experimental/ar_diffusion/kv_cache/paged_attention.py": [
        "test_series_upstream_tests.py",
        "test_npu_paged_contracts.py",  # small and fast: most mutants die here in seconds
        "test_npu_paged_attention.py",
        "test_paged_attention_regression.py",
        "test_stock_leg.py",
    ],
}
# `--series-tests`: the series' own upstream-style tests alone (they run every test file the series
# adds), in the stock leg alone: what upstream's CPU CI runs them with (stock torch, no torch_npu,
# no simulator).
SERIES_TESTS = "test_series_upstream_tests.py"
# Every operator, in the summary's order (each gets its row, 0 mutants included: a silent operator
# shows).
OPERATORS = (
    "compare",
    "guard",
    "boolean",
    "constant",
    "slice",
    "statement",
    "swap",
    "cast",
    "conditional",
    "name",
    "arithmetic",
    "keyword",
    "return",
)
ARITHMETIC: dict[type[ast.operator], tuple[type[ast.operator], ...]] = {
    ast.FloorDiv: (ast.Div,),
    ast.Div: (ast.FloorDiv, ast.Mult),
    ast.Add: (ast.Sub,),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div,),
}
SYMBOL = {ast.FloorDiv: "//", ast.Div: "/", ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}
# Results of these are host lists, ints or tensors: what decides a name's kind when it is assigned.
LIST_CALLS = {"tolist", "list", "accumulate"}
INT_CALLS = {"int", "len", "numel"}
TENSOR_CALLS = {
    "to",
    "index_select",
    "flatten",
    "view",
    "cat",
    "new_empty",
    "empty",
    "zeros",
    "tensor",
    "reshape",
    "unflatten",
    "contiguous",
    "float",
    "long",
}
NEGATED = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}


class MutateError(KitError):
    """The mutation run cannot start or its allowlist is wrong."""


@dataclass(frozen=True)
class Mutant:
    path: str  # file in the tree
    line: int  # first line of the mutated node in the patched file
    operator: str  # compare, guard, boolean, constant, slice, statement, swap, cast,
    # conditional, name, arithmetic, keyword, return
    description: str  # what changed, e.g. "== -> !="
    # the original line, stripped: with path and description, a key that survives line moves
    source: str
    text: str  # the whole mutated file

    @property
    def key(self) -> str:
        return f"{self.path} | {self.source} | {self.description}"

    @property
    def device_guard(self) -> bool:
        return self.operator == "guard"


# -- pure: mutants of one file ---------------------------------------------------------------------


def _is_device_guard(node: ast.Compare) -> bool:
    def device_string(n: ast.expr) -> bool:
        if isinstance(n, ast.Constant):
            return n.value in DEVICE_TYPES
        return isinstance(n, ast.Tuple) and any(device_string(e) for e in n.elts)

    return any(device_string(n) for n in [node.left, *node.comparators])


def _edits(node: ast.AST, added: set[int]) -> Iterator[tuple[ast.AST, str, str, str]]:
    """(node to replace, replacement source, operator, description) for one node on an added line."""
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        flipped = ast.Compare(node.left, [NEGATED[type(node.ops[0])]()], node.comparators)
        kind = "guard" if _is_device_guard(node) else "compare"
        yield node, ast.unparse(flipped), kind, f"{ast.unparse(node)} -> {ast.unparse(flipped)}"
        for side in node.comparators:
            if isinstance(side, ast.Tuple) and len(side.elts) > 1 and _is_device_guard(node):
                for drop in side.elts:
                    rest = ast.Tuple([e for e in side.elts if e is not drop], ast.Load())
                    yield (
                        side,
                        ast.unparse(rest),
                        "guard",
                        f"drop {ast.unparse(drop)} from {ast.unparse(side)}",
                    )
    elif isinstance(node, ast.BoolOp):
        other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield (
            node,
            ast.unparse(ast.BoolOp(other, node.values)),
            "boolean",
            f"{type(node.op).__name__} -> {type(other).__name__}",
        )
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node, f"({ast.unparse(node.operand)})", "boolean", "drop not"
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield node, repr(not node.value), "boolean", f"{node.value} -> {not node.value}"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for delta in (1, -1):
            yield (
                node,
                repr(node.value + delta),
                "constant",
                f"{node.value} -> {node.value + delta}",
            )
    elif isinstance(node, ast.Slice):
        for name in ("lower", "upper"):
            bound = getattr(node, name)
            if bound is not None and not isinstance(bound, ast.Constant):
                for sign in ("+", "-"):
                    text = f"({ast.unparse(bound)}) {sign} 1"
                    yield bound, text, "slice", f"{name} bound {ast.unparse(bound)} -> {text}"
    elif isinstance(node, ast.Call):
        args = node.args
        for i in range(len(args) - 1):
            if not any(isinstance(a, ast.Starred) for a in args[i : i + 2]):
                swapped = ast.Call(
                    node.func, [*args[:i], args[i + 1], args[i], *args[i + 2 :]], node.keywords
                )
                yield (
                    node,
                    ast.unparse(swapped),
                    "swap",
                    f"swap arguments {i} and {i + 1} of {ast.unparse(node.func)}",
                )
        if isinstance(node.func, ast.Attribute) and node.func.attr in CASTS:
            yield node, f"({ast.unparse(node.func.value)})", "cast", f"drop .{node.func.attr}(...)"
        name = (
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        )
        if name in KERNEL_CALLS:
            for i, arg in enumerate(args[:3]):
                yield (
                    arg,
                    f"({ast.unparse(arg)}).float()",
                    "cast",
                    f"add .float() to argument {i} of {name}",
                )
        for keyword in node.keywords:
            if keyword.arg is not None:
                rest = [k for k in node.keywords if k is not keyword]
                text = ast.unparse(ast.Call(node.func, node.args, rest))
                yield node, text, "keyword", f"drop {keyword.arg}= from {ast.unparse(node.func)}"
    elif isinstance(node, ast.IfExp):
        for side in (node.body, node.orelse):
            yield node, f"({ast.unparse(side)})", "conditional", f"always {ast.unparse(side)}"
    elif isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
        for other in ARITHMETIC[type(node.op)]:
            text = ast.unparse(ast.BinOp(node.left, other(), node.right))
            yield node, f"({text})", "arithmetic", f"{SYMBOL[type(node.op)]} -> {SYMBOL[other]}"
    elif isinstance(node, ast.Return) and node.value is not None:
        if not (isinstance(node.value, ast.Constant) and node.value.value is None):
            yield node.value, "None", "return", "return None"
        if isinstance(node.value, ast.Tuple) and len(node.value.elts) > 1:
            elts = node.value.elts
            yield (
                node.value,
                ast.unparse(ast.Tuple([elts[1], elts[0], *elts[2:]], ast.Load())),
                "return",
                "swap the first two returned values",
            )
    if (
        isinstance(node, ast.stmt)
        and set(range(node.lineno, (node.end_lineno or node.lineno) + 1)) <= added
    ):
        # not a docstring
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            yield node, "pass", "statement", f"remove {type(node).__name__.lower()} statement"


def _kind_of_annotation(annotation: ast.expr | None) -> str:
    text = ast.unparse(annotation) if annotation is not None else ""
    if "Tensor" in text and "tuple" not in text and "list" not in text:
        return "tensor"
    return {"int": "int", "list[int]": "list"}.get(text, "")


def _kind_of_value(value: ast.expr, kinds: dict[str, str]) -> str:
    """tensor, int or list when the expression's shape says so (a call's name, a literal, a known
    name)."""
    if isinstance(value, ast.IfExp):
        body = _kind_of_value(value.body, kinds)
        return body if body == _kind_of_value(value.orelse, kinds) else ""
    if isinstance(value, (ast.List, ast.ListComp)):
        return "list"
    if isinstance(value, ast.Constant) and type(value.value) is int:
        return "int"
    if isinstance(value, ast.Name):
        return kinds.get(value.id, "")
    if isinstance(value, ast.BinOp):
        sides = {_kind_of_value(value.left, kinds), _kind_of_value(value.right, kinds)}
        return "int" if sides == {"int"} else ""
    if isinstance(value, ast.Subscript):
        base = value.value
        if (
            isinstance(base, ast.Attribute)
            and base.attr == "shape"
            and not isinstance(value.slice, ast.Slice)
        ):
            return "int"
        return "tensor" if _kind_of_value(base, kinds) == "tensor" else ""
    if isinstance(value, ast.Call):
        name = (
            value.func.attr
            if isinstance(value.func, ast.Attribute)
            else getattr(value.func, "id", "")
        )
        for calls, kind in ((LIST_CALLS, "list"), (INT_CALLS, "int"), (TENSOR_CALLS, "tensor")):
            if name in calls:
                return kind
    return ""


def name_kinds(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, str]:
    """The function's own names with a known kind: parameters by annotation, locals by what they are
    assigned.

    A name assigned values of two kinds, or of one it cannot tell, has none (it is never swapped).
    """
    bindings: list[tuple[str, ast.expr | None]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                values = node.value.elts if isinstance(node.value, ast.Tuple) else None
                if (
                    isinstance(target, ast.Tuple)
                    and values is not None
                    and len(values) == len(target.elts)
                ):
                    bindings += [
                        (t.id, v)
                        for t, v in zip(target.elts, values, strict=True)
                        if isinstance(t, ast.Name)
                    ]
                elif isinstance(target, ast.Name):
                    bindings.append((target.id, node.value))
        elif (
            isinstance(node, ast.For)
            and isinstance(node.target, ast.Tuple)
            and isinstance(node.iter, ast.Call)
        ):
            first = node.target.elts[0]
            if getattr(node.iter.func, "id", "") == "enumerate" and isinstance(first, ast.Name):
                bindings.append((first.id, ast.Constant(0)))  # the index of enumerate(...)
    arguments = function.args
    annotated = {
        a.arg: _kind_of_annotation(a.annotation)
        for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    }
    kinds = {name: kind for name, kind in annotated.items() if kind}
    # a local assigned from another local: the second pass knows the first's kind
    for _ in range(2):
        found: dict[str, set[str]] = {name: {kind} for name, kind in annotated.items()}
        for name, value in bindings:
            found.setdefault(name, set()).add(
                _kind_of_value(value, kinds) if value is not None else ""
            )
        kinds = {
            name: kind
            for name, (kind, *more) in ((n, sorted(k)) for n, k in found.items())
            if kind and not more
        }
    return kinds


def _name_edits(tree: ast.Module, added: set[int]) -> Iterator[tuple[ast.AST, str, str, str]]:
    """A name loaded on an added line, replaced by each other name of its kind that its statement uses.

    A tensor whose ``.shape`` is read is replaced by every other tensor of the function instead (one
    tensor's size read for another's). Only the function's own names (parameters, locals) take part.
    """
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def statement_of(node: ast.AST) -> ast.AST:
        while not isinstance(node, ast.stmt):
            node = parents[node]
        return node

    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        kinds = name_kinds(function)
        tensors = sorted(name for name, kind in kinds.items() if kind == "tensor")
        loads = [
            n
            for n in ast.walk(function)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in kinds
        ]
        used: dict[ast.AST, set[str]] = {}
        for load in loads:
            used.setdefault(statement_of(load), set()).add(load.id)
        for load in loads:
            if load.lineno not in added:
                continue
            parent = parents[load]
            if isinstance(parent, ast.Attribute) and parent.attr == "shape":
                others = tensors
            else:
                others = sorted(n for n in used[statement_of(load)] if kinds[n] == kinds[load.id])
            for other in others:
                if other != load.id:
                    yield load, other, "name", f"{load.id} -> {other}"


def _replace(lines: list[str], node: ast.AST, new: str) -> str:
    """The file with ``node``'s source span replaced by ``new`` (columns are UTF-8 byte offsets)."""
    start, end = node.lineno - 1, node.end_lineno - 1
    head = lines[start].encode()[: node.col_offset].decode()
    tail = lines[end].encode()[node.end_col_offset :].decode()
    return "".join([*lines[:start], head + new + tail, *lines[end + 1 :]])


def mutants_of(path: str, source: str, added: set[int]) -> list[Mutant]:
    """Every mutant of the nodes that start on an added line of one file, each still valid Python."""
    lines = source.splitlines(keepends=True)
    out: list[Mutant] = []
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:  # nothing to mutate in a file Python cannot read: said, not a crash
        raise MutateError(
            f"{path} is not valid Python (line {exc.lineno}: {exc.msg}): no mutant can be made of it",
            "fix the file in the checkout (python -m py_compile shows it), then run it again",
        ) from None
    # a mutant that parses to the same program is no mutant (e.g. swapping k, k)
    seen = {ast.dump(tree)}
    edits = [
        (node, edit)
        for node in ast.walk(tree)
        if getattr(node, "lineno", None) in added
        for edit in _edits(node, added)
    ]
    edits += [(edit[0], edit) for edit in _name_edits(tree, added)]
    # In file order, so that "(occurrence N)" counts the same edit of identical lines from the top.
    edits.sort(key=lambda pair: (pair[0].lineno, pair[0].col_offset))
    for node, (target, new, operator, description) in edits:
        text = _replace(lines, target, new)
        try:
            program = ast.dump(ast.parse(text))
        except SyntaxError:
            continue
        if program in seen:
            continue
        seen.add(program)
        source_line = lines[node.lineno - 1].strip()
        # The key names the line by its text: the same edit of another line with that text is
        # another occurrence.
        same = sum(m.source == source_line and m.description.startswith(description) for m in out)
        description = f"{description} (occurrence {same + 1})" if same else description
        out.append(Mutant(path, node.lineno, operator, description, source_line, text))
    return sorted(out, key=lambda m: (m.path, m.line, m.operator, m.description))


def series_mutants(series_diff: str, tree: Path) -> list[Mutant]:
    """Mutants of every added line of the series' Python files under vllm_omni/ (tests are not
    mutated)."""
    out: list[Mutant] = []
    for diff in parse(series_diff):
        if diff.path.startswith("vllm_omni/") and diff.path.endswith(".py") and diff.added:
            source = (tree / diff.path).read_text(encoding="utf-8")
            out += mutants_of(diff.path, source, {n for n, _ in diff.added})
    return out


def added_tests(series_diff: str, tree: Path) -> dict[str, str]:
    """The test files the series adds (path -> text): the ones test_series_upstream_tests.py runs."""
    return {
        d.path: (tree / d.path).read_text(encoding="utf-8")
        for d in parse(series_diff)
        if d.path.startswith("tests/")
        and d.path.rsplit("/", 1)[-1].startswith("test_")
        and (tree / d.path).is_file()
    }


def select(mutants: list[Mutant], texts: list[str], operators: list[str]) -> list[Mutant]:
    """The mutants whose key contains any of ``texts`` and whose operator is one of ``operators``
    (empty: all)."""
    return [
        m
        for m in mutants
        if (not texts or any(t in m.key for t in texts))
        and (not operators or m.operator in operators)
    ]


def npu_branch(mutants: list[Mutant], tree: Path) -> list[Mutant]:
    """The mutants of the NPU-branch lines: lines only NPU runs, and the device guards that lead there."""
    npu_only = {
        path: npu_only_lines((tree / path).read_text(encoding="utf-8"))
        for path in {m.path for m in mutants}
    }
    return [m for m in mutants if m.line in npu_only[m.path] or m.device_guard]


def branch_lines(outcomes: list[Outcome]) -> dict[str, object]:
    """NPU-branch lines (path:line) and those a killed mutant shows to run: a mutant that fails a test
    ran."""
    lines = sorted({f"{o.path}:{o.line}" for o in outcomes})
    run = sorted({f"{o.path}:{o.line}" for o in outcomes if o.status in ("killed", "timeout")})
    return {
        "lines": len(lines),
        "lines_run": len(run),
        "lines_not_shown_run": sorted(set(lines) - set(run)),
    }


def outcome_of(value: object) -> dict[str, object]:
    """One outcome of a mutate record as Outcome takes it (its fields, of their types)."""
    kinds = {"line": int, "seconds": (int, float), "legs": list}
    if not isinstance(value, dict) or set(value) != {f.name for f in fields(Outcome)}:
        raise ValueError(f"{records.shown_value(value)} is not an outcome the kit writes")
    for key, kind in kinds.items():
        if not isinstance(value[key], kind) or isinstance(value[key], bool):
            raise ValueError(f"{records.shown_value(value)}: its {key} is not a number or list")
    if not all(isinstance(value[k], str) for k in value if k not in kinds) or not all(
        isinstance(leg, str) for leg in value["legs"]
    ):
        raise ValueError(f"{records.shown_value(value)} holds a value of another type")
    return value


# The keys of a mutate record kills_to_keep reads, checked before it reads them (records.read).
RECORD_SCHEMA: records.Schema = {
    "scope": records.text,
    "series_digest": records.text,
    "outcomes": records.list_of(outcome_of),
}
RECORD_OPTIONAL = ("scope", "series_digest", "outcomes")


def kills_to_keep(previous: dict[str, Any] | None, series_digest: str) -> dict[str, Outcome]:
    """`--series-tests`: the kills of an earlier run (finished or not) on the same series digest. The
    digest covers the mutated code and the series' own tests alike (both are patches), so such a
    mutant dies again; the others run. A run in the full mode keeps nothing: the kit's suite is
    outside the digest."""
    if (
        not previous
        or previous.get("scope") != "npu-branch"
        or previous.get("series_digest") != series_digest
    ):
        return {}
    kills = [o for o in previous.get("outcomes", []) if o.get("status") in ("killed", "timeout")]
    return {o["key"]: Outcome(**{**o, "legs": tuple(o["legs"])}) for o in kills}


def legs_for(mutant: Mutant, npu_only: set[int]) -> list[str]:
    """The npu leg for a line only NPU runs; both legs for device guards and shared lines.

    The npu leg goes first: it runs the NPU-path tests and most shared ones, so it usually kills
    sooner.
    """
    if mutant.line in npu_only and not mutant.device_guard:
        return ["npu"]
    return ["npu", "stock"]


def imports_module(test_source: str, path: str) -> bool:
    """Whether a test file imports the module at path (`import a.b.c` or `from a.b import c`)."""
    dotted = path.removesuffix(".py").replace("/", ".")
    parent, leaf = dotted.rsplit(".", 1)
    return (
        f"import {dotted}" in test_source
        or f"from {dotted} import" in test_source
        or re.search(rf"from {re.escape(parent)} import [^\n]*\b{leaf}\b", test_source) is not None
    )


def series_test_ids(path: str, series_tests: dict[str, str]) -> list[str]:
    """The series' own test files that import the module at path, as test ids of SERIES_TESTS (all of
    them when none does): a mutant of paged_attention.py need not wait for the RoPE test."""
    files = [f for f, text in sorted(series_tests.items()) if imports_module(text, path)]
    test = str(SUITE / SERIES_TESTS)
    return [f"{test}::test_series_upstream_test_passes_from_checkout[{f}]" for f in files] or [test]


def tests_for(path: str, series_tests: dict[str, str] | None = None) -> list[str]:
    """The leg tests a mutant of path runs: with series_tests (file -> text), only the series' own
    tests."""
    if series_tests is not None:
        return series_test_ids(path, series_tests)
    return [str(SUITE / name) for name in TESTS_FOR.get(path, [])] or [str(SUITE)]


# -- the allowlist of equivalent mutants -----------------------------------------------------------


def load_equivalent(path: Path) -> dict[str, str]:
    """key -> reason from the allowlist; every entry needs a file, line, mutation and reason."""
    if not path.is_file():
        return {}
    try:
        entries = tomllib.loads(path.read_text(encoding="utf-8")).get("equivalent", [])
    except tomllib.TOMLDecodeError as error:
        raise MutateError(f"{path.name} is not valid TOML ({error})", "fix the file") from None
    out = {}
    for i, entry in enumerate(entries, 1):
        missing = [
            k for k in ("file", "line", "mutation", "reason") if not str(entry.get(k, "")).strip()
        ]
        if missing:
            raise MutateError(
                f"{path.name}: entry {i} lacks {', '.join(missing)}",
                "give each entry all four fields",
            )
        out[f"{entry['file']} | {entry['line']} | {entry['mutation']}"] = entry["reason"]
    return out


# -- edge: running a mutant ------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    key: str
    path: str
    line: int
    operator: str
    description: str
    status: str  # killed, survived, timeout, equivalent
    legs: tuple[str, ...]  # the legs that ran
    killed_by: str  # the first failing test, when killed
    seconds: float


def make_workspace(work: Path, checkout: Path, kit_root: Path) -> Path:
    """A kit-shaped folder: the patched tree (no .git) and the regression suite, immune to later edits."""
    if work.exists():
        shutil.rmtree(work)
    tree = work / "tree"
    shutil.copytree(checkout, tree, ignore=shutil.ignore_patterns(".git", "__pycache__"))
    shutil.copytree(kit_root / SUITE, work / SUITE, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(kit_root / "ci", work / "ci")
    return tree


def first_failure(output: str) -> str:
    """The first failing test's id in pytest -q -rf output ("FAILED path::name - ..."), else the last
    line."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0]
    return (output.strip().splitlines() or ["(no output)"])[-1][:160]


class Worker:
    """A leg's fork server (tests/regression/_mutant_worker.py): vllm imported once, one fork per
    pytest run."""

    def __init__(self, leg: str, python: Path, env: dict[str, str], cwd: Path) -> None:
        self.leg = leg
        self.last_rc: int | None = None  # the last pytest run's exit code (None: timed out)
        script = cwd / SUITE / "_mutant_worker.py"
        # Its own session: a Ctrl-C reaches the kit only, which then stops the worker (close()).
        self.proc = procgroup.start(
            [str(python), str(script)],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            encoding="utf-8",
            errors="replace",
        )
        self._reply()  # {"ready": true} once the imports are done

    def _reply(self) -> dict[str, object]:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            raise MutateError(
                f"the {self.leg} leg's mutation worker exited", "see its output above"
            )
        return json.loads(line)

    def run(self, tests: list[str], timeout: float) -> tuple[str, str]:
        """("passed" | "failed" | "timeout", first failure) of one pytest run that stops at the first failure."""
        args = [*tests, "-x", "-q", "-rfE", *suite.PLUGINS_OFF, "--no-header"]
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"args": args, "timeout": timeout}) + "\n")
        self.proc.stdin.flush()
        reply = self._reply()
        self.last_rc = reply["rc"]
        if reply["rc"] is None:
            return "timeout", ""
        return (
            ("passed", "") if reply["rc"] == 0 else ("failed", first_failure(str(reply["output"])))
        )

    def close(self) -> None:
        """An idle worker exits at the end of its input; one still running a test (interrupted) gets
        SIGTERM, which kills that pytest run first (tests/regression/_mutant_worker.py)."""
        if self.proc.stdin:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            procgroup.end(self.proc, grace_s=60)


def run_mutant(
    mutant: Mutant,
    tree: Path,
    workers: dict[str, Worker],
    npu_only: set[int],
    timeout: float,
    series_tests: dict[str, str] | None = None,
) -> Outcome:
    """Fold the mutant into the tree, run its legs (stop at the first kill), put the file back."""
    target = tree / mutant.path
    original = target.read_text(encoding="utf-8")
    started = time.monotonic()
    ran: list[str] = []
    status, killed_by = "survived", ""
    try:
        target.write_text(mutant.text, encoding="utf-8")
        # The series' own tests go upstream with stock torch: the stock leg judges every mutant
        # alone there.
        for leg in list(workers) if series_tests is not None else legs_for(mutant, npu_only):
            ran.append(leg)
            result, failure = workers[leg].run(tests_for(mutant.path, series_tests), timeout)
            if result != "passed":
                status, killed_by = (
                    ("killed", f"{leg}: {failure}") if result == "failed" else ("timeout", leg)
                )
                break
    finally:
        target.write_text(original, encoding="utf-8")
    return outcome(mutant, status, tuple(ran), killed_by, round(time.monotonic() - started, 1))


def outcome(
    mutant: Mutant, status: str, ran: tuple[str, ...], killed_by: str, seconds: float
) -> Outcome:
    return Outcome(
        mutant.key,
        mutant.path,
        mutant.line,
        mutant.operator,
        mutant.description,
        status,
        ran,
        killed_by,
        seconds,
    )


def listed(mutant: Mutant, equivalent: dict[str, str]) -> Outcome:
    return outcome(mutant, "equivalent", (), equivalent[mutant.key], 0.0)


def summary_rows(outcomes: list[Outcome]) -> list[tuple[str, int, int, int, int, int]]:
    """Per operator (every one, in OPERATORS' order): mutants, killed, survived, equivalent, timeout;
    the total."""
    ops = [*OPERATORS, *sorted({o.operator for o in outcomes} - set(OPERATORS))]
    rows = []
    for op in [*ops, "total"]:
        chosen = [o for o in outcomes if op in ("total", o.operator)]
        counts = [
            sum(o.status == s for o in chosen)
            for s in ("killed", "survived", "equivalent", "timeout")
        ]
        rows.append((op, len(chosen), *counts))
    return rows


def score(outcomes: list[Outcome]) -> float | None:
    """Killed (timeouts count as killed) over the non-equivalent mutants; None where no mutant was
    judged (no score of nothing: 0/0 is not 100 %)."""
    counted = [o for o in outcomes if o.status != "equivalent"]
    if not counted:
        return None
    return sum(o.status in ("killed", "timeout") for o in counted) / len(counted)


def record(
    outcomes: list[Outcome],
    stale: list[str],
    seconds: float,
    series_digest: str,
    total: int,
    series_only: bool = False,
) -> dict[str, object]:
    survivors = [o.key for o in outcomes if o.status == "survived"]
    judged = score(outcomes)
    scope = (
        {"scope": "npu-branch", "tests": SERIES_TESTS, **branch_lines(outcomes)}
        if series_only
        else {}
    )
    return {
        **scope,
        "series_digest": series_digest,
        "complete": len(outcomes) == total,
        "mutants": len(outcomes),
        "score": None if judged is None else round(judged, 4),
        "seconds": round(seconds, 1),
        "survivors": survivors,
        "stale_allowlist_entries": stale,
        "outcomes": [asdict(o) for o in outcomes],
        "passed": judged is not None and len(outcomes) == total and not survivors and not stale,
    }


# -- the command -----------------------------------------------------------------------------------


def partial_name(name: str) -> str:
    """The record of a run still going (or interrupted): beside the finished one, never over it."""
    return f"{name}-partial"


def start_worker(ws: Workspace, leg: str, tree: Path) -> Worker:
    # The leg's own venv, probed the way a test run probes it (the probe cache included).
    found = legenv.interpreter(ws, legenv.check_leg(leg), legenv.LegOptions())
    mode = suite.npu_mode(
        leg, probe.leg_versions(found.python, found.pycache, found.probe_cache)[0]
    )
    out = ws.mutate_dir / f"records-{leg}"
    out.mkdir(parents=True, exist_ok=True)
    progress(f"leg {leg}: mode {mode}; starting its worker")
    env = suite.leg_env(leg, mode, tree, ws.pristine_tree, out, found.pycache)
    return Worker(leg, found.python, env, tree.parent)


def run_all(
    records_dir: Path,
    mutants: list[Mutant],
    equivalent: dict[str, str],
    stale: list[str],
    tree: Path,
    workers: dict[str, Worker],
    series_digest: str,
    started: float,
    series_tests: dict[str, str] | None = None,
    kept: dict[str, Outcome] | None = None,
    name: str = "",
) -> int:
    """Every mutant in turn (a kill in kept is not run again); the record is `name` (default
    `mutate`, or `mutate-series` for the series' own tests alone). While the run goes on, its
    outcomes so far are `<name>-partial` (what an interrupted run leaves to the next): the last
    finished record stays until this one finishes."""
    if not mutants:
        raise MutateError(
            "no mutant to run: a score of none would be 0/0", "choose mutants (mutate --list)"
        )
    kept = kept or {}
    series_only = series_tests is not None
    name = name or ("mutate-series" if series_only else "mutate")
    npu_only = {
        path: npu_only_lines((tree / path).read_text(encoding="utf-8"))
        for path in {m.path for m in mutants}
    }
    timeouts: dict[str, float] = {}
    for path in sorted({m.path for m in mutants}):
        # Control: the unmutated tree passes the same selection, and its time bounds a mutant's run.
        for leg, worker in workers.items():
            began = time.monotonic()
            result, failure = worker.run(tests_for(path, series_tests), 1800)
            if result != "passed":
                # pytest's own reason where it gave one (errors.pytest_exit): no test collected is
                # not a failing test
                said = pytest_exit("pytest", worker.last_rc) if worker.last_rc is not None else None
                why = said.what.removeprefix("pytest: ") if said is not None else "a timeout"
                raise MutateError(
                    f"leg {leg} on {path}'s tests, unmutated: {why} ({failure})",
                    "make both legs green first (nox -s test)",
                )
            progress(
                f"control: leg {leg} passes {path}'s tests unmutated "
                f"({time.monotonic() - began:.0f} s)"
            )
            timeouts[path] = max(timeouts.get(path, 0.0), 60.0, 3 * (time.monotonic() - began))
    progress(
        f"{len(mutants)} mutants of {len({m.path for m in mutants})} files; {len(equivalent)} "
        "listed as equivalent"
        + (f"; {len(kept)} killed by an earlier run on this series, kept" if kept else "")
    )
    outcomes = []
    for i, mutant in enumerate(mutants, 1):
        if mutant.key in equivalent:
            outcome = listed(mutant, equivalent)
        elif mutant.key in kept:
            outcome = kept[mutant.key]
        else:
            outcome = run_mutant(
                mutant, tree, workers, npu_only[mutant.path], timeouts[mutant.path], series_tests
            )
        outcomes.append(outcome)
        records.write(
            records_dir,
            partial_name(name),
            record(
                outcomes,
                stale,
                time.monotonic() - started,
                series_digest,
                len(mutants),
                series_only,
            ),
        )
        progress(
            f"[{i}/{len(mutants)}] {outcome.status:10} {mutant.path}:{mutant.line} "
            f"{mutant.description}"
            + (f" ({outcome.killed_by})" if outcome.status == "killed" else "")
        )
    elapsed = time.monotonic() - started
    print(
        table(
            ["operator", "mutants", "killed", "survived", "equivalent", "timeout"],
            summary_rows(outcomes),
        )
    )
    for o in outcomes:
        if o.status == "survived":
            print(f"survived: {o.key}")
    data = record(outcomes, stale, elapsed, series_digest, len(mutants), series_only)
    records.write(records_dir, name, data)
    (records_dir / f"{partial_name(name)}.json").unlink(missing_ok=True)
    if series_only:
        progress(
            "NPU-branch lines shown run by the series' own tests: "
            f"{data['lines_run']}/{data['lines']}"
        )
    shown = "not measured (no mutant judged)" if data["score"] is None else f"{data['score']:.1%}"
    progress(f"mutation score {shown} ({len(outcomes)} mutants) in {elapsed / 60:.1f} min")
    return 0 if data["passed"] else 1
