"""Small builders for hand-written IR in the simulator tests, and exact reference rounding."""

from __future__ import annotations

from fractions import Fraction

import numpy as np

import sarek.dtypes
import sim
import sim.arith
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, MathFn, MemSpace

I32, U32, F32, F64, BOOL = ElemType.I32, ElemType.U32, ElemType.F32, ElemType.F64, ElemType.BOOL


def const(value: bool | int | float, t: ElemType = I32) -> ir.Const:
    return ir.Const(value=value, type=t)


def var(name: str, t: ElemType = I32) -> ir.Var:
    return ir.Var(name=name, type=t)


def builtin(which: Builtin) -> ir.BuiltinValue:
    return ir.BuiltinValue(which=which)


def binary(op: BinOp, a: ir.Expr, b: ir.Expr) -> ir.Binary:
    t = BOOL if op in ir.COMPARISONS or op in ir.LOGICAL else a.type
    return ir.Binary(op=op, a=a, b=b, type=t)


def add(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.ADD, a, b)


def mul(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.MUL, a, b)


def lt(a: ir.Expr, b: ir.Expr) -> ir.Binary:
    return binary(BinOp.LT, a, b)


def cast(x: ir.Expr, t: ElemType) -> ir.Cast:
    return ir.Cast(x=x, type=t)


def load(array: str, index: ir.Expr, t: ElemType) -> ir.Load:
    return ir.Load(array=array, index=index, type=t)


def call(fn: MathFn, *args: ir.Expr) -> ir.Call:
    return ir.Call(fn=fn, args=args, type=args[0].type)


def tid() -> ir.Expr:
    """``block_idx.x * block_dim.x + thread_idx.x``."""
    return add(mul(builtin(Builtin.BLOCK_IDX_X), builtin(Builtin.BLOCK_DIM_X)),
               builtin(Builtin.THREAD_IDX_X))


def array(name: str, t: ElemType = I32, readonly: bool = False) -> ir.ArrayParam:
    return ir.ArrayParam(name=name, elem=t, readonly=readonly)


def scalar(name: str, t: ElemType = I32) -> ir.ScalarParam:
    return ir.ScalarParam(name=name, elem=t)


def shared(name: str, size: int, t: ElemType = I32) -> ir.ArrayDecl:
    return ir.ArrayDecl(name=name, elem=t, size=size, space=MemSpace.SHARED)


def kernel(params: list[ir.ArrayParam | ir.ScalarParam], *body: ir.Stmt,
           name: str = "k") -> ir.Kernel:
    return ir.Kernel(name=name, params=tuple(params), body=tuple(body))


def elementwise(t_in: ElemType, t_out: ElemType, f: ir.Expr) -> ir.Kernel:
    """``out[i] = f(x[i])`` (``f`` reads ``x[i]`` as the Var named "v" of type ``t_in``), one
    invocation per element, for ``n`` elements."""
    i = var("i")
    return kernel(
        [array("x", t_in), array("out", t_out), scalar("n")],
        ir.Let(name="i", type=I32, value=tid()),
        ir.If(cond=lt(i, var("n")), then=(
            ir.Let(name="v", type=t_in, value=load("x", i, t_in)),
            ir.Store(array="out", index=i, value=f),
        )),
    )


