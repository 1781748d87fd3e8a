"""Integer to bf16 conversions in the C-like printers round once, as the IR says: an integer
wider than f32's significand goes through f32 rounded to odd, never through plain f32 (which
rounds first, so that a value just above a bf16 halfway point can land on it and round to even
the wrong way)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import sarek
from backends.cstyle import EmitError
from backends.opencl import opencl_available, run
from sarek import ir
from sarek.ir import ElemType

# 2^24 + 2^16 + 1 rounds up to 2^24 + 2^17 in one step; through f32 it becomes the halfway
# value 2^24 + 2^16 first and then rounds to even, down to 2^24.
ABOVE_HALFWAY = [2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**31 - 1, 2**30 + 2**22 + 1]


def to_bf16(src: ElemType) -> ir.Kernel:
    """``y[i] = bf16(x[i])`` for ``x`` of ``src``, one invocation per element."""
    i = ir.BuiltinValue(which=ir.Builtin.THREAD_IDX_X)
    value = ir.Cast(x=ir.Load(array="x", index=i, type=src), type=ElemType.BF16)
    return ir.Kernel(name="to_bf16", params=(
        ir.ArrayParam(name="x", elem=src), ir.ArrayParam(name="y", elem=ElemType.BF16)),
        body=(ir.Store(array="y", index=i, value=value),))


@pytest.mark.skipif(opencl_available() is not None, reason=f"no OpenCL: {opencl_available()}")
def test_i32_to_bf16_rounds_once_on_an_opencl_device() -> None:
    x = np.array(ABOVE_HALFWAY, np.int32)
    y = np.zeros(x.size, ml_dtypes.bfloat16)
    kernel = to_bf16(ElemType.I32)
    want = sarek.simulate(kernel, [x, y], block=(x.size, 1, 1))["y"]
    assert float(want[0]) == 2.0**24 + 2.0**17  # the simulator rounds once
    got = run(kernel, [x, y], (1, 1, 1), (x.size, 1, 1))["y"]
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("target", ["cuda", "opencl"])
def test_i32_to_bf16_is_printed_through_f32_rounded_to_odd(target: str) -> None:
    assert "sk_i32_to_f32_odd(" in sarek.emit(to_bf16(ElemType.I32), target)


# 2^60 + 2^52 + 1 rounds up in one step; through f32 (RNE) it lands on the halfway value.
ABOVE_HALFWAY_64 = [2**60 + 2**52 + 1, -(2**60 + 2**52 + 1), 2**63 - 1, -(2**63), 2**40 + 2**32 + 1]


@pytest.mark.skipif(opencl_available() is not None, reason=f"no OpenCL: {opencl_available()}")
@pytest.mark.parametrize("src", [ElemType.I64, ElemType.U64])
def test_64_bit_integers_to_bf16_round_once_on_an_opencl_device(src: ElemType) -> None:
    values = [v for v in ABOVE_HALFWAY_64 if src.is_signed or v >= 0] + [2**64 - 1] * (
        not src.is_signed)
    x = np.array(values, np.int64 if src.is_signed else np.uint64)
    y = np.zeros(x.size, ml_dtypes.bfloat16)
    kernel = to_bf16(src)
    want = sarek.simulate(kernel, [x, y], block=(x.size, 1, 1))["y"]
    assert float(want[0]) == 2.0**60 + 2.0**53  # the simulator rounds once
    got = run(kernel, [x, y], (1, 1, 1), (x.size, 1, 1))["y"]
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_a_dialect_without_the_round_to_odd_helper_refuses_64_bit_to_bf16() -> None:
    import dataclasses

    from backends.cstyle import render
    from backends.cuda.emit import DIALECT

    bare = dataclasses.replace(DIALECT, prelude="")
    with pytest.raises(EmitError, match="would round twice"):
        render(to_bf16(ElemType.I64), bare)
