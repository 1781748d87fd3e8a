"""Facts about a staged k-loop, read off its index expressions: how the stores to shared memory
spread over the thread coordinates, the block shape for which they fill their arrays (or, for a
tensor declared with a layout, the elements its layout reaches) exactly once, and which
invocation staged the element a load from shared memory reads.

A thread coordinate is ``thread_idx.a``, or one part of it when a kernel reads a 1-D block as a
tile: ``thread_idx.a // W`` (the tile row) and ``thread_idx.a % W`` (the column). A staging index
may also pick one of two buffers by the step's parity (double buffering)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sarek import ir
from sarek.affine import Poly
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_build import add, const, mul
from sarek.ir_format import format_expr
from sarek.ir_walk import rebuild
from sarek.layout import Axis, TileLayout
from sarek.matrix_pattern.normalize import AtomTable, Normalizer, Quotient, quotient
from sarek.matrix_pattern.vocabulary import STEP_OFFSET, STEP_START, Refusal

_AXES = {"x": 0, "y": 1, "z": 2}


@dataclass(frozen=True)
class Coord:
    """``thread_idx.axis`` (``part`` empty), or ``thread_idx.axis // width`` (``div``) or
    ``% width`` (``rem``)."""

    axis: str
    part: Literal["", "div", "rem"] = ""
    width: int = 0

    def expr(self) -> ir.Expr:
        """The coordinate as the IR expression a kernel writes."""
        thread = ir.BuiltinValue(which=Builtin(f"thread_idx.{self.axis}"))
        if not self.part:
            return thread
        return ir.Binary(op=BinOp.DIV if self.part == "div" else BinOp.REM, a=thread,
                         b=const(self.width), type=ElemType.I32)

    def extent(self, block: tuple[int, int, int]) -> int:
        """How many values the coordinate takes in a block of that shape."""
        n = block[_AXES[self.axis]]
        return n if not self.part else self.width if self.part == "rem" else n // self.width


PARITY = "%parity"
"""A term of a staging index: the parity of the step's number (``s % 2`` counting tiles,
``t // T % 2`` stepping by them), which picks one of two buffers (double buffering)."""


@dataclass(frozen=True)
class Steps:
    """How a staged k-loop's outer variable runs: the tile, whether it counts tiles
    (``range(k // T)``) rather than stepping by them, and whether it starts at 0 (the steps'
    parity is then that of their number)."""

    tile: int
    counted: bool
    from_zero: bool

    def is_parity(self, kind: str, payload: Quotient, atoms: AtomTable) -> bool:
        """Whether a ``div``/``rem`` atom is the step number's parity."""
        num, den, _ = payload
        if not (self.from_zero and kind == "rem" and den == Poly.const(2)):
            return False
        if self.counted:
            return num == Poly.atom(STEP_START)
        step = next((name for name, (kind, inner) in atoms.info.items() if kind == "div"
                     and quotient(inner)[:2] == (Poly.atom(STEP_START), Poly.const(self.tile))),
                    None)  # t // T: the step's number
        return step is not None and num == Poly.atom(step)


@dataclass(frozen=True)
class Spread:
    """How a staging store's index spreads over the block: a stride per thread coordinate, and
    the distance between the two buffers when the step's parity picks one."""

    strides: dict[Coord, int]
    buffer: int | None


def coord_poly(index: ir.Expr, steps: Steps) -> list[tuple[Coord | str, int]]:
    """``index`` as ``sum(coefficient * term)``: each term as its thread coordinate (or the text
    of what else it is: the step offset, ``PARITY``) with its coefficient."""
    atoms = AtomTable()
    poly = Normalizer(atoms, {}).poly(index)
    names: dict[str, Coord | str] = {}
    for name, (kind, payload) in atoms.info.items():
        if kind in ("div", "rem"):
            num, den, _ = quotient(payload)
            axis = _thread_axis(num)
            if axis is not None and den.constant is not None and den.constant > 0:
                part: Literal["div", "rem"] = "div" if kind == "div" else "rem"
                names[name] = Coord(axis, part, den.constant)
            elif steps.is_parity(kind, quotient(payload), atoms):
                names[name] = PARITY
            elif _moves(num, atoms):
                names[name] = STEP_START  # it moves with the step
    out: list[tuple[Coord | str, int]] = []
    for mono, coef in poly.terms.items():
        if len(mono) != 1:
            out.append(("*".join(mono), coef))
            continue
        axis = _thread_axis(Poly.atom(mono[0]))
        out.append((Coord(axis) if axis is not None else names.get(mono[0], mono[0]), coef))
    return out


