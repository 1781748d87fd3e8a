"""What the epilogue of CUDA's warpgroup F16 kernels costs on the H200.

CUDA prints a warpgroup kernel's epilogue with each lane storing the accumulators it holds
(``backends/cuda/epilogue.py``). The neutral rewrite hands them out through the exchange array
``sk_cs`` instead: each consumer warpgroup in its turn stores its strip there, then its lanes
store the tile's outputs one element a trip of a 128-trip loop. This benchmark times each
kernel as printed beside the same kernel printed with the exchange, side by side in rounds
(``bench/text_variants.py``), the outputs compared bit for bit:

* ``printed``: as ``sarek.emit`` prints it;
* ``through the exchange``: the lowering without ``backends.cuda.epilogue.direct``;
* ``exchange, unroll 4`` / ``exchange, unroll 16``: that text with ``#pragma unroll N`` on each
  epilogue loop;
* ``exchange, no output stores``: that text without the loops' stores of outputs (garbage
  out; a bound on what the loops cost).

Prints a table and writes ``bench/results/epilogue_cost_h200.json`` (``--out``).

    python -m bench.epilogue_cost_h200 [--rounds 5] [--case N:SCHEDULE ...] [--out NAME]
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from backends.cuda import epilogue
from backends.cuda import lower as cuda_lower
from backends.cuda.emit import print_kernel
from backends.cuda.run import device_arch, device_name
from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, show, table, write
from bench.text_variants import Edit, time_variants
from sarek import ir
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

CASES = ("4096:t128x256k64s3gwr", "4096:t128x256k64s3gw", "4096:t128x256k64s3gf",
         "8192:t128x256k64s3gwr")
_LOOP = re.compile(r"\n(\s*)(for \(int sk_q = 0; sk_q < \d+; sk_q \+= 1\) \{)")


def unrolled(text: str, times: int) -> str:
    """Each epilogue loop (``sk_q``) of ``text`` under ``#pragma unroll times``."""
    return _LOOP.sub(lambda m: f"\n{m[1]}#pragma unroll {times}\n{m[1]}{m[2]}", text)


def without(text: str, heads: tuple[str, ...]) -> str:
    """``text`` without the statements that store into the arrays named ``heads``."""
    for head in heads:
        text = re.sub(rf"\n\s*{head}\[[^\n]*\] = [^\n]*;(?=\n)", "", text)
    return text


def through_exchange(kernel: ir.Kernel) -> str:
    """``kernel`` (rewritten) lowered for CUDA and printed with its epilogue through the
    exchange array, as the neutral rewrite writes it."""
    keep = epilogue.direct
    epilogue.direct = lambda stmts, elements: stmts
    try:
        return print_kernel(cuda_lower.lower.__wrapped__(kernel))  # type: ignore[attr-defined]
    finally:
        epilogue.direct = keep


def variants(c: str, exchange: str) -> dict[str, Edit]:
    def before(text: str) -> str:
        return exchange

    return {"printed": None, "through the exchange": before,
            "exchange, unroll 4": lambda text: unrolled(exchange, 4),
            "exchange, unroll 16": lambda text: unrolled(exchange, 16),
            "exchange, no output stores": lambda text: without(exchange, (c,))}


GARBAGE = frozenset({"exchange, no output stores"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--case", action="append", metavar="N:SCHEDULE")
    parser.add_argument("--out", default="epilogue_cost_h200")
    args = parser.parse_args()
    arch, cuda = device_arch(), target("cuda")
    rows: list[dict[str, Any]] = []
    cells: list[tuple[object, ...]] = []
    same = True
    for case in args.case or CASES:
        size, schedule = case.split(":")
        n = int(size)
        launch = load_module(ROOT / "examples" / "gemm_f16.py").make(n, n, n)
        compiled = compile_launch(cuda, launch, lowering=Lowering.F16_OPERANDS,
                                  schedule=Schedule.parse(schedule))
        assert compiled.gemm is not None
        exchange = through_exchange(compiled.runs[-1].launch.kernel)
        measured = time_variants(compiled, arch, variants(compiled.gemm.c.array, exchange),
                                 args.rounds)
        printed_s = measured["printed"]["median_s"]
        for name, m in measured.items():
            if name not in GARBAGE:
                same &= m["same_bits"]
            rows.append({"n": n, "schedule": schedule, "variant": name,
                         "median_s": m["median_s"], "tflops": 2.0 * n**3 / m["median_s"] / 1e12,
                         "vs_printed": printed_s / m["median_s"],
                         "bit_identical_to_printed": m["same_bits"]})
            cells.append((n, schedule, name, f"{m['median_s'] * 1e3:.3f}",
                          f"{rows[-1]['tflops']:.1f}", f"{rows[-1]['vs_printed']:.3f}",
                          m["same_bits"] if name not in GARBAGE else "garbage"))
    show(table(f"the epilogue of F16's warpgroup kernels on {device_name()}, medians "
               f"of {args.rounds} rounds", ("n", "schedule", "variant", "ms", "TFLOP/s",
                                            "x printed", "bits = printed"), cells, left=3))
    write(args.out, {"device": device_name(), "arch": arch,
                                 "rounds": args.rounds, "rows": rows})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
