"""``sarek demo``: a few bundled GEMM examples taken through every stage, in well under a minute.

Each example is simulated and compared bit for bit with its NumPy reference, recognized,
rewritten onto matrix fragments, lowered and printed for every target and simulated as
printed under the target's arithmetic model, then handed to the compilers, validators and
devices installed here. A missing one is named once, with what installs it, and its checks are
skipped. Last come the device checks recorded in ``bench/results``, each difference with its
documented reason. The full matrix (every example, size, lowering, subgroup and fragment) is
``sarek conformance``'s.

Each example module (``examples/gemm_*.py``) defines one kernel, ``make(m, n, k, seed)``
returning a ``Launch`` and ``reference(launch)`` returning the expected arrays.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from sarek.demo_records import recorded_results, records
from sarek.demo_rows import (
    Refused,
    Row,
    compile_for,
    guarded,
    load,
    numpy_row,
    reason_of,
    rewrite_row,
    target_row,
    wrap,
)
from sarek.demo_tools import TOOLS, device_label, missing_tools, skipped_lines
from sarek.errors import SarekError

if TYPE_CHECKING:
    from backends.pipeline import Compiled

FEATURED = ("gemm_epilogue", "gemm_f16", "gemm_i8", "gemm_i32")
"""The examples the demo takes through every stage: f32 operands (Bf16x3) with a fused
epilogue, f16 operands, int8 operands with an i32 accumulator and a bias, int32 operands (byte
planes)."""


SIZE = (70, 45, 33)
"""The demo's m x n x k: no extent a multiple of a tile."""


PRINTERS = ("cuda", "opencl-nv", "opencl", "spirv", "metal")
"""The targets every example is printed for (``vulkan`` prints what ``spirv`` prints)."""


FULL_MATRIX = ("The demo shows a few examples at one size. Every example at every size under "
               "every lowering,\nsubgroup and fragment, in the simulator (--target opencl, cuda "
               "or vulkan: on the device):\n    sarek conformance --target sim-opencl")
"""The demo's last words: where the long matrices are."""


