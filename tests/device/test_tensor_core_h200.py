"""The H200's tensor cores against the simulator's arithmetic models, bit for bit.

The probe (``mma_probe``) is a sarek kernel; ``sarek.emit(kernel, "cuda")`` lowers it to
lane-explicit element moves and two ``mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}`` per
warp (the lane maps are ``sarek.atoms.MMA``'s), so every output is one instruction's output.
The device runs the printed CUDA (``backends.cuda.run.run``) on 400 tiles of each of five input
distributions; the simulator runs the same lowered kernel lane by lane under each model of
``sim.fragments``: ``h200`` (the fused dot-add with 25 alignment bits and truncation,
``sim/tensor_core.py``) must give the device's bits on every output; ``sequential`` and
``exact`` are counted beside it. Records ``tensor_core_h200``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from mma_probe import MODELS, OPERANDS, WARP, arguments, distributions, mismatches, probe_kernel
from records import record

import sarek

TILES = 400


def measure(tiles: int, device: bool) -> list[dict[str, Any]]:
    """Per operand type and distribution, the outputs and their mismatches under each model
    against the device (against the simulator's ``h200`` model where ``device`` is False)."""
    from backends.cuda.run import device_arch, run

    arch = device_arch() if device else None
    rng = np.random.default_rng(2026)
    rows: list[dict[str, Any]] = []
    for name, (elem, dt) in OPERANDS.items():
        kernel = probe_kernel(name, elem)
        for label, draw in distributions().items():
            args = arguments(*draw(rng, dt, tiles), dt)
            simulated = {m: sarek.simulate(kernel, args, grid=tiles, block=WARP,
                                           target="cuda", arith=m)["d"] for m in MODELS}
            reference = run(kernel, args, (tiles, 1, 1), (WARP, 1, 1), arch)["d"] if device \
                else simulated["h200"]
            rows.append({"operands": name, "distribution": label,
                         "outputs": int(reference.size),
                         "mismatches": {m: mismatches(reference, simulated[m]) for m in MODELS}})
    return rows


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.cuda.run import device_arch, device_name

    rows = measure(TILES, device=True)
    record("tensor_core_h200", {
        "device": device_name(), "arch": device_arch(), "instruction": "mma.sync m16n8k16 f32",
        "h200_model_bit_exact": all(r["mismatches"]["h200"] == 0 for r in rows),
        "rows": rows})
    return rows


def test_the_probe_is_two_mma_sync_per_warp() -> None:
    for name, (elem, _) in OPERANDS.items():
        assert sarek.emit(probe_kernel(name, elem), "cuda").count("mma.sync") == 2, name


def test_the_count_tells_the_models_apart_with_the_simulator_in_the_devices_place() -> None:
    rows = measure(4, device=False)
    assert any(r["mismatches"]["sequential"] for r in rows)
    assert any(r["mismatches"]["exact"] for r in rows)


@pytest.mark.device
@needs.cuda
def test_every_mma_sync_output_is_the_h200_models(measured: list[dict[str, Any]]) -> None:
    differ = [(r["operands"], r["distribution"], r["mismatches"]["h200"])
              for r in measured if r["mismatches"]["h200"]]
    assert not differ, f"outputs that differ from the h200 model: {differ}"
