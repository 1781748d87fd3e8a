"""The one IR traversal: substitution reaches every operand, bitcasts included."""

from __future__ import annotations

from sarek import ir
from sarek.ir import ElemType
from sarek.ir_walk import subexpressions, substitute

F32, U32 = ElemType.F32, ElemType.U32


def test_substitution_reaches_the_operand_of_a_bitcast() -> None:
    x = ir.Var(name="x", type=F32)
    bits = ir.Bitcast(x=ir.Binary(op=ir.BinOp.ADD, a=x, b=x, type=F32), type=U32)
    two = ir.Const(value=2.0, type=F32)
    replaced = substitute(bits, {"x": two})
    assert isinstance(replaced, ir.Bitcast)
    assert not any(isinstance(e, ir.Var) for e in subexpressions(replaced))
    assert replaced.x == ir.Binary(op=ir.BinOp.ADD, a=two, b=two, type=F32)


def test_substitution_keeps_nodes_it_does_not_change() -> None:
    x = ir.Var(name="x", type=F32)
    e = ir.Bitcast(x=x, type=U32)
    assert substitute(e, {"y": ir.Const(value=1.0, type=F32)}) is e
