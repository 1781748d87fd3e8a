"""Metal Shading Language as printed, checked as far as Linux allows: every emitted kernel
(every example as written and under every lowering Metal prints, and the arithmetic probes)
parses and type-checks with clang as C++ against the stand-in <metal_stdlib>, which declares
exactly what the printer uses. That check is a syntax and type check, not Apple's compiler:
the printed simdgroup calls are also read back from the text and compared with the lowered
kernel's statements, which catches the printer errors that types cannot (a lost transpose,
swapped operands). Planted printer errors are caught by one or the other."""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from collections.abc import Iterator

import numpy as np
import pytest
from arith_cases import binary_kernel, math_kernel
from hypothesis import given
from hypothesis import strategies as st
from test_metal_lower import CASES, EXAMPLES, f16_launch, frag_kernel

import sarek
from backends.metal import lower as metal_lower
from backends.metal.check import STANDIN, MetalCheckError, clang_unavailable, syntax_check
from backends.registry import target
from sarek import ir
from sarek.ir import Builtin, ElemType, FragLayout
from sarek.ir_walk import walk
from sarek.loader import load_module
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering

METAL = target("metal")
# the printer module (the package's ``emit`` is its function of that name)
metal_emit = importlib.import_module("backends.metal.emit")
MISSING = clang_unavailable()
# On CI, `make test` installs clang as root: a missing clang there is a failure, not a skip.
needs_clang = pytest.mark.skipif(MISSING is not None and not os.environ.get("CI"),
                                 reason=f"Metal text cannot be checked here: {MISSING}")

ORIGINALS = [(p.stem, load_module(p).make(70, 45, 33).kernel) for p in EXAMPLES]
TYPES = [t for t in ElemType if t is not ElemType.F64]


def tid() -> ir.Expr:
    return ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def cast_kernel(src: ElemType) -> ir.Kernel:
    """Every conversion from ``src`` to the other types Metal has."""
    a = ir.Load(array="a", index=tid(), type=src)
    others = [t for t in TYPES if t is not src]
    body = tuple(ir.Store(array=f"out_{t.value}", index=tid(), value=ir.Cast(x=a, type=t))
                 for t in others)
    params = (ir.ArrayParam(name="a", elem=src, readonly=True),
              *(ir.ArrayParam(name=f"out_{t.value}", elem=t) for t in others))
    return ir.Kernel(name=f"cast_{src.value}", params=params, body=body)


def oddments_kernel() -> ir.Kernel:
    """What the other probes leave out: non-finite and 16-bit constants,
    bitcasts of 16-bit floats, a bool scalar, every builtin, a barrier, a shared array."""
    f32, i32 = ElemType.F32, ElemType.I32
    x = ir.Load(array="x", index=tid(), type=f32)
    body: list[ir.Stmt] = [
        ir.ArrayDecl(name="s", elem=ElemType.F16, size=128, space=ir.MemSpace.SHARED),
        ir.Store(array="s", index=tid(), value=ir.Const(value=0.1, type=ElemType.F16)),
        ir.Barrier(),
        ir.Store(array="x", index=tid(), value=ir.Binary(
            op=ir.BinOp.DIV, a=x, b=ir.Const(value=float("nan"), type=f32), type=f32)),
        ir.Store(array="bits", index=tid(), value=ir.Bitcast(
            x=ir.Load(array="s", index=tid(), type=ElemType.F16), type=ElemType.U16)),
        ir.Store(array="y", index=tid(), value=ir.Bitcast(
            x=ir.Const(value=float("-inf"), type=ElemType.BF16), type=ElemType.I16)),
        ir.If(cond=ir.Var(name="flag", type=ElemType.BOOL), then=tuple(
            ir.Store(array="ids", index=ir.Binary(op=ir.BinOp.ADD, a=tid(), b=ir.Const(
                value=128 * k, type=i32), type=i32), value=ir.BuiltinValue(which=b))
            for k, b in enumerate(Builtin))),
    ]
    params = (ir.ArrayParam(name="x", elem=f32), ir.ArrayParam(name="bits", elem=ElemType.U16),
              ir.ArrayParam(name="y", elem=ElemType.I16), ir.ArrayParam(name="ids", elem=i32),
              ir.ScalarParam(name="flag", elem=ElemType.BOOL))
    return ir.Kernel(name="oddments", params=params, body=tuple(body))


