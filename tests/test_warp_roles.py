"""Warp roles (``ir.WarpRoles``, ``specs/ir.md``, ``specs/simulator.md``): a producer
warpgroup hands a ring of shared buffers to a consumer warpgroup through "full" and "empty"
mbarriers. The simulator runs the roles as tasks that wait for each other, gives the
pipeline's result, and reports a consumer that reads a buffer before its full phase, a
producer that refills one before its empty phase, and a wait nothing can complete."""

from __future__ import annotations

import numpy as np
import pytest

import sarek
from sarek import ir, ir_check
from sarek.errors import IRError
from sarek.ir import BinOp, Builtin, ElemType, MemSpace
from sarek.ir_build import add, binary, const, mul, var

WARPGROUP = 128
SLOTS, STEPS = 2, 5
F32, U64, I32 = ElemType.F32, ElemType.U64, ElemType.I32
FULL, EMPTY = 0, SLOTS  # mbarrier indices: full[s] = s, empty[s] = SLOTS + s


def tid() -> ir.Expr:
    return ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def slot() -> ir.Expr:
    return binary(BinOp.REM, var("i"), const(SLOTS))


def round_parity(back: int = 0) -> ir.Expr:
    """The parity of the phase of step ``i``'s slot, ``back`` rounds before this one."""
    rounds = binary(BinOp.SUB, binary(BinOp.DIV, var("i"), const(SLOTS)), const(back))
    return binary(BinOp.REM, rounds, const(2))


def wait(first: int, parity: ir.Expr) -> ir.MbarrierWait:
    return ir.MbarrierWait(barriers="sk_bar", index=add(const(first), slot()), parity=parity)


def arrive(first: int) -> ir.MbarrierArrive:
    return ir.MbarrierArrive(barriers="sk_bar", index=add(const(first), slot()),
                             tx_bytes=const(0))


def producer(*, wait_empty: bool = True, steps: int = STEPS) -> tuple[ir.Stmt, ...]:
    """Step ``i`` stores ``x[i*128 + t]`` into its slot, then arrives on the slot's full
    mbarrier; from the second round on it first waits for the slot's empty phase."""
    me = binary(BinOp.SUB, tid(), const(WARPGROUP))
    refill = binary(BinOp.GE, var("i"), const(SLOTS))
    store = ir.Store(array="sk_ring", index=add(mul(slot(), const(WARPGROUP)), me),
                     value=ir.Load(array="x", index=add(mul(var("i"), const(WARPGROUP)), me),
                                   type=F32))
    body: tuple[ir.Stmt, ...] = (store, arrive(FULL))
    if wait_empty:
        body = (ir.If(cond=refill, then=(wait(EMPTY, round_parity(1)),)), *body)
    return (ir.SetMaxNReg(registers=40, increase=False),
            ir.For(var="i", start=const(0), stop=const(steps), step=const(1), body=body))


def consumer(*, wait_full: bool = True) -> tuple[ir.Stmt, ...]:
    """Step ``i`` waits for its slot's full phase, writes the slot reversed into
    ``out[i*128 ...]`` (each thread reads another's element), then arrives on empty."""
    mirrored = add(mul(slot(), const(WARPGROUP)), binary(BinOp.SUB, const(WARPGROUP - 1), tid()))
    copy = ir.Store(array="out", index=add(mul(var("i"), const(WARPGROUP)), tid()),
                    value=ir.Load(array="sk_ring", index=mirrored, type=F32))
    body: tuple[ir.Stmt, ...] = (copy, arrive(EMPTY))
    if wait_full:
        body = (wait(FULL, round_parity()), *body)
    return (ir.SetMaxNReg(registers=232, increase=True),
            ir.For(var="i", start=const(0), stop=const(STEPS), step=const(1), body=body))


def kernel(consumer_body: tuple[ir.Stmt, ...] | None = None,
           producer_body: tuple[ir.Stmt, ...] | None = None,
           arrivals: int = WARPGROUP) -> ir.Kernel:
    init = ir.If(cond=binary(BinOp.EQ, tid(), const(0)), then=tuple(
        ir.MbarrierInit(barriers="sk_bar", index=const(i), arrivals=arrivals)
        for i in range(2 * SLOTS)))
    roles = ir.WarpRoles(roles=(
        ir.WarpRole(first=0, count=1, body=consumer() if consumer_body is None
                    else consumer_body),
        ir.WarpRole(first=1, count=1, body=producer() if producer_body is None
                    else producer_body)))
    return ir.Kernel(name="ring", params=(
        ir.ArrayParam(name="x", elem=F32, readonly=True), ir.ArrayParam(name="out", elem=F32)),
        body=(ir.ArrayDecl(name="sk_ring", elem=F32, size=SLOTS * WARPGROUP,
                           space=MemSpace.SHARED),
              ir.ArrayDecl(name="sk_bar", elem=U64, size=2 * SLOTS, space=MemSpace.SHARED,
                           align=8),
              init, ir.Barrier(), roles),
        block=(2 * WARPGROUP, 1, 1))


def run(k: ir.Kernel, blocks: int = 1) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(3).standard_normal(STEPS * WARPGROUP).astype(np.float32)
    out = sarek.simulate(k, {"x": x, "out": np.zeros(STEPS * WARPGROUP, np.float32)},
                         grid=(blocks, 1, 1), block=(2 * WARPGROUP, 1, 1))["out"]
    return x, out


