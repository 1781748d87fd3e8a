"""One pipeline, owned by the target: from an original launch to the text that runs.

``compile_launch(target, launch)`` recognizes the GEMM nest, computes
the region, selects a lowering, rewrites under the target's staging, subgroup and fragment,
lowers for the target and prints. It returns a ``Compiled`` holding every stage, or the reason
the kernel is not rewritten, in which case the original runs as written. The CLI, the demo,
conformance, the benchmarks and the launch path call this; nothing else assembles the steps.

A rewrite may run as a sequence of launches over temporaries it allocates (the conversion
pre-pass of ``sarek.rewrite.prepass``, then the GEMM): ``Compiled.before`` holds the launches
that run before ``Compiled.launch``, each lowered and printed, and ``Compiled.scratch`` the
temporaries; ``Compiled.steps`` is the whole sequence, which the simulator and every runner
run in order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from sarek import ir, ir_check
from sarek.errors import SarekError
from sarek.launch import Launch, Scratch, Steps
from sarek.matrix_pattern import Gemm, NotAGemm
from sarek.matrix_rewrite import (
    RewriteError,
    Rewritten,
    configuration,
    operands_refusal,
    rewrite_launch,
)
from sarek.matrix_scheme import Lowering, select
from sarek.schedule import Schedule
from sarek.staging import Staging

if TYPE_CHECKING:
    from backends.target import Target

Precision = Literal["accurate", "fast"]


@dataclass(frozen=True)
class Step:
    """One launch of a compiled sequence: the neutral launch, the target's kernel of it and
    that kernel's text."""

    launch: Launch
    lowered: ir.Kernel
    text: str


@dataclass(frozen=True)
class Compiled:
    """Everything downstream of one original launch on one target.

    ``gemm`` is the recognized nest (None with ``not_rewritten`` saying why: not a GEMM, or
    ``rewrite=False``); ``rewritten`` the neutral rewrite with its region, lowering, subgroup,
    fragment and schedule (None when the original runs); ``launch`` what runs: the rewritten
    kernel's launch (the original's arguments, then the region's values; its grid and block)
    or the original launch; ``lowered`` the target's kernel the simulator runs lane by lane;
    ``text`` what the target's printer prints of it. ``before`` are the launches that run
    first (a conversion pre-pass), ``scratch`` the temporaries the sequence allocates; both
    are empty where one kernel runs."""

    target: str
    original: Launch
    gemm: Gemm | None
    rewritten: Rewritten | None
    not_rewritten: str | None
    launch: Launch
    lowered: ir.Kernel
    text: str
    before: tuple[Step, ...] = ()
    scratch: tuple[Scratch, ...] = ()

    @property
    def kernel(self) -> ir.Kernel:
        """The neutral kernel that runs (rewritten, or the original)."""
        return self.launch.kernel

    @property
    def runs(self) -> tuple[Step, ...]:
        """Every launch in the order they run, the GEMM's (or the original's) last."""
        return (*self.before, Step(self.launch, self.lowered, self.text))

    @property
    def steps(self) -> Steps:
        """The neutral sequence that runs, with its temporaries."""
        return Steps(tuple(s.launch for s in self.runs), self.scratch)


def compile_launch(target: Target, launch: Launch, *, lowering: Lowering | None = None,
                   precision: Precision = "accurate", schedule: Schedule | None = None,
                   subgroup: int | None = None, frag: int | None = None,
                   rewrite: bool = True,
                   refusal: Callable[[ir.Kernel], str | None] | None = None) -> Compiled:
    """``launch`` compiled for ``target``. A recognized GEMM is rewritten (``lowering``
    chosen by ``select(gemm, precision)`` unless given; the subgroup and fragment by
    ``sarek.matrix_rewrite.configuration``; the schedule by the target's staging policy
    unless given); anything
    that is not a GEMM, any launch with ``rewrite=False``, and a GEMM whose selected lowering
    the target does not pick on its own (``Target.unselected``) runs as written and
    ``not_rewritten`` says why. A GEMM the target cannot rewrite as asked (a lowering it does
    not print, a schedule the rewrite refuses) raises the rewrite's error with the reason; it
    is never silently run another way. ``refusal`` says why the device that is to run it
    cannot run a lowered kernel (the launch path's CUDA device: ``backends.cuda.fit``); where
    the schedule was not asked for and the target cannot lower or print the policy's for this
    launch (CUDA's producer warpgroup where no tensor map serves a copy, as for batched
    operands) or the device refuses it, the rewrite takes the policy's next schedule for the
    lowering that the target builds and the device runs (``Staging.candidates``, down to the
    seed's)."""
    from sarek.matrix_pattern import recognize

    gemm: Gemm | None = None
    rewritten: Rewritten | None = None
    steps: Steps | None = None
    not_rewritten: str | None = "rewrite=False: the kernel runs as written"
    if rewrite:
        try:
            gemm = recognize(launch.kernel)
        except NotAGemm as e:
            not_rewritten = f"not a GEMM nest: {e.reason}"
    chosen = None
    if gemm is not None:
        chosen = lowering if lowering is not None else select(gemm, precision)
        if lowering is None and chosen in target.unselected:
            not_rewritten = f"{target.name} runs it as written: {target.unselected[chosen]}"
            chosen = None
    if gemm is not None and chosen is not None:
        sg, fr = configuration(target, chosen, subgroup, frag)
        rewritten, steps = rewrite_steps(launch, lowering=chosen, subgroup=sg, frag=fr,
                                         staging=target.staging, schedule=schedule)
        not_rewritten = None
    if rewritten is None or steps is None:
        ir_check.ensure_valid(launch.kernel)
        steps = Steps((launch,))
        built = _built(target, steps)
    elif schedule is None:
        rewritten, steps, built = _runnable(target, launch, rewritten, steps, refusal)
    else:
        built = _built(target, steps)
    last = built[-1]
    return Compiled(target.name, launch, gemm, rewritten, not_rewritten, last.launch,
                    last.lowered, last.text, built[:-1], steps.scratch)


