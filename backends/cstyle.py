"""The C-like printer shared by the CUDA, OpenCL and Metal backends.

``render(kernel, dialect)`` is a pure function from IR to text; a ``Dialect`` holds the tables
that differ between targets (type names, builtins, qualifiers, the rounding intrinsics that
keep the IR's no-contraction promise) and hooks for the statements only one target has. The
printed code keeps the IR's semantics exactly: integer arithmetic wraps (it is done on
unsigned types, since signed overflow is undefined in C), f32/f64 operations round once each
and are never contracted, f16/bf16 are 16-bit storage converted with round to nearest even.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from backends.c_helpers import UNSIGNED
from sarek import ir
from sarek.errors import SarekError
from sarek.ir import BinOp, ElemType, MathFn, UnOp
from sarek.ir_walk import walk

StmtHook = Callable[["Printer", ir.Stmt], list[str] | None]
UNROLL_TRIPS = 64


class EmitError(SarekError):
    """The kernel cannot be printed for the target; ``reason`` says what and why."""


@dataclass(frozen=True)
class Dialect:
    """What one C-like target calls things."""

    name: str
    types: dict[ElemType, str]
    builtins: dict[ir.Builtin, str]
    kernel_prefix: str  # e.g. 'extern "C" __global__ void'
    global_pointer: str  # format with {t} and {const}, e.g. "{const}{t}* __restrict__"
    shared_decl: str  # format with {t}, {name}, {size}, {align}
    barrier: str
    prelude: str = ""  # helper functions printed before the kernel
    # Float operations: op -> format string with {a} and {b} (f32 and f64 tables).
    f32_ops: dict[BinOp, str] = field(default_factory=dict)
    f64_ops: dict[BinOp, str] = field(default_factory=dict)
    math: dict[tuple[MathFn, ElemType], str] = field(default_factory=dict)
    # Conversions the dialect names itself: (from, to) -> format with {x}.
    casts: dict[tuple[ElemType, ElemType], str] = field(default_factory=dict)
    # Reinterpretations of floats held in float registers: (from, to) -> format with {x}.
    # (f16 and bf16 are held as their 16-bit patterns, so their bitcasts are plain casts.)
    bitcasts: dict[tuple[ElemType, ElemType], str] = field(default_factory=dict)
    stmt_hook: StmtHook | None = None
    # Types of memory and kernel arguments where they differ from ``types`` (OpenCL keeps bool
    # out of buffers and arguments), and the suffixes of 64-bit literals.
    memory_types: dict[ElemType, str] = field(default_factory=dict)
    long_suffixes: tuple[str, str] = ("LL", "ULL")
    # Printed before a loop of constant bounds with at most UNROLL_TRIPS trips, so that local
    # arrays indexed by its variable (a lowering's registers) can live in registers; such a
    # loop around a loop of run-time bounds is printed with ``keep_pragma`` instead, so that
    # the inner loop's code is not copied once a trip.
    unroll_pragma: str = ""
    keep_pragma: str = ""
    # The address-space qualifier of a pointer into each memory space, where the dialect has
    # one (a packed store writes through such a pointer).
    pointer_spaces: dict[ir.MemSpace, str] = field(default_factory=dict)


# ------------------------------------------------------------------ tables the dialects share

# C99's names of the math functions, for f64 (CUDA adds "f" for f32; OpenCL overloads them).
C_MATH_NAMES = {MathFn.ABS: "fabs", MathFn.MIN: "fmin", MathFn.MAX: "fmax", MathFn.EXP: "exp",
                MathFn.LOG: "log", MathFn.SIN: "sin", MathFn.COS: "cos", MathFn.TANH: "tanh",
                MathFn.FLOOR: "floor", MathFn.CEIL: "ceil", MathFn.SQRT: "sqrt",
                MathFn.FMA: "fma"}


def math_calls(names: dict[tuple[MathFn, ElemType], str]) -> dict[tuple[MathFn, ElemType], str]:
    """A dialect's ``math`` table from the function each (function, type) calls: the call
    with the function's arity in arguments ``{0}``, ``{1}`` ..."""
    return {(fn, t): f"{name}({', '.join(f'{{{i}}}' for i in range(ir.MATH_ARITY[fn]))})"
            for (fn, t), name in names.items()}


