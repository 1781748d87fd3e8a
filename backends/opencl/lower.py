"""Lowering for portable OpenCL: neutral fragments emulated lane by lane in plain OpenCL C 1.2.

No extension is needed (no subgroup functions, no ``cl_khr_fp16``): a subgroup is only a
group of ``subgroup`` consecutive work-items (``subgroup_id``, ``subgroup_lane``), and lanes
exchange data through local memory and work-group barriers.

* Element ``f`` of an ``R x C`` fragment (row-major, ``f = i*C + j``) belongs to lane
  ``f % subgroup``, as slot ``f / subgroup``: the lane map the neutral simulator uses for race
  attribution, so the lowered kernel touches shared memory from the same lanes.
* Fragments of one use, element type and shape are packed into one array, fragment ``n`` of
  the group at index ``n``, so that a run of statements over many fragments is one loop.
  Accumulators are private (``local`` space): ``R*C/subgroup`` slots per lane and fragment, and
  every lane loads, fills, stores and updates only its own elements, so they never need a
  barrier. A and B operands are shared (``__local``, declared at the top level of the body):
  one ``R x C`` matrix per fragment and wave, filled by per-lane element copies of each lane's
  own elements, and read whole (rows of A, columns of B) by a multiply-accumulate. Operands
  are held converted to the accumulator type they are multiplied in (exact: f16, bf16 and
  8-bit values fit it) when every fragment of the group is multiplied into one accumulator
  type, never stored, and the kernel's local memory stays within ``LOCAL_BYTES``: each element
  is then converted once as it is copied in, not once per product.
* A run of consecutive multiply-accumulates into distinct accumulators is register-blocked:
  a lane's slots of an accumulator are a grid of rows by columns (``_Grid``; 16x16 over 32
  lanes: 8 rows of one column). For each ``k`` in order and each B fragment of the run, the
  lane reads each of its B values once into a private scalar and multiplies it by its A
  values of its rows, in every A fragment the run pairs with that B fragment, adding each
  product ``a[i,k] * b[k,j]`` (exact: f16 and bf16 products fit f32) to its slot, rounded
  after every addition. Every element still receives its statement's products in k order from
  its initial value, the simulator's ``sequential`` model (integers wrap, exactly as the
  integer model does); an A or B value is read once per k for all the products it takes part
  in (where the compiler keeps the unrolled run's loads, as NVIDIA's does), not once per
  product. ``FragAdd`` makes each lane add its slots of one accumulator to the same slots of
  the other. A run of consecutive fills, or adds, whose fragment indices are affine in the
  position in the run becomes one loop, in the statements' order, so it computes exactly
  what the statements do one after another.
* A barrier is inserted where lanes exchange data and nothing else orders it: before a
  multiply-accumulate that reads an operand written since the last barrier, and before a write
  of an operand that a multiply-accumulate read since the last barrier (followed around loops).

Everything is loops (over runs, slots and k) but the products of one B value, written out (at
most ``UNROLL``): the printed kernel stays small, which is what keeps PoCL's compile time
short (``specs/backends.md``), and an unoptimized build does not pay for a loop per product.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from backends.cstyle import EmitError
from sarek import ir, ir_check, stage_copy
from sarek.coopmat import DeviceSupport
from sarek.errors import IRError
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_build import add, binary, const, mul, var
from sarek.ir_walk import walk
from sarek.matrix_scheme import Lowering
from sarek.memo import remembered
from sarek.staging import Staging

SUBGROUPS = (32, 64)
FRAGMENTS = (16, 8)
STAGING = Staging(whole_int32=True)
"""Dense tiles (the emulation copies element by element, so no row layout helps or hinders
it), and the byte planes multiplied as whole int32 words: an emulated product of two words
costs what a product of two planes does, and the ten plane products sum to the same bits."""
UNSELECTED = {Lowering.BF16X3_OPERANDS: (
    "without a matrix unit, Bf16x3's six emulated bf16 products for each of the kernel's f32 "
    "products run slower than its own f32 arithmetic, which Bf16x3 only approximates; "
    "lowering=Bf16x3_operands rewrites it anyway")}
"""What the portable target does not pick on its own (``Target.unselected``)."""
I32 = ElemType.I32
UNROLL = 16
"""The products of one B value a lane computes for one k are written out, not looped over, up
to this many (16 for 16x16 fragments over 32 lanes, 2 A fragments of 8 rows): an unoptimized
build (PoCL's) pays for every loop trip and every read of a loop variable."""
LOCAL_BYTES = 48 * 1024
"""The local memory a work-group may declare that operands are widened within: what NVIDIA's
OpenCL gives one (PoCL gives more)."""

_FRAGMENT_STMTS = ir.STATEMENT_FAMILIES["fragment"]
_ElementBody = Callable[["_Element"], list[ir.Stmt]]
"""What runs for one of a lane's elements of a fragment."""


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
    """Operand fragments touched since the last barrier: written lane by lane (``written``)
    and read whole by a multiply-accumulate (``read``)."""

    written: set[str] = field(default_factory=set)
    read: set[str] = field(default_factory=set)

    def copy(self) -> _Hazards:
        return _Hazards(set(self.written), set(self.read))

    def union(self, other: _Hazards) -> _Hazards:
        return _Hazards(self.written | other.written, self.read | other.read)


@dataclass(frozen=True)
class _Element:
    """One of a lane's elements of an ``R x C`` fragment: its row ``i`` and column ``j``, the
    lane's slot holding it and its row-major index ``flat``."""

    i: ir.Expr
    j: ir.Expr
    slot: ir.Expr
    flat: ir.Expr


@dataclass(frozen=True)
class _Group:
    """The array holding every fragment of one use, element type and shape."""

    array: str
    use: FragUse
    elem: ElemType
    rows: int
    cols: int
    members: tuple[str, ...]
    stored: ElemType
    """What the array holds: ``elem``, or the accumulator type operands are widened to."""


@dataclass(frozen=True)
class _Grid:
    """A lane's ``slots`` of an accumulator with ``width`` columns as a grid of ``rows`` rows
    by ``cols`` columns: slot ``ri * cols + cj`` is row ``lane / width + ri * row_step`` and
    column ``lane % width + cj * subgroup``. Where the width divides into the subgroup (16x16
    fragments over 32 lanes: each lane 8 rows, 2 apart, of one column) or the subgroup into
    the width, the slots make such a grid; otherwise (``diagonal``) each slot is a row and
    column of its own (``row_of``, ``col_of``)."""

    subgroup: int
    width: int
    slots: int
    lane: ir.Expr

    @property
    def diagonal(self) -> bool:
        return self.subgroup % self.width != 0 and self.width % self.subgroup != 0

    @property
    def cols(self) -> int:
        return self.width // self.subgroup if self.width % self.subgroup == 0 else 1

    @property
    def rows(self) -> int:
        return self.slots // self.cols

    @property
    def row_step(self) -> int:
        return max(self.subgroup // self.width, 1)

    def row_of(self, slot: ir.Expr) -> ir.Expr:
        """The row of the lane's element in ``slot``."""
        return binary(BinOp.DIV, _plus(_times(slot, self.subgroup), self.lane), const(self.width))

    def col_of(self, slot: ir.Expr) -> ir.Expr:
        """The column of the lane's element in ``slot``."""
        return binary(BinOp.REM, _plus(_times(slot, self.subgroup), self.lane), const(self.width))


@dataclass(frozen=True)
class _Affine:
    """``base + outer * (r / width) + inner * (r % width)`` over a run position ``r``."""

    base: int
    outer: int
    inner: int
    width: int

    def expr(self, q: ir.Expr, p: ir.Expr) -> ir.Expr:
        """The form at ``r / width = q`` and ``r % width = p`` (the run loop's two
        variables, so that no index divides)."""
        return _plus(_plus(_times(q, self.outer), _times(p, self.inner)), const(self.base))


def _fit(values: Sequence[int], width: int) -> _Affine | None:
    """The affine form of ``values`` with ``width``, if there is one."""
    base = values[0]
    inner = values[1] - base if width > 1 and len(values) > 1 else 0
    outer = values[width] - base if len(values) > width else 0
    form = _Affine(base, outer, inner, width)
    if all(base + outer * (r // width) + inner * (r % width) == v
           for r, v in enumerate(values)):
        return form
    return None


def _fit_all(columns: Sequence[Sequence[int]]) -> list[_Affine] | None:
    """One width that makes every column affine, and the forms; None when none does."""
    n = len(columns[0])
    for width in range(1, n + 1):
        if n % width == 0:
            forms = [_fit(c, width) for c in columns]
            if all(f is not None for f in forms):
                return [f for f in forms if f is not None]
    return None


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
        self.taken = _names(kernel)
        self.lane = self.fresh("lane")
        self.wave = self.fresh("wave")

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

    def slots(self, g: _Group) -> int:
        return g.rows * g.cols // self.subgroup

    def at(self, g: _Group, index: ir.Expr, slot: ir.Expr, flat: ir.Expr) -> ir.Expr:
        """Where a lane keeps its element ``flat`` (slot ``slot``) of fragment ``index`` of
        ``g``."""
        if g.use is FragUse.ACCUMULATOR:
            return self.slot_at(g, index, slot)
        return add(self.matrix(g, index), flat)

    def slot_at(self, g: _Group, index: ir.Expr, slot: ir.Expr) -> ir.Expr:
        """Where a lane keeps slot ``slot`` of accumulator ``index`` of ``g``."""
        return add(mul(index, const(self.slots(g))), slot)

    def matrix(self, g: _Group, index: ir.Expr) -> ir.Expr:
        """Where this wave's matrix of operand fragment ``index`` of ``g`` starts."""
        return _times(_plus(_times(index, self.waves), var(self.wave)), g.rows * g.cols)

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
        keys: dict[tuple[FragUse, ElemType, int, int], list[str]] = {}
        for d in decls:
            keys.setdefault((d.use, d.elem, d.rows, d.cols), []).append(d.name)
        wide = _widened(body, keys, self.frags, self.waves)
        for (use, elem, rows, cols), members in keys.items():
            stem = {FragUse.A: "fa", FragUse.B: "fb", FragUse.ACCUMULATOR: "facc"}[use]
            g = _Group(self.fresh(f"{stem}_{elem.value}_{rows}x{cols}"), use, elem, rows, cols,
                       tuple(members), wide.get(members[0], elem))
            for n, name in enumerate(members):
                self.place[name] = (g, n)
        prologue: tuple[ir.Stmt, ...] = (
            ir.Let(name=self.lane, type=I32, value=ir.BuiltinValue(which=Builtin.SUBGROUP_LANE)),
            ir.Let(name=self.wave, type=I32, value=ir.BuiltinValue(which=Builtin.SUBGROUP_ID)),
        )
        out, _ = self.block(body, _Hazards())
        return prologue + out

    def storage(self, d: ir.FragDecl) -> list[ir.Stmt]:
        """The group's array, where its first fragment is declared."""
        g, n = self.place[d.name]
        if n:
            return []
        count = len(g.members)
        if g.use is FragUse.ACCUMULATOR:
            return [ir.ArrayDecl(name=g.array, elem=g.elem, size=count * self.slots(g),
                                 space=MemSpace.LOCAL, line=d.line)]
        return [ir.ArrayDecl(name=g.array, elem=g.stored,
                             size=count * self.waves * g.rows * g.cols, space=MemSpace.SHARED,
                             line=d.line)]

    # ---------------------------------------------------------------- blocks and hazards

    def block(self, stmts: tuple[ir.Stmt, ...], state: _Hazards
              ) -> tuple[tuple[ir.Stmt, ...], _Hazards]:
        out: list[ir.Stmt] = []
        i = 0
        while i < len(stmts):
            s = stmts[i]
            if isinstance(s, ir.FragMulAdd | ir.FragFill | ir.FragAdd):
                run, forms = self.run(stmts, i)
                lowered, state = self.run_stmts(run, forms, state)
                i += len(run)
            else:
                lowered, state = self.stmt(s, state)
                i += 1
            out.extend(lowered)
        return tuple(out), state

    def stmt(self, s: ir.Stmt, state: _Hazards) -> tuple[list[ir.Stmt], _Hazards]:
        match s:
            case ir.Barrier():
                return [s], _Hazards()
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
            case ir.FragLoad():
                return self.written([s.frag], state, self.move(s))
            case ir.FragStore():
                return self.move(s), state
        return [s], state

    def written(self, names: list[str], state: _Hazards, stmts: list[ir.Stmt]
                ) -> tuple[list[ir.Stmt], _Hazards]:
        """``stmts`` write the fragments ``names`` lane by lane: a barrier first when one is
        an operand another lane read since the last one."""
        operands = {n for n in names if self.frag(n).use is not FragUse.ACCUMULATOR}
        out: list[ir.Stmt] = []
        if operands & state.read:
            out.append(ir.Barrier())
            state = _Hazards()
        state = state.copy()
        state.written |= operands
        return [*out, *stmts], state

    # ---------------------------------------------------------------- runs

    def indices(self, s: ir.Stmt) -> tuple[tuple[_Group, int], ...]:
        match s:
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                return tuple(self.where(n) for n in (d, a, b, c))
            case ir.FragFill(frag=f):
                return (self.where(f),)
            case ir.FragAdd(d=d, a=a, b=b):
                return tuple(self.where(n) for n in (d, a, b))
        raise AssertionError(s)

    def run(self, stmts: tuple[ir.Stmt, ...], start: int
            ) -> tuple[list[ir.Stmt], list[_Affine]]:
        """The longest run of statements from ``start`` of the same kind, over the same
        groups (and, for fills, of the same value), whose fragment indices are affine in the
        position in the run (and, for multiply-accumulates, into distinct accumulators:
        ``_independent``), and those affine forms."""
        first = stmts[start]
        groups = [g for g, _ in self.indices(first)]
        run: list[ir.Stmt] = []
        for s in stmts[start:]:
            if type(s) is not type(first):
                break
            if isinstance(s, ir.FragFill) and isinstance(first, ir.FragFill) and \
                    s.value != first.value:
                break
            if [g for g, _ in self.indices(s)] != groups:
                break
            run.append(s)
        for n in range(len(run), 0, -1):
            forms = self.fit(run[:n])
            if forms is not None:
                return run[:n], forms
        raise AssertionError("a run of one statement is always affine")

    def fit(self, run: list[ir.Stmt]) -> list[_Affine] | None:
        """The affine forms of the run's columns of fragment indices, or None."""
        rows = [[n for _, n in self.indices(s)] for s in run]
        if isinstance(run[0], ir.FragMulAdd) and not _independent(rows):
            return None
        return _fit_all([list(c) for c in zip(*rows, strict=True)])

    def run_stmts(self, run: list[ir.Stmt], forms: list[_Affine], state: _Hazards
                  ) -> tuple[list[ir.Stmt], _Hazards]:
        first = run[0]
        if isinstance(first, ir.FragFill):
            g, _ = self.where(first.frag)

            def fill(index: list[ir.Expr]) -> list[ir.Stmt]:
                return self.each_element(g, lambda e: [
                    ir.Store(array=g.array, index=self.at(g, index[0], e.slot, e.flat),
                             value=_converted(first.value, g.stored), line=first.line)])

            names = [s.frag for s in run if isinstance(s, ir.FragFill)]
            return self.written(names, state, self.run_loop(len(run), forms, fill, first.line))
        if isinstance(first, ir.FragAdd):  # private accumulators: no lane reads another's
            return self.run_loop(len(run), forms, lambda index: self.frag_add(first, *index),
                                 first.line), state
        assert isinstance(first, ir.FragMulAdd)
        reads = {n for s in run if isinstance(s, ir.FragMulAdd) for n in (s.a, s.b)}
        out: list[ir.Stmt] = []
        if reads & state.written:
            out.append(ir.Barrier(line=first.line))
            state = _Hazards()
        state = state.copy()
        state.read |= reads
        return [*out, *self.mul_add([s for s in run if isinstance(s, ir.FragMulAdd)], forms)
                ], state

    def run_loop(self, n: int, forms: list[_Affine],
                 body: Callable[[list[ir.Expr]], list[ir.Stmt]], line: int | None
                 ) -> list[ir.Stmt]:
        """``body(the forms' fragment indices)`` for each of the ``n`` positions of a run, in
        order: a loop over ``r / width`` around a loop over ``r % width``."""
        width = forms[0].width
        return self.each("r", n // width, lambda q: self.each(
            "r", width, lambda p: body([f.expr(q, p) for f in forms]), line), line)

    def each(self, stem: str, n: int, body: Callable[[ir.Expr], list[ir.Stmt]],
             line: int | None, unroll: bool = False) -> list[ir.Stmt]:
        """``body(i)`` for ``i`` in ``range(n)``: a loop over a fresh variable, or ``body(0)``
        when ``n`` is 1, or with ``unroll`` and ``n`` at most ``UNROLL``, ``body(0)``,
        ``body(1)`` and so on."""
        if n == 1 or (unroll and n <= UNROLL):
            return [s for i in range(n) for s in body(const(i))]
        i = self.fresh(stem)
        return [ir.For(var=i, start=const(0), stop=const(n), step=const(1),
                       body=tuple(body(var(i))), line=line)]

    # ---------------------------------------------------------------- element loops

    def each_element(self, g: _Group, body: _ElementBody) -> list[ir.Stmt]:
        """``for slot: body(the lane's element in that slot)`` over the fragments of ``g``."""
        slot, flat = self.fresh("slot"), self.fresh("f")
        i, j = self.fresh("i"), self.fresh("j")
        inner: list[ir.Stmt] = [
            ir.Let(name=flat, type=I32, value=add(mul(var(slot), const(self.subgroup)),
                                                  var(self.lane))),
            ir.Let(name=i, type=I32, value=binary(BinOp.DIV, var(flat), const(g.cols))),
            ir.Let(name=j, type=I32, value=binary(BinOp.REM, var(flat), const(g.cols))),
            *body(_Element(var(i), var(j), var(slot), var(flat))),
        ]
        return [ir.For(var=slot, start=const(0), stop=const(self.slots(g)), step=const(1),
                       body=tuple(inner))]

    def move(self, s: ir.FragLoad | ir.FragStore) -> list[ir.Stmt]:
        g, n = self.where(s.frag)

        def element(e: _Element) -> list[ir.Stmt]:
            at = self.at(g, const(n), e.slot, e.flat)
            major, minor = (e.i, e.j) if s.layout is FragLayout.ROW else (e.j, e.i)
            there = add(add(s.offset, mul(major, s.stride)), minor)
            if isinstance(s, ir.FragLoad):
                return [ir.Store(array=g.array, index=at, line=s.line, value=_converted(
                    ir.Load(array=s.array, index=there, type=g.elem), g.stored))]
            return [ir.Store(array=s.array, index=there, line=s.line,
                             value=ir.Load(array=g.array, index=at, type=g.stored))]

        return self.each_element(g, element)

    def frag_add(self, s: ir.FragAdd, d: ir.Expr, a: ir.Expr, b: ir.Expr) -> list[ir.Stmt]:
        """One lane's share of ``d = a + b`` for fragment indices ``d``, ``a``, ``b`` of their
        groups: each of its slots (the same in the three, which the IR checker made
        accumulators of one shape and type)."""
        (gd, _), (ga, _), (gb, _) = (self.where(n) for n in (s.d, s.a, s.b))

        def element(e: _Element) -> list[ir.Stmt]:
            total = add(ir.Load(array=ga.array, type=ga.elem, index=self.at(ga, a, e.slot, e.flat)),
                        ir.Load(array=gb.array, type=gb.elem, index=self.at(gb, b, e.slot, e.flat)))
            return [ir.Store(array=gd.array, index=self.at(gd, d, e.slot, e.flat), value=total,
                             line=s.line)]

        return self.each_element(gd, element)

    def mul_add(self, run: list[ir.FragMulAdd], forms: list[_Affine]) -> list[ir.Stmt]:
        """One lane's share of the run ``d = a * b + c`` over independent accumulators ``d``,
        register-blocked (``_Grid``): every ``c`` copied into its ``d`` (where they differ),
        then for each k in order and each B fragment, each of the lane's B values read once
        into a private scalar and multiplied by the lane's A values of its rows, in every A
        fragment the run pairs with that B fragment, each product added to its slot. The
        products of one B value are written out (up to ``UNROLL``): the run's fragments
        that share it, at constant offsets from the first, and the lane's rows of each."""
        first = run[0]
        (gd, _), (ga, _), (gb, _), (gc, _) = self.indices(first)
        if gd.use is not FragUse.ACCUMULATOR or gc.use is not FragUse.ACCUMULATOR:
            raise EmitError(f"a multiply-accumulate into {first.d!r} from {first.c!r}: both "
                            "must be accumulators")
        acc_t, depth, slots = gd.elem, ga.cols, self.slots(gd)
        grid = _Grid(self.subgroup, gd.cols, slots, var(self.lane))
        d_form, a_form, b_form, _ = forms
        width, line = d_form.width, first.line
        outer = len(run) // width
        k, row, col = self.fresh("kk"), self.fresh("row"), self.fresh("col")
        a0, b0, d0 = self.fresh("a0"), self.fresh("b0"), self.fresh("d0")
        lane_row, lane_col = (const(0), const(0)) if grid.diagonal else (
            _times(grid.row_of(const(0)), depth), grid.col_of(const(0)))

        def a_value(at: ir.Expr) -> ir.Expr:
            return _converted(ir.Load(array=ga.array, type=ga.stored, index=_plus(var(a0), at)),
                              acc_t)

        def b_value(at: ir.Expr) -> ir.Expr:
            return _converted(ir.Load(array=gb.array, type=gb.stored, index=_plus(var(b0), at)),
                              acc_t)

        def update(at: ir.Expr, product: ir.Expr) -> ir.Stmt:
            acc = _plus(var(d0), at)
            return ir.Store(array=gd.array, index=acc, line=line, value=add(
                ir.Load(array=gd.array, type=acc_t, index=acc), product))

        # B's position in the run is looped over; the other one, if B does not vary with
        # it, is written out: the fragments that share a B value
        written = "q" if outer > 1 and not b_form.outer else \
            "p" if width > 1 and not b_form.inner else ""
        count = {"q": outer, "p": width, "": 1}[written]

        def step(f: _Affine) -> int:
            return f.outer if written == "q" else f.inner

        def statement(q: ir.Expr, p: ir.Expr) -> list[ir.Stmt]:
            d, a, b = (f.expr(q, p) for f in (d_form, a_form, b_form))
            out = [ir.Let(name=a0, type=I32, value=add(self.matrix(ga, a), add(var(row),
                                                                                var(k)))),
                   ir.Let(name=b0, type=I32, value=add(self.matrix(gb, b), add(
                       _times(var(k), gb.cols), var(col)))),
                   ir.Let(name=d0, type=I32, value=self.slot_at(gd, d, const(0)))]
            if grid.diagonal:  # a row and a column of its own in each slot
                return out + self.each("ri", slots, lambda ri: [update(ri, mul(
                    a_value(_times(grid.row_of(ri), depth)), b_value(grid.col_of(ri))))],
                    line)
            b_k = self.fresh("b")

            def products(cj: ir.Expr) -> list[ir.Stmt]:
                return [ir.Let(name=b_k, type=acc_t, value=b_value(_times(cj, self.subgroup))),
                        *self.each("w", count, lambda w: self.each("ri", grid.rows, lambda ri: [
                            update(_plus(_times(w, step(d_form) * slots),
                                         _plus(_times(ri, grid.cols), cj)),
                                   mul(a_value(_plus(
                                       _times(w, step(a_form) * self.waves * ga.rows * ga.cols),
                                       _times(ri, grid.row_step * depth))), var(b_k, acc_t)))],
                            line, unroll=True), line, unroll=count * grid.rows <= UNROLL)]

            return out + self.each("cj", grid.cols, products, line)

        if written == "q":
            body = self.each("r", width, lambda p: statement(const(0), p), line)
        elif written == "p":
            body = self.each("r", outer, lambda q: statement(q, const(0)), line)
        else:
            body = self.each("r", outer, lambda q: self.each(
                "r", width, lambda p: statement(q, p), line), line)
        return [*self.copy_initial(run, forms),
                ir.Let(name=row, type=I32, value=lane_row),
                ir.Let(name=col, type=I32, value=lane_col),
                ir.For(var=k, start=const(0), stop=const(depth), step=const(1), line=line,
                       body=tuple(body))]

    def copy_initial(self, run: list[ir.FragMulAdd], forms: list[_Affine]) -> list[ir.Stmt]:
        """Each ``c`` of the run copied into its ``d``, where some differ."""
        if all(s.c == s.d for s in run):
            return []
        (gd, _), _, _, (gc, _) = self.indices(run[0])
        slot, slots = self.fresh("slot"), self.slots(gd)

        def copy(index: list[ir.Expr]) -> list[ir.Stmt]:
            d, _, _, c = index
            value = ir.Load(array=gc.array, type=gc.elem, index=self.slot_at(gc, c, var(slot)))
            return [ir.For(var=slot, start=const(0), stop=const(slots), step=const(1), body=(
                ir.Store(array=gd.array, index=self.slot_at(gd, d, var(slot)), value=value,
                         line=run[0].line),))]

        return self.run_loop(len(run), forms, copy, run[0].line)


def _independent(rows: list[list[int]]) -> bool:
    """Whether multiply-accumulates with fragment indices ``d, a, b, c`` (a row each) may
    interleave their products k by k: their accumulators ``d`` are distinct and none is
    another's ``c``, so each element still receives its own statement's products in k order
    from its own initial value."""
    d, c = [row[0] for row in rows], [row[3] for row in rows]
    return len(set(d)) == len(d) and all(x == y or x not in d for x, y in zip(c, d, strict=True))


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


def _widened(body: tuple[ir.Stmt, ...], keys: dict[tuple[FragUse, ElemType, int, int],
                                                   list[str]],
             frags: dict[str, ir.FragDecl], waves: int) -> dict[str, ElemType]:
    """The accumulator type each operand group is held in, by its first fragment's name: the
    groups whose fragments are all multiplied into one accumulator type and never stored
    (whose conversion back is then never needed), where holding every such group widened
    keeps the kernel's local memory within ``LOCAL_BYTES``; none where it would not."""
    into: dict[str, set[ElemType]] = {}
    stored: set[str] = set()
    local = 0
    for s in walk(body):
        match s:
            case ir.FragMulAdd(d=d, a=a, b=b) if d in frags:
                for n in (a, b):
                    into.setdefault(n, set()).add(frags[d].elem)
            case ir.FragStore(frag=f):
                stored.add(f)
            case ir.ArrayDecl(space=MemSpace.SHARED, elem=elem, size=size):
                local += size * max(elem.bits // 8, 1)
    wide: dict[str, ElemType] = {}
    for (use, elem, rows, cols), members in keys.items():
        if use is FragUse.ACCUMULATOR:
            continue
        types = set().union(*(into.get(n, set()) for n in members))
        held = next(iter(types)) if len(types) == 1 and not stored & set(members) else elem
        if held is not elem:
            wide[members[0]] = held
        local += len(members) * waves * rows * cols * max(held.bits // 8, 1)
    return wide if local <= LOCAL_BYTES else {}


def _names(kernel: ir.Kernel) -> set[str]:
    """Every name the kernel declares."""
    names = {p.name for p in kernel.params}
    for s in walk(kernel.body):
        match s:
            case ir.Let(name=n) | ir.ArrayDecl(name=n) | ir.FragDecl(name=n) | \
                    ir.TensorView(name=n) | ir.For(var=n):
                names.add(n)
    return names
