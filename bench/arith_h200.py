"""The CUDA printer's arithmetic on a real GPU against the simulator, bit for bit.

For every element type, one kernel applies every binary and unary operation of the IR to pairs
of edge-case and random inputs (zeros of both signs, infinities, NaN, subnormals, the limits of
the integer types, halfway cases), one kernel per source type converts to every element type,
and one kernel per float type applies the math functions. Each output is compared bit for bit
with the simulator (NaNs by value class: any NaN matches any NaN). Transcendental functions
(exp, log, sin, cos, tanh) are reported apart: the simulator rounds the float64 result, devices
may differ by a few units in the last place. Writes bench/results/arith_h200.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.cuda.run import device_arch, device_name, run  # noqa: E402
from sarek import ir  # noqa: E402
from sarek.dsl import numpy_dtype  # noqa: E402
from sarek.ir import BinOp, Builtin, ElemType, MathFn, UnOp  # noqa: E402
from sim import simulate  # noqa: E402

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


def main() -> int:
    rng = np.random.default_rng(7)
    rows = []

    def check(label: str, kernel: ir.Kernel, args: dict[str, np.ndarray],
              per_op: list[tuple[str, str, int]] | None = None) -> None:
        want = simulate(kernel, args, grid=1, block=N)
        got = run(kernel, args, (1,), (N,))
        for name in want:
            if per_op and name in {x[0] for x in per_op}:
                for array, op, k in per_op:
                    if array == name:
                        bad = mismatches(got[name][k * N:(k + 1) * N],
                                         want[name][k * N:(k + 1) * N])
                        rows.append({"kernel": label, "what": op, "mismatches": bad})
            elif not kernel.param(name).readonly:  # type: ignore[union-attr]
                rows.append({"kernel": label, "what": name, "mismatches":
                             mismatches(got[name], want[name])})

    for t in INTS + FLOATS:
        kernel, names = binary_kernel(t)
        a, b = edge_values(t, rng), np.roll(edge_values(t, rng), 5)
        if t.is_int:
            b = np.where(b == 0, np.ones_like(b), b)  # the IR leaves x / 0 undefined
        n_arith = len(names) - 6
        per_op = [("out", names[k], k) for k in range(n_arith)]
        per_op += [("flags", names[n_arith + k], k) for k in range(6)]
        check(kernel.name, kernel, {"a": a, "b": b, "out": np.zeros(n_arith * N, a.dtype),
                                    "flags": np.zeros(6 * N, np.bool_)}, per_op)
    for src in [*INTS, *FLOATS, ElemType.F16, ElemType.BF16]:
        kernel = cast_kernel(src)
        values = (edge_values(src, rng) if src not in (ElemType.F16, ElemType.BF16)
                  else edge_values(ElemType.F32, rng).astype(numpy_dtype(src)))
        args = {"a": values, **{p.name: np.zeros(N, numpy_dtype(p.elem))
                                for p in kernel.params[1:]}}
        check(kernel.name, kernel, args)
    for t in FLOATS:
        kernel = math_kernel(t)
        vals = [edge_values(t, rng) for _ in range(3)]
        per_op = [("out", fn.value, k) for k, fn in enumerate(MathFn)]
        check(kernel.name, kernel, {"a": vals[0], "b": np.roll(vals[1], 3),
                                    "c": np.roll(vals[2], 7),
                                    "out": np.zeros(len(MathFn) * N, vals[0].dtype)}, per_op)
    exact_rows = [r for r in rows if r["what"] not in {f.value for f in TRANSCENDENTAL}]
    ok = all(r["mismatches"] == 0 for r in exact_rows)
    for r in rows:
        if r["mismatches"] or r["what"] in {f.value for f in TRANSCENDENTAL}:
            print(f"{r['kernel']:14} {r['what']:10} {r['mismatches']} of {N} differ")
    result = {"device": device_name(), "arch": device_arch(), "inputs_per_case": N,
              "all_exact_operations_bit_exact": ok, "rows": rows}
    (ROOT / "bench" / "results" / "arith_h200.json").write_text(json.dumps(result, indent=2)
                                                                + "\n")
    print(f"{len(exact_rows)} exact operations/conversions checked; all bit-exact: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
