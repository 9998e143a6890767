"""Lint the series: upstream's pre-commit gate (its hooks, ruff under its settings) on the files and lines
the series touches, then the kit's own checks on the lines the series adds, and the off-NPU proof.

The own checks are RULES (KIT001-KIT007), one object each: id, name, what it requires, the finding's
message and fix, the upstream hook it stands in for, and the check. The README's rule table and the PR
body's test plan are made from them. KIT007 judges the series patch by patch (scripts/checks/offnpu.py).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from scripts import childenv, gitcmd
from scripts.checkout import PRISTINE_TAG
from scripts.checkout.pristine import combined_diff
from scripts.checks import hooks, offnpu, precommit
from scripts.diffparse import FileDiff, parse
from scripts.errors import KitError
from scripts.gitcmd import last_line
from scripts.pin import load_pin
from scripts.series import Patch, trailer_values
from scripts.workspace import Workspace

SPDX = (
    "# SPDX-License-Identifier: Apache-2.0",
    "# SPDX-FileCopyrightText: Copyright contributors to the vLLM-Omni project",
)
LEVEL_MARKERS = ("core_model", "advanced_model")
HARDWARE_MARKERS = ("cpu", "gpu", "cuda", "rocm", "npu", "xpu")
IS_NPU = re.compile(r"\.is_npu\b")
TORCH_NPU = "torch_npu"
# Only for a file that does not parse (ruff reports that): a line naming torch_npu beside an import.
TORCH_NPU_IMPORT_TEXT = re.compile(r"\btorch_npu\b.*\bimport\b|\bimport\b.*\btorch_npu\b|__import__\(\s*['\"]torch_npu")
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
    """The module a call imports by name: `importlib.import_module("m")`, `import_module("m")`, `__import__("m")`."""
    if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
        return None
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
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
    """True when the test holds only on NPU (`x.device.type == "npu"`, also as a conjunct), False when only off
    NPU (`!=`, or its negation): which side of an `if` is NPU-only. None: the test says nothing about the device."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = npu_polarity(test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return True if any(npu_polarity(v) is True for v in test.values) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.NotEq)):
        left, right = test.left, test.comparators[0]
        npu = [side for side in (left, right) if isinstance(side, ast.Constant) and side.value == "npu"]
        if npu and is_device_type(right if npu[0] is left else left):
            return isinstance(test.ops[0], ast.Eq)
    return None


def statement_lines(body: list[ast.stmt]) -> set[int]:
    """First lines of every statement in body, nested ones included, docstrings left out: the lines coverage.py
    can report as executed."""
    return {
        node.lineno
        for stmt in body
        for node in ast.walk(stmt)
        if isinstance(node, ast.stmt) and not offnpu.is_docstring(node)
    }


def ends_block(body: list[ast.stmt]) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def guarded_lines(tree: ast.AST) -> set[int]:
    """Lines under a device guard: the NPU side of an `if`, and what follows `if <off NPU>: return` in its block."""
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
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
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
    """Statement lines that run only on NPU, decided by device guards, never by names: the NPU side of an
    `if x.device.type == "npu"` (or `!=` and its else), what follows `if <not NPU>: return`, and the body
    of a function used only from such lines (to a fixed point: helpers of helpers)."""
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
    """What the rules need of the patched file beyond its diff (empty when it is absent or does not parse)."""

    npu_only: frozenset[int] = frozenset()
    torch_npu_imports: tuple[tuple[int, int], ...] | None = None  # None: the file could not be parsed

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
    """Every import of torch_npu (statement, importlib, __import__) with an added line, outside NPU-only lines."""
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
    head = [text.removeprefix("\ufeff") for _, text in diff.added[:5]]  # a BOM is not a missing header
    if is_new_py_file(diff) and not all(line in head for line in SPDX):
        yield 1, ""


