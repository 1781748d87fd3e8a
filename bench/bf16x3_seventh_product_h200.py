"""What a seventh product a sub-step would cost Bf16x3 through CUDA on the H200: an upper bound
on the speed of an exact hi·hi (``bench/bf16x3_accuracy_model.py``).

The exact hi·hi multiplies hi·hi twice a sub-step (the second time onto the negated first
result), adds two sums a sub-step to the running one instead of one, and negates an
accumulator. This benchmark times the policy's Bf16x3 kernel as printed beside the same text
edited (``bench/text_variants.py``, side by side in rounds):

* ``printed``: as ``sarek.emit`` prints it;
* ``seven products``: every hi·hi ``wgmma`` issued twice in its group (garbage out);
* ``seven products, two adds, a negation``: that, with each running add done twice and each
  fresh accumulator negated where it was filled with -0.0 (garbage out).

Neither waits inside a group for the first hi·hi, as the exact hi·hi must (the negation needs
its result), so both are bounds from above on its speed. cuBLAS SGEMM (TF32 off) is timed
beside. Prints a table and writes ``bench/results/bf16x3_seventh_product_h200.json``.

    python -m bench.bf16x3_seventh_product_h200 [--n 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from backends.cuda.run import device_arch, device_name
from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, show, table, write
from bench.schedule_sweep_h200 import cublas_seconds
from bench.text_variants import Edit, time_variants, variant_rows
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering

_HI_HI = re.compile(r"^([ \t]*asm volatile\(\"\{\\n\.reg \.pred p;[^\n]*wgmma\.mma_async[^\n]*"
                    r"&sk_a_hi\[[^\n]*&sk_b_hi\[[^\n]*)$", re.M)
_RUNNING_ADD = re.compile(r"^([ \t]*sk_acc\w+\[\w+\] = __fadd_rn\(sk_acc[^\n]*;)$", re.M)
_FILL = re.compile(r'asm volatile\("mov\.b32 %0, 0x80000000;" : "=f"\((sk_step\w+\[\w+\])\)\);')


def seven_products(text: str) -> str:
    """Each hi·hi ``wgmma`` of ``text`` issued twice."""
    out, count = _HI_HI.subn(r"\1\n\1", text)
    assert count, "no hi·hi wgmma found in the printed kernel"
    return out


def seven_products_two_adds(text: str) -> str:
    """``seven_products``, each running add done twice and each fill a negation."""
    out, adds = _RUNNING_ADD.subn(r"\1\n\1", seven_products(text))
    out, fills = _FILL.subn(r"\1 = -\1;", out)
    assert adds and fills, "no running add or fill found in the printed kernel"
    return out


VARIANTS: dict[str, Edit] = {"printed": None, "seven products": seven_products,
                             "seven products, two adds, a negation": seven_products_two_adds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, arch = args.n, device_arch()
    launch = load_module(ROOT / "examples" / "gemm_f32.py").make(n, n, n)
    compiled = compile_launch(target("cuda"), launch, lowering=Lowering.BF16X3_OPERANDS)
    assert compiled.rewritten is not None
    schedule = compiled.rewritten.schedule.name
    measured = time_variants(compiled, arch, VARIANTS, args.rounds)
    sgemm = cublas_seconds(n, "f32")
    sgemm_tflops = 2.0 * n ** 3 / sgemm / 1e12
    rows: list[dict[str, Any]] = []
    cells: list[tuple[object, ...]] = []
    for r in variant_rows(measured, n, n=n, schedule=schedule):
        r["vs_cublas_sgemm"] = r["tflops"] / sgemm_tflops
        rows.append(r)
        cells.append((r["variant"], f"{r['median_s'] * 1e3:.3f}", f"{r['tflops']:.1f}",
                      f"{r['vs_cublas_sgemm']:.3f}",
                      r["bit_identical_to_printed"] if r["variant"] == "printed" else "garbage"))
    cells.append(("cuBLAS SGEMM (TF32 off)", f"{sgemm * 1e3:.3f}", f"{sgemm_tflops:.1f}",
                  "1.000", ""))
    show(table(f"Bf16x3 {schedule} at {n}^3 on {device_name()}, medians of {args.rounds} rounds",
               ("variant", "ms", "TFLOP/s", "x cuBLAS SGEMM", "bits"), cells, left=1))
    write("bf16x3_seventh_product_h200", {
        "device": device_name(), "arch": arch, "n": n, "schedule": schedule,
        "rounds": args.rounds, "cublas_sgemm_s": sgemm, "cublas_sgemm_tflops": sgemm_tflops,
        "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
