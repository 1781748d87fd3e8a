"""The device probes' CPU paths, so that the scripts the H200 runs cannot rot: the adversarial
tensor-core probe (``bench/tensor_core_adversarial_h200.py``) end to end with the simulator in
the device's place, and its comparison catching a planted difference."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sarek.loader import load_module

BENCH = Path(__file__).resolve().parent.parent / "bench"
PROBE = load_module(BENCH / "tensor_core_adversarial_h200.py")


@pytest.fixture(scope="module")
def device_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tile per distribution 'run on a device' that is the simulator."""
    path = tmp_path_factory.mktemp("probe") / "device.npz"
    with np.errstate(all="ignore"):
        PROBE.device_phase(path, PROBE.simulated, 1, PROBE.SEED, "simulator")
    return path


def test_the_dry_run_passes() -> None:
    assert PROBE.main(["--dry-run"]) == 0


def test_every_distribution_is_drawn_reproducibly_from_the_seed() -> None:
    for name in PROBE.DISTRIBUTIONS:
        first, again = (PROBE.draw(7, "bf16", name, 2) for _ in range(2))
        assert PROBE.digest(*first) == PROBE.digest(*again), name
        assert PROBE.digest(*first) != PROBE.digest(*PROBE.draw(8, "bf16", name, 2)), name


def test_agreement_is_equal_bits_nan_payloads_and_zero_signs_included() -> None:
    got = np.array([0x7FFFFFFF, 0x7FFFFFFF, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    want = np.array([0x7FFFFFFF, 0xFFC00000, 0x00000000, 0x3F800000], np.uint32).view(np.float32)
    assert PROBE.agree(got, want).tolist() == [True, False, False, True]


def test_the_comparison_records_a_planted_mismatch_in_full(device_file: Path,
                                                           tmp_path: Path) -> None:
    saved = dict(np.load(device_file))
    outputs = saved["d_f16"].copy()
    outputs[0, 0, 3, 5] ^= 1  # plain random, tile 0, row 3, column 5: one bit off
    saved["d_f16"] = outputs
    planted, result = tmp_path / "planted.npz", tmp_path / "result.json"
    np.savez_compressed(planted, **saved)
    assert not PROBE.compare_phase(planted, result, sim_tiles=1)
    report = json.loads(result.read_text())
    assert report["mismatches"] == 1
    (case,) = report["cases"]
    assert (case["operands"], case["distribution"]) == ("f16", "plain random")
    assert (case["tile"], case["row"], case["col"]) == (0, 3, 5)
    assert int(case["device_bits"], 16) ^ int(case["model_bits"], 16) == 1
    assert len(case["a_row_bits"]) == len(case["b_col_bits"]) == 16


def test_the_comparison_refuses_inputs_that_are_not_the_device_s(device_file: Path,
                                                                 tmp_path: Path) -> None:
    saved = dict(np.load(device_file))
    saved["seed"] = np.int64(PROBE.SEED + 1)
    other = tmp_path / "other.npz"
    np.savez_compressed(other, **saved)
    with pytest.raises(SystemExit, match="differ from the device run's"):
        PROBE.compare_phase(other, tmp_path / "result.json", sim_tiles=1)


TABLES = load_module(BENCH / "error_tables.py")


def test_the_error_measures_follow_their_definitions() -> None:
    a, b = np.eye(2, dtype=np.float32), np.array([[1, 2], [3, 4]], np.float32)
    exact = (a @ b).astype(np.float64)
    off = exact + np.array([[0.0, 0.0], [0.0, 0.4]])
    got = TABLES.errors(off, a, b, exact)
    assert got["normwise"] == pytest.approx(0.4 / np.sqrt(30))
    assert got["elementwise"] == pytest.approx(0.1)
    assert got["componentwise"] == pytest.approx(0.1)


def test_the_simulated_error_table_ranks_the_lowerings(tmp_path: Path) -> None:
    assert TABLES.main(["--sim", "--sizes", "32", "--sweep-k", "16", "--sweep-mn", "32",
                        "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "error_tables_sim.json").read_text())
    random = {r["method"]: r["normwise"] for r in report["rows"]
              if r["group"] == "cube" and r["inputs"] == "random"}
    assert random[TABLES.ORIGINAL] < 1e-6
    assert random["Bf16x3_operands"] < 4 * random[TABLES.ORIGINAL]
    assert random["F16_operands"] < random["Bf16_operands"] / 4
    assert len(report["rows"]) == 2 * len(TABLES.KINDS) * 5


WGMMA = load_module(BENCH / "wgmma_probe_h200.py")


def test_the_wgmma_probe_stacks_four_tiles_a_problem_and_takes_the_fifths_b_second() -> None:
    a, b, c = PROBE.draw(PROBE.SEED, "f16", "plain random", 8)
    pa, pb, pc = WGMMA.problems(a, b, c, 2)
    assert (pa.shape, pb.shape, pc.shape) == ((1, 64, 32), (1, 32, 16), (1, 64, 16))
    assert np.array_equal(pa[0, 16:32, :16], a[1]) and np.array_equal(pa[0, :16, 16:], a[4])
    assert np.array_equal(pb[0, :16], b[0]) and np.array_equal(pb[0, 16:], b[4])
    assert np.array_equal(pc[0, 48:], c[3])


def test_the_wgmma_probes_model_is_the_exact_product_on_small_integers() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (2, 64, 32)).astype(np.float16)
    b = rng.integers(-4, 5, (2, 32, 16)).astype(np.float16)
    c = rng.integers(-64, 65, (2, 64, 16)).astype(np.float32)
    exact = np.einsum("pmk,pkn->pmn", a.astype(np.float64), b.astype(np.float64)) + c
    assert np.array_equal(WGMMA.model(a, b, c), exact)


SPEED = load_module(BENCH / "gpu_speed_h200.py")


def test_the_speed_table_has_a_row_per_kernel_and_ratio_with_each_size_and_target() -> None:
    result = {"device": "GPU", "arch": "sm_90", "repeats": 10, "rows": [
        {"n": 64, "kernel": "cuBLAS f16", "schedule": "", "median_s": 1.0, "tflops": 600.04},
        {"n": 64, "kernel": "rewritten F16", "schedule": "t128k64s2g", "median_s": 2.0,
         "tflops": 300.0},
        {"n": 128, "kernel": "rewritten F16", "schedule": "t128k64s2g", "median_s": 2.0,
         "tflops": 350.26},
        {"n": 64, "ratios": {"F16 / cuBLAS f16": 0.5}}]}
    lines = SPEED.markdown(result).splitlines()
    assert "| kernel | schedule | 64³ | 128³ |" in lines
    assert "| cuBLAS f16 |  | 600.0 |  |" in lines
    assert "| rewritten F16 | `t128k64s2g` | 300.0 | 350.3 |" in lines
    assert "| F16 / cuBLAS f16 (target ≥ 0.5x at 4096³) | | 0.500x |  |" in lines


def test_the_readme_table_is_replaced_between_its_markers_and_the_rest_kept(
        tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    SPEED.update_readme(readme, "| first |\n")
    readme.write_text("# Benchmarks\n\nintro\n\n" + readme.read_text() + "\nafter\n")
    SPEED.update_readme(readme, "| second |\n")
    text = readme.read_text()
    assert "| first |" not in text and text.count("| second |") == 1
    assert text.startswith("# Benchmarks\n\nintro\n\n") and text.endswith("after\n")
    SPEED.update_readme(readme, "| second |\n")
    assert readme.read_text() == text
