"""The tests' oracle: C after a launch, computed from the recognized description alone.

``evaluate(gemm, region, args)`` replays the description with NumPy, independently of the
simulator: a copy of C's argument with every covered output replaced by ``epilogue(init +
products in k order)``, each operation in the kernel's own types (wrapping integers, binary32
rounding, one rounding for ``fma``). The property and canary tests compare the simulated
original kernel, and the rewritten one, against it (``specs/matrix-pattern-rewrite.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias, cast

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.ir import ElemType, MathFn
from sarek.matrix_mapping import IndexEvaluator, Region, RegionError, bind, coordinates
from sarek.matrix_pattern import ACC, BATCH, COL, ROW, Gemm

Num: TypeAlias = np.ndarray | np.generic
"""What a NumPy operation on arrays gives: an array, or a scalar when the operands are 0-d."""


class Oracle(IndexEvaluator):
    """``IndexEvaluator`` extended to everything a description holds: loads of the kernel's
    arrays, conversions between all types and the math functions."""

    def load(self, name: str, index: ir.Expr, mask: np.ndarray | None) -> Any:
        arr = self.args.get(name)
        if not isinstance(arr, np.ndarray):
            raise RegionError(f"evaluating the description needs the array {name!r}")
        idx = np.asarray(self.eval(index, mask), dtype=np.int64)
        flat = arr.ravel()
        live = idx if mask is None else np.broadcast_to(idx, mask.shape)[mask]
        if live.size and (live.min() < 0 or live.max() >= flat.size):
            raise RegionError(f"{name}[...] reads outside the array ({flat.size} elements)")
        return flat[np.clip(idx, 0, max(flat.size - 1, 0))]

    def cast(self, v: np.ndarray, src: ElemType, dst: ElemType) -> Any:
        return _cast(v, src, dst)

    def call(self, fn: MathFn, vals: list[np.ndarray], t: ElemType) -> Any:
        return _call(fn, vals, t)


def evaluate(gemm: Gemm, reg: Region, args: Sequence[object] | Mapping[str, object]
             ) -> np.ndarray:
    """C after the launch, computed from the description: a copy of C's argument with every
    covered output replaced by ``epilogue(init + products in k order)``, each operation in the
    kernel's own types (wrapping integers, binary32 rounding, one rounding for ``fma``)."""
    bound = bind(gemm, args)
    for name in {gemm.a.array, gemm.b.array, gemm.c.array}:
        if not isinstance(bound.get(name), np.ndarray):
            raise RegionError(f"evaluating the description needs the array {name!r}")
    r, c, z = coordinates(gemm, reg)
    ev = Oracle(gemm, bound, {ROW: r, COL: c, BATCH: z})
    acc_dt = numpy_dtype(gemm.acc_type)
    acc = np.broadcast_to(ev.eval(gemm.init), r.shape).astype(acc_dt)
    start = int(ev.scalar(gemm.k_start))
    with np.errstate(all="ignore"):
        for p in range(start, start + reg.d):
            a = ev.gather(gemm.a, r, c, z, p).astype(acc_dt)
            b = ev.gather(gemm.b, r, c, z, p).astype(acc_dt)
            acc = _fma(a, b, acc) if gemm.fused else (acc + a * b).astype(acc_dt)
    ev.values[ACC] = acc
    out = np.array(bound[gemm.c.array], copy=True).ravel()
    stored = np.broadcast_to(ev.eval(gemm.epilogue), r.shape)
    out[ev.address(gemm.c, r, c, z, 0)] = stored
    return out


def _fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` rounded once. For f32: the product is exact in f64; the sum is formed in
    f64 with its error (TwoSum) and rounded to odd, which then rounds to f32 correctly."""
    if a.dtype != np.float32:
        raise RegionError(f"fma on {a.dtype} cannot be evaluated exactly with NumPy")
    x, y, w = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
    prod = x * y
    s = prod + w
    bb = s - prod
    err = (prod - (s - bb)) + (w - bb)
    bits = s.view(np.int64)
    inexact_even = (err != 0) & ((bits & 1) == 0) & np.isfinite(s)
    toward = np.where(err > 0, np.inf, -np.inf)
    s = np.where(inexact_even, np.nextafter(s, toward), s)
    return s.astype(np.float32)


def _cast(v: np.ndarray, src: ElemType, dst: ElemType) -> Num:
    dt = numpy_dtype(dst)
    if dst is ElemType.BOOL:
        return cast(Num, v != 0)
    if dst.is_int and src.is_float:
        info = np.iinfo(dt)
        with np.errstate(all="ignore"):
            w = np.trunc(v.astype(np.float64))
            w = np.where(np.isnan(w), 0, np.clip(w, info.min, info.max))
        if dst.bits <= 32:
            return w.astype(dt)
        return np.array([int(x) for x in np.ravel(w)], dtype=dt).reshape(np.shape(w))
    if dst.is_int and src.is_int:
        return v.astype(np.int64 if src.is_signed else np.uint64).astype(dt)
    return v.astype(dt)


def _call(fn: MathFn, vals: list[np.ndarray], t: ElemType) -> Num:
    dt = numpy_dtype(t)
    with np.errstate(all="ignore"):
        match fn:
            case MathFn.ABS:
                return cast(Num, np.abs(vals[0]).astype(dt))
            case MathFn.MIN:
                return cast(Num, (np.fmin if t.is_float else np.minimum)(vals[0], vals[1])
                            .astype(dt))
            case MathFn.MAX:
                return cast(Num, (np.fmax if t.is_float else np.maximum)(vals[0], vals[1])
                            .astype(dt))
            case MathFn.SQRT:
                return cast(Num, np.sqrt(vals[0]).astype(dt))
            case MathFn.FLOOR:
                return cast(Num, np.floor(vals[0]).astype(dt))
            case MathFn.CEIL:
                return cast(Num, np.ceil(vals[0]).astype(dt))
            case MathFn.FMA:
                return _fma(*vals)
        wide = {MathFn.EXP: np.exp, MathFn.LOG: np.log, MathFn.SIN: np.sin, MathFn.COS: np.cos,
                MathFn.TANH: np.tanh}[fn]
        return wide(vals[0].astype(np.float64)).astype(dt)
