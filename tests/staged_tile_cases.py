"""Kernels that stage one tile with ``StageCopy`` and write its 16-byte words back out, with no
fragments: what the SPIR-V printer's staged copies compute, words crossing the limits
included, runnable on any Vulkan device (lavapipe too) against the simulator."""

from __future__ import annotations

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.ir import Builtin, ElemType, MemSpace
from sarek.ir_build import add, const, mul, var

THREADS = 64
TILES = {ElemType.F16: (32, 32), ElemType.BF16: (16, 64), ElemType.U8: (32, 32),
         ElemType.I8: (16, 64), ElemType.F32: (16, 32), ElemType.I32: (32, 16)}
"""A tile of each element type whose words spread evenly over ``THREADS`` invocations."""

LIMITS = ((0, 1, 1, 0, 0), (8, 1, 1, 3, 5), (3, 1, 1, 0, 0), (0, 1, 1, 99, 0),
          (5, 2, 2, 1, 9), (32, 3, 3, 99, 16), (0, 1, 1, 0, 99))
"""Cases (source offset, extra row pitch in words, column stride, rows cut, columns cut):
inside and aligned, cut at both limits, misaligned, nothing inside (rows or columns), and a
column stride (every word element by element); a cut of 99 leaves no row or column."""


def _kernel(name: str, src: ElemType, elem: ElemType, elements: int, scalars: tuple[str, ...],
            body: tuple[ir.Stmt, ...]) -> ir.Kernel:
    """A kernel of ``THREADS`` invocations over ``src`` (of ``src``'s type) and ``out`` (u32
    words) and the i32 ``scalars``: ``body`` after a workgroup array ``tile`` of ``elements``
    ``elem`` and ``view``, its u32 words in the same storage."""
    return ir.Kernel(name=name, block=(THREADS, 1, 1), params=(
        ir.ArrayParam(name="src", elem=src, readonly=True),
        ir.ArrayParam(name="out", elem=ElemType.U32),
        *(ir.ScalarParam(name=n, elem=ElemType.I32) for n in scalars)), body=(
        ir.ArrayDecl(name="tile", elem=elem, size=elements, space=MemSpace.SHARED),
        ir.ArrayDecl(name="view", elem=ElemType.U32, size=elements * elem.bits // 32,
                     space=MemSpace.SHARED, shares="tile"),
        *body))


def staged_tile_kernel(elem: ElemType, strided: bool) -> ir.Kernel:
    """One ``rows`` x ``cols`` tile (``TILES``) of ``src`` staged into a workgroup array of
    ``elem`` and written out through a u32 array in its storage (``out``); offset, strides and
    limits are parameters, the column stride 1 unless ``strided``."""
    rows, cols = TILES[elem]
    words = rows * cols * elem.bits // 32
    tid = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)
    at = add(mul(var("q"), const(THREADS)), tid)
    return _kernel(f"staged_tile_{elem}", elem, elem, rows * cols,
                   ("off", "pitch", "stride", "rl", "cl"), (
        ir.StageCopy(dst="tile", dst_offset=const(0), dst_pitch=cols, src="src",
                     src_offset=var("off"), src_row_stride=var("pitch"),
                     src_col_stride=var("stride") if strided else const(1), rows=rows,
                     cols=cols, row_limit=var("rl"), col_limit=var("cl"),
                     fill=ir.Const(value=-0.0 if elem.is_float else 7, type=elem)),
        ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(),
        ir.For(var="q", start=const(0), stop=const(words // THREADS), step=const(1), body=(
            ir.Store(array="out", index=at,
                     value=ir.Load(array="view", index=at, type=ElemType.U32)),))))


