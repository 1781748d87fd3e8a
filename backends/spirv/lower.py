"""Lowering for SPIR-V: fragments stay whole matrices, checked against what cooperative
matrices allow.

``SPV_KHR_cooperative_matrix`` has the neutral fragment operations' own abstraction (a matrix
owned by a subgroup, with an opaque lane layout), so the lowered kernel keeps ``FragDecl``,
``FragFill``, ``FragLoad``, ``FragStore``, ``FragMulAdd`` and ``FragAdd`` (an element-wise
``OpFAdd``/``OpIAdd`` of two cooperative matrices of one type) as they are and the simulator
runs them at matrix level under the target's arithmetic model. ``lower`` checks each of them
against the extension and Vulkan's rules and raises ``EmitError`` with the reason where one
cannot be printed: component types a cooperative matrix cannot hold, shapes that do not
chain or do not spread over the subgroup, loads and stores at offsets and strides not provably
aligned as VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986 asks, lane-explicit
statements (SPIR-V has no ``ldmatrix``/``mma.sync``). Which configurations a device runs is
the gate's decision (``sarek.coopmat``), not the printer's.
"""

from __future__ import annotations

import math
import typing

from backends.cstyle import EmitError
from backends.cuda.lower import divisor
from backends.families import NEUTRAL, refuse_outside
from backends.spirv.builder import memory_type
from backends.spirv.converting import converting_copies
from sarek import ir, packed_store, stage_copy
from sarek.ir import ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_walk import rebuild, replace_statements, subexpressions, walk, with_blocks
from sarek.memo import remembered
from sarek.schedule import Schedule
from sarek.staging import Staging

SUBGROUPS = (32, 64)
FRAGMENTS = (16, 8)
STAGING = Staging(row_pad_bytes=16, byte_k=32, shared_bytes=48 * 1024, exchange_in_tiles=True,
                  converting_copies=True, planes_b_col_major=True, planes_pad_bytes=16,
                  prepass_pipelined=True, chunk_loops=True,
                  small=tuple(
    (name, Schedule(step=32)) for name in ("Int8_operands", "Int32_byte_planes")), large=(
    ("F16_operands", Schedule(tile=128, step=16, stages=3, wide=True)),
    ("Bf16_operands", Schedule(tile=128, step=16, stages=2, wide=True)),
    ("Bf16x3_operands", Schedule(step=16, stages=2)),
    ("Int8_operands", Schedule(tile=128, step=32, stages=2, wide=True)),
    ("Int32_byte_planes", Schedule(step=32, stages=2)),
))
"""Padded 16-bit rows spread the rows of one cooperative-matrix load over the shared-memory
banks; 16 bytes keep every row 16-byte aligned (VUID ...-08986). 8-bit fragments multiply 32
deep in 32-deep steps at every size: the 8-bit configurations Vulkan devices report (the
H200's s8 and u8 ones) are 16x16x32 and 16x8x32, with no 16x16x16. Under pipelined
schedules the byte planes' B is staged column-major, each column's 32 k in 48 bytes
(``planes_b_col_major``, ``planes_pad_bytes``): NVIDIA's driver loads a row-major u8 B
fragment byte by byte (128 ``LDS.S8`` per 32-deep step and invocation in the H200's code of
``t64k32s2``) and a column-major one with ``ldmatrix``; the copies land it transposed
(``backends.spirv.copies.transposed``), and ``t64k32s2`` went from 16.8 to 29.7 Tops at
4096^3 (``bench/results/vulkan_profile_layouts_h200.json``,
``vulkan_profile_release_h200.json``). Int8's B, copied as it is, stays row-major. Large
regions take the
schedule that measured fastest through Vulkan on the H200 at 4096^3 among those whose shared
arrays fit the 48 KiB of workgroup memory NVIDIA's Vulkan gives a workgroup
(``bench/vulkan_profile_h200.py``): pipelined ones, whose tiles move in 16-byte words
(``quad_arrays``) and land converted where the lowering converts them
(``backends.spirv.converting``): 128x256 over eight waves for F16 (three stages), Bf16 and
Int8 (two); 64x64 in two stages for Bf16x3 and the byte planes, whose three bf16 terms or four
byte planes per operand fit no larger pipelined tile (``specs/backends.md``, "Vulkan speed").
f32 operands of one 16-bit term (Bf16, F16 of f32) are rounded once by the conversion pre-pass
before every pipelined schedule (``prepass_pipelined``, ``sarek.rewrite.prepass``), so that
Bf16's GEMM is F16's on bf16 temporaries (170.8 TFLOP/s at 4096^3 with the pre-pass under
``t128x256k16s2``, 164.1 under ``t128x256k16s3``, against 135.3 converting as it staged, each
bit-identical to CUDA's); converting copies land Bf16x3's terms and the byte planes.
Shared bytes are counted as this lowering declares them (converted term arrays,
``converting_copies``), and a schedule that fits only so puts the exchange array in a staged
tile's bytes (``exchange_in_tiles``), then unpads A's rows: F16's ``t128x256k16s3`` (42.75
KiB, the exchange array in A's tile) measured faster than ``t128x256k16s2`` once the loops'
trips inside the limits were printed apart (199.6 against 190.0 TFLOP/s in one run), and
Bf16x3's ``t64k16s3`` (A unpadded) slower than ``t64k16s2`` (18.2 against 18.9). Bf16x3's
running sums take their totals in a loop over the chunks around the loop over the steps
(``chunk_loops``): tested at every step, as CUDA's kernels take them, ``t64k16s2`` ran 11.7
TFLOP/s at 4096^3; in chunk loops 17.8, and 17.6 without totals."""

