"""The rules of the kernel checker (``sarek.ir_check``) that read expressions: the scope chain
of names, types and constants, and the problems found so far; the other rules extend
``ExpressionRules``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sarek import ir
from sarek.ir import BinOp, ElemType, MathFn, MemSpace, UnOp
from sarek.ir_walk import subexpressions

PACKED_COUNTS = (2, 4, 8)  # elements one StorePacked may write

MAX_EXPR_DEPTH = 64
"""The deepest expression a kernel may hold (a constant or a name is 1 deep, ``a + b`` one
more than its deeper operand). Analyses, the simulator and the printers recurse over
expressions; past this, write the expression as several assignments."""

MAX_NESTING = 24
"""How deeply statements may nest (a loop or a conditional holds its body one level deeper).
With ``MAX_EXPR_DEPTH`` it keeps every well-formed kernel's JSON within the nesting that
pydantic's JSON parser reads back."""

MAX_ARRAY_SIZE = (1 << 31) - 1
"""The most elements a shared or local array may have (element indices are i32)."""


@dataclass(frozen=True)
class Problem:
    """One finding: where (a statement path) and why."""

    path: str
    reason: str
    line: int | None = None  # the statement's source line, when the DSL recorded one

    def __str__(self) -> str:
        at = f" (line {self.line})" if self.line is not None else ""
        return f"{self.path}{at}: {self.reason}"


@dataclass(frozen=True)
class Scalar:
    type: ElemType
    writable: bool
    what: str  # "parameter", "variable", "loop variable"


@dataclass(frozen=True)
class Array:
    elem: ElemType
    space: MemSpace
    readonly: bool
    decl: ir.ArrayDecl | ir.ArrayParam


@dataclass(frozen=True)
class View:
    view: ir.TensorView
    storage: ir.ArrayDecl | ir.ArrayParam


@dataclass(frozen=True)
class Frag:
    decl: ir.FragDecl


Symbol = Scalar | Array | View | Frag


@dataclass
class Scope:
    symbols: dict[str, Symbol] = field(default_factory=dict)
    parent: Scope | None = None

    def lookup(self, name: str) -> Symbol | None:
        scope: Scope | None = self
        while scope is not None:
            if name in scope.symbols:
                return scope.symbols[name]
            scope = scope.parent
        return None


MAX_BLOCK = 1024  # the most invocations of a block (CUDA's limit; sim.launch.MAX_BLOCK)

