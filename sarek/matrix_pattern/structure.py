"""The symbolic walk of a kernel's statements down to its one store to a global array: ``Let``
values are inlined, the bounds guard is collected from the ``if`` statements and early returns
on the way, and the k-loop (plain, or staged through shared memory) is matched against
``acc + A*B``, ``A*B + acc`` or ``fma(A, B, acc)``, the accumulator being a scalar or the output
element itself (``c[i] += A*B`` inside the loop). The result is a ``Nest`` whose expressions
are over parameters, builtins and placeholders only."""

from __future__ import annotations

from dataclasses import dataclass

from sarek import ir
from sarek.gemm import ACC
from sarek.ir import BinOp, ElemType, MathFn, MemSpace
from sarek.ir_build import is_literal, logical_not, var
from sarek.ir_format import format_expr
from sarek.ir_walk import distinct_subexpressions, rebuild, walk
from sarek.layout import Axis
from sarek.matrix_pattern.normalize import is_uniform
from sarek.matrix_pattern.operands import Operand, operand_of
from sarek.matrix_pattern.staged import (
    Steps,
    restaged,
    staging_block,
    staging_thread,
    thread_strides,
)
from sarek.matrix_pattern.vocabulary import (
    REDUCTION_INDEX,
    REDUCTION_NAMES,
    STEP_OFFSET,
    STEP_START,
    Refusal,
)


@dataclass
class KLoop:
    """The reduction: its bounds, the update's two factors, and the staging facts. A staged
    loop's reduction index is ``scale * t + kk`` (``t`` its outer variable, ``kk`` the inner):
    ``scale`` is 1 when the outer loop steps by the tile, the tile when it counts steps."""

    start: ir.Expr
    stop: ir.Expr
    acc: str
    acc_type: ElemType
    init: ir.Expr
    fused: bool
    left: Operand
    right: Operand
    tile: int | None = None
    block: tuple[int, int, int] | None = None
    scale: int = 1


@dataclass
class Nest:
    """What the walk found on the way to the store."""

    guards: list[ir.Expr]
    loop: KLoop
    store: ir.Store  # index and value symbolic
    line: int | None


_NEST_STATEMENTS = (ir.Let, ir.Assign, ir.Store, ir.For, ir.While, ir.If, ir.Barrier,
                    ir.Return, ir.ArrayDecl)
"""The statement kinds a GEMM nest is written with (the others are fragments and tiles)."""

_STAGING = ("the staged k-loop must be: stores to shared arrays, barrier(), the inner loop, "
            "barrier() (the last barrier may open the step instead)")


def _contains(s: ir.Stmt, target: ir.Stmt) -> bool:
    return any(x is target for x in walk((s,)))


def _effect_free(stmts: tuple[ir.Stmt, ...]) -> bool:
    return all(isinstance(s, ir.Let | ir.Return) for s in walk(stmts))


def _is_acc(e: ir.Expr) -> bool:
    return isinstance(e, ir.Var) and e.name == ACC


def _foreign(s: ir.Stmt) -> str | None:
    """Why ``s`` has no place in a GEMM nest, or None when it may have one."""
    match s:
        case ir.ArrayDecl(name=name, space=MemSpace.LOCAL):
            return (f"the local array {name!r}: a GEMM nest keeps its state in one scalar "
                    "accumulator (one output per invocation); a kernel that holds several "
                    "outputs or operands per invocation in registers is not recognized")
        case ir.ArrayDecl(name=name, layout=layout) if layout is not None \
                and layout.axes != {Axis.MEM}:
            return (f"the shared array {name!r} is laid out over lanes ({layout!r}): a GEMM "
                    "nest keeps its state in one scalar accumulator and stages operands in "
                    "plain shared arrays or tensors over memory")
        case _ if not isinstance(s, _NEST_STATEMENTS):
            return (f"the statement {s.kind!r}: the kernel already uses fragments or tile "
                    "instructions")
    return None


