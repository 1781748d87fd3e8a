"""Staged copies compiled to closures: the neutral ``StageCopy`` (complete as it is issued),
the lane-explicit ``CpAsync`` of a lowered kernel (in flight until a wait lands it), and the
group statements ``StageCommit`` and ``StageWait``.

A ``CpAsync`` moves its elements at once, but they stay in flight (``SharedArray.issue``):
any access to them before a ``StageWait`` completes their group is a ``SharedRace``, and when
they land they count as written by the issuing thread at that moment, so that other threads
read them only after the next barrier. That is what the hardware promises, and a kernel
whose results do not depend on when a copy lands within those bounds gives the device's bits.
"""

from __future__ import annotations

import numpy as np

from sarek import dtypes, ir
from sarek.errors import OutOfBounds
from sarek.stage_copy import element_copy
from sim.compiler import Core
from sim.memory import SharedArray, Site
from sim.state import Mask, Scope, State, StmtFn

COPY_BYTES = 16


class Copies(Core):
    def stage_copy(self, s: ir.StageCopy, scope: Scope, path: str) -> StmtFn:
        """The block's copy as single-element stores, complete when issued."""
        assert self.kernel.block is not None  # the checker asks for it
        fn, _ = self.block((element_copy(s, self.kernel.block),), scope, path)
        return fn

    def stage_commit(self) -> StmtFn:
        def run(st: State, m: Mask) -> None:
            groups = self._committed(st)
            if m is None:
                groups += 1
            else:
                groups[self.spread(m)] += 1

        return run

    def stage_wait(self, s: ir.StageWait, site: Site) -> StmtFn:
        def run(st: State, m: Mask) -> None:
            if st.copy_groups is None:
                return  # nothing was ever committed
            waiting = None if m is None else self.spread(m)
            for mem in st.shared.values():
                mem.land(st.copy_groups, s.pending, waiting, site)

        return run

    def cp_async(self, s: ir.CpAsync, scope: Scope, site: Site) -> StmtFn:
        """Each active invocation's 16-byte copy from global into shared memory."""
        dst, src = self._array(scope, s.dst), self._array(scope, s.src)
        f_dst, f_src = self.expr(s.dst_index, scope, site), self.expr(s.src_index, scope, site)
        width = COPY_BYTES // dtypes.numpy_dtype(src.elem).itemsize
        data = src.data
        assert data is not None
        geo, n = self.geo, self.n
        base = (np.arange(n, dtype=np.int64) // geo.block_size) * dst.pitch
        threads = geo.lane_thread.astype(np.int32)
        step = np.arange(width, dtype=np.int64)

        def run(st: State, m: Mask) -> None:
            lanes = np.arange(n) if m is None else np.flatnonzero(self.spread(m))
            at_dst = self.spread(f_dst(st, m)).astype(np.int64)[lanes]
            at_src = self.spread(f_src(st, m)).astype(np.int64)[lanes]
            for what, at, size in (("source", at_src, src.size), ("destination", at_dst,
                                                                 dst.size)):
                bad = (at % width != 0) | (at < 0) | (at + width > size)
                if bad.any():
                    where = np.zeros(n, bool)
                    where[lanes[bad]] = True
                    self._fail(OutOfBounds, f"a cp.async {what} of {COPY_BYTES} bytes at element "
                               f"{int(at[bad][0])} is not aligned inside its {size} elements "
                               f"of {(src if what == 'source' else dst).name!r}", site, where)
            mem = st.arrays[dst.slot]
            assert isinstance(mem, SharedArray)
            flat = ((base[lanes] + at_dst)[:, None] + step).ravel()
            owners = np.repeat(lanes, width)
            mem.write(flat, np.repeat(threads[lanes], width), owners, site)
            mem.data[flat] = data[((at_src[:, None]) + step).ravel()]
            mem.issue(flat, owners, self._committed(st)[owners])

        return run

    def _committed(self, st: State) -> np.ndarray:
        """Each invocation's count of committed copy groups."""
        if st.copy_groups is None:
            st.copy_groups = np.zeros(self.n, np.int64)
        return st.copy_groups
