"""The kit's own checks KIT001-KIT007 as one table, RULES: id, name, what each requires, the finding's
message and fix, the upstream hook it stands in for, and the check. lint runs them; the README's
rule table and the PR body's test plan are made from them. KIT001-KIT006 judge a file's added lines
(with the patched file's AST); KIT007 judges the series patch by patch (scripts/checks/proof.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from scripts.checks import offnpu
from scripts.diffparse import FileDiff, parse

SPDX = (
    "# SPDX-License-Identifier: Apache-2.0",
    "# SPDX-FileCopyrightText: Copyright contributors to the vLLM-Omni project",
)
LEVEL_MARKERS = ("core_model", "advanced_model")
HARDWARE_MARKERS = ("cpu", "gpu", "cuda", "rocm", "npu", "xpu")
IS_NPU = re.compile(r"\.is_npu\b")
TORCH_NPU = "torch_npu"
# Only for a file that does not parse (ruff reports that): a line naming torch_npu beside an import.
TORCH_NPU_IMPORT_TEXT = re.compile(
    r"\btorch_npu\b.*\bimport\b|\bimport\b.*\btorch_npu\b|__import__\(\s*['\"]torch_npu"
)
FORBIDDEN_IMPORT = re.compile(
    r"^\s*(import (pickle|cloudpickle|base64|re)\b|from (pickle|cloudpickle|base64|re) import)"
)
TOP_LEVEL_TRITON = re.compile(r"^(import triton\b|from triton\b)")
TORCH_CUDA = re.compile(
    r"\btorch\.cuda\.(empty_cache|memory_\w+|max_memory_\w+|mem_get_info|reset_peak_memory_stats|set_device|"
    r"current_device|device_count|get_device_\w+|synchronize)\b"
)


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule} {self.message} (fix: {self.fix})"


def code_part(line: str) -> str:
    """The line without a trailing comment (good enough for the patterns used here)."""
    return line.split("#", 1)[0]


def is_torch_npu(module: str | None) -> bool:
    return module is not None and (module == TORCH_NPU or module.startswith(TORCH_NPU + "."))


def imported_module(node: ast.AST) -> str | None:
    """The module a call imports by name: `importlib.import_module("m")`, `import_module("m")`,
    `__import__("m")`."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    func = node.func
    name = (
        func.attr
        if isinstance(func, ast.Attribute)
        else func.id
        if isinstance(func, ast.Name)
        else ""
    )
    value = node.args[0].value
    return value if name in ("import_module", "__import__") and isinstance(value, str) else None


