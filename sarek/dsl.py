"""Write kernels as decorated Python functions.

``@sarek.kernel`` reads the function's source with ``ast`` (it never runs it) and builds a
``sarek.ir.Kernel``. The language is a small, statically typed subset of Python; its rules are
in ``specs/ir.md`` ("The DSL"). In brief:

* parameters are annotated ``Global[T]`` / ``ReadOnly[T]`` (arrays) or ``T`` (scalars);
* integer literals are i32 and float literals f32 unless the other operand fixes a type;
* arithmetic follows C: integers narrower than 32 bits are promoted to i32, a float operand
  makes the operation float, ``//`` and ``%`` truncate toward zero like C (not like Python);
* f16 and bf16 values are widened to f32 when loaded and rounded when stored or assigned;
* a variable's type is fixed by its first assignment, later assignments convert to it.
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import math
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from sarek import dtypes, ir, tile
from sarek.errors import DslError
from sarek.ir import BinOp, Builtin, ElemType, MathFn, MemSpace, UnOp
from sarek.ir_check import MAX_EXPR_DEPTH
from sarek.layout import Axis, LayoutError, TileLayout

# --------------------------------------------------------------------------- the vocabulary

def numpy_dtype(elem: ElemType) -> np.dtype[Any]:
    """The NumPy dtype that holds ``elem`` values (ml_dtypes' bfloat16 for bf16)."""
    if not isinstance(elem, str) or elem not in dtypes.NUMPY_DTYPES:  # ElemType is a str enum
        raise DslError(f"{_short(elem)} is not an element type (the types are "
                       f"{', '.join(t.value for t in ElemType)})", *_user_line())
    return dtypes.numpy_dtype(ElemType(elem))


class ScalarType:
    """An element type as the DSL names it: an annotation (``n: i32``), a cast inside a kernel
    (``f32(0.0)``), and outside one a converter to the matching NumPy scalar."""

    def __init__(self, elem: ElemType) -> None:
        self.elem = elem

    def __call__(self, value: Any) -> Any:
        return numpy_dtype(self.elem).type(value)

    def __repr__(self) -> str:
        return f"sarek.{self.elem.value}"


i8, u8, i16, u16 = map(ScalarType, (ElemType.I8, ElemType.U8, ElemType.I16, ElemType.U16))
i32, u32, i64, u64 = map(ScalarType, (ElemType.I32, ElemType.U32, ElemType.I64, ElemType.U64))
f16, bf16, f32, f64 = map(ScalarType, (ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.F64))
boolean = ScalarType(ElemType.BOOL)


@dataclass(frozen=True)
class ArrayType:
    """The annotation of an array parameter: its element type and whether it is read-only."""

    elem: ElemType
    readonly: bool


class Global:
    """``Global[T]``: a writable array parameter in global memory."""

    def __class_getitem__(cls, t: ScalarType) -> ArrayType:
        return ArrayType(_scalar_type(t).elem, readonly=False)


class ReadOnly:
    """``ReadOnly[T]``: a global array parameter the kernel only reads."""

    def __class_getitem__(cls, t: ScalarType) -> ArrayType:
        return ArrayType(_scalar_type(t).elem, readonly=True)


def _scalar_type(t: object) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise DslError(f"an array element type must be a sarek type such as sarek.f32, not "
                       f"{_short(t)}", *_user_line())
    return t


def _user_line() -> tuple[str, int]:
    """The file and line of the innermost caller outside this module (the user's line that
    misused a DSL name)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _hashable(obj: object) -> bool:
    """Whether ``obj`` can be looked up in a dict (a kernel may name any module-level value)."""
    try:
        hash(obj)
    except TypeError:
        return False
    return True


class OutsideKernel(DslError, RuntimeError):
    """A name that only means something inside a kernel (``barrier``, ``shared`` ...) called
    from plain Python; a ``DslError`` at the caller's line (and a ``RuntimeError``, as it was
    before it had a reason)."""


class _Marker:
    """A name that only has a meaning inside a kernel."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object) -> NoReturn:
        raise OutsideKernel(f"sarek.{self.name} can only be used inside a @sarek.kernel "
                            "function", *_user_line())

    def __repr__(self) -> str:
        return f"sarek.{self.name}"


class _Dim3(_Marker):
    """``thread_idx`` and friends: ``.x``, ``.y`` and ``.z`` inside a kernel."""


thread_idx, block_idx, block_dim, grid_dim = (
    _Dim3(n) for n in ("thread_idx", "block_idx", "block_dim", "grid_dim"))
