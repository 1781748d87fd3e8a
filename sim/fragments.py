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

import math
from typing import Literal, TypeAlias

import numpy as np

from sarek.ir import ElemType
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
    """The exact sum of ``c`` and the products, rounded once: ``math.fsum`` gives it rounded
    to f64 and, from the exact remainder's sign, the f64 is rounded to odd instead, so that
    the final rounding to the accumulator type is the only one."""
    products = a.astype(np.float64)[:, :, :, None] * b.astype(np.float64)[:, None, :, :]
    terms = np.concatenate([c.astype(np.float64)[:, :, None, :], products], axis=2)
    flat = np.moveaxis(terms, 2, -1).reshape(-1, terms.shape[2])
    sums = np.array([math.fsum(row) for row in flat.tolist()], np.float64)
    rest = np.array([math.fsum([*row, -s]) for row, s in zip(flat.tolist(), sums.tolist(),
                                                              strict=True)], np.float64)
    if c.dtype == np.float64:
        return sums.reshape(c.shape)
    fix = (rest != 0) & ((sums.view(np.int64) & 1) == 0) & np.isfinite(sums)
    odd = np.where(fix, np.nextafter(sums, np.where(rest > 0, np.inf, -np.inf)), sums)
    return odd.astype(c.dtype).reshape(c.shape)


def accumulator_types(operand: ElemType) -> tuple[ElemType, ...]:
    """The accumulator types a multiply-accumulate of ``operand`` fragments may use."""
    if operand.is_int:
        return (ElemType.I32, ElemType.U32)
    return (ElemType.F32, ElemType.F64) if operand is not ElemType.F64 else (ElemType.F64,)
