"""Lint the series: ruff under upstream's settings on the touched files, plus the
kit's own checks on the lines the series adds.

The own checks are RULES (KIT001-KIT006), one object each: id, name, what it
requires, the finding's message and fix, and the check. The README's rule table
and the PR body's test plan are made from them.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scripts import checkout as co
from scripts import paths
from scripts.diffparse import FileDiff, parse

SPDX = (
    "# SPDX-License-Identifier: Apache-2.0",
    "# SPDX-FileCopyrightText: Copyright contributors to the vLLM-Omni project",
)
LEVEL_MARKERS = ("core_model", "advanced_model")
HARDWARE_MARKERS = ("cpu", "gpu", "cuda", "rocm", "npu", "xpu")
IS_NPU = re.compile(r"\.is_npu\b")
TORCH_NPU_IMPORT = re.compile(r"^\s*(import torch_npu\b|from torch_npu\b)")
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


def npu_polarity(test: ast.expr) -> bool | None:
    """True for `x == "npu"`, False for `x != "npu"`: which side of an `if` is NPU-only (None: neither)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        sides = [test.left, *test.comparators]
        if any(isinstance(n, ast.Constant) and n.value == "npu" for n in sides):
            if isinstance(test.ops[0], ast.Eq):
                return True
            if isinstance(test.ops[0], ast.NotEq):
                return False
    return None


def statement_lines(body: list[ast.stmt]) -> set[int]:
    """First lines of every statement in body, nested ones included (what coverage.py reports as executed)."""
    return {node.lineno for stmt in body for node in ast.walk(stmt) if isinstance(node, ast.stmt)}


def npu_only_lines(source: str) -> set[int]:
    """Statement lines that run only on NPU: under `if x == "npu"`, the else of `!= "npu"`, or a *npu* function."""
    lines: set[int] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return lines
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (polarity := npu_polarity(node.test)) is not None:
            lines |= statement_lines(node.body if polarity else node.orelse)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "npu" in node.name:
            lines |= statement_lines(node.body)
    return lines


Hits = Iterator[tuple[int, str]]  # (line, detail) per finding; detail may be ""


def added_code(diff: FileDiff) -> Hits:
    return ((n, code_part(text)) for n, text in diff.added)


