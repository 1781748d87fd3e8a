"""What taking hi·hi exactly costs Bf16x3 through CUDA on the H200, where the rewrite takes it:
reductions of at most one chunk (``sarek.matrix_scheme.CHUNK``, ``Scheme.exact_top``).

For 4096 x 4096 x K with K in ``--depths`` (each at most ``CHUNK``), the policy's Bf16x3 launch
(the split pre-pass and the GEMM) is compiled twice: as printed, with hi·hi taken exactly (seven
products a sub-step), and with the depth hidden from the scheme (``CHUNK`` set to 0 while it
compiles), which gives the six products of deeper reductions on the same schedule. The two
are timed in alternation, ``--rounds`` rounds of a median of launches each; the table gives the
median of the rounds. Writes ``bench/results/bf16x3_exact_cost_h200.json``.

    python -m bench.bf16x3_exact_cost_h200 [--depths 16 64 128] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import sarek.matrix_scheme as scheme
from backends.cuda.run import device_arch, device_name
from backends.pipeline import Compiled, compile_launch
from backends.registry import target
from bench.gpu_speed_h200 import kernel_seconds
from bench.harness import ROOT, show, table, write
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering

SIZE = 4096


def compiled(k: int, exact: bool) -> Compiled:
    """The policy's Bf16x3 launch of ``examples/gemm_f32.py`` at SIZE x SIZE x ``k``, with
    hi·hi taken exactly as printed or (``exact`` False) the six products."""
    launch = load_module(ROOT / "examples" / "gemm_f32.py").make(SIZE, SIZE, k)
    saved = scheme.CHUNK
    if not exact:
        scheme.CHUNK = 0  # no depth is then one chunk: the six products
    try:
        done = compile_launch(target("cuda"), launch, lowering=Lowering.BF16X3_OPERANDS)
    finally:
        scheme.CHUNK = saved
    if ("sk_top" in done.text) is not exact:
        raise SystemExit(f"K = {k}: the kernel does not take hi·hi as asked (exact={exact})")
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[16, 64, 128])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if any(not 0 < k <= scheme.CHUNK for k in args.depths):
        parser.error(f"--depths: each at most one chunk, 1 to {scheme.CHUNK}")
    arch = device_arch()
    rows: list[dict[str, Any]] = []
    for k in args.depths:
        kinds = {"exact hi·hi": compiled(k, True), "six products": compiled(k, False)}
        rounds: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(args.rounds):
            for name, done in kinds.items():
                rounds[name].append(kernel_seconds(done, arch))
        flops = 2.0 * SIZE * SIZE * k
        exact_s, six_s = (statistics.median(rounds[n]) for n in kinds)
        assert kinds["exact hi·hi"].rewritten is not None
        rows.append({"m": SIZE, "n": SIZE, "k": k,
                     "schedule": kinds["exact hi·hi"].rewritten.schedule.name,
                     "exact_s": exact_s, "six_s": six_s, "exact_tflops": flops / exact_s / 1e12,
                     "six_tflops": flops / six_s / 1e12, "exact_over_six": exact_s / six_s,
                     "rounds": rounds})
    show(table(f"Bf16x3 at {SIZE}x{SIZE}xK on {device_name()}, pre-pass included, medians of "
               f"{args.rounds} rounds", ("K", "schedule", "exact hi·hi ms", "six products ms",
                                         "time ratio"),
               [(r["k"], r["schedule"], f"{r['exact_s'] * 1e3:.3f}", f"{r['six_s'] * 1e3:.3f}",
                 f"{r['exact_over_six']:.3f}") for r in rows]))
    write("bf16x3_exact_cost_h200", {"device": device_name(), "arch": arch, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
