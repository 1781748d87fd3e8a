"""Lane-explicit warp instructions in the simulator: ``ldmatrix`` and ``mma.sync``.

A target's lowering turns fragments into these statements; the simulator runs them as printed,
every warp of the launch at once. Where each element lives comes from ``sarek.atoms`` (the
same tables the lowering and the printer read): ``ldmatrix`` gathers the 16-byte rows whose
addresses the providing lanes computed and deals their words to the owning lanes' registers;
``mma.sync`` assembles each warp's A, B and C matrices from its lanes' registers by the atom's
lane layouts, multiplies them under the launch's arithmetic model and deals D back.
"""

from __future__ import annotations

import numpy as np

from sarek import atoms, dtypes, ir, tile
from sim import fragments
from sim.launch import Geometry
from sim.memory import LocalArray, SharedArray, Site

WARP = atoms.LDMATRIX.lanes


WARPGROUP = 4 * WARP  # invocations that issue one wgmma together


def wgmma(facts: atoms.MmaAtomFacts, model: fragments.Model, a: np.ndarray,
          d: tuple[LocalArray, int], b: np.ndarray, n: int, warps: np.ndarray) -> None:
    """Runs one ``wgmma m64nNk16`` for ``warps`` (whole warpgroups): ``a[warp]`` the warp's
    16x16 A, its 16 x ``n`` accumulator from its lanes' ``n / 2`` elements (``facts``' C
    layout per 8 columns), ``b[warp]`` its 16 x ``n`` B; ``D = A * B + D`` under ``model``,
    dealt back."""
    lanes = warp_lanes(warps)
    d_array, d_size = d
    per = facts.c.values  # accumulator elements per 8 columns
    flat = lanes[..., None] * d_size + np.arange(n // 8 * per)
    acc = d_array.data[flat]
    c = np.concatenate([facts.c.scatter(acc[..., h * per:(h + 1) * per])
                        for h in range(n // 8)], axis=2)
    out = fragments.mul_add(a, b, c, model)
    d_array.data[flat] = np.concatenate([facts.c.gather(out[:, :, 8 * h:8 * (h + 1)])
                                         for h in range(n // 8)], axis=-1)


def a_registers(facts: atoms.MmaAtomFacts, a: tuple[LocalArray, int], warps: np.ndarray
                ) -> np.ndarray:
    """``[warp, 16, 16]``: each warp's A from its lanes' four registers (``facts``' A
    layout)."""
    a_array, a_size = a
    words = np.ascontiguousarray(a_array.data[warp_lanes(warps)[..., None] * a_size +
                                              np.arange(4)])
    return facts.a.scatter(words.view(dtypes.numpy_dtype(facts.operand)))


def warp_lanes(warps: np.ndarray) -> np.ndarray:
    """``[warp, lane]``: the invocations of ``warps``."""
    return warps[:, None] * WARP + np.arange(WARP)


def ldmatrix(count: int, trans: bool, address: np.ndarray, src: SharedArray,
             dst: LocalArray, dst_size: int, offset: int, warps: np.ndarray, geo: Geometry,
             site: Site) -> np.ndarray | None:
    """Runs ``ldmatrix .x{count}`` for ``warps``: ``address[invocation]`` is each lane's
    element index into ``src``. Returns None, or the invocations whose rows break the
    contract (misaligned or outside ``src``) for the caller to report."""
    facts = atoms.LDMATRIX
    lanes = warp_lanes(warps)
    matrix, row = facts.provided(count)[: facts.rows * count].T
    providers = lanes[:, matrix * facts.rows + row]  # [warp, 8*count], matrix-major
    element_bytes = src.data.itemsize
    start = np.asarray(address)[providers].astype(np.int64) * element_bytes
    bad = (start % facts.row_bytes != 0) | (start < 0) | (
        start + facts.row_bytes > src.size * element_bytes)
    if bad.any():
        return np.unique(providers[bad])
    blocks = geo.lane_block[lanes[:, 0]].astype(np.int64)
    byte = (blocks * src.size * element_bytes)[:, None, None] + start[..., None] + np.arange(
        facts.row_bytes)
    words = src.data.view(np.uint8)[byte].view("<u4")  # [warp, 8*count, 4]
    words = words.reshape(len(warps), count, facts.rows, facts.row_words)
    _record_reads(src, byte, trans, lanes, geo, site)
    op = ir.TileOp(kind="ldmatrix", count=count, trans=trans)
    registers = tile.gather_rows(op, words)  # [warp, lane, matrix]
    flat = lanes[..., None] * dst_size + offset + np.arange(count)
    dst.data[flat] = registers
    return None


def _record_reads(src: SharedArray, byte: np.ndarray, trans: bool, lanes: np.ndarray,
                  geo: Geometry, site: Site) -> None:
    """Tells the race detector who read what: each word counts as read by the lane whose
    register receives its low half (``sarek.tile.low_half_holders``)."""
    facts = atoms.LDMATRIX
    holder = tile.low_half_holders(ir.TileOp(kind="ldmatrix", count=1, trans=trans))
    count = byte.shape[1] // facts.rows
    word_bytes = facts.row_bytes // facts.row_words
    per_byte = np.repeat(np.tile(holder, (count, 1)), word_bytes, axis=-1)  # [8*count, 16]
    threads = geo.lane_thread[lanes[:, per_byte]].astype(np.int32)
    element_bytes = src.data.itemsize
    first = byte[..., ::element_bytes] // element_bytes
    src.read(first.ravel(), threads[..., ::element_bytes].ravel(), None, site)


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

