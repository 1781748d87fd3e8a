"""The hardware facts of ``sarek.atoms`` against the formulas of the PTX ISA and the Metal
specification (written out here independently of the module), and the ldmatrix
plans the CUDA lowering derives from them: loading those blocks with ldmatrix's semantics must
give each lane exactly the elements the atom's lane layout says it holds."""

from __future__ import annotations

import numpy as np
import pytest

from backends.cuda.lower import divisor, ldmatrix_blocks
from sarek import atoms, ir, tile
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MmaAtom

F16 = atoms.MMA[MmaAtom.M16N8K16_F32_F16]
U8 = atoms.MMA[MmaAtom.M16N8K16_S32_U8]
U8_K32 = atoms.MMA[MmaAtom.M16N8K32_S32_U8]
LANE = np.arange(32)[:, None]
G, T = LANE >> 2, LANE & 3


def test_mma_16_bit_a_is_the_ptx_layout() -> None:
    i = np.arange(8)[None, :]
    rc = F16.a.coordinates
    assert np.array_equal(rc[..., 0], np.broadcast_to(G + 8 * ((i >> 1) & 1), (32, 8)))
    assert np.array_equal(rc[..., 1], 2 * T + (i & 1) + 8 * (i >> 2))


def test_mma_16_bit_b_is_the_ptx_layout() -> None:
    i = np.arange(4)[None, :]
    rc = F16.b.coordinates
    assert np.array_equal(rc[..., 0], 2 * T + (i & 1) + 8 * (i >> 1))
    assert np.array_equal(rc[..., 1], np.broadcast_to(G, (32, 4)))


def test_mma_accumulator_is_the_ptx_layout() -> None:
    i = np.arange(4)[None, :]
    for facts in atoms.MMA.values():
        rc = facts.c.coordinates
        assert np.array_equal(rc[..., 0], G + 8 * (i >> 1))
        assert np.array_equal(rc[..., 1], np.broadcast_to(2 * T + (i & 1), (32, 4)))


def test_mma_8_bit_operands_are_the_ptx_layout() -> None:
    i = np.arange(8)[None, :]
    assert np.array_equal(U8.a.coordinates[..., 0], np.broadcast_to(G + 8 * (i >> 2), (32, 8)))
    assert np.array_equal(U8.a.coordinates[..., 1], np.broadcast_to(4 * T + (i & 3), (32, 8)))
    i = np.arange(4)[None, :]
    assert np.array_equal(U8.b.coordinates[..., 0], 4 * T + i)
    assert np.array_equal(U8.b.coordinates[..., 1], np.broadcast_to(G, (32, 4)))


def test_mma_k32_8_bit_operands_are_the_ptx_layout() -> None:
    i = np.arange(16)[None, :]
    a = U8_K32.a.coordinates
    assert np.array_equal(a[..., 0], np.broadcast_to(G + 8 * ((i >> 2) & 1), (32, 16)))
    assert np.array_equal(a[..., 1], 4 * T + (i & 3) + 16 * (i >> 3))
    i = np.arange(8)[None, :]
    b = U8_K32.b.coordinates
    assert np.array_equal(b[..., 0], 4 * T + (i & 3) + 16 * (i >> 2))
    assert np.array_equal(b[..., 1], np.broadcast_to(G, (32, 8)))
    assert (U8_K32.registers("a"), U8_K32.registers("b"), U8_K32.k) == (4, 2, 32)


def test_metal_simdgroup_lane_map_is_the_specification() -> None:
    rc = atoms.SIMDGROUP_8X8.coordinates
    c0 = ((LANE & 1) << 1) | (((LANE >> 3) & 1) << 2)
    assert np.array_equal(rc[..., 0], np.broadcast_to(((LANE >> 1) & 3) | ((LANE >> 4) << 2),
                                                      (32, 2)))
    assert np.array_equal(rc[..., 1], c0 + np.arange(2)[None, :])


