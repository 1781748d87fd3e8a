"""The names the recognizer's passes share: the placeholders of the reduction indices and of
the global invocation indices, how a refusal names a coordinate, the limits of what is
accepted, and ``Refusal``, the internal exception that carries a reason up to ``recognize``."""

from __future__ import annotations

from sarek.dtypes import int_range
from sarek.gemm import BATCH, COL, ROW
from sarek.ir import ElemType

REDUCTION_INDEX = "%p"
"""The k-loop's variable (of an untiled reduction)."""
STEP_START = "%t"
"""The outer variable of a staged k-loop: the reduction index where the step starts (a loop
stepping by the tile) or the step's number (a loop counting tiles)."""
STEP_OFFSET = "%kk"
"""The inner variable of a staged k-loop: the position inside the step."""
REDUCTION_NAMES = (REDUCTION_INDEX, STEP_START, STEP_OFFSET)

GLOBAL_ID = {axis: f"%gid.{axis}" for axis in "xyz"}
"""The global invocation index along each launch axis, as the atom that replaces the thread
and block coordinates once their combination is known."""

COORD_NAMES = {ROW: "row", COL: "col", BATCH: "batch", REDUCTION_INDEX: "p", STEP_START: "p",
               STEP_OFFSET: "p"}
"""How a refusal names each coordinate placeholder."""

MAX_NODES = 20_000
"""An initial value or epilogue larger than this is refused (inlining can blow up)."""

I32_MIN, I32_MAX = int_range(ElemType.I32)

TOO_DEEP = "the kernel's expressions are nested too deeply to analyse"


class Refusal(Exception):
    """Internal: recognition failed; carries the reason up to ``recognize``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
