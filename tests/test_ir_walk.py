"""The one IR traversal: substitution reaches every operand, bitcasts included."""

from __future__ import annotations

from sarek import ir, ir_build
from sarek.ir import ElemType
from sarek.ir_walk import map_blocks, subexpressions, substitute

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


def test_replace_statements_replaces_nested_statements_and_keeps_the_rest() -> None:
    from sarek.ir_walk import replace_statements

    i32 = ir.ElemType.I32
    zero = ir.Const(value=0, type=i32)
    loop = ir.For(var="q", start=zero, stop=ir.Const(value=2, type=i32),
                  step=ir.Const(value=1, type=i32), body=(ir.Barrier(), ir.Return()))
    branch = ir.If(cond=ir.Const(value=True, type=ir.ElemType.BOOL), then=(ir.Barrier(),),
                   orelse=(loop,))

    def twice_or_drop(s: ir.Stmt) -> list[ir.Stmt] | None:
        if isinstance(s, ir.Barrier):
            return [s, s]
        return [] if isinstance(s, ir.Return) else None

    (out,) = replace_statements((branch,), twice_or_drop)
    assert isinstance(out, ir.If)
    assert out.then == (ir.Barrier(), ir.Barrier())
    (inner,) = out.orelse
    assert isinstance(inner, ir.For) and inner.body == (ir.Barrier(), ir.Barrier())


def test_map_blocks_rewrites_each_block_once_inner_blocks_first() -> None:
    inner = (ir.Barrier(),)
    loop = ir.For(var="i", start=ir_build.const(0), stop=ir_build.const(2),
                  step=ir_build.const(1), body=inner)
    seen: list[int] = []

    def level(block: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        seen.append(len(block))
        return (*block, ir.Return())

    out = map_blocks((loop, ir.Barrier()), level)
    assert seen == [1, 2]  # the loop's body, then the outer block
    assert isinstance(out[0], ir.For) and out[0].body == (ir.Barrier(), ir.Return())
    assert out[1:] == (ir.Barrier(), ir.Return())
