"""The ldmatrix/stmatrix tile patterns: the contract, and the semantics as data movement."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tile_cases import Case, expected_registers, expected_shared, legal_cases, with_stride

from sarek import atoms, ir, tile
from sarek.layout import S, Stride, TileLayout, laneid
from sarek.tile import ContractError, Operand

SENTINEL = 4294966519


def operands(case: Case, shared: TileLayout | None = None, registers: TileLayout | None = None,
             shared_offset: int = 0) -> tuple[Operand, Operand]:
    regs = Operand("regs", registers or case.registers, "local", words=case.register_words)
    rows = Operand("rows", shared or case.shared, "shared", offset=shared_offset,
                   words=case.shared_words + 64)
    return regs, rows


def moves(case: Case) -> list[tuple[np.ndarray, tuple[int, ...]]]:
    """``(starts[matrix, row], slots)`` of each instruction of ``sarek.tile.lane_tile``: the
    word each row starts at, from the lane that provides it (``sarek.atoms.LDMATRIX``)."""
    op = tile.parse_op(case.opcode)
    dst, src = ("regs", "rows") if op.kind == "ldmatrix" else ("rows", "regs")
    placed = {"regs": tile.Placed("raw", case.registers), "rows": tile.Placed("sm", case.shared)}
    lowered = tile.lane_tile(ir.TileApply(op=op, dst=dst, src=src), placed[dst], placed[src])
    out = []
    for move in lowered.moves:
        assert move.rows is not None and move.slots is not None
        matrix, row = atoms.LDMATRIX.provided(op.count)[: 8 * op.count].T
        starts = np.empty((op.count, 8), np.int64)
        starts[matrix, row] = (move.rows.start + matrix * move.rows.matrix_stride
                               + row * move.rows.row_stride)
        out.append((starts, move.slots))
    return out


def run_load(case: Case, shared_words: np.ndarray) -> np.ndarray:
    """ldmatrix through sarek.tile's lane-explicit moves."""
    op = tile.parse_op(case.opcode)
    out = np.full((32, case.register_words), SENTINEL, np.uint32)
    for starts, slots in moves(case):
        rows = shared_words[starts[..., None] + np.arange(4)]
        out[:, list(slots)] = tile.gather_rows(op, rows)
    return out


def run_store(case: Case, registers: np.ndarray, shared_words: np.ndarray) -> np.ndarray:
    op = tile.parse_op(case.opcode)
    out = shared_words.copy()
    for starts, slots in moves(case):
        rows = tile.scatter_rows(op, registers[:, list(slots)])
        out[starts[..., None] + np.arange(4)] = rows
    return out


# ------------------------------------------------------------------------- opcodes


@pytest.mark.parametrize(("opcode", "op"), [
    ("ldmatrix.sync.aligned.m8n8.x1.shared.b16", ir.TileOp(kind="ldmatrix", count=1)),
    ("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
     ir.TileOp(kind="ldmatrix", count=4, trans=True)),
    ("stmatrix.sync.aligned.m8n8.x2.shared.b16", ir.TileOp(kind="stmatrix", count=2)),
])
def test_an_opcode_parses_to_its_op_and_back(opcode: str, op: ir.TileOp) -> None:
    assert tile.parse_op(opcode) == op and op.opcode == opcode


def test_the_cta_state_space_is_the_shared_one() -> None:
    assert tile.parse_op("stmatrix.sync.aligned.m8n8.x2.shared::cta.b16") == ir.TileOp(
        kind="stmatrix", count=2)


def test_an_op_is_a_structured_value_in_json() -> None:
    stmt = ir.TileApply(op=ir.TileOp(kind="ldmatrix", count=4, trans=True), dst="r", src="s")
    assert stmt.model_dump()["op"] == {"kind": "ldmatrix", "count": 4, "trans": True}
    assert ir.TileApply.model_validate_json(stmt.model_dump_json()) == stmt


def test_unknown_opcode_is_refused() -> None:
    with pytest.raises(ContractError, match="not a tile pattern"):
        tile.parse_op("ldmatrix.sync.aligned.m8n8.x3.shared.b16")


def test_instruction_architectures() -> None:
    assert tile.min_sm(tile.parse_op("ldmatrix.sync.aligned.m8n8.x1.shared.b16")) == 75
    assert tile.min_sm(tile.parse_op("stmatrix.sync.aligned.m8n8.x1.shared.b16")) == 90


# ------------------------------------------------------------------------- the seed


