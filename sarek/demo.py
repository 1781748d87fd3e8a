"""The demo: simulate every bundled GEMM example and check it against its NumPy reference.

Each example module (``examples/gemm_*.py``) defines one kernel, ``make(m, n, k, seed)``
returning a ``Launch`` and ``reference(launch)`` returning the expected arrays.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sarek.loader import load_module


@dataclass(frozen=True)
class Row:
    """One checked example."""

    example: str
    kernel: str
    size: tuple[int, int, int]
    invocations: int
    seconds: float
    verdict: str  # "bit-identical", or how the results differ
    ok: bool


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """Bitwise comparison (NaNs with equal bits compare equal); on a difference, the count and
    the largest difference."""
    g, w = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if g.shape != w.shape or g.dtype != w.dtype:
        return False, f"shape/type {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
    if g.size == 0:
        return True, "bit-identical"
    same = g.view(np.uint8).reshape(g.size, -1) == w.view(np.uint8).reshape(w.size, -1)
    bad = ~same.all(axis=1)
    if not bad.any():
        return True, "bit-identical"
    diff = np.abs(g[bad].astype(np.float64) - w[bad].astype(np.float64)).max()
    return False, f"{int(bad.sum())} of {g.size} differ, max |diff| {diff:.3g}"


def check_example(path: Path, size: tuple[int, int, int], seed: int = 0) -> Row:
    module = load_module(path)
    launch = module.make(*size, seed=seed)
    start = time.perf_counter()
    out = launch.simulate()
    seconds = time.perf_counter() - start
    ok, verdict = True, "bit-identical"
    for name, want in module.reference(launch).items():
        same, how = compare(out[name], want)
        if not same:
            ok, verdict = False, f"{name}: {how}"
    invocations = int(np.prod(launch.grid) * np.prod(launch.block))
    return Row(path.stem, launch.kernel.name, size, invocations, seconds, verdict, ok)


def run(examples: Path, size: tuple[int, int, int] = (70, 45, 33)) -> list[Row]:
    """Checks every ``gemm_*.py`` example in ``examples`` at ``size`` (m, n, k)."""
    return [check_example(p, size) for p in sorted(examples.glob("gemm_*.py"))]


def table(rows: list[Row]) -> str:
    head = ("example", "kernel", "m x n x k", "invocations", "sim time", "vs NumPy reference")
    body = [(r.example, r.kernel, "x".join(map(str, r.size)), str(r.invocations),
             f"{r.seconds * 1e3:.1f} ms", r.verdict) for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, body)])