def naive_gemm(t: ElemType = F32) -> ir.Kernel:
    """``c[row*n+col] = sum_p a[row*k+p] * b[p*n+col]`` with a 2-D mapping and a bounds guard,
    accumulating in k order."""
    row = add(mul(builtin(Builtin.BLOCK_IDX_Y), builtin(Builtin.BLOCK_DIM_Y)),
              builtin(Builtin.THREAD_IDX_Y))
    col = add(mul(builtin(Builtin.BLOCK_IDX_X), builtin(Builtin.BLOCK_DIM_X)),
              builtin(Builtin.THREAD_IDX_X))
    r, c, m, n, k, p = (var(x) for x in ("row", "col", "m", "n", "k", "p"))
    acc = var("acc", t)
    product = mul(load("a", add(mul(r, k), p), t), load("b", add(mul(p, n), c), t))
    return kernel(
        [array("a", t, readonly=True), array("b", t, readonly=True), array("c", t),
         scalar("m"), scalar("n"), scalar("k")],
        ir.Let(name="row", type=I32, value=row),
        ir.Let(name="col", type=I32, value=col),
        ir.If(cond=binary(BinOp.LAND, lt(r, m), lt(c, n)), then=(
            ir.Let(name="acc", type=t, value=const(0 if t.is_int else 0.0, t)),
            ir.For(var="p", start=const(0), stop=k, step=const(1), body=(
                ir.Assign(name="acc", value=add(acc, product)),
            )),
            ir.Store(array="c", index=add(mul(r, n), c), value=acc),
        )),
        name="gemm",
    )


def round_fraction(x: Fraction, mantissa_bits: int, min_exp: int, max_exp: int) -> float:
    """``x`` rounded to nearest even in a binary format with ``mantissa_bits`` of precision
    (counting the leading one) and normal exponents in [min_exp, max_exp]; inf on overflow.
    Written from the definition, independently of the simulator."""
    if x == 0:
        return 0.0
    sign = -1 if x < 0 else 1
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    e = max(e, min_exp)  # subnormals share the smallest exponent's spacing
    ulp = Fraction(2) ** (e - mantissa_bits + 1)
    q = x / ulp
    n = q.numerator // q.denominator
    rest = q - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    value = n * ulp
    if value >= Fraction(2) ** (max_exp + 1):
        return sign * float("inf")
    return sign * float(value)


def round_f32(x: Fraction) -> float:
    return round_fraction(x, 24, -126, 127)


def round_f64(x: Fraction) -> float:
    return round_fraction(x, 53, -1022, 1023)


def binary_kernel(op: BinOp, t: ElemType, t_b: ElemType | None = None) -> ir.Kernel:
    """``out[i] = x[i] op y[i]`` for ``n`` elements (``out`` is bool for comparisons)."""
    i = var("i")
    t_b = t_b or t
    e = binary(op, load("x", i, t), load("y", i, t_b))
    return kernel(
        [array("x", t), array("y", t_b), array("out", e.type), scalar("n")],
        ir.Let(name="i", type=I32, value=tid()),
        ir.If(cond=lt(i, var("n")), then=(ir.Store(array="out", index=i, value=e),)),
    )


def run_binary(op: BinOp, x: np.ndarray, y: np.ndarray, out_dtype: object = None
               ) -> np.ndarray:
    """Runs ``binary_kernel`` over ``x`` and ``y`` (NumPy arrays of IR element dtypes)."""
    t, t_b = elem_of(x.dtype), elem_of(y.dtype)
    k = binary_kernel(op, t, t_b)
    out = np.zeros(len(x), out_dtype or (np.bool_ if op in ir.COMPARISONS else x.dtype))
    return launch_1d(k, [x, y, out, len(x)])["out"]


def run_unary(t_in: ElemType, t_out: ElemType, f: ir.Expr, x: np.ndarray) -> np.ndarray:
    """Runs ``elementwise(t_in, t_out, f)`` over ``x``."""
    out = np.zeros(len(x), sarek.dtypes.numpy_dtype(t_out))
    return launch_1d(elementwise(t_in, t_out, f), [x, out, len(x)])["out"]


def launch_1d(k: ir.Kernel, args: list[object], n: int | None = None, block: int = 64
              ) -> dict[str, np.ndarray]:
    """Simulates ``k`` with enough blocks of ``block`` invocations for ``n`` (the last
    argument by default)."""
    count = int(args[-1]) if n is None else n  # type: ignore[call-overload]
    return sim.simulate(k, args, grid=(max(1, -(-count // block)),), block=(block,))


def elem_of(dt: np.dtype) -> ElemType:
    t = sarek.dtypes.elem_of(dt)
    assert t is not None, dt
    return t
