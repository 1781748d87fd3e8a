"""The compiler's common ground: what every statement family (``sim.exec_*``) uses.

The kernel has passed ``sarek.ir.ensure_valid`` (``sim.simulate`` runs it first), so names
resolve and have the right kind; the compiler does not check the IR again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import NoReturn

import numpy as np

from sarek import ir
from sarek.errors import RegisterRace, SimError
from sim import fragments
from sim.arith import Value
from sim.launch import Geometry, Limits
from sim.memory import LocalArray, Site
from sim.state import Array, ExprFn, Frag, Mask, Scalar, Scope, State, StmtFn, spread


class Core(ABC):
    """The launch being compiled for, the slots handed out so far, and the helpers of every
    family."""

    def __init__(self, kernel: ir.Kernel, geo: Geometry, arith: fragments.Model,
                 limits: Limits) -> None:
        self.kernel, self.geo, self.n = kernel, geo, geo.invocations
        self.arith = arith
        self.limits = limits
        self.slots = 0
        self.array_slots = 0
        self.frag_slots = 0

    @abstractmethod
    def expr(self, e: ir.Expr, scope: Scope, site: Site) -> ExprFn:
        """The closure computing ``e``."""

    @abstractmethod
    def block(self, stmts: tuple[ir.Stmt, ...], scope: Scope, path: str
              ) -> tuple[StmtFn, bool]:
        """The closure running ``stmts``, and whether it may return."""

    @abstractmethod
    def load(self, arr: Array, findex: ExprFn, site: Site) -> ExprFn:
        """The closure loading ``arr[index]`` (``sim.exec_memory``)."""

    @abstractmethod
    def accumulating_loop(self, s: ir.For, inner: Scope, var_slot: int, site: Site
                          ) -> Callable[[State, Mask, int, int, int], bool] | None:
        """The fast path of a uniform loop that accumulates products of loads, if ``s`` is one
        (``sim.exec_loops``)."""

    def _slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def _scalar(self, scope: Scope, name: str) -> Scalar:
        sym = scope[name]
        assert isinstance(sym, Scalar)
        return sym

    def _array(self, scope: Scope, name: str) -> Array:
        sym = scope[name]
        assert isinstance(sym, Array)
        return sym

    def _frag(self, scope: Scope, name: str) -> Frag:
        sym = scope[name]
        assert isinstance(sym, Frag)
        return sym

    def spread(self, v: Value) -> np.ndarray:
        """``v`` with one element per invocation (``sim.state.spread``)."""
        return spread(v, self.geo.shape)

    def _narrow(self, mask: Mask, cond: Value) -> tuple[Mask, bool]:
        """The active invocations of ``mask`` where ``cond`` holds, and whether there is any."""
        if not isinstance(cond, np.ndarray):
            return mask, bool(cond)
        if mask is not None:
            cond = mask & cond
        count = int(np.count_nonzero(cond))
        return (None if count == cond.size else cond), count > 0

    def _where(self, lanes: Mask) -> np.ndarray:
        """The first eight invocations of ``lanes`` (None: all; a value over the launch or
        one bool per invocation), as indices."""
        if lanes is None:
            return np.arange(min(8, self.n))
        return np.flatnonzero(lanes if lanes.ndim == 1 else self.spread(lanes))[:8]

    def _fail(self, error: type[SimError], reason: str, site: Site, lanes: Mask) -> NoReturn:
        """Raises ``error`` naming the first invocations of ``lanes`` (None: all)."""
        raise error(reason, site.path, site.line, self.geo.describe(self._where(lanes)))

    def _wgmma_groups(self, st: State) -> np.ndarray:
        """Each invocation's count of committed ``wgmma`` groups (the open one's number)."""
        if st.wgmma_groups is None:
            st.wgmma_groups = np.zeros(self.n, np.int64)
        return st.wgmma_groups

    def _registers_free(self, st: State, arr: Array, m: Mask, site: Site) -> None:
        """``RegisterRace`` when an active invocation touches registers of ``arr`` that a
        ``wgmma`` in flight still reads or writes."""
        mem = st.arrays[arr.slot]
        if not isinstance(mem, LocalArray) or not mem.holding:
            return
        busy = mem.busy(None if m is None else self.spread(m))
        if busy is not None:
            self._fail(RegisterRace, f"local array {arr.name!r} is still read or written by "
                       "a wgmma in flight (its warpgroup has not waited for the group) when "
                       "another instruction accesses it", site, busy)
