"""The opencl-nv printer: OpenCL C for NVIDIA's OpenCL with the CUDA lowering's lane-explicit
instructions as inline PTX.

It prints a kernel lowered by ``backends.cuda.lower`` and decides nothing: its ``Ldmatrix``,
``Mma``, ``CpAsync`` and staging groups are printed with the CUDA printer's own text builders
(``backends.cuda.emit``; opcodes from ``sarek.atoms``), with the shared-window address of a
``__local`` element spelled for NVIDIA's OpenCL. Everything else is portable OpenCL C
(``backends.opencl.emit``'s dialect, with its semantics), with two differences in how it is
spelled, none in what it computes: a loop of constant bounds is unrolled as CUDA's printer
unrolls it (``#pragma unroll``), and f32 is rounded to f16 and bf16 by PTX ``cvt.rn`` except for
a NaN, whose payload the portable helper's integer code keeps (``HARDWARE_ROUNDING``).
"""

from __future__ import annotations

import dataclasses

from backends.cstyle import EmitError, Printer, render
from backends.families import refusal
from backends.opencl.emit import DIALECT, dialect_for
from sarek import ir, ir_check
from sarek.ir import Builtin

NV = frozenset({"plain", "staging", "warp"})
"""What opencl-nv prints: CUDA's lowering of ``mma.sync`` schedules, as inline PTX (not its
tile patterns written out lane by lane, ``LaneTile``, which only CUDA prints)."""


def shared_address(p: Printer, array: str, index: ir.Expr) -> str:
    """The 32-bit shared-window address of element ``index`` of the ``__local`` array
    ``array`` on NVIDIA's OpenCL, where ``__local`` is PTX shared memory: a ``__local``
    pointer is already an offset into the shared window (no ``cvta``), so its integer value is
    the address ``ldmatrix .shared`` takes."""
    return f"(uint)(ulong)(&{array}[{p.expr(index)}])"


def _nv_hook(p: Printer, s: ir.Stmt) -> list[str] | None:
    """opencl-nv prints the CUDA lowering's lane-explicit instructions as inline PTX, with
    the CUDA printer's own text builders (imported here: the portable path needs no CUDA)."""
    from backends.cuda.emit import cp_async_asm, group_asm, ldmatrix_asm, mma_asm

    match s:
        case ir.Ldmatrix(address=address) if address is not None:
            return [ldmatrix_asm(s, shared_address(p, s.src, address))]
        case ir.Mma():
            return [mma_asm(s)]
        case ir.CpAsync():
            return [cp_async_asm(shared_address(p, s.dst, s.dst_index),
                                 f"&{s.src}[{p.expr(s.src_index)}]")]
        case ir.StageCommit() | ir.StageWait():
            return [group_asm(s)]
        case ir.LaneTile():
            raise EmitError("opencl-nv does not print lane_tile statements (tile patterns are "
                            "printed for CUDA)")
        case _ if (error := refusal(s, NV, "opencl-nv")) is not None:
            raise error
    return None


_CVT = ('uint h; asm("{{ .reg .b16 t; cvt.rn.{to}.f32 t, %1; cvt.u32.u16 %0, t; }}" '
        ': "=r"(h) : "f"(f));')
_BF16 = ('uint h; asm("{ .reg .pred n; .reg .b16 t; .reg .b32 q; cvt.rn.bf16.f32 t, %1; '
         'cvt.u32.u16 %0, t; setp.nan.f32 n, %1, %1; mov.b32 q, %1; shr.b32 q, q, 16; '
         'and.b32 q, q, 32768; or.b32 q, q, 32704; selp.b32 %0, q, %0, n; }" : "=r"(h) : "f"(f));')
HARDWARE_ROUNDING = {
    "sk_f32_to_f16": f"""ushort sk_f32_to_f16(float f) {{
    uint u = as_uint(f), a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) {{
        uint p = (a & 0x7FFFFFu) >> 13;
        return (ushort)(((u >> 16) & 0x8000u) | 0x7C00u | (p ? p : 1u));
    }}
    {_CVT.format(to="f16")}
    return (ushort)h;
}}""",
    "sk_f32_to_bf16": f"""ushort sk_f32_to_bf16(float f) {{
    {_BF16}
    return (ushort)h;
}}""",
}
"""The f32 roundings opencl-nv defines its own way: PTX ``cvt.rn`` (round to nearest even, one
instruction where the portable code takes about fifteen; CUDA's
printer rounds with the same instructions) for every value but a NaN, which keeps the portable
helper's payload. The results are the portable helpers' bit for bit. bf16 is one branch-free
``asm``, its NaN case a ``selp``: NVIDIA's OpenCL compiler kept the C helper's NaN test as a
branch per rounding (96 a k step in Bf16x3's staging), and for Bf16 ``ptxas`` then converted
with ``F2F.BF16.F32`` where this text gets ``F2FP.BF16.F32.PACK_AB``, as CUDA's does (Bf16x3
``t128k16`` at 4096^3 on the H200: 0.797x CUDA printed with the branch, 0.838x so)."""


def _hardware_rounding(prelude: str) -> str:
    """``prelude`` with each helper ``HARDWARE_ROUNDING`` names defined as it says."""
    for name, text in HARDWARE_ROUNDING.items():
        start = prelude.index(f"ushort {name}(")
        end = prelude.index("\n}\n", start) + 2
        prelude = prelude[:start] + text + prelude[end:]
    return prelude


LOCAL_IDS = {b: f"((int)(get_local_id({axis}) & 1023u))" for axis, b in
             enumerate((Builtin.THREAD_IDX_X, Builtin.THREAD_IDX_Y, Builtin.THREAD_IDX_Z))}
"""A work-item's local id as opencl-nv prints it: below 1024 on every NVIDIA device (the most
work-items a work-group has there), so the mask changes no value; it tells NVIDIA's OpenCL
compiler the id is not negative, which CUDA's ``threadIdx`` does not need to say, so that a
staged copy's ``(q*128 + tid) / 16`` and ``% 16`` become shifts and masks, not signed
divisions with their corrections, each held in a register across the k loop."""

NV_DIALECT = dataclasses.replace(DIALECT, name="opencl-nv", stmt_hook=_nv_hook,
                                 builtins={**DIALECT.builtins, **LOCAL_IDS},
                                 unroll_pragma="#pragma unroll",
                                 prelude=_hardware_rounding(DIALECT.prelude))


def print_nv(kernel: ir.Kernel) -> str:
    """A kernel lowered for CUDA (``backends.cuda.lower``) as OpenCL C for NVIDIA's OpenCL,
    its ldmatrix and mma.sync as inline PTX."""
    return render(kernel, dialect_for(kernel, NV_DIALECT))


def emit_nv(kernel: ir.Kernel) -> str:
    """The kernel, original or rewritten, validated, lowered as for CUDA (tensor cores,
    subgroup 32, fragment 16) and printed as OpenCL C with inline PTX for NVIDIA's OpenCL."""
    from backends.cuda.lower import lower as cuda_lower

    ir_check.ensure_valid(kernel)
    return print_nv(cuda_lower(kernel))