def lacks_test_markers(diff: FileDiff, source: Source) -> Hits:
    name = diff.path.rsplit("/", 1)[-1]
    if not (is_new_py_file(diff) and diff.path.startswith("tests/") and name.startswith("test_")):
        return
    text = "\n".join(t for _, t in diff.added)
    has_level = any(f"pytest.mark.{m}" in text for m in LEVEL_MARKERS)
    has_hw = "hardware_test(" in text or any(re.search(rf"pytest\.mark\.{m}\b", text) for m in HARDWARE_MARKERS)
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
    check: Callable[[FileDiff, Source], Hits] | None  # one file's diff and the patched file's facts -> hits;
    # None: a rule over the whole series (KIT007, off_npu_proof)
    mirrors: str = ""  # the upstream pre-commit hook this rule stands in for, where it cannot run here

    def findings(self, diff: FileDiff, source: Source) -> list[Finding]:
        if self.check is None:
            return []
        return [
            Finding(diff.path, line, self.id, f"{self.message}: {detail}" if detail else self.message, self.fix)
            for line, detail in self.check(diff, source)
        ]


# Rule(id, name, requires, message, fix, check): kept compact, one row per rule, as the table it is.
RULES = (
    Rule("KIT001", "is-npu", "no `.is_npu` (stock torch has no such attribute)",
         "uses .is_npu (AttributeError on stock torch)", 'write t.device.type == "npu"', uses_is_npu),
    Rule("KIT002", "torch-npu-import",
         "torch_npu imported (`import`, `from`, `importlib`, `__import__`) only under an NPU device guard",
         "imports torch_npu outside an NPU-only branch", 'import it lazily inside `if x.device.type == "npu":`',
         imports_torch_npu_eagerly),
    Rule("KIT003", "spdx", "upstream's two SPDX lines at the top of every new `.py` file",
         "new file without upstream's SPDX header", "start it with the two '# SPDX-...' lines", lacks_spdx),
    Rule("KIT004", "test-markers", "a level and a hardware marker in every new test file",
         "test file lacks a level or hardware marker", "add pytestmark = [pytest.mark.core_model, pytest.mark.cpu]",
         lacks_test_markers, "check-test-ci-coverage"),
    Rule("KIT005", "forbidden-import",
         "no pickle/cloudpickle, base64, plain `re` or top-level triton import in `vllm_omni/`",
         "forbidden import", "use pybase64 / `import regex as re` / lazy triton; no pickle", imports_forbidden,
         "check-forbidden-imports"),
    Rule("KIT006", "torch-cuda", "no `torch.cuda` memory/device calls outside `vllm_omni/platforms/`",
         "torch.cuda memory/device call", "go through vllm_omni.platforms (current_omni_platform)", calls_torch_cuda,
         "check-forbidden-imports"),
    Rule("KIT007", "off-npu",
         "off NPU (every NPU device test taken as false) each touched `vllm_omni/` module equals upstream's, function "
         "by function, and evaluates nothing upstream does not (the NPU tests' own operands, import and def time), "
         "except what a patch declares with `Kit-Off-NPU: <file>::<unit>: <why>`",
         "differs from upstream off NPU, undeclared", 'guard it by `.device.type == "npu"` or declare it', None),
)  # fmt: skip
OFF_NPU = RULES[-1]


RULE_IDS = f"{RULES[0].id}-{RULES[-1].id}"


def check_file(diff: FileDiff, new_source: str | None) -> list[Finding]:
    """Every rule's findings on one file's added lines; new_source is the patched file (imports, NPU-only lines)."""
    source = Source.of(new_source) if diff.path.endswith(".py") else Source()  # other files: no Python facts
    return [finding for rule in RULES for finding in rule.findings(diff, source)]


def own_checks(series_diff: str, tree: Path, moved: frozenset[str] = frozenset()) -> list[Finding]:
    """The kit's checks over the lines the series adds; series_diff is pristine..HEAD of the patched tree.
    A file in moved (renamed from an upstream file) is not new: it keeps its source's header."""
    findings = []
    for diff in parse(series_diff):
        if diff.path in moved:
            diff = replace(diff, new_file=False)
        path = tree / diff.path
        if path.is_symlink():  # a link holds no code to judge (no edit of it could add SPDX lines): its target is
            continue  # checked as its own file, and upstream's hooks skip links too (pre-commit's types)
        # a file in another encoding (latin-1, carried as binary) is read, not a crash: its lines are still checked
        source = path.read_bytes().decode("utf-8", "replace") if path.is_file() else None
        findings += check_file(diff, source)
    return findings


