"""The SPIR-V printer's 16-byte words: staged tiles held as Workgroup arrays of ``uvec4``
(``backends.spirv.lower.quad_arrays``), cooperative-matrix accesses to them at word offsets and
strides, and ``StageCopy`` as 16-byte loads held in registers until the ``StageWait`` that lands
them, converted there into the part a converting copy lands (``specs/backends.md``, "Staged
copies")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from backends.cuda.lower import divisor
from backends.spirv.builder import ArraySym, T, may_fault, memory_type
from backends.spirv.expressions import ExpressionPrinter
from backends.spirv.lower import per_quad, quad_arrays
from sarek import ir, stage_copy
from sarek.ir import BinOp, ElemType
from sarek.ir_build import add, binary, const, is_literal, mul, var
from sarek.ir_walk import subexpressions, walk


@dataclass(frozen=True)
class Held:
    """The registers of a copy in flight: the 16-byte words an invocation loaded (Function
    variables; ``ratio`` of them per word it lands), the index of each word it lands, the
    (array, part) pairs each landed word goes to (several where copies of one tile share
    their loads), a bool variable that says whether they wait to land and, where copies are
    held several groups deep, an i32 variable with the copy's group (the count of
    ``StageCommit`` before it was issued)."""

    words: tuple[str, ...]
    at: tuple[str, ...]
    into: tuple[tuple[str, ir.CopyPart | None], ...]
    flag: str
    group: str | None = None
    transposed: int = 0  # a transposed copy's pitch in 32-bit words (``transposed``)

    @property
    def ratio(self) -> int:
        """Loaded words per landed word: 2 for f32 landing as bf16, 4 for i32 as u8."""
        return len(self.words) // len(self.at)


def landed_per_word(s: ir.StageCopy) -> int:
    """Elements of ``s``'s destination in one 16-byte word."""
    return per_quad(memory_type(stage_copy.landed_type(s)))


def loaded_per_word(s: ir.StageCopy) -> int:
    """Elements of ``s``'s source in one 16-byte word."""
    return per_quad(memory_type(s.fill.type))


TRANSPOSED = 4
"""A transposed copy moves blocks of 4 x 4 elements: four source words of four consecutive
rows each, landing as four 32-bit words of four consecutive columns' bytes each."""


def transposed(s: ir.StageCopy) -> bool:
    """Whether ``s`` lands byte planes of 32-bit elements whose source is consecutive down
    its tile's columns (row stride 1), not along its rows: B's planes staged column-major
    from a row-major B (``sarek.staging.Staging.planes_b_col_major``). Such a copy is
    printed in ``TRANSPOSED`` x ``TRANSPOSED`` blocks: an invocation loads four consecutive
    rows of four columns as four 16-byte words and lands, per plane, one 32-bit word per
    row (its four columns' bytes)."""
    return (s.part is not None and is_literal(s.src_row_stride, 1)
            and not is_literal(s.src_col_stride, 1) and memory_type(s.fill.type).bits == 32
            and memory_type(stage_copy.landed_type(s)).bits == 8
            and s.rows % TRANSPOSED == 0 and s.cols % TRANSPOSED == 0)


def whole_tile(s: ir.StageCopy) -> ir.Expr | None:
    """Whether the whole tile of ``s`` lies inside its limits with its source rows (columns,
    for a ``transposed`` copy) of consecutive elements starting at 16-byte words (its source
    offset and row stride, column stride for a transposed copy, whole words): the test,
    uniform over the block, under which each of its words is one 16-byte load. None where
    neither stride is 1 (each word is then tested alone)."""
    across = s.src_row_stride if is_literal(s.src_col_stride, 1) else s.src_col_stride
    if not (is_literal(s.src_col_stride, 1) or transposed(s)):
        return None
    per = loaded_per_word(s)
    whole = binary(BinOp.LAND, binary(BinOp.LE, const(s.rows), s.row_limit),
                   binary(BinOp.LE, const(s.cols), s.col_limit))
    for start in (s.src_offset, across):
        if divisor(start) % per:
            whole = binary(BinOp.LAND, whole, binary(
                BinOp.EQ, binary(BinOp.AND, start, const(per - 1)), const(0)))
    return whole


def _loads(s: ir.StageCopy) -> ir.StageCopy:
    """What of ``s`` decides the words it loads and where they land: all but its
    destination array and part (converting copies that agree on it share their loads)."""
    return s.model_copy(update={"dst": "", "part": None, "line": None})


