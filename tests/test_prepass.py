"""The conversion pre-pass (``sarek.rewrite.prepass``, ``backends.pipeline.rewrite_steps``):
f32 operands rounded once into 16-bit temporaries, then multiplied on ``wgmma`` under the
H200's model with the bits of the ``mma.sync`` kernel that converts while it stages; the
temporaries hold exactly the region's rounded elements; CUDA's policy takes it for large
regions only; every path (the simulator's launch, conformance, the launch records) runs the
sequence."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from conftest import EXAMPLES, example

import sarek
from backends import conformance, registry
from backends.cuda.launch import Ready
from backends.pipeline import compile_launch, rewrite_steps
from sarek import ir
from sarek.ir_walk import walk
from sarek.launch import Launch, Steps
from sarek.matrix_mapping import Region, region
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import RewriteError, operands_refusal, rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.rewrite import prepass
from sarek.schedule import Schedule

WGMMA = Schedule.parse("t128x256k64s3gf")  # 16-bit operands read as they lie in memory
TODAY = Schedule.parse("t128x256k32s3")  # mma.sync, each element converted as it is staged
CONVERTED = [Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS]
ROUNDED = {Lowering.BF16_OPERANDS: ml_dtypes.bfloat16, Lowering.F16_OPERANDS: np.float16}


def cuda_steps(launch: Launch, lowering: Lowering, schedule: Schedule | None) -> Steps:
    return rewrite_steps(launch, lowering=lowering, subgroup=32, frag=16,
                         staging=registry.target("cuda").staging, schedule=schedule)[1]


def on_h200(steps: Steps) -> dict[str, np.ndarray]:
    """The sequence lowered for CUDA, simulated under the H200's tensor-core model."""
    return steps.simulate(target="cuda", arith="h200")


def bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(f"u{x.dtype.itemsize}")


@pytest.mark.parametrize("lowering", CONVERTED, ids=lambda x: x.value)
@pytest.mark.parametrize(("name", "size"), [
    ("gemm_f32", (150, 133, 70)),  # more than one tile each way, a partial last step
    ("gemm_colmajor_b", (70, 45, 33)),  # B read along its columns
    ("gemm_batched", (40, 33, 17)),  # A and B of three batches
    ("gemm_epilogue", (70, 45, 33)),  # an epilogue of scalars
    ("gemm_f32_1d", (70, 45, 33)),  # a 1-D mapping
    ("gemm_tiled", (70, 45, 33)),  # a staged original
])
def test_the_prepass_and_wgmma_give_the_bits_of_the_kernel_converting_as_it_stages(
        name: str, size: tuple[int, int, int], lowering: Lowering) -> None:
    launch = example(name).make(*size, seed=5)
    steps = cuda_steps(launch, lowering, WGMMA)
    assert [s.kernel.name.endswith(WGMMA.name) for s in steps.launches] == [False, True]
    today = cuda_steps(launch, lowering, TODAY)
    assert len(today.launches) == 1
    c = recognize(launch.kernel).c.array
    assert np.array_equal(bits(on_h200(steps)[c]), bits(on_h200(today)[c]))


