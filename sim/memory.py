"""Shared and local arrays of a running launch, and the shared-memory race detector.

Every array is one flat NumPy array: a shared array holds ``num_blocks * size`` elements (block
``b``'s copy at ``b * size``), a local array ``invocations * size``. For each shared element the
detector remembers, since its block's last barrier, the thread that last wrote it and the
threads that read it; an access by a different thread that conflicts with them is a race.
Everything is vectorized over the invocations of one statement. An array that shares another's
storage (``ir.ArrayDecl.shares``) is a view of that array's bytes with records of its own, and
an access through either name is checked against the other's records over the bytes it
touches, so that a race between the names is a race.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sarek import atoms, dtypes
from sarek.errors import SharedRace
from sarek.ir import ElemType
from sim import arith
from sim.arith import Value
from sim.launch import SHARED_LOG_ELEMENTS, Geometry

NOBODY = -1
LANDED = -1  # the group of an element no copy is in flight to
WARPGROUP = atoms.WGMMA.threads  # invocations that issue one wgmma together


@dataclass(frozen=True)
class Site:
    """Where a statement is, for error reports: its IR path and source line."""

    path: str
    line: int | None


@dataclass(frozen=True)
class Strided:
    """The elements ``offset + strides · (thread z, y, x)`` of every block's copy of a shared
    array: an index that does not depend on the block and is affine in the thread
    coordinates. ``shape`` holds the block's extent along the axes the index depends on and 1
    along the others (a value over the launch's thread axes, ``sim.state``). Such an access
    is a strided view of the array, without an index array."""

    offset: int
    strides: tuple[int, int, int]
    shape: tuple[int, int, int]

    def view(self, x: np.ndarray, geo: Geometry, size: int) -> np.ndarray:
        """The accessed elements of ``x`` (one copy of ``size`` elements per block) as a
        value over the launch: a view, writable where the elements are distinct."""
        gx, gy, _ = geo.grid
        item = x.itemsize
        return np.ndarray((*geo.shape[:3], *self.shape), x.dtype, x, self.offset * item,
                          (gy * gx * size * item, gx * size * item, size * item,
                           *(stride * item for stride in self.strides)))

    def in_block(self) -> np.ndarray:
        """The accessed element of a block's copy, over the thread axes (``shape``)."""
        index = np.full((1, 1, 1), self.offset, np.int64)
        for axis, (stride, extent) in enumerate(zip(self.strides, self.shape, strict=True)):
            where = [1, 1, 1]
            where[axis] = extent
            index = index + stride * np.arange(extent, dtype=np.int64).reshape(where)
        return index

    def flat(self, geo: Geometry, size: int) -> np.ndarray:
        """The accessed elements' numbers as a value over the launch (for ``SharedArray``'s
        records)."""
        flat: np.ndarray = geo.block_linear * size + self.in_block()
        return flat

    def count(self, geo: Geometry) -> int:
        """The elements of a value over the launch of this access."""
        return geo.num_blocks * math.prod(self.shape)


@dataclass(frozen=True)
class Repeated:
    """The accesses ``at`` of a loop's ``trips`` trips, each ``step`` elements after the last
    (``sim.exec_loops``): trip ``t`` accesses ``at`` shifted by ``t * step``."""

    at: Strided
    step: int
    trips: int

    def view(self, x: np.ndarray, geo: Geometry, size: int) -> np.ndarray:
        """The accessed elements of ``x`` as (trip, launch axes): a read-only view."""
        first = self.at.view(x, geo, size)
        return np.ndarray((self.trips, *first.shape), x.dtype, x, self.at.offset * x.itemsize,
                          (self.step * x.itemsize, *first.strides))

    def flat(self, geo: Geometry, size: int) -> np.ndarray:
        """The accessed elements' numbers, as (trip, launch axes)."""
        trips = np.arange(self.trips, dtype=np.int64) * self.step
        flat: np.ndarray = self.at.flat(geo, size) + trips.reshape(-1, *(1,) * 6)
        return flat

    def count(self, geo: Geometry) -> int:
        return self.trips * self.at.count(geo)


class LocalArray:
    """A local array: ``size`` elements per invocation, filled with the canary, and per
    invocation the ``wgmma`` group still reading or writing its registers (``held``, made by
    the first ``Wgmma`` that names it; ``LANDED`` where none is in flight)."""

    def __init__(self, elem: ElemType, size: int, geo: Geometry, name: str = "") -> None:
        self.name, self.invocations = name, geo.invocations
        self.data = np.full(geo.invocations * size, arith.canary(elem), dtypes.numpy_dtype(elem))
        self.held: np.ndarray | None = None
        self.holding = False  # whether some invocation's registers are held

    def hold(self, lanes: np.ndarray, groups: np.ndarray) -> None:
        """The registers of invocations ``lanes`` belong to their open ``wgmma`` groups
        ``groups`` until a wait retires them."""
        if self.held is None:
            self.held = np.full(self.invocations, LANDED, np.int64)
        self.held[lanes] = groups
        self.holding = True

    def retire(self, committed: np.ndarray, pending: int, waiting: np.ndarray | None) -> None:
        """The registers whose groups a wait for all but ``pending`` completes are free."""
        if not self.holding or self.held is None:
            return
        done = (self.held != LANDED) & (self.held < committed - pending)
        if waiting is not None:
            done &= waiting
        self.held[done] = LANDED
        self.holding = bool(np.any(self.held != LANDED))

    def busy(self, mask: np.ndarray | None) -> np.ndarray | None:
        """Which invocations of ``mask`` (over the launch; None: all) hold registers of a
        ``wgmma`` in flight, as a mask over the launch; None when none does."""
        if not self.holding or self.held is None:
            return None
        flying = self.held != LANDED
        if mask is not None:
            flying &= mask
        return flying if flying.any() else None


class SharedArray:
    """A shared array: ``size`` elements per block, filled with the canary, with the
    per-element record of accesses since the block's last barrier: the last writer's thread
    index, and the smallest and largest thread index among the readers (one reader when
    they are equal). Reads are logged and folded into that record only when a write needs
    it (often never: a barrier usually comes first)."""

    _FOLD_AFTER = SHARED_LOG_ELEMENTS  # logged elements before they are folded (bounds memory)

    def __init__(self, name: str, elem: ElemType, size: int, geo: Geometry,
                 storage: SharedArray | None = None) -> None:
        self.name, self.size, self.geo = name, size, geo
        total = geo.num_blocks * size
        if storage is None:
            self.data = np.full(total, arith.canary(elem), dtypes.numpy_dtype(elem))
        else:  # the bytes of ``storage``: ``size`` is its bytes per block in these elements
            self.data = storage.data.view(dtypes.numpy_dtype(elem))
            storage.overlaps.append(self)
        # the arrays over the same bytes, whose records every access here is checked against
        self.overlaps: list[SharedArray] = [] if storage is None else [storage]
        # The writers' record, made when first needed, and the strided writes not yet in it
        # (``write_strided``): the last write before a barrier is often never needed.
        self._writer: np.ndarray | None = None
        self._pending: list[tuple[Strided, np.ndarray, np.ndarray | None]] = []
        # the readers' records, made when reads are first folded (often never)
        self._readers: tuple[np.ndarray, np.ndarray] | None = None
        self._written = False  # whether anything was written since the barrier
        self._recorded = False  # whether ``_writer`` holds anything
        self._read = False  # whether the reader record holds anything
        # (elements, threads, mask): per access, or values over the launch (``read_lanes``)
        self._reads: list[tuple[Value | Strided | Repeated, np.ndarray, np.ndarray | None]] = []
        self._logged = 0
        # Copies in flight (``CpAsync``): per element the group number of the invocation that
        # issued it (``LANDED`` once it has landed) and that invocation; made by the first copy.
        self.flight: np.ndarray | None = None
        self.flight_owner: np.ndarray | None = None
        self._flying = False
        # Operands of ``wgmma`` in flight: per warpgroup of a block and element the group
        # number of the warpgroup's open group that reads it (``LANDED``: none) and that
        # warpgroup's first invocation; made by the first ``Wgmma`` that reads the array.
        self.held: np.ndarray | None = None
        self.held_owner: np.ndarray | None = None
        self._holding = False
        # Bulk tensor copies (``BulkTensorCopy``): per element the mbarrier whose phase
        # ``bulk_phase`` its last bulk copy completes (``NOBODY``: none), and the phases each
        # invocation has seen complete (``Mbarriers.observed``, shared with the mbarriers).
        self.bulk_barrier: np.ndarray | None = None
        self.bulk_phase: np.ndarray | None = None
        self.bulk_observed: np.ndarray | None = None
        self._bulk = False

    @property
    def writer(self) -> np.ndarray:
        """The last writer's thread index per element since the barrier (``NOBODY``: none),
        the strided writes not yet recorded applied in their order."""
        if self._writer is None:
            self._writer = np.full(self.data.size, NOBODY, np.int32)
        if self._pending:
            for at, threads, mask in self._pending:
                np.copyto(at.view(self._writer, self.geo, self.size), threads,
                          where=True if mask is None else mask)
            self._pending.clear()
            self._recorded = True
        return self._writer

    @property
    def first_reader(self) -> np.ndarray:
        """The smallest reader's thread index per element (``_NO_READER``: none)."""
        return self._reader_records()[0]

    @property
    def last_reader(self) -> np.ndarray:
        """The largest reader's thread index per element (``NOBODY``: none)."""
        return self._reader_records()[1]

    def _reader_records(self) -> tuple[np.ndarray, np.ndarray]:
        if self._readers is None:
            total = self.data.size
            self._readers = (np.full(total, _NO_READER, np.int32),
                             np.full(total, NOBODY, np.int32))
        return self._readers

    @property
    def copying(self) -> bool:
        """Whether copies to some element, or to its bytes through another name, are still in
        flight (``CpAsync``)."""
        return self._flying or any(other._flying for other in self.overlaps)

    @property
    def touched(self) -> bool:
        """Whether anything accessed the array since the barrier (or a copy is in flight, or
        a ``wgmma`` in flight reads it)."""
        return self._written or self._read or bool(self._reads) or self._flying or \
            self._holding or self._bulk

    def barrier(self, blocks: np.ndarray | None) -> None:
        """Forgets the accesses of ``blocks`` (a mask over blocks; None: every block)."""
        if blocks is None:
            self._reads.clear()
            self._logged = 0
            self._pending.clear()
            if self._recorded and self._writer is not None:
                self._writer.fill(NOBODY)
            if self._read:
                self.first_reader.fill(_NO_READER)
                self.last_reader.fill(NOBODY)
            self._written = self._recorded = self._read = False
            return
        self._fold()  # the reads of the other blocks still count
        self.writer.reshape(-1, self.size)[blocks] = NOBODY
        if self._readers is not None:
            self.first_reader.reshape(-1, self.size)[blocks] = _NO_READER
            self.last_reader.reshape(-1, self.size)[blocks] = NOBODY

    def forget(self, block: int, threads: np.ndarray) -> None:
        """Forgets the accesses that the threads ``threads`` (a bool per thread of the block)
        made in block ``block`` since its last barrier: the writes they made last, and the
        reads of elements whose first and last readers are both among them."""
        if not self.touched:
            return
        self._fold()
        writer = self.writer.reshape(-1, self.size)[block]
        theirs = (writer != NOBODY) & threads[np.maximum(writer, 0)]
        writer[theirs] = NOBODY
        if self._readers is not None:
            first = self.first_reader.reshape(-1, self.size)[block]
            last = self.last_reader.reshape(-1, self.size)[block]
            theirs = (last != NOBODY) & threads[np.maximum(last, 0)] & \
                threads[np.minimum(first, threads.size - 1)]
            first[theirs], last[theirs] = _NO_READER, NOBODY

    def read(self, flat: np.ndarray, threads: np.ndarray, lanes: np.ndarray | None,
             site: Site) -> None:
        """Records reads of elements ``flat`` by ``threads`` (of invocations ``lanes``, None:
        all); raises ``SharedRace`` when another thread wrote one since the barrier."""
        if self.overlaps:
            self._cross(flat, threads, None, False, site)
        if self._flying:
            self._landed(flat, None, "reads", site)
        if self._bulk:
            self.seen(flat, threads, None, "reads", site)
        if self._written:
            writer = self.writer[flat]
            conflict = (writer != NOBODY) & (writer != threads)
            if conflict.any():
                self._race(flat, threads, lanes, conflict, writer, "read-after-write", site)
        self._log(flat, threads, None)

    def read_lanes(self, flat: Value, threads: np.ndarray, mask: np.ndarray | None,
                   site: Site) -> None:
        """``read`` for a load by the invocations of ``mask`` (None: all): ``flat`` and
        ``threads`` are values over the launch (``sim.state``), checked and logged as they
        are, without one element per invocation (many invocations read one element)."""
        if self.overlaps:
            self._cross(flat, threads, mask, False, site)
        if self._flying:
            self._landed(flat, mask, "reads", site)
        if self._bulk:
            self.seen(flat, threads, mask, "reads", site)
        if self._written:
            writer = self.writer[flat]
            conflict = (writer != NOBODY) & (writer != threads)
            if mask is not None:
                conflict = conflict & mask
            if conflict.any():
                shape = self.geo.shape
                lanes = None if mask is None else np.flatnonzero(np.broadcast_to(mask, shape))
                elements = np.broadcast_to(flat, shape).reshape(-1)
                readers = np.broadcast_to(threads, shape).reshape(-1)
                if lanes is not None:
                    elements, readers = elements[lanes], readers[lanes]
                self.read(elements, readers, lanes, site)
        self._log(flat, threads, mask)

    def read_strided(self, at: Strided, threads: np.ndarray, mask: np.ndarray | None,
                     site: Site) -> None:
        """``read_lanes`` for a load of the elements ``at`` (``Strided``): checked through a
        view of the writers' record, logged as it is."""
        if self.overlaps:
            self._cross(at, threads, mask, False, site)
        if self._flying:
            self._landed(at.flat(self.geo, self.size), mask, "reads", site)
        if self._bulk:
            self.seen(at.flat(self.geo, self.size), threads, mask, "reads", site)
        if self._written:
            writer = at.view(self.writer, self.geo, self.size)
            conflict = (writer != NOBODY) & (writer != threads)
            if mask is not None:
                conflict = conflict & mask
            if conflict.any():
                self.read_lanes(at.flat(self.geo, self.size), threads, mask, site)  # raises
        self._log(at, threads, mask)

    def reads_clean(self, at: Repeated, threads: np.ndarray) -> bool:
        """Whether every invocation can read the elements ``at`` without a race: no copy to
        any element is in flight and no other thread wrote one since the barrier (nor any
        thread touched its bytes through another name)."""
        if self._flying or self._bulk or any(other.touched for other in self.overlaps):
            return False
        if not self._written:
            return True
        writer = at.view(self.writer, self.geo, self.size)
        return not bool(np.any((writer != NOBODY) & (writer != threads)))

    def read_repeated(self, at: Repeated, threads: np.ndarray) -> None:
        """Records the reads of ``at`` by every invocation, which ``reads_clean`` allows: what
        ``read_strided`` records for each trip."""
        self._log(at, threads, None)

    def _log(self, flat: Value | Strided | Repeated, threads: np.ndarray,
             mask: np.ndarray | None) -> None:
        self._reads.append((flat, threads, mask))
        count = flat.count(self.geo) if isinstance(flat, Strided | Repeated) else np.size(flat)
        self._logged += count + (0 if mask is None else mask.size)
        if self._logged > self._FOLD_AFTER:
            self._fold()

    def _fold(self) -> None:
        for at, threads, mask in self._reads:
            flat = at.flat(self.geo, self.size) if isinstance(at, Strided | Repeated) else at
            if mask is None:
                elements, readers = np.broadcast_arrays(flat, threads)
            else:
                elements, readers, active = np.broadcast_arrays(flat, threads, mask)
                elements, readers = elements[active], readers[active]
            np.minimum.at(self.first_reader, elements.ravel(), readers.ravel())
            np.maximum.at(self.last_reader, elements.ravel(), readers.ravel())
            self._read = True
        self._reads.clear()
        self._logged = 0

    def write(self, flat: np.ndarray, threads: np.ndarray, lanes: np.ndarray | None,
              site: Site) -> None:
        """Records writes like ``read``; raises ``SharedRace`` when another thread read or wrote
        an element since the barrier, or two lanes of this store write one element."""
        if self.overlaps:
            self._cross(flat, threads, None, True, site)
        if self._flying:
            self._landed(flat, None, "writes", site)
        if self._bulk:
            self.seen(flat, threads, None, "writes", site)
        if self._holding:
            self._unheld(flat, None, site)
        self._fold()
        writer = self.writer[flat] if self._written else None
        self.writer[flat] = threads
        self._written = self._recorded = True
        # Where two lanes write one element, only one of their ids survived the scatter.
        same_store = self.writer[flat] != threads
        if same_store.any():
            self._race(flat, threads, lanes, same_store, self.writer[flat], "write/write", site,
                       involved=np.isin(flat, flat[same_store]))  # the surviving writers too
        if writer is not None:
            after_write = (writer != NOBODY) & (writer != threads)
            if after_write.any():
                self._race(flat, threads, lanes, after_write, writer, "write-after-write", site)
        if self._read:
            first, last = self.first_reader[flat], self.last_reader[flat]
            after_read = (last != NOBODY) & ((first != threads) | (last != threads))
            if after_read.any():
                other = np.where(first != threads, first, last)
                self._race(flat, threads, lanes, after_read, other, "write-after-read", site)

    def write_distinct(self, flat: np.ndarray, threads: np.ndarray, lanes: np.ndarray | None,
                       site: Site) -> None:
        """``write`` for a store in which no two invocations write one element (the caller
        knows), so that the check for two lanes of this store on one element is left out. A
        race is reported by ``write``, exactly as there."""
        if self.overlaps:
            self._cross(flat, threads, None, True, site)
        if self._flying:
            self._landed(flat, None, "writes", site)
        if self._bulk:
            self.seen(flat, threads, None, "writes", site)
        if self._holding:
            self._unheld(flat, None, site)
        self._fold()
        conflict = False
        if self._written:
            writer = self.writer.take(flat)
            conflict = bool(np.any((writer != NOBODY) & (writer != threads)))
        if self._read and not conflict:
            first, last = self.first_reader.take(flat), self.last_reader.take(flat)
            conflict = bool(np.any((last != NOBODY) & ((first != threads) | (last != threads))))
        if conflict:
            self.write(flat, threads, lanes, site)  # raises the race
            return
        self.writer[flat] = threads
        self._written = self._recorded = True

    def write_strided(self, at: Strided, threads: np.ndarray, mask: np.ndarray | None,
                      site: Site) -> None:
        """``write_distinct`` for a store to the distinct elements ``at`` (``Strided``) by the
        invocations of ``mask`` (None: all), through views of the records."""
        if self.overlaps:
            self._cross(at, threads, mask, True, site)
        if self._flying:
            self._landed(at.flat(self.geo, self.size), mask, "writes", site)
        if self._bulk:
            self.seen(at.flat(self.geo, self.size), threads, mask, "writes", site)
        if self._holding:
            self._unheld(at.flat(self.geo, self.size), mask, site)
        self._fold()
        conflict = None
        if self._written:
            writer = at.view(self.writer, self.geo, self.size)
            conflict = (writer != NOBODY) & (writer != threads)
        if self._read:
            first = at.view(self.first_reader, self.geo, self.size)
            last = at.view(self.last_reader, self.geo, self.size)
            after_read = (last != NOBODY) & ((first != threads) | (last != threads))
            conflict = after_read if conflict is None else conflict | after_read
        if conflict is not None and mask is not None:
            conflict = conflict & mask
        if conflict is not None and conflict.any():
            shape = self.geo.shape
            lanes = None if mask is None else np.flatnonzero(np.broadcast_to(mask, shape))
            flat = np.broadcast_to(at.flat(self.geo, self.size), shape).reshape(-1)
            readers = np.broadcast_to(threads, shape).reshape(-1)
            if lanes is not None:
                flat, readers = flat[lanes], readers[lanes]
            self.write(flat, readers, lanes, site)  # raises the race
            return
        self._pending.append((at, threads, mask))  # recorded when something needs it
        self._written = True

    def bulk_copy(self, flat: np.ndarray, thread: int, barrier: int, phase: int,
                  observed: np.ndarray, site: Site) -> None:
        """Elements ``flat`` of one block are written by a bulk tensor copy that thread
        ``thread`` issued and that completes phase ``phase`` of mbarrier ``barrier`` (whose
        per-invocation record of seen phases is ``observed``): ``SharedRace`` where another
        thread read or wrote one since the barrier, a ``wgmma`` in flight reads one, or an
        earlier copy to one has not been seen complete by the issuer; then each element may
        be read only by an invocation that has seen that phase complete (``seen``)."""
        threads = np.full(flat.size, thread, np.int32)
        self.write(flat, threads, None, site)
        self.writer[flat] = NOBODY  # ordered by the mbarrier, not by the issuing thread
        if self.bulk_barrier is None or self.bulk_phase is None:
            self.bulk_barrier = np.full(self.data.size, NOBODY, np.int32)
            self.bulk_phase = np.zeros(self.data.size, np.int64)
        self.bulk_barrier[flat], self.bulk_phase[flat] = barrier, phase
        self.bulk_observed, self._bulk = observed, True

    def seen(self, flat: Value, threads: np.ndarray, mask: np.ndarray | None, verb: str,
             site: Site) -> None:
        """``SharedRace`` when an invocation of ``mask`` (None: all) accesses one of ``flat``
        (its thread ``threads``) before it has seen complete the mbarrier phase that the bulk
        copy last written there completes."""
        assert self.bulk_barrier is not None and self.bulk_phase is not None
        assert self.bulk_observed is not None
        if mask is None:
            elements, thread = np.broadcast_arrays(flat, threads)
        else:
            elements, thread, active = np.broadcast_arrays(flat, threads, mask)
            elements, thread = elements[active], thread[active]
        elements, thread = elements.ravel().astype(np.int64), thread.ravel()
        barrier = self.bulk_barrier[elements]
        copied = np.flatnonzero(barrier != NOBODY)
        if not copied.size:
            return
        elements, thread, barrier = elements[copied], thread[copied], barrier[copied]
        block = elements // self.size
        invocation = block * self.geo.block_size + thread
        early = self.bulk_observed[invocation, barrier] <= self.bulk_phase[elements]
        if not early.any():
            return
        first = int(np.flatnonzero(early)[0])
        element, who = int(elements[first]), int(invocation[first])
        raise SharedRace(
            f"shared array {self.name!r} element {element % self.size} in block "
            f"{self.geo.block_of(int(block[first]))} is still being copied by a bulk tensor copy "
            f"(thread {self.geo.thread(int(thread[first]))} has not waited for phase "
            f"{int(self.bulk_phase[element])} of mbarrier {int(barrier[first])}, which the copy "
            f"completes) when an access {verb} it", site.path, site.line,
            self.geo.describe(np.array([who])))

    def issue(self, flat: np.ndarray, owners: np.ndarray, groups: np.ndarray) -> None:
        """Marks elements ``flat`` in flight: copied by invocations ``owners`` (one per
        element) as part of their open groups ``groups``. The copy's write was recorded
        (``write``) when it was issued."""
        if self.flight is None or self.flight_owner is None:
            self.flight = np.full(self.data.size, LANDED, np.int32)
            self.flight_owner = np.zeros(self.data.size, np.int32)
        self.flight[flat] = groups
        self.flight_owner[flat] = owners
        self._flying = True

    def land(self, committed: np.ndarray, pending: int, waiting: np.ndarray | None,
             site: Site) -> None:
        """The copies that a wait for all but ``pending`` groups completes, for the invocations
        of ``waiting`` (a mask over the launch; None: all), whose committed group counts are
        ``committed``: they land, and count as written by their invocations' threads now, so
        that another thread reads them only after the next barrier."""
        if not self._flying or self.flight is None or self.flight_owner is None:
            return
        flying = np.flatnonzero(self.flight != LANDED)
        owners = self.flight_owner[flying]
        done = self.flight[flying] < committed[owners] - pending
        if waiting is not None:
            done &= waiting[owners]
        landed = flying[done]
        self.flight[landed] = LANDED
        self._flying = bool(done.size - np.count_nonzero(done))
        if landed.size:
            self.write(landed, self.geo.lane_thread[self.flight_owner[landed]].astype(np.int32),
                       None, site)

    def hold(self, flat: np.ndarray, warpgroups: np.ndarray, owners: np.ndarray,
             groups: np.ndarray) -> None:
        """Elements ``flat[i]`` (one row per issuing warpgroup) are read by a ``wgmma`` of
        warpgroup ``warpgroups[i]`` of its block (first invocation ``owners[i]``) until a
        wait retires its open group ``groups[i]``."""
        if self.held is None or self.held_owner is None:
            shape = (max(1, self.geo.block_size // WARPGROUP), self.data.size)
            self.held = np.full(shape, LANDED, np.int64)
            self.held_owner = np.zeros(shape, np.int64)
        rows = flat.reshape(len(warpgroups), -1)
        self.held[warpgroups[:, None], rows] = groups[:, None]
        self.held_owner[warpgroups[:, None], rows] = owners[:, None]
        self._holding = True

    def retire(self, committed: np.ndarray, pending: int, waiting: np.ndarray | None,
               site: Site) -> None:
        """The elements whose ``wgmma`` groups a wait for all but ``pending`` completes (of
        the invocations of ``waiting``; None: all) are free: they count as read now by the
        warpgroups' first threads, so that another thread writes them only after the next
        barrier."""
        if not self._holding or self.held is None or self.held_owner is None:
            return
        for held, owner in zip(self.held, self.held_owner, strict=True):
            reading = np.flatnonzero(held != LANDED)
            owners = owner[reading]
            done = held[reading] < committed[owners] - pending
            if waiting is not None:
                done &= waiting[owners]
            free = reading[done]
            held[free] = LANDED
            if free.size:
                self.read(free, self.geo.lane_thread[owner[free]].astype(np.int32), None, site)
        self._holding = bool(np.any(self.held != LANDED))

    def _unheld(self, flat: Value, mask: np.ndarray | None, site: Site,
                through: str | None = None) -> None:
        """``SharedRace`` when one of ``flat`` (of the invocations of ``mask``) is still read
        by a ``wgmma`` in flight."""
        assert self.held is not None and self.held_owner is not None
        for held, owner in zip(self.held, self.held_owner, strict=True):
            reading = held[flat] != LANDED
            if mask is not None:
                reading = reading & mask
            if not np.any(reading):
                continue
            element = int(np.broadcast_to(flat, reading.shape)[reading].flat[0])
            block, index = divmod(element, self.size)
            first = int(owner[element])
            name = f"{through!r} (in the bytes of {self.name!r})" if through else \
                repr(self.name)
            raise SharedRace(
                f"shared array {name} element {index} in block {self.geo.block_of(block)} is "
                f"still read by a wgmma in flight (the warpgroup of thread "
                f"{self.geo.thread(int(self.geo.lane_thread[first]))} has not waited for its "
                "group, then passed a barrier) when an access writes it",
                site.path, site.line, self.geo.describe(np.array([first])))

    def _cross(self, at: Value | Strided | Repeated, threads: np.ndarray,
               mask: np.ndarray | None, writing: bool, site: Site) -> None:
        """Checks an access of elements ``at`` by ``threads`` (of the invocations of ``mask``;
        None: all) against what the other names of the same bytes did since the barrier."""
        pairs: tuple[np.ndarray, np.ndarray] | None = None
        for other in self.overlaps:
            if other.touched:
                if pairs is None:
                    flat = at.flat(self.geo, self.size) if isinstance(at, Strided | Repeated) \
                        else at
                    if mask is None:
                        elements, readers = np.broadcast_arrays(flat, threads)
                        pairs = elements.ravel(), readers.ravel()
                    else:
                        elements, readers, active = np.broadcast_arrays(flat, threads, mask)
                        pairs = elements[active], readers[active]
                other.conflicts(self, *pairs, writing, site)

    def conflicts(self, source: SharedArray, flat: np.ndarray, threads: np.ndarray,
                  writing: bool, site: Site) -> None:
        """``SharedRace`` when an access through ``source`` (another name of these bytes) of
        its elements ``flat`` by ``threads`` conflicts with what was done through this one
        since the barrier: a copy still in flight to their bytes, another thread's write, or
        for a write another thread's read."""
        mine, item = self.data.itemsize, source.data.itemsize
        block, byte = np.divmod(flat.astype(np.int64), source.size)
        byte *= item
        if item > mine:  # each of the source's elements covers several of these
            parts = np.arange(item // mine)
            here = ((block * self.size + byte // mine)[:, None] + parts).ravel()
            flat, threads = np.repeat(flat, parts.size), np.repeat(threads, parts.size)
        else:
            here = block * self.size + byte // mine
        if self._flying:
            assert self.flight is not None
            flying = self.flight[here] != LANDED
            if flying.any():
                self._cross_race(source, flat, threads, here, flying, threads, "copy", site)
        if writing and self._holding:
            self._unheld(here, None, site, through=source.name)
        if self._written:
            writer = self.writer[here]
            bad = (writer != NOBODY) & (writer != threads)
            if bad.any():
                kind = "write-after-write" if writing else "read-after-write"
                self._cross_race(source, flat, threads, here, bad, writer, kind, site)
        if writing:
            self._fold()
            if self._read:
                first, last = self.first_reader[here], self.last_reader[here]
                bad = (last != NOBODY) & ((first != threads) | (last != threads))
                if bad.any():
                    other = np.where(first != threads, first, last)
                    self._cross_race(source, flat, threads, here, bad, other,
                                     "write-after-read", site)

    def _cross_race(self, source: SharedArray, flat: np.ndarray, threads: np.ndarray,
                    here: np.ndarray, bad: np.ndarray, other: np.ndarray, kind: str,
                    site: Site) -> None:
        """The ``SharedRace`` of an access through ``source`` against this name's records."""
        first = int(np.flatnonzero(bad)[0])
        block, element = divmod(int(flat[first]), source.size)
        mine = int(here[first]) - block * self.size
        me = self.geo.thread(int(threads[first]))
        them = self.geo.thread(int(other[first]))
        through = f"(as {self.name!r} element {mine}, whose bytes {source.name!r} shares)"
        what = {
            "copy": f"thread {them}'s copy to it {through} has not been waited for when "
                    f"thread {me} accesses it",
            "read-after-write": f"thread {them} wrote it {through} and thread {me} reads it",
            "write-after-write": f"thread {them} wrote it {through} and thread {me} writes it",
            "write-after-read": f"thread {them} read it {through} and thread {me} writes it",
        }[kind]
        culprits = np.flatnonzero(bad)
        lanes = (flat[culprits] // source.size) * self.geo.block_size + threads[culprits]
        lanes = np.array(list(dict.fromkeys(lanes.tolist()))[:8])  # each invocation once
        raise SharedRace(
            f"{'race' if kind == 'copy' else kind + ' race'} on shared array {source.name!r} "
            f"element {element} in block {self.geo.block_of(block)} between two barriers: "
            f"{what}", site.path, site.line, self.geo.describe(lanes))

    def _landed(self, flat: Value, mask: np.ndarray | None, verb: str, site: Site) -> None:
        """``SharedRace`` when one of ``flat`` (of the invocations of ``mask``) is still being
        copied."""
        assert self.flight is not None and self.flight_owner is not None
        flying = self.flight[flat] != LANDED
        if mask is not None:
            flying = flying & mask
        if not np.any(flying):
            return
        element = int(np.broadcast_to(flat, flying.shape)[flying].flat[0])
        block, index = divmod(element, self.size)
        owner = int(self.flight_owner[element])
        raise SharedRace(
            f"shared array {self.name!r} element {index} in block {self.geo.block_of(block)} is "
            f"still being copied (thread {self.geo.thread(int(self.geo.lane_thread[owner]))}'s "
            f"cp.async has not been waited for) when an access {verb} it",
            site.path, site.line, self.geo.describe(np.array([owner])))

    def _race(self, flat: np.ndarray, threads: np.ndarray, lanes: np.ndarray | None,
              bad: np.ndarray, other: np.ndarray, kind: str, site: Site,
              involved: np.ndarray | None = None) -> None:
        first = int(np.flatnonzero(bad)[0])
        block, element = divmod(int(flat[first]), self.size)
        me = self.geo.thread(int(threads[first]))
        them = self.geo.thread(int(other[first]))
        what = {
            "read-after-write": f"thread {them} wrote it and thread {me} reads it",
            "write-after-write": f"thread {them} wrote it and thread {me} writes it again",
            "write-after-read": f"thread {them} read it and thread {me} writes it",
            "write/write": f"threads {them} and {me} both write it in this store",
        }[kind]
        culprits = np.flatnonzero(bad if involved is None else involved)[:8]
        where = culprits if lanes is None else lanes[culprits]
        raise SharedRace(
            f"{kind} race on shared array {self.name!r} element {element} in block "
            f"{self.geo.block_of(block)} between two barriers: {what}",
            site.path, site.line, self.geo.describe(where))


_NO_READER = np.iinfo(np.int32).max
