"""Fragment statements compiled to closures (``sim.fragments``): each runs for every subgroup
whose lanes are all active, with operands the subgroup's lanes agree on; independent
multiply-accumulates in a row run as one batched multiply."""

from __future__ import annotations

import numpy as np

from sarek import dtypes, ir
from sarek.errors import LaunchError, OutOfBounds, SubgroupDivergence
from sarek.ir import MemSpace
from sim import arith, fragments
from sim.arith import Value
from sim.compiler import Core
from sim.exec_memory import out_of_bounds
from sim.memory import SharedArray, Site
from sim.state import Frag, Mask, Scope, State, StmtFn


class Fragments(Core):
    def fragment(self, s: ir.Stmt, scope: Scope, site: Site) -> StmtFn:
        """A fragment statement, run by every fully active subgroup."""
        sg = self.geo.subgroup
        if self.geo.block_size % sg:
            raise LaunchError(f"fragment operations need whole subgroups: a block of "
                              f"{self.geo.block_size} invocations is not a multiple of the "
                              f"subgroup size {sg}", site.path, site.line)
        match s:
            case ir.FragDecl(name=name, rows=rows, cols=cols, elem=elem):
                slot = self.frag_slots
                self.frag_slots += 1
                scope[name] = Frag(slot, s)
                shape = (self.n // sg, rows, cols)

                def declare(st: State, m: Mask) -> None:
                    st.frags[slot] = np.full(shape, arith.canary(elem), dtypes.numpy_dtype(elem))

                return declare
            case ir.FragFill(frag=name, value=value):
                frag, fv = self._frag(scope, name), self.expr(value, scope, site)

                def fill(st: State, m: Mask) -> None:
                    groups = self._groups(m, site)
                    data = st.frags[frag.slot]
                    assert data is not None
                    data[groups] = self._per_group(fv(st, m), groups, site)[:, None, None]

                return fill
            case ir.FragLoad() | ir.FragStore():
                return self.frag_memory(s, scope, site)
            case ir.FragMulAdd():
                return self.mul_adds([s], scope, site)
            case ir.FragAdd():
                return self.add(s, scope, site)
        raise AssertionError(s)

    def independent_mul_adds(self, stmts: tuple[ir.Stmt, ...], start: int, scope: Scope
                             ) -> list[ir.FragMulAdd]:
        """The run of ``FragMulAdd`` statements from ``start`` that no statement of the run
        depends on another of (no operand or destination written earlier in the run) and whose
        fragments have one shape and type each: they run as one batched multiply."""
        run: list[ir.FragMulAdd] = []
        written: set[str] = set()
        shapes = None
        for s in stmts[start:]:
            if not isinstance(s, ir.FragMulAdd) or {s.d, s.a, s.b, s.c} & written:
                break
            syms = [scope.get(x) for x in (s.a, s.b, s.c, s.d)]
            if not all(isinstance(x, Frag) for x in syms):
                break
            shape = tuple((x.decl.rows, x.decl.cols, x.decl.elem) for x in syms
                          if isinstance(x, Frag))
            if shapes is not None and shape != shapes:
                break
            shapes = shape
            run.append(s)
            written.add(s.d)
        return run

    def mul_adds(self, run: list[ir.FragMulAdd], scope: Scope, site: Site) -> StmtFn:
        """Independent multiply-accumulates as one: each model computes every output on its
        own, so stacking them changes nothing but the number of NumPy calls."""
        slots = [[self._frag(scope, x).slot for x in (s.d, s.a, s.b, s.c)] for s in run]
        model = self.arith

        def mul_add(st: State, m: Mask) -> None:
            groups = self._groups(m, site)
            frags = st.frags
            every = groups.size == self.n // self.geo.subgroup

            def stacked(which: int) -> np.ndarray:
                parts = [frags[x[which]] for x in slots]
                present = [p if every else p[groups] for p in parts if p is not None]
                return present[0] if len(present) == 1 else np.concatenate(present)

            out = fragments.mul_add(stacked(1), stacked(2), stacked(3), model)
            for n, (d, *_) in enumerate(slots):
                fd = frags[d]
                assert fd is not None
                fd[groups] = out[n * groups.size:(n + 1) * groups.size]

        return mul_add

    def add(self, s: ir.FragAdd, scope: Scope, site: Site) -> StmtFn:
        """``d = a + b`` (``a - b`` with ``subtract``) element by element: NumPy's add and
        subtract in the elements' own dtype round f32 and f64 once to nearest even and wrap
        integers, as the IR's scalar add and subtract do."""
        d, a, b = (self._frag(scope, x).slot for x in (s.d, s.a, s.b))
        op = np.subtract if s.subtract else np.add

        def add(st: State, m: Mask) -> None:
            groups = self._groups(m, site)
            fd, fa, fb = st.frags[d], st.frags[a], st.frags[b]
            assert fd is not None and fa is not None and fb is not None
            fd[groups] = op(fa[groups], fb[groups])

        return add

    def frag_memory(self, s: ir.FragLoad | ir.FragStore, scope: Scope, site: Site) -> StmtFn:
        frag, arr = self._frag(scope, s.frag), self._array(scope, s.array)
        f_off, f_stride = self.expr(s.offset, scope, site), self.expr(s.stride, scope, site)
        rows, cols = frag.decl.rows, frag.decl.cols
        i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
        row_major = s.layout is ir.FragLayout.ROW
        sg, per_block = self.geo.subgroup, self.geo.block_size // self.geo.subgroup
        # Each element counts, for the race detector, as accessed by lane (i*cols + j) % sg.
        lane_of = ((i * cols + j) % sg)[None]
        load = isinstance(s, ir.FragLoad)

        def run(st: State, m: Mask) -> None:
            groups = self._groups(m, site)
            off = self._per_group(f_off(st, m), groups, site)[:, None, None]
            stride = self._per_group(f_stride(st, m), groups, site)[:, None, None]
            index = off + (i * stride + j if row_major else j * stride + i)
            bad = (index < 0) | (index >= arr.size)
            if bad.any():
                g = int(groups[np.flatnonzero(bad.any(axis=(1, 2)))[0]])
                self._fail(OutOfBounds, out_of_bounds(arr, int(index[bad][0])) + " (fragment "
                           f"{s.frag!r})", site, self._lanes_of(g))
            data = st.frags[frag.slot]
            assert data is not None
            if arr.space is MemSpace.GLOBAL:
                target = arr.data
                assert target is not None
                flat = index
            else:
                mem = st.arrays[arr.slot]
                assert mem is not None
                target = mem.data
                flat = (groups // per_block * arr.pitch)[:, None, None] + index
                if isinstance(mem, SharedArray):
                    threads = np.broadcast_to((groups % per_block * sg)[:, None, None]
                                              + lane_of, flat.shape)
                    record = mem.read if load else mem.write
                    record(flat.ravel(), threads.ravel().astype(np.int32), None, site)
            if load:
                data[groups] = target[flat]
            else:
                target[flat] = data[groups]

        return run

    def _groups(self, m: Mask, site: Site) -> np.ndarray:
        """The subgroups (global indices) whose lanes are all active; SubgroupDivergence when
        one has only some."""
        sg = self.geo.subgroup
        if m is None:
            return np.arange(self.n // sg)
        lanes = self.spread(m)
        active = np.count_nonzero(lanes.reshape(-1, sg), axis=1)
        partial = np.flatnonzero((active > 0) & (active < sg))
        if partial.size:
            g = int(partial[0])
            culprits = np.zeros(self.n, bool)
            culprits[g * sg:(g + 1) * sg] = lanes[g * sg:(g + 1) * sg]
            self._fail(SubgroupDivergence, f"{int(active[g])} of the {sg} lanes of a subgroup "
                       "reach a fragment operation; all must", site, culprits)
        return np.flatnonzero(active == sg)

    def _per_group(self, v: Value, groups: np.ndarray, site: Site) -> np.ndarray:
        """The value each subgroup of ``groups`` agrees on; SubgroupDivergence when its lanes
        hold different values."""
        if not isinstance(v, np.ndarray):
            return np.full(groups.size, v)
        per_lane: np.ndarray = self.spread(v).reshape(-1, self.geo.subgroup)[groups]
        differs = (per_lane != per_lane[:, :1]).any(axis=1)
        if differs.any():
            g = int(groups[np.flatnonzero(differs)[0]])
            self._fail(SubgroupDivergence, "an operand of a fragment operation differs "
                       "between the lanes of a subgroup", site, self._lanes_of(g))
        return per_lane[:, 0]

    def _lanes_of(self, group: int) -> np.ndarray:
        """The invocations of subgroup ``group`` as a mask over the launch."""
        sg = self.geo.subgroup
        lanes = np.zeros(self.n, bool)
        lanes[group * sg:(group + 1) * sg] = True
        return lanes
