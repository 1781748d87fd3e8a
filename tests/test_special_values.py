"""What each float lowering does with infinities, NaN, signed zeros, subnormals and values beyond
its operand type's range (``specs/matrix-pattern-rewrite.md``, "Special values").

Expected values come from NumPy on the operands as the lowering's stated conversion leaves them
(float64 products of one reduction step are exact), or from the original kernel itself where the
lowering promises the original's value.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from conftest import example
from gemm_gen import GemmSpec, gemm_specs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_matrix_rewrite import bits, original, rewritten
from test_matrix_rewrite_canaries import generated

from sarek.launch import Launch
from sarek.matrix_scheme import Lowering

F32_MAX = float(np.finfo(np.float32).max)
FLOAT_LOWERINGS = (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS)


def gemm(a: np.ndarray, b: np.ndarray) -> Launch:
    """``examples/gemm_f32.py`` launched on the f32 matrices ``a`` (m x k) and ``b`` (k x n)."""
    (m, k), n = a.shape, b.shape[1]
    run: Launch = example("gemm_f32").make(m, n, k)
    return replace(run, args={**run.args, "a": a.astype(np.float32).ravel(),
                              "b": b.astype(np.float32).ravel()})


def same_values(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal bits, where any NaN equals any NaN (the payload is the arithmetic's, not the
    lowering's)."""
    return bool(np.all((bits(got) == bits(want)) | (np.isnan(got) & np.isnan(want))))


# --------------------------------------------------------------------------- Bf16x3


@pytest.mark.parametrize("target", [None, "cuda"])
def test_bf16x3_keeps_an_infinite_operand_infinite(target: str | None) -> None:
    a = np.arange(1, 17, dtype=np.float32).reshape(4, 4) / 8
    a[1, 2] = np.inf
    b = np.arange(-8, 8, dtype=np.float32).reshape(4, 4) / 4 + 1 / 8  # no zero
    run = gemm(a, b)
    got = (rewritten(run, Lowering.BF16X3_OPERANDS) if target is None
           else _on(run, target)).reshape(4, 4)
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(np.sign(got[1]), np.sign(want[1]))
    assert not np.isnan(got).any()


def _on(run: Launch, target: str) -> np.ndarray:
    """C after the Bf16x3 rewrite lowered for ``target`` and simulated as printed."""
    from sarek.matrix_rewrite import rewrite_launch

    done = rewrite_launch(run, lowering=Lowering.BF16X3_OPERANDS)
    return done.launch.simulate(target=target)["c"]


@pytest.mark.parametrize(("placed", "want"), [
    ({(0, 0): np.inf}, np.inf),
    ({(0, 0): -np.inf}, -np.inf),
    ({(0, 0): np.nan}, np.nan),
    ({(0, 0): np.inf, (0, 1): -np.inf}, np.nan),  # inf - inf in the sum
], ids=["inf", "-inf", "nan", "inf-inf"])
@pytest.mark.parametrize("exact", [False, True], ids=["six products", "exact hi·hi"])
def test_bf16x3_gives_the_originals_special_sums(placed: dict[tuple[int, int], float],
                                                  want: float, exact: bool) -> None:
    a = np.ones((3, 5), np.float32)
    for at, value in placed.items():
        a[at] = value
    b = np.full((5, 2), 0.75, np.float32)
    out = rewritten(gemm(a, b), Lowering.BF16X3_OPERANDS, depth=exact).reshape(3, 2)
    assert same_values(out[0], np.full(2, want, np.float32))
    assert np.array_equal(out[1:], np.full((2, 2), 3.75, np.float32))


@pytest.mark.parametrize("exact", [False, True], ids=["six products", "exact hi·hi"])
def test_bf16x3_of_an_infinity_times_zero_is_nan(exact: bool) -> None:
    a = np.array([[np.inf, 1.0]], np.float32)
    b = np.array([[0.0], [2.0]], np.float32)
    assert np.isnan(rewritten(gemm(a, b), Lowering.BF16X3_OPERANDS, depth=exact)).all()


@pytest.mark.parametrize("target", [None, "cuda"])
def test_bf16x3_of_operands_near_the_f32_maximum_is_the_originals_value(
        target: str | None) -> None:
    # 3.4e38 rounds to bf16 infinity; halved it is an ordinary finite product
    a = np.array([[3.4e38, F32_MAX], [-F32_MAX, 1.0]], np.float32)
    b = np.array([[0.5, 0.25], [0.0, 0.5]], np.float32)
    run = gemm(a, b)
    got = rewritten(run, Lowering.BF16X3_OPERANDS) if target is None else _on(run, target)
    assert np.isfinite(got).all()
    assert same_values(got, original(run))


