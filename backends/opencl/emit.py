"""The portable OpenCL C printer (``emit``), and the dialect the opencl-nv printer
(``backends.opencl.emit_nv``) extends.

The semantics are kept as on CUDA (``specs/backends.md``): ``FP_CONTRACT OFF`` so that nothing
is fused, correctly rounded division and square root (the runner builds with
``-cl-fp32-correctly-rounded-divide-sqrt``), integer arithmetic on unsigned types so that it
wraps, f16 and bf16 as 16-bit patterns converted without ``half`` arithmetic, rounding to
nearest even (no ``cl_khr_fp16`` needed; ``_CONVERSIONS`` says why not ``vstore_half``).
bool is kept out of buffers and arguments (OpenCL forbids it there): such arrays and scalars
travel as ``uchar`` 0/1.

It prints a kernel that is already lowered and decides nothing: ``emit`` lowers fragments
with ``backends.opencl.lower`` (a lane-by-lane emulation in local memory, no extension needed).
"""

from __future__ import annotations

import dataclasses

from backends import cstyle
from backends.c_helpers import helpers
from backends.cstyle import Dialect, Printer, render
from backends.families import refusal
from backends.opencl.lower import lower
from sarek import ir, ir_check
from sarek.ir import Builtin, ElemType

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
    **cstyle.dim3_builtins(lambda vector, axis: f"{_IDS[vector]}({axis})"),
    Builtin.SUBGROUP_ID: f"({_LINEAR} / SK_SUBGROUP)",
    Builtin.SUBGROUP_LANE: f"({_LINEAR} % SK_SUBGROUP)",
    Builtin.SUBGROUP_SIZE: "SK_SUBGROUP",
}

# f16 is converted by integer and f32 arithmetic, not with vload_half/vstore_half_rte on a ushort
# reinterpreted as half: without cl_khr_fp16 no half object can exist, so that access breaks
# C's strict aliasing, and PoCL 3.0 (LLVM 14) drops the store through the half pointer: the
# ushort read back is stale stack, garbage and often NaN (the f16 rewrite gave all-wrong or NaN
# outputs). This conversion is defined C on every device and bit-exact (test_opencl_fragments
# checks every f16 and the rounding boundaries of f32 and f64). f32 and f16 convert without
# branches (selects in their place), since staging converts every element: F16 of gemm_f32
# ran 11.8 TFLOP/s on the H200 through NVIDIA's OpenCL at 4096^3, against 5.3 with branches
# (specs/backends.md, "Speed").
_CONVERSIONS = r"""
#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
/* f16 <-> f32/f64: exact, nearest even, NaN payloads kept as NumPy keeps them. */
float sk_f16_to_f32(ushort h) {
    uint s = ((uint)h & 0x8000u) << 16, a = (uint)h & 0x7FFFu;
    uint n = (a << 13) + 0x38000000u;                   /* normal: exponent rebiased by 112 */
    n = a >= 0x7C00u ? n + 0x38000000u : n;             /* infinity, NaN: exponent 255 */
    n = a < 0x400u ? as_uint((float)a * 0x1p-24f) : n;  /* subnormal, zero: exact */
    return as_float(s | n);
}
/* Directly, not through f32: converting a signalling NaN float to double would quiet it. */
double sk_f16_to_f64(ushort h) {
    uint m = (uint)h & 0x3FFu;
    if ((((uint)h >> 10) & 0x1Fu) != 0x1Fu || m == 0u) return (double)sk_f16_to_f32(h);
    return as_double(((ulong)((uint)h & 0x8000u) << 48) | 0x7FF0000000000000UL | ((ulong)m << 42));
}
/* Without branches: the FPU rounds. Adding 2^(e+13) (e the exponent of x, at least f16's
   smallest normal exponent -14; the sign of x) leaves a sum whose last place is f16's last
   place at e, so the sum is x rounded to nearest even there; subtracting it again is exact. */
ushort sk_f32_to_f16(float f) {
    uint u = as_uint(f), s = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    float big = as_float((u & 0x80000000u) | (max(a & 0x7F800000u, 0x38800000u) + 0x06800000u));
    uint r = as_uint((f + big) - big) & 0x7FFFFFFFu;
    uint h = r >= 0x38800000u ? (r - 0x38000000u) >> 13 : (uint)(as_float(r) * 0x1p24f);
    uint p = (a & 0x7FFFFFu) >> 13;
    h = a >= 0x477FF000u ? 0x7C00u : h;                 /* 65520 and above: infinity */
    h = a > 0x7F800000u ? 0x7C00u | (p ? p : 1u) : h;   /* NaN: the payload's upper bits */
    return (ushort)(s | h);
}
ushort sk_f64_to_f16(double d) {
    ulong u = as_ulong(d), a = u & 0x7FFFFFFFFFFFFFFFUL;
    uint s = (uint)(u >> 48) & 0x8000u;
    if (a > 0x7FF0000000000000UL) {
        uint p = (uint)((a & 0xFFFFFFFFFFFFFUL) >> 42);
        return (ushort)(s | 0x7C00u | (p ? p : 1u));
    }
    if (a >= 0x40EFFE0000000000UL) return (ushort)(s | 0x7C00u);
    ulong r, rest, tie;
    if (a >= 0x3F10000000000000UL) {
        r = (a - 0x3F00000000000000UL) >> 42; rest = a & 0x3FFFFFFFFFFUL; tie = 0x20000000000UL;
    }
    else {
        int shift = 1051 - (int)(a >> 52);
        if (shift > 53) return (ushort)s;
        ulong m = (a & 0xFFFFFFFFFFFFFUL) | 0x10000000000000UL;
        r = m >> shift; rest = m & ((1UL << shift) - 1UL); tie = 1UL << (shift - 1);
    }
    return (ushort)(s | (uint)(r + (rest > tie || (rest == tie && (r & 1UL)))));
}
float sk_bf16_to_f32(ushort h) { return as_float((uint)h << 16); }
/* f32 -> bf16, nearest even; a NaN gives the quiet NaN of its sign. */
ushort sk_f32_to_bf16(float f) {
    uint u = as_uint(f);
    if (isnan(f)) return (ushort)(((u >> 16) & 0x8000u) | 0x7FC0u);
    return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
/* f64 -> bf16 rounds once: to f32 rounding to odd, then to nearest even. */
ushort sk_f64_to_bf16(double d) {
    if (isnan(d)) return (ushort)(((uint)(as_ulong(d) >> 48) & 0x8000u) | 0x7FC0u);
    float r = convert_float_rtz(d);
    if ((double)r != d) r = as_float(as_uint(r) | 1u);
    return sk_f32_to_bf16(r);
}
"""

