"""``schedule="autotune"`` (``backends.autotune``): every schedule the target offers for the
lowering is measured on the caller's shapes, their outputs must agree bit for bit, the fastest
is kept and recorded per kernel, lowering, shape bucket and device. On ``sim`` the measure is
the simulator's time, which lets a CPU-only run exercise the whole path; the expected values
are NumPy's (small-integer operands: exact)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_launch import matmul

import sarek
from backends import autotune, registry
from sarek.errors import LaunchError
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED


def launch(m: int, n: int, k: int, kernel: sarek.KernelFunction) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(m + n + k)
    a = rng.integers(-8, 9, (m, k)).astype(np.float32)
    b = rng.integers(-8, 9, (k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    kernel[(-(-n // 16), -(-m // 16), 1), (16, 16, 1)](a, b, c, m, n, k)
    return a, b, c


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAREK_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "TUNED", autotune.Cache("autotune"))


def test_the_candidates_are_the_seed_and_the_policys_schedules_for_the_lowering() -> None:
    cuda = registry.target("cuda")
    assert [s.name for s in autotune.candidates(cuda, Lowering.BF16X3_OPERANDS)] == [
        "t64k16", "t128x128k64s2gwro", "t128x256k32s2", "t128x256k16s3"]
    assert autotune.candidates(cuda, Lowering.F16_OPERANDS)[0] == SEED


def test_autotune_runs_the_fastest_agreeing_schedule_and_records_it(cache: None) -> None:
    tuned = matmul.with_options(target="sim", schedule="autotune")
    a, b, c = launch(70, 45, 33, tuned)
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))
    (done,) = tuned.memo.entries.values()
    assert done.rewritten is not None
    offered = autotune.candidates(registry.target("cuda"), Lowering.BF16X3_OPERANDS)
    assert done.rewritten.schedule in offered
    assert autotune.TUNED.misses == 1  # measured once, then recorded


def test_a_recorded_choice_serves_another_shape_of_the_bucket_without_measuring(
        cache: None) -> None:
    launch(70, 45, 33, matmul.with_options(target="sim", schedule="autotune"))
    hits = autotune.TUNED.hits
    again = matmul.with_options(target="sim", schedule="autotune")  # a fresh memo
    a, b, c = launch(66, 40, 40, again)  # the same bucket: 128 x 64 x 64
    assert autotune.TUNED.hits == hits + 1
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


def test_autotune_is_refused_where_it_cannot_measure() -> None:
    with pytest.raises(LaunchError, match="measures on cuda and in the simulator"):
        launch(20, 20, 20, matmul.with_options(target="vulkan", schedule="autotune"))


def _cuda_reason() -> str | None:
    from backends.cuda.run import unavailable_reason

    return unavailable_reason()


@pytest.mark.device
@pytest.mark.skipif(_cuda_reason() is not None, reason=f"no CUDA device: {_cuda_reason()}")
def test_autotune_on_cuda_measures_copies_and_gives_the_simulators_bits(cache: None) -> None:
    cupy = pytest.importorskip("cupy")
    m, n, k = 150, 133, 70
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, (m, k)).astype(np.float32)
    b = rng.integers(-8, 9, (k, n)).astype(np.float32)
    da, db, dc = cupy.asarray(a), cupy.asarray(b), cupy.full((m, n), 7, cupy.float32)
    grid, block = (-(-n // 16), -(-m // 16), 1), (16, 16, 1)
    tuned = matmul.with_options(target="cuda", schedule="autotune")
    tuned[grid, block](da, db, dc, m, n, k)
    cupy.cuda.get_current_stream().synchronize()
    assert autotune.TUNED.misses == 1
    want = np.zeros((m, n), np.float32)
    matmul.with_options(target="sim")[grid, block](a, b, want, m, n, k)
    assert np.array_equal(cupy.asnumpy(dc), want)
    assert np.array_equal(cupy.asnumpy(da), a) and np.array_equal(cupy.asnumpy(db), b)
