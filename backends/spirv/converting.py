"""Staged copies that convert as they land, for Vulkan.

Where a pipelined schedule stages an operand that its lowering converts (Bf16's and Bf16x3's
f32 into bf16 terms, the byte planes' i32 into u8 planes), the neutral rewrite copies the raw
elements ``stages - 1`` steps ahead into a raw array (``sk_ra``, ``sk_rb``) and, at the step
that multiplies them, converts them into the single buffer of each term array behind a second
barrier: every element passes through workgroup memory twice. ``converting_copies`` fuses the
two. Each raw copy becomes one staged copy per term that lands that term of its elements
(``ir.StageCopy.part``) in a term array with a buffer per stage, the fragment loads read the
step's buffer, and the conversion loops, their barrier and the raw arrays go. The printer
loads the raw words and converts them in registers as they land
(``backends.spirv.copies``). Every value stays what the conversion pass computed: the same
``sarek.stage_copy.part`` of the same element or fill. A conversion loop that stores the
tile's columns as the term array's rows (B's byte planes staged column-major) becomes a copy
of the transposed tile: rows and columns, their source strides and their limits exchanged.
"""

from __future__ import annotations

import math
import typing
from collections.abc import Iterator
from dataclasses import dataclass

from sarek import ir
from sarek.ir import BinOp, MemSpace
from sarek.ir_build import add, const, mul, var
from sarek.ir_walk import replace_statements, subexpressions, walk
from sarek.stage_copy import SPLITS, part


@dataclass(frozen=True)
class _Term:
    """One term array a raw array's conversion loop fills: its name, the part it holds, the
    pitch of its rows and the elements of its one buffer; ``transposed``: the loop stores
    the tile's columns as the array's rows (column-major byte planes of B)."""

    array: str
    part: ir.CopyPart
    pitch: int
    buffer: int
    transposed: bool = False


@dataclass(frozen=True)
class _Raw:
    """A raw array, the slot its conversion loop reads (an expression of the loop's step) and
    the term arrays that loop fills."""

    size: int  # elements of one buffer: a step's tile
    slot: ir.Expr
    terms: tuple[_Term, ...]


def _product(e: ir.Expr) -> tuple[ir.Expr, int] | None:
    """``(x, n)`` for ``e`` the product ``x * n`` of a constant ``n``."""
    if isinstance(e, ir.Binary) and e.op is BinOp.MUL and isinstance(e.b, ir.Const):
        return e.a, int(e.b.value)
    return None


def _tile_place(e: ir.Expr, element: str) -> tuple[int, int, bool] | None:
    """``(cols, pitch, False)`` for ``e`` the place ``element / cols * pitch + element %
    cols`` (the tile's rows as rows), ``(cols, pitch, True)`` for ``element % cols * pitch +
    element / cols`` (its columns as rows)."""
    match e:
        case ir.Binary(op=BinOp.ADD, a=ir.Binary(op=BinOp.MUL, a=ir.Binary(
                op=outer, a=ir.Var(name=n1), b=ir.Const(value=cols)),
                b=ir.Const(value=pitch)), b=ir.Binary(
                op=inner, a=ir.Var(name=n2), b=ir.Const(value=cols2))) \
                if n1 == n2 == element and cols == cols2 and {outer, inner} == {
                    BinOp.DIV, BinOp.REM}:
            return int(cols), int(pitch), outer is BinOp.REM
    return None


