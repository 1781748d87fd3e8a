"""Hopper's ``wgmma`` against the ``h200`` model: is its arithmetic that of ``mma.sync``?

Issue 13's ``wgmma`` path needs the instruction simulated bit for bit, and ``wgmma`` is said
to differ from ``mma.sync`` on random data, so this probe comes before any lowering onto it.
Each warpgroup (128 threads, one block) runs ``wgmma.mma_async.sync.aligned.m64n16k16`` with
f32 accumulators on f16 or bf16 operands, in two forms: A and B read from shared memory
through matrix descriptors (``ss``: no swizzle, K-major core matrices of 8 rows of 16 bytes),
and A from registers in ``mma.sync.m16n8k16``'s A layout with B transposed in shared memory
(``rs``: core matrices of 8 k-rows of 16 bytes along n, ``imm-trans-b``), once (K = 16) or
twice in one commit group (K = 32, the accumulator chained from the first instruction to the
second). Every output is compared bit for bit with the ``h200`` model
(``sim.tensor_core.mul_add``, a 16-deep fused dot-add per instruction), which matched
``mma.sync.m16n8k16`` on every one of 2,162,688 outputs
(``bench/results/tensor_core_adversarial_h200.json``).

Inputs are the adversarial probe's distributions (``tensor_core_adversarial_h200.draw``): a
problem takes four consecutive 16x16x16 tiles, stacks their A and C (64 rows) and uses the
first tile's B, so the first 16 rows keep each distribution's structure (cancelling pairs,
dominating addends) exactly. K = 32 problems take the next four tiles' A and the fifth tile's
B as the second step.

Before that, two exact checks fix the layouts: with A = B = 0 the output must be C (the
accumulator's lane layout), and with small integers every output must be NumPy's exact
product. The descriptor's two strides are tried in the documented roles first and swapped
second; the probe says which held, and stops if neither did.

    python -m bench.wgmma_probe_h200 [--tiles 384] [--out DIR]

Prints a table per operand type and writes ``wgmma_probe_h200.json`` (under ``--out``, by
default ``bench/results``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from bench.harness import RESULTS, write
from bench.tensor_core_adversarial_h200 import DISTRIBUTIONS, SEED, agree, digest, draw
from sarek import atoms
from sim import tensor_core

M, N, K = 64, 16, 16
THREADS = 128
OPERAND_TYPES = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
CORE = atoms.GMMA_K_INTER  # K-major core matrices of 8 rows of 16 bytes, no swizzle
CORE_K = CORE.bytes  # bytes between core matrices adjacent along K
CORE_MN = CORE.bytes * (K // CORE.shape[1])  # along M or N: the K columns' core matrices
DOCUMENTED = CORE.descriptor_strides(along_mn=CORE_MN, along_k=CORE_K)  # (leading, stride)
MODES = {"ss": "A and B from shared memory, both K-major",
         "rs": "A from registers (mma.sync's A layout), B from shared memory transposed"}

_D = atoms.DESCRIPTOR
_SHIFT = _D.unit.bit_length() - 1
SOURCE = r"""
#define CORE_K @CORE_K@
#define CORE_MN @CORE_MN@
__device__ __forceinline__ int core(int mn, int k) {  // byte offset of (row or column, k)
    return (mn / 8) * CORE_MN + (k / 8) * CORE_K + (mn % 8) * 16 + (k % 8) * 2;
}
__device__ __forceinline__ unsigned long long descriptor(const void* p, int lbo, int sbo) {
    unsigned long long a = (unsigned)__cvta_generic_to_shared(p);
    return ((a & @MASK@) >> @SHIFT@) | ((unsigned long long)(lbo >> @SHIFT@) << @LEADING@)
           | ((unsigned long long)(sbo >> @SHIFT@) << @STRIDE@);
}
extern "C" __global__ void __launch_bounds__(128) probe(
        const unsigned short* a, const unsigned short* b, const float* c, float* d,
        int steps, int lbo, int sbo) {
    // a: [problem][64][16 * steps], b: [problem][16 * steps][16], c, d: [problem][64][16]
    __shared__ __align__(128) unsigned char sa[2][64 * 16 * 2];
    __shared__ __align__(128) unsigned char sb[2][16 * 16 * 2];
    const int p = blockIdx.x, tid = threadIdx.x, kk = 16 * steps;
    for (int s = 0; s < steps; ++s) {
        for (int e = tid; e < 64 * 16; e += 128) {
            int r = e / 16, k = e % 16;
            *(unsigned short*)(sa[s] + core(r, k)) = a[(p * 64 + r) * kk + 16 * s + k];
        }
        for (int e = tid; e < 16 * 16; e += 128) {
            int k = e / 16, n = e % 16;
#if RS  // B transposed (MN-major): core matrices of 8 k-rows of 16 bytes along n
            int at = (n / 8) * CORE_MN + (k / 8) * CORE_K + (k % 8) * 16 + (n % 8) * 2;
#else
            int at = core(n, k);
#endif
            *(unsigned short*)(sb[s] + at) = b[(p * kk + 16 * s + k) * 16 + n];
        }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const int w = tid / 32, g = (tid % 32) / 4, t = tid % 4;
    float acc[8];
    for (int i = 0; i < 8; ++i) {
        int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        acc[i] = c[(p * 64 + row) * 16 + col];
    }
#if RS  // A from registers, in mma.sync m16n8k16's A layout for the warp's 16 rows
    unsigned ra[2][4];
    for (int s = 0; s < steps; ++s)
        for (int r = 0; r < 4; ++r) {
            int row = 16 * w + g + 8 * (r & 1), col = 16 * s + 2 * t + 8 * (r >> 1);
            const unsigned short* x = a + (p * 64 + row) * kk + col;
            ra[s][r] = (unsigned)x[0] | ((unsigned)x[1] << 16);
        }
#endif
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int s = 0; s < steps; ++s) {
        unsigned long long da = descriptor(sa[s], lbo, sbo), db = descriptor(sb[s], lbo, sbo);
#define WGMMA "{\n.reg .pred q;\nsetp.ne.b32 q, 1, 0;\n" \
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.OPERAND.OPERAND " \
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
#define D "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), \
          "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]), "+f"(acc[7])
#if RS
        (void)da;
        asm volatile(WGMMA "{%8, %9, %10, %11}, %12, q, 1, 1, 1;\n}\n" : D
                     : "r"(ra[s][0]), "r"(ra[s][1]), "r"(ra[s][2]), "r"(ra[s][3]), "l"(db)
                     : "memory");
#else
        asm volatile(WGMMA "%8, %9, q, 1, 1, 0, 0;\n}\n" : D : "l"(da), "l"(db) : "memory");
#endif
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 8; ++i) {
        int row = 16 * w + g + 8 * ((i >> 1) & 1), col = 8 * (i >> 2) + 2 * t + (i & 1);
        d[(p * 64 + row) * 16 + col] = acc[i];
    }
}
"""
for _token, _value in (("@CORE_K@", CORE_K), ("@CORE_MN@", CORE_MN), ("@SHIFT@", _SHIFT),
                       ("@MASK@", f"0x{(1 << (_D.field_bits + _SHIFT)) - 1:X}"),
                       ("@LEADING@", _D.leading), ("@STRIDE@", _D.stride)):
    SOURCE = SOURCE.replace(_token, str(_value))


class Device:
    """The probe compiled for sm_90a and launched on device 0."""

    def __init__(self) -> None:
        from backends.cuda.nvrtc import compile_cubin

        self.cubins = {(name, mode): compile_cubin(
            f"#define RS {int(mode == 'rs')}\n" + SOURCE.replace("OPERAND", name), "sm_90a",
            f"wgmma_{name}_{mode}.cu") for name in OPERAND_TYPES for mode in MODES}

    def run(self, operand: str, mode: str, a: np.ndarray, b: np.ndarray, c: np.ndarray,
            strides: tuple[int, int]) -> np.ndarray:
        """``d`` for problems ``a[p, 64, K]``, ``b[p, K, 16]``, ``c[p, 64, 16]`` (K = 16 or
        32) with the descriptor's leading and stride byte offsets ``strides``."""
        from backends.cuda.run import launch_cubin

        problems, steps = a.shape[0], a.shape[2] // K
        params: list[np.ndarray | np.generic] = [
            np.ascontiguousarray(a).view(np.uint16), np.ascontiguousarray(b).view(np.uint16),
            np.ascontiguousarray(c, np.float32), np.zeros(c.shape, np.float32),
            np.int32(steps), np.int32(strides[0]), np.int32(strides[1])]
        out = launch_cubin(self.cubins[operand, mode], "probe", params, (problems, 1, 1),
                           (THREADS, 1, 1))
        d = out[3]
        assert d is not None
        return d.reshape(c.shape)


