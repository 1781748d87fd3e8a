"""The rewrite of a recognized GEMM nest onto matrix fragments.

``kernel(original, gemm, lowering, subgroup=32, frag=16)`` builds a new ``Kernel`` in
target-neutral fragment statements (``specs/matrix-pattern-rewrite.md``, "The rewrite"):

* the original parameters in order, then the five i32 region parameters ``EXTRA_NAMES``
  (``region_names``: each followed by ``_`` where the original has a parameter of that name);
* a block of four waves of ``subgroup`` lanes owns a 64x64 output tile (block_idx.x its
  column tile, .y its row tile, .z the batch); wave ``w`` owns the 32x32 quarter at rows
  ``32*(w/2)``, columns ``32*(w%2)``, as 2x2 fragments of 16 or 4x4 of 8;
* the reduction runs in steps of 16: the block stages the 64x16 A tile and the 16x64 B tile
  from global into shared memory, converted to the lowering's operand type (one array per
  term or byte plane), zero outside the region; each wave loads its fragments and multiplies,
  with fragment 8 as two chained 8-deep multiply-accumulates in k order (``Bf16x3``: each
  sub-step's six products into a fresh accumulator, then added to the running one);
* accumulators start at the original's initial value (float lowerings stage it through shared
  memory unless it is a constant; the byte planes add it at the end, which modular arithmetic
  allows) and leave through shared memory, where each covered output gets the original's
  epilogue and nothing else is written.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from sarek import ir, ir_check
from sarek.errors import SarekError
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_build import add, binary, const, logical_not, mul, var
from sarek.launch import Launch
from sarek.matrix_mapping import Region
from sarek.matrix_pattern import Access, Gemm, Mapping1D, recognize
from sarek.matrix_scheme import (
    SUPPORTED_FRAGMENT,
    SUPPORTED_SUBGROUP,
    Lowering,
    LoweringError,
    Scheme,
    config_of,
    scheme_for,
)
from sarek.schedule import SEED, Schedule, ScheduleError
from sarek.staging import DENSE, Staging

EXTRA_NAMES = ("me", "ne", "ze", "d", "t")

I32, U32, U8, F32 = ElemType.I32, ElemType.U32, ElemType.U8, ElemType.F32


class RewriteError(SarekError):
    """The nest cannot be rewritten as asked; ``reason`` names what and why."""


def launch_dims(subgroup: int = 32, *, me: int, ne: int, ze: int, schedule: Schedule = SEED
                ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(block, grid)`` of the rewritten kernel for a region: blocks of four waves (eight for
    a wide schedule), one per ``schedule.tile`` x ``schedule.tile_n`` block of output (64x64 by
    default), one grid layer per batch (a zero extent gives a zero grid dimension: nothing to
    launch)."""
    _check_subgroup(subgroup)
    return (schedule.waves * subgroup, 1, 1), (-(-ne // schedule.tile_n),
                                                -(-me // schedule.tile), ze)


# --------------------------------------------------------------------------- IR building


def _cast(x: ir.Expr, t: ElemType) -> ir.Expr:
    return x if x.type == t else ir.Cast(x=x, type=t)


def _and(*terms: ir.Expr) -> ir.Expr:
    out = terms[0]
    for t in terms[1:]:
        out = binary(BinOp.LAND, out, t)
    return out


def _builtin(which: Builtin) -> ir.BuiltinValue:
    return ir.BuiltinValue(which=which)


def _zero(t: ElemType) -> ir.Const:
    return ir.Const(value=0.0 if t.is_float else 0, type=t)


PACK = 4  # consecutive k one invocation converts into each byte plane's 32-bit word


def _pad(operand: str, t: ElemType) -> ir.Const:
    """What operand ``operand`` ("a" or "b") is staged as outside the region. A pads with -0.0:
    a padded product -0.0 * +0.0 is -0.0, which leaves every sum unchanged, a -0.0 one too
    (+0.0 would turn it into +0.0)."""
    return ir.Const(value=-0.0, type=t) if operand == "a" and t.is_float else _zero(t)


def _placeholders(e: ir.Expr) -> Iterator[ir.Expr]:
    from sarek.ir_walk import subexpressions

    return subexpressions(e)


# --------------------------------------------------------------------------- the rewrite


def _check_subgroup(subgroup: int) -> None:
    if subgroup not in SUPPORTED_SUBGROUP:
        raise RewriteError(f"subgroup {subgroup} has no template; supported: "
                           f"{', '.join(map(str, SUPPORTED_SUBGROUP))}")


def operands_refusal(gemm: Gemm, lowering: Lowering, schedule: Schedule) -> str | None:
    """Why ``schedule`` cannot multiply ``gemm``'s operands under ``lowering``, or None: a
    warpgroup schedule multiplies one 16-bit term with B staged as it is in memory."""
    scheme = scheme_for(lowering, gemm.operand_elt)
    if schedule.warpgroup and (scheme.terms != ("",) or scheme.operand.bits != 16
                               or gemm.b.elem is not scheme.operand):
        return (f"a warpgroup schedule multiplies one 16-bit term with B staged as it is in "
                f"memory; {lowering} on {gemm.b.elem} B is not that")
    return None


def kernel(original: ir.Kernel, gemm: Gemm, lowering: Lowering, subgroup: int = 32,
           frag: int = 16, staging: Staging = DENSE, schedule: Schedule = SEED) -> ir.Kernel:
    """The rewritten kernel (see the module docstring); ``RewriteError`` with the reason when a
    subgroup or fragment has no template, the lowering does not take the operands, or an
    address, bound, initial value or epilogue cannot be expressed in the rewritten launch.
    ``staging`` is the target's layout policy for the staged tiles (``sarek.staging``),
    ``schedule`` the block tile and reduction step (``sarek.schedule``)."""
    _check_subgroup(subgroup)
    if frag not in SUPPORTED_FRAGMENT:
        raise RewriteError(f"fragment {frag} has no template; supported: "
                           f"{', '.join(map(str, SUPPORTED_FRAGMENT))}")
    try:
        config_of(lowering, gemm.operand_elt, frag)
    except LoweringError as e:
        raise RewriteError(e.reason) from None
    scheme = scheme_for(lowering, gemm.operand_elt)
    if gemm.acc_type is not scheme.acc:
        raise RewriteError(f"{lowering} accumulates in {scheme.acc}; the kernel's accumulator "
                           f"is {gemm.acc_type}")
    if renames := user_renames(original):
        original = renamed(original, renames)
        gemm = recognize(original)
    for what, expr in (("initial value", gemm.init), ("epilogue", gemm.epilogue)):
        _expressible(what, expr)
    for name, acc in (("A", gemm.a), ("B", gemm.b)):
        unused = acc.col_stride if name == "A" else acc.row_stride
        if not (isinstance(unused, ir.Const) and unused.value == 0):
            raise RewriteError(f"operand {name}'s address depends on the output "
                               f"{'column' if name == 'A' else 'row'}, which a staged "
                               f"{'row' if name == 'A' else 'column'} tile cannot express")
    try:
        schedule.check(frag, schedule.waves * subgroup)
    except ScheduleError as e:
        raise RewriteError(e.reason) from None
    refused = operands_refusal(gemm, lowering, schedule)
    if refused is not None:
        raise RewriteError(refused)
    body = _Builder(gemm, scheme, subgroup, frag, staging, schedule).build()
    params = (*original.params, *(ir.ScalarParam(name=n, elem=I32) for n in _INTERNAL))
    suffix = "" if schedule == SEED else f"_{schedule.name}"
    rewritten = renamed(ir.Kernel(
        name=f"{original.name}_{lowering.value.lower()}{suffix}", params=params, body=body,
        subgroup=subgroup, block=(schedule.waves * subgroup, 1, 1)),
        dict(zip(_INTERNAL, region_names(original), strict=True)))
    ir_check.ensure_valid(rewritten)
    return rewritten


_PREFIX = "sk_"  # of every name the rewritten body declares (variables, arrays, fragments)
_INTERNAL = tuple(_PREFIX + n for n in EXTRA_NAMES)  # the region values inside the builder


def _unused(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def region_names(original: ir.Kernel) -> tuple[str, ...]:
    """The names of the five region parameters the rewrite of ``original`` appends:
    ``EXTRA_NAMES``, each followed by as many ``_`` as it takes not to be one of the kernel's
    own parameter names."""
    taken = {p.name for p in original.params}
    out: list[str] = []
    for name in EXTRA_NAMES:
        out.append(_unused(name, taken))
        taken.add(out[-1])
    return tuple(out)


def user_renames(original: ir.Kernel) -> dict[str, str]:
    """The kernel's parameters whose names begin with the rewrite's own prefix ``sk_``, each
    with the name it takes in the rewritten kernel (``u_`` in front, then ``_`` at the end as
    long as that is taken): the one change the rewrite makes to a user's names."""
    taken = {p.name for p in original.params}
    out: dict[str, str] = {}
    for p in original.params:
        if p.name.startswith(_PREFIX):
            out[p.name] = _unused("u_" + p.name, taken)
            taken.add(out[p.name])
    return out


def renamed(k: ir.Kernel, names: dict[str, str]) -> ir.Kernel:
    """``k`` with every identifier in ``names`` (parameters, variables, arrays, fragments)
    replaced. Runs with names that begin with ``sk_`` only, which no other string of the IR
    (an element type, an operator, a builtin) can equal."""
    def walk(x: object) -> object:
        if isinstance(x, str):
            return names.get(x, x)
        if isinstance(x, dict):
            return {key: walk(v) for key, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return ir.Kernel.model_validate(walk(k.model_dump(mode="json")))


def _expressible(what: str, e: ir.Expr) -> None:
    for x in _placeholders(e):
        if isinstance(x, ir.BuiltinValue):
            raise RewriteError(f"the {what} reads {x.which.value}, whose value in the "
                               "rewritten launch is not the original's")


class _Builder:
    """Builds the rewritten body for one gemm, lowering, subgroup and fragment."""

    def __init__(self, gemm: Gemm, scheme: Scheme, subgroup: int, frag: int,
                 staging: Staging, schedule: Schedule) -> None:
        self.gemm, self.scheme, self.subgroup, self.frag = gemm, scheme, subgroup, frag
        self.tile, self.wave_tile, self.step = schedule.tile, schedule.wave_tile, schedule.step
        self.tile_n, self.wave_columns = schedule.tile_n, schedule.wave_columns
        self.waves = schedule.waves
        self.prefetching = schedule.prefetch
        self.stages = schedule.stages
        self.threads = self.waves * subgroup
        self.per_wave = self.wave_tile // frag  # fragments along each side of a wave's tile
        # Accumulator fragments per wave (rows, columns) and their width: a square grid of the
        # wave's tile, or under a warpgroup schedule two 16 x 128 fragments (rows 16w and
        # 64 + 16w of the tile) and one 16 x 128 B fragment per sub-step for the block.
        self.warpgroup = schedule.warpgroup
        self.grid = (2, 1) if self.warpgroup else (self.per_wave, self.per_wave)
        self.acc_n = self.tile_n if self.warpgroup else frag
        # Row strides and B's layout of the staged tiles: the target's policy (padded 16-bit
        # rows, column-major 8-bit B), which moves elements but never changes a result.
        pad = staging.row_pad_bytes * 8 // 16 if scheme.operand.bits == 16 else 0
        self.a_stride, self.b_stride = self.step + pad, self.tile_n + pad
        col_b = scheme.operand.bits == 8 and staging.narrow_b_col_major
        self.b_layout = FragLayout.COL if col_b else FragLayout.ROW
        if self.b_layout is FragLayout.COL:
            self.b_stride = self.step
        # How deep one multiply-accumulate reduces: the fragment, or for 8-bit operands the
        # policy's deeper one where the steps divide into it (same sums: integers are exact).
        deep = staging.byte_k if scheme.operand.bits == 8 and frag == 16 else frag
        self.frag_k = deep if self.step % deep == 0 else frag
        # Byte planes staged from registers four k at a time, one 32-bit store per plane (the
        # target's policy), where A's and column-major B's four k are consecutive and the
        # block's invocations share the groups evenly.
        self.packed = (staging.packed_planes and scheme.operand is U8
                       and self.b_layout is FragLayout.COL and self.step % PACK == 0
                       and self.tile_n % 8 == 0 and all(
                           (rows * cols // PACK) % self.threads == 0
                           for rows, cols in ((self.tile, self.step), (self.step, self.tile_n))))
        limit = staging.shared_bytes
        if pad and limit is not None and self.shared_bytes() > limit:
            self.a_stride = self.step  # the room of A's padding, for a schedule that needs it
            if self.shared_bytes() > limit:
                self.a_stride += pad  # no fit either way: as the policy pads

    # ---------------------------------------------------------------- coordinates

    def covered(self, row: ir.Expr, col: ir.Expr) -> ir.Expr:
        """Whether output (row, col) of this block's batch is in the region."""
        me, ne, t = var("sk_me"), var("sk_ne"), var("sk_t")
        mapping = self.gemm.mapping
        col_major = isinstance(mapping, Mapping1D) and mapping.order == "col-major"
        within = add(mul(row, ne), col) if not col_major else add(mul(col, me), row)
        linear = add(mul(var("sk_z"), mul(me, ne)), within)
        return _and(binary(BinOp.LT, row, me), binary(BinOp.LT, col, ne),
                    binary(BinOp.LT, linear, t))

    def init(self) -> ir.Expr:
        """The initial value at output (sk_row, sk_col, sk_z)."""
        return self.gemm.init_at(var("sk_row"), var("sk_col"), var("sk_z"))

    def epilogue(self, acc: ir.Expr) -> ir.Expr:
        """The value stored at output (sk_row, sk_col, sk_z) for the sum ``acc``."""
        return self.gemm.epilogue_at(acc, var("sk_row"), var("sk_col"), var("sk_z"))

    def address(self, access: Access, row: ir.Expr, col: ir.Expr, k: ir.Expr) -> ir.Expr:
        return access.address(row, col, var("sk_z"), add(self.gemm.k_start, k))

    # ---------------------------------------------------------------- the body

    def build(self) -> tuple[ir.Stmt, ...]:
        tid = _builtin(Builtin.THREAD_IDX_X)
        body: list[ir.Stmt] = [
            ir.Let(name="sk_tid", type=I32, value=tid),
            ir.Let(name="sk_wave", type=I32, value=_builtin(Builtin.SUBGROUP_ID)),
            ir.Let(name="sk_wave_lane", type=I32, value=_builtin(Builtin.SUBGROUP_LANE)),
            ir.Let(name="sk_row0", type=I32,
                   value=mul(_builtin(Builtin.BLOCK_IDX_Y), const(self.tile))),
            ir.Let(name="sk_col0", type=I32,
                   value=mul(_builtin(Builtin.BLOCK_IDX_X), const(self.tile_n))),
            ir.Let(name="sk_z", type=I32, value=_builtin(Builtin.BLOCK_IDX_Z)),
            *self.declarations(),
            *self.start_accumulators(),
            *self.reduction(),
            *self.finish(),
        ]
        return tuple(body)

    def staged(self, operand: str, term: str) -> str:
        return f"sk_{operand}{'_' + term if term else ''}"

    def frag_names(self) -> Iterator[tuple[int, int]]:
        for i in range(self.grid[0]):
            for j in range(self.grid[1]):
                yield i, j

    def buffer(self, name: str) -> int:
        """Elements of one step's staged tile of operand ``name`` (each term has its own)."""
        if name == "a":
            return self.tile * self.a_stride
        return (self.step if self.b_layout is FragLayout.ROW else self.tile_n) * self.b_stride

    def as_is(self, name: str) -> bool:
        """Whether operand ``name``'s elements are staged as they are (one term of the array's
        own type, B row-major), so that a staged copy puts them where the fragments read."""
        access = self.gemm.a if name == "a" else self.gemm.b
        return self.scheme.terms == ("",) and self.scheme.operand == access.elem and (
            name == "a" or self.b_layout is FragLayout.ROW)

    def raw(self, name: str) -> bool:
        """Whether a pipelined schedule stages operand ``name`` raw: its elements as they are
        in global memory, copied ``stages - 1`` steps ahead into ``sk_r{name}``, and converted
        into the term arrays at the step that multiplies them."""
        return self.stages > 1 and not self.as_is(name)

    def raw_tile(self, name: str) -> tuple[Access, int, int]:
        """The access, rows and columns of operand ``name``'s tile of one step."""
        return (self.gemm.a, self.tile, self.step) if name == "a" else (
            self.gemm.b, self.step, self.tile_n)

    def shared_bytes(self) -> int:
        """Bytes of the shared arrays ``declarations`` declares."""
        return sum(d.size * d.elem.bits // 8 for d in self.declarations()
                   if isinstance(d, ir.ArrayDecl))

    def declarations(self) -> list[ir.Stmt]:
        out: list[ir.Stmt] = []
        for term in self.scheme.terms:
            for name in ("a", "b"):
                buffers = 1 if self.raw(name) else self.stages
                out.append(ir.ArrayDecl(name=self.staged(name, term), elem=self.scheme.operand,
                                        size=buffers * self.buffer(name),
                                        space=MemSpace.SHARED))
        for name in ("a", "b"):
            if self.raw(name):
                access, rows, cols = self.raw_tile(name)
                out.append(ir.ArrayDecl(name=f"sk_r{name}", elem=access.elem,
                                        size=self.stages * rows * cols, space=MemSpace.SHARED,
                                        align=16))
        # One fragment per wave at a time leaves through here (and an initial value enters).
        out.append(ir.ArrayDecl(name="sk_cs", elem=self.scheme.acc,
                                size=self.waves * self.frag * self.acc_n,
                                space=MemSpace.SHARED))
        shape = ir.FragShape(m=self.frag, n=self.acc_n, k=self.frag_k)
        for i, j in self.frag_names():
            for a in range(self.scheme.accumulators):
                out.append(ir.FragDecl(name=f"sk_acc{a}_{i}_{j}", use=FragUse.ACCUMULATOR,
                                       shape=shape, elem=self.scheme.acc))
        if self.scheme.step_sums:
            out += [ir.FragDecl(name=self.step_sum(a, i, j), use=FragUse.ACCUMULATOR,
                                shape=shape, elem=self.scheme.acc)
                    for i, j in self.frag_names() for a in range(self.scheme.accumulators)]
        if self.warpgroup:  # A per row and sub-step, B per sub-step: none is reloaded in a step
            subs = range(self.step // self.frag_k)
            out += [ir.FragDecl(name=f"sk_fa0_{i}_{q}", use=FragUse.A, shape=shape,
                                elem=self.scheme.operand) for q in subs for i in range(2)]
            out += [ir.FragDecl(name=f"sk_fb0_{q}", use=FragUse.B, shape=shape,
                                elem=self.scheme.operand) for q in subs]
            return out
        for t in range(len(self.scheme.terms)):
            for i in range(self.per_wave):
                out.append(ir.FragDecl(name=f"sk_fa{t}_{i}", use=FragUse.A, shape=shape,
                                       elem=self.scheme.operand))
                out.append(ir.FragDecl(name=f"sk_fb{t}_{i}", use=FragUse.B, shape=shape,
                                       elem=self.scheme.operand))
        return out

    def wave_origin(self, i: int, j: int) -> tuple[ir.Expr, ir.Expr]:
        """Row and column, within the block's tile, of fragment (i, j) of this wave."""
        w = var("sk_wave")
        if self.warpgroup:
            return add(mul(w, const(self.frag)), const(64 * i)), const(0)
        columns = const(self.wave_columns)
        row = add(mul(binary(BinOp.DIV, w, columns), const(self.wave_tile)),
                  const(i * self.frag))
        col = add(mul(binary(BinOp.REM, w, columns), const(self.wave_tile)),
                  const(j * self.frag))
        return row, col

    def per_thread(self, elements: int, body: list[ir.Stmt]) -> ir.For:
        """``for sk_q in range(elements / threads): sk_e = sk_q * threads + sk_tid; body``:
        a uniform loop in which the block's threads cover ``elements`` together."""
        e = add(mul(var("sk_q"), const(self.threads)), var("sk_tid"))
        return ir.For(var="sk_q", start=const(0), stop=const(elements // self.threads),
                      step=const(1), body=(ir.Let(name="sk_e", type=I32, value=e), *body))

    def per_lane(self, body: list[ir.Stmt]) -> ir.For:
        """``for sk_q in range(frag * frag / subgroup): sk_e = sk_q * subgroup + sk_wave_lane;
        body``: a uniform loop in which a wave's lanes cover one fragment's elements."""
        e = add(mul(var("sk_q"), const(self.subgroup)), var("sk_wave_lane"))
        trips = self.frag * self.acc_n // self.subgroup
        return ir.For(var="sk_q", start=const(0), stop=const(trips),
                      step=const(1), body=(ir.Let(name="sk_e", type=I32, value=e), *body))

    def exchange_offset(self) -> ir.Expr:
        """Where this wave's fragment lies in the exchange array ``sk_cs``."""
        return mul(var("sk_wave"), const(self.frag * self.acc_n))

    def exchanged(self) -> ir.Expr:
        """Element ``sk_e`` of this wave's fragment in ``sk_cs`` (row-major, stride frag)."""
        return add(self.exchange_offset(), var("sk_e"))

    def fragment_coordinates(self, i: int, j: int) -> list[ir.Stmt]:
        """``sk_row``, ``sk_col``: the output of element ``sk_e`` of fragment (i, j)."""
        row, col = self.wave_origin(i, j)
        return [
            ir.Let(name="sk_row", type=I32, value=add(
                add(var("sk_row0"), row), binary(BinOp.DIV, var("sk_e"), const(self.acc_n)))),
            ir.Let(name="sk_col", type=I32, value=add(
                add(var("sk_col0"), col), binary(BinOp.REM, var("sk_e"), const(self.acc_n)))),
        ]

    def through_exchange(self, frag: str) -> ir.FragStore:
        return ir.FragStore(frag=frag, array="sk_cs", offset=self.exchange_offset(),
                            stride=const(self.acc_n))

    def start_accumulators(self) -> list[ir.Stmt]:
        init = self.gemm.init
        constant = isinstance(init, ir.Const)
        planes = self.scheme.accumulators > 1  # their initial value is added at the end
        if planes or constant:
            value = init if constant and not planes else _zero(self.scheme.acc)
            return [ir.FragFill(frag=f"sk_acc{a}_{i}_{j}", value=_cast(value, self.scheme.acc))
                    for i, j in self.frag_names() for a in range(self.scheme.accumulators)]
        # The initial value varies by output: each wave stages it through its part of the
        # exchange array, one fragment at a time.
        here = self.covered(var("sk_row"), var("sk_col"))
        out: list[ir.Stmt] = []
        for i, j in self.frag_names():
            out += [
                self.per_lane([*self.fragment_coordinates(i, j), ir.Store(
                    array="sk_cs", index=self.exchanged(), value=ir.Select(
                        cond=here, a=_cast(self.init(), self.scheme.acc), b=_zero(self.scheme.acc),
                        type=self.scheme.acc))]),
                ir.Barrier(),
                ir.FragLoad(frag=f"sk_acc0_{i}_{j}", array="sk_cs",
                            offset=self.exchange_offset(), stride=const(self.acc_n)),
                ir.Barrier(),
            ]
        return out

    def convert(self, x: ir.Expr) -> list[tuple[str, ir.Expr]]:
        """The staged terms of one operand value ``x``: (term, value) pairs."""
        s = self.scheme
        if s.terms == ("",):
            return [("", _cast(x, s.operand))]
        if s.operand is U8:  # byte planes of the two's complement pattern
            u = _cast(x, U32)
            return [(t, _cast(binary(BinOp.AND, binary(BinOp.SHR, u, const(8 * p, U32)) if p else u,
                                 const(255, U32)), U8))
                    for p, t in enumerate(s.terms)]
        # bf16x3: hi = bf16(x), mid = bf16(x - hi), lo = bf16(x - hi - mid); the differences are
        # exact in f32.
        x32 = _cast(x, F32)
        hi = _cast(x32, ElemType.BF16)
        r1 = binary(BinOp.SUB, x32, _cast(hi, F32))
        mid = _cast(r1, ElemType.BF16)
        r2 = binary(BinOp.SUB, r1, _cast(mid, F32))
        return [("hi", hi), ("mid", mid), ("lo", _cast(r2, ElemType.BF16))]

    def operands(self) -> list[tuple[str, Access, int, int]]:
        """(name, access, rows, columns) of the A and B tiles one step stages."""
        g, step = self.gemm, self.step
        return [("a", g.a, self.tile, step), ("b", g.b, step, self.tile_n)]

    def fetch(self, name: str, access: Access, cols: int, k0: ir.Expr) -> list[ir.Stmt]:
        """``sk_x``: element ``sk_e`` of the A or B tile of the step starting at ``k0``, read
        from global memory inside the region and zero outside."""
        if name == "a":
            row = add(var("sk_row0"), binary(BinOp.DIV, var("sk_e"), const(cols)))
            kk = binary(BinOp.REM, var("sk_e"), const(cols))
            inside = _and(binary(BinOp.LT, var("sk_x1"), var("sk_me")),
                          binary(BinOp.LT, var("sk_k"), var("sk_d")))
            addr = self.address(access, var("sk_x1"), const(0), var("sk_k"))
        else:
            kk = binary(BinOp.DIV, var("sk_e"), const(cols))
            row = add(var("sk_col0"), binary(BinOp.REM, var("sk_e"), const(cols)))
            inside = _and(binary(BinOp.LT, var("sk_x1"), var("sk_ne")),
                          binary(BinOp.LT, var("sk_k"), var("sk_d")))
            addr = self.address(access, const(0), var("sk_x1"), var("sk_k"))
        load = ir.Load(array=access.array, index=addr, type=access.elem)
        pad = _pad(name, access.elem)
        return [
            ir.Let(name="sk_x1", type=I32, value=row),  # the output row (A) or column (B)
            ir.Let(name="sk_k", type=I32, value=add(k0, kk)),  # relative to k_start
            ir.Let(name="sk_x", type=access.elem,
                   value=ir.Select(cond=inside, a=load, b=pad, type=access.elem)),
        ]

    def store(self, name: str, access: Access, cols: int, base: ir.Expr | None = None
              ) -> list[ir.Stmt]:
        """``sk_x``, element ``sk_e`` of the A or B tile, converted into its staged terms (of
        the buffer starting at ``base``, when the step's tiles are one of several)."""
        stride = self.a_stride if name == "a" else self.b_stride
        major = binary(BinOp.DIV, var("sk_e"), const(cols))
        minor = binary(BinOp.REM, var("sk_e"), const(cols))
        if name == "b" and self.b_layout is FragLayout.COL:
            major, minor = minor, major  # column c of B: its k are consecutive
        at = add(mul(major, const(stride)), minor)
        if base is not None:
            at = add(base, at)
        return [ir.Store(array=self.staged(name, term), index=at, value=staged)
                for term, staged in self.convert(var("sk_x", access.elem))]

    def group(self, name: str) -> list[ir.Stmt]:
        """``sk_g``, ``sk_gk``: where group ``sk_e`` of four consecutive k lies in the A or B
        tile: its row (A) or column (B) in the tile and its first k in the step. A's groups go
        along k, then rows; B's take 8 columns, then k, then the next 8 columns, so that a
        warp's loads of one k cover whole 32-byte sectors and its packed stores consecutive
        words."""
        e, quads = var("sk_e"), const(self.step // PACK)
        within: ir.Expr
        if name == "a":
            within, quad = binary(BinOp.DIV, e, quads), binary(BinOp.REM, e, quads)
        else:
            eight = const(8)
            within = add(mul(binary(BinOp.DIV, e, mul(eight, quads)), eight),
                         binary(BinOp.REM, e, eight))
            quad = binary(BinOp.REM, binary(BinOp.DIV, e, eight), quads)
        return [ir.Let(name="sk_g", type=I32, value=within),
                ir.Let(name="sk_gk", type=I32, value=mul(quad, const(PACK)))]

    def fetch_group(self, name: str, access: Access, k0: ir.Expr) -> list[ir.Stmt]:
        """``sk_v0`` .. ``sk_v3``: the four elements of group (``sk_g``, ``sk_gk``) of the A or
        B tile of the step starting at ``k0``, read inside the region and zero outside."""
        origin, extent = ("sk_row0", "sk_me") if name == "a" else ("sk_col0", "sk_ne")
        out: list[ir.Stmt] = [
            ir.Let(name="sk_x1", type=I32, value=add(var(origin), var("sk_g"))),
            ir.Let(name="sk_k", type=I32, value=add(k0, var("sk_gk")))]
        for j in range(PACK):
            k = add(var("sk_k"), const(j))
            inside = _and(binary(BinOp.LT, var("sk_x1"), var(extent)),
                          binary(BinOp.LT, k, var("sk_d")))
            row, col = (var("sk_x1"), const(0)) if name == "a" else (const(0), var("sk_x1"))
            load = ir.Load(array=access.array, index=self.address(access, row, col, k),
                           type=access.elem)
            out.append(ir.Let(name=f"sk_v{j}", type=access.elem, value=ir.Select(
                cond=inside, a=load, b=_pad(name, access.elem), type=access.elem)))
        return out

    def store_group(self, name: str, access: Access) -> list[ir.Stmt]:
        """The byte planes of ``sk_v0`` .. ``sk_v3``, each plane's four bytes (k order, least
        significant first) as one packed store at group (``sk_g``, ``sk_gk``)."""
        stride = self.a_stride if name == "a" else self.b_stride
        at = add(mul(var("sk_g"), const(stride)), var("sk_gk"))
        out: list[ir.Stmt] = []
        for p, term in enumerate(self.scheme.terms):
            word: ir.Expr | None = None
            for j in range(PACK):
                u = _cast(var(f"sk_v{j}", access.elem), U32)
                byte = binary(BinOp.AND, binary(BinOp.SHR, u, const(8 * p, U32)) if p else u,
                              const(255, U32))
                part = binary(BinOp.SHL, byte, const(8 * j, U32)) if j else byte
                word = part if word is None else binary(BinOp.OR, word, part)
            assert word is not None
            out.append(ir.StorePacked(array=self.staged(name, term), index=at, value=word))
        return out

    def stage(self) -> list[ir.Stmt]:
        """The A and B tiles of this step into shared memory, zero outside the region."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name), *self.fetch_group(name, access, var("sk_k0")),
                *self.store_group(name, access)])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [*self.fetch(name, access, cols, var("sk_k0")),
                                              *self.store(name, access, cols)])
                for name, access, rows, cols in self.operands()]

    def copy(self, name: str, access: Access, rows: int, cols: int, k0: ir.Expr,
             base: ir.Expr) -> ir.StageCopy:
        """The staged copy of the A or B tile of the step starting at ``k0``: into the buffer
        at ``base`` of the staged array when the elements are staged as they are, else into
        the raw array ``sk_r{name}`` (rows of ``cols`` elements)."""
        def left(extent: str, start: ir.Expr) -> ir.Expr:  # rows or columns left in the region
            return binary(BinOp.SUB, var(extent), start)

        if name == "a":
            origin = self.address(access, var("sk_row0"), const(0), k0)
            strides = (access.row_stride, access.red_stride)
            limits = (left("sk_me", var("sk_row0")), left("sk_d", k0))
        else:
            origin = self.address(access, const(0), var("sk_col0"), k0)
            strides = (access.red_stride, access.col_stride)
            limits = (left("sk_d", k0), left("sk_ne", var("sk_col0")))
        fill = _pad(name, access.elem)
        pitch = cols if self.raw(name) else self.a_stride if name == "a" else self.b_stride
        return ir.StageCopy(dst=f"sk_r{name}" if self.raw(name) else self.staged(name, ""),
                            dst_offset=base, dst_pitch=pitch,
                            src=access.array, src_offset=origin, src_row_stride=strides[0],
                            src_col_stride=strides[1], rows=rows, cols=cols,
                            row_limit=limits[0], col_limit=limits[1], fill=fill)

    def stage_into(self, k0: ir.Expr, slot: ir.Expr) -> list[ir.Stmt]:
        """The A and B tiles of the step starting at ``k0`` into buffer ``slot`` (of the
        staged arrays, or of the raw ones), each by one staged copy; then the group of copies
        is closed."""
        out: list[ir.Stmt] = []
        for name, access, rows, cols in self.operands():
            size = rows * cols if self.raw(name) else self.buffer(name)
            out.append(self.copy(name, access, rows, cols, k0, mul(slot, const(size))))
        return [*out, ir.StageCommit()]

    def convert_raw(self, slot: ir.Expr) -> list[ir.Stmt]:
        """The raw tiles of buffer ``slot`` converted into the staged terms (empty when no
        operand is staged raw)."""
        out: list[ir.Stmt] = []
        for name, access, rows, cols in self.operands():
            if self.raw(name):
                at = add(mul(slot, const(rows * cols)), var("sk_e"))
                out.append(self.per_thread(rows * cols, [
                    ir.Let(name="sk_x", type=access.elem,
                           value=ir.Load(array=f"sk_r{name}", index=at, type=access.elem)),
                    *self.store(name, access, cols)]))
        return out

    def pipelined(self) -> list[ir.Stmt]:
        """The steps of the reduction with ``stages`` buffers: the first ``stages - 1`` steps
        are issued before the loop; each step waits for its own tiles, passes a barrier (its
        tiles are complete, and every wave is done with the buffer the step refills), issues
        the tiles of ``stages - 1`` steps ahead into that buffer and multiplies. Raw tiles are
        converted into the (single) term arrays first, behind a second barrier, and then the
        refill is issued after the first sub-step's products."""
        ahead, step = self.stages - 1, self.step
        slot = binary(BinOp.REM, binary(BinOp.DIV, var("sk_k0"), const(step)),
                      const(self.stages))
        refill = binary(BinOp.REM, add(var("sk_slot"), const(ahead)), const(self.stages))
        prologue = [stmt for s in range(ahead)
                    for stmt in self.stage_into(const(s * step), const(s))]
        body: tuple[ir.Stmt, ...] = (ir.Let(name="sk_slot", type=I32, value=slot),
                                     ir.StageWait(pending=ahead - 1), ir.Barrier())
        refills = self.stage_into(add(var("sk_k0"), const(ahead * step)), refill)
        converts = self.convert_raw(var("sk_slot"))
        # Where raw tiles are converted first, the refill goes out after the first sub-step's
        # products (faster on the H200 for Bf16 and Bf16x3; slower for F16 staged as is).
        if converts:
            body = (*body, *converts, ir.Barrier(),
                    *self.multiply(var("sk_slot"), between=refills))
        else:
            body = (*body, *refills, *self.multiply(var("sk_slot")))
        return [*prologue,
                ir.For(var="sk_k0", start=const(0), stop=var("sk_d"), step=const(step), body=body),
                ir.StageWait(pending=0)]  # the copies issued past the end land too

    def prefetch(self, k0: ir.Expr) -> list[ir.Stmt]:
        """The A and B tiles of the step starting at ``k0`` into each invocation's registers
        (``sk_pa``, ``sk_pb``): issued before the current step's products, so that the loads
        overlap them."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name), *self.fetch_group(name, access, k0),
                *(ir.Store(array=f"sk_p{name}", index=self.register(j),
                           value=var(f"sk_v{j}", access.elem)) for j in range(PACK))])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [
            *self.fetch(name, access, cols, k0),
            ir.Store(array=f"sk_p{name}", index=var("sk_q"), value=var("sk_x", access.elem))])
            for name, access, rows, cols in self.operands()]

    def register(self, j: int) -> ir.Expr:
        """Where element ``j`` of this trip's group lies in the prefetch registers."""
        return add(mul(var("sk_q"), const(PACK)), const(j))

    def stage_prefetched(self) -> list[ir.Stmt]:
        """The prefetched registers into shared memory."""
        if self.packed:
            return [self.per_thread(rows * cols // PACK, [
                *self.group(name),
                *(ir.Let(name=f"sk_v{j}", type=access.elem, value=ir.Load(
                    array=f"sk_p{name}", index=self.register(j), type=access.elem))
                  for j in range(PACK)),
                *self.store_group(name, access)])
                for name, access, rows, cols in self.operands()]
        return [self.per_thread(rows * cols, [
            ir.Let(name="sk_x", type=access.elem,
                   value=ir.Load(array=f"sk_p{name}", index=var("sk_q"), type=access.elem)),
            *self.store(name, access, cols)])
            for name, access, rows, cols in self.operands()]

    def reduction(self) -> list[ir.Stmt]:
        """The loop over the steps of the reduction. With prefetching, each step stages the
        registers fetched during the previous one and fetches the next step's tiles before
        multiplying; one barrier before the products (the staged tiles are complete) and one
        after (nobody still reads them when the next step overwrites them)."""
        if self.stages > 1:
            return self.pipelined()
        if not self.prefetching:
            body = (*self.stage(), ir.Barrier(), *self.multiply(), ir.Barrier())
            return [ir.For(var="sk_k0", start=const(0), stop=var("sk_d"), step=const(self.step),
                           body=body)]
        registers = [ir.ArrayDecl(name=f"sk_p{name}", elem=access.elem,
                                  size=rows * cols // self.threads, space=MemSpace.LOCAL)
                     for name, access, rows, cols in self.operands()]
        nxt = add(var("sk_k0"), const(self.step))
        body = (*self.stage_prefetched(), ir.Barrier(), *self.prefetch(nxt), *self.multiply(),
                ir.Barrier())
        return [*registers, *self.prefetch(const(0)),
                ir.For(var="sk_k0", start=const(0), stop=var("sk_d"), step=const(self.step),
                       body=body)]

    def multiply(self, slot: ir.Expr | None = None, between: Sequence[ir.Stmt] = ()
                 ) -> list[ir.Stmt]:
        """Each wave: per sub-step of ``frag_k`` along k, load fragments (from buffer ``slot``
        when the step's tiles are one of several), multiply-accumulate; ``between`` after the
        first sub-step's products."""
        out: list[ir.Stmt] = []
        f = self.frag_k

        def buffered(name: str, offset: ir.Expr) -> ir.Expr:
            if slot is None or self.raw(name):  # one buffer of terms
                return offset
            return add(mul(slot, const(self.buffer(name))), offset)

        if self.warpgroup:  # every wave: its two rows of A by the block's one B, per sub-step
            for q, kk0 in enumerate(range(0, self.step, f)):
                for i in range(2):
                    row, _ = self.wave_origin(i, 0)
                    out.append(ir.FragLoad(
                        frag=f"sk_fa0_{i}_{q}", array=self.staged("a", ""),
                        offset=buffered("a", add(mul(row, const(self.a_stride)), const(kk0))),
                        stride=const(self.a_stride)))
                out.append(ir.FragLoad(frag=f"sk_fb0_{q}", array=self.staged("b", ""),
                                       offset=buffered("b", const(kk0 * self.b_stride)),
                                       stride=const(self.b_stride)))
                out += [ir.FragMulAdd(d=f"sk_acc0_{i}_0", a=f"sk_fa0_{i}_{q}",
                                      b=f"sk_fb0_{q}", c=f"sk_acc0_{i}_0") for i in range(2)]
                if q == 0:
                    out += between
            return out

        for kk0 in range(0, self.step, f):
            for t, term in enumerate(self.scheme.terms):
                for i in range(self.per_wave):
                    row, _ = self.wave_origin(i, 0)
                    a_offset = add(mul(row, const(self.a_stride)), const(kk0))
                    out.append(ir.FragLoad(frag=f"sk_fa{t}_{i}", array=self.staged("a", term),
                                           offset=buffered("a", a_offset),
                                           stride=const(self.a_stride), layout=FragLayout.ROW))
                    _, col = self.wave_origin(0, i)
                    b_offset = (add(const(kk0 * self.b_stride), col)
                                if self.b_layout is FragLayout.ROW
                                else add(mul(col, const(self.b_stride)), const(kk0)))
                    out.append(ir.FragLoad(frag=f"sk_fb{t}_{i}", array=self.staged("b", term),
                                           offset=buffered("b", b_offset),
                                           stride=const(self.b_stride),
                                           layout=self.b_layout))
            out += self.products()
            if kk0 == 0:
                out += between
        return out

    def step_sum(self, a: int, i: int, j: int) -> str:
        """The fresh accumulator of accumulator ``a`` of fragment (i, j) (``Scheme.step_sums``)."""
        return f"sk_step{a}_{i}_{j}"

    def products(self) -> list[ir.Stmt]:
        """One sub-step's products, in the scheme's order for each accumulator. Products
        outer, fragments inner: every run of (i, j) is independent (a simulator batches it, a
        device overlaps it). With ``step_sums`` they go into fresh accumulators, one per
        fragment, that start at -0.0 (the identity of round-to-nearest addition, so an
        all-zero sub-step leaves the running sum's bits alone, a -0.0 one too) and are then
        added to the running ones."""
        s = self.scheme
        frags = [(a, i, j) for i, j in self.frag_names() for a in range(s.accumulators)]
        into = {x: self.step_sum(*x) if s.step_sums else f"sk_acc{x[0]}_{x[1]}_{x[2]}"
                for x in frags}
        zero = ir.Const(value=-0.0 if s.acc.is_float else 0, type=s.acc)
        out: list[ir.Stmt] = [ir.FragFill(frag=into[x], value=zero)
                              for x in frags] if s.step_sums else []
        for ta, tb, a in s.products:
            for i, j in self.frag_names():
                acc = into[(a, i, j)]
                out.append(ir.FragMulAdd(d=acc, a=f"sk_fa{ta}_{i}", b=f"sk_fb{tb}_{j}", c=acc))
        if s.step_sums:
            out += [ir.FragAdd(d=f"sk_acc{a}_{i}_{j}", a=f"sk_acc{a}_{i}_{j}", b=into[(a, i, j)])
                    for a, i, j in frags]
        return out

    def original_where_beyond(self, limit: float) -> list[ir.Stmt]:
        """``sk_sum`` recomputed as the original kernel computes it (its initial value, then
        its update in k order) where it is NaN, infinite or at least ``limit`` in magnitude."""
        g, acc_t = self.gemm, self.scheme.acc
        total = var("sk_sum", acc_t)
        row, col, p = var("sk_row"), var("sk_col"), var("sk_p")
        a = _cast(ir.Load(array=g.a.array, index=self.address(g.a, row, col, p), type=g.a.elem),
                  acc_t)
        b = _cast(ir.Load(array=g.b.array, index=self.address(g.b, row, col, p), type=g.b.elem),
                  acc_t)
        update: ir.Expr = (ir.Call(fn=ir.MathFn.FMA, args=(a, b, total), type=acc_t) if g.fused
                           else binary(BinOp.ADD, total, binary(BinOp.MUL, a, b)))
        magnitude = ir.Call(fn=ir.MathFn.ABS, args=(total,), type=acc_t)
        within = binary(BinOp.LT, magnitude, ir.Const(value=limit, type=acc_t))
        return [ir.If(cond=logical_not(within), then=(
            ir.Assign(name="sk_sum", value=_cast(self.init(), acc_t)),
            ir.For(var="sk_p", start=const(0), stop=var("sk_d"), step=const(1),
                   body=(ir.Assign(name="sk_sum", value=update),))))]

    def finish(self) -> list[ir.Stmt]:
        """Accumulators out through the exchange array, one fragment per wave at a time; each
        covered output gets the epilogue."""
        g, acc_t = self.gemm, self.scheme.acc
        here = self.covered(var("sk_row"), var("sk_col"))

        def store(total: ir.Expr) -> ir.Stmt:
            address = self.address(g.c, var("sk_row"), var("sk_col"), const(0))
            if self.scheme.original_beyond is None:
                return ir.If(cond=here, then=(ir.Store(
                    array=g.c.array, index=address,
                    value=_cast(self.epilogue(total), g.c.elem)),))
            return ir.If(cond=here, then=(
                ir.Let(name="sk_sum", type=acc_t, value=total),
                *self.original_where_beyond(self.scheme.original_beyond),
                ir.Store(array=g.c.array, index=address,
                         value=_cast(self.epilogue(var("sk_sum", acc_t)), g.c.elem))))

        exchanged = ir.Load(array="sk_cs", index=self.exchanged(), type=acc_t)
        out: list[ir.Stmt] = []
        if self.scheme.accumulators > 1:
            out.append(ir.ArrayDecl(name="sk_out", elem=I32,
                                    size=self.frag * self.frag // self.subgroup,
                                    space=MemSpace.LOCAL))
        for i, j in self.frag_names():
            if self.scheme.accumulators == 1:
                out += [self.through_exchange(f"sk_acc0_{i}_{j}"), ir.Barrier(),
                        self.per_lane([*self.fragment_coordinates(i, j), store(exchanged)]),
                        ir.Barrier()]
                continue
            # Byte planes: sk_out[q] = init + sum_s (acc_s << 8s), wrapping.
            total = ir.Load(array="sk_out", index=var("sk_q"), type=I32)
            out.append(self.per_lane([*self.fragment_coordinates(i, j), ir.Store(
                array="sk_out", index=var("sk_q"), value=ir.Select(
                    cond=here, a=_cast(self.init(), I32), b=const(0), type=I32))]))
            for a in range(self.scheme.accumulators):
                shifted = binary(BinOp.SHL, exchanged, const(8 * a)) if a else exchanged
                out += [self.through_exchange(f"sk_acc{a}_{i}_{j}"), ir.Barrier(),
                        self.per_lane([ir.Store(array="sk_out", index=var("sk_q"),
                                                value=add(total, shifted))]),
                        ir.Barrier()]
            out.append(self.per_lane([*self.fragment_coordinates(i, j), store(total)]))
        return out


# --------------------------------------------------------------------------- one call


@dataclass(frozen=True)
class Rewritten:
    """The rewrite of one launch: the launch of the rewritten kernel (its arguments are the
    original's followed by the region), and what it was derived from."""

    launch: Launch
    gemm: Gemm
    region: Region
    lowering: Lowering
    subgroup: int
    frag: int
    schedule: Schedule = SEED


class RewriteTarget(Protocol):
    """What the rewrite needs of a target (``backends.target.Target`` is one): its staging
    policy, the subgroups and fragments it prints, and why it refuses a configuration."""

    @property
    def staging(self) -> Staging: ...
    @property
    def subgroups(self) -> tuple[int, ...]: ...
    @property
    def fragments(self) -> tuple[int, ...]: ...
    def refuses(self, lowering: Lowering, subgroup: int, frag: int) -> str | None: ...


def configuration(target: RewriteTarget, lowering: Lowering, subgroup: int | None = None,
                  frag: int | None = None) -> tuple[int, int]:
    """The (subgroup, fragment) ``target`` rewrites ``lowering`` at: the ones asked for, else
    the first of the target's own pairs that it accepts (its printer and its device gate; 32
    and 16 preferred); ``RewriteError`` with the target's reason when none is."""
    subgroups = [subgroup] if subgroup is not None else sorted(
        target.subgroups or SUPPORTED_SUBGROUP, key=lambda s: s != 32)
    frags = [frag] if frag is not None else sorted(target.fragments or SUPPORTED_FRAGMENT,
                                                   key=lambda f: f != 16)
    first_reason = None
    for sg in subgroups:
        for fr in frags:
            reason = target.refuses(lowering, sg, fr)
            if reason is None:
                return sg, fr
            first_reason = first_reason or reason
    raise RewriteError(first_reason or f"the target prints no {lowering} rewrite")


def rewrite_launch(original: Launch, *, lowering: Lowering | None = None,
                   precision: Literal["accurate", "fast"] = "accurate",
                   subgroup: int | None = None, frag: int | None = None,
                   staging: Staging | None = None, schedule: Schedule | None = None,
                   target: RewriteTarget | None = None) -> Rewritten:
    """Recognizes the GEMM nest of ``original.kernel``, computes the region its launch
    covers, selects a lowering (unless one is given), rewrites the kernel (staged as
    ``staging`` says: a target's ``Target.staging``) under ``schedule`` (by default the one
    ``staging.schedule_for`` picks for the region: the seed's unless the region is large and
    the target names a larger one) and returns the launch of the rewritten kernel. With
    ``target`` (a ``backends`` target; ``sarek.rewrite_launch`` takes its name) the staging,
    subgroup and fragment not given are that target's (``configuration``); without, the
    neutral ones (dense staging, subgroup 32, fragment 16). Raises ``NotAGemm``, ``RegionError``,
    ``LoweringError`` or ``RewriteError`` with the reason."""
    from sarek.matrix_mapping import region
    from sarek.matrix_scheme import select

    original.arg_list()  # a missing argument is named here, before any work
    gemm = recognize(original.kernel)
    reg = region(gemm, original.grid, original.block, dict(original.args))
    chosen = lowering if lowering is not None else select(gemm, precision)
    if target is not None:
        staging = staging or target.staging
        subgroup, frag = configuration(target, chosen, subgroup, frag)
    staging = staging or DENSE
    subgroup = 32 if subgroup is None else subgroup
    frag = 16 if frag is None else frag
    if schedule is None:
        schedule = staging.schedule_for(
            chosen.value, reg.me, reg.ne,
            takes=lambda s: operands_refusal(gemm, chosen, s) is None)
    rewritten = kernel(original.kernel, gemm, chosen, subgroup, frag, staging, schedule)
    block, grid = launch_dims(subgroup, me=reg.me, ne=reg.ne, ze=reg.ze, schedule=schedule)
    renames = user_renames(original.kernel)
    args = {**{renames.get(name, name): v for name, v in original.args.items()},
            **dict(zip(region_names(original.kernel), reg.args, strict=True))}
    notes = {**original.notes, "lowering": chosen.value, "subgroup": subgroup, "frag": frag,
             "schedule": schedule.name}
    return Rewritten(Launch(rewritten, args, grid, block, notes), gemm, reg, chosen, subgroup,
                     frag, schedule)
