"""Bad input is refused with the project's own error and a reason, never a crash, a hang or an
allocation nobody can hold (issue 14): one regression test per class the fuzz campaign found,
and the simulator's documented limits (``specs/simulator.md``, "Limits")."""

from __future__ import annotations

import json
import linecache
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, example
from fuzz_gen import run_cli

import sarek
import sim
from sarek import ir, ir_check
from sarek.dsl import KernelFunction
from sarek.errors import DslError, IRError, LaunchError, LimitError, SarekError
from sarek.ir import ElemType, MemSpace
from sarek.ir_check import MAX_EXPR_DEPTH, MAX_NESTING
from sarek.launch import dim3
from sarek.layout import LayoutError, S
from sarek.matrix_mapping import RegionError, region
from sarek.matrix_pattern import NotAGemm, recognize
from sim.launch import Limits

I32, F32 = ElemType.I32, ElemType.F32


def c32(v: int) -> ir.Const:
    return ir.Const(value=v, type=I32)


def store_kernel(*body: ir.Stmt, params: tuple[ir.Param, ...] = ()) -> ir.Kernel:
    return ir.Kernel(name="k", params=(ir.ArrayParam(name="out", elem=I32), *params),
                     body=body)


def sum_of(n: int) -> ir.Expr:
    """``1 + 1 + ... + 1`` with ``n`` additions, nested to the left as Python writes it."""
    e: ir.Expr = c32(1)
    for _ in range(n):
        e = ir.Binary(op=ir.BinOp.ADD, a=e, b=c32(1), type=I32)
    return e


def dsl(src: str) -> ir.Kernel:
    """``@sarek.kernel`` applied to the one function of ``src``, as if it were in a file."""
    filename = f"<bad-input {abs(hash(src))}>"
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    namespace = {name: getattr(sarek, name) for name in sarek.__all__} | {"sarek": sarek}
    try:
        exec(compile(src, filename, "exec"), namespace)
        fn = next(v for k, v in namespace.items() if k == "k")
        return fn.ir if isinstance(fn, KernelFunction) else KernelFunction(fn).ir
    finally:
        del linecache.cache[filename]


def one_error_line(argv: list[str]) -> str:
    """Runs the CLI; asserts exit status 2 and exactly one line on stderr, which it returns."""
    code, _, err = run_cli(argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, (code, err)
    assert "Traceback" not in err and lines[0].startswith("sarek")
    return lines[0]


# --------------------------------------------------------------------------- tile layouts


def test_the_ldmatrix_example_survives_its_json_round_trip() -> None:
    kernel = example("ldmatrix_interleaved").ldmatrix_interleaved.ir
    assert ir.Kernel.model_validate_json(kernel.model_dump_json()) == kernel


def test_a_null_stride_in_json_is_a_validation_error_naming_the_field() -> None:
    doc = example("ldmatrix_interleaved").ldmatrix_interleaved.ir.model_dump(mode="json")
    decl = next(s for s in doc["body"] if s["kind"] == "array_decl" and s["layout"])
    decl["layout"]["stride"][0] = None
    with pytest.raises(ValueError, match=r"layout\.stride\.0\n  Input should be an object"):
        ir.Kernel.model_validate_json(json.dumps(doc))  # pydantic's ValidationError


def test_a_layout_of_more_coordinates_than_i32_offsets_reach_is_refused() -> None:
    with pytest.raises(LayoutError, match="2\\^31"):
        S[(1 << 16, 1 << 16) : (1, 1 << 16)]
    with pytest.raises(LayoutError, match="fractional part"):
        S[(2, 4.5) : (1, 2)]


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("space", [MemSpace.SHARED, MemSpace.LOCAL])
def test_an_array_of_2_to_the_31_elements_is_ill_formed(space: MemSpace) -> None:
    k = store_kernel(ir.ArrayDecl(name="s", elem=F32, size=1 << 31, space=space))
    with pytest.raises(IRError, match="2147483648 elements"):
        ir_check.ensure_valid(k)


def test_shared_memory_past_the_memory_limit_is_refused_before_allocating() -> None:
    k = store_kernel(ir.ArrayDecl(name="s", elem=F32, size=(1 << 31) - 1,
                                  space=MemSpace.SHARED))
    start = time.perf_counter()
    with pytest.raises(LimitError, match=r"shared array .s..*memory limit of 4\.0 GiB") as e:
        sim.simulate(k, [np.zeros(1, np.int32)], grid=4, block=32)
    assert e.value.limit == "memory" and "Limits(memory=" in e.value.reason
    assert time.perf_counter() - start < 1  # estimated, not attempted


def test_local_memory_is_counted_per_invocation() -> None:
    k = store_kernel(ir.ArrayDecl(name="t", elem=F32, size=1 << 20, space=MemSpace.LOCAL))
    with pytest.raises(LimitError, match="local array 't'"):
        sim.simulate(k, [np.zeros(1, np.int32)], grid=16, block=256)
    # the same launch under a limit raised past what it needs is attempted (one block)
    sim.simulate(k, [np.zeros(1, np.int32)], grid=1, block=2, limits=Limits(memory=1 << 30))


def test_a_grid_of_a_billion_invocations_is_refused_naming_the_limit() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=c32(1)))
    with pytest.raises(LimitError, match=r"1000000000 invocations.*--max-invocations") as e:
        sim.simulate(k, [np.zeros(1, np.int32)], grid=(1_000_000, 1000), block=1)
    assert e.value.limit == "invocations"