def special_values(size: int, rng: np.random.Generator) -> np.ndarray:
    """Normal values with, at random places, NaNs with payloads, infinities, zeros of both
    signs, f32 subnormals, values that round to f16's and bf16's infinity, and ties."""
    x = rng.standard_normal(size).astype(np.float32)
    specials = np.array([0x7FC00001, 0xFFA00000, 0x7F800000, 0xFF800000, 0x80000000, 0x00000001,
                         0x80400000, 0x477FF000, 0x7F7F8000, 0x3F808000, 0x3F818000],
                        np.uint32).view(np.float32)
    where = rng.choice(size, size // 8, replace=False)
    x[where] = rng.choice(specials, where.size)
    return x


@pytest.mark.parametrize("lowering", CONVERTED, ids=lambda x: x.value)
def test_special_operands_keep_the_bits_of_the_kernel_converting_as_it_stages(
        lowering: Lowering) -> None:
    rng = np.random.default_rng(7)
    launch = example("gemm_f32").make(70, 45, 33)
    launch = replace(launch, args={**launch.args, "a": special_values(70 * 33, rng),
                                   "b": special_values(33 * 45, rng)})
    got, want = on_h200(cuda_steps(launch, lowering, WGMMA)), on_h200(
        cuda_steps(launch, lowering, TODAY))
    assert np.array_equal(bits(got["c"]), bits(want["c"]))
    assert np.isnan(got["c"]).any() and np.isinf(got["c"]).any()  # the specials reached C


@pytest.mark.parametrize("lowering", CONVERTED, ids=lambda x: x.value)
def test_the_temporaries_hold_the_region_rounded_and_nothing_else(lowering: Lowering) -> None:
    # B read along its columns; the launch covers 48 of the 70 rows (three blocks of 16)
    launch = example("gemm_colmajor_b").make(70, 45, 33, seed=2)
    launch = replace(launch, grid=(launch.grid[0], 3, 1))
    reg = region(recognize(launch.kernel), launch.grid, launch.block, dict(launch.args))
    assert (reg.me, reg.ne, reg.d) == (48, 45, 33)
    steps = cuda_steps(launch, lowering, WGMMA)
    first = steps.launches[0]
    poison = {s.name: np.full(s.size, np.nan, ROUNDED[lowering]) for s in steps.scratch}
    out = sarek.simulate(first.kernel, {**first.args, **poison}, first.grid, first.block)
    a_tmp, b_tmp = (out[s.name] for s in steps.scratch)
    a = launch.args["a"].reshape(70, 33)[:48]
    b = launch.args["b"].reshape(45, 33).T  # element (p, col) at col * k + p
    rounded = ROUNDED[lowering]
    assert np.array_equal(bits(a_tmp.reshape(48, 40)[:, :33]), bits(a.astype(rounded)))
    assert np.array_equal(bits(b_tmp.reshape(33, 48)[:, :45]), bits(b.astype(rounded)))
    assert np.isnan(a_tmp.reshape(48, 40)[:, 33:].astype(np.float32)).all()  # rows' padding
    assert np.isnan(b_tmp.reshape(33, 48)[:, 45:].astype(np.float32)).all()


def test_the_temporaries_of_a_batched_operand_have_a_layer_per_batch() -> None:
    launch = example("gemm_batched").make(20, 18, 9)
    reg = region(recognize(launch.kernel), launch.grid, launch.block, dict(launch.args))
    assert reg.ze == 3
    steps = cuda_steps(launch, Lowering.BF16_OPERANDS, WGMMA)
    assert [s.size for s in steps.scratch] == [3 * 20 * 16, 3 * 9 * 24]
    assert steps.launches[0].grid == (20 + 9, 1, 3)


@pytest.mark.parametrize("lowering", CONVERTED, ids=lambda x: x.value)
def test_cuda_takes_the_prepass_for_large_regions_of_f32_operands_only(
        lowering: Lowering) -> None:
    cuda = registry.target("cuda")
    large = compile_launch(cuda, example("gemm_f32").make(1024, 1024, 16), lowering=lowering)
    first = cuda.staging.candidates(lowering.value, 1024, 1024)[0]  # the policy's first choice
    assert first.warpgroup
    assert large.rewritten is not None and large.rewritten.schedule == first
    names = {Lowering.BF16_OPERANDS: "matmul_to_bf16", Lowering.F16_OPERANDS: "matmul_to_f16"}
    assert [s.lowered.name for s in large.before] == [names[lowering]]
    assert [s.size for s in large.scratch] == [1024 * 16, 16 * 1024]
    small = compile_launch(cuda, example("gemm_f32").make(256, 256, 16), lowering=lowering)
    assert small.before == () and small.scratch == ()


def test_the_prepass_leaves_other_lowerings_operands_and_targets_as_they_were() -> None:
    cuda, nv = registry.target("cuda"), registry.target("opencl-nv")
    f32 = example("gemm_f32").make(1024, 1024, 16)
    assert compile_launch(nv, f32, lowering=Lowering.BF16_OPERANDS).before == ()
    assert compile_launch(nv, f32, lowering=Lowering.BF16X3_OPERANDS).before == ()
    f16 = compile_launch(cuda, example("gemm_f16").make(1024, 1024, 16))
    assert f16.before == () and f16.rewritten is not None and f16.rewritten.schedule.warpgroup


def test_rewrite_launch_alone_still_refuses_a_warpgroup_schedule_for_f32_operands() -> None:
    launch = example("gemm_f32").make(70, 45, 33)
    with pytest.raises(RewriteError, match="warpgroup schedule multiplies one 16-bit term"):
        rewrite_launch(launch, lowering=Lowering.BF16_OPERANDS,
                       staging=registry.target("cuda").staging, schedule=WGMMA)


def test_a_region_beyond_32_bit_indices_is_refused_with_the_reason() -> None:
    gemm = recognize(example("gemm_f32").matmul.ir)
    assert prepass.refusal(gemm, Region(me=70000, ne=70000, ze=1, d=70000, t=70000**2)) \
        is not None
    assert prepass.refusal(gemm, Region(me=4096, ne=4096, ze=1, d=4096, t=4096**2)) is None


def test_an_empty_region_converts_nothing() -> None:
    assert prepass.conversion_grid(Region(me=0, ne=20, ze=1, d=10, t=0)) == (0, 0, 0)
    launch = example("gemm_f32").make(17, 5, 0)
    steps = cuda_steps(launch, Lowering.BF16_OPERANDS, WGMMA)
    out = on_h200(steps)
    assert np.array_equal(out["c"], np.zeros(17 * 5, np.float32))  # the initial value, 0


def test_kernel_launch_in_the_simulator_runs_the_sequence_and_writes_only_c() -> None:
    launch = example("gemm_f32").make(70, 45, 33, seed=9)
    matmul = example("gemm_f32").matmul
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in launch.args.items()}
    before = {k: v.copy() for k, v in args.items() if isinstance(v, np.ndarray)}
    run = matmul.with_options(target="sim", lowering="Bf16_operands", schedule=WGMMA.name)
    run[launch.grid, launch.block](*args.values())
    want = on_h200(cuda_steps(launch, Lowering.BF16_OPERANDS, TODAY))["c"]
    assert np.array_equal(bits(args["c"]), bits(want))
    assert all(np.array_equal(args[k], before[k]) for k in ("a", "b"))