def added_line_set(series_diff: str) -> dict[str, set[int]]:
    """Added line numbers per file of the patched tree."""
    return {diff.path: {n for n, _ in diff.added} for diff in parse(series_diff)}


# ---- KIT007: the off-NPU proof, patch by patch ----------------------------------------

OFF_NPU_TRAILER = "Kit-Off-NPU"


@dataclass(frozen=True)
class Declared:
    """A difference off NPU that a patch declares (and the PR states)."""

    patch: str
    file: str
    unit: str
    why: str


class BadDeclaration(KitError):
    """A `Kit-Off-NPU:` trailer that does not say which unit, or why, or says it twice."""


DECLARATION_FORM = "'Kit-Off-NPU: <file>::<unit>: <why>' (unit: Class.method, function, Class or <module>)"


def declarations(patch: str, message: str) -> dict[tuple[str, str], str]:
    """(file, unit) -> why of each `Kit-Off-NPU: <file>::<unit>: <why>` trailer of a patch's message; a trailer
    without a file and unit, without a reason, or naming a unit twice is refused."""
    out: dict[tuple[str, str], str] = {}
    for value in trailer_values(message, OFF_NPU_TRAILER):
        target, _, why = value.partition(": ")
        file, scoped, unit = target.strip().partition("::")
        if not (scoped and file.strip() and unit.strip()):
            raise BadDeclaration(
                f"{patch}: the trailer 'Kit-Off-NPU: {target.strip()}: ...' does not name the file and unit it covers",
                f"write {DECLARATION_FORM} in {patch}'s message",
            )
        if not why.strip():
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {target.strip()}' gives no reason",
                "say why after ': ' (the PR states it to reviewers)",
            )
        key = (file.strip(), unit.strip())
        if key in out:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {target.strip()}' is declared twice",
                "keep one trailer per unit, with the reasons joined",
            )
        out[key] = why.strip()
    return out


def check_declared_units(patch: str, declared: dict[tuple[str, str], str], units: dict[str, set[str]]) -> None:
    """Refuse a declaration naming a file the patch does not change, or a unit that file does not have;
    units: each changed file -> the units of its two versions."""
    for file, unit in declared:
        if file not in units:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {file}::{unit}' names a file {patch} does not change",
                f"name a file it changes ({', '.join(sorted(units)) or 'none'}) or drop the trailer",
            )
        if unit not in units[file]:
            raise BadDeclaration(
                f"{patch}: 'Kit-Off-NPU: {file}::{unit}': {file} has no unit {unit}",
                "name a function as Class.method or function, a class, or <module>",
            )


def judge_off_npu(
    patch: str, changes: list[offnpu.OffNpuChange], declared: dict[tuple[str, str], str]
) -> tuple[list[Finding], list[Declared]]:
    """(findings, declared differences) of one patch: an undeclared difference, and a declaration naming
    no difference (its claim would be false), are findings."""
    findings = [
        Finding(
            c.file,
            c.line,
            OFF_NPU.id,
            f"off NPU, {c.unit} differs from upstream (`{c.statement}`"
            + (f": {c.reason}" if c.reason else "")
            + f") and {patch} does not declare it",
            f'guard it by `.device.type == "npu"` on a tensor the function already uses, leaving CPU/CUDA code '
            f"as upstream wrote it, or declare it: 'Kit-Off-NPU: {c.file}::{c.unit}: <why>' in {patch}'s message",
        )  # fmt: skip
        for c in changes
        if (c.file, c.unit) not in declared
    ]
    changed = {(c.file, c.unit) for c in changes}
    findings += [
        Finding(
            f"patches/{patch}",
            1,
            OFF_NPU.id,
            f"declares Kit-Off-NPU: {file}::{unit}, but off NPU {unit} is unchanged by this patch",
            "drop that trailer (or name the unit the patch changes)",
        )  # fmt: skip
        for file, unit in declared
        if (file, unit) not in changed
    ]
    return findings, [Declared(patch, f, u, why) for (f, u), why in declared.items() if (f, u) in changed]


