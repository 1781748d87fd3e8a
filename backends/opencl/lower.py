"""Lowering for portable OpenCL: neutral fragments emulated lane by lane in plain OpenCL C 1.2.

No extension is needed (no subgroup functions, no ``cl_khr_fp16``): a subgroup is only a
group of ``subgroup`` consecutive work-items (``subgroup_id``, ``subgroup_lane``), and lanes
exchange data through local memory and work-group barriers.

* Element ``f`` of an ``R x C`` fragment (row-major, ``f = i*C + j``) belongs to lane
  ``f % subgroup``, as slot ``f / subgroup``: the lane map the neutral simulator uses for race
  attribution, so the lowered kernel touches shared memory from the same lanes. Where ``C``
  divides into the subgroup or the subgroup into ``C`` (every shape the rewrite makes), slot
  ``s`` is row ``lane / C + s*subgroup / C`` and column ``lane % C + s*subgroup % C``: the
  lane's part computed once, each slot at constant offsets from it.
* Accumulators are private scalars, one a slot (a lane updates only its own elements, so they
  never need a barrier), and every statement that touches one is written out slot by slot,
  so that each is a variable, not an element of an array: a compiler that does not optimize
  (PoCL's default build) keeps a variable in a register inside a loop, and an array element
  in memory, its address computed at every access.
* An A or B operand is read where it lies in local memory when it can be (a *view*): loaded
  from a shared array (a staged tile) at a constant stride, used only by the
  multiply-accumulates that follow its load in the same block with no write to that array
  in between, and held there in the type it is multiplied in (or an integer type). Otherwise
  it is copied lane by lane into one ``R x C`` matrix per fragment and wave (``__local``,
  declared at the top level of the body; fragments of one use, element type and shape share
  an array). Operands are held converted to the accumulator type they are multiplied in
  (exact: f16, bf16 and 8-bit values fit it) when every fragment of their group is
  multiplied into that one type and none is stored, and so are the staged tiles they are
  loaded from when nothing else reads those (each element converted as it is staged, not
  once per product), while the kernel's local memory stays within ``LOCAL_BYTES``.
* A run of consecutive multiply-accumulates into distinct accumulators, none another's ``c``,
  is register-blocked: for each ``k`` in order, the lane reads each of its B values once into
  a private scalar and adds to each of its slots the product ``a[i,k] * b[k,j]`` of its
  row's A value and its column's B value (exact: f16 and bf16 products fit f32), rounded
  after every addition; one statement adds a slot's products of ``CHAIN`` consecutive k.
  Every element still receives its statement's products in k order from its initial value,
  the simulator's ``sequential`` model (integers wrap, exactly as the integer model does).
  ``FragAdd`` makes each lane add its slots of one accumulator to the same slots of the
  other.
* A barrier is inserted where lanes exchange data and nothing else orders it: before a
  multiply-accumulate that reads an operand (or the array a view reads) written since the
  last barrier, and before a write of an operand (or of such an array) that a
  multiply-accumulate read since the last barrier (followed around loops).

The products of a run are written out for ``CHAIN`` k inside a loop over k, and index
arithmetic that does not change with k is computed before that loop (``specs/backends.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from backends.cstyle import EmitError
from sarek import ir, ir_check, stage_copy
from sarek.coopmat import DeviceSupport
from sarek.errors import IRError
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_build import add, binary, const, mul, var
from sarek.ir_expr import Node
from sarek.ir_walk import walk
from sarek.matrix_scheme import Lowering
from sarek.memo import remembered
from sarek.staging import Staging

SUBGROUPS = (32, 64)
FRAGMENTS = (16, 8)
STAGING = Staging(whole_int32=True)
"""Dense tiles (the emulation reads a lane's elements one by one, so no row layout helps or
hinders it), and the byte planes multiplied as whole int32 words: an emulated product of two
words costs what a product of two planes does, and the ten plane products sum to the same
bits."""
UNSELECTED = {Lowering.BF16X3_OPERANDS: (
    "without a matrix unit, Bf16x3's six emulated bf16 products for each of the kernel's f32 "
    "products run slower than its own f32 arithmetic, which Bf16x3 only approximates; "
    "lowering=Bf16x3_operands rewrites it anyway")}
"""What the portable target does not pick on its own (``Target.unselected``)."""
I32 = ElemType.I32
CHAIN = 8
"""Products of consecutive k one statement adds to an accumulator, in order (at most; a
divisor of the fragments' depth): each addition still rounded in turn, but the accumulator
read and written once for them, which is what an unoptimized build pays most for."""
LOCAL_BYTES = 48 * 1024
"""The local memory a work-group may declare that operands and staged tiles are widened
within: what NVIDIA's OpenCL gives one (PoCL gives more)."""

_FRAGMENT_STMTS = ir.STATEMENT_FAMILIES["fragment"]


def support() -> DeviceSupport:
    """The gate's view of the emulation: any configuration runs (plain arithmetic in every
    work-item), at the subgroups and fragments the target table lists."""
    return DeviceSupport("portable OpenCL (lane-by-lane emulation)", universal=True,
                         note="an emulation in plain OpenCL C: every configuration")


@remembered(128)  # the printer and the simulator both lower the same kernel object
def lower(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every fragment statement emulated lane by lane (kernels without
    fragments come back unchanged); ``EmitError`` with the reason for what the emulation
    cannot express."""
    kernel = stage_copy.synchronous(kernel)  # OpenCL copies complete as they are issued
    stmts = list(walk(kernel.body))
    if any(isinstance(s, ir.TileApply) for s in stmts):
        raise EmitError("portable OpenCL has no ldmatrix/stmatrix: TileApply statements are "
                        "printed for CUDA only")
    if not any(isinstance(s, _FRAGMENT_STMTS) for s in stmts):
        return kernel
    lowering = _Lowering(kernel)
    body = lowering.top(kernel.body)
    lowered = kernel.model_copy(update={"body": body, "subgroup": lowering.subgroup})
    try:
        ir_check.ensure_valid(lowered)
    except IRError as e:  # a barrier the emulation needs sits under varying control
        raise EmitError(f"the portable OpenCL emulation of {kernel.name!r} is not a valid "
                        f"kernel: {e.reason}") from None
    return lowered


@dataclass
class _Hazards:
    """What lanes exchange through local memory since the last barrier: operand fragments
    copied lane by lane and arrays that views read (``written``), and those a
    multiply-accumulate read whole (``read``)."""

    written: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)

    def copy(self) -> _Hazards:
        return _Hazards(set(self.written), set(self.read))

    def union(self, other: _Hazards) -> _Hazards:
        return _Hazards(self.written | other.written, self.read | other.read)


@dataclass(frozen=True)
class _Group:
    """The array holding every copied fragment of one operand use, element type and shape."""

    array: str
    use: FragUse
    elem: ElemType
    rows: int
    cols: int
    members: tuple[str, ...]
    stored: ElemType
    """What the array holds: ``elem``, or the accumulator type operands are widened to."""


@dataclass(frozen=True)
class _Operand:
    """Where a lane reads element ``(i, j)`` of an operand fragment: ``array[base + i*row_step
    + j*col_step]``, a value of type ``held``."""

    array: str
    base: ir.Expr
    row_step: int
    col_step: int
    held: ElemType

    def at(self, index: ir.Expr) -> ir.Expr:
        return ir.Load(array=self.array, index=index, type=self.held)


@dataclass(frozen=True)
class _Plan:
    """What the lowering holds where: the fragments read as views, the operand groups held in
    the accumulator type (by first member) and the staged tiles held so (by name)."""

    views: frozenset[str]
    groups: dict[str, ElemType]
    tiles: dict[str, ElemType]


class _Lowering:
    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.subgroup = kernel.subgroup or 32
        if self.subgroup not in SUBGROUPS:
            raise EmitError(f"portable OpenCL emulates subgroups of "
                            f"{', '.join(map(str, SUBGROUPS))} lanes; kernel {kernel.name!r} "
                            f"is written for {self.subgroup}")
        if kernel.block is None:
            raise EmitError(f"kernel {kernel.name!r} does not record the block it is written "
                            "for; the portable emulation keeps one operand matrix per wave of "
                            "the block in local memory")
        threads = kernel.block[0] * kernel.block[1] * kernel.block[2]
        if threads % self.subgroup:
            raise EmitError(f"a block of {threads} work-items is not whole subgroups of "
                            f"{self.subgroup}")
        self.waves = threads // self.subgroup
        self.frags: dict[str, ir.FragDecl] = {}
        self.place: dict[str, tuple[_Group, int]] = {}
        self.acc: dict[str, tuple[str, ...]] = {}
        self.plan = _Plan(frozenset(), {}, {})
        self.shared: dict[str, ir.ArrayDecl] = {}
        self.views: dict[str, _Operand] = {}
        self.sources: set[str] = set()
        self.taken = _names(kernel)
        self.lane = self.fresh("lane")
        self.wave = self.fresh("wave")
        self.lane_parts: dict[int, tuple[str, str]] = {}

    # ---------------------------------------------------------------- names and places

    def fresh(self, stem: str) -> str:
        n = 0
        while f"sk_{stem}{n or ''}" in self.taken:
            n += 1
        name = f"sk_{stem}{n or ''}"
        self.taken.add(name)
        return name

    def frag(self, name: str) -> ir.FragDecl:
        if name not in self.frags:
            raise EmitError(f"{name!r} is not a fragment declared before its use")
        return self.frags[name]

    def where(self, name: str) -> tuple[_Group, int]:
        self.frag(name)
        return self.place[name]

    def slots(self, d: ir.FragDecl) -> int:
        return d.rows * d.cols // self.subgroup

    def grid(self, cols: int) -> bool:
        """Whether a lane's slots of a fragment ``cols`` wide are at constant offsets from its
        first row and column."""
        return self.subgroup % cols == 0 or cols % self.subgroup == 0

    def position(self, cols: int, slot: int) -> tuple[ir.Expr, ir.Expr]:
        """The row and column of the lane's element in ``slot`` of a fragment ``cols`` wide."""
        if self.grid(cols):
            row, col = self.lane_parts[cols]
            flat = slot * self.subgroup
            return add(var(row), const(flat // cols)), add(var(col), const(flat % cols))
        flat_e = add(const(slot * self.subgroup), var(self.lane))
        return binary(BinOp.DIV, flat_e, const(cols)), binary(BinOp.REM, flat_e, const(cols))

    def offsets(self, cols: int, slot: int) -> tuple[ir.Expr, ir.Expr]:
        """The row and column of ``slot`` less the lane's first ones (``lane_part``)."""
        if self.grid(cols):
            flat = slot * self.subgroup
            return const(flat // cols), const(flat % cols)
        return self.position(cols, slot)

    def lane_part(self, cols: int) -> tuple[ir.Expr, ir.Expr]:
        """The lane's first row and column of a fragment ``cols`` wide (0 where its slots
        have no grid: ``offsets`` then gives each slot's whole row and column)."""
        if self.grid(cols):
            row, col = self.lane_parts[cols]
            return var(row), var(col)
        return const(0), const(0)

    def matrix(self, g: _Group, n: int) -> ir.Expr:
        """Where this wave's matrix of copied operand fragment ``n`` of ``g`` starts."""
        return _times(_plus(const(n * self.waves), var(self.wave)), g.rows * g.cols)

    def operand(self, name: str) -> _Operand:
        """Where the lane reads operand fragment ``name``: the view its last load made, or
        its matrix."""
        if self.frag(name).use is FragUse.ACCUMULATOR:
            raise EmitError(f"{name!r} is an accumulator, multiplied as an operand")
        if name in self.plan.views:
            return self.views[name]
        g, n = self.where(name)
        return _Operand(g.array, self.matrix(g, n), g.cols, 1, g.stored)

    # ---------------------------------------------------------------- declarations

    def top(self, body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        decls = [s for s in walk(body) if isinstance(s, ir.FragDecl)]
        for d in decls:
            if d not in body:
                raise EmitError(f"fragment {d.name!r} is declared inside a block; the "
                                "portable emulation keeps operands in local memory, which "
                                "OpenCL declares at the top level of a kernel")
            if d.name in self.frags:
                raise EmitError(f"fragment {d.name!r} is declared twice")
            if (d.rows * d.cols) % self.subgroup:
                raise EmitError(f"fragment {d.name!r} has {d.rows * d.cols} elements, which "
                                f"{self.subgroup} lanes cannot share evenly")
            self.frags[d.name] = d
            if d.use is FragUse.ACCUMULATOR:
                stem = d.name.removeprefix("sk_")
                self.acc[d.name] = tuple(self.fresh(f"{stem}_{slot}")
                                         for slot in range(self.slots(d)))
        self.shared = {s.name: s for s in walk(body) if isinstance(s, ir.ArrayDecl)
                       and s.space is MemSpace.SHARED}
        keys: dict[tuple[FragUse, ElemType, int, int], list[str]] = {}
        for d in decls:
            if d.use is not FragUse.ACCUMULATOR:
                keys.setdefault((d.use, d.elem, d.rows, d.cols), []).append(d.name)
        self.plan = _plan(body, keys, self.frags, self.shared, self.waves)
        for (use, elem, rows, cols), members in keys.items():
            stem = {FragUse.A: "fa", FragUse.B: "fb"}[use]
            g = _Group(self.fresh(f"{stem}_{elem.value}_{rows}x{cols}"), use, elem, rows, cols,
                       tuple(members), self.plan.groups.get(members[0], elem))
            for n, name in enumerate(members):
                self.place[name] = (g, n)
        self.sources = {s.array for s in walk(body) if isinstance(s, ir.FragLoad)
                        and s.frag in self.plan.views}
        prologue: list[ir.Stmt] = [
            ir.Let(name=self.lane, type=I32, value=ir.BuiltinValue(which=Builtin.SUBGROUP_LANE)),
            ir.Let(name=self.wave, type=I32, value=ir.BuiltinValue(which=Builtin.SUBGROUP_ID)),
        ]
        for cols in sorted({d.cols for d in decls if self.grid(d.cols)}):
            row, col = self.fresh(f"row{cols}_"), self.fresh(f"col{cols}_")
            self.lane_parts[cols] = (row, col)
            prologue += [ir.Let(name=row, type=I32, value=binary(BinOp.DIV, var(self.lane),
                                                                 const(cols))),
                         ir.Let(name=col, type=I32, value=binary(BinOp.REM, var(self.lane),
                                                                 const(cols)))]
        out, _ = self.block(body, _Hazards())
        return tuple(prologue) + out

    def storage(self, d: ir.FragDecl) -> list[ir.Stmt]:
        """An accumulator's scalars; an operand group's array where its first fragment is
        declared, unless every member is a view."""
        if d.use is FragUse.ACCUMULATOR:
            return [ir.Let(name=n, type=d.elem, value=const(0, d.elem), line=d.line)
                    for n in self.acc[d.name]]
        g, n = self.place[d.name]
        if n or set(g.members) <= self.plan.views:
            return []
        return [ir.ArrayDecl(name=g.array, elem=g.stored,
                             size=len(g.members) * self.waves * g.rows * g.cols,
                             space=MemSpace.SHARED, line=d.line)]

    # ---------------------------------------------------------------- blocks and hazards

    def block(self, stmts: tuple[ir.Stmt, ...], state: _Hazards
              ) -> tuple[tuple[ir.Stmt, ...], _Hazards]:
        out: list[ir.Stmt] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, ir.FragMulAdd):
                run = self.run(stmts, i)
                lowered, state = self.run_stmts(run, state)
                i += len(run)
            else:
                lowered, state = self.stmt(s, state)
                i += 1
            out.extend(lowered)
        return tuple(out), state

    def stmt(self, s: ir.Stmt, state: _Hazards) -> tuple[list[ir.Stmt], _Hazards]:
        if isinstance(s, ir.Barrier):
            return [s], _Hazards()
        written = {a for a in self.sources if _writes(s, a)}
        head: list[ir.Stmt] = []
        if written & state.read:  # a view's array rewritten while lanes may still read it
            head, state = [ir.Barrier(line=s.line)], _Hazards()
        state = state.copy()
        state.written |= written
        lowered, state = self.inner(s, state)
        return head + lowered, state

    def inner(self, s: ir.Stmt, state: _Hazards) -> tuple[list[ir.Stmt], _Hazards]:
        match s:
            case ir.For(body=body) | ir.While(body=body):
                # The body may run again after its end: its hazards at the end reach its start
                # (iterated until they no longer grow; the sets are finite).
                start = state
                while True:
                    lowered, end = self.block(body, start)
                    if start.union(end) == start:
                        break
                    start = start.union(end)
                return [s.model_copy(update={"body": lowered})], state.union(end)
            case ir.If(then=then, orelse=orelse):
                t, t_end = self.block(then, state.copy())
                o, o_end = self.block(orelse, state.copy())
                return [s.model_copy(update={"then": t, "orelse": o})], t_end.union(o_end)
            case ir.FragDecl():
                return self.storage(s), state
            case ir.FragLoad(frag=f) if self.frag(f).use is not FragUse.ACCUMULATOR:
                if f in self.plan.views:
                    return self.move(s), state
                return self.written([f], state, self.move(s))
            case ir.FragLoad() | ir.FragStore():
                return self.move(s), state
            case ir.FragFill():
                return self.fill(s, state)
            case ir.FragAdd():
                return self.frag_add(s), state
            case ir.ArrayDecl(name=name) if name in self.plan.tiles:
                return [s.model_copy(update={"elem": self.plan.tiles[name]})], state
            case ir.Store(array=name, value=value) if name in self.plan.tiles:
                return [s.model_copy(update={"value": _converted(value, self.plan.tiles[name])})
                        ], state
        return [s], state

    def written(self, names: list[str], state: _Hazards, stmts: list[ir.Stmt]
                ) -> tuple[list[ir.Stmt], _Hazards]:
        """``stmts`` write the operand fragments ``names`` lane by lane: a barrier first when
        one is an operand another lane read since the last one."""
        out: list[ir.Stmt] = []
        if set(names) & state.read:
            out.append(ir.Barrier())
            state = _Hazards()
        state = state.copy()
        state.written |= set(names)
        return [*out, *stmts], state

    # ---------------------------------------------------------------- element statements

    def fill(self, s: ir.FragFill, state: _Hazards) -> tuple[list[ir.Stmt], _Hazards]:
        d = self.frag(s.frag)
        if d.use is FragUse.ACCUMULATOR:
            return [ir.Assign(name=n, value=_converted(s.value, d.elem), line=s.line)
                    for n in self.acc[s.frag]], state
        g, n = self.where(s.frag)
        start = self.fresh("m")
        stmts: list[ir.Stmt] = [ir.Let(name=start, type=I32,
                                       value=add(self.matrix(g, n), var(self.lane)))]
        stmts += [ir.Store(array=g.array, index=add(var(start), const(slot * self.subgroup)),
                           value=_converted(s.value, g.stored), line=s.line)
                  for slot in range(self.slots(d))]
        return self.written([s.frag], state, stmts)

    def move(self, s: ir.FragLoad | ir.FragStore) -> list[ir.Stmt]:
        """A lane's elements of a fragment loaded or stored, slot by slot; an operand read as a
        view is only given its place."""
        d = self.frag(s.frag)
        if isinstance(s, ir.FragLoad) and s.frag in self.plan.views:
            assert isinstance(s.stride, ir.Const)  # _plan saw to it
            base, stmts = _held(s.offset, self.fresh("v"))
            pitch = int(s.stride.value)
            steps = (pitch, 1) if s.layout is FragLayout.ROW else (1, pitch)
            self.views[s.frag] = _Operand(s.array, base, *steps,
                                          self.plan.tiles.get(s.array, d.elem))
            return stmts
        offset, stmts = _held(s.offset, self.fresh("o"))
        stride, more = _held(s.stride, self.fresh("s"))
        stmts += more
        if d.use is not FragUse.ACCUMULATOR:
            g, n = self.where(s.frag)
            start = self.fresh("m")
            stmts.append(ir.Let(name=start, type=I32,
                                value=add(self.matrix(g, n), var(self.lane))))
        for slot in range(self.slots(d)):
            i, j = self.position(d.cols, slot)
            major, minor = (i, j) if s.layout is FragLayout.ROW else (j, i)
            there = add(add(offset, mul(major, stride)), minor)
            if d.use is FragUse.ACCUMULATOR:
                name = self.acc[s.frag][slot]
                if isinstance(s, ir.FragLoad):
                    stmts.append(ir.Assign(name=name, line=s.line, value=ir.Load(
                        array=s.array, index=there, type=d.elem)))
                else:
                    stmts.append(ir.Store(array=s.array, index=there, line=s.line,
                                          value=var(name, d.elem)))
                continue
            here = add(var(start), const(slot * self.subgroup))
            if isinstance(s, ir.FragLoad):
                held = self.plan.tiles.get(s.array, d.elem)
                stmts.append(ir.Store(array=g.array, index=here, line=s.line, value=_converted(
                    ir.Load(array=s.array, index=there, type=held), g.stored)))
            else:
                stmts.append(ir.Store(array=s.array, index=there, line=s.line,
                                      value=ir.Load(array=g.array, index=here, type=g.stored)))
        return stmts

    def frag_add(self, s: ir.FragAdd) -> list[ir.Stmt]:
        """One lane's share of ``d = a + b`` (``a - b`` with ``subtract``): each of its slots
        (the same in the three, which the IR checker made accumulators of one shape and
        type)."""
        d = self.frag(s.d)
        for name in (s.d, s.a, s.b):
            if self.frag(name).use is not FragUse.ACCUMULATOR:
                raise EmitError(f"a fragment add of {name!r}, which is not an accumulator")
        op = BinOp.SUB if s.subtract else BinOp.ADD
        return [ir.Assign(name=x, line=s.line, value=binary(op, var(a, d.elem), var(b, d.elem)))
                for x, a, b in zip(self.acc[s.d], self.acc[s.a], self.acc[s.b], strict=True)]

    # ---------------------------------------------------------------- runs of products

    def run(self, stmts: tuple[ir.Stmt, ...], start: int) -> list[ir.FragMulAdd]:
        """The longest run of multiply-accumulates from ``start`` into distinct accumulators,
        none another's ``c`` (``_independent``)."""
        run: list[ir.FragMulAdd] = []
        for s in stmts[start:]:
            if not isinstance(s, ir.FragMulAdd) or not _independent([*run, s]):
                break
            run.append(s)
        return run

    def run_stmts(self, run: list[ir.FragMulAdd], state: _Hazards
                  ) -> tuple[list[ir.Stmt], _Hazards]:
        reads = {r for s in run for n in (s.a, s.b)
                 for r in ([self.views[n].array] if n in self.plan.views else [n])}
        out: list[ir.Stmt] = []
        if reads & state.written:
            out.append(ir.Barrier(line=run[0].line))
            state = _Hazards()
        state = state.copy()
        state.read |= reads
        return [*out, *self.mul_add(run)], state

    def mul_add(self, run: list[ir.FragMulAdd]) -> list[ir.Stmt]:
        """One lane's share of the run ``d = a * b + c`` over independent accumulators
        ``d``: every ``c`` copied into its ``d`` (where they differ), then for each k in
        order: each B value of the lane's columns read once into a private scalar, and each
        slot of each ``d`` given the product of its row's A value and its column's B value.
        Where each operand's lane-dependent part of the address starts is computed before
        the k loop, where its k-th column (A) or row (B) starts once per k."""
        first = run[0]
        dd = self.frag(first.d)
        for s in run:
            for name in (s.d, s.c):
                if self.frag(name).use is not FragUse.ACCUMULATOR:
                    raise EmitError(f"a multiply-accumulate into {s.d!r} from {s.c!r}: both "
                                    "must be accumulators")
        acc_t, depth, line = dd.elem, self.frag(first.a).cols, first.line
        lane_row, lane_col = self.lane_part(dd.cols)
        out: list[ir.Stmt] = [
            ir.Assign(name=x, value=var(c, acc_t), line=line)
            for s in run if s.c != s.d for x, c in zip(self.acc[s.d], self.acc[s.c], strict=True)]
        k, chain = self.fresh("kk"), max(n for n in range(1, CHAIN + 1) if depth % n == 0)
        bases: dict[str, tuple[_Operand, str, str]] = {}
        body: list[ir.Stmt] = []
        for name in dict.fromkeys(n for s in run for n in (s.a, s.b)):
            op = self.operand(name)
            if self.frag(name).use is FragUse.A:  # (row, k): the lane's row, then column k
                lane, kstep = _times(lane_row, op.row_step), op.col_step
            else:  # (k, column): row k, the lane's column
                lane, kstep = _times(lane_col, op.col_step), op.row_step
            base, at = self.fresh("base"), self.fresh("at")
            out.append(ir.Let(name=base, type=I32, value=_plus(op.base, lane)))
            body.append(ir.Let(name=at, type=I32, value=_plus(var(base), _times(var(k), kstep))))
            bases[name] = (op, base, at)
        b_values: dict[tuple[str, str, int], str] = {}
        products: list[ir.Stmt] = []
        for s in run:
            a_op, _, a_at = bases[s.a]
            b_op, _, b_at = bases[s.b]
            for slot, x in enumerate(self.acc[s.d]):
                row, col = self.offsets(dd.cols, slot)
                total: ir.Expr = var(x, acc_t)
                for u in range(chain):  # k, k+1, ...: each addition rounded in turn
                    key = (s.b, col.model_dump_json(), u)
                    if key not in b_values:
                        b_values[key] = self.fresh("b")
                        body.append(ir.Let(name=b_values[key], type=acc_t, value=_converted(
                            b_op.at(_plus(var(b_at), _plus(_times(col, b_op.col_step),
                                                           const(u * b_op.row_step)))), acc_t)))
                    a = _converted(a_op.at(_plus(var(a_at), _plus(
                        _times(row, a_op.row_step), const(u * a_op.col_step)))), acc_t)
                    total = add(total, mul(a, var(b_values[key], acc_t)))
                products.append(ir.Assign(name=x, line=line, value=total))
        return [*out, ir.For(var=k, start=const(0), stop=const(depth), step=const(chain),
                             line=line, body=(*body, *products))]


def _independent(run: list[ir.FragMulAdd]) -> bool:
    """Whether multiply-accumulates may interleave their products k by k: their accumulators
    ``d`` are distinct and none is another's ``c``, so each element still receives its own
    statement's products in k order from its own initial value."""
    d = [s.d for s in run]
    return len(set(d)) == len(d) and all(s.c == s.d or s.c not in d for s in run)


def _held(x: ir.Expr, name: str) -> tuple[ir.Expr, list[ir.Stmt]]:
    """``x`` where a literal or a variable, else a fresh variable ``name`` holding it, and the
    statement that declares it: an address used for every slot computed once."""
    if isinstance(x, ir.Const | ir.Var):
        return x, []
    return var(name, x.type), [ir.Let(name=name, type=x.type, value=x)]


def _times(x: ir.Expr, n: int) -> ir.Expr:
    """``x * n`` of i32 values (``x`` when ``n`` is 1, a literal when ``x`` is one or ``n``
    is 0)."""
    if n == 0 or isinstance(x, ir.Const):
        return const(int(x.value) * n if isinstance(x, ir.Const) else 0)
    return x if n == 1 else mul(x, const(n))


def _plus(x: ir.Expr, y: ir.Expr) -> ir.Expr:
    """``x + y`` of i32 values, folded where both are literals or one is 0."""
    if isinstance(x, ir.Const) and isinstance(y, ir.Const):
        return const(int(x.value) + int(y.value))
    if isinstance(x, ir.Const) and x.value == 0:
        return y
    return add(x, y)


def _converted(x: ir.Expr, t: ElemType) -> ir.Expr:
    """``x`` as ``t`` (itself when it already is)."""
    return x if x.type is t else ir.Cast(x=x, type=t)


def _nodes(x: object) -> Iterator[Node]:
    """Every node of the IR inside ``x`` (itself included), statements and expressions."""
    if isinstance(x, Node):
        yield x
        for name in type(x).model_fields:
            yield from _nodes(getattr(x, name))
    elif isinstance(x, tuple):
        for y in x:
            yield from _nodes(y)


def _names_array(n: Node, array: str) -> bool:
    """Whether node ``n`` names ``array`` in one of its own fields."""
    return any(getattr(n, f) == array for f in type(n).model_fields
               if isinstance(getattr(n, f), str))


def _writes(s: ir.Stmt, array: str) -> bool:
    """Whether ``s`` may change ``array``: anything in it that names the array but a load of
    it (an expression's or a fragment's)."""
    return any(not isinstance(n, ir.Load | ir.FragLoad) and _names_array(n, array)
               for n in _nodes(s))


def _blocks(body: tuple[ir.Stmt, ...]) -> Iterator[tuple[ir.Stmt, ...]]:
    """``body`` and every statement list nested in it."""
    yield body
    for s in body:
        match s:
            case ir.For(body=inner) | ir.While(body=inner):
                yield from _blocks(inner)
            case ir.If(then=then, orelse=orelse):
                yield from _blocks(then)
                yield from _blocks(orelse)


def _viewable(body: tuple[ir.Stmt, ...], frags: dict[str, ir.FragDecl],
              shared: dict[str, ir.ArrayDecl]) -> set[str]:
    """The operand fragments that can be read where their loads read them: only loaded, from
    shared arrays at constant strides, and multiplied only after a load of theirs in the same
    block with nothing between that could change that array or load them again."""
    out = {n for n, d in frags.items() if d.use is not FragUse.ACCUMULATOR}
    for s in walk(body):
        match s:
            case ir.FragFill(frag=f) | ir.FragStore(frag=f):
                out.discard(f)
            case ir.FragLoad(frag=f, array=a, stride=stride) if (
                    a not in shared or not isinstance(stride, ir.Const)):
                out.discard(f)
    for block in _blocks(body):
        loaded: dict[str, str] = {}  # fragment: the array its load in this block read
        for s in block:
            if isinstance(s, ir.FragLoad) and s.frag in out:
                loaded[s.frag] = s.array
                continue
            if isinstance(s, ir.FragMulAdd):
                out -= {n for n in (s.a, s.b) if n not in loaded}
                continue
            inside = list(_nodes(s))
            for f, a in list(loaded.items()):
                if _writes(s, a) or any(isinstance(n, ir.FragLoad) and n.frag == f
                                        for n in inside):
                    del loaded[f]
    return out


def _plan(body: tuple[ir.Stmt, ...], keys: dict[tuple[FragUse, ElemType, int, int], list[str]],
          frags: dict[str, ir.FragDecl], shared: dict[str, ir.ArrayDecl], waves: int) -> _Plan:
    """Where operands are held (``_Plan``): each group in the accumulator type its fragments
    are all multiplied into, where none is stored, and each staged tile whose every read is a
    load of such a fragment; views of the fragments that can be read in place and are held
    in the type they are multiplied in or in an integer type. All widened while the kernel's
    local memory stays within ``LOCAL_BYTES``, else none."""
    into: dict[str, set[ElemType]] = {}
    stored: set[str] = set()
    for s in walk(body):
        match s:
            case ir.FragMulAdd(d=d, a=a, b=b) if d in frags:
                for n in (a, b):
                    into.setdefault(n, set()).add(frags[d].elem)
            case ir.FragStore(frag=f):
                stored.add(f)
    groups: dict[str, ElemType] = {}
    for members in keys.values():
        types = set().union(*(into.get(n, set()) for n in members))
        held = next(iter(types)) if len(types) == 1 and not stored & set(members) else None
        if held is not None and held is not frags[members[0]].elem:
            for n in members:
                groups[n] = held
    tiles: dict[str, ElemType] = {}
    nodes = list(_nodes(body))
    for name in shared:
        loads = [n for n in nodes if isinstance(n, ir.FragLoad) and n.array == name]
        types = {groups.get(n.frag, shared[name].elem) for n in loads}
        others = [n for n in nodes if _names_array(n, name) and not isinstance(
            n, ir.FragLoad | ir.Store | ir.ArrayDecl)]
        if loads and len(types) == 1 and not others and types != {shared[name].elem}:
            tiles[name] = types.pop()
    viewable = _viewable(body, frags, shared)

    def views(tiles: dict[str, ElemType]) -> frozenset[str]:
        def fits(s: ir.FragLoad) -> bool:  # no conversion per product but an integer one
            held = tiles.get(s.array, shared[s.array].elem)
            return held.is_int or into.get(s.frag, set()) <= {held}

        loads = [s for s in walk(body) if isinstance(s, ir.FragLoad) and s.frag in viewable]
        return frozenset(f for f in viewable if all(fits(s) for s in loads if s.frag == f))

    def local(groups: dict[str, ElemType], tiles: dict[str, ElemType],
              viewed: frozenset[str]) -> int:
        total = sum(d.size * max(tiles.get(n, d.elem).bits // 8, 1) for n, d in shared.items())
        for (_, elem, rows, cols), members in keys.items():
            if not set(members) <= viewed:
                held = groups.get(members[0], elem)
                total += len(members) * waves * rows * cols * max(held.bits // 8, 1)
        return total

    viewed = views(tiles)
    if local(groups, tiles, viewed) <= LOCAL_BYTES:
        return _Plan(viewed, groups, tiles)
    return _Plan(views({}), {}, {})


def _names(kernel: ir.Kernel) -> set[str]:
    """Every name the kernel declares."""
    names = {p.name for p in kernel.params}
    for s in walk(kernel.body):
        match s:
            case ir.Let(name=n) | ir.ArrayDecl(name=n) | ir.FragDecl(name=n) | \
                    ir.TensorView(name=n) | ir.For(var=n):
                names.add(n)
    return names
