"""The H200's tensor cores against the ``h200`` model on over a million hard cases per type.

Each output of ``mma.sync.m16n8k16`` (f16 or bf16 operands, f32 accumulator) is one fused
dot-add of 16 products and an addend; this probe draws 1,081,344 of them per operand type from
named distributions weighted to where a model of that dot-add can go wrong (exponent spread,
exact cancellation, overflow, subnormals, signed zeros, infinities and NaN, a dominating
addend, the cases where MMA-Sim's Hopper model and ours disagree), plus plain random inputs.
The kernel is ``bench/tensor_core_h200.py``'s probe (one 16x16x16 fragment multiply-add per
warp, printed by ``sarek.emit(kernel, "cuda")``).

Two phases, so that the device does little:

* ``--device-out FILE.npz`` (on the GPU machine) draws the inputs from the seed, runs one launch
  per type and saves the outputs' bits, the seed and the inputs' SHA-256 digests, compressed;
* ``--compare FILE.npz`` (anywhere) draws the same inputs again (checking their digests), runs
  the ``h200`` model on whole batches (``sim.tensor_core.mul_add``) and, on the first
  ``SIM_TILES`` tiles of each distribution, the full lane-by-lane path
  (``sarek.simulate(..., target="cuda", arith="h200")``), counts mismatches per distribution
  and writes ``bench/results/tensor_core_adversarial_h200.json`` with every mismatching case in
  full.

Outputs agree when their bits are equal: the model gives the device's canonical NaN and +0 for
a zero result, so NaN payloads and zero signs count (the device's NaN patterns are also
tallied in the JSON). ``--dry-run``
runs both phases here on ``DRY_TILES`` tiles per distribution, with the simulator running the
lowered kernel in the device's place, and writes nothing under ``bench/results``.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

import sarek
from bench.harness import RESULTS, ROOT, show, table, write
from bench.tensor_core_h200 import OPERANDS, WARP, probe_kernel
from sim import tensor_core

SEED = 20261201
TILES = 384  # per distribution: 11 distributions x 384 tiles x 256 outputs = 1,081,344 a type
DRY_TILES = 2
SIM_TILES = 8  # tiles per distribution also run lane by lane through sarek.simulate
MAX_CASES = 2000  # mismatching outputs recorded in full (all are counted)
N = 16
RESULT = RESULTS / "tensor_core_adversarial_h200.json"
Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]  # a, b (operand type), c (f32)
Draw = Callable[[np.random.Generator, type, int], Inputs]
Runner = Callable[[str, np.ndarray, np.ndarray, np.ndarray], np.ndarray]

F32_MAX = float(np.finfo(np.float32).max)
TOP = {np.float16: 15, ml_dtypes.bfloat16: 127}  # largest exponent of a finite value
BOTTOM = {np.float16: -24, ml_dtypes.bfloat16: -133}  # exponent of the smallest subnormal
SUBNORMAL_TOP = {np.float16: -15, ml_dtypes.bfloat16: -127}  # of the largest subnormal
NAN_BITS = {np.float16: (0x7E00, 0xFE00, 0x7E01, 0x7C01, 0xFFFF),
            ml_dtypes.bfloat16: (0x7FC0, 0xFFC0, 0x7FC1, 0x7F81, 0xFFFF),
            np.float32: (0x7FC00000, 0xFFC00000, 0x7FC00001, 0x7F800001, 0xFFFFFFFF)}
"""Quiet NaNs of both signs, one with a payload, a signalling NaN, all ones."""


def _as(x: np.ndarray, dt: type) -> np.ndarray:
    """``x`` rounded to ``dt``; magnitudes past the type's range become its infinities."""
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float32).astype(dt)


def _signs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.where(rng.random(shape) < 0.5, -1.0, 1.0)