def _moves(poly: Poly, atoms: AtomTable) -> bool:
    """Whether ``poly`` depends on the staged loop's variables."""
    for atom in poly.atoms():
        if atom in (STEP_START, STEP_OFFSET):
            return True
        if atom in atoms.info:
            kind, payload = atoms.info[atom]
            if kind in ("div", "rem") and _moves(quotient(payload)[0], atoms):
                return True
    return False


def _thread_axis(poly: Poly) -> str | None:
    for axis in _AXES:
        if poly == Poly.atom(f"@thread_idx.{axis}"):
            return axis
    return None


def thread_strides(index: ir.Expr, steps: Steps) -> Spread:
    """The staging store's index as ``sum(stride * coordinate)``, plus a buffer's distance
    times the step's parity when it alternates between two buffers."""
    strides: dict[Coord, int] = {}
    buffer = None
    for what, coef in coord_poly(index, steps):
        if what == PARITY and coef > 0:
            buffer = coef
        elif what in (STEP_START, STEP_OFFSET, PARITY):
            raise Refusal(f"the staging store's index {format_expr(index)} moves with the step "
                          "other than by picking one of two buffers by the step's parity "
                          "((s % 2) * size counting tiles from 0, (t // T % 2) * size stepping "
                          "by them from 0)")
        elif not isinstance(what, Coord) or coef <= 0:
            raise Refusal(f"the staging store's index {format_expr(index)} is not a sum of "
                          "thread_idx coordinates times constants")
        else:
            strides[what] = coef
    return Spread(strides, buffer)


def staging_block(staged: dict[str, ir.Store], shared: dict[str, ir.ArrayDecl],
                  steps: Steps) -> tuple[int, int, int]:
    """The block shape for which the staging stores fill their arrays exactly once (a tensor's
    elements: those its layout reaches; each of two buffers, when the step's parity picks
    one)."""
    if not staged:
        raise Refusal("the staged k-loop stores nothing to shared memory")
    shapes = set()
    for name, store in staged.items():
        decl = shared[name]
        spread = thread_strides(store.index, steps)
        extents = (_dense_extents(decl, spread) if decl.layout is None
                   else _tensor_extents(decl.layout, spread))
        block = None if extents is None else _block_of(extents)
        if block is None:
            buffers = " in each of two buffers" if spread.buffer is not None else ""
            raise Refusal(f"the staging store {name}[{format_expr(store.index)}] does not "
                          f"fill the {decl.size} elements of {name!r} once per block{buffers}")
        shapes.add(block)
    if len(shapes) > 1:
        raise Refusal("the staging stores assume different block shapes")
    return shapes.pop()


def _block_of(extents: dict[Coord, int]) -> tuple[int, int, int] | None:
    """The block in which each coordinate takes exactly its extent's values, if there is one:
    a split axis needs both parts, its columns as many as the split's width."""
    block = [1, 1, 1]
    for axis, i in _AXES.items():
        on_axis = [(coord, n) for coord, n in extents.items() if coord.axis == axis]
        used = {coord.part: (coord, n) for coord, n in on_axis}
        if not used:
            continue
        if len(used) != len(on_axis):
            return None
        if "" in used:
            if len(used) > 1:
                return None
            block[i] = used[""][1]
            continue
        if set(used) != {"div", "rem"}:
            return None
        (high, rows), (low, cols) = used["div"], used["rem"]
        if high.width != low.width or cols != low.width:
            return None
        block[i] = rows * cols
    return block[0], block[1], block[2]


