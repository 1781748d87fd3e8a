"""The Metal Shading Language printer.

``emit`` lowers a kernel for Metal (``backends.metal.lower``) and prints it; ``print_kernel``
prints a lowered kernel and decides nothing. The text is one ``kernel void`` function for MSL
3.1 or later (``bfloat`` needs 3.1, simdgroup matrices 2.3 and an Apple7 GPU):

* array parameters are ``device`` buffers, scalars ``constant`` references, each with its
  ``[[buffer(i)]]`` index, i the parameter's position; the builtins the body reads are the
  thread-position arguments (``[[thread_position_in_threadgroup]]`` ...), SIMD-group id and
  lane Metal's own (taken to be groups of 32 consecutive threads, the IR's linear order);
* shared arrays are ``threadgroup`` arrays, the barrier
  ``threadgroup_barrier(mem_flags::mem_threadgroup)``;
* f16 and bf16 are Metal's ``half`` and ``bfloat``, converted explicitly (``float(x)``,
  ``half(x)``; narrowing rounds to nearest even, Metal's default), bool is kept as ``uchar``
  0/1 in buffers, i64/u64 are ``long``/``ulong``;
* the no-contraction promise: ``#pragma METAL fp math_mode(safe)`` and
  ``#pragma METAL fp contract(off)`` (MSL 3.2; compilers before it need ``-fno-fast-math``,
  ``specs/backends.md``), division, square root, min and max through ``metal::precise``;
* a fragment is a ``simdgroup_half8x8`` / ``simdgroup_bfloat8x8`` / ``simdgroup_float8x8``,
  filled with ``make_filled_simdgroup_matrix``, moved with ``simdgroup_load`` /
  ``simdgroup_store`` (a column-major move is a transposed one), multiplied with
  ``simdgroup_multiply_accumulate``, added element by element through each thread's
  ``thread_elements()`` (Metal has no matrix add).

Float literals are printed as the shortest decimal that reads back as the constant's value,
non-finite ones through ``as_type``; 16-bit float constants as the exact value of the rounded
constant, so that no literal is rounded twice (Metal's lowering rounds each constant to its
type; the printer prints the value it is given).
"""

from __future__ import annotations

import re

import numpy as np

from backends.c_helpers import helpers
from backends.cstyle import Dialect, Printer, dim3_builtins
from backends.families import NEUTRAL, refusal
from backends.metal.lower import EDGE, MATRIX_TYPES, THREAD_ELEMENTS, check, lower
from sarek import ir, ir_check
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, MathFn

TYPES = {
    ElemType.I8: "char", ElemType.U8: "uchar", ElemType.I16: "short", ElemType.U16: "ushort",
    ElemType.I32: "int", ElemType.U32: "uint", ElemType.I64: "long", ElemType.U64: "ulong",
    ElemType.F16: "half", ElemType.BF16: "bfloat", ElemType.F32: "float",
    ElemType.BOOL: "bool",
}

# The kernel arguments of the thread-position builtins: name -> (type, attribute).
POSITIONS = {
    "sk_mtl_thread": ("uint3", "thread_position_in_threadgroup"),
    "sk_mtl_group": ("uint3", "threadgroup_position_in_grid"),
    "sk_mtl_threads": ("uint3", "threads_per_threadgroup"),
    "sk_mtl_groups": ("uint3", "threadgroups_per_grid"),
    "sk_mtl_simd": ("uint", "simdgroup_index_in_threadgroup"),
    "sk_mtl_simd_lane": ("uint", "thread_index_in_simdgroup"),
    "sk_mtl_simd_width": ("uint", "threads_per_simdgroup"),
}
_VECTORS = {"thread_idx": "sk_mtl_thread", "block_idx": "sk_mtl_group",
            "block_dim": "sk_mtl_threads", "grid_dim": "sk_mtl_groups"}