def test_the_invocations_limit_can_be_raised() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=c32(1)))
    with pytest.raises(LimitError):
        sim.simulate(k, [np.zeros(1, np.int32)], grid=65, block=1, limits=Limits(invocations=64))
    out = sim.simulate(k, [np.zeros(1, np.int32)], grid=65, block=1,
                       limits=Limits(invocations=65))["out"]
    assert out[0] == 1


@pytest.mark.parametrize("grid", [(2**31, 1, 1), (2**63, 1, 1), 2**64])
def test_a_grid_dimension_beyond_i32_is_a_launch_error(grid: object) -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=c32(1)))
    with pytest.raises(LaunchError, match="grid"):
        sim.simulate(k, [np.zeros(1, np.int32)], grid=grid, block=1)


@pytest.mark.parametrize("value", [2**70, -2**64])
def test_an_integer_argument_too_large_for_a_c_long_is_a_launch_error(value: int) -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=ir.Var(name="n", type=I32)),
                     params=(ir.ScalarParam(name="n", elem=I32),))
    with pytest.raises(LaunchError, match="outside"):
        sim.simulate(k, [np.zeros(1, np.int32), value])


@pytest.mark.parametrize("value", [10**400, -(10**400)], ids=["1e400", "-1e400"])
def test_an_f32_constant_of_ten_to_the_400_is_ill_formed(value: int) -> None:
    k = ir.Kernel(name="k", params=(ir.ArrayParam(name="out", elem=F32),), body=(
        ir.Store(array="out", index=c32(0), value=ir.Const(value=value, type=F32)),))
    with pytest.raises(IRError, match="beyond the range of any float type"):
        sim.simulate(k, [np.zeros(1, np.float32)])
    with pytest.raises(IRError, match=r"about -?1e400"):
        sarek.emit(k, "cuda")


def test_an_integer_constant_of_5000_digits_is_reported_without_printing_it() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=ir.Const(value=10**5000,
                                                                         type=I32)))
    with pytest.raises(IRError, match="constant about 1e5000 does not fit i32"):
        ir_check.ensure_valid(k)


def test_the_cli_refuses_a_size_nobody_can_hold_before_allocating() -> None:
    start = time.perf_counter()
    for command in ("analyze", "simulate", "emit", "rewrite"):
        argv = [command, str(EXAMPLES / "gemm_f32.py"), "--size", "100000,100000,100000"]
        if command == "emit":
            argv += ["--target", "cuda"]
        line = one_error_line(argv)
        assert "--size 100000,100000,100000" in line and "memory limit of 4.0 GiB" in line
    assert time.perf_counter() - start < 5


# --------------------------------------------------------------------------- loops


def test_a_for_loop_past_the_trip_cap_is_refused_before_it_runs() -> None:
    k = store_kernel(ir.For(var="p", start=c32(0), stop=c32(2**31 - 1), step=c32(1),
                            body=(ir.Store(array="out", index=c32(0), value=c32(1)),)))
    start = time.perf_counter()
    with pytest.raises(LimitError, match=r"2147483647 trips.*1048576 trips per loop") as e:
        sim.simulate(k, [np.zeros(1, np.int32)])
    assert e.value.limit == "loop_trips" and e.value.statement == "body[0]"
    assert time.perf_counter() - start < 1


