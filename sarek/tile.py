"""The ldmatrix / stmatrix tile patterns: their contract and their lane-explicit semantics.

``ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16`` moves ``count`` 8x8 matrices of
16-bit elements from shared memory into registers of a whole warp; ``stmatrix`` (sm_90) moves
them back. Both operands are tensors of 32-bit containers ending in the modes
``(matrix, row, word) = (count, 8, 4)``; leading modes repeat the instruction. Which lane
provides which row's address and which lane's register receives which word are hardware facts
whose one home is ``sarek.atoms.LDMATRIX`` (its ``provided`` and ``owners`` tables); this module
derives from them the contract, checked for the DSL and the IR checker, the pattern lane by
lane (``lane_tile``: the ``LaneTile`` of ``Ldmatrix`` / ``Stmatrix`` moves that CUDA's lowering
prints and the simulator runs) and the data movement of one instruction (``gather_rows``,
``scatter_rows``). ``.trans`` transposes each 8x8 matrix of 16-bit elements: register element
``(row, column)`` comes from shared element ``(column, row)``.

``specs/tile-patterns.md`` is the normative text; ``check`` names the broken rule of a
contract violation in a ``ContractError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product
from typing import Literal

import numpy as np

from sarek import ir
from sarek.atoms import LDMATRIX
from sarek.errors import SarekError
from sarek.ir import BinOp
from sarek.ir_build import binary, const
from sarek.layout import Axis, TileLayout

WARP = LDMATRIX.lanes
ROW_BYTES = LDMATRIX.row_bytes
_WORD_BYTES = ROW_BYTES // LDMATRIX.row_words


class ContractError(SarekError):
    """A tile pattern whose operands break the instruction's layout contract."""


_OPCODE = re.compile(
    r"(?P<kind>ldmatrix|stmatrix)\.sync\.aligned\.m8n8\.x(?P<count>[124])"
    r"(?P<trans>\.trans)?\.shared(?:::cta)?\.b16")


def min_sm(op: ir.TileOp) -> int:
    """The oldest architecture with the instruction (ldmatrix sm_75, stmatrix sm_90)."""
    return 75 if op.kind == "ldmatrix" else 90


def atom(op: ir.TileOp) -> tuple[int, int, int]:
    """The trailing ``(matrix, row, word)`` modes both operands of ``op`` end in."""
    return (op.count, LDMATRIX.rows, LDMATRIX.row_words)


def parse_op(opcode: str) -> ir.TileOp:
    """The tile op a PTX opcode names (``.shared::cta`` is ``.shared``); ``ContractError`` for
    anything else."""
    m = _OPCODE.fullmatch(opcode) if isinstance(opcode, str) else None
    if m is None:
        raise ContractError(f"{opcode!r} is not a tile pattern; expected "
                            "ldmatrix|stmatrix.sync.aligned.m8n8.x1|x2|x4[.trans].shared.b16")
    kind: Literal["ldmatrix", "stmatrix"] = "ldmatrix" if m["kind"] == "ldmatrix" else "stmatrix"
    count: Literal[1, 2, 4] = 1 if m["count"] == "1" else 2 if m["count"] == "2" else 4
    return ir.TileOp(kind=kind, count=count, trans=m["trans"] is not None)


@dataclass(frozen=True)
class Operand:
    """A tensor operand of a tile pattern: its layout in 32-bit words, where its storage is,
    the byte alignment of the storage's start, the view's offset in words into the storage and
    the storage's size in words."""

    name: str
    layout: TileLayout
    space: str  # "shared" or "local" for a legal operand
    bits: int = 32
    align: int = 16
    offset: int = 0
    words: int | None = None

    def describe(self) -> str:
        return f"{self.space} tensor {self.name!r} {self.layout!r}"


