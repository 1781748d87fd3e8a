"""NaNs rounded to f16 and bf16 by each device printer, against the simulator, bit for bit.

The IR's conversions fix a NaN's result (``specs/simulator.md``, casts): to f16 it keeps its
sign and its payload's upper ten bits (the lowest set when those are all zero), to bf16 it
becomes the quiet NaN of its sign (``0x7FC0``, ``0xFFC0``). The portable OpenCL helpers are
checked on PoCL by ``tests/test_opencl_fragments.py``; here every device target runs one
conversion kernel over f32 and f64 NaNs of random payloads and both signs (signalling ones
among them) and must give the simulator's bits, no NaN matching another by being a NaN.
"""

from __future__ import annotations

import needs
import numpy as np
import pytest
from ml_dtypes import bfloat16

from backends import registry
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType
from sim import simulate

BLOCK = 256
_NARROW = {ElemType.F16: np.float16, ElemType.BF16: bfloat16}


def _kernel(src: ElemType, dst: ElemType) -> ir.Kernel:
    tid = ir.Binary(op=BinOp.ADD, type=ElemType.I32,
                    a=ir.BuiltinValue(which=Builtin.THREAD_IDX_X),
                    b=ir.Binary(op=BinOp.MUL, type=ElemType.I32,
                                a=ir.BuiltinValue(which=Builtin.BLOCK_IDX_X),
                                b=ir.Const(value=BLOCK, type=ElemType.I32)))
    return ir.Kernel(name="nan_convert", params=(ir.ArrayParam(name="a", elem=src, readonly=True),
                                                 ir.ArrayParam(name="out", elem=dst)),
                     body=(ir.Store(array="out", index=tid, value=ir.Cast(
                         x=ir.Load(array="a", index=tid, type=src), type=dst)),))


def _nans(dt: type[np.floating], count: int = 4096) -> np.ndarray:
    u = np.dtype(f"u{np.dtype(dt).itemsize}")
    mantissa = 23 if dt is np.float32 else 52
    inf_bits = np.array(np.inf, dt).view(u)
    rng = np.random.default_rng(11)
    payload = rng.integers(1, 1 << mantissa, count, dtype=u)
    sign = rng.integers(0, 2, count, dtype=u) << u.type(8 * u.itemsize - 1)
    return (inf_bits + payload | sign).view(dt)


@pytest.mark.device
@pytest.mark.parametrize("target", [
    pytest.param("cuda", marks=needs.cuda), pytest.param("vulkan", marks=needs.vulkan),
    pytest.param("opencl-nv", marks=needs.opencl_nv)])
@pytest.mark.parametrize("dst", [ElemType.F16, ElemType.BF16], ids=str)
@pytest.mark.parametrize("src", [ElemType.F32, ElemType.F64], ids=str)
def test_a_nan_rounds_to_the_simulators_bits(target: str, src: ElemType, dst: ElemType) -> None:
    a = _nans(np.float32 if src is ElemType.F32 else np.float64)
    args = {"a": a, "out": np.zeros(a.size, _NARROW[dst])}
    kernel = _kernel(src, dst)
    grid = (a.size // BLOCK,)
    with np.errstate(all="ignore"):
        want = simulate(kernel, dict(args), grid=grid, block=BLOCK)["out"].view(np.uint16)
    run = registry.target(target).run
    assert run is not None
    got = np.asarray(run(kernel, dict(args), (grid[0], 1, 1), (BLOCK, 1, 1))["out"]).view(np.uint16)
    differ = np.flatnonzero(got != want)
    first = differ[0] if differ.size else 0
    bits = a.view(f"u{a.itemsize}")[first]
    assert differ.size == 0, (f"{differ.size} of {a.size} differ; first: input {bits:#x} gave "
                              f"{got[first]:#06x}, the simulator {want[first]:#06x}")
