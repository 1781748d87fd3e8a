"""Warpgroup accumulators stored to their outputs from the registers that hold them.

The neutral rewrite hands each wave's accumulator fragment to its lanes through the exchange
array ``sk_cs`` (``sarek.rewrite.epilogue``): the fragment stored there, a barrier, then a
loop in which lane ``l`` of trip ``q`` takes element ``sk_e = q * subgroup + l`` of the
fragment (row ``sk_e / n``, column ``sk_e % n``) through the original's epilogue, another
barrier; under strips too wide for every wave at once the waves take turns, each group's
store and loop behind a test of its group. Where the fragment is a warpgroup (``wgmma``)
strip, CUDA knows which element each lane holds in its registers, so ``direct`` replaces that
run of statements with a loop over the lane's own elements: each goes through the loop's body
with ``sk_e`` the index of its row and column, read from the register instead of the
exchange. Every output gets the same value from the same expression; only which lane stores
it, and when, changes. No lane writes or reads the exchange any more, so the barriers and the
turns go too, and both consumer warpgroups leave at once: the 128-trip loop, one shared load
and one branch a trip in one warp per scheduler, was a fifth of the warp-specialized F16
kernel's time at 4096^3 (``bench/epilogue_cost_h200.py``).

Only a run of exactly that shape is replaced: the loop's body must read the exchange at
``offset + sk_e`` alone (the store's offset), use ``sk_q`` only to make ``sk_e``, and hold no
barrier; anything else is kept as written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sarek import ir
from sarek.ir import ElemType
from sarek.ir_build import add, const, evaluate, mul, var
from sarek.ir_walk import rebuild, subexpressions, walk

EXCHANGE = "sk_cs"
LANE, LANE_G, LANE_T = "sk_lane", "sk_lane_g", "sk_lane_t"  # the lowering's lane variables
Elements = Callable[[str], Sequence[tuple[ir.Expr, ir.Expr]] | None]
"""A fragment's elements in the lane's register order, as (row, column) in the fragment, for
a warpgroup accumulator strip; None for any other fragment."""


@dataclass(frozen=True)
class _Exchange:
    """One run through the exchange: the fragment's store and the loop that takes it out."""

    store: ir.FragStore
    loop: ir.For
    length: int  # statements of the run


def _barrier(s: ir.Stmt) -> bool:
    return isinstance(s, ir.Barrier | ir.NamedBarrier)


def _turn(stmts: Sequence[ir.Stmt], i: int) -> tuple[ir.Stmt, ir.Stmt, ir.Expr | None] | None:
    """The store and the loop of the run at ``i`` (``put, barrier, take, barrier``, each of
    ``put`` and ``take`` alone or alone behind one test, the same for both), and that test."""
    if i + 4 > len(stmts) or not (_barrier(stmts[i + 1]) and _barrier(stmts[i + 3])):
        return None
    put, take = stmts[i], stmts[i + 2]
    if isinstance(put, ir.If) and isinstance(take, ir.If):
        if put.cond != take.cond or put.orelse or take.orelse or len(put.then) != 1 \
                or len(take.then) != 1:
            return None
        return put.then[0], take.then[0], put.cond
    return put, take, None


def _run(stmts: Sequence[ir.Stmt], i: int) -> _Exchange | None:
    """The exchange run starting at ``i``: one turn, or several turns of the same store and
    loop behind distinct tests."""
    first = _turn(stmts, i)
    if first is None:
        return None
    store, loop, test = first
    if not (isinstance(store, ir.FragStore) and store.array == EXCHANGE
            and isinstance(loop, ir.For) and loop.var == "sk_q"):
        return None
    length, tests = 4, {test}
    while test is not None:
        more = _turn(stmts, i + length)
        if more is None or more[0] != store or more[1] != loop or more[2] in tests:
            break
        tests.add(more[2])
        length += 4
    return _Exchange(store, loop, length)


def _body(run: _Exchange) -> tuple[ir.Stmt, ...] | None:
    """The loop's body after its ``sk_e``, where it has the shape ``direct`` replaces."""
    body = run.loop.body
    if not body or not (isinstance(body[0], ir.Let) and body[0].name == "sk_e"):
        return None
    rest = body[1:]
    wanted = add(run.store.offset, var("sk_e"))
    for s in walk(rest):
        if _barrier(s) or isinstance(s, ir.FragStore | ir.FragLoad) or (
                isinstance(s, ir.Store) and s.array == EXCHANGE):
            return None
        for e in _expressions(s):
            for x in subexpressions(e):
                if isinstance(x, ir.Var) and x.name == "sk_q":
                    return None
                if isinstance(x, ir.Load) and x.array == EXCHANGE and x.index != wanted:
                    return None
    return rest


