"""A model of the H200's (Hopper's) tensor-core multiply-accumulate for f16 and bf16 operands
with an f32 accumulator, as one fused dot-add per instruction.

For ``d = c + sum_k a_k * b_k`` each term is taken as a significand and an exponent: ``c`` as an
f32 (significand in [1, 2), subnormals with the exponent -126 and a smaller significand), each
product exactly as ``(s_a * s_b) * 2^(e_a + e_b)`` with the operands' own significands and
exponents (so a product's significand lies in [1, 4) and is not renormalized; subnormal
operands take their type's minimum exponent). All terms are aligned to the largest exponent
``E``: each significand is truncated toward zero to 25 bits after the binary point at ``E``
(what falls below that is lost). The aligned terms are added exactly, and the sum is converted
to f32 by truncation toward zero. NaN or infinite terms give the IEEE result of the exact sum.

This follows the published models (Fasi, Higham, Mikaitis and Pranesh 2021; Khattak and
Mikaitis 2025; MMA-Sim 2025) with Hopper's parameters, and reproduces the probes recorded in
DESIGN.md (1 + sixteen products of 2^-25 gives 1 + 2^-21; 1 + 2^-24 + 2^-23 gives 1 + 2^-23);
``bench/tensor_core_h200.py`` checks it against the device bit for bit.
"""

from __future__ import annotations

import numpy as np

FRACTION_BITS = 25  # Hopper's alignment width below the largest exponent
_MIN_EXPONENT = {np.dtype(np.float16): -14, np.dtype(np.float32): -126}
_ZERO_EXPONENT = -10_000  # below anything, so a zero never sets the largest exponent


def _split(x: np.ndarray, min_exponent: int) -> tuple[np.ndarray, np.ndarray]:
    """Significand and exponent of every element of ``x`` (float64 values of a type whose
    smallest normal exponent is ``min_exponent``): ``x = s * 2^e`` with ``1 <= |s| < 2``, or
    for subnormals ``e = min_exponent`` and ``|s| < 1``; zeros get ``s = 0``."""
    mant, exp = np.frexp(x)
    s, e = mant * 2.0, exp.astype(np.int64) - 1
    low = e < min_exponent
    s = np.where(low, np.ldexp(s, np.minimum(e - min_exponent, 0)), s)
    e = np.where(low, min_exponent, e)
    e = np.where(x == 0, _ZERO_EXPONENT, e)
    return s, e


def _min_exponent(dtype: np.dtype) -> int:
    return _MIN_EXPONENT.get(np.dtype(dtype), -126)  # bf16 shares f32's exponent range


def mul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a @ b + c`` per fragment (``a[g, m, k]``, ``b[g, k, n]``, ``c[g, m, n]`` f32), each
    output one fused dot-add of its ``k`` products and ``c``."""
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    sa, ea = _split(a64, _min_exponent(a.dtype))
    sb, eb = _split(b64, _min_exponent(b.dtype))
    sc, ec = _split(c64, -126)
    # terms[g, m, n, t]: t = 0 is c, t = 1.. the products in k order
    s_terms = np.concatenate([sc[..., None], sa[:, :, None, :] * np.moveaxis(sb, 1, 2)[:, None]],
                             axis=-1)
    e_terms = np.concatenate([ec[..., None], ea[:, :, None, :] + np.moveaxis(eb, 1, 2)[:, None]],
                             axis=-1)
    top = e_terms.max(axis=-1, keepdims=True)
    shift = np.clip(FRACTION_BITS + e_terms - top, -1100, 60)
    aligned = np.trunc(np.ldexp(s_terms, shift))  # integers below 2^27: exact in float64
    total = aligned.sum(axis=-1)  # at most 17 * 2^27: exact
    value = np.ldexp(total, (top[..., 0] - FRACTION_BITS).astype(np.int64))
    out = _truncate_to_f32(value)
    # NaN and infinity: the IEEE value of the exact sum (overflow of finite terms included)
    products = a64[:, :, None, :] * np.moveaxis(b64, 1, 2)[:, None]
    special = ~np.isfinite(products).all(axis=-1) | ~np.isfinite(c64)
    if special.any():
        ieee = (products.sum(axis=-1) + c64).astype(np.float32)
        out = np.where(special, ieee, out)
    return out


def _truncate_to_f32(v: np.ndarray) -> np.ndarray:
    """``v`` (float64) converted to f32 by truncation toward zero; beyond f32's range, inf."""
    with np.errstate(over="ignore"):
        nearest = v.astype(np.float32)
    too_far = np.abs(nearest.astype(np.float64)) > np.abs(v)
    toward_zero = np.nextafter(nearest, np.float32(0))  # from inf: the largest finite f32
    out = np.where(too_far, toward_zero, nearest)
    huge = np.abs(v) >= 2.0**128
    return np.where(huge, np.copysign(np.float32(np.inf), v).astype(np.float32), out)
