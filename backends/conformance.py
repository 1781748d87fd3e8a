"""``sarek conformance --target T``: every bundled GEMM example, original and rewritten onto
matrix fragments, run for target ``T`` and compared bit for bit.

For a registered target (``cuda``) each case runs on the device (``Target.run``) and is compared
with the simulator running the same kernel lowered for that target under its arithmetic model.
For ``sim-T`` the simulator alone is checked: each rewrite lowered for ``T`` against the neutral
rewrite (both under ``T``'s arithmetic model), each original lowered for ``T`` against the
example's NumPy ``reference()``.

Every case also carries canaries: the output array gets guard elements past its end, and the
outputs the launch does not cover are filled with the same pattern; on every side that ran the
kernel, each element the kernel must not write has to come back unchanged, bit for bit.

``--schedule NAME`` adds that schedule to the matrix wherever an example's rewrite takes it
(``matrix``); a target's ``Staging.offered`` schedules are in it without asking.

Exit status: 0 when every case matches and no canary changed, 1 otherwise, 2 for a bad request
(an unknown target, a report directory that does not exist, a schedule name that does not
parse or that no example's rewrite takes), 3 when the target has no device here (the line
printed says why).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from backends import registry
from backends.target import Target
from sarek import ir, simulate
from sarek.demo import compare
from sarek.errors import SarekError
from sarek.launch import Dim3, Launch
from sarek.loader import examples_dir, load_module
from sarek.matrix_mapping import covered, region
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import SUPPORTED_FRAGMENT, SUPPORTED_SUBGROUP, Lowering, lowerings_taking
from sarek.schedule import Schedule
from sarek.staging import Staging

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_DEVICE = 0, 1, 2, 3
SIM_PREFIX = "sim-"
GUARD = 64  # canary elements appended to every array the kernel writes
CANARY = np.array([0x5A, 0xA5, 0xC3, 0x3C], np.uint8)  # finite in f16, bf16 and f32


@dataclass(frozen=True)
class Size:
    """One problem size: ``m x n x k``, and a launch grid replacing the example's own where the
    case is a launch that covers fewer outputs than the problem has."""

    m: int
    n: int
    k: int
    grid: Dim3 | None = None
    purpose: str = ""  # what the size exercises, recorded in the report

    @property
    def label(self) -> str:
        mnk = f"{self.m}x{self.n}x{self.k}"
        return mnk if self.grid is None else f"{mnk} grid {'x'.join(map(str, self.grid))}"


RAGGED = Size(70, 45, 33, purpose="ragged: no extent a multiple of a tile")
LARGE_TILES = Size(150, 133, 70,
                   purpose="more than one large tile each way, a partial last step")
ALIGNED_TILES = Size(256, 136, 136, purpose="large tiles of 16-byte aligned rows (staged by "
                     "asynchronous copies where a target has them), a partial last tile and step")
SIZES = (
    RAGGED,
    Size(128, 96, 64, purpose="whole 64x64 block tiles and reduction steps"),
    Size(33, 20, 1, purpose="K = 1: one product per output"),
    Size(17, 5, 0, purpose="K = 0: the epilogue of the initial value"),
    Size(1, 1, 1, purpose="one output"),
    Size(0, 20, 10, purpose="no rows: an empty launch"),
)
SCHEDULE_SIZES = (LARGE_TILES, ALIGNED_TILES, RAGGED)
"""Where the schedules a case names run: sizes the simulator affords, with more than one large
tile each way."""
EXTRA_SIZES: dict[str, tuple[Size, ...]] = {
    # 11 blocks of 128 where 19 are needed: 1408 of 2310 outputs, the last row in part
    "gemm_f32_1d": (Size(70, 33, 17, grid=(11, 1, 1), purpose="1-D launch covering a prefix"),),
    # two layers of the three batches
    "gemm_batched": (Size(70, 33, 17, grid=(3, 5, 2), purpose="batched launch of fewer layers"),),
}


@dataclass(frozen=True)
class Case:
    """One example at one size: the original kernel (``lowering`` None) or its rewrite."""

    example: Path
    size: Size
    lowering: Lowering | None = None
    subgroup: int | None = None
    frag: int | None = None
    schedule: Schedule | None = None  # None: the one the target's policy picks for the region

    @property
    def variant(self) -> str:
        if self.lowering is None:
            return "original"
        sched = f" {self.schedule.name}" if self.schedule is not None else ""
        return f"{self.lowering.value} subgroup {self.subgroup} frag {self.frag}{sched}"


@dataclass(frozen=True)
class Violation:
    """Elements of ``array`` that ``side`` changed although the launch must not write them."""

    side: str
    array: str
    count: int
    first: tuple[int, ...]  # the first few element indices


@dataclass(frozen=True)
class Outcome:
    """What one case gave: a verdict per array (``"bit-identical"`` or how they differ), the
    canary violations of each side that ran the kernel, or the error that stopped it."""

    case: Case
    kernel: str
    compared: str
    arrays: Mapping[str, str]
    violations: tuple[Violation, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def mismatches(self) -> int:
        return sum(v != "bit-identical" for v in self.arrays.values())

    @property
    def canary_violations(self) -> int:
        return sum(v.count for v in self.violations)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.mismatches and not self.violations


def configurations(target: Target, lowering: Lowering) -> list[tuple[int, int]]:
    """The (subgroup, fragment) pairs ``target`` prints a rewrite under ``lowering`` at."""
    return [(sg, frag) for sg in SUPPORTED_SUBGROUP for frag in SUPPORTED_FRAGMENT
            if target.refuses(lowering, sg, frag) is None]


Rewrite = tuple[Lowering, int, int]
"""A rewrite's lowering, subgroup and fragment."""


