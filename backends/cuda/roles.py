"""Lowering for CUDA: a warp-specialized schedule (``sarek.schedule``'s ``w``) as warp roles
(``ir.WarpRoles``), a producer warpgroup that only copies and consumer warpgroups that only
multiply.

The neutral kernel of such a schedule has one warpgroup more than multiply (the last; its
products are under ``if sk_wave < waves``) and a pipelined reduction loop over ``sk_k0``
whose staged copies, all marked ``bulk``, the whole block issues (``sarek.rewrite``). Its
``stages`` buffers become a ring that the roles hand to each other:

* mbarriers ``sk_full`` and ``sk_empty``, one of each per buffer, initialized by invocation
  0 (a full phase takes the producer's 128 arrivals and the bytes of its bulk copies, an
  empty phase the arrivals of every consumer invocation), fenced toward the asynchronous
  proxy, behind a ``Barrier`` of the whole block;
* the consumers (the multiplying warpgroups, registers raised to ``CONSUMER_REGISTERS``) run
  the rest of the kernel: step ``i`` waits for the full phase of buffer ``i % stages`` (its
  round ``i / stages``, by parity), multiplies, and every consumer invocation arrives on the
  buffer's empty mbarrier once its multiplies have retired (CUDA's ``wgmma`` lowering waits
  for them before any statement that is not one); the block's barriers before and after the
  loop (the initial value, the epilogue) become a named barrier of the consumers;
* the producer (registers lowered to ``PRODUCER_REGISTERS``) runs the same steps: from the
  second round on it waits for the buffer's empty phase of the round before; then each
  tile a tensor map can copy (``backends.cuda.tma.issue``) is issued by its invocation 0 as
  bulk tensor copies, and a tile one cannot (misaligned rows, or A's -0.0 padding, which
  TMA's zero fill would replace) is stored element by element by its 128 invocations,
  fenced toward the asynchronous proxy; then every producer invocation arrives on the full
  mbarrier, invocation 0 expecting the bulk copies' bytes.

The producer fills every buffer as soon as the consumers free it, so the copies run up to
``stages`` steps ahead of the products instead of the neutral loop's ``ahead``. Where the
neutral loop keeps a group in flight (its copies ``stages - 2`` steps ahead), each consumer
step leaves its ``wgmma`` group running and frees the previous step's buffer instead. Under a
persistent grid (the neutral kernel's loop over ``sk_tile``) both roles run that loop, and a
count of the steps of the block's earlier tiles (``sk_ring``) carries the ring's buffers and
parities from one tile into the next.

The stacked byte planes' reduction is that loop inside a loop over their phases
(``sarek.rewrite.multiply``: each phase's loop reads ``sk_kn`` stacked k from its own origin
``sk_kb``, the accumulators shifted before it). Both roles run the phases, ``sk_ring``
counting on the steps of each phase, so that buffers and parities stay in step across them;
the consumers shift between phases (under ``in_flight`` after waiting for their last group),
and the producer copies each phase's tiles through tensor maps of its own: the phase's
``sk_kb`` and ``sk_kn`` put in, the map's origin is the phase's first block and its extent
along k the phase's blocks, so that the copy's coordinate is the step's ``sk_k0`` and the
maps' zero fill past the phase is the neutral copy's.
"""

from __future__ import annotations

import math

from backends.cstyle import EmitError
from backends.cuda import tma
from backends.cuda.wgmma import CoreLayout
from sarek import ir
from sarek.ir import BinOp, ElemType, MemSpace
from sarek.ir_build import add, binary, const, evaluate, is_literal, var
from sarek.ir_walk import replace_statements, substitute, walk
from sarek.stage_copy import element_store, spread

FULL, EMPTY = "sk_full", "sk_empty"
PRODUCER_REGISTERS = 40  # setmaxnreg's count for the producer's warpgroup
CONSUMER_REGISTERS = 232  # and for each consumer's: 2 x 232 + 40 warps' worth fit 64K
WARPGROUP = 128
CONSUMERS_BARRIER = 1  # the named barrier of the consumers (0 is the block's)
TILE, RING = "sk_tile", "sk_ring"  # a persistent grid's tile loop; the steps before this tile
I32 = ElemType.I32


