"""The end of the rewritten body: each covered output leaves through shared memory with the
original's epilogue (outputs a lowering cannot give the original's value recomputed by the
original's own loop), and ``Builder.build``, which puts the whole body together."""

from __future__ import annotations

from sarek import ir, packed_store
from sarek.ir import BinOp, Builtin, ElemType, MemSpace
from sarek.ir_build import add, binary, const, is_literal, logical_not, mul, var
from sarek.packed_store import UNSIGNED
from sarek.rewrite.multiply import Multiply
from sarek.rewrite.parts import (
    I32,
    builtin,
    cast,
    conjunction,
)
from sarek.schedule import ORDER_ROWS


class Builder(Multiply):
    """Builds the rewritten body for one gemm, lowering, subgroup and fragment."""

    def original_where_beyond(self, limit: float, name: str = "sk_sum",
                              col: ir.Expr | None = None) -> list[ir.Stmt]:
        """The sum in ``name`` (of output (sk_row, ``col``), by default sk_col) recomputed as
        the original kernel computes it (its initial value, then its update in k order) where
        it is NaN, infinite or at least ``limit`` in magnitude."""
        g, acc_t = self.gemm, self.scheme.acc
        total = var(name, acc_t)
        row, p = var("sk_row"), var("sk_p")
        col = var("sk_col") if col is None else col
        # the kernel's own operands, also where the GEMM multiplies the pre-pass's terms
        ga, gb = (g.a, g.b) if g.split_terms is None else (g.split_terms.original_a,
                                                          g.split_terms.original_b)
        a = cast(ir.Load(array=ga.array, index=self.address(ga, row, col, p), type=ga.elem),
                 acc_t)
        b = cast(ir.Load(array=gb.array, index=self.address(gb, row, col, p), type=gb.elem),
                 acc_t)
        update: ir.Expr = (ir.Call(fn=ir.MathFn.FMA, args=(a, b, total), type=acc_t) if g.fused
                           else binary(BinOp.ADD, total, binary(BinOp.MUL, a, b)))
        init = g.init_at(row, col, var("sk_z"))
        return [ir.If(cond=logical_not(self.usable(total, limit)), then=(
            ir.Assign(name=name, value=cast(init, acc_t)),
            ir.For(var="sk_p", start=const(0), stop=var("sk_d"), step=const(1),
                   body=(ir.Assign(name=name, value=update),))))]

    def usable(self, total: ir.Expr, limit: float) -> ir.Expr:
        """Whether the lowering's sum ``total`` is the output's (below ``limit`` in magnitude:
        not NaN, not infinite)."""
        acc_t = self.scheme.acc
        magnitude = ir.Call(fn=ir.MathFn.ABS, args=(total,), type=acc_t)
        return binary(BinOp.LT, magnitude, ir.Const(value=limit, type=acc_t))

    def finish(self) -> list[ir.Stmt]:
        """Accumulators out through the exchange array, one fragment per wave at a time (the
        groups of waves in turns where ``exchange_turns`` says so); each covered output gets
        the epilogue."""
        g, acc_t = self.gemm, self.scheme.acc
        here = self.covered(var("sk_row"), var("sk_col"))

        def store(total: ir.Expr) -> ir.Stmt:
            address = self.address(g.c, var("sk_row"), var("sk_col"), const(0))
            if self.scheme.original_beyond is None:
                return ir.If(cond=here, then=(ir.Store(
                    array=g.c.array, index=address,
                    value=cast(self.epilogue(total), g.c.elem)),))
            return ir.If(cond=here, then=(
                ir.Let(name="sk_sum", type=acc_t, value=total),
                *self.original_where_beyond(self.scheme.original_beyond),
                ir.Store(array=g.c.array, index=address,
                         value=cast(self.epilogue(var("sk_sum", acc_t)), g.c.elem))))

        exchanged = ir.Load(array="sk_cs", index=self.exchanged(), type=acc_t)
        width = self.packed_width()
        out: list[ir.Stmt] = []
        if width > 1:
            out.append(ir.Let(name="sk_whole", type=ElemType.BOOL, value=self.whole_tile(width)))
        if self.scheme.accumulators > 1:
            out.append(ir.ArrayDecl(name="sk_out", elem=I32,
                                    size=self.acc_m * self.acc_n // self.subgroup,
                                    space=MemSpace.LOCAL))
        for i, j in self.frag_names():
            if self.scheme.accumulators == 1:
                take: ir.Stmt = self.per_lane([*self.fragment_coordinates(i, j),
                                               store(self.total(0))])
                if width > 1:
                    take = ir.If(cond=var("sk_whole", ElemType.BOOL),
                                 then=tuple(self.packed_out(i, j, width)), orelse=(take,))
                out += self.exchange_turns([self.through_exchange(f"sk_acc0_{i}_{j}")], [take])
                continue
            # Byte planes: sk_out[q] = init + sum_s (acc_s << 8s), wrapping.
            total = ir.Load(array="sk_out", index=var("sk_q"), type=I32)
            out.append(self.per_lane([*self.fragment_coordinates(i, j), ir.Store(
                array="sk_out", index=var("sk_q"), value=ir.Select(
                    cond=here, a=cast(self.init(), I32), b=const(0), type=I32))]))
            for a in range(self.scheme.accumulators):
                shifted = binary(BinOp.SHL, exchanged, const(8 * a)) if a else exchanged
                out += [self.through_exchange(f"sk_acc{a}_{i}_{j}"), ir.Barrier(),
                        self.per_lane([ir.Store(array="sk_out", index=var("sk_q"),
                                                value=add(total, shifted))]),
                        ir.Barrier()]
            out.append(self.per_lane([*self.fragment_coordinates(i, j), store(total)]))
        return out

    def total(self, part: int) -> ir.Expr:
        """The sum at element ``sk_e + part`` of this wave's part of the exchange array, an
        output of row ``sk_row`` and column ``sk_col + part``; the stacked byte planes' sum
        started at 0, so their initial value is added here."""
        index = add(self.exchanged(), const(part)) if part else self.exchanged()
        out: ir.Expr = ir.Load(array="sk_cs", index=index, type=self.scheme.acc)
        if not self.scheme.stacked:
            return out
        col = add(var("sk_col"), const(part)) if part else var("sk_col")
        return add(out, cast(self.gemm.init_at(var("sk_row"), col, var("sk_z")), I32))

    def packed_width(self) -> int:
        """How many consecutive outputs a lane stores at once on a whole tile (``packed_out``):
        as many as fill 8 bytes, where the target's policy asks for it, C's rows are
        contiguous, the lowering keeps one accumulator and each lane's run stays in one row
        of its fragment; 1 (one output at a time) otherwise."""
        c, scheme = self.gemm.c, self.scheme
        if not (self.pack_outputs and scheme.accumulators == 1
                and is_literal(c.col_stride, 1)
                and (c.elem.is_int or c.elem.is_float) and c.elem.bits <= 32):
            return 1
        width = 64 // c.elem.bits
        while width > 1 and (self.acc_n % width
                             or self.acc_m * self.acc_n % (self.subgroup * width)):
            width //= 2
        return width

    def whole_tile(self, width: int) -> ir.Expr:
        """Whether every output of the block's tile is covered and C's element at each
        output of the tile whose column is a multiple of ``width`` (from the tile's first) is
        ``width``-aligned. Coverage is tested at the tile's last output: the test's three
        terms grow with the row and the column. (A whole tile has ``ne >= tile_n``, so with
        ``me * ne * ze`` an i32, as the region is, no term of the test overflows.)"""
        c = self.gemm.c
        last_row = add(var("sk_row0"), const(self.tile - 1))
        last_col = add(var("sk_col0"), const(self.tile_n - 1))

        def aligned(x: ir.Expr) -> ir.Expr:
            return binary(BinOp.EQ, binary(BinOp.AND, x, const(width - 1)), const(0))

        terms = [self.covered(last_row, last_col),
                 aligned(self.address(c, var("sk_row0"), var("sk_col0"), const(0)))]
        if not (isinstance(c.row_stride, ir.Const) and int(c.row_stride.value) % width == 0):
            terms.append(aligned(c.row_stride))
        return conjunction(*terms)

    def packed_out(self, i: int, j: int, width: int) -> list[ir.Stmt]:
        """Fragment (i, j)'s outputs out of the exchange array, each lane taking ``width``
        consecutive ones of a row a trip: each output's epilogue value, their bits as one
        ``StorePacked`` into C (the whole tile is covered, ``whole_tile``). Under a lowering
        whose sum may not be usable (``original_beyond``) a trip whose sums are all usable
        stores them at once; the others are marked in ``sk_redo`` and taken afterwards, in a
        loop of their own (none stored before), each sum recomputed where it is not usable,
        as one output at a time would: so the common trips carry no copy of the original's
        loop."""
        g, limit, acc_t = self.gemm, self.scheme.original_beyond, self.scheme.acc
        elem = g.c.elem
        bits = UNSIGNED[elem.bits]
        word_t = UNSIGNED[elem.bits * width]
        row, col, z, q = var("sk_row"), var("sk_col"), var("sk_z"), var("sk_q")
        columns = [add(col, const(part)) if part else col for part in range(width)]

        def sums(recompute: bool) -> list[ir.Stmt]:
            assert limit is not None
            out: list[ir.Stmt] = []
            for part, at in enumerate(columns):
                out.append(ir.Let(name=f"sk_sum{part}", type=acc_t, value=self.total(part)))
                if recompute:
                    out += self.original_where_beyond(limit, f"sk_sum{part}", at)
            return out

        values = [self.total(part) if limit is None else var(f"sk_sum{part}", acc_t)
                  for part in range(width)]
        parts: list[ir.Stmt] = []
        for part, at in enumerate(columns):
            value = cast(g.epilogue_at(values[part], row, at, z), elem)
            parts.append(ir.Let(name=f"sk_bits{part}", type=word_t,
                                value=cast(value if elem is bits else
                                           ir.Bitcast(x=value, type=bits), word_t)))
        word = packed_store.word([var(f"sk_bits{part}", word_t) for part in range(width)],
                                 elem.bits)
        store = [*parts, ir.StorePacked(array=g.c.array,
                                        index=self.address(g.c, row, col, const(0)), value=word)]
        e = mul(add(mul(q, const(self.subgroup)), var("sk_wave_lane")), const(width))
        head = [ir.Let(name="sk_e", type=I32, value=e), *self.fragment_coordinates(i, j)]
        trips = self.acc_m * self.acc_n // (self.subgroup * width)

        def trip_loop(body: list[ir.Stmt]) -> ir.For:
            return ir.For(var="sk_q", start=const(0), stop=const(trips), step=const(1),
                          body=tuple(body))

        if limit is None:
            return [trip_loop([*head, *store])]
        if trips >= 32:  # more trips than bits of sk_redo
            return [trip_loop([*head, *sums(True), *store])]
        marked = binary(BinOp.NE, binary(BinOp.AND, binary(BinOp.SHR, var("sk_redo"), q),
                                         const(1)), const(0))
        return [
            ir.Let(name="sk_redo", type=I32, value=const(0)),
            trip_loop([*head, *sums(False), ir.If(
                cond=conjunction(*(self.usable(v, limit) for v in values)), then=tuple(store),
                orelse=(ir.Assign(name="sk_redo", value=binary(
                    BinOp.OR, var("sk_redo"), binary(BinOp.SHL, const(1), q))),))]),
            ir.If(cond=binary(BinOp.NE, var("sk_redo"), const(0)), then=(trip_loop([
                ir.If(cond=marked, then=(*head, *sums(True), *store))]),))]

    def build(self) -> tuple[ir.Stmt, ...]:
        tid = builtin(Builtin.THREAD_IDX_X)
        start: list[ir.Stmt] = [
            ir.Let(name="sk_tid", type=I32, value=tid),
            ir.Let(name="sk_wave", type=I32, value=builtin(Builtin.SUBGROUP_ID)),
            ir.Let(name="sk_wave_lane", type=I32, value=builtin(Builtin.SUBGROUP_LANE)),
        ]
        tile = [*self.start_accumulators(), *self.reduction(), *self.reduced(),
                *self.finish()]
        if not self.persistent:
            return tuple([*start, *self.origin(builtin(Builtin.BLOCK_IDX_X),
                                               builtin(Builtin.BLOCK_IDX_Y),
                                               builtin(Builtin.BLOCK_IDX_Z)),
                          *self.declarations(), *tile])
        # A persistent grid: block b takes tiles b, b + blocks, ... (batch, tile row, tile
        # column, the column fastest).
        across = binary(BinOp.DIV, add(var("sk_ne"), const(self.tile_n - 1)),
                        const(self.tile_n))
        down = binary(BinOp.DIV, add(var("sk_me"), const(self.tile - 1)), const(self.tile))
        t = var("sk_tile")
        per_layer = mul(var("sk_across"), var("sk_down"))
        where: list[ir.Stmt] = self.origin(
            binary(BinOp.REM, t, var("sk_across")),
            binary(BinOp.REM, binary(BinOp.DIV, t, var("sk_across")), var("sk_down")),
            binary(BinOp.DIV, t, per_layer))
        if self.ordered:  # ORDER_ROWS tile rows at a time, down each column first
            group = mul(const(ORDER_ROWS), var("sk_across"))
            first = mul(binary(BinOp.DIV, var("sk_in_layer"), group), const(ORDER_ROWS))
            rows = ir.Call(fn=ir.MathFn.MIN, args=(
                const(ORDER_ROWS), binary(BinOp.SUB, var("sk_down"), var("sk_first"))),
                type=I32)
            within = binary(BinOp.REM, var("sk_in_layer"), group)
            where = [ir.Let(name="sk_in_layer", type=I32, value=binary(BinOp.REM, t, per_layer)),
                     ir.Let(name="sk_first", type=I32, value=first),
                     ir.Let(name="sk_rows", type=I32, value=rows),
                     *self.origin(binary(BinOp.DIV, within, var("sk_rows")),
                                  add(var("sk_first"), binary(BinOp.REM, within, var("sk_rows"))),
                                  binary(BinOp.DIV, t, per_layer))]
        return tuple([
            *start, *self.declarations(),
            ir.Let(name="sk_across", type=I32, value=across),
            ir.Let(name="sk_down", type=I32, value=down),
            ir.For(var="sk_tile", start=builtin(Builtin.BLOCK_IDX_X),
                   stop=mul(per_layer, var("sk_ze")), step=builtin(Builtin.GRID_DIM_X),
                   body=(*where, *tile))])

    def origin(self, x: ir.Expr, y: ir.Expr, z: ir.Expr) -> list[ir.Stmt]:
        """The block's output tile: tile column ``x``, tile row ``y``, batch ``z``."""
        return [ir.Let(name="sk_row0", type=I32, value=mul(y, const(self.tile))),
                ir.Let(name="sk_col0", type=I32, value=mul(x, const(self.tile_n))),
                ir.Let(name="sk_z", type=I32, value=z)]

    def reduced(self) -> list[ir.Stmt]:
        """A barrier between the reduction's last reads of the staged tiles (and its last
        copies into them) and the first write into the exchange array, where that array
        reuses a staged tile's bytes and the reduction does not end with one (a pipelined
        schedule's step ends with its products). A varying initial value leaves the exchange
        array behind a barrier already, before the first copy into the tiles."""
        if self.exchange_host is None or self.stages == 1:
            return []
        return [ir.Barrier()]