def test_conformance_runs_the_prepass_under_the_warpgroup_schedules() -> None:
    cuda = registry.target("cuda")
    cases = [c for c in conformance.matrix(cuda, EXAMPLES, only=("gemm_f32",))
             if c.schedule is not None and c.schedule.warpgroup]
    assert {c.lowering for c in cases} == {*CONVERTED, Lowering.BF16X3_OPERANDS}
    for lowering in (Lowering.BF16_OPERANDS, Lowering.BF16X3_OPERANDS):
        case = next(c for c in cases if c.lowering is lowering)
        outcome = conformance.check(replace(case, size=conformance.RAGGED), cuda, device=False)
        assert outcome.ok, outcome.error or outcome.arrays


def test_a_launch_record_of_a_sequence_reads_back_the_same() -> None:
    step = Ready("k", "text", "sm_90", "key", (1, 2, 1), (256, 1, 1), ("f32", "i32"), 1, (7,),
                 0)
    record = replace(step, name="gemm", before=(replace(step, name="to_bf16"),),
                     scratch=(("bf16", 10), ("bf16", 20)))
    assert Ready.from_bytes(record.to_bytes()) == record


# Bf16x3: the pre-pass splits each f32 element into its bf16 terms hi, mid and lo, each in a
# temporary of its own, which the pipelined mma.sync schedule stages as they are.

BF16X3 = Lowering.BF16X3_OPERANDS
SPLIT = Schedule.parse("t128x256k16s3")


def converting_steps(launch: Launch, schedule: Schedule) -> Steps:
    """The rewrite under CUDA's policy without the split: each element split as it is
    staged."""
    staging = replace(registry.target("cuda").staging, prepass_terms=False)
    return rewrite_steps(launch, lowering=BF16X3, subgroup=32, frag=16, staging=staging,
                         schedule=schedule)[1]


@pytest.mark.parametrize(("name", "size"), [
    ("gemm_f32", (150, 270, 70)),  # two tiles each way, a partial last step
    ("gemm_colmajor_b", (70, 45, 33)),
    ("gemm_batched", (40, 33, 17)),
    ("gemm_epilogue", (70, 45, 33)),
    ("gemm_f32_1d", (70, 45, 33)),
])
@pytest.mark.parametrize("schedule", [SPLIT, Schedule.parse("t128k32s2"),
                                      Schedule.parse("t128k64s2g"), Schedule.parse("t128k32s3gf"),
                                      Schedule.parse("t128x128k32s2g"),
                                      Schedule.parse("t128x128k64s2g")],
                         ids=lambda s: s.name)