def _examples(target: Target, examples: Path, only: tuple[str, ...]
              ) -> Iterator[tuple[Path, Launch, list[Rewrite]]]:
    """Each ``gemm_*.py`` in ``examples`` (those named in ``only``, when given), a launch of it
    and the rewrites ``target`` prints of its operands."""
    for path in sorted(examples.glob("gemm_*.py")):
        if only and path.stem not in only:
            continue
        launch = load_module(path).make(1, 1, 1)
        operands = recognize(launch.kernel).operand_elt
        yield path, launch, [(low, sg, frag) for low in lowerings_taking(operands)
                             for sg, frag in configurations(target, low)]


def refusal(target: Target, launch: Launch, rewrite: Rewrite, schedule: Schedule) -> str | None:
    """Why the rewrite of ``launch`` under ``rewrite``, staged as ``target`` stages it, does not
    take ``schedule``, or why the target's device would not run what it gives
    (``Target.run_refusal``), or None when neither."""
    try:
        rw = rewritten(target, launch, rewrite, schedule)
    except SarekError as e:
        return e.reason
    return target.run_refusal(rw.kernel, rw.block)


def rewritten(target: Target, launch: Launch, rewrite: Rewrite,
              schedule: Schedule | None) -> Launch:
    """The launch ``target.compile`` runs for ``launch`` under ``rewrite`` and ``schedule``
    (None: the one the target's policy picks), before it is lowered and printed: the
    simulator and the device's runner each lower it themselves (printing it here as well
    would cost as much as a case's run)."""
    lowering, subgroup, frag = rewrite
    return rewrite_launch(launch, lowering=lowering, subgroup=subgroup, frag=frag,
                          staging=target.staging, schedule=schedule).launch


def matrix(target: Target, examples: Path, *, quick: bool = False, only: tuple[str, ...] = (),
           schedules: tuple[Schedule, ...] = ()) -> list[Case]:
    """Every case for ``target``: each ``gemm_*.py`` example in ``examples`` (those named in
    ``only``, when given) at each size, as the original and under every lowering that takes its
    operands at every subgroup and fragment the target permits; at the sizes of
    ``SCHEDULE_SIZES``, under the target's large schedules (``Staging.large``) and those it
    offers besides (``Staging.offered``), each at every subgroup and fragment of its lowering
    where the rewrite takes it (a large schedule the operands do not suit is one the policy
    passes over), and under each of ``schedules`` at every rewrite that takes it
    (``refusal``). ``quick``:
    the ragged size alone, under the schedule the region gets, and ``schedules`` at the ragged
    size. A case that runs what another does (the schedule the region gets anyway) is listed
    once."""
    cases = []
    for path, launch, rewrites in _examples(target, examples, only):
        variants: list[tuple[Lowering | None, int | None, int | None]] = [(None, None, None)]
        variants += rewrites
        sizes = (RAGGED,) if quick else SIZES + EXTRA_SIZES.get(path.stem, ())
        cases += [Case(path, size, *v) for size in sizes for v in variants]
        declared = target.staging.large + target.staging.offered
        scheduled = [] if quick else [(r, s) for r in rewrites for name, s in declared
                                      if name == r[0].value and
                                      refusal(target, launch, r, s) is None]
        requested = [(r, s) for r in rewrites for s in schedules
                     if refusal(target, launch, r, s) is None]
        cases += [Case(path, size, *r, s) for size in SCHEDULE_SIZES for r, s in scheduled]
        cases += [Case(path, size, *r, s) for size in ((RAGGED,) if quick else SCHEDULE_SIZES)
                  for r, s in requested]
    return _distinct(cases, target.staging)


