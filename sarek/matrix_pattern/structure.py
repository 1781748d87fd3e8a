"""The symbolic walk of a kernel's statements down to its one store to a global array: ``Let``
values are inlined, the bounds guard is collected from the ``if`` statements and early returns
on the way, and the k-loop (plain, or staged through shared memory) is matched against
``acc + A*B``, ``A*B + acc`` or ``fma(A, B, acc)``. The result is a ``Nest`` whose expressions
are over parameters, builtins and placeholders only."""

from __future__ import annotations

from dataclasses import dataclass

from sarek import ir
from sarek.gemm import ACC
from sarek.ir import BinOp, ElemType, MathFn, MemSpace
from sarek.ir_build import is_literal, logical_not, var
from sarek.ir_format import format_expr
from sarek.ir_walk import distinct_subexpressions, rebuild, walk
from sarek.matrix_pattern.operands import Operand, operand_of
from sarek.matrix_pattern.staged import staging_block, staging_thread, thread_strides
from sarek.matrix_pattern.vocabulary import REDUCTION_INDEX, STEP_OFFSET, STEP_START, Refusal


@dataclass
class KLoop:
    """The reduction: its bounds, the update's two factors, and the staging facts."""

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



@dataclass
class Nest:
    """What the walk found on the way to the store."""

    guards: list[ir.Expr]
    loop: KLoop
    store: ir.Store  # index and value symbolic
    line: int | None


def _contains(s: ir.Stmt, target: ir.Stmt) -> bool:
    return any(x is target for x in walk((s,)))


def _effect_free(stmts: tuple[ir.Stmt, ...]) -> bool:
    return all(isinstance(s, ir.Let | ir.Return) for s in walk(stmts))


def _is_acc(e: ir.Expr) -> bool:
    return isinstance(e, ir.Var) and e.name == ACC


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
                if _contains(s, self.target):
                    raise self.refuse(s, f"the store to {self.target.array} is inside the "
                                      "k-loop: a GEMM nest stores once, after the reduction")
                if self.loop is not None:
                    raise self.refuse(s, "a second loop: a GEMM nest has one k-loop")
                self.loop = self.reduction(s)
            case ir.While():
                raise self.refuse(s, "a while loop: the reduction must be a for loop over "
                                  "range()")
            case ir.Return():
                raise self.refuse(s, f"a return before the store to {self.target.array}")
            case ir.ArrayDecl(name=name, space=MemSpace.SHARED) if s.layout is None:
                self.shared[name] = s
            case ir.ArrayDecl(name=name, space=space):
                raise self.refuse(s, f"the {space} array {name!r}: a GEMM nest keeps its "
                                  "state in one scalar accumulator")
            case ir.Barrier():
                raise self.refuse(s, "a barrier outside a staged k-loop")
            case _:
                raise self.refuse(s, f"the statement {s.kind!r}: the kernel already uses "
                                  "fragments or tile instructions")
        return False

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

    def reduction(self, s: ir.For) -> KLoop:
        assigned = {x.name for x in walk((s,)) if isinstance(x, ir.Assign)}
        if not assigned:
            raise self.refuse(s, "the loop updates no accumulator")
        if len(assigned) > 1:
            raise self.refuse(s, f"the k-loop assigns {', '.join(sorted(assigned))}: a GEMM "
                              "nest carries one accumulator")
        acc = assigned.pop()
        if acc not in self.env:
            raise self.refuse(s, f"the k-loop assigns {acc!r}, which is not declared before it")
        acc_type = self.types[acc]
        if not acc_type.is_arith:
            raise self.refuse(s, f"the accumulator {acc!r} is {acc_type}")
        init = self.env[acc]
        self.env[acc] = var(ACC, acc_type)
        start, stop = self.symbolic(s.start), self.symbolic(s.stop)
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
        return loop

    def uniform_bound(self, s: ir.Stmt, what: str, bound: ir.Expr) -> None:
        for x in distinct_subexpressions(bound):
            match x:
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
        update: ir.Assign | None = None
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
        return self.match_update(update, self.symbolic(update.value), acc_type, readable)

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
        the step, a barrier; its factors are read back as the global loads that staged them."""
        if not (isinstance(s.step, ir.Const) and isinstance(s.step.value, int)
                and s.step.value > 0):
            raise self.refuse(s, f"the staged k-loop steps by {format_expr(s.step)}, not a "
                              "positive constant")
        tile = s.step.value
        if not (is_literal(inner.start, 0) and isinstance(inner.stop, ir.Const)
                and inner.stop.value == tile and is_literal(inner.step, 1)):
            raise self.refuse(inner, f"the inner loop of the staged k-loop must be range({tile})")
        self.env[s.var] = var(STEP_START)
        staged: dict[str, ir.Store] = {}
        fused, left, right = False, None, None
        phase = 0  # 0 staging, 1 after the first barrier, 2 after the inner loop, 3 done
        for stmt in s.body:
            self.line = stmt.line
            match stmt:
                case ir.Let(name=name, type=t, value=value):
                    self.env[name] = self.symbolic(value)
                    self.types[name] = t
                case ir.Store(array=name, index=index, value=value) if phase == 0:
                    if name not in self.shared:
                        raise self.refuse(stmt, f"a store to {name} inside the k-loop")
                    if name in staged:
                        raise self.refuse(stmt, f"two stores to the shared array {name!r} in one "
                                          "step")
                    staged[name] = ir.Store(array=name, index=self.symbolic(index),
                                            value=self.symbolic(value))
                case ir.Barrier() if phase in (0, 2):
                    phase += 1
                case ir.For() if stmt is inner and phase == 1:
                    self.env[inner.var] = var(STEP_OFFSET)
                    fused, left, right = self.update_body(inner.body, acc, acc_type,
                                                          set(self.arrays) | set(self.shared))
                    phase = 2
                case _:
                    raise self.refuse(stmt, "the staged k-loop must be: stores to shared arrays, "
                                      "barrier(), the inner loop, barrier()")
        if phase != 3:
            raise self.refuse(s, "the staged k-loop needs a barrier after the stores to shared "
                              "memory and another after the inner loop")
        assert left is not None and right is not None
        block = staging_block(staged, self.shared)
        global_left = self.unstage(left, staged, block, tile)
        global_right = self.unstage(right, staged, block, tile)
        return KLoop(start, stop, acc, acc_type, init, fused, global_left, global_right, tile,
                     block)

    def unstage(self, op: Operand, staged: dict[str, ir.Store], block: tuple[int, int, int],
                tile: int) -> Operand:
        """The operand with its shared-memory load replaced by the global load that staged it."""
        name = op.load.array
        if name in self.arrays:
            raise Refusal(f"the staged k-loop reads {name} directly; stage both operands")
        if name not in staged:
            raise Refusal(f"the k-loop reads the shared array {name!r}, which is not staged in "
                          "the same step")
        store = staged[name]
        thread = staging_thread(op.load.index, thread_strides(store.index), block, tile)
        values = {f"thread_idx.{axis}": coord for axis, coord in thread.items()}
        value = rebuild(store.value, lambda x: values.get(x.which.value)
                        if isinstance(x, ir.BuiltinValue) else None)
        inner = operand_of(value, self.arrays)
        if inner.load.array not in self.arrays:
            raise Refusal(f"the shared array {name!r} is staged from {inner.load.array!r}, not "
                          "from a global array")
        return Operand(inner.load, op.conds + inner.conds, op.type)
