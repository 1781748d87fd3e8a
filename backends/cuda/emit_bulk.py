"""The CUDA printer's rules for bulk tensor copies and mbarriers (``ir.BulkStmt``): one
inline-PTX instruction each, the tensor maps ``__grid_constant__`` parameters after the
kernel's own (``backends.cuda.tma.maps``, in that order)."""

from __future__ import annotations

from backends.cstyle import Printer
from backends.cuda import tma
from sarek import ir

TENSOR_MAP = "sk_tensor_map"
TENSOR_MAP_TYPE = f"struct __align__(64) {TENSOR_MAP} {{ unsigned long long bits[16]; }};"
"""CUtensorMap's 128 opaque, 64-byte aligned bytes (the printed text includes no header)."""


def map_name(index: int) -> str:
    return f"sk_map{index}"


def parameters(kernel: ir.Kernel) -> list[str]:
    """The tensor-map parameters ``kernel`` takes after its own (none without bulk copies)."""
    return [f"const __grid_constant__ {TENSOR_MAP} {map_name(i)}"
            for i in range(len(tma.maps(kernel)))]


def _shared(p: Printer, array: str, index: ir.Expr) -> str:
    return f"(unsigned)__cvta_generic_to_shared(&{array}[{p.expr(index)}])"


def bulk(p: Printer, s: ir.BulkStmt) -> list[str]:
    """One statement of the ``bulk`` family as CUDA."""
    bar = _shared(p, s.barriers, s.index)
    match s:
        case ir.MbarrierInit(arrivals=arrivals):
            return [f'asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"({bar}), '
                    f'"r"({arrivals}) : "memory");']
        case ir.MbarrierArrive(tx_bytes=tx):
            return ['asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: '
                    f'"r"({bar}), "r"({p.expr(tx)}) : "memory");']
        case ir.MbarrierWait(parity=parity):
            return ["{ unsigned sk_done = 0; do { asm volatile(\"{\\n.reg .pred p;\\n"
                    "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\\n"
                    "selp.u32 %0, 1, 0, p;\\n}\" : \"=r\"(sk_done) : "
                    f"\"r\"({bar}), \"r\"({p.expr(parity)}) : \"memory\"); }} "
                    "while (!sk_done); }"]
        case ir.BulkTensorCopy():
            elems = {q.name: q.elem for q in p.kernel.params if isinstance(q, ir.ArrayParam)}
            index = tma.maps(p.kernel).index(tma.of(s, elems[s.src]))
            dst = _shared(p, s.dst, s.dst_offset)
            return ['asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.'
                    'mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" :: '
                    f'"r"({dst}), "l"(&{map_name(index)}), "r"({p.expr(s.col)}), '
                    f'"r"({p.expr(s.row)}), "r"({bar}) : "memory");']
