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
Mikaitis 2025; MMA-Sim 2025) with Hopper's parameters, and reproduces what the H200 gives on
two probes (1 + sixteen products of 2^-25 gives 1 + 2^-21; 1 + 2^-24 + 2^-23 gives 1 + 2^-23);
``tests/device/test_tensor_core_h200.py`` checks it against the device bit for bit.

How it is computed (the same numbers, fewer and smaller arrays): a term's value ``s * 2^e`` is
the exact float64 product ``a_k * b_k`` (or ``c``), so the aligned term is
``trunc(a_k * b_k * 2^(25 - E))``, a power-of-two scaling that float64 does exactly; only the
exponents ``e_a + e_b`` (which decide ``E``) need the split, and they come from the operands'
bits (tables for the 16-bit types, which give the float64 values too). The fragments are the
fastest axis and are processed a bounded chunk at a time, one ``k`` at a time, into buffers
allocated once per call: every NumPy loop runs over long contiguous rows, the temporaries stay
in cache, and no operation allocates (fresh megabyte temporaries cost a page fault per 4 KiB,
which was most of the time).
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np

FRACTION_BITS = 25  # Hopper's alignment width below the largest exponent
CHUNK = 64
"""Fragments per step: a step's float64 (m, n, chunk) buffers of 16x16 outputs take 128 KiB
each and its int16 exponent pairs (m, k, n, chunk) 512 KiB, so they stay in cache and the
model's memory does not grow with the launch."""

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
    return _exponents_of_bits(x.view(np.uint32), *_FORMATS[x.dtype.name])