subgroup_id, subgroup_lane, subgroup_size = (
    _Marker(n) for n in ("subgroup_id", "subgroup_lane", "subgroup_size"))
barrier, shared, local, view = (_Marker(n) for n in ("barrier", "shared", "local", "view"))
sqrt, exp, log, sin, cos, tanh, floor, ceil, fma = (
    _Marker(fn.value) for fn in (MathFn.SQRT, MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS,
                                 MathFn.TANH, MathFn.FLOOR, MathFn.CEIL, MathFn.FMA))

_SCALAR_BUILTINS = {subgroup_id: Builtin.SUBGROUP_ID, subgroup_lane: Builtin.SUBGROUP_LANE,
                    subgroup_size: Builtin.SUBGROUP_SIZE}
_MATH: dict[object, MathFn] = {
    sqrt: MathFn.SQRT, exp: MathFn.EXP, log: MathFn.LOG, sin: MathFn.SIN, cos: MathFn.COS,
    tanh: MathFn.TANH, floor: MathFn.FLOOR, ceil: MathFn.CEIL, fma: MathFn.FMA,
    math.sqrt: MathFn.SQRT, math.exp: MathFn.EXP, math.log: MathFn.LOG, math.sin: MathFn.SIN,
    math.cos: MathFn.COS, math.tanh: MathFn.TANH, math.floor: MathFn.FLOOR,
    math.ceil: MathFn.CEIL, builtins.abs: MathFn.ABS, builtins.min: MathFn.MIN,
    builtins.max: MathFn.MAX,
}


# --------------------------------------------------------------------------- kernels


