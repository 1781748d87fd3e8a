"""Translation of the kernel's expressions: names and their scopes, compile-time Python
values, loads, conversions, operators, comparisons, calls and math functions. The statement
translator (``statements.py``) extends this class."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from sarek import ir
from sarek.dsl.typing_rules import arith_type, cast, common_type, const, fold, wrap
from sarek.dsl.vocabulary import (
    MATH_FUNCTIONS,
    SCALAR_BUILTINS,
    Dim3,
    ScalarType,
    barrier,
    hashable,
    local,
    shared,
    view,
)
from sarek.errors import DslError
from sarek.ir import BinOp, Builtin, ElemType, MathFn, UnOp
from sarek.layout import Axis, TileLayout


@dataclass(frozen=True)
class Val:
    """A translated expression; ``weak`` marks literals whose type adapts to the other operand."""

    expr: ir.Expr
    weak: bool = False

    @property
    def type(self) -> ElemType:
        return self.expr.type


@dataclass
class ScalarSymbol:
    type: ElemType
    writable: bool


@dataclass
class ArraySymbol:
    """An array, or a tensor: ``layout`` maps coordinates onto ``storage`` from ``offset``."""

    elem: ElemType
    storage: str = ""
    layout: TileLayout | None = None
    offset: int = 0
    storage_elem: ElemType | None = None


BINOPS: dict[type[ast.operator], BinOp] = {
    ast.Add: BinOp.ADD, ast.Sub: BinOp.SUB, ast.Mult: BinOp.MUL, ast.Div: BinOp.DIV,
    ast.FloorDiv: BinOp.DIV, ast.Mod: BinOp.REM, ast.BitAnd: BinOp.AND, ast.BitOr: BinOp.OR,
    ast.BitXor: BinOp.XOR, ast.LShift: BinOp.SHL, ast.RShift: BinOp.SHR,
}
CMPOPS: dict[type[ast.cmpop], BinOp] = {
    ast.Lt: BinOp.LT, ast.LtE: BinOp.LE, ast.Gt: BinOp.GT, ast.GtE: BinOp.GE,
    ast.Eq: BinOp.EQ, ast.NotEq: BinOp.NE,
}


class ExprTranslator:
    """Translates expressions of one kernel function; ``fail`` raises ``DslError`` at the
    line of the construct being translated."""

    def __init__(self, fn: Callable[..., Any], file: str, first_line: int) -> None:
        self.fn = fn
        self.file = file
        self.line_offset = first_line - 1
        self.env: dict[str, Any] = dict(fn.__globals__)
        if fn.__closure__:
            names = fn.__code__.co_freevars
            cells = zip(names, fn.__closure__, strict=True)
            self.env.update({n: c.cell_contents for n, c in cells})
        self.scopes: list[dict[str, ScalarSymbol | ArraySymbol]] = []
        self.dead: dict[str, int] = {}  # names defined in a closed block -> their line
        self.node: ast.AST | None = None
        # Arrays and tensors by name, for checking tile patterns where they stand.
        self.tensors: dict[str, ir.ArrayDecl | ir.TensorView | ir.ArrayParam] = {}

    # ------------------------------------------------------------------ errors and scopes

    def fail(self, reason: str, node: ast.AST | None = None) -> NoReturn:
        node = node or self.node
        line = getattr(node, "lineno", 0) + self.line_offset if node is not None else 0
        raise DslError(reason, self.file, line)

    def line(self, node: ast.AST) -> int:
        return int(getattr(node, "lineno", 0)) + self.line_offset

    def lookup(self, name: str) -> ScalarSymbol | ArraySymbol | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def define(self, name: str, sym: ScalarSymbol | ArraySymbol, node: ast.AST) -> None:
        if self.lookup(name) is not None:
            self.fail(f"{name!r} is already defined", node)
        self.scopes[-1][name] = sym
        self.dead.pop(name, None)

    def python_value(self, node: ast.expr) -> Any:
        """Evaluates a name or attribute chain (``sarek.thread_idx``, ``Global[f32]``) in the
        function's globals; anything else is not a compile-time value."""
        match node:
            case ast.Name(id=name):
                if name in self.env:
                    return self.env[name]
                if hasattr(builtins, name):
                    return getattr(builtins, name)
                self.fail(f"undefined name {name!r}", node)
            case ast.Attribute(value=value, attr=attr):
                base = self.python_value(value)
                if not hasattr(base, attr):
                    self.fail(f"{ast.unparse(value)} has no attribute {attr!r}", node)
                return getattr(base, attr)
            case ast.Subscript(value=value, slice=index):
                base, key = self.python_value(value), self.python_value(index)
                try:
                    return base[key]
                except DslError as e:  # Global[int]: the reason, at the annotation's line
                    self.fail(e.construct, node)
                except Exception as e:  # indexing any compile-time value the kernel names
                    self.fail(f"{ast.unparse(node)} cannot be evaluated ({type(e).__name__}: "
                              f"{str(e)[:80]})", node)
        self.fail(f"{ast.unparse(node)} is not a compile-time name", node)

    # ------------------------------------------------------------------ expressions

    def is_marker(self, node: ast.expr, marker: object) -> bool:
        if isinstance(node, ast.Name) and self.lookup(node.id) is not None:
            return False
        try:
            return self.python_value(node) is marker
        except DslError:
            return False

    def is_view(self, call: ast.Call) -> bool:
        if self.is_marker(call.func, view):
            return True
        f = call.func
        return (isinstance(f, ast.Attribute) and f.attr == "rearrange"
                and isinstance(f.value, ast.Name)
                and isinstance(self.lookup(f.value.id), ArraySymbol))

    def array(self, name: str, node: ast.AST) -> ArraySymbol:
        sym = self.lookup(name)
        if not isinstance(sym, ArraySymbol):
            self.fail(f"{name!r} is not an array" if sym else self.undefined(name), node)
        return sym

    def undefined(self, name: str) -> str:
        if name in self.dead:
            return (f"{name!r} is not defined here: it was assigned only inside a block that "
                    "has ended; assign it before the block")
        return f"undefined name {name!r}"

    def element(self, name: str, index: ast.expr, node: ast.AST) -> tuple[str, ir.Expr, ElemType]:
        """The storage array, flat index and element type of ``name[index]``: a plain array
        takes one index, a tensor one coordinate per mode mapped through its layout."""
        arr = self.array(name, node)
        if arr.layout is None:
            return name, self.index(index), arr.elem
        coords = index.elts if isinstance(index, ast.Tuple) else [index]
        layout = arr.layout
        if len(coords) != layout.rank:
            self.fail(f"tensor {name!r} {layout!r} takes {layout.rank} coordinates, got "
                      f"{len(coords)}", node)
        if layout.axes != {Axis.MEM} or arr.storage_elem != arr.elem:
            self.fail(f"tensor {name!r} cannot be indexed element by element (its layout "
                      "steps along lanes, or it views its storage as another type); index "
                      f"the array {arr.storage!r}", node)
        terms: list[ir.Expr] = [const(arr.offset, ElemType.I32)] if arr.offset else []
        for c, stride in zip(coords, layout.strides(Axis.MEM), strict=True):
            if stride == 1:
                terms.append(self.index(c))
            elif stride:
                terms.append(ir.Binary(op=BinOp.MUL, a=self.index(c),
                                       b=const(stride, ElemType.I32), type=ElemType.I32))
        flat = terms[0] if terms else const(0, ElemType.I32)
        for term in terms[1:]:
            flat = ir.Binary(op=BinOp.ADD, a=flat, b=term, type=ElemType.I32)
        return arr.storage, flat, arr.elem

    def index(self, node: ast.expr) -> ir.Expr:
        v = self.expr(node)
        if not v.type.is_int or v.type is ElemType.BOOL:
            self.fail(f"an array index must be an integer, got {v.type}", node)
        return cast(v.expr, ElemType.I32) if v.weak else v.expr

    def convert(self, v: Val, t: ElemType, what: str = "") -> ir.Expr:
        """``v`` as a value of type ``t`` (C's conversion on assignment)."""
        if v.weak and isinstance(v.expr, ir.Const):
            value = v.expr.value
            if t.is_int and isinstance(value, float):
                self.fail(f"{what or 'the value'} {value!r} is not an integer ({t})")
            if t.is_int and not isinstance(value, bool):
                return const(wrap(int(value), t), t)
            return cast(const(value, arith_type(t) if t.is_storage_only else t), t)
        return cast(v.expr, t)

    def condition(self, node: ast.expr) -> ir.Expr:
        return self.truth(self.expr(node))

    def truth(self, v: Val) -> ir.Expr:
        if v.type is ElemType.BOOL:
            return v.expr
        t = arith_type(v.type)
        return ir.Binary(op=BinOp.NE, a=cast(v.expr, t), b=const(0, t), type=ElemType.BOOL)

    def expr(self, node: ast.expr) -> Val:
        match node:
            case ast.Constant(value=bool() as b):
                return Val(const(b, ElemType.BOOL), weak=True)
            case ast.Constant(value=int() as i):
                return Val(const(i, ElemType.I64 if not -2**31 <= i < 2**31 else ElemType.I32),
                            weak=True)
            case ast.Constant(value=float() as f):
                return Val(const(f, ElemType.F32), weak=True)
            case ast.Name(id=name):
                return self.name(name, node)
            case ast.Attribute(value=ast.Name(id=name), attr=attr) if self.lookup(
                    name) is not None:
                self.fail(f"{name}.{attr}: the kernel's values have no attributes"
                          f"{instead(node)}", node)
            case ast.Attribute(value=base, attr=attr):
                obj = self.python_value(base)
                if isinstance(obj, Dim3):
                    if attr not in ("x", "y", "z"):
                        self.fail(f"{obj.name} has components x, y and z, not {attr!r}", node)
                    return Val(ir.BuiltinValue(which=Builtin(f"{obj.name}.{attr}")))
                return self.python_constant(getattr(obj, attr, None), node)
            case ast.Subscript(value=ast.Name(id=name), slice=index):
                storage, idx, elem = self.element(name, index, node)
                load = ir.Load(array=storage, index=idx, type=elem)
                return Val(cast(load, ElemType.F32) if elem.is_storage_only else load)
            case ast.UnaryOp(op=op, operand=operand):
                return self.unary(op, self.expr(operand), node)
            case ast.BinOp(left=left, op=op, right=right):
                return self.binary(op, self.expr(left), self.expr(right), node)
            case ast.BoolOp(op=op, values=values):
                bop = BinOp.LAND if isinstance(op, ast.And) else BinOp.LOR
                out = self.condition(values[0])
                for v in values[1:]:
                    out = ir.Binary(op=bop, a=out, b=self.condition(v), type=ElemType.BOOL)
                return Val(out)
            case ast.Compare(left=left, ops=ops, comparators=rights):
                return self.compare(left, ops, rights)
            case ast.IfExp(test=test, body=a, orelse=b):
                cond = self.condition(test)
                va, vb = self.expr(a), self.expr(b)
                t = self.result_type(va, vb)
                return Val(ir.Select(cond=cond, a=self.convert(va, t), b=self.convert(vb, t),
                                      type=t), weak=va.weak and vb.weak)
            case ast.Call(func=func, args=args, keywords=[]):
                return self.call(func, args, node)
        self.fail(f"the expression {ast.unparse(node)!r} is not supported in a kernel"
                  + instead(node), node)

    def name(self, name: str, node: ast.expr) -> Val:
        sym = self.lookup(name)
        if isinstance(sym, ScalarSymbol):
            return Val(ir.Var(name=name, type=sym.type))
        if isinstance(sym, ArraySymbol):
            self.fail(f"array {name!r} used as a value; index it", node)
        if name in self.dead:
            self.fail(self.undefined(name), node)
        try:
            obj = self.python_value(node)
        except DslError:
            self.fail(self.undefined(name), node)
        return self.python_constant(obj, node)

    def python_constant(self, obj: object, node: ast.expr) -> Val:
        if hashable(obj) and obj in SCALAR_BUILTINS:
            return Val(ir.BuiltinValue(which=SCALAR_BUILTINS[obj]))
        if isinstance(obj, bool | int | float | np.integer | np.floating):
            return self.expr(ast.copy_location(ast.Constant(value=obj.item() if isinstance(
                obj, np.generic) else obj), node))
        self.fail(f"{ast.unparse(node)} is not a kernel value (a variable, a parameter, a "
                  "launch builtin or a Python number)", node)

    def result_type(self, a: Val, b: Val) -> ElemType:
        if a.weak and not b.weak:
            return arith_type(b.type) if not (a.type.is_float and b.type.is_int) else \
                common_type(a.type, b.type)
        if b.weak and not a.weak:
            return self.result_type(b, a)
        return common_type(a.type, b.type)

    def unary(self, op: ast.unaryop, v: Val, node: ast.expr) -> Val:
        match op:
            case ast.Not():
                return Val(ir.Unary(op=UnOp.NOT, x=self.truth(v), type=ElemType.BOOL))
            case ast.UAdd():
                return v
            case ast.USub() if v.weak and isinstance(v.expr, ir.Const):
                return self.expr(ast.copy_location(ast.Constant(value=-v.expr.value), node))
            case ast.USub():
                t = arith_type(v.type)
                return Val(ir.Unary(op=UnOp.NEG, x=cast(v.expr, t), type=t))
            case ast.Invert():
                t = arith_type(v.type)
                if not t.is_int:
                    self.fail(f"'~' needs an integer operand, got {v.type}", node)
                return Val(ir.Unary(op=UnOp.BITNOT, x=cast(v.expr, t), type=t))
        self.fail(f"the operator {type(op).__name__} is not supported", node)

    def binary(self, op: ast.operator, a: Val, b: Val, node: ast.expr) -> Val:
        if type(op) not in BINOPS:
            self.fail(f"the operator {type(op).__name__} is not supported in a kernel", node)
        bop = BINOPS[type(op)]
        if bop in (BinOp.SHL, BinOp.SHR):
            t = arith_type(a.type)
            if a.weak and not b.weak:
                t = ElemType.I32
            if not (t.is_int and arith_type(b.type).is_int):
                self.fail(f"shifts need integer operands, got {a.type} and {b.type}", node)
            return Val(ir.Binary(op=bop, a=self.convert(a, t), b=self.convert(
                b, arith_type(b.type)), type=t), weak=a.weak and b.weak)
        t = self.result_type(a, b)
        if isinstance(op, ast.Div) and t.is_int:
            self.fail("'/' on integers: use '//' (it truncates toward zero, as in C)", node)
        if isinstance(op, ast.FloorDiv | ast.Mod) and t.is_float:
            self.fail(f"'{'//' if isinstance(op, ast.FloorDiv) else '%'}' is defined on "
                      "integers only; write floor(a / b) for floats", node)
        if bop in ir.BITWISE and not t.is_int:
            self.fail(f"bitwise '{bop}' needs integer operands, got {a.type} and {b.type}", node)
        ea, eb = self.convert(a, t), self.convert(b, t)
        if a.weak and b.weak and isinstance(ea, ir.Const) and isinstance(eb, ir.Const):
            folded = fold(bop, ea.value, eb.value, t)
            if folded is not None:
                return Val(const(folded, t), weak=True)
        return Val(ir.Binary(op=bop, a=ea, b=eb, type=t))

    def compare(self, left: ast.expr, ops: list[ast.cmpop], rights: list[ast.expr]) -> Val:
        terms: list[ir.Expr] = []
        a = self.expr(left)
        for op, right in zip(ops, rights, strict=True):
            if type(op) not in CMPOPS:
                self.fail(f"the comparison {type(op).__name__} is not supported", right)
            b = self.expr(right)
            t = self.result_type(a, b)
            terms.append(ir.Binary(op=CMPOPS[type(op)], a=self.convert(a, t),
                                   b=self.convert(b, t), type=ElemType.BOOL))
            a = b
        out = terms[0]
        for term in terms[1:]:
            out = ir.Binary(op=BinOp.LAND, a=out, b=term, type=ElemType.BOOL)
        return Val(out)

    def call(self, func: ast.expr, args: list[ast.expr], node: ast.expr) -> Val:
        if isinstance(func, ast.Name) and self.lookup(func.id) is not None:
            self.fail(f"{func.id!r} is not a function", node)
        target = self.python_value(func)
        if isinstance(target, ScalarType):
            if len(args) != 1:
                self.fail(f"{target!r}(x) takes one argument", node)
            return Val(self.convert(self.expr(args[0]), target.elem))
        if hashable(target) and target in MATH_FUNCTIONS:
            return self.math(MATH_FUNCTIONS[target], [self.expr(a) for a in args], node)
        if target is barrier:
            self.fail("barrier() is a statement, not a value", node)
        if target in (shared, local):
            self.fail(f"{target!r}(T, size) can only be assigned to a new name at the top "
                      "level of a statement", node)
        self.fail(f"the function {ast.unparse(func)} cannot be called in a kernel"
                  f"{instead(node)}", node)

    def math(self, fn: MathFn, args: list[Val], node: ast.expr) -> Val:
        if fn in (MathFn.MIN, MathFn.MAX) and len(args) > 2:
            return self.math(fn, [self.math(fn, args[:2], node), *args[2:]], node)
        if len(args) != ir.MATH_ARITY[fn]:
            self.fail(f"{fn.value}() takes {ir.MATH_ARITY[fn]} arguments, got {len(args)}", node)
        joined = args[0]
        for other in args[1:]:
            joined = Val(const(0, self.result_type(joined, other)), joined.weak and other.weak)
        rtype = arith_type(joined.type)
        if fn not in (MathFn.ABS, MathFn.MIN, MathFn.MAX) and rtype.is_int:
            rtype = ElemType.F32
        return Val(ir.Call(fn=fn, args=tuple(self.convert(a, rtype) for a in args), type=rtype))


def instead(node: ast.expr) -> str:
    """What to write in place of an expression a kernel cannot hold (after "; "), or ""."""
    match node:
        case ast.Attribute(attr="shape" | "size" | "ndim" | "dtype") | ast.Subscript(
                value=ast.Attribute(attr="shape")) | ast.Call(func=ast.Name(id="len")):
            return ("; arrays carry no sizes in a kernel: pass them as i32 parameters "
                    "(m: i32, n: i32) and index flat, a[row * n + col]")
        case ast.Tuple():
            return ("; a global array is indexed by one flat index, a[i * n + j] (shared and "
                    "local tiles declared with a layout take a[i, j])")
        case ast.List() | ast.ListComp() | ast.Dict() | ast.Set() | ast.DictComp() | \
                ast.SetComp() | ast.GeneratorExp():
            return ("; use a local array, x = sarek.local(f32, n), and assign its elements, "
                    "x[0] = ...")
    return ""
