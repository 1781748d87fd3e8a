"""The conversion pre-pass: f32 operands rounded once into 16-bit temporaries by a kernel of
their own, then multiplied by the rewrite of a GEMM that reads the temporaries.

A lowering that rounds f32 operands to one 16-bit term (``F16_operands``, ``Bf16_operands``)
converts each element as it stages it, inside the reduction loop, and a warpgroup schedule,
which reads its operands from shared memory as they lie in memory, cannot take them at all.
``plan`` builds the alternative: a conversion kernel that writes the elements of A and of B
that the GEMM reads, rounded to the lowering's type (the same ``Cast`` the staged conversion
is), into two temporaries, and the rewrite of the same GEMM reading those. The GEMM kernel
applies the region's checks and the padding of partial tiles exactly as the rewrite of the
original does (out-of-range elements of A staged as -0.0, of B as +0.0), so the pre-pass
converts the region's elements only:

* A's temporary holds, per layer, ``me`` rows of ``lda = ceil(d / 8) * 8`` elements: element
  ``(row, k)`` is ``A[row, k_start + k]`` rounded, for ``k < d``; B's holds per layer ``d``
  rows of ``ldb = ceil(ne / 8) * 8``: element ``(k, col)`` is ``B[k_start + k, col]`` rounded.
  Rows start 16-byte aligned so that the GEMM's staged copies take them 16 bytes at a time;
  the elements past ``d`` (``ne``) in a row are never written nor read.
* An operand whose address depends on the batch has ``ze`` layers, another one.
* A lowering that splits f32 operands into several 16-bit terms (``Bf16x3_operands``) gets a
  temporary per term of each operand, each laid out as above (``split_gemm``), where the
  policy splits them before pipelined schedules (``Staging.prepass_terms``).

The cost is one read of each f32 element and one write of each of its 16-bit terms (6
bytes an element of A and of B, 10 for three terms), against the GEMM's ``2 * me * ne * d``
operations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from sarek import ir, ir_check, packed_store
from sarek.gemm import Access, Gemm, SplitTerms
from sarek.ir import BinOp, Builtin, ElemType
from sarek.ir_build import add, binary, const, is_literal, mul, round_up, var
from sarek.launch import Launch, Scratch, Steps
from sarek.matrix_mapping import Region
from sarek.matrix_scheme import PLANE_ALIGN, PLANE_PHASES, Lowering, scheme_for
from sarek.schedule import Schedule
from sarek.stage_copy import part
from sarek.staging import Staging

ROW_ALIGN = 8
"""Elements a temporary's rows are padded to (16 bytes of a 16-bit type)."""
BLOCK = 256
"""Invocations per block of the conversion kernel."""
PER_INVOCATION = 8
"""Elements each invocation converts: loads in flight enough to keep memory busy (8 converted
A and B at 4096^3 in 57 to 58 µs against 62 to 63 for 4 and 56 to 65 for 16, one run)."""
MOST_Y = 65535
"""Blocks a CUDA grid may have along y."""
I32 = ElemType.I32
_MOST = 2**31 - 1 - BLOCK  # elements of a temporary: every index stays in i32


def applies(gemm: Gemm, lowering: Lowering, schedule: Schedule,
            staging: Staging) -> bool:
    """Whether ``schedule`` multiplies ``gemm`` under ``lowering`` after a pre-pass only: the
    operands are f32, the lowering rounds them to one 16-bit term, and the schedule reads
    16-bit operands as they lie in memory (a warpgroup one), or is a pipelined one under a
    policy that converts before every pipelined schedule (``Staging.prepass_pipelined``); or
    the lowering splits f32 operands into several 16-bit terms and the schedule is a
    pipelined one (a warpgroup one too) under a policy that splits them before
    (``Staging.prepass_terms``): each term goes into a temporary of its own; or the operands
    are int32 under the byte planes and the schedule a warpgroup one, where the target
    multiplies bytes (not ``Staging.whole_int32``): the pre-pass splits them into stacked byte
    planes (``plane_kernel``)."""
    if gemm.stacked_planes or gemm.split_terms is not None:
        return False
    if _planes(gemm, lowering):  # int32 under the byte planes: split into stacked planes
        return schedule.warpgroup and not staging.whole_int32
    scheme = scheme_for(lowering, gemm.operand_elt, staging.whole_int32)
    if gemm.operand_elt is not ElemType.F32 or scheme.operand.bits != 16:
        return False
    if scheme.terms != ("",):  # several terms: split by the pre-pass, staged as they are
        return staging.prepass_terms and schedule.stages > 1
    return schedule.warpgroup or (staging.prepass_pipelined and schedule.stages > 1)