def test_split_terms_give_the_bits_of_the_kernel_splitting_as_it_stages(
        name: str, size: tuple[int, int, int], schedule: Schedule) -> None:
    launch = example(name).make(*size, seed=3)
    steps = cuda_steps(launch, BF16X3, schedule)
    assert [s.kernel.name.endswith("_to_bf16_terms") for s in steps.launches] == [True, False]
    assert len(steps.scratch) == 6  # hi, mid and lo of A, then of B
    today = converting_steps(launch, SPLIT if schedule.warpgroup else schedule)
    assert len(today.launches) == 1
    c = recognize(launch.kernel).c.array
    assert np.array_equal(bits(on_h200(steps)[c]), bits(on_h200(today)[c]))


@pytest.mark.parametrize("schedule", [SPLIT, Schedule.parse("t128k64s2g")],
                         ids=lambda s: s.name)
def test_split_terms_keep_the_original_loop_for_special_operands(schedule: Schedule) -> None:
    # NaN, infinities and values whose hi term is bf16's infinity send an output to the
    # original's loop, which reads the f32 operands, not the terms
    rng = np.random.default_rng(11)
    launch = example("gemm_f32").make(70, 45, 33)
    launch = replace(launch, args={**launch.args, "a": special_values(70 * 33, rng),
                                   "b": special_values(33 * 45, rng)})
    got = on_h200(cuda_steps(launch, BF16X3, schedule))
    want = on_h200(converting_steps(launch, SPLIT))
    assert np.array_equal(bits(got["c"]), bits(want["c"]))
    assert np.isnan(got["c"]).any() and np.isinf(got["c"]).any()


def test_the_split_temporaries_hold_each_term_of_the_region() -> None:
    launch = example("gemm_f32").make(48, 45, 33, seed=4)
    steps = cuda_steps(launch, BF16X3, SPLIT)
    first = steps.launches[0]
    assert [s.name for s in steps.scratch] == [f"{x}_bf16_{t}" for x in "ab"
                                               for t in ("hi", "mid", "lo")]
    poison = {s.name: np.full(s.size, np.nan, ml_dtypes.bfloat16) for s in steps.scratch}
    out = sarek.simulate(first.kernel, {**first.args, **poison}, first.grid, first.block)
    a = launch.args["a"].reshape(48, 33)
    b = launch.args["b"].reshape(33, 45)
    for x, rows, cols, ld, names in ((a, 48, 33, 40, ("a_bf16_hi", "a_bf16_mid", "a_bf16_lo")),
                                     (b, 33, 45, 48, ("b_bf16_hi", "b_bf16_mid", "b_bf16_lo"))):
        left = x.astype(np.float32)
        for name in names:  # each term the residual's rounding; every residual exact in f32
            term = left.astype(ml_dtypes.bfloat16)
            got = out[name].reshape(rows, ld)
            assert np.array_equal(bits(got[:, :cols]), bits(term))
            assert np.isnan(got[:, cols:].astype(np.float32)).all()  # rows' padding untouched
            left = left - term.astype(np.float32)


def test_cuda_splits_the_terms_of_large_regions_only() -> None:
    cuda = registry.target("cuda")
    large = compile_launch(cuda, example("gemm_f32").make(1024, 1024, 16), lowering=BF16X3)
    assert large.rewritten is not None
    assert large.rewritten.schedule == cuda.staging.candidates(BF16X3.value, 1024, 1024)[0]
    assert [s.lowered.name for s in large.before] == ["matmul_to_bf16_terms"]
    assert [s.size for s in large.scratch] == [1024 * 16] * 3 + [16 * 1024] * 3
    small = compile_launch(cuda, example("gemm_f32").make(256, 256, 16), lowering=BF16X3)
    assert small.before == () and small.scratch == ()


