"""A model of the H200's (Hopper's) tensor-core multiply-accumulate for f16 and bf16 operands
with an f32 accumulator, as one fused dot-add per instruction.

For ``d = c + sum_k a_k * b_k`` each term is taken as a significand and an exponent: ``c`` as an
f32 (significand in [1, 2), subnormals with the exponent -126 and a smaller significand), each
product exactly as ``(s_a * s_b) * 2^(e_a + e_b)`` with the operands' own significands and
exponents (so a product's significand lies in [1, 4) and is not renormalized; subnormal
operands take their type's minimum exponent). All terms are aligned to the largest exponent
``E``: each significand is truncated toward zero to 25 bits after the binary point at ``E``
(what falls below that is lost). The aligned terms are added exactly, and the sum is converted
to f32 by truncation toward zero, and a zero result is +0 (even when every term is -0, or the
sum is negative and smaller than f32's smallest subnormal). A zero term counts as exponent -133
when the largest exponent is found. NaN or infinite terms give the IEEE result of the exact sum,
a NaN always as the pattern 0x7FFFFFFF.

This follows the published models (Fasi, Higham, Mikaitis and Pranesh 2021; Khattak and
Mikaitis 2025; MMA-Sim 2025) with Hopper's parameters, and reproduces the probes recorded in
DESIGN.md (1 + sixteen products of 2^-25 gives 1 + 2^-21; 1 + 2^-24 + 2^-23 gives 1 + 2^-23);
``bench/tensor_core_h200.py`` checks it against the device bit for bit.

How it is computed (the same numbers, fewer and smaller arrays): a term's value ``s * 2^e`` is
the exact float64 product ``a_k * b_k`` (or ``c``), so the aligned term is
``trunc(a_k * b_k * 2^(25 - E))``, a power-of-two scaling that float64 does exactly; only the
exponents ``e_a + e_b`` (which decide ``E``) need the split, and they come from the operands'
bits. The fragments are processed a bounded chunk at a time with the fragments as the fastest
axis, so every NumPy loop runs over long contiguous rows and the temporaries stay a few MiB.
"""

from __future__ import annotations

from functools import cache

import numpy as np

FRACTION_BITS = 25  # Hopper's alignment width below the largest exponent
CHUNK = 32
"""Fragments per step: the (m, k, n, chunk) float64 products of 16x16x16 fragments take 1 MiB,
which keeps the temporaries in cache and the model's memory independent of the launch."""

_ZERO_EXPONENT = -10_000  # of a zero operand: a product with one never sets the largest exponent
CANONICAL_NAN = np.uint32(0x7FFFFFFF).view(np.float32)
"""Every NaN result, whatever the NaN operands' signs and payloads (as the H200 gives it)."""
ZERO_TERM_EXPONENT = -133
"""The exponent a zero term (a zero addend, a zero product) aligns with: with a zero addend and
every product below 2^-133 (bf16 only), the terms are aligned at 2^-133 and what lies below
2^-158 is lost. A nonzero addend is at least 2^-126 in f32, so ``E`` is never below this."""
_FORMATS = {np.dtype(np.float16).name: (10, 15), "bfloat16": (7, 127), "float32": (23, 127)}
"""Fraction bits and exponent bias of the operand and accumulator types, by dtype name."""


def _exponents_of_bits(bits: np.ndarray, fraction: int, bias: int) -> np.ndarray:
    """The exponent ``e`` of ``x = s * 2^e`` for each bit pattern (``1 <= |s| < 2``; subnormals
    at the minimum exponent ``1 - bias``; zeros at ``_ZERO_EXPONENT``), as int16."""
    wide = bits.astype(np.int32)
    biased = (wide >> fraction) & ((1 << (8 * bits.itemsize - 1 - fraction)) - 1)
    e = np.maximum(biased - bias, 1 - bias)
    magnitude = wide & ((1 << (8 * bits.itemsize - 1)) - 1)
    return np.where(magnitude == 0, _ZERO_EXPONENT, e).astype(np.int16)


