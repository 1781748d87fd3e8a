"""How CUDA's policy moves outputs through the exchange array (``specs/matrix-pattern-rewrite.md``
6.4, ``specs/backends.md``): packed outputs (``Staging.packed_out``: on a block whose whole
tile is covered and whose rows of C are contiguous and aligned, each lane stores the epilogue
values of consecutive outputs as one ``StorePacked``; every other tile one output at a time),
the exchange array's padded rows (``Staging.exchange_pad``) and the lowering's 64-bit stores of
accumulator pairs into it. Each output gets the same bits either way: each kernel below is
compared with the same rewrite under a policy without the change, both lowered for CUDA and
simulated under its ``h200`` model, and with the original kernel where the lowering is exact."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits, original

import sarek
from backends.registry import target
from sarek import ir
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule

CUDA = target("cuda").staging
ONE_AT_A_TIME = replace(CUDA, packed_out=False)
PERSISTENT = Schedule.parse("t128x256k64s3gwr")


def rewrite(launch: Launch, schedule: Schedule, packed: bool = True,
            lowering: Lowering | None = None) -> Launch:
    return rewrite_launch(launch, staging=CUDA if packed else ONE_AT_A_TIME,
                          schedule=schedule, lowering=lowering).launch


def on_cuda(rw: Launch) -> dict[str, np.ndarray]:
    return sarek.simulate(rw.kernel, dict(rw.args), grid=rw.grid, block=rw.block,
                          target="cuda", arith="h200")


def packed_stores_into(kernel: ir.Kernel, array: str) -> list[ir.StorePacked]:
    return [s for s in walk(kernel.body) if isinstance(s, ir.StorePacked) and s.array == array]


@pytest.mark.parametrize(("name", "size", "schedule", "lowering", "parts"), [
    # 64x64 tiles, whole ones and ragged ones; f16 outputs four to a store
    ("gemm_f16", (150, 200, 40), SEED, None, 4),
    # 128x256 tiles of two consumer warpgroups and a producer, a tile whole and three not
    ("gemm_f16", (150, 300, 64), PERSISTENT, None, 4),
    # f32 outputs two to a store; the epilogue reads C's old value at each output
    ("gemm_epilogue", (130, 72, 24), SEED, Lowering.BF16_OPERANDS, 2),
    # i32 outputs with a bias per column
    ("gemm_i8", (70, 136, 64), SEED, None, 2),
    # three batches: the alignment of each batch's first output is tested apart
    ("gemm_batched", (64, 64, 16), SEED, Lowering.BF16_OPERANDS, 2),
], ids=["f16-seed", "f16-persistent", "epilogue-bf16", "i8", "batched"])
def test_packed_outputs_give_the_bits_of_outputs_stored_one_at_a_time(
        name: str, size: tuple[int, int, int], schedule: Schedule, lowering: Lowering | None,
        parts: int) -> None:
    launch = example(name).make(*size, seed=5)
    packed, single = (rewrite(launch, schedule, p, lowering) for p in (True, False))
    c = recognize_c(launch)
    stores = packed_stores_into(packed.kernel, c)
    assert stores and all(s.value.type.bits == parts * launch.args[c].dtype.itemsize * 8
                          for s in stores)
    assert packed_stores_into(single.kernel, c) == []
    assert np.array_equal(bits(on_cuda(packed)[c]), bits(on_cuda(single)[c]))


def test_packed_f16_outputs_give_the_originals_bits() -> None:
    launch = example("gemm_f16").make(150, 300, 64, seed=3)
    rw = rewrite(launch, PERSISTENT)
    assert np.array_equal(bits(rw.simulate()["c"]), bits(original(launch)))  # neutral kernel


def test_special_values_keep_their_bits_in_packed_outputs() -> None:
    launch = example("gemm_f16").make(64, 64, 16, seed=1)
    a = launch.args["a"].copy()
    # rows of inf, NaN and of products that overflow or underflow f16
    a[0:16] = np.float16(np.inf)
    a[16 * 16:16 * 17] = np.float16(np.nan)
    a[32 * 16:33 * 16] = np.float16(60000.0)
    a[48 * 16:49 * 16] = np.float16(2.0 ** -14)
    launch = replace(launch, args={**launch.args, "a": a})
    rw = rewrite(launch, SEED)
    assert packed_stores_into(rw.kernel, "c")
    assert np.array_equal(bits(on_cuda(rw)["c"]), bits(on_cuda(rewrite(launch, SEED, False))["c"]))
    assert np.array_equal(bits(rw.simulate()["c"]), bits(original(launch)))


def test_rows_of_c_not_aligned_to_a_store_are_stored_one_output_at_a_time() -> None:
    # n = 201: rows of C start at odd elements, so no tile takes the packed stores; the
    # simulator would refuse a misaligned packed store (OutOfBounds)
    launch = example("gemm_f16").make(130, 201, 32, seed=2)
    rw = rewrite(launch, SEED)
    assert packed_stores_into(rw.kernel, "c")  # printed, and not taken
    assert np.array_equal(bits(on_cuda(rw)["c"]), bits(on_cuda(rewrite(launch, SEED, False))["c"]))


def bf16x3_specials() -> Launch:
    """gemm_f32 at 130x72x24 (64x64 tiles: two whole, four ragged) whose outputs take
    Bf16x3's recomputation (6.4) in both halves of a packed store: rows of A of inf, of NaN
    and of 2^100 (products past f32's range), columns of B of inf at an even and at an odd
    column, and a column whose sum reaches 2^127 from finite products."""
    launch = example("gemm_f32").make(130, 72, 24, seed=4)
    a, b = launch.args["a"].copy(), launch.args["b"].copy()
    k, n = 24, 72
    a[3 * k:4 * k] = np.inf
    a[10 * k:11 * k] = np.nan
    a[20 * k:21 * k] = np.float32(2.0 ** 100)
    b[5::n] = np.inf  # column 5 (the second of a packed pair), every k
    b[8::n] = -np.inf  # column 8 (the first of a pair)
    a[30 * k:31 * k] = np.float32(2.0 ** 123)
    b[13::n] = np.float32(2.0 ** 4)  # row 30, column 13: 24 * 2^127, finite in f32
    return replace(launch, args={**launch.args, "a": a, "b": b})


def test_bf16x3_packed_outputs_recompute_beyond_the_range_as_one_at_a_time() -> None:
    launch = bf16x3_specials()
    packed, single = (rewrite(launch, SEED, p, Lowering.BF16X3_OPERANDS) for p in (True, False))
    assert packed_stores_into(packed.kernel, "c")
    got = on_cuda(packed)["c"]
    assert np.array_equal(bits(got), bits(on_cuda(single)["c"]))
    expected = original(launch)  # where the original gives inf or NaN, so does the rewrite
    special = ~np.isfinite(expected) | (np.abs(expected) >= 2.0 ** 127)
    assert special.sum() > 100
    assert np.array_equal(bits(got[special]), bits(expected[special]))


def test_bf16x3_trips_whose_sums_are_usable_carry_no_copy_of_the_originals_loop() -> None:
    rw = rewrite(bf16x3_specials(), SEED, lowering=Lowering.BF16X3_OPERANDS)
    trips = [s for s in walk(rw.kernel.body) if isinstance(s, ir.For) and s.var == "sk_q"
             and any(isinstance(x, ir.StorePacked) for x in walk(s.body))]

    def recomputes(loop: ir.For) -> bool:
        return any(isinstance(x, ir.For) and x.var == "sk_p" for x in walk(loop.body))

    first, again = [t for t in trips if not recomputes(t)], [t for t in trips if recomputes(t)]
    assert first and len(first) == len(again)  # a loop of marked trips after each
    assert all(len(t.body) == 1 and isinstance(t.body[0], ir.If) for t in again)


def recognize_c(launch: Launch) -> str:
    from sarek.matrix_pattern import recognize

    return recognize(launch.kernel).c.array


# ------------------------------------------------------------------ the exchange array

UNPADDED = replace(CUDA, exchange_pad=0)


def varying_init() -> Launch:
    from gemm_gen import varying_init_launch

    return varying_init_launch(130, 300, 70)  # C's f32 enters through the exchange array too


@pytest.mark.parametrize("schedule", [SEED, Schedule.parse("t128x256k64s2g"), PERSISTENT],
                         ids=lambda s: s.name)
def test_padded_exchange_rows_give_the_bits_of_dense_ones(schedule: Schedule) -> None:
    launch = varying_init()
    padded = rewrite(launch, schedule)
    dense = rewrite_launch(launch, staging=UNPADDED, schedule=schedule).launch
    sizes = [next(d.size for d in walk(k.body) if isinstance(d, ir.ArrayDecl)
                  and d.name == "sk_cs") for k in (padded.kernel, dense.kernel)]
    assert sizes[0] > sizes[1]
    assert np.array_equal(bits(on_cuda(padded)["c"]), bits(on_cuda(dense)["c"]))


@pytest.mark.parametrize("row", [16, 256], ids=["fragment", "strip"])
def test_cudas_padding_puts_a_half_warps_accumulator_pairs_in_distinct_banks(row: int) -> None:
    # lane (g, t) of 0..3 x 0..3 stores the pair at columns 2t, 2t + 1 of row g; 32 banks of
    # 4 bytes
    def banks(stride: int) -> int:
        return len({(g * stride + 2 * t + half) % 32 for g in range(4) for t in range(4)
                    for half in (0, 1)})

    assert banks(row) < 32
    assert banks(row + CUDA.exchange_pad) == 32


def test_the_lowering_stores_accumulator_pairs_into_the_exchange_as_64_bit_words() -> None:
    from backends.cuda import lower as cuda_lower

    rw = rewrite(example("gemm_f16").make(64, 64, 16), SEED)
    lowered = cuda_lower.lower(rw.kernel)
    into = packed_stores_into(lowered, "sk_cs")
    assert into and all(s.value.type is ir.ElemType.U64 for s in into)
    assert not [s for s in walk(lowered.body) if isinstance(s, ir.Store) and s.array == "sk_cs"
                and isinstance(s.value, ir.Load) and s.value.array.startswith("sk_acc")]


def test_an_exchange_padding_past_64_elements_is_refused() -> None:
    from sarek.staging import StagingError

    with pytest.raises(StagingError, match="row padding must be 0 to 64 elements, not 65"):
        replace(CUDA, exchange_pad=65)
