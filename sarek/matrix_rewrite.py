"""The rewrite of a recognized GEMM nest onto matrix fragments.

``kernel(original, gemm, lowering, subgroup=32, frag=16)`` builds a new ``Kernel`` in
target-neutral fragment statements (``specs/matrix-pattern-rewrite.md``, "The rewrite"; the
body is built by ``sarek.rewrite``'s ``Builder``, one concern per module):

* the original parameters in order, then the five i32 region parameters ``EXTRA_NAMES``
  (``region_names``: each followed by ``_`` where the original has a parameter of that name);
* a block of four waves of ``subgroup`` lanes owns a 64x64 output tile (block_idx.x its
  column tile, .y its row tile, .z the batch); wave ``w`` owns the 32x32 quarter at rows
  ``32*(w/2)``, columns ``32*(w%2)``, as 2x2 fragments of 16 or 4x4 of 8;
* the reduction runs in steps of 16: the block stages the 64x16 A tile and the 16x64 B tile
  from global into shared memory, converted to the lowering's operand type (one array per
  term or byte plane), zero outside the region; each wave loads its fragments and multiplies,
  with fragment 8 as two chained 8-deep multiply-accumulates in k order (``Bf16x3``: each
  sub-step's six products into a fresh accumulator, then added to the running one);
* accumulators start at the original's initial value (float lowerings stage it through shared
  memory unless it is a constant; the byte planes add it at the end, which modular arithmetic
  allows) and leave through shared memory, where each covered output gets the original's
  epilogue and nothing else is written.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal, Protocol

from sarek import ir, ir_check
from sarek.errors import SarekError
from sarek.ir import ElemType
from sarek.launch import Launch
from sarek.matrix_mapping import Region
from sarek.matrix_pattern import Gemm, recognize
from sarek.matrix_scheme import (
    STACKED_PLANES,
    SUPPORTED_FRAGMENT,
    SUPPORTED_SUBGROUP,
    Lowering,
    LoweringError,
    Scheme,
    config_of,
    scheme_for,
)
from sarek.rewrite.epilogue import Builder
from sarek.rewrite.parts import I32
from sarek.schedule import RESIDENT_BLOCKS, SEED, Schedule, ScheduleError
from sarek.staging import DENSE, Staging

EXTRA_NAMES = ("me", "ne", "ze", "d", "t")



class RewriteError(SarekError):
    """The nest cannot be rewritten as asked; ``reason`` names what and why."""


def launch_dims(subgroup: int = 32, *, me: int, ne: int, ze: int, schedule: Schedule = SEED
                ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """``(block, grid)`` of the rewritten kernel for a region: blocks of four waves (eight for a
    wide schedule, four more with a producer warpgroup), one per ``schedule.tile`` x
    ``schedule.tile_n`` block of output (64x64 by default), one grid layer per batch (a zero extent
    gives a zero grid dimension: nothing to launch); a persistent schedule's grid is one row of
    at most ``RESIDENT_BLOCKS`` blocks that take the tiles in turn."""
    _check_subgroup(subgroup)
    grid = (-(-ne // schedule.tile_n), -(-me // schedule.tile), ze)
    if schedule.persistent:  # each block takes tiles in turn
        grid = (min(RESIDENT_BLOCKS, grid[0] * grid[1] * grid[2]), 1, 1)
    return (schedule.block_waves * subgroup, 1, 1), grid


def _placeholders(e: ir.Expr) -> Iterator[ir.Expr]:
    from sarek.ir_walk import subexpressions

    return subexpressions(e)


# --------------------------------------------------------------------------- the rewrite


def _check_subgroup(subgroup: int) -> None:
    if subgroup not in SUPPORTED_SUBGROUP:
        raise RewriteError(f"subgroup {subgroup} has no template; supported: "
                           f"{', '.join(map(str, SUPPORTED_SUBGROUP))}")


def operands_refusal(gemm: Gemm, lowering: Lowering, schedule: Schedule,
                     staging: Staging = DENSE) -> str | None:
    """Why ``schedule`` cannot multiply ``gemm``'s operands under ``lowering`` as ``staging``
    stages them, or None: a warpgroup schedule multiplies one 16-bit term with B staged as it
    is in memory."""
    scheme = _scheme(gemm, lowering, staging)
    if gemm.split_terms is not None and schedule.stages < 2:
        return "operands split into terms by the pre-pass are staged by a pipelined schedule"
    if scheme.stacked and (not schedule.warpgroup
                           or (schedule.bulk and not schedule.specialized)):
        return ("the stacked byte planes are multiplied by a warpgroup schedule of cp.async "
                "copies ('g' without 'b') or of a producer warpgroup's ('w')")
    if scheme.chunk and scheme.chunk % schedule.step:
        return (f"{lowering} takes its running sums' totals every {scheme.chunk} of k, which "
                f"{schedule.step}-deep steps do not divide: take steps of 16, 32 or 64")
    if schedule.step > 64 and not scheme.stacked:
        return (f"{schedule.step}-deep steps are the stacked byte planes' (one 128-byte row of "
                f"8-bit operands); {lowering} steps 16 to 64 deep")
    one = scheme.terms == ("",) or gemm.split_terms is not None
    if schedule.warpgroup and not scheme.stacked and (
            not one or scheme.operand.bits != 16 or gemm.b.elem is not scheme.operand):
        return (f"a warpgroup schedule multiplies one 16-bit term with B staged as it is in "
                f"memory, or the byte planes after the pre-pass; {lowering} on {gemm.b.elem} "
                f"B is not that")
    if schedule.specialized and gemm.a.elem is not scheme.operand:
        return (f"a producer warpgroup ('w') only copies: A is staged as it is in memory, and "
                f"{lowering} on {gemm.a.elem} A converts it")
    return None


def _scheme(gemm: Gemm, lowering: Lowering, staging: Staging, depth: int | None = None
            ) -> Scheme:
    """The scheme the rewrite builds ``gemm`` with: the lowering's for its operands and the
    reduction's depth where it is known (``scheme_for``), or the stacked byte planes where the
    pre-pass wrote them."""
    if gemm.stacked_planes:
        return STACKED_PLANES
    return scheme_for(lowering, _operands(gemm), staging.whole_int32, depth)


def _operands(gemm: Gemm) -> ElemType:
    """The element type the lowering takes ``gemm``'s operands as: the original operands'
    where the pre-pass split them into terms."""
    if gemm.split_terms is not None:
        return gemm.split_terms.original_a.elem
    return ElemType.I32 if gemm.stacked_planes else gemm.operand_elt


def kernel(original: ir.Kernel, gemm: Gemm, lowering: Lowering, subgroup: int = 32,
           frag: int = 16, staging: Staging = DENSE, schedule: Schedule = SEED,
           depth: int | None = None) -> ir.Kernel:
    """The rewritten kernel (see the module docstring); ``RewriteError`` with the reason when a
    subgroup or fragment has no template, the lowering does not take the operands, or an
    address, bound, initial value or epilogue cannot be expressed in the rewritten launch.
    ``staging`` is the target's layout policy for the staged tiles (``sarek.staging``),
    ``schedule`` the block tile and reduction step (``sarek.schedule``), ``depth`` the
    reduction depth of the launch the kernel is for, where it is known: Bf16x3 multiplies
    reductions of at most ``CHUNK`` with exact hi·hi sub-steps (``scheme_for``). The kernel
    computes every depth; the depth only chooses how accurately."""
    _check_subgroup(subgroup)
    if frag not in SUPPORTED_FRAGMENT:
        raise RewriteError(f"fragment {frag} has no template; supported: "
                           f"{', '.join(map(str, SUPPORTED_FRAGMENT))}")
    if gemm.stacked_planes and lowering is not Lowering.INT32_BYTE_PLANES:
        raise RewriteError(f"stacked byte planes are multiplied by Int32_byte_planes, not "
                           f"{lowering}")
    try:
        config_of(lowering, _operands(gemm), frag)
    except LoweringError as e:
        raise RewriteError(e.reason) from None
    scheme = _scheme(gemm, lowering, staging, depth)
    if gemm.acc_type is not scheme.acc:
        raise RewriteError(f"{lowering} accumulates in {scheme.acc}; the kernel's accumulator "
                           f"is {gemm.acc_type}")
    if renames := user_renames(original):
        original = renamed(original, renames)
        gemm = recognize(original)
    for what, expr in (("initial value", gemm.init), ("epilogue", gemm.epilogue)):
        _expressible(what, expr)
    for name, acc in (("A", gemm.a), ("B", gemm.b)):
        unused = acc.col_stride if name == "A" else acc.row_stride
        if not (isinstance(unused, ir.Const) and unused.value == 0):
            raise RewriteError(f"operand {name}'s address depends on the output "
                               f"{'column' if name == 'A' else 'row'}, which a staged "
                               f"{'row' if name == 'A' else 'column'} tile cannot express")
    try:
        schedule.check(frag, schedule.waves * subgroup)
    except ScheduleError as e:
        raise RewriteError(e.reason) from None
    refused = operands_refusal(gemm, lowering, schedule, staging)
    if refused is not None:
        raise RewriteError(refused)
    body = Builder(gemm, scheme, subgroup, frag, staging, schedule).build()
    params = (*original.params, *(ir.ScalarParam(name=n, elem=I32) for n in _INTERNAL))
    suffix = "" if schedule == SEED else f"_{schedule.name}"
    rewritten = renamed(ir.Kernel(
        name=f"{original.name}_{lowering.value.lower()}{suffix}", params=params, body=body,
        subgroup=subgroup, block=(schedule.block_waves * subgroup, 1, 1)),
        dict(zip(_INTERNAL, region_names(original), strict=True)))
    ir_check.ensure_valid(rewritten)
    return rewritten


_PREFIX = "sk_"  # of every name the rewritten body declares (variables, arrays, fragments)
_INTERNAL = tuple(_PREFIX + n for n in EXTRA_NAMES)  # the region values inside the builder


def _unused(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def region_names(original: ir.Kernel) -> tuple[str, ...]:
    """The names of the five region parameters the rewrite of ``original`` appends:
    ``EXTRA_NAMES``, each followed by as many ``_`` as it takes not to be one of the kernel's
    own parameter names."""
    taken = {p.name for p in original.params}
    out: list[str] = []
    for name in EXTRA_NAMES:
        out.append(_unused(name, taken))
        taken.add(out[-1])
    return tuple(out)


def user_renames(original: ir.Kernel) -> dict[str, str]:
    """The kernel's parameters whose names begin with the rewrite's own prefix ``sk_``, each
    with the name it takes in the rewritten kernel (``u_`` in front, then ``_`` at the end as
    long as that is taken): the one change the rewrite makes to a user's names."""
    taken = {p.name for p in original.params}
    out: dict[str, str] = {}
    for p in original.params:
        if p.name.startswith(_PREFIX):
            out[p.name] = _unused("u_" + p.name, taken)
            taken.add(out[p.name])
    return out


