"""The DSL's typing rules: C's integer promotion and usual arithmetic conversions, f16/bf16
widening, typed literals, wrap-around of integer constants, and the folding of integer
literal arithmetic that keeps sizes compile-time constants (``specs/ir.md``, "The DSL")."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, ElemType

INT_ORDER = (ElemType.I32, ElemType.U32, ElemType.I64, ElemType.U64)


def const(value: bool | int | float, t: ElemType) -> ir.Const:
    if t is ElemType.BOOL:
        return ir.Const(value=bool(value), type=t)
    if t.is_int:
        return ir.Const(value=int(value), type=t)
    return ir.Const(value=float(value), type=t)


def cast(e: ir.Expr, t: ElemType) -> ir.Expr:
    return e if e.type == t else ir.Cast(x=e, type=t)


def wrap(v: int, t: ElemType) -> int:
    v &= (1 << t.bits) - 1
    return v - (1 << t.bits) if t.is_signed and v >> (t.bits - 1) else v


def arith_type(t: ElemType) -> ElemType:
    """The type a value takes part in arithmetic as (C's integer promotion, f16/bf16 widening)."""
    if t is ElemType.BOOL or (t.is_int and t.bits < 32):
        return ElemType.I32
    return ElemType.F32 if t.is_storage_only else t


def common_type(a: ElemType, b: ElemType) -> ElemType:
    a, b = arith_type(a), arith_type(b)
    if a.is_float or b.is_float:
        return ElemType.F64 if ElemType.F64 in (a, b) else ElemType.F32
    return max(a, b, key=INT_ORDER.index)


def fold(op: BinOp, a: bool | int | float, b: bool | int | float, t: ElemType) -> int | None:
    """Folds integer literal arithmetic (``16 * 4``) so sizes stay compile-time constants."""
    if not t.is_int or isinstance(a, float) or isinstance(b, float):
        return None
    x, y = int(a), int(b)
    match op:
        case BinOp.ADD:
            return wrap(x + y, t)
        case BinOp.SUB:
            return wrap(x - y, t)
        case BinOp.MUL:
            return wrap(x * y, t)
        case BinOp.DIV if y != 0:
            return wrap(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1), t)
    return None