def uses_is_npu(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
    if diff.path.endswith(".py"):
        yield from ((n, "") for n, code in added_code(diff) if IS_NPU.search(code))


def imports_torch_npu_eagerly(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
    yield from ((n, "") for n, code in added_code(diff) if TORCH_NPU_IMPORT.match(code) and n not in npu_lines)


def is_new_py_file(diff: FileDiff) -> bool:
    return diff.new_file and diff.path.endswith(".py")


def lacks_spdx(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
    head = [text for _, text in diff.added[:5]]
    if is_new_py_file(diff) and not all(line in head for line in SPDX):
        yield 1, ""


def lacks_test_markers(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
    name = diff.path.rsplit("/", 1)[-1]
    if not (is_new_py_file(diff) and diff.path.startswith("tests/") and name.startswith("test_")):
        return
    text = "\n".join(t for _, t in diff.added)
    has_level = any(f"pytest.mark.{m}" in text for m in LEVEL_MARKERS)
    has_hw = "hardware_test(" in text or any(re.search(rf"pytest\.mark\.{m}\b", text) for m in HARDWARE_MARKERS)
    if not (has_level and has_hw):
        yield 1, ""


def imports_forbidden(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
    if diff.path.startswith("vllm_omni/"):
        for n, code in added_code(diff):
            if FORBIDDEN_IMPORT.match(code) or TOP_LEVEL_TRITON.match(code):
                yield n, code.strip()


def calls_torch_cuda(diff: FileDiff, npu_lines: frozenset[int]) -> Hits:
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
    check: Callable[[FileDiff, frozenset[int]], Hits]  # one file's diff and its NPU-only lines -> hits

    def findings(self, diff: FileDiff, npu_lines: frozenset[int]) -> list[Finding]:
        return [
            Finding(diff.path, line, self.id, f"{self.message}: {detail}" if detail else self.message, self.fix)
            for line, detail in self.check(diff, npu_lines)
        ]


# Rule(id, name, requires, message, fix, check): kept compact, one row per rule, as the table it is.
RULES = (
    Rule("KIT001", "is-npu", "no `.is_npu` (stock torch has no such attribute)",
         "uses .is_npu (AttributeError on stock torch)", 'write t.device.type == "npu"', uses_is_npu),
    Rule("KIT002", "torch-npu-import", "`import torch_npu` only inside an NPU-only branch",
         "imports torch_npu outside an NPU-only branch", 'import it lazily inside `if x.device.type == "npu":`',
         imports_torch_npu_eagerly),
    Rule("KIT003", "spdx", "upstream's two SPDX lines at the top of every new `.py` file",
         "new file without upstream's SPDX header", "start it with the two '# SPDX-...' lines", lacks_spdx),
    Rule("KIT004", "test-markers", "a level and a hardware marker in every new test file",
         "test file lacks a level or hardware marker", "add pytestmark = [pytest.mark.core_model, pytest.mark.cpu]",
         lacks_test_markers),
    Rule("KIT005", "forbidden-import",
         "no pickle/cloudpickle, base64, plain `re` or top-level triton import in `vllm_omni/`",
         "forbidden import", "use pybase64 / `import regex as re` / lazy triton; no pickle", imports_forbidden),
    Rule("KIT006", "torch-cuda", "no `torch.cuda` memory/device calls outside `vllm_omni/platforms/`",
         "torch.cuda memory/device call", "go through vllm_omni.platforms (current_omni_platform)", calls_torch_cuda),
)  # fmt: skip


RULE_IDS = f"{RULES[0].id}-{RULES[-1].id}"


def check_file(diff: FileDiff, new_source: str | None) -> list[Finding]:
    """Every rule's findings on one file's added lines; new_source is the patched file (for NPU-only branches)."""
    npu_lines = frozenset(npu_only_lines(new_source)) if new_source is not None else frozenset()
    return [finding for rule in RULES for finding in rule.findings(diff, npu_lines)]


def own_checks(series_diff: str, tree: Path) -> list[Finding]:
    """The kit's checks over the lines the series adds; series_diff is pristine..HEAD of the patched tree."""
    findings = []
    for diff in parse(series_diff):
        path = tree / diff.path
        source = path.read_text(encoding="utf-8") if path.is_file() else None
        findings += check_file(diff, source)
    return findings


def added_line_set(series_diff: str) -> dict[str, set[int]]:
    """Added line numbers per file of the patched tree."""
    return {diff.path: {n for n, _ in diff.added} for diff in parse(series_diff)}


# ---- ruff at the edge --------------------------------------------------------------


def ruff_check(ruff: str, config: Path, tree: Path, files: list[str]) -> list[Finding]:
    proc = subprocess.run(
        [ruff, "check", "--config", str(config), "--output-format", "json", "--no-cache", *files],
        cwd=tree, capture_output=True, text=True,
    )  # fmt: skip
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"ruff check failed: {proc.stderr.strip()}")
    return [
        Finding(
            str(Path(r["filename"]).relative_to(tree)),
            r["location"]["row"],
            r["code"] or "ruff",
            r["message"],
            (r.get("fix") or {}).get("message") or "see ruff's rule docs",
        )  # fmt: skip
        for r in json.loads(proc.stdout or "[]")
    ]


def ruff_format_unclean(ruff: str, config: Path, tree: Path, files: list[str]) -> list[str]:
    """Files `ruff format --check` would reformat."""
    if not files:
        return []
    proc = subprocess.run(
        [ruff, "format", "--check", "--config", str(config), "--no-cache", *files], cwd=tree, capture_output=True,
        text=True,
    )  # fmt: skip
    return [line.split(" ", 2)[-1] for line in proc.stdout.splitlines() if line.startswith("Would reformat: ")]


def ruff_version(ruff: str) -> str:
    return subprocess.run([ruff, "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]


# ---- the whole series: what `nox -s lint` and the PR precheck report ---------------


@dataclass(frozen=True)
class SeriesLint:
    files: list[str]  # touched .py files present in the tree
    ruff: list[Finding]  # ruff check on the lines the series adds
    unformatted: list[Finding]  # files ruff format would change that were clean before the series
    own: list[Finding]  # KIT001-KIT006
    pre_existing: list[Finding]  # ruff on upstream's own lines: shown, not counted

    @property
    def findings(self) -> list[Finding]:
        return [*self.ruff, *self.unformatted, *self.own]

    def rows(self) -> list[tuple[str, int]]:
        return [("ruff check", len(self.ruff)), ("ruff format", len(self.unformatted)), ("kit checks", len(self.own)),
                ("pre-existing (upstream)", len(self.pre_existing))]  # fmt: skip


def lint_series(ruff: str, config: Path, tree: Path, pristine: Path, series_diff: str) -> SeriesLint:
    """ruff (upstream settings) + kit checks on tree; series_diff is pristine..HEAD, pristine the tree before."""
    files = [d.path for d in parse(series_diff) if d.path.endswith(".py") and (tree / d.path).is_file()]
    added = added_line_set(series_diff)
    found = ruff_check(ruff, config, tree, files) if files else []
    ours = [f for f in found if f.line in added.get(f.file, set())]
    pristine_files = [f for f in files if (pristine / f).is_file()]
    was_unformatted = set(ruff_format_unclean(ruff, config, pristine, pristine_files))
    unformatted = [
        Finding(f, 1, "format", "ruff format would reformat this file", "run ruff format on it")
        for f in ruff_format_unclean(ruff, config, tree, files)
        if f not in was_unformatted
    ]
    pre_existing = [f for f in found if f not in ours]
    return SeriesLint(files, ours, unformatted, own_checks(series_diff, tree), pre_existing)


def lint_checkout(ruff: str) -> tuple[SeriesLint, str]:
    """(the series' findings, ruff's version) on the kit's checkout: `lint` and `pr` both run exactly this."""
    version = ruff_version(ruff)
    config = paths.CI_DIR / "ruff-upstream.toml"
    found = lint_series(ruff, config, paths.CHECKOUT, paths.PRISTINE_TREE, co.combined_diff(paths.CHECKOUT))
    return found, version
