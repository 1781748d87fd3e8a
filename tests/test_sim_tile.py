"""Tile patterns in the simulator: the seed's example, random legal layouts against the
contract's own gather, and the rules only a running launch can break."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from hypothesis import given, settings
from hypothesis import strategies as st
from tile_cases import Case, expected_registers, expected_shared, legal_cases

import sarek
from sarek import Global, S, TileLayout, laneid, thread_idx, u32
from sarek.errors import IRError, SharedRace
from sarek.tile import ContractError
from sarek.tile_probe import SENTINEL, probe_kernel
from sim import simulate

X2 = "ldmatrix.sync.aligned.m8n8.x2.shared.b16"
X1 = "ldmatrix.sync.aligned.m8n8.x1.shared.b16"
ROWS = TileLayout(S[(1, 1, 8, 4) : (0, 0, 4, 1)])
REGS = TileLayout(S[(1, 1, 8, 4) : (0, 0, 4 @ laneid, 1 @ laneid)])


def test_seed_example_reproduces_the_table() -> None:
    module = example("ldmatrix_interleaved")
    got = module.make().simulate()["out"].reshape(32, 12)
    assert np.array_equal(got, module.expected())
    untouched = np.delete(got, [0, 2, 8, 10], axis=1)
    assert (untouched == SENTINEL).all()


def simulate_case(case: Case, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    kernel = probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                          case.register_words)
    if case.opcode.startswith("ldmatrix"):
        src = rng.integers(0, 2**32, case.shared_words, dtype=np.uint32)
        out = simulate(kernel, {"src": src, "out": np.zeros(32 * case.register_words,
                                                             np.uint32)}, grid=1, block=32)
        return out["out"].reshape(32, -1), expected_registers(case, src, SENTINEL)
    regs = rng.integers(0, 2**32, (32, case.register_words), dtype=np.uint32)
    init = rng.integers(0, 2**32, case.shared_words, dtype=np.uint32)
    out = simulate(kernel, {"regs_in": regs.ravel(), "init": init,
                            "out": np.zeros(case.shared_words, np.uint32)}, grid=1, block=32)
    return out["out"], expected_shared(case, regs, init)


@settings(max_examples=60, deadline=None)
@given(legal_cases("ldmatrix"), st.integers(0, 2**32 - 1))
def test_random_legal_ldmatrix_equals_the_contract(case: Case, seed: int) -> None:
    got, want = simulate_case(case, seed)
    assert np.array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(legal_cases("stmatrix"), st.integers(0, 2**32 - 1))
def test_random_legal_stmatrix_equals_the_contract(case: Case, seed: int) -> None:
    got, want = simulate_case(case, seed)
    assert np.array_equal(got, want)


def test_every_warp_of_several_blocks_runs_the_pattern() -> None:
    @sarek.kernel
    def per_block(a: Global[u32], out: Global[u32]):
        t = thread_idx.x
        sm = sarek.shared(u32, 64)
        raw = sarek.local(u32, 1)
        sm[t] = a[sarek.block_idx.x * 64 + t]
        sarek.barrier()
        rows = sarek.view(sm, u32, ROWS, offset=(0))
        regs = sarek.view(raw, u32, REGS)
        sarek.tile.apply(X1, regs, rows)
        out[sarek.block_idx.x * 64 + t] = raw[0]

    a = np.arange(3 * 64, dtype=np.uint32)
    out = simulate(per_block.ir, [a, np.zeros_like(a)], grid=3, block=64)["out"]
    # every lane l of every warp gets word l of its block's first 32 words
    want = np.concatenate([np.tile(a[b * 64: b * 64 + 32], 2) for b in range(3)])
    assert np.array_equal(out, want)


def test_partial_warp_is_refused() -> None:
    @sarek.kernel
    def half(out: Global[u32]):
        lane = thread_idx.x
        sm = sarek.shared(u32, 32)
        raw = sarek.local(u32, 1)
        sm[lane] = u32(lane)
        sarek.barrier()
        rows = sarek.view(sm, u32, ROWS)
        regs = sarek.view(raw, u32, REGS)
        if lane < 16:
            sarek.tile.apply(X1, regs, rows)
        out[lane] = raw[0]

    with pytest.raises(ContractError, match=r"16 of the 32 lanes .* all 32 must participate"):
        simulate(half.ir, [np.zeros(32, np.uint32)], grid=1, block=32)


def test_block_of_partial_warps_is_refused() -> None:
    kernel = probe_kernel(X1, ROWS, 32, REGS, 1)
    with pytest.raises(ContractError, match="not a multiple of 32"):
        simulate(kernel, {"src": np.zeros(32, np.uint32), "out": np.zeros(48, np.uint32)},
                 grid=1, block=48)


def test_missing_barrier_before_the_load_is_a_race() -> None:
    @sarek.kernel
    def unsynchronized(out: Global[u32]):
        lane = thread_idx.x
        sm = sarek.shared(u32, 32)
        raw = sarek.local(u32, 1)
        sm[31 - lane] = u32(lane)  # the word lane l loads is written by lane 31 - l
        rows = sarek.view(sm, u32, ROWS)
        regs = sarek.view(raw, u32, REGS)
        sarek.tile.apply(X1, regs, rows)
        out[lane] = raw[0]

    with pytest.raises(SharedRace, match="read-after-write"):
        simulate(unsynchronized.ir, [np.zeros(32, np.uint32)], grid=1, block=32)


def test_dsl_checks_the_contract_at_the_call() -> None:
    bad = TileLayout(S[(1, 1, 8, 4) : (0, 0, 6, 1)])  # rows 24 bytes apart
    with pytest.raises(ContractError, match=r"test_sim_tile.py:\d+: .*not 16-byte aligned"):
        @sarek.kernel
        def misaligned(out: Global[u32]):
            sm = sarek.shared(u32, 64)
            raw = sarek.local(u32, 1)
            rows = sarek.view(sm, u32, bad)
            regs = sarek.view(raw, u32, REGS)
            sarek.tile.apply(X1, regs, rows)


def test_ir_check_reports_a_broken_contract() -> None:
    wrong_owner = TileLayout(S[(1, 1, 8, 4) : (0, 0, 1 @ laneid, 8 @ laneid)])
    with pytest.raises(IRError, match="belongs to lane"):
        probe_kernel(X1, ROWS, 32, wrong_owner, 1)


def test_sixteen_bit_storage_viewed_as_words_loads_halves_in_place() -> None:
    """A shared f16 matrix viewed as u32 words (a dtype view, no conversion): ldmatrix.trans
    delivers the transposed halves, so lane 4r+w holds elements (2w, r) and (2w+1, r)."""
    words = TileLayout(S[(1, 1, 8, 4) : (0, 0, 4, 1)])

    @sarek.kernel
    def halves(a: Global[sarek.f16], out: Global[u32]):
        lane = thread_idx.x
        sm = sarek.shared(sarek.f16, 64)
        raw = sarek.local(u32, 1)
        sm[2 * lane] = a[2 * lane]
        sm[2 * lane + 1] = a[2 * lane + 1]
        sarek.barrier()
        rows = sarek.view(sm, u32, words)
        regs = sarek.view(raw, u32, REGS)
        sarek.tile.apply("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", regs, rows)
        out[lane] = raw[0]

    a = (np.arange(64) / 4).astype(np.float16)  # element (r, c) of the 8x8 matrix is a[8r+c]
    got = simulate(halves.ir, [a, np.zeros(32, np.uint32)], grid=1, block=32)["out"]
    bits = a.view(np.uint16).reshape(8, 8).astype(np.uint32)
    lanes = np.arange(32)
    r, w = lanes // 4, lanes % 4
    assert np.array_equal(got, bits[2 * w, r] | (bits[2 * w + 1, r] << 16))


def simulate_lowered(case: Case, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``simulate_case`` on the kernel CUDA prints: the pattern lowered to a ``LaneTile``."""
    rng = np.random.default_rng(seed)
    kernel = probe_kernel(case.opcode, case.shared, case.shared_words, case.registers,
                          case.register_words)
    if case.opcode.startswith("ldmatrix"):
        src = rng.integers(0, 2**32, case.shared_words, dtype=np.uint32)
        out = sarek.simulate(kernel, {"src": src, "out": np.zeros(32 * case.register_words,
                                                                   np.uint32)},
                             grid=1, block=32, target="cuda")
        return out["out"].reshape(32, -1), expected_registers(case, src, SENTINEL)
    regs = rng.integers(0, 2**32, (32, case.register_words), dtype=np.uint32)
    init = rng.integers(0, 2**32, case.shared_words, dtype=np.uint32)
    out = sarek.simulate(kernel, {"regs_in": regs.ravel(), "init": init,
                                  "out": np.zeros(case.shared_words, np.uint32)},
                         grid=1, block=32, target="cuda")
    return out["out"], expected_shared(case, regs, init)


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["ldmatrix", "stmatrix"]).flatmap(legal_cases),
       st.integers(0, 2**32 - 1))
def test_patterns_lowered_for_cuda_run_as_the_contract_says(case: Case, seed: int) -> None:
    got, want = simulate_lowered(case, seed)
    assert np.array_equal(got, want)
