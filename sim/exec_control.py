"""Control flow compiled to closures: ``If`` splits the active invocations, loops run uniform
(one scalar loop variable for all) or divergent (each invocation its own trips under a
shrinking mask), ``Return`` retires invocations, ``Barrier`` checks that whole blocks reach it
and resets the race detector. Loop trips are counted against ``sim.launch.Limits``."""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from sarek import dtypes, ir
from sarek.errors import BarrierDivergence, LaunchError, LimitError
from sim.arith import Value
from sim.compiler import Core
from sim.memory import Site
from sim.state import ExprFn, Mask, Scalar, Scope, State, StmtFn

MAX_WHILE_TRIPS = 1 << 20
"""Trips after which a loop (``while`` or ``for``) counts as never ending (a ``LimitError``)
unless ``Limits.loop_trips`` says otherwise."""


class Control(Core):
    def for_loop(self, s: ir.For, scope: Scope, site: Site) -> tuple[StmtFn, bool]:
        bounds = [self.expr(x, scope, site) for x in (s.start, s.stop, s.step)]
        inner = scope.new_child()
        var_type = dtypes.numpy_dtype(s.start.type).type
        inner[s.var] = Scalar(slot := self._slot(), s.start.type)
        body, returns = self.block(s.body, inner, f"{site.path}.body")
        fast = self.accumulating_loop(s, inner, slot, site)

        def run(st: State, m: Mask) -> None:
            start, stop, step = (f(st, m) for f in bounds)
            first, end, inc = (_uniform_int(v, m) for v in (start, stop, step))
            if first is None or end is None or inc is None:
                self._divergent_for(st, m, start, stop, step, slot, body, returns, site)
                return
            if inc == 0:
                self._fail(LaunchError, "the loop step is 0", site, m)
            trips = len(range(first, end, inc))
            if trips > self._loop_cap():
                self._trip_limit(f"the loop would run {trips} trips", site, m)
            if fast is not None and fast(st, m, first, inc, trips):
                return
            for v in range(first, end, inc):
                self._count_trip(st, site, m)
                st.env[slot] = var_type(v)
                body(st, m)
                if returns and st.alive is not None:
                    m, any_left = self._narrow(m, st.alive)
                    if not any_left:
                        return

        return run, returns

    def _divergent_for(self, st: State, m: Mask, start: Value, stop: Value, step: Value,
                       slot: int, body: StmtFn, returns: bool, site: Site) -> None:
        """A loop whose bounds differ between active invocations: each runs its own trips."""
        start, stop, step = (np.broadcast_to(np.asarray(v, np.int64), self.geo.shape)
                             for v in (start, stop, step))
        zero = step == 0 if m is None else (step == 0) & m
        if zero.any():
            self._fail(LaunchError, "the loop step is 0", site, zero)
        var = start.copy()  # int64: the variable stays in range, the next value never wraps
        up = step > 0
        active, any_left = self._narrow(m, np.where(up, var < stop, var > stop))
        span, size = np.where(up, stop - start, start - stop), np.maximum(np.abs(step), 1)
        longest = int(np.max((span + size - 1) // size, where=True if m is None else m,
                             initial=0))
        if longest > self._loop_cap():
            self._trip_limit(f"the loop would run {longest} trips for some invocations", site,
                             active)
        while any_left:
            self._count_trip(st, site, active)
            st.env[slot] = var.astype(np.int32)
            body(st, active)
            var += step
            if returns and st.alive is not None:
                active, any_left = self._narrow(active, st.alive)
                if not any_left:
                    return
            active, any_left = self._narrow(active, np.where(up, var < stop, var > stop))

    def while_loop(self, fc: ExprFn, body: StmtFn, returns: bool, site: Site) -> StmtFn:
        def run(st: State, m: Mask) -> None:
            trips, cap = 0, self._loop_cap()
            while True:
                m, any_left = self._narrow(m, fc(st, m))
                if not any_left:
                    return
                trips += 1
                if trips > cap:
                    self._trip_limit(f"the loop ran {cap} times without ending (a kernel "
                                     "that never ends hangs a device)", site, m)
                self._count_trip(st, site, m)
                body(st, m)
                if returns and st.alive is not None:
                    m, any_left = self._narrow(m, st.alive)
                    if not any_left:
                        return

        return run

    def _loop_cap(self) -> int:
        cap = self.limits.loop_trips
        return MAX_WHILE_TRIPS if cap is None else cap

    def _trip_limit(self, what: str, site: Site, m: Mask) -> NoReturn:
        cap = self._loop_cap()
        raise LimitError(f"{what}, more than the simulator's limit of {cap} trips per loop; "
                         "raise it with simulate(..., limits=sim.launch.Limits(loop_trips=...)) "
                         "or the CLI's --max-loop-trips",
                         "loop_trips", site.path, site.line, self.geo.describe(self._where(m)))

    def _count_trip(self, st: State, site: Site, m: Mask) -> None:
        """Counts one loop trip against ``Limits.trips``, the budget of the whole launch."""
        st.trips += 1
        if st.trips > self.limits.trips:
            raise LimitError(f"the launch's loops ran {self.limits.trips} trips in all, the "
                             "simulator's limit; raise it with simulate(..., limits=sim.launch"
                             ".Limits(trips=...)) or the CLI's --max-trips", "trips",
                             site.path, site.line, self.geo.describe(self._where(m)))

    def if_stmt(self, fc: ExprFn, then: StmtFn, orelse: StmtFn, has_else: bool) -> StmtFn:
        def run(st: State, m: Mask) -> None:
            c = fc(st, m)
            if not isinstance(c, np.ndarray):
                (then if c else orelse)(st, m)
                return
            on_then, any_then = self._narrow(m, c)
            if any_then:
                then(st, on_then)
            if has_else:
                on_else, any_else = self._narrow(m, ~c)
                if any_else:
                    orelse(st, on_else)

        return run

    def return_stmt(self) -> StmtFn:
        none_left = np.zeros((1,) * len(self.geo.shape), bool)

        def run(st: State, m: Mask) -> None:
            if m is None:
                st.alive = none_left
            else:
                st.alive = ~m if st.alive is None else st.alive & ~m

        return run

    def barrier(self, site: Site) -> StmtFn:
        geo = self.geo
        size = geo.block_size

        def run(st: State, m: Mask) -> None:
            if m is None:
                for mem in st.shared.values():
                    mem.barrier(None)
                return
            lanes = self.spread(m)
            reached = np.count_nonzero(lanes.reshape(-1, size), axis=1)
            partial = (reached > 0) & (reached < size)
            if partial.any():
                block = int(np.flatnonzero(partial)[0])
                culprits = lanes.copy()
                culprits[: block * size] = False
                culprits[(block + 1) * size:] = False
                self._fail(BarrierDivergence,
                           f"{reached[block]} of the {size} invocations of block "
                           f"{geo.block_of(block)} reached the barrier (the others branched "
                           f"around it or returned)", site, culprits)
            full = reached == size
            for mem in st.shared.values():
                mem.barrier(full)

        return run


def _uniform_int(v: Value, m: Mask) -> int | None:
    """``v`` as an int when every active invocation holds the same value, else None."""
    if not isinstance(v, np.ndarray):
        return int(v)
    if m is None:
        active = v
    else:
        values, where = np.broadcast_arrays(v, m)
        active = values[where]
    low, high = active.min(), active.max()
    return int(low) if low == high else None
