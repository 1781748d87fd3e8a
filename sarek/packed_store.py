"""Packed stores as element stores, for targets that write one element at a time.

A ``StorePacked`` of an ``n``-element value is, element by element, the stores of its ``n``
parts, least significant first (``specs/ir.md``). C-like targets print it as one store through
a wider pointer; SPIR-V's logical addressing has no such pointer, so its lowering writes the
parts (``elements``).
"""

from __future__ import annotations

from collections.abc import Sequence

from sarek import ir
from sarek.ir import BinOp, ElemType
from sarek.ir_build import add, binary, const
from sarek.ir_walk import replace_statements, walk

UNSIGNED = {8: ElemType.U8, 16: ElemType.U16, 32: ElemType.U32, 64: ElemType.U64}
"""The unsigned integer type of each width."""


def word(parts: Sequence[ir.Expr], bits: int) -> ir.Expr:
    """``parts`` (unsigned, of the word's type, each below ``2^bits``) as one word, the first
    in the least significant ``bits``: what a ``StorePacked`` of them stores (``parts`` below
    takes it apart)."""
    out = parts[0]
    for i, part in enumerate(parts[1:], 1):
        out = binary(BinOp.OR, out, binary(BinOp.SHL, part, const(i * bits, part.type)))
    return out


def parts(s: ir.StorePacked, elem: ElemType) -> list[ir.Store]:
    """The element stores of ``s`` into an array of ``elem``: part ``i`` is
    ``(value >> i * bits) & mask`` converted to ``elem`` (an integer) or read as its bits (a
    float), stored at ``index + i``."""
    t = s.value.type
    count = t.bits // elem.bits
    mask = const((1 << elem.bits) - 1, t)
    out = []
    for i in range(count):
        shifted = binary(BinOp.SHR, s.value, const(i * elem.bits, t)) if i else s.value
        low: ir.Expr = binary(BinOp.AND, shifted, mask)
        # a float element takes the part's bits (f16 and bf16 are stored by their bits)
        part = (ir.Bitcast(x=ir.Cast(x=low, type=UNSIGNED[elem.bits]), type=elem)
                if elem.is_float else ir.Cast(x=low, type=elem))
        out.append(ir.Store(array=s.array, index=add(s.index, const(i)) if i else s.index,
                            value=part, line=s.line))
    return out


def elements(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every packed store written as its element stores."""
    elems = {p.name: p.elem for p in kernel.params if isinstance(p, ir.ArrayParam)}
    elems |= {s.name: s.elem for s in walk(kernel.body) if isinstance(s, ir.ArrayDecl)}

    def replace(s: ir.Stmt) -> list[ir.Stmt] | None:
        return [*parts(s, elems[s.array])] if isinstance(s, ir.StorePacked) else None

    if not any(isinstance(s, ir.StorePacked) for s in walk(kernel.body)):
        return kernel
    return kernel.model_copy(update={"body": replace_statements(kernel.body, replace)})