def _distinct(cases: list[Case], staging: Staging) -> list[Case]:
    """``cases`` without those that run what an earlier one runs: a case naming the schedule
    its region gets anyway is the case that names none."""
    def runs(case: Case) -> Case:
        if case.lowering is None or case.schedule is not None:
            return case
        # a size's launch covers at most m x n outputs, and every size of the matrix stays
        # below LARGE_REGION, so this is the schedule the target's policy picks
        return replace(case, schedule=staging.schedule_for(case.lowering.value, case.size.m,
                                                           case.size.n))
    seen: set[Case] = set()
    kept = []
    for case in cases:
        key = runs(case)
        if key not in seen:
            seen.add(key)
            kept.append(case)
    return kept


def left_out(target: Target, examples: Path, schedule: Schedule, *,
             only: tuple[str, ...] = ()) -> tuple[int, list[dict[str, Any]]]:
    """How many rewrites of the examples in ``examples`` (those named in ``only``, when given)
    ``target`` prints, and those of them that ``schedule`` is left out of, each with its
    example, rewrite and reason (``refusal``)."""
    considered, refused = 0, []
    for path, launch, rewrites in _examples(target, examples, only):
        for low, sg, frag in rewrites:
            considered += 1
            why = refusal(target, launch, (low, sg, frag), schedule)
            if why is not None:
                refused.append({"example": path.stem, "lowering": low.value, "subgroup": sg,
                                "frag": frag, "schedule": schedule.name, "reason": why})
    return considered, refused


def unaccepted(target: Target, examples: Path, schedule: Schedule, *,
               only: tuple[str, ...] = ()) -> str | None:
    """None when the rewrite of some example in ``examples`` (of those named in ``only``, when
    given) takes ``schedule`` under some lowering, subgroup and fragment ``target`` prints;
    else the first refusal's reason, naming its example and rewrite."""
    return _unaccepted(*left_out(target, examples, schedule, only=only))


def _unaccepted(considered: int, refused: list[dict[str, Any]]) -> str | None:
    if not considered:
        return "no example has a rewrite the target prints"
    if len(refused) < considered:
        return None
    r = refused[0]
    return (f"{r['example']} {r['lowering']} subgroup {r['subgroup']} frag {r['frag']}: "
            f"{r['reason']}")


