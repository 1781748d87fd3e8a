"""OpenCL on a device, beyond what ``sarek conformance`` covers, and that command's matrices on
NVIDIA's OpenCL split across processes.

Every GEMM example (original kernels, four sizes) and every arithmetic probe kernel
(``arith_cases``: operations, conversions, math functions) printed as OpenCL C runs on the
first device of a platform (NVIDIA's, or the one ``SAREK_OPENCL_PLATFORM`` names) and is
compared with the simulator bit for bit; transcendentals are recorded apart. Records
``conformance_opencl_<platform>``.

The matrices (slow): ``sarek conformance --target T`` for ``opencl-nv`` and for ``opencl``
through NVIDIA's OpenCL, one process per example (as many at a time as there are processors:
the simulator side is single-threaded), the reports merged into one of the same form (cases in
example order, totals summed) with the OpenCL device named. Records ``conformance_<T>``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import needs
import numpy as np
import pytest
from arith_cases import TRANSCENDENTAL, N, compare, probes
from conftest import EXAMPLES, GEMM_EXAMPLES, ROOT, example
from records import record

from backends.opencl.run import NVIDIA, PLATFORM_VARIABLE, find_device, opencl_available, run
from sarek.demo_rows import compare as bit_identical
from sim import simulate

PLATFORM = os.environ.get(PLATFORM_VARIABLE) or NVIDIA
SIZES = ((70, 45, 33), (128, 96, 64), (1, 1, 1), (17, 5, 0))
LOOSE = {fn.value for fn in TRANSCENDENTAL}

needs_platform = pytest.mark.skipif(
    opencl_available(PLATFORM) is not None,
    reason=str(opencl_available(PLATFORM)))


@pytest.fixture(scope="module")
def measured() -> dict[str, list[dict[str, Any]]]:
    """The examples' rows, the exact probes' rows and the transcendentals' rows."""
    device = find_device(PLATFORM)
    examples = []
    with np.errstate(all="ignore"):
        for name in GEMM_EXAMPLES:
            for size in SIZES:
                launch = example(name).make(*size)
                want = launch.simulate()
                got = run(launch.kernel, dict(launch.args), launch.grid, launch.block,
                          PLATFORM)
                same = all(bit_identical(got[k], want[k])[0] for k in want)
                examples.append({"case": f"{name} {'x'.join(map(str, size))}",
                                 "bit_exact": same})
        exact: list[dict[str, Any]] = []
        transcendental: list[dict[str, Any]] = []
        for probe in probes(np.random.default_rng(21)):
            want = simulate(probe.kernel, probe.args, grid=1, block=N)
            got = run(probe.kernel, probe.args, (1,), (N,), PLATFORM)
            for what, bad in compare(probe, got, want):
                loose = probe.kernel.name.startswith("math_") and what in LOOSE
                (transcendental if loose else exact).append(
                    {"case": f"{probe.kernel.name} {what}", "bit_exact": bad == 0,
                     "mismatches": bad})
    rows = examples + exact
    tag = "".join(c for c in device.platform.name.split()[0].lower() if c.isalnum())
    record(f"conformance_opencl_{tag}", {
        "device": device.name, "platform": device.platform.name,
        "all_bit_exact": all(r["bit_exact"] for r in rows), "cases": rows,
        "transcendental": transcendental})
    return {"examples": examples, "exact": exact, "transcendental": transcendental}


@pytest.mark.device
@needs_platform
def test_every_example_at_every_size_runs_bit_identically(
        measured: dict[str, list[dict[str, Any]]]) -> None:
    assert not [r["case"] for r in measured["examples"] if not r["bit_exact"]]


@pytest.mark.device
@needs_platform
def test_every_exact_operation_conversion_and_function_is_bit_identical(
        measured: dict[str, list[dict[str, Any]]]) -> None:
    assert not [(r["case"], r["mismatches"]) for r in measured["exact"] if not r["bit_exact"]]


def matrix(target: str, folder: Path) -> dict[str, Any]:
    """``sarek conformance --target target`` per example in parallel on NVIDIA's OpenCL, the
    reports merged."""
    parts = {name: folder / f"conformance_{target}.{name}.json" for name in GEMM_EXAMPLES}
    env = {**os.environ, PLATFORM_VARIABLE: NVIDIA}

    def one(name: str) -> int:
        argv = [sys.executable, "-m", "backends.conformance", "--target", target, "--example",
                name, "--examples", str(EXAMPLES), "--report", str(parts[name])]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, env=env,
                              check=False).returncode

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        codes = dict(zip(GEMM_EXAMPLES, pool.map(one, GEMM_EXAMPLES), strict=True))
    assert all(code in (0, 1) for code in codes.values()), \
        f"sarek conformance failed to run (exit 2: a bad request, 3: no device): {codes}"
    reports = [json.loads(parts[name].read_text()) for name in GEMM_EXAMPLES]
    merged: dict[str, Any] = {k: reports[0][k] for k in ("target", "device", "arith", "quick")}
    merged["cases"] = [c for r in reports for c in r["cases"]]
    merged["totals"] = {k: sum(r["totals"][k] for r in reports) for k in reports[0]["totals"]}
    merged["all_bit_exact"] = merged["totals"]["passed"] == merged["totals"]["cases"]
    device = find_device(NVIDIA)
    merged["opencl_device"] = f"{device.name.strip()} ({device.platform.name.strip()})"
    merged["merged_from"] = f"{len(GEMM_EXAMPLES)} processes, one per example (--example NAME)"
    return merged


@pytest.mark.device
@pytest.mark.slow
@needs.opencl_nv
@pytest.mark.parametrize("target", ["opencl-nv", "opencl"])
def test_the_conformance_matrix_through_nvidias_opencl_is_bit_identical(
        target: str, tmp_path: Path) -> None:
    merged = matrix(target, tmp_path)
    record(f"conformance_{target}", merged)
    failed = [(c["example"], c["kernel"], c["lowering"], c["size"], c["error"])
              for c in merged["cases"] if not c["ok"]]
    assert merged["all_bit_exact"] and not failed, failed[:10]