class Structure:
    """Walks the statements symbolically down to the store; ``line`` is the source line of the
    statement being read (where a refusal points)."""

    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.arrays = {p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}
        self.env: dict[str, ir.Expr] = {}
        self.types: dict[str, ElemType] = {}
        self.shared: dict[str, ir.ArrayDecl] = {}
        self.guards: list[ir.Expr] = []
        self.loop: KLoop | None = None
        self.line: int | None = None
        self.store: ir.Store | None = None
        self.output_index: ir.Expr | None = None  # the element ``c[i] += A*B`` adds into
        stores = [s for s in walk(kernel.body) if isinstance(s, ir.Store)]
        global_stores = [s for s in stores if s.array in self.arrays]
        if not global_stores:
            raise Refusal("the kernel stores nothing to a global array")
        if len(global_stores) > 1:
            names = sorted({s.array for s in global_stores})
            what = (f"two stores to {names[0]}" if len(names) == 1
                    else f"stores to {', '.join(names)}")
            raise Refusal(f"{what}: a GEMM nest writes one output element per invocation, once")
        self.target = global_stores[0]

    def symbolic(self, e: ir.Expr) -> ir.Expr:
        """``e`` with the variables bound so far replaced by their values."""
        env = self.env
        return rebuild(e, lambda x: env.get(x.name) if isinstance(x, ir.Var) else None)

    def run(self) -> Nest:
        """The nest; raises ``Refusal`` when the statements are not a GEMM nest's."""
        if not self.statements(self.kernel.body):
            raise Refusal("the store to the output is unreachable")
        assert self.loop is not None and self.store is not None
        return Nest(self.guards, self.loop, self.store, self.target.line)

    def refuse(self, s: ir.Stmt, reason: str) -> Refusal:
        self.line = s.line
        return Refusal(reason)

    def statements(self, stmts: tuple[ir.Stmt, ...]) -> bool:
        """Processes a statement list on the path to the store; True once the store is done."""
        for s in stmts:
            self.line = s.line
            if self.statement(s):
                return True
        return False

    def statement(self, s: ir.Stmt) -> bool:
        match s:
            case ir.Let(name=name, type=t, value=value):
                self.env[name] = self.symbolic(value)
                self.types[name] = t
            case ir.Assign(name=name, value=value):
                self.env[name] = self.symbolic(value)
            case ir.Store() if s is self.target:
                if self.loop is None:
                    raise self.refuse(s, f"the store to {s.array} comes before any k-loop: "
                                      "there is no reduction")
                self.store = ir.Store(array=s.array, index=self.symbolic(s.index),
                                      value=self.symbolic(s.value), line=s.line)
                return True
            case ir.Store(array=name):
                raise self.refuse(s, f"a store to the shared array {name!r} outside a staged "
                                  "k-loop")
            case ir.If(cond=cond, then=then, orelse=orelse):
                return self.conditional(s, cond, then, orelse)
            case ir.For():
                if _contains(s, self.target) and not self.adds_into_output(s):
                    raise self.refuse(s, f"the store to {self.target.array} is inside the "
                                      "k-loop: a GEMM nest stores once, after the reduction")
                if self.loop is not None:
                    raise self.refuse(s, "a second loop: a GEMM nest has one k-loop")
                self.loop = self.reduction(s)
                return self.store is not None  # the loop itself updated the output
            case ir.While():
                raise self.refuse(s, "a while loop: the reduction must be a for loop over "
                                  "range()")
            case ir.Return():
                raise self.refuse(s, f"a return before the store to {self.target.array}")
            case ir.ArrayDecl() if _foreign(s) is None:
                self.declare_shared(s)
            case _:
                reason = _foreign(s)
                if reason is None:
                    reason = "a barrier outside a staged k-loop"  # the one kind left
                raise self.refuse(s, reason)
        return False

    def declare_shared(self, s: ir.ArrayDecl) -> None:
        """A shared array: a staging tile. One declared with a layout over memory
        (``sa[ty, tx]``) is one too, unless the kernel also holds fragments, tiles or local
        arrays, whose refusal says more."""
        if s.layout is not None:
            for other in walk(self.kernel.body):
                reason = _foreign(other)
                if reason is not None:
                    raise self.refuse(other, reason)
        self.shared[s.name] = s

    def conditional(self, s: ir.If, cond_as_written: ir.Expr, then: tuple[ir.Stmt, ...],
                    orelse: tuple[ir.Stmt, ...]) -> bool:
        cond = self.symbolic(cond_as_written)
        negated = logical_not(cond)
        if _contains(s, self.target):
            inside_then = any(_contains(x, self.target) for x in then)
            taken, other = (then, orelse) if inside_then else (orelse, then)
            if not _effect_free(other):
                raise self.refuse(s, "the branch beside the bounds guard does something: a "
                                  "GEMM nest has no else branch")
            self.guards.append(cond if inside_then else negated)
            return self.statements(taken)
        if then and isinstance(then[-1], ir.Return) and _effect_free(then) and not orelse:
            self.guards.append(negated)
            return False
        if orelse and isinstance(orelse[-1], ir.Return) and _effect_free(orelse) \
                and _effect_free(then):
            self.guards.append(cond)
            return False
        raise self.refuse(s, f"the conditional 'if {format_expr(cond)}' is neither the bounds "
                          "guard around the store nor an early return")

    # ------------------------------------------------------------------ the k-loop

    def adds_into_output(self, s: ir.For) -> bool:
        """Whether the loop accumulates in the output element itself (``c[i] += A*B``): it
        assigns no variable and its store to the output reads the output."""
        return not any(isinstance(x, ir.Assign) for x in walk((s,))) and any(
            isinstance(x, ir.Load) and x.array == self.target.array
            for x in distinct_subexpressions(self.target.value))

    def reduction(self, s: ir.For) -> KLoop:
        in_output = _contains(s, self.target)
        if in_output:
            acc, acc_type = self.output_accumulator()
            init: ir.Expr = var(ACC, acc_type)  # the output's old value, once its index is known
        else:
            acc, acc_type, init = self.scalar_accumulator(s)
        self.env[acc] = var(ACC, acc_type)
        start, stop = self.symbolic(s.start), self.symbolic(s.stop)
        self.address_loop(s, start, stop)
        for what, bound in (("start", start), ("stop", stop)):
            self.uniform_bound(s, what, bound)
        inner = [x for x in s.body if isinstance(x, ir.For)]
        if inner:
            loop = self.staged(s, inner[0], acc, acc_type, init, start, stop)
        else:
            if not (isinstance(s.step, ir.Const) and s.step.value == 1):
                raise self.refuse(s, f"the k-loop steps by {format_expr(s.step)}: the "
                                  "reduction must run in steps of 1, in order")
            self.env[s.var] = var(REDUCTION_INDEX)
            fused, left, right = self.update_body(s.body, acc, acc_type, set(self.arrays))
            loop = KLoop(start, stop, acc, acc_type, init, fused, left, right)
        self.env[acc] = var(ACC, acc_type)
        if in_output:
            index = self.output_index
            assert index is not None  # update_body found the update of the output
            loop.init = ir.Load(array=self.target.array, index=index, type=acc_type)
            self.store = ir.Store(array=self.target.array, index=index,
                                  value=var(ACC, acc_type), line=self.target.line)
        return loop

    def scalar_accumulator(self, s: ir.For) -> tuple[str, ElemType, ir.Expr]:
        """The variable the k-loop accumulates into: its name, type and initial value."""
        assigned = {x.name for x in walk((s,)) if isinstance(x, ir.Assign)}
        if not assigned:
            raise self.refuse(s, "the loop updates no accumulator")
        if len(assigned) > 1:
            offsets = sorted(name for name in assigned if self.moving_offset(s, name))
            if offsets and len(assigned) - len(offsets) == 1:
                raise self.refuse(s, f"the k-loop advances {', '.join(offsets)} by a constant "
                                  "each step (an offset stepped through A or B, like a "
                                  "pointer): compute the offset from the loop variable "
                                  "instead (a[row * k + t + tx])")
            raise self.refuse(s, f"the k-loop assigns {', '.join(sorted(assigned))}: a GEMM "
                              "nest carries one accumulator")
        acc = assigned.pop()
        if acc not in self.env:
            raise self.refuse(s, f"the k-loop assigns {acc!r}, which is not declared before it")
        acc_type = self.types[acc]
        if not acc_type.is_arith:
            raise self.refuse(s, f"the accumulator {acc!r} is {acc_type}")
        return acc, acc_type, self.env[acc]

    def moving_offset(self, s: ir.For, name: str) -> bool:
        """Whether the loop only ever adds a uniform integer to ``name`` (``a_off += T``)."""
        if name not in self.types or not self.types[name].is_int:
            return False
        for x in walk((s,)):
            if isinstance(x, ir.Assign) and x.name == name:
                match x.value:
                    case ir.Binary(op=BinOp.ADD, a=ir.Var(name=same), b=step) \
                            if same == name and is_uniform(self.symbolic(step)):
                        pass
                    case _:
                        return False
        return True

    def address_loop(self, s: ir.For, start: ir.Expr, stop: ir.Expr) -> None:
        """Refuses a k-loop over addresses (``range(a_begin, a_end, T)`` with bounds that move
        with the block), saying how to write it over the reduction index."""
        moving = [[x.which.value for x in distinct_subexpressions(bound)
                   if isinstance(x, ir.BuiltinValue) and "_idx." in x.which.value]
                  for bound in (start, stop)]
        if all(moving):
            raise self.refuse(s, f"the k-loop start {format_expr(start)} varies by invocation "
                              f"(it uses {moving[0][0]}), and so does its stop: it walks "
                              "addresses; loop over the reduction index instead "
                              "(range(0, k, T) or range(k // T)) and add the block's offset "
                              "inside the index")

    def output_accumulator(self) -> tuple[str, ElemType]:
        """``c[i] += A*B`` inside the k-loop: the output element is the accumulator (its value
        before the loop, its old value, is the initial value); its name and type."""
        store = self.target
        if isinstance(store.value, ir.Cast):
            elem = self.arrays[store.array].elem
            raise self.refuse(store, f"the k-loop adds into {store.array}[...], which holds "
                              f"{elem}: the running sum is rounded to {elem} at every step; "
                              f"accumulate in a {store.value.x.type} variable and store it "
                              "once after the loop")
        if not store.value.type.is_arith:
            raise self.refuse(store, f"the k-loop adds into {store.array}[...], which holds "
                              f"{store.value.type}")
        return f"{store.array}[]", store.value.type

    def uniform_bound(self, s: ir.Stmt, what: str, bound: ir.Expr) -> None:
        for x in distinct_subexpressions(bound):
            match x:
                case ir.BuiltinValue(which=which) if which.name.startswith(("GRID_DIM",
                                                                            "BLOCK_DIM")):
                    raise self.refuse(s, f"the k-loop {what} {format_expr(bound)} depends on "
                                      f"the launch ({which.value}), not only on the matrices: "
                                      "the sum covers K only for launches that happen to match "
                                      "it; bound the loop by K and a constant tile T, e.g. "
                                      "range(0, k, T), range(k // T) or range((k + T - 1) // T) "
                                      "with the tiles zero-padded past k")
                case ir.BuiltinValue(which=which):
                    raise self.refuse(s, f"the k-loop {what} {format_expr(bound)} varies by "
                                      f"invocation (it uses {which.value})")
                case ir.Load(array=name):
                    raise self.refuse(s, f"the k-loop {what} reads {name}[...]: loop bounds "
                                      "must be scalar parameters and constants")
                case ir.Var(name=name) if name.startswith("%"):
                    raise self.refuse(s, f"the k-loop {what} {format_expr(bound)} depends on "
                                      "the accumulator or another loop")

    def update_body(self, body: tuple[ir.Stmt, ...], acc: str, acc_type: ElemType,
                    readable: set[str]) -> tuple[bool, Operand, Operand]:
        update: ir.Assign | ir.Store | None = None
        for s in body:
            self.line = s.line
            match s:
                case ir.Let(name=name, type=t, value=value) if update is None:
                    value = self.symbolic(value)
                    if any(_is_acc(x) for x in distinct_subexpressions(value)):
                        raise self.refuse(s, f"{name!r} reads the accumulator inside the "
                                          "k-loop: it is read before the loop ends")
                    self.env[name] = value
                    self.types[name] = t
                case ir.Assign(name=name) if name == acc and update is None:
                    update = s
                case ir.Store() if s is self.target and update is None:
                    update = s
                case ir.Assign():
                    raise self.refuse(s, "two updates of the accumulator in the k-loop")
                case ir.Store(array=name):
                    raise self.refuse(s, f"a store to {name} inside the k-loop")
                case ir.If():
                    raise self.refuse(s, "a conditional inside the k-loop")
                case ir.For() | ir.While():
                    raise self.refuse(s, "a loop nested in the k-loop")
                case _:
                    raise self.refuse(s, f"the statement {s.kind!r} inside the k-loop")
        if update is None:
            raise Refusal("the k-loop does not update the accumulator")
        self.line = update.line
        value = self.symbolic(update.value)
        if isinstance(update, ir.Store):
            value = self.output_update(update, value, acc_type)
        return self.match_update(update, value, acc_type, readable)

    def output_update(self, s: ir.Store, value: ir.Expr, acc_type: ElemType) -> ir.Expr:
        """The update ``c[i] = c[i] + A*B`` with its read of ``c[i]`` as the accumulator; ``i``
        must not move with the loop."""
        index = self.symbolic(s.index)
        if any(isinstance(x, ir.Var) and x.name in REDUCTION_NAMES
               for x in distinct_subexpressions(index)):
            raise self.refuse(s, f"the k-loop adds into {s.array}[{format_expr(index)}], an "
                              "element that moves with the reduction: a GEMM nest accumulates "
                              "each output in one place")
        self.output_index = index
        old = ir.Load(array=s.array, index=index, type=acc_type)
        return rebuild(value, lambda x: var(ACC, acc_type) if x == old else None)

    def match_update(self, s: ir.Stmt, value: ir.Expr, acc_type: ElemType,
                     readable: set[str]) -> tuple[bool, Operand, Operand]:
        fused = False
        match value:
            case ir.Binary(op=BinOp.ADD, a=a, b=product) if _is_acc(a):
                pass
            case ir.Binary(op=BinOp.ADD, a=product, b=b) if _is_acc(b):
                pass
            case ir.Call(fn=MathFn.FMA, args=(x, y, addend)) if _is_acc(addend):
                fused, product = True, ir.Binary(op=BinOp.MUL, a=x, b=y, type=value.type)
            case _:
                raise self.refuse(s, f"the update acc = {format_expr(value)} is not "
                                  "acc + A*B, A*B + acc or fma(A, B, acc)")
        if isinstance(product, ir.Cast) and isinstance(product.x, ir.Binary) \
                and product.x.op is BinOp.MUL:
            raise self.refuse(s, f"the product is computed in {product.x.type} and widened to "
                              f"the {acc_type} accumulator; widen the operands instead")
        if not (isinstance(product, ir.Binary) and product.op is BinOp.MUL):
            raise self.refuse(s, f"the update adds {format_expr(product)}, which is not a "
                              "product of two array elements")
        for e in (product.a, product.b):
            if any(_is_acc(x) for x in distinct_subexpressions(e)):
                raise self.refuse(s, "the product reads the accumulator")
        left, right = operand_of(product.a, readable), operand_of(product.b, readable)
        return fused, left, right

    # ------------------------------------------------------------------ the staged k-loop

    def staged(self, s: ir.For, inner: ir.For, acc: str, acc_type: ElemType, init: ir.Expr,
               start: ir.Expr, stop: ir.Expr) -> KLoop:
        """A k-loop in steps of a tile: stores to shared arrays, a barrier, an inner loop over
        the step, and a barrier after it (or before the stores); its factors are read back as
        the global loads that staged them. The outer loop either steps by the tile
        (``range(0, k, T)``) or counts steps (``range(k // T)``, reduction index ``s*T + kk``)."""
        tile, scale = self.step_tile(s, inner)
        steps = Steps(tile, counted=is_literal(s.step, 1), from_zero=is_literal(start, 0))
        self.env[s.var] = var(STEP_START)
        staged: dict[str, ir.Store] = {}
        events: list[str] = []  # "S" staging stores, "B" barrier, "L" the inner loop
        fused, left, right = False, None, None
        for stmt in s.body:
            self.line = stmt.line
            match stmt:
                case ir.Let(name=name, type=t, value=value):
                    self.env[name] = self.symbolic(value)
                    self.types[name] = t
                case ir.Barrier():
                    events.append("B")
                case ir.Store() | ir.If() if "L" in events:
                    raise self.refuse(stmt, "the staged k-loop stores to shared memory after "
                                      f"its inner loop; {_STAGING}")
                case ir.Store():
                    if stmt.array in staged:
                        raise self.refuse(stmt, f"two stores to the shared array "
                                          f"{stmt.array!r} in one step: a staged array is "
                                          "filled with one element per invocation")
                    staged.update(self.staging_stores((stmt,), staged))
                    events.append("S")
                case ir.If():
                    staged.update(self.staging_stores((stmt,), staged))
                    events.append("S")
                case ir.For() if stmt is inner:
                    self.env[inner.var] = var(STEP_OFFSET)
                    fused, left, right = self.update_body(inner.body, acc, acc_type,
                                                          set(self.arrays) | set(self.shared))
                    events.append("L")
                case _:
                    raise self.refuse(stmt, _STAGING)
        assert left is not None and right is not None
        block = None
        if staged:
            block = staging_block(staged, self.shared, steps)
            single = [name for name, store in sorted(staged.items())
                      if thread_strides(store.index, steps).buffer is None]
            self.check_barriers(s, events, sorted(staged), single)
        global_left = self.unstage(left, staged, block, steps)
        global_right = self.unstage(right, staged, block, steps)
        return KLoop(start, stop, acc, acc_type, init, fused, global_left, global_right, tile,
                     block, scale)

    def step_tile(self, s: ir.For, inner: ir.For) -> tuple[int, int]:
        """The tile of a staged k-loop and the scale of its outer variable."""
        stop = self.symbolic(inner.stop)
        extent = stop.value if (
            is_literal(inner.start, 0) and is_literal(inner.step, 1)
            and isinstance(stop, ir.Const) and isinstance(stop.value, int)
            and not isinstance(stop.value, bool) and stop.value > 0) else None
        if is_literal(s.step, 1):
            if extent is None:
                raise self.refuse(inner, "the inner loop of the staged k-loop must be range(T) "
                                  "for a constant T, the tile the outer loop counts")
            return extent, extent
        if not (isinstance(s.step, ir.Const) and isinstance(s.step.value, int)
                and s.step.value > 0):
            raise self.refuse(s, f"the staged k-loop steps by {format_expr(s.step)}, not a "
                              "positive constant")
        tile = s.step.value
        if extent != tile:
            raise self.refuse(inner, f"the inner loop of the staged k-loop must be range({tile})")
        return tile, 1

    def check_barriers(self, s: ir.For, events: list[str], names: list[str],
                       single: list[str]) -> None:
        """The barriers a step needs: between its stores and the inner loop that reads them,
        and, unless every array has two buffers the steps alternate between (``single`` are
        those that do not), between that loop and the next step's stores (after the loop or
        before the stores)."""
        arrays = ", ".join(repr(name) for name in names)
        loop = events.index("L")
        last_store = max(i for i, e in enumerate(events) if e == "S")
        first_store = events.index("S")
        if "B" not in events[last_store:loop]:
            raise self.refuse(s, f"the staged k-loop has no barrier between its stores to "
                              f"{arrays} and the inner loop that reads them: invocations would "
                              "read elements others have not stored yet (a race); add "
                              "barrier() before the inner loop")
        if single and "B" not in events[:first_store] and "B" not in events[loop:]:
            shown = ", ".join(repr(name) for name in single)
            raise self.refuse(s, f"the staged k-loop has one barrier per step: the next "
                              f"step's stores to {shown} would overwrite elements other "
                              "invocations are still reading (a race); add barrier() after "
                              "the inner loop, or alternate between two buffers by the step's "
                              "parity")

    def staging_stores(self, stmts: tuple[ir.Stmt, ...],
                       current: dict[str, ir.Store]) -> dict[str, ir.Store]:
        """The shared-array stores ``stmts`` leave, one per array, over ``current`` (what the
        step stored before): ``if c: s[i] = x else: s[i] = 0`` is the store of
        ``x if c else 0``."""
        out = dict(current)
        written: set[str] = set()
        for stmt in stmts:
            self.line = stmt.line
            match stmt:
                case ir.Let(name=name, type=t, value=value):
                    self.env[name] = self.symbolic(value)
                    self.types[name] = t
                case ir.Store(array=name, index=index, value=value):
                    if name not in self.shared:
                        raise self.refuse(stmt, f"a store to {name} inside the k-loop")
                    if name in written:
                        raise self.refuse(stmt, f"two stores to the shared array {name!r} in "
                                          "one step: a staged array is filled with one "
                                          "element per invocation")
                    written.add(name)
                    out[name] = ir.Store(array=name, index=self.symbolic(index),
                                         value=self.symbolic(value))
                case ir.If(cond=cond, then=then, orelse=orelse):
                    out.update(self.staging_branches(stmt, self.symbolic(cond), then, orelse,
                                                     out))
                case _:
                    raise self.refuse(stmt, _STAGING)
        return out

    def staging_branches(self, s: ir.If, cond: ir.Expr, then: tuple[ir.Stmt, ...],
                         orelse: tuple[ir.Stmt, ...],
                         current: dict[str, ir.Store]) -> dict[str, ir.Store]:
        taken = self.staging_stores(then, current)
        other = self.staging_stores(orelse, current)
        out: dict[str, ir.Store] = {}
        for name in sorted(set(taken) | set(other)):
            yes, no = taken.get(name), other.get(name)
            if yes is no:
                continue
            if yes is None or no is None:
                raise self.refuse(s, f"'if {format_expr(cond)}' stores to the shared array "
                                  f"{name!r} in one branch only: the elements it skips would "
                                  "keep the previous step's values; store 0 in the other "
                                  "branch")
            if yes.index != no.index:
                raise self.refuse(s, f"the branches of 'if {format_expr(cond)}' store to "
                                  f"different elements of {name!r}")
            value = ir.Select(cond=cond, a=yes.value, b=no.value, type=yes.value.type)
            out[name] = ir.Store(array=name, index=yes.index, value=value)
        return out

    def unstage(self, op: Operand, staged: dict[str, ir.Store],
                block: tuple[int, int, int] | None, steps: Steps) -> Operand:
        """The operand with its shared-memory load replaced by the global load that staged it
        (an operand read from global memory directly is kept)."""
        name = op.load.array
        if name in self.arrays:
            return op
        if name not in staged or block is None:
            raise Refusal(f"the k-loop reads the shared array {name!r}, which is not staged in "
                          "the same step")
        store = staged[name]
        writer = staging_thread(op.load.index, thread_strides(store.index, steps), block,
                                steps)
        value = restaged(store.value, writer)
        inner = operand_of(value, self.arrays)
        if inner.load.array not in self.arrays:
            raise Refusal(f"the shared array {name!r} is staged from {inner.load.array!r}, not "
                          "from a global array")
        return Operand(inner.load, op.conds + inner.conds, op.type)