def test_ldmatrix_provider_and_owner_are_the_ptx_rule() -> None:
    assert [tuple(x) for x in atoms.LDMATRIX.provided(4)] == [
        (lane // 8, lane % 8) for lane in range(32)]
    assert [tuple(x) for x in atoms.LDMATRIX.provided(1)[8:16]] == [(0, r) for r in range(8)]
    owners = atoms.LDMATRIX.owners()
    assert all(owners[r, w] == 4 * r + w for r in range(8) for w in range(4))


@pytest.mark.parametrize("layout", [*(f.a for f in atoms.MMA.values()),
                                    *(f.b for f in atoms.MMA.values()), F16.c,
                                    atoms.SIMDGROUP_8X8], ids=str)
def test_every_element_is_held_by_exactly_one_lane(layout: atoms.LaneLayout) -> None:
    rc = layout.coordinates.reshape(-1, 2)
    cells = rc[:, 0] * layout.cols + rc[:, 1]
    assert sorted(cells.tolist()) == list(range(layout.rows * layout.cols))


def test_gather_and_scatter_are_inverse() -> None:
    m = np.arange(256).reshape(16, 16)
    assert np.array_equal(F16.a.scatter(F16.a.gather(m)), m)


def packed(values: np.ndarray, bits: int) -> np.ndarray:
    """[lane, element] values of ``bits`` bits packed into [lane, register] words."""
    per = 32 // bits
    v = values.astype(np.uint64).reshape(values.shape[0], -1, per)
    return (v << (np.arange(per, dtype=np.uint64) * bits)).sum(axis=2).astype(np.uint32)


def ldmatrix_image(memory: np.ndarray, blocks: list[tuple[int, int]], bits: int,
                   trans: bool) -> np.ndarray:
    """[lane, register] after one ldmatrix of the 8 x 16-byte blocks at ``blocks``."""
    per_row = 128 // bits  # elements in a 16-byte row
    words = np.stack([packed(memory[r0:r0 + 8, c0:c0 + per_row], bits) for r0, c0 in blocks])
    op = ir.TileOp(kind="ldmatrix", count=len(blocks), trans=trans)
    return tile.gather_rows(op, words)


def operand_image(facts: atoms.MmaAtomFacts, use: FragUse, fragment: np.ndarray) -> np.ndarray:
    """[lane, register] the atom wants for a 16 x k or k x 16 fragment (B: both n halves)."""
    bits = facts.operand.bits
    if use is FragUse.A:
        return packed(facts.a.gather(fragment), bits)
    return np.concatenate([packed(facts.b.gather(fragment[:, :8]), bits),
                           packed(facts.b.gather(fragment[:, 8:]), bits)], axis=1)


@pytest.mark.parametrize(("facts", "use", "layout"), [
    (F16, FragUse.A, FragLayout.ROW), (U8, FragUse.A, FragLayout.ROW),
    (F16, FragUse.B, FragLayout.ROW), (F16, FragUse.B, FragLayout.COL),
    (U8, FragUse.B, FragLayout.COL), (U8_K32, FragUse.A, FragLayout.ROW),
    (U8_K32, FragUse.B, FragLayout.COL)])
def test_ldmatrix_plan_delivers_the_atoms_registers(facts: atoms.MmaAtomFacts, use: FragUse,
                                                     layout: FragLayout) -> None:
    bits = facts.operand.bits
    shape = (16, facts.k) if use is FragUse.A else (facts.k, 16)
    fragment = np.random.default_rng(bits).integers(0, 2**bits, shape)
    plan = ldmatrix_blocks(facts, use, layout)
    assert plan is not None
    blocks, trans = plan
    memory = fragment if layout is FragLayout.ROW else fragment.T
    got = ldmatrix_image(memory, blocks, bits, trans)
    assert np.array_equal(got, operand_image(facts, use, fragment))


def test_no_ldmatrix_serves_a_row_major_8_bit_b() -> None:
    assert ldmatrix_blocks(U8, FragUse.B, FragLayout.ROW) is None


def test_divisor_of_the_rewrite_offsets() -> None:
    w = ir.BuiltinValue(which=Builtin.SUBGROUP_ID)
    c = lambda v: ir.Const(value=v, type=ElemType.I32)  # noqa: E731
    row = ir.Binary(op=BinOp.MUL, a=ir.Binary(op=BinOp.DIV, a=w, b=c(2), type=ElemType.I32),
                    b=c(32), type=ElemType.I32)
    offset = ir.Binary(op=BinOp.ADD, a=ir.Binary(op=BinOp.MUL, a=row, b=c(16),
                                                 type=ElemType.I32), b=c(8), type=ElemType.I32)
    assert divisor(offset) == 8
    assert divisor(ir.Binary(op=BinOp.ADD, a=offset, b=w, type=ElemType.I32)) == 1


# ---- Hopper: the PTX ISA's wgmma formulas ("Register Fragments and Shared Memory Matrix
# Layouts", "Matrix Descriptor Format"), written out here


THREAD = np.arange(128)[:, None]
WARP, LANE_OF = THREAD // 32, THREAD % 32


def test_wgmma_accumulator_is_the_ptx_layout_for_every_n() -> None:
    for n in (8, 16, 128, 256):
        i = np.arange(n // 2)[None, :]
        rc = atoms.WGMMA.c(n).coordinates
        assert rc.shape == (128, n // 2, 2)
        assert np.array_equal(rc[..., 0], 16 * WARP + LANE_OF // 4 + 8 * ((i // 2) % 2))
        assert np.array_equal(rc[..., 1], 8 * (i // 4) + 2 * (LANE_OF % 4) + i % 2)


def test_wgmma_register_a_is_the_ptx_layout() -> None:
    i = np.arange(8)[None, :]
    rc = atoms.WGMMA.a.coordinates
    assert np.array_equal(rc[..., 0], 16 * WARP + LANE_OF // 4 + 8 * ((i // 2) % 2))
    assert np.array_equal(rc[..., 1], np.broadcast_to(2 * (LANE_OF % 4) + i % 2 + 8 * (i // 4),
                                                      (128, 8)))


def test_wgmma_opcode_is_the_ptx_form() -> None:
    assert atoms.WGMMA.ptx(128, ElemType.BF16) == \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16"


def test_the_128_byte_swizzle_xors_the_chunk_with_the_row() -> None:
    byte = np.arange(4096)
    row, chunk = (byte // 128) % 8, (byte // 16) % 8
    want = byte - 16 * chunk + 16 * (chunk ^ row)
    assert np.array_equal(atoms.SWIZZLE_128B(byte), want)
    half = np.arange(2048)  # the same permutation over 16-bit elements
    assert np.array_equal(2 * atoms.SWIZZLE_128B.recast(2)(half), atoms.SWIZZLE_128B(2 * half))


def test_the_core_matrix_atoms_are_8_rows_of_16_bytes() -> None:
    mn, k = np.arange(8)[:, None], np.arange(8)[None, :]
    assert np.array_equal(atoms.GMMA_MN_INTER.offset(mn, k), 8 * k + mn)  # rows along mn
    assert np.array_equal(atoms.GMMA_K_INTER.offset(mn, k), 8 * mn + k)  # rows along k
    assert atoms.GMMA_MN_INTER.bytes == atoms.GMMA_K_INTER.bytes == 128


def test_the_swizzled_atoms_are_8_rows_of_128_bytes_chunks_xored_with_the_row() -> None:
    along, row = np.arange(64)[:, None], np.arange(8)[None, :]
    want = 64 * row + 8 * ((along // 8) ^ row) + along % 8
    assert np.array_equal(atoms.GMMA_MN_SW128.offset(along, row), want)
    assert np.array_equal(atoms.GMMA_K_SW128.offset(row.T, along.T), want.T)
    assert atoms.GMMA_MN_SW128.bytes == atoms.GMMA_K_SW128.bytes == 1024


def test_descriptor_strides_follow_the_ptx_roles() -> None:
    # no swizzle: leading = between core matrices along k, stride = along m or n; 128-byte
    # swizzle, MN-major: leading = between atoms along m or n, stride = between 8-row groups
    # along k; K-major: leading unused (one 16-byte unit), stride = between 8-row groups
    assert atoms.GMMA_K_INTER.descriptor_strides(along_mn=256, along_k=128) == (128, 256)
    assert atoms.GMMA_MN_INTER.descriptor_strides(along_mn=2048, along_k=128) == (128, 2048)
    assert atoms.GMMA_MN_SW128.descriptor_strides(along_mn=16384, along_k=1024) == (16384, 1024)
    assert atoms.GMMA_K_SW128.descriptor_strides(along_mn=1024, along_k=1024) == (16, 1024)
    assert [a.mode for a in (atoms.GMMA_K_INTER, atoms.GMMA_MN_INTER, atoms.GMMA_MN_SW128,
                             atoms.GMMA_K_SW128)] == [0, 0, 1, 1]


def test_the_descriptor_packs_its_fields_as_the_ptx_table_says() -> None:
    # bits 0-13 start address >> 4, 16-29 leading >> 4, 32-45 stride >> 4, 62-63 layout type
    d = atoms.DESCRIPTOR.encode(0x1230, 16384, 1024, 1)
    assert d & 0x3FFF == 0x123 and (d >> 16) & 0x3FFF == 1024 and (d >> 32) & 0x3FFF == 64
    assert d >> 62 == 1 and (d >> 46) & 0xFFFF == 0 and (d >> 14) & 3 == 0