def _built(target: Target, steps: Steps) -> tuple[Step, ...]:
    """Each launch of ``steps`` lowered for ``target`` and printed."""
    return tuple(_step(target, s) for s in steps.launches)


def _step(target: Target, launch: Launch) -> Step:
    lowered = target.lower(launch.kernel)
    return Step(launch, lowered, target.print_lowered(lowered))


def rewrite_steps(launch: Launch, *, lowering: Lowering, subgroup: int, frag: int,
                  staging: Staging, schedule: Schedule | None = None
                  ) -> tuple[Rewritten, Steps]:
    """The rewrite of ``launch`` under ``lowering``, ``subgroup``, ``frag`` and ``staging``,
    and the launches that run it. The schedule is ``schedule``, else the first of
    ``staging``'s candidates for the region that the rewrite builds for the operands as they
    are or after the conversion pre-pass (``sarek.rewrite.prepass``). Where the schedule
    multiplies the lowering's converted operands after the pre-pass only, the launches are
    the pre-pass and the GEMM reading its temporaries, and the ``Rewritten`` is that GEMM's
    (its ``gemm`` reads the temporaries); otherwise ``rewrite_launch``'s one launch. Raises
    what ``rewrite_launch`` raises."""
    from sarek.matrix_mapping import region
    from sarek.matrix_pattern import recognize
    from sarek.rewrite import prepass

    launch.arg_list()  # a missing argument is named here, before any work
    gemm = recognize(launch.kernel)
    reg = region(gemm, launch.grid, launch.block, dict(launch.args))

    def converted(s: Schedule) -> bool:
        return (prepass.applies(gemm, lowering, s, staging)
                and prepass.refusal(gemm, reg) is None)

    if schedule is None:
        schedule = staging.schedule_for(
            lowering.value, reg.me, reg.ne,
            takes=lambda s: converted(s) or operands_refusal(gemm, lowering, s, staging) is None)
    if prepass.applies(gemm, lowering, schedule, staging):
        planned = prepass.plan(launch, gemm, reg, lowering, subgroup, frag, staging, schedule)
        return (Rewritten(planned.steps.last, planned.gemm, reg, lowering, subgroup, frag,
                          schedule), planned.steps)
    rewritten = rewrite_launch(launch, lowering=lowering, subgroup=subgroup, frag=frag,
                               staging=staging, schedule=schedule)
    return rewritten, Steps((rewritten.launch,))


def _runnable(target: Target, original: Launch, rewritten: Rewritten, steps: Steps,
              refusal: Callable[[ir.Kernel], str | None] | None
              ) -> tuple[Rewritten, Steps, tuple[Step, ...]]:
    """``rewritten`` (of ``original``, under the schedule the target's policy chose), its
    launches and each of them lowered and printed (``_built``), where the target lowers and
    prints them and ``refusal`` (the device's, if any) accepts the last; else the same for
    the first of the policy's later schedules for the lowering where all three hold. Where
    none does: the first schedule's error, or ``RewriteError`` with the device's reason."""
    region = rewritten.region
    later = target.staging.candidates(rewritten.lowering.value, region.me, region.ne)
    later = later[later.index(rewritten.schedule) + 1:] if rewritten.schedule in later else later
    first: SarekError | None = None
    why: str | None = None
    for schedule in (None, *later):
        try:
            if schedule is not None:
                rewritten, steps = rewrite_steps(
                    original, lowering=rewritten.lowering, subgroup=rewritten.subgroup,
                    frag=rewritten.frag, staging=target.staging, schedule=schedule)
            built = _built(target, steps)
        except SarekError as e:  # a schedule the rewrite, lowering or printer cannot build
            first = first or e
            continue
        refused = None if refusal is None else refusal(built[-1].lowered)
        if refused is None:
            return rewritten, steps, built
        why = why or refused
    if why is None:
        assert first is not None
        raise first
    raise RewriteError(f"{why}, and no other schedule of {target.name}'s policy for "
                       f"{rewritten.lowering} runs there either")


def rewrite_for(launch: Launch, target: str, **options: Any) -> Rewritten:
    """``sarek.matrix_rewrite.rewrite_launch`` with the staging, subgroup and fragment of the
    target named ``target`` wherever ``options`` does not give them."""
    from backends import registry

    return rewrite_launch(launch, target=registry.target(target), **options)
