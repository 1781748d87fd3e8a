"""Recognize a GEMM nest in a kernel.

``recognize(kernel)`` reads the IR (never the Python source) and returns a ``Gemm``: what every
invocation computes, as IR expressions over the original kernel's parameters, so that a rewrite
can re-emit them. A kernel that is not one of the GEMM shapes of ``specs/matrix-pattern-rewrite.md``
raises ``NotAGemm`` whose ``reason`` names the construct (and its source line when the DSL recorded
one).

How it works. The body is executed symbolically: ``Let`` values are inlined, the bounds guard is
collected from the ``if`` statements and early returns on the way to the single store, and the
k-loop's update is matched against ``acc + A*B``, ``A*B + acc`` or ``fma(A, B, acc)``. Integer
index expressions are normalized to polynomials whose atoms are parameters, launch builtins and
the loop variables; the thread and block coordinates are then replaced by global indices
(``block_idx.y * block_dim.y + thread_idx.y``), those by the output row, column and batch of a
mapping, and every address must come out affine in row, column, batch and the reduction index,
with coefficients built from scalar parameters and constants.

Placeholders. The initial value and the epilogue are expressions over ``ROW``, ``COL``, ``BATCH``
(the output's coordinates) and, for the epilogue, ``ACC`` (the finished sum); they are ``Var``
nodes whose names cannot clash with a Python identifier.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal, TypeAlias, cast

from sarek import ir
from sarek.errors import SarekError
from sarek.ir import BinOp, Builtin, ElemType, MathFn, MemSpace, UnOp

ACC, ROW, COL, BATCH = "%acc", "%row", "%col", "%batch"
_P, _T, _KK = "%p", "%t", "%kk"  # the reduction index; the tiled form's outer and inner indices
_GID = {a: f"%gid.{a}" for a in "xyz"}
_MAX_NODES = 20_000  # an initial value or epilogue larger than this is refused (inlining blowup)
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1


class NotAGemm(SarekError):
    """The kernel is not a GEMM nest sarek can rewrite; ``reason`` names the construct."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.construct = reason
        self.line = line


class _Refuse(Exception):
    """Internal: recognition failed; carries the reason up to ``recognize``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------- the description


@dataclass(frozen=True)
class GlobalIndex:
    """A global invocation index along one launch axis: ``block_idx.a * S + thread_idx.a`` where
    ``S`` is ``block_dim.a`` (or the constant ``tile`` of a kernel written for one block size),
    or ``block_idx.a`` alone, or ``thread_idx.a`` alone."""

    axis: Literal["x", "y", "z"]
    uses_block: bool = True
    uses_thread: bool = True
    tile: int | None = None

    def expr(self) -> ir.Expr:
        """The index as the IR expression the kernel computes."""
        block = ir.BuiltinValue(which=Builtin(f"block_idx.{self.axis}"))
        thread = ir.BuiltinValue(which=Builtin(f"thread_idx.{self.axis}"))
        if not self.uses_block:
            return thread
        if not self.uses_thread:
            return block
        stride: ir.Expr = (_i32(self.tile) if self.tile is not None
                           else ir.BuiltinValue(which=Builtin(f"block_dim.{self.axis}")))
        return _add(_mul(block, stride), thread)


@dataclass(frozen=True)
class Mapping2D:
    """One output per invocation: row and column from two global indices (normally y and x)."""

    row: GlobalIndex
    col: GlobalIndex
    batch: GlobalIndex | None = None


@dataclass(frozen=True)
class Mapping1D:
    """One output per invocation of a linear index: row-major ``row = id / divisor,
    col = id % divisor`` or column-major ``col = id / divisor, row = id % divisor``."""

    linear: GlobalIndex
    divisor: ir.Expr
    order: Literal["row-major", "col-major"]
    batch: GlobalIndex | None = None


Mapping: TypeAlias = Mapping2D | Mapping1D


@dataclass(frozen=True)
class Access:
    """An affine array access: element ``offset + row*row_stride + col*col_stride +
    batch*batch_stride + p*red_stride`` of ``array``; every part is an i32 expression over the
    kernel's scalar parameters and constants (a stride the access does not use is ``0``)."""

    array: str
    elem: ElemType
    offset: ir.Expr
    row_stride: ir.Expr
    col_stride: ir.Expr
    batch_stride: ir.Expr
    red_stride: ir.Expr

    def address(self, row: ir.Expr, col: ir.Expr, batch: ir.Expr, p: ir.Expr) -> ir.Expr:
        """The element index at the given coordinates, as an i32 IR expression."""
        terms = [coord if _is_one(stride) else _mul(coord, stride)
                 for coord, stride in ((row, self.row_stride), (col, self.col_stride),
                                       (batch, self.batch_stride), (p, self.red_stride))
                 if not _is_zero(stride)]
        if not _is_zero(self.offset) or not terms:
            terms.insert(0, self.offset)
        out = terms[0]
        for t in terms[1:]:
            out = _add(out, t)
        return out


@dataclass(frozen=True)
class Staging:
    """The kernel stages its operands through shared memory in steps of ``tile`` along the
    reduction, which only computes the GEMM when launched with blocks of shape ``block``."""

    tile: int
    block: tuple[int, int, int]


