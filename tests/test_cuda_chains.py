"""CUDA's lowering emits runs with fresh accumulators one chain at a time
(``backends/cuda/chains.py``): each chain keeps its order, and runs without adds keep theirs."""

from __future__ import annotations

from backends.cuda.chains import by_chain, regroup
from sarek import ir
from sarek.ir import ElemType


def fill(f: str) -> ir.FragFill:
    return ir.FragFill(frag=f, value=ir.Const(value=-0.0, type=ElemType.F32))


def mul_add(d: str, a: str, b: str) -> ir.FragMulAdd:
    return ir.FragMulAdd(d=d, a=a, b=b, c=d)


def add(d: str, x: str) -> ir.FragAdd:
    return ir.FragAdd(d=d, a=d, b=x)


# Products outer, fragments inner, as the neutral rewrite orders a Bf16x3 sub-step.
STEP = [fill("s0"), fill("s1"),
        mul_add("s0", "a0", "b0"), mul_add("s1", "a0", "b1"),
        mul_add("s0", "a1", "b0"), mul_add("s1", "a1", "b1"),
        add("acc0", "s0"), add("acc1", "s1")]


def test_a_run_with_fresh_accumulators_comes_out_one_chain_at_a_time() -> None:
    assert by_chain(STEP) == [fill("s0"), mul_add("s0", "a0", "b0"), mul_add("s0", "a1", "b0"),
                              add("acc0", "s0"), fill("s1"), mul_add("s1", "a0", "b1"),
                              mul_add("s1", "a1", "b1"), add("acc1", "s1")]


def test_a_fragment_read_after_another_chain_writes_it_joins_the_chains() -> None:
    run = [fill("s0"), fill("s1"), mul_add("s0", "a0", "b0"), add("acc0", "s0"),
           add("s1", "acc0"), add("acc1", "s1")]
    assert by_chain(run) == run  # acc0 links the two: one chain, in order


def test_a_run_of_multiply_accumulates_alone_keeps_its_order() -> None:
    run = [mul_add("c0", "a0", "b0"), mul_add("c1", "a0", "b1"), mul_add("c0", "a1", "b0")]
    assert by_chain(run) == run


def test_runs_inside_loops_are_regrouped_and_other_statements_stay_in_place() -> None:
    loop = ir.For(var="k", start=ir.Const(value=0, type=ElemType.I32),
                  stop=ir.Const(value=4, type=ElemType.I32),
                  step=ir.Const(value=1, type=ElemType.I32), body=(ir.Barrier(), *STEP))
    (out,) = regroup((loop,))
    assert isinstance(out, ir.For)
    assert out.body == (ir.Barrier(), *by_chain(STEP))