class KernelFunction:
    """What ``@sarek.kernel`` returns: the parsed ``ir`` and where it came from."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.ir: ir.Kernel = _parse(fn)

    def __repr__(self) -> str:
        return f"<sarek kernel {self.name} ({len(self.ir.params)} parameters)>"


def kernel(fn: Callable[..., Any]) -> KernelFunction:
    """Decorator: parse ``fn`` as a kernel; raises ``DslError`` naming the file, line and
    construct when it uses Python the DSL does not support."""
    return KernelFunction(fn)


# --------------------------------------------------------------------------- translation


@dataclass(frozen=True)
class _Val:
    """A translated expression; ``weak`` marks literals whose type adapts to the other operand."""

    expr: ir.Expr
    weak: bool = False

    @property
    def type(self) -> ElemType:
        return self.expr.type


@dataclass
class _ScalarSym:
    type: ElemType
    writable: bool


@dataclass
class _ArraySym:
    """An array, or a tensor: ``layout`` maps coordinates onto ``storage`` from ``offset``."""

    elem: ElemType
    storage: str = ""
    layout: TileLayout | None = None
    offset: int = 0
    storage_elem: ElemType | None = None


_BINOPS: dict[type[ast.operator], BinOp] = {
    ast.Add: BinOp.ADD, ast.Sub: BinOp.SUB, ast.Mult: BinOp.MUL, ast.Div: BinOp.DIV,
    ast.FloorDiv: BinOp.DIV, ast.Mod: BinOp.REM, ast.BitAnd: BinOp.AND, ast.BitOr: BinOp.OR,
    ast.BitXor: BinOp.XOR, ast.LShift: BinOp.SHL, ast.RShift: BinOp.SHR,
}
_CMPOPS: dict[type[ast.cmpop], BinOp] = {
    ast.Lt: BinOp.LT, ast.LtE: BinOp.LE, ast.Gt: BinOp.GT, ast.GtE: BinOp.GE,
    ast.Eq: BinOp.EQ, ast.NotEq: BinOp.NE,
}
_INT_ORDER = (ElemType.I32, ElemType.U32, ElemType.I64, ElemType.U64)


def _const(value: bool | int | float, t: ElemType) -> ir.Const:
    if t is ElemType.BOOL:
        return ir.Const(value=bool(value), type=t)
    if t.is_int:
        return ir.Const(value=int(value), type=t)
    return ir.Const(value=float(value), type=t)


def _cast(e: ir.Expr, t: ElemType) -> ir.Expr:
    return e if e.type == t else ir.Cast(x=e, type=t)


def _wrap(v: int, t: ElemType) -> int:
    v &= (1 << t.bits) - 1
    return v - (1 << t.bits) if t.is_signed and v >> (t.bits - 1) else v


def _arith_type(t: ElemType) -> ElemType:
    """The type a value takes part in arithmetic as (C's integer promotion, f16/bf16 widening)."""
    if t is ElemType.BOOL or (t.is_int and t.bits < 32):
        return ElemType.I32
    return ElemType.F32 if t.is_storage_only else t


def _common(a: ElemType, b: ElemType) -> ElemType:
    a, b = _arith_type(a), _arith_type(b)
    if a.is_float or b.is_float:
        return ElemType.F64 if ElemType.F64 in (a, b) else ElemType.F32
    return max(a, b, key=_INT_ORDER.index)


class _Translator:
    def __init__(self, fn: Callable[..., Any], file: str, first_line: int) -> None:
        self.fn = fn
        self.file = file
        self.line_offset = first_line - 1
        self.env: dict[str, Any] = dict(fn.__globals__)
        if fn.__closure__:
            names = fn.__code__.co_freevars
            cells = zip(names, fn.__closure__, strict=True)
            self.env.update({n: c.cell_contents for n, c in cells})
        self.scopes: list[dict[str, _ScalarSym | _ArraySym]] = []
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

    def lookup(self, name: str) -> _ScalarSym | _ArraySym | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def block(self, body: Sequence[ast.stmt]) -> tuple[ir.Stmt, ...]:
        self.scopes.append({})
        out: list[ir.Stmt] = []
        for s in body:
            out.extend(self.stmt(s))
        for name in self.scopes.pop():
            self.dead.setdefault(name, 0)
        return tuple(out)

    def define(self, name: str, sym: _ScalarSym | _ArraySym, node: ast.AST) -> None:
        if self.lookup(name) is not None:
            self.fail(f"{name!r} is already defined", node)
        self.scopes[-1][name] = sym
        self.dead.pop(name, None)

    # ------------------------------------------------------------------ the function

    def kernel(self, tree: ast.FunctionDef) -> ir.Kernel:
        args = tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            self.fail("kernel parameters must be plain positional parameters without defaults",
                      tree)
        params: list[ir.Param] = []
        self.scopes.append({})
        for a in args.args:
            if a.annotation is None:
                self.fail(f"parameter {a.arg!r} needs a type annotation such as Global[f32] "
                          "or i32", a)
            t = self.python_value(a.annotation)
            if isinstance(t, ArrayType):
                param = ir.ArrayParam(name=a.arg, elem=t.elem, readonly=t.readonly)
                params.append(param)
                self.tensors[a.arg] = param
                self.define(a.arg, _ArraySym(t.elem, a.arg, None, 0, t.elem), a)
            elif isinstance(t, ScalarType):
                params.append(ir.ScalarParam(name=a.arg, elem=t.elem))
                self.define(a.arg, _ScalarSym(t.elem, writable=False), a)
            else:
                self.fail(f"the annotation of {a.arg!r} is not a sarek type (Global[T], "
                          "ReadOnly[T] or a scalar type such as i32)", a)
        body = tree.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        return ir.Kernel(name=tree.name, params=tuple(params), body=self.block(body))

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

    # ------------------------------------------------------------------ statements

    def stmt(self, s: ast.stmt) -> list[ir.Stmt]:
        self.node = s
        line = self.line(s)
        match s:
            case ast.Assign(targets=[target], value=value):
                return self.assign(target, value, line)
            case ast.Assign():
                self.fail("chained assignment (a = b = ...) is not supported")
            case ast.AnnAssign(target=ast.Name(id=name), annotation=ann, value=value) \
                    if value is not None:
                t = self.python_value(ann)
                if not isinstance(t, ScalarType):
                    self.fail(f"the annotation of {name!r} must be a scalar type such as f32")
                v = self.convert(self.expr(value), t.elem)
                self.define(name, _ScalarSym(t.elem, writable=True), s)
                return [ir.Let(name=name, type=t.elem, value=v, line=line)]
            case ast.AugAssign(target=target, op=op, value=value):
                combined = ast.BinOp(left=_as_load(target), op=op, right=value)
                ast.copy_location(combined, s)
                return self.assign(target, combined, line, augmented=True)
            case ast.For(target=ast.Name(id=var), iter=ast.Call() as it, body=body, orelse=[]):
                return [self.for_range(var, it, body, line)]
            case ast.For(orelse=[]):
                self.fail("only 'for NAME in range(...)' loops are supported")
            case ast.While(test=test, body=body, orelse=[]):
                cond = self.condition(test)
                return [ir.While(cond=cond, body=self.block(body), line=line)]
            case ast.If(test=test, body=body, orelse=orelse):
                cond = self.condition(test)
                return [ir.If(cond=cond, then=self.block(body), orelse=self.block(orelse),
                              line=line)]
            case ast.Expr(value=ast.Call(func=func, args=[], keywords=[])) \
                    if self.is_marker(func, barrier):
                return [ir.Barrier(line=line)]
            case ast.Expr(value=ast.Call(func=func) as call) if self.is_marker(func, tile.apply):
                return [self.tile_apply(call, line)]
            case ast.Return(value=None):
                return [ir.Return(line=line)]
            case ast.Return():
                self.fail("a kernel returns nothing; write results to an array")
            case ast.Pass():
                return []
            case ast.For() | ast.While():
                self.fail("'else' clauses on loops are not supported")
            case ast.Break() | ast.Continue():
                self.fail(f"'{type(s).__name__.lower()}' is not supported; use a while loop "
                          "with a condition")
            case ast.Expr():
                self.fail("an expression statement has no effect (only barrier() stands alone)")
        self.fail(f"the statement {type(s).__name__} is not supported in a kernel")

    def assign(self, target: ast.expr, value: ast.expr, line: int,
               augmented: bool = False) -> list[ir.Stmt]:
        match target:
            case ast.Name(id=name):
                sym = self.lookup(name)
                if sym is None and not augmented:
                    if isinstance(value, ast.Call) and any(
                            self.is_marker(value.func, m) for m in (shared, local)):
                        decl = self.array_decl(name, value, line)
                        self.tensors[name] = decl
                        return [decl]
                    if isinstance(value, ast.Call) and self.is_view(value):
                        tv = self.tensor_view(name, value, line)
                        self.tensors[name] = tv
                        return [tv]
                    v = self.expr(value)
                    t = _arith_type(v.type) if v.weak else v.type
                    self.define(name, _ScalarSym(t, writable=True), target)
                    return [ir.Let(name=name, type=t, value=_cast(v.expr, t), line=line)]
                if sym is None:
                    self.fail(f"undefined name {name!r}", target)
                if isinstance(sym, _ArraySym):
                    self.fail(f"{name!r} is an array; assign to its elements, {name}[i] = ...")
                if not sym.writable:
                    self.fail(f"{name!r} is read-only (a parameter or loop variable)")
                return [ir.Assign(name=name, value=self.convert(self.expr(value), sym.type),
                                  line=line)]
            case ast.Subscript(value=ast.Name(id=name), slice=index):
                storage, idx, elem = self.element(name, index, target)
                return [ir.Store(array=storage, index=idx,
                                 value=self.convert(self.expr(value), elem), line=line)]
        self.fail(f"cannot assign to {ast.unparse(target)}")

    def array_decl(self, name: str, call: ast.Call, line: int) -> ir.ArrayDecl:
        """``shared(T, size | layout, align=16)`` and ``local(...)``."""
        space = MemSpace.SHARED if self.is_marker(call.func, shared) else MemSpace.LOCAL
        if len(call.args) != 2 or any(k.arg != "align" for k in call.keywords):
            self.fail(f"{space.value}(T, size_or_layout, align=16) takes an element type and "
                      "a size or a layout", call)
        t = self.python_value(call.args[0])
        if not isinstance(t, ScalarType):
            self.fail(f"the element type of {name!r} must be a sarek type such as f32", call)
        align = self.compile_time_int(call.keywords[0].value) if call.keywords else 16
        layout = self.python_value(call.args[1]) if isinstance(
            call.args[1], ast.Name | ast.Attribute) else None
        if isinstance(layout, TileLayout):
            size = self.layout_fact(layout.cosize, call)
        else:
            layout, size = None, self.compile_time_int(call.args[1])
        if size <= 0:
            self.fail(f"the size of {name!r} must be positive, got {size}", call)
        self.define(name, _ArraySym(t.elem, name, layout, 0, t.elem), call)
        return ir.ArrayDecl(name=name, elem=t.elem, size=size, space=space, align=align,
                            layout=layout, line=line)

    def layout_fact(self, compute: Callable[[], Any], node: ast.AST) -> Any:
        try:
            return compute()
        except LayoutError as e:
            self.fail(e.reason, node)

    def tensor_view(self, name: str, call: ast.Call, line: int) -> ir.TensorView:
        """``view(array, T, layout, offset=0)`` and ``tensor.rearrange(pattern, **sizes)``."""
        if self.is_marker(call.func, view):
            if len(call.args) != 3 or any(k.arg != "offset" for k in call.keywords):
                self.fail("view(array, T, layout, offset=0) takes an array, an element type "
                          "and a layout", call)
            base = self.tensor_arg(call.args[0])
            t, layout = self.python_value(call.args[1]), self.python_value(call.args[2])
            if not isinstance(t, ScalarType) or not isinstance(layout, TileLayout):
                self.fail("view(array, T, layout): T must be a sarek type and layout a "
                          "TileLayout", call)
            extra = self.compile_time_int(call.keywords[0].value) if call.keywords else 0
            elem, offset = t.elem, base.offset + extra
        else:
            assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
            base = self.tensor_arg(call.func.value)
            if base.layout is None:
                self.fail(f"{call.func.value.id!r} has no layout to rearrange", call)
            pattern = call.args[0] if len(call.args) == 1 else None
            if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
                self.fail("rearrange takes a pattern string and mode sizes as keywords", call)
            sizes = {k.arg: self.compile_time_int(k.value) for k in call.keywords if k.arg}
            source, text = base.layout, pattern.value
            layout = self.layout_fact(lambda: source.rearrange(text, **sizes), call)
            elem, offset = base.elem, base.offset
        self.define(name, _ArraySym(elem, base.storage, layout, offset, base.storage_elem), call)
        return ir.TensorView(name=name, storage=base.storage, elem=elem, layout=layout,
                             offset=offset, line=line)

    def tile_operand(self, name: str, node: ast.AST) -> tile.Operand:
        tensor = self.tensors.get(name)
        if not isinstance(tensor, ir.ArrayDecl | ir.TensorView):
            raise tile.ContractError(f"{name!r} is not a tensor (declare it with a layout, or "
                                     "make a view)")
        storage = self.tensors[tensor.storage] if isinstance(tensor, ir.TensorView) else tensor
        assert not isinstance(storage, ir.TensorView)
        return tile.operand(tensor, storage)

    def tensor_arg(self, node: ast.expr) -> _ArraySym:
        if not isinstance(node, ast.Name):
            self.fail(f"{ast.unparse(node)} must name an array or a tensor", node)
        return self.array(node.id, node)

    def tile_apply(self, call: ast.Call, line: int) -> ir.TileApply:
        """``tile.apply(op, dst, src, scope="warp")``: checks the contract here, at the line."""
        if len(call.args) != 3 or any(k.arg != "scope" for k in call.keywords):
            self.fail("tile.apply(op, dst, src, scope='warp') takes an opcode and two tensors",
                      call)
        op = self.python_value(call.args[0]) if not isinstance(call.args[0], ast.Constant) \
            else call.args[0].value
        scope = call.keywords[0].value if call.keywords else None
        if scope is not None and not (isinstance(scope, ast.Constant) and scope.value == "warp"):
            self.fail("tile patterns have warp scope only (scope='warp')", call)
        if not isinstance(op, str):
            self.fail("the opcode of tile.apply must be a string such as "
                      "'ldmatrix.sync.aligned.m8n8.x2.shared.b16'", call)
        names = []
        for node in call.args[1:]:
            self.tensor_arg(node)
            names.append(node.id)  # type: ignore[attr-defined]
        stmt = ir.TileApply(op=op, dst=names[0], src=names[1], line=line)
        try:
            parsed = tile.parse_op(op)
            dst, src = (self.tile_operand(n, call) for n in names)
            tile.check(parsed, *tile.roles(parsed, dst, src))
        except tile.ContractError as e:
            raise tile.ContractError(f"{self.file}:{line}: {e.reason}") from None
        return stmt

    def compile_time_int(self, node: ast.expr) -> int:
        v = self.expr(node)
        if not (isinstance(v.expr, ir.Const) and v.type.is_int):
            self.fail(f"{ast.unparse(node)} must be a compile-time integer", node)
        return int(v.expr.value)

    def for_range(self, var: str, it: ast.Call, body: list[ast.stmt], line: int) -> ir.For:
        if not self.is_marker(it.func, builtins.range) or it.keywords or not 1 <= len(it.args) <= 3:
            self.fail("only 'for NAME in range(...)' loops with 1 to 3 arguments are supported")
        bounds = [self.convert(self.expr(a), ElemType.I32, "a range bound") for a in it.args]
        one, zero = _const(1, ElemType.I32), _const(0, ElemType.I32)
        if len(bounds) == 1:
            bounds = [zero, bounds[0]]
        start, stop, step = (*bounds, one) if len(bounds) == 2 else bounds
        if isinstance(step, ir.Const) and step.value == 0:
            self.fail("range() step must not be zero")
        self.scopes.append({})
        self.define(var, _ScalarSym(ElemType.I32, writable=False), it)
        loop_body = self.block(body)
        self.scopes.pop()
        self.dead.setdefault(var, 0)
        return ir.For(var=var, start=start, stop=stop, step=step, body=loop_body, line=line)

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
                and isinstance(self.lookup(f.value.id), _ArraySym))

    def array(self, name: str, node: ast.AST) -> _ArraySym:
        sym = self.lookup(name)
        if not isinstance(sym, _ArraySym):
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
        terms: list[ir.Expr] = [_const(arr.offset, ElemType.I32)] if arr.offset else []
        for c, stride in zip(coords, layout.strides(Axis.MEM), strict=True):
            if stride == 1:
                terms.append(self.index(c))
            elif stride:
                terms.append(ir.Binary(op=BinOp.MUL, a=self.index(c),
                                       b=_const(stride, ElemType.I32), type=ElemType.I32))
        flat = terms[0] if terms else _const(0, ElemType.I32)
        for term in terms[1:]:
            flat = ir.Binary(op=BinOp.ADD, a=flat, b=term, type=ElemType.I32)
        return arr.storage, flat, arr.elem

    def index(self, node: ast.expr) -> ir.Expr:
        v = self.expr(node)
        if not v.type.is_int or v.type is ElemType.BOOL:
            self.fail(f"an array index must be an integer, got {v.type}", node)
        return _cast(v.expr, ElemType.I32) if v.weak else v.expr

    def convert(self, v: _Val, t: ElemType, what: str = "") -> ir.Expr:
        """``v`` as a value of type ``t`` (C's conversion on assignment)."""
        if v.weak and isinstance(v.expr, ir.Const):
            value = v.expr.value
            if t.is_int and isinstance(value, float):
                self.fail(f"{what or 'the value'} {value!r} is not an integer ({t})")
            if t.is_int and not isinstance(value, bool):
                return _const(_wrap(int(value), t), t)
            return _cast(_const(value, _arith_type(t) if t.is_storage_only else t), t)
        return _cast(v.expr, t)

    def condition(self, node: ast.expr) -> ir.Expr:
        return self.truth(self.expr(node))

    def truth(self, v: _Val) -> ir.Expr:
        if v.type is ElemType.BOOL:
            return v.expr
        t = _arith_type(v.type)
        return ir.Binary(op=BinOp.NE, a=_cast(v.expr, t), b=_const(0, t), type=ElemType.BOOL)

    def expr(self, node: ast.expr) -> _Val:
        match node:
            case ast.Constant(value=bool() as b):
                return _Val(_const(b, ElemType.BOOL), weak=True)
            case ast.Constant(value=int() as i):
                return _Val(_const(i, ElemType.I64 if not -2**31 <= i < 2**31 else ElemType.I32),
                            weak=True)
            case ast.Constant(value=float() as f):
                return _Val(_const(f, ElemType.F32), weak=True)
            case ast.Name(id=name):
                return self.name(name, node)
            case ast.Attribute(value=base, attr=attr):
                obj = self.python_value(base)
                if isinstance(obj, _Dim3):
                    if attr not in ("x", "y", "z"):
                        self.fail(f"{obj.name} has components x, y and z, not {attr!r}", node)
                    return _Val(ir.BuiltinValue(which=Builtin(f"{obj.name}.{attr}")))
                return self.python_constant(getattr(obj, attr, None), node)
            case ast.Subscript(value=ast.Name(id=name), slice=index):
                storage, idx, elem = self.element(name, index, node)
                load = ir.Load(array=storage, index=idx, type=elem)
                return _Val(_cast(load, ElemType.F32) if elem.is_storage_only else load)
            case ast.UnaryOp(op=op, operand=operand):
                return self.unary(op, self.expr(operand), node)
            case ast.BinOp(left=left, op=op, right=right):
                return self.binary(op, self.expr(left), self.expr(right), node)
            case ast.BoolOp(op=op, values=values):
                bop = BinOp.LAND if isinstance(op, ast.And) else BinOp.LOR
                out = self.condition(values[0])
                for v in values[1:]:
                    out = ir.Binary(op=bop, a=out, b=self.condition(v), type=ElemType.BOOL)
                return _Val(out)
            case ast.Compare(left=left, ops=ops, comparators=rights):
                return self.compare(left, ops, rights)
            case ast.IfExp(test=test, body=a, orelse=b):
                cond = self.condition(test)
                va, vb = self.expr(a), self.expr(b)
                t = self.result_type(va, vb)
                return _Val(ir.Select(cond=cond, a=self.convert(va, t), b=self.convert(vb, t),
                                      type=t), weak=va.weak and vb.weak)
            case ast.Call(func=func, args=args, keywords=[]):
                return self.call(func, args, node)
        self.fail(f"the expression {ast.unparse(node)!r} is not supported in a kernel", node)

    def name(self, name: str, node: ast.expr) -> _Val:
        sym = self.lookup(name)
        if isinstance(sym, _ScalarSym):
            return _Val(ir.Var(name=name, type=sym.type))
        if isinstance(sym, _ArraySym):
            self.fail(f"array {name!r} used as a value; index it", node)
        if name in self.dead:
            self.fail(self.undefined(name), node)
        try:
            obj = self.python_value(node)
        except DslError:
            self.fail(self.undefined(name), node)
        return self.python_constant(obj, node)

    def python_constant(self, obj: object, node: ast.expr) -> _Val:
        if _hashable(obj) and obj in _SCALAR_BUILTINS:
            return _Val(ir.BuiltinValue(which=_SCALAR_BUILTINS[obj]))
        if isinstance(obj, bool | int | float | np.integer | np.floating):
            return self.expr(ast.copy_location(ast.Constant(value=obj.item() if isinstance(
                obj, np.generic) else obj), node))
        self.fail(f"{ast.unparse(node)} is not a kernel value (a variable, a parameter, a "
                  "launch builtin or a Python number)", node)

    def result_type(self, a: _Val, b: _Val) -> ElemType:
        if a.weak and not b.weak:
            return _arith_type(b.type) if not (a.type.is_float and b.type.is_int) else \
                _common(a.type, b.type)
        if b.weak and not a.weak:
            return self.result_type(b, a)
        return _common(a.type, b.type)

    def unary(self, op: ast.unaryop, v: _Val, node: ast.expr) -> _Val:
        match op:
            case ast.Not():
                return _Val(ir.Unary(op=UnOp.NOT, x=self.truth(v), type=ElemType.BOOL))
            case ast.UAdd():
                return v
            case ast.USub() if v.weak and isinstance(v.expr, ir.Const):
                return self.expr(ast.copy_location(ast.Constant(value=-v.expr.value), node))
            case ast.USub():
                t = _arith_type(v.type)
                return _Val(ir.Unary(op=UnOp.NEG, x=_cast(v.expr, t), type=t))
            case ast.Invert():
                t = _arith_type(v.type)
                if not t.is_int:
                    self.fail(f"'~' needs an integer operand, got {v.type}", node)
                return _Val(ir.Unary(op=UnOp.BITNOT, x=_cast(v.expr, t), type=t))
        self.fail(f"the operator {type(op).__name__} is not supported", node)

    def binary(self, op: ast.operator, a: _Val, b: _Val, node: ast.expr) -> _Val:
        if type(op) not in _BINOPS:
            self.fail(f"the operator {type(op).__name__} is not supported in a kernel", node)
        bop = _BINOPS[type(op)]
        if bop in (BinOp.SHL, BinOp.SHR):
            t = _arith_type(a.type)
            if a.weak and not b.weak:
                t = ElemType.I32
            if not (t.is_int and _arith_type(b.type).is_int):
                self.fail(f"shifts need integer operands, got {a.type} and {b.type}", node)
            return _Val(ir.Binary(op=bop, a=self.convert(a, t), b=self.convert(
                b, _arith_type(b.type)), type=t), weak=a.weak and b.weak)
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
            folded = _fold(bop, ea.value, eb.value, t)
            if folded is not None:
                return _Val(_const(folded, t), weak=True)
        return _Val(ir.Binary(op=bop, a=ea, b=eb, type=t))

    def compare(self, left: ast.expr, ops: list[ast.cmpop], rights: list[ast.expr]) -> _Val:
        terms: list[ir.Expr] = []
        a = self.expr(left)
        for op, right in zip(ops, rights, strict=True):
            if type(op) not in _CMPOPS:
                self.fail(f"the comparison {type(op).__name__} is not supported", right)
            b = self.expr(right)
            t = self.result_type(a, b)
            terms.append(ir.Binary(op=_CMPOPS[type(op)], a=self.convert(a, t),
                                   b=self.convert(b, t), type=ElemType.BOOL))
            a = b
        out = terms[0]
        for term in terms[1:]:
            out = ir.Binary(op=BinOp.LAND, a=out, b=term, type=ElemType.BOOL)
        return _Val(out)

    def call(self, func: ast.expr, args: list[ast.expr], node: ast.expr) -> _Val:
        if isinstance(func, ast.Name) and self.lookup(func.id) is not None:
            self.fail(f"{func.id!r} is not a function", node)
        target = self.python_value(func)
        if isinstance(target, ScalarType):
            if len(args) != 1:
                self.fail(f"{target!r}(x) takes one argument", node)
            return _Val(self.convert(self.expr(args[0]), target.elem))
        if _hashable(target) and target in _MATH:
            return self.math(_MATH[target], [self.expr(a) for a in args], node)
        if target is barrier:
            self.fail("barrier() is a statement, not a value", node)
        if target in (shared, local):
            self.fail(f"{target!r}(T, size) can only be assigned to a new name at the top "
                      "level of a statement", node)
        self.fail(f"the function {ast.unparse(func)} cannot be called in a kernel", node)

    def math(self, fn: MathFn, args: list[_Val], node: ast.expr) -> _Val:
        if fn in (MathFn.MIN, MathFn.MAX) and len(args) > 2:
            return self.math(fn, [self.math(fn, args[:2], node), *args[2:]], node)
        if len(args) != ir.MATH_ARITY[fn]:
            self.fail(f"{fn.value}() takes {ir.MATH_ARITY[fn]} arguments, got {len(args)}", node)
        joined = args[0]
        for other in args[1:]:
            joined = _Val(_const(0, self.result_type(joined, other)), joined.weak and other.weak)
        rtype = _arith_type(joined.type)
        if fn not in (MathFn.ABS, MathFn.MIN, MathFn.MAX) and rtype.is_int:
            rtype = ElemType.F32
        return _Val(ir.Call(fn=fn, args=tuple(self.convert(a, rtype) for a in args), type=rtype))


