"""CUDA's warpgroup kernels store each accumulator from the register that holds it
(``backends.cuda.epilogue``): no exchange through shared memory, no barrier for it, the same
bits; kernels of 16x16 fragments, and runs whose loop reads the exchange otherwise, keep it."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits

import sarek
from backends.cuda import lower as cuda_lower
from backends.registry import target
from sarek import ir
from sarek.ir_build import add, const
from sarek.ir_walk import rebuild, replace_statements, walk
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.schedule import Schedule

RAGGED = (150, 136, 200)  # partial tiles: the outputs' tests decide which lanes store


def rewrite(schedule: str, size: tuple[int, int, int] = RAGGED) -> Launch:
    launch = example("gemm_f16").make(*size, seed=5)
    return rewrite_launch(launch, staging=target("cuda").staging,
                          schedule=Schedule.parse(schedule)).launch


def exchange_uses(kernel: ir.Kernel) -> int:
    """Statements of ``kernel`` that store into or read from the exchange array."""
    def reads(s: ir.Store | ir.Let) -> bool:
        return any(isinstance(x, ir.Load) and x.array == "sk_cs" for x in _loads(s.value))

    return sum(1 for s in walk(kernel.body) if isinstance(s, ir.Store | ir.Let) and (
        (isinstance(s, ir.Store) and s.array == "sk_cs") or reads(s)))


def _loads(e: ir.Expr) -> list[ir.Expr]:
    found: list[ir.Expr] = []
    rebuild(e, lambda x: found.append(x) if isinstance(x, ir.Load) else None)
    return found


def simulate(rw: Launch) -> np.ndarray:
    return bits(sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                               arith="h200", target="cuda")["c"])


@pytest.mark.parametrize("schedule", ["t128k64s2g", "t128x256k64s3gf", "t128x256k64s3gwr"])
def test_warpgroup_kernels_store_from_registers_with_the_seeds_bits(schedule: str) -> None:
    rw = rewrite(schedule)
    lowered = cuda_lower.lower(rw.kernel)
    assert exchange_uses(rw.kernel) > 0  # the neutral kernel goes through the exchange
    assert exchange_uses(lowered) == 0
    assert not any(isinstance(s, ir.NamedBarrier) for s in walk(lowered.body))
    assert np.array_equal(simulate(rw), simulate(rewrite("t64k16")))


def test_kernels_of_16x16_fragments_keep_the_exchange() -> None:
    assert exchange_uses(cuda_lower.lower(rewrite("t128k64s2").kernel)) > 0


def test_a_loop_that_reads_the_exchange_elsewhere_is_kept() -> None:
    kernel = rewrite("t128x256k64s3gf").kernel

    def shifted(s: ir.Stmt) -> list[ir.Stmt] | None:
        if not (isinstance(s, ir.For) and s.var == "sk_q"):
            return None

        def moved(x: ir.Expr) -> ir.Expr | None:
            if isinstance(x, ir.Load) and x.array == "sk_cs":
                return x.model_copy(update={"index": add(x.index, const(1))})
            return None

        def stmt(t: ir.Stmt) -> list[ir.Stmt] | None:
            if isinstance(t, ir.Let | ir.Store):
                return [t.model_copy(update={"value": rebuild(t.value, moved)})]
            return None

        return [s.model_copy(update={"body": replace_statements(s.body, stmt)})]

    tampered = kernel.model_copy(update={"body": replace_statements(kernel.body, shifted)})
    assert exchange_uses(cuda_lower.lower(tampered)) > 0
