"""What each target prints, by statement family (``sarek.ir.STATEMENT_FAMILIES``), and the one
refusal of every other statement: a backend names the families it takes and asks here."""

from __future__ import annotations

from collections.abc import Iterable

from backends.cstyle import EmitError
from sarek import ir
from sarek.ir_walk import walk

WHY = {
    "plain": "it prints scalar code",
    "staging": "staged copies are lowered for the target first (its lower, or emit, which "
               "does)",
    "fragment": "neutral fragment statements are lowered for the target first (its lower, or "
                "emit, which does)",
    "tile": "tile patterns are NVIDIA ldmatrix/stmatrix moves, which CUDA's lowering writes "
            "out lane by lane: print the kernel for cuda",
    "warp": "ldmatrix, stmatrix, mma.sync and cp.async are NVIDIA warp instructions: print the "
            "kernel for cuda or opencl-nv",
    "warpgroup": "wgmma is an sm_90a warpgroup instruction: print the kernel for cuda (NVRTC "
                 "builds it for sm_90a)",
    "bulk": "bulk tensor copies and mbarriers are sm_90 instructions: print the kernel for cuda",
    "roles": "warp roles, register reallocation and named barriers are sm_90a warp "
             "specialization: print the kernel for cuda",
}
"""Why a target that does not take a family refuses its statements, and what to do instead."""

NEUTRAL = frozenset({"plain", "staging", "fragment"})
"""What the neutral rewrite emits, and what the targets with matrix-level fragments (SPIR-V's
cooperative matrices, Metal's simdgroup matrices) take."""


def refusal(s: ir.Stmt, takes: frozenset[str], target: str) -> EmitError | None:
    """The error for statement ``s`` when ``target`` takes none of its family, else None."""
    family = ir.family(s)
    if family in takes:
        return None
    return EmitError(f"{target} has no {s.kind} statement: {WHY[family]}")


def refuse_outside(stmts: Iterable[ir.Stmt], takes: frozenset[str], target: str) -> None:
    """Raises the refusal of the first statement (nested ones included) of a family
    ``target`` does not take."""
    for s in walk(tuple(stmts)):
        if (error := refusal(s, takes, target)) is not None:
            raise error
