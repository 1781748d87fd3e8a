"""The H200's tensor cores against the simulator's arithmetic models, bit for bit.

The probe is a sarek kernel: each warp (a block of 32, one subgroup) loads a 16x16 A fragment,
a 16x16 B fragment and a 16x16 f32 accumulator of its tile from global memory, multiplies them
once and stores D. ``sarek.emit(kernel, "cuda")`` lowers that to lane-explicit element moves
and two ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` per warp (the lane
maps are ``sarek.atoms.MMA``'s), so every output is one instruction's output. The device runs
the printed CUDA (``backends.cuda.run.run``); the simulator runs the same lowered kernel lane
by lane (``sarek.simulate(..., target="cuda", arith=MODEL)``) under each model of
``sim.fragments``: ``h200`` (the fused dot-add with 25 alignment bits and truncation,
``sim/tensor_core.py``), ``sequential`` and ``exact``. Inputs come from several distributions.
Writes bench/results/tensor_core_h200.json and prints the mismatch counts. Needs an NVIDIA GPU;
``--dry-run`` builds and prints the kernels and runs the simulator side on a few tiles only,
counting each model's mismatches against the h200 model, with no device and no JSON.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np

import sarek
from backends.cuda.run import device_arch, device_name, run
from bench.harness import write
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, FragUse

TILES = 400
DRY_TILES = 4
WARP = 32
N = 16  # every fragment is N x N, row-major, tile t at element t * N * N
MODELS = ("h200", "sequential", "exact")
OPERANDS = {"f16": (ElemType.F16, np.float16), "bf16": (ElemType.BF16, ml_dtypes.bfloat16)}
Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]
Draw = Callable[[np.random.Generator, type, int], Inputs]


def probe_kernel(name: str, operand: ElemType) -> ir.Kernel:
    """``d[t] = a[t] @ b[t] + c[t]`` for the tile ``t = block_idx.x``, in fragments."""
    i32 = ElemType.I32
    tile = ir.BuiltinValue(which=Builtin.BLOCK_IDX_X)
    offset = ir.Binary(op=BinOp.MUL, a=tile, b=ir.Const(value=N * N, type=i32), type=i32)
    stride = ir.Const(value=N, type=i32)
    frags = {"fa": (FragUse.A, operand), "fb": (FragUse.B, operand),
             "fc": (FragUse.ACCUMULATOR, ElemType.F32), "fd": (FragUse.ACCUMULATOR, ElemType.F32)}
    shape = ir.FragShape(m=N, n=N, k=N)
    body: list[ir.Stmt] = [ir.FragDecl(name=f, use=use, shape=shape, elem=elem)
                           for f, (use, elem) in frags.items()]
    body += [ir.FragLoad(frag=f, array=array, offset=offset, stride=stride)
             for f, array in (("fa", "a"), ("fb", "b"), ("fc", "c"))]
    body += [ir.FragMulAdd(d="fd", a="fa", b="fb", c="fc"),
             ir.FragStore(frag="fd", array="d", offset=offset, stride=stride)]
    params = tuple(ir.ArrayParam(name=array, elem=elem) for array, elem in (
        ("a", operand), ("b", operand), ("c", ElemType.F32), ("d", ElemType.F32)))
    return ir.Kernel(name=f"mma_probe_{name}", params=params, body=tuple(body), subgroup=WARP,
                     block=(WARP, 1, 1))


def scaled(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    return rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)


def distributions() -> dict[str, Draw]:
    def normal(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (rng.standard_normal(shape), rng.standard_normal(shape),
                rng.standard_normal(shape))

    def wide(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (scaled(rng, shape, -12, 12), scaled(rng, shape, -12, 12),
                scaled(rng, shape, -16, 16))

    def tiny_products(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (scaled(rng, shape, -12, -4), scaled(rng, shape, -12, -4),
                scaled(rng, shape, 0, 8))

    def cancelling(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        a = rng.standard_normal(shape).astype(dt).astype(np.float64)
        b = rng.standard_normal(shape).astype(dt).astype(np.float64)
        near = -(a @ b) * (1 + rng.standard_normal(shape) * 2.0**-20)
        return a, b, near

    def subnormal(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        tiny = 2.0**-20 if dt is np.float16 else 2.0**-130
        return (rng.standard_normal(shape) * tiny, rng.standard_normal(shape),
                rng.standard_normal(shape) * tiny)

    return {"normal": normal, "wide exponents": wide, "tiny products, large c": tiny_products,
            "cancellation": cancelling, "subnormal operands": subnormal}


def mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Outputs whose bits differ."""
    return int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="mma.sync on the device against the "
                                     "simulator's arithmetic models")
    parser.add_argument("--dry-run", action="store_true",
                        help=f"build the kernels and run the simulator side on {DRY_TILES} "
                        "tiles against its own h200 model; no device, no JSON")
    options = parser.parse_args(argv)
    dry = bool(options.dry_run)
    tiles = DRY_TILES if dry else TILES
    arch = None if dry else device_arch()
    rng = np.random.default_rng(2026)
    rows: list[dict[str, Any]] = []
    for name, (elem, dt) in OPERANDS.items():
        kernel = probe_kernel(name, elem)
        source = sarek.emit(kernel, "cuda")  # what run compiles, printed from the lowering
        print(f"{kernel.name}: {len(source.splitlines())} lines of CUDA, "
              f"{source.count('mma.sync')} mma.sync per warp")
        for label, draw in distributions().items():
            a, b, c = draw(rng, dt, tiles)
            args = {"a": a.astype(dt).ravel(), "b": b.astype(dt).ravel(),
                    "c": c.astype(np.float32).ravel(), "d": np.zeros(c.size, np.float32)}
            simulated = {m: sarek.simulate(kernel, args, grid=tiles, block=WARP,
                                           target="cuda", arith=m)["d"] for m in MODELS}
            reference = simulated["h200"] if dry else run(
                kernel, args, (tiles, 1, 1), (WARP, 1, 1), arch)["d"]
            counts = {m: mismatches(reference, simulated[m]) for m in MODELS}
            rows.append({"operands": name, "distribution": label,
                         "outputs": int(reference.size), "mismatches": counts})
            print(f"{name:5} {label:24} {reference.size:>7} outputs  mismatches: "
                  + "  ".join(f"{m} {n}" for m, n in counts.items()))
    if dry:
        print(f"dry run: the simulator side on {tiles} tiles, each model against the h200 "
              "model; no device ran")
        return 0
    ok = all(r["mismatches"]["h200"] == 0 for r in rows)
    result = {"device": device_name(), "arch": arch, "instruction": "mma.sync m16n8k16 f32",
              "h200_model_bit_exact": ok, "rows": rows}
    write("tensor_core_h200", result)
    print("h200 model bit-exact on every output:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