def conversion_casts(pairs: Iterable[tuple[ElemType, ElemType]]
                     ) -> dict[tuple[ElemType, ElemType], str]:
    """The ``casts`` entries for conversions a prelude defines as ``sk_<from>_to_<to>``."""
    return {(src, dst): f"sk_{src.value}_to_{dst.value}({{x}})" for src, dst in pairs}


def dim3_builtins(component: Callable[[str, int], str]) -> dict[ir.Builtin, str]:
    """The launch coordinates and sizes (``thread_idx.x`` ...) from how the dialect reads
    component ``axis`` (0, 1, 2) of one of them (``thread_idx``, ``block_idx``, ``block_dim``,
    ``grid_dim``), each as an int."""
    return {b: f"((int){component(b.value.split('.')[0], 'xyz'.index(b.value[-1]))})"
            for b in ir.Builtin if "." in b.value}


_C_OPS = {
    BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.REM: "%",
    BinOp.AND: "&", BinOp.OR: "|", BinOp.XOR: "^", BinOp.SHL: "<<", BinOp.SHR: ">>",
    BinOp.LT: "<", BinOp.LE: "<=", BinOp.GT: ">", BinOp.GE: ">=", BinOp.EQ: "==",
    BinOp.NE: "!=", BinOp.LAND: "&&", BinOp.LOR: "||",
}


def _float_literal(value: float, t: ElemType) -> str:
    if value != value:
        return "(0.0f/0.0f)" if t is ElemType.F32 else "(0.0/0.0)"
    if value in (float("inf"), float("-inf")):
        sign = "-" if value < 0 else ""
        return f"({sign}1.0f/0.0f)" if t is ElemType.F32 else f"({sign}1.0/0.0)"
    text = float(value).hex()
    return f"{text}f" if t is ElemType.F32 else text


