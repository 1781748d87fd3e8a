"""The mma.sync m16n8k16 lane maps, and the ldmatrix blocks the CUDA printer derives from them:
loading those blocks with the tile patterns' semantics must give each lane exactly the elements
the lane map says it holds."""

from __future__ import annotations

import numpy as np
import pytest

from backends.cuda.fragments import divisor, ldmatrix_blocks
from sarek import ir, lane_maps, tile
from sarek.ir import BinOp, Builtin, ElemType


@pytest.mark.parametrize(("operand", "bits", "shape"), [
    ("a", 16, (16, 16)), ("a", 8, (16, 16)), ("b", 16, (16, 8)), ("b", 8, (16, 8)),
    ("c", 32, (16, 8)),
])
def test_every_element_is_held_by_exactly_one_lane(operand: lane_maps.Operand, bits: int,
                                                    shape: tuple[int, int]) -> None:
    rc = lane_maps.coordinates(operand, bits).reshape(-1, 2)
    cells = rc[:, 0] * shape[1] + rc[:, 1]
    assert sorted(cells.tolist()) == list(range(shape[0] * shape[1]))


def test_gather_and_scatter_are_inverse() -> None:
    m = np.arange(256).reshape(16, 16)
    assert np.array_equal(lane_maps.scatter(lane_maps.gather(m, "a", 16), "a", 16, (16, 16)), m)


def packed(values: np.ndarray, bits: int) -> np.ndarray:
    """[lane, element] values of ``bits`` bits packed into [lane, register] words."""
    per = 32 // bits
    v = values.astype(np.uint64).reshape(values.shape[0], -1, per)
    return (v << (np.arange(per, dtype=np.uint64) * bits)).sum(axis=2).astype(np.uint32)


def ldmatrix_image(fragment: np.ndarray, blocks: list[tuple[int, int]], bits: int,
                   trans: bool) -> np.ndarray:
    """[lane, register] after one ldmatrix of the 8x(16 bytes) blocks at ``blocks``."""
    per_row = 128 // bits  # elements in a 16-byte row
    words = np.stack([
        packed(fragment[r0:r0 + 8, c0:c0 + per_row], bits)  # [row, word]
        for r0, c0 in blocks])
    op = tile.parse_op(f"ldmatrix.sync.aligned.m8n8.x{len(blocks)}"
                       f"{'.trans' if trans else ''}.shared.b16")
    return tile.gather_rows(op, words)


def test_ldmatrix_x4_gives_the_a_operand_of_16_bit_elements() -> None:
    a = np.random.default_rng(0).integers(0, 2**16, (16, 16))
    got = ldmatrix_image(a, ldmatrix_blocks("a", 16), 16, trans=False)
    assert np.array_equal(got, packed(lane_maps.gather(a, "a", 16), 16))


def test_ldmatrix_x2_gives_the_a_operand_of_8_bit_elements() -> None:
    a = np.random.default_rng(1).integers(0, 2**8, (16, 16))
    got = ldmatrix_image(a, ldmatrix_blocks("a", 8), 8, trans=False)
    assert np.array_equal(got, packed(lane_maps.gather(a, "a", 8), 8))


def test_ldmatrix_x4_trans_gives_both_b_operands_of_a_row_major_b() -> None:
    b = np.random.default_rng(2).integers(0, 2**16, (16, 16))  # k x n, row-major
    got = ldmatrix_image(b, ldmatrix_blocks("b", 16), 16, trans=True)
    want = np.concatenate([packed(lane_maps.gather(b[:, :8], "b", 16), 16),
                           packed(lane_maps.gather(b[:, 8:], "b", 16), 16)], axis=1)
    assert np.array_equal(got, want)


def test_divisor_of_the_rewrite_offsets() -> None:
    w = ir.BuiltinValue(which=Builtin.SUBGROUP_ID)
    c = lambda v: ir.Const(value=v, type=ElemType.I32)  # noqa: E731
    row = ir.Binary(op=BinOp.MUL, a=ir.Binary(op=BinOp.DIV, a=w, b=c(2), type=ElemType.I32),
                    b=c(32), type=ElemType.I32)
    offset = ir.Binary(op=BinOp.ADD, a=ir.Binary(op=BinOp.MUL, a=row, b=c(16),
                                                 type=ElemType.I32), b=c(8), type=ElemType.I32)
    assert divisor(offset) == 8
    assert divisor(ir.Binary(op=BinOp.ADD, a=offset, b=w, type=ElemType.I32)) == 1


@pytest.mark.parametrize("bits", [16, 8])
def test_ldmatrix_gives_both_b_operands_of_a_column_major_b(bits: int) -> None:
    b = np.random.default_rng(3).integers(0, 2**bits, (16, 16))  # k x n, stored n-major
    blocks = ldmatrix_blocks("b", bits, ir.FragLayout.COL)
    got = ldmatrix_image(b.T, blocks, bits, trans=False)  # memory rows are B's columns
    want = np.concatenate([packed(lane_maps.gather(b[:, :8], "b", bits), bits),
                           packed(lane_maps.gather(b[:, 8:], "b", bits), bits)], axis=1)
    assert np.array_equal(got, want)
