"""Every lowering through Vulkan against the same lowering through CUDA, on the H200, in one run.

At 4096^3 (``--n``, which takes several sizes: rows for each in one report) each lowering's
bundled example (``EXAMPLES``) is rewritten for CUDA and for Vulkan, each under its target's
staging policy (the schedule ``rewrite_launch`` picks for a region this large), printed, and
timed over the same inputs: CUDA through the driver API with CUDA events, Vulkan with GPU
timestamps (``backends.spirv.run.time_steps``: a conversion pre-pass and the GEMM each timed,
their times added), each the median of 10 launches after a warm-up. The Vulkan output is
compared bit for bit with CUDA's. The schedule Vulkan takes for
small regions (the seed's ``t64k16``; ``t64k32`` for Int8) is timed beside it: what the
policy ran at every size before it named large schedules, and so is each schedule ``--also
LOWERING=SCHEDULE`` names (candidates for the policy, timed in the same run). A lowering the
Vulkan gate refuses gets a row with the reason.

Writes ``bench/results/backends_speed_h200.json`` (``--out``), rows ``{target, lowering,
schedule, n (the size), tflops, cuda_tflops, ratio_to_cuda, bit_identical_to_cuda}`` (Vulkan
rows also ``policy``: whether the policy chose the schedule, ``also``: named by ``--also``),
prints a table and (``--readme FILE``) puts it as Markdown into FILE between its
``backends_speed_h200`` markers; ``--render JSON`` writes that Markdown from a recorded result
without a device.

opencl-nv (``--targets opencl-nv``; ``--targets`` picks the targets a run times and
``--lowerings`` the lowerings, the report keeping the other rows from the one written before)
runs each lowering under its policy's schedule and each one ``--nv-also LOWERING=SCHEDULE``
names, beside CUDA's ``mma.sync`` path on the same schedule: the same lowered kernel, printed
by the other printer, timed with OpenCL profiling events in the same run
(``backends.opencl.run.time_nv``) and compared bit for bit.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED

ROOT = Path(__file__).resolve().parent.parent

EXAMPLES = {Lowering.F16_OPERANDS: "gemm_f16", Lowering.BF16_OPERANDS: "gemm_f32",
            Lowering.BF16X3_OPERANDS: "gemm_f32", Lowering.INT8_OPERANDS: "gemm_i8",
            Lowering.INT32_BYTE_PLANES: "gemm_i32"}
"""The bundled example each lowering is timed on."""

MARKERS = ("<!-- backends_speed_h200 -->", "<!-- /backends_speed_h200 -->")
TARGETS = ("vulkan", "opencl-nv")
"""The targets a run can time against CUDA (``--targets``)."""


def opencl_nv_rows(original: Any, lowering: Lowering, n: int, arch: str,
                   also: tuple[tuple[str, str], ...] = ()) -> list[dict[str, Any]]:
    """opencl-nv under its policy's schedule and each one ``also`` names for ``lowering``,
    each beside CUDA's ``mma.sync`` path on the same schedule: one lowering printed by two
    printers, timed in the same run (OpenCL profiling events, CUDA events) and compared bit
    for bit."""
    from backends.opencl.run import time_nv
    from backends.pipeline import compile_launch
    from backends.registry import target
    from bench.gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds
    from sarek.errors import SarekError
    from sarek.schedule import Schedule

    flops = 2.0 * n ** 3
    extra = [Schedule.parse(name) for low, name in also if low == lowering.value]
    rows: list[dict[str, Any]] = []
    for schedule in (None, *extra):
        base = {"target": "opencl-nv", "lowering": lowering.value, "n": n,
                "policy": schedule is None}
        try:
            nv = compile_launch(target("opencl-nv"), original, lowering=lowering,
                                schedule=schedule)
            assert nv.rewritten is not None and nv.gemm is not None
            same = nv.rewritten.schedule
            cuda = compile_launch(target("cuda"), original, lowering=lowering, schedule=same)
            c = nv.gemm.c.array
            cuda_tflops = flops / kernel_seconds(cuda, arch) / 1e12
            want = kernel_output(cuda, arch, c)
            launch = nv.launch
            out, times = time_nv(launch.kernel, dict(launch.args), launch.grid, launch.block,
                                 REPEATS)
        except SarekError as e:
            rows.append({**base, "schedule": getattr(schedule, "name", "policy"),
                         "refused": e.reason[:400]})
            continue
        tflops = flops / statistics.median(times) / 1e12
        got = out[c].view(f"u{out[c].dtype.itemsize}")
        rows.append({**base, "schedule": same.name, "cuda_schedule": same.name,
                     "tflops": tflops, "cuda_tflops": cuda_tflops,
                     "ratio_to_cuda": tflops / cuda_tflops,
                     "bit_identical_to_cuda": bool(np.array_equal(got, want))})
    return rows


def merged(result: dict[str, Any], previous: dict[str, Any] | None,
           targets: tuple[str, ...], lowerings: tuple[Lowering, ...] = tuple(EXAMPLES)
           ) -> dict[str, Any]:
    """``result`` with the rows of ``previous`` (the report written before) of the targets or
    lowerings this run did not time, opencl-nv's first, then each lowering's: CUDA's policy
    rows go with Vulkan's, which they are the base of, and so does the device's name as
    Vulkan gives it."""
    if previous is None:
        return result
    ran = {*targets, *(("cuda",) if "vulkan" in targets else ())}
    names = {low.value for low in lowerings}
    kept = [r for r in previous.get("rows", [])
            if r["target"] not in ran or r["lowering"] not in names]
    device = result["device"] if "vulkan" in targets else previous.get("device",
                                                                         result["device"])
    order = [low.value for low in EXAMPLES]
    rows = sorted(kept + result["rows"], key=lambda r: (r["target"] != "opencl-nv",
                                                        order.index(r["lowering"])))
    return {**result, "device": device, "rows": rows}


def measure(n: int, also: tuple[tuple[str, str], ...] = (),
            targets: tuple[str, ...] = TARGETS,
            nv_also: tuple[tuple[str, str], ...] = (),
            lowerings: tuple[Lowering, ...] = tuple(EXAMPLES), terms_both: bool = False
            ) -> dict[str, Any]:
    """The rows of one run on the device for ``targets`` and ``lowerings`` (``also``:
    (lowering, schedule) pairs Vulkan runs besides its policy's and the small regions'
    schedules; ``nv_also``: those opencl-nv runs besides its policy's; ``terms_both``: Vulkan
    also runs the policy's schedule of a lowering of several terms with them split the other
    way, by the pre-pass where the policy splits them as it stages and the other way round,
    ``Staging.prepass_terms``)."""
    from backends.cuda.run import device_arch
    from backends.cuda.run import device_name as cuda_device
    from backends.pipeline import compile_launch
    from backends.registry import target
    from backends.spirv.device import device_name
    from backends.spirv.lower import STAGING
    from backends.spirv.run import time_steps
    from bench.gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds
    from sarek.errors import SarekError
    from sarek.loader import load_module
    from sarek.schedule import Schedule

    arch, flops = device_arch(), 2.0 * n ** 3
    rows: list[dict[str, Any]] = []
    for lowering, example in EXAMPLES.items():
        if lowering not in lowerings:
            continue
        original = load_module(ROOT / "examples" / f"{example}.py").make(n, n, n)
        if "opencl-nv" in targets:
            rows.extend(opencl_nv_rows(original, lowering, n, arch, nv_also))
        if "vulkan" not in targets:
            continue
        cuda = compile_launch(target("cuda"), original, lowering=lowering)
        assert cuda.rewritten is not None and cuda.gemm is not None
        c = cuda.gemm.c.array
        cuda_tflops = flops / kernel_seconds(cuda, arch) / 1e12
        want = kernel_output(cuda, arch, c)
        base = {"lowering": lowering.value, "n": n, "cuda_schedule": cuda.rewritten.schedule.name,
                "cuda_tflops": cuda_tflops}
        rows.append({"target": "cuda", **base, "schedule": cuda.rewritten.schedule.name,
                     "tflops": cuda_tflops, "ratio_to_cuda": 1.0, "bit_identical_to_cuda": True})
        before = dict(STAGING.small).get(lowering.value, SEED)
        extra = [Schedule.parse(name) for low, name in also if low == lowering.value]
        vulkan = target("vulkan")
        runs: list[tuple[Schedule | None, Any]] = [(x, vulkan) for x in (None, before, *extra)]
        if terms_both:  # the policy's schedule with the terms split the other way
            policy = vulkan.staging.candidates(lowering.value, n, n)[0]
            other = not vulkan.staging.prepass_terms
            runs.insert(1, (policy, replace(vulkan, staging=replace(vulkan.staging,
                                                                    prepass_terms=other))))
        policy_text: str | None = None
        for schedule, tgt in runs:
            other_way = tgt is not vulkan
            try:
                vk = compile_launch(tgt, original, lowering=lowering, schedule=schedule)
                assert vk.rewritten is not None
                if other_way and vk.text == policy_text:
                    continue  # the lowering has no terms to split: the same kernel again
                if schedule is None:
                    policy_text = vk.text
                out, times = time_steps(vk.steps, REPEATS)  # a conversion pre-pass first
            except SarekError as e:
                rows.append({"target": "vulkan", **base, "schedule": getattr(schedule, "name",
                                                                             "policy"),
                             "refused": e.reason[:400]})
                continue
            tflops = flops / statistics.median(times) / 1e12
            got = out[c].view(f"u{out[c].dtype.itemsize}")
            rows.append({"target": "vulkan", **base, "schedule": vk.rewritten.schedule.name,
                         "policy": schedule is None, "also": schedule in extra,
                         **({"terms_split_by_prepass": tgt.staging.prepass_terms}
                            if other_way else {}), "tflops": tflops,
                         "ratio_to_cuda": tflops / cuda_tflops,
                         "bit_identical_to_cuda": bool(np.array_equal(got, want))})
            if vk.rewritten.schedule == before and not extra and not other_way:
                break  # the policy took the small regions' schedule: timed once
    return {"device": device_name() if "vulkan" in targets else cuda_device(), "arch": arch,
            "n": n, "repeats": REPEATS, "rows": rows,
            "target": "every lowering through Vulkan >= 0.5x the same lowering through CUDA "
                      "(issue 26)",
            "opencl_nv_target": "opencl-nv >= 0.8x CUDA's mma.sync path on the same schedule "
                                "(issue 26)"}


def markdown(result: dict[str, Any]) -> str:
    """The table of a result as Markdown."""
    runs = result.get("runs")
    when = (f"each row timed in one run beside CUDA's on the same device ({runs})" if runs
            else "one run")
    sizes = ", ".join(f"{n}^3" for n in sorted({r["n"] for r in result["rows"]}))
    lines = [f"{result['device']}, {sizes}, medians of {result['repeats']}, {when} "
             "(`bench/backends_speed_h200.py`):", "",
             "| lowering | size | target | schedule | TFLOP/s (Tops) | CUDA's | ratio | "
             "bit-identical to CUDA |", "| --- | ---: | --- | --- | ---: | ---: | ---: | --- |"]
    for r in result["rows"]:
        if "refused" in r:
            cuda = f"{r['cuda_tflops']:.1f}" if "cuda_tflops" in r else "—"
            lines.append(f"| {r['lowering']} | {r['n']}^3 | {r['target']} | — | refused | "
                         f"{cuda} | — | {r['refused'][:120]} |")
            continue
        seed = ""
        if r["target"] == "vulkan" and "terms_split_by_prepass" in r:
            seed = (" (the terms split by the pre-pass, also timed)"
                    if r["terms_split_by_prepass"] else " (splitting the terms as it stages, also"
                    " timed)")
        elif r["target"] == "vulkan" and not r.get("policy"):
            seed = " (also timed)" if r.get("also") else " (small regions')"
        elif r["target"] == "opencl-nv":  # beside CUDA's mma.sync on the same schedule
            seed = " (also timed)" if not r.get("policy") else ""
        lines.append(f"| {r['lowering']} | {r['n']}^3 | {r['target']} | `{r['schedule']}`{seed} | "
                     f"{r['tflops']:.1f} | {r['cuda_tflops']:.1f} | {r['ratio_to_cuda']:.3f} | "
                     f"{r['bit_identical_to_cuda']} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[4096],
                        help="the sizes (n^3) timed, rows for each in one report")
    parser.add_argument("--out", default="backends_speed_h200.json",
                        help="the report's name in bench/results")
    parser.add_argument("--readme", type=Path, help="a Markdown file with the markers")
    parser.add_argument("--render", type=Path, help="a recorded result: print its Markdown")
    parser.add_argument("--also", action="append", default=[], metavar="LOWERING=SCHEDULE",
                        help="a schedule Vulkan also runs for a lowering (F16_operands="
                             "t128k16s4); may be repeated")
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS),
                        help="the targets timed against CUDA (the report keeps the rows of "
                             "the others from the one written before)")
    parser.add_argument("--lowerings", nargs="+", choices=[low.value for low in EXAMPLES],
                        default=[low.value for low in EXAMPLES],
                        help="the lowerings timed (the report keeps the others' rows from the "
                             "one written before)")
    parser.add_argument("--terms-both", action="store_true",
                        help="Vulkan also runs its policy's schedule of a lowering of several "
                             "terms with them split the other way (by the pre-pass, or as it "
                             "stages)")
    parser.add_argument("--nv-also", action="append", default=[], metavar="LOWERING=SCHEDULE",
                        help="a schedule opencl-nv also runs for a lowering, beside CUDA on "
                             "the same schedule; may be repeated")
    opts = parser.parse_args(argv)
    if opts.render:
        result = json.loads(opts.render.read_text())
    else:
        also = tuple((low, name) for low, _, name in (x.partition("=") for x in opts.also))
        nv_also = tuple((low, name) for low, _, name in
                        (x.partition("=") for x in opts.nv_also))
        targets = tuple(opts.targets)
        lowerings = tuple(Lowering(name) for name in opts.lowerings)
        path = ROOT / "bench" / "results" / opts.out
        previous = json.loads(path.read_text()) if path.exists() else None
        runs = [measure(n, also, targets, nv_also, lowerings, opts.terms_both)
                for n in opts.n]
        result = {**runs[0], "n": opts.n[0] if len(opts.n) == 1 else opts.n,
                  "rows": [r for run in runs for r in run["rows"]]}
        result = merged(result, previous, targets, lowerings)
        path.write_text(json.dumps(result, indent=2) + "\n")
    table = markdown(result)
    print(table)
    if opts.readme:
        text = opts.readme.read_text()
        begin, end = MARKERS
        block = f"{begin}\n{table}{end}"
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _: block, text) if begin in text else text + "\n" + block + "\n"
        opts.readme.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
