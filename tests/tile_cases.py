"""Hypothesis strategies for ldmatrix/stmatrix operands, and the contract written as a direct
NumPy gather (independent of ``sarek.tile``'s provider/owner formulation)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from sarek.layout import S, Stride, TileLayout, laneid


@dataclass(frozen=True)
class Case:
    """One legal tile pattern: the opcode, the shared layout (words), the register layout, the
    sizes of both storages in words."""

    opcode: str
    count: int
    trans: bool
    repeats: int
    shared: TileLayout
    shared_words: int
    registers: TileLayout
    register_words: int


@st.composite
def legal_cases(draw: st.DrawFn, kind: str = "ldmatrix") -> Case:
    count = draw(st.sampled_from([1, 2, 4]))
    trans = draw(st.booleans())
    repeats = draw(st.integers(1, 3))
    # Rows are 4 consecutive words at 16-byte boundaries: row slots are multiples of 4 words,
    # placed by random strides (interleaved, gapped), never overlapping.
    while True:
        slots = [draw(st.integers(1, 40)) for _ in range(3)]  # in rows of 4 words
        rep_s, m_s, r_s = (4 * s for s in slots)
        layout = TileLayout(S[(repeats, count, 8, 4) : (rep_s, m_s, r_s, 1)])
        starts = layout.offsets()[..., 0].ravel()
        if len(np.unique(starts)) == starts.size:
            break
    shared_words = int(starts.max()) + 4 + 4 * draw(st.integers(0, 3))
    while True:
        rep_t, m_t = draw(st.integers(1, 9)), draw(st.integers(1, 9))
        used = [a * rep_t + m * m_t for a in range(repeats) for m in range(count)]
        if len(set(used)) == len(used):
            break
    registers = TileLayout(shape=(repeats, count, 8, 4),
                           stride=(rep_t, m_t, 4 @ laneid, 1 @ laneid))
    register_words = max(used) + 1 + draw(st.integers(0, 3))
    op = f"{kind}.sync.aligned.m8n8.x{count}{'.trans' if trans else ''}.shared.b16"
    return Case(op, count, trans, repeats, layout, shared_words, registers, register_words)


def expected_registers(case: Case, shared_words: np.ndarray, sentinel: int) -> np.ndarray:
    """``[lane, slot]`` after ldmatrix, straight from the contract's words: register word
    (m, row, w) of lane 4*row + w is shared word (m, row, w); with .trans its halves are the
    16-bit elements (2w, row) and (2w + 1, row) of the matrix."""
    out = np.full((32, case.register_words), sentinel, np.uint32)
    halves = shared_words.view("<u2")
    off, slot = case.shared.offsets(), case.registers.offsets()
    for a in range(case.repeats):
        for m in range(case.count):
            for lane in range(32):
                row, w = divmod(lane, 4)
                if not case.trans:
                    value = shared_words[off[a, m, row, w]]
                else:
                    lo = halves[2 * off[a, m, 2 * w, 0] + row]
                    hi = halves[2 * off[a, m, 2 * w + 1, 0] + row]
                    value = np.uint32(lo) | (np.uint32(hi) << np.uint32(16))
                out[lane, slot[a, m, row, w]] = value
    return out


def expected_shared(case: Case, registers: np.ndarray, shared_words: np.ndarray) -> np.ndarray:
    """The shared words after stmatrix from ``registers[lane, slot]``: the inverse map."""
    out = shared_words.copy()
    halves = out.view("<u2")
    off, slot = case.shared.offsets(), case.registers.offsets()
    for a in range(case.repeats):
        for m in range(case.count):
            for lane in range(32):
                row, w = divmod(lane, 4)
                word = registers[lane, slot[a, m, row, w]]
                if not case.trans:
                    out[off[a, m, row, w]] = word
                else:
                    halves[2 * off[a, m, 2 * w, 0] + row] = word & 0xFFFF
                    halves[2 * off[a, m, 2 * w + 1, 0] + row] = word >> 16
    return out


def with_stride(layout: TileLayout, mode: int, stride: Stride) -> TileLayout:
    strides = list(layout.stride)
    strides[mode] = stride
    return TileLayout(shape=layout.shape, stride=tuple(strides))