def corpus() -> Iterator[tuple[str, ir.Kernel]]:
    """Every kernel the suite prints for Metal."""
    yield from ((f"{name}-original", k) for name, k in ORIGINALS)
    yield from ((name, rw.kernel) for name, rw in CASES)
    for t in TYPES:
        if t is not ElemType.BOOL and not t.is_storage_only:
            yield f"binary-{t}", binary_kernel(t)[0]
        yield f"cast-{t}", cast_kernel(t)
    yield "math-f32", math_kernel(ElemType.F32)
    yield "oddments", oddments_kernel()


CORPUS = list(corpus())
TEXTS = {name: sarek.emit(kernel, "metal") for name, kernel in CORPUS}


# ----------------------------------------------------------------- the clang check


@needs_clang
@pytest.mark.parametrize("name", list(TEXTS))
def test_every_emitted_kernel_passes_the_clang_check(name: str) -> None:
    syntax_check(TEXTS[name], f"{name}.metal")


@needs_clang
@pytest.mark.parametrize(("old", "new", "why"), [
    ("threadgroup_barrier(", "barrier(", "undeclared identifier 'barrier'"),
    ("= half(sk_cs[", "= (sk_cs[", "no viable overloaded '='"),  # float into half
    ("[[buffer(0)]]", "[[buffer(0, 1)]]", "too many arguments"),
    ("constant int& me ", "constant int& me_ ", "undeclared identifier 'me'"),
    ("simdgroup_float8x8 sk_acc0_0_0;", "simdgroup_float8x4 sk_acc0_0_0;", "unknown type"),
], ids=["barrier", "conversion", "attribute", "argument", "matrix"])
def test_the_check_rejects_what_metal_does_not_declare(old: str, new: str, why: str) -> None:
    good = TEXTS["gemm_f16-F16_operands"]
    assert old in good
    with pytest.raises(MetalCheckError, match=r"clang rejected bad\.metal") as e:
        syntax_check(good.replace(old, new), "bad.metal")
    assert why in e.value.reason


def test_the_stand_in_declares_only_what_the_printer_uses() -> None:
    header = (STANDIN / "metal_stdlib").read_text()
    code = "\n".join(line.split("//")[0] for line in header.splitlines())
    declared = set(re.findall(r"\b(\w+)\s*\(", code)) | set(
        re.findall(r"(?:typedef [^;]* |struct |#define )(\w+)", code))
    helpers = {"annotate", "static_assert", "sizeof", "reinterpret_cast", "x_", "y_",
               "bits_", "SAREK_METAL_STANDIN", "operator", "index",
               "simdgroup_matrix",  # the template behind the simdgroup_*8x8 names
               "vec", "elements_"}  # the type thread_elements() returns
    text = "\n".join(TEXTS.values())
    unused = sorted(n for n in declared - helpers if not re.search(rf"\b{n}\b", text))
    assert unused == []


def test_without_clang_the_check_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAREK_CLANG", "no-such-clang-here")
    with pytest.raises(MetalCheckError, match="no clang on the PATH"):
        syntax_check("", "k.metal")


# ----------------------------------------------------------------- what the text says


CALL = re.compile(r"(simdgroup_load|simdgroup_store|simdgroup_multiply_accumulate|"
                  r"make_filled_simdgroup_matrix)\b[^(]*\((.*)\);$")
ELEMENT_ADD = re.compile(r"^(\w+)\.thread_elements\(\)\[(\d+)\] = \((\w+)\.thread_elements\(\)"
                         r"\[(\d+)\] ([+-]) (\w+)\.thread_elements\(\)\[(\d+)\]\);$")


def printed_calls(text: str) -> list[tuple[str, ...]]:
    """The simdgroup calls of a text, in order: (call, first argument(s) that name fragments
    and arrays, transpose flag)."""
    out: list[tuple[str, ...]] = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("simdgroup_") and "8x8" in line.split()[0]:
            out.append(("decl", line.split()[0], line.split()[1].rstrip(";")))
            continue
        if added := ELEMENT_ADD.match(line):
            out.append(("add", *added.groups()))
            continue
        m = CALL.search(line)
        if m is None:
            continue
        call, args = m.groups()
        parts = [a.strip() for a in args.split(",")]
        if call == "make_filled_simdgroup_matrix":
            out.append(("fill", line.split(" = ")[0]))
        elif call == "simdgroup_multiply_accumulate":
            out.append(("mma", *parts))
        else:
            out.append((call, parts[0], parts[1].split(" + ")[0], parts[-1]))
    return out


