"""Timing CUDA text variants of one rewritten kernel side by side: the kernel as ``sarek.emit``
prints it beside the same text edited, each compiled by NVRTC and launched on the same
arguments, in rounds (one median of 3 launches per variant a round), with each output compared
bit for bit with the printed kernel's. Used by the benchmarks that measure what a part of a
printed kernel costs (``nan_rounding_cost_h200``, ``epilogue_cost_h200``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from backends.cuda.launch import Ready, launchables
from backends.cuda.nvrtc import compile_cubin
from backends.cuda.run import Launchable, launch_steps, time_steps
from backends.pipeline import Compiled
from bench.gpu_speed_h200 import host_values
from bench.harness import Timing

Edit = Callable[[str], str] | None
"""A text variant: the printed text edited (None: as printed)."""


def in_place(steps: list[Launchable], text: str, arch: str, name: str) -> list[Launchable]:
    """``steps`` with their last kernel compiled from ``text`` (a variant of its printing,
    its function named as the printed one's) for ``arch``."""
    return [*steps[:-1], dataclasses.replace(steps[-1], cubin=compile_cubin(text, arch, name))]


def time_variants(compiled: Compiled, arch: str, variants: Mapping[str, Edit], rounds: int
                  ) -> dict[str, dict[str, Any]]:
    """Per variant of ``compiled``'s last kernel (its launch sequence's earlier kernels run as
    printed before it): ``median_s`` over ``rounds`` and ``same_bits`` (its output array
    equal to the printed kernel's bit for bit). The first variant is the reference."""
    values = host_values(compiled)
    steps = launchables(compiled, values)
    record = Ready.of(compiled, arch)
    kernels: dict[str, list[Launchable]] = {
        name: steps if edit is None else in_place(steps, edit(record.text), arch,
                                                  f"{record.name}.cu")
        for name, edit in variants.items()}
    c = compiled.gemm.c.array if compiled.gemm is not None else "c"
    outputs = {name: launch_steps(k, values)[c].view(np.uint32) for name, k in kernels.items()}
    reference = next(iter(outputs.values()))
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for _ in range(rounds):
        for name, k in kernels.items():
            times[name].append(Timing.of(time_steps(k, values, 3)).median_s)
    return {name: {"median_s": Timing.of(times[name]).median_s,
                   "same_bits": bool(np.array_equal(outputs[name], reference))}
            for name in kernels}


def variant_rows(measured: Mapping[str, Mapping[str, Any]], size: int, **keys: Any
                 ) -> list[dict[str, Any]]:
    """One result row per variant of ``time_variants``'s ``measured`` (a GEMM of ``size``^3):
    ``keys``, the variant, its median, TFLOP/s at 2 size^3, its speed over the first variant's
    and whether its output had the first's bits."""
    first_s = next(iter(measured.values()))["median_s"]
    return [{**keys, "variant": name, "median_s": m["median_s"],
             "tflops": 2.0 * size**3 / m["median_s"] / 1e12,
             "vs_printed": first_s / m["median_s"],
             "bit_identical_to_printed": m["same_bits"]} for name, m in measured.items()]