def canary(dtype: np.dtype[Any], count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` holding the canary byte pattern."""
    return np.resize(CANARY, count * dtype.itemsize).view(dtype)


@dataclass(frozen=True)
class Prepared:
    """A case ready to run: the launch with canaries in its output, and per array the mask of
    the elements the kernel may write."""

    launch: Launch
    writable: Mapping[str, np.ndarray]
    original: Launch  # the example's launch (no canaries), for its reference()
    module: ModuleType


def _prepare(case: Case, target: Target) -> Prepared:
    module = load_module(case.example)
    original: Launch = module.make(case.size.m, case.size.n, case.size.k)
    if case.size.grid is not None:
        original = replace(original, grid=case.size.grid)
    gemm = recognize(original.kernel)
    args = dict(original.args)
    out = np.asarray(args[gemm.c.array])
    cover = covered(gemm, region(gemm, original.grid, original.block, args), args)
    writable = np.zeros(out.size + GUARD, bool)
    writable[cover] = True
    guarded = np.concatenate([out.ravel(), canary(out.dtype, GUARD)])
    guarded[~writable] = canary(out.dtype, int((~writable).sum()))

    launch = original
    if case.lowering is not None:
        launch = rewritten(target, original, (case.lowering, case.subgroup or 32,
                                              case.frag or 16), case.schedule)
    launch = replace(launch, args={**launch.args, gemm.c.array: guarded})
    masks = {p.name: (writable if p.name == gemm.c.array
                      else np.zeros(np.asarray(launch.args[p.name]).size, bool))
             for p in launch.kernel.params if isinstance(p, ir.ArrayParam)}
    return Prepared(launch, masks, original, module)


def simulated(launch: Launch, target: str | None, arith: str) -> dict[str, np.ndarray]:
    """``launch`` in the simulator under the arithmetic model ``arith``: its kernel lowered for
    the target called ``target`` (what that target prints), or as given for None."""
    return simulate(launch.kernel, dict(launch.args), launch.grid, launch.block, target=target,
                    arith=arith)


def _expected(prep: Prepared) -> dict[str, np.ndarray]:
    """What the original kernel must leave: its inputs, with the covered outputs replaced by
    the example's NumPy reference."""
    want = {name: np.array(prep.launch.args[name], copy=True).ravel() for name in prep.writable}
    for name, ref in prep.module.reference(prep.original).items():
        cover = prep.writable[name]
        want[name][cover] = np.asarray(ref).ravel()[cover[:ref.size]]
    return want


def _bits(a: np.ndarray) -> np.ndarray:
    """Each element's bits as one unsigned integer, so that comparing them is bitwise."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _violations(side: str, got: Mapping[str, np.ndarray], prep: Prepared) -> list[Violation]:
    """The elements ``side`` changed that the launch must not write (a side that returned an
    array of another shape is a mismatch, reported by the comparison)."""
    found = []
    for name, may in prep.writable.items():
        before, after = np.asarray(prep.launch.args[name]).ravel(), np.asarray(got[name])
        if after.shape == before.shape:
            bad = np.flatnonzero((_bits(after) != _bits(before)) & ~may)
            if bad.size:
                found.append(Violation(side, name, int(bad.size),
                                       tuple(int(i) for i in bad[:8])))
    return found


@dataclass(frozen=True)
class Side:
    """One of the two results a case compares."""

    name: str
    arrays: dict[str, np.ndarray]
    ran: bool = True  # it ran the kernel, so its canaries are checked


def _sides(case: Case, prep: Prepared, target: Target, device: bool) -> tuple[Side, Side]:
    lowered = Side("lowered", simulated(prep.launch, target.name, target.arith))
    if device:
        assert target.run is not None  # main() checked
        run = prep.launch
        got = target.run(run.kernel, dict(run.args), run.grid, run.block)
        return Side("device", got), replace(lowered, name="simulator")
    if case.lowering is None:
        return lowered, Side("NumPy reference", _expected(prep), ran=False)
    return lowered, Side("neutral", simulated(prep.launch, None, target.arith))


def check(case: Case, target: Target, device: bool) -> Outcome:
    """Runs one case: on the device against the simulator (``device``), else the lowered kernel
    against the neutral rewrite or, for an original, against the NumPy reference; both under
    the target's arithmetic model. An error anywhere is the case's verdict, never the end of
    the run."""
    start = time.perf_counter()
    kernel = case.example.stem
    try:
        prep = _prepare(case, target)
        kernel = prep.launch.kernel.name
        left, right = _sides(case, prep, target, device)
        arrays = {name: compare(left.arrays[name], right.arrays[name])[1]
                  for name in prep.writable}
        violations = [v for side in (left, right) if side.ran
                      for v in _violations(side.name, side.arrays, prep)]
    except Exception as e:  # a failing case is reported with the others, not raised
        reason = e.reason if isinstance(e, SarekError) else str(e)
        return Outcome(case, kernel, "", {}, (), f"{type(e).__name__}: {reason}",
                       time.perf_counter() - start)
    return Outcome(case, kernel, f"{left.name} vs {right.name}", arrays, tuple(violations),
                   None, time.perf_counter() - start)


def _cuda_device() -> str:
    from backends.cuda.run import device_arch, device_name

    return f"{device_name()} ({device_arch()})"


def _opencl_device(platform: str | None) -> Callable[[], str]:
    def name() -> str:
        from backends.opencl.run import device_label

        return device_label(platform)

    return name


def _vulkan_device() -> str:
    from backends.spirv.device import device

    d = device()
    low, high = d.subgroup_sizes
    return f"{d.name} (Vulkan, subgroups {low}" + (f" to {high})" if high != low else ")")


DEVICE_NAMES: dict[str, Callable[[], str]] = {
    "cuda": _cuda_device, "opencl": _opencl_device(None), "opencl-nv": _opencl_device("NVIDIA"),
    "vulkan": _vulkan_device,
}


def device_name(target: Target, device: bool) -> str:
    """The device the cases ran on, as a person reads it."""
    if not device:
        return f"simulator ({target.arith} arithmetic model)"
    named = DEVICE_NAMES.get(target.name)
    return named() if named is not None else target.description


def report(name: str, device: str, arith: str, quick: bool, outcomes: list[Outcome],
           schedules: tuple[Schedule, ...] = (), skipped: Sequence[dict[str, Any]] = ()
           ) -> dict[str, Any]:
    """The JSON report: the device, the schedules ``--schedule`` added and the rewrites each
    was left out of with the reason (``left_out``), every case with its verdicts and canary
    violations, and the totals."""
    totals = {"cases": len(outcomes), "passed": sum(o.ok for o in outcomes),
              "mismatches": sum(o.mismatches for o in outcomes),
              "canary_violations": sum(o.canary_violations for o in outcomes),
              "errors": sum(o.error is not None for o in outcomes)}
    cases = [{"example": o.case.example.stem, "kernel": o.kernel,
              "lowering": o.case.lowering.value if o.case.lowering else None,
              "subgroup": o.case.subgroup, "frag": o.case.frag,
              "schedule": o.case.schedule.name if o.case.schedule else None,
              "size": [o.case.size.m, o.case.size.n, o.case.size.k],
              "grid": list(o.case.size.grid) if o.case.size.grid else None,
              "purpose": o.case.size.purpose,
              "compared": o.compared, "arrays": dict(o.arrays),
              "canary_violations": [{"side": v.side, "array": v.array, "count": v.count,
                                     "first": list(v.first)} for v in o.violations],
              "error": o.error, "ok": o.ok, "seconds": round(o.seconds, 4)}
             for o in outcomes]
    return {"target": name, "device": device, "arith": arith, "quick": quick,
            "schedules": [s.name for s in schedules], "left_out": list(skipped),
            "all_bit_exact": totals["passed"] == totals["cases"], "totals": totals,
            "cases": cases}


def _summary(outcomes: list[Outcome]) -> Table:
    """One row per example and kernel (original, or lowering, subgroup and fragment), its
    sizes added up."""
    groups: dict[tuple[str, str, str, str, str], list[Outcome]] = {}
    for o in outcomes:
        c = o.case
        key = (c.example.stem, c.lowering.value if c.lowering else "original",
               str(c.subgroup or ""), str(c.frag or ""), c.schedule.name if c.schedule else "")
        groups.setdefault(key, []).append(o)
    table = Table()
    for column in ("example", "kernel", "sg", "frag", "schedule"):
        table.add_column(column)
    for column in ("cases", "passed", "mismatches", "canaries", "errors"):
        table.add_column(column, justify="right")
    for key, rows in groups.items():
        passed = sum(o.ok for o in rows)
        table.add_row(*key, str(len(rows)), str(passed), str(sum(o.mismatches for o in rows)),
                      str(sum(o.canary_violations for o in rows)),
                      str(sum(o.error is not None for o in rows)),
                      style=None if passed == len(rows) else "bold red")
    return table


def _failure(o: Outcome) -> str:
    what = f"{o.case.example.stem} {o.case.variant} {o.case.size.label}:"
    if o.error is not None:
        return f"{what} {o.error}"
    parts = [f"{name} {v}" for name, v in o.arrays.items() if v != "bit-identical"]
    parts += [f"{v.side} wrote {v.count} element(s) of {v.array} it must not (first "
              f"{list(v.first)})" for v in o.violations]
    return f"{what} {'; '.join(parts)}"


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


def main(args: argparse.Namespace) -> int:
    """Runs the conformance matrix ``args`` describes, prints the table, writes the report and
    returns the exit status (module docstring)."""
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
    cases = matrix(target, examples, quick=args.quick, only=only, schedules=schedules)
    if not cases:
        print(f"sarek conformance: error: no example matches {', '.join(args.example)} in "
              f"{examples}", file=sys.stderr)
        return EXIT_USAGE
    outs = {s: left_out(target, examples, s, only=only) for s in schedules}
    refused = [f"{s.name} ({why})" for s, out in outs.items()
               if (why := _unaccepted(*out)) is not None]
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
    console.print(_summary(outcomes))
    for o in outcomes:
        if not o.ok:
            console.print(_failure(o), style="red", markup=False, highlight=False,
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="sarek conformance", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