def test_a_divergent_for_loop_past_the_trip_cap_is_refused() -> None:
    tid = ir.BuiltinValue(which=ir.Builtin.THREAD_IDX_X)
    k = store_kernel(ir.For(var="p", start=c32(0), stop=ir.Binary(
        op=ir.BinOp.MUL, a=tid, b=c32(100), type=I32), step=c32(1), body=()))
    with pytest.raises(LimitError, match="for some invocations"):
        sim.simulate(k, [np.zeros(1, np.int32)], block=32, limits=Limits(loop_trips=1000))
    sim.simulate(k, [np.zeros(1, np.int32)], block=32, limits=Limits(loop_trips=3100))


def test_the_trip_cap_can_be_raised_and_lowered() -> None:
    k = store_kernel(ir.For(var="p", start=c32(0), stop=c32(2000), step=c32(1), body=()))
    with pytest.raises(LimitError, match="2000 trips"):
        sim.simulate(k, [np.zeros(1, np.int32)], limits=Limits(loop_trips=1999))
    sim.simulate(k, [np.zeros(1, np.int32)], limits=Limits(loop_trips=2000))


def test_a_while_loop_stops_at_the_same_cap() -> None:
    k = store_kernel(ir.While(cond=ir.Const(value=True, type=ElemType.BOOL), body=()))
    with pytest.raises(LimitError, match="ran 500 times without ending") as e:
        sim.simulate(k, [np.zeros(1, np.int32)], limits=Limits(loop_trips=500))
    assert e.value.limit == "loop_trips"


def test_nested_loops_stop_at_the_launch_trip_budget() -> None:
    inner = ir.For(var="q", start=c32(0), stop=c32(1000), step=c32(1), body=())
    k = store_kernel(ir.For(var="p", start=c32(0), stop=c32(1000), step=c32(1),
                            body=(inner,)))
    with pytest.raises(LimitError, match="ran 5000 trips in all") as e:
        sim.simulate(k, [np.zeros(1, np.int32)], limits=Limits(trips=5000))
    assert e.value.limit == "trips" and e.value.statement == "body[0].body[0]"


def test_the_cli_simulate_of_an_enormous_reduction_finishes_with_one_line() -> None:
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--size", "1,1,3000000"])
    assert "3000000 trips" in line and "--max-loop-trips" in line


@pytest.mark.parametrize("field", ["invocations", "memory", "loop_trips", "trips"])
@pytest.mark.parametrize("value", [0, -1, 1.5, "10", True])
def test_a_limit_must_be_a_positive_integer(field: str, value: object) -> None:
    with pytest.raises(LaunchError, match=f"Limits.{field}"):
        Limits(**{field: value})  # type: ignore[arg-type]


def test_simulate_refuses_limits_of_another_type() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=c32(1)))
    with pytest.raises(LaunchError, match=r"sim\.launch\.Limits"):
        sim.simulate(k, [np.zeros(1, np.int32)], limits=5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- trusting input


def test_printers_and_the_simulator_refuse_ill_formed_ir_with_the_checker_s_reason() -> None:
    undefined = store_kernel(ir.Store(array="nowhere", index=c32(0), value=c32(1)))
    bad_index = store_kernel(ir.Store(array="out", index=ir.Const(value=1.5, type=F32),
                                      value=c32(1)))
    for k in (undefined, bad_index):
        with pytest.raises(IRError):
            sarek.emit(k, "cuda")
        with pytest.raises(IRError):
            sim.simulate(k, [np.zeros(1, np.int32)])
        with pytest.raises(IRError):
            sarek.simulate(k, [np.zeros(1, np.int32)], target="cuda")


def test_a_name_that_is_not_an_identifier_is_ill_formed() -> None:
    k = store_kernel(ir.Let(name="x; y", type=I32, value=c32(1)))
    with pytest.raises(IRError, match="is not a name"):
        sarek.emit(k, "cuda")


def test_a_kernel_block_that_cannot_be_launched_is_ill_formed() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=c32(1)))
    with pytest.raises(IRError, match="not a block of 1 to 1024"):
        ir_check.ensure_valid(k.model_copy(update={"block": (0, 1, 1)}))
    with pytest.raises(IRError, match="not a block"):
        ir_check.ensure_valid(k.model_copy(update={"block": (2048, 1, 1)}))