def test_split_terms_are_refused_by_an_unpipelined_schedule() -> None:
    launch = example("gemm_f32").make(70, 45, 33)
    staging = registry.target("cuda").staging
    gemm = rewrite_steps(launch, lowering=BF16X3, subgroup=32, frag=16, staging=staging,
                         schedule=SPLIT)[0].gemm
    assert gemm.split_terms is not None and gemm.a.elem.value == "bf16"
    why = operands_refusal(gemm, BF16X3, Schedule.parse("t128k32"), staging)
    assert why is not None and "split into terms" in why
    assert operands_refusal(gemm, BF16X3, WGMMA, staging) is None
    assert not prepass.applies(recognize(launch.kernel), BF16X3, Schedule.parse("t128k32"),
                               staging)


def test_in_one_chunk_a_warpgroup_schedules_strips_take_hi_hi_exactly() -> None:
    # Bf16x3 on wgmma at a depth of one chunk: each strip's sub-step is hi·hi from -0.0 into
    # its column's top strip, the step strip its negation, hi·hi again and the five smaller
    # products onto it, the two added; the running add still held past the next strip's
    # products
    launch = example("gemm_f32").make(150, 270, 70)
    steps = cuda_steps(launch, BF16X3, Schedule.parse("t128k64s2g"))
    body = list(walk(steps.launches[-1].kernel.body))
    tops = {s.name for s in body if isinstance(s, ir.FragDecl) and s.name.startswith("sk_top")}
    assert tops == {"sk_top0_0_0", "sk_top0_0_1"}
    assert not [s for s in body if isinstance(s, ir.FragDecl) and s.name.startswith("sk_tot")]
    loop = next(s for s in body if isinstance(s, ir.For) and s.var == "sk_k0")
    run = [s for s in loop.body if isinstance(s, ir.FragFill | ir.FragMulAdd | ir.FragAdd)]
    kinds = "".join({ir.FragFill: "f", ir.FragMulAdd: "m", ir.FragAdd: "a"}[type(s)]
                    for s in run)
    strip = "fmfa" + "m" * 6 + "a"
    assert kinds == strip + (strip + "a") * 15 + "a"
    negations = [s for s in run if isinstance(s, ir.FragAdd) and s.subtract]
    assert len(negations) == 16 and all(s.d == s.a and s.b.startswith("sk_top")
                                        for s in negations)


def test_a_warpgroup_schedule_takes_a_fresh_strip_per_column_and_holds_each_add_back() -> None:
    # Bf16x3 on wgmma under CUDA's policy: each wave's 16x128 rows split into two 16x64
    # strips (Staging.sum_strip_cols), the strips of a column taking its fresh strip in turn,
    # and each strip's add coming after the next strip's products
    launch = example("gemm_f32").make(150, 270, 200)  # deeper than one chunk: six products
    steps = cuda_steps(launch, BF16X3, Schedule.parse("t128k64s2g"))
    body = list(walk(steps.launches[-1].kernel.body))
    fresh = {s.name: s.shape for s in body if isinstance(s, ir.FragDecl)
             and s.name.startswith("sk_step")}
    assert fresh == {f"sk_step0_0_{j}": ir.FragShape(m=16, n=64, k=16) for j in (0, 1)}
    adds = [s for s in body if isinstance(s, ir.FragAdd) and s.b.startswith("sk_step")]
    assert {(s.d, s.b) for s in adds} == {(f"sk_acc0_{i}_{j}", f"sk_step0_0_{j}")
                                          for i in (0, 1) for j in (0, 1)}
    assert len(adds) == 4 * 4  # four strips, four 16-deep sub-steps a 64-deep step
    loop = next(s for s in body if isinstance(s, ir.For) and s.var == "sk_k0")
    run = [s for s in loop.body if isinstance(s, ir.FragFill | ir.FragMulAdd | ir.FragAdd)]
    kinds = "".join({ir.FragFill: "f", ir.FragMulAdd: "m", ir.FragAdd: "a"}[type(s)]
                    for s in run)
    assert kinds == "fmmmmmm" + "fmmmmmma" * 15 + "a"  # each add after the next products
    for n, s in enumerate(run):  # no fill of a fresh strip whose add is still to come
        if isinstance(s, ir.FragFill):
            later = next((x for x in run[n + 1:] if isinstance(x, ir.FragAdd)
                          and x.b == s.frag), None)
            earlier = [x for x in run[:n] if isinstance(x, ir.FragMulAdd) and x.d == s.frag]
            added = [x for x in run[:n] if isinstance(x, ir.FragAdd) and x.b == s.frag]
            assert later is not None and len(added) == len(earlier) // 6
