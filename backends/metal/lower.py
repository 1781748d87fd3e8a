"""Lowering for Metal: the neutral kernel checked against what Metal has, its fragments kept
whole.

Metal's matrix unit is the ``simdgroup_matrix``: one 8x8 matrix of ``half``, ``bfloat`` or
``float`` held by the 32 threads of a SIMD-group, loaded, stored, filled and
multiply-accumulated as a whole, its lane layout opaque to the program. The neutral fragment
statements at 8x8 are exactly those operations, so the lowered kernel keeps them: what
``sarek.simulate(..., target="metal")`` runs is the matrix-level kernel the printer prints,
one statement per Metal call, under the target's arithmetic model (``sequential``: Apple's
half x half -> float product measured equal to f32 accumulation in k order). The printed code
touches single lanes' elements only for ``FragAdd``, element by element through
``thread_elements()`` on three matrices of one type, whose elements lie in the same threads
and slots: the whole-matrix add is what the threads compute, whatever the lane map, so no lane
map is involved.

What the lowering does is refuse, with the reason, everything Metal cannot print as the
simulator runs it: fragments other than 8x8, SIMD-groups other than 32, integer or f32
operand fragments, accumulators other than f32, negative strides, f64 anywhere (Metal has no
double), NVIDIA's tile instructions, and names Metal reserves. It also rounds every float
constant to its type, so that the printer prints the recorded value.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

from backends.cstyle import EmitError
from backends.families import NEUTRAL, refuse_outside
from backends.target import Target
from sarek import coopmat, device_support, ir, ir_check, stage_copy
from sarek.ir import ElemType, FragUse
from sarek.ir_walk import subexpressions, walk
from sarek.matrix_scheme import Lowering
from sarek.memo import remembered
from sarek.staging import Staging
from sim import arith

SUBGROUPS = (32,)
FRAGMENTS = (8,)
EDGE = 8
THREAD_ELEMENTS = EDGE * EDGE // SUBGROUPS[0]
"""The elements of a simdgroup matrix each thread holds (its ``thread_elements()``)."""
LOWERINGS = (Lowering.F16_OPERANDS, Lowering.BF16_OPERANDS, Lowering.BF16X3_OPERANDS)
STAGING = Staging()
"""Dense staging, B row-major (the neutral layout): no Apple GPU was available to measure
threadgroup-memory bank conflicts on, and the policy never changes a result."""

MATRIX_TYPES = {ElemType.F16: "half", ElemType.BF16: "bfloat", ElemType.F32: "float"}
"""The component types of Metal's simdgroup matrices, by the IR's element type."""
OPERANDS = (ElemType.F16, ElemType.BF16)
"""Operand components the target multiplies: those whose products sarek has Apple's
arithmetic for (half x half -> float measured; bfloat products are exact in f32 likewise)."""
ACCUMULATORS = (ElemType.F32,)

WHY = {
    "subgroup": "Apple GPUs run SIMD-groups of 32 threads",
    "fragment": "Metal's simdgroup matrices are 8x8 (there is no 16x16 form)",
    Lowering.INT32_BYTE_PLANES: "Metal has no integer simdgroup matrices (the byte planes "
                                "multiply u8 fragments)",
    Lowering.INT8_OPERANDS: "Metal has no integer simdgroup matrices (i8 and u8 fragments "
                            "have no Metal form)",
}
"""Why the target refuses each subgroup, fragment or lowering it does not print."""

POSITION_NAMES = ("sk_mtl_thread", "sk_mtl_group", "sk_mtl_threads", "sk_mtl_groups",
                  "sk_mtl_simd", "sk_mtl_simd_lane", "sk_mtl_simd_width")
"""The kernel arguments the printer declares for the thread-position builtins."""

RESERVED = frozenset({
    # Metal Shading Language keywords, types and namespaces the printed text relies on
    "kernel", "vertex", "fragment", "device", "constant", "threadgroup", "thread", "half",
    "bfloat", "uchar", "ushort", "uint", "ulong", "uint3", "ulong2", "metal", "precise", "fast",
    "as_type", "simdgroup_matrix", "simdgroup_half8x8", "simdgroup_bfloat8x8",
    "simdgroup_float8x8", "simdgroup_load", "simdgroup_store", "simdgroup_multiply_accumulate",
    "make_filled_simdgroup_matrix", "threadgroup_barrier", "mem_flags", "fabs", "floor",
    "ceil", "fma",
    # the attributes the printer writes
    "buffer", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
    "threads_per_threadgroup", "threadgroups_per_grid", "simdgroup_index_in_threadgroup",
    "thread_index_in_simdgroup", "threads_per_simdgroup",
    *POSITION_NAMES,
})


@dataclass(frozen=True)
class MetalTarget(Target):
    """The registry's Metal entry: refusals say why Metal lacks what is asked for."""

    def refuses(self, lowering: Lowering, subgroup: int, frag: int) -> str | None:
        """Why Metal does not print a rewrite under ``lowering`` at ``subgroup`` and ``frag``
        (the registry's reason and Metal's), or None when it does."""
        reason = super().refuses(lowering, subgroup, frag)
        if reason is None:
            return None
        why = (WHY["subgroup"] if subgroup not in self.subgroups
               else WHY["fragment"] if frag not in self.fragments else WHY.get(lowering, ""))
        return f"{reason}: {why}" if why else reason