def torch_npu_imports(tree: ast.AST) -> list[tuple[int, int]]:
    """(first, last) line of every statement or call that imports torch_npu, in any form."""
    spans = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(is_torch_npu(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            hit = node.level == 0 and is_torch_npu(node.module)
        else:
            hit = is_torch_npu(imported_module(node))
        if hit:
            spans.append((node.lineno, node.end_lineno or node.lineno))  # type: ignore[attr-defined]
    return spans


def is_device_type(node: ast.expr) -> bool:
    """`<expr>.type` (as in `t.device.type`, `torch.device(d).type`): what a tensor's device is."""
    return isinstance(node, ast.Attribute) and node.attr == "type"


def npu_polarity(test: ast.expr) -> bool | None:
    """True when the test holds only on NPU (`x.device.type == "npu"`, also as a conjunct), False when
    only off NPU (`!=`, or its negation): which side of an `if` is NPU-only. None: the test says
    nothing about the device."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = npu_polarity(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(npu_polarity(v) is True for v in test.values) else None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], (ast.Eq, ast.NotEq))
    ):
        left, right = test.left, test.comparators[0]
        npu = [
            side for side in (left, right) if isinstance(side, ast.Constant) and side.value == "npu"
        ]
        if npu and is_device_type(right if npu[0] is left else left):
            return isinstance(test.ops[0], ast.Eq)
    return None


def statement_lines(body: list[ast.stmt]) -> set[int]:
    """First lines of every statement in body, nested ones included, docstrings left out: the lines
    coverage.py can report as executed."""
    return {
        node.lineno
        for stmt in body
        for node in ast.walk(stmt)
        if isinstance(node, ast.stmt) and not offnpu.is_docstring(node)
    }


def ends_block(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def guarded_lines(tree: ast.AST) -> set[int]:
    """Lines under a device guard: the NPU side of an `if`, and what follows `if <off NPU>: return` in
    its block."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (polarity := npu_polarity(node.test)) is not None:
            lines |= statement_lines(node.body if polarity else node.orelse)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                early_exit = isinstance(stmt, ast.If) and not stmt.orelse and ends_block(stmt.body)
                if early_exit and npu_polarity(stmt.test) is False:  # type: ignore[attr-defined]
                    lines |= statement_lines(block[i + 1 :])
                    break
    return lines


def functions_reached_only_from(tree: ast.AST, lines: set[int]) -> set[int]:
    """Bodies of functions whose every use (by name or attribute) sits on one of lines."""
    uses: dict[str, set[int]] = {}
    for node in ast.walk(tree):
        name = (
            node.id
            if isinstance(node, ast.Name)
            else node.attr
            if isinstance(node, ast.Attribute)
            else None
        )
        if name is not None:
            uses.setdefault(name, set()).add(node.lineno)  # type: ignore[attr-defined]
    found: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and uses.get(node.name, set())
            and (uses[node.name] <= lines)
        ):
            found |= statement_lines(node.body)
    return found


def npu_only_in(tree: ast.AST) -> set[int]:
    """Statement lines that run only on NPU, decided by device guards, never by names: the NPU side of
    an `if x.device.type == "npu"` (or `!=` and its else), what follows `if <not NPU>: return`, and
    the body of a function used only from such lines (to a fixed point: helpers of helpers)."""
    lines = guarded_lines(tree)
    while not (more := functions_reached_only_from(tree, lines)) <= lines:
        lines |= more
    return lines


def npu_only_lines(source: str) -> set[int]:
    """npu_only_in() of a file's text (none when it does not parse)."""
    try:
        return npu_only_in(ast.parse(source))
    except SyntaxError:
        return set()


@dataclass(frozen=True)
class Source:
    """What the rules need of the patched file beyond its diff (empty when it is absent or does not
    parse)."""

    npu_only: frozenset[int] = frozenset()
    torch_npu_imports: tuple[tuple[int, int], ...] | None = (
        None  # None: the file could not be parsed
    )

    @classmethod
    def of(cls, text: str | None) -> Source:
        if text is None:
            return cls()
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return cls()
        return cls(frozenset(npu_only_in(tree)), tuple(sorted(torch_npu_imports(tree))))


Hits = Iterator[tuple[int, str]]  # (line, detail) per finding; detail may be ""


def added_code(diff: FileDiff) -> Hits:
    return ((n, code_part(text)) for n, text in diff.added)


def uses_is_npu(diff: FileDiff, source: Source) -> Hits:
    if diff.path.endswith(".py"):
        yield from ((n, "") for n, code in added_code(diff) if IS_NPU.search(code))


def imports_torch_npu_eagerly(diff: FileDiff, source: Source) -> Hits:
    """Every import of torch_npu (statement, importlib, __import__) with an added line, outside
    NPU-only lines."""
    if not diff.path.endswith(".py"):
        return
    added = {n for n, _ in diff.added}
    if source.torch_npu_imports is None:  # not parseable: the plain text is all there is
        yield from ((n, "") for n, code in added_code(diff) if TORCH_NPU_IMPORT_TEXT.search(code))
        return
    for first, last in source.torch_npu_imports:
        if added & set(range(first, last + 1)) and first not in source.npu_only:
            yield first, ""


def is_new_py_file(diff: FileDiff) -> bool:
    return diff.new_file and diff.path.endswith(".py")


def lacks_spdx(diff: FileDiff, source: Source) -> Hits:
    # a BOM is not a missing header
    head = [text.removeprefix("\ufeff") for _, text in diff.added[:5]]
    if is_new_py_file(diff) and not all(line in head for line in SPDX):
        yield 1, ""


def lacks_test_markers(diff: FileDiff, source: Source) -> Hits:
    name = diff.path.rsplit("/", 1)[-1]
    if not (is_new_py_file(diff) and diff.path.startswith("tests/") and name.startswith("test_")):
        return
    text = "\n".join(t for _, t in diff.added)
    has_level = any(f"pytest.mark.{m}" in text for m in LEVEL_MARKERS)
    has_hw = "hardware_test(" in text or any(
        re.search(rf"pytest\.mark\.{m}\b", text) for m in HARDWARE_MARKERS
    )
    if not (has_level and has_hw):
        yield 1, ""


def imports_forbidden(diff: FileDiff, source: Source) -> Hits:
    if diff.path.startswith("vllm_omni/"):
        for n, code in added_code(diff):
            if FORBIDDEN_IMPORT.match(code) or TOP_LEVEL_TRITON.match(code):
                yield n, code.strip()


def calls_torch_cuda(diff: FileDiff, source: Source) -> Hits:
    if diff.path.startswith("vllm_omni/") and not diff.path.startswith("vllm_omni/platforms/"):
        yield from ((n, "") for n, code in added_code(diff) if TORCH_CUDA.search(code))


@dataclass(frozen=True)
class Rule:
    """One of the kit's own checks: the single place its texts live."""

    id: str
    name: str
    requires: str  # what the series must do (README table, PR body)
    message: str  # what a finding says
    fix: str
    # one file's diff and the patched file's facts -> hits;
    check: Callable[[FileDiff, Source], Hits] | None
    # None: a rule over the whole series (KIT007, off_npu_proof)
    mirrors: str = (
        ""  # the upstream pre-commit hook this rule stands in for, where it cannot run here
    )

    def findings(self, diff: FileDiff, source: Source) -> list[Finding]:
        if self.check is None:
            return []
        return [
            Finding(
                diff.path,
                line,
                self.id,
                f"{self.message}: {detail}" if detail else self.message,
                self.fix,
            )
            for line, detail in self.check(diff, source)
        ]


# Rule(id, name, requires, message, fix, check): kept compact, one row per rule, as the table it is.
RULES = (
    Rule(
        "KIT001",
        "is-npu",
        "no `.is_npu` (stock torch has no such attribute)",
        "uses .is_npu (AttributeError on stock torch)",
        'write t.device.type == "npu"',
        uses_is_npu,
    ),
    Rule(
        "KIT002",
        "torch-npu-import",
        "torch_npu imported (`import`, `from`, `importlib`, `__import__`) only under an NPU device "
        "guard",
        "imports torch_npu outside an NPU-only branch",
        'import it lazily inside `if x.device.type == "npu":`',
        imports_torch_npu_eagerly,
    ),
    Rule(
        "KIT003",
        "spdx",
        "upstream's two SPDX lines at the top of every new `.py` file",
        "new file without upstream's SPDX header",
        "start it with the two '# SPDX-...' lines",
        lacks_spdx,
    ),
    Rule(
        "KIT004",
        "test-markers",
        "a level and a hardware marker in every new test file",
        "test file lacks a level or hardware marker",
        "add pytestmark = [pytest.mark.core_model, pytest.mark.cpu]",
        lacks_test_markers,
        "check-test-ci-coverage",
    ),
    Rule(
        "KIT005",
        "forbidden-import",
        "no pickle/cloudpickle, base64, plain `re` or top-level triton import in `vllm_omni/`",
        "forbidden import",
        "use pybase64 / `import regex as re` / lazy triton; no pickle",
        imports_forbidden,
        "check-forbidden-imports",
    ),
    Rule(
        "KIT006",
        "torch-cuda",
        "no `torch.cuda` memory/device calls outside `vllm_omni/platforms/`",
        "torch.cuda memory/device call",
        "go through vllm_omni.platforms (current_omni_platform)",
        calls_torch_cuda,
        "check-forbidden-imports",
    ),
    Rule(
        "KIT007",
        "off-npu",
        "off NPU (every NPU device test taken as false) each touched `vllm_omni/` module equals "
        "upstream's, function "
        "by function, and evaluates nothing upstream does not (the NPU tests' own operands, import "
        "and def time), "
        "except what a patch declares with `Kit-Off-NPU: <file>::<unit>: <why>`",
        "differs from upstream off NPU, undeclared",
        'guard it by `.device.type == "npu"` or declare it',
        None,
    ),
)
OFF_NPU = RULES[-1]


RULE_IDS = f"{RULES[0].id}-{RULES[-1].id}"


def check_file(diff: FileDiff, new_source: str | None) -> list[Finding]:
    """Every rule's findings on one file's added lines; new_source is the patched file (imports,
    NPU-only lines)."""
    # other files: no Python facts
    source = Source.of(new_source) if diff.path.endswith(".py") else Source()
    return [finding for rule in RULES for finding in rule.findings(diff, source)]


def own_checks(series_diff: str, tree: Path, moved: frozenset[str] = frozenset()) -> list[Finding]:
    """The kit's checks over the lines the series adds; series_diff is pristine..HEAD of the patched
    tree. A file in moved (renamed from an upstream file) is not new: it keeps its source's header.
    """
    findings = []
    for diff in parse(series_diff):
        if diff.path in moved:
            diff = replace(diff, new_file=False)
        path = tree / diff.path
        # a link holds no code to judge (no edit of it could add SPDX lines): its target is
        if path.is_symlink():
            # checked as its own file, and upstream's hooks skip links too (pre-commit's types)
            continue
        # a file in another encoding (latin-1, carried as binary) is read, not a crash: its lines
        # are still checked
        source = path.read_bytes().decode("utf-8", "replace") if path.is_file() else None
        findings += check_file(diff, source)
    return findings


def added_line_set(series_diff: str) -> dict[str, set[int]]:
    """Added line numbers per file of the patched tree."""
    return {diff.path: {n for n, _ in diff.added} for diff in parse(series_diff)}
