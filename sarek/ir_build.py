"""Small constructors of IR expressions, for code that builds kernels (the rewrite, the
lowerings): each returns a well-typed node."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, ElemType


def const(value: int, t: ElemType = ElemType.I32) -> ir.Const:
    """An integer (or, for a float type, float) literal of type ``t``."""
    return ir.Const(value=float(value) if t.is_float else value, type=t)


def var(name: str, t: ElemType = ElemType.I32) -> ir.Var:
    """The scalar variable ``name`` of type ``t``."""
    return ir.Var(name=name, type=t)


def binary(op: BinOp, a: ir.Expr, b: ir.Expr) -> ir.Binary:
    """``a op b``: bool for comparisons and logical operators, else ``a``'s type."""
    t = ElemType.BOOL if op in ir.COMPARISONS or op in ir.LOGICAL else a.type
    return ir.Binary(op=op, a=a, b=b, type=t)


def add(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a + b``, or ``a`` when ``b`` is the literal 0."""
    if isinstance(b, ir.Const) and b.value == 0:
        return a
    return binary(BinOp.ADD, a, b)


def mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a * b``."""
    return binary(BinOp.MUL, a, b)
