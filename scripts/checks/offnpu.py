"""The off-NPU proof (KIT007): off NPU, a patched module is the pristine module, function by function, and
evaluates nothing the pristine module does not.

Each module is projected to what runs on every device but NPU: every NPU device test is taken as false
(`<x>.type == "npu"` -> False, `!=` -> True, `<x>.type in ("cuda", "npu")` -> `<x>.type == "cuda"`,
`.is_npu` -> False), constant conditions are folded (`a or False` -> `a`, `if False: A else: B` -> `B`),
what follows a `return`/`raise` in a block is dropped, and so are new definitions and imports whose every
use was in dropped code. Docstrings, comments and formatting do not count. The projections of both
sides are then compared per unit (a function or method by qualified name; a class's or the module's own
statements).

Sound, not only complete: a test folds to a constant only where evaluating it off NPU is certainly total
(it cannot fail or act), as its operand `<E>.type` is then `t.device` of a tensor `t` or a torch.device:
- t a parameter annotated `torch.Tensor`, or unannotated without a default (every caller passes it);
  never one with a default or another annotation (None, or anything, may come);
- t a name the function has already read as a tensor (`t.dim()`, `t.is_cuda`, `t.device`, ... in
  TENSOR_READS), on every path to the test, since t was last bound: `q.is_cuda or q.device.type == "npu"`;
- `self.<field>` of a @dataclass field with a default annotated `torch.Tensor | None`, right after
  `self.<field> is not None and` (the `is not None` test reads a field that always exists);
- `torch.device(d).type` or `d.type` for a parameter d annotated `torch.device`.
The method receiver (`self`), an attribute of anything else, an index, a call, a property and a name bound
later are never taken as total: the test is left as written and its statement differs. Conditions beside
a folded test that are still evaluated (`a and <test>`) fold only when pure (a constant, a parameter, a
field's `is (not) None`). A new module-level or class-level binding is dropped only when binding it runs
nothing (inert_binding: no decorator, no call in a default value or assigned value, a standard-library
import): `_BUF = torch.empty(1 << 28)` used only on NPU still runs at import, and stays a difference.

What differs must be declared by the patch that makes it differ, in its message:
`Kit-Off-NPU: <file>::<unit>: <why>` (a kit trailer: stripped from what goes upstream).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass

NPU = "npu"
TERMINAL = (ast.Return, ast.Raise, ast.Continue, ast.Break)
BLOCKS = ("body", "orelse", "finalbody")
MODULE = "<module>"
TENSOR, DEVICE = "torch.Tensor", "torch.device"
# Reading one of these from a name proves it a tensor (numpy arrays, modules and lists have none of
# them).
TENSOR_READS = frozenset(
    {
        "device",
        "is_cuda",
        "dim",
        "numel",
        "unflatten",
        "unbind",
        "index_select",
        "new_empty",
        "new_zeros",
        "element_size",
        "is_contiguous",
        "data_ptr",
    }
)


@dataclass(frozen=True)
class OffNpuChange:
    file: str
    # a qualified name ("Class.method", "function"), a class's own statements ("Class"), or
    # "<module>"
    unit: str
    # the first statement that differs off NPU (patched side; "removed: ..." when only pristine has
    # it)
    statement: str
    line: int  # its line in the patched file (the unit's first line when it was removed)
    reason: str = (
        ""  # why it counts, where that is not plain: an NPU test left unfolded, import-time code
    )


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
        if any(isinstance(s, ast.Constant) and s.value == NPU for s in sides) and any(
            map(is_device_type, sides)
        ):
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
            return ast.copy_location(
                ast.Compare(left, [ast.NotEq() if negated else ast.Eq()], rest), node
            )
        return ast.copy_location(ast.Compare(left, [op], [type(right)(rest, ast.Load())]), node)
    return None


def truth(node: ast.AST) -> bool | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, bool) else None


def is_full_test(node: ast.Compare) -> bool:
    """An NPU device test that folds to a constant (its operand is then no longer evaluated in the
    projection)."""
    return isinstance(npu_test(node), ast.Constant)


def stores(node: ast.AST) -> set[str]:
    """Every name node binds or deletes anywhere inside it (assignments, loops, imports, defs,
    handlers)."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def parameters(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs]


