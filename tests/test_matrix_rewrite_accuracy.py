"""Accuracy of the float lowerings on random inputs, against float64 references computed here.

**F16 and BF16 operands.** Let ``a^``, ``b^`` be the operands rounded to f16 (or bf16). Their
products are exact in f32 (at most 11 + 11 significant bits), the padding past the reduction
depth adds -0.0 exactly, and the accumulator starts at the exact initial value 0, so the
rewritten sum is a recursive f32 summation of the K products in some order: with
``u = 2^-24`` and ``gamma_K(u) = K*u / (1 - K*u)`` (Higham, (4.4)),

    |acc - S| <= gamma_K(u) * sum_k |a^_k * b^_k|

where ``S`` is the exact sum. The reference ``s`` is the float64 sum of the same products, off
by at most ``gamma_K(2^-53) * sum|a^ b^|``; ``E`` below is the sum of both allowances. The
epilogue then adds its own roundings:

* a plain f32 store adds nothing: ``|out - s| <= E``;
* a store to f16 rounds once more: ``|out - s| <= E + 2^-11 * (|s| + E) + 2^-25`` (the last
  term is half the spacing of f16 subnormals);
* ``max(alpha*acc + beta*c, 0)`` (``gemm_epilogue``) rounds ``alpha*acc``, ``beta*c`` and their
  sum: ``|out - ref| <= |alpha|*E + u*(2 + u)*(|alpha|*(|s| + E) + |beta*c|)``, ``max`` being
  1-Lipschitz.

The ``exact`` arithmetic model (the exact sum of each multiply-accumulate rounded once) is
inside the same bound.

**BF16x3.** Measured against the float64 product of the original f32 operands, next to the
original f32 kernel's own error on the same inputs. The split of an f32 ``x`` into bf16 terms
(``u_b = 2^-8``) leaves ``|x - hi - mid - lo| <= u_b^3 |x|`` with ``|mid| <= (1 + u_b) u_b |x|``
and ``|lo| <= (1 + u_b) u_b^2 |x|``; the three dropped products (mid*lo, lo*mid, lo*lo) and the
split errors are below ``5 * 2^-24 * |a*b|``, and the 6K products are summed in f32 (each
sub-step's in a fresh accumulator, then added to the running sum: no product passes through
more than 6K additions):

    |out - ab| <= (5 * 2^-24 + 1.02 * gamma_6K(2^-24)) * sum_k |a_k * b_k|.

That worst case is loose (1.1e-4 for K = 300). The measured errors, normwise
(``max|out - s| / max|s|``) and componentwise (``max |out - s| / sum|a b|``), are asserted to be
no worse than the f32 kernel's; at 64x48x300 under the ``sequential`` model they are 1.2e-7 to
2.6e-7 and 4.2e-8 to 8.1e-8, 0.24x to 0.5x the f32 kernel's 4.7e-7 to 6.4e-7 and 1.8e-7 to
2.1e-7 (BF16 alone: 2.4e-3 to 3.0e-3 normwise). Under the ``h200`` model (a tensor core that
truncates each multiply-accumulate at its addend's magnitude) the normwise error at 64x64xK
(Frobenius norms) stays below NumPy's sequential f32 sum's for K = 256, 1024 and 4096 (about
9e-8, 1.5e-7 and 2.9e-7 against 2.8e-7, 5.8e-7 and 1.2e-6); chained into one running
accumulator, as the lowering did before it summed each sub-step apart, it was 1.7e-6, 6.9e-6
and 2.8e-5, growing linearly in K.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import original, rewritten

from sarek.launch import Launch
from sarek.matrix_scheme import CHUNK, Lowering
from sarek.reference import gemm_sequential
from sarek.schedule import Schedule
from sarek.staging import DENSE

U32, U64, U16 = 2.0**-24, 2.0**-53, 2.0**-11
ROUNDED = {Lowering.F16_OPERANDS: np.float16, Lowering.BF16_OPERANDS: ml_dtypes.bfloat16}


def gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


def operands(name: str, launch: Launch) -> tuple[np.ndarray, np.ndarray]:
    """A as (batches, m, k) and B as (batches, k, n), read from the launch's arrays by each
    example's own storage order."""
    m, n, k = (launch.args[x] for x in "mnk")
    nb = launch.args.get("batches", 1)
    a, b = launch.args["a"], launch.args["b"]
    if name == "gemm_colmajor_b":
        return a.reshape(1, m, k), b.reshape(1, n, k).transpose(0, 2, 1)
    return a.reshape(nb, m, k), b.reshape(nb, k, n)