@dataclass(frozen=True)
class OffNpuProof:
    findings: list[Finding]
    declared: list[Declared]

    def claim(self) -> str:
        """What the PR says about every device but NPU: made from this proof, never written by hand."""
        how = ("checked by the kit: each touched `vllm_omni/` module with every NPU device test taken as false "
               "equals upstream's, function by function")  # fmt: skip
        if self.findings:
            return f"Off NPU: NOT proven ({len(self.findings)} undeclared difference(s); {how})."
        if not self.declared:
            return f"Off NPU (CPU, CUDA, ROCm, XPU) nothing changes: {how}."
        changed = "; ".join(f"`{d.unit}` ({d.file}): {d.why}" for d in self.declared)
        return f"Off NPU nothing changes except, on purpose: {changed}. The rest is {how.replace('checked', 'proven')}."


def off_npu_proof(repo: Path, patches: list[Patch]) -> OffNpuProof:
    """KIT007 over the checkout's commits pristine..HEAD, one per patch in series order: each commit's own
    off-NPU differences against its parent, judged against its own declarations."""
    findings: list[Finding] = []
    declared: list[Declared] = []
    commits = gitcmd.messages(repo, f"{PRISTINE_TAG}..HEAD")
    for patch, (commit, message) in zip(patches, commits, strict=True):
        claims = declarations(patch.name, message)
        renamed = gitcmd.renamed_in(repo, commit)
        changes: list[offnpu.OffNpuChange] = []
        unit_names: dict[str, set[str]] = {}
        for path in gitcmd.changed_in(repo, commit):
            if not (path.startswith("vllm_omni/") and path.endswith(".py")):
                continue
            source = renamed.get(path, path)
            before, after = gitcmd.show_file(repo, f"{commit}^", source), gitcmd.show_file(repo, commit, path)
            changes += offnpu.off_npu_changes(path, before, after, renamed_from=renamed.get(path, ""))
            unit_names[path] = offnpu.unit_names(before) | offnpu.unit_names(after)
        check_declared_units(patch.name, claims, unit_names)
        mine, theirs = judge_off_npu(patch.name, changes, claims)
        findings += mine
        declared += theirs
    return OffNpuProof(findings, declared)


# ---- ruff at the edge --------------------------------------------------------------


class RuffError(KitError):
    """The ruff executable cannot be found or run."""


def resolve_ruff(ruff: str) -> str:
    """The absolute path of the ruff to run, resolved once from the caller's folder: a path (relative to the
    working directory, as a shell would read it) or a name on PATH. Every later call runs in other folders."""
    if os.sep in ruff or (os.altsep and os.altsep in ruff):
        path = os.path.abspath(os.path.expanduser(ruff))
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise RuffError(f"--ruff {ruff}: no executable file at {path}",
                            "pass the path of a ruff executable (e.g. .venv/bin/ruff) or a name on PATH")  # fmt: skip
        return path
    found = shutil.which(ruff)
    if found is None:
        raise RuffError(f"--ruff {ruff}: not found on PATH",
                        "use nox -s lint, or pip install -r ci/kit-dev-tools.txt, or pass --ruff PATH")  # fmt: skip
    return os.path.abspath(found)