def stable_params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The parameters of fn that no statement of its body rebinds."""
    rebound = set().union(*(stores(stmt) for stmt in fn.body))
    return {arg.arg for arg in parameters(fn)} - rebound


def declared(annotation: ast.expr | None, optional: bool = False) -> str | None:
    """What an annotation promises: TENSOR or DEVICE, or None (anything else). optional: also `X | None` and
    `Optional[X]`, as X (for a value already tested `is not None`)."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
    if optional and isinstance(annotation, ast.BinOp) and isinstance(annotation.op, ast.BitOr):
        sides = [annotation.left, annotation.right]
        rest = [x for x in sides if not (isinstance(x, ast.Constant) and x.value is None)]
        annotation = rest[0] if len(rest) == 1 else None
    elif (
        optional
        and isinstance(annotation, ast.Subscript)
        and ast.unparse(annotation.value).endswith("Optional")
    ):
        annotation = annotation.slice
    text = ast.unparse(annotation) if annotation is not None else ""
    return {"torch.Tensor": TENSOR, "Tensor": TENSOR, "torch.device": DEVICE}.get(text)


def given(arg: ast.arg, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """What a parameter certainly holds: what its annotation declares (TENSOR, DEVICE); unannotated and
    without a default (every caller passes it), TENSOR: the tensor the function is given. One with a
    default (None is a value it can hold) or another annotation: nothing."""
    if arg.annotation is not None:
        return declared(arg.annotation)
    a = fn.args
    positional = [x.arg for x in (*a.posonlyargs, *a.args)]
    defaulted = set(positional[len(positional) - len(a.defaults) :])
    defaulted |= {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is not None}
    return None if arg.arg in defaulted else TENSOR


def dataclass_fields(node: ast.ClassDef) -> dict[str, ast.expr]:
    """field -> annotation of a @dataclass's fields that have a default: a class attribute as well, so
    reading it from an instance never fails."""
    if not any(ast.unparse(d).split("(")[0].endswith("dataclass") for d in node.decorator_list):
        return {}
    return {
        s.target.id: s.annotation
        for s in node.body
        if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and s.value is not None
    }


class Evidence:
    """Which device tests are total off NPU: walks each function in evaluation order, remembering what
    it has already read as a tensor or tested `is not None`, and records the tests (and `.is_npu`
    reads) whose operand is then certainly a tensor or a torch.device, and the `is (not) None` tests
    of a field that cannot fail (the module docstring lists the forms)."""

    def __init__(self, module: ast.Module) -> None:
        self.accounted: set[int] = set()  # device tests and .is_npu reads that may fold
        # `self.<field> is (not) None`: total, so it may fold beside a test
        self.pure: set[int] = set()
        # parameter -> its declared type, while no statement rebinds it
        self.types: dict[str, str | None] = {}
        self.fields: dict[str, ast.expr] = {}  # the enclosing dataclass's fields with a default
        self.owner = ""  # the method's first parameter (self), while no statement rebinds it
        self.in_class = False  # walking a class's own body
        self.scope(module.body, {}, {}, "")

    def scope(
        self,
        body: list[ast.stmt],
        types: dict[str, str | None],
        fields: dict[str, ast.expr],
        owner: str,
        in_class: bool = False,
    ) -> None:
        saved = self.types, self.fields, self.owner, self.in_class
        self.types, self.fields, self.owner, self.in_class = types, fields, owner, in_class
        self.block(body, set())
        self.types, self.fields, self.owner, self.in_class = saved

    def field(self, node: ast.expr) -> ast.expr | None:
        """The annotation of node when it reads a field of the method's own dataclass instance."""
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == self.owner
        ):
            return self.fields.get(node.attr)
        return None

    def typed(self, node: ast.expr, known: set[str]) -> str | None:
        """TENSOR or DEVICE when node certainly is one, evaluated without failing."""
        if isinstance(node, ast.Name):
            return TENSOR if node.id in known else self.types.get(node.id)
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "device"
            and self.typed(node.value, known) == TENSOR
        ):
            return DEVICE
        if (annotation := self.field(node)) is not None:
            return declared(annotation, optional=ast.unparse(node) in known)
        is_torch_device = isinstance(node, ast.Call) and ast.unparse(node.func) == "torch.device"
        if is_torch_device and len(node.args) == 1 and not node.keywords:  # type: ignore[union-attr]
            return DEVICE if self.typed(node.args[0], known) == DEVICE else None  # type: ignore[union-attr]
        return None

    def none_test(self, node: ast.expr) -> str:
        """The field `self.<f> is not None` (or `is None`) tests, "" for anything else."""
        is_test = (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Is, ast.IsNot))
        )
        if (
            is_test
            and isinstance(node.comparators[0], ast.Constant)
            and node.comparators[0].value is None
        ):  # type: ignore[union-attr]
            return ast.unparse(node.left) if self.field(node.left) is not None else ""  # type: ignore[union-attr]
        return ""

    def block(self, body: list[ast.stmt], known: set[str]) -> None:
        for stmt in body:
            self.statement(stmt, known)

    def statement(self, stmt: ast.stmt, known: set[str]) -> None:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in [
                *stmt.decorator_list,
                *stmt.args.defaults,
                *filter(None, stmt.args.kw_defaults),
            ]:
                self.expression(node, known)
            rebound = set().union(*(stores(s) for s in stmt.body))
            receiver = parameters(stmt)[0].arg if self.in_class and parameters(stmt) else ""
            types = {
                a.arg: given(a, stmt)
                for a in parameters(stmt)
                if a.arg not in rebound and a.arg != receiver
            }
            method = self.fields and not stmt.decorator_list  # in a dataclass's body
            self.scope(
                stmt.body,
                types,
                self.fields if method else {},
                receiver if receiver not in rebound else "",
            )
        elif isinstance(stmt, ast.ClassDef):
            for node in [*stmt.decorator_list, *stmt.bases, *(k.value for k in stmt.keywords)]:
                self.expression(node, known)
            self.scope(stmt.body, {}, dataclass_fields(stmt), "", in_class=True)
        else:  # headers are evaluated now, blocks maybe: what a block learns stays in it
            headers = [
                v for f, v in ast.iter_fields(stmt) if f not in (*BLOCKS, "handlers", "cases")
            ]
            if isinstance(stmt, (ast.While, ast.For, ast.AsyncFor)):
                known -= stores(stmt)  # a loop's later rounds see what its body rebinds
            for value in headers:
                for node in value if isinstance(value, list) else [value]:
                    if isinstance(node, ast.expr):
                        self.expression(node, known)
                    elif isinstance(node, ast.withitem):
                        self.expression(node.context_expr, known)
            for field in BLOCKS:
                self.block(getattr(stmt, field, []), set(known))
            for inner in [*getattr(stmt, "handlers", []), *getattr(stmt, "cases", [])]:
                self.block(inner.body, set(known))
        defines = isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        known -= {stmt.name} if defines else stores(stmt)  # type: ignore[union-attr]

    def expression(self, node: ast.expr, known: set[str]) -> None:
        """Walk node in evaluation order; what is evaluated only maybe learns nothing for later."""
        if isinstance(node, ast.Compare):
            operands = [
                side.value for side in (node.left, node.comparators[0]) if is_device_type(side)
            ]
            if is_full_test(node) and self.typed(operands[0], known) == DEVICE:  # type: ignore[attr-defined]
                self.accounted.add(id(node))
            self.expression(node.left, known)
            self.expression(node.comparators[0], known)
            for later in node.comparators[1:]:
                self.expression(later, set(known))
            return
        if isinstance(node, ast.Attribute):
            if node.attr == "is_npu" and self.typed(node.value, known) == TENSOR:
                self.accounted.add(id(node))
            self.expression(node.value, known)
            if isinstance(node.value, ast.Name) and node.attr in TENSOR_READS:
                known.add(node.value.id)
            return
        if isinstance(node, ast.BoolOp):
            self.expression(node.values[0], known)
            maybe = set(known)
            for i, value in enumerate(node.values):
                if i:
                    self.expression(value, maybe)
                if tested := self.none_test(value):
                    self.pure.add(id(value))
                    if isinstance(node.op, ast.And) and isinstance(value.ops[0], ast.IsNot):  # type: ignore[attr-defined]
                        maybe.add(tested)  # `self.f is not None and <here self.f is not None>`
            return
        if isinstance(node, ast.IfExp):
            self.expression(node.test, known)
            self.expression(node.body, set(known))
            self.expression(node.orelse, set(known))
            return
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            self.expression(node.generators[0].iter, known)  # the rest runs in its own scope, maybe
            return
        if isinstance(node, ast.Lambda):
            return
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.expression(child, known)
        if isinstance(node, ast.NamedExpr):
            known.discard(node.target.id)


