"""What every part of the rewrite's body builder uses: element types, the width of a packed
byte-plane word and small IR constructors."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_build import binary

I32, U32, U8, F32 = ElemType.I32, ElemType.U32, ElemType.U8, ElemType.F32

PACK = 4  # consecutive k one invocation converts into each byte plane's 32-bit word


def cast(x: ir.Expr, t: ElemType) -> ir.Expr:
    """``x`` as type ``t`` (itself when it has that type)."""
    return x if x.type == t else ir.Cast(x=x, type=t)


def conjunction(*terms: ir.Expr) -> ir.Expr:
    """``terms[0] && terms[1] && ...``, left to right."""
    out = terms[0]
    for t in terms[1:]:
        out = binary(BinOp.LAND, out, t)
    return out


def builtin(which: Builtin) -> ir.BuiltinValue:
    return ir.BuiltinValue(which=which)


def zero(t: ElemType) -> ir.Const:
    return ir.Const(value=0.0 if t.is_float else 0, type=t)


def pad(operand: str, t: ElemType, term: int = 0) -> ir.Const:
    """What operand ``operand`` ("a" or "b") is staged as outside the region. A pads with -0.0:
    a padded product -0.0 * +0.0 is -0.0, which leaves every sum unchanged, a -0.0 one too
    (+0.0 would turn it into +0.0). Term ``term`` of the padding where the pre-pass split the
    operands into terms (``sarek.stage_copy.part``): every term after the first is the
    residual x - x of a zero, +0.0."""
    if term:
        return zero(t)
    return ir.Const(value=-0.0, type=t) if operand == "a" and t.is_float else zero(t)