def _pow2(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    """Random signs times significands in [1, 2) times ``2^e``, ``e`` uniform in [lo, hi]."""
    return _signs(rng, shape) * (1 + rng.random(shape)) * 2.0 ** rng.integers(lo, hi + 1, shape)


def _shape(tiles: int) -> tuple[int, int, int]:
    return (tiles, N, N)


def _cancel_pairs(rng: np.random.Generator, a: np.ndarray, b: np.ndarray) -> None:
    """Makes every output's 16 products cancel in pairs, exactly: for a random pairing of the
    k indices per tile, ``a[:, q] = a[:, p]`` and ``b[q, :] = -b[p, :]``."""
    for t in range(a.shape[0]):
        order = rng.permutation(N)
        p, q = order[: N // 2], order[N // 2:]
        a[t][:, q] = a[t][:, p]
        b[t][q, :] = -b[t][p, :]


def _sprinkle(rng: np.random.Generator, x: np.ndarray, dt: type, density: float) -> np.ndarray:
    """``x`` (of type ``dt``) with about ``density`` of its elements replaced by +-inf or one
    of ``NAN_BITS``."""
    uint = np.uint16 if np.dtype(dt).itemsize == 2 else np.uint32
    bits = x.view(uint).copy()
    specials = np.array([*NAN_BITS[dt], *np.array([np.inf, -np.inf], dt).view(uint)], uint)
    where = rng.random(x.shape) < density
    bits[where] = rng.choice(specials, int(where.sum()))
    return bits.view(dt)


def _plain(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    s = _shape(tiles)
    return (_as(rng.standard_normal(s), dt), _as(rng.standard_normal(s), dt),
            _as(rng.standard_normal(s), np.float32))


def _spread(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Operands from their smallest subnormal up (f16: to the top, bf16: to 2^62), the addend
    over f32's whole range: products and addend up to 2^250 apart."""
    s = _shape(tiles)
    lo, hi = BOTTOM[dt], min(TOP[dt] - 1, 62)  # products below 2^126: mostly finite sums
    return (_as(_pow2(rng, s, lo, hi), dt), _as(_pow2(rng, s, lo, hi), dt),
            _as(_pow2(rng, s, -149, 126), np.float32))


def _cancellation(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Half the tiles: products (of spread exponents) that cancel in pairs exactly, the addend
    0, -0 or anything; the other half: the addend minus the products' exact sum rounded to
    f32, so only the rounding error survives."""
    s = _shape(tiles)
    half = tiles // 2
    span = min(TOP[dt], 40)
    a = _pow2(rng, s, -span // 2, span // 2)
    b = _pow2(rng, s, -span // 2, span // 2)
    _cancel_pairs(rng, a[:half], b[:half])
    a, b = _as(a, dt), _as(b, dt)
    exact = a.astype(np.float64) @ b.astype(np.float64)  # products exact, 16 terms: near-exact
    c = -exact
    choice = rng.integers(0, 4, (half, N, N))
    c[:half] = np.select([choice == 0, choice == 1, choice == 2],
                         [0.0, -0.0, _pow2(rng, (half, N, N), -20, 20)],
                         _pow2(rng, (half, N, N), -149, 100))
    return a, b, _as(c, np.float32)


def _overflow(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Sums near f32's largest finite value: an addend within a factor 8 of it (a quarter of
    them exactly +-FLT_MAX), and for bf16 products up to 2^128 of mixed signs (f16 products
    reach only 2^32)."""
    s = _shape(tiles)
    c = _pow2(rng, s, 125, 127)
    c = np.where(rng.random(s) < 0.25, np.copysign(F32_MAX, c), np.minimum(np.abs(c), F32_MAX)
                 * np.sign(c))
    if dt is np.float16:
        a, b = _pow2(rng, s, 10, 14), _pow2(rng, s, 10, 14)
    else:
        a, b = _pow2(rng, s, 56, 63), _pow2(rng, s, 56, 63)
    return _as(a, dt), _as(b, dt), _as(c, np.float32)


def _largest_products(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Operands near their type's top exponent (bf16 products far beyond f32's range), half the
    tiles cancelling in pairs exactly, the addend small: is a product's exponent kept past
    f32's before the sum?"""
    s = _shape(tiles)
    top = TOP[dt]
    a, b = _pow2(rng, s, top - 12, top - 1), _pow2(rng, s, top - 12, top - 1)
    _cancel_pairs(rng, a[: tiles // 2], b[: tiles // 2])
    return _as(a, dt), _as(b, dt), _as(_pow2(rng, s, -10, 30), np.float32)


def _subnormal_operands(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Operands that are subnormals of their type (a always, b half the time) or small
    normals, the addend 0, an f32 subnormal or small."""
    s = _shape(tiles)
    lo = BOTTOM[dt]
    a = _pow2(rng, s, lo, SUBNORMAL_TOP[dt])
    b = np.where(rng.random(s) < 0.5, _pow2(rng, s, lo, SUBNORMAL_TOP[dt]),
                 _pow2(rng, s, lo, 8))
    choice = rng.integers(0, 3, s)
    c = np.select([choice == 0, choice == 1], [0.0, _pow2(rng, s, -149, -127)],
                  _pow2(rng, s, 2 * lo, 2 * lo + 30))
    return _as(a, dt), _as(b, dt), _as(c, np.float32)


def _subnormal_results(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Sums in f32's subnormal range, where the final truncation works on fewer bits: bf16
    products near 2^-140 (f16 products cannot go below 2^-48, so for f16 the products cancel
    in pairs and the addend is an f32 subnormal)."""
    s = _shape(tiles)
    c = np.where(rng.random(s) < 0.5, 0.0, _pow2(rng, s, -149, -127))
    if dt is np.float16:
        a, b = _pow2(rng, s, -24, 4), _pow2(rng, s, -24, 4)
        _cancel_pairs(rng, a, b)
    else:
        ea = rng.integers(-80, -60, s)
        a = _signs(rng, s) * (1 + rng.random(s)) * 2.0 ** ea
        b = _signs(rng, s) * (1 + rng.random(s)) * 2.0 ** (rng.integers(-150, -126, s) - ea)
    return _as(a, dt), _as(b, dt), _as(c, np.float32)


def _signed_zeros(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Results that are zero: a third of the tiles with A all +-0, a third with three operands
    in four +-0, a third with nonzero products that vanish (cancelling in pairs; for bf16,
    below f32's smallest subnormal); the addend +-0 (sometimes tiny)."""
    s = _shape(tiles)
    third = tiles // 3
    a, b = rng.standard_normal(s), rng.standard_normal(s)
    a[:third] = 0.0
    mostly = rng.random(s) < 0.75
    a[third:2 * third] = np.where(mostly, 0.0, a)[third:2 * third]
    b[third:2 * third] = np.where(rng.random(s) < 0.75, 0.0, b)[third:2 * third]
    if dt is np.float16:
        _cancel_pairs(rng, a[2 * third:], b[2 * third:])
    else:
        a[2 * third:] = _pow2(rng, (tiles - 2 * third, N, N), -90, -80)
        b[2 * third:] = _pow2(rng, (tiles - 2 * third, N, N), -90, -80)
    a, b = a * _signs(rng, s), b * _signs(rng, s)  # zeros of both signs
    c = np.where(rng.random(s) < 0.9, 0.0, _pow2(rng, s, -149, -140)) * _signs(rng, s)
    return _as(a, dt), _as(b, dt), _as(c, np.float32)


def _specials(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """Normal values with one element in 40 replaced by +-inf or a NaN (quiet, signalling,
    either sign, with payloads), and zeros beside infinities (inf * 0)."""
    a, b, c = _plain(rng, dt, tiles)
    a, b = _sprinkle(rng, a, dt, 1 / 40), _sprinkle(rng, b, dt, 1 / 40)
    zero_b = np.isinf(np.moveaxis(a, 2, 1)) & (rng.random(a.shape) < 0.5)
    b = np.where(zero_b, np.array(0.0, dt), b)  # a[m, k] infinite, b[k, n] = 0 for n = m
    return a, b, _sprinkle(rng, c, np.float32, 1 / 40)


def _addend_dominates(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """An addend 2^20 to 2^60 above the products, which fall partly or wholly below its last
    aligned place."""
    s = _shape(tiles)
    a, b = _as(rng.standard_normal(s), dt), _as(rng.standard_normal(s), dt)
    return a, b, _as(_pow2(rng, s, 20, 60), np.float32)


def _mmasim_disagreements(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
    """The two cases where MMA-Sim's Hopper model and ``h200`` differ (``specs/simulator.md``,
    "MMA-Sim"), both reachable with bf16 operands only. Half the tiles, a zero addend and sums
    of products near 2^-155, mostly negative, so that the sum is often negative and smaller
    than 2^-149: ``h200`` truncates it to -0, MMA-Sim gives +0. The other half: one product
    a multiple of 2^-149 between 2^-142 and 2^-137 and fifteen negative ones between 2^-163 and
    2^-158, every term below 2^-133: MMA-Sim aligns to 2^-133 (its exponent of a zero term) and
    drops the small ones (below its last place, 2^-158), ``h200`` aligns to the largest product
    and keeps them, so its sum ends below the multiple and truncates one unit of 2^-149 lower.
    For f16 (products never fall below 2^-48) the nearest cases: sums of -0 terms only, and
    the smallest products of both signs; the two models agree on them."""
    s = _shape(tiles)
    half = tiles // 2
    c = np.where(rng.random(s) < 0.5, 0.0, -0.0)
    if dt is np.float16:
        a, b = _pow2(rng, s, -24, -20), _pow2(rng, s, -24, -20)
        a[:half] = np.where(rng.random((half, N, N)) < 0.5, -0.0, 0.0)
        b[:half] = np.abs(b[:half])
        c[:half] = -0.0
        return _as(a, dt), _as(b, dt), _as(c, np.float32)
    ek = rng.integers(-90, -70, (tiles, N))  # a's exponent per k: b's makes the product's
    rest = tiles - half
    product = np.concatenate([rng.integers(-158, -152, (half, N, N)),
                              rng.integers(-163, -159, (rest, N, N))])
    product[half:, 0, :] = rng.integers(-142, -137, (rest, N))
    a = np.abs(_pow2(rng, s, 0, 0)) * 2.0 ** ek[:, None, :]
    b = _pow2(rng, s, 0, 0) * 2.0 ** (product - ek[:, :, None])
    b[:half] *= np.where(rng.random((half, N, N)) < 0.75, -1.0, 1.0) * np.sign(b[:half])
    b[half:] = -np.abs(b[half:])
    b[half:, 0, :] = 2.0 ** (product[half:, 0, :] - ek[half:, 0, None])  # exact: a multiple
    return _as(a, dt), _as(b, dt), _as(c, np.float32)


DISTRIBUTIONS: dict[str, Draw] = {
    "plain random": _plain,
    "huge exponent spread": _spread,
    "exact cancellation": _cancellation,
    "sums near f32 overflow": _overflow,
    "largest products": _largest_products,
    "subnormal operands and products": _subnormal_operands,
    "f32 subnormal results": _subnormal_results,
    "signed zeros": _signed_zeros,
    "infinities and NaN": _specials,
    "addend alone dominates": _addend_dominates,
    "mmasim_disagreements": _mmasim_disagreements,
}


def draw(seed: int, operand: str, name: str, tiles: int) -> Inputs:
    """The inputs of distribution ``name`` for ``operand`` ("f16" or "bf16"): ``tiles``
    fragments ``a[t, m, k]``, ``b[t, k, n]`` of the operand type and ``c[t, m, n]`` f32. Each
    (operand, distribution) has its own stream, so adding a distribution changes no other."""
    rng = np.random.default_rng([seed, zlib.crc32(f"{operand}/{name}".encode())])
    with np.errstate(over="ignore", invalid="ignore"):
        return DISTRIBUTIONS[name](rng, OPERANDS[operand][1], tiles)


def digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the arrays' bytes, in order."""
    h = hashlib.sha256()
    for x in arrays:
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def agree(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per output: equal bits (NaN payloads and zero signs included)."""
    same: np.ndarray = got.view(np.uint32) == want.view(np.uint32)
    return same


def simulated(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``d`` of the probe kernel run lane by lane on the lowered CUDA kernel by the simulator
    (``h200`` model), shaped like ``c``."""
    kernel = probe_kernel(operand, OPERANDS[operand][0])
    args = {"a": a.ravel(), "b": b.ravel(), "c": c.ravel(), "d": np.zeros(c.size, np.float32)}
    out = sarek.simulate(kernel, args, grid=c.shape[0], block=WARP, target="cuda", arith="h200")
    return out["d"].reshape(c.shape)


def device_runner() -> Runner:
    """Runs the probe kernel on device 0 (``backends.cuda.run``)."""
    from backends.cuda.run import device_arch, run

    arch = device_arch()

    def on_device(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        kernel = probe_kernel(operand, OPERANDS[operand][0])
        args = {"a": a.ravel(), "b": b.ravel(), "c": c.ravel(),
                "d": np.zeros(c.size, np.float32)}
        return run(kernel, args, (c.shape[0], 1, 1), (WARP, 1, 1), arch)["d"].reshape(c.shape)

    return on_device


def device_phase(path: Path, runner: Runner, tiles: int, seed: int, device: str) -> None:
    """Draws every distribution's inputs, runs them through ``runner`` (one call per operand
    type) and saves the outputs' bits, the seed and the inputs' digests to ``path``."""
    saved: dict[str, Any] = {"seed": np.int64(seed), "tiles": np.int64(tiles),
                             "device": np.str_(device),
                             "distributions": np.array(list(DISTRIBUTIONS))}
    for operand in OPERANDS:
        drawn = [draw(seed, operand, name, tiles) for name in DISTRIBUTIONS]
        a, b, c = (np.concatenate(part) for part in zip(*drawn, strict=True))
        d = runner(operand, a, b, c)
        saved[f"d_{operand}"] = d.view(np.uint32).reshape(len(DISTRIBUTIONS), tiles, N, N)
        saved[f"inputs_sha256_{operand}"] = np.array([digest(*x) for x in drawn])
        print(f"{operand}: {d.size} outputs from {len(DISTRIBUTIONS)} distributions")
    np.savez_compressed(path, **saved)


def _case(a: np.ndarray, b: np.ndarray, c: np.ndarray, got: np.ndarray, want: np.ndarray,
          index: tuple[int, int, int]) -> dict[str, Any]:
    """One output's inputs (as bits and values) and both results."""
    t, m, n = index
    uint = np.uint16 if a.dtype.itemsize == 2 else np.uint32
    row, col = a[t, m, :], b[t, :, n]

    def bits(x: np.ndarray, u: type) -> list[str]:
        return [f"{int(v):#0{2 + 2 * np.dtype(u).itemsize}x}" for v in x.view(u)]

    return {"tile": t, "row": m, "col": n,
            "a_row_bits": bits(row, uint), "b_col_bits": bits(col, uint),
            "c_bits": bits(c[t, m, n: n + 1], np.uint32)[0],
            "a_row": [float(v) for v in row.astype(np.float64)],
            "b_col": [float(v) for v in col.astype(np.float64)],
            "c": float(c[t, m, n]),
            "device_bits": bits(got[t, m, n: n + 1], np.uint32)[0],
            "model_bits": bits(want[t, m, n: n + 1], np.uint32)[0],
            "device": float(got[t, m, n]), "model": float(want[t, m, n])}


def compare_phase(path: Path, result: Path, sim_tiles: int = SIM_TILES) -> bool:
    """Compares the device outputs saved at ``path`` with the ``h200`` model, writes
    ``result`` and prints a table; True when nothing differs."""
    saved = np.load(path)
    seed, tiles = int(saved["seed"]), int(saved["tiles"])
    names = [str(x) for x in saved["distributions"]]
    if names != list(DISTRIBUTIONS):
        raise SystemExit(f"{path} holds distributions {names}, this script draws "
                         f"{list(DISTRIBUTIONS)}")
    rows: list[dict[str, Any]] = []
    cases: list[dict[str, Any]] = []
    nan_payloads: dict[str, int] = {}
    total_bad = 0
    for operand in OPERANDS:
        outputs = saved[f"d_{operand}"]
        for i, name in enumerate(names):
            a, b, c = draw(seed, operand, name, tiles)
            if digest(a, b, c) != str(saved[f"inputs_sha256_{operand}"][i]):
                raise SystemExit(f"{operand} {name}: the inputs drawn here differ from the "
                                 f"device run's (numpy {np.__version__}, ml_dtypes "
                                 f"{ml_dtypes.__version__}); compare where it ran")
            got = outputs[i].view(np.float32)
            full = min(sim_tiles, tiles)
            with np.errstate(all="ignore"):  # NaN and infinities are inputs here
                want = tensor_core.mul_add(a, b, c)
                lanes = simulated(operand, a[:full], b[:full], c[:full])
            bad = np.argwhere(~agree(got, want))
            lane_bad = int(np.count_nonzero(~agree(lanes, want[:full])))
            for bits in got[np.isnan(got)].view(np.uint32).tolist():
                key = f"{bits:#010x}"
                nan_payloads[key] = nan_payloads.get(key, 0) + 1
            for index in bad[: max(0, MAX_CASES - len(cases))]:
                t, m, n = (int(v) for v in index)
                cases.append({"operands": operand, "distribution": name,
                              **_case(a, b, c, got, want, (t, m, n))})
            total_bad += len(bad)
            rows.append({"operands": operand, "distribution": name, "outputs": int(got.size),
                         "mismatches": len(bad), "nan_outputs": int(np.isnan(got).sum()),
                         "negative_zeros": int(np.count_nonzero(
                             got.view(np.uint32) == 0x80000000)),
                         "infinite_outputs": int(np.isinf(got).sum()),
                         "lane_by_lane_outputs": int(want[:full].size),
                         "lane_by_lane_mismatches": lane_bad})
    ok = total_bad == 0 and all(r["lane_by_lane_mismatches"] == 0 for r in rows)
    report = {
        "device": str(saved["device"]), "instruction": "mma.sync m16n8k16 f32 f16/bf16",
        "seed": seed, "tiles_per_distribution": tiles,
        "outputs_per_type": {op: sum(r["outputs"] for r in rows if r["operands"] == op)
                             for op in OPERANDS},
        "agreement": "equal bits (NaN payloads and zero signs included)",
        "device_outputs_sha256": {op: digest(saved[f"d_{op}"]) for op in OPERANDS},
        "inputs_sha256": {op: dict(zip(names, (str(x) for x in saved[f"inputs_sha256_{op}"]),
                                       strict=True)) for op in OPERANDS},
        "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__,
        "h200_model_matches": ok, "mismatches": total_bad, "nan_payloads": nan_payloads,
        "rows": rows, "cases": cases, "cases_left_out": total_bad - len(cases)}
    write("tensor_core_adversarial_h200", report, result)
    _print_table(rows, str(saved["device"]))
    print(f"{total_bad} mismatches; device NaN payloads {nan_payloads}; wrote {result}")
    return ok


def _print_table(rows: list[dict[str, Any]], device: str) -> None:
    show(table(f"mma.sync m16n8k16 on {device} against the h200 model",
               ("type", "distribution", "outputs", "mismatches", "NaN", "-0", "inf",
                "lane by lane (mismatches)"),
               [(r["operands"], r["distribution"], f"{r['outputs']:,}", r["mismatches"],
                 f"{r['nan_outputs']:,}", f"{r['negative_zeros']:,}",
                 f"{r['infinite_outputs']:,}",
                 f"{r['lane_by_lane_outputs']:,} ({r['lane_by_lane_mismatches']})")
                for r in rows], left=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--device-out", type=Path, metavar="FILE.npz",
                      help="run the kernels on the GPU and save the outputs there")
    mode.add_argument("--compare", type=Path, metavar="FILE.npz",
                      help="compare saved device outputs with the model; writes --json")
    mode.add_argument("--dry-run", action="store_true",
                      help=f"both phases here on {DRY_TILES} tiles per distribution, the "
                      "simulator standing in for the device; writes into a temporary folder")
    parser.add_argument("--seed", type=int, default=SEED, help="for --device-out and --dry-run")
    parser.add_argument("--json", type=Path, default=RESULT,
                        help=f"where --compare writes (default {RESULT.relative_to(ROOT)})")
    options = parser.parse_args(argv)
    if options.device_out is not None:
        from backends.cuda.run import device_name

        device_phase(options.device_out, device_runner(), TILES, options.seed, device_name())
        print(f"wrote {options.device_out}; compare with --compare {options.device_out}")
        return 0
    if options.compare is not None:
        return 0 if compare_phase(options.compare, options.json) else 1
    with tempfile.TemporaryDirectory() as folder:
        npz, result = Path(folder) / "device.npz", Path(folder) / "result.json"
        with np.errstate(all="ignore"):
            device_phase(npz, simulated, DRY_TILES, options.seed, "simulator (dry run)")
        ok = compare_phase(npz, result)
    print("dry run: the simulator stood in for the device; nothing written under bench/results")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
