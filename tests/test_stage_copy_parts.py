"""Staged copies that land a part of each element (``StageCopy.part``): the value each part is
(``sarek.stage_copy.part``, the same terms and planes the rewrite stages), what the simulator
and every target's lowering land, and what the checker refuses (``specs/ir.md``, "Staged
copies")."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sarek
from backends.cuda import lower as cuda_lower
from sarek import ir, ir_check
from sarek.ir import Builtin, ElemType, MemSpace
from sarek.ir_build import add, const, mul, var
from sarek.ir_walk import walk
from sarek.matrix_scheme import SCHEMES, Lowering
from sarek.stage_copy import part

E = ElemType
ROWS, COLS, PITCH, THREADS = 8, 16, 24, 64
TID = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def kernel(src: ElemType, into: ElemType, index: int | None, fill: float = -0.0
           ) -> ir.Kernel:
    """Copies an 8x16 tile of ``a`` (rows of ``lda``, ``rl`` x ``cl`` of it inside) landing
    part ``index`` of each element in ``s`` (of ``into``), then reads ``s`` back into ``o``."""
    copy_part = None if index is None else ir.CopyPart(into=into, index=index)
    copy = ir.StageCopy(dst="s", dst_offset=const(0), dst_pitch=PITCH, src="a",
                        src_offset=const(0), src_row_stride=var("lda"),
                        src_col_stride=const(1), rows=ROWS, cols=COLS, row_limit=var("rl"),
                        col_limit=var("cl"), fill=ir.Const(value=fill, type=src),
                        part=copy_part)
    e = var("e")
    row, col = ir.Binary(op=ir.BinOp.DIV, a=e, b=const(COLS), type=E.I32), ir.Binary(
        op=ir.BinOp.REM, a=e, b=const(COLS), type=E.I32)
    back = ir.For(var="q", start=const(0), stop=const(ROWS * COLS // THREADS), step=const(1),
                  body=(ir.Let(name="e", type=E.I32, value=add(mul(var("q"), const(THREADS)),
                                                               TID)),
                        ir.Store(array="o", index=e, value=ir.Load(
                            array="s", index=add(mul(row, const(PITCH)), col), type=into))))
    params = (ir.ArrayParam(name="a", elem=src, readonly=True),
              ir.ArrayParam(name="o", elem=into),
              *(ir.ScalarParam(name=x, elem=E.I32) for x in ("lda", "rl", "cl")))
    decl = ir.ArrayDecl(name="s", elem=into, size=ROWS * PITCH, space=MemSpace.SHARED,
                        align=16)
    return ir.Kernel(name="k", params=params, body=(
        decl, copy, ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(), back),
        block=(THREADS, 1, 1))


def landed(k: ir.Kernel, a: np.ndarray, rl: int = ROWS, cl: int = COLS,
           target: str | None = None) -> np.ndarray:
    into = next(p.elem for p in k.params if isinstance(p, ir.ArrayParam) and p.name == "o")
    out = np.zeros(ROWS * COLS, sarek.dtypes.numpy_dtype(into))
    got = sarek.simulate(k, {"a": a, "o": out, "lda": COLS, "rl": rl, "cl": cl},
                         grid=(1, 1, 1), block=(THREADS, 1, 1), target=target)["o"]
    return got.view(f"u{got.itemsize}")


def as_part(values: np.ndarray, src: ElemType, into: ElemType, index: int) -> np.ndarray:
    """Part ``index`` of each value, computed by the simulator from the expression alone."""
    k = ir.Kernel(name="p", params=(ir.ArrayParam(name="x", elem=src, readonly=True),
                                    ir.ArrayParam(name="y", elem=into)),
                  body=(ir.Store(array="y", index=TID, value=part(
                      ir.Load(array="x", index=TID, type=src), index, into)),))
    out = np.zeros(values.size, sarek.dtypes.numpy_dtype(into))
    got = sarek.simulate(k, {"x": values, "y": out}, grid=(1, 1, 1),
                         block=(values.size, 1, 1))["y"]
    return got.view(f"u{got.itemsize}")


def f32_values() -> np.ndarray:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(2 * ROWS * COLS) * 2.0 ** rng.integers(-30, 30, 2 * ROWS * COLS))
    x[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e-40, 3.4e38]
    return x.astype(np.float32)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a_copy_lands_each_bf16_term_of_an_f32(index: int) -> None:
    a = f32_values()
    tile = a[:ROWS * COLS]  # rows of COLS consecutive elements
    assert np.array_equal(landed(kernel(E.F32, E.BF16, index), a),
                          as_part(tile, E.F32, E.BF16, index))


@pytest.mark.parametrize("index", [0, 1, 2, 3])
def test_a_copy_lands_each_byte_plane_of_an_i32(index: int) -> None:
    a = np.random.default_rng(4).integers(-2**31, 2**31, 2 * ROWS * COLS).astype(np.int32)
    want = (a[:ROWS * COLS].view(np.uint32) >> (8 * index)) & 255
    assert np.array_equal(landed(kernel(E.I32, E.U8, index, fill=0), a), want)


def test_outside_its_limits_a_copy_lands_the_part_of_its_fill() -> None:
    a = f32_values()
    got = landed(kernel(E.F32, E.BF16, 1), a, rl=5, cl=9).reshape(ROWS, COLS)
    fill_mid = as_part(np.array([-0.0], np.float32), E.F32, E.BF16, 1)[0]
    assert (got[5:, :] == fill_mid).all() and (got[:, 9:] == fill_mid).all()


@pytest.mark.parametrize("target", ["cuda", "opencl", "metal", "spirv"])
def test_every_target_lowering_lands_what_the_neutral_copy_does(target: str) -> None:
    a = f32_values()
    k = kernel(E.F32, E.BF16, 2)
    assert np.array_equal(landed(k, a, 6, 11, target), landed(k, a, 6, 11))


def test_cuda_copies_parts_element_by_element() -> None:
    lowered = cuda_lower.lower(kernel(E.F32, E.BF16, 0))
    assert not any(isinstance(s, ir.CpAsync) for s in walk(lowered.body))


@given(st.floats(min_value=2.0 ** -100, max_value=2.0 ** 100, width=32), st.booleans())
@settings(max_examples=200, deadline=None)
def test_the_three_bf16_terms_of_an_f32_add_up_to_it(x: float, negative: bool) -> None:
    value = np.array([-x if negative else x], np.float32)
    terms = [as_part(value, E.F32, E.BF16, i).astype(np.uint32) << 16 for i in range(3)]
    total = sum(t.view(np.float32).astype(np.float64) for t in terms)
    assert total[0] == np.float64(value[0])


@pytest.mark.parametrize("lowering", [Lowering.BF16X3_OPERANDS, Lowering.INT32_BYTE_PLANES])
def test_the_parts_are_the_terms_the_rewrite_stages(lowering: Lowering) -> None:
    from sarek.rewrite.copies import Copies

    scheme = SCHEMES[lowering]
    src = E.F32 if scheme.operand is E.BF16 else E.I32
    x = var("x", src)
    rewrite = Copies.__new__(Copies)
    rewrite.scheme = scheme
    assert rewrite.convert(x) == [(t, part(x, i, scheme.operand))
                                  for i, t in enumerate(scheme.terms)]


def problems(k: ir.Kernel) -> str:
    return "\n".join(str(p) for p in ir_check.check(k))


def test_a_part_of_another_type_than_the_destinations_is_refused() -> None:
    k = kernel(E.F32, E.BF16, 0)
    wrong = k.model_copy(update={"body": tuple(
        s.model_copy(update={"part": ir.CopyPart(into=E.F16, index=0)})
        if isinstance(s, ir.StageCopy) else s for s in k.body)})
    assert "lands parts of type f16" in problems(wrong)


def test_a_split_the_ir_does_not_define_is_refused() -> None:
    assert "not f32 into u8" in problems(kernel(E.F32, E.U8, 0, fill=0))


def test_a_part_past_the_last_is_refused() -> None:
    assert "no part 3" in problems(kernel(E.F32, E.BF16, 3))
    assert "no part 4" in problems(kernel(E.I32, E.U8, 4, fill=0))


def test_a_copy_without_a_part_between_types_is_refused() -> None:
    assert "moves elements unchanged" in problems(kernel(E.F32, E.BF16, None))


def test_a_copy_of_parts_round_trips_through_json() -> None:
    k = kernel(E.F32, E.BF16, 1)
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    assert not problems(k)