MATH = cstyle.math_calls({(fn, t): name for fn, name in cstyle.C_MATH_NAMES.items()
                          for t in (ElemType.F32, ElemType.F64)})  # OpenCL C overloads them
CASTS = cstyle.conversion_casts([(ElemType.F16, ElemType.F32), (ElemType.F16, ElemType.F64),
                                 (ElemType.F32, ElemType.F16), (ElemType.F64, ElemType.F16),
                                 (ElemType.BF16, ElemType.F32), (ElemType.F32, ElemType.BF16),
                                 (ElemType.F64, ElemType.BF16)])


PORTABLE = frozenset({"plain"})
"""What portable OpenCL C prints: its lowering has made fragments lane-explicit scalar code
and staged copies plain copies; inline PTX belongs to opencl-nv."""


def _hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    """Portable OpenCL prints plain statements only (``PORTABLE``)."""
    if (error := refusal(s, PORTABLE, "portable OpenCL C")) is not None:
        raise error
    return None


def _bitcasts() -> dict[tuple[ElemType, ElemType], str]:
    """A float's bits read as an integer of its width and back, through OpenCL C's
    ``as_T``."""
    E = ElemType
    pairs = [(E.F32, E.U32), (E.F32, E.I32), (E.F64, E.U64), (E.F64, E.I64)]
    return {(a, b): f"as_{TYPES[b]}({{x}})" for f, i in pairs for a, b in ((f, i), (i, f))}


DIALECT = Dialect(
    name="opencl",
    types=TYPES,
    builtins=BUILTINS,
    kernel_prefix="__kernel void",
    global_pointer="__global {const}{t}*",
    shared_decl="__local {t} {name}[{size}] __attribute__((aligned({align})));",
    barrier="barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);",
    prelude=_CONVERSIONS + helpers("", TYPES, clz=("clz", "clz")) + "\n",
    math=MATH,
    casts=CASTS,
    bitcasts=_bitcasts(),
    stmt_hook=_hook,
    memory_types={ElemType.BOOL: "uchar"},
    long_suffixes=("L", "UL"),
    pointer_spaces={ir.MemSpace.GLOBAL: "__global", ir.MemSpace.SHARED: "__local",
                    ir.MemSpace.LOCAL: "__private"},
)

BUILD_OPTIONS = ("-cl-fp32-correctly-rounded-divide-sqrt",)


def dialect_for(kernel: ir.Kernel, base: Dialect) -> Dialect:
    """``base`` with the kernel's subgroup size defined for the lowered code."""
    subgroup = kernel.subgroup or 32
    return dataclasses.replace(base, prelude=f"#define SK_SUBGROUP {subgroup}\n" + base.prelude)


def print_kernel(kernel: ir.Kernel) -> str:
    """A kernel without fragments (original, or lowered by ``backends.opencl.lower``) as
    portable OpenCL C (build it with ``BUILD_OPTIONS``)."""
    return render(kernel, dialect_for(kernel, DIALECT))


def emit(kernel: ir.Kernel) -> str:
    """The kernel, original or rewritten, validated, lowered for portable OpenCL and printed
    as OpenCL C 1.2 that needs no extension beyond double precision."""
    ir_check.ensure_valid(kernel)
    return print_kernel(lower(kernel))
