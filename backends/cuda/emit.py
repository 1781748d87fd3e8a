"""The CUDA C++ printer.

``emit`` lowers a kernel for CUDA (``backends.cuda.lower``) and prints it; ``print_kernel``
prints a kernel that is already lowered, and only prints. The text needs no header (NVRTC
compiles it as it is): f16 and bf16 are held as their 16-bit patterns and converted with PTX
``cvt`` instructions, f32/f64 arithmetic goes through the ``__f*_rn`` / ``__d*_rn`` intrinsics
so that nothing is contracted into an FMA, and the lowered ``Ldmatrix``, ``Stmatrix`` (a
``LaneTile``'s, one block per tile pattern), ``Mma`` and ``Wgmma`` statements one inline-PTX
instruction each, with the opcode ``sarek.atoms`` gives.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from backends import cstyle
from backends.c_helpers import helpers
from backends.cstyle import Dialect, EmitError, Printer, render
from backends.cuda import emit_bulk, emit_roles, shared, wgmma
from backends.cuda.lower import lower
from sarek import atoms, ir, ir_check
from sarek.ir import BinOp, Builtin, ElemType, MathFn
from sarek.ir_walk import walk

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
    **cstyle.dim3_builtins(lambda vector, axis: f"{_CUDA_NAMES[vector]}.{'xyz'[axis]}"),
    Builtin.SUBGROUP_ID: f"({_LINEAR} >> 5)",
    Builtin.SUBGROUP_LANE: f"({_LINEAR} & 31)",
    Builtin.SUBGROUP_SIZE: "32",
}

_CONVERSIONS = r"""
/* cvt.rn gives every NaN the canonical 0x7FFF; the IR's conversions keep a NaN's sign (and,
   to f16, its payload's upper bits), so a NaN's result is selected apart: from f32 in one
   branch-free asm block (setp.nan + selp), which the kernels that round as they stage run
   faster than the same selection written in C. */
