"""The rewritten body's reduction: accumulators started at the original's initial value, the
loop over the steps (staged, prefetched or pipelined) and each step's multiply-accumulates of
every product of the lowering's terms."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from sarek import ir
from sarek.ir import BinOp, FragLayout, MemSpace
from sarek.ir_build import add, binary, const, mul, round_up, var
from sarek.matrix_scheme import PLANE_ALIGN, PLANE_PHASES
from sarek.rewrite.copies import Copies
from sarek.rewrite.parts import (
    I32,
    cast,
    zero,
)


class Multiply(Copies):
    """The reduction loop, on the staging and the geometry."""

    def start_accumulators(self) -> list[ir.Stmt]:
        init = self.gemm.init
        constant = isinstance(init, ir.Const)
        # the byte planes' initial value is added at the end (its sums are shifted)
        planes = self.scheme.accumulators > 1 or self.scheme.stacked
        if planes or constant:
            value = init if constant and not planes else zero(self.scheme.acc)
            return [ir.FragFill(frag=f"sk_acc{a}_{i}_{j}", value=cast(value, self.scheme.acc))
                    for a, i, j in self.accumulator_names()]
        # The initial value varies by output: each wave stages it through its part of the
        # exchange array, one fragment at a time (in its group's turn).
        here = self.covered(var("sk_row"), var("sk_col"))
        out: list[ir.Stmt] = []
        for i, j in self.frag_names():
            out += self.exchange_turns(
                [self.per_lane([*self.fragment_coordinates(i, j), ir.Store(
                    array="sk_cs", index=self.exchanged(), value=ir.Select(
                        cond=here, a=cast(self.init(), self.scheme.acc), b=zero(self.scheme.acc),
                        type=self.scheme.acc))])],
                [ir.FragLoad(frag=f"sk_acc0_{i}_{j}", array="sk_cs",
                             offset=self.exchange_offset(),
                             stride=const(self.exchange_stride))])
        return out

    def pipelined(self) -> list[ir.Stmt]:
        """The steps of the reduction with ``stages`` buffers: the first ``ahead`` steps
        (``stages - 1``, or ``stages - 2`` with ``in_flight``) are issued before the loop;
        each step waits for its own tiles, passes a barrier (its tiles are complete, and every
        wave is done with the buffer the step refills), issues the tiles of ``ahead`` steps
        ahead into that buffer and multiplies. With ``in_flight`` that buffer is the one the
        step before last read, never the previous step's. Raw tiles are
        converted into the (single) term arrays first, behind a second barrier, and then the
        refill is issued after the first sub-step's products."""
        ahead, step = self.ahead, self.step
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
            products: list[ir.Stmt] = self.multiply(var("sk_slot"))
            if self.specialized:  # the producer warpgroup's waves multiply nothing
                products = [ir.If(cond=binary(BinOp.LT, var("sk_wave"), const(self.waves)),
                                  then=(*products, *self.chunk_end()))]
                return [*prologue,
                        ir.For(var="sk_k0", start=const(0), stop=var(self.k_stop),
                               step=const(step), body=(*body, *refills, *products)),
                        ir.StageWait(pending=0)]
            body = (*body, *refills, *products)
        return [*prologue, *self.k_loop(body, var(self.k_stop)),
                ir.StageWait(pending=0)]  # the copies issued past the end land too

    def stacked(self) -> list[ir.Stmt]:
        """The stacked byte planes' reduction (``STACKED_PLANES``): a loop over the phases of
        ``PLANE_PHASES``, each the pipelined loop over its blocks (``sk_kn`` elements from
        ``sk_kb`` of the stacked k), every phase but the first starting with the accumulators
        shifted left by 8 bits (eight doublings, ``FragAdd``, wrapping) and each with a
        barrier before it refills the buffers. One loop rather than four copies of the
        reduction: the code, and the registers its copies' addresses hold, are one phase's."""
        dp, phase = var("sk_dp"), var("sk_phase")

        def by_phase(values: list[int]) -> ir.Expr:
            out: ir.Expr = mul(const(values[-1]), dp)
            for i in range(len(values) - 2, -1, -1):
                out = ir.Select(cond=binary(BinOp.EQ, phase, const(i)),
                                a=mul(const(values[i]), dp), b=out, type=I32)
            return out

        lengths = [len(pairs) for pairs in PLANE_PHASES]
        firsts = [sum(lengths[:i]) for i in range(len(lengths))]
        shift = [ir.FragAdd(d=f"sk_acc0_{r}_{c}", a=f"sk_acc0_{r}_{c}", b=f"sk_acc0_{r}_{c}")
                 for _ in range(8) for r, c in self.frag_names()]
        self.k_base, self.k_stop = var("sk_kb"), "sk_kn"
        body = (ir.If(cond=binary(BinOp.GT, phase, const(0)), then=tuple(shift)),
                ir.Barrier(),
                ir.Let(name="sk_kb", type=I32, value=by_phase(firsts)),
                ir.Let(name="sk_kn", type=I32, value=by_phase(lengths)),
                *self.pipelined())
        self.k_base, self.k_stop = None, "sk_d"
        # The count through a variable: a target that unrolls loops of literal bounds (CUDA)
        # would print four copies of the reduction (255 registers and spills under NVRTC
        # 13.0 for t128x256k64s3gf, against 168 for one).
        return [ir.Let(name="sk_dp", type=I32, value=round_up(var("sk_d"), PLANE_ALIGN)),
                ir.Let(name="sk_phases", type=I32, value=const(len(PLANE_PHASES))),
                ir.For(var="sk_phase", start=const(0), stop=var("sk_phases"),
                       step=const(1), body=body)]

    def k_loop(self, body: Sequence[ir.Stmt], stop: ir.Expr) -> list[ir.Stmt]:
        """The loop of ``body`` over the steps ``sk_k0`` of ``[0, stop)``; with chunks
        (``Scheme.chunk``), each step that ends one then takes the totals (``chunk_end``), or
        under ``Staging.chunk_loops`` a loop over the chunks (``sk_kc``) runs the loop over
        their steps and takes the totals after it (the last, partial, chunk's too, which
        changes no bits: its running sum then starts again at -0.0, and the loop's end adds
        -0.0 to its total)."""
        chunk, step = self.scheme.chunk, const(self.step)
        if chunk is None or not self.chunk_loops:
            return [ir.For(var="sk_k0", start=const(0), stop=stop, step=step,
                           body=(*body, *self.chunk_end()))]
        end = ir.Call(fn=ir.MathFn.MIN, args=(add(var("sk_kc"), const(chunk)), stop), type=I32)
        return [ir.For(var="sk_kc", start=const(0), stop=stop, step=const(chunk), body=(
            ir.For(var="sk_k0", start=var("sk_kc"), stop=end, step=step, body=tuple(body)),
            *self.totals_taken()))]

    def chunk_end(self) -> list[ir.Stmt]:
        """At the end of a step that ends a chunk (``Scheme.chunk``), the totals taken
        (``totals_taken``). Nothing without chunks."""
        chunk = self.scheme.chunk
        if not chunk:
            return []
        ends = binary(BinOp.EQ, binary(BinOp.REM, add(var("sk_k0"), const(self.step)),
                                       const(chunk)), const(0))
        return [ir.If(cond=ends, then=tuple(self.totals_taken()))]

    def totals_taken(self) -> list[ir.Stmt]:
        """Each running sum added to its total, then started again at -0.0, the identity of
        the additions that follow."""
        moves: list[ir.Stmt] = []
        for a, i, j in self.accumulator_names():
            total, running = self.chunk_total(a, i, j), f"sk_acc{a}_{i}_{j}"
            moves += [ir.FragAdd(d=total, a=total, b=running),
                      ir.FragFill(frag=running, value=self.negative_zero())]
        return moves

    def negative_zero(self) -> ir.Const:
        return ir.Const(value=-0.0, type=self.scheme.acc)

    def reduction(self) -> list[ir.Stmt]:
        """The reduction, and with chunks (``Scheme.chunk``) the totals around it: started at
        -0.0 before the loop, each step that ends a chunk adding the running sums to them,
        and the loop's end adding the running sums of the last chunk (``total + running``:
        with one chunk or less, ``-0.0 + running``, the running sum's own bits)."""
        if not self.scheme.chunk:
            return self.steps()
        names = self.accumulator_names()
        return [*(ir.FragFill(frag=self.chunk_total(*x), value=self.negative_zero())
                  for x in names),
                *self.steps(),
                *(ir.FragAdd(d=f"sk_acc{a}_{i}_{j}", a=self.chunk_total(a, i, j),
                             b=f"sk_acc{a}_{i}_{j}") for a, i, j in names)]

    def steps(self) -> list[ir.Stmt]:
        """The loop over the steps of the reduction. With prefetching, each step stages the
        registers fetched during the previous one and fetches the next step's tiles before
        multiplying; one barrier before the products (the staged tiles are complete) and one
        after (nobody still reads them when the next step overwrites them)."""
        if self.scheme.stacked:
            return self.stacked()
        if self.stages > 1:
            return self.pipelined()
        if not self.prefetching:
            return self.k_loop((*self.stage(), ir.Barrier(), *self.multiply(), ir.Barrier()),
                               var("sk_d"))
        registers = [ir.ArrayDecl(name=f"sk_p{name}", elem=access.elem,
                                  size=rows * cols // self.threads, space=MemSpace.LOCAL)
                     for name, access, rows, cols in self.operands()]
        nxt = add(var("sk_k0"), const(self.step))
        body = (*self.stage_prefetched(), ir.Barrier(), *self.prefetch(nxt), *self.multiply(),
                ir.Barrier())
        return [*registers, *self.prefetch(const(0)), *self.k_loop(body, var("sk_d"))]

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

        if self.strips:  # every wave: its strips of A by the block's B, per sub-step
            held: list[ir.Stmt] = []  # the last strip's add of its sub-step sums, held back
            for q, kk0 in enumerate(range(0, self.step, f)):
                for t, term in enumerate(self.scheme.terms):
                    for i in range(self.grid[0]):
                        row, _ = self.wave_origin(i, 0)
                        out.append(ir.FragLoad(
                            frag=f"sk_fa{t}_{i}_{q}", array=self.staged("a", term),
                            offset=buffered("a", add(mul(row, const(self.a_stride)),
                                                     const(kk0))),
                            stride=const(self.a_stride)))
                    col_b = self.b_layout is FragLayout.COL  # column c at c * b_stride
                    for j in range(self.grid[1]):
                        c0 = j * self.acc_n  # the strip column's first column
                        at = kk0 + c0 * self.b_stride if col_b else kk0 * self.b_stride + c0
                        out.append(ir.FragLoad(
                            frag=self.strip_b(t, q, j), array=self.staged("b", term),
                            offset=buffered("b", const(at)), stride=const(self.b_stride),
                            layout=self.b_layout))
                products, held = self.strip_products(q, held)
                out += products
                if q == 0:
                    out += between
            return out + held

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

    def strip_products(self, q: int, held: list[ir.Stmt]
                       ) -> tuple[list[ir.Stmt], list[ir.Stmt]]:
        """Sub-step ``q``'s products of every strip by the block's B fragment of its column,
        and the add the caller holds back. With ``step_sums`` each strip's products go into
        the fresh accumulator of its strip column (``sk_step0_0_j``, which the strip rows
        take in turn): filled with -0.0, the products, then added to the strip's running
        accumulator, that add held back until the next strip's products are issued (``held``
        in and out: the caller puts the last one after the step), unless the next strip
        fills the same fresh accumulator. So with two strip columns one strip's sums are
        added while the other's products are in flight, and a wave holds one fresh strip per
        column. Every output still takes its products and adds in the same order."""
        s = self.scheme
        rows, cols = range(self.grid[0]), range(self.grid[1])
        if not s.step_sums:
            return [ir.FragMulAdd(d=f"sk_acc0_{i}_{j}", a=f"sk_fa{ta}_{i}_{q}",
                                  b=self.strip_b(tb, q, j), c=f"sk_acc0_{i}_{j}")
                    for ta, tb, _ in s.products for i in rows for j in cols], held
        out: list[ir.Stmt] = []
        for i in rows:
            for j in cols:
                fresh = self.step_sum(0, 0, j)
                if any(isinstance(x, ir.FragAdd) and x.b == fresh for x in held):
                    out += held
                    held = []
                out += self.fresh_sum(fresh, self.top_sum(0, 0, j), [
                    (f"sk_fa{ta}_{i}_{q}", self.strip_b(tb, q, j)) for ta, tb, _ in s.products])
                out += held
                held = [ir.FragAdd(d=f"sk_acc0_{i}_{j}", a=f"sk_acc0_{i}_{j}", b=fresh)]
        return out, held

    def fresh_sum(self, fresh: str, top: str, pairs: list[tuple[str, str]]) -> list[ir.Stmt]:
        """One fragment's sub-step sum into ``fresh``: filled with -0.0, then each (A, B)
        fragment pair of ``pairs`` (the scheme's products in order) multiplied onto it. With
        ``Scheme.exact_top`` the last pair (hi·hi) is multiplied first, from -0.0 into
        ``top``; ``fresh`` starts at the negation of that sum (-0.0 - top), takes the same
        product again, which leaves exactly what the first multiply-accumulate truncated
        (the aligned products less a value they hold), then the others in order; and the two
        are added with rounding to nearest (``top + fresh``)."""
        zero = ir.Const(value=-0.0, type=self.scheme.acc)
        if not self.scheme.exact_top:
            return [ir.FragFill(frag=fresh, value=zero),
                    *(ir.FragMulAdd(d=fresh, a=a, b=b, c=fresh) for a, b in pairs)]
        (ta, tb), rest = pairs[-1], pairs[:-1]
        return [ir.FragFill(frag=top, value=zero),
                ir.FragMulAdd(d=top, a=ta, b=tb, c=top),
                ir.FragFill(frag=fresh, value=zero),
                ir.FragAdd(d=fresh, a=fresh, b=top, subtract=True),
                ir.FragMulAdd(d=fresh, a=ta, b=tb, c=fresh),
                *(ir.FragMulAdd(d=fresh, a=a, b=b, c=fresh) for a, b in rest),
                ir.FragAdd(d=fresh, a=top, b=fresh)]

    def products(self) -> list[ir.Stmt]:
        """One sub-step's products, in the scheme's order for each accumulator. Products
        outer, fragments inner: every run of (i, j) is independent (a simulator batches it, a
        device overlaps it). With ``step_sums`` each fragment's sum is ``fresh_sum``'s, its
        statements taken in turn over every fragment: they go into fresh accumulators, one per
        fragment, that start at -0.0 (the identity of round-to-nearest addition, so an
        all-zero sub-step leaves the running sum's bits alone, a -0.0 one too) and are then
        added to the running ones."""
        s = self.scheme
        frags = self.accumulator_names()
        if not s.step_sums:
            return [ir.FragMulAdd(d=f"sk_acc{a}_{i}_{j}", a=f"sk_fa{ta}_{i}",
                                  b=f"sk_fb{tb}_{j}", c=f"sk_acc{a}_{i}_{j}")
                    for ta, tb, a in s.products for i, j in self.frag_names()]
        sums = [self.fresh_sum(self.step_sum(a, i, j), self.top_sum(a, i, j),
                               [(f"sk_fa{ta}_{i}", f"sk_fb{tb}_{j}")
                                for ta, tb, into in s.products if into == a])
                for a, i, j in frags]
        out = [x for turn in itertools.zip_longest(*sums) for x in turn if x is not None]
        return out + [ir.FragAdd(d=f"sk_acc{a}_{i}_{j}", a=f"sk_acc{a}_{i}_{j}",
                                 b=self.step_sum(a, i, j)) for a, i, j in frags]
