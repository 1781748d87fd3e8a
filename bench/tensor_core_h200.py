"""The H200's tensor cores against the simulator's arithmetic models, bit for bit.

Runs single ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32`` instructions
(one 16x16x8 tile per warp) on inputs drawn from several distributions, and compares every
output with the models of ``sim.fragments``: ``h200`` (the fused dot-add with 25 alignment bits
and truncation, ``sim/tensor_core.py``), ``sequential`` and ``exact``. Writes
bench/results/tensor_core_h200.json and prints the mismatch counts. Needs an NVIDIA GPU.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.cuda.nvrtc import compile_cubin  # noqa: E402
from backends.cuda.run import device_arch, device_name, launch_cubin  # noqa: E402
from sim.fragments import mul_add  # noqa: E402

# One warp per tile; lane maps of mma.sync m16n8k16 (g = lane / 4, t = lane % 4): A element i
# at row g + 8*((i/2)%2), column 2t + i%2 + 8*(i/4); B element i at k = 2t + i%2 + 8*(i/2),
# n = g; C element i at row g + 8*(i/2), column 2t + i%2. Register r holds elements 2r (low
# half) and 2r+1 (high half).
SOURCE = r"""
extern "C" __global__ void mma_probe_TYPE(const unsigned short* A, const unsigned short* B,
                                          const float* C, float* D) {
    const int t = blockIdx.x, lane = threadIdx.x, g = lane >> 2, q = lane & 3;
    const unsigned short* a = A + t * 256;
    const unsigned short* b = B + t * 128;
    const float* c = C + t * 128;
    float* d = D + t * 128;
    unsigned ra[4], rb[2];
    float rc[4], rd[4];
    for (int r = 0; r < 4; ++r) {
        unsigned half[2];
        for (int h = 0; h < 2; ++h) {
            int i = 2 * r + h;
            half[h] = a[(g + 8 * ((i >> 1) & 1)) * 16 + 2 * q + (i & 1) + 8 * (i >> 2)];
        }
        ra[r] = half[0] | (half[1] << 16);
    }
    for (int r = 0; r < 2; ++r) {
        unsigned half[2];
        for (int h = 0; h < 2; ++h) {
            int i = 2 * r + h;
            half[h] = b[(2 * q + (i & 1) + 8 * (i >> 1)) * 8 + g];
        }
        rb[r] = half[0] | (half[1] << 16);
    }
    for (int i = 0; i < 4; ++i) rc[i] = c[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.TYPE.TYPE.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
                 : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
                 : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]),
                   "f"(rc[0]), "f"(rc[1]), "f"(rc[2]), "f"(rc[3]));
    for (int i = 0; i < 4; ++i) d[(g + 8 * (i >> 1)) * 8 + 2 * q + (i & 1)] = rd[i];
}
"""

TILES = 400
Draw = Callable[[np.random.Generator, type], tuple[np.ndarray, np.ndarray, np.ndarray]]


def scaled(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    return rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)


def distributions() -> dict[str, Draw]:
    def normal(rng: np.random.Generator, dt: type) -> tuple[np.ndarray, ...]:
        return (rng.standard_normal((TILES, 16, 16)), rng.standard_normal((TILES, 16, 8)),
                rng.standard_normal((TILES, 16, 8)))

    def wide(rng: np.random.Generator, dt: type) -> tuple[np.ndarray, ...]:
        return (scaled(rng, (TILES, 16, 16), -12, 12), scaled(rng, (TILES, 16, 8), -12, 12),
                scaled(rng, (TILES, 16, 8), -16, 16))

    def tiny_products(rng: np.random.Generator, dt: type) -> tuple[np.ndarray, ...]:
        return (scaled(rng, (TILES, 16, 16), -12, -4), scaled(rng, (TILES, 16, 8), -12, -4),
                scaled(rng, (TILES, 16, 8), 0, 8))

    def cancelling(rng: np.random.Generator, dt: type) -> tuple[np.ndarray, ...]:
        a = rng.standard_normal((TILES, 16, 16)).astype(dt).astype(np.float64)
        b = rng.standard_normal((TILES, 16, 8)).astype(dt).astype(np.float64)
        near = -(a @ b) * (1 + rng.standard_normal((TILES, 16, 8)) * 2.0**-20)
        return a, b, near

    def subnormal(rng: np.random.Generator, dt: type) -> tuple[np.ndarray, ...]:
        tiny = 2.0**-20 if dt is np.float16 else 2.0**-130
        return (rng.standard_normal((TILES, 16, 16)) * tiny,
                rng.standard_normal((TILES, 16, 8)), rng.standard_normal((TILES, 16, 8)) * tiny)

    return {"normal": normal, "wide exponents": wide, "tiny products, large c": tiny_products,
            "cancellation": cancelling, "subnormal operands": subnormal}


def main() -> int:
    rng = np.random.default_rng(2026)
    arch = device_arch()
    rows = []
    for name, dt in (("f16", np.float16), ("bf16", ml_dtypes.bfloat16)):
        cubin = compile_cubin(SOURCE.replace("TYPE", name), arch, f"mma_{name}.cu")
        for label, draw in distributions().items():
            a, b, c = draw(rng, dt)
            a, b, c = a.astype(dt), b.astype(dt), c.astype(np.float32)
            out = launch_cubin(cubin, f"mma_probe_{name}",
                               [a.view(np.uint16), b.view(np.uint16), c,
                                np.zeros_like(c)], (TILES,), (32,))[3]
            assert out is not None
            device = out.reshape(c.shape)
            counts = {}
            for model in ("h200", "sequential", "exact"):
                want = mul_add(a, b, c, model)  # type: ignore[arg-type]
                counts[model] = int(np.count_nonzero(device.view(np.uint32) != want.view(
                    np.uint32)))
            rows.append({"operands": name, "distribution": label, "outputs": int(device.size),
                         "mismatches": counts})
            print(f"{name:5} {label:24} {device.size:>7} outputs  mismatches: "
                  + "  ".join(f"{m} {n}" for m, n in counts.items()))
    ok = all(r["mismatches"]["h200"] == 0 for r in rows)
    result = {"device": device_name(), "arch": arch, "instruction": "mma.sync m16n8k16 f32",
              "h200_model_bit_exact": ok, "rows": rows}
    path = ROOT / "bench" / "results" / "tensor_core_h200.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print("h200 model bit-exact on every output:", ok)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
