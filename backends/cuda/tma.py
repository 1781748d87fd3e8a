"""Lowering for CUDA: staged copies marked ``bulk`` into bulk tensor copies (TMA) completed by
mbarriers, and the tensor maps a launch builds for them.

A kernel whose staged copies are all marked ``StageCopy.bulk``, all into arrays that
``wgmma`` reads in 128-byte swizzle atoms (``backends.cuda.wgmma.CoreLayout``), rows
contiguous in global memory, their limits ``extent - start`` with extents of scalar
parameters, is lowered so:

* ``S`` mbarriers (``sk_bar``, one more than the most groups a ``StageWait`` leaves pending),
  initialized by invocation 0 for one arrival each, behind an ``AsyncProxyFence`` and a
  ``Barrier``; every invocation counts the groups issued (``sk_issued``) and waited for
  (``sk_waited``); group ``g`` completes on mbarrier ``g % S``, in its phase ``g / S``;
* each group: invocation 0 arrives on its mbarrier expecting the bytes of the group's copies
  whose tensor map can be used (``TensorMap.usable``: the origin and the row stride multiples
  of 16 bytes, both extents positive; where the copy's fill is not +0.0, also a tile wholly
  inside the limits, so that TMA's zero fill never replaces it) and issues them, one
  ``BulkTensorCopy`` per 128 bytes of the tile's rows (a 64-column atom of 16-bit elements,
  a 128-deep K-major row of 8-bit ones; ``lands``), landing where the layout puts it; every
  other copy of the group stays a staged copy (``cp.async``, lowered by
  ``backends.cuda.copies``), so that no region reads wrong values for want of alignment;
* ``StageWait(p)`` stays (for those ``cp.async``) and is followed by a wait for each group up
  to all but ``p``: ``MbarrierWait`` of its mbarrier with the parity of its phase.

The tensor maps are the distinct ``(src, origin, row stride, extents, box)`` of the kernel's
bulk copies, in order (``maps``); the printer passes them as ``__grid_constant__`` parameters
after the kernel's own and the launch encodes them (``encode``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from backends.cuda.wgmma import ELEMENT_BYTES, SWIZZLE_ROW, CoreLayout
from sarek import atoms, dtypes, ir
from sarek.affine import Poly
from sarek.errors import SarekError
from sarek.ir import BinOp, ElemType
from sarek.ir_build import add, binary, const, evaluate, is_literal, mul, var
from sarek.ir_walk import map_blocks, subexpressions, substitute, walk
from sarek.stage_copy import linear_thread

BARRIERS = "sk_bar"
ISSUED, WAITED = "sk_issued", "sk_waited"
I32 = ElemType.I32


@dataclass(frozen=True)
class TensorMap:
    """A tensor map: the global array ``src`` of ``elem`` viewed as ``extent_rows`` x
    ``extent_cols`` elements, element ``(r, c)`` at ``origin + r * row_stride + c``
    (expressions of the kernel's scalar parameters), copied in ``rows`` x ``cols`` boxes
    under ``swizzle``."""

    src: str
    elem: ElemType
    origin: ir.Expr
    row_stride: ir.Expr
    extent_rows: ir.Expr
    extent_cols: ir.Expr
    rows: int
    cols: int
    swizzle: int

    @property
    def chunk(self) -> int:
        """Elements in the 16 bytes the global address and the row stride are multiples of."""
        return atoms.TMA_ALIGN // dtypes.numpy_dtype(self.elem).itemsize

    def usable_expr(self) -> ir.Expr:
        """Whether the map can be encoded, as the kernel computes it."""
        def multiple(x: ir.Expr) -> ir.Expr:
            return binary(BinOp.EQ, binary(BinOp.REM, x, const(self.chunk)), const(0))

        cond = binary(BinOp.LAND, multiple(self.origin), multiple(self.row_stride))
        for extent in (self.extent_rows, self.extent_cols):
            cond = binary(BinOp.LAND, cond, binary(BinOp.GT, extent, const(0)))
        return cond

    def values(self, scalars: dict[str, int]) -> tuple[int, int, int, int] | None:
        """(origin, row stride, rows, columns) for the launch's ``scalars``."""
        out = [evaluate(e, scalars) for e in (self.origin, self.row_stride, self.extent_rows,
                                              self.extent_cols)]
        return None if None in out else (out[0], out[1], out[2], out[3])  # type: ignore[return-value]

    def usable(self, scalars: dict[str, int]) -> str | None:
        """Why the map cannot be encoded for the launch's ``scalars`` (None: it can); the
        kernel then copies by ``cp.async`` (``usable_expr`` is the same test)."""
        values = self.values(scalars)
        if values is None:
            return "its tensor is not an expression of the launch's scalars"
        origin, stride, rows, cols = values
        if origin % self.chunk or stride % self.chunk:
            return (f"{self.src!r}'s region starts at element {origin} with rows {stride} "
                    f"elements apart, not multiples of {atoms.TMA_ALIGN} bytes")
        if rows <= 0 or cols <= 0:
            return f"{self.src!r}'s region is empty"
        return None


def _params(e: ir.Expr, scalars: frozenset[str]) -> bool:
    return all(isinstance(x, ir.Const | ir.Binary) or
               (isinstance(x, ir.Var) and x.name in scalars) for x in subexpressions(e))


def _split(limit: ir.Expr, scalars: frozenset[str]) -> tuple[ir.Expr, ir.Expr] | None:
    """(extent, start) of a limit ``extent - start`` whose extent is of scalar parameters."""
    match limit:
        case ir.Binary(op=BinOp.SUB, a=extent, b=start) if _params(extent, scalars):
            return extent, start
    return None


def _of_scalars(e: ir.Expr, scalars: frozenset[str]) -> bool:
    """Whether the integer expression ``e`` is, as a polynomial (sums, differences and
    products expanded, each quotient or remainder an opaque term of its own), one of scalar
    parameters alone: every other variable cancels. Exact (i32 arithmetic wraps modulo 2^32,
    which keeps polynomial identities); an expression of anything else answers False."""
    def poly(x: ir.Expr) -> Poly | None:
        match x:
            case ir.Const(value=value) if isinstance(value, int):
                return Poly.const(int(value))
            case ir.Var(name=name):
                return Poly.atom(name)
            case ir.Binary(op=BinOp.ADD | BinOp.SUB | BinOp.MUL as op, a=a, b=b):
                pa, pb = poly(a), poly(b)
                if pa is None or pb is None:
                    return None
                return pa + pb if op is BinOp.ADD else pa - pb if op is BinOp.SUB else pa * pb
            case ir.Binary(op=BinOp.DIV | BinOp.REM):
                opaque[x.model_dump_json()] = x
                return Poly.atom(x.model_dump_json())
        return None

    opaque: dict[str, ir.Expr] = {}
    found = poly(e)
    return found is not None and all(
        atom in scalars or (atom in opaque and _params(opaque[atom], scalars))
        for atom in found.atoms())


def tensor(s: ir.StageCopy, scalars: frozenset[str]) -> tuple[TensorMap, ir.Expr, ir.Expr] | None:
    """The tensor map of copy ``s`` and its tile's (row, column) in it, or None where its rows
    are not contiguous, its limits not ``extent - start`` or its origin not the same for every
    block (``src_offset`` less the start's offset, a polynomial of scalar parameters alone:
    ``_of_scalars``)."""
    rows, cols = _split(s.row_limit, scalars), _split(s.col_limit, scalars)
    if rows is None or cols is None or not is_literal(s.src_col_stride, 1) or \
            not _params(s.src_row_stride, scalars) or s.part is not None:
        return None
    start = add(mul(rows[1], s.src_row_stride), cols[1])
    offset = binary(BinOp.SUB, s.src_offset, start)
    if not _of_scalars(offset, scalars):
        return None
    names = {x.name for x in subexpressions(offset) if isinstance(x, ir.Var)} - scalars
    origin = fold(substitute(offset, {name: const(0) for name in names}))
    return TensorMap(s.src, s.fill.type, origin, s.src_row_stride, rows[0], cols[0], s.rows,
                     s.cols, 128), rows[1], cols[1]


def _atom_width(s: ir.StageCopy) -> int:
    """Elements of copy ``s``'s type in one 128-byte row of a swizzle atom."""
    return SWIZZLE_ROW * ELEMENT_BYTES // dtypes.numpy_dtype(s.fill.type).itemsize


def lands(s: ir.StageCopy, layout: CoreLayout) -> bool:
    """Whether boxes 128 bytes wide (``issue``) land copy ``s`` where ``layout`` puts its
    tile: 128-byte swizzle atoms, the tile's rows whole atom rows (16-bit tiles: atoms side
    by side along the columns; 8-bit K-major tiles: one atom row)."""
    width = _atom_width(s)
    return layout.swizzle and s.cols % width == 0 and (not layout.k_major or s.cols == width)


def not_landing(s: ir.StageCopy, layout: CoreLayout | None) -> str:
    """Why boxes 128 bytes wide cannot land copy ``s`` (``lands`` is false), for a user."""
    width = _atom_width(s)
    if layout is None:
        return (f"{s.dst} is loaded into registers by ldmatrix, not read by wgmma from shared "
                f"memory, which takes A tiles 128 bytes wide (take steps {width} deep)")
    if not layout.swizzle:
        return f"{s.dst} is staged without the 128-byte swizzle the copies land in"
    rows = f"exactly {width}" if layout.k_major else f"a multiple of {width}"
    return (f"{s.dst}'s {s.rows}x{s.cols} tile is not whole rows of 128-byte swizzle atoms "
            f"(its rows must hold {rows} elements: take a step or a tile that gives them)")


def bulk_copies(kernel: ir.Kernel, places: dict[str, CoreLayout]) -> bool:
    """Whether ``lower`` lowers the kernel's staged copies to bulk tensor copies."""
    copies = [s for s in walk(kernel.body) if isinstance(s, ir.StageCopy)]
    scalars = frozenset(p.name for p in kernel.params if isinstance(p, ir.ScalarParam))
    return bool(copies) and kernel.block is not None and all(
        s.bulk and s.dst in places and lands(s, places[s.dst])
        and tensor(s, scalars) is not None for s in copies)


def issue(s: ir.StageCopy, scalars: frozenset[str], layout: CoreLayout, barriers: str,
          index: ir.Expr) -> tuple[ir.Expr, int, tuple[ir.BulkTensorCopy, ...]]:
    """Copy ``s`` (``tensor`` finds its map) as bulk tensor copies completing mbarrier
    ``index`` of ``barriers``: whether the kernel may issue them (the map usable and, where
    the copy's fill is not +0.0, the tile wholly inside its limits, so that TMA's zero fill
    never replaces it), the bytes they land, and the copies, one per 128 bytes of its rows
    (``lands``) in ``layout``."""
    found = tensor(s, scalars)
    assert found is not None
    spec, row, col = found
    usable = spec.usable_expr()
    if s.fill.value != 0 or math.copysign(1.0, s.fill.value) < 0:  # TMA fills +0.0
        whole = binary(BinOp.LAND, binary(BinOp.GE, s.row_limit, const(s.rows)),
                       binary(BinOp.GE, s.col_limit, const(s.cols)))
        usable = binary(BinOp.LAND, usable, whole)
    size = dtypes.numpy_dtype(spec.elem).itemsize
    width = spec.swizzle // size  # the elements of one 128-byte row of an atom
    boxes = tuple(ir.BulkTensorCopy(
        dst=s.dst, dst_offset=add(s.dst_offset, const(j * layout.core_n)), src=s.src,
        origin=spec.origin, row_stride=spec.row_stride, extent_rows=spec.extent_rows,
        extent_cols=spec.extent_cols, row=row, col=add(col, const(j * width)),
        rows=s.rows, cols=width, swizzle=128, barriers=barriers, index=index,
        line=s.line) for j in range(s.cols // width))
    return usable, s.rows * s.cols * size, boxes


def lower(kernel: ir.Kernel, places: dict[str, CoreLayout]) -> ir.Kernel:
    """``kernel`` with its groups of staged copies issued as bulk tensor copies where
    ``bulk_copies`` allows (as it is otherwise)."""
    if not bulk_copies(kernel, places):
        return kernel
    assert kernel.block is not None
    scalars = frozenset(p.name for p in kernel.params if isinstance(p, ir.ScalarParam))
    count = max((s.pending for s in walk(kernel.body) if isinstance(s, ir.StageWait)),
                default=0) + 2
    thread = linear_thread(kernel.block)
    first = binary(BinOp.EQ, thread, const(0))
    slot = binary(BinOp.REM, var(ISSUED), const(count))  # the mbarrier of the next group

    def group(copies: list[ir.StageCopy], slot: ir.Expr) -> tuple[ir.If, list[ir.Stmt]]:
        """The group's issue by invocation 0 (on mbarrier ``slot``) and its fallbacks."""
        tx: ir.Expr = const(0)
        issue_: list[ir.Stmt] = []
        rest: list[ir.Stmt] = []
        for s in copies:
            usable, size, boxes = issue(s, scalars, places[s.dst], BARRIERS, slot)
            tx = add(tx, ir.Select(cond=usable, a=const(size), b=const(0), type=I32))
            issue_.append(ir.If(cond=usable, then=boxes))
            rest.append(ir.If(cond=ir.Unary(op=ir.UnOp.NOT, x=usable, type=ElemType.BOOL),
                              then=(s.model_copy(update={"bulk": False}),)))
        arrive = ir.MbarrierArrive(barriers=BARRIERS, index=slot, tx_bytes=tx)
        return ir.If(cond=first, then=(arrive, *issue_)), rest

    groups = iter(range(1 << 30))

    def block(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        pending: list[ir.StageCopy] = []
        held: list[ir.Stmt] = []  # issues that wait for the block's first multiply-add
        for i, s in enumerate(body):
            match s:
                case ir.StageCopy():
                    pending.append(s)
                    continue
                case ir.StageCommit():
                    # Issued after the first multiply-add that follows (a wgmma), the issuing
                    # warp's work overlaps the tensor cores' instead of holding its
                    # warpgroup back; the mbarrier is the one of the group's place here.
                    name = f"sk_bulk_slot{next(groups)}"
                    issue, rest = group(pending, var(name))
                    later = any(isinstance(x, ir.FragMulAdd) for x in body[i:])
                    out += [ir.Let(name=name, type=I32, value=slot),
                            *(() if later else (issue,)), *rest, s,
                            ir.Assign(name=ISSUED, value=add(var(ISSUED), const(1)))]
                    held += [issue] if later else []
                    pending = []
                    continue
                case ir.FragMulAdd() if held:
                    out += [s, *held]
                    held = []
                    continue
                case ir.StageWait(pending=p):
                    wait = ir.MbarrierWait(
                        barriers=BARRIERS, index=binary(BinOp.REM, var(WAITED), const(count)),
                        parity=binary(BinOp.REM, binary(BinOp.DIV, var(WAITED), const(count)),
                                      const(2)))
                    more = binary(BinOp.LT, var(WAITED), binary(BinOp.SUB, var(ISSUED),
                                                                  const(p)))
                    out += [s, ir.While(cond=more, body=(
                        wait, ir.Assign(name=WAITED, value=add(var(WAITED), const(1)))))]
                    continue
            out.append(s)
        assert not pending and not held, "a staged copy outside a group"
        return tuple(out)

    body = map_blocks(kernel.body, block)
    # the mbarriers after the other shared arrays: placed last, they take 8 bytes each, not
    # the padding to the next array's (1024-byte) alignment
    last = max((i for i, s in enumerate(body) if isinstance(s, ir.ArrayDecl)), default=-1) + 1
    decl = ir.ArrayDecl(name=BARRIERS, elem=ElemType.U64, size=count, space=ir.MemSpace.SHARED,
                        align=8)
    start = (decl,
        ir.Let(name=ISSUED, type=I32, value=const(0)),
        ir.Let(name=WAITED, type=I32, value=const(0)),
        ir.If(cond=first, then=(*(ir.MbarrierInit(barriers=BARRIERS, index=const(i), arrivals=1)
                                  for i in range(count)), ir.AsyncProxyFence())),
        ir.Barrier())
    return kernel.model_copy(update={"body": (*body[:last], *start, *body[last:])})


def fold(e: ir.Expr) -> ir.Expr:
    """``e`` with every subexpression free of names computed (so that one map written two
    ways is found once)."""
    value = evaluate(e, {})
    if value is not None:
        return const(value)
    if not isinstance(e, ir.Binary):
        return e
    a, b = fold(e.a), fold(e.b)
    match e.op:
        case BinOp.MUL if is_literal(a, 0) or is_literal(b, 0):
            return const(0)
        case BinOp.MUL if is_literal(a, 1) or is_literal(b, 1):
            return b if is_literal(a, 1) else a
        case BinOp.ADD if is_literal(a, 0) or is_literal(b, 0):
            return b if is_literal(a, 0) else a
        case BinOp.SUB if a == b:
            return const(0)
        case BinOp.SUB if is_literal(b, 0):
            return a
    out = e.model_copy(update={"a": a, "b": b})
    value = evaluate(out, {})
    return out if value is None else const(value)


def maps(kernel: ir.Kernel) -> tuple[TensorMap, ...]:
    """The tensor maps of ``kernel``'s bulk copies, in the order of their parameters."""
    elems = {p.name: p.elem for p in kernel.params if isinstance(p, ir.ArrayParam)}
    found = [of(s, elems[s.src]) for s in walk(kernel.body) if isinstance(s, ir.BulkTensorCopy)]
    return tuple(dict.fromkeys(found))


def of(s: ir.BulkTensorCopy, elem: ElemType) -> TensorMap:
    """The tensor map copy ``s`` goes through (``elem`` its source's element type)."""
    return TensorMap(s.src, elem, s.origin, s.row_stride, s.extent_rows, s.extent_cols, s.rows,
                     s.cols, s.swizzle)



@dataclass(frozen=True)
class Request:
    """A tensor map as a launch encodes it, every value known: the position of its array
    among the kernel's parameters, its element size, the tensor (origin, row stride and
    extents in elements), the box and the swizzle, and whether it can be encoded
    (``TensorMap.usable``; a map that cannot is passed as zeros, which the kernel, testing
    the same, never reads). Plain numbers, kept in CUDA's launch records."""

    param: int
    size: int
    origin: int
    stride: int
    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle: int
    usable: bool


def requests(kernel: ir.Kernel, values: dict[str, object]) -> tuple[Request, ...]:
    """The tensor maps a launch of the lowered ``kernel`` with arguments ``values`` passes
    after its parameters, in order."""
    names = [p.name for p in kernel.params]
    scalars = {p.name: int(values[p.name]) for p in kernel.params  # type: ignore[call-overload]
               if isinstance(p, ir.ScalarParam) and p.elem.is_int}
    out = []
    for m in maps(kernel):
        found = m.values(scalars)
        assert found is not None  # the checker: expressions of the scalar parameters
        out.append(Request(names.index(m.src), dtypes.numpy_dtype(m.elem).itemsize, *found,
                           m.rows, m.cols, m.swizzle, m.usable(scalars) is None))
    return tuple(out)


def holder() -> np.ndarray:
    """128 zero bytes, 64-byte aligned, as 16 u64: where a tensor map parameter is kept."""
    whole = np.zeros(24, np.uint64)
    start = (-whole.ctypes.data % 64) // 8
    return whole[start:start + 16]


def encode(request: Request, pointer: int, out: np.ndarray | None = None) -> np.ndarray:
    """``request``'s tensor map over the device array at ``pointer``, into ``out`` (a
    ``holder``, made when None): ``cuTensorMapEncodeTiled`` where the map is usable, else
    zeros."""
    out = holder() if out is None else out
    if not request.usable:
        out[:] = 0
        return out
    from cuda.bindings import driver as cu

    r = request
    kinds = {1: "UINT8", 2: "UINT16", 4: "UINT32"}
    kind = getattr(cu.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{kinds[r.size]}")
    swizzle = cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if r.swizzle else \
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE
    error, made = cu.cuTensorMapEncodeTiled(
        kind, 2, pointer + r.origin * r.size, [cu.cuuint64_t(r.cols), cu.cuuint64_t(r.rows)],
        [cu.cuuint64_t(r.stride * r.size)], [cu.cuuint32_t(r.box_cols), cu.cuuint32_t(r.box_rows)],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if error != cu.CUresult.CUDA_SUCCESS:
        raise SarekError(f"cuTensorMapEncodeTiled failed for a {r.rows} x {r.cols} tensor "
                         f"(box {r.box_rows} x {r.box_cols}): {error}")
    out[:] = np.array([int(x) for x in made.opaque], np.uint64)
    return out
