"""Simulation speed of the rewritten kernels, and the time to recognize and rewrite.

For the naive f32, f16 and int32 GEMM examples at 128^3 and 256^3: the median of several runs
of ``sim.simulate`` of the original launch and of each rewritten launch (``F16_operands`` for
the f16 example, ``Bf16x3_operands`` and ``Bf16_operands`` for f32, ``Int32_byte_planes`` for
int32; subgroup 32, fragments 16 and 8), each with its ratio to the original's simulation
measured in the same run. Then the median time of ``recognize`` + ``matrix_rewrite.kernel``
and of the whole ``rewrite_launch`` (recognize, region, select, rewrite) per example. Prints
tables and writes bench/results/rewrite_speed.json. Run: ``python -m bench.rewrite_speed``.

Targets (reported, never asserted): the rewritten F16 kernel at 256^3 simulates in at most 3x
the original's time (issue 4); a 128^3 GEMM, original or rewritten, simulates in under 0.09 s
; recognize + rewrite + emit every target under 1 s (measured for CUDA, the
slowest printer, as ``compile_launch``: the rewrite under CUDA's staging, lowered and printed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial

from backends.pipeline import compile_launch
from backends.registry import target
from bench.harness import ROOT, machine, relative, show, table, wall, write
from sarek import ir
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import kernel, rewrite_launch
from sarek.matrix_scheme import Lowering

EXAMPLES = {
    "gemm_f16": (Lowering.F16_OPERANDS,),
    "gemm_f32": (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS),
    "gemm_i32": (Lowering.INT32_BYTE_PLANES,),
}
SIZES = (128, 256)
FRAGMENTS = (16, 8)
SUBGROUP = 32
F16_RATIO_TARGET = 3.0
SIM_128_TARGET_S = 0.09


@dataclass(frozen=True)
class SimRow:
    """One simulated launch: the original (``frag`` None) or a rewritten one."""

    example: str
    size: int
    kernel: str
    frag: int | None
    simulate_s: float
    ratio_to_original: float
    repeats: int


@dataclass(frozen=True)
class RewriteRow:
    example: str
    lowering: str
    recognize_rewrite_s: float
    rewrite_launch_s: float
    recognize_rewrite_emit_cuda_s: float


def simulation_rows() -> list[SimRow]:
    rows: list[SimRow] = []
    for stem, lowerings in EXAMPLES.items():
        module = load_module(ROOT / "examples" / f"{stem}.py")
        for size in SIZES:
            launch = module.make(size, size, size)
            repeats = 7 if size <= 128 else 3
            base = wall(launch.simulate, repeats).median_s
            rows.append(SimRow(stem, size, "original", None, base, 1.0, repeats))
            for lowering in lowerings:
                for frag in FRAGMENTS:
                    rw = rewrite_launch(launch, lowering=lowering, subgroup=SUBGROUP, frag=frag)
                    sim = wall(partial(rw.launch.simulate, subgroup=SUBGROUP), repeats).median_s
                    rows.append(SimRow(stem, size, lowering.value, frag, sim, sim / base,
                                       repeats))
    return rows


def recognize_and_rewrite(original: ir.Kernel, lowering: Lowering) -> ir.Kernel:
    return kernel(original, recognize(original), lowering, SUBGROUP, 16)


def recognize_rewrite_emit(original: Launch, lowering: Lowering) -> str:
    """The whole path to CUDA text: ``compile_launch``."""
    return compile_launch(target("cuda"), original, lowering=lowering).text


def rewrite_rows() -> list[RewriteRow]:
    rows: list[RewriteRow] = []
    for stem, lowerings in EXAMPLES.items():
        launch = load_module(ROOT / "examples" / f"{stem}.py").make(256, 256, 256)
        for lowering in lowerings:
            rows.append(RewriteRow(
                stem, lowering.value,
                wall(partial(recognize_and_rewrite, launch.kernel, lowering), 21).median_s,
                wall(partial(rewrite_launch, launch, lowering=lowering), 21).median_s,
                wall(partial(recognize_rewrite_emit, launch, lowering), 11).median_s))
    return rows


def main() -> None:
    sims, rewrites = simulation_rows(), rewrite_rows()
    ratio = next(r.ratio_to_original for r in sims if r.example == "gemm_f16" and r.size == 256
                 and r.kernel == Lowering.F16_OPERANDS.value and r.frag == 16)
    over = [f"{r.example} {r.kernel} frag {r.frag}" for r in sims
            if r.size == 128 and r.simulate_s > SIM_128_TARGET_S]
    host = machine()
    path = write("rewrite_speed", {
        "machine": host["machine"], "python": host["python"], "numpy": host["numpy"],
        "subgroup": SUBGROUP,
        "simulation": [asdict(r) for r in sims], "rewrite": [asdict(w) for w in rewrites],
        "f16_256_ratio": ratio, "f16_256_ratio_target": F16_RATIO_TARGET,
        "f16_256_meets_target": ratio <= F16_RATIO_TARGET,
        "sim_128_target_s": SIM_128_TARGET_S, "sim_128_over_target": over,
    })
    show(table("simulating each rewrite beside its original (medians)",
               ("example", "size", "kernel", "frag", "simulate", "ratio"),
               [(r.example, r.size, r.kernel, r.frag, f"{r.simulate_s * 1e3:.1f} ms",
                 f"{r.ratio_to_original:.2f}") for r in sims], left=3),
         f"F16_operands at 256^3, fragment 16: {ratio:.2f}x the original "
         f"(target <= {F16_RATIO_TARGET}x: {'ok' if ratio <= F16_RATIO_TARGET else 'MISSED'})",
         f"128^3 simulations over {SIM_128_TARGET_S} s: {', '.join(over) or 'none'}",
         table("recognize and rewrite at 256^3 (medians)",
               ("example", "lowering", "recognize+rewrite", "rewrite_launch", "+ emit CUDA"),
               [(w.example, w.lowering, f"{w.recognize_rewrite_s * 1e3:.1f} ms",
                 f"{w.rewrite_launch_s * 1e3:.1f} ms",
                 f"{w.recognize_rewrite_emit_cuda_s * 1e3:.1f} ms") for w in rewrites], left=2),
         f"wrote {relative(path)}")


if __name__ == "__main__":
    main()
