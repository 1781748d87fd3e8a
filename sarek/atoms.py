"""Hardware facts, written once as data: which lane holds which element of a matrix operand.

Each fact is a ``LaneLayout`` in the spirit of CuTe's MMA traits: a lane and a value (a
register element of that lane) are each split into modes with a stride; the sum of the strides
is an offset into the operand matrix in column-major order (``row + rows * col``). Everything
that needs to know where an element lives derives it from these tables: the CUDA lowering (its
element-wise moves and ldmatrix addresses), the simulator's execution of ``mma.sync`` and
``ldmatrix``, the tile-pattern contract, the device gate's CUDA table and the device probes.

The facts (PTX ISA, "Matrix fragments for mma.m16n8k16", "ldmatrix"; Metal Shading Language
specification, "SIMD-group matrix"), with ``g = lane / 4`` and ``t = lane % 4``:

* ``mma.sync.m16n8k16`` with 16-bit A: element ``i`` at row ``g + 8*((i/2) % 2)``, column
  ``2t + i%2 + 8*(i/4)``; B (k x n) element ``i`` at k ``2t + i%2 + 8*(i/2)``, n ``g``; C and D
  element ``i`` at row ``g + 8*(i/2)``, column ``2t + i%2``. With 8-bit A: row ``g + 8*(i/4)``,
  column ``4t + i%4``; 8-bit B: k ``4t + i``, n ``g``. A 32-bit register holds ``32 / bits``
  consecutive elements, the lowest index in the lowest bits.
* ``mma.sync.m16n8k32`` with 8-bit A (16 x 32): element ``i`` at row ``g + 8*((i/4) % 2)``,
  column ``4t + i%4 + 16*(i/8)``; B (32 x 8) element ``i`` at k ``4t + i%4 + 16*(i/4)``, n
  ``g``; C and D as for m16n8k16.
* ``ldmatrix`` / ``stmatrix`` m8n8 ``.b16`` with ``count`` matrices: lane ``8*m + r`` provides
  the address of row ``r`` of matrix ``m``; word ``w`` of row ``r`` of matrix ``m`` is register
  ``m`` of lane ``4*r + w``.
* Metal's 8x8 ``simdgroup_matrix``: lane ``l`` holds row ``((l/2) % 4) + 4*(l/16)``, columns
  ``c0`` and ``c0 + 1`` with ``c0 = 2*(l % 2) + 4*((l/8) % 2)``.
* Hopper's ``wgmma`` (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"; in the
  form of CuTe's ``mma_traits_sm90_gmma.hpp``): thread ``t`` of the warpgroup (warp ``w =
  t/32``, ``g`` and ``t%4`` as above for its lane) holds accumulator value ``i`` at row ``16w +
  g + 8*((i/2) % 2)``, column ``8*(i/4) + 2*(t%4) + i%2`` (``WGMMA.c``), A from registers
  likewise over 16 columns
  (``WGMMA.a``); shared-memory operands lie in atoms (``GMMA_*``: 8x8 core matrices of 16-byte
  rows, or 8 rows of 128 bytes under the 128-byte swizzle, whose 16-byte chunk index is xored
  with the row index, ``SWIZZLE_128B``), which a 64-bit matrix descriptor (``DESCRIPTOR``)
  addresses by a start, a leading and a stride byte offset and a layout type.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from math import prod

import numpy as np

from sarek.ir import ElemType, MmaAtom


@dataclass(frozen=True)
class LaneLayout:
    """(lane, value) -> (row, column) of a ``rows x cols`` operand. A lane index is split into
    ``lane_shape`` modes, first mode fastest, as is a value index into ``value_shape``; each
    mode's coordinate times its stride adds to the column-major offset ``row + rows * col``."""

    rows: int
    cols: int
    lane_shape: tuple[int, ...]
    lane_stride: tuple[int, ...]
    value_shape: tuple[int, ...]
    value_stride: tuple[int, ...]

    @property
    def lanes(self) -> int:
        return prod(self.lane_shape)

    @property
    def values(self) -> int:
        """Elements each lane holds."""
        return prod(self.value_shape)

    @cached_property
    def coordinates(self) -> np.ndarray:
        """``[lane, value, 2]``: the (row, column) each lane's value lies at."""
        lane = _offsets(self.lane_shape, self.lane_stride)
        value = _offsets(self.value_shape, self.value_stride)
        flat = lane[:, None] + value[None, :]
        out = np.stack([flat % self.rows, flat // self.rows], axis=-1)
        out.setflags(write=False)
        return out

    def gather(self, matrices: np.ndarray) -> np.ndarray:
        """``[..., lane, value]``: each lane's values of ``matrices[..., rows, cols]``."""
        rc = self.coordinates
        return np.asarray(matrices[..., rc[..., 0], rc[..., 1]])

    def scatter(self, values: np.ndarray) -> np.ndarray:
        """``[..., rows, cols]``: the matrices whose lanes hold ``values[..., lane, value]``
        (the inverse of ``gather``)."""
        out = np.zeros((*values.shape[:-2], self.rows, self.cols), values.dtype)
        rc = self.coordinates
        out[..., rc[..., 0], rc[..., 1]] = values
        return out


def _offsets(shape: tuple[int, ...], stride: tuple[int, ...]) -> np.ndarray:
    """The offset of every index of ``shape`` (first mode fastest)."""
    out = np.zeros(1, np.int64)
    for n, s in zip(shape, stride, strict=True):
        out = (out[None, :] + s * np.arange(n)[:, None]).ravel()
    return out


# --------------------------------------------------------------------------- mma.sync


@dataclass(frozen=True)
class MmaAtomFacts:
    """One warp-wide ``mma.sync`` instruction: ``D (m x n) = A (m x k) * B (k x n) + C``, the
    operand types, each operand's lane layout and the PTX form."""

    atom: MmaAtom
    m: int
    n: int
    k: int
    operand: ElemType  # A's and B's element type
    accumulator: ElemType  # C's and D's
    a: LaneLayout
    b: LaneLayout
    c: LaneLayout
    ptx: str

    def registers(self, use: str) -> int:
        """32-bit registers per lane for operand ``use`` ("a", "b" or "c")."""
        layout = {"a": self.a, "b": self.b, "c": self.c}[use]
        bits = 32 if use == "c" else self.operand.bits
        return layout.values * bits // 32


_LANES = (4, 8)  # (t, g): lane = t + 4 g
_C_16x8 = LaneLayout(16, 8, _LANES, (32, 1), (2, 2), (16, 8))
_A16 = LaneLayout(16, 16, _LANES, (32, 1), (2, 2, 2), (16, 8, 128))
_B16 = LaneLayout(16, 8, _LANES, (2, 16), (2, 2), (1, 8))
_A8 = LaneLayout(16, 16, _LANES, (64, 1), (4, 2), (16, 8))
_B8 = LaneLayout(16, 8, _LANES, (4, 16), (4,), (1,))


_A8_K32 = LaneLayout(16, 32, _LANES, (64, 1), (4, 2, 2), (16, 8, 256))
_B8_K32 = LaneLayout(32, 8, _LANES, (4, 32), (4, 2), (1, 16))


def _mma(atom: MmaAtom, operand: ElemType, accumulator: ElemType, ptx_types: str, k: int = 16
         ) -> MmaAtomFacts:
    if k == 32:
        a, b = _A8_K32, _B8_K32
    else:
        a, b = (_A16, _B16) if operand.bits == 16 else (_A8, _B8)
    return MmaAtomFacts(atom, 16, 8, k, operand, accumulator, a, b, _C_16x8,
                        f"mma.sync.aligned.m16n8k{k}.row.col.{ptx_types}")


MMA: dict[MmaAtom, MmaAtomFacts] = {
    MmaAtom.M16N8K16_F32_F16: _mma(MmaAtom.M16N8K16_F32_F16, ElemType.F16, ElemType.F32,
                                   "f32.f16.f16.f32"),
    MmaAtom.M16N8K16_F32_BF16: _mma(MmaAtom.M16N8K16_F32_BF16, ElemType.BF16, ElemType.F32,
                                    "f32.bf16.bf16.f32"),
    MmaAtom.M16N8K16_S32_U8: _mma(MmaAtom.M16N8K16_S32_U8, ElemType.U8, ElemType.I32,
                                  "s32.u8.u8.s32"),
    MmaAtom.M16N8K16_S32_S8: _mma(MmaAtom.M16N8K16_S32_S8, ElemType.I8, ElemType.I32,
                                  "s32.s8.s8.s32"),
    MmaAtom.M16N8K32_S32_U8: _mma(MmaAtom.M16N8K32_S32_U8, ElemType.U8, ElemType.I32,
                                  "s32.u8.u8.s32", k=32),
    MmaAtom.M16N8K32_S32_S8: _mma(MmaAtom.M16N8K32_S32_S8, ElemType.I8, ElemType.I32,
                                  "s32.s8.s8.s32", k=32),
}
"""Every ``mma.sync`` form the project prints, by the IR's name for it."""


def mma_for(operand: ElemType, accumulator: ElemType, k: int = 16) -> MmaAtomFacts | None:
    """The atom multiplying ``operand`` fragments ``k`` deep into ``accumulator``, if one
    exists."""
    for facts in MMA.values():
        if (facts.operand, facts.accumulator, facts.k) == (operand, accumulator, k):
            return facts
    return None


# --------------------------------------------------------------------------- ldmatrix


@dataclass(frozen=True)
class MatrixMoveFacts:
    """``ldmatrix`` / ``stmatrix`` m8n8 ``.b16``: up to four 8x8 matrices of 16-bit elements,
    each row 16 contiguous, 16-byte aligned bytes of shared memory, moved to or from one
    32-bit register per matrix in every lane of a warp."""

    lanes: int = 32
    rows: int = 8
    row_words: int = 4
    row_bytes: int = 16
    counts: tuple[int, ...] = (1, 2, 4)
    # lane = row + 8 * matrix provides that row's address
    provider: LaneLayout = LaneLayout(8, 4, (32,), (1,), (1,), (0,))
    # word w of row r goes to (comes from) lane 4 r + w: (row, word) over a 32-lane layout
    owner: LaneLayout = LaneLayout(8, 4, (4, 8), (8, 1), (1,), (0,))

    def provided(self, count: int) -> np.ndarray:
        """``[lane, 2]``: the (matrix, row) whose address each lane gives; lanes past
        ``8 * count`` give the rows of lanes ``lane % (8 * count)`` (their addresses are
        ignored by the hardware, so any valid row will do)."""
        rc = self.provider.coordinates[:, 0]
        rows, matrix = rc[:, 0], rc[:, 1] % count
        return np.stack([matrix, rows], axis=-1)

    def owners(self) -> np.ndarray:
        """``[row, word]``: the lane each word of a matrix belongs to."""
        lanes = np.zeros((self.rows, self.row_words), np.int64)
        rc = self.owner.coordinates[:, 0]
        lanes[rc[:, 0], rc[:, 1]] = np.arange(self.owner.lanes)
        return lanes


LDMATRIX = MatrixMoveFacts()
"""The ldmatrix / stmatrix facts (sm_75 for ldmatrix, sm_90 for stmatrix)."""


# --------------------------------------------------------------------------- Metal


SIMDGROUP_8X8 = LaneLayout(8, 8, (2, 4, 2, 2), (16, 1, 32, 4), (2,), (8,))
"""Metal's 8x8 ``simdgroup_matrix``: which lane of the 32 holds which two elements (as
``thread_elements()`` exposes them)."""


# --------------------------------------------------------------------------- Hopper: wgmma


@dataclass(frozen=True)
class Swizzle:
    """CuTe's ``Swizzle<bits, base, shift>`` over offsets: the ``bits`` bits of an offset from
    bit ``base + shift`` up are xored into its ``bits`` bits from bit ``base`` up."""

    bits: int
    base: int
    shift: int

    def __call__(self, x: np.ndarray | int) -> np.ndarray | int:
        mask = ((1 << self.bits) - 1) << (self.base + self.shift)
        return x ^ ((x & mask) >> self.shift)

    def recast(self, element_bytes: int) -> Swizzle:
        """The same permutation of bytes over offsets counted in elements of
        ``element_bytes`` (CuTe's ``upcast``)."""
        return Swizzle(self.bits, self.base - (element_bytes.bit_length() - 1), self.shift)


SWIZZLE_128B = Swizzle(3, 4, 3)
"""wgmma's 128-byte swizzle, over byte offsets in a 1024-byte aligned atom of 8 rows of 128
bytes: the 16-byte chunk index (bits 4-6) is xored with the row index (bits 7-9)."""
TMA_SWIZZLE = {128: SWIZZLE_128B}
"""Where a bulk tensor copy (``cp.async.bulk.tensor``, a tensor map encoded with
``CU_TENSOR_MAP_SWIZZLE_128B``) puts each byte of its box: the box lands row-major from a
1024-byte aligned shared address and the byte at address ``a`` goes to ``SWIZZLE_128B(a)``
(bits 4-6 of the address xored with bits 7-9), the permutation ``wgmma``'s 128-byte swizzle
atoms assume, so that a box 128 bytes wide lands as the atoms ``GMMA_K_SW128`` and
``GMMA_MN_SW128`` describe (PTX ISA, "Tensor copy: swizzling modes"; the box's inner
dimension at most the 128 bytes of a swizzle row)."""
TMA_BOX = 256  # elements a bulk tensor copy's box spans at most along each dimension
TMA_ALIGN = 16  # bytes: a tensor map's global address and row stride are multiples of it


@dataclass(frozen=True)
class GmmaAtom:
    """One of CuTe's ``GMMA::Layout_{MN,K}_{INTER,SW128}_Atom`` for 16-bit elements: the
    smallest tile of a ``wgmma`` operand in shared memory, ``shape = (mn, k)`` elements at
    element offset ``swizzle(mn * stride[0] + k * stride[1])`` (``major``: the dimension whose
    elements are contiguous), and how a matrix descriptor steps between atoms: ``mode`` is the
    descriptor's layout type, and its leading byte offset steps along ``leading`` ("mn", "k",
    or "" where it is unused) while its stride byte offset steps along the other dimension
    (PTX ISA, "Matrix Descriptor Format" and "Shared Memory Matrix Layout")."""

    name: str
    major: str
    shape: tuple[int, int]
    stride: tuple[int, int]
    swizzle: Swizzle | None
    mode: int
    leading: str
    element_bytes: int = 2

    @property
    def bytes(self) -> int:
        """The atom's size, which is also its alignment in shared memory."""
        return self.shape[0] * self.shape[1] * self.element_bytes

    @property
    def row(self) -> int:
        """Elements of one contiguous row (along ``major``)."""
        return self.shape[0] if self.major == "mn" else self.shape[1]

    def offset(self, mn: np.ndarray | int, k: np.ndarray | int) -> np.ndarray | int:
        """The element offset in the atom of element (``mn``, ``k``)."""
        flat = mn * self.stride[0] + k * self.stride[1]
        return flat if self.swizzle is None else self.swizzle.recast(self.element_bytes)(flat)

    def descriptor_strides(self, along_mn: int, along_k: int) -> tuple[int, int]:
        """``(leading, stride)`` byte offsets of a descriptor for atoms ``along_mn`` bytes
        apart along M or N and ``along_k`` bytes apart along K (an unused leading offset is
        one unit, 16 bytes)."""
        between = {"mn": along_mn, "k": along_k}
        other = "k" if self.leading == "mn" else "mn"
        leading = between[self.leading] if self.leading else DESCRIPTOR.unit
        return leading, between[other]


GMMA_MN_INTER = GmmaAtom("MN_INTER", "mn", (8, 8), (1, 8), None, 0, "k")
"""A core matrix, MN-major without swizzle: 8 rows of 16 bytes along M or N, one per k."""
GMMA_K_INTER = GmmaAtom("K_INTER", "k", (8, 8), (8, 1), None, 0, "k")
"""A core matrix, K-major without swizzle: 8 rows of 16 bytes along K, one per m or n."""
GMMA_MN_SW128 = GmmaAtom("MN_SW128", "mn", (64, 8), (1, 64), SWIZZLE_128B, 1, "mn")
"""MN-major in 128-byte swizzle: 8 k-rows of 64 elements along M or N, 1024 bytes."""
GMMA_K_SW128 = GmmaAtom("K_SW128", "k", (8, 64), (64, 1), SWIZZLE_128B, 1, "")
"""K-major in 128-byte swizzle: 8 rows of 64 elements along K, 1024 bytes."""
GMMA_K_INTER_8BIT = GmmaAtom("K_INTER_8BIT", "k", (8, 16), (16, 1), None, 0, "k",
                             element_bytes=1)
"""A core matrix of 8-bit elements, K-major without swizzle: 8 rows of 16 bytes along K, one
per m or n (``wgmma`` reads 8-bit operands K-major only)."""
GMMA_K_SW128_8BIT = GmmaAtom("K_SW128_8BIT", "k", (8, 128), (128, 1), SWIZZLE_128B, 1, "",
                             element_bytes=1)
"""8-bit elements K-major in 128-byte swizzle: 8 rows of 128 along K, 1024 bytes."""


@dataclass(frozen=True)
class DescriptorFormat:
    """wgmma's 64-bit shared-memory matrix descriptor (CuTe's ``GmmaDescriptor``): the start
    address, leading and stride byte offsets, each in ``unit``s of 16 bytes in ``field_bits``
    bits at bits ``start``, ``leading`` and ``stride``, and the layout type at bit ``mode``."""

    unit: int = 16
    field_bits: int = 14
    start: int = 0
    leading: int = 16
    stride: int = 32
    mode: int = 62

    def encode(self, address: int, leading: int, stride: int, mode: int) -> int:
        """The descriptor of a shared-memory ``address`` (bytes) with the byte offsets
        ``leading`` and ``stride`` and layout type ``mode``."""
        shift, mask = self.unit.bit_length() - 1, (1 << self.field_bits) - 1
        return ((((address >> shift) & mask) << self.start) | (((leading >> shift) & mask)
                << self.leading) | (((stride >> shift) & mask) << self.stride)
                | (mode << self.mode))


DESCRIPTOR = DescriptorFormat()


@dataclass(frozen=True)
class WgmmaFacts:
    """``wgmma.mma_async.sync.aligned.m64nNk16`` of one warpgroup (``warps`` warps): ``D (m x
    n) = A (m x k) * B (k x n) + D``, ``n`` a multiple of ``n_step`` up to ``n_max``. ``a``
    (A from registers) and ``c(n)`` (the accumulator) are CuTe's ``ALayout_64x16`` and
    ``CLayout_64xN``: (thread of the warpgroup, value) -> (row, column)."""

    m: int = 64
    k: int = 16
    warps: int = 4
    n_step: int = 8
    n_max: int = 256
    a: LaneLayout = LaneLayout(64, 16, (4, 8, 4), (128, 1, 16), (2, 2, 2), (64, 8, 512))

    @property
    def threads(self) -> int:
        """The invocations of one warpgroup, which issue each ``wgmma`` together."""
        return self.a.lanes

    def c(self, n: int) -> LaneLayout:
        """The accumulator's layout for ``n`` columns."""
        return LaneLayout(self.m, n, (4, 8, 4), (128, 1, 16), (2, 2, n // self.n_step),
                          (64, 8, 512))

    a_8bit: LaneLayout = LaneLayout(64, 32, (4, 8, 4), (256, 1, 16), (4, 2, 2), (64, 8, 1024))

    def depth(self, operand: ElemType) -> int:
        """How deep one instruction reduces: 16 for 16-bit operands, 32 for 8-bit ones."""
        return self.k * 16 // operand.bits

    def a_layout(self, operand: ElemType) -> LaneLayout:
        """A's layout in registers for ``operand`` (CuTe's ``ALayout_64x16`` or, for 8-bit
        operands, ``ALayout_64x32``: each warp's 16 rows as ``mma.sync.m16n8k32``'s A)."""
        return self.a_8bit if operand.bits == 8 else self.a

    def accumulator(self, operand: ElemType) -> ElemType:
        """f32 for 16-bit operands, s32 (wrapping) for 8-bit integer ones."""
        return ElemType.I32 if operand.bits == 8 else ElemType.F32

    def ptx(self, n: int, operand: ElemType) -> str:
        """The opcode accumulating ``operand`` products into f32, or 8-bit integer ones into
        s32 (``.s32.u8.u8``, ``.s32.s8.s8``: wrapping, no ``.satfinite``)."""
        if operand.bits == 8:
            t = {ElemType.U8: "u8", ElemType.I8: "s8"}[operand]
            return f"wgmma.mma_async.sync.aligned.m{self.m}n{n}k{self.depth(operand)}.s32.{t}.{t}"
        t = operand.value
        return f"wgmma.mma_async.sync.aligned.m{self.m}n{n}k{self.k}.f32.{t}.{t}"


WGMMA = WgmmaFacts()
"""The ``wgmma`` forms the project prints: f16 or bf16 into f32, u8 or s8 into s32."""
