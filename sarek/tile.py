"""The ldmatrix / stmatrix tile patterns: their contract and their lane-explicit semantics.

``ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16`` moves ``count`` 8x8 matrices of
16-bit elements from shared memory into registers of a whole warp; ``stmatrix`` (sm_90) moves
them back. Both operands are tensors of 32-bit containers ending in the modes
``(matrix, row, word) = (count, 8, 4)``; leading modes repeat the instruction. The hardware
facts, written once here and read by the DSL, the IR checker, the simulator and the CUDA
printer:

* lane ``8*matrix + row`` provides the shared address of that row (lanes past ``8*count``
  repeat valid addresses);
* register word ``(matrix, row, word)`` belongs to lane ``4*row + word``, in the instruction's
  destination register ``matrix``;
* ``.trans`` transposes each 8x8 matrix of 16-bit elements: register element
  ``(row, 2*word + half)`` comes from shared element ``(2*word + half, row)``.

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
from sarek.errors import SarekError
from sarek.layout import Axis, TileLayout

WARP = 32
ROW_BYTES = 16


class ContractError(SarekError):
    """A tile pattern whose operands break the instruction's layout contract."""


_OPCODE = re.compile(
    r"(?P<kind>ldmatrix|stmatrix)\.sync\.aligned\.m8n8\.x(?P<count>[124])"
    r"(?P<trans>\.trans)?\.shared(?:::cta)?\.b16")


@dataclass(frozen=True)
class TileOp:
    """One exact PTX form, as written in the opcode."""

    opcode: str
    kind: Literal["ldmatrix", "stmatrix"]
    count: int
    trans: bool

    @property
    def min_sm(self) -> int:
        """The oldest architecture with the instruction (ldmatrix sm_75, stmatrix sm_90)."""
        return 75 if self.kind == "ldmatrix" else 90

    @property
    def atom(self) -> tuple[int, int, int]:
        """The trailing ``(matrix, row, word)`` modes both operands end in."""
        return (self.count, 8, 4)


def parse_op(opcode: str) -> TileOp:
    """The tile op an opcode names; ``ContractError`` for anything else."""
    m = _OPCODE.fullmatch(opcode)
    if m is None:
        raise ContractError(f"{opcode!r} is not a tile pattern; expected "
                            "ldmatrix|stmatrix.sync.aligned.m8n8.x1|x2|x4[.trans].shared.b16")
    kind: Literal["ldmatrix", "stmatrix"] = "ldmatrix" if m["kind"] == "ldmatrix" else "stmatrix"
    return TileOp(opcode, kind, int(m["count"]), m["trans"] is not None)


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


def roles(op: TileOp, dst: Operand, src: Operand) -> tuple[Operand, Operand]:
    """``(registers, shared)``: ldmatrix loads into ``dst``, stmatrix stores from ``src``."""
    return (dst, src) if op.kind == "ldmatrix" else (src, dst)


def _coords(shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    return list(product(*(range(n) for n in shape)))


def check(op: TileOp, registers: Operand, shared: Operand) -> None:
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
        if len(shape) < 3 or shape[-3:] != op.atom:
            raise ContractError(f"{operand.describe()} must end in (matrix, row, word) = "
                                f"{op.atom} for {op.opcode}, it ends in {shape[-3:]}")
    lead = registers.layout.shape[:-3]
    if shared.layout.shape[:-3] != lead:
        raise ContractError(f"the repeat modes differ: registers {lead}, shared "
                            f"{shared.layout.shape[:-3]}")
    _check_shared(op, shared)
    _check_registers(op, registers)


def _check_shared(op: TileOp, shared: Operand) -> None:
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
    misaligned = np.argwhere((starts * 4) % ROW_BYTES != 0)
    if misaligned.size:
        at = tuple(int(x) for x in misaligned[0])
        raise ContractError(f"{shared.describe()}: the row at {at} (matrix, row) starts at "
                            f"byte {int(starts[at]) * 4}, which is not 16-byte aligned")
    if shared.words is not None and (starts.min() < 0 or starts.max() + 4 > shared.words):
        raise ContractError(f"{shared.describe()} reaches outside its {shared.words}-word "
                            "storage")
    if op.kind == "stmatrix":
        rows = starts.ravel()
        if len(np.unique(rows)) != rows.size:
            raise ContractError(f"{shared.describe()}: two rows of a store overlap, so two "
                                "registers would be written to one shared word")


def _check_registers(op: TileOp, registers: Operand) -> None:
    layout = registers.layout
    if Axis.WARPID in layout.axes:
        raise ContractError(f"{registers.describe()} steps along warpid; a warp-scope tile "
                            "pattern is owned by one warp")
    lanes, slots = layout.offsets(Axis.LANEID), layout.offsets(Axis.MEM) + registers.offset
    for coord in _coords(layout.shape):
        *_, row, word = coord
        if lanes[coord] != 4 * row + word:
            raise ContractError(
                f"{registers.describe()}: register word {coord[-3:]} (matrix, row, word) of "
                f"repeat {coord[:-3]} belongs to lane {int(lanes[coord])}, but the "
                f"instruction gives it to lane 4*row+word = {4 * row + word}")
    per_register = slots.reshape(*layout.shape[:-2], 32)
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


def instructions(registers: TileLayout) -> list[tuple[int, ...]]:
    """The repeat coordinates, one warp instruction each, in order."""
    return _coords(registers.shape[:-3])


def provider_rows(op: TileOp, shared: TileLayout, repeat: tuple[int, ...]) -> np.ndarray:
    """The word offset each of the 32 lanes provides for one instruction: lane ``8*m + r``
    gives row ``r`` of matrix ``m``; lanes past ``8*count`` repeat valid rows."""
    lanes = np.arange(WARP)
    m, r = (lanes // 8) % op.count, lanes % 8
    starts: np.ndarray = shared.offsets()[repeat][..., 0]
    return np.asarray(starts[m, r])


def register_slots(registers: TileLayout, repeat: tuple[int, ...]) -> np.ndarray:
    """The register slot of each matrix of one instruction (``count`` slots)."""
    return np.asarray(registers.offsets(Axis.MEM)[repeat][:, 0, 0])


def gather_rows(op: TileOp, rows: np.ndarray) -> np.ndarray:
    """ldmatrix on data: ``rows[..., m, r, w]`` are the four words at the address lane
    ``8*m + r`` provided; returns ``regs[..., lane, m]``, each lane's ``count`` registers."""
    data = _transpose16(rows) if op.trans else rows
    # lane 4*r + w receives word (m, r, w)
    out: np.ndarray = np.moveaxis(data, -3, -1).reshape(*data.shape[:-3], WARP, op.count)
    return out


def scatter_rows(op: TileOp, regs: np.ndarray) -> np.ndarray:
    """stmatrix on data, the inverse of ``gather_rows``: from ``regs[..., lane, m]`` the words
    ``rows[..., m, r, w]`` written at the address lane ``8*m + r`` provided."""
    data = np.moveaxis(regs.reshape(*regs.shape[:-2], 8, 4, op.count), -1, -3)
    out: np.ndarray = _transpose16(data) if op.trans else data
    return out


def _transpose16(words: np.ndarray) -> np.ndarray:
    """Transposes each 8x8 matrix of 16-bit elements held as ``[..., 8 rows, 4 words]`` of
    little-endian pairs (element ``2*w`` in the low half)."""
    halves = np.ascontiguousarray(words, dtype="<u4").view("<u2")
    halves = halves.reshape(*words.shape[:-1], 8)
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
    return ir.TileApply(op=op, dst=dst.name, src=src.name)
