"""The kernel compiled to nested closures and run over every invocation of a launch at once.

Compiling walks the IR once: names are resolved to slots, statement paths and constants are
computed, and each node becomes a closure ``fn(state, mask)``. Running calls the closures;
values are NumPy scalars when uniform, else arrays over the launch's axes that keep only the
axes they depend on (``sim.state``). ``mask`` is the set of active invocations: None means all
of them and takes no masking at all, otherwise a bool value with at least one True (a
statement with no active invocation is skipped).

Each statement family compiles in its own module: ``sim.exec_expr`` (expressions),
``sim.exec_memory`` (loads, stores, arrays), ``sim.exec_control`` (control flow, barriers,
limits), ``sim.exec_loops`` (loops that accumulate products of loads),
``sim.exec_fragments``, ``sim.exec_tiles``, ``sim.exec_copies``, ``sim.exec_barriers`` and
``sim.roles``;
this module puts them
together and dispatches statements.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable

import numpy as np

from sarek import ir
from sarek.ir_walk import walk
from sim import fragments
from sim.exec_barriers import Barriers
from sim.exec_control import Control
from sim.exec_copies import Copies
from sim.exec_expr import Expressions
from sim.exec_fragments import Fragments
from sim.exec_loops import Loops
from sim.exec_memory import Memory
from sim.exec_tiles import Tiles
from sim.launch import Geometry, Limits
from sim.memory import Site
from sim.roles import Roles
from sim.state import Array, Mask, Scalar, Scope, State, StmtFn, View

__all__ = ["compile_kernel"]


def compile_kernel(kernel: ir.Kernel, geo: Geometry, arrays: dict[str, np.ndarray],
                   scalars: dict[str, np.generic], arith: fragments.Model = "sequential",
                   limits: Limits | None = None) -> Callable[[], None]:
    """The kernel (valid: ``sarek.ir.ensure_valid``) ready to run on ``geo`` over the (already
    copied) ``arrays``; calling the result runs it, updating ``arrays`` in place. ``arith`` is
    the arithmetic model of float fragment multiply-accumulates; ``limits`` caps the loop trips
    (``Limits.loop_trips`` per loop, ``Limits.trips`` for the launch)."""
    return _Compiler(kernel, geo, arith, limits or Limits()).program(arrays, scalars)


class _Compiler(Expressions, Memory, Control, Loops, Fragments, Tiles, Copies, Barriers,
                Roles):
    def program(self, arrays: dict[str, np.ndarray], scalars: dict[str, np.generic]
                ) -> Callable[[], None]:
        scope: Scope = ChainMap()
        initial: list[tuple[int, np.generic]] = []
        for p in self.kernel.params:
            if isinstance(p, ir.ArrayParam):
                data = arrays[p.name]
                scope[p.name] = Array(-1, p.name, p.elem, ir.MemSpace.GLOBAL, data.size, data)
            else:
                scope[p.name] = sym = Scalar(self._slot(), p.elem)
                initial.append((sym.slot, scalars[p.name]))
        body, _ = self.block(self.kernel.body, scope.new_child(), "body")

        def run() -> None:
            state = State(self.slots, self.array_slots, self.frag_slots)
            for slot, value in initial:
                state.env[slot] = value
            with np.errstate(all="ignore"):
                body(state, None)

        return run

    def block(self, stmts: tuple[ir.Stmt, ...], scope: Scope, path: str
              ) -> tuple[StmtFn, bool]:
        """A statement list and whether it may return. After a statement that may return,
        the invocations that did are dropped from the rest of the list."""
        compiled: list[tuple[StmtFn, bool]] = []
        i = 0
        while i < len(stmts):
            run = self.independent_mul_adds(stmts, i, scope)
            if len(run) > 1:
                compiled.append((self.mul_adds(run, scope, Site(f"{path}[{i}]", run[0].line)),
                                 False))
            else:
                compiled.append(self.stmt(stmts[i], scope, f"{path}[{i}]"))
            i += max(1, len(run))
        fns = [fn for fn, _ in compiled]
        if not any(returns for _, returns in compiled):
            if len(fns) == 1:
                return fns[0], False

            def run_all(st: State, m: Mask) -> None:
                for fn in fns:
                    fn(st, m)

            return run_all, False

        def run_until_empty(st: State, m: Mask) -> None:
            for fn, returns in compiled:
                fn(st, m)
                if returns and st.alive is not None:
                    m, any_left = self._narrow(m, st.alive)
                    if not any_left:
                        return

        return run_until_empty, True

    def stmt(self, s: ir.Stmt, scope: Scope, path: str) -> tuple[StmtFn, bool]:
        site = Site(path, s.line)
        match s:
            case ir.Let(name=name, type=t, value=value):
                fv = self.expr(value, scope, site)
                slot = self._slot()
                scope[name] = Scalar(slot, t)

                def let(st: State, m: Mask) -> None:
                    st.env[slot] = fv(st, m)

                return let, False
            case ir.Assign(name=name, value=value):
                fv, slot = self.expr(value, scope, site), self._scalar(scope, name).slot

                def assign(st: State, m: Mask) -> None:
                    v = fv(st, m)
                    st.env[slot] = v if m is None else np.where(m, v, st.env[slot])

                return assign, False
            case ir.Store(array=name, index=index, value=value):
                return self.store(self._array(scope, name), self.expr(index, scope, site),
                                  self.expr(value, scope, site), site), False
            case ir.StorePacked(array=name, index=index, value=value):
                return self.store_packed(self._array(scope, name), self.expr(index, scope, site),
                                         self.expr(value, scope, site), value.type.bits,
                                         site), False
            case ir.For():
                return self.for_loop(s, scope, site)
            case ir.While(cond=cond, body=body):
                fc = self.expr(cond, scope, site)
                fbody, returns = self.block(body, scope.new_child(), f"{path}.body")
                return self.while_loop(fc, fbody, returns, site), returns
            case ir.If(cond=cond, then=then, orelse=orelse):
                fc = self.expr(cond, scope, site)
                fthen, r1 = self.block(then, scope.new_child(), f"{path}.then")
                felse, r2 = self.block(orelse, scope.new_child(), f"{path}.orelse")
                return self.if_stmt(fc, fthen, felse, bool(orelse)), r1 or r2
            case ir.Barrier():
                return self.barrier(site), False
            case ir.Return():
                return self.return_stmt(), True
            case ir.ArrayDecl(name=name, elem=elem, size=size, space=space):
                return self.array_decl(scope, name, elem, size, space, s.layout,
                                       s.shares), False
            case ir.TensorView(name=name, storage=storage, elem=elem, layout=layout):
                scope[name] = View(name, self._array(scope, storage), elem, layout, s.offset)
                return (lambda st, m: None), False
            case ir.TileApply():
                return self.tile_apply(s, scope, site), False
            case ir.Ldmatrix():
                return self.ldmatrix(s, scope, site), False
            case ir.Stmatrix():
                return self.stmatrix(s, scope, site), False
            case ir.LaneTile():
                return self.lane_tile(s, scope, site), False
            case ir.Mma():
                return self.mma(s, scope, site), False
            case ir.Wgmma():
                return self.wgmma(s, scope, site), False
            case ir.WgmmaWait():
                return self.wgmma_wait(s, site), False
            case ir.AsyncProxyFence():  # the simulator's shared memory has one proxy
                return (lambda st, m: None), False
            case ir.StageCopy():
                return self.stage_copy(s, scope, path), False
            case ir.CpAsync():
                return self.cp_async(s, scope, site), False
            case ir.MbarrierInit():
                return self.mbarrier_init(s, scope, site), False
            case ir.MbarrierArrive():
                return self.mbarrier_arrive(s, scope, site), False
            case ir.MbarrierWait():
                return self.mbarrier_wait(s, scope, site), False
            case ir.BulkTensorCopy():
                return self.bulk_tensor_copy(s, scope, site), False
            case ir.WarpRoles():
                return self.warp_roles(s, scope, path), any(
                    isinstance(x, ir.Return) for x in walk((s,)))
            case ir.SetMaxNReg():
                return self.set_max_nreg(site), False
            case ir.NamedBarrier():
                return self.named_barrier(s, site), False
            case ir.StageCommit():
                return self.stage_commit(), False
            case ir.StageWait():
                return self.stage_wait(s, site), False
            case ir.FragDecl() | ir.FragFill() | ir.FragLoad() | ir.FragStore() | \
                    ir.FragMulAdd() | ir.FragAdd():
                return self.fragment(s, scope, site), False
        raise AssertionError(s)
