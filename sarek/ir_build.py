"""Small constructors of IR expressions, for code that builds kernels (the rewrite, the
lowerings, the recognizer's description of a GEMM): each returns a well-typed node; and the
test for a literal value and the value of an integer index expression (``evaluate``) that they
and their readers share."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, ElemType, UnOp


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
    if is_literal(b, 0):
        return a
    return binary(BinOp.ADD, a, b)


def mul(a: ir.Expr, b: ir.Expr) -> ir.Expr:
    """``a * b``."""
    return binary(BinOp.MUL, a, b)


def round_up(x: ir.Expr, multiple: int) -> ir.Expr:
    """``ceil(x / multiple) * multiple`` for a non-negative i32 ``x``."""
    return mul(binary(BinOp.DIV, add(x, const(multiple - 1)), const(multiple)),
               const(multiple))


def logical_not(x: ir.Expr) -> ir.Unary:
    """``not x`` (a bool)."""
    return ir.Unary(op=UnOp.NOT, x=x, type=ElemType.BOOL)


def is_literal(e: ir.Expr, value: int) -> bool:
    """Whether ``e`` is a constant equal to ``value`` (so ``0`` matches ``0.0`` and ``False``)."""
    return isinstance(e, ir.Const) and e.value == value


def evaluate(e: ir.Expr, env: dict[str, int]) -> int | None:
    """The value of an i32 expression of constants and ``env``'s names (C's truncating
    division), else None."""
    match e:
        case ir.Const(value=value) if isinstance(value, int):
            return int(value)
        case ir.Var(name=name):
            return env.get(name)
        case ir.Binary(op=op, a=a, b=b):
            x, y = evaluate(a, env), evaluate(b, env)
            if x is None or y is None:
                return None
            match op:
                case BinOp.ADD:
                    return x + y
                case BinOp.SUB:
                    return x - y
                case BinOp.MUL:
                    return x * y
                case BinOp.DIV | BinOp.REM if y:
                    q = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
                    return q if op is BinOp.DIV else x - q * y
    return None
