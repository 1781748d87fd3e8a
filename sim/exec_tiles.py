"""Warp-level statements compiled to closures: tile patterns (``TileApply``, run as the
``LaneTile`` CUDA's lowering makes of them) and the lane-explicit ``Ldmatrix``, ``Stmatrix``,
``Mma`` and ``Wgmma`` of a lowered kernel, all through ``sim.lanes``, every warp of the launch
at once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sarek import atoms, dtypes, ir, tile
from sarek.atoms import Swizzle
from sarek.errors import LaunchError, OutOfBounds, SubgroupDivergence
from sim import lanes
from sim.compiler import Core
from sim.memory import LocalArray, SharedArray, Site
from sim.state import Array, ExprFn, Mask, Scope, State, StmtFn, View


class Tiles(Core):
    def tile_apply(self, s: ir.TileApply, scope: Scope, site: Site) -> StmtFn:
        """A warp-level ldmatrix/stmatrix of an unlowered kernel: run lane by lane as CUDA's
        lowering writes it (``sarek.tile.lane_tile``); the contract was checked with the
        kernel's well-formedness."""
        return self.lane_tile(tile.lane_tile(s, self._placed(scope, s.dst),
                                             self._placed(scope, s.src)), scope, site)

    def _placed(self, scope: Scope, name: str) -> tile.Placed:
        sym = scope[name]
        if isinstance(sym, View):
            arr, layout, offset = sym.storage, sym.layout, sym.offset
        else:
            assert isinstance(sym, Array) and sym.layout is not None
            arr, layout, offset = sym, sym.layout, 0
        if dtypes.numpy_dtype(arr.elem).itemsize > 4:  # registers are 32-bit words
            raise tile.ContractError(f"tile operand {name!r} views {arr.elem} storage; tile "
                                     "patterns take storage of 32-bit or narrower elements")
        return tile.Placed(arr.name, layout, offset)

    def lane_tile(self, s: ir.LaneTile, scope: Scope, site: Site) -> StmtFn:
        """A tile pattern lowered lane by lane: its instructions in order."""
        lanes.check_geometry(self.geo, site)
        moves = [self.ldmatrix(m, scope, site) if isinstance(m, ir.Ldmatrix)
                 else self.stmatrix(m, scope, site) for m in s.moves]

        def run(st: State, m: Mask) -> None:
            for move in moves:
                move(st, m)

        return run

    def _warps(self, m: Mask, site: Site) -> np.ndarray:
        lanes.check_geometry(self.geo, site)
        return lanes.full_warps(None if m is None else self.spread(m), self.n, site)

    def _addresses(self, s: ir.Ldmatrix | ir.Stmatrix, shared: Array, scope: Scope,
                   site: Site) -> Callable[[State, Mask], np.ndarray]:
        """Each invocation's element index into the shared array: ``s.address`` evaluated, or
        the row ``s.rows`` maps for the lane (``sim.lanes.provided``)."""
        if s.rows is not None:
            per_word = 4 // dtypes.numpy_dtype(shared.elem).itemsize
            fixed = lanes.provided(s.rows, s.count, self.n, per_word)
            return lambda st, m: fixed
        assert s.address is not None
        f_address = self.expr(s.address, scope, site)
        return lambda st, m: np.asarray(self.spread(f_address(st, m)))

    def ldmatrix(self, s: ir.Ldmatrix, scope: Scope, site: Site) -> StmtFn:
        """A warp's ldmatrix from the rows its lanes address."""
        return self._move(s, s.dst, s.src, lanes.ldmatrix, "an ldmatrix", scope, site)

    def stmatrix(self, s: ir.Stmatrix, scope: Scope, site: Site) -> StmtFn:
        """A warp's stmatrix to the rows its lanes address."""
        return self._move(s, s.src, s.dst, lanes.stmatrix, "an stmatrix", scope, site)

    def _move(self, s: ir.Ldmatrix | ir.Stmatrix, registers: str, rows: str,
              move: Callable[..., np.ndarray | None], what: str, scope: Scope,
              site: Site) -> StmtFn:
        """A warp's move between the registers ``registers`` and the shared rows of ``rows``
        its lanes address (``sim.lanes.ldmatrix`` or ``stmatrix``)."""
        local_array, shared = self._array(scope, registers), self._array(scope, rows)
        address_of = self._addresses(s, shared, scope, site)
        slots = s.slots if s.slots is not None else tuple(s.offset + j for j in range(s.count))
        geo = self.geo

        def run(st: State, m: Mask) -> None:
            warps = self._warps(m, site)
            self._registers_free(st, local_array, m, site)
            address = address_of(st, m)
            local, smem = st.arrays[local_array.slot], st.arrays[shared.slot]
            assert isinstance(local, LocalArray) and isinstance(smem, SharedArray)
            bad = move(s.count, s.trans, address, smem, local, local_array.size, slots,
                       warps, geo, site)
            if bad is not None:
                self._bad_rows(what, shared, address, bad, site)

        return run

    def _bad_rows(self, what: str, shared: Array, address: np.ndarray, bad: np.ndarray,
                  site: Site) -> None:
        mask = np.zeros(self.n, bool)
        mask[bad] = True
        self._fail(OutOfBounds, f"{what} row of {shared.name!r} is not 16 aligned bytes inside "
                   f"its {shared.size} elements (element index {int(address[bad[0]])})",
                   site, mask)

    def wgmma(self, s: ir.Wgmma, scope: Scope, site: Site) -> StmtFn:
        """A warpgroup's wgmma: each warp's accumulator from its lanes' registers, A from them
        too or from shared memory, the block's B from shared memory (``ir.Wgmma``)."""
        a, d, b = (self._array(scope, name) for name in (s.a, s.d, s.b))
        f_b = self.expr(s.b_index, scope, site)
        f_a = None if s.a_index is None else self.expr(s.a_index, scope, site)
        geo, model, per = self.geo, self.arith, atoms.WGMMA.warps
        if geo.block_size % lanes.WARPGROUP:
            raise LaunchError(f"wgmma is issued by whole warpgroups of {lanes.WARPGROUP} "
                              f"invocations; the launch's blocks have {geo.block_size}",
                              site.path, site.line)
        # B (k x n) in MN-major atoms (sarek.atoms): atoms core_k apart along k, core_n along
        # n. A (m x k) K-major in 128-byte swizzle atoms, a_core_m apart along m; the swizzle
        # applies to the whole index (the atoms are aligned to their size). 8-bit A and B
        # K-major: in core matrices of 8 rows of 16 k (one core matrix apart along k), or
        # with swizzle in 128-byte swizzle atoms of 8 rows of 128 k, the swizzle applied to
        # the whole index of either.
        depth = atoms.WGMMA.depth(s.elem)
        k, c = np.arange(depth)[:, None], np.arange(s.n)[None, :]
        m, ka = np.arange(atoms.WGMMA.m)[:, None], np.arange(depth)[None, :]
        byte = s.elem.bits == 8
        swizzles: dict[str, Swizzle | None] = {"A": None, "B": None}
        if byte:
            atom8 = atoms.GMMA_K_SW128_8BIT if s.swizzle else atoms.GMMA_K_INTER_8BIT
            rows8, row8 = atom8.shape

            def k_major(x: np.ndarray, kk: np.ndarray, core: int, core_k: int) -> np.ndarray:
                if s.swizzle:  # before the swizzle
                    return np.asarray((x // rows8) * core + (x % rows8) * row8 + kk)
                return np.asarray((x // rows8) * core + (kk // row8) * core_k
                                  + atom8.offset(x % rows8, kk % row8))

            b_offsets = k_major(c, k, s.core_n, s.core_k)
            a_offsets = k_major(m, ka, s.a_core_m, atoms.GMMA_K_INTER_8BIT.bytes)
            if s.swizzle:
                assert atom8.swizzle is not None
                swizzles = dict.fromkeys(swizzles, atom8.swizzle.recast(atom8.element_bytes))
            a_atom = atom8
        else:
            b_atom = atoms.GMMA_MN_SW128 if s.swizzle else atoms.GMMA_MN_INTER
            along_n, along_k = b_atom.shape
            b_offsets = (k // along_k) * s.core_k + (c // along_n) * s.core_n + np.asarray(
                b_atom.offset(c % along_n, k % along_k))
            a_atom = atoms.GMMA_K_SW128
            assert a_atom.swizzle is not None
            swizzles["A"] = a_atom.swizzle.recast(a_atom.element_bytes)
            a_offsets = (m // a_atom.shape[0]) * s.a_core_m + \
                (m % a_atom.shape[0]) * a_atom.stride[0] + ka * a_atom.stride[1]

        def operand(st: State, m: Mask, f_index: ExprFn, arr: Array, offsets: np.ndarray,
                    warps: np.ndarray, use: str) -> np.ndarray:
            """``[warpgroup, ...offsets]``: the warpgroups' values of the shared operand whose
            start ``f_index`` gives, at ``offsets`` from it."""
            index = np.broadcast_to(self.spread(f_index(st, m)), (self.n,))
            first = warps[::per] * lanes.WARP  # each warpgroup's lane 0
            each = index[lanes.warp_lanes(warps)].reshape(len(first), -1)
            if (each != each[:, :1]).any():
                self._fail(SubgroupDivergence, f"wgmma's {use} is one for the warpgroup; its "
                           "warps name different ones", site, None)
            within = index[first].astype(np.int64).reshape(-1, *[1] * offsets.ndim) + offsets
            swizzle = swizzles[use]
            if swizzle is not None:
                if (index[first] % a_atom.row > a_atom.row - depth).any():
                    self._fail(OutOfBounds, f"wgmma's {use} rows of {depth} elements cross a "
                               f"128-byte row of {arr.name!r}'s swizzle atoms", site, None)
                within = np.asarray(swizzle(within))
            if within.min() < 0 or within.max() >= arr.size:
                self._fail(OutOfBounds, f"wgmma's {use} lies outside {arr.name!r} ({arr.size} "
                           "elements)", site, None)
            smem = st.arrays[arr.slot]
            assert isinstance(smem, SharedArray)
            blocks = geo.lane_block[first].astype(np.int64)
            flat = (blocks * arr.pitch).reshape(within.shape[:1] + (1,) * offsets.ndim) + within
            # each warp's lane 0 reads the operand (the four warps of a warpgroup share it)
            threads = np.repeat(geo.lane_thread[warps * lanes.WARP].astype(np.int32),
                                flat[0].size)
            smem.read(np.repeat(flat, per, axis=0).ravel(), threads, None, site)
            # read until the wait that retires the warpgroup's open group
            smem.hold(flat, geo.lane_thread[first].astype(np.int64) // lanes.WARPGROUP, first,
                      self._wgmma_groups(st)[first])
            return np.ascontiguousarray(smem.data[flat]).view(dtypes.numpy_dtype(s.elem))

        def run(st: State, m: Mask) -> None:
            warps = self._warps(m, site)
            groups = warps.reshape(-1, per) if warps.size % per == 0 else None
            if groups is None or (groups[:, 0] % per).any() or \
                    (groups != groups[:, :1] + np.arange(per)).any():
                self._fail(SubgroupDivergence, "wgmma needs every warp of the warpgroup "
                           "active", site, m)
            values = operand(st, m, f_b, b, b_offsets, warps, "B")
            if f_a is None:
                local_a = st.arrays[a.slot]
                assert isinstance(local_a, LocalArray)
                a_tile = lanes.a_registers(s.elem, (local_a, a.size), warps,
                                           atoms.WGMMA.a_layout(s.elem))
            else:
                a_tile = operand(st, m, f_a, a, a_offsets, warps, "A")
            local_d = st.arrays[d.slot]
            assert isinstance(local_d, LocalArray)
            lanes.wgmma(model, a_tile, (local_d, d.size), values, s.n, warps)
            issuing = lanes.warp_lanes(warps).ravel()
            groups = self._wgmma_groups(st)[issuing]
            local_d.hold(issuing, groups)
            if f_a is None:
                local_a = st.arrays[a.slot]
                assert isinstance(local_a, LocalArray)
                local_a.hold(issuing, groups)

        return run

    def wgmma_wait(self, s: ir.WgmmaWait, site: Site) -> StmtFn:
        """Commits each active invocation's open ``wgmma`` group and retires every group but
        the ``pending`` newest: their shared operands (``SharedArray.retire``) and registers
        are free again."""
        def run(st: State, m: Mask) -> None:
            committed = self._wgmma_groups(st)
            waiting = None if m is None else self.spread(m)
            if waiting is None:
                committed += 1
            else:
                committed[waiting] += 1
            for mem in st.arrays:
                if isinstance(mem, SharedArray):
                    mem.retire(committed, s.pending, waiting, site)
                elif isinstance(mem, LocalArray):
                    mem.retire(committed, s.pending, waiting)

        return run

    def mma(self, s: ir.Mma, scope: Scope, site: Site) -> StmtFn:
        """A warp's mma.sync over its lanes' registers."""
        facts, model = atoms.MMA[s.atom], self.arith
        operands = {use: (self._array(scope, name), first) for use, name, first in (
            ("a", s.a, s.a_offset), ("b", s.b, s.b_offset), ("c", s.c, s.c_offset),
            ("d", s.d, s.d_offset))}

        def run(st: State, m: Mask) -> None:
            warps = self._warps(m, site)
            registers = {}
            for use, (arr, first) in operands.items():
                self._registers_free(st, arr, m, site)
                local = st.arrays[arr.slot]
                assert isinstance(local, LocalArray)
                registers[use] = (local, arr.size, first)
            lanes.mma(facts, model, registers, warps)

        return run