def test_simulate_refuses_what_is_not_a_kernel() -> None:
    with pytest.raises(LaunchError, match=r"sarek\.ir\.Kernel"):
        sim.simulate("kernel", [])  # type: ignore[arg-type]
    assert ir_check.check("kernel")[0].reason.startswith("expected a sarek.ir.Kernel")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- depth


def test_500_nested_binaries_through_the_api_are_refused_at_every_stage() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=sum_of(500)))
    problems = ir_check.check(k)
    assert [p.reason for p in problems] == [
        f"the expression in 'value' nests more than {MAX_EXPR_DEPTH} deep, the most the IR "
        "allows; compute it in several assignments"]
    with pytest.raises(IRError, match="nests more than 64 deep"):
        sim.simulate(k, [np.zeros(1, np.int32)])
    with pytest.raises(IRError, match="nests more than 64 deep"):
        sarek.emit(k, "cuda")
    with pytest.raises(NotAGemm, match="nests more than 64 deep"):
        recognize(k)


def test_the_deepest_expression_allowed_runs_and_round_trips() -> None:
    k = store_kernel(ir.Store(array="out", index=c32(0), value=sum_of(MAX_EXPR_DEPTH - 1)))
    assert ir_check.check(k) == []
    assert sim.simulate(k, [np.zeros(1, np.int32)])["out"][0] == MAX_EXPR_DEPTH
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    assert ir_check.check(store_kernel(ir.Store(array="out", index=c32(0),
                                          value=sum_of(MAX_EXPR_DEPTH))))


def test_the_deepest_nesting_allowed_round_trips_through_json() -> None:
    """Statements nested ``MAX_NESTING`` deep around an expression ``MAX_EXPR_DEPTH`` deep of
    calls (two JSON levels each): the deepest document a well-formed kernel makes."""
    e: ir.Expr = ir.Const(value=1.0, type=F32)
    for _ in range(MAX_EXPR_DEPTH - 1):
        e = ir.Call(fn=ir.MathFn.SQRT, args=(e,), type=F32)
    body: tuple[ir.Stmt, ...] = (ir.Store(array="out", index=c32(0), value=e),)
    for i in range(MAX_NESTING - 1):
        body = (ir.For(var=f"v{i}", start=c32(0), stop=c32(1), step=c32(1), body=body),)
    k = ir.Kernel(name="k", params=(ir.ArrayParam(name="out", elem=F32),), body=body)
    assert ir_check.check(k) == []
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    deeper = ir.Kernel(name="k", params=k.params, body=(
        ir.If(cond=ir.Const(value=True, type=ElemType.BOOL), then=body),))
    assert "statements nest 25 deep" in ir_check.check(deeper)[0].reason


def test_a_600_term_sum_in_the_dsl_is_a_dsl_error_at_its_line() -> None:
    src = "def k(a: Global[f32]):\n    a[0] = " + " + ".join(f"a[{i}]" for i in range(600)) \
        + "\n"
    with pytest.raises(DslError, match="nests more than 64 deep") as e:
        dsl(src)
    assert e.value.line == 2


# --------------------------------------------------------------------------- the DSL


def test_a_bad_array_annotation_under_future_annotations_is_a_dsl_error(tmp_path: Path
                                                                         ) -> None:
    path = tmp_path / "future.py"
    path.write_text(textwrap.dedent("""\
        from __future__ import annotations
        import sarek
        from sarek import Global, i32

        @sarek.kernel
        def k(a: Global[int], n: i32):
            a[0] = n
        """))
    line = one_error_line(["ir", str(path)])
    assert f"{path}:6: an array element type must be a sarek type" in line


def test_a_bad_array_annotation_evaluated_by_python_is_a_dsl_error() -> None:
    with pytest.raises(DslError, match="must be a sarek type"):
        sarek.Global[int]  # type: ignore[misc]


