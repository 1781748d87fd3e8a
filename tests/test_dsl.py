"""The DSL: what Python it accepts, the IR it builds, and the errors it gives."""

from __future__ import annotations

import pytest

import sarek
from sarek import (
    Global,
    ReadOnly,
    barrier,
    block_idx,
    f16,
    f32,
    i32,
    ir,
    thread_idx,
    u8,
    u32,
)
from sarek.errors import DslError
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_walk import subexpressions

TILE = 8


def stmts(k: sarek.KernelFunction) -> tuple[ir.Stmt, ...]:
    return k.ir.body


def value_of_let(k: sarek.KernelFunction, index: int = 0) -> ir.Expr:
    s = stmts(k)[index]
    assert isinstance(s, ir.Let)
    return s.value


def test_parameters_follow_their_annotations() -> None:
    @sarek.kernel
    def k(a: Global[f32], b: ReadOnly[f16], n: i32) -> None:
        pass

    assert k.ir.params == (
        ir.ArrayParam(name="a", elem=ElemType.F32),
        ir.ArrayParam(name="b", elem=ElemType.F16, readonly=True),
        ir.ScalarParam(name="n", elem=ElemType.I32),
    )


def test_int_literal_is_i32_and_float_literal_is_f32() -> None:
    @sarek.kernel
    def k(a: Global[f32]) -> None:
        x = 1
        y = 2.5

    assert value_of_let(k, 0) == ir.Const(value=1, type=ElemType.I32)
    assert value_of_let(k, 1) == ir.Const(value=2.5, type=ElemType.F32)


def test_literal_takes_the_type_of_the_other_operand() -> None:
    @sarek.kernel
    def k(n: u32) -> None:
        x = n + 1

    assert value_of_let(k) == ir.Binary(op=BinOp.ADD, a=ir.Var(name="n", type=ElemType.U32),
                                         b=ir.Const(value=1, type=ElemType.U32), type=ElemType.U32)


def test_integer_and_float_operands_compute_in_float() -> None:
    @sarek.kernel
    def k(n: i32, x: f32) -> None:
        y = n * x

    v = value_of_let(k)
    assert isinstance(v, ir.Binary) and v.type is ElemType.F32
    assert v.a == ir.Cast(x=ir.Var(name="n", type=ElemType.I32), type=ElemType.F32)


def test_narrow_integers_are_promoted_to_i32_like_c() -> None:
    @sarek.kernel
    def k(a: u8, b: u8) -> None:
        x = a * b

    assert value_of_let(k).type is ElemType.I32


def test_f16_loads_widen_to_f32_and_stores_round_back() -> None:
    @sarek.kernel
    def k(h: Global[f16]) -> None:
        h[0] = h[1] * 2.0

    [store] = stmts(k)
    assert isinstance(store, ir.Store)
    assert store.value.type is ElemType.F16 and isinstance(store.value, ir.Cast)
    product = store.value.x
    assert isinstance(product, ir.Binary) and product.type is ElemType.F32
    assert product.a == ir.Cast(x=ir.Load(array="h", index=ir.Const(value=1, type=ElemType.I32),
                                          type=ElemType.F16), type=ElemType.F32)


def test_floor_division_and_remainder_become_c_div_and_rem() -> None:
    @sarek.kernel
    def k(t: i32, n: i32) -> None:
        q = t // n
        r = t % n

    assert value_of_let(k, 0).op is BinOp.DIV  # type: ignore[union-attr]
    assert value_of_let(k, 1).op is BinOp.REM  # type: ignore[union-attr]


def test_chained_comparison_is_a_conjunction() -> None:
    @sarek.kernel
    def k(x: i32) -> None:
        ok = 0 <= x < 10

    v = value_of_let(k)
    assert isinstance(v, ir.Binary) and v.op is BinOp.LAND
    assert (v.a.op, v.b.op) == (BinOp.LE, BinOp.LT)  # type: ignore[union-attr]


def test_conditional_expression_is_a_select() -> None:
    @sarek.kernel
    def k(a: Global[f32], n: i32) -> None:
        v = a[0] if n > 0 else 0.0

    v = value_of_let(k)
    assert isinstance(v, ir.Select) and v.type is ElemType.F32


def test_launch_builtins_have_components() -> None:
    @sarek.kernel
    def k() -> None:
        x = thread_idx.y + block_idx.z + sarek.subgroup_lane

    got = {x.which for x in subexpressions(value_of_let(k))
           if isinstance(x, ir.BuiltinValue)}
    assert got == {Builtin.THREAD_IDX_Y, Builtin.BLOCK_IDX_Z, Builtin.SUBGROUP_LANE}


def test_module_constants_fold_into_sizes() -> None:
    @sarek.kernel
    def k() -> None:
        s = sarek.shared(f32, TILE * TILE + 1)

    assert stmts(k)[0] == ir.ArrayDecl(name="s", elem=ElemType.F32, size=65,
                                       space=ir.MemSpace.SHARED, line=stmts(k)[0].line)


def test_augmented_assignment_to_element_reads_then_stores() -> None:
    @sarek.kernel
    def k(a: Global[i32]) -> None:
        a[3] += 2

    [store] = stmts(k)
    assert isinstance(store, ir.Store) and isinstance(store.value, ir.Binary)
    assert store.value.a == ir.Load(array="a", index=ir.Const(value=3, type=ElemType.I32),
                                    type=ElemType.I32)