@cache
def _exponent_table(name: str) -> np.ndarray:
    """``_exponents_of_bits`` of every 16-bit pattern of the type called ``name``."""
    return _exponents_of_bits(np.arange(1 << 16, dtype=np.uint16), *_FORMATS[name])


def _exponents(x: np.ndarray) -> np.ndarray:
    if x.dtype.itemsize == 2:
        return _exponent_table(x.dtype.name).take(x.view(np.uint16))
    return _exponents_of_bits(x.view(np.uint32), *_FORMATS[x.dtype.name])


def _power_of_two(e: np.ndarray) -> np.ndarray:
    """``2.0 ** e`` for integer exponents of a normal float64, from the bits (exact)."""
    return ((e.astype(np.int64) + 1023) << 52).view(np.float64)


def mul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a @ b + c`` per fragment (``a[g, m, k]``, ``b[g, k, n]``, ``c[g, m, n]`` f32), each
    output one fused dot-add of its ``k`` products and ``c``."""
    out = np.empty(c.shape, np.float32)
    for start in range(0, a.shape[0], CHUNK):
        part = slice(start, start + CHUNK)
        out[part] = _chunk(a[part], b[part], c[part])
    return out


def _chunk(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``mul_add`` of a few fragments: every array has the fragments as its last axis,
    ``[m, k, g]``, ``[k, n, g]``, ``[m, n, g]``, and the products ``[m, k, n, g]``."""
    at, bt, ct = (np.ascontiguousarray(x.transpose(1, 2, 0)) for x in (a, b, c))
    a64, b64, c64 = (x.astype(np.float64) for x in (at, bt, ct))
    ea, eb, ec = (_exponents(x) for x in (at, bt, ct))
    top = (ea[:, :, None, :] + eb[None, :, :, :]).max(axis=1)  # int16: zeros stay far below
    np.maximum(top, ec, out=top)
    np.maximum(top, ZERO_TERM_EXPONENT, out=top)
    scale = _power_of_two(FRACTION_BITS - top)  # [m, n, g]
    products = a64[:, :, None, :] * b64[None, :, :, :]
    aligned = np.multiply(products, scale[:, None], out=np.empty_like(products))
    np.trunc(aligned, out=aligned)  # integers below 2^27: exact in float64
    total = aligned.sum(axis=1)  # at most 17 * 2^27: exact, in any order
    total += np.trunc(c64 * scale)
    total *= _power_of_two(top - FRACTION_BITS)
    result = _truncate_to_f32(total)
    result[result == 0] = 0.0  # a zero result is +0, whatever the terms' signs
    if not (np.isfinite(a64).all() and np.isfinite(b64).all() and np.isfinite(c64).all()):
        # NaN and infinity: the IEEE value of the exact sum (finite terms cannot overflow f64)
        special = ~np.isfinite(products).all(axis=1) | ~np.isfinite(c64)
        ieee = (products.sum(axis=1) + c64).astype(np.float32)
        ieee[np.isnan(ieee)] = CANONICAL_NAN  # the device's one NaN, whatever the operands'
        result = np.where(special, ieee, result)
    return result.transpose(2, 0, 1)


def _truncate_to_f32(v: np.ndarray) -> np.ndarray:
    """``v`` (float64) converted to f32 by truncation toward zero; beyond f32's range, inf."""
    with np.errstate(over="ignore"):
        nearest = v.astype(np.float32)
    too_far = np.abs(nearest.astype(np.float64)) > np.abs(v)
    toward_zero = np.nextafter(nearest, np.float32(0))  # from inf: the largest finite f32
    out = np.where(too_far, toward_zero, nearest)
    huge = np.abs(v) >= 2.0**128
    return np.where(huge, np.copysign(np.float32(np.inf), v).astype(np.float32), out)