def test_a_module_level_list_named_in_a_kernel_is_a_dsl_error() -> None:
    src = "TABLE = [1, 2]\ndef k(a: Global[f32]):\n    a[0] = TABLE\n"
    with pytest.raises(DslError, match="is not a kernel value"):
        dsl(src)


def test_a_dsl_marker_called_outside_a_kernel_is_a_dsl_error_at_the_caller() -> None:
    with pytest.raises(DslError, match=r"inside a @sarek\.kernel function") as e:
        sarek.barrier()
    assert e.value.file == __file__


def test_numpy_dtype_of_what_is_not_an_element_type_is_a_dsl_error() -> None:
    with pytest.raises(DslError, match="'f31' is not an element type"):
        sarek.numpy_dtype("f31")  # type: ignore[arg-type]


def test_a_layout_recast_to_zero_bits_is_a_layout_error() -> None:
    with pytest.raises(LayoutError, match="positive bit counts"):
        S[(8, 4) : (4, 1)].recast(16, 0)
    with pytest.raises(LayoutError, match="positive integer"):
        S[(8, 4) : (4, 1)].rearrange("(a b) c -> a b c", a=0)


# --------------------------------------------------------------------------- launches


@pytest.mark.parametrize("value", ["4", (1, 2, 3, 4), (1.5,), None, [True]])
def test_dim3_refuses_what_is_not_1_to_3_integers(value: object) -> None:
    with pytest.raises(LaunchError, match="1 to 3 integers"):
        dim3(value)  # type: ignore[arg-type]


def test_a_launch_without_an_argument_names_it() -> None:
    run = example("gemm_f32").make(4, 4, 4)
    args = dict(run.args)
    del args["k"]
    with pytest.raises(LaunchError, match="no argument for 'k'"):
        replace(run, args=args).arg_list()


# --------------------------------------------------------------------------- region


def test_region_refuses_arguments_with_keys_that_are_not_names() -> None:
    run = example("gemm_f32").make(8, 8, 8)
    gemm = recognize(run.kernel)
    with pytest.raises(RegionError, match="no parameter 3"):
        region(gemm, run.grid, run.block, {**run.args, 3: 1, "zz": 2})  # type: ignore[dict-item]


@pytest.mark.parametrize("block", [(2**40, 1, 1), (16, 2**31, 1)])
def test_region_refuses_blocks_beyond_i32(block: tuple[int, int, int]) -> None:
    run = example("gemm_f32").make(8, 8, 8)
    with pytest.raises(RegionError, match="beyond i32"):
        region(recognize(run.kernel), run.grid, block, run.args)


def test_region_refuses_what_is_not_a_gemm() -> None:
    with pytest.raises(RegionError, match="Gemm"):
        region("gemm", (1, 1, 1), (1, 1, 1), {})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the CLI


def test_cli_inputs_that_do_not_exist(tmp_path: Path) -> None:
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--inputs",
                           str(tmp_path / "none.npz"), "--grid", "1", "--block", "1"])
    assert "not a readable .npz file (No such file or directory)" in line


def test_cli_inputs_that_are_not_a_zip(tmp_path: Path) -> None:
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--inputs",
                           str(EXAMPLES / "gemm_f32.py"), "--grid", "1", "--block", "1"])
    assert "not a readable .npz file" in line


def test_cli_inputs_of_pickled_objects(tmp_path: Path) -> None:
    np.savez(tmp_path / "obj.npz", a=np.array([object()], dtype=object))
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--inputs",
                           str(tmp_path / "obj.npz"), "--grid", "1", "--block", "1"])
    assert "not an .npz of NumPy arrays" in line


def test_cli_inputs_with_a_member_numpy_did_not_write(tmp_path: Path) -> None:
    import zipfile

    with zipfile.ZipFile(tmp_path / "raw.npz", "w") as z:
        z.writestr("a", b"not an array")
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--inputs",
                           str(tmp_path / "raw.npz"), "--grid", "1", "--block", "1"])
    assert "member 'a' is not a NumPy array" in line


def test_cli_kernel_file_name_too_long_for_the_os() -> None:
    line = one_error_line(["ir", "x" * 300])
    assert line.startswith("sarek: error: cannot read 'xxx")