def staged_tile_args(elem: ElemType, case: tuple[int, int, int, int, int],
                     rng: np.random.Generator) -> dict[str, object]:
    """Random source bits and the offset, strides and limits of ``case`` (``LIMITS``)."""
    rows, cols = TILES[elem]
    offset, extra, stride, rows_cut, cols_cut = case
    per = 128 // elem.bits
    pitch = cols * stride + extra * per + (offset % 2)
    dt = numpy_dtype(elem)
    size = offset + rows * pitch + cols * stride
    return {"src": rng.integers(0, 256, size * dt.itemsize, dtype=np.uint8).view(dt),
            "out": np.zeros(rows * cols * elem.bits // 32, np.uint32), "off": offset,
            "pitch": pitch, "stride": stride, "rl": max(rows - rows_cut, 0),
            "cl": max(cols - cols_cut, 0)}


TRIPS = 4
LOOP_LIMITS = ((0, 1, 0, 4.0), (0, 1, 0, 2.5), (0, 1, 0, 1.0), (1, 1, 0, 4.0), (0, 2, 3, 4.0),
               (0, 1, 0, 0.0))
"""Cases of ``staged_loop_kernel`` (source offset, extra row pitch in words, rows cut, column
limit in tiles): every trip inside, two trips inside then one across and one outside, one
inside then outside, misaligned (no trip inside), rows cut (none inside), no column inside."""


def staged_loop_kernel(elem: ElemType) -> ir.Kernel:
    """``TRIPS`` tiles of ``src`` (``TILES``), trip ``t`` the one ``t * cols`` columns on,
    each staged by a loop's copy into one workgroup array and written out at ``out[t *
    words + ...]``: the copy's test of its limits reads only the loop variable and
    parameters, so that a trip can be known inside its limits before it runs."""
    rows, cols = TILES[elem]
    words = rows * cols * elem.bits // 32
    tid, i32 = ir.BuiltinValue(which=Builtin.THREAD_IDX_X), ElemType.I32
    at = add(mul(var("q"), const(THREADS)), tid)
    first = mul(var("t"), const(cols))
    return _kernel(f"staged_loop_{elem}", elem, elem, rows * cols, ("off", "pitch", "rl", "cl"), (
        ir.For(var="t", start=const(0), stop=const(TRIPS), step=const(1), body=(
            ir.StageCopy(dst="tile", dst_offset=const(0), dst_pitch=cols, src="src",
                         src_offset=add(var("off"), first), src_row_stride=var("pitch"),
                         src_col_stride=const(1), rows=rows, cols=cols, row_limit=var("rl"),
                         col_limit=ir.Binary(op=ir.BinOp.SUB, a=var("cl"), b=first, type=i32),
                         fill=ir.Const(value=-0.0 if elem.is_float else 7, type=elem)),
            ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(),
            ir.For(var="q", start=const(0), stop=const(words // THREADS), step=const(1),
                   body=(ir.Store(array="out", index=add(mul(var("t"), const(words)), at),
                                  value=ir.Load(array="view", index=at, type=ElemType.U32)),)),
            ir.Barrier())),))


def staged_loop_args(elem: ElemType, case: tuple[int, int, int, float],
                     rng: np.random.Generator) -> dict[str, object]:
    """Random source bits and the offset, pitch and limits of ``case`` (``LOOP_LIMITS``)."""
    rows, cols = TILES[elem]
    offset, extra, rows_cut, col_limit = case
    pitch = TRIPS * cols + extra * (128 // elem.bits)
    dt = numpy_dtype(elem)
    size = offset + rows * pitch
    return {"src": rng.integers(0, 256, size * dt.itemsize, dtype=np.uint8).view(dt),
            "out": np.zeros(TRIPS * rows * cols * elem.bits // 32, np.uint32), "off": offset,
            "pitch": pitch, "rl": rows - rows_cut, "cl": int(col_limit * cols)}


def staged_pipeline_kernel(elem: ElemType) -> ir.Kernel:
    """``staged_loop_kernel``'s tiles copied one trip ahead into two buffers (a copy before
    the loop, each trip's copy of the next tile left pending at its wait): copies held two
    groups deep, the loop printed two trips a round."""
    rows, cols = TILES[elem]
    words = rows * cols * elem.bits // 32
    tid, i32 = ir.BuiltinValue(which=Builtin.THREAD_IDX_X), ElemType.I32
    at = add(mul(var("q"), const(THREADS)), tid)

    def copy(trip: ir.Expr) -> ir.StageCopy:
        first = mul(trip, const(cols))
        return ir.StageCopy(
            dst="tile", dst_offset=mul(ir.Binary(op=ir.BinOp.REM, a=trip, b=const(2), type=i32),
                                       const(rows * cols)),
            dst_pitch=cols, src="src", src_offset=add(var("off"), first),
            src_row_stride=var("pitch"), src_col_stride=const(1), rows=rows, cols=cols,
            row_limit=var("rl"), col_limit=ir.Binary(op=ir.BinOp.SUB, a=var("cl"), b=first,
                                                     type=i32),
            fill=ir.Const(value=-0.0 if elem.is_float else 7, type=elem))

    slot = mul(ir.Binary(op=ir.BinOp.REM, a=var("t"), b=const(2), type=i32), const(words))
    return _kernel(f"staged_pipeline_{elem}", elem, elem, 2 * rows * cols,
                   ("off", "pitch", "rl", "cl"), (
        copy(const(0)), ir.StageCommit(),
        ir.For(var="t", start=const(0), stop=const(TRIPS), step=const(1), body=(
            ir.Barrier(), copy(add(var("t"), const(1))), ir.StageCommit(),
            ir.StageWait(pending=1), ir.Barrier(),
            ir.For(var="q", start=const(0), stop=const(words // THREADS), step=const(1),
                   body=(ir.Store(array="out", index=add(mul(var("t"), const(words)), at),
                                  value=ir.Load(array="view", index=add(slot, at),
                                                type=ElemType.U32)),)))),))


def staged_terms_kernel(index: int) -> ir.Kernel:
    """A 16 x 32 tile of f32 ``src`` landed as its bf16 term ``index`` (hi, mid, lo:
    ``StageCopy.part``) in a workgroup array and written out through a u32 array in its
    storage; offset, strides and limits as in ``staged_tile_kernel``."""
    rows, cols = 16, 32
    words = rows * cols // 2
    tid = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)
    at = add(mul(var("q"), const(THREADS)), tid)
    return _kernel(f"staged_terms_{index}", ElemType.F32, ElemType.BF16, rows * cols,
                   ("off", "pitch", "stride", "rl", "cl"), (
        ir.StageCopy(dst="tile", dst_offset=const(0), dst_pitch=cols, src="src",
                     src_offset=var("off"), src_row_stride=var("pitch"),
                     src_col_stride=const(1), rows=rows, cols=cols, row_limit=var("rl"),
                     col_limit=var("cl"), fill=ir.Const(value=-0.0, type=ElemType.F32),
                     part=ir.CopyPart(into=ElemType.BF16, index=index)),
        ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(),
        ir.For(var="q", start=const(0), stop=const(words // THREADS), step=const(1), body=(
            ir.Store(array="out", index=at,
                     value=ir.Load(array="view", index=at, type=ElemType.U32)),))))


PLANES_TILE = (32, 32)
"""The tile of a transposed byte-plane copy: 32 rows (B's columns) of 32 columns (its k)."""


def staged_planes_kernel(index: int, pad: int) -> ir.Kernel:
    """A 32 x 32 tile of i32 ``src`` whose rows are consecutive elements of the source's
    columns (row stride 1, column stride ``pitch``), landed as byte plane ``index`` with
    ``pad`` bytes after each row (B's planes staged column-major from a row-major B: a
    transposed copy), each row's 32 bytes written out through a u32 array in its storage;
    offset, pitch and limits are parameters."""
    rows, cols = PLANES_TILE
    pitch = cols + pad
    tid = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)
    at = add(mul(var("q"), const(THREADS)), tid)
    words_per_row = cols // 4
    row = ir.Binary(op=ir.BinOp.DIV, a=at, b=const(words_per_row), type=ElemType.I32)
    word = ir.Binary(op=ir.BinOp.REM, a=at, b=const(words_per_row), type=ElemType.I32)
    return _kernel(f"staged_planes_{index}_{pad}", ElemType.I32, ElemType.U8, rows * pitch,
                   ("off", "pitch", "rl", "cl"), (
        ir.StageCopy(dst="tile", dst_offset=const(0), dst_pitch=pitch, src="src",
                     src_offset=var("off"), src_row_stride=const(1),
                     src_col_stride=var("pitch"), rows=rows, cols=cols, row_limit=var("rl"),
                     col_limit=var("cl"), fill=ir.Const(value=-7, type=ElemType.I32),
                     part=ir.CopyPart(into=ElemType.U8, index=index)),
        ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(),
        ir.For(var="q", start=const(0), stop=const(rows * words_per_row // THREADS),
               step=const(1), body=(
            ir.Store(array="out", index=at, value=ir.Load(
                array="view", index=add(mul(row, const(pitch // 4)), word),
                type=ElemType.U32)),))))


def staged_planes_args(case: tuple[int, int, int, int, int], rng: np.random.Generator
                       ) -> dict[str, object]:
    """Random source bits and the offset, pitch (words of 4 elements past the tile's rows,
    odd where the offset is) and limits of ``case`` (``LIMITS``, column stride 1)."""
    rows, cols = PLANES_TILE
    offset, extra, _, rows_cut, cols_cut = case
    pitch = rows + extra * 4 + (offset % 2)
    size = offset + rows + cols * pitch
    return {"src": rng.integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32),
            "out": np.zeros(rows * cols // 4, np.uint32), "off": offset, "pitch": pitch,
            "rl": max(rows - rows_cut, 0), "cl": max(cols - cols_cut, 0)}
