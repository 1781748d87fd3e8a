"""``sarek conformance``'s options and its ``main``: the request checked, the matrix run with a
progress bar, the report written and the table printed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from backends import registry
from backends.conformance.cases import Case, Refusals, Size, first_refusal, left_out, matrix
from backends.conformance.checks import Outcome, check
from backends.conformance.report import device_name, failure, report, summary
from backends.target import Target
from sarek.errors import SarekError
from sarek.loader import MAKE_BYTES_PER_ELEMENT, examples_dir, make_elements
from sarek.schedule import Schedule
from sim.launch import Limits, size_text

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3
SIM_PREFIX = "sim-"


def _run_all(cases: list[Case], target: Target, device: bool, console: Console
             ) -> Iterator[Outcome]:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("conformance", total=len(cases))
        for case in cases:
            progress.update(task, description=f"{case.example.stem} {case.variant} "
                                              f"{case.size.label}")
            yield check(case, target, device)
            progress.advance(task)


def _choices() -> list[str]:
    return [*registry.names(), *(SIM_PREFIX + n for n in registry.names())]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``sarek conformance``."""
    parser.add_argument("--target", required=True, metavar="T",
                        help=f"one of {', '.join(_choices())}: a device target runs there and "
                             f"is compared with the simulator; {SIM_PREFIX}T checks the "
                             "simulator alone (no device needed)")
    parser.add_argument("--quick", action="store_true",
                        help="one ragged size (70x45x33) per example and lowering, and per "
                             "added schedule; no large schedules otherwise")
    parser.add_argument("--report", type=Path, metavar="PATH",
                        help="where the JSON report goes (default "
                             "conformance_<target>.json in the working directory)")
    parser.add_argument("--example", action="append", default=[], metavar="NAME",
                        help="only this example (gemm_f32, ...); may be repeated")
    parser.add_argument("--examples", type=Path, metavar="DIR",
                        help="the directory of gemm_*.py examples (default: the bundled ones)")
    parser.add_argument("--schedule", action="append", default=[], metavar="NAME",
                        help="also run every rewrite that takes this schedule (t128k64s2, "
                             "...) at 150x133x70, 256x136x136 and 70x45x33 (with --quick, "
                             "70x45x33 alone); may be repeated")
    parser.add_argument("--size", action="append", default=[], metavar="MxNxK",
                        help="run every case at this size instead of the matrix's (200x136x1700,"
                             " ...); may be repeated")


def _size(text: str) -> Size:
    """The size ``MxNxK`` spells; ``SarekError`` for anything else, and for a size whose
    arrays an example's ``make`` builds (as ``sarek simulate --size`` counts them) the
    simulator's memory limit would not hold."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise SarekError(f"a size is MxNxK with three whole numbers (200x136x1700), not {text!r}")
    m, n, k = map(int, parts)
    need, limit = make_elements(m, n, k) * MAKE_BYTES_PER_ELEMENT, Limits().memory
    if need > limit:
        raise SarekError(f"--size {text} asks for arrays of {size_text(need)}, more than the "
                         f"simulator's memory limit of {size_text(limit)}; name a smaller size")
    return Size(m, n, k, purpose="named by --size")


def main(args: argparse.Namespace) -> int:
    """Runs the conformance matrix ``args`` describes, prints the table, writes the report and
    returns the exit status (the package's docstring)."""
    name: str = args.target
    device = not name.startswith(SIM_PREFIX)
    if name.removeprefix(SIM_PREFIX) not in registry.names():
        print(f"sarek conformance: error: unknown target {name!r}; the targets are "
              f"{', '.join(_choices())}", file=sys.stderr)
        return EXIT_USAGE
    target = registry.target(name.removeprefix(SIM_PREFIX))
    if not device:  # the simulator runs what a device would refuse
        target = replace(target, run_refusal=lambda kernel, block: None)
    try:
        examples = args.examples or examples_dir()
        schedules = tuple(dict.fromkeys(Schedule.parse(s) for s in args.schedule))
        sizes = tuple(dict.fromkeys(_size(s) for s in args.size))
    except SarekError as e:
        print(f"sarek conformance: error: {e.reason}", file=sys.stderr)
        return EXIT_USAGE
    path: Path = args.report or Path(f"conformance_{name}.json")
    if not path.parent.is_dir():
        print(f"sarek conformance: error: the report's directory {path.parent} does not exist "
              "(create it or pass --report PATH)", file=sys.stderr)
        return EXIT_USAGE
    if device:
        reason = target.device_reason()
        if target.run is None:  # a target without a runner never has a device
            reason = reason or "the target has no device runner"
        if reason is not None:
            print(f"sarek conformance: no device for target {name}: {reason}", file=sys.stderr)
            return EXIT_NO_DEVICE
    only = tuple(args.example)
    refusals = Refusals(target)  # the matrix and the left-out rewrites ask the same
    cases = matrix(target, examples, quick=args.quick, only=only, schedules=schedules,
                   sizes=sizes, refusals=refusals)
    if not cases:
        print(f"sarek conformance: error: no example matches {', '.join(args.example)} in "
              f"{examples}", file=sys.stderr)
        return EXIT_USAGE
    outs = {s: left_out(target, examples, s, only=only, refusals=refusals) for s in schedules}
    refused = [f"{s.name} ({why})" for s, out in outs.items()
               if (why := first_refusal(*out)) is not None]
    if refused:
        print(f"sarek conformance: error: no rewrite of the examples takes schedule "
              f"{'; '.join(refused)}", file=sys.stderr)
        return EXIT_USAGE
    skipped = [r for _, out in outs.values() for r in out]
    console = Console()
    if not console.is_terminal:  # a log or a pipe: room for the whole table
        console.width = max(console.width, 120)
    started = time.perf_counter()
    with np.errstate(all="ignore"):
        outcomes = list(_run_all(cases, target, device, Console(stderr=True)))
    result = report(name, device_name(target, device), target.arith, args.quick, outcomes,
                    schedules, skipped)
    path.write_text(json.dumps(result, indent=2) + "\n")
    console.print(summary(outcomes))
    for o in outcomes:
        if not o.ok:
            console.print(failure(o), style="red", markup=False, highlight=False,
                          soft_wrap=True)
    if skipped:
        console.print(f"{len(skipped)} rewrites left out of the added schedules, each for its "
                      "reason (the report's left_out)", markup=False, highlight=False)
    t = result["totals"]
    console.print(f"{result['device']}: {t['passed']} of {t['cases']} cases bit-identical; "
                  f"{t['mismatches']} mismatched arrays, {t['canary_violations']} canary "
                  f"violations, {t['errors']} errors in {time.perf_counter() - started:.1f} s; "
                  f"report {path}", markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK if t["passed"] == t["cases"] else EXIT_FAILED
