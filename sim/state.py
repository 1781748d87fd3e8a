"""What the compiled closures share: the running state, the compile-time symbols, and the shape
of a value over the launch.

A value is a NumPy scalar when every invocation holds the same one, else an array that
broadcasts to the launch's axes ``Geometry.shape`` = (grid z, y, x, block z, y, x), whose C
order is the invocation order. An axis the value does not depend on has extent 1: ``row =
block_idx.y * 16 + thread_idx.y`` has one element per (block y, thread y), so ``a[row*k + p]``
gathers as many elements as there are rows, not one per invocation. ``spread`` gives the one
element per invocation that masks over subgroups, stores and error reports need. A value's
memory layout is free (``combine`` chooses it for speed), and large values live in storage the
launch reuses (``Buffers``).
"""

from __future__ import annotations

import math
import weakref
from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, NamedTuple, TypeAlias

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
        self.wgmma_groups: np.ndarray | None = None  # committed wgmma groups, per invocation
        self.mbarriers: dict[int, Any] = {}  # by slot: sim.exec_barriers.Mbarriers
        self.tasks: Any = None  # the warp roles running as tasks (sim.roles.Tasks), if any
        self.buffers = Buffers()  # storage of large values, reused


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
    shared_pitch: int | None = None  # of an array in another's storage (``pitch``)

    @property
    def pitch(self) -> int:
        """Elements between two blocks' copies of a shared array: its size, or for one that
        shares another's storage, that storage's bytes per block counted in its elements."""
        return self.size if self.shared_pitch is None else self.shared_pitch


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

SMALL = 1 << 13
"""Results of fewer elements are computed as NumPy lays them out, without the pool: the
choice would cost more than it saves."""
POOLED_BYTES = 1 << 17
"""Results of at least this many bytes are computed into ``Buffers`` (glibc serves smaller
allocations from its heap without page faults)."""


class _Lease:
    """What a value computed into a pool buffer refers to (its array's base, held by every view
    of it): the buffer is free again once its lease is gone, which a weak reference tells on
    any Python, without counting references."""

    __slots__ = ("__array_interface__", "__weakref__", "owner")

    def __init__(self, owner: np.ndarray, address: int, nbytes: int) -> None:
        self.owner = owner  # the storage outlives the pool while a value is in it
        self.__array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "version": 3,
                                    "data": (address, False)}


class _Slot:
    """One buffer of the pool: its storage, the address values start at, and the lease of the
    value in it (None before the first)."""

    __slots__ = ("address", "lease", "owner")

    def __init__(self, owner: np.ndarray, address: int) -> None:
        self.owner, self.address = owner, address
        self.lease: weakref.ref[_Lease] | None = None

    def free(self) -> bool:
        return self.lease is None or self.lease() is None


_STAGGER = 1344
"""Bytes between the page offsets of successive buffers (a multiple of the cache line):
buffers at one page offset make a loop that reads one and writes another stall on 4 KiB
aliasing (the processor takes the store for one to the load's address)."""