def model(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The ``h200`` model of the probe: one 16-deep fused dot-add per instruction, chained."""
    d = c.astype(np.float32)
    for s in range(a.shape[2] // K):
        ks = slice(K * s, K * (s + 1))
        d = tensor_core.mul_add(np.ascontiguousarray(a[:, :, ks]),
                                np.ascontiguousarray(b[:, ks, :]), d)
    return d


def problems(a: np.ndarray, b: np.ndarray, c: np.ndarray, steps: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Problems of ``steps`` instructions from 16x16x16 tiles (see the module's docstring)."""
    per = 4 * steps
    count = a.shape[0] // per
    a, b, c = a[:count * per], b[:count * per], c[:count * per]
    tiles_a = a.reshape(count, steps, 4, 16, 16)  # [problem, step, row block, m, k]
    pa = tiles_a.transpose(0, 2, 3, 1, 4).reshape(count, M, K * steps)
    pb = b.reshape(count, steps, 4, 16, 16)[:, :, 0].reshape(count, K * steps, N)
    pc = c.reshape(count, steps, 4, 16, 16)[:, 0].reshape(count, M, N)
    return pa, pb, pc


def layout_checks(dev: Device, operand: str, mode: str) -> dict[str, Any]:
    """The accumulator's layout (A = B = 0: d must be c) and the descriptors' (small exact
    integers), each stride assignment tried; which held."""
    dt = OPERAND_TYPES[operand]
    rng = np.random.default_rng(SEED)
    c = (np.arange(2 * M * N, dtype=np.float32) + 1).reshape(2, M, N)
    zero_a, zero_b = np.zeros((2, M, K), dt), np.zeros((2, K, N), dt)
    accumulator = bool((dev.run(operand, mode, zero_a, zero_b, c, DOCUMENTED) == c).all())
    a = rng.integers(-4, 5, (2, M, 2 * K)).astype(dt)
    b = rng.integers(-4, 5, (2, 2 * K, N)).astype(dt)
    c = rng.integers(-64, 65, (2, M, N)).astype(np.float32)
    exact = np.einsum("pmk,pkn->pmn", a.astype(np.float64), b.astype(np.float64)) + c
    held = None
    for strides in (DOCUMENTED, DOCUMENTED[::-1]):
        if (dev.run(operand, mode, a, b, c, strides) == exact).all():
            held = strides
            break
    return {"accumulator_layout_holds": accumulator,
            "descriptor_strides": None if held is None else
            {"leading_byte_offset": held[0], "stride_byte_offset": held[1]},
            "documented_roles": held == DOCUMENTED}


def compare(dev: Device, operand: str, mode: str, tiles: int, strides: tuple[int, int]
            ) -> list[dict[str, Any]]:
    rows = []
    for name in DISTRIBUTIONS:
        a, b, c = draw(SEED, operand, name, tiles)
        for steps in (1, 2):
            pa, pb, pc = problems(a, b, c, steps)
            got = dev.run(operand, mode, pa, pb, pc, strides)
            want = model(pa, pb, pc)
            same = agree(got, want)
            rows.append({"operand": operand, "mode": mode, "distribution": name,
                         "k": K * steps,
                         "outputs": int(same.size), "mismatches": int((~same).sum()),
                         "first_16_rows_mismatches": int((~same[:, :16]).sum()),
                         "inputs_sha256": digest(pa, pb, pc),
                         "device_sha256": digest(got)})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", type=int, default=384,
                        help="16x16x16 tiles drawn per distribution (default 384)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from rich.console import Console
    from rich.table import Table

    from backends.cuda.run import device_name

    dev = Device()
    report: dict[str, Any] = {"device": device_name(), "seed": SEED, "tiles": args.tiles,
                              "instruction": "wgmma.mma_async.sync.aligned.m64n16k16.f32",
                              "layouts": {}, "rows": []}
    console = Console()
    ok = True
    for operand in OPERAND_TYPES:
        for mode, what in MODES.items():
            checks = layout_checks(dev, operand, mode)
            report["layouts"][f"{operand} {mode}"] = {"what": what, **checks}
            strides = checks["descriptor_strides"]
            if not checks["accumulator_layout_holds"] or strides is None:
                console.print(f"{operand} {mode}: the layout checks failed: {checks}")
                ok = False
                continue
            rows = compare(dev, operand, mode, args.tiles,
                           (strides["leading_byte_offset"], strides["stride_byte_offset"]))
            report["rows"] += rows
            table = Table(title=f"wgmma {operand}, {what}, against the h200 model "
                                f"({report['device']})")
            for col in ("distribution", "K", "outputs", "mismatches", "in rows 0-15"):
                table.add_column(col, justify="left" if col == "distribution" else "right")
            for r in rows:
                table.add_row(r["distribution"], str(r["k"]), f"{r['outputs']:,}",
                              f"{r['mismatches']:,}", f"{r['first_16_rows_mismatches']:,}")
            console.print(table)
    write("wgmma_probe_h200", report, args.out / "wgmma_probe_h200.json")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
