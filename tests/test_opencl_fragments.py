"""Rewritten kernels as portable OpenCL C on a real OpenCL implementation (PoCL on the CPU):
every example, lowering, subgroup and fragment at a ragged size runs bit-identically to the
simulator running the same lowered kernel, with canaries (``sarek conformance --target opencl
--quick``), and so does every shape of a lane's grid of accumulator slots; the f16
conversions the printer uses are exact on every f16 and rounding boundary; the f16 case that
once came back as garbage and NaN is bit-identical."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import EXAMPLES
from test_opencl_lower import SHAPES, shapes_args, shapes_kernel

from backends import conformance
from backends.opencl import opencl_available, run
from backends.opencl.lower import lower
from backends.opencl.run import (
    OPTIMIZE_VARIABLE,
    PLATFORM_VARIABLE,
    OpenCLError,
    build_options,
    chosen_platform,
    find_device,
)
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType
from sarek.loader import load_module
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sim import simulate

pytestmark = pytest.mark.skipif(opencl_available("") is not None,
                                reason=f"no OpenCL device: {opencl_available('')}")


def conform(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    conformance.add_arguments(parser)
    return conformance.main(parser.parse_args(argv))


@pytest.mark.slow
def test_every_rewritten_configuration_runs_bit_identically_with_canaries(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PLATFORM_VARIABLE, raising=False)
    path = tmp_path / "report.json"
    assert conform("--target", "opencl", "--quick", "--report", str(path)) == 0
    data = json.loads(path.read_text())
    assert data["totals"] == {"cases": 106, "passed": 106, "mismatches": 0,
                              "canary_violations": 0, "errors": 0}
    assert {c["compared"] for c in data["cases"]} == {"device vs simulator"}
    configs = {(c["lowering"], c["subgroup"], c["frag"]) for c in data["cases"] if c["lowering"]}
    assert len(configs) == 4 * len(Lowering)


def test_the_f16_rewrite_that_gave_nan_is_bit_identical_with_the_optimizer_on(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Printed with vstore_half_rte into a ushort reinterpreted as half, this kernel came back
    # from PoCL's optimized build with 4064 of its 4096 outputs wrong (stale stack bits, NaN at
    # other sizes): LLVM dropped the store through the half pointer (strict aliasing). The
    # unoptimized build hid it, so the optimizer is on here.
    monkeypatch.setenv(OPTIMIZE_VARIABLE, "1")
    launch = load_module(EXAMPLES / "gemm_f16.py").make(64, 64, 16)
    rw = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS).launch
    want = simulate(lower(rw.kernel), dict(rw.args), rw.grid, rw.block)
    got = run(rw.kernel, dict(rw.args), rw.grid, rw.block)
    assert not np.isnan(got["c"].astype(np.float32)).any()
    assert np.array_equal(got["c"].view(np.uint16), want["c"].view(np.uint16))


@pytest.mark.parametrize("subgroup", (32, 64))
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda v: str(v))
def test_every_lane_grid_runs_bit_identically(m: int, n: int, k: int, subgroup: int) -> None:
    kernel = shapes_kernel(m, n, k, subgroup)
    want = simulate(lower(kernel), shapes_args(m, n, k), (1, 1, 1), (subgroup, 1, 1))
    got = run(kernel, shapes_args(m, n, k), (1,), (subgroup,))
    assert all(np.array_equal(got[x].view(np.uint8), want[x].view(np.uint8)) for x in want)


def _conversion(src: ElemType, dst: ElemType) -> ir.Kernel:
    tid = ir.Binary(op=BinOp.ADD, type=ElemType.I32,
                    a=ir.BuiltinValue(which=Builtin.THREAD_IDX_X),
                    b=ir.Binary(op=BinOp.MUL, type=ElemType.I32,
                                a=ir.BuiltinValue(which=Builtin.BLOCK_IDX_X),
                                b=ir.Const(value=256, type=ElemType.I32)))
    return ir.Kernel(name="convert", params=(ir.ArrayParam(name="a", elem=src, readonly=True),
                                             ir.ArrayParam(name="out", elem=dst)),
                     body=(ir.Store(array="out", index=tid, value=ir.Cast(
                         x=ir.Load(array="a", index=tid, type=src), type=dst)),))


def _differing(src: ElemType, dst: ElemType, values: np.ndarray) -> int:
    """How many of ``values`` convert to other bits on the device than in the simulator (NaN
    payloads included)."""
    n = -(-values.size // 256) * 256
    a = np.resize(values, n)
    out = np.zeros(n, {ElemType.F16: np.float16, ElemType.BF16: ml_dtypes.bfloat16,
                       ElemType.F32: np.float32, ElemType.F64: np.float64}[dst])
    kernel = _conversion(src, dst)
    with np.errstate(all="ignore"):
        want = simulate(kernel, {"a": a, "out": out}, grid=n // 256, block=256)["out"]
    got = run(kernel, {"a": a, "out": out}, (n // 256,), (256,))["out"]
    return int(np.count_nonzero(got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")))


EVERY_F16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16)


@pytest.mark.parametrize("dst", [ElemType.F32, ElemType.F64], ids=str)
def test_every_f16_widens_exactly(dst: ElemType) -> None:
    assert _differing(ElemType.F16, dst, EVERY_F16) == 0


EVERY_BF16 = np.arange(1 << 16, dtype=np.uint16).view(ml_dtypes.bfloat16)


def _boundaries(dt: type[np.floating], every: np.ndarray = EVERY_F16) -> np.ndarray:
    """Every value of the narrow type (``every``: f16's or bf16's), the midpoints between
    neighbours and one unit either side of them (where rounding to nearest even decides), NaNs
    with payloads, and random bit patterns."""
    finite = np.unique(every[np.isfinite(every)].astype(np.float64))
    mid = ((finite[1:] + finite[:-1]) / 2).astype(dt)  # exact in f32 and f64
    big = dt(np.inf)
    u = f"u{np.dtype(dt).itemsize}"
    mantissa = 23 if dt is np.float32 else 52
    rng = np.random.default_rng(7)
    rand = rng.integers(0, np.iinfo(u).max, 100_000, dtype=u, endpoint=True).view(dt)
    inf_bits = np.array(big, dt).view(u)
    # NaN payloads: random ones, and ones whose only bits are those the narrow type drops
    payloads = np.concatenate([
        inf_bits + rng.integers(1, 1 << mantissa, 2000, dtype=u),
        inf_bits + np.arange(1, 200, dtype=u)]).view(dt)
    return np.concatenate([finite.astype(dt), mid, np.nextafter(mid, big),
                           np.nextafter(mid, -big), -mid, payloads, -payloads, rand,
                           np.array([65520, 65504, 2.0**-24, 2.0**-25, 2.0**-26, 1e-30, big,
                                     -big], dt)])


@pytest.mark.parametrize("src", [ElemType.F32, ElemType.F64], ids=str)
def test_rounding_to_f16_is_exact_at_every_boundary(src: ElemType) -> None:
    dt = np.float32 if src is ElemType.F32 else np.float64
    assert _differing(src, ElemType.F16, _boundaries(dt)) == 0


def test_every_bf16_widens_exactly() -> None:
    assert _differing(ElemType.BF16, ElemType.F32, EVERY_BF16) == 0


@pytest.mark.parametrize("src", [ElemType.F32, ElemType.F64], ids=str)
def test_rounding_to_bf16_is_exact_at_every_boundary(src: ElemType) -> None:
    """Every NaN becomes the quiet NaN of its sign (0x7FC0, 0xFFC0), whatever its payload."""
    dt = np.float32 if src is ElemType.F32 else np.float64
    assert _differing(src, ElemType.BF16, _boundaries(dt, EVERY_BF16)) == 0


def test_the_platform_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PLATFORM_VARIABLE, "no such platform")
    assert chosen_platform() == "no such platform" and chosen_platform("Portable") == "Portable"
    reason = opencl_available()
    assert reason is not None and "no such platform" in reason and "platforms:" in reason
    with pytest.raises(OpenCLError, match="no such platform"):
        find_device(chosen_platform())


def test_the_conformance_command_says_when_the_chosen_platform_is_absent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
        ) -> None:
    monkeypatch.setenv(PLATFORM_VARIABLE, "no such platform")
    assert conform("--target", "opencl", "--report", str(tmp_path / "r.json")) == 3
    assert "no such platform" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_cpu_devices_build_without_the_optimizer_unless_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    device = find_device("")
    monkeypatch.delenv(OPTIMIZE_VARIABLE, raising=False)
    import pyopencl as cl

    cpu = bool(device.type & cl.device_type.CPU)
    assert ("-cl-opt-disable" in build_options(device)) == cpu
    monkeypatch.setenv(OPTIMIZE_VARIABLE, "1")
    assert "-cl-opt-disable" not in build_options(device)
    assert "-cl-fp32-correctly-rounded-divide-sqrt" in build_options(device)


def _f32_cases() -> np.ndarray:
    """f32 bit patterns that exercise every path of rounding to f16, each sign: every value
    whose f16 is subnormal or zero (exponents -25 to -15, every significand), every NaN
    payload, and at every other exponent every combination of the 13 bits f16 drops under
    eight patterns of the 10 it keeps (where ties and carries into the exponent happen)."""
    rng = np.random.default_rng(11)
    every = np.arange(1 << 23, dtype=np.uint32)
    kept = np.concatenate([[0, 1, 0x1FE, 0x1FF, 0x200, 0x3FF],
                           rng.integers(2, 0x3FE, 2)]).astype(np.uint32) << 13
    low = np.arange(1 << 13, dtype=np.uint32)
    parts = [(np.uint32(e + 127) << 23) | every for e in range(-25, -14)]
    parts.append(np.uint32(0x7F800000) | every)
    parts += [(np.uint32(e) << 23) | (kept[:, None] | low[None]).ravel()
              for e in list(range(0, 127 - 25)) + list(range(127 - 14, 255))]
    positive = np.concatenate(parts)
    return np.concatenate([positive, positive | np.uint32(0x80000000)])


@pytest.mark.slow
@pytest.mark.parametrize("optimize", [False, True], ids=["as-built", "optimizer"])
def test_f32_rounds_to_f16_and_back_as_numpy_does(optimize: bool,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """f32 to f16 and, on its result, f16 to f32, printed and run as every kernel is, against
    NumPy's rounding and widening (which the simulator uses) on ``_f32_cases`` (about 200
    million values, too many to simulate), in the runner's build and with the optimizer (both
    conversions are selects, not branches, and the rounding is the FPU's: specs/backends.md)."""
    if optimize:
        monkeypatch.setenv(OPTIMIZE_VARIABLE, "1")
    else:
        monkeypatch.delenv(OPTIMIZE_VARIABLE, raising=False)
    x = _f32_cases().view(np.float32)
    x = np.resize(x, -(-x.size // 256) * 256)
    blocks = (x.size // 256,)
    narrow = run(_conversion(ElemType.F32, ElemType.F16),
                 {"a": x, "out": np.zeros(x.size, np.float16)}, blocks, (256,))["out"]
    wide = run(_conversion(ElemType.F16, ElemType.F32),
               {"a": narrow, "out": np.zeros(x.size, np.float32)}, blocks, (256,))["out"]
    with np.errstate(all="ignore"):
        want = x.astype(np.float16)
    assert np.count_nonzero(narrow.view(np.uint16) != want.view(np.uint16)) == 0
    assert np.count_nonzero(wide.view(np.uint32) != want.astype(np.float32).view(np.uint32)) == 0