def specialized(kernel: ir.Kernel) -> bool:
    """Whether ``kernel`` is a neutral kernel that ``lower`` takes: its staged copies all
    marked ``bulk``, its block a whole number of warpgroups whose last multiplies nothing
    (its products under ``if sk_wave < waves``)."""
    block = kernel.block
    copies = [s for s in walk(kernel.body) if isinstance(s, ir.StageCopy)]
    if block is None or not copies or not all(s.bulk for s in copies):
        return False
    threads = math.prod(block)
    return threads % WARPGROUP == 0 and any(
        _guard(s) == threads // 32 - 4 for s in walk(kernel.body) if isinstance(s, ir.If))


def _guard(s: ir.If) -> int | None:
    """The waves ``s`` lets multiply when it is ``if sk_wave < waves`` around products."""
    match s.cond:
        case ir.Binary(op=BinOp.LT, a=ir.Var(name="sk_wave"), b=ir.Const(value=waves)) \
                if any(isinstance(x, ir.FragMulAdd) for x in s.then) and not s.orelse:
            return int(waves)
    return None


def lower(kernel: ir.Kernel, places: dict[str, CoreLayout]) -> ir.Kernel:
    """``kernel`` (``specialized``) as warp roles; ``EmitError`` where its reduction is not
    the pipelined loop the rewrite builds or a copy has no tensor map."""
    assert kernel.block is not None
    threads = math.prod(kernel.block)
    consumers = threads - WARPGROUP
    scalars = frozenset(p.name for p in kernel.params if isinstance(p, ir.ScalarParam))
    tiles = next((s for s in kernel.body if isinstance(s, ir.For) and s.var == TILE), None)
    region = kernel.body if tiles is None else tiles.body  # one tile's statements
    at = _pipelined(region)
    phases: ir.For | None = None  # the stacked byte planes' loop over their phases around it
    if at is None:
        at = next((i for i, s in enumerate(region) if isinstance(s, ir.For)
                   and _pipelined(s.body) is not None), None)
        if at is None:
            raise EmitError("a producer warpgroup feeds a pipelined reduction loop; this "
                            "kernel has none")
        found = region[at]
        assert isinstance(found, ir.For)
        phases = found
    if tiles is not None and any(isinstance(s, ir.ArrayDecl) and s.shares is not None
                                 for s in kernel.body):
        raise EmitError("a persistent producer refills the staged buffers while the consumers "
                        "leave a tile through the exchange array, which must not lie in them: "
                        "take fewer stages")
    steps = region if phases is None else phases.body  # the loop and the statements about it
    inner = _pipelined(steps)
    assert inner is not None
    loop = steps[inner]
    assert isinstance(loop, ir.For)
    before = steps[:inner]
    ahead = sum(isinstance(s, ir.StageCommit) for s in before)
    after = steps[inner + 1:]
    if after[:1] != (ir.StageWait(pending=0),) or not ahead:
        raise EmitError("a producer warpgroup feeds the rewrite's pipelined loop (copies "
                        "issued ahead, a wait for all after it)")
    after = after[1:]
    step = loop.step
    if not isinstance(step, ir.Const):
        raise EmitError("a producer warpgroup's steps are of a constant depth")
    depth = int(step.value)
    slot = next((s for s in loop.body if isinstance(s, ir.Let) and s.name == "sk_slot"), None)
    guard = next((s for s in loop.body if isinstance(s, ir.If) and _guard(s) is not None), None)
    copies = [s for s in loop.body if isinstance(s, ir.StageCopy)]
    if slot is None or guard is None or not copies:
        raise EmitError("a producer warpgroup feeds a loop that stages its tiles each step")
    for s in copies:
        if s.dst not in places or not tma.lands(s, places[s.dst]):
            raise EmitError("a producer warpgroup copies the loop's tiles by tensor maps "
                            "into the arrays wgmma reads: "
                            + tma.not_landing(s, places.get(s.dst)))
    stages = _stages(copies, places)
    # the step's number in the ring: counted on from the tiles and phases before
    index: ir.Expr = binary(BinOp.DIV, var(loop.var), const(depth))
    if tiles is not None or phases is not None:
        index = add(var(RING), index)
    slot = slot.model_copy(update={"value": binary(BinOp.REM, index, const(stages))})
    rounds = binary(BinOp.DIV, index, const(stages))

    def parity(back: int) -> ir.Expr:
        return binary(BinOp.REM, binary(BinOp.SUB, rounds, const(back)) if back else rounds,
                      const(2))

    # the copies of step sk_k0 into its own buffer: the loop's refills, ``ahead`` steps back
    back: dict[str, ir.Expr] = {
            loop.var: binary(BinOp.SUB, var(loop.var), const(ahead * depth)),
            "sk_slot": binary(BinOp.REM, add(var("sk_slot"), const(stages - ahead)),
                              const(stages))}
    own = [_substituted(s, back) for s in copies]
    fill: list[ir.Stmt] = []
    if phases is None:
        if any(not tma.tensor(s, scalars) for s in own):
            raise EmitError("a producer warpgroup copies the loop's tiles by tensor maps, "
                            "which needs each tile's rows contiguous in memory, its limits "
                            "the extents less its start and its origin the same for every "
                            "block")
        fill = _fill(own, scalars, places, consumers)
    else:  # each phase's copies through its own tensor maps
        outer = [*(() if tiles is None else kernel.body[:kernel.body.index(tiles)]),
                 *region[:at]]  # the statements before the phases
        for p, values in enumerate(_phase_values(phases, outer, before)):
            mine = [_substituted(s, values) for s in own]
            if any(not tma.tensor(s, scalars) for s in mine):
                raise EmitError("a producer warpgroup copies each phase's tiles by tensor maps "
                                "of its own, whose origins are the same for every block (a "
                                "batched operand's moves with its layer)")
            fill.append(ir.If(cond=binary(BinOp.EQ, var(phases.var), const(p)),
                              then=tuple(_fill(mine, scalars, places, consumers))))

    # Copies issued ``stages - 2`` steps ahead (``in_flight``): each step's multiplies stay in
    # flight while the next step is issued, and the step frees the buffer of the one before.
    in_flight = ahead == stages - 2
    release: tuple[ir.Stmt, ...] = (
        ir.MbarrierArrive(barriers=EMPTY, index=var("sk_slot"), tx_bytes=const(0)),)
    if in_flight:
        previous = binary(BinOp.REM, add(var("sk_slot"), const(stages - 1)), const(stages))
        release = (ir.WgmmaWait(pending=1), ir.If(cond=binary(BinOp.GE, index, const(1)), then=(
            ir.MbarrierArrive(barriers=EMPTY, index=previous, tx_bytes=const(0)),)))
    consumer_loop = loop.model_copy(update={"body": (
        slot,
        ir.MbarrierWait(barriers=FULL, index=var("sk_slot"), parity=parity(0)),
        *guard.then, *release)})
    producer_loop = loop.model_copy(update={"body": (
        slot,
        ir.If(cond=binary(BinOp.GE, index, const(stages)), then=(
            ir.MbarrierWait(barriers=EMPTY, index=var("sk_slot"), parity=parity(1)),)),
        *fill)})

    def named(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        return replace_statements(stmts, lambda s: [ir.NamedBarrier(
            id=CONSUMERS_BARRIER, threads=consumers, line=s.line)] if isinstance(
                s, ir.Barrier) else None)

    def region_only(x: ir.Stmt) -> bool:
        return not isinstance(x, ir.Let | ir.ArrayDecl | ir.StageCopy | ir.StageCommit)

    trips = ir.Select(cond=binary(BinOp.GT, loop.stop, const(0)), a=binary(
        BinOp.DIV, add(loop.stop, const(depth - 1)), const(depth)), b=const(0), type=I32)
    onward = ir.Assign(name=RING, value=add(var(RING), trips))
    ring = ir.Let(name=RING, type=I32, value=const(0))
    consumer_steps: list[ir.Stmt] = [consumer_loop, *((ir.WgmmaWait(),) if in_flight else ())]
    producer_steps: list[ir.Stmt] = [producer_loop]
    head, tail = before, after
    if phases is not None:  # both roles go through the phases, their steps counted on
        staged = (ir.StageCopy, ir.StageCommit)
        consumer_steps = [phases.model_copy(update={"body": (
            *(x for x in before if not isinstance(x, staged)), *consumer_steps, *after,
            onward)})]
        producer_steps = [phases.model_copy(update={"body": (
            *(x for x in before if isinstance(x, ir.Let)), *producer_steps, onward)})]
        head, tail = region[:at], region[at + 1:]
    origin = [x for x in head if isinstance(x, ir.Let)]  # the tile's (and the block's)
    opening = [x for x in head if region_only(x)]
    consumer: list[ir.Stmt] = [*opening, *consumer_steps, *tail]
    producer: list[ir.Stmt] = producer_steps
    kept = [x for x in kernel.body if isinstance(x, ir.Let | ir.ArrayDecl)]
    outside: list[ir.Stmt] = []  # the consumers' statements before the tiles
    if tiles is None:
        kept = [x for x in head if isinstance(x, ir.Let | ir.ArrayDecl)]
        outside, consumer = consumer[:len(opening)], consumer[len(opening):]
        if phases is not None:
            consumer, producer = [ring, *consumer], [ring, *producer]
    else:
        outside = [x for x in kernel.body if region_only(x) and x is not tiles]
        last = () if phases is not None else (onward,)  # a phase counts its own steps
        consumer = [ring, tiles.model_copy(update={"body": (*origin, *consumer, *last)})]
        producer = [ring, tiles.model_copy(update={"body": (*origin, *producer, *last)})]

    first = binary(BinOp.EQ, var("sk_tid"), const(0))
    start = (
        ir.ArrayDecl(name=FULL, elem=ElemType.U64, size=stages, space=MemSpace.SHARED, align=8),
        ir.ArrayDecl(name=EMPTY, elem=ElemType.U64, size=stages, space=MemSpace.SHARED,
                     align=8),
        ir.If(cond=first, then=(
            *(ir.MbarrierInit(barriers=FULL, index=const(i), arrivals=WARPGROUP)
              for i in range(stages)),
            *(ir.MbarrierInit(barriers=EMPTY, index=const(i), arrivals=consumers)
              for i in range(stages)),
            ir.AsyncProxyFence())),
        ir.Barrier())
    roles = ir.WarpRoles(roles=(
        ir.WarpRole(first=0, count=consumers // WARPGROUP, body=(
            ir.SetMaxNReg(registers=CONSUMER_REGISTERS, increase=True),
            *named((*outside, *consumer)))),
        ir.WarpRole(first=consumers // WARPGROUP, count=1, body=(
            ir.SetMaxNReg(registers=PRODUCER_REGISTERS, increase=False),
            ir.Let(name="sk_ptid", type=I32,
                   value=binary(BinOp.SUB, var("sk_tid"), const(consumers))),
            *producer))))
    return kernel.model_copy(update={"body": (*kept, *start, roles)})


