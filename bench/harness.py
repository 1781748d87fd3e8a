"""What every benchmark shares: timing, the machine it ran on, its JSON in ``bench/results/``
and its rich table.

Timing on the CPU is wall-clock (``wall``: the median of several calls after any warm-up);
on a device the backend times its own launches (CUDA events, Vulkan GPU timestamps) and
``Timing.of`` takes its figures. Every script writes one JSON file named for the measurement
(``write``) and prints one table or more (``table``, ``show``).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # rich is imported where a table is drawn: timing needs only NumPy, so
    from rich.table import Table  # a peer's interpreter (bench.sim_speed) can time without it

RESULTS = Path(__file__).resolve().parent / "results"
"""Where every benchmark's JSON goes."""
ROOT = RESULTS.parent.parent
"""The checkout: the examples the benchmarks run are under it."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call, one figure per measurement (wall-clock, or a device's events or
    timestamps)."""

    seconds: tuple[float, ...]

    @classmethod
    def of(cls, seconds: Sequence[float]) -> Timing:
        """The timing of measurements taken elsewhere (a device's events or timestamps)."""
        return cls(tuple(seconds))

    @property
    def median_s(self) -> float:
        return statistics.median(self.seconds)

    @property
    def min_s(self) -> float:
        return min(self.seconds)

    @property
    def repeats(self) -> int:
        return len(self.seconds)


def wall(fn: Callable[[], object], repeats: int, warmup: int = 0) -> Timing:
    """``fn`` timed by the wall clock: ``warmup`` calls untimed, then ``repeats`` timed."""
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return Timing.of(seconds)


def machine() -> dict[str, Any]:
    """The host a CPU figure was measured on, as the results record it."""
    return {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "python": platform.python_version(), "numpy": np.__version__}


def write(name: str, result: dict[str, Any], out: Path | None = None) -> Path:
    """``result`` as indented JSON in ``out`` (default ``bench/results/<name>.json``); the path
    written."""
    path = out or RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path


def table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[object]], *,
          left: int = 1) -> Table:
    """A table of ``rows`` under ``columns``, the first ``left`` columns left-aligned and the
    rest (figures) right-aligned; a cell that is None is left empty."""
    from rich.table import Table

    out = Table(title=title)
    for i, column in enumerate(columns):
        out.add_column(column, justify="left" if i < left else "right")
    for row in rows:
        out.add_row(*("" if cell is None else str(cell) for cell in row))
    return out


def show(*items: Table | str) -> None:
    """Prints tables and lines on standard output, at least 120 columns wide in a log."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 120)
    for item in items:
        if isinstance(item, str):
            console.print(item, markup=False, highlight=False, soft_wrap=True)
        else:
            console.print(item)


def relative(path: Path) -> str:
    """``path`` as the checkout names it, where it is inside it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
