"""Lowering for CUDA: neutral fragments into lane-explicit registers, ldmatrix and mma.sync.

A 16x16 fragment of a warp becomes a local array in every lane holding that lane's part, as
``sarek.atoms`` lays it out: A as one ``mma.sync.m16n8k16`` A operand (u32 words), B (k x n)
as two B operands (columns 0-7, then 8-15), the accumulator as two C operands (f32 or s32
elements). Then

* a load of A or B from 16-byte aligned shared rows becomes one ``Ldmatrix`` whose per-lane
  address follows the provider rule, when the instruction delivers exactly the words the atom's
  lane layout wants (checked from the tables, never assumed); every other load and every
  store moves element by element at the addresses the lane layout gives;
* ``FragMulAdd`` becomes two ``Mma`` statements, one per half of the columns;
* a fill writes the value into each of a lane's accumulator elements, and ``FragAdd`` adds
  each of a lane's elements of one accumulator to the same element of the other (every
  accumulator of one type has the same lane layout).

The printer prints the result as it is and the simulator runs it lane by lane: the register
images and addresses that reach a GPU are the ones the CPU suite executes. Only 16x16x16
fragments of subgroups of 32 exist here (NVIDIA has no 8x8x8 float shape).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from backends.cstyle import EmitError
from backends.cuda import chains, copies, roles, shared, wgmma
from sarek import atoms, ir, ir_check, packed_store, tile
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_build import add, binary, const, mul, var
from sarek.ir_walk import replace_statements, walk, with_blocks
from sarek.memo import remembered
from sarek.schedule import Schedule
from sarek.staging import Staging

SUBGROUPS = (32,)
FRAGMENTS = (16,)
STAGING = Staging(row_pad_bytes=16, narrow_b_col_major=True, byte_k=32, packed_planes=True,
                  packed_out=True, exchange_pad=8, large=(
    ("F16_operands", Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True,
                              specialized=True, persistent=True)),
    ("F16_operands", Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True,
                              in_flight=True)),
    ("F16_operands", Schedule(tile=128, step=32, stages=3, wide=True)),
    ("Bf16_operands", Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True,
                               specialized=True, persistent=True)),
    ("Bf16_operands", Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True,
                               in_flight=True)),
    ("Bf16_operands", Schedule(tile=128, step=32, stages=3, wide=True)),
    ("Bf16x3_operands", Schedule(tile=128, step=64, stages=2, wide=True, warpgroup=True,
                                 narrow=True, specialized=True, persistent=True, ordered=True)),
    ("Bf16x3_operands", Schedule(tile=128, step=32, stages=2, wide=True)),
    ("Bf16x3_operands", Schedule(tile=128, step=16, stages=3, wide=True)),
    ("Int32_byte_planes", Schedule(tile=128, step=128, stages=3, wide=True, warpgroup=True,
                                   specialized=True)),
    ("Int32_byte_planes", Schedule(tile=128, step=128, stages=3, wide=True, warpgroup=True,
                                   in_flight=True)),
    ("Int32_byte_planes", Schedule(step=32, prefetch=True)),
    ("Int8_operands", Schedule(tile=128, step=32, stages=3)),
), huge=(
    ("F16_operands", Schedule(tile=128, step=64, stages=3, wide=True, warpgroup=True,
                              specialized=True, persistent=True, ordered=True)),
), offered=(
    ("F16_operands", Schedule(tile=128, step=32, stages=3, warpgroup=True)),
    ("F16_operands", Schedule(tile=128, step=64, stages=2, warpgroup=True)),
    ("F16_operands", Schedule(tile=128, step=64, stages=2)),
), strip_rows=atoms.WGMMA.m // atoms.WGMMA.warps, shared_bytes=shared.MAX_BYTES - 1024,
    exchange_in_tiles=True, prepass_terms=True, swizzled_depth=wgmma.SWIZZLE_ROW,
    sum_strip_cols=wgmma.SWIZZLE_ROW)
"""Padded 16-bit rows put the 8 rows one ldmatrix reads in distinct banks, except under
warpgroup schedules of 64-deep steps, whose tiles ``wgmma`` reads in 128-byte swizzle atoms
(``swizzled_depth``); 8-bit B staged
column-major lets ldmatrix deliver B's k-consecutive bytes. Regions of at least 8192 x 8192
outputs with f16 operands (``huge``) take the grouped tile order ``t128x256k64s3gwro``, which
ran at 1.03x to 1.05x ``...gwr`` at 8192^3 in four runs side by side and at 0.98x to 1.00x
at 4096^3 (``bench/results/variants_arrivals_h200.json``, ``schedule_sweep_pinned_8192_h200.json``,
``schedule_sweep_packed_order_8192_h200.json``). Large regions take the pipelined
schedule that measured fastest on the H200 at 4096^3 (``bench/schedule_sweep_h200.py``, one
run; every tile copied by ``cp.async``, raw where it is converted at the step that multiplies
it): for F16 with f16 operands ``wgmma`` over 128x256 tiles of two warpgroups in three 64-deep
stages, A and B read from shared memory, copied by a third, producer warpgroup of bulk tensor
copies that hands the buffers to the two through mbarriers (``specialized``,
``backends.cuda.roles``), on a persistent grid (``persistent``: one block per multiprocessor
takes tiles in turn, its producer copying the next tile's steps while the consumers store
one; 470.1 TFLOP/s at 4096^3 and 539.7 at 8192^3 against 453.6 and 525.1 for
``t128x256k64s3gw``, and the grouped tile order ``...gwro`` 457.0 and 554.0, in the same runs,
``bench/results/schedule_sweep_ws_persistent_h200.json``; ``t128x256k64s3gw`` had run at 451.3
and 536.4 against 387.7 and 452.5 for ``t128x256k64s3gf``, the policy before it,
``bench/results/schedule_sweep_ws_h200.json``; ``t128x256k64s3gf``, each step's group left in
flight while the next is issued, had run at 414.9 against 393.6 for ``t128k64s2g``, which was
1.20x ``mma.sync``'s best, 5.4x the seed's, and stays next in line for launches whose
copies no tensor map serves, such as batched operands); 128x256
tiles over eight waves with three 32-deep stages for F16 of converted operands (2.0x; 128x128
tiles in 64-deep stages, the best for f16 operands on ``mma.sync``, run at 0.73x the seed's
here, and ``wgmma`` at 0.91x) and for Bf16 (1.85x); for Bf16x3, after the pre-pass that
splits each f32 element into its three bf16 terms once, each term in a temporary of its own
that the copies stage as it is (``prepass_terms``), ``wgmma`` over 128x128 tiles of two
warpgroups in two 64-deep stages, each wave's rows two 64-column strips (``sum_strip_cols``)
whose sub-step sums are added while the other strip's products run, fed by a producer
warpgroup on a persistent grid in grouped tile order (``t128x128k64s2gwro``: 68.8 TFLOP/s at
4096^3 and 78.6 at 8192^3 against 57.9 and 69.5 for ``t128x128k64s2g`` and 66.1 and 73.1 for
``...gwr``, in one run each, ``bench/results/schedule_sweep_bf16x3_strips_4096_h200.json``,
``..._8192_h200.json``; with the fills printed as asm movs, 75.7 and 90.6 in
``gpu_speed_strips_h200.json``), then, where a device refuses ``wgmma``,
``mma.sync`` over 128x256 tiles in two 32-deep stages (53.4 against 32.3 splitting as it
stages on the same schedule, ``schedule_sweep_bf16x3_prepass_h200.json``), then three
16-deep stages where shared memory holds no more; the byte planes, after the pre-pass that
splits int32 operands into byte planes stacked along k (``sarek.rewrite.prepass``), take
``wgmma``'s 8-bit form over 128x256 tiles in three 128-deep stages, A and B in 128-byte
swizzle atoms copied by a producer warpgroup of bulk tensor copies, each phase's through
tensor maps of its own (``t128x256k128s3gw``: 136.9 Tops at 4096^3, the pre-pass included,
6.25x CuPy's int32 matmul at 21.9, against 94.1 for ``t128x256k128s3gf``, the policy
before it, 135.0 for the persistent ``...gwr`` and 137.3 for ``t128x256k128s4gw``, a
difference inside one run's noise for the stage that costs the exchange array's room,
``bench/results/schedule_sweep_planes_ws_h200.json``); ``t128x256k128s3gf``, each step's
group in flight (89.3 Tops at 4096^3 and 94.0 at 8192^3 in its first run against 39.9 and
40.5 for ``t64k32p``, ``bench/results/schedule_sweep_planes_sw128_h200.json``; 64-deep
steps in core matrices without swizzle ran at 42.3), stays next in line for launches whose
copies no tensor map serves, such as batched operands; where a device refuses
``wgmma``, their four accumulators per fragment spill at 128x128 on ``mma.sync``, so they
take 64x64 tiles with 32-deep steps, the next step prefetched into registers (1.9x); Int8
128x128 tiles in three 32-deep stages (136 Tops at
4096^3 against 41 under the byte planes' schedule, ``bench/results/backends_speed_h200.json``).
CUDA also offers ``t128x256k64s3gf`` (the policy before warp specialization), the warpgroup
schedule with 32-deep steps, whose A goes through registers (``ldmatrix``), so that ``sarek
conformance`` checks both of ``wgmma``'s forms, ``t128k64s2g`` (each step's group waited for), and
``mma.sync``'s 128x128 tiles in 64-deep stages. Under a warpgroup
schedule each warp's accumulator strips are wgmma's rows per warp high (``sarek.atoms.WGMMA``),
so that one ``wgmma`` of the warpgroup multiplies the four warps' strips by the shared B.
128x256 tiles over two warpgroups (``t128x256k64s2g``, one ``m64n256k16`` per warpgroup and
sub-step) ran at the rate of ``t128k64s2g`` in one run with it while each step waited for its
group (``bench/results/schedule_sweep_wgmma_wide_h200.json``); one warpgroup's tiles with a
group in flight (``t128k64s3gf``, ``t128k64s4gf``) ran slower (288 and 300 TFLOP/s).
Converted operands of large regions take F16's warpgroup schedule after the conversion
pre-pass (``sarek.rewrite.prepass``: each f32 element rounded once into a 16-bit temporary;
Bf16 at 4096^3, the pre-pass included, 421.2 TFLOP/s under ``t128x256k64s3gw`` (the policy
takes its persistent form, as for F16) and 363.0
under ``t128x256k64s3gf`` against 108.2 for ``t128x256k32s3``, which converts as it stages,
in one run, ``bench/results/schedule_sweep_prepass_h200.json``;
``specs/matrix-pattern-rewrite.md`` 6.10).
Lowerings that put them on ``wgmma`` converting in the kernel (the f32 copied raw and
converted once per block as it lands, in registers or through a raw buffer) ran at 24.0 to
130.3 TFLOP/s, the best (``t128x256k32s3gf``) against 136.6 for ``t128x256k32s3`` in the same
call: the warpgroups that multiply also convert, at 255 registers
(``specs/matrix-pattern-rewrite.md`` 6.9,
``bench/results/schedule_sweep_h200_converted_held.json``)."""

NV_STAGING = Staging(row_pad_bytes=16, narrow_b_col_major=True, byte_k=32, packed_planes=True,
                     large=(
    ("F16_operands", Schedule(tile=128, step=16, stages=3)),
    ("Bf16_operands", Schedule(tile=128, step=16, prefetch=True)),
    ("Bf16x3_operands", Schedule(tile=128, step=16)),
    ("Int8_operands", Schedule(tile=128, step=32, stages=3)),
    ("Int32_byte_planes", Schedule(step=32, prefetch=True)),
))
"""opencl-nv's policy: CUDA's layouts and 8-bit depth, and for large regions the fastest
schedule through NVIDIA's OpenCL at 4096^3 on the H200 among those whose shared arrays fit the
48 KiB of local memory it gives a work-group (it has no opt-in to more;
``bench/backends_speed_h200.py``): for F16 128x128 tiles in three 16-deep ``cp.async`` stages
(3.7x the unpipelined ``t128k16`` in one run; ``t128k32s2`` ran 3% faster still but has not
been through ``sarek conformance``); for Int8 three 32-deep stages (3.2x CUDA's ``t64k32p``);
the byte planes CUDA's ``t64k32p``; Bf16, whose f32 stages are twice as large, 128x128 tiles
in 16-deep steps with the next step's f32 loaded into registers during the multiply (102.9
TFLOP/s against 81.9 unpipelined in one run; CUDA, whose ptxas spills 72 bytes there, ran it at
66.4; two ``cp.async`` stages ran at 60.8 before opencl-nv's local-id mask); Bf16x3 unpipelined
128x128 tiles in 16-deep steps (``t64k32``, ``t64k16s2`` and ``t64k16s3`` ran slower, before
the mask)."""

EDGE = 16
_LANE, _G, _T = "sk_lane", "sk_lane_g", "sk_lane_t"  # lane, lane / 4, lane % 4
I32, U32, U64 = ElemType.I32, ElemType.U32, ElemType.U64


@remembered(128)  # the printer and the simulator both lower the same kernel object
def lower(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every fragment statement lowered (kernels without fragments come back
    unchanged) and its staged copies as ``cp.async`` (``backends.cuda.copies``), runs of
    fragment statements with fresh accumulators one chain at a time (``backends.cuda.chains``),
    tile patterns as ``LaneTile``s and, past 48 KiB, every shared array placed in the dynamic
    allocation (``backends.cuda.shared.place``); ``EmitError`` with the reason for a fragment
    CUDA has no instruction for or shared memory past what a block may have."""
    places = wgmma.wgmma_arrays(kernel)
    in_flight = wgmma.in_flight_loops(kernel, places) if places else frozenset()
    if places and roles.specialized(kernel):
        kernel = roles.lower(kernel, places)
    kernel = copies.lower(kernel, places)
    if any(isinstance(s, ir.TileApply) for s in walk(kernel.body)):
        kernel = kernel.model_copy(update={"body": lane_tiles(kernel.body)})
        ir_check.ensure_valid(kernel)
    if not any(isinstance(s, _FRAGMENT_STMTS) for s in walk(kernel.body)):
        return shared.place(kernel)
    kernel = kernel.model_copy(update={"body": chains.regroup(kernel.body)})
    if kernel.subgroup not in (None, *SUBGROUPS):
        raise EmitError(f"CUDA runs subgroups of 32 lanes; kernel {kernel.name!r} is written "
                        f"for {kernel.subgroup}")
    lowering = _Lowering(kernel, places)
    lane = ir.BuiltinValue(which=Builtin.SUBGROUP_LANE)
    prologue = (
        ir.Let(name=_LANE, type=I32, value=lane),
        ir.Let(name=_G, type=I32, value=binary(BinOp.SHR, var(_LANE), const(2))),
        ir.Let(name=_T, type=I32, value=binary(BinOp.AND, var(_LANE), const(3))),
    )
    body = lowering.block(kernel.body)
    if any(isinstance(s, ir.Wgmma) for s in walk(body)):
        body = wgmma.fence_and_wait(body, in_flight)
    lowered = shared.place(kernel.model_copy(update={"body": prologue + body, "subgroup": 32}))
    ir_check.ensure_valid(lowered)
    return lowered


def lane_tiles(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``body`` with every tile pattern as the ``LaneTile`` of its instructions
    (``sarek.tile.lane_tile``), its operands resolved to their storage."""
    placed: dict[str, tile.Placed] = {}

    def replace(s: ir.Stmt) -> list[ir.Stmt] | None:
        match s:
            case ir.TensorView(name=name, storage=storage, layout=layout, offset=offset):
                placed[name] = tile.Placed(storage, layout, offset)
            case ir.ArrayDecl(name=name, layout=layout) if layout is not None:
                placed[name] = tile.Placed(name, layout)
            case ir.TileApply(dst=dst, src=src):
                return [tile.lane_tile(s, placed[dst], placed[src])]
        return None

    return replace_statements(body, replace)


_FRAGMENT_STMTS = ir.STATEMENT_FAMILIES["fragment"]
_OPERAND = {FragUse.A: "a", FragUse.B: "b", FragUse.ACCUMULATOR: "c"}


@dataclass(frozen=True)
class _Affine:
    """``g * along_g + t * along_t + base``: a row or column as a function of the lane."""

    along_g: int
    along_t: int
    base: int

    def expr(self, extra: int = 0) -> ir.Expr:
        out: ir.Expr = const(self.base + extra)
        for name, k in ((_T, self.along_t), (_G, self.along_g)):
            if k:
                out = add(mul(var(name), const(k)) if k != 1 else var(name), out)
        return out


def _affine(values: np.ndarray) -> _Affine:
    """The affine form of ``values[lane]`` over (g, t), checked on every lane."""
    lanes = np.arange(values.size)
    g, t = lanes // 4, lanes % 4
    form = _Affine(int(values[4] - values[0]), int(values[1] - values[0]), int(values[0]))
    if not np.array_equal(g * form.along_g + t * form.along_t + form.base, values):
        raise AssertionError("a lane layout is not affine in lane / 4 and lane % 4")
    return form


def _layout(facts: atoms.MmaAtomFacts, use: FragUse) -> atoms.LaneLayout:
    return {FragUse.A: facts.a, FragUse.B: facts.b, FragUse.ACCUMULATOR: facts.c}[use]


def _halves(use: FragUse, n: int = EDGE) -> int:
    """Atom operands per fragment of ``n`` columns: A one, B and the accumulator one per 8
    columns (two for a 16x16 fragment)."""
    return 1 if use is FragUse.A else n // 8


def _places(facts: atoms.MmaAtomFacts, use: FragUse, n: int = EDGE
            ) -> list[tuple[_Affine, _Affine]]:
    """(row, column) in the 16 x ``n`` fragment of each element a lane holds, as functions of
    the lane, in register order (B's and the accumulator's 8-column blocks one after
    another)."""
    coords = _layout(facts, use).coordinates
    out = []
    for h in range(_halves(use, n)):
        for e in range(coords.shape[1]):
            row, col = _affine(coords[:, e, 0]), _affine(coords[:, e, 1])
            out.append((row, dataclasses.replace(col, base=col.base + 8 * h)))
    return out


def divisor(e: ir.Expr) -> int:
    """A number ``e``'s value is always a multiple of (1 when nothing is known)."""
    match e:
        case ir.Const(value=v) if isinstance(v, int) and not isinstance(v, bool):
            return abs(v) or 1 << 30
        case ir.Binary(op=BinOp.ADD | BinOp.SUB, a=a, b=b):
            return math.gcd(divisor(a), divisor(b))
        case ir.Binary(op=BinOp.MUL, a=a, b=b):
            return min(divisor(a) * divisor(b), 1 << 30)
        case ir.Binary(op=BinOp.SHL, a=a, b=ir.Const(value=int(c))):
            return min(divisor(a) << c, 1 << 30)
    return 1


def _paired(places: list[tuple[_Affine, _Affine]], s: ir.FragStore) -> bool:
    """Whether each lane's accumulator slots ``2i`` and ``2i + 1`` lie side by side in a row of
    ``s``'s row-major destination, the first at an even element: as ``mma.sync`` and ``wgmma``
    give them (columns ``2t`` and ``2t + 1``), with the offset and the row stride even."""
    if s.layout is not FragLayout.ROW or len(places) % 2:
        return False
    if divisor(s.offset) % 2 or divisor(s.stride) % 2:
        return False
    return all(r0 == r1 and c1 == dataclasses.replace(c0, base=c0.base + 1)
               and c0.along_g % 2 == c0.along_t % 2 == c0.base % 2 == 0
               for (r0, c0), (r1, c1) in zip(places[::2], places[1::2], strict=True))


def _pair_stores(d: ir.FragDecl, s: ir.FragStore, at: list[ir.Expr]) -> list[ir.Stmt]:
    """Each pair of 32-bit accumulator slots as one 64-bit ``StorePacked`` at ``at[i]`` (the
    first slot in the low half): half the store instructions, each reaching twice the
    banks."""
    out: list[ir.Stmt] = []
    for i, where in enumerate(at):
        low, high = (ir.Load(array=d.name, index=const(2 * i + h), type=d.elem) for h in (0, 1))
        bits = [ir.Cast(x=x if d.elem is U32 else ir.Bitcast(x=x, type=U32), type=U64)
                for x in (low, high)]
        out.append(ir.StorePacked(array=s.array, index=where,
                                  value=packed_store.word(bits, 32), line=s.line))
    return out


def ldmatrix_blocks(facts: atoms.MmaAtomFacts, use: FragUse, layout: FragLayout
                    ) -> tuple[list[tuple[int, int]], bool] | None:
    """How one ldmatrix loads a fragment's registers: for each register (B's second half
    after the first) the (row, column) origin, in memory, of the 8x8 block of 16-bit words it
    receives, and whether ``.trans`` is needed; None when no ldmatrix delivers exactly the
    elements the atom's lane layout puts in each register."""
    lane_layout, move = _layout(facts, use), atoms.LDMATRIX
    per = 32 // facts.operand.bits  # elements per register
    regs = facts.registers(_OPERAND[use])
    owner = move.owner.coordinates[:, 0]  # lane -> (row, word) it receives
    coords = lane_layout.coordinates
    blocks: list[tuple[int, int]] = []
    trans = use is FragUse.B and layout is FragLayout.ROW
    if trans and per != 2:
        return None  # .trans transposes 16-bit elements only
    for h in range(_halves(use)):
        for j in range(regs):
            # memory (row, element) of each of lane l's elements of register j
            want = coords[:, j * per:(j + 1) * per] + np.array([0, 8 * h])
            if layout is FragLayout.COL:
                want = want[..., ::-1]
            origin = want.reshape(-1, 2).min(axis=0)
            if trans:  # element (k, n) comes from memory row k: the word transposed
                got = origin + np.stack([
                    2 * owner[:, 1:2] + np.arange(per)[None, :],
                    np.broadcast_to(owner[:, 0:1], (move.lanes, per))], axis=-1)
            else:
                got = origin + np.stack([
                    np.broadcast_to(owner[:, 0:1], (move.lanes, per)),
                    per * owner[:, 1:2] + np.arange(per)[None, :]], axis=-1)
            if not np.array_equal(got, want):
                return None
            blocks.append((int(origin[0]), int(origin[1])))
    return blocks, trans


class _Lowering:
    def __init__(self, kernel: ir.Kernel, places: dict[str, wgmma.CoreLayout]) -> None:
        self.kernel = kernel
        self.places = places  # arrays laid out for wgmma
        self.wide_b: dict[str, ir.FragLoad] = {}  # a wgmma B fragment -> its last load
        self.shared_a: dict[str, ir.FragLoad] = {}  # a wgmma A read from shared -> its load
        a_frags = {d.name for d in walk(kernel.body)
                   if isinstance(d, ir.FragDecl) and d.use is FragUse.A}
        self.a_in_place = {s.frag for s in walk(kernel.body) if isinstance(s, ir.FragLoad)
                           and s.array in places and s.frag in a_frags}  # no ldmatrix
        self.frags: dict[str, ir.FragDecl] = {}
        self.arrays: dict[str, ir.ArrayDecl | ir.ArrayParam] = {
            p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}
        self.fresh = 0

    def block(self, stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        for s in stmts:
            out.extend(self.stmt(s))
        return tuple(out)

    def stmt(self, s: ir.Stmt) -> list[ir.Stmt]:
        match s:
            case ir.For(body=body) | ir.While(body=body):
                return [s.model_copy(update={"body": self.block(body)})]
            case ir.If(then=then, orelse=orelse):
                return [s.model_copy(update={"then": self.block(then),
                                             "orelse": self.block(orelse)})]
            case ir.WarpRoles():
                return [with_blocks(s, self.block)]
            case ir.ArrayDecl(name=name):
                if name in self.places and self.places[name].swizzle:
                    s = s.model_copy(update={"align": max(s.align, wgmma.SWIZZLE_BYTES)})
                self.arrays[name] = s
                return [s]
            case ir.FragDecl():
                return self.decl(s)
            case ir.FragFill(frag=name, value=value):
                return self.fill(name, value, s.line)
            case ir.FragLoad() | ir.FragStore():
                return self.move(s)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                return self.mul_add(d, a, b, c, s.line)
            case ir.FragAdd(d=d, a=a, b=b, subtract=subtract):
                return self.frag_add(d, a, b, subtract, s.line)
        return [s]

    def facts(self, d: ir.FragDecl) -> atoms.MmaAtomFacts:
        """The atom whose lane layouts hold fragment ``d`` (an accumulator's layout is the
        same for every atom of its type; an operand's depends on the reduction depth)."""
        for facts in atoms.MMA.values():
            if d.use is FragUse.ACCUMULATOR and facts.accumulator is d.elem:
                return facts
            if d.use is not FragUse.ACCUMULATOR and facts.operand is d.elem and \
                    facts.k == d.shape.k:
                return facts
        takes = ("f32 and s32 accumulators" if d.use is FragUse.ACCUMULATOR
                 else "f16, bf16, u8 and s8 operands")
        raise EmitError(f"fragment {d.name!r} of {d.elem}: mma.sync takes {takes}")

    def decl(self, d: ir.FragDecl) -> list[ir.Stmt]:
        shape = d.shape
        wgmma_n = shape.n % atoms.WGMMA.n_step == 0 and shape.n <= atoms.WGMMA.n_max
        wide = shape.n > EDGE and shape.m == EDGE and wgmma_n and (
            (shape.k == atoms.WGMMA.k and d.elem in (ElemType.F16, ElemType.BF16, ElemType.F32))
            or (shape.k == atoms.WGMMA.depth(ElemType.U8)
                and d.elem in (ElemType.U8, ElemType.I8, ElemType.I32)))
        if ((shape.m, shape.n) != (EDGE, EDGE) and not wide) or not any(
                f.k == shape.k and d.elem in (f.operand, f.accumulator)
                for f in atoms.MMA.values()):
            raise EmitError(f"fragment {d.name!r} is of a {shape.m}x{shape.n}x{shape.k} "
                            f"multiply-add of {d.elem}; CUDA multiplies 16x16x16 fragments "
                            "(m16n8k16), 8-bit ones also 16x16x32 (m16n8k32), 16-bit ones "
                            "16 x n x 16 and 8-bit ones 16 x n x 32 with n a multiple of 8 up "
                            "to 256 (wgmma), and has no 8x8x8 float shape")
        facts = self.facts(d)
        self.frags[d.name] = d
        if (d.use is FragUse.B and wide) or d.name in self.a_in_place:
            return []  # wgmma reads it from shared memory where it is loaded from
        if d.use is FragUse.ACCUMULATOR:
            size = _halves(d.use, shape.n) * facts.c.values
            return [ir.ArrayDecl(name=d.name, elem=d.elem, size=size, space=MemSpace.LOCAL,
                                 line=d.line)]
        words = _halves(d.use) * facts.registers(_OPERAND[d.use])
        return [ir.ArrayDecl(name=d.name, elem=U32, size=words, space=MemSpace.LOCAL,
                             line=d.line)]

    def frag(self, name: str) -> ir.FragDecl:
        if name not in self.frags:
            raise EmitError(f"{name!r} is not a fragment declared before its use")
        return self.frags[name]

    def loop_var(self) -> str:
        self.fresh += 1
        return f"sk_r{self.fresh}"

    def fill(self, name: str, value: ir.Expr, line: int | None) -> list[ir.Stmt]:
        d = self.frag(name)
        if d.use is not FragUse.ACCUMULATOR:
            raise EmitError(f"only accumulators are filled on CUDA, not {name!r}")
        i = self.loop_var()
        size = _halves(d.use, d.shape.n) * self.facts(d).c.values
        return [ir.For(var=i, start=const(0), stop=const(size), step=const(1), line=line,
                       body=(ir.Store(array=name, index=var(i), value=value, line=line),))]

    def frag_add(self, d: str, a: str, b: str, subtract: bool, line: int | None
                 ) -> list[ir.Stmt]:
        """``d = a + b`` (``a - b`` with ``subtract``): a loop over the lane's accumulator
        elements (the IR checker made the three accumulators of one type, so of one lane
        layout)."""
        fd = self.frag(d)
        i = self.loop_var()
        total = binary(BinOp.SUB if subtract else BinOp.ADD,
                       ir.Load(array=a, index=var(i), type=fd.elem),
                       ir.Load(array=b, index=var(i), type=fd.elem))
        size = _halves(fd.use, fd.shape.n) * self.facts(fd).c.values
        return [ir.For(var=i, start=const(0), stop=const(size), step=const(1), line=line,
                       body=(ir.Store(array=d, index=var(i), value=total, line=line),))]

    def move(self, s: ir.FragLoad | ir.FragStore) -> list[ir.Stmt]:
        d = self.frag(s.frag)
        facts = self.facts(d)
        load = isinstance(s, ir.FragLoad)
        if not load and d.use is not FragUse.ACCUMULATOR:
            raise EmitError(f"only accumulators are stored on CUDA, not {s.frag!r}")
        if isinstance(s, ir.FragLoad) and d.use is FragUse.B and d.shape.n > EDGE:
            wgmma.wide_b_load(s, self.arrays.get(s.array))  # its array is in self.places
            self.wide_b[s.frag] = s
            return []
        if isinstance(s, ir.FragLoad) and s.frag in self.a_in_place:
            self.shared_a[s.frag] = s  # wgmma reads it where it lies (wgmma.wgmma_arrays)
            return []
        if isinstance(s, ir.FragLoad) and d.use is not FragUse.ACCUMULATOR:
            served = self.ldmatrix(s, d, facts)
            if served is not None:
                return [served]

        def at(row: ir.Expr, col: ir.Expr) -> ir.Expr:
            major, minor = (row, col) if s.layout is FragLayout.ROW else (col, row)
            return add(add(s.offset, mul(major, s.stride)), minor)

        places = _places(facts, d.use, d.shape.n)
        elements = [(row.expr(), col.expr()) for row, col in places]
        if (d.use is FragUse.ACCUMULATOR and isinstance(s, ir.FragStore) and d.elem.bits == 32
                and _paired(places, s)):
            return _pair_stores(d, s, [at(row, col) for row, col in elements[::2]])
        if d.use is FragUse.ACCUMULATOR:
            out: list[ir.Stmt] = []
            for slot, (row, col) in enumerate(elements):
                if load:
                    value = ir.Load(array=s.array, index=at(row, col), type=d.elem)
                    out.append(ir.Store(array=d.name, index=const(slot), value=value,
                                        line=s.line))
                else:
                    value = ir.Load(array=d.name, index=const(slot), type=d.elem)
                    out.append(ir.Store(array=s.array, index=at(row, col), value=value,
                                        line=s.line))
            return out
        # Operands: each 32-bit register packs 32/bits elements, the first in the low bits.
        bits = d.elem.bits
        per = 32 // bits
        word_of = ElemType.U16 if bits == 16 else ElemType.U8
        stores: list[ir.Stmt] = []
        for reg in range(len(elements) // per):
            packed: ir.Expr | None = None
            for part in range(per):
                row, col = elements[reg * per + part]
                element = ir.Load(array=s.array, index=at(row, col), type=d.elem)
                raw: ir.Expr = ir.Cast(x=ir.Bitcast(x=element, type=word_of)
                                       if d.elem is not word_of else element, type=U32)
                if part:
                    raw = binary(BinOp.SHL, raw, const(part * bits, U32))
                packed = raw if packed is None else binary(BinOp.OR, packed, raw)
            assert packed is not None
            stores.append(ir.Store(array=d.name, index=const(reg), value=packed, line=s.line))
        return stores

    def ldmatrix(self, s: ir.FragLoad, d: ir.FragDecl, facts: atoms.MmaAtomFacts
                 ) -> ir.Ldmatrix | None:
        """The fragment load as one ldmatrix, when the source is 16-byte aligned shared rows
        and the instruction delivers the atom's register images."""
        arr = self.arrays.get(s.array)
        if not isinstance(arr, ir.ArrayDecl) or arr.space is not MemSpace.SHARED:
            return None
        per_row = atoms.LDMATRIX.row_bytes * 8 // d.elem.bits  # elements in one row
        if arr.align % atoms.LDMATRIX.row_bytes or divisor(s.offset) % per_row or \
                divisor(s.stride) % per_row:
            return None
        plan = ldmatrix_blocks(facts, d.use, s.layout)
        if plan is None:
            return None
        blocks, trans = plan
        count = len(blocks)
        if count not in atoms.LDMATRIX.counts:
            return None
        matrix, row = tile.provider_coordinates(var(_LANE), count)

        def origin(m: int) -> ir.Expr:
            r0, c0 = blocks[m]
            return add(mul(const(r0), s.stride), const(c0))

        start: ir.Expr = origin(count - 1)
        for m in range(count - 2, -1, -1):
            start = ir.Select(cond=binary(BinOp.EQ, matrix, const(m)), a=origin(m), b=start,
                              type=I32)
        address = add(add(s.offset, start), mul(row, s.stride))
        return ir.Ldmatrix(dst=d.name, offset=0, src=s.array, address=address, count=count,
                           trans=trans, line=s.line)

    def mul_add(self, d: str, a: str, b: str, c: str, line: int | None) -> list[ir.Stmt]:
        fd, fa, fb = self.frag(d), self.frag(a), self.frag(b)
        if fb.shape.n > EDGE:
            return [self.wgmma(fd, fa, fb, c, line)]
        facts = atoms.mma_for(fa.elem, fd.elem, fa.shape.k)
        if facts is None or fb.elem is not fa.elem:
            raise EmitError(f"mma.sync has no form multiplying {fa.elem} x {fb.elem} "
                            f"{fa.shape.k} deep into {fd.elem}")
        b_regs, c_values = facts.registers("b"), facts.c.values
        return [ir.Mma(atom=facts.atom, d=d, a=a, b=b, c=c, d_offset=h * c_values,
                       b_offset=h * b_regs, c_offset=h * c_values, line=line)
                for h in range(2)]  # columns 0-7, then 8-15

    def wgmma(self, fd: ir.FragDecl, fa: ir.FragDecl, fb: ir.FragDecl, c: str,
              line: int | None) -> ir.Wgmma:
        """A multiply-add by a 16 x n B fragment: one ``wgmma`` of the warpgroup, B read where
        its last load pointed, in the array's core layout (``backends.cuda.wgmma``)."""
        if c != fd.name or fa.elem is not fb.elem or \
                fa.elem not in (ElemType.F16, ElemType.BF16, ElemType.U8, ElemType.I8) or \
                fd.elem is not atoms.WGMMA.accumulator(fa.elem):
            raise EmitError(f"wgmma accumulates f16 or bf16 products into f32, u8 or i8 ones "
                            f"into i32, in place; {fd.name!r} = {fa.name!r} x {fb.name!r} + "
                            f"{c!r} is not that")
        group = atoms.WGMMA.threads
        block = self.kernel.block
        if block is None or block[1:] != (1, 1) or block[0] % group:
            raise EmitError(f"wgmma is issued by whole warpgroups: kernel {self.kernel.name!r} "
                            f"runs blocks of {block}, not a multiple of {group} invocations")
        load = self.wide_b.get(fb.name)
        if load is None:
            raise EmitError(f"B fragment {fb.name!r} is multiplied before it is loaded")
        layout = self.places[load.array]
        a, a_index, a_descriptor = fa.name, None, None
        a_core_m = wgmma.SWIZZLE_ROW * wgmma.CORE  # elements between A's 8-row groups
        if fa.name in self.shared_a and fa.elem.bits == 8:  # K-major core matrices
            a_load = self.shared_a[fa.name]
            a_layout = self.places[a_load.array]
            warp = binary(BinOp.REM, ir.BuiltinValue(which=Builtin.SUBGROUP_ID),
                          const(atoms.WGMMA.warps))
            if a_layout.swizzle != layout.swizzle:
                raise EmitError(f"wgmma reads 8-bit A and B in one swizzle mode; "
                                f"{a_load.array!r} and {load.array!r} lie in two")
            a, a_core_m = a_load.array, a_layout.core_n
            rows = atoms.WGMMA.m // atoms.WGMMA.warps // wgmma.CORE  # 8-row groups per warp
            a_index = binary(BinOp.SUB, a_layout.start(a_load.offset),
                             mul(warp, const(rows * a_core_m)))
            a_descriptor = a_layout.descriptor()
        elif fa.name in self.shared_a:  # warp w's rows start 16w rows into the warpgroup's
            a_load = self.shared_a[fa.name]
            warps = atoms.WGMMA.warps
            warp = binary(BinOp.REM, ir.BuiltinValue(which=Builtin.SUBGROUP_ID), const(warps))
            a = a_load.array
            a_index = binary(BinOp.SUB, self.places[a].logical(a_load.offset),
                             mul(warp, const(atoms.WGMMA.m // warps * wgmma.SWIZZLE_ROW)))
            k_major = atoms.GMMA_K_SW128  # its 16 columns in one 128-byte row of an atom
            leading, stride = k_major.descriptor_strides(
                along_mn=a_core_m * k_major.element_bytes, along_k=k_major.bytes)
            a_descriptor = ir.MatrixDescriptor(leading_bytes=leading, stride_bytes=stride,
                                               mode=k_major.mode)
        return ir.Wgmma(elem=fa.elem, n=fb.shape.n, d=fd.name, a=a, b=load.array,
                        b_index=layout.start(load.offset), core_k=layout.core_k,
                        core_n=layout.core_n, swizzle=128 if layout.swizzle else 0,
                        a_index=a_index, a_core_m=a_core_m, line=line,
                        b_descriptor=layout.descriptor(), a_descriptor=a_descriptor)
