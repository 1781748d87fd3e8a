"""The factors of the k-loop's product: each must be an array element, possibly widened exactly
by casts (or widened and rounded back to its own type) and zeroed by conditions
(``a[i] if i < k else 0``)."""

from __future__ import annotations

from dataclasses import dataclass

from sarek import ir
from sarek.ir import BinOp, ElemType
from sarek.ir_build import logical_not
from sarek.ir_format import format_expr
from sarek.matrix_pattern.vocabulary import Refusal


@dataclass
class Operand:
    """One factor of the product: a load, widened by casts, possibly zeroed by conditions."""

    load: ir.Load
    conds: list[ir.Expr]
    type: ElemType


_EXACT_WIDENINGS = {
    (ElemType.F16, ElemType.F32), (ElemType.BF16, ElemType.F32), (ElemType.F16, ElemType.F64),
    (ElemType.BF16, ElemType.F64), (ElemType.F32, ElemType.F64), (ElemType.I32, ElemType.I64),
    (ElemType.I8, ElemType.I32), (ElemType.U8, ElemType.I32), (ElemType.I16, ElemType.I32),
    (ElemType.U16, ElemType.I32), (ElemType.I8, ElemType.I64), (ElemType.U8, ElemType.I64),
    (ElemType.I16, ElemType.I64), (ElemType.U16, ElemType.I64), (ElemType.U32, ElemType.I64),
}
"""The (from, to) conversions that keep every value: a cast between them may widen a factor."""


def _is_zero_value(e: ir.Expr) -> bool:
    """Whether ``e`` is a numeric literal zero, possibly cast."""
    while isinstance(e, ir.Cast):
        e = e.x
    return isinstance(e, ir.Const) and not isinstance(e.value, bool) and e.value == 0


def operand_of(e: ir.Expr, arrays: dict[str, ir.ArrayParam] | set[str]) -> Operand:
    """``e`` read as a factor of the product, a load from one of ``arrays``; raises
    ``Refusal`` naming what else it is."""
    conds: list[ir.Expr] = []
    x = e
    while True:
        match x:
            case ir.Select(cond=cond, a=a, b=b) if _is_zero_value(b):
                conds.append(cond)
                x = a
            case ir.Select(cond=cond, a=a, b=b) if _is_zero_value(a):
                conds.append(logical_not(cond))
                x = b
            case ir.Cast(x=ir.Cast(x=source) as inner, type=t) if source.type == t \
                    and (t, inner.type) in _EXACT_WIDENINGS:
                x = source  # widened and rounded back (an f16 element staged in f16): exact
            case ir.Cast(x=inner, type=t):
                if (inner.type, t) not in _EXACT_WIDENINGS and inner.type != t:
                    raise Refusal(f"the operand {format_expr(e)} converts {inner.type} to {t}, "
                                  "which is not an exact widening")
                x = inner
            case ir.Load(array=name) as load:
                if name not in arrays:
                    raise Refusal(f"the operand {format_expr(e)} reads {name!r}, which is not "
                                  "an array parameter (shared arrays are read only in a staged "
                                  "k-loop)")
                return Operand(load, conds, e.type)
            case ir.Binary(op=BinOp.MUL):
                raise Refusal(f"the update multiplies more than two values ({format_expr(e)})")
            case _:
                raise Refusal(f"the factor {format_expr(e)} of the product is not an array "
                              "element")
