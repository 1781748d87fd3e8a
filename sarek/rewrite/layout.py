"""The geometry of the rewritten body: the schedule's tiles, waves and fragments, the staged
arrays' strides and declarations, the region test, and where each lane's elements of a
fragment lie (``specs/matrix-pattern-rewrite.md``, "The rewrite")."""

from __future__ import annotations

from collections.abc import Iterator

from sarek import ir
from sarek.ir import BinOp, FragLayout, FragUse, MemSpace
from sarek.ir_build import add, binary, const, mul, var
from sarek.matrix_pattern import Access, Gemm, Mapping1D
from sarek.matrix_scheme import Scheme
from sarek.rewrite.parts import (
    I32,
    PACK,
    U8,
    conjunction,
)
from sarek.schedule import Schedule
from sarek.staging import Staging


class Layout:
    """The body's geometry for one gemm, lowering, subgroup, fragment, staging policy and
    schedule; the parts of the builder (``Copies``, ``Multiply``, ``Builder``) extend it."""

    def __init__(self, gemm: Gemm, scheme: Scheme, subgroup: int, frag: int,
                 staging: Staging, schedule: Schedule) -> None:
        self.gemm, self.scheme, self.subgroup, self.frag = gemm, scheme, subgroup, frag
        self.tile, self.wave_tile, self.step = schedule.tile, schedule.wave_tile, schedule.step
        self.tile_n, self.wave_columns = schedule.tile_n, schedule.wave_columns
        self.waves = schedule.waves
        self.prefetching = schedule.prefetch
        self.stages, self.ahead = schedule.stages, schedule.ahead
        self.bulk = schedule.bulk  # staged copies a target may issue as bulk tensor copies
        self.specialized = schedule.specialized  # a warpgroup more, which multiplies nothing
        self.persistent = schedule.persistent  # each block takes tiles in turn
        self.ordered = schedule.ordered  # in groups of tile rows, down each column first
        self.threads = self.waves * subgroup
        self.per_wave = self.wave_tile // frag  # fragments along each side of a wave's tile
        # Accumulator fragments per wave as the target's policy shapes them for the schedule:
        # a square grid over the wave's tile, or strips across the block's tile (as wide as
        # the tile, or the policy's width under sub-step sums) that the block's waves
        # multiply by B fragments they share, one per strip column and sub-step.
        fragments = staging.fragments(schedule, frag, scheme.step_sums)
        self.strips = fragments.shared_b
        # The exchange array holds one fragment per wave, or under strips one per wave of a
        # group of four, the groups taking turns (two 16x256 f32 strips a wave would take
        # 128 KiB); ``exchange_turns``.
        self.turns = schedule.groups if self.strips else 1
        self.grid = (fragments.rows, fragments.cols)
        self.acc_m, self.acc_n = fragments.m, fragments.n
        # Rows of the exchange array: a fragment's row and the policy's padding, which spreads
        # the rows a warp's accumulator stores reach over the shared-memory banks.
        self.exchange_stride = self.acc_n + staging.exchange_pad
        # Row strides and B's layout of the staged tiles: the target's policy (padded 16-bit
        # rows, column-major 8-bit B), which moves elements but never changes a result.
        # (the policy's byte-plane layout applies where its planes land by staged copies)
        planes = scheme.operand is U8 and self.stages > 1
        if scheme.operand.bits == 16:  # unless the target lays the tiles out in swizzle atoms
            swizzled = schedule.warpgroup and self.step == staging.swizzled_depth
            pad = 0 if swizzled else staging.row_pad_bytes * 8 // 16
        else:
            pad = staging.planes_pad_bytes if planes else 0
        self.a_stride, self.b_stride = self.step + pad, self.tile_n + pad
        col_b = scheme.operand.bits == 8 and (staging.narrow_b_col_major
                                              or (planes and staging.planes_b_col_major))
        self.b_layout = FragLayout.COL if col_b else FragLayout.ROW
        if self.b_layout is FragLayout.COL:
            self.b_stride = self.step + (pad if planes else 0)
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
        self.converting = staging.converting_copies
        self.chunk_loops = staging.chunk_loops and scheme.chunk is not None
        self.pack_outputs = staging.packed_out
        # Where the staged copies read along k: from k_start (the reduction's first element)
        # up to the region value ``sk_d``, or for the stacked byte planes one phase's blocks
        # (``Multiply.stacked``)
        self.k_base: ir.Expr | None = None
        self.k_stop = "sk_d"
        self.exchange_host: str | None = None  # the staged array whose bytes sk_cs reuses
        limit = staging.shared_bytes
        if limit is not None and self.shared_bytes() > limit:
            self.fit(limit, pad, staging.exchange_in_tiles)

    def fit(self, limit: int, pad: int, share: bool) -> None:
        """Room for a schedule whose shared arrays exceed ``limit`` bytes as the policy stages
        them: the first that fits of the exchange array in a staged tile's bytes (where the
        policy allows it, ``share``), then also A's rows unpadded, then B's too; as the policy
        stages them when nothing fits (the target then refuses the schedule)."""
        policy = (self.a_stride, self.b_stride)
        unpadded_b = self.b_stride - pad if self.b_layout is FragLayout.ROW else self.b_stride
        strides = [(self.a_stride, self.b_stride)] if share else []
        if pad:
            strides += [(self.step, self.b_stride), (self.step, unpadded_b)]
        for a_stride, b_stride in strides:
            self.a_stride, self.b_stride = a_stride, b_stride
            self.exchange_host = self.exchange_room() if share else None
            if self.shared_bytes() <= limit:
                return
        self.a_stride, self.b_stride = policy
        self.exchange_host = None

    def covered(self, row: ir.Expr, col: ir.Expr) -> ir.Expr:
        """Whether output (row, col) of this block's batch is in the region."""
        me, ne, t = var("sk_me"), var("sk_ne"), var("sk_t")
        mapping = self.gemm.mapping
        col_major = isinstance(mapping, Mapping1D) and mapping.order == "col-major"
        within = add(mul(row, ne), col) if not col_major else add(mul(col, me), row)
        linear = add(mul(var("sk_z"), mul(me, ne)), within)
        return conjunction(binary(BinOp.LT, row, me), binary(BinOp.LT, col, ne),
                           binary(BinOp.LT, linear, t))

    def init(self) -> ir.Expr:
        """The initial value at output (sk_row, sk_col, sk_z)."""
        return self.gemm.init_at(var("sk_row"), var("sk_col"), var("sk_z"))

    def epilogue(self, acc: ir.Expr) -> ir.Expr:
        """The value stored at output (sk_row, sk_col, sk_z) for the sum ``acc``."""
        return self.gemm.epilogue_at(acc, var("sk_row"), var("sk_col"), var("sk_z"))

    def address(self, access: Access, row: ir.Expr, col: ir.Expr, k: ir.Expr) -> ir.Expr:
        return access.address(row, col, var("sk_z"), add(self.gemm.k_start, k))

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
        own type, or terms the pre-pass split, each from its own array; B row-major), so that
        a staged copy puts them where the fragments read."""
        access = self.gemm.a if name == "a" else self.gemm.b
        one = self.scheme.terms == ("",) or self.gemm.split_terms is not None
        return one and self.scheme.operand == access.elem and (
            name == "a" or self.b_layout is FragLayout.ROW or self.scheme.stacked)

    def raw(self, name: str) -> bool:
        """Whether a pipelined schedule stages operand ``name`` raw: its elements as they are
        in global memory, copied ``stages - 1`` steps ahead into ``sk_r{name}``, and converted
        into the term arrays at the step that multiplies them."""
        return self.stages > 1 and not self.as_is(name)

    def raw_tile(self, name: str) -> tuple[Access, int, int]:
        """The access, rows and columns of operand ``name``'s tile of one step."""
        return (self.gemm.a, self.tile, self.step) if name == "a" else (
            self.gemm.b, self.step, self.tile_n)

    def terms(self, name: str) -> set[str]:
        """The staged arrays of operand ``name``'s terms."""
        return {self.staged(name, term) for term in self.scheme.terms}

    def shared_bytes(self) -> int:
        """Bytes of the shared arrays the target declares for ``declarations``: an array that
        shares another's storage takes none, and where the target's copies convert
        (``Staging.converting_copies``) a raw operand's term arrays take a buffer per stage
        and its raw array none."""
        total = 0
        for d in self.declarations():
            if not isinstance(d, ir.ArrayDecl) or d.shares is not None:
                continue
            buffers = 1
            if self.converting and any(self.raw(name) and d.name in self.terms(name)
                                       for name in ("a", "b")):
                buffers = self.stages
            if self.converting and d.name in {f"sk_r{name}" for name in ("a", "b")}:
                buffers = 0
            total += buffers * d.size * d.elem.bits // 8
        return total

    def exchange_size(self) -> int:
        """Elements of the exchange array ``sk_cs``: one accumulator fragment for each wave
        of a turn."""
        return self.waves // self.turns * self.acc_m * self.exchange_stride

    def exchange_room(self) -> str | None:
        """The first staged term array whose bytes can hold the exchange array (a whole
        number of its elements), or None."""
        need = self.exchange_size() * self.scheme.acc.bits // 8
        terms = self.terms("a") | self.terms("b")
        for d in self.declarations():
            if isinstance(d, ir.ArrayDecl) and d.name in terms:
                room = d.size * d.elem.bits // 8
                if room >= need and room % (self.scheme.acc.bits // 8) == 0:
                    return d.name
        return None

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
        # One fragment per wave at a time leaves through here (and an initial value enters),
        # in a staged tile's bytes where the policy makes room so.
        out.append(ir.ArrayDecl(name="sk_cs", elem=self.scheme.acc, size=self.exchange_size(),
                                space=MemSpace.SHARED, shares=self.exchange_host))
        shape = ir.FragShape(m=self.acc_m, n=self.acc_n, k=self.frag_k)
        out += [ir.FragDecl(name=f"sk_acc{a}_{i}_{j}", use=FragUse.ACCUMULATOR, shape=shape,
                            elem=self.scheme.acc) for a, i, j in self.accumulator_names()]
        if self.scheme.step_sums:  # a fresh strip per strip column, the rows' in turn
            fresh = ([(0, 0, j) for j in range(self.grid[1])] if self.strips
                     else self.accumulator_names())
            out += [ir.FragDecl(name=self.step_sum(a, i, j), use=FragUse.ACCUMULATOR,
                                shape=shape, elem=self.scheme.acc) for a, i, j in fresh]
            if self.scheme.exact_top:  # and the largest product's own (Scheme.exact_top)
                out += [ir.FragDecl(name=self.top_sum(a, i, j), use=FragUse.ACCUMULATOR,
                                    shape=shape, elem=self.scheme.acc) for a, i, j in fresh]
        if self.scheme.chunk:  # the running sums' totals (Scheme.chunk)
            out += [ir.FragDecl(name=self.chunk_total(a, i, j), use=FragUse.ACCUMULATOR,
                                shape=shape, elem=self.scheme.acc)
                    for a, i, j in self.accumulator_names()]
        if self.strips:  # A per strip row and sub-step, B per strip column and sub-step: none
            subs = range(self.step // self.frag_k)  # is reloaded in a step
            terms = range(len(self.scheme.terms))
            out += [ir.FragDecl(name=f"sk_fa{t}_{i}_{q}", use=FragUse.A, shape=shape,
                                elem=self.scheme.operand) for q in subs for t in terms
                    for i in range(self.grid[0])]
            out += [ir.FragDecl(name=self.strip_b(t, q, j), use=FragUse.B, shape=shape,
                                elem=self.scheme.operand) for q in subs for t in terms
                    for j in range(self.grid[1])]
            return out
        for t in range(len(self.scheme.terms)):
            for i in range(self.per_wave):
                out.append(ir.FragDecl(name=f"sk_fa{t}_{i}", use=FragUse.A, shape=shape,
                                       elem=self.scheme.operand))
                out.append(ir.FragDecl(name=f"sk_fb{t}_{i}", use=FragUse.B, shape=shape,
                                       elem=self.scheme.operand))
        return out

    def strip_b(self, t: int, q: int, j: int) -> str:
        """The B fragment of term ``t`` that strip column ``j`` multiplies in sub-step
        ``q`` (named without ``j`` where the strips are as wide as the tile)."""
        return f"sk_fb{t}_{q}_{j}" if self.grid[1] > 1 else f"sk_fb{t}_{q}"

    def accumulator_names(self) -> list[tuple[int, int, int]]:
        """(accumulator, fragment row, fragment column) of every running accumulator, each
        fragment's accumulators together."""
        return [(a, i, j) for i, j in self.frag_names() for a in range(self.scheme.accumulators)]

    def step_sum(self, a: int, i: int, j: int) -> str:
        """The fresh accumulator of accumulator ``a`` of fragment (i, j) (``Scheme.step_sums``)."""
        return f"sk_step{a}_{i}_{j}"

    def top_sum(self, a: int, i: int, j: int) -> str:
        """The fresh accumulator of the largest product's first multiply-accumulate
        (``Scheme.exact_top``) beside ``step_sum(a, i, j)``."""
        return f"sk_top{a}_{i}_{j}"

    def chunk_total(self, a: int, i: int, j: int) -> str:
        """The total of the earlier chunks' running sums of accumulator ``a`` of fragment
        (i, j) (``Scheme.chunk``)."""
        return f"sk_tot{a}_{i}_{j}"

    def wave_origin(self, i: int, j: int) -> tuple[ir.Expr, ir.Expr]:
        """Row and column, within the block's tile, of fragment (i, j) of this wave."""
        w = var("sk_wave")
        if self.strips:  # strip (i, j) of wave w: rows acc_m * (w + waves * i), columns acc_n * j
            return (add(mul(w, const(self.acc_m)), const(self.acc_m * self.waves * i)),
                    const(self.acc_n * j))
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
        trips = self.acc_m * self.acc_n // self.subgroup
        return ir.For(var="sk_q", start=const(0), stop=const(trips),
                      step=const(1), body=(ir.Let(name="sk_e", type=I32, value=e), *body))

    def exchange_offset(self) -> ir.Expr:
        """Where this wave's fragment lies in the exchange array ``sk_cs``."""
        wave: ir.Expr = var("sk_wave")
        if self.turns > 1:
            wave = binary(BinOp.REM, wave, const(self.waves // self.turns))
        return mul(wave, const(self.acc_m * self.exchange_stride))

    def exchange_turns(self, put: list[ir.Stmt], take: list[ir.Stmt]) -> list[ir.Stmt]:
        """``put`` (into the exchange array), a barrier, ``take`` (out of it), a barrier: by
        every wave at once, or where the waves take turns, by each group of four in its
        turn (the barriers outside the group's branch, which every invocation reaches)."""
        if self.turns == 1:
            return [*put, ir.Barrier(), *take, ir.Barrier()]
        out: list[ir.Stmt] = []
        group = binary(BinOp.DIV, var("sk_wave"), const(self.waves // self.turns))
        for turn in range(self.turns):
            mine = binary(BinOp.EQ, group, const(turn))
            out += [ir.If(cond=mine, then=tuple(put)), ir.Barrier(),
                    ir.If(cond=mine, then=tuple(take)), ir.Barrier()]
        return out

    def exchanged(self) -> ir.Expr:
        """Element ``sk_e`` (row-major) of this wave's fragment in ``sk_cs``, whose rows lie
        ``exchange_stride`` apart."""
        e: ir.Expr = var("sk_e")
        if self.exchange_stride != self.acc_n:
            e = add(mul(binary(BinOp.DIV, e, const(self.acc_n)), const(self.exchange_stride)),
                    binary(BinOp.REM, e, const(self.acc_n)))
        return add(self.exchange_offset(), e)

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
                            stride=const(self.exchange_stride))
