"""Staged copies as plain statements: what ``StageCopy`` means on a target whose copies are
synchronous, and in the simulator's neutral kernel.

``element_copy`` spreads the tile over the block's invocations, one element per invocation and
trip (element ``e = trip * threads + thread``, row ``e / cols``, column ``e % cols``), each
read inside the limits and ``fill`` outside, and stored at once. The group statements
(``StageCommit``, ``StageWait``) order nothing when every copy is complete as it is issued, so
``synchronous`` drops them. A target with asynchronous copies (CUDA's ``cp.async``) lowers
``StageCopy`` itself and keeps the group statements.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_build import add, binary, const, is_literal, mul, var
from sarek.ir_walk import replace_statements, walk

I32 = ElemType.I32


def linear_thread(block: tuple[int, int, int]) -> ir.Expr:
    """The invocation's index in its block (x fastest), for a kernel written for ``block``."""
    def builtin(which: Builtin) -> ir.Expr:
        return ir.BuiltinValue(which=which)

    out = builtin(Builtin.THREAD_IDX_X)
    if block[1] * block[2] > 1:
        y = add(builtin(Builtin.THREAD_IDX_Y),
                mul(const(block[1]), builtin(Builtin.THREAD_IDX_Z)))
        out = add(out, mul(const(block[0]), y))
    return out


def source_index(s: ir.StageCopy, row: ir.Expr, col: ir.Expr) -> ir.Expr:
    """The element of ``s.src`` that tile element (``row``, ``col``) reads."""
    def scaled(x: ir.Expr, stride: ir.Expr) -> ir.Expr:
        return x if is_literal(stride, 1) else mul(x, stride)

    return add(add(s.src_offset, scaled(row, s.src_row_stride)), scaled(col, s.src_col_stride))


def inside(s: ir.StageCopy, row: ir.Expr, col: ir.Expr) -> ir.Expr:
    """Whether tile element (``row``, ``col``) is read (else it is ``s.fill``)."""
    return binary(BinOp.LAND, binary(BinOp.LT, row, s.row_limit),
                  binary(BinOp.LT, col, s.col_limit))


def destination(s: ir.StageCopy, row: ir.Expr, col: ir.Expr) -> ir.Expr:
    """The element of ``s.dst`` where tile element (``row``, ``col``) lands."""
    return add(s.dst_offset, add(mul(row, const(s.dst_pitch)), col))


def _cast(x: ir.Expr, t: ElemType) -> ir.Expr:
    return x if x.type == t else ir.Cast(x=x, type=t)


SPLITS = {(ElemType.F32, ElemType.BF16): 3, (ElemType.F16, ElemType.BF16): 1,
          (ElemType.F32, ElemType.F16): 1, (ElemType.I32, ElemType.U8): 4,
          (ElemType.U32, ElemType.U8): 4}
"""How many parts a staged copy may split an element of each (source, destination) type
into: three bf16 terms of an f32 (``Bf16x3_operands``), one narrower float, four byte
planes of a 32-bit integer."""


def part(x: ir.Expr, index: int, into: ElemType) -> ir.Expr:
    """Part ``index`` of the value ``x`` split into ``into``. For a float ``into``, the terms
    of ``x`` rounded to nearest even: term 0 is ``into(x)``, term i+1 is ``into(r)`` of the
    residual ``r = r' - f32(term i)`` (``r'`` the residual of term i, ``f32(x)`` for term 0;
    every residual is exact in f32): the bf16 terms hi, mid and lo of ``Bf16x3_operands``. For
    u8, byte
    ``index`` of a 32-bit integer's two's complement pattern, least significant first (other
    integers: ``into(x)``)."""
    if into is ElemType.U8 and x.type.is_int and x.type.bits == 32:
        u = _cast(x, ElemType.U32)
        shifted = binary(BinOp.SHR, u, const(8 * index, ElemType.U32)) if index else u
        return _cast(binary(BinOp.AND, shifted, const(255, ElemType.U32)), ElemType.U8)
    if index == 0:
        return _cast(x, into)
    residual = _cast(x, ElemType.F32)
    for _ in range(index):
        residual = binary(BinOp.SUB, residual, _cast(_cast(residual, into), ElemType.F32))
    return _cast(residual, into)


