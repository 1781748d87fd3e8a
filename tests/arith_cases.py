"""Probe kernels of the IR's arithmetic: every binary and unary operation on every element type,
every conversion, the math functions, on edge-case and random inputs. The device checks run
them on GPUs, the OpenCL tests on PoCL; both compare with the simulator bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.ir import BinOp, Builtin, ElemType, MathFn, UnOp

N = 512
INTS = [t for t in ElemType if t.is_int]
FLOATS = [ElemType.F32, ElemType.F64]
TRANSCENDENTAL = (MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS, MathFn.TANH)


def edge_values(t: ElemType, rng: np.random.Generator) -> np.ndarray:
    dt = numpy_dtype(t)
    if t.is_int:
        info = np.iinfo(dt)
        edges: list[float] = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1]
        if t.is_signed:
            edges += [-1, -2, -7]
        rand = rng.integers(info.min, info.max, N, dtype=dt, endpoint=True)
    else:
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, 1.5, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-45,
                 -1e-45, 1e-39, 3.4e38, -3.4e38, 2.0**31, -(2.0**31) - 1, 2.0**32, 2.0**63,
                 -(2.0**63), 65504.0, 65520.0, 1e300, -1e300, 5e-324]
        rand = rng.standard_normal(N) * 2.0 ** rng.integers(-40, 40, N)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.array(edges, dtype=np.float64).astype(dt) if t.is_float else np.array(edges, dt)
        out = np.concatenate([e, rand.astype(dt)])[:N]
    return np.resize(out, N)


def tid() -> ir.Expr:
    return ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def index(k: int) -> ir.Expr:
    return ir.Binary(op=BinOp.ADD, a=ir.Const(value=k * N, type=ElemType.I32), b=tid(),
                     type=ElemType.I32)


def binary_kernel(t: ElemType) -> tuple[ir.Kernel, list[str]]:
    a = ir.Load(array="a", index=tid(), type=t)
    b = ir.Load(array="b", index=tid(), type=t)
    ops = [BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV]
    if t.is_int:
        ops += [BinOp.REM, BinOp.AND, BinOp.OR, BinOp.XOR, BinOp.SHL, BinOp.SHR]
    cmps = [BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE]
    body: list[ir.Stmt] = []
    names = []
    for k, op in enumerate(ops):
        rhs: ir.Expr = b
        if op in (BinOp.SHL, BinOp.SHR):  # amounts in [0, bits): b & (bits - 1)
            rhs = ir.Binary(op=BinOp.AND, a=b, b=ir.Const(value=t.bits - 1, type=t), type=t)
        body.append(ir.Store(array="out", index=index(k),
                             value=ir.Binary(op=op, a=a, b=rhs, type=t)))
        names.append(op.value)
    unary = [UnOp.NEG] + ([UnOp.BITNOT] if t.is_int else [])
    for j, u in enumerate(unary):
        body.append(ir.Store(array="out", index=index(len(ops) + j),
                             value=ir.Unary(op=u, x=a, type=t)))
        names.append(u.value)
    for k, op in enumerate(cmps):
        body.append(ir.Store(array="flags", index=index(k),
                             value=ir.Binary(op=op, a=a, b=b, type=ElemType.BOOL)))
        names.append(op.value)
    params = (ir.ArrayParam(name="a", elem=t, readonly=True),
              ir.ArrayParam(name="b", elem=t, readonly=True),
              ir.ArrayParam(name="out", elem=t), ir.ArrayParam(name="flags", elem=ElemType.BOOL))
    return ir.Kernel(name=f"binary_{t.value}", params=params, body=tuple(body)), names


def cast_kernel(src: ElemType) -> ir.Kernel:
    a = ir.Load(array="a", index=tid(), type=src)
    targets = [t for t in ElemType if t is not src]
    body = tuple(ir.Store(array=f"out_{t.value}", index=tid(), value=ir.Cast(x=a, type=t))
                 for t in targets)
    params = (ir.ArrayParam(name="a", elem=src, readonly=True),
              *(ir.ArrayParam(name=f"out_{t.value}", elem=t) for t in targets))
    return ir.Kernel(name=f"cast_{src.value}", params=params, body=body)


def math_kernel(t: ElemType, fns: tuple[MathFn, ...] = tuple(MathFn)) -> ir.Kernel:
    """Each of ``fns`` on ``t``, function ``k`` writing slot ``k`` of ``out``."""
    a = ir.Load(array="a", index=tid(), type=t)
    b = ir.Load(array="b", index=tid(), type=t)
    c = ir.Load(array="c", index=tid(), type=t)
    body = []
    for k, fn in enumerate(fns):
        args = (a, b, c)[: ir.MATH_ARITY[fn]]
        body.append(ir.Store(array="out", index=index(k), value=ir.Call(fn=fn, args=args,
                                                                          type=t)))
    params = (*(ir.ArrayParam(name=x, elem=t, readonly=True) for x in "abc"),
              ir.ArrayParam(name="out", elem=t))
    return ir.Kernel(name=f"math_{t.value}", params=params, body=tuple(body))


@dataclass(frozen=True)
class Probe:
    """One probe launch of ``N`` invocations: its kernel, its arguments, and what each output
    holds: ``(array, operation, slot)``, the slot ``k`` being elements ``k*N`` to ``(k+1)*N``
    of the array, or the whole array when it is None."""

    kernel: ir.Kernel
    args: dict[str, np.ndarray]
    outputs: tuple[tuple[str, str, int | None], ...]


def binary_probe(t: ElemType, rng: np.random.Generator) -> Probe:
    kernel, names = binary_kernel(t)
    a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
    if t.is_int:
        b = np.where(b == 0, np.ones_like(b), b)  # the IR leaves x / 0 undefined
    arith = len(names) - 6
    outputs = (*(("out", names[k], k) for k in range(arith)),
               *(("flags", names[arith + k], k) for k in range(6)))
    return Probe(kernel, {"a": a, "b": b, "out": np.zeros(arith * N, a.dtype),
                          "flags": np.zeros(6 * N, np.bool_)}, outputs)


def cast_probe(src: ElemType, rng: np.random.Generator) -> Probe:
    kernel = cast_kernel(src)
    with np.errstate(over="ignore"):  # edge values beyond f16's range become infinities
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
    outputs = tuple((p.name, p.name, None) for p in kernel.params[1:])
    return Probe(kernel, {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                                          for p in kernel.params[1:]}}, outputs)


def math_probe(t: ElemType, rng: np.random.Generator,
               fns: tuple[MathFn, ...] = tuple(MathFn)) -> Probe:
    vals = [edge_values(t, rng) for _ in range(3)]
    return Probe(math_kernel(t, fns), {"a": vals[0], "b": np.roll(vals[1], 3),
                                       "c": np.roll(vals[2], 7),
                                       "out": np.zeros(len(fns) * N, vals[0].dtype)},
                 tuple(("out", fn.value, k) for k, fn in enumerate(fns)))


CAST_SOURCES = [*INTS, *FLOATS, ElemType.F16, ElemType.BF16]


def probes(rng: np.random.Generator,
           math_functions: Callable[[ElemType], tuple[MathFn, ...]] = lambda t: tuple(MathFn)
           ) -> Iterator[Probe]:
    """Every operation on every type, every conversion, the math functions on f32 and f64
    (``math_functions`` says which a target prints on each), in that order."""
    for t in INTS + FLOATS:
        yield binary_probe(t, rng)
    for src in CAST_SOURCES:
        yield cast_probe(src, rng)
    for t in FLOATS:
        yield math_probe(t, rng, math_functions(t))


def compare(probe: Probe, got: dict[str, np.ndarray], want: dict[str, np.ndarray]
            ) -> list[tuple[str, int]]:
    """``(operation, mismatching outputs)`` for each output of ``probe``."""
    out = []
    for array, operation, slot in probe.outputs:
        part = slice(None) if slot is None else slice(slot * N, (slot + 1) * N)
        out.append((operation, mismatches(got[array][part], want[array][part])))
    return out


def mismatches(got: np.ndarray, want: np.ndarray) -> int:
    """Outputs that differ (``differs``)."""
    return int(np.count_nonzero(differs(got, want)))


def differs(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per output: its bits differ, a float NaN matching any NaN."""
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        bits = got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")
        out: np.ndarray = bits & ~both_nan
        return out
    return np.asarray(got != want)