def hold_depth(kernel: ir.Kernel) -> int:
    """How many groups deep copies are held: one more than the most groups a ``StageWait``
    leaves pending, where every ``StageCommit`` lies in the kernel's body or directly in the
    body of a loop there (so that the printer knows which group each copy it prints belongs
    to, modulo the depth, once each such loop is unrolled that many times); else one."""
    top = [s for s in kernel.body if isinstance(s, ir.StageCommit)]
    loops = [s for f in kernel.body if isinstance(f, ir.For) for s in f.body
             if isinstance(s, ir.StageCommit)]
    commits = [s for s in walk(kernel.body) if isinstance(s, ir.StageCommit)]
    if len(top) + len(loops) != len(commits):
        return 1
    return 1 + max((s.pending for s in walk(kernel.body) if isinstance(s, ir.StageWait)),
                   default=0)


class CopyPrinter(ExpressionPrinter):
    """``ExpressionPrinter`` that prints arrays of words and the staged copies into them."""

    def __init__(self, kernel: ir.Kernel) -> None:
        super().__init__(kernel)
        self.quads = quad_arrays(kernel)
        # Registers of copies in flight, per copy key: one set per group modulo ``depth``.
        self.held: dict[tuple[str, int, int], tuple[Held, ...]] = {}
        self.issued: dict[str, int] = {}  # copies per destination since the last commit
        self.loading: dict[ir.StageCopy, tuple[str, int, int]] = {}  # converting, this group
        self.depth = hold_depth(kernel)
        self.commits = 0  # the commits printed so far: which set the next copy takes
        self.committed = ""  # the i32 variable counting commits as they run (depth > 1)
        # Whether the commits run so far equal ``commits`` modulo ``depth`` wherever the text
        # being printed runs: so until a loop printed ``depth`` trips at a time ends, since
        # it may end after any trip.
        self.in_step = True
        # The copies printed without their tests (by id): those of a loop's trips that
        # ``hoisted`` found inside their limits, while such a trip is printed.
        self.unchecked: frozenset[int] = frozenset()

    def quad_type(self) -> str:
        """``uvec4``: the 16-byte word staged tiles move in."""
        u32 = self.type_of(T.U32)
        return self.declare(("v4",), "%v4u32", f"{{id}} = OpTypeVector {u32} 4")

    def in_quads(self, e: ir.Expr, per: int) -> str:
        """``e / per`` for ``e`` a multiple of ``per`` (a power of two): an index in words."""
        if isinstance(e, ir.Const):
            return self.const(int(e.value) // per, T.I32)
        return self.op(self.type_of(T.I32), "OpShiftRightArithmetic", self.value(e),
                       self.const(per.bit_length() - 1, T.I32))

    def in_parts(self, e: ir.Expr, ratio: int) -> str:
        """``e * ratio``: an index in the elements of a storage ``ratio`` times narrower."""
        if ratio == 1:
            return self.value(e)
        if isinstance(e, ir.Const):
            return self.const(int(e.value) * ratio, T.I32)
        return self.op(self.type_of(T.I32), "OpIMul", self.value(e), self.const(ratio, T.I32))

    def fragment_place(self, arr: ArraySym, offset: ir.Expr, stride: ir.Expr
                       ) -> tuple[str, str]:
        """The pointer and stride of a cooperative-matrix load or store at ``offset``: in
        elements, or for an array of 16-byte words in words (the load reinterprets them)."""
        if not arr.quad and arr.stored is not None:  # in another's storage, of its elements
            return (self.element(arr.variable, self.in_parts(offset, arr.ratio)),
                    self.in_parts(stride, arr.ratio))
        if not arr.quad:
            return self.element(arr, self.value(offset)), self.value(stride)
        per = per_quad(memory_type(arr.elem))
        ptr = self.op(self.pointer(arr.storage, self.quad_type()), "OpAccessChain", arr.var,
                      self.in_quads(offset, per))
        return ptr, self.in_quads(stride, per)

    def quad_view(self, name: str) -> str:
        """A second variable on the binding of storage buffer ``name``, as 16-byte words."""
        arr = self.array(name)
        key = ("quad_view", name)
        if key in self.ids:
            return self.ids[key]
        v4 = self.quad_type()
        rta = self.declare(("rta", v4), "%rta_v4u32", f"{{id}} = OpTypeRuntimeArray {v4}")
        block = self.declare(("block", rta), "%buffer_v4u32", f"{{id}} = OpTypeStruct {rta}")
        if ("block_decorated", block) not in self.ids:
            self.ids[("block_decorated", block)] = block
            self.decorations += [f"OpDecorate {rta} ArrayStride 16", f"OpDecorate {block} Block",
                                 f"OpMemberDecorate {block} 0 Offset 0"]
        view = self.fresh(f"{name}_words")
        self.ids[key] = view
        self.globals.append(f"{view} = OpVariable {self.pointer('StorageBuffer', block)} "
                            "StorageBuffer")
        self.decorations += [f"OpDecorate {view} DescriptorSet 0",
                             f"OpDecorate {view} Binding {arr.binding}",
                             f"OpDecorate {view} NonWritable"]
        self.interface.append(view)
        return view

    def stage_copy(self, s: ir.StageCopy) -> None:
        """``s`` in 16-byte words: each invocation takes whole words of the destination (word
        ``w = trip * threads + thread``, row ``w / words per row``), loads the source words
        they hold (one, or for a copy that lands a part of each element the two or four its
        elements come from) and loads them all before it stores any, so that the loads are in
        flight together. Where the whole tile lies inside the limits, its source rows are
        consecutive elements and 16-byte aligned (one uniform test), each source word is one
        ``uvec4`` load; else each word is tested alone (``word``). The words are held in the
        registers of the copy's group (modulo ``depth``) and stored into the shared array at
        the first ``StageWait`` that completes the group (the copy's latest completion), or
        before those registers take another copy, whichever comes first; ``uvec4`` stores of
        the words, or of the parts computed from them as they land. A converting copy whose
        tile another copy of its group already loaded prints nothing: it lands with that
        one."""
        assert self.kernel.block is not None
        key = self.copy_key(s)
        if key is None:
            return
        per, loaded = landed_per_word(s), loaded_per_word(s)
        threads = math.prod(self.kernel.block)
        thread = stage_copy.linear_thread(self.kernel.block)
        self.scope = self.scope.new_child()
        places: list[tuple[str, str]] = []
        sources: list[tuple[str, str]] = []
        # each place: a landed word's row and first column, or a transposed copy's block's;
        # its sources: the loaded words along the row, or down the block's four columns
        if transposed(s):
            down, wide, apart, unit = TRANSPOSED, TRANSPOSED, 1, 4
        else:
            down, wide, apart, unit = 1, per, loaded, per
        across = s.cols // wide
        for trip in range(s.rows * s.cols // per // threads):
            number = add(const(trip * threads), thread)
            block_row = binary(BinOp.DIV, number, const(across))
            row = self.value(mul(block_row, const(down)) if down > 1 else block_row)
            first = mul(binary(BinOp.REM, number, const(across)), const(wide))
            places.append((row, self.value(first)))
            sources += [(row, places[-1][1] if not j else self.value(add(first, const(j))))
                        for j in range(0, wide, apart)]
        words = self.tile_words(s, sources, loaded)
        i32 = self.type_of(T.I32)
        # the index of each landed word: in 16-byte words, a transposed copy's in 32-bit ones
        offset, shift = self.value(s.dst_offset), self.const(unit.bit_length() - 1, T.I32)
        indices = []
        for row, col in places:
            self.scope["sk copy row"], self.scope["sk copy col"] = row, col
            at = self.value(add(mul(var("sk copy row"), const(s.dst_pitch)),
                                var("sk copy col")))
            indices.append(self.op(i32, "OpShiftRightArithmetic",
                                   self.op(i32, "OpIAdd", offset, at), shift))
        self.scope = self.scope.parents
        held = self.held[key][self.commits % self.depth]
        self.land(held)  # the registers' earlier copy lands first
        ratio = held.ratio
        for k, (index_var, index) in enumerate(zip(held.at, indices, strict=True)):
            for word_var, word in zip(held.words[k * ratio:(k + 1) * ratio],
                                      words[k * ratio:(k + 1) * ratio], strict=True):
                self.do("OpStore", word_var, word)
            self.do("OpStore", index_var, index)
        self.do("OpStore", held.flag, self.const(True, T.BOOL))
        if held.group is not None:
            self.do("OpStore", held.group, self.op(self.type_of(T.I32), "OpLoad",
                                                   self.committed))

    def tile_words(self, s: ir.StageCopy, places: list[tuple[str, str]], per: int
                   ) -> list[str]:
        """The words at ``places`` (row, column ids) of ``s``'s tile (see ``stage_copy``):
        where ``s`` is one of ``unchecked``, the 16-byte loads alone."""
        def each_alone() -> list[str]:
            out = []
            for row, col in places:
                self.scope["sk copy row"], self.scope["sk copy col"] = row, col
                out.append(self.word(s, var("sk copy row"), var("sk copy col"), per))
            return out

        whole = whole_tile(s)
        if whole is None:
            return each_alone()
        if id(s) in self.unchecked:
            return self.whole_words(s, places, per)
        cond = self.value(whole)
        v4 = self.quad_type()
        fast, slow, merge = self.fresh("tile"), self.fresh("tile_edge"), self.fresh("tile_end")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", cond, fast, slow)
        self.start(fast)
        loaded, end_fast = self.whole_words(s, places, per), self.label
        self.branch(merge)
        self.start(slow)
        edge, end_slow = each_alone(), self.label
        self.branch(merge)
        self.start(merge)
        return [self.op(v4, "OpPhi", a, end_fast, b, end_slow)
                for a, b in zip(loaded, edge, strict=True)]

    def whole_words(self, s: ir.StageCopy, places: list[tuple[str, str]], per: int
                    ) -> list[str]:
        """The words at ``places`` of a tile that ``whole_tile`` holds for: one 16-byte load
        each, through the source's view as words."""
        v4 = self.quad_type()
        view = self.quad_view(s.src)
        loaded = []
        for row, col in places:
            self.scope["sk copy row"], self.scope["sk copy col"] = row, col
            first = stage_copy.source_index(s, var("sk copy row"), var("sk copy col"))
            ptr = self.op(self.pointer("StorageBuffer", v4), "OpAccessChain", view,
                          self.const(0, T.I32), self.in_quads(first, per))
            loaded.append(self.op(v4, "OpLoad", ptr))
        return loaded

    def hoisted(self, loop: ir.For) -> list[tuple[ir.StageCopy, ir.Expr]]:
        """The copies in ``loop``'s body (not in blocks inside it) with their ``whole_tile``
        test, where that reads only the loop's variable and values set before the loop (no
        load, nothing that could fault), so that it can be evaluated before each trip:
        ``emit`` prints such a loop twice, first its trips whose tests all hold, each of those
        copies as its 16-byte loads alone, then the trips from the first whose tests do not
        (``for_loop``)."""
        bound = {s.name for s in walk(loop.body) if isinstance(s, ir.Let | ir.Assign)}
        bound |= {s.var for s in walk(loop.body) if isinstance(s, ir.For)}
        out = []
        for s in loop.body:
            if not isinstance(s, ir.StageCopy):
                continue
            whole = whole_tile(s)
            if whole is None or may_fault(whole):
                continue
            names = {x.name for x in subexpressions(whole) if isinstance(x, ir.Var)}
            if not names & bound:
                out.append((s, whole))
        return out

    def copy_key(self, s: ir.StageCopy) -> tuple[str, int, int] | None:
        """Which held registers copy ``s`` uses: its destination, its place among the copies
        into that destination since the last ``StageCommit``, its landed words per
        invocation; None for a converting copy whose tile an earlier copy of the group loads
        (it lands with that one's registers)."""
        assert self.kernel.block is not None
        if s.part is not None and _loads(s) in self.loading:
            return None
        ordinal = self.issued.get(s.dst, 0)
        self.issued[s.dst] = ordinal + 1
        trips = s.rows * s.cols // landed_per_word(s) // math.prod(self.kernel.block)
        key = (s.dst, ordinal, trips)
        if s.part is not None:
            self.loading[_loads(s)] = key
        return key

    def hold_registers(self) -> None:
        """Function variables for every copy key the kernel uses (found before the body is
        printed, so that every ``StageWait`` lands them all): per key ``depth`` sets of its
        loaded words, the indices of its landed words, whether they wait to land (false on
        entry) and, where ``depth`` exceeds one, their group; then the count of commits (0
        on entry)."""
        keys: dict[tuple[str, int, int], tuple[ir.StageCopy, dict[str, ir.CopyPart | None]]] = {}
        for s in walk(self.kernel.body):
            if isinstance(s, ir.StageCommit):
                self.issued.clear()
                self.loading.clear()
            elif isinstance(s, ir.StageCopy):
                key = self.copy_key(s) or self.loading[_loads(s)]
                into = keys.setdefault(key, (s, {}))[1]
                into.setdefault(s.dst, s.part)
        self.issued.clear()
        self.loading.clear()
        for key, (s, into) in keys.items():
            v4, i32 = self.quad_type(), self.type_of(T.I32)
            if self.depth > 1 and not self.committed:
                self.committed = self.fresh("committed")
                self.fn_vars.append(f"{self.committed} = OpVariable "
                                    f"{self.pointer('Function', i32)} Function")
                self.entry.append(f"OpStore {self.committed} {self.const(0, T.I32)}")
            ratio = landed_per_word(s) // loaded_per_word(s)
            sets = []
            for _ in range(self.depth):
                words, at = [], []
                for _ in range(key[2]):
                    for _ in range(ratio):
                        words.append(self.fresh(f"{s.dst}_held"))
                        self.fn_vars.append(f"{words[-1]} = OpVariable "
                                            f"{self.pointer('Function', v4)} Function")
                    at.append(self.fresh(f"{s.dst}_at"))
                    self.fn_vars.append(f"{at[-1]} = OpVariable "
                                        f"{self.pointer('Function', i32)} Function")
                flag = self.fresh(f"{s.dst}_pending")
                bool_t = self.type_of(T.BOOL)
                self.fn_vars.append(f"{flag} = OpVariable "
                                    f"{self.pointer('Function', bool_t)} Function")
                self.entry.append(f"OpStore {flag} {self.const(False, T.BOOL)}")
                group = None
                if self.depth > 1:
                    group = self.fresh(f"{s.dst}_group")
                    self.fn_vars.append(f"{group} = OpVariable "
                                        f"{self.pointer('Function', i32)} Function")
                    self.entry.append(f"OpStore {group} {self.const(0, T.I32)}")
                sets.append(Held(tuple(words), tuple(at), tuple(into.items()), flag, group,
                                 s.dst_pitch // 4 if transposed(s) else 0))
            self.held[key] = tuple(sets)

    def commit(self) -> None:
        """``StageCommit``: a new group begins (counted as printed, and as run where copies
        are held several groups deep)."""
        self.issued.clear()
        self.loading.clear()
        self.commits += 1
        if self.committed:
            i32 = self.type_of(T.I32)
            self.do("OpStore", self.committed, self.op(
                i32, "OpIAdd", self.op(i32, "OpLoad", self.committed), self.const(1, T.I32)))

    def wait(self, pending: int) -> None:
        """``StageWait``: every held copy lands, or where copies are held several groups deep
        every held copy of a group older than the ``pending`` most recent (earlier than asked
        is allowed). Where the printed commits count the run ones (``in_step``), those are
        the sets of the ``depth - pending`` oldest groups the registers can hold, known as
        printed: the others are not touched, so that no store of a younger group's words,
        predicated off or not, waits for its loads. Elsewhere each set's group decides as
        the kernel runs."""
        due = {(self.commits + j) % self.depth for j in range(self.depth - pending)}
        for sets in self.held.values():
            for k, held in enumerate(sets):
                if not self.in_step:
                    self.land(held, pending)
                elif k in due:
                    self.land(held)

    def land(self, held: Held, pending: int = 0) -> None:
        """The held words of one copy stored into their arrays if they wait to land (and,
        where groups are counted, belong to a group older than the ``pending`` most recent):
        as loaded, or converted into the part each array holds."""
        v4, i32 = self.quad_type(), self.type_of(T.I32)
        bool_t = self.type_of(T.BOOL)
        yes, merge = self.fresh("land"), self.fresh("landed")
        waiting = self.op(bool_t, "OpLoad", held.flag)
        if held.group is not None and pending:
            due = self.op(i32, "OpISub", self.op(i32, "OpLoad", self.committed),
                          self.const(pending, T.I32))
            old = self.op(bool_t, "OpSLessThan", self.op(i32, "OpLoad", held.group), due)
            waiting = self.op(bool_t, "OpLogicalAnd", waiting, old)
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", waiting, yes, merge)
        self.start(yes)
        ratio = held.ratio
        for k, index_var in enumerate(held.at):
            loaded = held.words[k * ratio:(k + 1) * ratio]
            index = ""
            for name, part in held.into:
                arr = self.array(name)
                index = index or self.op(i32, "OpLoad", index_var)
                if held.transposed:
                    assert part is not None
                    rows = self.transposed_parts([self.op(v4, "OpLoad", w) for w in loaded],
                                                 part)
                    for i, value in enumerate(rows):
                        at = index if not i else self.op(
                            i32, "OpIAdd", index, self.const(i * held.transposed, T.I32))
                        self.do("OpStore", self.word_part(arr, at), value, *self.access(arr))
                    continue
                ptr = self.op(self.pointer("Workgroup", v4), "OpAccessChain", arr.var, index)
                word = (self.op(v4, "OpLoad", loaded[0]) if part is None else
                        self.converted([self.op(v4, "OpLoad", w) for w in loaded], part))
                self.do("OpStore", ptr, word, *self.access(arr))
        self.do("OpStore", held.flag, self.const(False, T.BOOL))
        self.branch(merge)
        self.start(merge)

    def converted(self, words: list[str], part: ir.CopyPart) -> str:
        """The 16-byte word of ``part`` of the elements of the loaded ``words`` (f32 or i32,
        four each), packed least significant first."""
        u32 = self.type_of(T.U32)
        source = T.I32 if part.into is T.U8 else T.F32
        bits = memory_type(part.into).bits
        values = []
        self.scope = self.scope.new_child()
        for loaded in words:
            for c in range(4):
                raw = self.op(u32, "OpCompositeExtract", loaded, str(c))
                self.scope["sk copy x"] = self.op(self.type_of(source), "OpBitcast", raw)
                values.append(self.unsigned_bits(self.value(stage_copy.part(
                    var("sk copy x", source), part.index, part.into)), part.into))
        self.scope = self.scope.parents
        per = 32 // bits
        parts = []
        for k in range(4):
            word = ""
            for i in range(per):
                piece = values[k * per + i]
                if i:
                    piece = self.op(u32, "OpShiftLeftLogical", piece, self.u32(i * bits))
                word = self.op(u32, "OpBitwiseOr", word, piece) if word else piece
            parts.append(word)
        return self.op(self.quad_type(), "OpCompositeConstruct", *parts)

    def transposed_parts(self, words: list[str], part: ir.CopyPart) -> list[str]:
        """Byte plane ``part`` of a ``transposed`` copy's block: from the loaded ``words``
        (column j of the block, its four rows' i32 elements), one 32-bit word per row i,
        column j's byte at bits 8j."""
        u32 = self.type_of(T.U32)
        values: list[list[str]] = [[] for _ in range(TRANSPOSED)]
        self.scope = self.scope.new_child()
        for loaded in words:
            for i in range(TRANSPOSED):
                raw = self.op(u32, "OpCompositeExtract", loaded, str(i))
                self.scope["sk copy x"] = self.op(self.type_of(T.I32), "OpBitcast", raw)
                values[i].append(self.unsigned_bits(self.value(stage_copy.part(
                    var("sk copy x", T.I32), part.index, part.into)), part.into))
        self.scope = self.scope.parents
        rows = []
        for row in values:
            word = row[0]
            for j, piece in enumerate(row[1:], 1):
                word = self.op(u32, "OpBitwiseOr", word, self.op(
                    u32, "OpShiftLeftLogical", piece, self.u32(8 * j)))
            rows.append(word)
        return rows

    def word(self, s: ir.StageCopy, row: ir.Expr, col: ir.Expr, per: int) -> str:
        """The 16-byte word of tile row ``row`` from column ``col`` (see ``stage_copy``), or
        of a ``transposed`` copy column ``col`` from row ``row``."""
        v4 = self.quad_type()
        first = stage_copy.source_index(s, row, col)
        down = transposed(s)
        if not (is_literal(s.src_col_stride, 1) or down):
            return self.packed(s, row, col, per)
        start = self.value(first)
        self.scope["sk copy at"] = start
        at = var("sk copy at")
        whole = binary(BinOp.LAND, binary(BinOp.LT, row, s.row_limit), binary(
            BinOp.LE, add(col, const(per)), s.col_limit))
        if down:
            whole = binary(BinOp.LAND, binary(BinOp.LE, add(row, const(per)), s.row_limit),
                           binary(BinOp.LT, col, s.col_limit))
        aligned = binary(BinOp.EQ, binary(BinOp.AND, at, const(per - 1)), const(0))
        cond = self.value(binary(BinOp.LAND, whole, aligned))
        fast, slow, merge = self.fresh("words"), self.fresh("elements"), self.fresh("word_end")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", cond, fast, slow)
        self.start(fast)
        view = self.quad_view(s.src)
        ptr = self.op(self.pointer("StorageBuffer", v4), "OpAccessChain", view,
                      self.const(0, T.I32), self.in_quads(at, per))
        loaded, end_fast = self.op(v4, "OpLoad", ptr), self.label
        self.branch(merge)
        self.start(slow)
        packed, end_slow = self.packed(s, row, col, per, down), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(v4, "OpPhi", loaded, end_fast, packed, end_slow)

    def packed(self, s: ir.StageCopy, row: ir.Expr, col: ir.Expr, per: int,
               down: bool = False) -> str:
        """The word of ``per`` elements from (``row``, ``col``) along the row (down the
        column where ``down``), each read inside the limits and the fill outside, packed
        least significant first: the path of words that cross the limits, printed as one
        loop over the elements that the driver is asked not to unroll (``DontUnroll``), so
        that it costs little code and few registers beside the 16-byte loads of the words
        inside."""
        elem = s.fill.type
        bits = memory_type(elem).bits
        u32, i32, v4 = self.type_of(T.U32), self.type_of(T.I32), self.quad_type()
        bool_t = self.type_of(T.BOOL)
        zero = self.const(0, T.U32)
        empty = self.op(v4, "OpCompositeConstruct", zero, zero, zero, zero)
        before = self.label
        header, body = self.fresh("edge"), self.fresh("edge_element")
        cont, merge = self.fresh("edge_next"), self.fresh("edge_end")
        i, word, i_next, word_next = self.fresh(), self.fresh(), self.fresh(), self.fresh()
        self.branch(header)
        self.start(header)
        self.code += [f"{i} = OpPhi {i32} {self.const(0, T.I32)} {before} {i_next} {cont}",
                      f"{word} = OpPhi {v4} {empty} {before} {word_next} {cont}"]
        going = self.op(bool_t, "OpSLessThan", i, self.const(per, T.I32))
        self.do("OpLoopMerge", merge, cont, "DontUnroll")
        self.do("OpBranchConditional", going, body, merge)
        self.terminated = True
        self.start(body)
        self.scope = self.scope.new_child()
        self.scope["sk copy i"] = i
        r, c = (add(row, var("sk copy i")), col) if down else (row, add(col, var("sk copy i")))
        value = self.value(ir.Select(
            cond=stage_copy.inside(s, r, c),
            a=ir.Load(array=s.src, index=stage_copy.source_index(s, r, c), type=elem),
            b=s.fill, type=elem))
        self.scope = self.scope.parents
        part = self.unsigned_bits(value, elem)
        lanes = 32 // bits  # elements per component
        component = i
        if lanes > 1:
            component = self.op(i32, "OpShiftRightArithmetic", i,
                                self.const(lanes.bit_length() - 1, T.I32))
            shift = self.op(i32, "OpIMul", self.op(i32, "OpBitwiseAnd", i,
                                                   self.const(lanes - 1, T.I32)),
                            self.const(bits, T.I32))
            part = self.op(u32, "OpShiftLeftLogical", part, shift)
        whole = self.op(u32, "OpBitwiseOr",
                        self.op(u32, "OpVectorExtractDynamic", word, component), part)
        self.code.append(f"{word_next} = OpVectorInsertDynamic {v4} {word} {whole} "
                         f"{component}")
        self.branch(cont)
        self.start(cont)
        self.code.append(f"{i_next} = OpIAdd {i32} {i} {self.const(1, T.I32)}")
        self.branch(header)
        self.start(merge)
        return word

    def unsigned_bits(self, value: str, elem: ElemType) -> str:
        """The bits of ``value`` (of ``elem``) zero-extended to 32 bits."""
        mt = memory_type(elem)
        unsigned = {8: T.U8, 16: T.U16, 32: T.U32}[mt.bits]
        if mt is not unsigned:
            value = self.op(self.type_of(unsigned), "OpBitcast", value)
        if mt.bits < 32:
            value = self.op(self.type_of(T.U32), "OpUConvert", value)
        return value
