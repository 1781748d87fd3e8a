"""One rewritten kernel launched a few times on the device, for a profiler to look at.

    ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        python -m bench.profile_h200 --lowering F16_operands --schedule t128k64s3 [--n 4096]

Prints the kernel's name, its median time over the launches (CUDA events) and its TFLOP/s.
With ``--text FILE`` the kernel launched is that CUDA text (a variant of the printed kernel,
its function named as the printed one's) in place of the printing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from backends.cuda.launch import launchables
from backends.cuda.run import device_arch, time_steps
from backends.pipeline import compile_launch
from backends.registry import target
from bench.gpu_speed_h200 import REPEATS, host_values, kernel_seconds
from bench.harness import ROOT, Timing
from bench.schedule_sweep_h200 import EXAMPLE
from bench.text_variants import in_place
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--lowering", required=True, choices=[x.value for x in Lowering])
    parser.add_argument("--schedule", required=True)
    parser.add_argument("--text", type=Path, help="CUDA text launched instead of the printing")
    args = parser.parse_args()
    lowering = Lowering(args.lowering)
    launch = load_module(ROOT / "examples" / f"{EXAMPLE[lowering]}.py").make(args.n, args.n,
                                                                             args.n)
    rw = compile_launch(target("cuda"), launch, lowering=lowering,
                        schedule=Schedule.parse(args.schedule))
    arch = device_arch()
    if args.text is None:
        s = kernel_seconds(rw, arch)
    else:
        values = host_values(rw)
        steps = in_place(launchables(rw, values), args.text.read_text(), arch, args.text.name)
        s = Timing.of(time_steps(steps, values, REPEATS)).median_s
    print(f"{rw.kernel.name}: {s * 1e3:.3f} ms, {2.0 * args.n**3 / s / 1e12:.1f} TFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