def run_ruff(ruff: str, args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """ruff (an absolute path from resolve_ruff) with args; exit codes are the caller's to judge."""
    with tempfile.TemporaryDirectory(prefix="kit-ruff-home-") as home:
        env = childenv.tool_env(Path(home))
        return subprocess.run(childenv.encoded_argv([ruff, *args]), cwd=cwd, env=childenv.encoded_env(env),
                              capture_output=True, encoding="utf-8", errors="replace")  # fmt: skip


def config_args(config: Path | None) -> list[str]:
    """ruff's --config (the kit's copy of upstream's settings); none: ruff finds the tree's own."""
    return ["--config", str(config)] if config else []


def ruff_check(ruff: str, config: Path | None, tree: Path, files: list[str]) -> list[Finding]:
    argv = ["check", *config_args(config), "--output-format", "json", "--no-cache", *files]
    proc = run_ruff(ruff, argv, tree)
    if proc.returncode not in (0, 1):
        raise RuffError(f"ruff check failed on .work/{tree.name}: {last_line(proc.stderr, proc.stdout)}",
                        "read ruff's message above; --ruff must be ruff itself "
                        "(the version upstream pins is in ci/kit-dev-tools.txt)")  # fmt: skip
    return [
        Finding(
            str(Path(r["filename"]).relative_to(tree)),
            r["location"]["row"],
            f"ruff-check {r['code']}" if r["code"] else "ruff-check",
            r["message"],
            (r.get("fix") or {}).get("message") or "see ruff's rule docs",
        )  # fmt: skip
        for r in json.loads(proc.stdout or "[]")
    ]


def ruff_format_unclean(ruff: str, config: Path | None, tree: Path, files: list[str]) -> list[str]:
    """Files `ruff format --check` would reformat."""
    if not files:
        return []
    proc = run_ruff(ruff, ["format", "--check", *config_args(config), "--no-cache", *files], tree)
    return [line.split(" ", 2)[-1] for line in proc.stdout.splitlines() if line.startswith("Would reformat: ")]


def ruff_version(ruff: str) -> str:
    proc = run_ruff(ruff, ["--version"])
    words = proc.stdout.split()
    if proc.returncode != 0 or len(words) < 2 or words[0] != "ruff":
        raise RuffError(f"--ruff {ruff} is not ruff (`{ruff} --version` said {last_line(proc.stderr, proc.stdout)!r})",
                        "pass the path of a ruff executable or a name on PATH")  # fmt: skip
    return words[-1]


# ---- the whole series: what `nox -s lint` and the PR precheck report ---------------


@dataclass(frozen=True)
class SeriesLint:
    files: list[str]  # touched .py files present in the tree
    hooks: list[Finding]  # upstream's pre-commit hooks (other than ruff), on the lines the series adds
    hook_rows: list[tuple[str, str, str]]  # (hook id, version, what happened): every hook of upstream's config
    ruff: list[Finding]  # ruff check on the lines the series adds
    unformatted: list[Finding]  # files ruff format would change that were clean before the series
    own: list[Finding]  # KIT001-KIT006
    off_npu: OffNpuProof  # KIT007
    pre_existing: list[Finding]  # ruff and the hooks on upstream's own lines: shown, not counted
    gates: str = precommit.RELEASE  # whose gates ran: a tree's config at a commit, or the kit's table

    @property
    def findings(self) -> list[Finding]:
        return [*self.hooks, *self.ruff, *self.unformatted, *self.own, *self.off_npu.findings]

    def rows(self) -> list[tuple[str, int]]:
        return [("upstream hooks (other than ruff)", len(self.hooks)),
                ("ruff-check", len(self.ruff)), ("ruff-format", len(self.unformatted)), ("kit checks", len(self.own)),
                ("off-NPU proof (KIT007)", len(self.off_npu.findings)),
                ("pre-existing (upstream)", len(self.pre_existing))]  # fmt: skip


@dataclass(frozen=True)
class Tools:
    """What lint runs: ruff (resolve_ruff's answer), the folder of the kit's table's hook programs (None: PATH),
    the table itself, and where a tree's gate env is kept."""

    ruff: str
    hooks_bin: Path | None
    hooks: tuple[hooks.Hook, ...]
    ci_dir: Path
    make_env: Callable[[precommit.GateSource], Path]  # a tree's gate env (scripts/legs/gateenv.py), made once


def as_finding(f: hooks.HookFinding) -> Finding:
    if f.message.startswith(hooks.UNCHECKED):
        fix = f"the kit cannot run it: run `pre-commit run {f.hook} --files {f.file}` where it can, or leave the file"
        return Finding(f.file, f.line, f.hook, f.message, fix)
    return Finding(f.file, f.line, f.hook, f.message, f"make the line pass upstream's {f.hook} hook")


def ruff_of(tools: Tools, source: precommit.GateSource, bins: hooks.Bins) -> tuple[str | None, Path | None]:
    """(the ruff to run, its config) for source's ruff hooks; (None, None) when its config has none.
    A tree's ruff reads the tree's own settings (pyproject.toml) at the config's rev where that differs."""
    ruff_hooks = [h for h in source.hooks if h.run == "ruff"]
    if not ruff_hooks:
        return None, None
    if not source.is_tree:
        return tools.ruff, tools.ci_dir / "ruff-upstream.toml"
    mine = ruff_hooks[0].package in source.requirements
    return (hooks.executable("ruff", bins.env) if mine else tools.ruff), None


def lint_series(tools: Tools, source: precommit.GateSource, bins: hooks.Bins, tree: Path, pristine: Path,
                series_diff: str, off_npu: OffNpuProof, moved: frozenset[str] = frozenset()) -> SeriesLint:  # fmt: skip
    """source's hooks, ruff (as source sets it) and kit checks on tree, with the off-NPU proof the caller made
    from the commits; series_diff is pristine..HEAD, pristine the tree before, moved the files renamed since."""
    diffs = parse(series_diff)
    files = [d.path for d in diffs if d.path.endswith(".py") and (tree / d.path).is_file()]
    added = added_line_set(series_diff)
    gate = hooks.run_gate(source.hooks, tree, added, {d.path for d in diffs if d.new_file}, bins, tools.ci_dir,
                          whole_tree=source.is_tree)  # fmt: skip
    ruff, config = ruff_of(tools, source, bins)
    found = ruff_check(ruff, config, tree, files) if ruff and files else []
    ours = [f for f in found if f.line in added.get(f.file, set())]
    pristine_files = [f for f in files if (pristine / f).is_file()]
    was_unformatted = set(ruff_format_unclean(ruff, config, pristine, pristine_files)) if ruff else set()
    unformatted = [
        Finding(f, 1, "ruff-format", "ruff format would reformat this file", "run ruff format on it")
        for f in (ruff_format_unclean(ruff, config, tree, files) if ruff else [])
        if f not in was_unformatted
    ]
    pre_existing = [f for f in found if f not in ours] + [as_finding(f) for f in gate.pre_existing]
    return SeriesLint(files, [as_finding(f) for f in gate.counted], gate.rows, ours, unformatted,
                      own_checks(series_diff, tree, moved), off_npu, pre_existing, source.label)  # fmt: skip


def checkout_gates(ws: Workspace, tools: Tools) -> precommit.GateSource:
    """The checkout's gates: its pristine tree's own config when that is the pin's git commit (the git source,
    by the pin or by apply --source git), else (the release wheel) the kit's table."""
    pin = load_pin(ws.pin_file)
    commit = gitcmd.rev_parse(ws.checkout, PRISTINE_TAG)
    if not pin.git_commit or commit != pin.git_commit:
        return precommit.release_gates(tools.hooks)
    return precommit.tree_gates(ws.checkout, commit, f"{pin.git_url} {pin.git_tag}", tools.hooks)


def lint_tree(tools: Tools, source: precommit.GateSource, repo: Path, base: str, proof: OffNpuProof,
              pristine: Path) -> SeriesLint:  # fmt: skip
    """lint_series on repo's working tree (HEAD: base with the series) under source's gates; pristine: base's tree."""
    bins = precommit.gate_bins(source, tools.hooks_bin, tools.make_env)
    return lint_series(tools, source, bins, repo, pristine, gitcmd.diff(repo, base, "HEAD"), proof)


def lint_checkout(ws: Workspace, tools: Tools, patches: list[Patch]) -> tuple[SeriesLint, str]:
    """(the series' findings, ruff's version) on the kit's checkout: `lint` and `pr` both run exactly this."""
    version = ruff_version(tools.ruff)
    source = checkout_gates(ws, tools)
    proof = off_npu_proof(ws.checkout, patches)
    moved = frozenset(gitcmd.renamed_between(ws.checkout, PRISTINE_TAG, "HEAD"))
    bins = precommit.gate_bins(source, tools.hooks_bin, tools.make_env)
    series = combined_diff(ws.checkout)
    result = lint_series(tools, source, bins, ws.checkout, ws.pristine_tree, series, proof, moved)
    return result, version


def tools_for(ws: Workspace, ruff: str, hooks_bin: str | None,
              make_env: Callable[[precommit.GateSource], Path]) -> Tools:  # fmt: skip
    """The lint tools, resolved once from the caller's folder (ruff: a path or a name on PATH)."""
    folder = Path(hooks_bin).expanduser().resolve() if hooks_bin else None
    if folder is not None and not folder.is_dir():
        raise hooks.HooksError(
            f"--hooks-bin {hooks_bin}: no such folder",
            "pass the bin folder of a venv holding upstream's hook packages (nox -s lint does)",
        )
    return Tools(resolve_ruff(ruff), folder, hooks.load_hooks(ws.upstream_hooks), ws.ci_dir, make_env)