def _expressions(s: ir.Stmt) -> list[ir.Expr]:
    match s:
        case ir.Let(value=v) | ir.Assign(value=v):
            return [v]
        case ir.Store(index=index, value=v):
            return [index, v]
        case ir.If(cond=c) | ir.While(cond=c):
            return [c]
        case ir.For(start=a, stop=b, step=c):
            return [a, b, c]
    return []


def _reading(stmts: tuple[ir.Stmt, ...], read: ir.Load, register: ir.Load
             ) -> tuple[ir.Stmt, ...]:
    """``stmts`` with each ``read`` (of the exchange) a read of ``register`` instead."""
    def expr(e: ir.Expr) -> ir.Expr:
        return rebuild(e, lambda x: register if x == read else None)

    def stmt(s: ir.Stmt) -> ir.Stmt:
        match s:
            case ir.Let(value=v) | ir.Assign(value=v):
                return s.model_copy(update={"value": expr(v)})
            case ir.Store(index=index, value=v):
                return s.model_copy(update={"index": expr(index), "value": expr(v)})
            case ir.If(cond=c, then=then, orelse=orelse):
                return s.model_copy(update={"cond": expr(c), "then": tuple(map(stmt, then)),
                                            "orelse": tuple(map(stmt, orelse))})
            case ir.For(body=body) | ir.While(body=body):
                return s.model_copy(update={"body": tuple(map(stmt, body))})
        return s

    return tuple(map(stmt, stmts))


def _blocks_step(elements: Sequence[tuple[ir.Expr, ir.Expr]], per_block: int) -> bool:
    """Whether element ``b * per_block + e`` lies where element ``e`` does, ``8 b`` columns
    on, for every lane (the loop ``_direct`` prints relies on it)."""
    if len(elements) % per_block:
        return False
    for lane in range(32):
        env = {LANE: lane, LANE_G: lane >> 2, LANE_T: lane & 3}
        for slot, (row, col) in enumerate(elements):
            b, e = divmod(slot, per_block)
            first_row, first_col = elements[e]
            values = [evaluate(x, env) for x in (row, col, first_row, first_col)]
            if None in values or values[:2] != [values[2], values[3] + 8 * b]:  # type: ignore[operator]
                return False
    return True


def _direct(run: _Exchange, body: tuple[ir.Stmt, ...],
            elements: Sequence[tuple[ir.Expr, ir.Expr]]) -> list[ir.Stmt] | None:
    """The lane's elements through ``body``: a loop over its 8-column blocks (``sk_q``, a
    block a trip), each block's elements one after another, each in a scope of its own."""
    per_block = 4  # elements of an 8-column block a lane holds: (g, 2t + 0/1), (g + 8, ...)
    first = run.loop.body[0]
    assert isinstance(first, ir.Let)
    read = next(x for s in walk(body) for e in _expressions(s) for x in subexpressions(e)
                if isinstance(x, ir.Load) and x.array == EXCHANGE)
    q = var("sk_q")
    if not _blocks_step(elements, per_block):
        return None
    trip: list[ir.Stmt] = []
    for e, (row, col) in enumerate(elements[:per_block]):
        # the trip's block starts 8 columns after the one before (the layout's blocks)
        index = add(mul(row, run.store.stride), add(col, mul(q, const(8))))
        register = ir.Load(array=run.store.frag, index=add(mul(q, const(per_block)), const(e)),
                           type=read.type)
        trip.append(ir.If(cond=ir.Const(value=True, type=ElemType.BOOL), then=(
            first.model_copy(update={"value": index}), *_reading(body, read, register))))
    return [ir.For(var="sk_q", start=const(0), stop=const(len(elements) // per_block),
                   step=const(1), body=tuple(trip), line=run.loop.line)]


def direct(stmts: tuple[ir.Stmt, ...], elements: Elements) -> tuple[ir.Stmt, ...]:
    """``stmts`` with each exchange run of a warpgroup accumulator strip (see the module
    docstring) replaced by the loop over the lane's own elements; the rest kept."""
    out: list[ir.Stmt] = []
    i = 0
    while i < len(stmts):
        run = _run(stmts, i)
        layout = elements(run.store.frag) if run is not None else None
        body = _body(run) if run is not None and layout is not None else None
        made = _direct(run, body, layout) if run is not None and layout is not None \
            and body is not None else None
        if run is None or made is None:
            out.append(stmts[i])
            i += 1
            continue
        out += made
        i += run.length
    return tuple(out)

