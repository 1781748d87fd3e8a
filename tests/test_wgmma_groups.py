"""``wgmma`` groups left in flight while registers of older ones are added, B read from a
column block of its staged rows, and how the CUDA printer prints them: the pieces that let
Bf16x3's sub-step sums of one strip run while the next strip's products are in flight."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import example
from test_prepass import bits, cuda_steps, on_h200
from test_wgmma import _value

from backends.cstyle import EmitError
from backends.cuda.wgmma import CoreLayout, fence_and_wait
from backends.pipeline import compile_launch
from backends.registry import target
from sarek import ir
from sarek.ir import ElemType, MemSpace
from sarek.ir_build import add, const, mul, var
from sarek.ir_walk import substitute
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule
from sarek.staging import Fragments, Staging

F32 = ElemType.F32


def _decl(name: str) -> ir.ArrayDecl:
    return ir.ArrayDecl(name=name, elem=F32, size=32, space=MemSpace.LOCAL)


def _fill(name: str) -> ir.For:
    return ir.For(var="r", start=const(0), stop=const(32), step=const(1), body=(
        ir.Store(array=name, index=var("r"), value=ir.Const(value=-0.0, type=F32)),))


def _add(acc: str, fresh: str) -> ir.For:
    total = add(ir.Load(array=acc, index=var("r"), type=F32),
                ir.Load(array=fresh, index=var("r"), type=F32))
    return ir.For(var="r", start=const(0), stop=const(32), step=const(1), body=(
        ir.Store(array=acc, index=var("r"), value=total),))


def _wgmma(d: str, n: int = 64) -> ir.Wgmma:
    return ir.Wgmma(elem=ElemType.BF16, n=n, d=d, a="sa", b="sb", b_index=const(0),
                    core_k=64, core_n=4096, swizzle=128, a_index=const(0))


DECLS = tuple(_decl(name) for name in ("f0", "f1", "acc0", "acc1"))


def _shape(out: tuple[ir.Stmt, ...]) -> list[str]:
    """Each statement after the declarations: W (fenced), w (not), wait N, fill X, add X."""
    names = []
    for s in out[len(DECLS):]:
        match s:
            case ir.Wgmma(d=d, fenced=fenced):
                names.append(("W " if fenced else "w ") + d)
            case ir.WgmmaWait(pending=pending):
                names.append(f"wait {pending}")
            case ir.For(body=(ir.Store(array=name, value=ir.Const()),)):
                names.append(f"fill {name}")
            case ir.For(body=(ir.Store(value=ir.Binary(b=ir.Load(array=fresh))),)):
                names.append(f"add {fresh}")
            case _:
                names.append(type(s).__name__)
    return names


def test_a_strips_add_waits_only_for_its_own_group_the_next_one_stays_in_flight() -> None:
    body = (*DECLS, _fill("f0"), _wgmma("f0"), _wgmma("f0"), _fill("f1"), _wgmma("f1"),
            _add("acc0", "f0"), _fill("f0"), _wgmma("f0"), _add("acc1", "f1"),
            _add("acc0", "f0"))
    assert _shape(fence_and_wait(body)) == [
        "fill f0", "W f0", "w f0",
        "wait 1",  # f1's fill touches no register of f0's group: commit it, keep it running
        "fill f1", "W f1",
        "wait 1",  # f0's group done, f1's still in flight
        "add f0", "fill f0", "W f0",
        "wait 1", "add f1",
        "wait 0",  # no open run: a wait for all (a commit would count an empty group)
        "add f0"]


def test_a_statement_on_the_open_runs_registers_or_off_registers_waits_for_all() -> None:
    assert _shape(fence_and_wait((*DECLS, _wgmma("f0"), _add("acc0", "f0")))) == [
        "W f0", "wait 0", "add f0"]
    barrier = fence_and_wait((*DECLS, _wgmma("f0"), _fill("f1"), _wgmma("f1"), ir.Barrier()))
    assert _shape(barrier) == ["W f0", "wait 1", "fill f1", "W f1", "wait 0", "Barrier"]
    # a store to shared memory is not a register statement
    shared = ir.ArrayDecl(name="s", elem=F32, size=32, space=MemSpace.SHARED)
    store = ir.Store(array="s", index=const(0), value=ir.Const(value=1.0, type=F32))
    assert _shape(fence_and_wait((*DECLS, shared, _wgmma("f0"), store)))[-2:] == [
        "wait 0", "Store"]


def test_a_wgmma_is_fenced_unless_it_follows_one_of_its_shape() -> None:
    out = fence_and_wait((*DECLS, _wgmma("f0"), _wgmma("f0"), _wgmma("f0", 128),
                          _wgmma("f1", 128)))
    assert _shape(out) == ["W f0", "w f0", "W f0", "w f1", "wait 0"]


def test_a_wgmma_on_a_register_of_a_group_in_flight_waits_for_it() -> None:
    out = fence_and_wait((*DECLS, _wgmma("f0"), _fill("f1"), _wgmma("f0")))
    assert _shape(out) == ["W f0", "wait 1", "fill f1", "wait 0", "W f0", "wait 0"]


@pytest.mark.parametrize(("swizzle", "block"), [(True, 64), (False, 8)])
def test_b_read_from_a_column_block_starts_where_its_first_element_lies(
        swizzle: bool, block: int) -> None:
    layout = CoreLayout(rows=64, pitch=128, swizzle=swizzle, cols=128)
    buffer = 64 * 128
    for slot in range(3):
        for k in (0, 16, 48):
            for col in range(0, 128, block):
                neutral = add(mul(var("sk_slot"), const(buffer)), const(k * 128 + col))
                start = substitute(layout.start(neutral), {"sk_slot": const(slot)})
                first = layout.element(const(slot * buffer), const(k), const(col))
                assert _value(start) == _value(first), (slot, k, col)


def test_b_read_from_inside_a_column_block_is_refused() -> None:
    layout = CoreLayout(rows=64, pitch=128, swizzle=True, cols=128)
    with pytest.raises(EmitError, match="column 32 of a staged row"):
        layout.start(add(mul(var("sk_slot"), const(64 * 128)), const(32)))
    with pytest.raises(EmitError, match="cannot tell"):  # no multiple of the row before it
        layout.start(add(var("sk_slot"), const(64)))


def test_the_strips_split_into_columns_only_under_sub_step_sums() -> None:
    schedule = Schedule.parse("t128x128k64s2g")
    cuda = target("cuda").staging
    assert cuda.sum_strip_cols == 64
    assert cuda.fragments(schedule, 16, step_sums=True) == Fragments(
        rows=1, cols=2, m=16, n=64, shared_b=True)
    assert cuda.fragments(schedule, 16) == Fragments(rows=1, cols=1, m=16, n=128,
                                                     shared_b=True)
    # a tile no wider than the strips keeps one strip a row
    narrow = Staging(strip_rows=16, sum_strip_cols=128)
    assert narrow.fragments(schedule, 16, step_sums=True).cols == 1


def test_the_policys_bf16x3_kernel_is_the_seeds_bits_in_the_simulator() -> None:
    # the simulator runs the lowered kernel, its groups in flight included, and reports a
    # register touched before the wait that completes its group (sarek.RegisterRace)
    launch = example("gemm_f32").make(150, 270, 70, seed=3)
    steps = cuda_steps(launch, Lowering.BF16X3_OPERANDS, Schedule.parse("t128x128k64s2gwro"))
    seed = cuda_steps(launch, Lowering.BF16X3_OPERANDS, Schedule())
    assert np.array_equal(bits(on_h200(steps)["c"]), bits(on_h200(seed)["c"]))


@pytest.fixture(scope="module")
def bf16x3_text() -> str:
    launch = example("gemm_f32").make(256, 256, 256)
    return compile_launch(target("cuda"), launch, lowering=Lowering.BF16X3_OPERANDS,
                          schedule=Schedule.parse("t128x128k64s2gwro")).text


def test_the_printer_pins_the_strip_a_wait_completes_before_its_add(bf16x3_text: str) -> None:
    lines = [line.strip() for line in bf16x3_text.splitlines()]
    waits = [n for n, line in enumerate(lines) if "wgmma.wait_group.sync.aligned 1;" in line]
    commits, pins = 0, 0
    for n in waits:
        pinned = re.match(r'asm volatile\(""\s*:\s*"\+f"\((\w+)\[0\]\)', lines[n + 1])
        if pinned is None:  # the first strip's group, committed and left in flight
            assert "mov.b32" in next(line for line in lines[n + 1:] if "sk_step" in line)
            commits += 1
            continue
        added = next(line for line in lines[n + 2:] if "__fadd_rn" in line)
        assert f", {pinned.group(1)}[" in added  # the add reads the strip just pinned
        pins += 1
    assert (commits, pins) == (1, 7)  # eight strip groups a 64-deep step, the last's add
    # after a wait for all


def test_the_fresh_strips_are_filled_by_asm_movs_of_negative_zero(bf16x3_text: str) -> None:
    fills = re.findall(r'asm volatile\("mov\.b32 %0, (0x[0-9a-f]+);" : "=f"\((\w+)\[',
                       bf16x3_text)
    assert {name for _, name in fills} == {"sk_step0_0_0", "sk_step0_0_1"}
    assert {bits for bits, _ in fills} == {"0x80000000"}  # -0.0
    assert not re.search(r"sk_step0_0_\d\[sk_r\d+\] = ", bf16x3_text)  # no C assignment
