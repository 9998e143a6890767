"""The off-NPU proof (KIT007): off NPU, a patched module is the pristine module, function by function.

Each module is projected to what runs on every device but NPU: every NPU device test is taken as false
(`<x>.type == "npu"` -> False, `!=` -> True, `<x>.type in ("cuda", "npu")` -> `<x>.type == "cuda"`,
`.is_npu` -> False), constant conditions are folded (`a or False` -> `a`, `if False: A else: B` -> `B`),
what follows a `return`/`raise` in a block is dropped, and so are new definitions and imports whose every
use was in dropped code. Docstrings, comments and formatting do not count. The projections of both
sides are then compared per unit (a function or method by qualified name; a class's or the module's own
statements). What differs must be declared by the patch that makes it differ, in its message:
`Kit-Off-NPU: <unit>: <why>` (a kit trailer: stripped from what goes upstream).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

NPU = "npu"
TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
BLOCKS = ("body", "orelse", "finalbody")
MODULE = "<module>"


@dataclass(frozen=True)
class OffNpuChange:
    file: str
    unit: str  # a qualified name ("Class.method", "function"), a class's own statements ("Class"), or "<module>"
    statement: str  # the first statement that differs off NPU (patched side; "removed: ..." when only pristine has it)
    line: int  # its line in the patched file (the unit's first line when it was removed)


def is_device_type(node: ast.expr) -> bool:
    """`<expr>.type` (`t.device.type`, `torch.device(d).type`): what a device is."""
    return isinstance(node, ast.Attribute) and node.attr == "type"


def constant(value: bool, like: ast.AST) -> ast.Constant:
    return ast.copy_location(ast.Constant(value), like)


def npu_test(node: ast.Compare) -> ast.expr | None:
    """node with NPU taken as false, when it is an NPU device test; None when it tests no NPU."""
    if len(node.ops) != 1:
        return None
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if isinstance(op, (ast.Eq, ast.NotEq)):
        sides = (left, right)
        if any(isinstance(s, ast.Constant) and s.value == NPU for s in sides) and any(map(is_device_type, sides)):
            return constant(isinstance(op, ast.NotEq), node)
    listed = isinstance(right, (ast.Tuple, ast.List, ast.Set))
    if isinstance(op, (ast.In, ast.NotIn)) and is_device_type(left) and listed:
        items = right.elts
        if not any(isinstance(e, ast.Constant) and e.value == NPU for e in items):
            return None
        rest = [e for e in items if not (isinstance(e, ast.Constant) and e.value == NPU)]
        negated = isinstance(op, ast.NotIn)
        if not rest:
            return constant(negated, node)
        if len(rest) == 1:  # `x in ("cuda", "npu")` off NPU is `x == "cuda"`
            return ast.copy_location(ast.Compare(left, [ast.NotEq() if negated else ast.Eq()], rest), node)
        return ast.copy_location(ast.Compare(left, [op], [type(right)(rest, ast.Load())]), node)
    return None


def truth(node: ast.AST) -> bool | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, bool) else None


class OffNpu(ast.NodeTransformer):
    """Every NPU device test as false, constant conditions folded, dead statements dropped."""

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        return npu_test(node) or node

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        self.generic_visit(node)
        return constant(False, node) if node.attr == "is_npu" else node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        value = truth(node.operand)
        return constant(not value, node) if isinstance(node.op, ast.Not) and value is not None else node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        is_and = isinstance(node.op, ast.And)
        values: list[ast.expr] = []
        for v in node.values:  # a and (b and c) -> a and b and c, as both sides are compared
            values += v.values if isinstance(v, ast.BoolOp) and type(v.op) is type(node.op) else [v]
        if any(truth(v) is (not is_and) for v in values):  # `a and False`, `a or True`
            return constant(not is_and, node)
        kept = [v for v in values if truth(v) is None]  # `a and True` -> a, `a or False` -> a
        if not kept:
            return constant(is_and, node)
        return kept[0] if len(kept) == 1 else ast.copy_location(ast.BoolOp(node.op, kept), node)

    def visit_IfExp(self, node: ast.IfExp) -> ast.expr:
        self.generic_visit(node)
        value = truth(node.test)
        return node if value is None else (node.body if value else node.orelse)

    def generic_visit(self, node: ast.AST) -> ast.AST:
        super().generic_visit(node)
        for field in BLOCKS:
            block = getattr(node, field, None)
            if isinstance(block, list) and all(isinstance(s, ast.stmt) for s in block):
                setattr(node, field, live(block))
        return node


def live(block: list[ast.stmt]) -> list[ast.stmt]:
    """A block with constant `if`/`while False` folded in place and nothing after a return or raise."""
    out: list[ast.stmt] = []
    for stmt in block:
        value = truth(stmt.test) if isinstance(stmt, (ast.If, ast.While)) else None
        if isinstance(stmt, ast.If) and value is not None:
            out += stmt.body if value else stmt.orelse
        elif isinstance(stmt, ast.While) and value is False:
            out += stmt.orelse
        else:
            out.append(stmt)
    for i, stmt in enumerate(out):
        if isinstance(stmt, TERMINAL):
            return out[: i + 1]
    return out


def is_docstring(node: ast.AST) -> bool:
    """A bare string statement: never executed code (coverage.py does not count it as a statement)."""
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    return body[1:] if body and is_docstring(body[0]) else body


def bound_names(stmt: ast.stmt) -> set[str]:
    """The names a definition or import binds in its block."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def used_names(whole: ast.AST, outside: ast.AST | None = None) -> set[str]:
    """Names read (by name or attribute) anywhere in whole, except inside `outside` (a helper calling itself
    does not keep it alive)."""
    inside = {id(n) for n in ast.walk(outside)} if outside is not None else set()
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(whole)
        if id(n) not in inside
        and ((isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store)) or isinstance(n, ast.Attribute))
    }


