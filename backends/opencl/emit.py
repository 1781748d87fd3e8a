"""The OpenCL C printer (portable: any OpenCL 1.2 device with double precision).

The semantics are kept as on CUDA (``specs/backends.md``): ``FP_CONTRACT OFF`` so that nothing
is fused, correctly rounded division and square root (the runner builds with
``-cl-fp32-correctly-rounded-divide-sqrt``), integer arithmetic on unsigned types so that it
wraps, f16 through ``vload_half``/``vstore_half_rte`` and bf16 as 16-bit patterns with
explicit rounding to nearest even. bool is kept out of buffers and arguments (OpenCL forbids
it there): such arrays and scalars travel as ``uchar`` 0/1. Fragments and tile patterns are not
printed for OpenCL yet.
"""

from __future__ import annotations

import dataclasses

from backends.c_helpers import helpers
from backends.cstyle import Dialect, EmitError, Printer, render
from sarek import ir
from sarek.ir import Builtin, ElemType, MathFn

TYPES = {
    ElemType.I8: "char", ElemType.U8: "uchar", ElemType.I16: "short", ElemType.U16: "ushort",
    ElemType.I32: "int", ElemType.U32: "uint", ElemType.I64: "long", ElemType.U64: "ulong",
    ElemType.F16: "ushort", ElemType.BF16: "ushort", ElemType.F32: "float",
    ElemType.F64: "double", ElemType.BOOL: "bool",
}
_IDS = {"thread_idx": "get_local_id", "block_idx": "get_group_id",
        "block_dim": "get_local_size", "grid_dim": "get_num_groups"}
_LINEAR = ("((int)(get_local_id(0) + get_local_size(0) * (get_local_id(1) + "
           "get_local_size(1) * get_local_id(2))))")
BUILTINS = {
    **{b: "((int){}({}))".format(_IDS[b.value.split(".")[0]], "xyz".index(b.value[-1]))
       for b in Builtin if "." in b.value},
    Builtin.SUBGROUP_ID: f"({_LINEAR} / SK_SUBGROUP)",
    Builtin.SUBGROUP_LANE: f"({_LINEAR} % SK_SUBGROUP)",
    Builtin.SUBGROUP_SIZE: "SK_SUBGROUP",
}

_CONVERSIONS = r"""
#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
float sk_f16_to_f32(ushort h) { return vload_half(0, (const half*)&h); }
ushort sk_f32_to_f16(float f) { ushort h; vstore_half_rte(f, 0, (half*)&h); return h; }
ushort sk_f64_to_f16(double d) { ushort h; vstore_half_rte(d, 0, (half*)&h); return h; }
float sk_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }
/* f32 -> bf16, nearest even; a NaN stays a NaN (its quiet bit set). */
ushort sk_f32_to_bf16(float f) {
    uint u = as_uint(f);
    if (isnan(f)) return (ushort)((u >> 16) | 0x40u);
    return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/* f64 -> bf16 rounds once: to f32 rounding to odd, then to nearest even. */
ushort sk_f64_to_bf16(double d) {
    float r = convert_float_rtz(d);
    if ((double)r != d && !isnan(d)) r = as_float(as_uint(r) | 1u);
    return sk_f32_to_bf16(r);
}
"""

_MATH_NAMES = {MathFn.ABS: "fabs", MathFn.MIN: "fmin", MathFn.MAX: "fmax", MathFn.EXP: "exp",
               MathFn.LOG: "log", MathFn.SIN: "sin", MathFn.COS: "cos", MathFn.TANH: "tanh",
               MathFn.FLOOR: "floor", MathFn.CEIL: "ceil", MathFn.SQRT: "sqrt",
               MathFn.FMA: "fma"}
MATH = {(fn, t): f"{name}({', '.join(f'{{{i}}}' for i in range(ir.MATH_ARITY[fn]))})"
        for fn, name in _MATH_NAMES.items() for t in (ElemType.F32, ElemType.F64)}
CASTS = {
    (ElemType.F16, ElemType.F32): "sk_f16_to_f32({x})",
    (ElemType.F32, ElemType.F16): "sk_f32_to_f16({x})",
    (ElemType.F64, ElemType.F16): "sk_f64_to_f16({x})",
    (ElemType.BF16, ElemType.F32): "sk_bf16_to_f32({x})",
    (ElemType.F32, ElemType.BF16): "sk_f32_to_bf16({x})",
    (ElemType.F64, ElemType.BF16): "sk_f64_to_bf16({x})",
}


def _hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    if isinstance(s, ir.FragDecl | ir.FragFill | ir.FragLoad | ir.FragStore | ir.FragMulAdd
                  | ir.TileApply):
        raise EmitError(f"OpenCL does not print {type(s).__name__} statements yet")
    return None


DIALECT = Dialect(
    name="opencl",
    types=TYPES,
    builtins=BUILTINS,
    kernel_prefix="__kernel void",
    global_pointer="__global {const}{t}*",
    shared_decl="__local {t} {name}[{size}] __attribute__((aligned({align})));",
    barrier="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    prelude=_CONVERSIONS + helpers("", TYPES) + "\n",
    math=MATH,
    casts=CASTS,
    stmt_hook=_hook,
    memory_types={ElemType.BOOL: "uchar"},
    long_suffixes=("L", "UL"),
)

BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)


def emit(kernel: ir.Kernel) -> str:
    """The kernel as OpenCL C (build it with ``BUILD_OPTIONS``)."""
    subgroup = kernel.subgroup or 32
    dialect = dataclasses.replace(DIALECT, prelude=f"#define SK_SUBGROUP {subgroup}\n"
                                  + DIALECT.prelude)
    return render(kernel, dialect)
