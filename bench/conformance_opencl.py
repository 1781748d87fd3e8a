"""OpenCL on a real device, beyond what ``sarek conformance`` covers, and that command split
across processes.

``python -m bench.conformance_opencl [PLATFORM-NAME-PART] [--out-dir DIR]``: every GEMM example
(original kernels, four sizes) and every arithmetic probe kernel (operations, conversions, math
functions) printed as OpenCL C and run on the first device of the platform (NVIDIA's OpenCL by
default), against the simulator bit for bit; writes ``conformance_opencl_<platform>.json``.

``python -m bench.conformance_opencl --matrix TARGET [--jobs N] [--report PATH] [--quick]``:
``sarek conformance --target TARGET`` run as one process per example (N at a time: the
simulator side is single-threaded), the reports merged into one of the same form (cases in
example order, totals summed) with the OpenCL device named. Exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import RESULTS, ROOT, write

# a device check drawing on the test suite's cases (tests/), as pytest does
sys.path.insert(0, str(ROOT / "tests"))

import arith_cases  # type: ignore[import-not-found]
from arith_cases import TRANSCENDENTAL, N

from backends.opencl.run import find_device, run
from sarek.demo_rows import compare
from sarek.loader import load_module
from sim import simulate


def probes(platform: str, out_dir: Path) -> int:
    """The examples' original kernels and the arithmetic probes on ``platform``'s device."""
    device = find_device(platform)
    rows = []
    for path in sorted((ROOT / "examples").glob("gemm_*.py")):
        for size in ((70, 45, 33), (128, 96, 64), (1, 1, 1), (17, 5, 0)):
            launch = load_module(path).make(*size)
            want = launch.simulate()
            got = run(launch.kernel, dict(launch.args), launch.grid, launch.block, platform)
            same = all(compare(got[k], want[k])[0] for k in want)
            rows.append({"case": f"{path.stem} {'x'.join(map(str, size))}", "bit_exact": same})
    rng = np.random.default_rng(21)
    loose = {fn.value for fn in TRANSCENDENTAL}
    transcendental: list[dict[str, Any]] = []
    for probe in arith_cases.probes(rng):
        want = simulate(probe.kernel, probe.args, grid=1, block=N)
        got = run(probe.kernel, probe.args, (1,), (N,), platform)
        for what, bad in arith_cases.compare(probe, got, want):
            target = transcendental if probe.kernel.name.startswith("math_") and \
                what in loose else rows
            target.append({"case": f"{probe.kernel.name} {what}", "bit_exact": bad == 0,
                           "mismatches": bad})
    ok = all(r["bit_exact"] for r in rows)
    for r in rows + transcendental:
        if not r["bit_exact"]:
            print(f"{r['case']:30} {r.get('mismatches', '')} differ")
    result = {"device": device.name, "platform": device.platform.name, "all_bit_exact": ok,
              "cases": rows, "transcendental": transcendental}
    tag = "".join(c for c in device.platform.name.split()[0].lower() if c.isalnum())
    out = out_dir / f"conformance_opencl_{tag}.json"
    write(out.stem, result, out)
    print(f"{device.platform.name} / {device.name}: {len(rows)} cases, all bit-exact: {ok}")
    return 0 if ok else 1


def matrix(target: str, jobs: int, report: Path, quick: bool) -> int:
    """``sarek conformance --target target`` per example in parallel, the reports merged."""
    examples = sorted(p.stem for p in (ROOT / "examples").glob("gemm_*.py"))
    parts = {name: report.with_name(f"{report.stem}.{name}.json") for name in examples}

    def one(name: str) -> int:
        argv = [sys.executable, "-m", "backends.conformance", "--target", target, "--example",
                name, "--report", str(parts[name]), *(["--quick"] if quick else [])]
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=os.environ,
                              check=False)
        if done.returncode:  # the failing cases' lines, and any error, for the log
            print(f"--- {name}: exit {done.returncode}\n" +
                  "\n".join((done.stdout + done.stderr).splitlines()[-25:]), flush=True)
        return done.returncode

    with ThreadPoolExecutor(jobs) as pool:
        codes = dict(zip(examples, pool.map(one, examples), strict=True))
    if any(code not in (0, 1) for code in codes.values()):  # a bad request or no device
        print(f"sarek conformance failed to run: {codes}", file=sys.stderr)
        return 1
    reports = [json.loads(parts[name].read_text()) for name in examples]
    merged: dict[str, Any] = {k: reports[0][k] for k in ("target", "device", "arith", "quick")}
    merged["cases"] = [c for r in reports for c in r["cases"]]
    merged["totals"] = {k: sum(r["totals"][k] for r in reports) for k in reports[0]["totals"]}
    merged["all_bit_exact"] = merged["totals"]["passed"] == merged["totals"]["cases"]
    if target in ("opencl", "opencl-nv"):  # a device run: name the OpenCL device
        from backends.opencl.run import NVIDIA, chosen_platform, device_label

        merged["opencl_device"] = device_label(NVIDIA if target == "opencl-nv"
                                               else chosen_platform())
    merged["merged_from"] = f"{len(examples)} processes, one per example (--example NAME)"
    write(report.stem, merged, report)
    for name in examples:
        parts[name].unlink()
    t = merged["totals"]
    print(f"{target} on {merged.get('opencl_device', merged['device'])}: {t['passed']} of "
          f"{t['cases']} cases bit-identical, {t['mismatches']} mismatched arrays, "
          f"{t['canary_violations']} canary violations, {t['errors']} errors; report {report}")
    return 0 if merged["all_bit_exact"] else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("platform", nargs="?", default="NVIDIA")
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--matrix", metavar="TARGET")
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--report", type=Path)
    parser.add_argument("--quick", action="store_true")
    a = parser.parse_args()
    if a.matrix:
        sys.exit(matrix(a.matrix, a.jobs, a.report or RESULTS /
                        f"conformance_{a.matrix}.json", a.quick))
    sys.exit(probes(a.platform, a.out_dir))
