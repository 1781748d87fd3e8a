"""Lowering for CUDA: staged copies into ``cp.async`` 16-byte copies.

A ``StageCopy`` whose rows are contiguous in global memory (a column stride of the literal 1)
and whose columns split into 16-byte chunks becomes, for each chunk a thread of the block
takes (chunk ``e = trip * threads + thread``, row-major over the tile):

* one lane-explicit ``CpAsync`` when the whole chunk lies inside the limits and both its
  source and its destination element indices are multiples of the chunk (16-byte aligned,
  global arrays being whole allocations);
* otherwise the chunk's elements one by one, as ``sarek.stage_copy`` copies them (read
  inside the limits, the fill outside, stored at once).

Any other staged copy becomes ``sarek.stage_copy.element_copy``. ``StageCommit`` and
``StageWait`` stay: they print as ``cp.async.commit_group`` and ``cp.async.wait_group``.
Copies marked ``bulk`` are first issued as bulk tensor copies where ``backends.cuda.tma``
can (the copies it leaves, of regions a tensor map cannot describe, are lowered here).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from backends.cuda import tma
from backends.cuda.wgmma import CoreLayout
from sarek import dtypes, ir
from sarek.ir import BinOp, ElemType
from sarek.ir_build import add, binary, const, is_literal, mul, var
from sarek.ir_walk import replace_statements
from sarek.stage_copy import (
    Place,
    destination,
    element_copy,
    element_store,
    linear_thread,
    source_index,
    spread,
)

COPY_BYTES = 16
I32 = ElemType.I32


def lower(kernel: ir.Kernel, places: Mapping[str, CoreLayout] | None = None) -> ir.Kernel:
    """``kernel`` with its staged copies lowered (as it is when it has none); a copy into an
    array of ``places`` puts its tile in that array's core layout (``backends.cuda.wgmma``)."""
    block, places = kernel.block, places or {}
    if block is None:
        return kernel
    kernel = tma.lower(kernel, dict(places))

    def lowered(s: ir.Stmt) -> list[ir.Stmt] | None:
        if not isinstance(s, ir.StageCopy):
            return None
        layout = places.get(s.dst)
        place = None if layout is None else (
            lambda row, col: layout.element(s.dst_offset, row, col))
        return [copy(s, block, place)]

    body = replace_statements(kernel.body, lowered)
    return kernel if body == kernel.body else kernel.model_copy(update={"body": body})


def chunk(elem: ElemType) -> int:
    """Elements per 16-byte copy."""
    return COPY_BYTES // dtypes.numpy_dtype(elem).itemsize


def vectorizable(s: ir.StageCopy) -> bool:
    """Whether tile rows are contiguous in memory and split into whole 16-byte chunks that
    land unchanged (``cp.async`` converts nothing)."""
    width = chunk(s.fill.type)
    return s.part is None and is_literal(s.src_col_stride, 1) and s.cols % width == 0