def render(head: tuple[str, ...], rows: Sequence[Row], indent: str = "") -> str:
    """A plain text table; a row's ``why`` lines are printed under it."""
    widths = [max(len(x) for x in col)
              for col in zip(head, *(r.cells for r in rows), strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    lines = [line(head), line(tuple("-" * w for w in widths))]
    for r in rows:
        lines += [line(r.cells), *(wrap(why, f"{indent}    why: ", f"{indent}         ")
                                   for why in r.why)]
    return "\n".join(lines)


class Steps:
    """The demo's steps, shown on the terminal as a spinner, a bar and the step running, so
    that the screen is never silent while a step runs (rich, on stderr: the tables on stdout
    stay plain text; nothing is drawn when stderr is not a terminal)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True)
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                             transient=True, redirect_stdout=sys.stdout.isatty(),
                             redirect_stderr=False, disable=not console.is_terminal)
        self._task = self._bar.add_task("starting", total=total)
        self.done = -1

    def __call__(self, what: str) -> None:
        """Marks the step before done and shows ``what`` as the one running."""
        self.done += 1
        self._bar.update(self._task, completed=self.done, description=what)

    def add(self, count: int) -> None:
        """Counts ``count`` more steps to run."""
        total = self._bar.tasks[0].total or 0
        self._bar.update(self._task, total=total + count)

    @contextmanager
    def shown(self) -> Iterator[Steps]:
        with self._bar:
            yield self


def run_demo(examples: Path, names: Sequence[str] = FEATURED,
             size: tuple[int, int, int] = SIZE, out: Callable[[str], None] = print) -> int:
    """Takes the examples ``names`` of the folder ``examples`` through every stage at ``size``
    (m, n, k), printing what each stage found; returns 0 when every check passed or differs
    for a documented reason, else 1."""
    paths = [examples / f"{n}.py" for n in names]
    absent = [p.name for p in paths if not p.is_file()]
    if absent:
        raise SarekError(f"{examples} has no {', '.join(absent)}: name the examples to show "
                         "with --example NAME")
    failures: list[str] = []

    def section(text: str, rows: Sequence[Row] = (), head: tuple[str, ...] = ()) -> None:
        failures.extend(r.failure for r in rows if r.failure)
        out(text + (f"\n\n{render(head, rows, '   ')}" if rows else ""))

    m, n, k = size
    steps = Steps(2 + len(paths) * (2 + 2 * len(PRINTERS)))  # tools are added when found
    with steps.shown():
        steps("loading the examples")
        cases = [load(p, size) for p in paths]
        kernels = "kernel" if len(cases) == 1 else "kernels"
        out(f"sarek demo: {len(cases)} bundled GEMM {kernels} at m x n x k = {m}x{n}x{k}, taken "
            "through every stage.\n")
        rows = []
        for ex in cases:
            steps(f"{ex.name}: simulating, comparing with NumPy")
            rows.append(guarded((ex.name,), 5, partial(numpy_row, ex)))
        section("1. Simulated: each kernel as written, every invocation of its launch run by the "
                "simulator,\n   compared bit for bit with an independent NumPy computation:",
                rows, ("example", "kernel", "invocations", "sim time", "vs NumPy"))

        rows = []
        for ex in cases:
            steps(f"{ex.name}: recognizing and rewriting")
            rows.append(guarded((ex.name,), 5, partial(rewrite_row, ex)))
        section("\n2. Recognized and rewritten: the GEMM nest found in each kernel, rewritten "
                "onto matrix\n   fragments (64x64 tiles, four waves, subgroup 32, fragment 16) "
                "under the lowering selected\n   for its operands, simulated and compared with "
                "the original:",
                rows, ("example", "A x B -> C", "epilogue", "lowering", "rewritten vs original"))

        compiled: dict[tuple[str, str], Compiled | Refused | None] = {}
        rows = []
        for ex in cases:
            for name in PRINTERS:
                steps(f"{ex.name}: lowering and printing for {name}")
                try:
                    result = compile_for(ex, name)
                except Exception as e:
                    compiled[ex.name, name] = None
                    rows.append(Row((ex.name, name, "ERROR", "-", "-", "-"), (reason_of(e),),
                                    f"{ex.name} printed for {name}: {reason_of(e)}"))
                    continue
                compiled[ex.name, name] = result
                steps(f"{ex.name}: simulating what {name} prints")
                rows.append(guarded((ex.name, name), 6, partial(target_row, ex, name, result)))
        section("\n3. Printed for each target: the rewrite lowered lane by lane for the target "
                "(its own subgroup,\n   fragment and staging), printed, and run by the simulator "
                "as printed under the target's\n   arithmetic model, against the neutral rewrite "
                "under the same model (sarek emit FILE.py\n   --target T prints any of them):",
                rows, ("example", "target", "printed", "matrix operations", "model",
                       "lowered vs neutral"))

        steps("looking for compilers, validators and devices")
        missing = missing_tools()
        present = [t for t in TOOLS if t.name not in missing]
        steps.add(len(present) * len(cases))
        out("\n4. Checked by the compilers, validators and devices here:")
        for tool in present:
            rows = []
            for ex in cases:
                steps(f"{ex.name}: {tool.name}")
                rows.append(guarded((ex.name,), 3, partial(
                    tool.check, ex, compiled.get((ex.name, tool.target)))))
            device = device_label(tool.target) if tool.device else ""
            title = f"{tool.name}{device}: {tool.about}:"
            section("\n" + wrap(title, "   ", "   "), rows,
                    ("example", "original", "rewritten"))
        if missing:
            out("\n   Not here, so not checked:\n" + "\n".join(
                wrap(line, "   - ", "     ") for line in skipped_lines(missing)))
        results = recorded_results(examples)

    if results is None:
        out("\n5. Conformance recorded on real devices: not part of an installed package "
            "(bench/results in a\n   source checkout).")
    else:
        section(f"\n5. Conformance recorded on real devices ({results.parent.name}/"
                f"{results.name}, not rerun here):",
                [Row((r.what, r.device, str(r.cases), r.result), r.why, r.failure)
                 for r in records(results)], ("check", "device", "cases", "result"))
    if failures:
        out(f"\nFAILED, {len(failures)} checks:\n" + "\n".join(f"  {f}" for f in failures))
    else:
        out("\nEvery check passed: each difference shown is a documented one.")
    out(FULL_MATRIX)
    return 1 if failures else 0


def main(args: argparse.Namespace) -> int:
    """``sarek demo`` (``--size``, ``--examples``, ``--example``)."""
    from sarek.loader import examples_dir

    examples = Path(args.examples) if args.examples else examples_dir()
    return run_demo(examples, args.example or FEATURED, args.size)

