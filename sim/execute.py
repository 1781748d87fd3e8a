"""The kernel compiled to nested closures and run over every invocation of a launch at once.

Compiling walks the IR once: names are resolved to slots, statement paths and constants are
computed, and each node becomes a closure ``fn(state, mask)``. Running calls the closures;
values are arrays of one element per invocation or NumPy scalars when uniform. ``mask`` is
the set of active invocations: None means all of them and takes no masking at all, otherwise
a bool array with at least one True (a statement with no active invocation is skipped).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, TypeAlias

import numpy as np

from sarek import atoms, dtypes, ir, tile
from sarek.errors import (
    BarrierDivergence,
    IRError,
    LaunchError,
    LimitError,
    OutOfBounds,
    SimError,
    SubgroupDivergence,
)
from sarek.ir import BinOp, ElemType, MathFn, MemSpace
from sarek.layout import TileLayout
from sim import arith, fragments, lanes
from sim import tile as tile_sim
from sim.arith import Value
from sim.launch import Geometry, Limits
from sim.memory import LocalArray, SharedArray, Site

Mask: TypeAlias = np.ndarray | None
MAX_WHILE_TRIPS = 1 << 20
"""Trips after which a loop (``while`` or ``for``) counts as never ending (a ``LimitError``)
unless ``Limits.loop_trips`` says otherwise."""
ExprFn: TypeAlias = Callable[["State", Mask], Value]
StmtFn: TypeAlias = Callable[["State", Mask], None]


class State:
    """What changes while a launch runs: scalar variables, declared arrays, returned
    invocations."""

    def __init__(self, slots: int, array_slots: int, frag_slots: int = 0) -> None:
        self.env: list[Value] = [None] * slots
        self.frags: list[np.ndarray | None] = [None] * frag_slots  # [subgroup, rows, cols]
        self.arrays: list[SharedArray | LocalArray | None] = [None] * array_slots
        self.shared: dict[int, SharedArray] = {}  # by slot: the arrays a barrier resets
        self.alive: Mask = None  # invocations that have not returned (None: all)
        self.trips = 0  # loop trips run so far by the whole launch (Limits.trips)


@dataclass(frozen=True)
class _Scalar:
    slot: int
    type: ElemType


@dataclass(frozen=True)
class _Array:
    slot: int  # into State.arrays; -1 for parameters, whose data the closures hold
    name: str
    elem: ElemType
    space: MemSpace
    size: int
    data: np.ndarray | None = None  # a parameter's array
    layout: TileLayout | None = None  # arrays declared as tensors


@dataclass(frozen=True)
class _View:
    name: str
    storage: _Array
    elem: ElemType
    layout: TileLayout
    offset: int


@dataclass(frozen=True)
class _Frag:
    slot: int
    decl: ir.FragDecl


_Symbol: TypeAlias = _Scalar | _Array | _View | _Frag
_Scope: TypeAlias = ChainMap[str, _Symbol]


def compile_kernel(kernel: ir.Kernel, geo: Geometry, arrays: dict[str, np.ndarray],
                   scalars: dict[str, np.generic], arith: fragments.Model = "sequential",
                   limits: Limits | None = None) -> Callable[[], None]:
    """The kernel ready to run on ``geo`` over the (already copied) ``arrays``; calling the
    result runs it, updating ``arrays`` in place. ``arith`` is the arithmetic model of float
    fragment multiply-accumulates; ``limits`` caps the loop trips (``Limits.loop_trips`` per
    loop, ``Limits.trips`` for the launch)."""
    return _Compiler(kernel, geo, arith, limits or Limits()).program(arrays, scalars)


class _Compiler:
    def __init__(self, kernel: ir.Kernel, geo: Geometry,
                 arith: fragments.Model = "sequential", limits: Limits | None = None) -> None:
        self.kernel, self.geo, self.n = kernel, geo, geo.invocations
        self.arith = arith
        self.limits = limits or Limits()
        self.slots = 0
        self.array_slots = 0
        self.frag_slots = 0
        self._bases: dict[tuple[MemSpace, int], Value] = {}
        self._thread_ids: np.ndarray | None = None

    def program(self, arrays: dict[str, np.ndarray], scalars: dict[str, np.generic]
                ) -> Callable[[], None]:
        scope: _Scope = ChainMap()
        initial: list[tuple[int, np.generic]] = []
        for p in self.kernel.params:
            if isinstance(p, ir.ArrayParam):
                data = arrays[p.name]
                scope[p.name] = _Array(-1, p.name, p.elem, MemSpace.GLOBAL, data.size, data)
            else:
                scope[p.name] = sym = _Scalar(self._slot(), p.elem)
                initial.append((sym.slot, scalars[p.name]))
        body, _ = self.block(self.kernel.body, scope.new_child(), "body")

        def run() -> None:
            state = State(self.slots, self.array_slots, self.frag_slots)
            for slot, value in initial:
                state.env[slot] = value
            with np.errstate(all="ignore"):
                body(state, None)

        return run

    # ------------------------------------------------------------------ helpers

    def _slot(self) -> int:
        self.slots += 1
        return self.slots - 1

    def _ill_formed(self, site: Site, reason: str) -> NoReturn:
        raise IRError(self.kernel.name, [f"{site.path}: {reason}"])

    def _lookup(self, scope: _Scope, name: str, site: Site) -> _Symbol:
        sym = scope.get(name)
        if sym is None:
            self._ill_formed(site, f"undefined name {name!r}")
        return sym

    def _scalar(self, scope: _Scope, name: str, site: Site) -> _Scalar:
        sym = self._lookup(scope, name, site)
        if not isinstance(sym, _Scalar):
            self._ill_formed(site, f"{name!r} is an array, not a scalar")
        return sym

    def _array(self, scope: _Scope, name: str, site: Site) -> _Array:
        sym = self._lookup(scope, name, site)
        if not isinstance(sym, _Array):
            self._ill_formed(site, f"{name!r} is not an array")
        return sym

    def _narrow(self, mask: Mask, cond: Value) -> tuple[Mask, bool]:
        """The active invocations of ``mask`` where ``cond`` holds, and whether there is any."""
        if not isinstance(cond, np.ndarray):
            return mask, bool(cond)
        if mask is not None:
            cond = mask & cond
        count = int(np.count_nonzero(cond))
        return (None if count == self.n else cond), count > 0

    def _fail(self, error: type[SimError], reason: str, site: Site, lanes: Mask) -> NoReturn:
        """Raises ``error`` naming the first invocations of ``lanes`` (None: all)."""
        where = np.arange(min(8, self.n)) if lanes is None else np.flatnonzero(lanes)
        raise error(reason, site.path, site.line, self.geo.describe(where))

    # ------------------------------------------------------------------ expressions

    def expr(self, e: ir.Expr, scope: _Scope, site: Site) -> ExprFn:
        match e:
            case ir.Const(value=value, type=t):
                try:
                    c = arith.constant(value, t)
                except ValueError as err:
                    self._ill_formed(site, str(err))
                return lambda st, m: c
            case ir.Var(name=name):
                slot = self._scalar(scope, name, site).slot
                return lambda st, m: st.env[slot]
            case ir.BuiltinValue(which=which):
                b = self.geo.builtin(which)
                return lambda st, m: b
            case ir.Unary(op=op, x=x):
                f, fx = arith.UNARY[op], self.expr(x, scope, site)
                return lambda st, m: f(fx(st, m))
            case ir.Binary():
                return self.binary(e, scope, site)
            case ir.Cast(x=x, type=dst):
                fx, src = self.expr(x, scope, site), x.type
                return lambda st, m: arith.convert(fx(st, m), src, dst)
            case ir.Bitcast(x=x, type=dst):
                fx, as_type = self.expr(x, scope, site), dtypes.numpy_dtype(dst)
                return lambda st, m: arith.reinterpret(fx(st, m), as_type)
            case ir.Load(array=name, index=index):
                return self.load(self._array(scope, name, site), self.expr(index, scope, site),
                                 site)
            case ir.Select(cond=cond, a=a, b=b):
                return self.select(*(self.expr(x, scope, site) for x in (cond, a, b)))
            case ir.Call(fn=fn, args=args, type=t):
                return self.call(fn, t, [self.expr(x, scope, site) for x in args])
        raise AssertionError(e)

    def binary(self, e: ir.Binary, scope: _Scope, site: Site) -> ExprFn:
        fa, fb = self.expr(e.a, scope, site), self.expr(e.b, scope, site)
        op, t = e.op, e.a.type
        if op is BinOp.LAND or op is BinOp.LOR:
            return self.logical(op, fa, fb)
        if op in arith.SIMPLE_BINARY or (t.is_float and op in arith.FLOAT_BINARY):
            f = arith.SIMPLE_BINARY.get(op) or arith.FLOAT_BINARY[op]
            # A constant operand is captured: the hot loops of kernels are full of them.
            if isinstance(e.b, ir.Const):
                cb = arith.constant(e.b.value, e.b.type)
                return lambda st, m: f(fa(st, m), cb)
            if isinstance(e.a, ir.Const):
                ca = arith.constant(e.a.value, e.a.type)
                return lambda st, m: f(ca, fb(st, m))
            return lambda st, m: f(fa(st, m), fb(st, m))
        if op is BinOp.DIV or op is BinOp.REM:
            return self.int_division(op, t, fa, fb, site)
        return self.shift(op, t, fa, fb, site)

    def logical(self, op: BinOp, fa: ExprFn, fb: ExprFn) -> ExprFn:
        """Short-circuit ``and``/``or``: ``b`` runs only where ``a`` does not decide."""
        decides = op is BinOp.LOR  # the value of ``a`` that makes ``b`` irrelevant

        def run(st: State, m: Mask) -> Value:
            a = fa(st, m)
            if not isinstance(a, np.ndarray):
                return a if bool(a) == decides else fb(st, m)
            rest, any_left = self._narrow(m, ~a if decides else a)
            if not any_left:
                return a
            return (a | fb(st, rest)) if decides else (a & fb(st, rest))

        return run

    def select(self, fc: ExprFn, fa: ExprFn, fb: ExprFn) -> ExprFn:
        def run(st: State, m: Mask) -> Value:
            c = fc(st, m)
            if not isinstance(c, np.ndarray):
                return fa(st, m) if c else fb(st, m)
            on_a, any_a = self._narrow(m, c)
            on_b, any_b = self._narrow(m, ~c)
            if not any_b:
                return fa(st, on_a)
            if not any_a:
                return fb(st, on_b)
            return np.where(c, fa(st, on_a), fb(st, on_b))

        return run

    def int_division(self, op: BinOp, t: ElemType, fa: ExprFn, fb: ExprFn, site: Site
                     ) -> ExprFn:
        f = arith.int_div if op is BinOp.DIV else np.fmod
        reason = f"{t} {'division' if op is BinOp.DIV else 'remainder'} by zero"

        def run(st: State, m: Mask) -> Value:
            a, b = fa(st, m), fb(st, m)
            zero = b == 0
            if isinstance(zero, np.ndarray):
                if zero.any():
                    bad = zero if m is None else zero & m
                    if bad.any():
                        self._fail(LaunchError, reason, site, bad)
            elif zero:
                self._fail(LaunchError, reason, site, m)
            return f(a, b)

        return run

    def shift(self, op: BinOp, t: ElemType, fa: ExprFn, fb: ExprFn, site: Site) -> ExprFn:
        f = arith.shl if op is BinOp.SHL else arith.shr

        def run(st: State, m: Mask) -> Value:
            a, b = fa(st, m), fb(st, m)
            ok = arith.shift_amount_ok(b, t)
            if isinstance(ok, np.ndarray):
                bad = ~ok if m is None else ~ok & m
                if bad.any():
                    first = int(b[np.flatnonzero(bad)[0]])
                    self._fail(LaunchError, f"{op} of {t} by {first}: the amount must lie in "
                               f"[0, {t.bits})", site, bad)
            elif not ok:
                self._fail(LaunchError, f"{op} of {t} by {int(b)}: the amount must lie in "
                           f"[0, {t.bits})", site, m)
            return f(a, b)

        return run

    def call(self, fn: MathFn, t: ElemType, fargs: list[ExprFn]) -> ExprFn:
        if fn is MathFn.FMA and t is ElemType.F64:
            fa, fb, fc = fargs
            return lambda st, m: arith.fma_f64(fa(st, m), fb(st, m), fc(st, m), m)
        f = arith.math_fn(fn, t)
        if len(fargs) == 1:
            (fx,) = fargs
            return lambda st, m: f(fx(st, m))
        return lambda st, m: f(*(g(st, m) for g in fargs))

    # ------------------------------------------------------------------ memory

    def _base(self, space: MemSpace, size: int) -> Value:
        """The flat offset of each invocation's copy of a ``size``-element array in ``space``."""
        key = (space, size)
        if key not in self._bases:
            if space is MemSpace.SHARED:
                self._bases[key] = (np.int64(0) if self.geo.num_blocks == 1
                                    else self.geo.lane_block * size)
            else:
                self._bases[key] = np.arange(self.n, dtype=np.int64) * size
        return self._bases[key]

    def _threads(self) -> np.ndarray:
        """The linear thread index of every invocation, as the race detector records it."""
        if self._thread_ids is None:
            self._thread_ids = self.geo.lane_thread.astype(np.int32)
        return self._thread_ids

    def _checked(self, index: Value, arr: _Array, m: Mask, site: Site) -> Value:
        """``index`` after the bounds check of the active invocations, safe to gather with:
        the inactive ones that are out of bounds read element 0 instead."""
        size = arr.size
        if isinstance(index, np.ndarray):
            if size and index.min() >= 0 and index.max() < size:
                return index if index.dtype != np.uint64 else index.astype(np.int64)
            outside = (index < 0) | (index >= size)
            bad = outside if m is None else outside & m
            if bad.any():
                value = int(index[np.flatnonzero(bad)[0]])
                self._fail(OutOfBounds, _oob(arr, value), site, bad)
            return np.where(outside, 0, index).astype(np.int64)
        if not 0 <= index < size:
            self._fail(OutOfBounds, _oob(arr, int(index)), site, m)
        return np.int64(index)

    def load(self, arr: _Array, findex: ExprFn, site: Site) -> ExprFn:
        if arr.space is MemSpace.GLOBAL:
            data = arr.data
            assert data is not None
            return lambda st, m: data.take(self._checked(findex(st, m), arr, m, site))
        base, slot = self._base(arr.space, arr.size), arr.slot
        threads = self._threads()

        def run(st: State, m: Mask) -> Value:
            flat = base + self._checked(findex(st, m), arr, m, site)
            mem = st.arrays[slot]
            assert mem is not None
            if isinstance(mem, SharedArray):
                lanes = None if m is None else np.flatnonzero(m)
                mem.read(*_per_lane(flat, threads, lanes, self.n), lanes, site)
            return mem.data.take(flat)

        return run

    # ------------------------------------------------------------------ statements

    def block(self, stmts: tuple[ir.Stmt, ...], scope: _Scope, path: str
              ) -> tuple[StmtFn, bool]:
        """A statement list and whether it may return. After a statement that may return,
        the invocations that did are dropped from the rest of the list."""
        compiled: list[tuple[StmtFn, bool]] = []
        i = 0
        while i < len(stmts):
            run = self._independent_mul_adds(stmts, i, scope)
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

    def stmt(self, s: ir.Stmt, scope: _Scope, path: str) -> tuple[StmtFn, bool]:
        site = Site(path, s.line)
        match s:
            case ir.Let(name=name, type=t, value=value):
                fv = self.expr(value, scope, site)
                slot = self._slot()
                scope[name] = _Scalar(slot, t)

                def let(st: State, m: Mask) -> None:
                    st.env[slot] = fv(st, m)

                return let, False
            case ir.Assign(name=name, value=value):
                fv, slot = self.expr(value, scope, site), self._scalar(scope, name, site).slot

                def assign(st: State, m: Mask) -> None:
                    v = fv(st, m)
                    st.env[slot] = v if m is None else np.where(m, v, st.env[slot])

                return assign, False
            case ir.Store(array=name, index=index, value=value):
                arr = self._array(scope, name, site)
                return self.store(arr, self.expr(index, scope, site),
                                  self.expr(value, scope, site), site), False
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
                return self.array_decl(scope, name, elem, size, space, site, s.layout), False
            case ir.TensorView(name=name, storage=storage, elem=elem, layout=layout):
                scope[name] = _View(name, self._array(scope, storage, site), elem, layout,
                                    s.offset)
                return (lambda st, m: None), False
            case ir.TileApply():
                return self.tile_apply(s, scope, site), False
            case ir.Ldmatrix():
                return self.ldmatrix(s, scope, site), False
            case ir.Mma():
                return self.mma(s, scope, site), False
            case ir.FragDecl() | ir.FragFill() | ir.FragLoad() | ir.FragStore() | \
                    ir.FragMulAdd():
                return self.fragment(s, scope, site), False
            case _:
                raise LaunchError(f"the simulator does not execute {s.kind} statements yet",
                                  path, s.line)

    def store(self, arr: _Array, findex: ExprFn, fvalue: ExprFn, site: Site) -> StmtFn:
        base = None if arr.space is MemSpace.GLOBAL else self._base(arr.space, arr.size)
        threads = self._threads()

        def run(st: State, m: Mask) -> None:
            index = self._checked(findex(st, m), arr, m, site)
            value = fvalue(st, m)
            lanes = None if m is None else np.flatnonzero(m)
            if base is None:
                data = arr.data
                assert data is not None
            else:
                mem = st.arrays[arr.slot]
                assert mem is not None
                data, index = mem.data, base + index
                if isinstance(mem, SharedArray):
                    mem.write(*_per_lane(index, threads, lanes, self.n), lanes, site)
            if lanes is not None:
                index = index[lanes] if isinstance(index, np.ndarray) else index
                value = value[lanes] if isinstance(value, np.ndarray) else value
            if not isinstance(index, np.ndarray) and isinstance(value, np.ndarray):
                value = value[-1]  # one element written by all: the last invocation's value
            data[index] = value

        return run

    def array_decl(self, scope: _Scope, name: str, elem: ElemType, size: int,
                   space: MemSpace, site: Site, layout: TileLayout | None = None) -> StmtFn:
        if space is MemSpace.GLOBAL:
            self._ill_formed(site, f"array {name!r} cannot be declared in global memory")
        slot = self.array_slots
        self.array_slots += 1
        scope[name] = _Array(slot, name, elem, space, size, layout=layout)
        geo = self.geo

        def declare(st: State, m: Mask) -> None:
            if space is MemSpace.SHARED:
                st.arrays[slot] = st.shared[slot] = SharedArray(name, elem, size, geo)
            else:
                st.arrays[slot] = LocalArray(elem, size, geo)

        return declare

    def tile_apply(self, s: ir.TileApply, scope: _Scope, site: Site) -> StmtFn:
        """A warp-level ldmatrix/stmatrix (``sim.tile``); the contract was checked with the
        kernel's well-formedness."""
        op = tile.parse_op(s.op)
        dst, src = (self._tile_operand(scope, name, site) for name in (s.dst, s.src))
        registers, shared = (dst, src) if op.kind == "ldmatrix" else (src, dst)
        tile_sim.check_geometry(self.geo, site)
        geo, n = self.geo, self.n

        def run(st: State, m: Mask) -> None:
            warps = tile_sim.full_warps(m, n, site)
            local, smem = st.arrays[registers.slot], st.arrays[shared.slot]
            assert isinstance(local, LocalArray) and isinstance(smem, SharedArray)
            tile_sim.run(op, registers, shared, local, smem, warps, geo, site)

        return run

    # ------------------------------------------------------------------ lane-explicit

    def _warps(self, m: Mask, site: Site) -> np.ndarray:
        tile_sim.check_geometry(self.geo, site)
        return tile_sim.full_warps(m, self.n, site)

    def ldmatrix(self, s: ir.Ldmatrix, scope: _Scope, site: Site) -> StmtFn:
        """A warp's ldmatrix from the rows its lanes address (``sim.lanes``)."""
        dst, src = self._array(scope, s.dst, site), self._array(scope, s.src, site)
        f_address = self.expr(s.address, scope, site)
        n, geo = self.n, self.geo

        def run(st: State, m: Mask) -> None:
            warps = self._warps(m, site)
            address = np.broadcast_to(f_address(st, m), (n,))
            local, smem = st.arrays[dst.slot], st.arrays[src.slot]
            assert isinstance(local, LocalArray) and isinstance(smem, SharedArray)
            bad = lanes.ldmatrix(s.count, s.trans, address, smem, local, dst.size, s.offset,
                                 warps, geo, site)
            if bad is not None:
                mask = np.zeros(n, bool)
                mask[bad] = True
                self._fail(OutOfBounds, f"an ldmatrix row of {src.name!r} is not 16 aligned "
                           f"bytes inside its {src.size} elements (element index "
                           f"{int(address[bad[0]])})", site, mask)

        return run

    def mma(self, s: ir.Mma, scope: _Scope, site: Site) -> StmtFn:
        """A warp's mma.sync over its lanes' registers (``sim.lanes``)."""
        facts, model = atoms.MMA[s.atom], self.arith
        operands = {use: (self._array(scope, name, site), first) for use, name, first in (
            ("a", s.a, s.a_offset), ("b", s.b, s.b_offset), ("c", s.c, s.c_offset),
            ("d", s.d, s.d_offset))}

        def run(st: State, m: Mask) -> None:
            warps = self._warps(m, site)
            registers = {}
            for use, (arr, first) in operands.items():
                local = st.arrays[arr.slot]
                assert isinstance(local, LocalArray)
                registers[use] = (local, arr.size, first)
            lanes.mma(facts, model, registers, warps)

        return run

    # ------------------------------------------------------------------ fragments

    def fragment(self, s: ir.Stmt, scope: _Scope, site: Site) -> StmtFn:
        """A fragment statement (``sim.fragments``), run by every fully active subgroup."""
        sg = self.geo.subgroup
        if self.geo.block_size % sg:
            raise LaunchError(f"fragment operations need whole subgroups: a block of "
                              f"{self.geo.block_size} invocations is not a multiple of the "
                              f"subgroup size {sg}", site.path, site.line)
        match s:
            case ir.FragDecl(name=name, rows=rows, cols=cols, elem=elem):
                slot = self.frag_slots
                self.frag_slots += 1
                scope[name] = _Frag(slot, s)
                shape = (self.n // sg, rows, cols)

                def declare(st: State, m: Mask) -> None:
                    st.frags[slot] = np.full(shape, arith.canary(elem), dtypes.numpy_dtype(elem))

                return declare
            case ir.FragFill(frag=name, value=value):
                frag, fv = self._frag(scope, name, site), self.expr(value, scope, site)

                def fill(st: State, m: Mask) -> None:
                    groups = self._groups(m, site)
                    data = st.frags[frag.slot]
                    assert data is not None
                    data[groups] = self._per_group(fv(st, m), groups, site)[:, None, None]

                return fill
            case ir.FragLoad() | ir.FragStore():
                return self.frag_memory(s, scope, site)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                slots = [self._frag(scope, x, site).slot for x in (d, a, b, c)]
                model = self.arith

                def mul_add(st: State, m: Mask) -> None:
                    groups = self._groups(m, site)
                    fd, fa, fb, fc = (st.frags[x] for x in slots)
                    assert fd is not None and fa is not None and fb is not None and fc is not None
                    fd[groups] = fragments.mul_add(fa[groups], fb[groups], fc[groups], model)

                return mul_add
        raise AssertionError(s)

    def _independent_mul_adds(self, stmts: tuple[ir.Stmt, ...], start: int, scope: _Scope
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
            if not all(isinstance(x, _Frag) for x in syms):
                break
            shape = tuple((x.decl.rows, x.decl.cols, x.decl.elem) for x in syms
                          if isinstance(x, _Frag))
            if shapes is not None and shape != shapes:
                break
            shapes = shape
            run.append(s)
            written.add(s.d)
        return run

    def mul_adds(self, run: list[ir.FragMulAdd], scope: _Scope, site: Site) -> StmtFn:
        """Independent multiply-accumulates as one: each model computes every output on its
        own, so stacking them changes nothing but the number of NumPy calls."""
        slots = [[self._frag(scope, x, site).slot for x in (s.d, s.a, s.b, s.c)] for s in run]
        model = self.arith

        def mul_add(st: State, m: Mask) -> None:
            groups = self._groups(m, site)
            frags = st.frags

            def stacked(which: int) -> np.ndarray:
                parts = [frags[x[which]] for x in slots]
                return np.concatenate([p[groups] for p in parts if p is not None])

            out = fragments.mul_add(stacked(1), stacked(2), stacked(3), model)
            for n, (d, *_) in enumerate(slots):
                fd = frags[d]
                assert fd is not None
                fd[groups] = out[n * groups.size:(n + 1) * groups.size]

        return mul_add

    def frag_memory(self, s: ir.FragLoad | ir.FragStore, scope: _Scope, site: Site) -> StmtFn:
        frag = self._frag(scope, s.frag, site)
        arr = self._array(scope, s.array, site)
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
                self._fail(OutOfBounds, _oob(arr, int(index[bad][0])) + " (fragment "
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
                flat = (groups // per_block * arr.size)[:, None, None] + index
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

    def _frag(self, scope: _Scope, name: str, site: Site) -> _Frag:
        sym = self._lookup(scope, name, site)
        if not isinstance(sym, _Frag):
            self._ill_formed(site, f"{name!r} is not a fragment")
        return sym

    def _groups(self, m: Mask, site: Site) -> np.ndarray:
        """The subgroups (global indices) whose lanes are all active; SubgroupDivergence when
        one has only some."""
        sg = self.geo.subgroup
        if m is None:
            return np.arange(self.n // sg)
        active = np.count_nonzero(m.reshape(-1, sg), axis=1)
        partial = np.flatnonzero((active > 0) & (active < sg))
        if partial.size:
            g = int(partial[0])
            lanes = np.zeros(self.n, bool)
            lanes[g * sg:(g + 1) * sg] = m[g * sg:(g + 1) * sg]
            self._fail(SubgroupDivergence, f"{int(active[g])} of the {sg} lanes of a subgroup "
                       "reach a fragment operation; all must", site, lanes)
        return np.flatnonzero(active == sg)

    def _per_group(self, v: Value, groups: np.ndarray, site: Site) -> np.ndarray:
        """The value each subgroup of ``groups`` agrees on; SubgroupDivergence when its lanes
        hold different values."""
        if not isinstance(v, np.ndarray):
            return np.full(groups.size, v)
        per_lane: np.ndarray = v.reshape(-1, self.geo.subgroup)[groups]
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

    def _tile_operand(self, scope: _Scope, name: str, site: Site) -> tile_sim.Operand:
        sym = self._lookup(scope, name, site)
        if isinstance(sym, _View):
            arr, layout, offset = sym.storage, sym.layout, sym.offset
        elif isinstance(sym, _Array) and sym.layout is not None:
            arr, layout, offset = sym, sym.layout, 0
        else:
            self._ill_formed(site, f"{name!r} is not a tensor")
        if dtypes.numpy_dtype(arr.elem).itemsize > 4:
            raise tile.ContractError(f"tile operand {name!r} views {arr.elem} storage; tile "
                                     "patterns take storage of 32-bit or narrower elements")
        return tile_sim.Operand(name, arr.slot, arr.size, dtypes.numpy_dtype(arr.elem).itemsize * 8,
                                layout, offset)

    def for_loop(self, s: ir.For, scope: _Scope, site: Site) -> tuple[StmtFn, bool]:
        bounds = [self.expr(x, scope, site) for x in (s.start, s.stop, s.step)]
        inner = scope.new_child()
        var_type = dtypes.numpy_dtype(s.start.type).type
        inner[s.var] = _Scalar(slot := self._slot(), s.start.type)
        body, returns = self.block(s.body, inner, f"{site.path}.body")

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
        start, stop, step = (np.broadcast_to(np.asarray(v, np.int64), (self.n,))
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
        where = np.arange(min(8, self.n)) if m is None else np.flatnonzero(m)
        raise LimitError(f"{what}, more than the simulator's limit of {cap} trips per loop; "
                         "raise it with simulate(..., limits=sim.launch.Limits(loop_trips=...)) "
                         "or the CLI's --max-loop-trips",
                         "loop_trips", site.path, site.line, self.geo.describe(where))

    def _count_trip(self, st: State, site: Site, m: Mask) -> None:
        """Counts one loop trip against ``Limits.trips``, the budget of the whole launch."""
        st.trips += 1
        if st.trips > self.limits.trips:
            where = np.arange(min(8, self.n)) if m is None else np.flatnonzero(m)
            raise LimitError(f"the launch's loops ran {self.limits.trips} trips in all, the "
                             "simulator's limit; raise it with simulate(..., limits=sim.launch"
                             ".Limits(trips=...)) or the CLI's --max-trips", "trips",
                             site.path, site.line, self.geo.describe(where))

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
        n = self.n

        def run(st: State, m: Mask) -> None:
            if m is None:
                st.alive = np.zeros(n, bool)
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
            reached = np.count_nonzero(m.reshape(-1, size), axis=1)
            partial = (reached > 0) & (reached < size)
            if partial.any():
                block = int(np.flatnonzero(partial)[0])
                lanes = m.copy()
                lanes[: block * size] = False
                lanes[(block + 1) * size:] = False
                self._fail(BarrierDivergence,
                           f"{reached[block]} of the {size} invocations of block "
                           f"{geo.block_of(block)} reached the barrier (the others branched "
                           f"around it or returned)", site, lanes)
            full = reached == size
            for mem in st.shared.values():
                mem.barrier(full)

        return run


def _uniform_int(v: Value, m: Mask) -> int | None:
    """``v`` as an int when every active invocation holds the same value, else None."""
    if not isinstance(v, np.ndarray):
        return int(v)
    active = v if m is None else v[m]
    low, high = active.min(), active.max()
    return int(low) if low == high else None


def _per_lane(flat: Value, threads: np.ndarray, lanes: np.ndarray | None, n: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """The flat element and thread index of each active invocation (``lanes``, None: all)."""
    flat = np.broadcast_to(flat, (n,))
    if lanes is None:
        return flat, threads
    return flat[lanes], threads[lanes]


def _oob(arr: _Array, index: int) -> str:
    return (f"index {index} is outside {arr.space} array {arr.name!r} of {arr.size} "
            "elements")