BUILTINS = {
    **dim3_builtins(lambda vector, axis: f"{_VECTORS[vector]}.{'xyz'[axis]}"),
    Builtin.SUBGROUP_ID: "((int)sk_mtl_simd)",
    Builtin.SUBGROUP_LANE: "((int)sk_mtl_simd_lane)",
    Builtin.SUBGROUP_SIZE: "((int)sk_mtl_simd_width)",
}

_PRELUDE = """\
#include <metal_stdlib>
using namespace metal;
/* Floats round once per operation and nothing is fused (MSL 3.2 and later; an older
   compiler must be given -fno-fast-math, see specs/backends.md). */
#if __METAL_VERSION__ >= 320
#pragma METAL fp math_mode(safe)
#pragma METAL fp contract(off)
#endif
"""

F32_OPS = {BinOp.ADD: "({a} + {b})", BinOp.SUB: "({a} - {b})", BinOp.MUL: "({a} * {b})",
           BinOp.DIV: "precise::divide({a}, {b})"}
MATH = {
    (MathFn.ABS, ElemType.F32): "fabs({0})",
    (MathFn.MIN, ElemType.F32): "precise::fmin({0}, {1})",
    (MathFn.MAX, ElemType.F32): "precise::fmax({0}, {1})",
    (MathFn.SQRT, ElemType.F32): "precise::sqrt({0})",
    (MathFn.FMA, ElemType.F32): "fma({0}, {1}, {2})",
    (MathFn.FLOOR, ElemType.F32): "floor({0})",
    (MathFn.CEIL, ElemType.F32): "ceil({0})",
    **{(fn, ElemType.F32): f"precise::{fn.value}({{0}})"
       for fn in (MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS, MathFn.TANH)},
}
CASTS = {
    (ElemType.F16, ElemType.F32): "float({x})",
    (ElemType.F32, ElemType.F16): "half({x})",
    (ElemType.BF16, ElemType.F32): "float({x})",
    (ElemType.F32, ElemType.BF16): "bfloat({x})",
}
_SIXTEEN = (ElemType.I16, ElemType.U16, ElemType.F16, ElemType.BF16)
_THIRTY_TWO = (ElemType.I32, ElemType.U32, ElemType.F32)
BITCASTS = {(a, b): f"as_type<{TYPES[b]}>({{x}})" for group in (_SIXTEEN, _THIRTY_TWO)
            for a in group for b in group if a != b and (a.is_float or b.is_float)}
"""Metal's half and bfloat are real types: their bits are read through ``as_type``."""


def _helpers() -> str:
    # The shared helpers are generated for f64 too; lowering refuses f64, so those are never
    # used, and needed_helpers drops them. Metal has no long long: 64-bit literals are UL,
    # and -2^63, which no signed literal holds, is written as the ulong 2^63 (the same bits).
    text = helpers("inline", {**TYPES, ElemType.F64: "double"}, clz=("clz", "clz"))
    text = re.sub(r"(\d)ULL\b", r"\1UL", text)
    return text.replace("(ulong)-9223372036854775808", "(ulong)9223372036854775808UL")


def _float_literal(value: float) -> str:
    """An f32 literal reading back as ``value`` (already an f32 value): the shortest decimal
    that does (a correctly rounding compiler reads it back exactly), or its bits when it is
    not finite."""
    f = np.float32(value)
    if not np.isfinite(f):
        return f"as_type<float>({int(f.view(np.uint32))}u)"
    text = np.format_float_positional(f, unique=True, trim="0")
    if len(text) > 12:
        text = np.format_float_scientific(f, unique=True, trim="0")
    return f"{text}f"