@dataclass(frozen=True)
class Gemm:
    """What a recognized kernel computes. For every output the launch covers (see
    ``sarek.matrix_mapping.region``), with ``row``, ``col``, ``batch`` from ``mapping``::

        acc = init
        for p in range(k_start, k_stop):
            acc = acc + A[row, p] * B[p, col]      # or fma(A, B, acc) when fused
        C[row, col] = epilogue(acc)

    Rows are bounded by ``m``, columns by ``n``, batches by ``batches`` and, for a 1-D mapping,
    the linear index by ``linear_bound`` (each None when the kernel has no such guard).
    ``init`` and ``epilogue`` are expressions over the placeholders ``ROW``, ``COL``, ``BATCH``
    (and ``ACC`` in the epilogue); they may read ``c`` at the output's own element (its old
    value), other arrays at affine positions, scalar parameters and constants.
    """

    kernel: str
    params: tuple[ir.ArrayParam | ir.ScalarParam, ...]
    mapping: Mapping
    a: Access
    b: Access
    c: Access
    m: ir.Expr | None
    n: ir.Expr | None
    batches: ir.Expr | None
    linear_bound: ir.Expr | None
    k_start: ir.Expr
    k_stop: ir.Expr
    acc_type: ElemType
    fused: bool
    init: ir.Expr
    epilogue: ir.Expr
    staging: Staging | None = None

    @property
    def operand_elt(self) -> ElemType:
        """The element type of A and B (they are always the same)."""
        return self.a.elem

    @property
    def a_layout(self) -> str:
        """``row`` when A's reduction stride is 1, ``col`` when its row stride is 1, else
        ``strided``."""
        return _layout(self.a.red_stride, self.a.row_stride)

    @property
    def b_layout(self) -> str:
        """``row`` when B's column stride is 1, ``col`` when its reduction stride is 1, else
        ``strided``."""
        return _layout(self.b.col_stride, self.b.red_stride)

    @property
    def c_layout(self) -> str:
        """``row`` when C's column stride is 1, ``col`` when its row stride is 1, else
        ``strided``."""
        return _layout(self.c.col_stride, self.c.row_stride)

    @property
    def reads_c(self) -> bool:
        """Whether the initial value or the epilogue reads C's old value."""
        return any(isinstance(x, ir.Load) and x.array == self.c.array
                   for e in (self.init, self.epilogue) for x in _subexprs(e))

    def init_at(self, row: ir.Expr, col: ir.Expr, batch: ir.Expr) -> ir.Expr:
        """The initial value at an output, the placeholders replaced by the given expressions."""
        return substitute(self.init, {ROW: row, COL: col, BATCH: batch})

    def epilogue_at(self, acc: ir.Expr, row: ir.Expr, col: ir.Expr, batch: ir.Expr) -> ir.Expr:
        """The stored value at an output for the sum ``acc``."""
        return substitute(self.epilogue, {ACC: acc, ROW: row, COL: col, BATCH: batch})

    def describe(self) -> str:
        """A readable account of the nest, one fact per line."""
        a, b, c = self.a, self.b, self.c
        coords = ("row", "col", "batch", "p")
        lines = [
            f"GEMM nest in kernel {self.kernel!r}",
            f"  C[row, col]   {c.array} ({c.elem}) at {_show_access(c, coords)}  "
            f"({self.c_layout}-major)",
            f"  A[row, p]     {a.array} ({a.elem}) at {_show_access(a, coords)}  "
            f"({self.a_layout}-major)",
            f"  B[p, col]     {b.array} ({b.elem}) at {_show_access(b, coords)}  "
            f"({self.b_layout}-major)",
            f"  mapping       {_show_mapping(self.mapping)}",
            f"  bounds        {_show_bounds(self)}",
            f"  reduction     p in range({format_expr(self.k_start)}, "
            f"{format_expr(self.k_stop)}), {self.acc_type} accumulator, "
            + ("acc = fma(A, B, acc)" if self.fused else "acc = acc + A*B"),
            f"  init          {format_expr(self.init)}",
            f"  epilogue      {c.array}[row, col] = {format_expr(self.epilogue)}",
        ]
        if self.staging is not None:
            lines.append(f"  staging       shared-memory tiles of {self.staging.tile} along k; "
                         f"needs blocks of {self.staging.block}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- IR helpers


def _i32(v: int) -> ir.Const:
    return ir.Const(value=v, type=ElemType.I32)


def _add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary(op=BinOp.ADD, a=a, b=b, type=a.type)


def _mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    return ir.Binary(op=BinOp.MUL, a=a, b=b, type=a.type)


def _is_zero(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const) and e.value == 0


def _is_one(e: ir.Expr) -> bool:
    return isinstance(e, ir.Const) and e.value == 1


def _layout(unit: ir.Expr, other: ir.Expr) -> str:
    return "row" if _is_one(unit) else "col" if _is_one(other) else "strided"


def _children(e: ir.Expr) -> tuple[ir.Expr, ...]:
    match e:
        case ir.Unary(x=x) | ir.Cast(x=x) | ir.Bitcast(x=x):
            return (x,)
        case ir.Binary(a=a, b=b):
            return (a, b)
        case ir.Load(index=i):
            return (i,)
        case ir.Select(cond=c, a=a, b=b):
            return (c, a, b)
        case ir.Call(args=args):
            return tuple(args)
    return ()


def _subexprs(e: ir.Expr) -> Iterator[ir.Expr]:
    """Every distinct node of ``e`` (a DAG may share nodes; each is visited once)."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        yield x
        stack.extend(_children(x))


def _rebuild(e: ir.Expr, leaf: Callable[[ir.Expr], ir.Expr | None],
             memo: dict[int, ir.Expr] | None = None) -> ir.Expr:
    """``e`` with every node for which ``leaf`` returns an expression replaced by it; nodes
    whose children did not change are kept (sharing is preserved)."""
    memo = {} if memo is None else memo
    key = id(e)
    if key in memo:
        return memo[key]
    out = leaf(e)
    if out is None:
        match e:
            case ir.Unary(x=x) | ir.Cast(x=x):
                nx = _rebuild(x, leaf, memo)
                out = e if nx is x else e.model_copy(update={"x": nx})
            case ir.Binary(a=a, b=b):
                na, nb = _rebuild(a, leaf, memo), _rebuild(b, leaf, memo)
                out = e if (na is a and nb is b) else e.model_copy(update={"a": na, "b": nb})
            case ir.Load(index=i):
                ni = _rebuild(i, leaf, memo)
                out = e if ni is i else e.model_copy(update={"index": ni})
            case ir.Select(cond=c, a=a, b=b):
                nc, na, nb = (_rebuild(x, leaf, memo) for x in (c, a, b))
                out = e if (nc is c and na is a and nb is b) else e.model_copy(
                    update={"cond": nc, "a": na, "b": nb})
            case ir.Call(args=args):
                nargs = tuple(_rebuild(x, leaf, memo) for x in args)
                same = all(n is o for n, o in zip(nargs, args, strict=True))
                out = e if same else e.model_copy(update={"args": nargs})
            case _:
                out = e
    memo[key] = out
    return out


def substitute(e: ir.Expr, values: dict[str, ir.Expr]) -> ir.Expr:
    """``e`` with every ``Var`` named in ``values`` replaced by its expression."""
    return _rebuild(e, lambda x: values.get(x.name) if isinstance(x, ir.Var) else None)


def _size(e: ir.Expr) -> int:
    """The number of nodes of ``e`` written out as a tree."""
    sizes: dict[int, int] = {}
    order = list(_subexprs(e))
    for x in reversed(order):
        sizes[id(x)] = 1 + sum(sizes.get(id(c), 1) for c in _children(x))
    return sizes[id(e)]


# --------------------------------------------------------------------------- printing

_SYMBOL = {
    BinOp.ADD: ("+", 4), BinOp.SUB: ("-", 4), BinOp.MUL: ("*", 5), BinOp.DIV: ("//", 5),
    BinOp.REM: ("%", 5), BinOp.SHL: ("<<", 3), BinOp.SHR: (">>", 3), BinOp.AND: ("&", 2),
    BinOp.XOR: ("^", 2), BinOp.OR: ("|", 2), BinOp.LT: ("<", 1), BinOp.LE: ("<=", 1),
    BinOp.GT: (">", 1), BinOp.GE: (">=", 1), BinOp.EQ: ("==", 1), BinOp.NE: ("!=", 1),
    BinOp.LAND: ("and", 0), BinOp.LOR: ("or", 0),
}


def format_expr(e: ir.Expr) -> str:
    """``e`` written like the DSL (placeholders print as ``acc``, ``row``, ``col``, ``batch``)."""
    return _fmt(e, 0)


def _fmt(e: ir.Expr, outer: int) -> str:
    match e:
        case ir.Const(value=v, type=t):
            text = repr(v) if t.is_float or t is ElemType.BOOL else str(v)
            return text if t in (ElemType.I32, ElemType.F32, ElemType.BOOL) else f"{t}({text})"
        case ir.Var(name=name):
            return name.lstrip("%")
        case ir.BuiltinValue(which=w):
            return w.value
        case ir.Load(array=a, index=i):
            return f"{a}[{_fmt(i, 0)}]"
        case ir.Cast(x=x, type=t):
            return f"{t}({_fmt(x, 0)})"
        case ir.Call(fn=fn, args=args):
            return f"{fn.value}({', '.join(_fmt(x, 0) for x in args)})"
        case ir.Select(cond=c, a=a, b=b):
            return f"({_fmt(a, 0)} if {_fmt(c, 0)} else {_fmt(b, 0)})"
        case ir.Unary(op=op, x=x):
            sym = {UnOp.NEG: "-", UnOp.NOT: "not ", UnOp.BITNOT: "~"}[op]
            return f"{sym}{_fmt(x, 6)}"
        case ir.Binary(op=op, a=a, b=b):
            sym, prec = _SYMBOL[op]
            text = f"{_fmt(a, prec)} {sym} {_fmt(b, prec + 1)}"
            return f"({text})" if prec < outer else text
    return "?"


def _show_access(acc: Access, coords: tuple[str, ...]) -> str:
    names = [ir.Var(name=n, type=ElemType.I32) for n in coords]
    return format_expr(acc.address(*names))


def _show_mapping(m: Mapping) -> str:
    match m:
        case Mapping2D(row=r, col=c, batch=z):
            text = f"2-D: row = {format_expr(r.expr())}, col = {format_expr(c.expr())}"
        case Mapping1D(linear=lin, divisor=d, order=order, batch=z):
            idx, dv = format_expr(lin.expr()), format_expr(d)
            major, minor = ("row", "col") if order == "row-major" else ("col", "row")
            text = (f"1-D {order}: id = {idx}, {major} = id // {dv}, {minor} = id % {dv}")
    if z is not None:
        text += f", batch = {format_expr(z.expr())}"
    return text


def _show_bounds(g: Gemm) -> str:
    parts = [f"{what} < {format_expr(e)}" for what, e in
             (("row", g.m), ("col", g.n), ("batch", g.batches), ("linear id", g.linear_bound))
             if e is not None]
    return ", ".join(parts) or "none (the launch alone decides)"


# --------------------------------------------------------------------------- polynomials

Mono: TypeAlias = tuple[str, ...]


class Poly:
    """A polynomial with integer coefficients over named atoms (exact, no wrap-around)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Mono, int]) -> None:
        self.terms = {m: c for m, c in terms.items() if c != 0}

    @staticmethod
    def const(c: int) -> Poly:
        return Poly({(): c})

    @staticmethod
    def atom(name: str) -> Poly:
        return Poly({(name,): 1})

    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, 0) + c
        return Poly(out)

    def __neg__(self) -> Poly:
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: Poly) -> Poly:
        return self + (-other)

    def __mul__(self, other: Poly) -> Poly:
        out: dict[Mono, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = tuple(sorted(m1 + m2))
                out[m] = out.get(m, 0) + c1 * c2
        return Poly(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    @property
    def constant(self) -> int | None:
        """The value when the polynomial is a constant, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and () in self.terms:
            return self.terms[()]
        return None

    def atoms(self) -> set[str]:
        return {a for m in self.terms for a in m}

    def key(self) -> tuple[tuple[Mono, int], ...]:
        return tuple(sorted(self.terms.items()))

    def subst(self, values: dict[str, Poly]) -> Poly:
        """Simultaneous substitution of atoms by polynomials."""
        out = Poly({})
        for m, c in self.terms.items():
            term = Poly.const(c)
            rest: list[str] = []
            for a in m:
                if a in values:
                    term = term * values[a]
                else:
                    rest.append(a)
            out = out + term * Poly({tuple(rest): 1})
        return out

    def split(self, coords: tuple[str, ...]) -> tuple[dict[str, Poly], Poly, Mono | None]:
        """The coefficient of each coordinate and the rest, for an affine polynomial; the third
        value is the first monomial that is not affine in ``coords`` (else None)."""
        coefs: dict[str, dict[Mono, int]] = {c: {} for c in coords}
        rest: dict[Mono, int] = {}
        for m, c in self.terms.items():
            hits = [a for a in m if a in coefs]
            if len(hits) > 1:
                return {}, Poly({}), m
            if hits:
                others = list(m)
                others.remove(hits[0])
                coefs[hits[0]][tuple(others)] = c
            else:
                rest[m] = c
        return {k: Poly(v) for k, v in coefs.items()}, Poly(rest), None


# --------------------------------------------------------------------------- normalization


_COORD_NAMES = {ROW: "row", COL: "col", BATCH: "batch", _P: "p", _T: "p", _KK: "p"}


_Quotient: TypeAlias = tuple[Poly, Poly, ir.Expr]
"""A ``div``/``rem`` atom's payload: numerator, denominator, and the denominator as written."""


def _quotient(payload: ir.Expr | _Quotient) -> _Quotient:
    """The payload of a ``div``/``rem`` atom (an ``expr`` atom's payload is an expression)."""
    assert isinstance(payload, tuple)
    return payload


class _Atoms:
    """Names the non-polynomial parts of index expressions, so that equal ones share a name:
    ``expr`` atoms are invocation-independent expressions over parameters (``k // 2``,
    ``min(m, 8)``), ``div``/``rem`` atoms divide an index by such an expression."""

    def __init__(self) -> None:
        self.by_key: dict[object, str] = {}
        self.info: dict[str, tuple[str, ir.Expr | _Quotient]] = {}

    def intern(self, kind: str, key: object, payload: ir.Expr | _Quotient) -> str:
        full = (kind, key)
        if full not in self.by_key:
            name = f"#{len(self.by_key)}"
            self.by_key[full] = name
            self.info[name] = (kind, payload)
        return self.by_key[full]


def _uniform(e: ir.Expr) -> bool:
    """Whether ``e`` depends only on scalar parameters and constants."""
    for x in _subexprs(e):
        match x:
            case ir.BuiltinValue() | ir.Load():
                return False
            case ir.Var(name=name) if name.startswith("%"):
                return False
    return True


def _canon(e: ir.Expr) -> str:
    return e.model_dump_json(exclude_none=True)


class _Normalizer:
    """Integer expressions to polynomials. ``subst`` replaces builtins (by their key
    ``@thread_idx.x`` ...) with polynomials; placeholders and parameters become atoms."""

    def __init__(self, atoms: _Atoms, subst: dict[str, Poly], params: dict[str, ir.ElemType],
                 seen: list[Poly] | None = None) -> None:
        self.atoms = atoms
        self.subst = subst
        self.params = params
        self.memo: dict[int, Poly] = {}
        self.seen = seen  # every polynomial made (for the global-index analysis)

    def poly(self, e: ir.Expr) -> Poly:
        key = id(e)
        if key not in self.memo:
            p = self._poly(e)
            self.memo[key] = p
            if self.seen is not None:
                self.seen.append(p)
        return self.memo[key]

    def _opaque(self, e: ir.Expr) -> Poly:
        return Poly.atom(self.atoms.intern("expr", _canon(e), e))

    def _poly(self, e: ir.Expr) -> Poly:
        if not e.type.is_int:
            raise _Refuse(f"the index uses the {e.type} value {format_expr(e)}")
        match e:
            case ir.Const(value=v):
                if not _I32_MIN <= int(v) <= _I32_MAX:
                    raise _Refuse(f"the index uses the constant {v}, which does not fit i32")
                return Poly.const(int(v))
            case ir.Var(name=name, type=t):
                if not name.startswith("%") and t is not ElemType.I32:
                    raise _Refuse(f"index arithmetic must be i32; parameter {name!r} is {t}")
                return Poly.atom(name)
            case ir.BuiltinValue(which=w):
                if w.name.startswith(("GRID_DIM", "SUBGROUP")):
                    raise _Refuse(f"the index uses {w.value}")
                key = f"@{w.value}"
                return self.subst.get(key, Poly.atom(key))
            case ir.Binary(op=BinOp.ADD, a=a, b=b):
                return self.poly(a) + self.poly(b)
            case ir.Binary(op=BinOp.SUB, a=a, b=b):
                return self.poly(a) - self.poly(b)
            case ir.Binary(op=BinOp.MUL, a=a, b=b):
                return self.poly(a) * self.poly(b)
            case ir.Binary(op=BinOp.SHL, a=a, b=ir.Const(value=int() as s)) if 0 <= s < 31:
                return self.poly(a) * Poly.const(1 << s)
            case ir.Unary(op=UnOp.NEG, x=x):
                return -self.poly(x)
            case ir.Cast(x=x) if x.type in (ElemType.I32, ElemType.U32, ElemType.I64,
                                             ElemType.U64) and e.type.bits >= 32:
                return self.poly(x)
            case ir.Binary(op=BinOp.DIV | BinOp.REM as op, a=a, b=b) if _uniform(b) \
                    and not _uniform(a):
                num, den = self.poly(a), self.poly(b)
                kind = "div" if op is BinOp.DIV else "rem"
                return Poly.atom(self.atoms.intern(kind, (num.key(), den.key()), (num, den, b)))
            case ir.Load(array=name):
                raise _Refuse(f"the index reads memory ({name}[...]): an indirect access")
        if _uniform(e):
            return self._opaque(e)
        raise _Refuse(f"the index {format_expr(e)} is not affine")


# --------------------------------------------------------------------------- operands


@dataclass
class _Operand:
    """One factor of the product: a load, widened by casts, possibly zeroed by conditions."""

    load: ir.Load
    conds: list[ir.Expr]
    type: ElemType


_WIDENS = {
    (ElemType.F16, ElemType.F32), (ElemType.BF16, ElemType.F32), (ElemType.F16, ElemType.F64),
    (ElemType.BF16, ElemType.F64), (ElemType.F32, ElemType.F64), (ElemType.I32, ElemType.I64),
    (ElemType.I8, ElemType.I32), (ElemType.U8, ElemType.I32), (ElemType.I16, ElemType.I32),
    (ElemType.U16, ElemType.I32), (ElemType.I8, ElemType.I64), (ElemType.U8, ElemType.I64),
    (ElemType.I16, ElemType.I64), (ElemType.U16, ElemType.I64), (ElemType.U32, ElemType.I64),
}


def _is_zero_value(e: ir.Expr) -> bool:
    while isinstance(e, ir.Cast):
        e = e.x
    return isinstance(e, ir.Const) and not isinstance(e.value, bool) and e.value == 0


def _operand(e: ir.Expr, arrays: dict[str, ir.ArrayParam] | set[str]) -> _Operand:
    conds: list[ir.Expr] = []
    x = e
    while True:
        match x:
            case ir.Select(cond=c, a=a, b=b) if _is_zero_value(b):
                conds.append(c)
                x = a
            case ir.Select(cond=c, a=a, b=b) if _is_zero_value(a):
                conds.append(ir.Unary(op=UnOp.NOT, x=c, type=ElemType.BOOL))
                x = b
            case ir.Cast(x=inner, type=t):
                if (inner.type, t) not in _WIDENS and inner.type != t:
                    raise _Refuse(f"the operand {format_expr(e)} converts {inner.type} to {t}, "
                                  "which is not an exact widening")
                x = inner
            case ir.Load(array=name) as load:
                if name not in arrays:
                    raise _Refuse(f"the operand {format_expr(e)} reads {name!r}, which is not "
                                  "an array parameter (shared arrays are read only in a staged "
                                  "k-loop)")
                return _Operand(load, conds, e.type)
            case ir.Binary(op=BinOp.MUL):
                raise _Refuse(f"the update multiplies more than two values ({format_expr(e)})")
            case _:
                raise _Refuse(f"the factor {format_expr(e)} of the product is not an array "
                              "element")


# --------------------------------------------------------------------------- the structure


@dataclass
class _Loop:
    """The reduction: its bounds, the update's two factors, and the staging facts."""

    start: ir.Expr
    stop: ir.Expr
    acc: str
    acc_type: ElemType
    init: ir.Expr
    fused: bool
    x: _Operand
    y: _Operand
    tile: int | None = None
    block: tuple[int, int, int] | None = None


@dataclass
class _Nest:
    guards: list[ir.Expr]
    loop: _Loop
    store: ir.Store  # index and value symbolic
    line: int | None


def _kernel_stores(body: tuple[ir.Stmt, ...]) -> list[ir.Store]:
    from sarek.ir_check import walk

    return [s for s in walk(body) if isinstance(s, ir.Store)]


def _contains(s: ir.Stmt, target: ir.Stmt) -> bool:
    from sarek.ir_check import walk

    return any(x is target for x in walk((s,)))


def _acc_placeholder(name: str, t: ElemType) -> ir.Var:
    return ir.Var(name=ACC, type=t)


class _Structure:
    """Walks the statements symbolically down to the store."""

    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.arrays = {p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}
        self.env: dict[str, ir.Expr] = {}
        self.types: dict[str, ElemType] = {}
        self.shared: dict[str, ir.ArrayDecl] = {}
        self.guards: list[ir.Expr] = []
        self.loop: _Loop | None = None
        self.line: int | None = None
        self.store: ir.Store | None = None
        stores = _kernel_stores(kernel.body)
        global_stores = [s for s in stores if s.array in self.arrays]
        if not global_stores:
            raise _Refuse("the kernel stores nothing to a global array")
        if len(global_stores) > 1:
            names = sorted({s.array for s in global_stores})
            what = (f"two stores to {names[0]}" if len(names) == 1
                    else f"stores to {', '.join(names)}")
            raise _Refuse(f"{what}: a GEMM nest writes one output element per invocation, once")
        self.target = global_stores[0]

    def sym(self, e: ir.Expr) -> ir.Expr:
        env = self.env
        return _rebuild(e, lambda x: env.get(x.name) if isinstance(x, ir.Var) else None)

    def run(self) -> _Nest:
        if not self.block(self.kernel.body):
            raise _Refuse("the store to the output is unreachable")
        assert self.loop is not None and self.store is not None
        return _Nest(self.guards, self.loop, self.store, self.target.line)

    def refuse(self, s: ir.Stmt, reason: str) -> _Refuse:
        self.line = s.line
        return _Refuse(reason)

    def block(self, stmts: tuple[ir.Stmt, ...]) -> bool:
        """Processes a statement list on the path to the store; True once the store is done."""
        for s in stmts:
            self.line = s.line
            if self.stmt(s):
                return True
        return False

    def stmt(self, s: ir.Stmt) -> bool:
        match s:
            case ir.Let(name=name, type=t, value=v):
                self.env[name] = self.sym(v)
                self.types[name] = t
            case ir.Assign(name=name, value=v):
                self.env[name] = self.sym(v)
            case ir.Store() if s is self.target:
                if self.loop is None:
                    raise self.refuse(s, f"the store to {s.array} comes before any k-loop: "
                                      "there is no reduction")
                self.store = ir.Store(array=s.array, index=self.sym(s.index),
                                      value=self.sym(s.value), line=s.line)
                return True
            case ir.Store(array=name):
                raise self.refuse(s, f"a store to the shared array {name!r} outside a staged "
                                  "k-loop")
            case ir.If(cond=c, then=then, orelse=orelse):
                return self.conditional(s, c, then, orelse)
            case ir.For():
                if _contains(s, self.target):
                    raise self.refuse(s, f"the store to {self.target.array} is inside the "
                                      "k-loop: a GEMM nest stores once, after the reduction")
                if self.loop is not None:
                    raise self.refuse(s, "a second loop: a GEMM nest has one k-loop")
                self.loop = self.reduction(s)
            case ir.While():
                raise self.refuse(s, "a while loop: the reduction must be a for loop over "
                                  "range()")
            case ir.Return():
                raise self.refuse(s, f"a return before the store to {self.target.array}")
            case ir.ArrayDecl(name=name, space=MemSpace.SHARED) if s.layout is None:
                self.shared[name] = s
            case ir.ArrayDecl(name=name, space=space):
                raise self.refuse(s, f"the {space} array {name!r}: a GEMM nest keeps its "
                                  "state in one scalar accumulator")
            case ir.Barrier():
                raise self.refuse(s, "a barrier outside a staged k-loop")
            case _:
                raise self.refuse(s, f"the statement {s.kind!r}: the kernel already uses "
                                  "fragments or tile instructions")
        return False

    def conditional(self, s: ir.If, c: ir.Expr, then: tuple[ir.Stmt, ...],
                    orelse: tuple[ir.Stmt, ...]) -> bool:
        cond = self.sym(c)
        negated = ir.Unary(op=UnOp.NOT, x=cond, type=ElemType.BOOL)
        if _contains(s, self.target):
            inside_then = any(_contains(x, self.target) for x in then)
            taken, other = (then, orelse) if inside_then else (orelse, then)
            if not _effect_free(other):
                raise self.refuse(s, "the branch beside the bounds guard does something: a "
                                  "GEMM nest has no else branch")
            self.guards.append(cond if inside_then else negated)
            return self.block(taken)
        if then and isinstance(then[-1], ir.Return) and _effect_free(then) and not orelse:
            self.guards.append(negated)
            return False
        if orelse and isinstance(orelse[-1], ir.Return) and _effect_free(orelse) \
                and _effect_free(then):
            self.guards.append(cond)
            return False
        raise self.refuse(s, f"the conditional 'if {format_expr(cond)}' is neither the bounds "
                          "guard around the store nor an early return")

    # ------------------------------------------------------------------ the k-loop

    def reduction(self, s: ir.For) -> _Loop:
        assigned = {x.name for x in _walk((s,)) if isinstance(x, ir.Assign)}
        if not assigned:
            raise self.refuse(s, "the loop updates no accumulator")
        if len(assigned) > 1:
            raise self.refuse(s, f"the k-loop assigns {', '.join(sorted(assigned))}: a GEMM "
                              "nest carries one accumulator")
        acc = assigned.pop()
        if acc not in self.env:
            raise self.refuse(s, f"the k-loop assigns {acc!r}, which is not declared before it")
        acc_type = self.types[acc]
        if not acc_type.is_arith:
            raise self.refuse(s, f"the accumulator {acc!r} is {acc_type}")
        init = self.env[acc]
        self.env[acc] = _acc_placeholder(acc, acc_type)
        start, stop = self.sym(s.start), self.sym(s.stop)
        for what, bound in (("start", start), ("stop", stop)):
            self.uniform_bound(s, what, bound)
        inner = [x for x in s.body if isinstance(x, ir.For)]
        if inner:
            loop = self.tiled(s, inner[0], acc, acc_type, init, start, stop)
        else:
            if not (isinstance(s.step, ir.Const) and s.step.value == 1):
                raise self.refuse(s, f"the k-loop steps by {format_expr(s.step)}: the "
                                  "reduction must run in steps of 1, in order")
            self.env[s.var] = ir.Var(name=_P, type=ElemType.I32)
            fused, x, y = self.update_body(s.body, acc, acc_type, set(self.arrays))
            loop = _Loop(start, stop, acc, acc_type, init, fused, x, y)
        self.env[acc] = _acc_placeholder(acc, acc_type)
        return loop

    def uniform_bound(self, s: ir.Stmt, what: str, bound: ir.Expr) -> None:
        for x in _subexprs(bound):
            match x:
                case ir.BuiltinValue(which=w):
                    raise self.refuse(s, f"the k-loop {what} {format_expr(bound)} varies by "
                                      f"invocation (it uses {w.value})")
                case ir.Load(array=name):
                    raise self.refuse(s, f"the k-loop {what} reads {name}[...]: loop bounds "
                                      "must be scalar parameters and constants")
                case ir.Var(name=name) if name.startswith("%"):
                    raise self.refuse(s, f"the k-loop {what} {format_expr(bound)} depends on "
                                      "the accumulator or another loop")

    def update_body(self, body: tuple[ir.Stmt, ...], acc: str, acc_type: ElemType,
                    readable: set[str]) -> tuple[bool, _Operand, _Operand]:
        update: ir.Assign | None = None
        for s in body:
            self.line = s.line
            match s:
                case ir.Let(name=name, type=t, value=v) if update is None:
                    value = self.sym(v)
                    if any(isinstance(x, ir.Var) and x.name == ACC for x in _subexprs(value)):
                        raise self.refuse(s, f"{name!r} reads the accumulator inside the "
                                          "k-loop: it is read before the loop ends")
                    self.env[name] = value
                    self.types[name] = t
                case ir.Assign(name=name, value=v) if name == acc and update is None:
                    update = s
                case ir.Assign():
                    raise self.refuse(s, "two updates of the accumulator in the k-loop")
                case ir.Store(array=name):
                    raise self.refuse(s, f"a store to {name} inside the k-loop")
                case ir.If():
                    raise self.refuse(s, "a conditional inside the k-loop")
                case ir.For() | ir.While():
                    raise self.refuse(s, "a loop nested in the k-loop")
                case _:
                    raise self.refuse(s, f"the statement {s.kind!r} inside the k-loop")
        if update is None:
            raise _Refuse("the k-loop does not update the accumulator")
        self.line = update.line
        return self.match_update(update, self.sym(update.value), acc_type, readable)

    def match_update(self, s: ir.Stmt, value: ir.Expr, acc_type: ElemType,
                     readable: set[str]) -> tuple[bool, _Operand, _Operand]:
        def is_acc(e: ir.Expr) -> bool:
            return isinstance(e, ir.Var) and e.name == ACC

        fused = False
        match value:
            case ir.Binary(op=BinOp.ADD, a=a, b=prod) if is_acc(a):
                pass
            case ir.Binary(op=BinOp.ADD, a=prod, b=b) if is_acc(b):
                pass
            case ir.Call(fn=MathFn.FMA, args=(x, y, c)) if is_acc(c):
                fused, prod = True, ir.Binary(op=BinOp.MUL, a=x, b=y, type=value.type)
            case _:
                raise self.refuse(s, f"the update acc = {format_expr(value)} is not "
                                  "acc + A*B, A*B + acc or fma(A, B, acc)")
        if isinstance(prod, ir.Cast) and isinstance(prod.x, ir.Binary) \
                and prod.x.op is BinOp.MUL:
            raise self.refuse(s, f"the product is computed in {prod.x.type} and widened to the "
                              f"{acc_type} accumulator; widen the operands instead")
        if not (isinstance(prod, ir.Binary) and prod.op is BinOp.MUL):
            raise self.refuse(s, f"the update adds {format_expr(prod)}, which is not a product "
                              "of two array elements")
        for e in (prod.a, prod.b):
            if any(is_acc(x) for x in _subexprs(e)):
                raise self.refuse(s, "the product reads the accumulator")
        ox, oy = _operand(prod.a, readable), _operand(prod.b, readable)
        return fused, ox, oy

    def tiled(self, s: ir.For, inner: ir.For, acc: str, acc_type: ElemType, init: ir.Expr,
              start: ir.Expr, stop: ir.Expr) -> _Loop:
        if not (isinstance(s.step, ir.Const) and isinstance(s.step.value, int)
                and s.step.value > 0):
            raise self.refuse(s, f"the staged k-loop steps by {format_expr(s.step)}, not a "
                              "positive constant")
        tile = s.step.value
        if not (_is_zero(inner.start) and isinstance(inner.stop, ir.Const)
                and inner.stop.value == tile and _is_one(inner.step)):
            raise self.refuse(inner, f"the inner loop of the staged k-loop must be range({tile})")
        self.env[s.var] = ir.Var(name=_T, type=ElemType.I32)
        staged: dict[str, ir.Store] = {}
        fused, ox, oy = False, None, None
        phase = 0  # 0 staging, 1 after the first barrier, 2 after the inner loop, 3 done
        for x in s.body:
            self.line = x.line
            match x:
                case ir.Let(name=name, type=t, value=v):
                    self.env[name] = self.sym(v)
                    self.types[name] = t
                case ir.Store(array=name, index=i, value=v) if phase == 0:
                    if name not in self.shared:
                        raise self.refuse(x, f"a store to {name} inside the k-loop")
                    if name in staged:
                        raise self.refuse(x, f"two stores to the shared array {name!r} in one "
                                          "step")
                    staged[name] = ir.Store(array=name, index=self.sym(i), value=self.sym(v))
                case ir.Barrier() if phase in (0, 2):
                    phase += 1
                case ir.For() if x is inner and phase == 1:
                    self.env[inner.var] = ir.Var(name=_KK, type=ElemType.I32)
                    fused, ox, oy = self.update_body(inner.body, acc, acc_type,
                                                     set(self.arrays) | set(self.shared))
                    phase = 2
                case _:
                    raise self.refuse(x, "the staged k-loop must be: stores to shared arrays, "
                                      "barrier(), the inner loop, barrier()")
        if phase != 3:
            raise self.refuse(s, "the staged k-loop needs a barrier after the stores to shared "
                              "memory and another after the inner loop")
        assert ox is not None and oy is not None
        block = _staging_block(staged, self.shared)
        ux = self.unstage(ox, staged, block, tile)
        uy = self.unstage(oy, staged, block, tile)
        return _Loop(start, stop, acc, acc_type, init, fused, ux, uy, tile, block)

    def unstage(self, op: _Operand, staged: dict[str, ir.Store], block: tuple[int, int, int],
                tile: int) -> _Operand:
        """The operand with its shared-memory load replaced by the global load that staged it."""
        name = op.load.array
        if name in self.arrays:
            raise _Refuse(f"the staged k-loop reads {name} directly; stage both operands")
        if name not in staged:
            raise _Refuse(f"the k-loop reads the shared array {name!r}, which is not staged in "
                          "the same step")
        store = staged[name]
        digits = _digits(op.load.index, _thread_strides(store.index), block, tile)
        sigma = {f"thread_idx.{a}": d for a, d in digits.items()}
        value = _rebuild(store.value, lambda x: sigma.get(x.which.value)
                         if isinstance(x, ir.BuiltinValue) else None)
        inner = _operand(value, self.arrays)
        if inner.load.array not in self.arrays:
            raise _Refuse(f"the shared array {name!r} is staged from {inner.load.array!r}, not "
                          "from a global array")
        return _Operand(inner.load, op.conds + inner.conds, op.type)


def _walk(stmts: tuple[ir.Stmt, ...]) -> Iterator[ir.Stmt]:
    from sarek.ir_check import walk

    return walk(stmts)


def _effect_free(stmts: tuple[ir.Stmt, ...]) -> bool:
    return all(isinstance(s, ir.Let | ir.Return) for s in _walk(stmts))


_THREAD_KEYS = {f"@thread_idx.{a}": a for a in "xyz"}


def _raw_poly(e: ir.Expr) -> Poly:
    return _Normalizer(_Atoms(), {}, {}).poly(e)


def _thread_strides(index: ir.Expr) -> dict[str, int]:
    """The staging store's index as ``sum(stride * thread_idx.axis)``."""
    p = _raw_poly(index)
    out: dict[str, int] = {}
    for m, c in p.terms.items():
        if len(m) != 1 or m[0] not in _THREAD_KEYS or c <= 0:
            raise _Refuse(f"the staging store's index {format_expr(index)} is not a sum of "
                          "thread_idx coordinates times constants")
        out[_THREAD_KEYS[m[0]]] = c
    return out


def _staging_block(staged: dict[str, ir.Store],
                   shared: dict[str, ir.ArrayDecl]) -> tuple[int, int, int]:
    """The block shape for which the staging stores fill their arrays exactly once."""
    if not staged:
        raise _Refuse("the staged k-loop stores nothing to shared memory")
    shapes = set()
    for name, store in staged.items():
        strides = sorted(_thread_strides(store.index).items(), key=lambda kv: kv[1])
        extents = {"x": 1, "y": 1, "z": 1}
        size = shared[name].size
        for i, (axis, stride) in enumerate(strides):
            nxt = strides[i + 1][1] if i + 1 < len(strides) else size
            if (i == 0 and stride != 1) or nxt % stride:
                raise _Refuse(f"the staging store {name}[{format_expr(store.index)}] does not "
                              f"fill the {size} elements of {name!r} once per block")
            extents[axis] = nxt // stride
        shapes.add((extents["x"], extents["y"], extents["z"]))
    if len(shapes) > 1:
        raise _Refuse("the staging stores assume different block shapes")
    return shapes.pop()


def _digits(index: ir.Expr, strides: dict[str, int], block: tuple[int, int, int],
            tile: int) -> dict[str, ir.Expr]:
    """For a load from a staged array: which invocation staged the element, as an expression
    for each of its thread coordinates."""
    extent = dict(zip("xyz", block, strict=True))
    by_stride = {s: a for a, s in strides.items()}
    out: dict[str, ir.Expr] = {}
    problem = _Refuse(f"the load from shared memory at {format_expr(index)} does not read "
                      "one staged element per thread coordinate")
    for m, c in _raw_poly(index).terms.items():
        if len(m) != 1 or c not in by_stride:
            raise problem
        axis = by_stride[c]
        if axis in out:
            raise problem
        if m[0] == _KK and tile == extent[axis]:
            out[axis] = ir.Var(name=_KK, type=ElemType.I32)
        elif m[0] in _THREAD_KEYS and extent[_THREAD_KEYS[m[0]]] == extent[axis]:
            out[axis] = ir.BuiltinValue(which=Builtin(m[0][1:]))
        else:
            raise problem
    if set(out) != set(strides):
        raise problem
    return out


# --------------------------------------------------------------------------- the mapping


@dataclass(frozen=True)
class _Axis:
    """How the kernel combines block_idx.a and thread_idx.a."""

    uses_block: bool
    uses_thread: bool
    stride: Poly | None  # block_idx's multiplier when both are used


def _axes(polys: list[Poly], atoms: _Atoms) -> dict[str, _Axis]:
    """Finds, per launch axis, the global index the kernel's indices are built from."""
    every: list[Poly] = []
    for p in polys:
        every.append(p)
    for kind, payload in atoms.info.values():
        if kind in ("div", "rem"):
            num, den, _ = _quotient(payload)
            every.extend((num, den))
    out: dict[str, _Axis] = {}
    for a in "xyz":
        b, t, dim = f"@block_idx.{a}", f"@thread_idx.{a}", f"@block_dim.{a}"
        uses_b = uses_t = False
        stride: Poly | None = None
        for p in every:
            names = p.atoms()
            uses_b, uses_t = uses_b or b in names, uses_t or t in names
            if b not in names or t not in names:
                continue
            coefs, _, bad = p.split((b, t))
            if bad is not None:
                continue  # not affine: the coordinate analysis reports it with names
            s = _ratio(coefs[b], coefs[t], Poly.atom(dim))
            if s is None:
                raise _Refuse(f"block_idx.{a} and thread_idx.{a} are not combined as "
                              f"block_idx.{a} * block_dim.{a} + thread_idx.{a}")
            if stride is not None and s != stride:
                raise _Refuse(f"two different global indices along {a}")
            stride = s
        if uses_b or uses_t:
            out[a] = _Axis(uses_b, uses_t, stride)
    return out


def _ratio(cb: Poly, ct: Poly, dim: Poly) -> Poly | None:
    """``cb / ct`` when it is ``block_dim`` or a positive integer constant."""
    if cb == ct * dim:
        return dim
    lead = next(iter(ct.terms.items()), None)
    if lead is None:
        return None
    mono, c = lead
    q, r = divmod(cb.terms.get(mono, 0), c)
    if r == 0 and q > 0 and cb == ct * Poly.const(q):
        return Poly.const(q)
    return None


def _axis_subst(axes: dict[str, _Axis]) -> dict[str, Poly]:
    subst: dict[str, Poly] = {}
    for a, ax in axes.items():
        gid = Poly.atom(_GID[a])
        if ax.uses_block and ax.stride is not None:
            subst[f"@thread_idx.{a}"] = gid - ax.stride * Poly.atom(f"@block_idx.{a}")
        elif ax.uses_block:
            subst[f"@block_idx.{a}"] = gid
        else:
            subst[f"@thread_idx.{a}"] = gid
    return subst


def _global_index(a: str, ax: _Axis) -> GlobalIndex:
    tile = None
    if ax.stride is not None and ax.stride.constant is not None:
        tile = ax.stride.constant
    both = ax.uses_block and ax.stride is not None
    axis = cast(Literal["x", "y", "z"], a)  # the callers' axes are "x", "y" and "z"
    return GlobalIndex(axis=axis, uses_block=ax.uses_block,
                       uses_thread=both or not ax.uses_block, tile=tile)


@dataclass
class _Candidate:
    """One way of reading the indices as (row, col, batch)."""

    mapping: Mapping
    subst: dict[str, Poly]  # gid and div/rem atoms -> coordinates
    linear: Poly | None  # the linear index in coordinates (1-D mappings)


def _candidates(axes: dict[str, _Axis], atoms: _Atoms, used: set[str]) -> list[_Candidate]:
    batch = _global_index("z", axes["z"]) if "z" in axes else None
    zsub = {_GID["z"]: Poly.atom(BATCH)} if batch is not None else {}
    divs = [(n, k, _quotient(p)) for n, (k, p) in atoms.info.items()
            if k in ("div", "rem") and n in used]
    if divs:
        gids = {a for a in "xy" if a in axes}
        shapes = {(p[0].key(), p[1].key()) for _, _, p in divs}
        if len(shapes) > 1:
            raise _Refuse("the linear index is divided and reduced by different expressions")
        payload = divs[0][2]
        num, den, den_expr = payload
        lin_axes = [a for a in "xy" if num == Poly.atom(_GID[a])]
        if not lin_axes:
            raise _Refuse(f"an index divides by {format_expr(den_expr)} something other than "
                          "the global linear index: it is not affine")
        a = lin_axes[0]
        if gids - {a}:
            raise _Refuse(f"a 1-D mapping over {a} that also uses the {''.join(gids - {a})} "
                          "coordinates")
        names = {k: n for n, k, _ in divs}
        div = names.get("div") or atoms.intern("div", (num.key(), den.key()),
                                               (num, den, den_expr))
        rem = names.get("rem") or atoms.intern("rem", (num.key(), den.key()),
                                               (num, den, den_expr))
        lin = _global_index(a, axes[a])
        out = []
        orders: tuple[tuple[Literal["row-major", "col-major"], str, str], ...] = (
            ("row-major", ROW, COL), ("col-major", COL, ROW))
        for order, major, minor in orders:
            sub = {_GID[a]: Poly.atom(major) * den + Poly.atom(minor),
                   div: Poly.atom(major), rem: Poly.atom(minor), **zsub}
            out.append(_Candidate(Mapping1D(lin, den_expr, order, batch), sub,
                                  Poly.atom(major) * den + Poly.atom(minor)))
        return out
    out = []
    for r, c in (("y", "x"), ("x", "y")):
        if r not in axes or c not in axes:
            continue
        rix, cix = _global_index(r, axes[r]), _global_index(c, axes[c])
        sub = {_GID[r]: Poly.atom(ROW), _GID[c]: Poly.atom(COL), **zsub}
        out.append(_Candidate(Mapping2D(rix, cix, batch), sub, None))
    if not out:
        used_axes = " and ".join(a for a in "xy" if a in axes) or "none"
        raise _Refuse("the output's row and column do not come from two launch coordinates or "
                      f"from a divided linear index (coordinates used: {used_axes})")
    return out


# --------------------------------------------------------------------------- assembling


class _Assembler:
    """Reads the nest through one candidate mapping."""

    def __init__(self, nest: _Nest, cand: _Candidate, norm: _Normalizer, atoms: _Atoms,
                 kernel: ir.Kernel) -> None:
        self.nest = nest
        self.cand = cand
        self.norm = norm
        self.atoms = atoms
        self.kernel = kernel
        self.stage = 0  # how far this candidate got (to report the most telling refusal)
        self.memo: dict[int, ir.Expr] = {}

    def coords(self, e: ir.Expr) -> Poly:
        return self.norm.poly(e).subst(self.cand.subst)

    def affine(self, e: ir.Expr, coords: tuple[str, ...], what: str) -> tuple[dict[str, Poly],
                                                                                Poly]:
        p = self.coords(e)
        coefs, rest, bad = p.split(coords)
        if bad is not None:
            hits = [_COORD_NAMES.get(a, a) for a in bad if a in coords]
            raise _Refuse(f"{what} {format_expr(e)} is not affine: it multiplies "
                          f"{' by '.join(hits)}")
        for poly in (*coefs.values(), rest):
            self.check_uniform(poly, what, e)
        return coefs, rest

    def check_uniform(self, poly: Poly, what: str, e: ir.Expr) -> None:
        for a in poly.atoms():
            if a.startswith("@"):
                raise _Refuse(f"{what} {format_expr(e)} uses {a[1:]} other than through the "
                              "global index of a mapping")
            if a in (_P, _T, _KK):
                raise _Refuse(f"{what} {format_expr(e)} depends on the reduction index")
            if a.startswith("%"):
                raise _Refuse(f"{what} {format_expr(e)} uses the invocation's coordinates in a "
                              "way no mapping explains")
            if a.startswith("#") and self.atoms.info[a][0] != "expr":
                raise _Refuse(f"{what} {format_expr(e)} divides by an expression in a way no "
                              "mapping explains")

    def expr(self, p: Poly) -> ir.Expr:
        """A polynomial over parameters (and coordinates) as an i32 IR expression."""
        terms: list[tuple[int, ir.Expr | None]] = []
        for mono, c in sorted(p.terms.items(), key=lambda mc: (len(mc[0]) == 0, mc[0])):
            if not _I32_MIN <= c <= _I32_MAX:
                raise _Refuse(f"a coefficient ({c}) does not fit i32")
            factors = [self.atom_expr(a) for a in mono]
            prod: ir.Expr | None = None
            for f in factors:
                prod = f if prod is None else _mul(prod, f)
            terms.append((c, prod))
        if not terms:
            return _i32(0)
        out: ir.Expr | None = None
        for c, prod in terms:
            mag = abs(c)
            term = _i32(mag) if prod is None else prod if mag == 1 else _mul(prod, _i32(mag))
            if out is None:
                out = term if c > 0 else ir.Unary(op=UnOp.NEG, x=term, type=ElemType.I32)
            else:
                out = ir.Binary(op=BinOp.ADD if c > 0 else BinOp.SUB, a=out, b=term,
                                type=ElemType.I32)
        assert out is not None
        return out

    def atom_expr(self, a: str) -> ir.Expr:
        if a.startswith("#"):
            kind, payload = self.atoms.info[a]
            assert kind == "expr" and not isinstance(payload, tuple)
            return payload
        return ir.Var(name=a, type=ElemType.I32)

    # ------------------------------------------------------------------ pieces

    def access(self, load: ir.Load, coords: tuple[str, ...], what: str) -> Access:
        coefs, rest = self.affine(load.index, coords, what)
        zero = Poly({})
        red = coefs.get(_P, zero)
        if _T in coefs:
            if coefs[_T] != coefs[_KK]:
                raise _Refuse(f"{what} {format_expr(load.index)} weighs the step and the "
                              "position inside the step differently")
            red = coefs[_T]
        arr = self.kernel.param(load.array)
        return Access(load.array, arr.elem, self.expr(rest), self.expr(coefs.get(ROW, zero)),
                      self.expr(coefs.get(COL, zero)), self.expr(coefs.get(BATCH, zero)),
                      self.expr(red))

    def bounds(self, conds: list[ir.Expr]) -> dict[str, list[Poly]]:
        """Each guard conjunct as an upper bound on row, col, batch or the linear index."""
        out: dict[str, list[Poly]] = {ROW: [], COL: [], BATCH: [], "linear": []}
        for c in conds:
            for conj in _conjuncts(c):
                kind, bound = self.bound(conj)
                if kind:
                    out[kind].append(bound)
        return out

    def bound(self, conj: ir.Expr) -> tuple[str, Poly]:
        text = format_expr(conj)
        if not (isinstance(conj, ir.Binary) and conj.op in ir.COMPARISONS):
            raise _Refuse(f"the guard {text} is not a comparison")
        if conj.op in (BinOp.EQ, BinOp.NE):
            raise _Refuse(f"the guard {text} tests equality; a bounds guard compares with < "
                          "or >=")
        if not conj.a.type.is_int:
            raise _Refuse(f"the guard {text} compares {conj.a.type} values, not indices")
        for sub in _subexprs(conj):
            if isinstance(sub, ir.Load):
                raise _Refuse(f"the guard {text} reads memory: the store is conditional on data")
            if isinstance(sub, ir.Var) and sub.name == ACC:
                raise _Refuse(f"the guard {text} reads the accumulator")
        a, b = self.coords(conj.a), self.coords(conj.b)
        one = Poly.const(1)
        x = {BinOp.LT: a - b, BinOp.LE: a - b - one, BinOp.GT: b - a,
             BinOp.GE: b - a - one}[conj.op]  # the condition is x < 0
        coords = (ROW, COL, BATCH)
        if self.cand.linear is not None:
            rest = x - self.cand.linear
            _, _, bad = rest.split(coords)
            if bad is None and not (rest.atoms() & set(coords)):
                self.check_uniform(rest, "the guard", conj)
                return "linear", -rest
        coefs, rest, bad = x.split(coords)
        used = [k for k in coords if coefs[k].terms]
        if bad is not None or len(used) != 1:
            raise _Refuse(f"the guard {text} is not a bound on the row, the column, the batch "
                          "or the linear index")
        self.check_uniform(rest, "the guard", conj)
        k = used[0]
        alpha = coefs[k].constant
        if alpha == 1:
            return k, -rest
        if alpha == -1 and rest.constant is not None and rest.constant < 0:
            return "", rest  # a lower bound every index satisfies (row >= 0)
        raise _Refuse(f"the guard {text} is not an upper bound 'index < bound' on "
                      f"{_COORD_NAMES[k]}")

    def value(self, e: ir.Expr, what: str) -> ir.Expr:
        """An initial value or epilogue over placeholders and parameters."""
        c = self.c_access

        def leaf(x: ir.Expr) -> ir.Expr | None:
            match x:
                case ir.Load(array=name, index=i):
                    if name not in self.arrays:
                        raise _Refuse(f"{what} reads the {name!r} array, which is not a "
                                      "parameter")
                    acc = self.access(x, (ROW, COL, BATCH), f"{what}'s read of {name} at")
                    if name == c.array and acc != c:
                        raise _Refuse(f"{what} reads {name} at {format_expr(i)}, another "
                                      "element than the one the invocation writes")
                    z = ir.Var(name=BATCH, type=ElemType.I32)
                    index = acc.address(ir.Var(name=ROW, type=ElemType.I32),
                                        ir.Var(name=COL, type=ElemType.I32), z, _i32(0))
                    return x.model_copy(update={"index": index})
                case ir.Var(name=name) if name in (_P, _T, _KK):
                    raise _Refuse(f"{what} depends on the reduction index")
                case _ if x.type.is_int and not _uniform(x) and not any(
                        isinstance(y, ir.Load) or (isinstance(y, ir.Var) and y.name == ACC)
                        for y in _subexprs(x)):
                    p = self.coords(x)
                    for a in p.atoms():
                        if a not in (ROW, COL, BATCH):
                            self.check_uniform(Poly.atom(a), what, x)
                    return self.expr(p)
            return None

        out = _rebuild(e, leaf, self.memo)
        if _size(out) > _MAX_NODES:
            raise _Refuse(f"{what} expands to more than {_MAX_NODES} operations")
        return out

    def run(self) -> Gemm:
        nest, loop = self.nest, self.nest.loop
        self.arrays = {p.name: p for p in self.kernel.params if isinstance(p, ir.ArrayParam)}
        red = (_T, _KK) if loop.tile is not None else (_P,)
        coords = (ROW, COL, BATCH, *red)
        store = nest.store
        coefs, rest = self.affine(store.index, (ROW, COL, BATCH), "the store index")
        self.c_access = Access(store.array, self.kernel.param(store.array).elem,
                               self.expr(rest), self.expr(coefs[ROW]), self.expr(coefs[COL]),
                               self.expr(coefs[BATCH]), _i32(0))
        self.stage = 1
        ax = self.access(loop.x.load, coords, "the operand index")
        ay = self.access(loop.y.load, coords, "the operand index")
        if _is_zero(ax.col_stride) and _is_zero(ay.row_stride):
            a, b, oa, ob = ax, ay, loop.x, loop.y
        elif _is_zero(ay.col_stride) and _is_zero(ax.row_stride):
            a, b, oa, ob = ay, ax, loop.y, loop.x
        else:
            raise _Refuse("the product is not A[row, p] * B[p, col]: "
                          f"{format_expr(loop.x.load)} and {format_expr(loop.y.load)} do not "
                          "split into one factor without the column and one without the row")
        if store.array in (a.array, b.array):
            # Lockstep simulation would give an answer, but on a GPU an invocation's store can
            # land before or after another invocation's loads of that element: a race.
            role = "A" if store.array == a.array else "B"
            raise _Refuse(f"the output {store.array} is also the operand {role} of the product: "
                          "invocations would overwrite elements that others still read (a race "
                          "on a GPU); write the result to another array")
        if all(_is_zero(s) for s in (a.row_stride, b.col_stride)):
            raise _Refuse("the product depends on neither the output's row nor its column")
        self.stage = 2
        bounds = self.bounds(nest.guards)
        self.stage = 3
        k_stop_poly = self.norm.poly(loop.stop) if loop.stop.type.is_int else None
        self.check_operand_conds(oa, ob, bounds, k_stop_poly, loop)
        self.stage = 4
        init = self.value(loop.init, "the initial value")
        epilogue = self.value(store.value, "the stored value")
        if not any(isinstance(x, ir.Var) and x.name == ACC for x in _subexprs(epilogue)):
            raise _Refuse("the stored value does not use the accumulator")
        if a.elem != b.elem:
            raise _Refuse(f"the operands have different element types: {a.array} is {a.elem}, "
                          f"{b.array} is {b.elem}")

        def bound(kind: str) -> ir.Expr | None:
            polys = bounds[kind]
            if not polys:
                return None
            exprs = [self.expr(p) for p in dict.fromkeys(polys)]
            out = exprs[0]
            for e in exprs[1:]:
                out = ir.Call(fn=MathFn.MIN, args=(out, e), type=ElemType.I32)
            return out

        staging: Staging | None = None
        if loop.tile is not None:
            assert loop.block is not None  # tiled() sets the tile and the block together
            staging = Staging(loop.tile, loop.block)
        return Gemm(
            kernel=self.kernel.name, params=tuple(self.kernel.params), mapping=self.cand.mapping,
            a=a, b=b, c=self.c_access, m=bound(ROW), n=bound(COL), batches=bound(BATCH),
            linear_bound=bound("linear"), k_start=loop.start, k_stop=loop.stop,
            acc_type=loop.acc_type, fused=loop.fused, init=init, epilogue=epilogue,
            staging=staging)

    def check_operand_conds(self, oa: _Operand, ob: _Operand, bounds: dict[str, list[Poly]],
                            k_stop: Poly | None, loop: _Loop) -> None:
        """Conditions that zero an operand must hold wherever the output is covered and the
        reduction index is below the loop's stop; past the stop (the staged form's last step)
        the product must vanish."""
        padded: list[bool] = []
        red = (_T, _KK) if loop.tile is not None else (_P,)
        for op in (oa, ob):
            pads = False
            for c in op.conds:
                for conj in _conjuncts(c):
                    if self.red_bound(conj, red, k_stop):
                        pads = True
                        continue
                    kind, bound = self.bound(conj)
                    if kind and bound not in bounds[kind]:
                        raise _Refuse(f"the operand is zeroed by {format_expr(conj)}, which the "
                                      "bounds guard does not imply")
            padded.append(pads)
        if loop.tile is None:
            return
        floats = loop.acc_type.is_float
        if (floats and not all(padded)) or not any(padded):
            raise _Refuse("the staged k-loop runs past the loop's stop without zeroing "
                          + ("both operands" if floats else "an operand"))
        init = loop.init
        if floats and not (isinstance(init, ir.Const)
                           and not (init.value == 0 and math.copysign(1.0, init.value) < 0)):
            raise _Refuse("the staged k-loop adds +0.0 products past the loop's stop, which "
                          "would turn an initial -0.0 into +0.0; its initial value must be a "
                          "constant other than -0.0")

    def red_bound(self, conj: ir.Expr, red: tuple[str, ...], k_stop: Poly | None) -> bool:
        if not (isinstance(conj, ir.Binary) and conj.op in (BinOp.LT, BinOp.GT)
                and conj.a.type.is_int):
            return False
        a, b = self.coords(conj.a), self.coords(conj.b)
        x = a - b if conj.op is BinOp.LT else b - a
        coefs, rest, bad = x.split(red)
        if bad is not None or any(coefs[r] != Poly.const(1) for r in red):
            return False
        return k_stop is not None and -rest == k_stop


def _conjuncts(c: ir.Expr) -> Iterator[ir.Expr]:
    """The conjuncts of a condition, negations pushed inward."""
    match c:
        case ir.Binary(op=BinOp.LAND, a=a, b=b):
            yield from _conjuncts(a)
            yield from _conjuncts(b)
        case ir.Unary(op=UnOp.NOT, x=ir.Binary(op=BinOp.LOR, a=a, b=b)):
            yield from _conjuncts(ir.Unary(op=UnOp.NOT, x=a, type=ElemType.BOOL))
            yield from _conjuncts(ir.Unary(op=UnOp.NOT, x=b, type=ElemType.BOOL))
        case ir.Unary(op=UnOp.NOT, x=ir.Unary(op=UnOp.NOT, x=x)):
            yield from _conjuncts(x)
        case ir.Unary(op=UnOp.NOT, x=ir.Binary(op=op, a=a, b=b)) if op in _FLIP \
                and a.type.is_int:
            yield ir.Binary(op=_FLIP[op], a=a, b=b, type=ElemType.BOOL)
        case ir.Binary(op=BinOp.LOR):
            raise _Refuse(f"the guard {format_expr(c)} uses 'or'; a bounds guard is a "
                          "conjunction")
        case _:
            yield c


_FLIP = {BinOp.LT: BinOp.GE, BinOp.GE: BinOp.LT, BinOp.LE: BinOp.GT, BinOp.GT: BinOp.LE,
         BinOp.EQ: BinOp.NE, BinOp.NE: BinOp.EQ}


# --------------------------------------------------------------------------- entry point


def recognize(kernel: ir.Kernel | object) -> Gemm:
    """The GEMM nest of ``kernel`` (an ``ir.Kernel`` or a ``@sarek.kernel`` function).

    Raises ``NotAGemm`` with the reason, naming the construct and its source line, when the
    kernel is not one of the shapes ``specs/matrix-pattern-rewrite.md`` lists.
    """
    k = getattr(kernel, "ir", kernel)
    if not isinstance(k, ir.Kernel):
        raise NotAGemm(f"expected a sarek.ir.Kernel or a @sarek.kernel function, got "
                       f"{type(kernel).__name__}")
    try:
        problems = ir.check(k)
    except RecursionError:
        raise NotAGemm(_TOO_DEEP) from None
    if problems:
        raise NotAGemm(f"the kernel is not well-formed: {problems[0]}", problems[0].line)
    structure: _Structure | None = None
    try:
        structure = _Structure(k)
        nest = structure.run()
    except _Refuse as e:
        raise NotAGemm(e.reason, structure.line if structure else None) from None
    except RecursionError:
        raise NotAGemm(_TOO_DEEP) from None
    try:
        return _assemble(k, nest)
    except _Refuse as e:
        raise NotAGemm(e.reason, nest.line) from None
    except RecursionError:
        raise NotAGemm(_TOO_DEEP, nest.line) from None


_TOO_DEEP = "the kernel's expressions are nested too deeply to analyse"


def _index_exprs(nest: _Nest) -> list[ir.Expr]:
    """Every integer expression the mapping analysis must explain."""
    loop = nest.loop
    out: list[ir.Expr] = [nest.store.index, loop.x.load.index, loop.y.load.index]
    for c in (*nest.guards, *loop.x.conds, *loop.y.conds):
        for x in _subexprs(c):
            if isinstance(x, ir.Binary) and x.op in ir.COMPARISONS and x.a.type.is_int:
                out.extend((x.a, x.b))
    for v in (loop.init, nest.store.value):
        for x in _subexprs(v):
            if isinstance(x, ir.Load):
                out.append(x.index)
            elif x.type.is_int and isinstance(x, ir.BuiltinValue):
                out.append(x)
    return out


def _assemble(k: ir.Kernel, nest: _Nest) -> Gemm:
    params = {p.name: p.elem for p in k.params if isinstance(p, ir.ScalarParam)}
    atoms = _Atoms()
    seen: list[Poly] = []
    raw = _Normalizer(atoms, {}, params, seen)
    exprs = _index_exprs(nest)
    for e in exprs:
        raw.poly(e)
    axes = _axes(seen, atoms)
    norm = _Normalizer(atoms, _axis_subst(axes), params)
    used: set[str] = set()
    for e in exprs:
        used |= norm.poly(e).atoms()
    for name in list(used):
        if name in atoms.info and atoms.info[name][0] in ("div", "rem"):
            used.add(name)
    best: tuple[int, _Refuse] | None = None
    found: list[Gemm] = []
    for cand in _candidates(axes, atoms, used):
        asm = _Assembler(nest, cand, norm, atoms, k)
        try:
            found.append(asm.run())
        except _Refuse as e:
            if best is None or asm.stage > best[0]:
                best = (asm.stage, e)
    if found:
        # Two mappings can describe one kernel (one is the transpose of the other); prefer
        # the one whose A comes before B in the parameter list, as users name them.
        order = [p.name for p in k.params]
        return min(found, key=lambda g: order.index(g.a.array) > order.index(g.b.array))
    assert best is not None
    raise best[1]