def expected_calls(kernel: ir.Kernel) -> list[tuple[str, ...]]:
    """What the simdgroup calls must be, read from the lowered kernel's statements."""
    names = {ElemType.F16: "half", ElemType.BF16: "bfloat", ElemType.F32: "float"}
    out: list[tuple[str, ...]] = []
    for s in walk(kernel.body):
        match s:
            case ir.FragDecl(name=n, elem=e):
                out.append(("decl", f"simdgroup_{names[e]}8x8", n))
            case ir.FragFill(frag=n):
                out.append(("fill", n))
            case ir.FragLoad() | ir.FragStore():
                call = "simdgroup_load" if isinstance(s, ir.FragLoad) else "simdgroup_store"
                out.append((call, s.frag, s.array,
                            "true" if s.layout is FragLayout.COL else "false"))
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                out.append(("mma", d, a, b, c))
            case ir.FragAdd(d=d, a=a, b=b, subtract=subtract):  # a line per element
                op = "-" if subtract else "+"
                out += [("add", d, str(e), a, str(e), op, b, str(e))
                        for e in range(metal_lower.THREAD_ELEMENTS)]
    return out


def test_the_printed_simdgroup_calls_are_the_lowered_statements() -> None:
    for name, rw in CASES:
        lowered = metal_lower.lower(rw.kernel)
        calls = expected_calls(lowered)
        assert calls and printed_calls(TEXTS[name]) == calls, name


def test_a_fragment_add_is_printed_for_each_of_a_threads_elements() -> None:
    name, rw = next((n, rw) for n, rw in CASES if n.endswith("Bf16x3_operands"))
    adds = sum(isinstance(s, ir.FragAdd) for s in walk(rw.kernel.body))
    lines = [line.strip() for line in TEXTS[name].splitlines()]
    assert adds and sum(bool(ELEMENT_ADD.match(line)) for line in lines) == 2 * adds


def test_a_column_major_fragment_loads_transposed() -> None:
    kernel = frag_kernel(ElemType.F16, layout=FragLayout.COL)
    text = sarek.emit(kernel, "metal")
    assert "simdgroup_load(fa, s + 0, (ulong)(8), ulong2(0, 0), true);" in text
    assert "simdgroup_load(fb, s + 0, (ulong)(8), ulong2(0, 0), false);" in text


def test_emit_prints_the_lowered_kernel() -> None:
    name, rw = CASES[0]
    assert metal_emit.print_kernel(metal_lower.lower(rw.kernel)) == TEXTS[name]
    assert metal_emit.emit(rw.kernel) == TEXTS[name]


def test_the_text_keeps_the_no_contraction_promise_in_the_source() -> None:
    for text in TEXTS.values():
        assert "#pragma METAL fp contract(off)" in text
        assert "#pragma METAL fp math_mode(safe)" in text
    math = TEXTS["math-f32"]
    for fn in ("precise::sqrt(", "precise::fmin(", "fma("):
        assert fn in math
    assert "precise::divide(" in TEXTS["binary-f32"]


def test_buffers_are_numbered_in_parameter_order_and_read_only_ones_are_const() -> None:
    text = TEXTS["cast-f32"]
    assert "device const float* a [[buffer(0)]]" in text
    assert "device half* out_f16 [[buffer(" in text
    indices = [int(i) for i in re.findall(r"\[\[buffer\((\d+)\)\]\]", text)]
    assert indices == list(range(len(indices)))
    assert "constant uchar& flag [[buffer(4)]]" in TEXTS["oddments"]


def test_only_the_thread_positions_a_kernel_reads_are_arguments() -> None:
    original = TEXTS["gemm_f32-original"]
    assert "[[thread_position_in_threadgroup]]" in original
    assert "simdgroup_index_in_threadgroup" not in original
    every = TEXTS["oddments"]
    for _, attribute in metal_emit.POSITIONS.values():
        assert f"[[{attribute}]]" in every


def test_bool_arrays_travel_as_uchar_and_64_bit_literals_as_ul() -> None:
    assert "device uchar* flags" in TEXTS["binary-i32"]
    assert "ULL" not in "\n".join(TEXTS.values())
    assert re.search(r"\d+UL\b", TEXTS["cast-f32"])  # the saturating f32 -> u64 helper


