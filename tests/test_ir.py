"""The IR: JSON round trips, schema, validation errors and the checker's findings."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from sarek import ir, ir_check
from sarek.errors import IRError
from sarek.ir import (
    ArrayDecl,
    ArrayParam,
    Assign,
    Barrier,
    Binary,
    BinOp,
    Builtin,
    BuiltinValue,
    Const,
    ElemType,
    For,
    If,
    Kernel,
    Let,
    Load,
    MemSpace,
    Return,
    ScalarParam,
    Store,
    Var,
)

I32, F32, F16, BOOL = ElemType.I32, ElemType.F32, ElemType.F16, ElemType.BOOL


def c(v: int | float | bool, t: ElemType = I32) -> Const:
    return Const(value=v, type=t)


def tid() -> BuiltinValue:
    return BuiltinValue(which=Builtin.THREAD_IDX_X)


def kern(*body: ir.Stmt, params: tuple[ir.Param, ...] = ()) -> Kernel:
    default = (ArrayParam(name="a", elem=F32), ScalarParam(name="n", elem=I32))
    return Kernel(name="k", params=params or default, body=body)


def reasons(k: Kernel) -> list[str]:
    return [p.reason for p in ir_check.check(k)]


def test_every_example_round_trips_through_json(gemm_example) -> None:
    k = gemm_example.make(8, 8, 8).kernel
    assert Kernel.model_validate_json(k.model_dump_json()) == k


def test_every_example_is_well_formed(gemm_example) -> None:
    assert ir_check.check(gemm_example.make(8, 8, 8).kernel) == []


def test_nodes_are_frozen() -> None:
    k = kern(Return())
    with pytest.raises(ValidationError):
        k.name = "other"  # type: ignore[misc]


def test_schema_describes_kernel_statements_and_expressions() -> None:
    schema = ir.schema()
    assert schema["title"] == "Kernel"
    assert {"Store", "Binary", "FragMulAdd", "TileApply"} <= set(schema["$defs"])
    json.dumps(schema)


def test_unknown_statement_kind_names_the_field_path() -> None:
    doc = json.loads(kern(Return()).model_dump_json())
    doc["body"][0]["kind"] = "goto"
    with pytest.raises(ValidationError) as err:
        Kernel.model_validate(doc)
    assert "body.0" in str(err.value) and "goto" in str(err.value)


def test_missing_field_is_named() -> None:
    doc = json.loads(kern(Store(array="a", index=c(0), value=c(1.0, F32))).model_dump_json())
    del doc["body"][0]["index"]
    with pytest.raises(ValidationError) as err:
        Kernel.model_validate(doc)
    assert "index" in str(err.value) and "Field required" in str(err.value)


def test_bad_element_type_is_named() -> None:
    doc = json.loads(kern(Return()).model_dump_json())
    doc["params"][0]["elem"] = "f8"
    with pytest.raises(ValidationError) as err:
        Kernel.model_validate(doc)
    assert "params.0.array.elem" in str(err.value)


def test_undefined_name_is_reported_with_its_path() -> None:
    k = kern(If(cond=c(True, BOOL), then=(Let(name="x", type=I32, value=Var(name="y", type=I32)),)))
    [problem] = ir_check.check(k)
    assert problem.path == "body[0].then[0]"
    assert problem.reason == "undefined name 'y'"


def test_operands_of_different_types_are_reported() -> None:
    bad = Binary(op=BinOp.ADD, a=c(1), b=c(1.0, F32), type=F32)
    assert "'add' operands have different types i32 and f32" in reasons(
        kern(Let(name="x", type=F32, value=bad)))


def test_arithmetic_on_storage_types_is_reported() -> None:
    h = Const(value=1.0, type=F16)
    k = kern(Let(name="x", type=F16, value=Binary(op=BinOp.MUL, a=h, b=h, type=F16)))
    assert any("not defined on f16" in r for r in reasons(k))


def test_store_to_read_only_array_is_reported() -> None:
    k = kern(Store(array="a", index=c(0), value=c(0.0, F32)),
             params=(ArrayParam(name="a", elem=F32, readonly=True),))
    assert reasons(k) == ["store to read-only array 'a'"]


def test_store_of_wrong_type_is_reported() -> None:
    k = kern(Store(array="a", index=c(0), value=c(0)))
    assert reasons(k) == ["the value stored to 'a' has type i32, expected f32"]


def test_array_parameter_outside_global_memory_is_reported() -> None:
    k = kern(Return(), params=(ArrayParam(name="a", elem=F32, space=MemSpace.SHARED),))
    assert reasons(k) == ["array parameter 'a' must be in global memory, not shared"]


def test_shared_array_inside_control_flow_is_reported() -> None:
    decl = ArrayDecl(name="s", elem=F32, size=4, space=MemSpace.SHARED)
    k = kern(If(cond=c(True, BOOL), then=(decl,)))
    assert reasons(k) == ["shared array 's' must be declared at the top level of the kernel body"]


def test_assignment_to_loop_variable_is_reported() -> None:
    loop = For(var="i", start=c(0), stop=c(4), step=c(1), body=(Assign(name="i", value=c(0)),))
    assert reasons(kern(loop)) == ["'i' is a loop variable and is read-only"]


def test_constant_out_of_range_is_reported() -> None:
    assert reasons(kern(Let(name="x", type=I32, value=c(2**31)))) == [
        "constant 2147483648 does not fit i32 [-2147483648, 2147483647]"]


def test_load_from_scalar_is_reported() -> None:
    k = kern(Let(name="x", type=I32, value=Load(array="n", index=c(0), type=I32)))
    assert reasons(k) == ["'n' is not an array and cannot be indexed"]


def test_barrier_under_thread_dependent_condition_is_reported() -> None:
    cond = Binary(op=BinOp.LT, a=tid(), b=c(5), type=BOOL)
    [problem] = ir_check.check(kern(If(cond=cond, then=(Barrier(),))))
    assert problem.path == "body[0].then[0]"
    assert problem.reason.startswith("barrier in divergent code")


def test_barrier_after_thread_dependent_return_is_reported() -> None:
    cond = Binary(op=BinOp.GE, a=tid(), b=Var(name="n", type=I32), type=BOOL)
    assert len(ir_check.check(kern(If(cond=cond, then=(Return(),)), Barrier()))) == 1


def test_barrier_after_variable_derived_from_thread_is_reported() -> None:
    k = kern(Let(name="t", type=I32, value=tid()),
             If(cond=Binary(op=BinOp.EQ, a=Var(name="t", type=I32), b=c(0), type=BOOL),
                then=(Barrier(),)))
    assert len(ir_check.check(k)) == 1


def test_barrier_under_block_uniform_condition_is_accepted() -> None:
    cond = Binary(op=BinOp.LT, a=BuiltinValue(which=Builtin.BLOCK_IDX_X), b=c(2), type=BOOL)
    assert ir_check.check(kern(If(cond=cond, then=(Barrier(),)))) == []


def test_barrier_in_loop_made_divergent_by_its_body_is_reported() -> None:
    # j starts uniform but becomes thread-dependent inside the loop that tests it.
    j = Var(name="j", type=I32)
    loop = ir.While(cond=Binary(op=BinOp.LT, a=j, b=c(4), type=BOOL),
                    body=(Barrier(), Assign(name="j", value=Binary(op=BinOp.ADD, a=j, b=tid(),
                                                                  type=I32))))
    assert len(ir_check.check(kern(Let(name="j", type=I32, value=c(0)), loop))) == 1


def test_ensure_valid_raises_with_every_problem() -> None:
    k = kern(Let(name="x", type=I32, value=Var(name="y", type=I32)),
             Store(array="a", index=c(0), value=c(0)))
    with pytest.raises(IRError) as err:
        ir_check.ensure_valid(k)
    assert len(err.value.problems) == 2


def test_a_fragment_derives_its_rows_and_columns_from_its_use_and_shape() -> None:
    shape = ir.FragShape(m=16, n=8, k=32)
    dims = {use: (ir.FragDecl(name="f", use=use, shape=shape, elem=F32).rows,
                  ir.FragDecl(name="f", use=use, shape=shape, elem=F32).cols)
            for use in ir.FragUse}
    assert dims == {ir.FragUse.A: (16, 32), ir.FragUse.B: (32, 8),
                    ir.FragUse.ACCUMULATOR: (16, 8)}


def test_a_multiply_add_over_fragments_of_different_shapes_is_reported() -> None:
    big, small = ir.FragShape(m=16, n=16, k=16), ir.FragShape(m=8, n=8, k=8)
    frags = [ir.FragDecl(name=n, use=u, shape=s, elem=e) for n, u, s, e in (
        ("fa", ir.FragUse.A, big, ElemType.F16), ("fb", ir.FragUse.B, small, ElemType.F16),
        ("fc", ir.FragUse.ACCUMULATOR, big, F32))]
    [reason] = reasons(kern(*frags, ir.FragMulAdd(d="fc", a="fa", b="fb", c="fc")))
    assert "declared for different shapes" in reason and "'fb' 8x8x8" in reason


def accumulators(*specs: tuple[str, ir.FragUse, int, ElemType]) -> list[ir.FragDecl]:
    """Fragment declarations (name, use, edge, element type), each edge x edge x edge."""
    return [ir.FragDecl(name=n, use=u, shape=ir.FragShape(m=e, n=e, k=e), elem=t)
            for n, u, e, t in specs]


ACC = ir.FragUse.ACCUMULATOR


def test_a_fragment_add_of_three_accumulators_of_one_shape_and_type_is_well_formed() -> None:
    frags = accumulators(("d", ACC, 16, F32), ("x", ACC, 16, F32), ("y", ACC, 16, F32))
    k = kern(*frags, ir.FragAdd(d="d", a="x", b="y"), ir.FragAdd(d="x", a="x", b="x"))
    assert reasons(k) == []
    assert Kernel.model_validate_json(k.model_dump_json()) == k
    defs = ir.schema()["$defs"]
    assert isinstance(defs, dict) and "FragAdd" in defs


def test_a_fragment_add_of_an_undeclared_name_is_reported() -> None:
    frags = accumulators(("d", ACC, 16, F32), ("x", ACC, 16, F32))
    assert reasons(kern(*frags, ir.FragAdd(d="d", a="x", b="nope"))) == [
        "'nope' is not a fragment"]


def test_a_fragment_add_of_an_operand_fragment_is_reported() -> None:
    frags = accumulators(("d", ACC, 16, F32), ("x", ACC, 16, F32),
                         ("fa", ir.FragUse.A, 16, F32))
    [reason] = reasons(kern(*frags, ir.FragAdd(d="d", a="x", b="fa")))
    assert reason == ("fragment 'fa' is used as accumulator but declared a: an element-wise "
                      "add takes accumulators only")


def test_a_fragment_add_of_different_shapes_is_reported() -> None:
    frags = accumulators(("d", ACC, 16, F32), ("x", ACC, 16, F32), ("y", ACC, 8, F32))
    [reason] = reasons(kern(*frags, ir.FragAdd(d="d", a="x", b="y")))
    assert reason == ("the fragments of one add have different shapes: 'd' 16x16, 'x' 16x16, "
                      "'y' 8x8")


def test_a_fragment_add_of_different_element_types_is_reported() -> None:
    frags = accumulators(("d", ACC, 16, F32), ("x", ACC, 16, I32), ("y", ACC, 16, F32))
    [reason] = reasons(kern(*frags, ir.FragAdd(d="d", a="x", b="y")))
    assert reason == ("the fragments of one add hold different element types: 'd' f32, "
                      "'x' i32, 'y' f32")


def test_a_fragment_add_of_storage_type_accumulators_is_reported() -> None:
    frags = accumulators(("d", ACC, 16, F16), ("x", ACC, 16, F16), ("y", ACC, 16, F16))
    [reason] = reasons(kern(*frags, ir.FragAdd(d="d", a="x", b="y")))
    assert reason == ("fragments of f16 cannot be added: an element-wise add is defined on "
                      "integer, f32 and f64 accumulators")
