"""Which lane holds which element: the register images of NVIDIA's ``mma.sync.m16n8k16``.

Written once, as data, and read by everything that needs it: the CUDA printer (to load, store
and multiply fragments lane by lane) and the tests that check the images against the
simulator's whole-matrix fragments. With ``g = lane / 4`` and ``t = lane % 4`` (PTX ISA,
"Matrix fragments for mma.m16n8k16"):

* A (16 x 16), 16-bit elements: element ``i`` (0..7) at row ``g + 8*((i/2) % 2)``, column
  ``2t + i%2 + 8*(i/4)``; 8-bit elements: element ``i`` at row ``g + 8*(i/4)``, column
  ``4t + i%4``.
* B (16 x 8, k x n), 16-bit: element ``i`` (0..3) at k ``2t + i%2 + 8*(i/2)``, n ``g``; 8-bit:
  element ``i`` at k ``4t + i``, n ``g``.
* C and D (16 x 8), 32-bit: element ``i`` (0..3) at row ``g + 8*(i/2)``, column ``2t + i%2``.

A 32-bit register holds ``32 / bits`` consecutive elements, the lowest index in the lowest bits.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

LANES = 32
Operand = Literal["a", "b", "c"]


def coordinates(operand: Operand, bits: int) -> np.ndarray:
    """``[lane, element, 2]``: the (row, column) of every element each lane holds (for B,
    (k, n)); elements in register order."""
    lane = np.arange(LANES)[:, None]
    g, t = lane // 4, lane % 4
    if operand == "c":
        i = np.arange(4)[None, :]
        return np.stack(np.broadcast_arrays(g + 8 * (i // 2), 2 * t + i % 2), axis=-1)
    count = 8 if operand == "a" else 4
    i = np.arange(count)[None, :]
    if operand == "a":
        if bits == 16:
            rc = (g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4))
        else:
            rc = (g + 8 * (i // 4), 4 * t + i % 4)
    elif bits == 16:
        rc = (2 * t + i % 2 + 8 * (i // 2), g)
    else:
        rc = (4 * t + i, g)
    return np.stack(np.broadcast_arrays(*rc), axis=-1)


def registers(operand: Operand, bits: int) -> int:
    """How many 32-bit registers each lane holds for ``operand``."""
    elements = int(coordinates(operand, bits).shape[1])
    return elements * (32 if operand == "c" else bits) // 32


def gather(matrix: np.ndarray, operand: Operand, bits: int) -> np.ndarray:
    """``[lane, element]``: each lane's elements of ``matrix`` (16x16 A, 16x8 B or C)."""
    rc = coordinates(operand, bits)
    return np.asarray(matrix[rc[..., 0], rc[..., 1]])


def scatter(values: np.ndarray, operand: Operand, bits: int,
            shape: tuple[int, int]) -> np.ndarray:
    """The matrix whose lanes hold ``values[lane, element]`` (the inverse of ``gather``)."""
    out = np.zeros(shape, values.dtype)
    rc = coordinates(operand, bits)
    out[rc[..., 0], rc[..., 1]] = values
    return out
