"""The conformance matrix: the examples, sizes, rewrites and schedules a target's cases run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from backends.target import Target
from sarek.errors import SarekError
from sarek.launch import Dim3, Launch, Steps
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import SUPPORTED_FRAGMENT, SUPPORTED_SUBGROUP, Lowering, lowerings_taking
from sarek.schedule import Schedule
from sarek.staging import Staging


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
    # Bf16x3's running sums take a total every 128 of k (``CHUNK``): thirteen and a rest (the
    # matrix's other sizes, at most 136 deep, are one chunk or two: hi·hi taken exactly or not)
    "gemm_f32": (Size(40, 24, 1700, purpose="a reduction past thirteen of Bf16x3's chunks"),),
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
    take ``schedule``, or why the target cannot lower what it gives (CUDA's producer
    warpgroup where no tensor map serves a copy), or why the target's device would not run
    it (``Target.run_refusal``), or None when none of these."""
    try:
        rw = rewritten(target, launch, rewrite, schedule).last
        target.lower(rw.kernel)
    except SarekError as e:
        return e.reason
    return target.run_refusal(rw.kernel, rw.block)


def rewritten(target: Target, launch: Launch, rewrite: Rewrite,
              schedule: Schedule | None) -> Steps:
    """The launches ``target.compile`` runs for ``launch`` under ``rewrite`` and ``schedule``
    (None: the one the target's policy picks), before they are lowered and printed: the
    rewritten GEMM's, after the conversion pre-pass where the schedule takes the converted
    operands so (``backends.pipeline.rewrite_steps``). The simulator and the device's runner
    each lower them themselves (printing them here as well would cost as much as a case's
    run)."""
    from backends.pipeline import rewrite_steps

    lowering, subgroup, frag = rewrite
    return rewrite_steps(launch, lowering=lowering, subgroup=subgroup, frag=frag,
                         staging=target.staging, schedule=schedule)[1]


class Refusals:
    """``refusal`` for one target, each (example, rewrite, schedule) decided once: a run's
    matrix and its report's left-out rewrites ask the same questions (``left_out``), and each
    answer rewrites and lowers a kernel."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._known: dict[tuple[Path, Rewrite, Schedule], str | None] = {}

    def __call__(self, path: Path, launch: Launch, rewrite: Rewrite, schedule: Schedule
                 ) -> str | None:
        key = (path, rewrite, schedule)
        if key not in self._known:
            self._known[key] = refusal(self.target, launch, rewrite, schedule)
        return self._known[key]

    def of(self, target: Target) -> Refusals:
        """These refusals, which must be ``target``'s."""
        if target is not self.target:
            raise ValueError("these refusals were decided for another target")
        return self


def matrix(target: Target, examples: Path, *, quick: bool = False, only: tuple[str, ...] = (),
           schedules: tuple[Schedule, ...] = (), sizes: tuple[Size, ...] = (),
           refusals: Refusals | None = None) -> list[Case]:
    """Every case for ``target``: each ``gemm_*.py`` example in ``examples`` (those named in
    ``only``, when given) at each size, as the original and under every lowering that takes its
    operands at every subgroup and fragment the target permits; at the sizes of
    ``SCHEDULE_SIZES``, under the target's huge and large schedules (``Staging.huge``,
    ``Staging.large``) and those it
    offers besides (``Staging.offered``), each at every subgroup and fragment of its lowering
    where the rewrite takes it (a large schedule the operands do not suit is one the policy
    passes over), and under each of ``schedules`` at every rewrite that takes it
    (``refusal``). ``quick``:
    the ragged size alone, under the schedule the region gets, and ``schedules`` at the ragged
    size. ``sizes``, when given, replace every size above (``quick``'s too). A case that runs
    what another does (the schedule the region gets anyway) is listed once. ``refusals``:
    the target's refusals decided so far, which this adds to."""
    refused = (refusals or Refusals(target)).of(target)
    cases = []
    for path, launch, rewrites in _examples(target, examples, only):
        variants: list[tuple[Lowering | None, int | None, int | None]] = [(None, None, None)]
        variants += rewrites
        plain = sizes or ((RAGGED,) if quick else SIZES + EXTRA_SIZES.get(path.stem, ()))
        cases += [Case(path, size, *v) for size in plain for v in variants]
        scheduled = [] if quick else [(r, s) for r in rewrites
                                      for name, s in target.staging.declared
                                      if name == r[0].value and
                                      refused(path, launch, r, s) is None]
        requested = [(r, s) for r in rewrites for s in schedules
                     if refused(path, launch, r, s) is None]
        cases += [Case(path, size, *r, s) for size in sizes or SCHEDULE_SIZES
                  for r, s in scheduled]
        cases += [Case(path, size, *r, s)
                  for size in sizes or ((RAGGED,) if quick else SCHEDULE_SIZES)
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
             only: tuple[str, ...] = (), refusals: Refusals | None = None
             ) -> tuple[int, list[dict[str, Any]]]:
    """How many rewrites of the examples in ``examples`` (those named in ``only``, when given)
    ``target`` prints, and those of them that ``schedule`` is left out of, each with its
    example, rewrite and reason (``refusal``; ``refusals``: as ``matrix`` takes them)."""
    decide = (refusals or Refusals(target)).of(target)
    considered, refused = 0, []
    for path, launch, rewrites in _examples(target, examples, only):
        for low, sg, frag in rewrites:
            considered += 1
            why = decide(path, launch, (low, sg, frag), schedule)
            if why is not None:
                refused.append({"example": path.stem, "lowering": low.value, "subgroup": sg,
                                "frag": frag, "schedule": schedule.name, "reason": why})
    return considered, refused


def unaccepted(target: Target, examples: Path, schedule: Schedule, *,
               only: tuple[str, ...] = ()) -> str | None:
    """None when the rewrite of some example in ``examples`` (of those named in ``only``, when
    given) takes ``schedule`` under some lowering, subgroup and fragment ``target`` prints;
    else the first refusal's reason, naming its example and rewrite."""
    return first_refusal(*left_out(target, examples, schedule, only=only))


def first_refusal(considered: int, refused: list[dict[str, Any]]) -> str | None:
    """What ``unaccepted`` says of ``left_out``'s count and refusals."""
    if not considered:
        return "no example has a rewrite the target prints"
    if len(refused) < considered:
        return None
    r = refused[0]
    return (f"{r['example']} {r['lowering']} subgroup {r['subgroup']} frag {r['frag']}: "
            f"{r['reason']}")
