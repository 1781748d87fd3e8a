"""The end of the rewritten body: each covered output leaves through shared memory with the
original's epilogue (outputs a lowering cannot give the original's value recomputed by the
original's own loop), and ``Builder.build``, which puts the whole body together."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, Builtin, MemSpace
from sarek.ir_build import add, binary, const, logical_not, mul, var
from sarek.rewrite.multiply import Multiply
from sarek.rewrite.parts import (
    I32,
    builtin,
    cast,
)
from sarek.schedule import ORDER_ROWS


class Builder(Multiply):
    """Builds the rewritten body for one gemm, lowering, subgroup and fragment."""

    def original_where_beyond(self, limit: float) -> list[ir.Stmt]:
        """``sk_sum`` recomputed as the original kernel computes it (its initial value, then
        its update in k order) where it is NaN, infinite or at least ``limit`` in magnitude."""
        g, acc_t = self.gemm, self.scheme.acc
        total = var("sk_sum", acc_t)
        row, col, p = var("sk_row"), var("sk_col"), var("sk_p")
        # the kernel's own operands, also where the GEMM multiplies the pre-pass's terms
        ga, gb = (g.a, g.b) if g.split_terms is None else (g.split_terms.original_a,
                                                          g.split_terms.original_b)
        a = cast(ir.Load(array=ga.array, index=self.address(ga, row, col, p), type=ga.elem),
                 acc_t)
        b = cast(ir.Load(array=gb.array, index=self.address(gb, row, col, p), type=gb.elem),
                 acc_t)
        update: ir.Expr = (ir.Call(fn=ir.MathFn.FMA, args=(a, b, total), type=acc_t) if g.fused
                           else binary(BinOp.ADD, total, binary(BinOp.MUL, a, b)))
        magnitude = ir.Call(fn=ir.MathFn.ABS, args=(total,), type=acc_t)
        within = binary(BinOp.LT, magnitude, ir.Const(value=limit, type=acc_t))
        return [ir.If(cond=logical_not(within), then=(
            ir.Assign(name="sk_sum", value=cast(self.init(), acc_t)),
            ir.For(var="sk_p", start=const(0), stop=var("sk_d"), step=const(1),
                   body=(ir.Assign(name="sk_sum", value=update),))))]

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
        out: list[ir.Stmt] = []
        if self.scheme.accumulators > 1:
            out.append(ir.ArrayDecl(name="sk_out", elem=I32,
                                    size=self.acc_m * self.acc_n // self.subgroup,
                                    space=MemSpace.LOCAL))
        for i, j in self.frag_names():
            if self.scheme.accumulators == 1:
                # the stacked byte planes' sum started at 0: the initial value added last
                total_of = add(exchanged, cast(self.init(), I32)) if self.scheme.stacked \
                    else exchanged
                out += self.exchange_turns(
                    [self.through_exchange(f"sk_acc0_{i}_{j}")],
                    [self.per_lane([*self.fragment_coordinates(i, j), store(total_of)])])
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