def _pipelined(stmts: tuple[ir.Stmt, ...]) -> int | None:
    """Where the pipelined reduction loop (a loop whose body issues staged copies, none of
    them in a loop of its own) is among ``stmts``."""
    def copying(s: ir.Stmt) -> bool:
        return isinstance(s, ir.For) and any(isinstance(x, ir.StageCopy) for x in s.body)

    return next((i for i, s in enumerate(stmts) if isinstance(s, ir.For) and copying(s)
                 and not any(copying(x) for x in s.body)), None)


def _substituted(s: ir.StageCopy, values: dict[str, ir.Expr]) -> ir.StageCopy:
    """Copy ``s`` with ``values`` put for the names of its offsets and limits."""
    return s.model_copy(update={f: substitute(getattr(s, f), values) for f in (
        "dst_offset", "src_offset", "row_limit", "col_limit")})


def _phase_values(phases: ir.For, outer: list[ir.Stmt], before: tuple[ir.Stmt, ...]
                  ) -> list[dict[str, ir.Expr]]:
    """For each trip of the loop over the stacked byte planes' ``phases``, the values of the
    ``Let``s of its body ``before`` the reduction loop (where the phase's blocks start along
    k, and how far they go), with every name but the kernel's scalar parameters put in from
    the ``Let``s ``outer`` the loop: so that each phase's copies have tensor maps of their
    own (``tma.tensor``)."""
    known: dict[str, ir.Expr] = {}
    for x in outer:
        if isinstance(x, ir.Let):
            known[x.name] = substitute(x.value, known)
    trips = evaluate(substitute(phases.stop, known), {})
    if trips is None or evaluate(phases.start, {}) != 0 or not is_literal(phases.step, 1):
        raise EmitError("a producer warpgroup runs a known number of phases")
    out = []
    for p in range(int(trips)):
        values = {**known, phases.var: const(p)}
        mine: dict[str, ir.Expr] = {}
        for x in before:
            if isinstance(x, ir.Let):
                mine[x.name] = values[x.name] = _decided(substitute(x.value, values))
        out.append(mine)
    return out


