"""The CUDA C++ printer.

The text needs no header (NVRTC compiles it as it is): f16 and bf16 are held as their 16-bit
patterns and converted with PTX ``cvt`` instructions, f32/f64 arithmetic goes through the
``__f*_rn`` / ``__d*_rn`` intrinsics so that nothing is contracted into an FMA, and tile
patterns become one inline-PTX ``ldmatrix``/``stmatrix`` per repeat of the instruction.
"""

from __future__ import annotations

from backends.c_helpers import helpers
from backends.cstyle import Dialect, Printer, render
from backends.cuda.fragments import FragmentPrinter
from sarek import ir, tile
from sarek.ir import BinOp, Builtin, ElemType, MathFn
from sarek.layout import Axis, TileLayout

TYPES = {
    ElemType.I8: "signed char", ElemType.U8: "unsigned char", ElemType.I16: "short",
    ElemType.U16: "unsigned short", ElemType.I32: "int", ElemType.U32: "unsigned",
    ElemType.I64: "long long", ElemType.U64: "unsigned long long",
    ElemType.F16: "unsigned short", ElemType.BF16: "unsigned short",
    ElemType.F32: "float", ElemType.F64: "double", ElemType.BOOL: "bool",
}

_LINEAR = "((int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)))"
_CUDA_NAMES = {"thread_idx": "threadIdx", "block_idx": "blockIdx", "block_dim": "blockDim",
               "grid_dim": "gridDim"}
BUILTINS = {
    **{b: "((int){}.{})".format(_CUDA_NAMES[b.value.split(".")[0]], b.value[-1])
       for b in Builtin if "." in b.value},
    Builtin.SUBGROUP_ID: f"({_LINEAR} >> 5)",
    Builtin.SUBGROUP_LANE: f"({_LINEAR} & 31)",
    Builtin.SUBGROUP_SIZE: "32",
}

_CONVERSIONS = r"""
__device__ inline float sk_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ inline unsigned short sk_f32_to_f16(float f) { unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
__device__ inline unsigned short sk_f64_to_f16(double d) { unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h; }
__device__ inline float sk_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ inline unsigned short sk_f32_to_bf16(float f) { unsigned short h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
/* f64 -> bf16 rounds once: to f32 rounding to odd (29 spare bits), then to nearest even. */
__device__ inline unsigned short sk_f64_to_bf16(double d) {
    float r = __double2float_rz(d);
    if ((double)r != d && r == r) r = __uint_as_float(__float_as_uint(r) | 1u);
    return sk_f32_to_bf16(r);
}
"""

F32_OPS = {BinOp.ADD: "__fadd_rn({a}, {b})", BinOp.SUB: "__fsub_rn({a}, {b})",
           BinOp.MUL: "__fmul_rn({a}, {b})", BinOp.DIV: "__fdiv_rn({a}, {b})"}
F64_OPS = {BinOp.ADD: "__dadd_rn({a}, {b})", BinOp.SUB: "__dsub_rn({a}, {b})",
           BinOp.MUL: "__dmul_rn({a}, {b})", BinOp.DIV: "__ddiv_rn({a}, {b})"}
_MATH_NAMES = {MathFn.ABS: "fabs", MathFn.MIN: "fmin", MathFn.MAX: "fmax", MathFn.EXP: "exp",
               MathFn.LOG: "log", MathFn.SIN: "sin", MathFn.COS: "cos", MathFn.TANH: "tanh",
               MathFn.FLOOR: "floor", MathFn.CEIL: "ceil"}
MATH = {
    **{(fn, ElemType.F32): f"{name}f({{0}}{', {1}' if fn in (MathFn.MIN, MathFn.MAX) else ''})"
       for fn, name in _MATH_NAMES.items()},
    **{(fn, ElemType.F64): f"{name}({{0}}{', {1}' if fn in (MathFn.MIN, MathFn.MAX) else ''})"
       for fn, name in _MATH_NAMES.items()},
    (MathFn.SQRT, ElemType.F32): "__fsqrt_rn({0})", (MathFn.SQRT, ElemType.F64): "__dsqrt_rn({0})",
    (MathFn.FMA, ElemType.F32): "__fmaf_rn({0}, {1}, {2})",
    (MathFn.FMA, ElemType.F64): "__fma_rn({0}, {1}, {2})",
}
CASTS = {
    (ElemType.F16, ElemType.F32): "sk_f16_to_f32({x})",
    (ElemType.F32, ElemType.F16): "sk_f32_to_f16({x})",
    (ElemType.F64, ElemType.F16): "sk_f64_to_f16({x})",
    (ElemType.BF16, ElemType.F32): "sk_bf16_to_f32({x})",
    (ElemType.F32, ElemType.BF16): "sk_f32_to_bf16({x})",
    (ElemType.F64, ElemType.BF16): "sk_f64_to_bf16({x})",
}


