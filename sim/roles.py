"""Warp roles (``ir.WarpRoles``) run as tasks of one launch, and the statements that belong to
them (``ir.SetMaxNReg``, ``ir.NamedBarrier``).

The roles of a block wait for each other through mbarriers, so running both bodies in lockstep
under masks would wait forever. Each role instead runs as a task: its body, over the role's
invocations of every block at once (lockstep within the role, as everywhere else), in a thread of
its own. Exactly one task runs at a time: a task holds the baton until it finishes, reaches an
``MbarrierWait`` that cannot complete yet, or has arrived on an mbarrier (or completed a phase by a
bulk copy); then it hands the baton to the next task, in role order from its own, that is not
finished and not waiting for something still incomplete (after an arrival, itself when there is
none). So a role that completes what another waits for lets it run at once: the tightest
interleaving of the roles, in which a role that touches a buffer before the other is done with it
meets that role's recorded accesses. The order of every step is therefore fixed by the kernel and
its arguments, never by the operating system's scheduling. When no task can go on (every one is
finished or waiting for a phase nothing can complete any more), the first waiting task raises its
``MbarrierMisuse``; an error in one task stops the others and is raised by the statement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sarek import ir
from sarek.errors import BarrierDivergence, SimError, SubgroupDivergence
from sim.compiler import Core
from sim.memory import WARPGROUP, Site
from sim.state import Mask, Scope, State, StmtFn


class _Stopped(Exception):
    """Unwinds a task whose launch stopped on another task's error."""


@dataclass
class _Waiting:
    """What a blocked task waits for, and the error it raises if that never comes."""

    ready: Callable[[], bool]
    never: Callable[[], SimError]


@dataclass
class Tasks:
    """The tasks of one ``WarpRoles`` execution: which runs, which wait for what."""

    count: int
    turn: int = 0
    waiting: list[_Waiting | None] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    error: BaseException | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)
    local: threading.local = field(default_factory=threading.local)

    def __post_init__(self) -> None:
        self.waiting = [None] * self.count
        self.done = [False] * self.count

    def run(self, bodies: list[Callable[[], None]]) -> None:
        """Runs the bodies as tasks, the first first; raises the first error of any."""
        threads = [threading.Thread(target=self._task, args=(i, body), daemon=True)
                   for i, body in enumerate(bodies)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.error is not None:
            raise self.error

    def _task(self, i: int, body: Callable[[], None]) -> None:
        self.local.index = i
        with self.cond:
            while self.turn != i and self.error is None:
                self.cond.wait()
        try:
            if self.error is None:
                body()
        except _Stopped:
            pass
        except BaseException as e:  # handed to the launch's thread
            with self.cond:
                self.error = self.error or e
        with self.cond:
            self.done[i] = True
            if self.error is None:
                self._pass(i)
            self.cond.notify_all()

    def block(self, ready: Callable[[], bool], never: Callable[[], SimError]) -> None:
        """The running task cannot go on until ``ready()``: the baton goes to the next task
        that can run, and comes back once this one is ready; ``never()`` is raised when no
        task can run any more."""
        i = self.local.index
        with self.cond:
            self.waiting[i] = _Waiting(ready, never)
            self._pass(i)
            self.cond.notify_all()
            while self.turn != i and self.error is None:
                self.cond.wait()
            self.waiting[i] = None
            if self.error is not None:
                raise _Stopped
            if not ready():  # no other task could run: this wait never completes
                raise never()

    def hand_off(self) -> None:
        """The running task lets the next task that can run go first (after an arrival that
        may complete what another waits for), and goes on when the baton comes back."""
        i = self.local.index
        with self.cond:
            self._pass(i)
            if self.turn == i:
                return
            self.cond.notify_all()
            while self.turn != i and self.error is None:
                self.cond.wait()
            if self.error is not None:
                raise _Stopped

    def _pass(self, i: int) -> None:
        """Gives the baton to the next task after ``i`` that can run (``i`` itself last);
        when none can, to the first waiting task, which raises its error."""
        for k in range(1, self.count + 1):
            j = (i + k) % self.count
            wait = self.waiting[j]
            if not self.done[j] and (wait is None or wait.ready()):
                self.turn = j
                return
        stuck = [j for j in range(self.count) if not self.done[j]]
        if stuck:
            self.turn = stuck[0]


class Roles(Core):
    def warp_roles(self, s: ir.WarpRoles, scope: Scope, path: str) -> StmtFn:
        bodies = [self.block(r.body, scope.new_child(), f"{path}.roles[{j}].body")[0]
                  for j, r in enumerate(s.roles)]
        group = (self.geo.lane_thread // WARPGROUP).reshape(self.geo.shape)
        masks = [(group >= r.first) & (group < r.first + r.count) for r in s.roles]

        def run(st: State, m: Mask) -> None:
            tasks = Tasks(len(bodies))
            outer, st.tasks = st.tasks, tasks

            def task(body: StmtFn, mine: np.ndarray) -> Callable[[], None]:
                return lambda: body(st, mine if m is None else m & mine)

            try:
                tasks.run([task(b, mine) for b, mine in zip(bodies, masks, strict=True)])
            finally:
                st.tasks = outer

        return run

    def set_max_nreg(self, site: Site) -> StmtFn:
        def run(st: State, m: Mask) -> None:
            if m is None:
                return
            active = self.spread(m).reshape(-1, WARPGROUP)
            count = np.count_nonzero(active, axis=1)
            partial = (count > 0) & (count < WARPGROUP)
            if partial.any():
                where = np.zeros(self.n, bool)
                group = int(np.flatnonzero(partial)[0])
                where[group * WARPGROUP:(group + 1) * WARPGROUP] = active[group]
                self._fail(SubgroupDivergence, f"{int(count[group])} of the {WARPGROUP} "
                           "invocations of a warpgroup run setmaxnreg, which its whole "
                           "warpgroup runs together", site, where)

        return run

    def named_barrier(self, s: ir.NamedBarrier, site: Site) -> StmtFn:
        size = self.geo.block_size
        group = self.geo.lane_thread // WARPGROUP

        def run(st: State, m: Mask) -> None:
            lanes = np.ones(self.n, bool) if m is None else self.spread(m)
            reached = np.count_nonzero(lanes.reshape(-1, size), axis=1)
            partial = (reached > 0) & (reached != s.threads)
            if partial.any():
                block = int(np.flatnonzero(partial)[0])
                where = np.zeros(self.n, bool)
                where[block * size:(block + 1) * size] = lanes[block * size:(block + 1) * size]
                self._fail(BarrierDivergence, f"{int(reached[block])} invocations of block "
                           f"{self.geo.block_of(block)} reached named barrier {s.id}, which "
                           f"counts {s.threads}", site, where)
            # the role's accesses are ordered among its invocations, not with other roles'
            groups = np.unique(group[lanes])
            threads = np.zeros(size, bool)
            for g in groups:
                threads[int(g) * WARPGROUP:(int(g) + 1) * WARPGROUP] = True
            for b in np.flatnonzero(reached).tolist():
                for mem in st.shared.values():
                    mem.forget(b, threads)

        return run