class OffNpu(ast.NodeTransformer):
    """Every accounted NPU device test as false, constant conditions folded, dead statements dropped.

    `accounted`: the ids of the device tests (and `.is_npu` reads) whose evaluation off NPU is total
    (Evidence below); any other test is left as written, so its statement stays and differs."""

    def __init__(self, evidence: Evidence) -> None:
        self.accounted = evidence.accounted
        self.pure_tests = evidence.pure
        # the enclosing function's parameters no statement rebinds
        self.params: list[set[str]] = [set()]

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        self.params.append(stable_params(node))
        self.generic_visit(node)
        self.params.pop()
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self.visit_FunctionDef(node)

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        # a partial fold keeps its operand
        fold = id(node) in self.accounted or not is_full_test(node)
        self.generic_visit(node)
        return (npu_test(node) if fold else None) or node

    def visit_Attribute(self, node: ast.Attribute) -> ast.expr:
        self.generic_visit(node)
        return (
            constant(False, node) if node.attr == "is_npu" and id(node) in self.accounted else node
        )

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        value = truth(node.operand)
        return (
            constant(not value, node)
            if isinstance(node.op, ast.Not) and value is not None
            else node
        )

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.expr:
        self.generic_visit(node)
        is_and = isinstance(node.op, ast.And)
        values: list[ast.expr] = []
        for v in node.values:  # a and (b and c) -> a and b and c, as both sides are compared
            values += v.values if isinstance(v, ast.BoolOp) and type(v.op) is type(node.op) else [v]
        # `a and False`
        end = next((i for i, v in enumerate(values) if truth(v) is (not is_and)), None)
        if end is not None:
            # still evaluated off NPU, truth taken
            before = [v for v in values[:end] if truth(v) is None]
            if all(self.pure(v) for v in before):
                return constant(not is_and, node)
            return ast.copy_location(ast.BoolOp(node.op, [*before, values[end]]), node)
        kept = [v for v in values if truth(v) is None]  # `a and True` -> a, `a or False` -> a
        if not kept:
            return constant(is_and, node)
        return kept[0] if len(kept) == 1 else ast.copy_location(ast.BoolOp(node.op, kept), node)

    def pure(self, node: ast.expr) -> bool:
        """Evaluating node (and its truth) can neither fail nor act: a constant, a parameter no
        statement rebinds, a dataclass field with a default tested `is (not) None`, `not` or `is
        (not)` of such."""
        if isinstance(node, ast.Constant) or id(node) in self.pure_tests:
            return True
        if isinstance(node, ast.Name):
            return node.id in self.params[-1]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self.pure(node.operand)
        if isinstance(node, ast.Compare) and all(
            isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops
        ):
            return all(self.pure(n) for n in (node.left, *node.comparators))
        return False

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
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def without_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    return body[1:] if body and is_docstring(body[0]) else body