COMPONENTS = {
    FragUse.A: (ElemType.F16, ElemType.BF16, ElemType.U8, ElemType.I8),
    FragUse.B: (ElemType.F16, ElemType.BF16, ElemType.U8, ElemType.I8),
    FragUse.ACCUMULATOR: (ElemType.F16, ElemType.F32, ElemType.I32, ElemType.U32),
}
"""The component types sarek prints per use (the Vulkan component types of
``VkCooperativeMatrixPropertiesKHR`` that its lowerings need)."""

PRODUCTS = {
    (ElemType.F16, ElemType.F16): (ElemType.F16, ElemType.F32),
    (ElemType.BF16, ElemType.BF16): (ElemType.F32,),
    (ElemType.U8, ElemType.U8): (ElemType.I32, ElemType.U32),
    (ElemType.I8, ElemType.I8): (ElemType.I32,),
}
"""The accumulator types each pair of operand types multiplies into."""



QUAD_BYTES = 16
"""Staged tiles move in 16-byte words (``uvec4``): one load from a storage buffer and one
store into workgroup memory per word, as Vulkan's cooperative-matrix kernels stage them."""

_EXPRESSIONS = typing.get_args(typing.get_args(ir.Expr)[0])


def per_quad(elem: ElemType) -> int:
    """Elements of ``elem`` in one 16-byte word."""
    return QUAD_BYTES * 8 // elem.bits