@pytest.mark.parametrize("exact", [False, True], ids=["six products", "exact hi·hi"])
def test_bf16x3_of_products_beyond_the_f32_range_is_the_originals_infinity(exact: bool) -> None:
    a = np.array([[1e30, 1e30], [1e30, -1e30]], np.float32)
    b = np.array([[1e30, 1.0], [1e30, 1.0]], np.float32)
    run = gemm(a, b)
    got = rewritten(run, Lowering.BF16X3_OPERANDS, depth=exact)
    assert same_values(got, original(run))
    assert got[0] == np.inf and np.isnan(got[2])


SPECIAL = st.sampled_from([np.inf, -np.inf, np.nan, 0.0, -0.0])


@st.composite
def specials_among_small_integers(draw: st.DrawFn) -> tuple[GemmSpec, Launch]:
    """A generated f32 GEMM on small integers, with a few infinities, NaNs and signed zeros
    written over its A and B."""
    spec = draw(gemm_specs("f32"))
    run = generated(spec)
    args = dict(run.args)
    for name in ("a", "b"):
        x = args[name].copy()
        for _ in range(draw(st.integers(0, 3))):
            if x.size:
                x[draw(st.integers(0, x.size - 1))] = draw(SPECIAL)
        args[name] = x
    return spec, replace(run, args=args)


@settings(deadline=None, max_examples=20,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(specials_among_small_integers(), st.sampled_from(FLOAT_LOWERINGS),
       st.sampled_from([(32, 16), (64, 8)]))
def test_special_operands_give_the_originals_values(
        case: tuple[GemmSpec, Launch], lowering: Lowering, config: tuple[int, int]) -> None:
    """Small integers, ±inf, NaN and ±0 convert exactly under every float lowering, so each
    rewrite gives the original's values: infinities and NaNs where it has them."""
    _, run = case
    with np.errstate(invalid="ignore", over="ignore"):
        assert same_values(rewritten(run, lowering, *config), original(run))


# --------------------------------------------------------------------------- F16 and Bf16


def one_product(a: float, b: float, lowering: Lowering) -> np.float32:
    """The rewrite's C for the 1x1x1 GEMM ``0.0 + a * b`` (the kernel's sum starts at +0.0)."""
    out = rewritten(gemm(np.array([[a]]), np.array([[b]])), lowering)
    return np.float32(out[0])


@pytest.mark.parametrize(("a", "b"), [
    (70000.0, 1.0),        # beyond f16's largest finite: +inf
    (-65520.0, 0.5),       # rounds up to -inf
    (65504.0, -1.0),       # f16's largest finite
    (1e-6, 3.0),           # an f16 subnormal
    (1e-8, 2.0),           # below half of f16's smallest subnormal: 0
    (np.nan, 1.0),
    (-0.0, 5.0),
], ids=["overflow", "rounds-to-inf", "max", "subnormal", "underflow", "nan", "neg-zero"])
def test_f16_operands_follow_the_round_to_nearest_conversion(a: float, b: float) -> None:
    with np.errstate(over="ignore"):
        want = np.float32(0.0 + np.float64(np.float16(a)) * np.float64(np.float16(b)))
    assert same_values(np.array([one_product(a, b, Lowering.F16_OPERANDS)]), np.array([want]))


@pytest.mark.parametrize(("a", "b"), [
    (3.3961e38, 0.5),      # at or past the halfway point above bf16's largest finite: +inf
    (3.38e38, 0.5),        # rounds to bf16's largest finite
    (1e-39, 4.0),          # an f32 subnormal, a bf16 subnormal
    (1e-41, 1.0),          # below half of bf16's smallest subnormal (2^-133): 0
    (-np.inf, -2.0),
    (np.nan, 0.0),
], ids=["rounds-to-inf", "max", "subnormal", "underflow", "inf", "nan"])
def test_bf16_operands_follow_the_round_to_nearest_conversion(a: float, b: float) -> None:
    def as_bf16(x: float) -> np.float64:
        return np.float64(np.float32(x).astype(ml_dtypes.bfloat16).astype(np.float64))

    with np.errstate(invalid="ignore", over="ignore"):
        want = np.float32(0.0 + as_bf16(a) * as_bf16(b))
    assert same_values(np.array([one_product(a, b, Lowering.BF16_OPERANDS)]), np.array([want]))