def renamed(k: ir.Kernel, names: dict[str, str]) -> ir.Kernel:
    """``k`` with every identifier in ``names`` (parameters, variables, arrays, fragments)
    replaced. Runs with names that begin with ``sk_`` only, which no other string of the IR
    (an element type, an operator, a builtin) can equal."""
    def walk(x: object) -> object:
        if isinstance(x, str):
            return names.get(x, x)
        if isinstance(x, dict):
            return {key: walk(v) for key, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return ir.Kernel.model_validate(walk(k.model_dump(mode="json")))


def _expressible(what: str, e: ir.Expr) -> None:
    for x in _placeholders(e):
        if isinstance(x, ir.BuiltinValue):
            raise RewriteError(f"the {what} reads {x.which.value}, whose value in the "
                               "rewritten launch is not the original's")




# --------------------------------------------------------------------------- one call


@dataclass(frozen=True)
class Rewritten:
    """The rewrite of one launch: the launch of the rewritten kernel (its arguments are the
    original's followed by the region), and what it was derived from."""

    launch: Launch
    gemm: Gemm
    region: Region
    lowering: Lowering
    subgroup: int
    frag: int
    schedule: Schedule = SEED


class RewriteTarget(Protocol):
    """What the rewrite needs of a target (``backends.target.Target`` is one): its staging
    policy, the subgroups and fragments it prints, and why it refuses a configuration."""

    @property
    def staging(self) -> Staging: ...
    @property
    def subgroups(self) -> tuple[int, ...]: ...
    @property
    def fragments(self) -> tuple[int, ...]: ...
    def refuses(self, lowering: Lowering, subgroup: int, frag: int) -> str | None: ...


def configuration(target: RewriteTarget, lowering: Lowering, subgroup: int | None = None,
                  frag: int | None = None) -> tuple[int, int]:
    """The (subgroup, fragment) ``target`` rewrites ``lowering`` at: the ones asked for, else
    the first of the target's own pairs that it accepts (its printer and its device gate; 32
    and 16 preferred); ``RewriteError`` with the target's reason when none is."""
    subgroups = [subgroup] if subgroup is not None else sorted(
        target.subgroups or SUPPORTED_SUBGROUP, key=lambda s: s != 32)
    frags = [frag] if frag is not None else sorted(target.fragments or SUPPORTED_FRAGMENT,
                                                   key=lambda f: f != 16)
    first_reason = None
    for sg in subgroups:
        for fr in frags:
            reason = target.refuses(lowering, sg, fr)
            if reason is None:
                return sg, fr
            first_reason = first_reason or reason
    raise RewriteError(first_reason or f"the target prints no {lowering} rewrite")


def rewrite_launch(original: Launch, *, lowering: Lowering | None = None,
                   precision: Literal["accurate", "fast"] = "accurate",
                   subgroup: int | None = None, frag: int | None = None,
                   staging: Staging | None = None, schedule: Schedule | None = None,
                   target: RewriteTarget | None = None) -> Rewritten:
    """Recognizes the GEMM nest of ``original.kernel``, computes the region its launch
    covers, selects a lowering (unless one is given), rewrites the kernel (staged as
    ``staging`` says: a target's ``Target.staging``) under ``schedule`` (by default the one
    ``staging.schedule_for`` picks for the region: the seed's unless the region is large and
    the target names a larger one) and returns the launch of the rewritten kernel. With
    ``target`` (a ``backends`` target; ``sarek.rewrite_launch`` takes its name) the staging,
    subgroup and fragment not given are that target's (``configuration``); without, the
    neutral ones (dense staging, subgroup 32, fragment 16). Raises ``NotAGemm``, ``RegionError``,
    ``LoweringError`` or ``RewriteError`` with the reason."""
    from sarek.matrix_mapping import region
    from sarek.matrix_scheme import select

    original.arg_list()  # a missing argument is named here, before any work
    gemm = recognize(original.kernel)
    reg = region(gemm, original.grid, original.block, dict(original.args))
    chosen = lowering if lowering is not None else select(gemm, precision)
    if target is not None:
        staging = staging or target.staging
        subgroup, frag = configuration(target, chosen, subgroup, frag)
    staging = staging or DENSE
    subgroup = 32 if subgroup is None else subgroup
    frag = 16 if frag is None else frag
    if schedule is None:
        schedule = staging.schedule_for(
            chosen.value, reg.me, reg.ne,
            takes=lambda s: operands_refusal(gemm, chosen, s, staging) is None)
    rewritten = kernel(original.kernel, gemm, chosen, subgroup, frag, staging, schedule,
                       depth=reg.d)
    block, grid = launch_dims(subgroup, me=reg.me, ne=reg.ne, ze=reg.ze, schedule=schedule)
    renames = user_renames(original.kernel)
    args = {**{renames.get(name, name): v for name, v in original.args.items()},
            **dict(zip(region_names(original.kernel), reg.args, strict=True))}
    notes = {**original.notes, "lowering": chosen.value, "subgroup": subgroup, "frag": frag,
             "schedule": schedule.name}
    return Rewritten(Launch(rewritten, args, grid, block, notes), gemm, reg, chosen, subgroup,
                     frag, schedule)