def quad_arrays(kernel: ir.Kernel) -> frozenset[str]:
    """The shared arrays printed as arrays of 16-byte words: those of 8-, 16- or 32-bit
    elements that ``StageCopy`` writes, only it, and only fragment loads and stores (and, for
    32-bit elements, loads of one element: a word's component) read or write,
    each copy spreading its whole words evenly over the block (tile rows and pitch whole
    words, offset a multiple of a word) and each fragment access at whole words (offset and
    stride). Every other array keeps its elements, and copies into it are element copies."""
    if kernel.block is None:
        return frozenset()
    threads = math.prod(kernel.block)
    words = {s.name: s for s in walk(kernel.body) if isinstance(s, ir.ArrayDecl)
             and s.space is MemSpace.SHARED and s.elem.bits in (8, 16, 32)
             and s.elem is not ElemType.BOOL and (s.size * s.elem.bits) % (QUAD_BYTES * 8) == 0}
    bad: set[str] = set()
    for s in walk(kernel.body):
        match s:
            case ir.StageCopy(dst=name) if name in words:
                per = per_quad(words[name].elem)
                if (s.cols % per or s.dst_pitch % per or divisor(s.dst_offset) % per
                        or (s.rows * s.cols // per) % threads):
                    bad.add(name)
            case ir.FragLoad(array=name) | ir.FragStore(array=name) if name in words:
                per = per_quad(words[name].elem)
                if divisor(s.offset) % per or divisor(s.stride) % per:
                    bad.add(name)
            case ir.Store(array=name) | ir.StorePacked(array=name):
                bad.add(name)
        for field in type(s).model_fields:
            value = getattr(s, field)
            if isinstance(value, _EXPRESSIONS):
                bad.update(x.array for x in subexpressions(value) if isinstance(x, ir.Load)
                           and (x.array not in words or words[x.array].elem.bits != 32))
    copied = {s.dst for s in walk(kernel.body) if isinstance(s, ir.StageCopy)}
    return frozenset((words.keys() & copied) - bad)


def staged_copies(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every ``StageCopy`` into an array of ``quad_arrays`` kept (the printer
    copies it in 16-byte words, held in registers until a ``StageWait`` lands them), every
    other one an element copy, complete as it is issued; the group statements are dropped
    where no copy is kept."""
    if kernel.block is None:
        return kernel
    quads, block = quad_arrays(kernel), kernel.block
    kept = any(isinstance(s, ir.StageCopy) and s.dst in quads for s in walk(kernel.body))

    def synchronous(s: ir.Stmt) -> list[ir.Stmt] | None:
        if isinstance(s, ir.StageCopy) and s.dst not in quads:
            return [stage_copy.element_copy(s, block)]
        if isinstance(s, (ir.StageCommit, ir.StageWait)) and not kept:
            return []
        return None

    return kernel.model_copy(update={"body": replace_statements(kernel.body, synchronous)})


def unsigned_accumulators(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with the s32 accumulators of u8 x u8 products made u32, where they move only
    through shared arrays (made u32 too, their scalar loads and stores reinterpreted): Vulkan
    devices multiply unsigned bytes into u32 (the H200 has no u8 x u8 + s32), and u32 addition
    wraps to the bits of s32 addition, so every result keeps its bits."""
    stmts = list(walk(kernel.body))
    decls = {s.name: s for s in stmts if isinstance(s, ir.FragDecl)}
    if not any(isinstance(s, ir.FragMulAdd) and decls[s.a].elem is ElemType.U8
               and decls[s.b].elem is ElemType.U8 and decls[s.d].elem is ElemType.I32
               for s in stmts):
        return kernel
    accs = {name for name, d in decls.items()
            if d.use is FragUse.ACCUMULATOR and d.elem is ElemType.I32}
    arrays = {s.array for s in stmts if isinstance(s, ir.FragLoad | ir.FragStore)
              and s.frag in accs}
    shared = {s.name for s in stmts if isinstance(s, ir.ArrayDecl)}
    if arrays - shared:
        return kernel  # an accumulator moves through a parameter: its type stays
    u32, i32 = ElemType.U32, ElemType.I32
    memo: dict[int, ir.Expr] = {}

    def leaf(e: ir.Expr) -> ir.Expr | None:
        if isinstance(e, ir.Load) and e.array in arrays:
            inner = e.model_copy(update={"index": rebuild(e.index, leaf, memo), "type": u32})
            return ir.Bitcast(x=inner, type=i32)
        return None

    def retyped(s: ir.Stmt) -> list[ir.Stmt] | None:
        update: dict[str, object] = {}
        for field in type(s).model_fields:
            value = getattr(s, field)
            if isinstance(value, _EXPRESSIONS):
                new = rebuild(value, leaf, memo)
                if new is not value:
                    update[field] = new
        match s:
            case ir.FragDecl(name=name) if name in accs:
                update["elem"] = u32
            case ir.FragFill(frag=name, value=v) if name in accs:
                update["value"] = ir.Bitcast(x=v, type=u32)
            case ir.ArrayDecl(name=name) if name in arrays:
                update["elem"] = u32
            case ir.Store(array=name, value=v) if name in arrays:
                update["value"] = ir.Bitcast(x=rebuild(v, leaf, memo), type=u32)
        if not update:
            return None
        return [with_blocks(s.model_copy(update=update),
                            lambda b: replace_statements(b, retyped))]

    return kernel.model_copy(update={"body": replace_statements(kernel.body, retyped)})


@remembered(128)  # the printer and the simulator both lower the same kernel object
def lower(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` checked for SPIR-V and returned with its fragment statements unchanged
    (subgroup fixed to 32 when a fragment kernel names none); ``EmitError`` with the reason
    for anything a cooperative matrix cannot express."""
    kernel = unsigned_accumulators(staged_copies(converting_copies(kernel)))
    kernel = packed_store.elements(kernel)  # logical addressing has no wider pointers
    refuse_outside(kernel.body, NEUTRAL, "SPIR-V")  # cooperative matrices take neutral ones
    _shared_storage(kernel)
    if not any(isinstance(s, _FRAGMENT) for s in walk(kernel.body)):
        return kernel
    subgroup = kernel.subgroup or 32
    if subgroup not in SUBGROUPS:
        raise EmitError(f"SPIR-V prints subgroups of {' and '.join(map(str, SUBGROUPS))} "
                        f"lanes; kernel {kernel.name!r} is written for {subgroup}")
    _Checker(kernel, subgroup).block(kernel.body)
    return kernel if kernel.subgroup else kernel.model_copy(update={"subgroup": subgroup})


_FRAGMENT = ir.STATEMENT_FAMILIES["fragment"]


def _shared_storage(kernel: ir.Kernel) -> None:
    """``EmitError`` for an array in another's storage (``ir.ArrayDecl.shares``) that SPIR-V
    cannot reach through that array's variable: its elements must each span a whole number
    of the storage's (in memory: bool a byte, bf16 its pattern), or, where the storage is
    held as 16-byte words, be 32-bit components of them, moved as fragments at whole
    words."""
    decls = {s.name: s for s in walk(kernel.body) if isinstance(s, ir.ArrayDecl)}
    quads = quad_arrays(kernel)
    for d in decls.values():
        if d.shares is None:
            continue
        host = decls[d.shares]
        own, theirs = memory_type(d.elem), memory_type(host.elem)
        if d.shares in quads:
            if own.bits != 32:
                raise EmitError(f"array {d.name!r} shares the storage of {d.shares!r}, which "
                                f"SPIR-V holds as 16-byte words: its elements must be 32-bit "
                                f"components of them, not {d.elem}")
            for s in walk(kernel.body):
                if isinstance(s, ir.FragLoad | ir.FragStore) and s.array == d.name and (
                        divisor(s.offset) % per_quad(own) or divisor(s.stride) % per_quad(own)):
                    raise EmitError(f"fragment {s.frag!r} moves through {d.name!r}, in the "
                                    f"16-byte words of {d.shares!r}, at an offset or stride "
                                    "not provably a whole number of words")
        elif d.elem is ElemType.BOOL or own.bits % theirs.bits:
            raise EmitError(f"array {d.name!r} of {d.elem} shares the storage of {d.shares!r} "
                            f"of {host.elem}: SPIR-V reaches it through that array's variable, "
                            "so each of its elements must span a whole number of those")


class _Checker:
    def __init__(self, kernel: ir.Kernel, subgroup: int) -> None:
        self.subgroup = subgroup
        self.frags: dict[str, ir.FragDecl] = {}
        self.arrays: dict[str, ir.ArrayDecl | ir.ArrayParam] = {
            p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}

    def block(self, stmts: tuple[ir.Stmt, ...]) -> None:
        for s in stmts:
            match s:
                case ir.For(body=body) | ir.While(body=body):
                    self.block(body)
                case ir.If(then=then, orelse=orelse):
                    self.block(then)
                    self.block(orelse)
                case ir.ArrayDecl(name=name):
                    self.arrays[name] = s
                case ir.FragDecl():
                    self.decl(s)
                case ir.FragFill(frag=name):
                    self.frag(name)
                case ir.FragLoad() | ir.FragStore():
                    self.move(s)
                case ir.FragMulAdd():
                    self.mul_add(s)

    def decl(self, d: ir.FragDecl) -> None:
        allowed = COMPONENTS[d.use]
        if d.elem not in allowed:
            raise EmitError(f"fragment {d.name!r} of {d.elem}: SPIR-V cooperative matrices of "
                            f"use {d.use.value} take {', '.join(map(str, allowed))} components")
        if (d.rows * d.cols) % self.subgroup:
            raise EmitError(f"fragment {d.name!r}: a {d.rows}x{d.cols} matrix "
                            f"({d.rows * d.cols} components) cannot be spread evenly over "
                            f"{self.subgroup} lanes")
        self.frags[d.name] = d

    def frag(self, name: str) -> ir.FragDecl:
        if name not in self.frags:
            raise EmitError(f"{name!r} is not a fragment declared before its use")
        return self.frags[name]

    def move(self, s: ir.FragLoad | ir.FragStore) -> None:
        d = self.frag(s.frag)
        what = "loaded from" if isinstance(s, ir.FragLoad) else "stored to"
        arr = self.arrays.get(s.array)
        if arr is None:
            raise EmitError(f"{s.array!r} is not an array")
        size = d.elem.bits // 8
        along = d.cols if s.layout is FragLayout.ROW else d.rows
        need = min(16, along * size)
        base = arr.align if isinstance(arr, ir.ArrayDecl) else 16
        for name, e in (("offset", s.offset), ("stride", s.stride)):
            if (divisor(e) * size) % need:
                raise EmitError(f"fragment {s.frag!r} {what} {s.array!r}: the {name} is not "
                                f"provably a multiple of {need} bytes, as Vulkan requires of "
                                "cooperative-matrix loads and stores")
        if base % need:
            raise EmitError(f"array {s.array!r} is aligned to {base} bytes; cooperative-matrix "
                            f"access needs {need}")

    def mul_add(self, s: ir.FragMulAdd) -> None:
        fd, fa, fb, fc = (self.frag(x) for x in (s.d, s.a, s.b, s.c))
        uses = (fa.use, fb.use, fc.use, fd.use)
        if uses != (FragUse.A, FragUse.B, FragUse.ACCUMULATOR, FragUse.ACCUMULATOR):
            raise EmitError(f"multiply-add {s.d} = {s.a} * {s.b} + {s.c}: the operands must be "
                            "an A, a B and two accumulators")
        m, k, n = fa.rows, fa.cols, fb.cols
        if (fb.rows, fc.rows, fc.cols, fd.rows, fd.cols) != (k, m, n, m, n):
            raise EmitError(f"multiply-add {s.d} = {s.a} * {s.b} + {s.c}: shapes {m}x{k}, "
                            f"{fb.rows}x{fb.cols}, {fc.rows}x{fc.cols} -> {fd.rows}x{fd.cols} "
                            "do not chain")
        accs = PRODUCTS.get((fa.elem, fb.elem), ())
        if fd.elem not in accs or fc.elem is not fd.elem:
            raise EmitError(f"multiply-add of {fa.elem} x {fb.elem} into {fc.elem} -> "
                            f"{fd.elem}: SPIR-V prints "
                            + "; ".join(f"{a} x {b} into {', '.join(map(str, r))}"
                                        for (a, b), r in PRODUCTS.items()))
