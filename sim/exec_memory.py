"""Loads, stores and array declarations compiled to closures: bounds checks for the active
invocations, and every shared access told to the race detector (``sim.memory``).

A load gathers one element per distinct index (the index keeps the axes it depends on, see
``sim.state``); a store writes one element per active invocation, in invocation order, so that
of several invocations storing to one element the highest keeps its value. A shared access at
an index that does not depend on the block and is affine in the thread coordinates is a strided
view of the array instead (``sim.memory.Strided``), and a store in which no two invocations
write one element keeps no order.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from sarek.dtypes import numpy_dtype
from sarek.errors import OutOfBounds
from sarek.ir import ElemType, MemSpace
from sarek.layout import TileLayout
from sim.arith import Value
from sim.compiler import Core
from sim.memory import LocalArray, SharedArray, Site, Strided
from sim.state import Array, ExprFn, Mask, Scope, State, StmtFn, first_where


class Memory(Core):
    def _base(self, space: MemSpace, size: int) -> Value:
        """The flat offset of each invocation's copy of a ``size``-element array in ``space``:
        per block for shared arrays, per invocation for local ones."""
        if space is MemSpace.SHARED:
            return np.int64(0) if self.geo.num_blocks == 1 else self.geo.block_linear * size
        return np.arange(self.n, dtype=np.int64).reshape(self.geo.shape) * size

    def _checked(self, index: Value, arr: Array, m: Mask, site: Site) -> Value:
        """``index`` after the bounds check of the active invocations, safe to gather with:
        the inactive ones that are out of bounds read element 0 instead."""
        size = arr.size
        if isinstance(index, np.ndarray):
            if size and index.min() >= 0 and index.max() < size:
                return index if index.dtype != np.uint64 else index.astype(np.int64)
            outside = (index < 0) | (index >= size)
            bad = outside if m is None else outside & m
            if bad.any():
                self._fail(OutOfBounds, out_of_bounds(arr, first_where(index, bad)), site, bad)
            return np.where(outside, 0, index).astype(np.int64)
        if not 0 <= index < size:
            self._fail(OutOfBounds, out_of_bounds(arr, int(index)), site, m)
        return np.int64(index)

    def store_packed(self, arr: Array, findex: ExprFn, fvalue: ExprFn, value_bits: int,
                     site: Site) -> StmtFn:
        """A packed store (``ir.StorePacked``) as what it is on a device: the stores of the
        value's parts, least significant first, by the same invocation at once; an index
        that is not a multiple of the part count is an ``OutOfBounds`` (a misaligned access
        faults on a GPU)."""
        bits = arr.elem.bits
        count = value_bits // bits
        mask = (1 << bits) - 1
        dtype = numpy_dtype(arr.elem)
        raw = np.dtype(f"u{bits // 8}")

        def part(i: int) -> tuple[ExprFn, ExprFn]:
            def index(st: State, m: Mask) -> Value:
                return findex(st, m) + i

            def value(st: State, m: Mask) -> Value:
                v = np.asarray(fvalue(st, m)).astype(np.uint64)
                # the part's bits, read as the element type (a float's bits included)
                out = ((v >> np.uint64(i * bits)) & np.uint64(mask)).astype(raw).view(dtype)
                return out if out.ndim else out[()]

            return index, value

        parts = [self.store(arr, *part(i), site) for i in range(count)]

        def run(st: State, m: Mask) -> None:
            index = findex(st, m)
            misaligned = np.asarray(index) % count != 0
            bad = misaligned if m is None else misaligned & m
            if np.any(bad):
                at = int(np.asarray(index)[bad].flat[0]) if np.ndim(index) else int(index)
                self._fail(OutOfBounds, f"a packed store of {count} elements at element {at} "
                           f"of {arr.name!r} is not aligned to {count} elements", site,
                           bad if np.ndim(bad) else m)
            for store in parts:
                store(st, m)

        return run

    def load(self, arr: Array, findex: ExprFn, site: Site) -> ExprFn:
        if arr.space is MemSpace.GLOBAL:
            data = arr.data
            assert data is not None
            return lambda st, m: data.take(self._checked(findex(st, m), arr, m, site))
        base, slot = self._base(arr.space, arr.pitch), arr.slot
        threads = self.geo.thread_linear.astype(np.int32)

        def run(st: State, m: Mask) -> Value:
            index = self._checked(findex(st, m), arr, m, site)
            mem = st.arrays[slot]
            assert mem is not None
            if isinstance(mem, SharedArray):
                at, _ = block_access(index, self.geo.shape[3:])
                if at is not None:
                    mem.read_strided(at, threads, m, site)
                    return st.buffers.copy(at.view(mem.data, self.geo, arr.pitch))
                flat = base + index
                mem.read_lanes(flat, threads, m, site)
                return mem.data.take(flat)
            if isinstance(mem, LocalArray) and mem.holding:
                self._registers_free(st, arr, m, site)
            return mem.data.take(base + index)

        return run

    def store(self, arr: Array, findex: ExprFn, fvalue: ExprFn, site: Site) -> StmtFn:
        base = None if arr.space is MemSpace.GLOBAL else self._base(arr.space, arr.pitch)
        threads = self.geo.lane_thread.astype(np.int32)
        block_threads = self.geo.thread_linear.astype(np.int32)

        def run(st: State, m: Mask) -> None:
            index = self._checked(findex(st, m), arr, m, site)
            value = fvalue(st, m)
            mem = None if base is None else st.arrays[arr.slot]
            if isinstance(mem, SharedArray):
                at, distinct = block_access(index, self.geo.shape[3:])
                if at is not None and distinct:
                    mem.write_strided(at, block_threads, m, site)
                    np.copyto(at.view(mem.data, self.geo, arr.pitch), value, casting="unsafe",
                              where=True if m is None else m)
                    return
                if distinct:
                    store_distinct(st, m, index, value)
                    return
            elif mem is not None:  # a local array: every invocation stores to its own copy
                if isinstance(mem, LocalArray) and mem.holding:
                    self._registers_free(st, arr, m, site)
                store_distinct(st, m, index, value)
                return
            lanes = None if m is None else np.flatnonzero(self.spread(m))
            if base is None:
                data = arr.data
                assert data is not None
            else:
                mem = st.arrays[arr.slot]
                assert mem is not None
                data, index = mem.data, base + index
                if isinstance(mem, SharedArray):
                    flat = self.spread(index)
                    if lanes is None:
                        mem.write(flat, threads, None, site)
                    else:
                        mem.write(flat[lanes], threads[lanes], lanes, site)
            # One element per invocation, in invocation order: the last write wins.
            if isinstance(index, np.ndarray):
                index = self.spread(index)
                index = index if lanes is None else index[lanes]
            if isinstance(value, np.ndarray):
                value = self.spread(value)
                value = value if lanes is None else value[lanes]
                if not isinstance(index, np.ndarray):
                    value = value[-1]  # one element written by all: the last invocation's
            data[index] = value

        def store_distinct(st: State, m: Mask, index: Value, value: Value) -> None:
            """A store in which no two invocations write one element: no order to keep."""
            mem = st.arrays[arr.slot]
            assert mem is not None and base is not None
            flat = st.buffers.empty(self.geo.shape, np.dtype(np.int64))
            np.add(base, index, out=flat)
            flat = flat.reshape(-1)
            if m is not None:
                lanes = np.flatnonzero(self.spread(m))
                flat = flat[lanes]
            if isinstance(mem, SharedArray):
                mem.write_distinct(flat, threads if m is None else threads[lanes],
                                   None if m is None else lanes, site)
            if isinstance(value, np.ndarray):
                value = st.buffers.spread(value, self.geo.shape)
                value = value if m is None else value[lanes]
            mem.data[flat] = value

        return run

    def array_decl(self, scope: Scope, name: str, elem: ElemType, size: int,
                   space: MemSpace, layout: TileLayout | None, shares: str | None = None
                   ) -> StmtFn:
        """The declaration of an array; one that ``shares`` another's storage gets that
        array's bytes (per block, counted in its own elements) and the race detector's view
        of them through both names."""
        slot = self.array_slots
        self.array_slots += 1
        geo = self.geo
        if shares is not None:
            host = self._array(scope, shares)
            pitch = host.pitch * numpy_dtype(host.elem).itemsize // numpy_dtype(elem).itemsize
            scope[name] = Array(slot, name, elem, space, size, layout=layout,
                                shared_pitch=pitch)

            def alias(st: State, m: Mask) -> None:
                storage = st.arrays[host.slot]
                assert isinstance(storage, SharedArray)  # the checker saw to it
                st.arrays[slot] = st.shared[slot] = SharedArray(name, elem, pitch, geo,
                                                                storage)

            return alias
        scope[name] = Array(slot, name, elem, space, size, layout=layout)

        def declare(st: State, m: Mask) -> None:
            if space is MemSpace.SHARED:
                st.arrays[slot] = st.shared[slot] = SharedArray(name, elem, size, geo)
            else:
                st.arrays[slot] = LocalArray(elem, size, geo, name)

        return declare


def out_of_bounds(arr: Array, index: int) -> str:
    """The reason of an ``OutOfBounds`` at ``index`` of ``arr``."""
    return (f"index {index} is outside {arr.space} array {arr.name!r} of {arr.size} "
            "elements")


def block_access(index: Value, block: tuple[int, ...]) -> tuple[Strided | None, bool]:
    """What a shared access at ``index`` (in bounds) is, when it does not depend on the block:
    ``Strided`` where the index is an array affine in the thread coordinates (else None), and
    whether it names a different element at every thread of the block (``block`` gives the
    block's extents: thread z, y, x)."""
    if not isinstance(index, np.ndarray):
        return None, math.prod(block) == 1
    if index.ndim != 6 or index.shape[:3] != (1, 1, 1):
        return None, False
    return _block_access(index.shape[3:], index.dtype.str, index.tobytes(), block)


@lru_cache(maxsize=1024)
def _block_access(shape: tuple[int, ...], dtype: str, data: bytes, block: tuple[int, ...]
                  ) -> tuple[Strided | None, bool]:
    """``block_access`` of the index given by its thread axes' ``shape`` and its bytes (an
    index is recomputed on every trip of a loop, mostly to the same few values)."""
    at = np.frombuffer(data, dtype).reshape(shape).astype(np.int64)
    ordered = np.sort(at, axis=None)
    distinct = shape == block and not bool(np.any(ordered[1:] == ordered[:-1]))
    steps = [int(at[tuple(int(a == axis) for a in range(3))]) - int(at[0, 0, 0])
             if shape[axis] > 1 else 0 for axis in range(3)]
    candidate = Strided(int(at[0, 0, 0]), (steps[0], steps[1], steps[2]),
                        (shape[0], shape[1], shape[2]))
    return (candidate if np.array_equal(at, candidate.in_block()) else None), distinct