class Printer:
    """Renders one kernel in one dialect; ``lines`` accumulates the output."""

    def __init__(self, kernel: ir.Kernel, dialect: Dialect) -> None:
        self.kernel = kernel
        self.dialect = dialect
        self.lines: list[str] = []
        self.depth = 1
        self.arrays: dict[str, ir.ArrayDecl | ir.ArrayParam] = {
            p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}
        self.views: dict[str, ir.TensorView] = {}
        self.frags: dict[str, ir.FragDecl] = {}
        self.fresh = 0

    # ------------------------------------------------------------------ helpers

    def type_name(self, e: ElemType) -> str:
        """The dialect's name of ``e`` in registers."""
        return self.dialect.types[e]

    def mem_t(self, e: ElemType) -> str:
        """The type of ``e`` in memory and in kernel arguments."""
        return self.dialect.memory_types.get(e, self.dialect.types[e])

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def temp(self, stem: str) -> str:
        self.fresh += 1
        return f"sk_{stem}{self.fresh}"

    # ------------------------------------------------------------------ expressions

    def expr(self, e: ir.Expr) -> str:
        match e:
            case ir.Const(value=v, type=t):
                return self.const(v, t)
            case ir.Var(name=name):
                return name
            case ir.BuiltinValue(which=w):
                return self.dialect.builtins[w]
            case ir.Unary(op=op, x=x, type=t):
                return self.unary(op, self.expr(x), t)
            case ir.Binary(op=op, a=a, b=b, type=t):
                return self.binary(op, a, b, t)
            case ir.Cast(x=x, type=t):
                return self.cast(self.expr(x), x.type, t)
            case ir.Bitcast(x=x, type=t):
                return self.bitcast(self.expr(x), x.type, t)
            case ir.Load(array=name, index=i):
                return f"{name}[{self.expr(i)}]"
            case ir.Select(cond=c, a=a, b=b):
                return f"({self.expr(c)} ? {self.expr(a)} : {self.expr(b)})"
            case ir.Call(fn=fn, args=args, type=t):
                return self.call(fn, [self.expr(a) for a in args], t)
        raise AssertionError(f"unhandled expression {e!r}")

    def const(self, v: bool | int | float, t: ElemType) -> str:
        if t is ElemType.BOOL:
            return "true" if v else "false"
        if t.is_float:
            lit = _float_literal(float(v), ElemType.F32 if t.is_storage_only else t)
            return self.cast(lit, ElemType.F32, t) if t.is_storage_only else lit
        if t is ElemType.I64 or t is ElemType.U64:
            signed, unsigned = self.dialect.long_suffixes
            return f"(({self.type_name(t)}){int(v)}{unsigned if t is ElemType.U64 else signed})"
        if t is ElemType.I32:
            return "((int)0x80000000u)" if v == -(2**31) else str(v) if v >= 0 else f"({v})"
        if t is ElemType.U32:
            return f"{int(v)}u"
        return f"(({self.type_name(t)}){int(v)}{'u' if not t.is_signed else ''})"

    def unary(self, op: UnOp, x: str, t: ElemType) -> str:
        match op:
            case UnOp.NOT:
                return f"(!{x})"
            case UnOp.BITNOT:
                return f"(({self.type_name(t)})(~{x}))"
            case UnOp.NEG if t.is_signed:
                return self.wrapped(t, f"(0u - ({self.type_name(UNSIGNED[t])}){x})")
            case UnOp.NEG:
                return f"(({self.type_name(t)})(-{x}))"
        raise AssertionError(op)

    def wrapped(self, t: ElemType, unsigned_expr: str) -> str:
        """A signed result computed in the unsigned type of the same width (wrapping)."""
        return f"(({self.type_name(t)}){unsigned_expr})"

    def binary(self, op: BinOp, a: ir.Expr, b: ir.Expr, t: ElemType) -> str:
        x, y = self.expr(a), self.expr(b)
        operand = a.type
        if operand in (ElemType.F32, ElemType.F64) and op in self.ops_for(operand):
            return self.ops_for(operand)[op].format(a=x, b=y)
        if operand.is_signed and op in (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.SHL):
            u = self.type_name(UNSIGNED[operand])
            return self.wrapped(t, f"(({u}){x} {_C_OPS[op]} ({u}){y})")
        if operand.is_signed and op in (BinOp.DIV, BinOp.REM) and not (
                isinstance(b, ir.Const) and int(b.value) not in (0, -1)):
            # Only a divisor of -1 needs care (INT_MIN / -1 wraps); constants are safe in C.
            return f"sk_{op.value}_{operand.value}({x}, {y})"
        text = f"({x} {_C_OPS[op]} {y})"
        if op in ir.COMPARISONS or op in ir.LOGICAL or operand.bits >= 32:
            return text
        return f"(({self.type_name(t)}){text})"  # C promotes narrow operands to int: narrow back

    def ops_for(self, t: ElemType) -> dict[BinOp, str]:
        return self.dialect.f32_ops if t is ElemType.F32 else self.dialect.f64_ops

    def cast(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src == dst:
            return x
        if (src, dst) in self.dialect.casts:
            return self.dialect.casts[(src, dst)].format(x=x)
        if src.is_storage_only:
            return self.cast(self.cast(x, src, ElemType.F32), ElemType.F32, dst)
        if dst.is_storage_only:
            # Integers wider than f32's significand reach bf16 (whose range holds them)
            # through f32 rounded to odd, so that they round once; through plain f32 they
            # would round twice. A dialect without the helper refuses them.
            if src.is_int and src.bits > 24 and dst is ElemType.BF16:
                odd = f"sk_{UNSIGNED.get(src, src).value}_to_f32_odd"
                if odd not in self.dialect.prelude or (ElemType.F32, dst) not in self.dialect.casts:
                    raise EmitError(f"{self.dialect.name} does not print {src} -> {dst} exactly "
                                    "(it would round twice)")
                via = f"sk_{src.value}_to_f32_odd({x})"
                return self.dialect.casts[(ElemType.F32, dst)].format(x=via)
            wide_t = ElemType.F64 if src is ElemType.F64 else ElemType.F32
            if (wide_t, dst) not in self.dialect.casts:
                raise EmitError(f"{self.dialect.name} has no conversion from {src} to {dst}")
            wide = self.cast(x, src, wide_t) if src is not wide_t else x
            return self.dialect.casts[(wide_t, dst)].format(x=wide)
        if src.is_float and dst.is_int:
            return f"sk_cvt_{dst.value}_{src.value}({x})"
        if dst is ElemType.BOOL:
            return f"({x} != 0)"
        return f"(({self.type_name(dst)}){x})"

    def bitcast(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src == dst:
            return x
        if (src, dst) in self.dialect.bitcasts:
            return self.dialect.bitcasts[(src, dst)].format(x=x)
        if src in (ElemType.F32, ElemType.F64) or dst in (ElemType.F32, ElemType.F64):
            raise EmitError(f"{self.dialect.name} has no bitcast from {src} to {dst}")
        return f"(({self.type_name(dst)}){x})"  # integers and 16-bit float patterns: same bits

    def call(self, fn: MathFn, args: list[str], t: ElemType) -> str:
        if (fn, t) in self.dialect.math:
            return self.dialect.math[(fn, t)].format(*args)
        if t.is_int and fn in (MathFn.MIN, MathFn.MAX):
            cmp = "<" if fn is MathFn.MIN else ">"
            a, b = args
            return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
        if t.is_int and fn is MathFn.ABS:
            return self.cast(f"sk_abs_{t.value}({args[0]})", t, t)
        raise AssertionError(f"no rendering of {fn} on {t} in {self.dialect.name}")

    # ------------------------------------------------------------------ statements

    def block(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for s in stmts:
            self.stmt(s)

    def nested(self, header: str, body: tuple[ir.Stmt, ...]) -> None:
        self.emit(header + " {")
        self.depth += 1
        self.block(body)
        self.depth -= 1
        self.emit("}")

    def stmt(self, s: ir.Stmt) -> None:
        if self.dialect.stmt_hook is not None:
            hooked = self.dialect.stmt_hook(self, s)
            if hooked is not None:
                for line in hooked:
                    self.emit(line)
                return
        match s:
            case ir.Let(name=name, type=t, value=v):
                self.emit(f"{self.type_name(t)} {name} = {self.expr(v)};")
            case ir.Assign(name=name, value=v):
                self.emit(f"{name} = {self.expr(v)};")
            case ir.Store(array=name, index=i, value=v):
                self.emit(f"{name}[{self.expr(i)}] = {self.expr(v)};")
            case ir.StorePacked(array=name, index=i, value=v):
                space = self.dialect.pointer_spaces.get(self.arrays[name].space, "")
                pointer = f"{space} {self.mem_t(v.type)}*".lstrip()
                self.emit(f"*(({pointer})&{name}[{self.expr(i)}]) = {self.expr(v)};")
            case ir.For(var=var, start=a, stop=b, step=c, body=body):
                self.for_loop(var, a, b, c, body)
            case ir.While(cond=c, body=body):
                self.nested(f"while ({self.expr(c)})", body)
            case ir.If(cond=c, then=then, orelse=orelse):
                self.nested(f"if ({self.expr(c)})", then)
                if orelse:
                    self.lines[-1] += " else {"
                    self.depth += 1
                    self.block(orelse)
                    self.depth -= 1
                    self.emit("}")
            case ir.Barrier():
                self.emit(self.dialect.barrier)
            case ir.Return():
                self.emit("return;")
            case ir.ArrayDecl(name=name, elem=t, size=size, space=space, align=align):
                if s.shares is not None:
                    raise EmitError(f"{self.dialect.name} prints no array in another's storage "
                                    f"({name!r} shares that of {s.shares!r}); its staging "
                                    "policy never asks for one")
                self.arrays[name] = s
                if space is ir.MemSpace.SHARED:
                    self.emit(self.dialect.shared_decl.format(t=self.mem_t(t), name=name, size=size,
                                                        align=align))
                else:
                    self.emit(f"{self.mem_t(t)} {name}[{size}];")
            case ir.TensorView(name=name):
                self.views[name] = s
                self.emit(f"/* {name}: a view of {s.storage} as {s.elem.value} "
                          f"{s.layout!r}, offset {s.offset} */")
            case _:
                raise EmitError(f"{self.dialect.name} cannot print {type(s).__name__} statements")

    def for_loop(self, var: str, a: ir.Expr, b: ir.Expr, c: ir.Expr,
                 body: tuple[ir.Stmt, ...]) -> None:
        if isinstance(c, ir.Const):
            cmp = "<" if int(c.value) > 0 else ">"
            step = self.expr(c)
            if self.dialect.unroll_pragma and isinstance(a, ir.Const) and isinstance(b, ir.Const):
                trips = len(range(int(a.value), int(b.value), int(c.value)))
                if trips <= UNROLL_TRIPS:
                    self.emit(self.dialect.keep_pragma if self.dialect.keep_pragma
                              and _runtime_loop(body) else self.dialect.unroll_pragma)
            self.nested(f"for (int {var} = {self.expr(a)}; {var} {cmp} {self.expr(b)}; "
                        f"{var} += {step})", body)
            return
        # A step known only at run time: bounds evaluated once, direction by its sign.
        stop, step = self.temp("stop"), self.temp("step")
        self.emit(f"const int {stop} = {self.expr(b)}, {step} = {self.expr(c)};")
        self.nested(f"for (int {var} = {self.expr(a)}; {step} > 0 ? {var} < {stop} : "
                    f"{var} > {stop}; {var} += {step})", body)

    # ------------------------------------------------------------------ the kernel

    def params(self) -> str:
        out = []
        for p in self.kernel.params:
            match p:
                case ir.ArrayParam(name=name, elem=e, readonly=ro):
                    ptr = self.dialect.global_pointer.format(t=self.mem_t(e),
                                                       const="const " if ro else "")
                    out.append(f"{ptr} {name}")
                case ir.ScalarParam(name=name, elem=e):
                    out.append(f"{self.mem_t(e)} {name}")
        return ", ".join(out)

    def render(self) -> str:
        self.block(self.kernel.body)
        head = f"{self.dialect.kernel_prefix} {self.kernel.name}({self.params()})"
        prelude = needed_helpers(self.dialect.prelude, "\n".join(self.lines))
        top = [prelude.strip("\n"), ""] if prelude.strip() else []
        return "\n".join([*top, head + " {", *self.lines, "}", ""])


_HELPER_NAME = re.compile(r"\b(sk_\w+)\s*\(")


def _runtime_loop(body: tuple[ir.Stmt, ...]) -> bool:
    """Whether ``body`` holds a loop whose bounds are known only at run time."""
    return any(isinstance(s, ir.While) or (isinstance(s, ir.For) and not all(
        isinstance(x, ir.Const) for x in (s.start, s.stop, s.step))) for s in walk(body))


def needed_helpers(prelude: str, text: str) -> str:
    """The parts of ``prelude`` that ``text`` uses: each helper function (a definition starts
    at an unindented line, a comment before it belonging to it) is kept when its name occurs in
    ``text`` or in a kept helper; lines that define no helper (pragmas, macros) are kept."""
    chunks: list[list[str]] = []
    for line in prelude.splitlines():
        opens = line[:1] not in ("", " ", "\t", "}")
        after_comment = bool(chunks) and chunks[-1][-1].startswith("/*")
        if (opens and not after_comment) or not chunks:
            chunks.append([line])
        else:
            chunks[-1].append(line)
    named = []
    for chunk in chunks:
        body = "\n".join(chunk)
        code = [x for x in chunk if not x.startswith("/*")]
        found = _HELPER_NAME.search(code[0]) if code else None
        named.append((found.group(1) if found else None, body))
    keep: set[str | None] = {name for name, _ in named if name is None}
    used = text
    changed = True
    while changed:
        changed = False
        for name, body in named:
            if name is not None and name not in keep and re.search(rf"\b{name}\b", used):
                keep.add(name)
                used += "\n" + body
                changed = True
    return "\n".join(body for name, body in named if name in keep)


def render(kernel: ir.Kernel, dialect: Dialect) -> str:
    """The kernel as source text in ``dialect``."""
    return Printer(kernel, dialect).render()