def test_assignment_converts_to_the_variable_type() -> None:
    @sarek.kernel
    def k(n: i32) -> None:
        acc = f32(0.0)
        acc = n

    assign = stmts(k)[1]
    assert isinstance(assign, ir.Assign)
    assert assign.value == ir.Cast(x=ir.Var(name="n", type=ElemType.I32), type=ElemType.F32)


def test_statements_record_their_source_line() -> None:
    @sarek.kernel
    def k(a: Global[f32]) -> None:
        a[0] = 1.0

    line = test_statements_record_their_source_line.__code__.co_firstlineno + 3
    assert stmts(k)[0].line == line


def test_range_with_start_stop_and_step() -> None:
    @sarek.kernel
    def k(n: i32) -> None:
        for i in range(2, n, 3):
            pass

    loop = stmts(k)[0]
    assert isinstance(loop, ir.For)
    assert (loop.start, loop.step) == (ir.Const(value=2, type=ElemType.I32),
                                       ir.Const(value=3, type=ElemType.I32))


def test_barrier_is_a_statement() -> None:
    @sarek.kernel
    def k() -> None:
        barrier()

    assert isinstance(stmts(k)[0], ir.Barrier)


def test_math_functions_on_integers_compute_in_f32() -> None:
    @sarek.kernel
    def k(n: i32) -> None:
        r = sarek.sqrt(n)

    v = value_of_let(k)
    assert isinstance(v, ir.Call) and v.type is ElemType.F32


def test_min_of_three_nests() -> None:
    @sarek.kernel
    def k(a: i32, b: i32, c: i32) -> None:
        x = min(a, b, c)

    v = value_of_let(k)
    assert isinstance(v, ir.Call) and isinstance(v.args[0], ir.Call)


# ------------------------------------------------------------------------- errors


def error_of(src: str) -> DslError:
    """The DslError raised by defining a kernel whose body is ``src`` (in a real file)."""
    import importlib.util
    import tempfile
    import textwrap
    from pathlib import Path

    text = "import sarek\nfrom sarek import *\n\n@sarek.kernel\ndef k(a: Global[f32], n: i32):\n"
    text += textwrap.indent(textwrap.dedent(src), "    ")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad_kernel.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location("bad_kernel", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        with pytest.raises(DslError) as err:
            spec.loader.exec_module(module)
    assert err.value.file.endswith("bad_kernel.py")
    return err.value


@pytest.mark.parametrize(("src", "line", "reason"), [
    ("while n > 0:\n    break\n", 7, "'break' is not supported"),
    ("x = [i for i in range(n)]\n", 6, "is not supported in a kernel"),
    ("x = n ** 2\n", 6, "the operator Pow is not supported"),
    ("x = n / 2\n", 6, "'/' on integers: use '//'"),
    ("x = a[0] % 2.0\n", 6, "defined on integers only"),
    ("return n\n", 6, "a kernel returns nothing"),
    ("x = undefined_thing + 1\n", 6, "undefined name 'undefined_thing'"),
    ("n = 3\n", 6, "'n' is read-only"),
    ("for i in [1, 2]:\n    pass\n", 6, "only 'for NAME in range(...)'"),
    ("if n > 0:\n    y = 1\nz = y\n", 8, "'y' is not defined here"),
    ("x = print(n)\n", 6, "cannot be called in a kernel"),
    ("a + 1\n", 6, "has no effect"),
    ("x = thread_idx.w\n", 6, "components x, y and z"),
    # what a numba.cuda user writes first, each refused with what to write instead
    ("x = a.shape[0]\n", 6, "pass them as i32 parameters (m: i32, n: i32) and index flat"),
    ("x = len(a)\n", 6, "pass them as i32 parameters (m: i32, n: i32) and index flat"),
    ("x = a.size\n", 6, "pass them as i32 parameters (m: i32, n: i32) and index flat"),
    ("a[n, 0] = 1.0\n", 6, "a global array is indexed by one flat index, a[i * n + j]"),
    ("i, j = n, n\n", 6, "assign one name at a time (i = ...; j = ...)"),
    ("x = [1, 2]\n", 6, "use a local array, x = sarek.local(f32, n)"),
    ("print(n)\n", 6, "print() does not run in a kernel; store the value in an output array"),
    ("if thread_idx.x < 4:\n    barrier()\n", 7, "barrier in divergent code"),
    ("for i in range(4):\n    i = 2\n", 7, "read-only"),
    ("x = 1\nx = a\n", 7, "array 'a' used as a value"),
])
def test_unsupported_python_is_refused_with_file_line_and_construct(
        src: str, line: int, reason: str) -> None:
    err = error_of(src)
    assert reason in err.reason
    assert err.line == line


def test_parameter_without_annotation_is_refused() -> None:
    with pytest.raises(DslError, match="needs a type annotation"):
        @sarek.kernel
        def k(a) -> None:  # type: ignore[no-untyped-def]
            pass


def test_markers_cannot_be_called_outside_a_kernel() -> None:
    with pytest.raises(RuntimeError, match=r"inside a @sarek\.kernel"):
        barrier()


def test_scalar_types_convert_outside_a_kernel() -> None:
    assert f16(1 / 3) == pytest.approx(0.33325, abs=1e-5)
    assert type(f32(1)).__name__ == "float32"