def bound_names(stmt: ast.stmt) -> set[str]:
    """The names a definition or import binds in its block."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    targets = (
        stmt.targets
        if isinstance(stmt, ast.Assign)
        else [stmt.target]
        if isinstance(stmt, ast.AnnAssign)
        else []
    )
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def used_names(whole: ast.AST, outside: ast.AST | None = None) -> set[str]:
    """Names read (by name or attribute) anywhere in whole, except inside `outside` (a helper calling
    itself does not keep it alive)."""
    inside = {id(n) for n in ast.walk(outside)} if outside is not None else set()
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(whole)
        if id(n) not in inside
        and (
            (isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Store))
            or isinstance(n, ast.Attribute)
        )
    }


def prune(projected: ast.Module, original: ast.Module) -> None:
    """Drop definitions and imports whose every use was in dropped code: used in the unprojected
    module, used nowhere in its projection (a name the module never uses itself is API: it stays),
    and inert (binding it evaluates nothing that could fail or act: see inert_binding). Module
    blocks, and the methods of classes (a class's fields are its API: a dataclass's are its
    constructor's arguments), to a fixed point. Both sides of a comparison are pruned alike, so an
    NPU-only helper an earlier patch added is out of both."""
    used_before = used_names(original)
    lazy = postponed_annotations(original)
    changed = True
    while changed:
        changed = False
        for block in blocks_of(projected):
            for stmt in list(block):
                names = bound_names(stmt)
                field = block is not projected.body and not isinstance(
                    stmt, (ast.FunctionDef, ast.AsyncFunctionDef)
                )
                if field or not names or not names & used_before or not inert_binding(stmt, lazy):
                    continue
                if not names & used_names(projected, outside=stmt):
                    block.remove(stmt)
                    changed = True


def postponed_annotations(module: ast.Module) -> bool:
    """`from __future__ import annotations`: annotations are then never evaluated."""
    return any(
        isinstance(s, ast.ImportFrom)
        and s.module == "__future__"
        and any(a.name == "annotations" for a in s.names)
        for s in module.body
    )


def inert(node: ast.expr | None) -> bool:
    """A value whose evaluation cannot fail or act: a constant, a name, a container or arithmetic of
    such."""
    if node is None or isinstance(node, (ast.Constant, ast.Name)):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(map(inert, node.elts))
    if isinstance(node, ast.Dict):
        return all(map(inert, [*node.keys, *node.values]))
    if isinstance(node, ast.UnaryOp):
        return inert(node.operand)
    if isinstance(node, ast.BinOp):
        return isinstance(node.left, ast.Constant) and isinstance(node.right, ast.Constant)
    return False


def annotation_inert(node: ast.expr | None, lazy: bool) -> bool:
    """An annotation is a type expression (names, dotted names, subscripts, `|`), or never evaluated."""
    return (
        lazy
        or node is None
        or all(
            isinstance(
                n,
                (
                    ast.Name,
                    ast.Attribute,
                    ast.Subscript,
                    ast.Constant,
                    ast.BinOp,
                    ast.Tuple,
                    ast.List,
                    ast.Load,
                    ast.BitOr,
                ),
            )
            for n in ast.walk(node)
        )
    )


def inert_binding(stmt: ast.stmt, lazy: bool) -> bool:
    """Executing stmt (at import, or when its class is made) only binds names: a def without decorators
    and with inert defaults, a class of such, an inert assignment, an import of the standard
    library."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = stmt.args
        notes = [x.annotation for x in [*parameters(stmt), a.vararg, a.kwarg] if x is not None] + [
            stmt.returns
        ]
        return (
            not stmt.decorator_list
            and all(map(inert, [*a.defaults, *a.kw_defaults]))
            and all(annotation_inert(n, lazy) for n in notes)
        )
    if isinstance(stmt, ast.ClassDef):
        return (
            not stmt.decorator_list
            and not stmt.keywords
            and all(isinstance(b, ast.Name) for b in stmt.bases)
            and all(
                is_docstring(s) or isinstance(s, ast.Pass) or inert_binding(s, lazy)
                for s in stmt.body
            )
        )
    if isinstance(stmt, ast.Assign):
        return inert(stmt.value) and all(isinstance(t, ast.Name) for t in stmt.targets)
    if isinstance(stmt, ast.AnnAssign):
        return inert(stmt.value) and annotation_inert(stmt.annotation, lazy)
    if isinstance(stmt, ast.Import):
        return all(a.name.split(".")[0] in sys.stdlib_module_names for a in stmt.names)
    if isinstance(stmt, ast.ImportFrom):
        return stmt.level == 0 and (stmt.module or "").split(".")[0] in sys.stdlib_module_names
    return False


def blocks_of(module: ast.Module) -> Iterator[list[ast.stmt]]:
    yield module.body
    yield from (node.body for node in module.body if isinstance(node, ast.ClassDef))


def projection(source: str) -> ast.Module:
    """The module as it runs off NPU (see the module docstring)."""
    tree = ast.parse(source)
    return OffNpu(Evidence(tree)).visit(tree)


def units(module: ast.Module) -> dict[str, list[ast.stmt]]:
    """Qualified name -> statements: each function and method (its body, decorators and arguments as a
    def), each class's own statements, and the module's own statements; docstrings left out."""
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
            out[node.name] = [
                ast.ClassDef(node.name, node.bases, node.keywords, own, node.decorator_list)
            ]
        else:
            out[MODULE].append(node)
    for stmts in out.values():
        for stmt in stmts:
            for n in ast.walk(stmt):
                if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    n.body = without_docstring(n.body) or [ast.Pass()]
    return out


def unit_names(source: str | None) -> set[str]:
    """The units a declaration may name in a file's text (none when it is absent or does not parse)."""
    try:
        return set(units(ast.parse(source))) if source is not None else set()
    except SyntaxError:
        return set()


def shape(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def header(node: ast.AST) -> str:
    """A statement without its blocks: what must be equal to look for the difference inside them."""
    return shape(
        type(node)(**{f: v for f, v in ast.iter_fields(node) if f not in (*BLOCKS, "handlers")})
    )


def first_difference(new: list[ast.stmt], old: list[ast.stmt]) -> tuple[str, int, ast.stmt | None]:
    """(the first differing statement, its line, its node on the patched side): a compound statement
    whose header is the same (a def's signature, an `if`'s test, ...) is entered, so the answer is
    the innermost statement that differs."""
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
            return f"removed: {one_line(b)}", getattr(new[-1], "lineno", 1) if new else 1, None
        return one_line(a), getattr(a, "lineno", 1), a
    return "", 1, None


def one_line(node: ast.AST | None) -> str:
    text = ast.unparse(node).splitlines()[0] if node is not None else ""
    return text if len(text) <= 100 else text[:97] + "..."


def why(stmt: ast.stmt | None, projected: ast.Module, lazy: bool) -> str:
    """Why a differing statement counts, where it is not plain CPU/CUDA code: an NPU test left
    unfolded, or a binding only NPU code uses that still runs on import."""
    if stmt is None:
        return ""
    header_only = type(stmt)(
        **{f: v for f, v in ast.iter_fields(stmt) if f not in (*BLOCKS, "handlers", "body")}
    )
    for node in ast.walk(header_only):
        if isinstance(node, ast.Compare) and is_full_test(node):
            side = next(s for s in (node.left, node.comparators[0]) if is_device_type(s))
            return (
                f"evaluates `{ast.unparse(side)}` on every device, where it may fail or act: not "
                "certainly a tensor's device or a torch.device"
            )
        if isinstance(node, ast.BoolOp) and any(truth(v) is not None for v in node.values):
            beside = " and ".join(f"`{ast.unparse(v)}`" for v in node.values if truth(v) is None)
            return f"evaluates {beside} beside an NPU test, on every device"
    names = bound_names(stmt)
    if names and not inert_binding(stmt, lazy) and not names & used_names(projected, outside=stmt):
        return "only NPU code uses it, but it runs at import (or def) time on every device"
    return ""


def off_npu_changes(
    path: str, before: str | None, after: str | None, renamed_from: str = ""
) -> list[OffNpuChange]:
    """Units of path whose off-NPU projection differs between before and after (None: no such file;
    before is renamed_from's text when the patch renamed that module to path: its importers break on
    every device, one change, and its units are compared with the source's). A side that does not
    parse proves nothing here: ruff reports it (E999) and lint fails there."""
    try:
        old_tree, new_tree = ast.parse(before or ""), ast.parse(after or "")
    except SyntaxError:
        return []
    if after is None and before is not None:  # one finding, not one per unit it had
        return [
            OffNpuChange(
                path, MODULE, "removed: the module", 1, "code importing it fails on every device"
            )
        ]
    old, new = projection(before or ""), projection(after or "")
    prune(old, old_tree)
    prune(new, new_tree)
    old_units, new_units = units(old), units(new)
    lazy = postponed_annotations(new_tree)
    changes = (
        [
            OffNpuChange(
                path,
                MODULE,
                f"renamed from {renamed_from}",
                1,
                "code importing the old module fails on every device",
            )
        ]
        if renamed_from
        else []
    )
    # as the patch wrote them
    written = {n.lineno: n for n in ast.walk(new_tree) if isinstance(n, ast.stmt)}
    for name in dict.fromkeys([*new_units, *old_units]):
        a, b = new_units.get(name, []), old_units.get(name, [])
        if [shape(s) for s in a] != [shape(s) for s in b]:
            statement, line, node = first_difference(a, b)
            shown = one_line(written[line]) if node is not None and line in written else statement
            changes.append(OffNpuChange(path, name, shown, line, why(node, new, lazy)))
    return changes
