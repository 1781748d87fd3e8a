"""Bulk tensor copies completed by mbarriers (``ir.BulkStmt``, ``specs/ir.md``,
``specs/simulator.md``): the box lands 128-byte swizzled with zeros outside the tensor, and
the simulator reports an access before the copy's phase was waited for, a copy into elements
another invocation still reads, and mbarriers used against their rules."""

from __future__ import annotations

import numpy as np
import pytest

import sarek
from sarek import ir, ir_check
from sarek.ir import BinOp, Builtin, ElemType, MemSpace
from sarek.ir_build import binary, const, var

THREADS = 64
ROWS, COLS = 16, 64  # a box of 16 rows of 128 bytes (f16)
BOX_BYTES = ROWS * COLS * 2
F16, U64, I32 = ElemType.F16, ElemType.U64, ElemType.I32


def placed(r: int, c: int) -> int:
    """Where element (r, c) of a 64-wide f16 box lands under the 128-byte swizzle (PTX ISA:
    the 16-byte chunk index of each 128-byte row is xored with the row index mod 8)."""
    return r * 64 + ((c // 8) ^ (r % 8)) * 8 + c % 8


def tid() -> ir.Expr:
    return ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def elected(*body: ir.Stmt) -> ir.If:
    return ir.If(cond=binary(BinOp.EQ, tid(), const(0)), then=body)


def copy(stage: int = 0, barrier: int = 0, **change: object) -> ir.BulkTensorCopy:
    fields: dict[str, object] = dict(
        dst="sk_t", dst_offset=const(stage * ROWS * COLS), src="a", origin=const(0),
        row_stride=var("k"), extent_rows=var("m"), extent_cols=var("k"), row=const(0),
        col=const(0), rows=ROWS, cols=COLS, swizzle=128, barriers="sk_bar",
        index=const(barrier))
    fields.update(change)
    return ir.BulkTensorCopy(**fields)  # type: ignore[arg-type]


def arrive(barrier: int = 0, tx: int = BOX_BYTES) -> ir.MbarrierArrive:
    return ir.MbarrierArrive(barriers="sk_bar", index=const(barrier), tx_bytes=const(tx))


def wait(parity: int, barrier: int = 0) -> ir.MbarrierWait:
    return ir.MbarrierWait(barriers="sk_bar", index=const(barrier), parity=const(parity))


def read_box(stage: int = 0) -> ir.For:
    """Every thread copies its share of the stage's box, unswizzled by the placement rule of
    the test (``placed``), into ``out`` row-major."""
    e = var("e")
    r, c = binary(BinOp.DIV, e, const(COLS)), binary(BinOp.REM, e, const(COLS))
    chunk = binary(BinOp.XOR, binary(BinOp.DIV, c, const(8)), binary(BinOp.REM, r, const(8)))
    at = binary(BinOp.ADD, binary(BinOp.ADD, binary(BinOp.MUL, r, const(64)),
                                  binary(BinOp.MUL, chunk, const(8))),
                binary(BinOp.REM, c, const(8)))
    at = binary(BinOp.ADD, at, const(stage * ROWS * COLS))
    return ir.For(var="e", start=tid(), stop=const(ROWS * COLS), step=const(THREADS), body=(
        ir.Store(array="out", index=e, value=ir.Load(array="sk_t", index=at, type=F16)),))


def kernel(*body: ir.Stmt, init: bool = True) -> ir.Kernel:
    decls = (ir.ArrayDecl(name="sk_t", elem=F16, size=2 * ROWS * COLS, space=MemSpace.SHARED,
                          align=1024),
             ir.ArrayDecl(name="sk_bar", elem=U64, size=2, space=MemSpace.SHARED, align=8))
    start = (elected(*(ir.MbarrierInit(barriers="sk_bar", index=const(i), arrivals=1)
                       for i in range(2))), ir.Barrier()) if init else ()
    return ir.Kernel(name="bulk", params=(
        ir.ArrayParam(name="a", elem=F16), ir.ArrayParam(name="out", elem=F16),
        ir.ScalarParam(name="m", elem=I32), ir.ScalarParam(name="k", elem=I32)),
        body=(*decls, *start, *body), block=(THREADS, 1, 1))


def run(k: ir.Kernel, m: int = 10, cols: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    a = rng.integers(-8, 8, size=m * cols).astype(np.float16)
    out = sarek.simulate(k, {"a": a, "out": np.zeros(ROWS * COLS, np.float16), "m": m,
                             "k": cols}, block=(THREADS, 1, 1))["out"]
    return a, out


ONE_STAGE = (elected(arrive(), copy()), wait(0), read_box())


def test_a_bulk_copy_lands_its_box_swizzled_and_zero_outside_the_tensor() -> None:
    a, out = run(kernel(*ONE_STAGE), m=10, cols=40)
    want = np.zeros((ROWS, COLS), np.float16)
    want[:10, :40] = a.reshape(10, 40)
    assert np.array_equal(out.reshape(ROWS, COLS), want)
    assert not np.signbit(out.reshape(ROWS, COLS)[10:, :]).any()  # +0.0, not -0.0


def test_the_placement_is_the_swizzle_of_the_box_address() -> None:
    # the test's rule and the fact in sarek.atoms agree on every element of the box
    from sarek import atoms

    swizzle = atoms.TMA_SWIZZLE[128]
    assert all(int(swizzle((r * 64 + c) * 2)) // 2 == placed(r, c)
               for r in range(ROWS) for c in range(COLS))


def test_a_box_past_the_origin_reads_from_its_coordinates() -> None:
    k = kernel(elected(arrive(), copy(row=const(8), col=const(8))), wait(0), read_box())
    a, out = run(k, m=20, cols=24)
    want = np.zeros((ROWS, COLS), np.float16)
    want[:12, :16] = a.reshape(20, 24)[8:, 8:]
    assert np.array_equal(out.reshape(ROWS, COLS), want)


def test_reading_a_stage_before_waiting_for_its_phase_is_a_race() -> None:
    with pytest.raises(sarek.SharedRace, match=r"still being copied by a bulk tensor copy .*"
                       r"has not waited for phase 0 of mbarrier 0"):
        run(kernel(elected(arrive(), copy()), read_box()))


def test_a_copy_into_a_stage_another_invocation_still_reads_is_a_race() -> None:
    refill = elected(arrive(), copy())
    with pytest.raises(sarek.SharedRace, match="write-after-read race on shared array 'sk_t'"):
        run(kernel(*ONE_STAGE, refill, wait(1), read_box()))
    run(kernel(*ONE_STAGE, ir.Barrier(), refill, wait(1), read_box()))  # after a barrier


def test_a_copy_into_a_stage_whose_last_copy_the_issuer_did_not_wait_for_is_a_race() -> None:
    with pytest.raises(sarek.SharedRace, match="still being copied by a bulk tensor copy"):
        run(kernel(elected(arrive(tx=2 * BOX_BYTES), copy(), copy()), wait(0)))


def test_two_stages_alternate_their_phases() -> None:
    rounds = []
    for trip in range(3):
        stage = trip % 2
        rounds += [elected(arrive(stage), copy(stage, stage)), wait(trip // 2 % 2, stage),
                   read_box(stage), ir.Barrier()]
    a, out = run(kernel(*rounds), m=16, cols=64)
    assert np.array_equal(out, a)


def test_waiting_with_the_parity_of_a_phase_already_passed_is_misuse() -> None:
    # phase 0 seen, phase 1 complete: parity 0 names phase 2, which is in progress
    again = (ir.Barrier(), elected(arrive(), copy()))
    with pytest.raises(sarek.MbarrierMisuse, match="parity names the phase in progress"):
        run(kernel(*ONE_STAGE, *again, wait(0)))
    run(kernel(*ONE_STAGE, *again, wait(1), read_box()))
    # phases 1 and 2 complete unseen: parity 1, meant for phase 1, names phase 3
    twice = (ir.Barrier(), elected(arrive(), copy(stage=1)), elected(arrive(), copy(stage=0)))
    with pytest.raises(sarek.MbarrierMisuse, match="parity names the phase in progress"):
        run(kernel(*ONE_STAGE, *twice, wait(1)))


def test_a_wait_before_the_arrival_never_returns_and_is_reported() -> None:
    with pytest.raises(sarek.MbarrierMisuse, match="would never return"):
        run(kernel(wait(0), elected(arrive(), copy())))


def test_an_mbarrier_used_before_its_initialization_is_reported() -> None:
    with pytest.raises(sarek.MbarrierMisuse, match="no mbarrier_init has initialized"):
        run(kernel(*ONE_STAGE, init=False))


def test_a_phase_with_more_arrivals_than_it_expects_is_reported() -> None:
    with pytest.raises(sarek.MbarrierMisuse, match="more invocations arrive"):
        run(kernel(arrive(tx=0)))


def test_a_swizzled_box_lands_1024_byte_aligned() -> None:
    with pytest.raises(sarek.OutOfBounds, match="not 1024-byte aligned"):
        run(kernel(elected(arrive(), copy(dst_offset=const(64))), wait(0)))


def test_the_statements_round_trip_through_json() -> None:
    k = kernel(*ONE_STAGE)
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    assert ir.family(copy()) == "bulk"


@pytest.mark.parametrize(("change", "reason"), [
    ({"origin": var("e")}, "built at launch from scalar parameters and constants; 'e' is not"),
    ({"cols": 32}, "under the 128-byte swizzle is 128 bytes wide, not 64"),
    ({"src": "sk_t"}, "reads an array parameter"),
])
def test_the_checker_refuses_a_copy_no_tensor_map_describes(change: dict[str, object],
                                                            reason: str) -> None:
    k = kernel(ir.Let(name="e", type=I32, value=const(0)), elected(arrive(), copy(**change)))
    assert any(reason in p.reason for p in ir_check.check(k))


def test_the_checker_wants_mbarriers_in_a_shared_u64_array() -> None:
    k = kernel(ir.MbarrierWait(barriers="sk_t", index=const(0), parity=const(0)))
    assert any("mbarriers live in a shared array of u64; 'sk_t'" in p.reason
               for p in ir_check.check(k))