def _fold(op: BinOp, a: bool | int | float, b: bool | int | float, t: ElemType) -> int | None:
    """Folds integer literal arithmetic (``16 * 4``) so sizes stay compile-time constants."""
    if not t.is_int or isinstance(a, float) or isinstance(b, float):
        return None
    x, y = int(a), int(b)
    match op:
        case BinOp.ADD:
            return _wrap(x + y, t)
        case BinOp.SUB:
            return _wrap(x - y, t)
        case BinOp.MUL:
            return _wrap(x * y, t)
        case BinOp.DIV if y != 0:
            return _wrap(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1), t)
    return None


def _as_load(target: ast.expr) -> ast.expr:
    """The augmented assignment's target read as a value (``a[i]`` of ``a[i] += x``)."""
    load = copy.deepcopy(target)
    for node in ast.walk(load):
        if hasattr(node, "ctx"):
            node.ctx = ast.Load()
    return load


def _check_depth(fdef: ast.FunctionDef, file: str, line_offset: int) -> None:
    """Refuses an expression nested deeper than the IR allows (``ir_check.MAX_EXPR_DEPTH``)
    before translating it: the translation recurses over expressions. Found without
    recursion."""
    stack: list[tuple[ast.AST, int, int]] = [(fdef, 0, fdef.lineno)]
    while stack:
        node, depth, line = stack.pop()
        if isinstance(node, ast.stmt):
            depth, line = 0, node.lineno
        elif isinstance(node, ast.expr):
            depth += 1
            if depth > MAX_EXPR_DEPTH:
                raise DslError(f"an expression nests more than {MAX_EXPR_DEPTH} deep, the most a "
                               "kernel may hold; compute it in several assignments", file,
                               line + line_offset)
        stack += [(child, depth, line) for child in ast.iter_child_nodes(node)]


def _parse(fn: Callable[..., Any]) -> ir.Kernel:
    file = inspect.getsourcefile(fn) or "<unknown>"
    try:
        lines, first = inspect.getsourcelines(fn)
    except OSError as e:
        raise DslError(f"the source of {fn.__name__} is not available ({e})", file) from None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (SyntaxError, RecursionError, MemoryError) as e:
        raise DslError(f"the source of {fn.__name__} cannot be parsed on its own ({e})", file,
                       first) from None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef):
        raise DslError("@sarek.kernel applies to a function definition", file, first)
    _check_depth(fdef, file, first - 1)
    t = _Translator(fn, file, first)
    kernel_ir = t.kernel(fdef)
    problems = ir.check(kernel_ir)
    if problems:
        p = problems[0]
        raise DslError(p.reason, file, p.line or first)
    return kernel_ir