def _conversion(s: ir.Stmt, decls: dict[str, ir.ArrayDecl], threads: int
                ) -> tuple[str, _Raw] | None:
    """``(raw array, what it is converted into)`` for ``s`` a conversion loop as the neutral
    rewrite builds it (``Copies.convert_raw``): element ``sk_e = q * threads + sk_tid`` of the
    tile for each of its trips ``q``, ``sk_x`` that element read from the raw array at ``slot
    * size + sk_e``, then one store of a part of ``sk_x`` per term array at the element's
    place in a padded row."""
    if not isinstance(s, ir.For) or len(s.body) < 3:
        return None
    e, x, *stores = s.body
    if not (isinstance(e, ir.Let) and isinstance(x, ir.Let) and isinstance(x.value, ir.Load)
            and all(isinstance(t, ir.Store) for t in stores)):
        return None
    load = x.value
    raw = decls.get(load.array)
    index = load.index
    if raw is None or not (isinstance(index, ir.Binary) and index.op is BinOp.ADD
                           and index.b == ir.Var(name=e.name, type=e.type)):
        return None
    found = _product(index.a)
    if found is None:
        return None
    slot, size = found
    every = add(mul(ir.Var(name=s.var, type=ir.ElemType.I32), const(threads)), var("sk_tid"))
    if (s.start, s.step, e.value) != (const(0), const(1), every) or s.stop != const(
            size // threads) or size % threads:
        return None  # the loop covers the tile once
    element = ir.Var(name=x.name, type=x.type)
    terms = []
    for store in stores:
        assert isinstance(store, ir.Store)
        term = decls.get(store.array)
        place = _tile_place(store.index, e.name)
        if term is None or place is None:
            return None
        cols, pitch, transposed = place
        if term.size != (cols if transposed else size // cols) * pitch:
            return None  # one buffer of the tile's rows (columns)
        if transposed and not (load.type.bits == 32 and term.elem.bits == 8):
            return None  # the printer transposes 32-bit elements into byte planes only
        parts = SPLITS.get((load.type, term.elem), 0)
        index_of = [i for i in range(parts) if store.value == part(element, i, term.elem)]
        if not index_of:
            return None
        terms.append(_Term(term.name, ir.CopyPart(into=term.elem, index=index_of[0]),
                           pitch, term.size, transposed))
    return load.array, _Raw(size, slot, tuple(terms))


def converting_copies(kernel: ir.Kernel, refills_first: bool = True) -> ir.Kernel:
    """``kernel`` with its raw staged tiles fused into converting copies (see the module
    docstring); as it is where it has none, or where any raw array is used otherwise than
    the neutral rewrite uses it. With ``refills_first`` each step issues its refills right
    after its barrier, before its products, as a lowering staged as it is does (the buffer
    they fill is one no wave reads in that step)."""
    if kernel.block is None:
        return kernel
    decls = {s.name: s for s in walk(kernel.body)
             if isinstance(s, ir.ArrayDecl) and s.space is MemSpace.SHARED}
    raws: dict[str, _Raw] = {}
    loops: set[int] = set()
    for s in walk(kernel.body):
        found = _conversion(s, decls, math.prod(kernel.block))
        if found is not None:
            if found[0] in raws:
                return kernel  # one conversion loop per raw array
            raws[found[0]] = found[1]
            loops.add(id(s))
    if not raws or not _only_as_raw(kernel.body, raws, loops) or not _then_barrier(
            kernel.body, loops):
        return kernel
    depths = {decls[name].size // raw.size for name, raw in raws.items()}
    if len(depths) != 1 or any(decls[name].size % raw.size for name, raw in raws.items()):
        return kernel
    depth = depths.pop()
    terms = {t.array: (raw, t) for raw in raws.values() for t in raw.terms}

    def fused(s: ir.Stmt) -> list[ir.Stmt] | None:
        match s:
            case ir.ArrayDecl(name=name) if name in raws:
                return []
            case ir.ArrayDecl(name=name) if name in terms:
                return [s.model_copy(update={"size": s.size * depth})]
            case ir.StageCopy(dst=name) if name in raws:
                found = _product(s.dst_offset)
                assert found is not None  # _only_as_raw checked it
                return [_landing(s, t, mul(found[0], const(t.buffer)))
                        for t in raws[name].terms]
            case ir.FragLoad(array=name) if name in terms:
                raw, t = terms[name]
                return [s.model_copy(update={
                    "offset": add(mul(raw.slot, const(t.buffer)), s.offset)})]
        return None

    def block(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        """``stmts`` without the conversion loops and the barrier after them (the step's
        barrier before them already orders the landed copies before every fragment load),
        the refills moved up where asked, nested loops likewise."""
        out: list[ir.Stmt] = []
        converted = False
        for s in stmts:
            if id(s) in loops:
                converted = True
            elif converted and isinstance(s, ir.Barrier):
                converted = False
            elif isinstance(s, ir.For):
                out.append(s.model_copy(update={"body": block(s.body)}))
            else:
                out.append(s)
        if refills_first and any(id(s) in loops for s in stmts):
            out = _refills_first(out)
        return tuple(out)

    return kernel.model_copy(update={"body": replace_statements(block(kernel.body), fused)})


def _landing(s: ir.StageCopy, t: _Term, offset: ir.Expr) -> ir.StageCopy:
    """The copy of raw copy ``s``'s elements that lands term ``t`` at ``offset``: the same
    tile, or for a transposed term its transpose (rows and columns, their strides and limits
    exchanged), so that tile element (r, c) lands at ``offset + r * pitch + c`` as the
    conversion loop stored it."""
    update: dict[str, object] = {"dst": t.array, "dst_offset": offset, "dst_pitch": t.pitch,
                                 "part": t.part}
    if t.transposed:
        update |= {"rows": s.cols, "cols": s.rows, "src_row_stride": s.src_col_stride,
                   "src_col_stride": s.src_row_stride, "row_limit": s.col_limit,
                   "col_limit": s.row_limit}
    return s.model_copy(update=update)


def _refills_first(stmts: list[ir.Stmt]) -> list[ir.Stmt]:
    """``stmts`` (a step) with its staged copies and their commit moved right after its
    first barrier."""
    refills = [s for s in stmts if isinstance(s, ir.StageCopy | ir.StageCommit)]
    rest = [s for s in stmts if not isinstance(s, ir.StageCopy | ir.StageCommit)]
    at = next((i + 1 for i, s in enumerate(rest) if isinstance(s, ir.Barrier)), None)
    if at is None:
        return stmts
    return [*rest[:at], *refills, *rest[at:]]


def _then_barrier(stmts: tuple[ir.Stmt, ...], loops: set[int]) -> bool:
    """Whether, in ``stmts`` and every block in them, the conversion loops of a block follow
    one another and a barrier follows the last."""
    at = [i for i, s in enumerate(stmts) if id(s) in loops]
    if at and (at != list(range(at[0], at[-1] + 1)) or at[-1] + 1 >= len(stmts)
               or not isinstance(stmts[at[-1] + 1], ir.Barrier)):
        return False
    for s in stmts:
        match s:
            case ir.For(body=body) | ir.While(body=body) if not _then_barrier(body, loops):
                return False
            case ir.If(then=then, orelse=orelse) if not (_then_barrier(then, loops)
                                                          and _then_barrier(orelse, loops)):
                return False
    return True


def _walk_outside(stmts: tuple[ir.Stmt, ...], skipped: set[int]) -> Iterator[ir.Stmt]:
    """Every statement of ``stmts``, nested ones included, but the ``skipped`` ones and what
    they hold."""
    for s in stmts:
        if id(s) in skipped:
            continue
        yield s
        match s:
            case ir.For(body=body) | ir.While(body=body):
                yield from _walk_outside(body, skipped)
            case ir.If(then=then, orelse=orelse):
                yield from _walk_outside(then, skipped)
                yield from _walk_outside(orelse, skipped)


_EXPRESSIONS = typing.get_args(typing.get_args(ir.Expr)[0])


def _only_as_raw(body: tuple[ir.Stmt, ...], raws: dict[str, _Raw], loops: set[int]) -> bool:
    """Whether, outside the conversion loops, the raw arrays are written only by staged
    copies of whole buffers (at a multiple of one buffer, rows of the tile's columns) and
    read by nothing, and the term arrays are only read by fragment loads."""
    terms = {t.array for raw in raws.values() for t in raw.terms}
    for s in _walk_outside(body, loops):
        match s:
            case ir.StageCopy(dst=name) if name in raws:
                found = _product(s.dst_offset)
                if (s.part is not None or found is None or found[1] != raws[name].size
                        or s.rows * s.cols != raws[name].size or s.dst_pitch != s.cols):
                    return False
            case ir.StageCopy(dst=name) | ir.Store(array=name) | ir.StorePacked(
                    array=name) | ir.FragStore(array=name) if name in raws or name in terms:
                return False
            case ir.FragLoad(array=name) if name in raws:
                return False
        for field in type(s).model_fields:
            value = getattr(s, field)
            if isinstance(value, _EXPRESSIONS) and any(
                    isinstance(x, ir.Load) and (x.array in raws or x.array in terms)
                    for x in subexpressions(value)):
                return False
    return True