class _MetalPrinter(Printer):
    """The shared C-like printer with Metal's literals and kernel signature."""

    def const(self, v: bool | int | float, t: ElemType) -> str:
        if not t.is_float:
            return super().const(v, t)
        # The lowering rounded the constant to its type (``lower.round_constants``); a 16-bit
        # value is exact in f32, so the literal and its conversion round nothing more.
        lit = _float_literal(float(v))
        return self.cast(lit, ElemType.F32, t) if t.is_storage_only else lit

    def params(self) -> str:
        out = []
        for i, p in enumerate(self.kernel.params):
            match p:
                case ir.ArrayParam(name=name, elem=e, readonly=ro):
                    out.append(f"device {'const ' if ro else ''}{self.mem_t(e)}* {name} "
                               f"[[buffer({i})]]")
                case ir.ScalarParam(name=name, elem=e):
                    out.append(f"constant {self.mem_t(e)}& {name} [[buffer({i})]]")
        body = "\n".join(self.lines)
        out += [f"{t} {name} [[{attr}]]" for name, (t, attr) in POSITIONS.items()
                if re.search(rf"\b{name}\b", body)]
        return ",\n        ".join(out)


def _hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    """Fragments as simdgroup matrices; NVIDIA's instructions were refused by the lowering."""
    match s:
        case ir.FragDecl(name=name, elem=elem):
            p.frags[name] = s
            return [f"simdgroup_{MATRIX_TYPES[elem]}{EDGE}x{EDGE} {name};"]
        case ir.FragFill(frag=name, value=value):
            t = MATRIX_TYPES[p.frags[name].elem]
            return [f"{name} = make_filled_simdgroup_matrix<{t}, {EDGE}, {EDGE}>"
                    f"({p.expr(value)});"]
        case ir.FragLoad() | ir.FragStore():
            call = "simdgroup_load" if isinstance(s, ir.FragLoad) else "simdgroup_store"
            # A column-major move is the row-major one of the transposed matrix.
            transpose = "true" if s.layout is FragLayout.COL else "false"
            return [f"{call}({s.frag}, {s.array} + {p.expr(s.offset)}, "
                    f"(ulong)({p.expr(s.stride)}), ulong2(0, 0), {transpose});"]
        case ir.FragMulAdd(d=d, a=a, b=b, c=c):
            return [f"simdgroup_multiply_accumulate({d}, {a}, {b}, {c});"]
        case ir.FragAdd(d=d, a=a, b=b, subtract=subtract):
            # Matrices of one type keep element (i, j) in the same thread and slot: each
            # thread adds (or subtracts) its own, with the f32 operation that rounds once.
            op = BinOp.SUB if subtract else BinOp.ADD
            return [f"{d}.thread_elements()[{e}] = " + F32_OPS[op].format(
                        a=f"{a}.thread_elements()[{e}]", b=f"{b}.thread_elements()[{e}]") + ";"
                    for e in range(THREAD_ELEMENTS)]
        case _ if (error := refusal(s, NEUTRAL, "Metal")) is not None:
            raise error
    return None


DIALECT = Dialect(
    name="metal",
    types=TYPES,
    builtins=BUILTINS,
    kernel_prefix="kernel void",
    global_pointer="device {const}{t}*",
    shared_decl="threadgroup {t} {name}[{size}];",
    barrier="threadgroup_barrier(mem_flags::mem_threadgroup);",
    prelude=_PRELUDE + _helpers() + "\n",
    f32_ops=F32_OPS,
    math=MATH,
    casts=CASTS,
    bitcasts=BITCASTS,
    stmt_hook=_hook,
    memory_types={ElemType.BOOL: "uchar"},
    long_suffixes=("L", "UL"),
    pointer_spaces={ir.MemSpace.GLOBAL: "device", ir.MemSpace.SHARED: "threadgroup",
                    ir.MemSpace.LOCAL: "thread"},
)


def print_kernel(kernel: ir.Kernel) -> str:
    """A kernel lowered for Metal (or any kernel ``backends.metal.lower`` accepts unchanged)
    as Metal Shading Language; ``EmitError`` with the reason for what Metal cannot print."""
    check(kernel)
    return _MetalPrinter(kernel, DIALECT).render()


def emit(kernel: ir.Kernel) -> str:
    """The kernel, original or rewritten, validated, lowered for Metal and printed as Metal
    Shading Language."""
    ir_check.ensure_valid(kernel)
    return print_kernel(lower(kernel))