def _decided(e: ir.Expr) -> ir.Expr:
    """``e`` with its outer selections between two known values made (``by_phase``)."""
    match e:
        case ir.Select(cond=ir.Binary(op=BinOp.EQ, a=x, b=y), a=a, b=b):
            left, right = evaluate(x, {}), evaluate(y, {})
            if left is not None and right is not None:
                return _decided(a if left == right else b)
    return e


def _stages(copies: list[ir.StageCopy], places: dict[str, CoreLayout]) -> int:
    """The buffers of the ring: those of the arrays the copies fill (one count for all)."""
    counts = set()
    for s in copies:
        layout = places[s.dst]
        counts.add(_size(s.dst, copies, layout))
    if len(counts) != 1:
        raise EmitError("a producer warpgroup's ring has one number of buffers per array")
    return counts.pop()


def _size(name: str, copies: list[ir.StageCopy], layout: CoreLayout) -> int:
    """The buffers of array ``name``: the buffer its copies' offsets step through."""
    offsets = {s.dst_offset for s in copies if s.dst == name}
    buffer = layout.rows * layout.pitch
    for offset in offsets:
        match offset:
            case ir.Binary(op=BinOp.MUL, a=ir.Binary(op=BinOp.REM, b=ir.Const(value=n)),
                           b=ir.Const(value=size)) if size == buffer:
                return int(n)
    raise EmitError(f"a producer warpgroup fills {name!r} buffer by buffer (slot * size)")