def test_seed_example_in_numpy() -> None:
    x = np.arange(128, dtype=np.uint32).reshape(16, 4, 2)
    shared = TileLayout(S[(16, 4, 2) : (8, 1, 128)])
    words = np.zeros(256, np.uint32)
    words[shared.offsets()] = x
    case = Case("ldmatrix.sync.aligned.m8n8.x2.shared.b16", 2, False, 2,
                shared.rearrange("(r m) w k -> k m r w", r=8, m=2), 256,
                TileLayout(S[(2, 2, 8, 4) : (8, 2, 4 @ laneid, 1 @ laneid)]), 12)
    got = run_load(case, words)
    want = np.full((32, 12), SENTINEL, np.uint32)
    for lane in range(32):
        for k in range(2):
            for m in range(2):
                want[lane, 8 * k + 2 * m] = x[2 * (lane // 4) + m, lane % 4, k]
    assert np.array_equal(got, want)
    assert list(got[5, [0, 2, 8, 10]]) == [18, 26, 19, 27]


# ------------------------------------------------------------------------- semantics


@settings(max_examples=80, deadline=None)
@given(legal_cases("ldmatrix"), st.integers(0, 2**32 - 1))
def test_ldmatrix_equals_the_contract_gather(case: Case, seed: int) -> None:
    words = np.random.default_rng(seed).integers(0, 2**32, case.shared_words, dtype=np.uint32)
    tile.check(tile.parse_op(case.opcode), *operands(case))
    assert np.array_equal(run_load(case, words), expected_registers(case, words, SENTINEL))


@settings(max_examples=80, deadline=None)
@given(legal_cases("stmatrix"), st.integers(0, 2**32 - 1))
def test_stmatrix_equals_the_contract_scatter(case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    regs = rng.integers(0, 2**32, (32, case.register_words), dtype=np.uint32)
    words = rng.integers(0, 2**32, case.shared_words, dtype=np.uint32)
    tile.check(tile.parse_op(case.opcode), *operands(case))
    assert np.array_equal(run_store(case, regs, words), expected_shared(case, regs, words))


@settings(max_examples=40, deadline=None)
@given(legal_cases("stmatrix"), st.integers(0, 2**32 - 1))
def test_stmatrix_then_ldmatrix_round_trips(case: Case, seed: int) -> None:
    rng = np.random.default_rng(seed)
    regs = rng.integers(0, 2**32, (32, case.register_words), dtype=np.uint32)
    stored = run_store(case, regs, np.zeros(case.shared_words, np.uint32))
    loaded = run_load(replace(case, opcode=case.opcode.replace("stmatrix", "ldmatrix")), stored)
    used = np.unique(case.registers.offsets()[..., 0, 0])
    assert np.array_equal(loaded[:, used], regs[:, used])


def test_trans_is_a_semantic_change() -> None:
    case = Case("ldmatrix.sync.aligned.m8n8.x1.shared.b16", 1, False, 1,
                TileLayout(S[(1, 1, 8, 4) : (0, 0, 4, 1)]), 32,
                TileLayout(S[(1, 1, 8, 4) : (0, 0, 4 @ laneid, 1 @ laneid)]), 1)
    words = np.arange(32, dtype=np.uint32) * 0x00010001 + 0x00000100
    plain = run_load(case, words)
    trans = run_load(replace(case, opcode=case.opcode.replace(".x1", ".x1.trans"), trans=True),
                     words)
    assert not np.array_equal(plain, trans)


# ------------------------------------------------------------------------- the contract


@settings(max_examples=40, deadline=None)
@given(legal_cases(), st.integers(1, 3))
def test_misaligned_row_is_refused(case: Case, words: int) -> None:
    with pytest.raises(ContractError, match="not 16-byte aligned"):
        tile.check(tile.parse_op(case.opcode), *operands(case, shared_offset=words))


@settings(max_examples=40, deadline=None)
@given(legal_cases(), st.integers(2, 5))
def test_gap_inside_a_row_is_refused(case: Case, gap: int) -> None:
    shared = with_stride(case.shared, 3, Stride(value=gap))
    with pytest.raises(ContractError, match="gaps within a 16-byte row"):
        tile.check(tile.parse_op(case.opcode), *operands(case, shared=shared))


@settings(max_examples=40, deadline=None)
@given(legal_cases(), st.sampled_from([(2, 1), (4, 2), (8, 1), (1, 8)]))
def test_wrong_register_owner_is_refused(case: Case, lane_strides: tuple[int, int]) -> None:
    row, word = lane_strides
    regs = with_stride(with_stride(case.registers, 2, row @ laneid), 3, word @ laneid)
    with pytest.raises(ContractError, match="belongs to lane"):
        tile.check(tile.parse_op(case.opcode), *operands(case, registers=regs))


@settings(max_examples=40, deadline=None)
@given(legal_cases().filter(lambda c: c.count * c.repeats > 1))
def test_overlapping_registers_are_refused(case: Case) -> None:
    regs = with_stride(with_stride(case.registers, 0, Stride(value=0)), 1, Stride(value=0))
    with pytest.raises(ContractError, match="registers overlap"):
        tile.check(tile.parse_op(case.opcode), *operands(case, registers=regs))


def test_register_slot_varying_by_lane_is_refused() -> None:
    regs = TileLayout(shape=(1, 1, 8, 4), stride=(0, 0, Stride(value=4, axis="laneid"), 1))
    case = Case("ldmatrix.sync.aligned.m8n8.x1.shared.b16", 1, False, 1,
                TileLayout(S[(1, 1, 8, 4) : (0, 0, 4, 1)]), 32, regs, 4)
    with pytest.raises(ContractError, match="belongs to lane"):
        tile.check(tile.parse_op(case.opcode), *operands(case))


def test_operands_must_end_in_the_matrix_atom() -> None:
    case = Case("ldmatrix.sync.aligned.m8n8.x2.shared.b16", 2, False, 1,
                TileLayout(S[(1, 1, 8, 4) : (0, 0, 4, 1)]), 32,
                TileLayout(S[(1, 1, 8, 4) : (0, 0, 4 @ laneid, 1 @ laneid)]), 1)
    with pytest.raises(ContractError, match=r"must end in \(matrix, row, word\) = \(2, 8, 4\)"):
        tile.check(tile.parse_op(case.opcode), *operands(case))


def test_sixteen_bit_operands_need_a_word_view() -> None:
    regs = Operand("regs", TileLayout(S[(1, 8, 4) : (0, 4 @ laneid, 1 @ laneid)]), "local",
                   bits=16)
    rows = Operand("rows", TileLayout(S[(1, 8, 4) : (0, 4, 1)]), "shared")
    with pytest.raises(ContractError, match="32-bit containers"):
        tile.check(tile.parse_op("ldmatrix.sync.aligned.m8n8.x1.shared.b16"), regs, rows)


def test_shared_operand_must_be_shared() -> None:
    regs = Operand("regs", TileLayout(S[(1, 8, 4) : (0, 4 @ laneid, 1 @ laneid)]), "local")
    rows = Operand("rows", TileLayout(S[(1, 8, 4) : (0, 4, 1)]), "global")
    with pytest.raises(ContractError, match="must be a shared tensor"):
        tile.check(tile.parse_op("ldmatrix.sync.aligned.m8n8.x1.shared.b16"), regs, rows)


def test_stmatrix_rows_must_not_overlap() -> None:
    regs = Operand("regs", TileLayout(S[(2, 8, 4) : (1, 4 @ laneid, 1 @ laneid)]), "local")
    rows = Operand("rows", TileLayout(S[(2, 8, 4) : (0, 4, 1)]), "shared")
    with pytest.raises(ContractError, match="two rows of a store overlap"):
        tile.check(tile.parse_op("stmatrix.sync.aligned.m8n8.x2.shared.b16"), regs, rows)


def test_gaps_between_rows_and_slots_are_legal() -> None:
    regs = Operand("regs", TileLayout(S[(2, 8, 4) : (5, 4 @ laneid, 1 @ laneid)]), "local",
                   words=6)
    rows = Operand("rows", TileLayout(S[(2, 8, 4) : (36, 8, 1)]), "shared", words=128)
    tile.check(tile.parse_op("ldmatrix.sync.aligned.m8n8.x2.shared.b16"), regs, rows)


def test_apply_returns_the_ir_statement() -> None:
    regs = Operand("regs", TileLayout(S[(1, 8, 4) : (0, 4 @ laneid, 1 @ laneid)]), "local")
    rows = Operand("rows", TileLayout(S[(1, 8, 4) : (0, 4, 1)]), "shared")
    stmt = tile.apply("ldmatrix.sync.aligned.m8n8.x1.shared.b16", regs, rows)
    assert (stmt.dst, stmt.src) == ("regs", "rows")
