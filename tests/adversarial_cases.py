"""Adversarial inputs for one 16x16x16 fragment multiply-add (f16 or bf16 operands, f32
accumulator): named distributions weighted to where a model of the tensor core's fused dot-add
can go wrong (exponent spread, exact cancellation, overflow, subnormals, signed zeros,
infinities and NaN, a dominating addend, the cases where MMA-Sim's Hopper model and ours
disagreed), plus plain random inputs, each drawn reproducibly from a seed.

The device checks of ``mma.sync`` and ``wgmma`` (``tests/device``) compare the H200 with the
``h200`` model on them; ``tests/test_xcheck.py`` compares that model with MMA-Sim.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable

import ml_dtypes
import numpy as np

SEED = 20261201
N = 16
OPERAND_TYPES: dict[str, type] = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]  # a, b (operand type), c (f32)
Draw = Callable[[np.random.Generator, type, int], Inputs]

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
        return DISTRIBUTIONS[name](rng, OPERAND_TYPES[operand], tiles)


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