def reference(name: str, launch: Launch, rounded: type | None) -> tuple[np.ndarray, np.ndarray]:
    """The float64 sums ``s`` and the scales ``sum_k |a_k b_k|``, flattened as C is, of the
    operands rounded to ``rounded`` first (or as they are)."""
    a, b = operands(name, launch)
    if rounded is not None:
        a, b = a.astype(rounded), b.astype(rounded)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return (a64 @ b64).ravel(), (np.abs(a64) @ np.abs(b64)).ravel()


def allowance(name: str, launch: Launch, s: np.ndarray, scale: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """The expected output and how far the rewritten one may be from it (module docstring)."""
    k = launch.args["k"]
    e = (gamma(k, U32) + gamma(k, U64)) * scale
    if name == "gemm_f16":
        return s, e + U16 * (np.abs(s) + e) + 2.0**-25
    if name == "gemm_epilogue":
        alpha, beta = float(launch.args["alpha"]), float(launch.args["beta"])
        c = launch.args["c"].astype(np.float64)
        ref = np.maximum(alpha * s + beta * c, 0.0)
        return ref, abs(alpha) * e + U32 * (2 + U32) * (abs(alpha) * (np.abs(s) + e)
                                                        + np.abs(beta * c))
    return s, e


F16_BF16_CASES = [(n, low) for n in ("gemm_f32", "gemm_f32_1d", "gemm_batched",
                                     "gemm_colmajor_b", "gemm_epilogue", "gemm_tiled")
                  for low in (Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS)]
F16_BF16_CASES.append(("gemm_f16", Lowering.F16_OPERANDS))


@pytest.mark.parametrize(("subgroup", "frag"), [(32, 16), (64, 8)])
@pytest.mark.parametrize(("name", "lowering"), F16_BF16_CASES,
                         ids=[f"{n}-{low.value}" for n, low in F16_BF16_CASES])
def test_f16_and_bf16_results_are_within_the_summation_bound(
        name: str, lowering: Lowering, subgroup: int, frag: int) -> None:
    launch = example(name).make(70, 45, 100, seed=11)
    got = rewritten(launch, lowering, subgroup, frag).astype(np.float64)
    want, bound = allowance(name, launch, *reference(name, launch, ROUNDED[lowering]))
    assert (np.abs(got - want) <= bound).all()


@pytest.mark.parametrize(("subgroup", "frag"), [(32, 16), (32, 8)])
def test_exact_model_on_rewritten_f16_is_within_the_summation_bound(
        subgroup: int, frag: int) -> None:
    launch = example("gemm_f16").make(40, 24, 40, seed=12)
    got = rewritten(launch, Lowering.F16_OPERANDS, subgroup, frag, arith="exact")
    want, bound = allowance("gemm_f16", launch, *reference("gemm_f16", launch, np.float16))
    assert (np.abs(got.astype(np.float64) - want) <= bound).all()


def errors(got: np.ndarray, s: np.ndarray, scale: np.ndarray) -> tuple[float, float]:
    """(normwise max|got - s| / max|s|, componentwise max |got - s| / sum|a b|)."""
    diff = np.abs(got.astype(np.float64) - s)
    return float(diff.max() / np.abs(s).max()), float((diff / scale).max())


@pytest.mark.parametrize("frag", [16, 8])
@pytest.mark.parametrize("name", ["gemm_f32", "gemm_colmajor_b", "gemm_batched"])
def test_bf16x3_error_is_within_a_small_factor_of_the_f32_kernels(name: str, frag: int) -> None:
    launch = example(name).make(64, 48, 300, seed=13)
    s, scale = reference(name, launch, None)
    f32_norm, f32_comp = errors(original(launch), s, scale)
    norm, comp = errors(rewritten(launch, Lowering.BF16X3_OPERANDS, frag=frag), s, scale)
    assert comp <= 5 * U32 + 1.02 * gamma(6 * 300, U32)
    assert norm <= f32_norm and comp <= f32_comp


@pytest.mark.parametrize("k", [256, 1024, 4096])
def test_bf16x3_on_the_h200_tensor_core_model_is_as_accurate_as_sequential_f32(k: int) -> None:
    launch = example("gemm_f32").make(64, 64, k, seed=14)
    a, b = (x.reshape(shape) for x, shape in ((launch.args["a"], (64, k)),
                                              (launch.args["b"], (k, 64))))
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def normwise(x: np.ndarray) -> float:
        return float(np.linalg.norm(x.astype(np.float64).reshape(64, 64) - exact)
                     / np.linalg.norm(exact))

    got = rewritten(launch, Lowering.BF16X3_OPERANDS, arith="h200")
    assert normwise(got) <= normwise(gemm_sequential(a, b))



@pytest.mark.parametrize("loops", [False, True], ids=["tested each step", "chunk loops"])
@pytest.mark.parametrize("schedule", ["t64k16", "t64k64", "t64k32p", "t128k64s2"])
def test_bf16x3_running_sums_take_a_total_every_chunk(schedule: str, loops: bool) -> None:
    """Sub-step sums that are exact in every model: A all ones, B's first row 2^24 and a
    1 at the first k of every later sub-step of 16. Summed in one f32 chain, as the original
    kernel sums its products, each 1 rounds away (2^24 + 1 ties to 2^24). In chunks of
    ``CHUNK`` = 128: the first chunk's running sum is 2^24 (its 7 ones lost), the second's is
    8 (exact), and their total 2^24 + 8 (exact: the spacing there is 2). K = 128 is one chunk
    (and takes the exact hi·hi sub-steps, whose sums are the same here): 2^24."""
    m, n = 16, 24
    assert CHUNK == 128
    for k, expected in ((2 * CHUNK, 2.0**24 + CHUNK // 16), (CHUNK, 2.0**24)):
        launch = example("gemm_f32").make(m, n, k)
        b = np.zeros((k, n), np.float32)
        b[0] = 2.0**24
        b[16::16] = 1.0
        launch.args["a"] = np.ones(m * k, np.float32)
        launch.args["b"] = b.reshape(-1)
        assert np.all(original(launch) == 2.0**24)
        for arith in ("h200", "sequential"):
            got = rewritten(launch, Lowering.BF16X3_OPERANDS, arith=arith,
                            schedule=Schedule.parse(schedule),
                            staging=replace(DENSE, chunk_loops=loops))
            assert np.all(got == np.float32(expected)), (k, arith, np.unique(got))


@pytest.mark.parametrize("schedule", ["t64k16", "t128k64s2"])
def test_bf16x3_in_one_chunk_rounds_what_the_tensor_core_truncates(schedule: str) -> None:
    """Two products whose sum is 1 + 1.5 * 2^-24 (every bf16 term but hi zero): the original
    kernel rounds it to nearest, 1 + 2^-23. Under the ``h200`` model hi·hi's
    multiply-accumulate truncates it to 1, as the six products give it; at a depth of one
    chunk the rewrite takes hi·hi exactly (what the first multiply-accumulate truncated, from
    the second) and adds the two with rounding to nearest: the original's 1 + 2^-23. Under
    ``sequential`` both give the original's bits."""
    m, n, k = 16, 24, 64 if schedule == "t128k64s2" else 16
    launch = example("gemm_f32").make(m, n, k)
    a = np.zeros((m, k), np.float32)
    a[:, :2] = 1.0
    b = np.zeros((k, n), np.float32)
    b[0], b[1] = 1.0, 1.5 * 2.0**-24
    launch.args["a"], launch.args["b"] = a.reshape(-1), b.reshape(-1)
    want = np.float32(1.0 + 2.0**-23)
    assert np.all(original(launch) == want)
    sched = Schedule.parse(schedule)
    six = rewritten(launch, Lowering.BF16X3_OPERANDS, arith="h200", schedule=sched)
    assert np.all(six == np.float32(1.0))
    for arith in ("h200", "sequential"):
        exact = rewritten(launch, Lowering.BF16X3_OPERANDS, arith=arith, schedule=sched,
                          depth=True)
        assert np.all(exact == want), (arith, np.unique(exact))