def element_store(s: ir.StageCopy, row: ir.Expr, col: ir.Expr, at: ir.Expr | None = None
                  ) -> ir.Store:
    """Tile element (``row``, ``col``) into ``s.dst`` (at ``at`` where a target lays the
    tile out otherwise): read inside the limits, else the fill; as part ``s.part`` of it
    where the copy splits its elements."""
    elem = s.fill.type
    value: ir.Expr = ir.Select(cond=inside(s, row, col),
                               a=ir.Load(array=s.src, index=source_index(s, row, col),
                                         type=elem),
                               b=s.fill, type=elem)
    where = destination(s, row, col) if at is None else at
    if s.part is not None:
        value = part(value, s.part.index, s.part.into)
    return ir.Store(array=s.dst, index=where, value=value, line=s.line)


def landed_type(s: ir.StageCopy) -> ElemType:
    """The element type ``s`` lands in its destination: the source's, or that of its part."""
    return s.fill.type if s.part is None else s.part.into


def spread(items: int, threads: int, thread: ir.Expr, body: list[ir.Stmt], index: str
           ) -> ir.For:
    """``for q in range(ceil(items / threads)): index = q * threads + thread; body`` with the
    body guarded by ``index < items`` when the items do not divide among the threads."""
    e = add(mul(var("sk_cq"), const(threads)), thread)
    inner: tuple[ir.Stmt, ...] = tuple(body)
    if items % threads:
        inner = (ir.If(cond=binary(BinOp.LT, var(index), const(items)), then=inner),)
    return ir.For(var="sk_cq", start=const(0), stop=const(math.ceil(items / threads)),
                  step=const(1), body=(ir.Let(name=index, type=I32, value=e), *inner))


Place = Callable[[ir.Expr, ir.Expr], ir.Expr]
"""Where a target puts tile element (row, column) in the destination array."""


def element_copy(s: ir.StageCopy, block: tuple[int, int, int], place: Place | None = None
                 ) -> ir.For:
    """``s`` as a loop of single-element copies over a block of shape ``block`` (each element
    at ``place(row, col)`` where given, else where ``s`` says)."""
    cols = const(s.cols)
    row, col = var("sk_cr"), var("sk_cc")
    return spread(s.rows * s.cols, math.prod(block), linear_thread(block), [
        ir.Let(name="sk_cr", type=I32, value=binary(BinOp.DIV, var("sk_ce"), cols)),
        ir.Let(name="sk_cc", type=I32, value=binary(BinOp.REM, var("sk_ce"), cols)),
        element_store(s, row, col, None if place is None else place(row, col)),
    ], "sk_ce")


def synchronous(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every ``StageCopy`` an ``element_copy`` and the group statements
    dropped (a kernel without staged copies comes back as it is)."""
    if kernel.block is None or not _has_stages(kernel.body):
        return kernel
    return kernel.model_copy(update={"body": _expand(kernel.body, kernel.block)})


_GROUPS = (ir.StageCommit, ir.StageWait)


def _has_stages(body: tuple[ir.Stmt, ...]) -> bool:
    return any(isinstance(s, (ir.StageCopy, *_GROUPS)) for s in walk(body))


def _expand(body: tuple[ir.Stmt, ...], block: tuple[int, int, int]) -> tuple[ir.Stmt, ...]:
    def synchronous_copy(s: ir.Stmt) -> list[ir.Stmt] | None:
        if isinstance(s, ir.StageCopy):
            return [element_copy(s, block)]
        return [] if isinstance(s, _GROUPS) else None

    return replace_statements(body, synchronous_copy)
