"""Warp-level tile patterns (ldmatrix / stmatrix) in the simulator.

The lane maps are ``sarek.atoms.LDMATRIX``'s and the data movement ``sarek.tile``'s, the same
facts the CUDA printer reads; this module applies them to the launch's shared and local
arrays, every warp of the launch at once, and records the shared accesses with the race
detector (each word as read or written by the lane whose register takes or gives its low
half, ``sarek.tile.low_half_holders``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sarek import atoms, ir, tile
from sarek.layout import TileLayout
from sarek.tile import ContractError
from sim.launch import Geometry
from sim.memory import LocalArray, SharedArray, Site


@dataclass(frozen=True)
class Operand:
    """A tile operand resolved at compile time: the slot of its storage in the running
    state, the storage's size and bits per element, the layout and offset in 32-bit words."""

    name: str
    slot: int
    size: int
    bits: int
    layout: TileLayout
    offset: int

    @property
    def words(self) -> int:
        return self.size * self.bits // 32


def check_geometry(geo: Geometry, site: Site) -> None:
    if geo.block_size % tile.WARP:
        raise ContractError(f"a tile pattern needs whole warps: the block has "
                            f"{geo.block_size} invocations, not a multiple of {tile.WARP} "
                            f"(at {site.path})")


def full_warps(mask: np.ndarray | None, n: int, site: Site) -> np.ndarray:
    """The warps (indices into the launch's warps) that run the pattern: every lane active,
    or ``ContractError`` when a warp has only some lanes active."""
    if mask is None:
        return np.arange(n // tile.WARP)
    active = np.count_nonzero(mask.reshape(-1, tile.WARP), axis=1)
    partial = np.flatnonzero((active > 0) & (active < tile.WARP))
    if partial.size:
        raise ContractError(f"{int(active[partial[0]])} of the {tile.WARP} lanes of warp "
                            f"{int(partial[0])} of the launch reach the tile pattern at "
                            f"{site.path}; all {tile.WARP} must participate")
    return np.flatnonzero(active == tile.WARP)


def run(op: ir.TileOp, registers: Operand, shared: Operand, local: LocalArray,
        smem: SharedArray, warps: np.ndarray, geo: Geometry, site: Site) -> None:
    """Executes ``op`` for ``warps`` over ``local`` (the register storage) and ``smem``."""
    lanes = (warps[:, None] * tile.WARP + np.arange(tile.WARP)).ravel()  # invocations
    blocks = geo.lane_block[lanes[:: tile.WARP]]
    threads = geo.lane_thread[lanes].astype(np.int32)
    reg_words = local.data.view("<u4").reshape(geo.invocations, registers.words)
    shared_words = smem.data.view("<u4")
    per_word = 32 // shared.bits  # storage elements per 32-bit word (1 or 2)
    facts = atoms.LDMATRIX
    matrix, row = facts.provided(op.count)[: facts.rows * op.count].T
    owner = tile.low_half_holders(op)  # [row, word] -> lane
    for rep in tile.instructions(registers.layout):
        # starts[m, r]: the word offset the provider of row r of matrix m gave
        starts = np.empty((op.count, facts.rows), np.int64)
        starts[matrix, row] = tile.provider_rows(op, shared.layout, rep)[: facts.rows * op.count]
        # words[w, m, r, k]: word k of row r of matrix m in warp w's block
        words = ((blocks * shared.words)[:, None, None, None]
                 + (starts + shared.offset)[None, :, :, None] + np.arange(facts.row_words))
        slots = tile.register_slots(registers.layout, rep) + registers.offset
        holder = np.broadcast_to(threads.reshape(-1, tile.WARP)[:, None, owner], words.shape)
        elements = (words[..., None] * per_word + np.arange(per_word)).ravel()
        by_thread = np.repeat(holder.ravel(), per_word)
        if op.kind == "ldmatrix":
            smem.read(elements, by_thread, None, site)
            regs = tile.gather_rows(op, shared_words[words])
            reg_words[lanes.reshape(-1, tile.WARP)[..., None], slots] = regs
        else:
            smem.write(elements, by_thread, None, site)
            regs = reg_words[lanes.reshape(-1, tile.WARP)[..., None], slots]
            shared_words[words] = tile.scatter_rows(op, regs)