def _hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    """The statements CUDA prints its own way: tile patterns and fragments."""
    if isinstance(s, ir.TileApply):
        return _tile_apply(p, s)
    if isinstance(s, ir.FragDecl | ir.FragFill | ir.FragLoad | ir.FragStore | ir.FragMulAdd):
        return FragmentPrinter(p).stmt(s)
    return None


def _tile_apply(p: Printer, s: ir.TileApply) -> list[str]:
    """One inline-PTX instruction per repeat of a tile pattern (never an x4 the opcode did not
    name, never a copy through a temporary)."""
    op = tile.parse_op(s.op)
    dst, src = (_operand(p, name) for name in (s.dst, s.src))
    regs, rows = (dst, src) if op.kind == "ldmatrix" else (src, dst)
    lines = [f"{{ /* {s.op}: {s.dst} <- {s.src}, "
             f"{len(tile.instructions(regs[1]))} instruction(s) per warp */",
             f"    const int sk_lane = {BUILTINS[Builtin.SUBGROUP_LANE]};",
             f"    const int sk_m = (sk_lane >> 3) % {op.count}, sk_r = sk_lane & 7;"]
    row_strides = rows[1].strides(Axis.MEM)
    for rep in tile.instructions(regs[1]):
        base = rows[2] + sum(c * st for c, st in zip(rep, row_strides, strict=False))
        row = f"{base} + sk_m * {row_strides[-3]} + sk_r * {row_strides[-2]}"
        addr = f"(unsigned)__cvta_generic_to_shared(((unsigned*){rows[0]}) + {row})"
        slots = [int(x) + regs[2] for x in tile.register_slots(regs[1], rep)]
        words = [f"((unsigned*){regs[0]})[{slot}]" for slot in slots]
        vec = ", ".join(f"%{i + (1 if op.kind == 'stmatrix' else 0)}" for i in range(op.count))
        if op.kind == "ldmatrix":
            outs = ", ".join(f'"=r"({w})' for w in words)
            lines.append(f'    asm volatile("{s.op} {{{vec}}}, [%{op.count}];" : {outs} '
                         f': "r"({addr}) : "memory");')
        else:
            ins = ", ".join(f'"r"({w})' for w in words)
            lines.append(f'    asm volatile("{s.op} [%0], {{{vec}}};" :: "r"({addr}), {ins} '
                         ': "memory");')
    return [*lines, "}"]


def _operand(p: Printer, name: str) -> tuple[str, TileLayout, int]:
    """The storage name, layout (in 32-bit words) and word offset of a tile operand."""
    if name in p.views:
        v = p.views[name]
        return v.storage, v.layout, v.offset
    decl = p.arrays[name]
    assert isinstance(decl, ir.ArrayDecl) and decl.layout is not None
    return decl.name, decl.layout, 0


DIALECT = Dialect(
    name="cuda",
    types=TYPES,
    builtins=BUILTINS,
    kernel_prefix='extern "C" __global__ void',
    global_pointer="{const}{t}*",
    shared_decl="__shared__ __align__({align}) {t} {name}[{size}];",
    barrier="__syncthreads();",
    prelude=_CONVERSIONS + helpers("__device__ inline", TYPES) + "\n",
    f32_ops=F32_OPS,
    f64_ops=F64_OPS,
    math=MATH,
    casts=CASTS,
    stmt_hook=_hook,
)


def emit(kernel: ir.Kernel) -> str:
    """The kernel as CUDA C++ (compiles with NVRTC for sm_80 and later, no headers)."""
    return render(kernel, DIALECT)


print_kernel = emit