def support() -> coopmat.DeviceSupport:
    """The device gate's view of the Metal target: the configurations of an Apple7 GPU with
    MSL 3.1 (``device_support.metal_support(7)``) that this printer prints, 8x8x8 half x half and
    bfloat x bfloat into float."""
    full = device_support.metal_support(7)
    assert full.configs is not None
    operands = {coopmat.component_of(t) for t in OPERANDS}
    accumulators = {coopmat.component_of(t) for t in ACCUMULATORS}
    printed = frozenset(
        c for c in full.configs
        if (c.shape.m, c.shape.n, c.shape.k) == (EDGE, EDGE, EDGE) and c.a == c.b
        and c.a in operands and c.c == c.result and c.c in accumulators)
    return coopmat.DeviceSupport(full.device, printed,
                                 note=f"{full.note}; the forms the Metal printer prints")


@remembered(128)  # the printer and the simulator both lower the same kernel object
def lower(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` as the Metal printer prints it and the simulator runs it for Metal: validated
    and checked (``check``), fragments kept whole, a kernel with fragments marked as written
    for SIMD-groups of 32."""
    ir_check.ensure_valid(kernel)
    kernel = stage_copy.synchronous(kernel)  # Metal copies complete as they are issued
    check(kernel)
    kernel = round_constants(kernel)
    if not any(isinstance(s, _FRAGMENT_STMTS) for s in walk(kernel.body)):
        return kernel
    return kernel.model_copy(update={"subgroup": SUBGROUPS[0]})


def round_constants(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every float constant holding the value it rounds to in its type (once,
    as the simulator rounds it: ``sim.arith.constant``), so that the printer writes a literal
    that reads back as that value exactly and rounds nothing itself; nodes without such a
    constant are kept (an expression built by inlining is a DAG: each node is visited once)."""
    memo: dict[int, object] = {}

    def visit(x: object) -> object:
        key = id(x)
        if key in memo:
            return memo[key]
        out = x
        if isinstance(x, ir.Const):
            if x.type.is_float:
                with np.errstate(invalid="ignore"):  # infinities compare with themselves
                    exact = float(arith.constant(x.value, x.type))
                if not (exact == x.value and type(x.value) is float) or math.isnan(exact):
                    out = x.model_copy(update={"value": exact})
        elif isinstance(x, BaseModel):
            changed = {name: new for name in type(x).model_fields
                       if (new := visit(old := getattr(x, name))) is not old}
            out = x.model_copy(update=changed) if changed else x
        elif isinstance(x, tuple):
            items = tuple(visit(item) for item in x)
            out = items if any(a is not b for a, b in zip(items, x, strict=True)) else x
        memo[key] = out
        return out

    rounded = visit(kernel)
    assert isinstance(rounded, ir.Kernel)
    return rounded


_FRAGMENT_STMTS = ir.STATEMENT_FAMILIES["fragment"]


def check(kernel: ir.Kernel) -> None:
    """Raises ``EmitError`` with the reason when ``kernel`` (well-formed: ``ir.ensure_valid``)
    has something Metal cannot print as the simulator runs it (module docstring)."""
    name = kernel.name
    refuse_outside(kernel.body, NEUTRAL, "Metal")  # simdgroup matrices take neutral fragments
    if kernel.subgroup not in (None, *SUBGROUPS):
        raise EmitError(f"kernel {name!r} is written for subgroups of {kernel.subgroup}; "
                        f"{WHY['subgroup']}")
    for declared in (name, *_declared_names(kernel)):
        if declared in RESERVED:
            raise EmitError(f"the name {declared!r} in kernel {name!r} is one Metal or the "
                            "Metal printer reserves; rename it")
    for where, t in _types(kernel):
        if t is ElemType.F64:
            raise EmitError(f"kernel {name!r} uses f64 ({where}): Metal has no "
                            "double-precision type")
    frags: dict[str, ir.FragDecl] = {}
    for s in walk(kernel.body):
        match s:
            case ir.FragDecl():
                _check_fragment(s)
                frags[s.name] = s
            case ir.FragLoad() | ir.FragStore():
                _check_move(s)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                uses = (frags[d].use, frags[a].use, frags[b].use, frags[c].use)
                if uses != (FragUse.ACCUMULATOR, FragUse.A, FragUse.B, FragUse.ACCUMULATOR):
                    raise EmitError(f"the multiply-accumulate into {d!r} takes "
                                    f"{'/'.join(u.value for u in uses)} fragments; Metal's is "
                                    "printed for A and B operands into f32 accumulators only")


def _check_fragment(d: ir.FragDecl) -> None:
    if (d.rows, d.cols) != (EDGE, EDGE):
        raise EmitError(f"fragment {d.name!r} is {d.rows}x{d.cols}; {WHY['fragment']}")
    if d.elem.is_int:
        raise EmitError(f"fragment {d.name!r} is {d.elem}: {WHY[Lowering.INT32_BYTE_PLANES]}")
    if d.use is FragUse.ACCUMULATOR:
        if d.elem not in ACCUMULATORS:
            raise EmitError(f"accumulator {d.name!r} is {d.elem}; the Metal target "
                            "accumulates in f32 (simdgroup_float8x8)")
        return
    if d.elem not in OPERANDS:
        raise EmitError(f"operand fragment {d.name!r} is {d.elem}; the Metal target multiplies "
                        "f16 and bf16 operands (simdgroup_half8x8, simdgroup_bfloat8x8): how "
                        "Apple's GPUs sum float x float products is not known to sarek")


def _check_move(s: ir.FragLoad | ir.FragStore) -> None:
    if isinstance(s.stride, ir.Const) and int(s.stride.value) < 0:
        raise EmitError(f"{s.kind} of {s.frag!r} with stride {s.stride.value}: Metal's "
                        "elements_per_row is unsigned")


def _declared_names(kernel: ir.Kernel) -> Iterator[str]:
    yield from (p.name for p in kernel.params)
    for s in walk(kernel.body):
        match s:
            case ir.Let(name=n) | ir.ArrayDecl(name=n) | ir.FragDecl(name=n) | \
                    ir.TensorView(name=n) | ir.For(var=n):
                yield n


def _types(kernel: ir.Kernel) -> Iterator[tuple[str, ElemType]]:
    """Every element type the kernel names, with where it names it."""
    for p in kernel.params:
        yield f"parameter {p.name!r}", p.elem
    for s in walk(kernel.body):
        match s:
            case ir.Let(name=n, type=t):
                yield f"variable {n!r}", t
            case ir.ArrayDecl(name=n, elem=t) | ir.FragDecl(name=n, elem=t) | \
                    ir.TensorView(name=n, elem=t):
                yield f"array {n!r}", t
        for e in _expressions(s):
            for x in subexpressions(e):
                yield f"an expression of {s.kind}", x.type


def _expressions(s: ir.Stmt) -> tuple[ir.Expr, ...]:
    """The expressions a statement holds itself (not those of nested statements)."""
    match s:
        case ir.Let(value=v) | ir.Assign(value=v) | ir.FragFill(value=v):
            return (v,)
        case ir.Store(index=i, value=v):
            return (i, v)
        case ir.For(start=a, stop=b, step=c):
            return (a, b, c)
        case ir.While(cond=c) | ir.If(cond=c):
            return (c,)
        case ir.FragLoad(offset=o, stride=st) | ir.FragStore(offset=o, stride=st):
            return (o, st)
    return ()