def test_non_finite_and_16_bit_constants_are_exact() -> None:
    text = TEXTS["oddments"]
    assert "as_type<float>(2143289344u)" in text  # NaN
    assert "half(0.099975586f)" in text  # 0.1 rounded to f16 once, then printed exactly


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_float_literals_read_back_as_their_value(x: float) -> None:
    literal = metal_emit._float_literal(x)
    assert literal.endswith("f")
    assert np.float32(float(literal[:-1])).view(np.uint32) == np.float32(x).view(np.uint32)


# ----------------------------------------------------------------- planted printer errors


F16_CASE = dict(CASES)["gemm_f16-F16_operands"]


def rewrite_text() -> str:
    text: str = metal_emit.emit(F16_CASE.kernel)
    return text


def reads_back() -> bool:
    return printed_calls(rewrite_text()) == expected_calls(metal_lower.lower(F16_CASE.kernel))


def planted(monkeypatch: pytest.MonkeyPatch, **changes: object) -> None:
    monkeypatch.setattr(metal_emit, "DIALECT", dataclasses.replace(metal_emit.DIALECT,
                                                                    **changes))


def hook_with(old: str, new: str) -> object:
    def hook(p: object, s: ir.Stmt) -> list[str] | None:
        lines: list[str] | None = metal_emit._hook(p, s)
        return None if lines is None else [line.replace(old, new) for line in lines]
    return hook


@needs_clang
def test_a_wrong_matrix_type_is_caught_by_clang(monkeypatch: pytest.MonkeyPatch) -> None:
    planted(monkeypatch, stmt_hook=hook_with("simdgroup_half8x8", "simdgroup_float8x8"))
    with pytest.raises(MetalCheckError, match="simdgroup_load"):
        syntax_check(rewrite_text(), "planted.metal")


@needs_clang
def test_a_missing_widening_of_half_is_caught_by_clang(monkeypatch: pytest.MonkeyPatch) -> None:
    planted(monkeypatch, casts={**metal_emit.CASTS, (ElemType.F16, ElemType.F32): "{x}"})
    text = metal_emit.emit(ORIGINALS[[n for n, _ in ORIGINALS].index("gemm_f16")][1])
    with pytest.raises(MetalCheckError, match="half"):
        syntax_check(text, "planted.metal")


@needs_clang
def test_storing_through_a_constant_scalar_is_caught_by_clang() -> None:
    text = TEXTS["gemm_f32-original"].replace("{\n", "{\n    m = 0;\n", 1)
    with pytest.raises(MetalCheckError, match=r"read-only|const"):
        syntax_check(text, "planted.metal")


def test_a_lost_transpose_is_caught_by_reading_the_text_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = frag_kernel(ElemType.F16, layout=FragLayout.COL)
    planted(monkeypatch, stmt_hook=hook_with("true);", "false);"))
    text = metal_emit.emit(kernel)
    assert printed_calls(text) != expected_calls(metal_lower.lower(kernel))


def test_swapped_multiply_operands_are_caught_by_reading_the_text_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert reads_back()

    def swapped(p: object, s: ir.Stmt) -> list[str] | None:
        if isinstance(s, ir.FragMulAdd):
            return [f"simdgroup_multiply_accumulate({s.d}, {s.b}, {s.a}, {s.c});"]
        lines: list[str] | None = metal_emit._hook(p, s)
        return lines

    planted(monkeypatch, stmt_hook=swapped)
    assert not reads_back()


def test_an_add_of_the_wrong_element_is_caught_by_reading_the_text_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, rw = next((n, rw) for n, rw in CASES if n.endswith("Bf16x3_operands"))
    want = expected_calls(metal_lower.lower(rw.kernel))
    assert printed_calls(metal_emit.emit(rw.kernel)) == want
    planted(monkeypatch, stmt_hook=hook_with("thread_elements()[1] +", "thread_elements()[0] +"))
    assert printed_calls(metal_emit.emit(rw.kernel)) != want


def test_a_kernel_metal_refuses_is_never_printed() -> None:
    rw16 = rewrite_launch(f16_launch(), lowering=Lowering.F16_OPERANDS, frag=16).launch
    with pytest.raises(sarek.SarekError, match="8x8"):
        metal_emit.print_kernel(rw16.kernel)
