"""Recognize a GEMM nest in a kernel.

``recognize(kernel)`` reads the IR (never the Python source) and returns a ``Gemm``
(``sarek.gemm``): what every invocation computes, as IR expressions over the original kernel's
parameters, so that a rewrite can re-emit them. A kernel that is not one of the GEMM shapes of
``specs/matrix-pattern-rewrite.md`` raises ``NotAGemm`` whose ``reason`` names the construct (and
its source line when the DSL recorded one).

How it works, one module a step. ``structure`` executes the body symbolically: ``Let`` values
are inlined, the bounds guard is collected from the ``if`` statements and early returns on the
way to the single store, and the k-loop's update is matched against ``acc + A*B``, ``A*B + acc``
or ``fma(A, B, acc)``, the accumulator a scalar or the output element (``operands`` reads its
factors, ``staged`` a k-loop staged through shared memory, as hand-written tiled kernels do).
``normalize`` turns integer index expressions into polynomials (``sarek.affine``) whose atoms
are parameters, launch builtins and the loop variables. ``mapping`` replaces the thread and
block coordinates by global indices (``block_idx.y * block_dim.y + thread_idx.y``, or
``block_idx.x * T + thread_idx.x // T`` for a 1-D block read as a tile) and proposes the
readings of those as the output row, column and batch. ``assemble`` checks, for
one reading, that every address comes out affine in row, column, batch and the reduction index,
with coefficients built from scalar parameters and constants, and builds the ``Gemm``;
``recognizer`` runs the steps and picks the reading. ``vocabulary`` holds the names they share.
"""

from sarek.gemm import (
    ACC,
    BATCH,
    COL,
    ROW,
    Access,
    Gemm,
    GlobalIndex,
    Mapping,
    Mapping1D,
    Mapping2D,
    NotAGemm,
    Staging,
    ThreadSplit,
)
from sarek.ir_format import format_expr
from sarek.ir_walk import substitute
from sarek.matrix_pattern.recognizer import recognize

__all__ = [
    "ACC",
    "BATCH",
    "COL",
    "ROW",
    "Access",
    "Gemm",
    "GlobalIndex",
    "Mapping",
    "Mapping1D",
    "Mapping2D",
    "NotAGemm",
    "Staging",
    "ThreadSplit",
    "format_expr",
    "recognize",
    "substitute",
]
