"""Bulk tensor copies and the mbarriers that complete them, compiled to closures
(``ir.BulkStmt``).

Each mbarrier of a block keeps the arrivals a phase expects, the arrivals still missing, the
bytes still expected (``MbarrierArrive`` adds, each landed ``BulkTensorCopy`` takes away) and
how many phases have completed; each invocation, how many phases of each mbarrier it has seen
complete (``MbarrierWait``). A bulk copy moves its box at once but tags the elements with the
phase it completes (``SharedArray.bulk_copy``): an invocation that accesses one before it has
waited for that phase races with the copy, and the copy races with every access of another
thread since the last barrier, as a write does. A phase completes as soon as its arrivals and
bytes are in, so a wait whose phase is still open never completes (every invocation runs in
lockstep here): it is reported, as is a parity that names a phase other than the one the
invocation waits for next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

import numpy as np

from sarek import atoms, dtypes, ir
from sarek.errors import MbarrierMisuse, OutOfBounds, SimError
from sarek.ir_format import format_bulk
from sim.compiler import Core
from sim.launch import Geometry
from sim.memory import SharedArray, Site
from sim.state import Mask, Scope, State, StmtFn


class Mbarriers:
    """The mbarriers of one shared u64 array, ``size`` per block."""

    def __init__(self, size: int, geo: Geometry) -> None:
        shape = (geo.num_blocks, size)
        self.arrivals = np.zeros(shape, np.int64)  # expected per phase; 0: not initialized
        self.missing = np.zeros(shape, np.int64)  # arrivals the current phase still needs
        self.tx = np.zeros(shape, np.int64)  # bytes expected and not yet landed
        self.phase = np.zeros(shape, np.int64)  # completed phases
        self.observed = np.zeros((geo.invocations, size), np.int64)  # seen complete
        # the threads that arrived in the current phase, and in the last two completed ones
        # (by parity): a wait that sees a phase complete is ordered after their accesses
        self.arrived = np.zeros((*shape, geo.block_size), bool)
        self.released = np.zeros((*shape, 2, geo.block_size), bool)

    def complete(self, blocks: np.ndarray, index: np.ndarray) -> None:
        """Completes the current phase of each mbarrier (``blocks``, ``index``) whose arrivals
        and bytes are all in."""
        done = (self.missing[blocks, index] == 0) & (self.tx[blocks, index] == 0)
        b, i = blocks[done], index[done]
        pairs = np.unique(np.stack([b, i]), axis=1)
        parity = self.phase[pairs[0], pairs[1]] % 2
        self.released[pairs[0], pairs[1], parity] = self.arrived[pairs[0], pairs[1]]
        self.arrived[pairs[0], pairs[1]] = False
        self.phase[pairs[0], pairs[1]] += 1
        self.missing[pairs[0], pairs[1]] = self.arrivals[pairs[0], pairs[1]]


class Barriers(Core):
    def _targets(self, s: ir.BulkStmt, scope: Scope, site: Site, initialized: bool = True
                 ) -> Callable[[State, Mask], tuple[Mbarriers, np.ndarray, np.ndarray,
                                                    np.ndarray]]:
        """The closure giving the mbarriers ``s`` names, and the active invocations, their
        blocks and the index each names (``OutOfBounds`` past the array, ``MbarrierMisuse`` on
        one not initialized when ``initialized``)."""
        arr = self._array(scope, s.barriers)
        f_index = self.expr(s.index, scope, site)

        def targets(st: State, m: Mask) -> tuple[Mbarriers, np.ndarray, np.ndarray,
                                                  np.ndarray]:
            bars = st.mbarriers.get(arr.slot)
            if bars is None:
                bars = st.mbarriers[arr.slot] = Mbarriers(arr.size, self.geo)
            lanes = np.arange(self.n) if m is None else np.flatnonzero(self.spread(m))
            index = self.spread(f_index(st, m)).astype(np.int64)[lanes]
            where = np.zeros(self.n, bool)
            bad = (index < 0) | (index >= arr.size)
            if bad.any():
                where[lanes[bad]] = True
                self._fail(OutOfBounds, f"{format_bulk(s)} names mbarrier {int(index[bad][0])} "
                           f"of {arr.size}", site, where)
            blocks = lanes // self.geo.block_size
            if initialized:
                bad = bars.arrivals[blocks, index] == 0
                if bad.any():
                    where[lanes[bad]] = True
                    self._fail(MbarrierMisuse, f"{format_bulk(s)} uses an mbarrier no "
                               "mbarrier_init has initialized", site, where)
            return bars, lanes, blocks, index

        return targets

    def mbarrier_init(self, s: ir.MbarrierInit, scope: Scope, site: Site) -> StmtFn:
        targets = self._targets(s, scope, site, initialized=False)

        def run(st: State, m: Mask) -> None:
            bars, _, blocks, index = targets(st, m)
            bars.arrivals[blocks, index] = bars.missing[blocks, index] = s.arrivals
            bars.tx[blocks, index] = bars.phase[blocks, index] = 0
            size = self.geo.block_size
            for b, i in {(int(b), int(i)) for b, i in zip(blocks, index, strict=True)}:
                bars.observed[b * size:(b + 1) * size, i] = 0

        return run

    def mbarrier_arrive(self, s: ir.MbarrierArrive, scope: Scope, site: Site) -> StmtFn:
        targets, f_tx = self._targets(s, scope, site), self.expr(s.tx_bytes, scope, site)

        def run(st: State, m: Mask) -> None:
            bars, lanes, blocks, index = targets(st, m)
            tx = self.spread(f_tx(st, m)).astype(np.int64)[lanes]
            if (tx < 0).any():
                self._fail(MbarrierMisuse, f"{format_bulk(s)} expects {int(tx.min())} bytes",
                           site, m)
            np.add.at(bars.tx, (blocks, index), tx)
            np.subtract.at(bars.missing, (blocks, index), 1)
            bars.arrived[blocks, index, self.geo.lane_thread[lanes]] = True
            over = bars.missing[blocks, index] < 0
            if over.any():
                where = np.zeros(self.n, bool)
                where[lanes[over]] = True
                self._fail(MbarrierMisuse, f"{format_bulk(s)}: more invocations arrive than the "
                           "phase expects", site, where)
            bars.complete(blocks, index)
            if st.tasks is not None:
                st.tasks.hand_off()

        return run

    def mbarrier_wait(self, s: ir.MbarrierWait, scope: Scope, site: Site) -> StmtFn:
        targets, f_parity = self._targets(s, scope, site), self.expr(s.parity, scope, site)

        def run(st: State, m: Mask) -> None:
            bars, lanes, blocks, index = targets(st, m)
            parity = self.spread(f_parity(st, m)).astype(np.int64)[lanes]
            where = np.zeros(self.n, bool)

            def fail(wrong: np.ndarray, why: str) -> NoReturn:
                first = int(np.flatnonzero(wrong)[0])
                where[lanes[wrong]] = True
                self._fail(MbarrierMisuse, f"{format_bulk(s)}: {why}; mbarrier "
                           f"{int(index[first])} has completed "
                           f"{int(bars.phase[blocks, index][first])} phases, this invocation "
                           f"has waited for {int(bars.observed[lanes, index][first])}", site,
                           where)

            bad = (parity != 0) & (parity != 1)
            if bad.any():
                fail(bad, "a phase parity is 0 or 1")
            current = bars.phase[blocks, index]  # the phase in progress
            open_ = current % 2 == parity  # the parity names the phase still in progress
            if open_.any() and st.tasks is not None:  # another role may complete it
                never = open_.copy()

                def ready() -> bool:
                    return not bool(np.any(bars.phase[blocks, index] % 2 == parity))

                def stuck() -> SimError:
                    try:
                        fail(never, "it waits for a phase that no role can complete any more "
                             "(every other role has finished or waits too)")
                    except SimError as e:
                        return e

                st.tasks.block(ready, stuck)
                current = bars.phase[blocks, index]
                open_ = current % 2 == parity
            seen = bars.observed[lanes, index]
            if (open_ & (current > seen)).any():
                fail(open_ & (current > seen), "its parity names the phase in progress, not "
                     "the earliest one this invocation has not waited for, which is complete "
                     "(a parity names one of the last two phases only)")
            if open_.any():
                fail(open_, "it waits for the phase in progress, which no arrival or copy "
                     "issued before it completes (it would never return)")
            bars.observed[lanes, index] = np.maximum(seen, current)
            self._acquire(st, bars, lanes, blocks, index, seen, current)

        return run

    def _acquire(self, st: State, bars: Mbarriers, lanes: np.ndarray, blocks: np.ndarray,
                 index: np.ndarray, seen: np.ndarray, current: np.ndarray) -> None:
        """The waiting invocations are ordered after what the threads that arrived on the
        phases they now see complete (the last two at most) did before: those threads'
        shared accesses are forgotten in their blocks, and every phase of any mbarrier those
        threads have seen complete counts as seen by the waiting invocations too."""
        fresh = np.flatnonzero(current > seen)
        if not fresh.size:
            return
        size = self.geo.block_size
        threads: dict[int, np.ndarray] = {}
        for j in fresh:
            b, i = int(blocks[j]), int(index[j])
            mine = np.zeros(size, bool)
            for phase in range(max(int(seen[j]), int(current[j]) - 2), int(current[j])):
                mine |= bars.released[b, i, phase % 2]
            if mine.any():
                arrivers = b * size + np.flatnonzero(mine)
                for other in st.mbarriers.values():
                    other.observed[lanes[j]] = np.maximum(other.observed[lanes[j]],
                                                          other.observed[arrivers].max(axis=0))
                threads[b] = threads.get(b, np.zeros(size, bool)) | mine
        for b, mine in threads.items():
            for mem in st.shared.values():
                mem.forget(b, mine)

    def bulk_tensor_copy(self, s: ir.BulkTensorCopy, scope: Scope, site: Site) -> StmtFn:
        dst, src = self._array(scope, s.dst), self._array(scope, s.src)
        data = src.data
        assert data is not None
        fns = [self.expr(e, scope, site) for e in (s.dst_offset, s.row, s.col)]
        tensor = [self.expr(e, scope, site) for e in (s.origin, s.row_stride, s.extent_rows,
                                                      s.extent_cols)]
        size = dtypes.numpy_dtype(src.elem).itemsize
        box = np.arange(s.rows, dtype=np.int64)[:, None], np.arange(s.cols, dtype=np.int64)
        within = (box[0] * s.cols + box[1]).ravel()
        if s.swizzle:
            within = np.asarray(atoms.TMA_SWIZZLE[s.swizzle](within * size)) // size
        align = 1024 if s.swizzle else 128
        targets = self._targets(s, scope, site)

        def run(st: State, m: Mask) -> None:
            bars, lanes, blocks, index = targets(st, m)
            offset, row, col = (self.spread(f(st, m)).astype(np.int64)[lanes] for f in fns)
            origin, stride, rows, cols = (int(np.asarray(f(st, m)).flat[0]) for f in tensor)
            mem = st.arrays[dst.slot]
            assert isinstance(mem, SharedArray)
            for j, lane in enumerate(lanes):
                where = np.zeros(self.n, bool)
                where[lane] = True
                if offset[j] * size % align or offset[j] < 0 or \
                        offset[j] + s.rows * s.cols > dst.size:
                    self._fail(OutOfBounds, f"{format_bulk(s)} lands at element {offset[j]}, "
                               f"not {align}-byte aligned inside the {dst.size} elements of "
                               f"{dst.name!r}", site, where)
                r, c = row[j] + box[0], col[j] + box[1]
                inside = (r >= 0) & (r < rows) & (c >= 0) & (c < cols)
                at = origin + r * stride + c
                if inside.any() and (at[inside].min() < 0 or at[inside].max() >= data.size):
                    self._fail(OutOfBounds, f"{format_bulk(s)}: the tensor reaches outside the "
                               f"{data.size} elements of {src.name!r}", site, where)
                values = np.where(inside, data[np.where(inside, at, 0)], 0).astype(data.dtype)
                b, i = blocks[j:j + 1], index[j:j + 1]
                flat = int(b[0]) * dst.pitch + offset[j] + within
                mem.bulk_copy(flat, int(self.geo.lane_thread[lane]), int(i[0]),
                              int(bars.phase[b, i][0]), bars.observed, site)
                mem.data[flat] = values.ravel()
                bars.tx[b, i] -= s.rows * s.cols * size
                bars.complete(b, i)
            if st.tasks is not None:
                st.tasks.hand_off()

        return run
