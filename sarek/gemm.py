"""What a recognized GEMM nest computes: the ``Gemm`` description that
``sarek.matrix_pattern.recognize`` returns (its mapping from invocations to outputs, its affine
accesses, bounds, reduction, initial value and epilogue), and ``NotAGemm``, the refusal.

Placeholders. The initial value and the epilogue are expressions over ``ROW``, ``COL``, ``BATCH``
(the output's coordinates) and, for the epilogue, ``ACC`` (the finished sum); they are ``Var``
nodes whose names cannot clash with a Python identifier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from sarek import ir
from sarek.errors import SarekError
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_build import binary, const, is_literal, mul
from sarek.ir_format import format_expr
from sarek.ir_walk import distinct_subexpressions, substitute

ACC, ROW, COL, BATCH = "%acc", "%row", "%col", "%batch"


class NotAGemm(SarekError):
    """The kernel is not a GEMM nest sarek can rewrite; ``reason`` names the construct."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.construct = reason
        self.line = line


@dataclass(frozen=True)
class ThreadSplit:
    """A 1-D block read as a tile ``width`` invocations wide: the part of ``thread_idx.axis`` an
    index uses, ``thread_idx.axis // width`` (``div``, the tile row) or
    ``thread_idx.axis % width`` (``rem``, the tile column)."""

    axis: Literal["x", "y", "z"]
    width: int
    part: Literal["div", "rem"]

    def expr(self) -> ir.Expr:
        """The part as the IR expression the kernel computes."""
        thread = ir.BuiltinValue(which=Builtin(f"thread_idx.{self.axis}"))
        return binary(BinOp.DIV if self.part == "div" else BinOp.REM, thread, const(self.width))


@dataclass(frozen=True)
class GlobalIndex:
    """A global invocation index along one launch axis: ``block_idx.a * S + thread_idx.a`` where
    ``S`` is ``block_dim.a`` (or the constant ``tile`` of a kernel written for one block size),
    or ``block_idx.a`` alone, or ``thread_idx.a`` alone. With ``split``, the thread part is a
    part of a 1-D block's index instead (``block_idx.a * tile + thread_idx.x // width``)."""

    axis: Literal["x", "y", "z"]
    uses_block: bool = True
    uses_thread: bool = True
    tile: int | None = None
    split: ThreadSplit | None = None

    def expr(self) -> ir.Expr:
        """The index as the IR expression the kernel computes."""
        block = ir.BuiltinValue(which=Builtin(f"block_idx.{self.axis}"))
        thread: ir.Expr = (self.split.expr() if self.split is not None
                           else ir.BuiltinValue(which=Builtin(f"thread_idx.{self.axis}")))
        if not self.uses_block:
            return thread
        if not self.uses_thread:
            return block
        stride: ir.Expr = (const(self.tile) if self.tile is not None
                           else ir.BuiltinValue(which=Builtin(f"block_dim.{self.axis}")))
        return binary(BinOp.ADD, mul(block, stride), thread)


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
        terms = [coord if is_literal(stride, 1) else mul(coord, stride)
                 for coord, stride in ((row, self.row_stride), (col, self.col_stride),
                                       (batch, self.batch_stride), (p, self.red_stride))
                 if not is_literal(stride, 0)]
        if not is_literal(self.offset, 0) or not terms:
            terms.insert(0, self.offset)
        out = terms[0]
        for term in terms[1:]:
            out = binary(BinOp.ADD, out, term)
        return out


@dataclass(frozen=True)
class SplitTerms:
    """f32 operands that the conversion pre-pass split into bf16 terms (hi, mid, lo), each
    term of each operand in a temporary of its own (``sarek.rewrite.prepass``): ``a`` and
    ``b`` are the terms' accesses, hi first, and ``original_a`` and ``original_b`` the
    kernel's own f32 operands, which the outputs a lowering recomputes as the original does
    read."""

    a: tuple[Access, ...]
    b: tuple[Access, ...]
    original_a: Access
    original_b: Access


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
    # A and B are the stacked byte planes of int32 operands that the conversion pre-pass
    # wrote (``sarek.matrix_scheme.STACKED_PLANES``), never a recognized kernel's own arrays
    stacked_planes: bool = False
    # A and B are the first terms of f32 operands split by the pre-pass; ``split_terms`` has
    # them all and the original operands
    split_terms: SplitTerms | None = None

    @property
    def operand_elt(self) -> ElemType:
        """The element type of A and B (they are always the same)."""
        return self.a.elem

    @property
    def a_layout(self) -> str:
        """A's layout: ``row`` (reduction stride 1), ``col`` (row stride 1) or ``strided``."""
        return _layout(self.a.red_stride, self.a.row_stride)

    @property
    def b_layout(self) -> str:
        """B's layout: ``row`` (column stride 1), ``col`` (reduction stride 1) or ``strided``."""
        return _layout(self.b.col_stride, self.b.red_stride)

    @property
    def c_layout(self) -> str:
        """C's layout: ``row`` (column stride 1), ``col`` (row stride 1) or ``strided``."""
        return _layout(self.c.col_stride, self.c.row_stride)

    @property
    def reads_c(self) -> bool:
        """Whether the initial value or the epilogue reads C's old value."""
        return any(isinstance(x, ir.Load) and x.array == self.c.array
                   for e in (self.init, self.epilogue) for x in distinct_subexpressions(e))

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


def _layout(unit_stride: ir.Expr, other_stride: ir.Expr) -> str:
    """``row`` when the first stride is 1, ``col`` when the second is, else ``strided``."""
    if is_literal(unit_stride, 1):
        return "row"
    return "col" if is_literal(other_stride, 1) else "strided"


def _show_access(access: Access, coords: tuple[str, ...]) -> str:
    names = [ir.Var(name=name, type=ElemType.I32) for name in coords]
    return format_expr(access.address(*names))


def _show_mapping(mapping: Mapping) -> str:
    match mapping:
        case Mapping2D(row=row, col=col, batch=batch):
            text = f"2-D: row = {format_expr(row.expr())}, col = {format_expr(col.expr())}"
        case Mapping1D(linear=linear, divisor=divisor, order=order, batch=batch):
            index, shown_divisor = format_expr(linear.expr()), format_expr(divisor)
            major, minor = ("row", "col") if order == "row-major" else ("col", "row")
            text = (f"1-D {order}: id = {index}, {major} = id // {shown_divisor}, "
                    f"{minor} = id % {shown_divisor}")
    if batch is not None:
        text += f", batch = {format_expr(batch.expr())}"
    return text


def _show_bounds(gemm: Gemm) -> str:
    parts = [f"{what} < {format_expr(bound)}" for what, bound in
             (("row", gemm.m), ("col", gemm.n), ("batch", gemm.batches),
              ("linear id", gemm.linear_bound))
             if bound is not None]
    return ", ".join(parts) or "none (the launch alone decides)"
