"""The one-fragment probe of the matrix units: per subgroup of 32, a 16x16 A, a 16x16 B and a
16x16 f32 accumulator loaded from global memory, one multiply-add, D stored; so every output is
one instruction's output (two ``mma.sync m16n8k16`` on CUDA, one
``OpCooperativeMatrixMulAddKHR`` 16x16x16 through Vulkan). With five input distributions
(normal, wide exponents, tiny products with a large addend, cancellation, subnormal operands)
and the bit-for-bit count the device checks compare with."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, FragUse

WARP = 32
N = 16  # every fragment is N x N, row-major, tile t at element t * N * N
MODELS = ("h200", "sequential", "exact")
"""The simulator's arithmetic models the outputs are counted against."""
OPERANDS: dict[str, tuple[ElemType, type]] = {"f16": (ElemType.F16, np.float16),
                                              "bf16": (ElemType.BF16, ml_dtypes.bfloat16)}
Inputs = tuple[np.ndarray, np.ndarray, np.ndarray]
Draw = Callable[[np.random.Generator, type, int], Inputs]


def probe_kernel(name: str, operand: ElemType) -> ir.Kernel:
    """``d[t] = a[t] @ b[t] + c[t]`` for the tile ``t = block_idx.x``, in fragments."""
    i32 = ElemType.I32
    tile = ir.BuiltinValue(which=Builtin.BLOCK_IDX_X)
    offset = ir.Binary(op=BinOp.MUL, a=tile, b=ir.Const(value=N * N, type=i32), type=i32)
    stride = ir.Const(value=N, type=i32)
    frags = {"fa": (FragUse.A, operand), "fb": (FragUse.B, operand),
             "fc": (FragUse.ACCUMULATOR, ElemType.F32), "fd": (FragUse.ACCUMULATOR, ElemType.F32)}
    shape = ir.FragShape(m=N, n=N, k=N)
    body: list[ir.Stmt] = [ir.FragDecl(name=f, use=use, shape=shape, elem=elem)
                           for f, (use, elem) in frags.items()]
    body += [ir.FragLoad(frag=f, array=array, offset=offset, stride=stride)
             for f, array in (("fa", "a"), ("fb", "b"), ("fc", "c"))]
    body += [ir.FragMulAdd(d="fd", a="fa", b="fb", c="fc"),
             ir.FragStore(frag="fd", array="d", offset=offset, stride=stride)]
    params = tuple(ir.ArrayParam(name=array, elem=elem) for array, elem in (
        ("a", operand), ("b", operand), ("c", ElemType.F32), ("d", ElemType.F32)))
    return ir.Kernel(name=f"mma_probe_{name}", params=params, body=tuple(body), subgroup=WARP,
                     block=(WARP, 1, 1))


def scaled(rng: np.random.Generator, shape: tuple[int, ...], lo: int, hi: int) -> np.ndarray:
    return rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)


def distributions() -> dict[str, Draw]:
    def normal(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (rng.standard_normal(shape), rng.standard_normal(shape),
                rng.standard_normal(shape))

    def wide(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (scaled(rng, shape, -12, 12), scaled(rng, shape, -12, 12),
                scaled(rng, shape, -16, 16))

    def tiny_products(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        return (scaled(rng, shape, -12, -4), scaled(rng, shape, -12, -4),
                scaled(rng, shape, 0, 8))

    def cancelling(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        a = rng.standard_normal(shape).astype(dt).astype(np.float64)
        b = rng.standard_normal(shape).astype(dt).astype(np.float64)
        near = -(a @ b) * (1 + rng.standard_normal(shape) * 2.0**-20)
        return a, b, near

    def subnormal(rng: np.random.Generator, dt: type, tiles: int) -> Inputs:
        shape = (tiles, N, N)
        tiny = 2.0**-20 if dt is np.float16 else 2.0**-130
        return (rng.standard_normal(shape) * tiny, rng.standard_normal(shape),
                rng.standard_normal(shape) * tiny)

    return {"normal": normal, "wide exponents": wide, "tiny products, large c": tiny_products,
            "cancellation": cancelling, "subnormal operands": subnormal}


def mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Outputs whose bits differ."""
    return int(np.count_nonzero(got.view(np.uint32) != want.view(np.uint32)))


def arguments(a: np.ndarray, b: np.ndarray, c: np.ndarray, dt: type) -> dict[str, np.ndarray]:
    """The probe kernel's arrays: ``a`` and ``b`` rounded to the operand type ``dt``, ``c`` to
    f32, ``d`` zero."""
    return {"a": a.astype(dt).ravel(), "b": b.astype(dt).ravel(),
            "c": c.astype(np.float32).ravel(), "d": np.zeros(c.size, np.float32)}