def _planes(gemm: Gemm, lowering: Lowering) -> bool:
    return lowering is Lowering.INT32_BYTE_PLANES and gemm.operand_elt is I32


def refusal(gemm: Gemm, region: Region) -> str | None:
    """Why the pre-pass cannot convert ``gemm``'s operands over ``region``, or None: a
    temporary would hold more elements than a 32-bit index reaches, or its grid would have
    more blocks along y than a launch may (rows of 67 million elements)."""
    a, b = sizes(gemm, region)
    if max(a, b) > _MOST or region.me + region.d + region.ne > _MOST:
        return (f"the converted operands would take {a} and {b} elements, more than the "
                f"pre-pass's 32-bit indices reach ({_MOST})")
    rows = -(-_plane_depth(region.d) // (WARP * PLANE_WORD)) if gemm.operand_elt is I32 \
        else -(-max(region.d, region.ne) // (BLOCK * PER_INVOCATION))
    if rows > MOST_Y:
        return (f"rows of {max(region.d, region.ne)} elements need more than {MOST_Y} "
                f"blocks of the pre-pass along y")
    return None


def _ceil(x: int) -> int:
    return -(-x // ROW_ALIGN) * ROW_ALIGN


def sizes(gemm: Gemm, region: Region) -> tuple[int, int]:
    """Elements of A's and of B's temporary over ``region`` (int32 operands: their stacked
    byte planes)."""
    layers_a = region.ze if _batched(gemm.a) else min(region.ze, 1)
    layers_b = region.ze if _batched(gemm.b) else min(region.ze, 1)
    if gemm.operand_elt is I32:
        row = BLOCKS * _plane_depth(region.d)
        return layers_a * region.me * row, layers_b * region.ne * row
    return layers_a * region.me * _ceil(region.d), layers_b * region.d * _ceil(region.ne)


def _batched(access: Access) -> bool:
    return not is_literal(access.batch_stride, 0)


def _minus(x: ir.Expr) -> ir.Expr:
    return const(0) if is_literal(x, 0) else binary(BinOp.SUB, const(0), x)


def converted_gemm(gemm: Gemm, names: tuple[str, str], elem: ElemType,
                   region_vars: Mapping[str, ir.Expr]) -> Gemm:
    """``gemm`` reading A and B from the temporaries called ``names`` (of ``elem``), laid out
    as the module docstring says; ``region_vars`` are the region's values ``me``, ``ne``,
    ``d`` as the GEMM kernel names them."""
    me, ne, d = region_vars["me"], region_vars["ne"], region_vars["d"]
    lda, ldb = round_up(d, ROW_ALIGN), round_up(ne, ROW_ALIGN)
    a = Access(names[0], elem, offset=_minus(gemm.k_start), row_stride=lda, col_stride=const(0),
               batch_stride=mul(me, lda) if _batched(gemm.a) else const(0),
               red_stride=const(1))
    b = Access(names[1], elem, offset=_minus(mul(gemm.k_start, ldb)), row_stride=const(0),
               col_stride=const(1),
               batch_stride=mul(d, ldb) if _batched(gemm.b) else const(0), red_stride=ldb)
    return replace(gemm, a=a, b=b)


def split_gemm(gemm: Gemm, names: tuple[tuple[str, ...], tuple[str, ...]], elem: ElemType,
               region_vars: Mapping[str, ir.Expr]) -> Gemm:
    """``gemm`` reading its operands' terms from the temporaries called ``names`` (A's, then
    B's, hi first; each laid out as ``converted_gemm``'s): A and B are the first terms and
    ``Gemm.split_terms`` has every term and the original operands."""
    each = [converted_gemm(gemm, (a, b), elem, region_vars)
            for a, b in zip(*names, strict=True)]
    split = SplitTerms(a=tuple(g.a for g in each), b=tuple(g.b for g in each),
                       original_a=gemm.a, original_b=gemm.b)
    return replace(each[0], split_terms=split)


def conversion_kernel(original: ir.Kernel, gemm: Gemm, params: tuple[ir.Param, ...],
                      names: tuple[tuple[str, ...], tuple[str, ...]], elem: ElemType,
                      region_names: tuple[str, ...]) -> ir.Kernel:
    """The pre-pass, launched as ``conversion_grid(region)`` blocks of ``BLOCK``: block
    ``(x, y, z)`` converts the ``BLOCK * PER_INVOCATION`` elements from ``y * BLOCK *
    PER_INVOCATION`` on of row ``x`` of layer ``z``, A's ``me`` rows first, then B's ``d`` (a
    temporary of one layer takes layer 0 only), each invocation ``PER_INVOCATION`` of them
    ``BLOCK`` apart: it reads all of its elements before it converts and stores any, so that
    each has that many loads in flight whatever code the conversion compiles to. ``names``
    are A's temporaries and B's, one per term of the lowering, term ``t`` of an element
    being ``sarek.stage_copy.part(x, t, elem)`` (the value rounded, for one term), as a
    staged copy splits it. ``params`` are the kernel's parameters (the original's, the
    region's values, the temporaries). Its indices are products and sums, no divisions by
    run-time values."""
    me, ne, d = (var(region_names[i]) for i in (0, 1, 3))
    lda, ldb = var("sk_lda"), var("sk_ldb")
    row, layer = var("sk_row"), var("sk_layer")

    def layers_ok(access: Access) -> ir.Expr:
        return const(True, ElemType.BOOL) if _batched(access) else binary(
            BinOp.EQ, layer, const(0))

    def side(access: Access, terms: tuple[str, ...], r: ir.Expr, length: ir.Expr, ld: ir.Expr,
             layer_rows: ir.Expr) -> tuple[ir.Stmt, ...]:
        first = layer if _batched(access) else const(0)
        start = mul(add(mul(first, layer_rows), r), ld)
        loads: list[ir.Stmt] = []
        stores: list[ir.Stmt] = []
        for j in range(PER_INVOCATION):
            col = var(f"sk_col{j}")
            inside = binary(BinOp.LT, col, length)
            k, c = (col, const(0)) if access is gemm.a else (r, col)
            load = ir.Load(array=access.array,
                           index=access.address(const(0) if access is gemm.b else r, c, layer,
                                                add(gemm.k_start, k)),
                           type=access.elem)
            loads.append(ir.Let(name=f"sk_x{j}", type=access.elem, value=ir.Select(
                cond=inside, a=load, b=ir.Const(value=0.0, type=access.elem),
                type=access.elem)))
            stores.append(ir.If(cond=inside, then=tuple(ir.Store(
                array=name, index=add(var("sk_start"), col),
                value=part(var(f"sk_x{j}", access.elem), t, elem))
                for t, name in enumerate(terms))))
        return (ir.If(cond=layers_ok(access), then=(
            ir.Let(name="sk_start", type=I32, value=start), *loads, *stores)),)

    kb = var("sk_kb")
    base = mul(ir.BuiltinValue(which=Builtin.BLOCK_IDX_Y), const(BLOCK * PER_INVOCATION))
    body: tuple[ir.Stmt, ...] = (
        ir.Let(name="sk_row", type=I32, value=ir.BuiltinValue(which=Builtin.BLOCK_IDX_X)),
        *(ir.Let(name=f"sk_col{j}", type=I32, value=add(
            base, add(ir.BuiltinValue(which=Builtin.THREAD_IDX_X), const(j * BLOCK))))
          for j in range(PER_INVOCATION)),
        ir.Let(name="sk_layer", type=I32, value=ir.BuiltinValue(which=Builtin.BLOCK_IDX_Z)),
        ir.Let(name="sk_lda", type=I32, value=round_up(d, ROW_ALIGN)),
        ir.Let(name="sk_ldb", type=I32, value=round_up(ne, ROW_ALIGN)),
        ir.If(cond=binary(BinOp.LT, row, me),
              then=side(gemm.a, names[0], row, d, lda, me),
              orelse=(ir.Let(name="sk_kb", type=I32, value=binary(BinOp.SUB, row, me)),
                      *side(gemm.b, names[1], kb, ne, ldb, d))),
    )
    split = "_terms" if len(names[0]) > 1 else ""
    made = ir.Kernel(name=f"{original.name}_to_{elem.value}{split}", params=params, body=body,
                     block=(BLOCK, 1, 1))
    ir_check.ensure_valid(made)
    return made


A_PLANES = tuple(p for phase in PLANE_PHASES for p, _ in phase)
"""The A plane of each block of a row of the stacked planes (``PLANE_PHASES``' order)."""
B_PLANES = tuple(q for phase in PLANE_PHASES for _, q in phase)
"""The B plane of each block of a column of the stacked planes."""
BLOCKS = len(A_PLANES)
PLANE_WORD = 8
"""Consecutive k an invocation splits: one plane's bytes of them are one 8-byte store."""
WARP = 32
"""Invocations of one warp, which split one row of A or column of B together."""
LINES = BLOCK // WARP
"""Rows of A or columns of B a block of the byte planes' pre-pass splits, one per warp."""
U64 = ElemType.U64


def _plane_depth(d: int) -> int:
    return -(-d // PLANE_ALIGN) * PLANE_ALIGN


def plane_kernel(original: ir.Kernel, gemm: Gemm, params: tuple[ir.Param, ...],
                 names: tuple[str, str], region_names: tuple[str, ...]) -> ir.Kernel:
    """The pre-pass of int32 operands under the byte planes, launched as
    ``plane_grid(region)`` blocks of ``BLOCK``: each element's four byte planes (of its two's
    complement pattern), stacked along k as ``PLANE_PHASES`` orders them. A's temporary holds
    per layer ``me`` rows of ``10 * dp`` bytes (``dp`` the depth rounded up to
    ``PLANE_ALIGN``), block ``b`` of row ``r`` holding plane ``A_PLANES[b]`` of ``A[r, k]``
    at ``b * dp + k``; B's holds per layer ``ne`` rows, one per column of B (K-major, as
    ``wgmma`` reads 8-bit B), block ``b`` plane ``B_PLANES[b]`` of ``B[k, c]``; bytes past the
    depth are zero. Block ``(x, y, z)`` splits ``LINES`` rows of A (blocks ``x <
    ceil(me / LINES)``) or columns of B (the others), one per warp, over the ``WARP *
    PLANE_WORD`` k from ``y`` times that: each invocation loads its ``PLANE_WORD``
    consecutive k, then stores each plane's bytes of them as one ``StorePacked`` into each
    block of its plane, so that a warp's stores are one contiguous run of every block (B's
    loads, a column's k apart, meet in the cache the block's eight columns share)."""
    me, ne, d = (var(region_names[i]) for i in (0, 1, 3))
    dp, ld, layer = var("sk_dp"), var("sk_ld"), var("sk_layer")
    tid = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)
    bx = ir.BuiltinValue(which=Builtin.BLOCK_IDX_X)
    by = ir.BuiltinValue(which=Builtin.BLOCK_IDX_Y)
    line, k = var("sk_line"), var("sk_k")
    a_blocks = binary(BinOp.DIV, add(me, const(LINES - 1)), const(LINES))

    def layers_ok(access: Access) -> ir.Expr:
        return const(True, ElemType.BOOL) if _batched(access) else binary(
            BinOp.EQ, layer, const(0))

    def side(access: Access, name: str, planes: tuple[int, ...], extent: ir.Expr,
             first: ir.Expr) -> ir.If:
        """Line ``sk_line`` (a row of A, a column of B) of ``access`` into ``name``."""
        loads: list[ir.Stmt] = []
        for j in range(PLANE_WORD):
            kj = add(k, const(j))
            row, col = (line, const(0)) if access is gemm.a else (const(0), line)
            load = ir.Load(array=access.array, type=I32,
                           index=access.address(row, col, layer, add(gemm.k_start, kj)))
            loads.append(ir.Let(name=f"sk_x{j}", type=I32, value=ir.Select(
                cond=binary(BinOp.LT, kj, d), a=load, b=const(0), type=I32)))
        words = [ir.Let(name=f"sk_w{p}", type=U64, value=_plane_word(p)) for p in range(4)]
        start = add(mul(add(mul(first, extent), line), ld), k)
        stores = [ir.StorePacked(array=name, index=add(start, mul(const(b), dp)),
                                 value=var(f"sk_w{p}", U64)) for b, p in enumerate(planes)]
        inside = binary(BinOp.LAND, binary(BinOp.LT, line, extent), binary(BinOp.LT, k, dp))
        return ir.If(cond=binary(BinOp.LAND, layers_ok(access), inside),
                     then=(*loads, *words, *stores))

    lane, warp = binary(BinOp.AND, tid, const(WARP - 1)), binary(BinOp.SHR, tid, const(5))
    body: tuple[ir.Stmt, ...] = (
        ir.Let(name="sk_layer", type=I32, value=ir.BuiltinValue(which=Builtin.BLOCK_IDX_Z)),
        ir.Let(name="sk_dp", type=I32, value=round_up(d, PLANE_ALIGN)),
        ir.Let(name="sk_ld", type=I32, value=mul(const(BLOCKS), dp)),
        ir.Let(name="sk_k", type=I32, value=add(mul(by, const(WARP * PLANE_WORD)),
                                                mul(lane, const(PLANE_WORD)))),
        ir.Let(name="sk_ab", type=I32, value=a_blocks),
        ir.If(cond=binary(BinOp.LT, bx, var("sk_ab")),
              then=(ir.Let(name="sk_line", type=I32, value=add(mul(bx, const(LINES)), warp)),
                    side(gemm.a, names[0], A_PLANES, me,
                         layer if _batched(gemm.a) else const(0))),
              orelse=(ir.Let(name="sk_line", type=I32, value=add(mul(binary(
                  BinOp.SUB, bx, var("sk_ab")), const(LINES)), warp)),
                      side(gemm.b, names[1], B_PLANES, ne,
                           layer if _batched(gemm.b) else const(0)))),
    )
    made = ir.Kernel(name=f"{original.name}_to_planes", params=params, body=body,
                     block=(BLOCK, 1, 1))
    ir_check.ensure_valid(made)
    return made


def _plane_word(plane: int) -> ir.Expr:
    """Plane ``plane`` of ``sk_x0`` .. (``PLANE_WORD`` of them) as one word, k order from
    the least significant byte."""
    bytes_ = []
    for j in range(PLANE_WORD):
        u = ir.Cast(x=ir.Cast(x=var(f"sk_x{j}", I32), type=ElemType.U32), type=U64)
        bytes_.append(binary(BinOp.AND, binary(BinOp.SHR, u, const(8 * plane, U64))
                             if plane else u, const(255, U64)))
    return packed_store.word(bytes_, 8)


def plane_grid(region: Region) -> tuple[int, int, int]:
    """The byte planes' pre-pass grid over ``region`` (``plane_kernel``): a block per
    ``LINES`` rows of A, then per ``LINES`` columns of B, along x; per ``WARP * PLANE_WORD``
    k along y; a layer per batch (none when the region is empty)."""
    if not region.me or not region.ne or not region.d or not region.ze:
        return 0, 0, 0
    dp = _plane_depth(region.d)
    return (-(-region.me // LINES) + -(-region.ne // LINES),
            -(-dp // (WARP * PLANE_WORD)), region.ze)


def stacked_gemm(gemm: Gemm, names: tuple[str, str], region_vars: Mapping[str, ir.Expr]
                 ) -> Gemm:
    """``gemm`` reading the stacked byte planes ``plane_kernel`` wrote into the temporaries
    called ``names`` (``Gemm.stacked_planes``): A at ``row * 10 dp + k``, B at ``col * 10 dp
    + k`` (K-major), plus the layer; ``region_vars`` are the region's values ``me``, ``ne``,
    ``d`` as the GEMM kernel names them."""
    me, ne, d = region_vars["me"], region_vars["ne"], region_vars["d"]
    ld = mul(const(BLOCKS), round_up(d, PLANE_ALIGN))
    a = Access(names[0], ElemType.U8, offset=_minus(gemm.k_start), row_stride=ld,
               col_stride=const(0), batch_stride=mul(me, ld) if _batched(gemm.a) else const(0),
               red_stride=const(1))
    b = Access(names[1], ElemType.U8, offset=_minus(gemm.k_start), row_stride=const(0),
               col_stride=ld, batch_stride=mul(ne, ld) if _batched(gemm.b) else const(0),
               red_stride=const(1))
    return replace(gemm, a=a, b=b, stacked_planes=True)


def conversion_grid(region: Region) -> tuple[int, int, int]:
    """The pre-pass's grid over ``region``: a block column per row of A and of B, enough
    blocks along each for the longer of the two rows, a layer per batch (none when one of the
    temporaries is empty, nothing to convert)."""
    if not region.me or not region.ne or not region.d or not region.ze:
        return 0, 0, 0
    return region.me + region.d, -(-max(region.d, region.ne) // (BLOCK * PER_INVOCATION)), \
        region.ze


@dataclass(frozen=True)
class Plan:
    """A rewrite that runs as a sequence: the conversion's launch, then the GEMM's (``steps``),
    and the GEMM its last launch computes (reading the temporaries)."""

    steps: Steps
    gemm: Gemm


def plan(original: Launch, gemm: Gemm, region: Region, lowering: Lowering, subgroup: int,
         frag: int, staging: Staging, schedule: Schedule) -> Plan:
    """The pre-pass and the rewritten GEMM for ``original`` (whose recognized nest is ``gemm``
    and region ``region``) under ``lowering``, ``subgroup``, ``frag``, ``staging`` and
    ``schedule``. Both kernels take the original's parameters (renamed as the rewrite renames
    them), then the region's five values, then the two temporaries; ``RewriteError`` where the
    rewrite refuses the converted GEMM, or the pre-pass the region (``refusal``)."""
    from sarek import matrix_rewrite as mr
    from sarek.matrix_pattern import recognize

    why = refusal(gemm, region)
    if why is not None:
        raise mr.RewriteError(why)
    kernel = original.kernel
    renames = mr.user_renames(kernel)
    if renames:
        kernel = mr.renamed(kernel, renames)
        gemm = recognize(kernel)
    scheme = scheme_for(lowering, gemm.operand_elt, staging.whole_int32)
    elem = scheme.operand
    planes = _planes(gemm, lowering)
    terms = ("",) if planes else scheme.terms  # a temporary per term of each operand
    extra = mr.region_names(kernel)
    taken = {p.name for p in kernel.params} | set(extra)
    names: list[tuple[str, ...]] = []
    for operand in (gemm.a.array, gemm.b.array):
        own: list[str] = []
        for term in terms:
            name = f"{operand}_{elem.value}{'_' + term if term else ''}"
            while name in taken:
                name += "_"
            taken.add(name)
            own.append(name)
        names.append(tuple(own))
    split = (names[0], names[1])
    pair = (names[0][0], names[1][0])
    temporaries = tuple(ir.ArrayParam(name=n, elem=elem) for n in (*names[0], *names[1]))
    region_params = tuple(ir.ScalarParam(name=n, elem=I32) for n in extra)
    internal = {n: var(f"sk_{n}") for n in ("me", "ne", "d")}

    def converted(values: Mapping[str, ir.Expr]) -> Gemm:
        if planes:
            return stacked_gemm(gemm, pair, values)
        if len(terms) > 1:
            return split_gemm(gemm, split, elem, values)
        return converted_gemm(gemm, pair, elem, values)

    rewritten = mr.kernel(kernel.model_copy(update={"params": (*kernel.params, *temporaries)}),
                          converted(internal), lowering, subgroup, frag, staging, schedule,
                          depth=region.d)
    params = (*kernel.params, *region_params, *temporaries)
    rewritten = rewritten.model_copy(update={"params": params})
    prepass = (plane_kernel(kernel, gemm, params, pair, extra) if planes
               else conversion_kernel(kernel, gemm, params, split, elem, extra))
    grid_of = plane_grid if planes else conversion_grid
    args = {**{renames.get(n, n): v for n, v in original.args.items()},
            **dict(zip(extra, region.args, strict=True))}
    size_a, size_b = sizes(gemm, region)
    block, grid = mr.launch_dims(subgroup, me=region.me, ne=region.ne, ze=region.ze,
                                 schedule=schedule)
    notes = {**original.notes, "lowering": lowering.value, "subgroup": subgroup, "frag": frag,
             "schedule": schedule.name, "prepass": prepass.name}
    steps = Steps((Launch(prepass, args, grid_of(region), (BLOCK, 1, 1)),
                   Launch(rewritten, args, grid, block, notes)),
                  (*(Scratch(n, elem, size_a) for n in names[0]),
                   *(Scratch(n, elem, size_b) for n in names[1])))
    return Plan(steps, converted({n: var(n2) for n, n2 in zip(
        ("me", "ne", "d"), (extra[0], extra[1], extra[3]), strict=True)}))
