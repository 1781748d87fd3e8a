"""Target-neutral matrix fragments in the simulator, and the arithmetic models of a
multiply-accumulate.

A fragment is a whole ``rows x cols`` matrix owned by one subgroup; the simulator keeps one
array ``[subgroup, rows, cols]`` per fragment over every subgroup of the launch. Its
operations run for the subgroups whose lanes are all active and need every operand (offset,
stride, fill value) to be the same across a subgroup's lanes.

``d = a * b + c`` on integers is exact and wraps to the accumulator type. On floats the
accumulator is f32 (or f64) and the products of f16/bf16 operands are exact; how they are
summed is the named arithmetic model:

* ``sequential``: ``c``, then each product added in k order, rounding to the accumulator type
  after every addition (Apple's simdgroup half x half -> float was measured to do this);
* ``exact``: the exact sum ``c + sum_k a*b``, rounded once to nearest even;
* ``h200``: the H200's tensor cores (``sim.tensor_core``): one fused dot-add of all the
  products and ``c``, aligned to the largest exponent with 25 fraction bits and truncated,
  the sum truncated to f32.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import numpy as np

from sim import tensor_core

Model: TypeAlias = Literal["sequential", "exact", "h200"]
MODELS: tuple[Model, ...] = ("sequential", "exact", "h200")


def mul_add(a: np.ndarray, b: np.ndarray, c: np.ndarray, model: Model) -> np.ndarray:
    """``a @ b + c`` for a stack of fragments: ``a[g, m, k]``, ``b[g, k, n]``, ``c[g, m, n]``;
    the result has ``c``'s dtype."""
    acc = c.dtype
    if acc.kind in "iu":
        bound = float(np.abs(a).max(initial=0)) * float(np.abs(b).max(initial=0)) * a.shape[2]
        wide: np.ndarray
        # Every partial sum of any order is at most ``bound``: an integer that float32 (below
        # 2^24: u8 x u8 over k = 16 stays under 2^20) or float64 (below 2^53) holds exactly,
        # so BLAS gives the exact sum.
        if bound < 2.0**24:
            wide = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.int64)
        elif bound < 2.0**53:
            wide = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
        else:
            wide = np.einsum("gmk,gkn->gmn", a.astype(np.int64), b.astype(np.int64))
        return (wide + c.astype(np.int64)).astype(acc)  # wraps modulo 2^bits
    if model == "sequential":
        out = c.copy()
        af, bf = a.astype(acc), b.astype(acc)  # products of f16/bf16 are exact in f32
        for k in range(a.shape[2]):
            out = out + af[:, :, k, None] * bf[:, None, k, :]
        return out
    if model == "exact":
        return _exact(a, b, c)
    if model == "h200":
        if acc != np.float32 or a.dtype.itemsize != 2:
            raise ValueError("the h200 model covers f16 and bf16 operands with an f32 "
                             f"accumulator, not {a.dtype} with {acc}")
        return tensor_core.mul_add(a, b, c)
    raise ValueError(f"unknown arithmetic model {model!r}; the models are {', '.join(MODELS)}")


def _exact(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The exact sum of ``c`` and the products, rounded once. Every term is exact in f64
    (products of 16-bit floats have at most 22 significant bits). Error-free additions
    (``_two_sum``) pass over each output's terms until they no longer change: then each term
    is at most half a unit in the last place of the next, so the top one is less than a unit
    from the exact sum and the next one has the sign of what it left out. For an f32 (or
    narrower) accumulator the top is rounded to odd from that sign, so that the final rounding
    is the only one; for f64 the tie the top won is settled by the term after. Infinite and NaN
    terms give the IEEE sum."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 and inf - inf give NaN
        products = a.astype(np.float64)[:, :, :, None] * b.astype(np.float64)[:, None, :, :]
        terms = np.concatenate([c.astype(np.float64)[:, :, None, :], products], axis=2)
        flat = np.ascontiguousarray(np.moveaxis(terms, 2, -1).reshape(-1, terms.shape[2]))
        ieee = flat.sum(axis=1)
        finite = np.isfinite(flat).all(axis=1)
        x = np.where(finite[:, None], flat, 0.0)
        for _ in range(x.shape[1]):  # each pass settles at least one more term
            before = x.copy()
            for i in range(1, x.shape[1]):
                x[:, i], x[:, i - 1] = _two_sum(x[:, i], x[:, i - 1])
            if np.array_equal(x, before):
                break
    zero = np.zeros_like(x[:, -1])
    top = x[:, -1]
    rest = x[:, -2] if x.shape[1] > 1 else zero
    tail = x[:, -3] if x.shape[1] > 2 else zero
    toward = np.nextafter(top, np.where(rest > 0, np.inf, -np.inf))
    if c.dtype == np.float64:
        # ``rest`` is at most half the gap to ``toward``; at exactly half, ``top`` won the tie
        # to even, and a ``tail`` of the same sign puts the exact sum past the midpoint.
        past = (rest != 0) & (2 * np.abs(rest) == np.abs(toward - top)) & (
            np.sign(tail) == np.sign(rest))
        nearest = np.where(past, toward, top)
        return np.where(finite, nearest, ieee).reshape(c.shape)
    fix = (rest != 0) & ((top.view(np.int64) & 1) == 0)
    odd = np.where(fix, toward, top)
    with np.errstate(over="ignore"):  # past the accumulator's range: infinity, as IEEE says
        return np.where(finite, odd, ieee).astype(c.dtype).reshape(c.shape)


def _two_sum(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``s = fl(x + y)`` and the exact error ``x + y - s`` (Knuth's TwoSum, no branch)."""
    s = x + y
    v = s - x
    return s, (x - (s - v)) + (y - v)