def _dense_extents(decl: ir.ArrayDecl, spread: Spread) -> dict[Coord, int] | None:
    """The extents for which ``sum(stride * coordinate)`` covers ``0 .. size - 1`` (each half,
    with two buffers)."""
    size = decl.size
    if spread.buffer is not None:
        if decl.size != 2 * spread.buffer:
            return None
        size = spread.buffer
    extents: dict[Coord, int] = {}
    ordered = sorted(spread.strides.items(), key=lambda kv: kv[1])
    for i, (coord, stride) in enumerate(ordered):
        next_stride = ordered[i + 1][1] if i + 1 < len(ordered) else size
        if (i == 0 and stride != 1) or next_stride % stride:
            return None
        extents[coord] = next_stride // stride
    return extents


MAX_TENSOR_TILE = 1 << 20
"""The most elements a staging tensor's layout may have (its offsets are enumerated)."""


def _tensor_extents(layout: TileLayout, spread: Spread) -> dict[Coord, int] | None:
    """The extents for which each coordinate walks one mode of the layout (``sa[ty, tx]``):
    every mode longer than 1 is walked (with two buffers, one mode of 2 by the step's parity),
    and no two coordinates of the layout share an element."""
    if layout.size > MAX_TENSOR_TILE or len(set(layout.offsets().ravel().tolist())) \
            != layout.size:
        return None
    modes = [(n, stride) for n, stride in zip(layout.shape, layout.strides(Axis.MEM),
                                              strict=True) if n > 1]
    if spread.buffer is not None:
        if (2, spread.buffer) not in modes:
            return None
        modes.remove((2, spread.buffer))
    strides = spread.strides
    if sorted(strides.values()) != sorted(stride for _, stride in modes):
        return None
    return {coord: next(n for n, mode_stride in modes if mode_stride == stride)
            for coord, stride in strides.items()}


def staging_thread(index: ir.Expr, spread: Spread, block: tuple[int, int, int],
                   steps: Steps) -> dict[Coord, ir.Expr]:
    """For a load from a staged array at ``index``: which invocation staged the element, as an
    expression for each thread coordinate of the store (``spread``)."""
    coord_of_stride = {stride: coord for coord, stride in spread.strides.items()}
    out: dict[Coord, ir.Expr] = {}
    problem = Refusal(f"the load from shared memory at {format_expr(index)} does not read "
                      "one staged element per thread coordinate")
    buffer = None
    for what, coef in coord_poly(index, steps):
        if what == PARITY:
            buffer = coef
            continue
        if coef not in coord_of_stride:
            raise problem
        coord = coord_of_stride[coef]
        if coord in out:
            raise problem
        if what == STEP_OFFSET and steps.tile == coord.extent(block):
            out[coord] = ir.Var(name=STEP_OFFSET, type=ElemType.I32)
        elif isinstance(what, Coord) and what.extent(block) == coord.extent(block):
            out[coord] = what.expr()
        else:
            raise problem
    if buffer != spread.buffer:
        raise Refusal(f"the load from shared memory at {format_expr(index)} reads another "
                      "buffer than the step stores")
    if set(out) != set(spread.strides):
        raise problem
    return out


def restaged(value: ir.Expr, writer: dict[Coord, ir.Expr]) -> ir.Expr:
    """``value`` as the invocation ``writer`` (its coordinates) computed it."""
    direct = {coord.expr(): expr for coord, expr in writer.items()}
    whole: dict[str, ir.Expr] = {}
    for coord, expr in writer.items():
        if not coord.part:
            whole[coord.axis] = expr
        elif coord.part == "div" and Coord(coord.axis, "rem", coord.width) in writer:
            low = writer[Coord(coord.axis, "rem", coord.width)]
            whole[coord.axis] = add(mul(expr, const(coord.width)), low)

    def leaf(x: ir.Expr) -> ir.Expr | None:
        for coord_expr, expr in direct.items():
            if x == coord_expr:
                return expr
        if isinstance(x, ir.BuiltinValue) and x.which.value.startswith("thread_idx."):
            return whole.get(x.which.value[-1])
        return None

    return rebuild(value, leaf)
