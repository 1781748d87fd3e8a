"""What CUDA's NaN-exact roundings cost the kernels that convert f32 operands as they stage them.

CUDA's ``sk_f32_to_bf16`` and ``sk_f32_to_f16`` round with PTX ``cvt.rn``, which gives every
NaN ``0x7FFF``, and select a NaN's result apart (the IR's conversions keep its sign, and for
f16 its payload's upper bits; ``specs/backends.md``). Each staged element of Bf16 and F16 of
f32 operands is rounded once, and of Bf16x3 three times, so the selection sits in the
staging's critical path. This benchmark times each such kernel as printed beside the same text
with the two helpers defined otherwise, side by side in rounds:

* ``printed``: as ``sarek.emit`` prints them (the selection in C);
* ``asm select``: the selection as one branch-free PTX ``asm`` (``setp.nan`` + ``selp``), as
  opencl-nv prints bf16;
* ``cvt only``: ``cvt.rn`` alone, no selection: another NaN result, so a bound on what the
  selection costs, not a candidate for the IR's conversion.

The inputs hold no NaN, so every variant's output must equal the printed kernel's bit for bit
(exit 1 otherwise). Writes ``bench/results/nan_rounding_cost_h200.json``.

    python -m bench.nan_rounding_cost_h200 [--n 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from typing import Any

from backends.cuda.run import device_arch, device_name
from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, show, table, write
from bench.text_variants import time_variants, variant_rows
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

KERNELS = (("Bf16_operands", "t128x256k32s3"), ("F16_operands", "t128x256k32s3"),
           ("Bf16x3_operands", "t128x256k16s3"))
"""The f32-operand kernels that round as they stage, under CUDA's schedules for them."""

_CVT = {"bf16": "cvt.rn.bf16.f32", "f16": "cvt.rn.f16.f32"}
_ASM_NAN = {"bf16": "and.b32 q, q, 32768; or.b32 q, q, 32704;",
            "f16": "and.b32 p, q, 8388607; shr.b32 p, p, 13; setp.eq.u32 z, p, 0; "
                   "selp.b32 p, 1, p, z; shr.b32 q, q, 16; and.b32 q, q, 32768; "
                   "or.b32 q, q, 31744; or.b32 q, q, p;"}


def _helper(to: str, body: str) -> str:
    return (f"__device__ inline unsigned short sk_f32_to_{to}(float f) {{\n    {body}\n}}\n")


def _cvt_only(to: str) -> str:
    return _helper(to, f'unsigned short h; asm("{_CVT[to]} %0, %1;" : "=h"(h) : "f"(f)); '
                       "return h;")


def _asm_select(to: str) -> str:
    shift = "" if to == "f16" else "shr.b32 q, q, 16; "
    return _helper(to, 'unsigned h; asm("{ .reg .pred n, z; .reg .b16 t; .reg .b32 q, p; '
                       f'{_CVT[to]} t, %1; cvt.u32.u16 %0, t; setp.nan.f32 n, %1, %1; '
                       f'mov.b32 q, %1; {shift}{_ASM_NAN[to]} selp.b32 %0, q, %0, n; }}" '
                       ': "=r"(h) : "f"(f)); return (unsigned short)h;')


VARIANTS = {"printed": None, "asm select": _asm_select, "cvt only": _cvt_only}


def variant_text(text: str, define: Any) -> str:
    """``text`` with each f32 rounding helper it defines replaced by ``define(to)``'s."""
    if define is None:
        return text
    for to in ("bf16", "f16"):
        head = rf"__device__ inline unsigned short sk_f32_to_{to}\(float f\) \{{"
        found = re.search(head + r".*?\n\}\n", text, re.S)
        if found is not None:
            text = text[:found.start()] + define(to) + text[found.end():]
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n, arch, cuda = args.n, device_arch(), target("cuda")
    launch = load_module(ROOT / "examples" / "gemm_f32.py").make(n, n, n)
    rows: list[dict[str, Any]] = []
    cells: list[tuple[object, ...]] = []
    same_everywhere = True
    for lowering, schedule in KERNELS:
        compiled = compile_launch(cuda, launch, lowering=Lowering(lowering),
                                  schedule=Schedule.parse(schedule))
        measured = time_variants(compiled, arch, {
            name: None if define is None else partial(variant_text, define=define)
            for name, define in VARIANTS.items()}, args.rounds)
        for r in variant_rows(measured, n, lowering=lowering, schedule=schedule):
            same_everywhere &= r["bit_identical_to_printed"]
            rows.append(r)
            cells.append((lowering, schedule, r["variant"], f"{r['tflops']:.1f}",
                          f"{r['vs_printed']:.3f}", r["bit_identical_to_printed"]))
    show(table(f"f32 roundings in staging at {n}^3 on {device_name()}, medians of "
               f"{args.rounds} rounds", ("lowering", "schedule", "helpers", "TFLOP/s",
                                         "x printed", "bits = printed"), cells, left=3))
    write("nan_rounding_cost_h200", {"device": device_name(), "arch": arch, "n": n,
                                     "rounds": args.rounds, "rows": rows})
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
