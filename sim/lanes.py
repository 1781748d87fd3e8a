"""Lane-explicit warp instructions in the simulator: ``ldmatrix``, ``stmatrix``, ``mma.sync``
and ``wgmma``.

A target's lowering turns fragments and tile patterns into these statements; the simulator runs
them as printed, every warp of the launch at once, and runs a tile pattern of an unlowered
kernel through the same functions (``sarek.tile.lane_tile``). Where each element lives comes
from ``sarek.atoms`` (the same tables the lowering and the printer read): ``ldmatrix`` gathers
the 16-byte rows whose addresses the providing lanes computed and deals their words to the
owning lanes' registers, ``stmatrix`` does the inverse; ``mma.sync`` assembles each warp's A,
B and C matrices from its lanes' registers by the atom's lane layouts, multiplies them under
the launch's arithmetic model and deals D back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sarek import atoms, dtypes, ir, tile
from sarek.ir import ElemType
from sarek.tile import ContractError
from sim import fragments
from sim.launch import Geometry
from sim.memory import LocalArray, SharedArray, Site

WARP = atoms.LDMATRIX.lanes


WARPGROUP = atoms.WGMMA.threads  # invocations that issue one wgmma together


def wgmma(model: fragments.Model, a: np.ndarray, d: tuple[LocalArray, int], b: np.ndarray,
          n: int, warps: np.ndarray) -> None:
    """Runs one ``wgmma m64nNk16`` (``k32`` for 8-bit operands) for ``warps`` (whole
    warpgroups): ``a[group]`` the warpgroup's 64 x k A, ``b[group]`` its k x ``n`` B, the
    64 x ``n`` accumulator from its threads' ``n / 2`` elements of ``d``
    (``sarek.atoms.WGMMA.c``); ``D = A * B + D`` under ``model``, dealt back."""
    layout = atoms.WGMMA.c(n)
    threads = warp_lanes(warps).reshape(-1, WARPGROUP)
    d_array, d_size = d
    flat = threads[..., None] * d_size + np.arange(layout.values)
    c = layout.scatter(d_array.data[flat])
    d_array.data[flat] = layout.gather(fragments.mul_add(a, b, c, model))


def a_registers(operand: ElemType, a: tuple[LocalArray, int], warps: np.ndarray,
                layout: atoms.LaneLayout = atoms.WGMMA.a) -> np.ndarray:
    """``[group, 64, k]``: each warpgroup's A from its threads' registers (``layout``:
    ``sarek.atoms.WGMMA.a``, or ``a_8bit`` for 8-bit operands, k = 32)."""
    a_array, a_size = a
    words = layout.values * operand.bits // 32
    threads = warp_lanes(warps).reshape(-1, WARPGROUP)
    raw = np.ascontiguousarray(a_array.data[threads[..., None] * a_size + np.arange(words)])
    return layout.scatter(raw.view(dtypes.numpy_dtype(operand)))


def warp_lanes(warps: np.ndarray) -> np.ndarray:
    """``[warp, lane]``: the invocations of ``warps``."""
    return warps[:, None] * WARP + np.arange(WARP)


def check_geometry(geo: Geometry, site: Site) -> None:
    """``ContractError`` unless the launch's blocks are whole warps (an ldmatrix or stmatrix
    is issued by every lane of a warp)."""
    if geo.block_size % WARP:
        raise ContractError(f"a tile pattern needs whole warps: the block has "
                            f"{geo.block_size} invocations, not a multiple of {WARP} "
                            f"(at {site.path})")


def full_warps(mask: np.ndarray | None, n: int, site: Site) -> np.ndarray:
    """The warps (indices into the launch's warps) that run a warp instruction: every lane
    active, or ``ContractError`` when a warp has only some lanes active."""
    if mask is None:
        return np.arange(n // WARP)
    active = np.count_nonzero(mask.reshape(-1, WARP), axis=1)
    partial = np.flatnonzero((active > 0) & (active < WARP))
    if partial.size:
        raise ContractError(f"{int(active[partial[0]])} of the {WARP} lanes of warp "
                            f"{int(partial[0])} of the launch reach the tile pattern at "
                            f"{site.path}; all {WARP} must participate")
    return np.flatnonzero(active == WARP)


def provided(rows: ir.ProvidedRows, count: int, n: int, per_word: int) -> np.ndarray:
    """``[invocation]``: the element index each lane of a launch of ``n`` invocations gives
    an instruction of ``count`` matrices whose rows ``rows`` maps (in 32-bit words of a
    storage of ``per_word`` elements a word): the row ``sarek.atoms.LDMATRIX`` assigns it."""
    matrix, row = atoms.LDMATRIX.provided(count).T
    words = rows.start + matrix * rows.matrix_stride + row * rows.row_stride
    return np.tile(words * per_word, n // WARP).astype(np.int64)


def _rows(count: int, address: np.ndarray, shared: SharedArray, warps: np.ndarray,
          geo: Geometry) -> tuple[np.ndarray, np.ndarray | None]:
    """``(byte, bad)``: ``byte[warp, 8*count, 16]``, the bytes of every row the providing
    lanes address (matrix-major) in the flat shared array, and the invocations whose rows
    break the contract (misaligned or outside the array), None when none does."""
    facts = atoms.LDMATRIX
    lanes = warp_lanes(warps)
    matrix, row = facts.provided(count)[: facts.rows * count].T
    providers = lanes[:, matrix * facts.rows + row]  # [warp, 8*count], matrix-major
    element_bytes = shared.data.itemsize
    start = np.asarray(address)[providers].astype(np.int64) * element_bytes
    bad = (start % facts.row_bytes != 0) | (start < 0) | (
        start + facts.row_bytes > shared.size * element_bytes)
    if bad.any():
        return start, np.unique(providers[bad])
    blocks = geo.lane_block[lanes[:, 0]].astype(np.int64)
    byte = (blocks * shared.size * element_bytes)[:, None, None] + start[..., None] + np.arange(
        facts.row_bytes)
    return byte, None


def _register_words(local: LocalArray, size: int, slots: Sequence[int], lanes: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(words, flat)``: the local array as 32-bit words and the index of word ``slots[m]``
    of each lane of ``lanes[warp, lane]``, ``flat[warp, lane, m]``."""
    words = local.data.view("<u4")
    per_lane = size * local.data.itemsize // 4
    return words, lanes[..., None] * per_lane + np.asarray(slots, np.int64)


def ldmatrix(count: int, trans: bool, address: np.ndarray, src: SharedArray,
             dst: LocalArray, dst_size: int, slots: Sequence[int], warps: np.ndarray,
             geo: Geometry, site: Site) -> np.ndarray | None:
    """Runs ``ldmatrix .x{count}`` for ``warps``: ``address[invocation]`` is each lane's
    element index into ``src``, matrix ``m`` lands in 32-bit word ``slots[m]`` of each lane's
    ``dst``. Returns None, or the invocations whose rows break the contract (misaligned or
    outside ``src``) for the caller to report."""
    facts = atoms.LDMATRIX
    lanes = warp_lanes(warps)
    byte, bad = _rows(count, address, src, warps, geo)
    if bad is not None:
        return bad
    words = src.data.view(np.uint8)[byte].view("<u4")  # [warp, 8*count, 4]
    words = words.reshape(len(warps), count, facts.rows, facts.row_words)
    _record(src, byte, trans, lanes, geo, site, write=False)
    op = ir.TileOp(kind="ldmatrix", count=count, trans=trans)
    registers, flat = _register_words(dst, dst_size, slots, lanes)
    registers[flat] = tile.gather_rows(op, words)  # [warp, lane, matrix]
    return None


def stmatrix(count: int, trans: bool, address: np.ndarray, dst: SharedArray,
             src: LocalArray, src_size: int, slots: Sequence[int], warps: np.ndarray,
             geo: Geometry, site: Site) -> np.ndarray | None:
    """Runs ``stmatrix .x{count}`` for ``warps``, the inverse of ``ldmatrix``: word
    ``slots[m]`` of each lane's ``src`` is written to the rows the lanes address in ``dst``.
    Returns None, or the invocations whose rows break the contract."""
    lanes = warp_lanes(warps)
    byte, bad = _rows(count, address, dst, warps, geo)
    if bad is not None:
        return bad
    _record(dst, byte, trans, lanes, geo, site, write=True)
    registers, flat = _register_words(src, src_size, slots, lanes)
    op = ir.TileOp(kind="stmatrix", count=count, trans=trans)
    rows = tile.scatter_rows(op, registers[flat])  # [warp, matrix, row, word]
    dst.data.view(np.uint8)[byte] = np.ascontiguousarray(rows, "<u4").view(np.uint8).reshape(
        byte.shape)
    return None


def _record(shared: SharedArray, byte: np.ndarray, trans: bool, lanes: np.ndarray,
            geo: Geometry, site: Site, *, write: bool) -> None:
    """Tells the race detector who read or wrote what: each word counts as accessed by the
    lane whose register receives or gives its low half (``sarek.tile.low_half_holders``)."""
    facts = atoms.LDMATRIX
    holder = tile.low_half_holders(ir.TileOp(kind="ldmatrix", count=1, trans=trans))
    count = byte.shape[1] // facts.rows
    word_bytes = facts.row_bytes // facts.row_words
    per_byte = np.repeat(np.tile(holder, (count, 1)), word_bytes, axis=-1)  # [8*count, 16]
    threads = geo.lane_thread[lanes[:, per_byte]].astype(np.int32)
    element_bytes = shared.data.itemsize
    first = byte[..., ::element_bytes] // element_bytes
    (shared.write if write else shared.read)(
        first.ravel(), threads[..., ::element_bytes].ravel(), None, site)


def mma(facts: atoms.MmaAtomFacts, model: fragments.Model,
        registers: dict[str, tuple[LocalArray, int, int]], warps: np.ndarray) -> None:
    """Runs one ``mma.sync`` for ``warps``; ``registers`` gives for "a", "b", "c" and "d" the
    local array, its elements per invocation and the operand's first element."""
    lanes = warp_lanes(warps)

    def read(use: str, count: int, dtype: np.dtype) -> np.ndarray:
        array, size, first = registers[use]
        flat = lanes[..., None] * size + first + np.arange(count)
        return np.ascontiguousarray(array.data[flat]).view(dtype)

    operand = dtypes.numpy_dtype(facts.operand)
    a = facts.a.scatter(read("a", facts.registers("a"), operand))
    b = facts.b.scatter(read("b", facts.registers("b"), operand))
    accumulator = dtypes.numpy_dtype(facts.accumulator)
    c = facts.c.scatter(read("c", facts.c.values, accumulator))
    d = fragments.mul_add(a, b, c, model)
    array, size, first = registers["d"]
    array.data[lanes[..., None] * size + first + np.arange(facts.c.values)] = facts.c.gather(d)