__device__ inline float sk_f16_to_f32(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ inline unsigned short sk_f32_to_f16(float f) {
    unsigned h;
    asm("{ .reg .pred n, z; .reg .b16 t; .reg .b32 q, p;\n"
        " cvt.rn.f16.f32 t, %1; cvt.u32.u16 %0, t; setp.nan.f32 n, %1, %1; mov.b32 q, %1;\n"
        " and.b32 p, q, 0x7FFFFF; shr.b32 p, p, 13; setp.eq.u32 z, p, 0; selp.b32 p, 1, p, z;\n"
        " shr.b32 q, q, 16; and.b32 q, q, 0x8000; or.b32 q, q, 0x7C00; or.b32 q, q, p;\n"
        " selp.b32 %0, q, %0, n; }" : "=r"(h) : "f"(f));
    return (unsigned short)h;
}
__device__ inline unsigned short sk_f64_to_f16(double d) {
    unsigned long long u = __double_as_longlong(d), a = u & 0x7FFFFFFFFFFFFFFFull;
    unsigned p = (unsigned)((a & 0xFFFFFFFFFFFFFull) >> 42);
    unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
    return a > 0x7FF0000000000000ull ? (unsigned short)(((unsigned)(u >> 48) & 0x8000u) | 0x7C00u | (p ? p : 1u)) : h;
}
__device__ inline float sk_bf16_to_f32(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
__device__ inline unsigned short sk_f32_to_bf16(float f) {
    unsigned h;
    asm("{ .reg .pred n; .reg .b16 t; .reg .b32 q;\n"
        " cvt.rn.bf16.f32 t, %1; cvt.u32.u16 %0, t; setp.nan.f32 n, %1, %1; mov.b32 q, %1;\n"
        " shr.b32 q, q, 16; and.b32 q, q, 0x8000; or.b32 q, q, 0x7FC0;\n"
        " selp.b32 %0, q, %0, n; }" : "=r"(h) : "f"(f));
    return (unsigned short)h;
}
/* f64 -> bf16 rounds once: to f32 rounding to odd (29 spare bits), then to nearest even. */
__device__ inline unsigned short sk_f64_to_bf16(double d) {
    if (d != d) return (unsigned short)(((unsigned)(__double_as_longlong(d) >> 48) & 0x8000u) | 0x7FC0u);
    float r = __double2float_rz(d);
    if ((double)r != d) r = __uint_as_float(__float_as_uint(r) | 1u);
    return sk_f32_to_bf16(r);
}
"""

F32_OPS = {BinOp.ADD: "__fadd_rn({a}, {b})", BinOp.SUB: "__fsub_rn({a}, {b})",
           BinOp.MUL: "__fmul_rn({a}, {b})", BinOp.DIV: "__fdiv_rn({a}, {b})"}
F64_OPS = {BinOp.ADD: "__dadd_rn({a}, {b})", BinOp.SUB: "__dsub_rn({a}, {b})",
           BinOp.MUL: "__dmul_rn({a}, {b})", BinOp.DIV: "__ddiv_rn({a}, {b})"}
# Correctly rounded sqrt and fma are intrinsics; the others are the C names, "f" for f32.
MATH = cstyle.math_calls({
    **{(fn, t): name + ("f" if t is ElemType.F32 else "")
       for fn, name in cstyle.C_MATH_NAMES.items() if fn not in (MathFn.SQRT, MathFn.FMA)
       for t in (ElemType.F32, ElemType.F64)},
    (MathFn.SQRT, ElemType.F32): "__fsqrt_rn", (MathFn.SQRT, ElemType.F64): "__dsqrt_rn",
    (MathFn.FMA, ElemType.F32): "__fmaf_rn", (MathFn.FMA, ElemType.F64): "__fma_rn",
})
CASTS = cstyle.conversion_casts([(ElemType.F16, ElemType.F32), (ElemType.F32, ElemType.F16),
                                 (ElemType.F64, ElemType.F16), (ElemType.BF16, ElemType.F32),
                                 (ElemType.F32, ElemType.BF16), (ElemType.F64, ElemType.BF16)])


def _hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    """The statements CUDA prints its own way: the lane-explicit instructions; neutral
    fragments and tile patterns must have been lowered."""
    match s:
        case ir.LaneTile():
            return _lane_tile(s)
        case ir.Ldmatrix():
            return [_ldmatrix(p, s)]
        case ir.Mma():
            return [mma_asm(s)]
        case ir.CpAsync():
            address = f"(unsigned)__cvta_generic_to_shared(&{s.dst}[{p.expr(s.dst_index)}])"
            return [cp_async_asm(address, f"&{s.src}[{p.expr(s.src_index)}]")]
        case ir.StageCommit() | ir.StageWait():
            return [group_asm(s)]
        case ir.Wgmma():
            return _wgmma(p, s)
        case ir.WgmmaWait(pending=pending):
            return ['asm volatile("wgmma.commit_group.sync.aligned;\\n"'
                    f' "wgmma.wait_group.sync.aligned {pending};" ::: "memory");']
        case ir.AsyncProxyFence():
            return ['asm volatile("fence.proxy.async.shared::cta;" ::: "memory");']
        case ir.MbarrierInit() | ir.MbarrierArrive() | ir.MbarrierWait() | ir.BulkTensorCopy():
            return emit_bulk.bulk(p, s)
        case ir.WarpRoles() | ir.SetMaxNReg() | ir.NamedBarrier():
            return emit_roles.roles(p, s)
        case ir.TileApply():
            raise EmitError("tile_apply is a tile pattern: lower the kernel for CUDA first "
                            "(backends.cuda.lower, or emit, which does)")
        case ir.StageCopy():
            raise EmitError("stage_copy is a neutral statement: lower the kernel for CUDA "
                            "first (backends.cuda.lower, or emit, which does)")
        case ir.FragDecl() | ir.FragFill() | ir.FragLoad() | ir.FragStore() | ir.FragMulAdd() \
                | ir.FragAdd():
            raise EmitError(f"{s.kind} is a neutral fragment statement: lower the kernel for "
                            "CUDA first (backends.cuda.lower, or emit, which does)")
    return None


def _descriptor_helper(f: atoms.DescriptorFormat) -> str:
    """``sk_wgmma_desc``: the descriptor of a shared address, encoded as ``f`` lays it out
    (each field in units of ``f.unit`` bytes; the address's field starts at bit 0)."""
    shift = f.unit.bit_length() - 1
    mask = (1 << (f.field_bits + shift)) - 1
    return rf"""
/* A wgmma matrix descriptor: start, leading and stride byte offsets, swizzle mode. */
__device__ inline unsigned long long sk_wgmma_desc(const void* p, unsigned lbo, unsigned sbo,
                                                   unsigned long long mode) {{
    unsigned long long a = (unsigned)__cvta_generic_to_shared(p);
    return ((a & 0x{mask:X}) >> {shift}) | ((unsigned long long)(lbo >> {shift}) << {f.leading})
           | ((unsigned long long)(sbo >> {shift}) << {f.stride}) | (mode << {f.mode});
}}
"""


WGMMA_DESCRIPTOR = _descriptor_helper(atoms.DESCRIPTOR)


def _descriptor(p: Printer, array: str, index: ir.Expr, d: ir.MatrixDescriptor | None
                ) -> str:
    assert d is not None  # CUDA's lowering records every descriptor it needs
    return (f"sk_wgmma_desc(&{array}[{p.expr(index)}], {d.leading_bytes}u, {d.stride_bytes}u, "
            f"{d.mode}ull)")


def _wgmma(p: Printer, s: ir.Wgmma) -> list[str]:
    """A ``wgmma.fence`` (where ``fenced``) and one ``wgmma.mma_async``: A from this lane's
    four registers or through its descriptor, B through its descriptor (the strides and modes
    the lowering recorded)."""
    values = atoms.WGMMA.c(s.n).values  # accumulator elements of each thread
    integer = s.elem.bits == 8  # s32 accumulators; no scales nor transposes to give
    d = ", ".join(f"%{j}" for j in range(values))
    outs = ", ".join(f'"+{"r" if integer else "f"}"({s.d}[{j}])' for j in range(values))
    b_desc = _descriptor(p, s.b, s.b_index, s.b_descriptor)
    if s.a_index is None:
        words = atoms.WGMMA.a_layout(s.elem).values * s.elem.bits // 32  # A's registers
        a = "{" + ", ".join(f"%{values + j}" for j in range(words)) + "}"
        ins = ", ".join(f'"r"({s.a}[{j}])' for j in range(words))
        b = f"%{values + words}"
        scales = "p" if integer else "p, 1, 1, 1"  # scale-d, scale-a, scale-b, transpose-b
    else:
        a_desc = _descriptor(p, s.a, s.a_index, s.a_descriptor)
        a, b = f"%{values}", f"%{values + 1}"
        ins = f'"l"({a_desc})'
        scales = "p" if integer else "p, 1, 1, 0, 1"  # scale-d, -a, -b, transpose-a, -b
    op = atoms.WGMMA.ptx(s.n, s.elem)
    fence = ['asm volatile("wgmma.fence.sync.aligned;" ::: "memory");'] if s.fenced else []
    return [*fence,
            f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n{op} {{{d}}}, '
            f'{a}, {b}, {scales};\\n}}" : {outs} : {ins}, "l"({b_desc}) '
            ': "memory");']


def _ldmatrix(p: Printer, s: ir.Ldmatrix) -> str:
    """One ldmatrix; this lane gives the shared address of its row."""
    assert s.address is not None  # ir_check: rows by lane only inside a lane tile
    address = f"(unsigned)__cvta_generic_to_shared(&{s.src}[{p.expr(s.address)}])"
    return ldmatrix_asm(s, address)


def ldmatrix_asm(s: ir.Ldmatrix, address: str) -> str:
    """One ldmatrix as an inline-PTX statement, ``address`` being the C expression of this
    lane's 32-bit shared-window address (the one part CUDA and OpenCL C spell differently)."""
    trans = ".trans" if s.trans else ""
    op = f"ldmatrix.sync.aligned.m8n8.x{s.count}{trans}.shared.b16"
    regs = ", ".join(f"%{j}" for j in range(s.count))
    outs = ", ".join(f'"=r"({s.dst}[{s.offset + j}])' for j in range(s.count))
    return f'asm volatile("{op} {{{regs}}}, [%{s.count}];" : {outs} : "r"({address}) : "memory");'


def cp_async_asm(shared_address: str, source: str) -> str:
    """One 16-byte ``cp.async`` from the global element ``source`` (a C pointer expression)
    to ``shared_address`` (this lane's 32-bit shared-window address)."""
    return (f'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: '
            f'"r"({shared_address}), "l"({source}) : "memory");')


def group_asm(s: ir.StageCommit | ir.StageWait) -> str:
    """``cp.async.commit_group`` or ``cp.async.wait_group``."""
    if isinstance(s, ir.StageCommit):
        return 'asm volatile("cp.async.commit_group;" ::: "memory");'
    return f'asm volatile("cp.async.wait_group {s.pending};" ::: "memory");'


def mma_asm(s: ir.Mma) -> str:
    """One mma.sync, not volatile: a pure function of its registers, which the compiler may
    schedule."""
    facts = atoms.MMA[s.atom]
    acc = "f" if facts.accumulator is ElemType.F32 else "r"
    c_values = facts.c.values
    operands = ((s.d, s.d_offset, c_values, f'"={acc}"'), (s.a, s.a_offset,
                facts.registers("a"), '"r"'), (s.b, s.b_offset, facts.registers("b"), '"r"'),
                (s.c, s.c_offset, c_values, f'"{acc}"'))
    groups: list[str] = []
    outs: list[str] = []
    ins: list[str] = []
    n = 0
    for k, (name, first, count, constraint) in enumerate(operands):
        groups.append("{" + ", ".join(f"%{n + i}" for i in range(count)) + "}")
        n += count
        refs = [f"{constraint}({name}[{first + i}])" for i in range(count)]
        (outs if k == 0 else ins).extend(refs)
    return f'asm("{facts.ptx} {", ".join(groups)};" : {", ".join(outs)} : {", ".join(ins)});'


def _lane_tile(s: ir.LaneTile) -> list[str]:
    """A tile pattern's instructions in one block: each lane's provider coordinates, then one
    inline-PTX instruction per move, registers in place (``((unsigned*)name)[slot]``) and the
    row address as the words ``rows`` maps."""
    op = s.op
    lines = [f"{{ /* {op.opcode}: {s.dst} <- {s.src}, {len(s.moves)} instruction(s) per warp */",
             f"    const int sk_lane = {BUILTINS[Builtin.SUBGROUP_LANE]};",
             f"    const int sk_m = (sk_lane / {s.rows}) % {op.count}, "
             f"sk_r = sk_lane % {s.rows};"]
    for move in s.moves:
        rows, slots = move.rows, move.slots
        assert rows is not None and slots is not None  # ir_check: a lane tile's moves have both
        shared, registers = (move.src, move.dst) if isinstance(move, ir.Ldmatrix) else (
            move.dst, move.src)
        row = f"{rows.start} + sk_m * {rows.matrix_stride} + sk_r * {rows.row_stride}"
        addr = f"(unsigned)__cvta_generic_to_shared(((unsigned*){shared}) + {row})"
        words = [f"((unsigned*){registers})[{slot}]" for slot in slots]
        if isinstance(move, ir.Ldmatrix):
            vec = ", ".join(f"%{i}" for i in range(op.count))
            outs = ", ".join(f'"=r"({w})' for w in words)
            lines.append(f'    asm volatile("{op.opcode} {{{vec}}}, [%{op.count}];" : {outs} '
                         f': "r"({addr}) : "memory");')
        else:
            vec = ", ".join(f"%{i + 1}" for i in range(op.count))
            ins = ", ".join(f'"r"({w})' for w in words)
            lines.append(f'    asm volatile("{op.opcode} [%0], {{{vec}}};" :: "r"({addr}), {ins} '
                         ': "memory");')
    return [*lines, "}"]


DIALECT = Dialect(
    name="cuda",
    types=TYPES,
    builtins=BUILTINS,
    kernel_prefix='extern "C" __global__ void',
    global_pointer="{const}{t}*",
    shared_decl="__shared__ __align__({align}) {t} {name}[{size}];",
    barrier="__syncthreads();",
    prelude=_CONVERSIONS + WGMMA_DESCRIPTOR
    + helpers("__device__ inline", TYPES, clz=("__clz", "__clzll")) + "\n",
    f32_ops=F32_OPS,
    f64_ops=F64_OPS,
    math=MATH,
    casts=CASTS,
    bitcasts={(ElemType.F32, ElemType.U32): "__float_as_uint({x})",
              (ElemType.F32, ElemType.I32): "__float_as_int({x})",
              (ElemType.U32, ElemType.F32): "__uint_as_float({x})",
              (ElemType.I32, ElemType.F32): "__int_as_float({x})",
              (ElemType.F64, ElemType.I64): "__double_as_longlong({x})",
              (ElemType.I64, ElemType.F64): "__longlong_as_double({x})"},
    stmt_hook=_hook,
    unroll_pragma="#pragma unroll",
    keep_pragma="#pragma unroll 1",
)


def print_kernel(kernel: ir.Kernel) -> str:
    """A kernel lowered for CUDA as CUDA C++; shared arrays the lowering placed in the dynamic
    allocation (``dynamic_offset``, ``backends.cuda.shared.place``) are pointers into it, and
    the tensor maps of its bulk copies follow its parameters (``backends.cuda.emit_bulk``)."""
    maps = emit_bulk.parameters(kernel)
    accumulators = {s.d for s in walk(kernel.body) if isinstance(s, ir.Wgmma)}
    text = _print(kernel, accumulators)
    if accumulators:  # a kernel with wgmma; at the entry every warp is converged
        head = f"{DIALECT.kernel_prefix} {kernel.name}("
        at = text.index(" {\n", text.index(head)) + len(" {\n")
        text = text[:at] + f"    {UNIFORM_SUBGROUP}\n" + text[at:]
    bounds = emit_roles.launch_bounds(kernel)
    if bounds:
        text = text.replace(f"{DIALECT.kernel_prefix} {kernel.name}(",
                            f"{DIALECT.kernel_prefix} {bounds}{kernel.name}(", 1)
    if not maps:
        return text
    head = f"{DIALECT.kernel_prefix} {bounds}{kernel.name}("
    at = text.index(head) + len(head)
    end = text.index(") {", at)
    return (text[:text.index(head)] + emit_bulk.TENSOR_MAP_TYPE + "\n" + text[
        text.index(head):end] + ", " + ", ".join(maps) + text[end:])


class _Settling:
    """The register arrays of the ``wgmma`` groups a wait completes.

    A ``wgmma.mma_async`` is an asm statement whose accumulators (and A, from registers) are
    in-out operands, and a wait is an asm statement that names none of them: nothing stops
    the C++ compiler from moving an access to those registers (the epilogue's first reads,
    the loop's exit copies, the add of a strip's sums) above the wait that completes them,
    and ptxas then serializes every ``wgmma`` of the kernel (warning C7514). So after each
    wait the printer names each array of the groups it completes (every group but the
    ``pending`` newest, the open one committed first; none that a group still in flight
    holds) as an in-out operand of an empty asm statement: every later access stays after
    the wait, and no instruction is added."""

    def __init__(self) -> None:
        self.open: dict[str, None] = {}
        self.groups: list[dict[str, None]] = []  # committed, maybe in flight, oldest first

    def issued(self, s: ir.Wgmma) -> None:
        self.open.update(dict.fromkeys((s.d,) if s.a_index is not None else (s.d, s.a)))

    def settled(self, p: Printer, pending: int) -> list[str]:
        """Pins of every array of the groups a wait for all but ``pending`` completes."""
        done, self.groups = wgmma.retire(self.groups, self.open, pending)
        self.open = {}
        flying = {name for g in self.groups for name in g}
        lines = []
        for name in dict.fromkeys(name for g in done for name in g if name not in flying):
            decl = p.arrays[name]
            assert isinstance(decl, ir.ArrayDecl)  # a wgmma's registers are declared arrays
            letter = "f" if decl.elem is ElemType.F32 else "r"
            operands = ", ".join(f'"+{letter}"({name}[{j}])' for j in range(decl.size))
            lines.append(f'asm volatile("" : {operands});')
        return lines


UNIFORM_SUBGROUP = f"const int sk_subgroup = __shfl_sync(0xffffffffu, {_LINEAR} >> 5, 0);"
"""The subgroup index of a kernel that issues ``wgmma`` (blocks of whole warpgroups), read once
at its entry: lane 0's, which is every lane's, so that the compiler knows it is the same across
the warp and keeps what derives from it (the descriptors of A's rows) in uniform registers,
where computing each descriptor in each lane and moving it into a uniform register before
its ``wgmma`` delayed the issue of each ``wgmma``."""


def _constant_fill(p: Printer, s: ir.Store) -> str:
    """A store of a constant into a ``wgmma`` accumulator as an asm ``mov`` of its bits.

    Printed as a C assignment, the fills of Bf16x3's fresh strips (-0.0 before each
    sub-step's products) let the compiler keep one register of the constant and copy it:
    under ``t128x128k64s2gwr`` ptxas then spilled in the reduction loop (34 local loads and
    33 local stores a step, against 12 loads), and the kernel ran at 0.85x the asm fills on
    the H200 (``bench/results/bf16x3_fill_h200.json``)."""
    assert isinstance(s.value, ir.Const)
    value, f32 = s.value.value, s.value.type is ElemType.F32
    bits = int(np.float32(value).view(np.uint32)) if f32 else int(value) & 0xFFFFFFFF
    letter = "f" if f32 else "r"
    return (f'asm volatile("mov.b32 %0, 0x{bits:08x};" : "={letter}"'
            f'({s.array}[{p.expr(s.index)}]));')


def _print(kernel: ir.Kernel, accumulators: set[str]) -> str:
    """``kernel`` printed; ``accumulators``: the arrays its ``wgmma`` accumulate into (none:
    no ``wgmma``, and the subgroup index computed where it is used)."""
    settling = _Settling()

    def hook(p: Printer, s: ir.Stmt) -> list[str] | None:
        match s:
            case ir.Wgmma():
                settling.issued(s)
            case ir.Store(array=name, value=ir.Const()) if name in accumulators:
                return [_constant_fill(p, s)]
            case ir.WgmmaWait(pending=pending):
                return [*(_hook(p, s) or ()), *settling.settled(p, pending)]
        if not isinstance(s, ir.ArrayDecl):
            return _hook(p, s)
        host = p.arrays.get(s.shares) if s.shares is not None else None
        offset = host.dynamic_offset if isinstance(host, ir.ArrayDecl) else s.dynamic_offset
        if offset is None:
            return _hook(p, s)
        p.arrays[s.name] = s
        t = p.mem_t(s.elem)
        first = [f"extern __shared__ __align__(16) unsigned char {shared.DYNAMIC}[];"]
        return [*(first if offset == 0 and host is None else []),
                f"{t}* const {s.name} = ({t}*)({shared.DYNAMIC} + {offset});"]

    builtins = {**BUILTINS, Builtin.SUBGROUP_ID: "sk_subgroup"} if accumulators else BUILTINS
    return render(kernel, dataclasses.replace(DIALECT, stmt_hook=hook, builtins=builtins))


def emit(kernel: ir.Kernel) -> str:
    """The kernel, original or rewritten, lowered for CUDA and printed as CUDA C++ (compiles
    with NVRTC for sm_80 and later, no headers)."""
    ir_check.ensure_valid(kernel)
    return print_kernel(lower(kernel))