def _fill(copies: list[ir.StageCopy], scalars: frozenset[str],
          places: dict[str, CoreLayout], consumers: int) -> list[ir.Stmt]:
    """One step's copies by the producer warpgroup into buffer ``sk_slot``, then its
    arrivals on the full mbarrier."""
    me = var("sk_ptid")
    tx: ir.Expr = const(0)
    bulk: list[ir.Stmt] = []
    stores: list[ir.Stmt] = []
    for s in copies:
        layout = places[s.dst]
        usable, size, boxes = tma.issue(s, scalars, layout, FULL, var("sk_slot"))
        tx = add(tx, ir.Select(cond=usable, a=const(size), b=const(0), type=I32))
        bulk.append(ir.If(cond=usable, then=boxes))
        row, col = var("sk_cr"), var("sk_cc")
        by_element = spread(s.rows * s.cols, WARPGROUP, me, [
            ir.Let(name="sk_cr", type=I32, value=binary(BinOp.DIV, var("sk_ce"),
                                                       const(s.cols))),
            ir.Let(name="sk_cc", type=I32, value=binary(BinOp.REM, var("sk_ce"),
                                                       const(s.cols))),
            element_store(s.model_copy(update={"bulk": False}), row, col,
                          layout.element(s.dst_offset, row, col))], "sk_ce")
        stores.append(ir.If(cond=ir.Unary(op=ir.UnOp.NOT, x=usable, type=ElemType.BOOL),
                            then=(by_element, ir.AsyncProxyFence())))
    first = binary(BinOp.EQ, me, const(0))
    arrive = ir.MbarrierArrive(barriers=FULL, index=var("sk_slot"),
                               tx_bytes=ir.Select(cond=first, a=tx, b=const(0), type=I32))
    return [*stores, arrive, ir.If(cond=first, then=tuple(bulk))]