def test_the_roles_hand_every_step_through_the_ring() -> None:
    x, out = run(kernel())
    assert np.array_equal(out.reshape(STEPS, WARPGROUP), x.reshape(STEPS, WARPGROUP)[:, ::-1])


def test_every_block_runs_its_roles() -> None:
    x, out = run(kernel(), blocks=3)
    assert np.array_equal(out.reshape(STEPS, WARPGROUP), x.reshape(STEPS, WARPGROUP)[:, ::-1])


def test_a_consumer_that_reads_before_the_full_phase_races() -> None:
    # the consumer runs first and reads the slot; the producer's store then meets that read
    with pytest.raises(sarek.SharedRace, match=r"write-after-read race on shared array "
                       r"'sk_ring' element 0 .*thread \(127, 0, 0\) read it and thread "
                       r"\(128, 0, 0\) writes it"):
        run(kernel(consumer_body=consumer(wait_full=False)))


def test_a_producer_that_refills_before_the_empty_phase_races() -> None:
    with pytest.raises(sarek.SharedRace, match=r"write-after-read race on shared array "
                       r"'sk_ring'"):
        run(kernel(producer_body=producer(wait_empty=False)))


def test_a_wait_no_role_can_complete_is_reported_not_a_hang() -> None:
    # the producer stops a step short: the consumer's last wait is never completed
    with pytest.raises(sarek.MbarrierMisuse, match=r"waits for a phase that no role can "
                       r"complete any more .*mbarrier 0 has completed 2 phases"):
        run(kernel(producer_body=producer(steps=STEPS - 1)))


def test_a_phase_that_needs_more_arrivals_than_come_is_reported() -> None:
    with pytest.raises(sarek.MbarrierMisuse, match="no role can complete"):
        run(kernel(arrivals=WARPGROUP + 1))


def test_the_runs_are_the_same_every_time() -> None:
    assert all(np.array_equal(run(kernel())[1], run(kernel())[1]) for _ in range(3))


def problems(k: ir.Kernel) -> str:
    with pytest.raises(IRError) as info:
        ir_check.ensure_valid(k)
    return str(info.value)


def test_the_checker_accepts_the_ring() -> None:
    ir_check.ensure_valid(kernel())


def test_a_block_wide_barrier_inside_a_role_is_refused() -> None:
    text = problems(kernel(consumer_body=(ir.Barrier(), *consumer())))
    assert "a block-wide barrier inside a warp role" in text


def test_every_warpgroup_belongs_to_one_role() -> None:
    k = kernel()
    roles = k.body[-1]
    assert isinstance(roles, ir.WarpRoles)
    alone = roles.model_copy(update={"roles": roles.roles[:1]})
    assert "warpgroups [1] of the block are in no role" in problems(
        k.model_copy(update={"body": (*k.body[:-1], alone)}))
    twice = roles.model_copy(update={"roles": (*roles.roles, roles.roles[0])})
    assert "warpgroup 0 is in roles 0 and 2" in problems(
        k.model_copy(update={"body": (*k.body[:-1], twice)}))


def test_a_role_past_the_blocks_warpgroups_is_refused_at_once_whatever_its_count() -> None:
    k = kernel()
    roles = k.body[-1]
    assert isinstance(roles, ir.WarpRoles)
    huge = roles.roles[0].model_copy(update={"count": 10**12})
    text = problems(k.model_copy(update={"body": (
        *k.body[:-1], roles.model_copy(update={"roles": (huge,)}))}))
    assert "role 0 takes warpgroups 0 to 999999999999; the block has 2" in text


def test_setmaxnreg_takes_a_multiple_of_eight_from_24_to_256() -> None:
    for registers in (20, 44, 264):
        text = problems(kernel(consumer_body=(ir.SetMaxNReg(registers=registers,
                                                            increase=True),)))
        assert f"multiple of 8 registers from 24 to 256, not {registers}" in text


def test_setmaxnreg_and_named_barriers_belong_to_a_role() -> None:
    k = kernel()
    outside = k.model_copy(update={"body": (ir.SetMaxNReg(registers=40, increase=False),
                                            ir.NamedBarrier(id=1, threads=128), *k.body)})
    text = problems(outside)
    assert "setmaxnreg belongs to a warp role" in text
    assert "a named barrier is a warp role's barrier" in text


def test_a_named_barrier_counts_its_roles_invocations() -> None:
    text = problems(kernel(consumer_body=(ir.NamedBarrier(id=1, threads=256),)))
    assert "named barrier 1 counts 256 invocations; its role has 128" in text


def test_a_named_barrier_orders_its_roles_accesses() -> None:
    # the consumer warpgroup exchanges through the ring behind its own barrier
    t = tid()
    exchange = (ir.Store(array="sk_ring", index=t, value=ir.Cast(x=t, type=F32)),
                ir.NamedBarrier(id=1, threads=WARPGROUP),
                ir.Store(array="out", index=t, value=ir.Load(
                    array="sk_ring", index=binary(BinOp.SUB, const(WARPGROUP - 1), t),
                    type=F32)))
    _, out = run(kernel(consumer_body=exchange, producer_body=()))
    assert np.array_equal(out[:WARPGROUP], np.arange(WARPGROUP)[::-1].astype(np.float32))
    racy = (exchange[0], exchange[2])
    with pytest.raises(sarek.SharedRace, match="read-after-write"):
        run(kernel(consumer_body=racy, producer_body=()))
