"""The SPIR-V printer's arithmetic through Vulkan against the simulator, bit for bit.

The probes of ``arith_cases`` (every operation on every element type, every conversion, the
math functions), each printed as SPIR-V, assembled and run through Vulkan
(``backends.spirv.run``, the first Vulkan device), each output compared bit for bit with the
simulator (any NaN matches any NaN). Transcendentals and ``fma`` are recorded apart: devices
may differ by a few ulps, and Vulkan does not promise a fused GLSL ``Fma``; on f64 the
transcendentals are refused by the printer (GLSL.std.450 has them for 16- and 32-bit floats
only), so the f64 math kernel holds the exact functions.

Where the device cannot be asked to preserve denormals of a float width (its
``shaderDenormPreserveFloat<width>`` is false, so the module leaves the mode to the device's
default: ``specs/backends.md``), an output may also be what the simulator gives with that
width's subnormal operands and results flushed to zeros of their sign; such outputs are counted
apart (``flushed``) and every other output must be bit-identical. Records
``vulkan_arith_h200``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from arith_cases import TRANSCENDENTAL, N, Probe, differs, probes
from records import record

from sarek.errors import SarekError
from sarek.ir import ElemType, MathFn
from sim import simulate

LOOSE = {f.value for f in TRANSCENDENTAL} | {"fma"}
FLOAT_MODES = ("shaderDenorm", "shaderSignedZero", "shaderRounding")


def math_functions(t: ElemType) -> tuple[MathFn, ...]:
    """Every math function the printer prints on ``t`` (no transcendentals on f64)."""
    return tuple(fn for fn in MathFn if t is not ElemType.F64 or fn not in TRANSCENDENTAL)


def flushed(x: np.ndarray, widths: set[int]) -> np.ndarray:
    """``x`` with its subnormals replaced by zeros of their sign, if it holds floats of one of
    ``widths`` (bits)."""
    if x.dtype.kind != "f" or 8 * x.dtype.itemsize not in widths:
        return x
    tiny = np.finfo(x.dtype).smallest_normal
    out = x.copy()
    small = (out != 0) & (np.abs(out) < tiny)
    out[small] = np.copysign(0, out[small])
    return out


def counts(probe: Probe, got: dict[str, np.ndarray], want: dict[str, np.ndarray],
           flush_want: dict[str, np.ndarray] | None) -> list[dict[str, Any]]:
    """Per output of ``probe``: the outputs that differ from the simulator's and, with
    ``flush_want``, how many of those are the flushed simulation's."""
    rows = []
    for array, operation, slot in probe.outputs:
        part = slice(None) if slot is None else slice(slot * N, (slot + 1) * N)
        bad = differs(got[array][part], want[array][part])
        row: dict[str, Any] = {"kernel": probe.kernel.name, "what": operation,
                               "mismatches": int(bad.sum())}
        if flush_want is not None:
            row["flushed"] = int((bad & ~differs(got[array][part],
                                                 flush_want[array][part])).sum())
        rows.append(row)
    return rows


def unexplained(row: dict[str, Any]) -> int:
    return int(row["mismatches"] - row.get("flushed", 0))


def test_flushing_turns_subnormals_of_the_width_into_signed_zeros() -> None:
    x = np.array([1e-40, -1e-40, 1e-30, 0.0, -0.0, np.nan], np.float32)
    got = flushed(x, {32})
    assert got.view(np.uint32).tolist() == [0, 0x80000000, *x[2:].view(np.uint32).tolist()]
    assert flushed(x, {64}) is x and flushed(np.arange(3), {32}).tolist() == [0, 1, 2]


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.spirv.device import device, device_name
    from backends.spirv.run import run

    features = device().features
    widths = {w for w in (16, 32, 64) if features.get(f"shaderDenormPreserveFloat{w}") is False}
    rng = np.random.default_rng(7)
    rows: list[dict[str, Any]] = []
    with np.errstate(all="ignore"):
        for probe in probes(rng, math_functions):
            want = simulate(probe.kernel, probe.args, grid=1, block=N)
            try:
                got = run(probe.kernel, probe.args, (1,), (N,))
            except SarekError as e:
                rows.append({"kernel": probe.kernel.name, "what": "run", "error": e.reason})
                continue
            flush_want = None
            if widths:
                inputs = {k: flushed(v, widths) for k, v in probe.args.items()}
                flush_want = {k: flushed(v, widths) for k, v in
                              simulate(probe.kernel, inputs, grid=1, block=N).items()}
            rows += counts(probe, got, want, flush_want)
    exact = [r for r in rows if r["what"] not in LOOSE]
    record("vulkan_arith_h200", {
        "device": device_name(), "inputs_per_case": N,
        "float_modes_left_to_the_device": sorted(
            name for name, ok in features.items() if name.startswith(FLOAT_MODES) and not ok),
        "all_exact_operations_bit_exact": all(r.get("mismatches") == 0 for r in exact),
        "all_exact_operations_bit_exact_but_flushed": all(
            "error" not in r and unexplained(r) == 0 for r in exact),
        "not_promised_bit_exact": sorted(LOOSE), "rows": rows})
    return rows


@pytest.mark.device
@needs.vulkan
def test_every_exact_operation_and_conversion_is_bit_exact_but_for_flushed_denormals(
        measured: list[dict[str, Any]]) -> None:
    failed = [(r["kernel"], r["what"], r.get("error") or unexplained(r)) for r in measured
              if r["what"] not in LOOSE and ("error" in r or unexplained(r))]
    assert not failed, f"outputs of {N} that differ from the simulator: {failed}"
