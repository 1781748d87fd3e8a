"""IR expressions as readable text, written like the DSL: for messages and descriptions (the
recognizer's refusals, ``Gemm.describe``), never for code a compiler reads."""

from __future__ import annotations

from sarek import ir
from sarek.ir import BinOp, ElemType, UnOp

_SYMBOL_AND_PRECEDENCE = {
    BinOp.ADD: ("+", 4), BinOp.SUB: ("-", 4), BinOp.MUL: ("*", 5), BinOp.DIV: ("//", 5),
    BinOp.REM: ("%", 5), BinOp.SHL: ("<<", 3), BinOp.SHR: (">>", 3), BinOp.AND: ("&", 2),
    BinOp.XOR: ("^", 2), BinOp.OR: ("|", 2), BinOp.LT: ("<", 1), BinOp.LE: ("<=", 1),
    BinOp.GT: (">", 1), BinOp.GE: (">=", 1), BinOp.EQ: ("==", 1), BinOp.NE: ("!=", 1),
    BinOp.LAND: ("and", 0), BinOp.LOR: ("or", 0),
}
_UNARY_SYMBOL = {UnOp.NEG: "-", UnOp.NOT: "not ", UnOp.BITNOT: "~"}
_UNARY_PRECEDENCE = 6  # binds tighter than every binary operator


def format_expr(e: ir.Expr) -> str:
    """``e`` written like the DSL; names that start with ``%`` (the recognizer's placeholders,
    such as ``%acc`` and ``%row``) print without it, as ``acc`` and ``row``."""
    return _format(e, 0)


def _format(e: ir.Expr, outer_precedence: int) -> str:
    """``e`` as text, parenthesized when its operator binds less tightly than its context's."""
    match e:
        case ir.Const(value=value, type=t):
            text = repr(value) if t.is_float or t is ElemType.BOOL else str(value)
            return text if t in (ElemType.I32, ElemType.F32, ElemType.BOOL) else f"{t}({text})"
        case ir.Var(name=name):
            return name.lstrip("%")
        case ir.BuiltinValue(which=which):
            return which.value
        case ir.Load(array=array, index=index):
            return f"{array}[{_format(index, 0)}]"
        case ir.Cast(x=x, type=t):
            return f"{t}({_format(x, 0)})"
        case ir.Call(fn=fn, args=args):
            return f"{fn.value}({', '.join(_format(x, 0) for x in args)})"
        case ir.Select(cond=cond, a=a, b=b):
            return f"({_format(a, 0)} if {_format(cond, 0)} else {_format(b, 0)})"
        case ir.Unary(op=op, x=x):
            return f"{_UNARY_SYMBOL[op]}{_format(x, _UNARY_PRECEDENCE)}"
        case ir.Binary(op=op, a=a, b=b):
            symbol, precedence = _SYMBOL_AND_PRECEDENCE[op]
            text = f"{_format(a, precedence)} {symbol} {_format(b, precedence + 1)}"
            return f"({text})" if precedence < outer_precedence else text
    return "?"


def format_bulk(s: ir.BulkStmt) -> str:
    """A bulk tensor copy or mbarrier statement on one line, like the DSL, for reports."""
    bar = f"{s.barriers}[{_format(s.index, 0)}]"
    match s:
        case ir.MbarrierInit(arrivals=arrivals):
            return f"mbarrier_init({bar}, arrivals={arrivals})"
        case ir.MbarrierArrive(tx_bytes=tx):
            return f"mbarrier_arrive({bar}, tx_bytes={_format(tx, 0)})"
        case ir.MbarrierWait(parity=parity):
            return f"mbarrier_wait({bar}, parity={_format(parity, 0)})"
        case ir.BulkTensorCopy():
            return (f"bulk_tensor_copy({s.dst}[{_format(s.dst_offset, 0)}] <- {s.src} box "
                    f"{s.rows}x{s.cols} at ({_format(s.row, 0)}, {_format(s.col, 0)}), "
                    f"swizzle={s.swizzle}, {bar})")