def test_cli_out_in_a_missing_directory(tmp_path: Path) -> None:
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), "--size", "4,4,4",
                           "--out", str(tmp_path / "none" / "out.npz")])
    assert line.startswith(f"sarek: error: cannot write {tmp_path / 'none' / 'out.npz'}")


def test_cli_kernel_file_with_a_syntax_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.py"
    path.write_text("import sarek\n\ndef k(:\n")
    assert one_error_line(["simulate", str(path)]) == \
        f"sarek: error: {path}:3: not valid Python: invalid syntax"


def test_cli_kernel_file_whose_code_raises(tmp_path: Path) -> None:
    path = tmp_path / "raises.py"
    path.write_text("import sarek\nraise RuntimeError('boom')\n")
    line = one_error_line(["ir", str(path)])
    assert f"importing it raised RuntimeError: boom at {path}:2" in line


@pytest.mark.parametrize("size", [["--size", "-1,2,3"], ["--size=-1,2,3"], ["--size", "-5"]])
def test_cli_negative_sizes_are_refused_as_values(size: list[str]) -> None:
    line = one_error_line(["simulate", str(EXAMPLES / "gemm_f32.py"), *size])
    assert "argument --size: expected integers from 0" in line


def test_cli_rewrite_of_the_ldmatrix_example_is_refused_with_the_reason() -> None:
    line = one_error_line(["rewrite", str(EXAMPLES / "ldmatrix_interleaved.py")])
    assert "a GEMM nest keeps its state in one scalar accumulator" in line


def test_cli_simulates_the_ldmatrix_example_through_its_make_of_no_arguments() -> None:
    code, out, err = run_cli(["simulate", str(EXAMPLES / "ldmatrix_interleaved.py")])
    assert code == 0 and err == "" and "out: 384 x uint32" in out


def test_cli_usage_errors_are_one_line() -> None:
    assert one_error_line(["simulate"]).startswith(
        "sarek simulate: error: the following arguments are required: kernel")
    assert "invalid choice" in one_error_line(["nope"])


def test_cli_a_make_that_returns_something_else(tmp_path: Path) -> None:
    path = tmp_path / "badmake.py"
    path.write_text("import sarek\nfrom sarek import *\n@sarek.kernel\n"
                    "def k(a: Global[f32]):\n    a[0] = 1.0\ndef make(m, n, k):\n"
                    "    return [m, n, k]\n")
    assert "make() returned a list, not a sarek.launch.Launch" in one_error_line(
        ["simulate", str(path)])


def test_cli_a_make_that_raises_is_the_module_s_error(tmp_path: Path) -> None:
    path = tmp_path / "raising.py"
    gemm = (EXAMPLES / "gemm_f32.py").read_text().split("\ndef make")[0]
    path.write_text(gemm + "\ndef make(m, n, k):\n    return {}['missing']\n")
    line = one_error_line(["simulate", str(path)])
    assert f"{path}: make raised KeyError: 'missing' at {path}:" in line
    line = one_error_line(["analyze", str(path)])  # analyze calls make() itself
    assert f"the kernel file's code raised KeyError: 'missing' at {path}:" in line


def test_cli_limits_can_be_raised_on_the_command_line() -> None:
    argv = ["simulate", str(EXAMPLES / "gemm_f32.py"), "--size", "4,4,4"]
    assert "--max-invocations" in one_error_line([*argv, "--max-invocations", "8"])
    assert run_cli([*argv, "--max-invocations", "256"])[0] == 0


# --------------------------------------------------------------------------- the recognizer


ALIASED = """\
def k(a: Global[f32], b: Global[f32], m: i32, n: i32, kk: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(kk):
            acc += a[row * kk + p] * b[p * n + col]
        {out}[row * n + col] = acc
"""


@pytest.mark.parametrize(("out", "role"), [("b", "B"), ("a", "A")])
def test_a_gemm_whose_output_is_also_an_operand_is_refused(out: str, role: str) -> None:
    with pytest.raises(NotAGemm, match=f"the output {out} is also the operand {role} of the "
                       "product.*race") as e:
        recognize(dsl(ALIASED.format(out=out)))
    assert e.value.line == 8


def test_every_error_above_is_a_sarek_error() -> None:
    for error in (DslError, IRError, LaunchError, LimitError, NotAGemm, RegionError,
                  LayoutError):
        assert issubclass(error, SarekError)