def copy(s: ir.StageCopy, block: tuple[int, int, int], place: Place | None = None
         ) -> ir.Stmt:
    """One staged copy for a block of shape ``block``: when the whole tile is inside the
    limits and its rows start aligned (a condition the same for the whole block), every chunk
    is one ``CpAsync`` without further checks; otherwise each chunk is checked. Elements land
    at ``place(row, col)`` where given (a layout that keeps each 16-byte chunk whole)."""
    if place is None:
        def place(row: ir.Expr, col: ir.Expr) -> ir.Expr:
            return destination(s, row, col)
    if not vectorizable(s):
        return element_copy(s, block, place)
    width = chunk(s.fill.type)
    per_row = s.cols // width
    row, col = var("sk_cr"), var("sk_cc")
    source, target = var("sk_csrc"), var("sk_cdst")

    def aligned(index: ir.Expr) -> ir.Expr:
        low = binary(BinOp.AND, index, const(width - 1))
        return binary(BinOp.EQ, low, const(0))

    def both(a: ir.Expr, b: ir.Expr) -> ir.Expr:
        return binary(BinOp.LAND, a, b)

    def chunks(body: list[ir.Stmt]) -> ir.For:
        return spread(s.rows * per_row, math.prod(block), linear_thread(block), [
            ir.Let(name="sk_cr", type=I32,
                   value=binary(BinOp.DIV, var("sk_ce"), const(per_row))),
            ir.Let(name="sk_cc", type=I32,
                   value=mul(binary(BinOp.REM, var("sk_ce"), const(per_row)), const(width))),
            ir.Let(name="sk_csrc", type=I32, value=source_index(s, row, col)),
            ir.Let(name="sk_cdst", type=I32, value=place(row, col)),
            *body], "sk_ce")

    cp_async = ir.CpAsync(dst=s.dst, dst_index=target, src=s.src, src_index=source,
                          line=s.line)
    whole = both(binary(BinOp.LT, row, s.row_limit),
                 binary(BinOp.LE, add(col, const(width)), s.col_limit))
    fast = both(whole, both(aligned(source), aligned(target)))
    one_by_one = tuple(element_store(s, row, add(col, const(j)), place(row, add(col, const(j))))
                       for j in range(width))
    checked = chunks([ir.If(cond=fast, then=(cp_async,), orelse=one_by_one)])
    if s.dst_pitch % width:
        return checked
    # Every chunk passes ``fast`` when the tile is whole and its first row's start, the row
    # stride and the destination offset are multiples of the chunk.
    tile_whole = both(binary(BinOp.GE, s.row_limit, const(s.rows)),
                      binary(BinOp.GE, s.col_limit, const(s.cols)))
    starts = [aligned(x) for x in (s.src_offset, s.src_row_stride, s.dst_offset)
              if not (isinstance(x, ir.Const) and int(x.value) % width == 0)]
    cond = tile_whole
    for start in starts:
        cond = both(cond, start)
    return ir.If(cond=cond, then=_unchecked(s, block, per_row, width, place),
                 orelse=(checked,))


def _unchecked(s: ir.StageCopy, block: tuple[int, int, int], per_row: int, width: int,
               place: Place) -> tuple[ir.Stmt, ...]:
    """Every chunk of a whole, aligned tile as one ``CpAsync``. When the block's threads
    cover whole rows of chunks, a thread's chunks lie in one column, ``threads / per_row``
    rows apart: their addresses are its first chunk's plus a constant step per trip."""
    threads = math.prod(block)
    chunks = s.rows * per_row
    thread = linear_thread(block)
    if threads % per_row:
        return (spread(chunks, threads, thread, [
            ir.Let(name="sk_cr", type=I32, value=binary(BinOp.DIV, var("sk_ce"), const(per_row))),
            ir.Let(name="sk_cc", type=I32,
                   value=mul(binary(BinOp.REM, var("sk_ce"), const(per_row)), const(width))),
            _cp_async(s, var("sk_cr"), var("sk_cc"), place)], "sk_ce"),)
    rows_apart = threads // per_row
    first = [
        ir.Let(name="sk_cr", type=I32, value=binary(BinOp.DIV, thread, const(per_row))),
        ir.Let(name="sk_cc", type=I32,
               value=mul(binary(BinOp.REM, thread, const(per_row)), const(width))),
    ]
    row = add(var("sk_cr"), mul(var("sk_cq"), const(rows_apart)))
    body: list[ir.Stmt] = [_cp_async(s, row, var("sk_cc"), place)]
    if chunks % threads:
        body = [ir.If(cond=binary(BinOp.LT, row, const(s.rows)), then=tuple(body))]
    return (*first, ir.For(var="sk_cq", start=const(0), stop=const(math.ceil(chunks / threads)),
                           step=const(1), body=tuple(body)))


def _cp_async(s: ir.StageCopy, row: ir.Expr, col: ir.Expr, place: Place) -> ir.CpAsync:
    return ir.CpAsync(dst=s.dst, dst_index=place(row, col), src=s.src,
                      src_index=source_index(s, row, col), line=s.line)