def prune(projected: ast.Module, original: ast.Module) -> None:
    """Drop definitions and imports whose every use was in dropped code: used in the unprojected module, used
    nowhere in its projection (a name the module never uses itself is API: it stays). Module and class blocks,
    to a fixed point. Both sides of a comparison are pruned alike, so an NPU-only helper an earlier patch added
    is out of both."""
    used_before = used_names(original)
    changed = True
    while changed:
        changed = False
        for block in blocks_of(projected):
            for stmt in list(block):
                names = bound_names(stmt)
                if not names or not names & used_before:
                    continue
                if not names & used_names(projected, outside=stmt):
                    block.remove(stmt)
                    changed = True


def blocks_of(module: ast.Module) -> Iterator[list[ast.stmt]]:
    yield module.body
    yield from (node.body for node in module.body if isinstance(node, ast.ClassDef))


def projection(source: str) -> ast.Module:
    """The module as it runs off NPU (see the module docstring)."""
    return OffNpu().visit(ast.parse(source))


def units(module: ast.Module) -> dict[str, list[ast.stmt]]:
    """Qualified name -> statements: each function and method (its body, decorators and arguments as a def),
    each class's own statements, and the module's own statements; docstrings left out."""
    out: dict[str, list[ast.stmt]] = {MODULE: []}
    for node in without_docstring(module.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = [node]
        elif isinstance(node, ast.ClassDef):
            own: list[ast.stmt] = []
            for item in without_docstring(node.body):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    out[f"{node.name}.{item.name}"] = [item]
                else:
                    own.append(item)
            out[node.name] = [ast.ClassDef(node.name, node.bases, node.keywords, own, node.decorator_list)]
        else:
            out[MODULE].append(node)
    for stmts in out.values():
        for stmt in stmts:
            for n in ast.walk(stmt):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    n.body = without_docstring(n.body) or [ast.Pass()]
    return out


def shape(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def header(node: ast.AST) -> str:
    """A statement without its blocks: what must be equal to look for the difference inside them."""
    return shape(type(node)(**{f: v for f, v in ast.iter_fields(node) if f not in (*BLOCKS, "handlers")}))


def first_difference(new: list[ast.stmt], old: list[ast.stmt]) -> tuple[str, int]:
    """(the first differing statement, its line): a compound statement whose header is the same (a def's
    signature, an `if`'s test, ...) is entered, so the answer is the innermost statement that differs."""
    for i in range(max(len(new), len(old))):
        a, b = (new[i] if i < len(new) else None), (old[i] if i < len(old) else None)
        if a is not None and b is not None and shape(a) == shape(b):
            continue
        if a is not None and b is not None and type(a) is type(b) and header(a) == header(b):
            for field in BLOCKS:
                inner_a, inner_b = getattr(a, field, []), getattr(b, field, [])
                if [shape(x) for x in inner_a] != [shape(x) for x in inner_b]:
                    return first_difference(inner_a, inner_b)
        if a is None:
            return f"removed: {one_line(b)}", getattr(new[-1], "lineno", 1) if new else 1
        return one_line(a), getattr(a, "lineno", 1)
    return "", 1


def one_line(node: ast.AST | None) -> str:
    text = ast.unparse(node).splitlines()[0] if node is not None else ""
    return text if len(text) <= 100 else text[:97] + "..."


def off_npu_changes(path: str, before: str | None, after: str | None) -> list[OffNpuChange]:
    """Units of path whose off-NPU projection differs between before and after (None: no such file). A side
    that does not parse proves nothing here: ruff reports it (E999) and lint fails there."""
    try:
        old_tree, new_tree = ast.parse(before or ""), ast.parse(after or "")
    except SyntaxError:
        return []
    old, new = projection(before or ""), projection(after or "")
    prune(old, old_tree)
    prune(new, new_tree)
    old_units, new_units = units(old), units(new)
    changes = []
    for name in dict.fromkeys([*new_units, *old_units]):
        a, b = new_units.get(name, []), old_units.get(name, [])
        if [shape(s) for s in a] != [shape(s) for s in b]:
            statement, line = first_difference(a, b)
            changes.append(OffNpuChange(path, name, statement, line))
    return changes
