"""Probe kernels of the IR's arithmetic: every binary and unary operation on every element type,
every conversion, the math functions, on edge-case and random inputs. The device checks run
them on GPUs, the OpenCL tests on PoCL; both compare with the simulator bit for bit."""

from __future__ import annotations

import numpy as np

from sarek import ir
from sarek.dsl import numpy_dtype
from sarek.ir import BinOp, Builtin, ElemType, MathFn, UnOp

N = 512
INTS = [t for t in ElemType if t.is_int]
FLOATS = [ElemType.F32, ElemType.F64]
TRANSCENDENTAL = (MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS, MathFn.TANH)


def edge_values(t: ElemType, rng: np.random.Generator) -> np.ndarray:
    dt = numpy_dtype(t)
    if t.is_int:
        info = np.iinfo(dt)
        edges = [0, 1, 2, 3, 7, info.max, info.max - 1, info.min, info.min + 1]
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


def math_kernel(t: ElemType) -> ir.Kernel:
    a = ir.Load(array="a", index=tid(), type=t)
    b = ir.Load(array="b", index=tid(), type=t)
    c = ir.Load(array="c", index=tid(), type=t)
    body = []
    for k, fn in enumerate(MathFn):
        args = (a, b, c)[: ir.MATH_ARITY[fn]]
        body.append(ir.Store(array="out", index=index(k), value=ir.Call(fn=fn, args=args,
                                                                          type=t)))
    params = (*(ir.ArrayParam(name=x, elem=t, readonly=True) for x in "abc"),
              ir.ArrayParam(name="out", elem=t))
    return ir.Kernel(name=f"math_{t.value}", params=params, body=tuple(body))


def mismatches(got: np.ndarray, want: np.ndarray) -> int:
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        bits = got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")
        return int(np.count_nonzero(bits & ~both_nan))
    return int(np.count_nonzero(got != want))
