"""Lowering for CUDA: multiply-adds whose B is one 16 x n fragment of the block, onto Hopper's
``wgmma`` (``sarek.schedule``'s warpgroup schedules).

``tests/device/test_wgmma_probe_h200.py`` settled what this relies on (``specs/simulator.md``
10): with A from registers, ``wgmma.mma_async m64nNk16`` is, warp by warp, ``D_w = A_w * B +
D_w`` with ``A_w`` in ``mma.sync.m16n8k16``'s A layout and ``D_w`` in its C layout per 8
columns, each 16-deep step the ``h200`` model's fused dot-add. So a ``FragMulAdd`` of a wave's
16x16 A and 16 x n accumulator by a B fragment the four waves of a warpgroup load from the
same place is one ``Wgmma`` (a block of 256 invocations is two warpgroups, each its own).

B must lie in shared memory in a layout ``wgmma`` reads, not in the padded rows the neutral
rewrite stages: this module moves it. The B array is written only by staged copies (``rows``
x ``cols`` tiles, buffer ``s`` at ``s * rows * pitch``) and read only by the B fragments, so
the lowering may place tile element ``(k, c)`` of a buffer elsewhere, every 16-byte chunk of a
row still whole (``CoreLayout``): in 128-byte swizzle atoms where a buffer is a whole number of
kilobytes, else in 8x8-element core matrices at ``8k + (c/8) * 8 * rows + c%8``. A fragment
load at the neutral offset ``o`` starts at ``o - o % B + w * ((o % B) / pitch)`` (``B = rows *
pitch``, ``w`` the elements of one of the layout's rows). The atoms, the swizzle and the
descriptor strides each ``Wgmma`` records are ``sarek.atoms``' (``GMMA_MN_INTER``,
``GMMA_MN_SW128``, ``GMMA_K_SW128``, ``SWIZZLE_128B``, ``WGMMA``).

After each staged wait every invocation fences its shared memory toward the asynchronous
proxy ``wgmma`` reads through (``AsyncProxyFence``), and each run of ``Ldmatrix`` and
``Wgmma`` ends in a ``WgmmaWait``: the run never reloads a register an earlier ``Wgmma`` of
it reads (checked here), so the instructions may overlap. A statement of registers alone
(the fill or the add of a strip's sub-step sums) leaves the groups whose registers it does
not touch in flight (``fence_and_wait``); anything else waits for all. In a reduction loop
that provably refills neither the buffers its previous step's ``wgmma`` read nor registers
they use (``in_flight_loops``: schedules with ``in_flight``), the run ends in a wait that
leaves that one group running (``WgmmaWait(pending=1)``), and a wait for all follows the
loop.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TypeVar

from backends.cstyle import EmitError
from sarek import atoms, ir
from sarek.ir import BinOp, FragUse, MemSpace
from sarek.ir_build import add, binary, const, evaluate, mul
from sarek.ir_walk import subexpressions, walk, with_blocks

CORE = atoms.GMMA_MN_INTER.row  # elements along each side of a core matrix (8 rows of 16 bytes)
SWIZZLE_ROW = atoms.GMMA_MN_SW128.row  # elements in one 128-byte row of a 128-byte swizzle atom
SWIZZLE_BYTES = atoms.GMMA_MN_SW128.bytes  # one atom, aligned to itself
WARPGROUP_ROWS = atoms.WGMMA.m  # rows of A one wgmma multiplies: 16 for each of its 4 warps
ELEMENT_BYTES = atoms.GMMA_MN_SW128.element_bytes
_SWIZZLE = atoms.SWIZZLE_128B.recast(ELEMENT_BYTES)  # over element offsets
_LOG_CORE, _LOG_ROW = CORE.bit_length() - 1, SWIZZLE_ROW.bit_length() - 1
_K8 = atoms.GMMA_K_INTER_8BIT.row  # k of one 16-byte row of an 8-bit K-major core matrix
_LOG_K8 = _K8.bit_length() - 1
_SWIZZLE8 = atoms.SWIZZLE_128B.recast(1)  # over byte offsets
_ROW8 = atoms.GMMA_K_SW128_8BIT.row  # bytes of one row of an 8-bit K-major swizzle atom
T = TypeVar("T")


@dataclass(frozen=True)
class CoreLayout:
    """Where a B array's staged tiles lie: ``rows`` x ``pitch`` buffers of the neutral layout,
    each holding its tile in core matrices, or with ``swizzle`` in 128-byte swizzle atoms (8
    k-rows of 64 columns, 1024 bytes, whose 16-byte chunk ``j`` of row ``r`` lies at chunk
    ``j ^ r``), atoms along k first."""

    rows: int
    pitch: int
    swizzle: bool = False
    cols: int = 0  # of the staged tiles (0: not recorded)
    # 8-bit operands, read K-major (B staged column-major: copy rows along n, columns along
    # k; A row-major): core matrices of 8 rows of 16 k, ``GMMA_K_INTER_8BIT``
    k_major: bool = False

    @property
    def core_k(self) -> int:
        """Elements between the 8-row groups (K-major: the core matrices) adjacent along k;
        swizzled K-major 8-bit tiles are one atom row deep (the leading offset unused)."""
        if self.k_major:
            return atoms.GMMA_K_INTER_8BIT.bytes
        return SWIZZLE_ROW * CORE if self.swizzle else CORE * CORE

    @property
    def atom(self) -> atoms.GmmaAtom:
        """The atom a B tile lies in (transposed: rows of 16 bytes along n; K-major 8-bit:
        rows of 16 bytes along k)."""
        if self.k_major:
            return atoms.GMMA_K_SW128_8BIT if self.swizzle else atoms.GMMA_K_INTER_8BIT
        return atoms.GMMA_MN_SW128 if self.swizzle else atoms.GMMA_MN_INTER

    def descriptor(self) -> ir.MatrixDescriptor:
        """The strides and mode of a descriptor of a B tile in this layout."""
        size = self.atom.element_bytes
        leading, stride = self.atom.descriptor_strides(along_mn=self.core_n * size,
                                                       along_k=self.core_k * size)
        return ir.MatrixDescriptor(leading_bytes=leading, stride_bytes=stride,
                                   mode=self.atom.mode)

    @property
    def core_n(self) -> int:
        """Elements between the column blocks (core matrices, or atoms) adjacent along n (for
        K-major 8-bit A: between the 8-row groups adjacent along m)."""
        if self.k_major:  # 8 columns of the tile's k, the core matrices along k in between
            return CORE * self.cols
        return (self.rows // CORE) * SWIZZLE_ROW * CORE if self.swizzle else CORE * self.rows

    def element(self, offset: ir.Expr, row: ir.Expr, col: ir.Expr) -> ir.Expr:
        """The index of tile element (``row``, ``col``) of the buffer at ``offset``, written
        with shifts and masks of the (non-negative) row and column, so that a row that steps
        by 8 moves the index by a constant a compiler sees (a division or remainder of a
        signed value it cannot split)."""
        def low(x: ir.Expr, bits: int) -> ir.Expr:
            return binary(BinOp.AND, x, const((1 << bits) - 1))

        def high(x: ir.Expr, bits: int) -> ir.Expr:
            return binary(BinOp.SHR, x, const(bits))

        if self.k_major and self.swizzle:  # rows of 128 k, chunk j of row r at j ^ (r % 8)
            chunk = binary(BinOp.XOR, low(high(col, _LOG_K8), _SWIZZLE8.bits),
                           low(row, _SWIZZLE8.bits))
            inside = add(mul(chunk, const(_K8)), low(col, _LOG_K8))
            return add(offset, add(mul(row, const(self.cols)), inside))
        if self.k_major:  # row: the column of B (along n), col: its k
            along = add(mul(high(row, _LOG_CORE), const(self.core_n)),
                        mul(high(col, _LOG_K8), const(self.core_k)))
            inside = add(mul(low(row, _LOG_CORE), const(_K8)), low(col, _LOG_K8))
            return add(offset, add(along, inside))
        # (row / 8) * core_k + (row % 8) * per_row is row * per_row: core_k = 8 * per_row
        if not self.swizzle:
            blocked = add(mul(high(col, _LOG_CORE), const(self.core_n)), low(col, _LOG_CORE))
            return add(offset, add(mul(row, const(CORE)), blocked))
        # sarek.atoms.SWIZZLE_128B: the chunk of a row is xored with the row within the atom
        chunk = binary(BinOp.XOR, low(high(col, _SWIZZLE.base), _SWIZZLE.bits),
                       low(row, _SWIZZLE.bits))
        inside = add(mul(chunk, const(CORE)), low(col, _SWIZZLE.base))
        along = add(mul(row, const(SWIZZLE_ROW)), mul(high(col, _LOG_ROW), const(self.core_n)))
        return add(offset, add(along, inside))

    def start(self, neutral: ir.Expr) -> ir.Expr:
        """Where the row that starts at ``neutral`` in the neutral layout starts here (a row
        that begins an 8-row group), or for a transposed layout (16-bit B) the element at
        ``neutral`` of such a row: ``neutral`` may add to the row a column that begins a
        column block (64 columns swizzled, else 8), when it adds it as a constant (``x + c``
        with ``x`` a multiple of the row, as a buffer's slot makes it)."""
        row, column = (neutral, 0) if self.k_major else _split_column(neutral, self.pitch)
        if column:
            block = SWIZZLE_ROW if self.swizzle else CORE
            if column % block:
                raise EmitError(f"wgmma reads B from column {column} of a staged row, not "
                                f"the start of a {block}-column block")
            return add(self.start(row), const(column // block * self.core_n))
        within = binary(BinOp.REM, neutral, const(self.rows * self.pitch))
        base = binary(BinOp.SUB, neutral, within)
        if self.k_major:  # a fragment's first row (8 r) and column (16 j): its core matrix
            row = binary(BinOp.DIV, within, const(self.pitch))
            k = binary(BinOp.REM, within, const(self.pitch))
            group = add(base, mul(binary(BinOp.DIV, row, const(CORE)), const(self.core_n)))
            if self.swizzle:  # the unswizzled start within the atom's first row
                return add(group, k)
            return add(group, mul(binary(BinOp.DIV, k, const(_K8)), const(self.core_k)))
        per_row = SWIZZLE_ROW if self.swizzle else CORE
        return add(base, mul(binary(BinOp.DIV, within, const(self.pitch)), const(per_row)))

    def logical(self, neutral: ir.Expr) -> ir.Expr:
        """For a swizzled layout whose tiles are one atom wide (K-major A): the unswizzled
        index of the element at ``neutral`` in the neutral layout, ``row * 64 + col`` within
        its buffer (``ir.Wgmma``'s ``a_index``; the swizzle applies to the address)."""
        assert self.swizzle and self.cols == SWIZZLE_ROW
        if self.pitch == SWIZZLE_ROW:  # unpadded rows: the buffer's base plus row * 64 + col
            return neutral
        within = binary(BinOp.REM, neutral, const(self.rows * self.pitch))
        base = binary(BinOp.SUB, neutral, within)
        row = binary(BinOp.DIV, within, const(self.pitch))
        col = binary(BinOp.REM, within, const(self.pitch))
        return add(base, add(mul(row, const(SWIZZLE_ROW)), col))


def _split_column(neutral: ir.Expr, pitch: int) -> tuple[ir.Expr, int]:
    """The neutral offset ``neutral`` as the start of its row and the column within it: of a
    constant, or of ``v * s + c`` with ``s`` a multiple of ``pitch`` (a buffer's slot and a
    constant), the constant's remainder by ``pitch``; otherwise ``neutral`` itself at column
    0, and ``EmitError`` for a sum of a constant that is not at a row's start."""
    match neutral:
        case ir.Const(value=int(c)):
            return const(c - c % pitch), c % pitch
        case ir.Binary(op=BinOp.ADD, a=head, b=ir.Const(value=int(c))):
            match head:
                case ir.Binary(op=BinOp.MUL, b=ir.Const(value=int(s))) if s % pitch == 0:
                    return add(head, const(c - c % pitch)), c % pitch
            if c % pitch:
                raise EmitError(f"wgmma reads B at an offset whose column it cannot tell "
                                f"({c} % {pitch} past a row start it cannot see)")
    return neutral, 0


def retire(groups: list[T], open_group: T, pending: int) -> tuple[list[T], list[T]]:
    """The ``wgmma`` groups a ``WgmmaWait(pending)`` completes and those it leaves in flight,
    oldest first: the open group is committed as the newest (an empty one counts too), then
    every group but the ``pending`` newest is complete."""
    committed = [*groups, open_group]
    cut = max(len(committed) - pending, 0) if pending else len(committed)
    return committed[:cut], committed[cut:]


def wgmma_arrays(kernel: ir.Kernel) -> dict[str, CoreLayout]:
    """The shared arrays ``wgmma`` reads and the layout each takes: every array of B
    fragments wider than 16 (``EmitError`` when such an array is touched by anything but its
    staged copies and those fragment loads, or copied with different tile shapes), and every
    array of the A fragments multiplied by them that can lie K-major in 128-byte swizzle atoms
    (touched likewise, its tiles 64 columns wide and a multiple of 64 rows, its buffers whole
    kilobytes); the others keep A in registers, loaded by ``ldmatrix``."""
    stmts = list(walk(kernel.body))
    wide_b = {s.name for s in stmts if isinstance(s, ir.FragDecl) and s.use is FragUse.B
              and s.shape.n > 16}
    by_wide_b = {s.a for s in stmts if isinstance(s, ir.FragMulAdd) and s.b in wide_b}
    by_other = {s.a for s in stmts if isinstance(s, ir.FragMulAdd) and s.b not in wide_b}
    loads = [s for s in stmts if isinstance(s, ir.FragLoad)]
    out: dict[str, CoreLayout] = {}
    byte_b = {s.name for s in stmts if isinstance(s, ir.FragDecl) and s.name in wide_b
              and s.elem.bits == 8}
    for name in {s.array for s in loads if s.frag in wide_b}:
        layout, refusal = _staged_layout(stmts, name, wide_b,
                                         k_major=any(s.frag in byte_b for s in loads
                                                     if s.array == name))
        if refusal is not None:
            raise EmitError(refusal)
        assert layout is not None
        out[name] = layout
    byte_a = {s.name for s in stmts if isinstance(s, ir.FragDecl) and s.elem.bits == 8}
    for name in {s.array for s in loads if s.frag in by_wide_b} - out.keys():
        frags = {s.frag for s in loads if s.array == name}
        if frags & byte_a:  # 8-bit A: K-major core matrices, as 8-bit B
            layout, refusal = _staged_layout(stmts, name, frags, k_major=True)
            if refusal is None and layout is not None and not frags & by_other and \
                    layout.rows % WARPGROUP_ROWS == 0 and \
                    all(s.layout is ir.FragLayout.ROW for s in loads if s.array == name):
                out[name] = layout
            continue
        layout, refusal = _staged_layout(stmts, name, frags)
        if refusal is None and layout is not None and layout.swizzle and \
                not frags & by_other and layout.cols == SWIZZLE_ROW and \
                layout.rows % WARPGROUP_ROWS == 0 and \
                all(s.layout is ir.FragLayout.ROW for s in loads if s.array == name):
            out[name] = layout
    return out


def _staged_layout(stmts: list[ir.Stmt], name: str, frags: set[str], k_major: bool = False
                   ) -> tuple[CoreLayout | None, str | None]:
    """The layout of ``name``'s staged tiles when only its staged copies and loads of
    ``frags`` touch it, or the reason it cannot be laid out; with ``k_major`` (8-bit B staged
    column-major) in K-major core matrices."""
    copies = [s for s in stmts if isinstance(s, ir.StageCopy) and s.dst == name]
    shapes = {(s.rows, s.cols, s.dst_pitch) for s in copies}
    if len(shapes) != 1:
        return None, (f"wgmma reads {name!r}, which must be filled by staged copies of one "
                      f"tile shape (found {sorted(shapes)})")
    rows, cols, pitch = shapes.pop()
    if k_major and (rows % CORE or cols % _K8):
        return None, (f"wgmma's 8-bit tiles in {name!r} are whole 8-column, 16-deep core "
                      f"matrices; these copies are {rows} x {cols}")
    if not k_major and (rows % (2 * CORE) or cols % CORE):
        return None, (f"wgmma's tiles in {name!r} are whole 16-row, 8-column blocks; these "
                      f"copies are {rows} x {cols}")
    for s in stmts:
        touches = isinstance(s, ir.FragLoad) and s.array == name and s.frag not in frags
        touches |= isinstance(s, ir.Store | ir.StorePacked | ir.FragStore) and s.array == name
        if touches:
            return None, (f"{name!r} feeds wgmma and is also accessed by a "
                          f"{type(s).__name__}; CUDA lays it out for wgmma alone")
    if k_major:  # one 128-byte row per tile row in swizzle atoms where the buffers allow
        swizzle = cols == _ROW8 and rows * pitch % SWIZZLE_BYTES == 0
        return CoreLayout(rows, pitch, swizzle, cols, k_major=True), None
    swizzle = rows * pitch * ELEMENT_BYTES % SWIZZLE_BYTES == 0 and cols % SWIZZLE_ROW == 0
    return CoreLayout(rows, pitch, swizzle, cols), None


def wide_b_load(load: ir.FragLoad, decl: ir.ArrayDecl | ir.ArrayParam | None) -> None:
    """Refuses a B fragment load ``wgmma`` cannot read from (not shared rows: row-major for
    16-bit B, column-major for 8-bit B)."""
    layout = ir.FragLayout.COL if decl is not None and decl.elem.bits == 8 \
        else ir.FragLayout.ROW
    if not isinstance(decl, ir.ArrayDecl) or decl.space is not MemSpace.SHARED or \
            load.layout is not layout:
        raise EmitError(f"wgmma reads B fragment {load.frag!r} from shared memory staged "
                        f"{'column' if layout is ir.FragLayout.COL else 'row'}-major; "
                        f"{load.array!r} is not that")


def in_flight_loops(kernel: ir.Kernel, places: dict[str, CoreLayout]) -> frozenset[str]:
    """The variables of the reduction loops (of the neutral ``kernel``) whose ``wgmma`` run
    may leave its group in flight into the next step: A and B of every wide multiply-add in
    the body are fragments of ``places`` arrays of three or more buffers, loaded at ``slot *
    buffer + rest`` with ``slot`` a ``Let`` of the body that steps through the buffers one
    a trip; the body's staged copies, issued after its first barrier and before those loads,
    never fill the buffer the previous trip read (nor the trip's own); and nothing but those
    multiply-adds touches their accumulators."""
    decls = {s.name: s for s in walk(kernel.body) if isinstance(s, ir.ArrayDecl)}
    out: set[str] = set()
    for loop in walk(kernel.body):
        if isinstance(loop, ir.For) and _keeps_one_in_flight(loop, places, decls):
            out.add(loop.var)
    return frozenset(out)


def _keeps_one_in_flight(loop: ir.For, places: dict[str, CoreLayout],
                         decls: dict[str, ir.ArrayDecl]) -> bool:
    body = loop.body
    adds = [s for s in body if isinstance(s, ir.FragMulAdd)]
    loads = {s.frag: s for s in body if isinstance(s, ir.FragLoad)}
    operands = {f for s in adds for f in (s.a, s.b)}
    if not adds or not operands <= loads.keys() or \
            any(loads[f].array not in places for f in operands):
        return False
    buffers = {name: (places[name].rows * places[name].pitch) for name in
               {loads[f].array for f in operands}}
    if any(decls[name].size // size < 3 or decls[name].size % size
           for name, size in buffers.items()):
        return False
    counts = {decls[name].size // size for name, size in buffers.items()}
    slots = {_slot_of(loads[f].offset, buffers[loads[f].array]) for f in operands}
    if len(slots) != 1 or len(counts) != 1 or None in slots:
        return False
    slot, count = slots.pop(), counts.pop()
    assert slot is not None
    lets = {s.name: s.value for s in body if isinstance(s, ir.Let)}
    start, step, value = evaluate(loop.start, {}), evaluate(loop.step, {}), lets.get(slot)
    if start is None or step is None or value is None:
        return False
    steps = [evaluate(value, {loop.var: start + t * step})
             for t in range(2 * count + 1)]  # the slot of each trip: one buffer on each time
    known = [a for a in steps if a is not None and 0 <= a < count]
    if len(known) != len(steps) or any((b - a) % count != 1
                                       for a, b in itertools.pairwise(known)):
        return False
    first = min((i for i, s in enumerate(body) if isinstance(s, ir.FragLoad)), default=0)
    barrier = next((i for i, s in enumerate(body) if isinstance(s, ir.Barrier)), len(body))
    for i, s in enumerate(body):
        if isinstance(s, ir.StageCopy) and s.dst in buffers:
            if not barrier < i < first:
                return False
            for j in range(count):  # the buffer this trip fills, its slot being j
                at = evaluate(s.dst_offset, {slot: j})
                if at is None or at < 0 or at // buffers[s.dst] in (j, (j - 1) % count):
                    return False
    accumulators = {s.d for s in adds} | {s.c for s in adds}
    return not any((isinstance(s, ir.FragStore | ir.FragLoad | ir.FragFill)
                    and s.frag in accumulators) or
                   (isinstance(s, ir.FragAdd) and accumulators & {s.d, s.a, s.b})
                   for s in walk(body))


def _slot_of(offset: ir.Expr, buffer: int) -> str | None:
    """The variable ``v`` of an offset ``v * buffer`` or ``v * buffer + rest`` (``rest`` not
    naming ``v``, within the buffer as the layout takes it), else None."""
    head, rest = (offset.a, offset.b) if isinstance(offset, ir.Binary) and \
        offset.op is BinOp.ADD else (offset, None)
    match head:
        case ir.Binary(op=BinOp.MUL, a=ir.Var(name=name), b=ir.Const(value=size)) \
                if size == buffer:
            if rest is None or not any(isinstance(e, ir.Var) and e.name == name
                                       for e in subexpressions(rest)):
                return name
    return None


def _bulk_issue(s: ir.If) -> bool:
    """Whether ``s`` only issues bulk tensor copies and arrives on mbarriers (no register or
    buffer a ``wgmma`` of the run reads: ``backends.cuda.tma`` issues into other buffers)."""
    return not s.orelse and all(isinstance(x, ir.If | ir.MbarrierArrive | ir.BulkTensorCopy)
                                for x in walk(s.then))


def _registers(s: ir.Stmt, local: frozenset[str]) -> frozenset[str] | None:
    """The register arrays ``s`` reads or writes when it touches nothing else (stores, lets
    and assignments of local arrays and scalars, loops of them: a fill or an add of
    accumulators), else None."""
    touched: set[str] = set()
    exprs: list[ir.Expr] = []
    for x in walk((s,)):
        match x:
            case ir.Store(array=name, index=index, value=value) if name in local:
                touched.add(name)
                exprs += (index, value)
            case ir.For(start=a, stop=b, step=c):
                exprs += (a, b, c)
            case ir.Let(value=value) | ir.Assign(value=value):
                exprs.append(value)
            case _:
                return None
    for e in (e for root in exprs for e in subexpressions(root)):
        if isinstance(e, ir.Load):
            if e.array not in local:
                return None
            touched.add(e.array)
    return frozenset(touched)


def fence_and_wait(stmts: tuple[ir.Stmt, ...], in_flight: frozenset[str] = frozenset()
                   ) -> tuple[ir.Stmt, ...]:
    """``stmts`` with an ``AsyncProxyFence`` after every ``StageWait`` and the ``WgmmaWait``
    each ``Wgmma`` needs, nested blocks too; ``EmitError`` where a run reloads a register one
    of its ``Wgmma`` reads.

    The ``Wgmma`` issued since the last wait form the open run. A statement that touches only
    registers (a fill or an add of accumulators) and none of the open run's commits the run
    as a group and leaves it in flight (``WgmmaWait`` keeping every group); one that touches
    a register of a group waits until that group is complete, keeping the newer ones in
    flight where the run it commits is one of them; anything else waits for all. So the add
    of one strip's sub-step sums runs while the next strip's products are in flight. The
    run that ends the body of a loop over a variable of ``in_flight`` leaves its group
    running (``pending=1``), and a wait for all follows that loop."""
    local = frozenset(s.name for s in walk(stmts)
                      if isinstance(s, ir.ArrayDecl) and s.space is MemSpace.LOCAL)

    def level(body: tuple[ir.Stmt, ...], pending: int = 0) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        run: set[str] = set()  # registers the open run's Wgmma read or write
        groups: list[frozenset[str]] = []  # committed groups that may be in flight, oldest first

        def wait(keep: int = 0) -> None:
            """Commit the open run and wait until only the ``keep`` newest groups (the run
            among them) may be in flight; with no open run only a wait for all (a commit
            would count an empty group among the newest)."""
            nonlocal groups
            if not run and not groups:
                return
            keep = keep if run else 0
            out.append(ir.WgmmaWait(pending=keep))
            _, groups = retire(groups, frozenset(run), keep)
            run.clear()

        for s in body:
            match s:
                case ir.Wgmma(a=a, d=d):
                    regs = {d} if s.a_index is not None else {a, d}  # A read from shared or not
                    if regs & set().union(*groups):
                        wait()
                    run.update(regs)
                    follows = bool(out) and isinstance(out[-1], ir.Wgmma) and out[-1].n == s.n
                    out.append(s.model_copy(update={"fenced": False}) if follows else s)
                    continue
                case ir.If() if run and _bulk_issue(s):
                    out.append(s)  # copies into other buffers: the run stays open
                    continue
                case ir.WgmmaWait(pending=kept):
                    _, groups = retire(groups, frozenset(run), kept)
                    run.clear()
                    out.append(s)  # a wait the kernel already holds
                    continue
                case ir.Ldmatrix(dst=dst) if run or groups:
                    if dst in run:
                        raise EmitError(f"an ldmatrix reloads {dst!r} while a wgmma still "
                                        "reads it")
                    if any(dst in g for g in groups):
                        wait()
                    out.append(s)
                    continue
            touched = _registers(s, local) if run or groups else None
            if touched is not None and not touched & run:
                hit = [n for n, g in enumerate(groups) if touched & g]
                if hit:  # keep the groups newer than the last one touched, and the run
                    wait(len(groups) - 1 - hit[-1] + 1)
                elif run:  # commit the run, keep every group
                    wait(len(groups) + 1)
                out.append(s)
                continue
            wait()
            match s:
                case ir.For(var=name, body=inner) if name in in_flight:
                    out += [s.model_copy(update={"body": level(inner, 1)}), ir.WgmmaWait()]
                    continue
            out.append(with_blocks(s, level))
            if isinstance(s, ir.StageWait):
                out.append(ir.AsyncProxyFence(line=s.line))
        if run:
            wait(pending)
        elif groups:
            wait()
        return tuple(out)

    return level(stmts)