class Buffers:
    """The storage of a launch's large values, handed out again once no value refers to it.

    A fresh megabyte array costs a page fault per 4 KiB when glibc maps it anew (it returns
    large freed blocks to the system): most of the time of an operation such as ``acc + a*b``
    over the launch. A buffer is free when no value refers to it: a value computed into it is
    an array over the buffer's current lease, every view of it holds that array (or the lease)
    as its base, and the pool holds the lease only weakly. The pool keeps at most ``limit``
    bytes; past that, buffers are allocated as usual."""

    def __init__(self, limit: int = 1 << 28) -> None:
        self._kept: dict[int, list[_Slot]] = {}
        self._bytes, self._limit, self._made = 0, limit, 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised C-contiguous array that nothing else refers to."""
        nbytes = math.prod(shape) * dtype.itemsize
        kept = self._kept.setdefault(nbytes, [])
        slot = next((s for s in kept if s.free()), None)
        if slot is None:
            owner = np.empty(nbytes + 4096, np.uint8)
            self._made += 1
            base = owner.ctypes.data
            slot = _Slot(owner, base + (self._made * _STAGGER - base) % 4096)
            if self._bytes + nbytes <= self._limit:
                kept.append(slot)
                self._bytes += nbytes
        lease = _Lease(slot.owner, slot.address, nbytes)
        slot.lease = weakref.ref(lease)
        # bytes viewed as the type: an interface's type string cannot name every NumPy type
        return np.asarray(lease).view(dtype).reshape(shape)

    def copy(self, v: np.ndarray) -> np.ndarray:
        """A C-contiguous copy of ``v``, in the pool's storage when it is large."""
        out = self.empty(v.shape, v.dtype) if v.nbytes >= POOLED_BYTES else \
            np.empty(v.shape, v.dtype)
        np.copyto(out, v)
        return out

    def spread(self, v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``spread(v, shape)``: one element per invocation in invocation order, in the pool's
        storage unless it is a view of ``v``."""
        if v.shape == shape and v.flags.c_contiguous:
            return v.reshape(-1)
        out = self.empty(shape, v.dtype)
        np.copyto(out, v)
        return out.reshape(-1)


def combine(f: np.ufunc, a: Value, b: Value, pool: Buffers | None = None,
            temporaries: tuple[bool, bool] = (False, False)) -> Value:
    """``f(a, b)`` for a binary ufunc, laid out for speed (the same values in any layout) and,
    when the result is large, computed into ``pool``'s storage.

    An operand of the result's shape gives its layout, so that a chain of operations over the
    launch keeps running over contiguous memory. Two smaller arrays over different axes are laid
    out in the global coordinates' order (``a[row] * b[col]``: NumPy would follow the launch's
    order, whose last axis is the block's x extent, every inner loop 16 elements long) or, where
    the axes both have make a longer inner loop, with those axes innermost and both operands
    copied into that order first (``a_tile[ty*16 + kk] * b_tile[kk*16 + tx]`` is an outer
    product per block: its inner loop runs over the blocks).

    ``temporaries`` says which operands the caller guarantees nothing else refers to (a result
    of ``combine`` the caller has just computed): a large one laid out as the result takes it,
    so that the loop writes memory it has just read."""
    a_array, b_array = isinstance(a, np.ndarray), isinstance(b, np.ndarray)
    if not (a_array or b_array):
        return f(a, b)
    plan = _plan(f, a.shape if a_array else None, a.strides if a_array else None, a.dtype,
                 b.shape if b_array else None, b.strides if b_array else None, b.dtype)
    if pool is not None and plan.nbytes < POOLED_BYTES:
        pool = None
    if pool is None or plan.copy:
        dead = None
    elif a_array and temporaries[0] and _fits(a, plan):
        dead = a
    elif b_array and temporaries[1] and _fits(b, plan):
        dead = b
    else:
        dead = None
    if plan.order is None:
        if pool is None:
            return f(a, b)
        out = pool.empty(plan.shape, plan.dtype) if dead is None else dead
        f(a, b, out=out)
        return out
    if plan.copy:
        a = np.ascontiguousarray(a.transpose(plan.order))
        b = np.ascontiguousarray(b.transpose(plan.order))
    else:
        a = a.transpose(plan.order) if a_array else a
        b = b.transpose(plan.order) if b_array else b
    if dead is not None:
        f(a, b, out=dead.transpose(plan.order))
        return dead
    out = np.empty(plan.shape, plan.dtype) if pool is None else pool.empty(plan.shape,
                                                                          plan.dtype)
    f(a, b, out=out)
    return out.transpose(plan.inverse)


def contiguous_plan(f: np.ufunc, a: tuple[int, ...], b: tuple[int, ...], dtype: np.dtype[Any]
                    ) -> Plan:
    """How ``combine`` lays out ``f(a, b)`` for C-contiguous arrays of shapes ``a`` and ``b``
    and type ``dtype`` (the order of the result's axes, whether the operands are copied into
    it first), for a caller that computes the same operation itself."""
    return _plan(f, a, _c_strides(a, dtype.itemsize), dtype, b, _c_strides(b, dtype.itemsize),
                 dtype)


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _fits(x: np.ndarray, plan: Plan) -> bool:
    """Whether ``x`` has the shape, type and layout of ``plan``'s result."""
    if x.dtype != plan.dtype or not x.flags.writeable:
        return False
    if plan.order is None:
        return x.shape == plan.shape and x.flags.c_contiguous
    moved = x.transpose(plan.order)
    return moved.shape == plan.shape and moved.flags.c_contiguous


class Plan(NamedTuple):
    """How ``combine`` computes ``f(a, b)`` for operands of given shapes and layouts."""

    order: tuple[int, ...] | None  # the result's axes, outermost first (None: C order)
    copy: bool  # whether the operands are copied into ``order`` first
    shape: tuple[int, ...]  # the result's extents in ``order``
    inverse: tuple[int, ...]  # the transposition from ``order`` back to the launch's
    dtype: np.dtype[Any]
    nbytes: int


Layout: TypeAlias = tuple[tuple[int, ...], tuple[int, ...], int]
"""An array's shape, strides and item size."""


@lru_cache(maxsize=4096)
def _plan(f: np.ufunc, a_shape: tuple[int, ...] | None, a_strides: tuple[int, ...] | None,
          a_dtype: np.dtype[Any], b_shape: tuple[int, ...] | None,
          b_strides: tuple[int, ...] | None, b_dtype: np.dtype[Any]) -> Plan:
    """``combine``'s plan for operands of these shapes and strides (None for a scalar)."""
    dtype: np.dtype[Any] = f.resolve_dtypes((a_dtype, b_dtype, None))[2]
    a = None if a_shape is None or a_strides is None else (a_shape, a_strides,
                                                            a_dtype.itemsize)
    b = None if b_shape is None or b_strides is None else (b_shape, b_strides,
                                                            b_dtype.itemsize)
    order: tuple[int, ...] | None
    if a is not None and b is not None and a[0] != b[0]:
        shape = np.broadcast_shapes(a[0], b[0])
        if math.prod(shape) < SMALL:
            order, copy = (GROUPED if len(a[0]) == len(b[0]) == 6 else None), False
        else:
            order, copy = _order_of_pair(a, b, shape)
    else:
        like = a if a is not None else b
        assert like is not None
        shape = like[0]
        order = None if math.prod(shape) < SMALL else _dense_order(*like)
        copy = False
    nbytes = math.prod(shape) * dtype.itemsize
    if order is None:
        return Plan(None, False, shape, (), dtype, nbytes)
    inverse = tuple(order.index(axis) for axis in range(len(order)))
    return Plan(order, copy, tuple(shape[axis] for axis in order), inverse, dtype, nbytes)


def _order_of_pair(a: Layout, b: Layout, shape: tuple[int, ...]
                   ) -> tuple[tuple[int, ...] | None, bool]:
    """The axis order (outermost first; None: C order) to compute an operation of arrays of
    layouts ``a`` and ``b`` (shapes, strides, item sizes; different shapes) in, and whether to
    copy them into it."""
    if a[0] == shape:
        return _dense_order(*a), False
    if b[0] == shape:
        return _dense_order(*b), False
    if len(shape) != 6:
        return None, False
    outer = _outer_order(a[0], b[0])
    return (GROUPED, False) if outer is None else (outer, True)


def _outer_order(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The order with the axes that both ``a`` and ``b`` (shapes over the launch) have
    innermost, when copying both into it costs little against the result and it makes the
    inner loop longer than the global coordinates' order does; else None."""
    shape = np.broadcast_shapes(a, b)
    both = [axis for axis in GROUPED if a[axis] > 1 and b[axis] > 1]
    size = math.prod(shape)
    if not both or 8 * math.prod(a) > size or 8 * math.prod(b) > size:
        return None
    order = tuple(axis for axis in GROUPED if axis not in both) + tuple(both)
    return order if _inner_run(order, a, b) > _inner_run(GROUPED, a, b) else None


def _inner_run(order: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> int:
    """The elements of the innermost run of axes, in ``order``, over which neither operand
    changes between being broadcast and not (NumPy's inner loop when both are contiguous)."""
    run, kind = 1, None
    for axis in reversed(order):
        extent = max(a[axis], b[axis])
        if extent == 1:
            continue
        this = (a[axis] > 1, b[axis] > 1)
        if kind is not None and this != kind:
            break
        run, kind = run * extent, this
    return run


def _dense_order(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
                 ) -> tuple[int, ...] | None:
    """The axis order (outermost first) in which an array of ``shape`` and ``strides`` is
    C-contiguous, when it is and that order is not C order; else None."""
    unit = [axis for axis in range(len(shape)) if shape[axis] == 1]
    other = sorted((axis for axis in range(len(shape)) if shape[axis] > 1),
                   key=lambda axis: -strides[axis])
    expected = itemsize
    for axis in reversed(other):
        if strides[axis] != expected:
            return None
        expected *= shape[axis]
    if other == sorted(other):
        return None
    return (*unit, *other)


def first_where(values: Value, where: np.ndarray) -> int:
    """The element of ``values`` at the first invocation where ``where`` holds (the C order of
    the broadcast shape is the invocation order)."""
    v, w = np.broadcast_arrays(values, where)
    return int(v[w][0])
