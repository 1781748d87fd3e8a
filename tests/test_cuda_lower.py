"""The CUDA lowering, executed as printed: for every example and lowering, the lane-explicit
kernel (registers, ldmatrix addresses, mma.sync halves) simulated lane by lane gives the bits
the neutral kernel's whole-matrix fragments give under the same arithmetic model. Planted
errors in the lowering (a swapped register, a wrong ldmatrix row, a swapped element, swapped
B halves) make that comparison fail, so the CPU suite catches them without a GPU."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import sarek
from backends.cstyle import EmitError
from backends.cuda import lower as cuda_lower
from backends.cuda.emit import emit, print_kernel
from backends.registry import target
from sarek import ir
from sarek.coopmat import Available, verdict
from sarek.errors import IRError
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.layout import TileLayout, laneid
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, config_of, lowerings_taking
from sarek.schedule import LARGE, Schedule
from sarek.tile_probe import probe_kernel

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("gemm_*.py"))
CUDA = target("cuda")


def rewrites(size: tuple[int, int, int] = (70, 45, 33)) -> Iterator[tuple[str, Launch]]:
    for path in EXAMPLES:
        launch = load_module(path).make(*size)
        for lowering in lowerings_taking(recognize(launch.kernel).operand_elt):
            rw = rewrite_launch(launch, lowering=lowering, staging=CUDA.staging).launch
            yield f"{path.stem}-{lowering}", rw


CASES = list(rewrites())


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def lowered_matches_neutral(rw: Launch) -> bool:
    neutral = rw.simulate(arith=CUDA.arith)
    lowered = rw.simulate(target="cuda")
    return same_bits(neutral, lowered)


@pytest.mark.parametrize("rw", [rw for _, rw in CASES], ids=[name for name, _ in CASES])
def test_lowered_kernel_simulated_lane_by_lane_equals_the_neutral_kernel(rw: Launch) -> None:
    assert lowered_matches_neutral(rw)


def test_the_lowered_kernel_has_no_neutral_fragments_and_round_trips() -> None:
    for _, rw in CASES:
        lowered = cuda_lower.lower(rw.kernel)
        kinds = {s.kind for s in walk(lowered.body)}
        assert "mma" in kinds and not kinds & {"frag_decl", "frag_load", "frag_mul_add"}
        assert ir.Kernel.model_validate_json(lowered.model_dump_json()) == lowered


def test_aligned_staged_operands_load_with_ldmatrix() -> None:
    for name, rw in CASES:
        counts = {"ldmatrix": 0, "mma": 0}
        for s in walk(cuda_lower.lower(rw.kernel).body):
            counts[s.kind] = counts.get(s.kind, 0) + 1
        assert counts["ldmatrix"] > 0, name


def test_the_printer_prints_exactly_the_lowered_instructions() -> None:
    _, rw = CASES[0]
    lowered = cuda_lower.lower(rw.kernel)
    text = print_kernel(lowered)
    stmts = list(walk(lowered.body))
    assert text.count("mma.sync.aligned.m16n8k16") == sum(s.kind == "mma" for s in stmts)
    assert text.count("ldmatrix.sync.aligned") == sum(s.kind == "ldmatrix" for s in stmts)
    assert emit(rw.kernel) == text


def test_printing_neutral_fragments_without_lowering_is_refused() -> None:
    _, rw = CASES[0]
    with pytest.raises(EmitError, match="lower the kernel for CUDA first"):
        print_kernel(rw.kernel)


def test_fragment_8_is_refused_with_the_reason() -> None:
    launch = load_module(EXAMPLES[0]).make(16, 16, 16)
    rw = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS, frag=8).launch
    with pytest.raises(EmitError, match="no 8x8x8 float shape"):
        sarek.emit(rw.kernel, "cuda")


def test_the_emitted_text_carries_only_the_helpers_it_uses() -> None:
    f32 = load_module(next(p for p in EXAMPLES if p.stem == "gemm_f32")).make(8, 8, 8)
    text = sarek.emit(f32.kernel, "cuda")
    assert "sk_div_i32" not in text and "sk_cvt_" not in text
    one_d = load_module(next(p for p in EXAMPLES if p.stem == "gemm_f32_1d")).make(8, 8, 8)
    assert "sk_div_i32(" in sarek.emit(one_d.kernel, "cuda")  # row = tid / n


def test_emit_validates_its_input() -> None:
    bad = ir.Kernel(name="bad", params=(), body=(
        ir.Store(array="nowhere", index=ir.Const(value=0, type=ir.ElemType.I32),
                 value=ir.Const(value=0, type=ir.ElemType.I32)),))
    with pytest.raises(sarek.IRError, match="nowhere"):
        sarek.emit(bad, "cuda")


def test_the_gate_offers_exactly_what_the_printer_prints() -> None:
    support = CUDA.support()
    assert support.configs is not None
    printable = set()
    for lowering in Lowering:
        for elt in (ir.ElemType.F16, ir.ElemType.BF16, ir.ElemType.F32, ir.ElemType.I32):
            try:
                config = config_of(lowering, elt, 16)
            except sarek.SarekError:
                continue
            assert verdict(config, support) == Available(), config
            printable.add(config)
    # 8-bit fragments reduce 32 deep under CUDA's policy where the steps divide into 32
    from sarek.coopmat import configs_of
    from sarek.schedule import Schedule

    i32 = load_module(next(p for p in EXAMPLES if p.stem == "gemm_i32")).make(64, 64, 64)
    deep = rewrite_launch(i32, staging=CUDA.staging, schedule=Schedule(step=32)).launch.kernel
    for config in configs_of(deep):
        assert config.shape.k == 32 and verdict(config, support) == Available(), config
        printable.add(config)
    for config in support.configs:
        assert config in printable or config.a.value == "s8", config


# ----------------------------------------------------------------- planted lowering errors


def mutation_caught() -> bool:
    """Whether the comparison above fails for some example with the lowering as patched."""
    return not all(lowered_matches_neutral(rw) for _, rw in CASES[:6])


def test_a_swapped_ldmatrix_register_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cuda_lower.ldmatrix_blocks

    def swapped(*args: object) -> object:
        plan = real(*args)  # type: ignore[arg-type]
        if plan is None:
            return None
        blocks, trans = plan
        return [blocks[1], blocks[0], *blocks[2:]], trans

    monkeypatch.setattr(cuda_lower, "ldmatrix_blocks", swapped)
    assert mutation_caught()


def test_a_wrong_ldmatrix_row_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = cuda_lower.ldmatrix_blocks

    def shifted(*args: object) -> object:
        plan = real(*args)  # type: ignore[arg-type]
        if plan is None:
            return None
        blocks, trans = plan
        (r0, c0), *rest = blocks
        return [(r0 + 1, c0), *rest], trans

    monkeypatch.setattr(cuda_lower, "ldmatrix_blocks", shifted)
    assert mutation_caught()


def test_a_swapped_element_of_an_element_wise_move_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = cuda_lower._places

    def swapped(*args: object) -> list[tuple[object, object]]:
        out = real(*args)  # type: ignore[arg-type]
        return [out[1], out[0], *out[2:]]

    monkeypatch.setattr(cuda_lower, "_places", swapped)
    assert mutation_caught()


def test_swapped_b_halves_of_the_two_mma_sync_are_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = cuda_lower._Lowering.mul_add

    def swapped(self: cuda_lower._Lowering, *args: object) -> list[ir.Stmt]:
        first, second = real(self, *args)  # type: ignore[arg-type]
        assert isinstance(first, ir.Mma) and isinstance(second, ir.Mma)
        return [first.model_copy(update={"b_offset": second.b_offset}),
                second.model_copy(update={"b_offset": first.b_offset})]

    monkeypatch.setattr(cuda_lower._Lowering, "mul_add", swapped)
    assert mutation_caught()


@pytest.mark.parametrize("schedule", [LARGE, Schedule(tile=128, step=16),
                                      Schedule(tile=64, step=32), Schedule(prefetch=True),
                                      Schedule(tile=128, step=16, prefetch=True)],
                         ids=lambda s: s.name)
@pytest.mark.parametrize("name", ["gemm_f16", "gemm_i32", "gemm_epilogue"])
def test_larger_schedules_lowered_for_cuda_equal_the_neutral_kernel(schedule: Schedule,
                                                                     name: str) -> None:
    launch = load_module(next(p for p in EXAMPLES if p.stem == name)).make(150, 133, 40)
    rw = rewrite_launch(launch, staging=CUDA.staging, schedule=schedule).launch
    assert lowered_matches_neutral(rw)


# ----------------------------------------------------------------- Bf16x3's fragment adds

BF16X3 = [rw for name, rw in CASES if name.endswith(Lowering.BF16X3_OPERANDS.value)]


def test_a_fragment_add_becomes_a_per_lane_loop_of_round_to_nearest_adds() -> None:
    for rw in BF16X3:
        adds = sum(isinstance(s, ir.FragAdd) for s in walk(rw.kernel.body))
        lowered = cuda_lower.lower(rw.kernel)
        assert adds and "frag_add" not in {s.kind for s in walk(lowered.body)}
        # d[r] = __fadd_rn(a[r], b[r]) for r over the lane's 8 accumulator elements: each
        # sub-step's sums into the running ones, those into the totals, totals and running;
        # in one chunk (these cases' depths) the exact hi·hi's negation (__fsub_rn) and sum
        loops = re.findall(r"for \(int (sk_r\d+) = 0; \1 < 8; \1 \+= 1\) \{\n\s+"
                           r"sk_(?:acc|tot|step)0_\d_\d\[\1\] = __f(add|sub)_rn\("
                           r"sk_(?:acc|tot|step|top)0_\d_\d\[\1\], "
                           r"sk_(?:step|acc|top)0_\d_\d\[\1\]\);", print_kernel(lowered))
        assert len(loops) == adds
        subtracts = sum(isinstance(s, ir.FragAdd) and s.subtract for s in walk(rw.kernel.body))
        assert [op for _, op in loops].count("sub") == subtracts


def test_a_fragment_add_over_half_of_a_lanes_registers_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = cuda_lower._Lowering.frag_add

    def half(self: cuda_lower._Lowering, *args: object) -> list[ir.Stmt]:
        [loop] = real(self, *args)  # type: ignore[arg-type]
        assert isinstance(loop, ir.For)
        return [loop.model_copy(update={"stop": ir.Const(value=4, type=ir.ElemType.I32)})]

    monkeypatch.setattr(cuda_lower._Lowering, "frag_add", half)
    assert not lowered_matches_neutral(BF16X3[0])


def test_a_tile_pattern_lowers_to_one_move_per_repeat_at_its_rows_and_slots() -> None:
    # three x2 repeats; rows of matrix m, row r of repeat a at word 200a + 12m + 24r + 8,
    # register of matrix m of repeat a at word 5a + 2m + 1 (written out from the layouts)
    shared = TileLayout(shape=(3, 2, 8, 4), stride=(200, 12, 24, 1))
    registers = TileLayout(shape=(3, 2, 8, 4), stride=(5, 2, 4 @ laneid, 1 @ laneid))
    kernel = probe_kernel("ldmatrix.sync.aligned.m8n8.x2.shared.b16", shared, 640,
                          registers, 16)
    body = list(kernel.body)
    body[3] = body[3].model_copy(update={"offset": 8})  # the shared view 8 words in
    body[4] = body[4].model_copy(update={"offset": 1})  # the register view 1 word in
    kernel = kernel.model_copy(update={"body": tuple(body)})
    lowered = cuda_lower.lower(kernel)
    assert not any(isinstance(s, ir.TileApply) for s in walk(lowered.body))
    (tile_stmt,) = [s for s in walk(lowered.body) if isinstance(s, ir.LaneTile)]
    assert tile_stmt.rows == 8 and (tile_stmt.dst, tile_stmt.src) == ("regs", "rows")
    assert [m.rows for m in tile_stmt.moves] == [
        ir.ProvidedRows(start=8 + 200 * a, matrix_stride=12, row_stride=24) for a in range(3)]
    assert [m.slots for m in tile_stmt.moves] == [(5 * a + 1, 5 * a + 3) for a in range(3)]
    assert all(isinstance(m, ir.Ldmatrix) and (m.dst, m.src) == ("raw", "sm")
               for m in tile_stmt.moves)


def test_rows_given_by_lane_outside_a_lane_tile_are_refused() -> None:
    kernel = ir.Kernel(name="k", params=(), body=(
        ir.ArrayDecl(name="sm", elem=ir.ElemType.U32, size=64, space=ir.MemSpace.SHARED),
        ir.ArrayDecl(name="raw", elem=ir.ElemType.U32, size=1, space=ir.MemSpace.LOCAL),
        ir.Ldmatrix(dst="raw", offset=0, src="sm", count=1, slots=(0,),
                    rows=ir.ProvidedRows(start=0, matrix_stride=0, row_stride=4))))
    with pytest.raises(IRError, match="in a lane tile only"):
        sarek.ir_check.ensure_valid(kernel)