_INT_RANGES = {
    t: ((-(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1) if t.is_signed else (0, (1 << t.bits) - 1))
    for t in ElemType
    if t.is_int
}


def number_text(v: int) -> str:
    """An integer for a message: its digits, or its magnitude when they are too many to
    read (Python refuses to format integers of more than 4300 digits at all)."""
    if abs(v) < 10**30:
        return str(v)
    return f"about {'-' if v < 0 else ''}1e{math.floor(math.log10(abs(v)))}"


_FLOAT_INT = int(1.7976931348623157e308)  # the largest finite f64, as an integer


class ExpressionRules:
    """The checker's state (problems, block size, names that vary between invocations, the
    statement's line) and its rules for expressions and names."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.block_size: int | None = None  # invocations per block, when the kernel says
        # Names whose value may differ between invocations of one block (for barrier checks).
        self.varying: set[str] = set()
        self.line: int | None = None  # of the statement being checked

    def report(self, path: str, reason: str) -> None:
        self.problems.append(Problem(path, reason, self.line))

    def expr(self, e: ir.Expr, scope: Scope, path: str) -> None:
        """Checks ``e`` (and its subexpressions); problems are reported at ``path``."""
        match e:
            case ir.Const(value=v, type=t):
                self._const(v, t, path)
            case ir.Var(name=name, type=t):
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"undefined name {name!r}")
                elif not isinstance(sym, Scalar):
                    self.report(path, f"{name!r} is an array or fragment, not a scalar value")
                elif sym.type != t:
                    self.report(path, f"{name!r} has type {sym.type}, used as {t}")
            case ir.BuiltinValue():
                pass
            case ir.Load(array=name, index=index, type=t):
                self.expr(index, scope, path)
                self._index(index, path)
                sym = scope.lookup(name)
                if sym is None:
                    self.report(path, f"undefined array {name!r}")
                elif not isinstance(sym, Array):
                    self.report(path, f"{name!r} is not an array and cannot be indexed")
                elif sym.elem != t:
                    self.report(path, f"a load from {name!r} ({sym.elem}) is typed {t}")
            case ir.Unary(op=op, x=x, type=t):
                self.expr(x, scope, path)
                self._same(x.type, t, f"{op} result", path)
                if op is UnOp.NOT and t is not ElemType.BOOL:
                    self.report(path, f"'not' needs a bool operand, got {t}")
                elif op is UnOp.BITNOT and not t.is_int:
                    self.report(path, f"'bitnot' needs an integer operand, got {t}")
                elif op is UnOp.NEG and not t.is_arith:
                    self.report(path, f"'neg' needs an arithmetic operand, got {t}")
            case ir.Binary():
                self._binary(e, scope, path)
            case ir.Cast(x=x):
                self.expr(x, scope, path)
            case ir.Bitcast(x=x, type=t):
                self.expr(x, scope, path)
                if ElemType.BOOL in (x.type, t) or x.type.bits != t.bits:
                    self.report(path, f"a bitcast keeps the width: {x.type} "
                                f"({x.type.bits} bits) cannot be read as {t} ({t.bits} bits)")
            case ir.Select(cond=c, a=a, b=b, type=t):
                for sub in (c, a, b):
                    self.expr(sub, scope, path)
                self._same(c.type, ElemType.BOOL, "select condition", path)
                self._same(a.type, t, "select's first value", path)
                self._same(b.type, t, "select's second value", path)
            case ir.Call(fn=fn, args=args, type=t):
                for a in args:
                    self.expr(a, scope, path)
                self._call(fn, args, t, path)

    def _const(self, v: bool | int | float, t: ElemType, path: str) -> None:
        if t is ElemType.BOOL:
            if not isinstance(v, bool):
                self.report(path, f"a bool constant holds {v!r}")
        elif t.is_int:
            if isinstance(v, bool) or not isinstance(v, int):
                self.report(path, f"an {t} constant holds {v!r}, not an integer")
            else:
                lo, hi = _INT_RANGES[t]
                if not lo <= v <= hi:
                    self.report(path, f"constant {number_text(v)} does not fit {t} [{lo}, {hi}]")
        elif isinstance(v, bool):
            self.report(path, f"a {t} constant holds {v!r}")
        elif isinstance(v, int) and not -_FLOAT_INT <= v <= _FLOAT_INT:
            # an integer literal past f64's range has no float value to round to
            self.report(path, f"the {t} constant {number_text(v)} is beyond the range of any "
                        "float type (write inf for an infinity)")

    def _index(self, index: ir.Expr, path: str) -> None:
        if not index.type.is_int:
            self.report(path, f"an array index must be an integer, got {index.type}")

    def _same(self, got: ElemType, want: ElemType, what: str, path: str) -> None:
        if got != want:
            self.report(path, f"{what} has type {got}, expected {want}")

    def _binary(self, e: ir.Binary, scope: Scope, path: str) -> None:
        self.expr(e.a, scope, path)
        self.expr(e.b, scope, path)
        a, b, t, op = e.a.type, e.b.type, e.type, e.op
        if op in ir.LOGICAL:
            for side in (a, b, t):
                self._same(side, ElemType.BOOL, f"'{op}' operand", path)
            return
        if op in (BinOp.SHL, BinOp.SHR):
            if not (a.is_int and b.is_int):
                self.report(path, f"'{op}' needs integer operands, got {a} and {b}")
            self._same(t, a, f"'{op}' result", path)
            return
        if a != b:
            self.report(path, f"'{op}' operands have different types {a} and {b}")
            return
        if op in ir.COMPARISONS:
            if not (a.is_arith or (a is ElemType.BOOL and op in (BinOp.EQ, BinOp.NE))):
                self.report(path, f"'{op}' cannot compare {a} values")
            self._same(t, ElemType.BOOL, f"'{op}' result", path)
            return
        self._same(t, a, f"'{op}' result", path)
        if op is BinOp.REM and not a.is_int:
            self.report(path, f"'rem' is defined on integers only, got {a}")
        elif op in ir.BITWISE:
            if not (a.is_int or a is ElemType.BOOL):
                self.report(path, f"'{op}' needs integer operands, got {a}")
        elif not a.is_arith:
            hint = (" (f16 and bf16 are storage types: cast to f32 first)"
                    if a.is_storage_only else "")
            self.report(path, f"'{op}' is not defined on {a}{hint}")

    def _call(self, fn: MathFn, args: tuple[ir.Expr, ...], t: ElemType, path: str) -> None:
        if len(args) != ir.MATH_ARITY[fn]:
            self.report(path, f"{fn} takes {ir.MATH_ARITY[fn]} arguments, got {len(args)}")
            return
        for i, a in enumerate(args):
            self._same(a.type, t, f"argument {i} of {fn}", path)
        int_ok = fn in (MathFn.ABS, MathFn.MIN, MathFn.MAX)
        if t not in (ElemType.F32, ElemType.F64) and not (int_ok and t.is_int):
            self.report(path, f"{fn} is not defined on {t}")

    def _define(self, scope: Scope, name: str, sym: Symbol, path: str) -> None:
        if not name.isidentifier():
            self.report(path, f"{name[:40]!r} is not a name (names are identifiers: a letter "
                        "or '_', then letters, digits or '_')")
        if scope.lookup(name) is not None:
            self.report(path, f"{name!r} is already defined")
        scope.symbols[name] = sym

    def _varies(self, e: ir.Expr) -> bool:
        """Whether ``e`` may differ between invocations of one block."""
        return any(
            (isinstance(x, ir.BuiltinValue) and x.which.varies_in_block)
            or (isinstance(x, ir.Var) and x.name in self.varying)
            for x in subexpressions(e)
        )

    def _assigned(self, name: str, value: ir.Expr, divergent: bool) -> None:
        if divergent or self._varies(value):
            self.varying.add(name)
