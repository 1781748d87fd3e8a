"""What the epilogue of CUDA's warp-specialized F16 kernels costs on the H200.

The consumer warpgroups of ``t128x256k64s3gw`` (and ``...gwr``) hand their accumulators to the
block's threads through the exchange array ``sk_cs``: each warpgroup in its turn stores its
fragments there, then its lanes store the tile's outputs, on a whole tile four consecutive f16
outputs a trip of a 32-trip loop (one 8-byte packed store), on the others one output a trip of
a 128-trip loop (``specs/matrix-pattern-rewrite.md``, the epilogue). This benchmark times each
kernel as printed beside the same text edited, side by side in rounds
(``bench/text_variants.py``):

* ``printed``: as ``sarek.emit`` prints it;
* ``one output a time``: every tile through the loop of one output a trip (``sk_whole``
  false: the printing before packed outputs; the same bits);
* ``unroll 4`` / ``unroll 16``: ``#pragma unroll N`` on each epilogue loop (the same bits);
* ``no output stores``: the loops' stores of outputs removed (the exchange kept): garbage out,
  a bound on what the loops cost. (Removing the exchange's stores as well leaves the
  accumulators dead, and ptxas then keeps one of the step's four ``wgmma``: no bound at all.)
* ``--text NAME=FILE``: the kernel as another printing gave it (the same kernel's text saved
  from an earlier checkout, say), launched as this one is (its dynamic shared memory at most
  this printing's).

Prints a table and writes ``bench/results/epilogue_cost_h200.json``.

    python -m bench.epilogue_cost_h200 [--rounds 5] [--case N:SCHEDULE ...] [--text NAME=FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any

from backends.cuda.run import device_arch, device_name
from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, show, table, write
from bench.text_variants import Edit, time_variants, variant_rows
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

CASES = ("4096:t128x256k64s3gw", "4096:t128x256k64s3gwr", "8192:t128x256k64s3gw")
_LOOP = re.compile(r"\n(\s*)(for \(int sk_q = 0; sk_q < \d+; sk_q \+= 1\) \{)")


def unrolled(text: str, times: int) -> str:
    """Each epilogue loop (``sk_q``) of ``text`` under ``#pragma unroll times``."""
    return _LOOP.sub(lambda m: f"\n{m[1]}#pragma unroll {times}\n{m[1]}{m[2]}", text)


def without(text: str, heads: tuple[str, ...]) -> str:
    """``text`` without the statements that store into the arrays named ``heads`` (element
    stores and packed ones)."""
    for head in heads:
        text = re.sub(rf"\n\s*(\*\(\([^()]*\)&)?{head}\[[^\n]*\]\)? = [^\n]*;(?=\n)", "", text)
    return text


def one_at_a_time(text: str) -> str:
    """``text`` with no tile taking the packed outputs."""
    return re.sub(r"bool sk_whole = [^\n]*;", "bool sk_whole = false;", text)


def variants(c: str, texts: dict[str, str]) -> dict[str, Edit]:
    def replaced(text: str, by: str) -> str:
        return by

    return {"printed": None, "one output a time": one_at_a_time,
            "unroll 4": partial(unrolled, times=4), "unroll 16": partial(unrolled, times=16),
            **{name: partial(replaced, by=text) for name, text in texts.items()},
            "no output stores": partial(without, heads=(c,))}


GARBAGE = frozenset({"no output stores"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--case", action="append", metavar="N:SCHEDULE")
    parser.add_argument("--text", action="append", default=[], metavar="NAME=FILE",
                        help="time this text of the kernel too, as variant NAME")
    args = parser.parse_args()
    texts = {name: Path(file).read_text() for name, file in
             (t.split("=", 1) for t in args.text)}
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
        measured = time_variants(compiled, arch, variants(compiled.gemm.c.array, texts),
                                 args.rounds)
        for r in variant_rows(measured, n, n=n, schedule=schedule):
            name, bits = r["variant"], r["bit_identical_to_printed"]
            same &= bits or name in GARBAGE
            rows.append(r)
            cells.append((n, schedule, name, f"{r['median_s'] * 1e3:.3f}", f"{r['tflops']:.1f}",
                          f"{r['vs_printed']:.3f}", bits if name not in GARBAGE else "garbage"))
    show(table(f"the epilogue of F16's warp-specialized kernels on {device_name()}, medians "
               f"of {args.rounds} rounds", ("n", "schedule", "variant", "ms", "TFLOP/s",
                                            "x printed", "bits = printed"), cells, left=3))
    write("epilogue_cost_h200", {"device": device_name(), "arch": arch,
                                 "rounds": args.rounds, "rows": rows})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