def _fragments_last(x: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``x[g, r, s]`` as float64 values into ``values`` and as int16 exponents (returned),
    both ``[r, s, g]``."""
    moved = np.ascontiguousarray(x.transpose(1, 2, 0))  # converts faster (bf16: five times)
    np.copyto(values, moved, casting="safe")  # exact
    if x.dtype.itemsize == 2:
        return _exponent_table(x.dtype.name).take(moved.view(np.uint16))
    return _exponents(moved)


def _power_of_two(e: np.ndarray) -> np.ndarray:
    """``2.0 ** e`` for integer exponents of a normal float64, from the bits (exact)."""
    return ((e.astype(np.int64) + 1023) << 52).view(np.float64)


def mul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a @ b + c`` per fragment (``a[g, m, k]``, ``b[g, k, n]``, ``c[g, m, n]`` f32), each
    output one fused dot-add of its ``k`` products and ``c``."""
    groups, m, k = a.shape
    n = b.shape[2]
    out = np.empty(c.shape, np.float32)
    width = min(CHUNK, groups)
    pairs, top, exponent, scale, term, total, a_values, b_values, c_values = _staggered(
        ((m, k, n, width), np.int16), ((m, n, width), np.int16), ((m, n, width), np.int16),
        *(((m, n, width), np.float64),) * 3, ((m, k, width), np.float64),
        ((k, n, width), np.float64), ((m, n, width), np.float64))
    for start in range(0, groups, width):
        g = slice(start, start + width)
        w = min(width, groups - start)
        a64, b64, c64 = a_values[..., :w], b_values[..., :w], c_values[..., :w]
        ea, eb, ec = (_fragments_last(x[g], v) for x, v in ((a, a64), (b, b64), (c, c64)))
        result = _chunk(a64, b64, c64, ea, eb, ec, pairs[..., :w], top[..., :w],
                        exponent[..., :w], scale[..., :w], term[..., :w], total[..., :w])
        if not (np.isfinite(a64).all() and np.isfinite(b64).all() and np.isfinite(c64).all()):
            result = _special(a64, b64, c64, result)
        out[g] = result.transpose(2, 0, 1)
    return out


def _staggered(*specs: tuple[tuple[int, ...], type]) -> list[np.ndarray]:
    """Uninitialised arrays of these shapes and types in one allocation, each at another offset
    within a 4 KiB page: a loop that reads one array and writes another at the same page
    offset stalls on 4 KiB aliasing (the processor takes the load for one of the stores), and
    whether separate allocations share an offset depends on the heap's history."""
    spans, end = [], 0
    for k, (shape, dtype) in enumerate(specs):
        start = -(-end // 4096) * 4096 + k * 1344 % 4096  # distinct multiples of 64
        end = start + math.prod(shape) * np.dtype(dtype).itemsize
        spans.append((start, end))
    block = np.empty(end + 4096, np.uint8)
    first = -block.ctypes.data % 4096
    return [block[first + start:first + stop].view(dtype).reshape(shape)
            for (start, stop), (shape, dtype) in zip(spans, specs, strict=True)]


def _chunk(a: np.ndarray, b: np.ndarray, c: np.ndarray, ea: np.ndarray, eb: np.ndarray,
           ec: np.ndarray, pairs: np.ndarray, top: np.ndarray, exponent: np.ndarray,
           scale: np.ndarray, term: np.ndarray, total: np.ndarray) -> np.ndarray:
    """The finite result of a few fragments, the fragments as the last axis: values and
    exponents ``[m, k, g]``, ``[k, n, g]``, ``[m, n, g]``; ``pairs`` (``[m, k, n, g]``) and
    ``top`` to ``total`` (``[m, n, g]``) are buffers it overwrites."""
    np.add(ea[:, :, None], eb[None], out=pairs)  # int16: zero operands stay far below -133
    np.max(pairs, axis=1, out=top)
    np.maximum(top, ec, out=top)
    np.maximum(top, ZERO_TERM_EXPONENT, out=top)
    np.subtract(FRACTION_BITS, top, out=exponent)
    scale[...] = _power_of_two(exponent)
    np.multiply(c, scale, out=total)
    np.trunc(total, out=total)
    for p in range(a.shape[1]):
        np.multiply(b[None, p], scale, out=term)
        term *= a[:, p, None]  # the exact product, scaled by a power of two: exact
        np.trunc(term, out=term)  # an integer below 2^27: exact in float64
        total += term  # at most 17 * 2^27: exact, in any order
    np.negative(exponent, out=exponent)
    total *= _power_of_two(exponent)
    return _truncate_aligned(total)


def _special(a: np.ndarray, b: np.ndarray, c: np.ndarray, result: np.ndarray) -> np.ndarray:
    """``result`` where every term is finite, else the IEEE value of the exact sum (finite
    terms cannot overflow float64), a NaN as ``CANONICAL_NAN``."""
    products = a[:, :, None] * b[None]
    special = ~np.isfinite(products).all(axis=1) | ~np.isfinite(c)
    ieee = (products.sum(axis=1) + c).astype(np.float32)
    ieee[np.isnan(ieee)] = CANONICAL_NAN  # the device's one NaN, whatever the operands'
    return np.where(special, ieee, result)


def _truncate_aligned(v: np.ndarray) -> np.ndarray:
    """A finite aligned sum truncated toward zero to f32 (a multiple of 2^-158, so a normal float64
    or zero), a zero result as +0, in fewer operations: clearing the 29 low significand bits
    of a float64 truncates it to f32's 24 (exact to convert; from 2^128 on it converts to
    infinity, and below it to at most the largest f32), and below 2^-126 f32 keeps multiples
    of 2^-149."""
    bits = v.view(np.int64)
    bits &= ~np.int64((1 << 29) - 1)
    tiny = np.abs(v) < 2.0**-126
    if tiny.any():
        v[tiny] = np.trunc(v[tiny] * 2.0**149) * 2.0**-149
    with np.errstate(over="ignore", invalid="ignore"):  # the terms of a NaN result
        out = v.astype(np.float32)
    out += np.float32(0)  # -0 + +0 is +0: a zero result is +0, whatever the terms' signs
    return out
