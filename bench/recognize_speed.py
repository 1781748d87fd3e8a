"""Time ``recognize`` + ``region`` + ``select`` on a GEMM kernel of about 200 statements.

The kernel is a naive GEMM whose index arithmetic, initial value and epilogue are spread over
many temporaries (as generated or macro-expanded kernels are). Prints a table and writes
``bench/results/recognize_speed.json``. Target: under 50 ms. Run: ``python -m
bench.recognize_speed``.
"""

from __future__ import annotations

from bench.harness import machine, show, table, wall, write
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType
from sarek.matrix_mapping import region
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import select

I32, F32 = ElemType.I32, ElemType.F32


def v(name: str, t: ElemType = I32) -> ir.Var:
    return ir.Var(name=name, type=t)


def c(x: int | float, t: ElemType = I32) -> ir.Const:
    return ir.Const(value=x, type=t)


def bi(w: str) -> ir.BuiltinValue:
    return ir.BuiltinValue(which=Builtin(w))


def op(o: BinOp, a: ir.Expr, b: ir.Expr) -> ir.Binary:
    t = ElemType.BOOL if o in ir.COMPARISONS or o in ir.LOGICAL else a.type
    return ir.Binary(op=o, a=a, b=b, type=t)


def big_kernel(extra: int = 64) -> ir.Kernel:
    """A GEMM nest with ``3 * extra`` temporaries feeding its indices and epilogue."""
    body: list[ir.Stmt] = [
        ir.Let(name="row", type=I32, value=op(BinOp.ADD, op(
            BinOp.MUL, bi("block_idx.y"), bi("block_dim.y")), bi("thread_idx.y"))),
        ir.Let(name="col", type=I32, value=op(BinOp.ADD, op(
            BinOp.MUL, bi("block_idx.x"), bi("block_dim.x")), bi("thread_idx.x"))),
        ir.Let(name="ra0", type=I32, value=op(BinOp.MUL, v("row"), v("k"))),
        ir.Let(name="cb0", type=I32, value=v("col")),
        ir.Let(name="s0", type=F32, value=v("alpha", F32)),
    ]
    for i in range(1, extra + 1):
        # Offsets that cancel: ra_i = ra_{i-1} + i - i, written as two steps.
        body += [
            ir.Let(name=f"ra{i}", type=I32, value=op(BinOp.SUB, op(
                BinOp.ADD, v(f"ra{i - 1}"), c(i)), c(i))),
            ir.Let(name=f"cb{i}", type=I32, value=op(BinOp.ADD, v(f"cb{i - 1}"), c(0))),
            ir.Let(name=f"s{i}", type=F32, value=op(BinOp.MUL, v(f"s{i - 1}", F32), c(1.0, F32))),
        ]
    last = extra
    loop = ir.For(var="p", start=c(0), stop=v("k"), step=c(1), body=(
        ir.Assign(name="acc", value=op(BinOp.ADD, v("acc", F32), op(
            BinOp.MUL, ir.Load(array="a", index=op(BinOp.ADD, v(f"ra{last}"), v("p")), type=F32),
            ir.Load(array="b", index=op(BinOp.ADD, op(BinOp.MUL, v("p"), v("n")),
                                        v(f"cb{last}")), type=F32)))),))
    store = ir.Store(array="c", index=op(BinOp.ADD, op(BinOp.MUL, v("row"), v("n")), v("col")),
                     value=op(BinOp.MUL, v(f"s{last}", F32), v("acc", F32)))
    guard = op(BinOp.LAND, op(BinOp.LT, v("row"), v("m")), op(BinOp.LT, v("col"), v("n")))
    body.append(ir.If(cond=guard, then=(ir.Let(name="acc", type=F32, value=c(0.0, F32)), loop,
                                        store)))
    params = (ir.ArrayParam(name="a", elem=F32), ir.ArrayParam(name="b", elem=F32),
              ir.ArrayParam(name="c", elem=F32), ir.ScalarParam(name="m", elem=I32),
              ir.ScalarParam(name="n", elem=I32), ir.ScalarParam(name="k", elem=I32),
              ir.ScalarParam(name="alpha", elem=F32))
    return ir.Kernel(name="big_gemm", params=params, body=tuple(body))


def statements(k: ir.Kernel) -> int:
    from sarek.ir_walk import walk

    return sum(1 for _ in walk(k.body))


def main(repeats: int = 30) -> dict[str, object]:
    kernel = big_kernel()
    args = {"m": 4096, "n": 4096, "k": 4096, "alpha": 1.5}

    def once() -> None:
        g = recognize(kernel)
        region(g, (256, 256, 1), (16, 16, 1), args)
        select(g)

    timing = wall(once, repeats)
    host = machine()
    result = {
        "benchmark": "recognize + region + select",
        "statements": statements(kernel),
        "repeats": repeats,
        "median_ms": round(timing.median_s * 1e3, 2),
        "min_ms": round(timing.min_s * 1e3, 2),
        "target_ms": 50,
        "python": host["python"],
        "machine": host["machine"],
    }
    show(table(None, ("kernel", "statements", "median ms", "min ms", "target"),
               [(kernel.name, result["statements"], result["median_ms"], result["min_ms"],
                 "< 50")]))
    write("recognize_speed", result)
    return result


if __name__ == "__main__":
    main()
