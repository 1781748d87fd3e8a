"""What the compiled closures share: the running state, the compile-time symbols, and the shape
of a value over the launch.

A value is a NumPy scalar when every invocation holds the same one, else an array that
broadcasts to the launch's axes ``Geometry.shape`` = (grid z, y, x, block z, y, x), whose C
order is the invocation order. An axis the value does not depend on has extent 1: ``row =
block_idx.y * 16 + thread_idx.y`` has one element per (block y, thread y), so ``a[row*k + p]``
gathers as many elements as there are rows, not one per invocation. ``spread`` gives the one
element per invocation that masks over subgroups, stores and error reports need.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np

from sarek import ir
from sarek.ir import ElemType, MemSpace
from sarek.layout import TileLayout
from sim.arith import Value
from sim.memory import LocalArray, SharedArray

Mask: TypeAlias = np.ndarray | None
"""The active invocations: None for all (no masking cost), else a bool value with at least one
True, broadcastable to the launch's shape."""


class State:
    """What changes while a launch runs: scalar variables, declared arrays, fragments,
    returned invocations."""

    def __init__(self, slots: int, array_slots: int, frag_slots: int = 0) -> None:
        self.env: list[Value] = [None] * slots
        self.frags: list[np.ndarray | None] = [None] * frag_slots  # [subgroup, rows, cols]
        self.arrays: list[SharedArray | LocalArray | None] = [None] * array_slots
        self.shared: dict[int, SharedArray] = {}  # by slot: the arrays a barrier resets
        self.alive: Mask = None  # invocations that have not returned (None: all)
        self.trips = 0  # loop trips run so far by the whole launch (Limits.trips)
        self.copy_groups: np.ndarray | None = None  # committed copy groups, per invocation


ExprFn: TypeAlias = Callable[[State, Mask], Value]
StmtFn: TypeAlias = Callable[[State, Mask], None]


@dataclass(frozen=True)
class Scalar:
    """A variable: its slot in ``State.env``."""

    slot: int
    type: ElemType


@dataclass(frozen=True)
class Array:
    """An array: a parameter (its data held here) or a declaration (its slot in
    ``State.arrays``)."""

    slot: int  # into State.arrays; -1 for parameters, whose data the closures hold
    name: str
    elem: ElemType
    space: MemSpace
    size: int
    data: np.ndarray | None = None  # a parameter's array
    layout: TileLayout | None = None  # arrays declared as tensors


@dataclass(frozen=True)
class View:
    """A tensor over an array's storage (``TensorView``)."""

    name: str
    storage: Array
    elem: ElemType
    layout: TileLayout
    offset: int


@dataclass(frozen=True)
class Frag:
    """A fragment: its slot in ``State.frags`` and its declaration."""

    slot: int
    decl: ir.FragDecl


Symbol: TypeAlias = Scalar | Array | View | Frag
Scope: TypeAlias = ChainMap[str, Symbol]


def spread(v: Value, shape: tuple[int, ...]) -> np.ndarray:
    """``v`` with one element per invocation, in invocation order (a 1-D array; a view when
    ``v`` already has every axis)."""
    return np.broadcast_to(v, shape).reshape(-1)


GROUPED = (0, 3, 1, 4, 2, 5)
"""The launch's axes with each grid axis beside its block axis (grid z, block z, grid y, block
y, grid x, block x): the global coordinates' order."""
UNGROUPED = tuple(GROUPED.index(axis) for axis in range(6))


def combine(f: Callable[[Value, Value], Value], a: Value, b: Value) -> Value:
    """``f(a, b)`` for an elementwise ``f``. When two arrays of different axes broadcast against
    each other (``a[row]`` times ``b[col]``), NumPy would lay the result out in the launch's
    order, whose last axis is the block's x extent: every inner loop 16 elements long. The
    result is laid out in the global coordinates' order instead (the same values, a different
    memory order), so the loops run over whole rows; later operations follow that layout."""
    if (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape != b.shape
            and a.ndim == b.ndim == 6):
        out: np.ndarray = np.asarray(f(a.transpose(GROUPED), b.transpose(GROUPED)))
        return out.transpose(UNGROUPED)
    return f(a, b)


def first_where(values: Value, where: np.ndarray) -> int:
    """The element of ``values`` at the first invocation where ``where`` holds (the C order of
    the broadcast shape is the invocation order)."""
    v, w = np.broadcast_arrays(values, where)
    return int(v[w][0])