def operand(tensor: ir.ArrayDecl | ir.TensorView, storage: ir.ArrayDecl | ir.ArrayParam
            ) -> Operand:
    """The operand that an array with a layout, or a view over ``storage``, gives a tile
    pattern (global arrays are taken as 256-byte aligned)."""
    if tensor.layout is None:
        raise ContractError(f"{tensor.name!r} has no layout; tile patterns take tensors "
                            "(an array declared with a layout, or a view)")
    words = None
    if isinstance(storage, ir.ArrayDecl):
        words = storage.size * storage.elem.bits // tensor.elem.bits
    return Operand(
        name=tensor.name, layout=tensor.layout, space=storage.space.value,
        bits=tensor.elem.bits, align=storage.align if isinstance(storage, ir.ArrayDecl) else 256,
        offset=tensor.offset if isinstance(tensor, ir.TensorView) else 0, words=words)


def roles(op: ir.TileOp, dst: Operand, src: Operand) -> tuple[Operand, Operand]:
    """``(registers, shared)``: ldmatrix loads into ``dst``, stmatrix stores from ``src``."""
    return (dst, src) if op.kind == "ldmatrix" else (src, dst)


def _coords(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(product(*(range(n) for n in shape)))


def check(op: ir.TileOp, registers: Operand, shared: Operand) -> None:
    """Raises ``ContractError`` naming the broken rule when the operands do not fit ``op``.

    The register operand is the destination of ldmatrix and the source of stmatrix."""
    for operand, want in ((registers, "local"), (shared, "shared")):
        if operand.space != want:
            role = "register" if want == "local" else "shared"
            raise ContractError(f"the {role} operand must be a {want} tensor, "
                                f"got {operand.describe()}")
        if operand.bits != 32:
            raise ContractError(f"{operand.describe()} has {operand.bits}-bit elements; both "
                                "operands are 32-bit containers (view packed 16-bit storage "
                                "as u32 words, which is no conversion)")
        shape = operand.layout.shape
        if len(shape) < 3 or shape[-3:] != atom(op):
            raise ContractError(f"{operand.describe()} must end in (matrix, row, word) = "
                                f"{atom(op)} for {op.opcode}, it ends in {shape[-3:]}")
    lead = registers.layout.shape[:-3]
    if shared.layout.shape[:-3] != lead:
        raise ContractError(f"the repeat modes differ: registers {lead}, shared "
                            f"{shared.layout.shape[:-3]}")
    _check_shared(op, shared)
    _check_registers(op, registers)


def _check_shared(op: ir.TileOp, shared: Operand) -> None:
    layout = shared.layout
    if layout.axes != {Axis.MEM}:
        raise ContractError(f"{shared.describe()} steps along hardware axes; shared operands "
                            "are addressed by memory strides only")
    if layout.strides(Axis.MEM)[-1] != 1:
        raise ContractError(f"{shared.describe()}: the words of a shared row must be "
                            f"consecutive (word stride 1, got {layout.strides(Axis.MEM)[-1]}); "
                            "gaps within a 16-byte row are not allowed")
    if shared.align % ROW_BYTES:
        raise ContractError(f"{shared.describe()}: its storage is aligned to {shared.align} "
                            f"bytes, rows need {ROW_BYTES}")
    starts = layout.offsets()[..., 0] + shared.offset
    misaligned = np.argwhere((starts * _WORD_BYTES) % ROW_BYTES != 0)
    if misaligned.size:
        at = tuple(int(x) for x in misaligned[0])
        raise ContractError(f"{shared.describe()}: the row at {at} (matrix, row) starts at "
                            f"byte {int(starts[at]) * _WORD_BYTES}, which is not "
                            f"{ROW_BYTES}-byte aligned")
    if shared.words is not None and (
            starts.min() < 0 or starts.max() + LDMATRIX.row_words > shared.words):
        raise ContractError(f"{shared.describe()} reaches outside its {shared.words}-word "
                            "storage")
    if op.kind == "stmatrix":
        rows = starts.ravel()
        if len(np.unique(rows)) != rows.size:
            raise ContractError(f"{shared.describe()}: two rows of a store overlap, so two "
                                "registers would be written to one shared word")


def _check_registers(op: ir.TileOp, registers: Operand) -> None:
    layout = registers.layout
    if Axis.WARPID in layout.axes:
        raise ContractError(f"{registers.describe()} steps along warpid; a warp-scope tile "
                            "pattern is owned by one warp")
    lanes, slots = layout.offsets(Axis.LANEID), layout.offsets(Axis.MEM) + registers.offset
    owners = LDMATRIX.owners()
    for coord in _coords(layout.shape):
        *_, row, word = coord
        if lanes[coord] != owners[row, word]:
            raise ContractError(
                f"{registers.describe()}: register word {coord[-3:]} (matrix, row, word) of "
                f"repeat {coord[:-3]} belongs to lane {int(lanes[coord])}, but the "
                f"instruction gives it to lane {int(owners[row, word])}")
    per_register = slots.reshape(*layout.shape[:-2], LDMATRIX.rows * LDMATRIX.row_words)
    if not (per_register == per_register[..., :1]).all():
        raise ContractError(f"{registers.describe()}: the register slot must not vary with "
                            "row or word (one 32-bit register of each lane per matrix)")
    used = per_register[..., 0].ravel()
    unique, counts = np.unique(used, return_counts=True)
    if (counts > 1).any():
        raise ContractError(f"{registers.describe()}: registers overlap, slot "
                            f"{int(unique[counts > 1][0])} is used by two matrices")
    if used.min() < 0 or (registers.words is not None and used.max() >= registers.words):
        raise ContractError(f"{registers.describe()} uses slot {int(used.max())} outside its "
                            f"{registers.words}-word storage")


# ------------------------------------------------------------------------ semantics


def _provider_rows() -> int:
    """``n`` such that lane ``l`` gives row ``l % n`` of matrix ``(l / n) % count`` for every
    count: the provider rule of ``sarek.atoms.LDMATRIX`` as an affine form, checked against
    its table."""
    n = LDMATRIX.provider.rows
    lane = np.arange(LDMATRIX.lanes)
    for count in LDMATRIX.counts:
        want = np.stack([(lane // n) % count, lane % n], axis=-1)
        if not np.array_equal(LDMATRIX.provided(count), want):
            raise AssertionError("the ldmatrix provider rule is not lane = row + n * matrix")
    return n


PROVIDER_ROWS = _provider_rows()
"""Consecutive lanes giving the rows of one matrix (``sarek.atoms.LDMATRIX.provider``)."""


def provider_coordinates(lane: ir.Expr, count: int) -> tuple[ir.Expr, ir.Expr]:
    """``(matrix, row)``: the i32 expressions of the matrix and row whose address the lane
    ``lane`` gives to an instruction of ``count`` matrices (``PROVIDER_ROWS``)."""
    rows = const(PROVIDER_ROWS)
    matrix = binary(BinOp.REM, binary(BinOp.DIV, lane, rows), const(count))
    return matrix, binary(BinOp.REM, lane, rows)


@dataclass(frozen=True)
class Placed:
    """A tile operand where it lies: the name of its storage array, its layout in 32-bit
    words and its offset in words into the storage."""

    storage: str
    layout: TileLayout
    offset: int = 0


def lane_tile(s: ir.TileApply, dst: Placed, src: Placed) -> ir.LaneTile:
    """The tile pattern ``s`` lane by lane: one ``Ldmatrix`` or ``Stmatrix`` per repeat, in
    order, each naming the shared rows as one affine map of (matrix, row) and the register
    word of each matrix (the contract was checked: the shared layout is affine in memory
    words, the register slot depends on the repeat and the matrix only)."""
    op = s.op
    registers, shared = (dst, src) if op.kind == "ldmatrix" else (src, dst)
    strides = shared.layout.strides(Axis.MEM)
    moves: list[ir.Ldmatrix | ir.Stmatrix] = []
    for rep in instructions(registers.layout):
        rows = ir.ProvidedRows(
            start=shared.offset + sum(c * st for c, st in zip(rep, strides, strict=False)),
            matrix_stride=strides[-3], row_stride=strides[-2])
        slots = tuple(int(x) + registers.offset
                      for x in register_slots(registers.layout, rep))
        if op.kind == "ldmatrix":
            moves.append(ir.Ldmatrix(dst=registers.storage, offset=0, src=shared.storage,
                                     count=op.count, trans=op.trans, rows=rows, slots=slots,
                                     line=s.line))
        else:
            moves.append(ir.Stmatrix(dst=shared.storage, src=registers.storage,
                                     count=op.count, trans=op.trans, rows=rows, slots=slots,
                                     line=s.line))
    return ir.LaneTile(op=op, dst=s.dst, src=s.src, rows=PROVIDER_ROWS, moves=tuple(moves),
                       line=s.line)


def instructions(registers: TileLayout) -> list[tuple[int, ...]]:
    """The repeat coordinates, one warp instruction each, in order."""
    return _coords(registers.shape[:-3])


def register_slots(registers: TileLayout, repeat: tuple[int, ...]) -> np.ndarray:
    """The register slot of each matrix of one instruction (``count`` slots)."""
    return np.asarray(registers.offsets(Axis.MEM)[repeat][:, 0, 0])


def gather_rows(op: ir.TileOp, rows: np.ndarray) -> np.ndarray:
    """ldmatrix on data: ``rows[..., m, r, w]`` are the four words at the address the
    provider of row ``r`` of matrix ``m`` gave; returns ``regs[..., lane, m]``, each lane's
    ``count`` registers (word ``(m, r, w)`` in register ``m`` of lane ``owners()[r, w]``)."""
    data = _transpose16(rows) if op.trans else rows
    out = np.empty((*data.shape[:-3], WARP, op.count), data.dtype)
    out[..., LDMATRIX.owners(), :] = np.moveaxis(data, -3, -1)
    return out


def scatter_rows(op: ir.TileOp, regs: np.ndarray) -> np.ndarray:
    """stmatrix on data, the inverse of ``gather_rows``: from ``regs[..., lane, m]`` the words
    ``rows[..., m, r, w]`` written at the address the provider of row ``r`` of matrix ``m``
    gave."""
    data = np.moveaxis(regs[..., LDMATRIX.owners(), :], -1, -3)
    out: np.ndarray = _transpose16(data) if op.trans else data
    return out


def low_half_holders(op: ir.TileOp) -> np.ndarray:
    """``[row, word]``: for each 32-bit word of a shared 8x8 matrix, the lane whose register
    takes (ldmatrix) or gives (stmatrix) its low 16-bit half — the word's owner, or with
    ``.trans`` the owner of the register word that element lands in."""
    owners = LDMATRIX.owners()
    if not op.trans:
        return owners
    # Follow every element through the transpose: tag each with its row-major index.
    tags = np.arange(2 * owners.size, dtype="<u2").view("<u4").reshape(owners.shape)
    landed = _transpose16(tags).view("<u2")  # [row, 2 * word]: the tag each half holds
    holder = np.empty(2 * owners.size, np.int64)
    holder[landed.ravel()] = np.repeat(owners.ravel(), 2)
    out: np.ndarray = holder[::2].reshape(owners.shape)
    return out


def _transpose16(words: np.ndarray) -> np.ndarray:
    """Transposes each 8x8 matrix of 16-bit elements held as ``[..., 8 rows, 4 words]`` of
    little-endian pairs (element ``2*w`` in the low half)."""
    halves = np.ascontiguousarray(words, dtype="<u4").view("<u2")
    halves = halves.reshape(*words.shape[:-1], 2 * LDMATRIX.row_words)
    return np.ascontiguousarray(np.swapaxes(halves, -1, -2)).view("<u4")


def apply(op: str, dst: Operand, src: Operand, scope: str = "warp") -> ir.TileApply:
    """The IR statement running ``op`` from ``src`` into ``dst``, after checking the contract
    (``ContractError`` names the broken rule). Inside a ``@sarek.kernel`` function, a call
    ``sarek.tile.apply(op, dst, src)`` with tensors named by variables builds the same
    statement, checked at its line."""
    if scope != "warp":
        raise ContractError(f"tile patterns have warp scope only, got scope={scope!r}")
    parsed = parse_op(op)
    check(parsed, *roles(parsed, dst, src))
    return ir.TileApply(op=parsed, dst=dst.name, src=src.name)
