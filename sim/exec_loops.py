"""Uniform loops that accumulate products of loads, run with every trip's loads at once.

``for v in range(...): acc = acc + x[i] * y[j]`` is the inner loop of a tiled GEMM (``x`` and
``y`` shared tiles) and of a naive one (global arrays). Where each index is affine in ``v``
(integer ``+``, ``-`` and ``*`` of constants, builtins, variables the loop does not assign and
``v``, at most once per product), trip ``t``'s index is the first trip's plus ``t`` times one
step, exactly, in the index type's wrapping arithmetic. So the bounds of every trip are checked
from the first trip's extremes, a shared operand is the strided view of the first trip with one
more axis (the trip), and a global one is a single gather. The products and the sums are then
computed trip by trip as the general path computes them: the same operations on the same
operands in the same order, so the same bits, in buffers reused from trip to trip.

The race detector sees every read, trip by trip and operand by operand as the general path
tells it (reads change no record it checks, and nothing in the loop writes). Whatever this path
does not take (a mask, an index out of bounds or not affine in the threads, copies in flight,
a launch about to run out of trips) runs the general path from the loop's first trip, which
raises what it raises: nothing this path does before it falls back is seen by anything else.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

import numpy as np

from sarek import dtypes, ir
from sarek.ir import BinOp, MemSpace
from sim.arith import Value
from sim.compiler import Core
from sim.exec_memory import block_access
from sim.memory import Repeated, SharedArray, Site, Strided
from sim.state import POOLED_BYTES, Array, ExprFn, Mask, Plan, Scope, State, contiguous_plan

AccumulateFn: TypeAlias = Callable[[State, Mask, int, int, int], bool]
"""Runs a uniform loop's trips (state, mask, first value, step, trip count) when it can, and
says whether it did (False: nothing was done, the general path runs the loop)."""

TRIP_ELEMENTS = 1 << 20
"""The most operand elements (all trips together) one batch gathers or copies: a long loop
over large operands runs in batches of trips, so its memory stays bounded."""

_PIECE = 32 << 10
"""The bytes of the source a piece of a large transposing copy reads (a first-level cache)."""


@dataclass(frozen=True)
class _Operand:
    """A load of the product: its array and the closure of its index."""

    arr: Array
    findex: ExprFn
    info: np.iinfo[np.signedinteger[Any] | np.unsignedinteger[Any]]  # the index type's range
    free: tuple[int, ...]  # the slots of the index's variables other than the loop's


@dataclass(frozen=True)
class _Indices:
    """A load's index over a loop's trips: the first trip's, the step between trips, and for a
    shared array the strided access of the first trip."""

    first: np.ndarray
    step: int
    at: Strided | None


@dataclass(frozen=True)
class _Trips:
    """A load over a loop's trips: the first trip's index, the step between trips, and the
    shared array and strided access of the first trip (None for a global array)."""

    first: np.ndarray
    step: int
    shared: SharedArray | None
    at: Strided | None


class Loops(Core):
    def accumulating_loop(self, s: ir.For, inner: Scope, var_slot: int, site: Site
                          ) -> AccumulateFn | None:
        """The fast path of ``s`` when its body is one ``acc = acc + x[i] * y[j]`` (either
        operand order) over global or shared arrays with indices affine in the loop
        variable; else None. ``inner`` is the loop body's scope (the variable's slot
        ``var_slot``), ``site`` the loop's."""
        match s.body:
            case (ir.Assign(name=acc, value=ir.Binary(op=BinOp.ADD, a=left, b=right)) as stmt,):
                pass
            case _:
                return None
        acc_first = isinstance(left, ir.Var) and left.name == acc
        product = right if acc_first else left
        if not (acc_first or (isinstance(right, ir.Var) and right.name == acc)):
            return None
        match product:
            case ir.Binary(op=BinOp.MUL, a=ir.Load() as x, b=ir.Load() as y):
                pass
            case _:
                return None
        at = Site(f"{site.path}.body[0]", stmt.line)
        operands = []
        for load in (x, y):
            arr = self._array(inner, load.array)
            if arr.space is MemSpace.LOCAL or _degree(load.index, s.var, acc) is None:
                return None
            free = tuple(sorted({self._scalar(inner, name).slot
                                 for name in _names(load.index) if name != s.var}))
            operands.append(_Operand(arr, self.expr(load.index, inner, at),
                                     np.iinfo(dtypes.numpy_dtype(load.index.type)), free))
        return self._accumulate(operands, self._scalar(inner, acc).slot, acc_first, var_slot,
                                dtypes.numpy_dtype(s.start.type).type, at)

    def _accumulate(self, operands: list[_Operand], acc_slot: int, acc_first: bool,
                    var_slot: int, var_type: type[np.generic], site: Site) -> AccumulateFn:
        threads = self.geo.thread_linear.astype(np.int32)
        dtype = np.dtype(dtypes.numpy_dtype(operands[0].arr.elem))  # both operands' (the IR's)
        # Per operand, the last loop's indices: (the values of the index's other variables,
        # the loop's range, what they gave). An index is a function of those values, and
        # values are never changed in place, so the same objects give the same indices.
        last: list[tuple[tuple[Value, ...], tuple[int, int, int], _Indices | None] | None] = \
            [None] * len(operands)

        def indices(st: State, k: int, first: int, inc: int, trips: int) -> _Indices | None:
            op, seen = operands[k], last[k]
            now = tuple(st.env[slot] for slot in op.free)
            if seen is not None and seen[1] == (first, inc, trips) and all(
                    a is b for a, b in zip(seen[0], now, strict=True)):
                return seen[2]
            found = self._indices(st, op, var_slot, var_type, first, inc, trips)
            last[k] = (now, (first, inc, trips), found)
            return found

        def run(st: State, m: Mask, first: int, inc: int, trips: int) -> bool:
            if m is not None or trips < 2 or st.trips + trips > self.limits.trips:
                return False
            acc = st.env[acc_slot]
            loads = []
            for k, op in enumerate(operands):
                found = indices(st, k, first, inc, trips)
                load = None if found is None else self._trips(st, op, found)
                if load is None:
                    return False
                loads.append(load)
            # The general path's loads are C-contiguous arrays of these shapes.
            x0, y0 = (self._shape(load) for load in loads)
            acc_shape = acc.shape if isinstance(acc, np.ndarray) else None
            layout = _layout(x0, y0, dtype, acc_shape, np.dtype(acc.dtype))
            if layout is None:
                return False
            reads = [(load.shared, Repeated(load.at, load.step, trips)) for load in loads
                     if load.shared is not None and load.at is not None]
            if all(mem.reads_clean(at, threads) for mem, at in reads):
                for mem, at in reads:
                    mem.read_repeated(at, threads)
            else:  # a race: reported as the general path reports it, trip by trip, x before y
                for t in range(trips):
                    for mem, at in reads:
                        mem.read_strided(_shifted(at.at, t * at.step), threads, None, site)
            value = self._products(st, operands, loads, layout, acc, acc_first, trips)
            st.trips += trips
            st.env[var_slot] = var_type(first + (trips - 1) * inc)
            st.env[acc_slot] = value
            return True

        return run

    def _indices(self, st: State, op: _Operand, var_slot: int, var_type: type[np.generic],
                 first: int, inc: int, trips: int) -> _Indices | None:
        """The index of ``op`` over the loop's trips, when every trip's index is in bounds and
        differs from the first trip's by a multiple of one step (and, for a shared array, is
        a strided access); else None."""
        st.env[var_slot] = var_type(first)
        start = op.findex(st, None)
        st.env[var_slot] = var_type(first + inc)
        then = op.findex(st, None)
        if not isinstance(start, np.ndarray) or not isinstance(then, np.ndarray):
            return None
        delta = np.subtract(then, start)  # wraps as the index type does
        low, high = int(delta.min()), int(delta.max())
        if low != high:
            return None
        info = op.info
        step = low - (1 << info.bits) if info.min == 0 and low > info.max // 2 else low
        span = (trips - 1) * step
        lowest, highest = int(start.min()) + min(0, span), int(start.max()) + max(0, span)
        # Every trip's exact index lies in bounds, so within the type: it is what the type's
        # wrapping arithmetic computes.
        if lowest < 0 or highest >= op.arr.size or highest > info.max:
            return None
        if op.arr.space is MemSpace.GLOBAL:
            return _Indices(start, step, None)
        at, _ = block_access(start, self.geo.shape[3:])
        return None if at is None else _Indices(start, step, at)

    def _trips(self, st: State, op: _Operand, found: _Indices) -> _Trips | None:
        """``op`` over the loop's trips at ``found``; None for a shared array with copies in
        flight."""
        if op.arr.space is MemSpace.GLOBAL:
            return _Trips(found.first, found.step, None, None)
        mem = st.arrays[op.arr.slot]
        if not isinstance(mem, SharedArray) or mem.copying:
            return None
        return _Trips(found.first, found.step, mem, found.at)

    def _products(self, st: State, operands: list[_Operand], loads: list[_Trips],
                  layout: _Layout, acc: Value, acc_first: bool, trips: int) -> Value:
        """``acc`` plus every trip's product in trip order, laid out as ``combine`` lays out
        the product (``layout``)."""
        how, order, moved = layout
        x0, y0 = (self._shape(load) for load in loads)
        product = self._buffer(st, how.shape, how.dtype)
        total = self._buffer(st, how.shape, how.dtype)
        now = acc.transpose(order) if isinstance(acc, np.ndarray) else acc
        batch = max(1, TRIP_ELEMENTS // (math.prod(x0) + math.prod(y0)))
        for start in range(0, trips, batch):
            count = min(batch, trips - start)
            xs, ys = (self._values(op, load, start, count).transpose(moved)
                      for op, load in zip(operands, loads, strict=True))
            if how.copy:
                xs, ys = self._contiguous(xs, st), self._contiguous(ys, st)
            for x, y in zip(xs, ys, strict=True):
                np.multiply(x, y, out=product)
                if acc_first:
                    np.add(now, product, out=total)
                else:
                    np.add(product, now, out=total)
                now = total
        return total.transpose(how.inverse) if how.order else total

    def _shape(self, load: _Trips) -> tuple[int, ...]:
        """The shape of one trip's value of ``op`` over the launch."""
        if load.at is None:
            return load.first.shape
        return (*self.geo.shape[:3], *load.at.shape)

    def _values(self, op: _Operand, load: _Trips, start: int, count: int) -> np.ndarray:
        """The operand of trips ``start`` to ``start + count``, over (trip, launch axes): a
        view of a shared array, a gather from a global one."""
        if load.shared is not None and load.at is not None:
            at = Repeated(_shifted(load.at, start * load.step), load.step, count)
            return at.view(load.shared.data, self.geo, op.arr.pitch)
        data = op.arr.data
        assert data is not None
        steps = np.arange(start, start + count, dtype=np.int64) * load.step
        index = load.first.astype(np.int64) + steps.reshape(count, *(1,) * load.first.ndim)
        return data.take(index)

    def _contiguous(self, x: np.ndarray, st: State) -> np.ndarray:
        """A C-contiguous copy of ``x``. A large one is copied in pieces along the axis ``x``
        has the longest stride on, each reading about ``_PIECE`` bytes: a transposition
        that reads far apart otherwise runs out of the first-level cache (at 512^3, the
        tiled GEMM's tiles copy 1.6x faster)."""
        out = self._buffer(st, x.shape, x.dtype)
        if x.nbytes < POOLED_BYTES:
            np.copyto(out, x)
            return out
        axis = max(range(x.ndim), key=lambda a: abs(x.strides[a]) if x.shape[a] > 1 else 0)
        piece = max(1, _PIECE // max(abs(x.strides[axis]), 1))
        index: list[slice] = [slice(None)] * x.ndim
        for start in range(0, x.shape[axis], piece):
            index[axis] = slice(start, start + piece)
            np.copyto(out[tuple(index)], x[tuple(index)])
        return out

    def _buffer(self, st: State, shape: tuple[int, ...], dtype: np.dtype[np.generic]
                ) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        return st.buffers.empty(shape, dtype) if nbytes >= POOLED_BYTES else \
            np.empty(shape, dtype)


_Layout: TypeAlias = tuple[Plan, tuple[int, ...], tuple[int, ...]]
"""``combine``'s plan of a product, its axis order, and that order behind a trip axis."""


@lru_cache(maxsize=256)
def _layout(x: tuple[int, ...], y: tuple[int, ...], dtype: np.dtype[Any],
            acc: tuple[int, ...] | None, acc_dtype: np.dtype[Any]) -> _Layout | None:
    """How the products of operands of shapes ``x`` and ``y`` (C-contiguous, of ``dtype``) are
    laid out, when an accumulator of shape ``acc`` (None: a scalar) and ``acc_dtype`` fits
    them (an accumulator over more axes than the product, or of another type, does not)."""
    how = contiguous_plan(np.multiply, x, y, dtype)
    shape = np.broadcast_shapes(x, y)
    if len(shape) != 6 or (acc is not None and len(acc) != 6):
        return None
    if acc is not None and np.broadcast_shapes(acc, shape) != shape:
        return None
    if np.result_type(acc_dtype, how.dtype) != how.dtype:
        return None
    order = how.order or tuple(range(len(shape)))
    return how, order, (0, *(axis + 1 for axis in order))


def _shifted(at: Strided, by: int) -> Strided:
    return Strided(at.offset + by, at.strides, at.shape)


def _names(e: ir.Expr) -> set[str]:
    """The variables ``e`` reads (an index ``_degree`` accepts)."""
    match e:
        case ir.Var(name=name):
            return {name}
        case ir.Binary(a=a, b=b):
            return _names(a) | _names(b)
        case ir.Cast(x=x):
            return _names(x)
    return set()


def _degree(e: ir.Expr, var: str, acc: str) -> int | None:
    """The degree of ``e`` in ``var`` when ``e`` is an integer polynomial of degree at most 1
    in it built of constants, builtins, variables other than ``acc``, ``+``, ``-``, ``*`` and
    casts between integer types of one width; else None. Such an expression is affine in
    ``var`` modulo 2^bits, which is how its type computes it."""
    match e:
        case ir.Const() | ir.BuiltinValue():
            return 0
        case ir.Var(name=name):
            return None if name == acc else int(name == var)
        case ir.Binary(op=BinOp.ADD | BinOp.SUB | BinOp.MUL as op, a=a, b=b) if e.type.is_int:
            da, db = _degree(a, var, acc), _degree(b, var, acc)
            if da is None or db is None:
                return None
            degree = da + db if op is BinOp.MUL else max(da, db)
            return degree if degree <= 1 else None
        case ir.Cast(x=x, type=t) if t.is_int and x.type.is_int and t.bits == x.type.bits:
            return _degree(x, var, acc)  # the same bits: the same value modulo 2^bits
    return None
