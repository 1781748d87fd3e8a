"""The SPIR-V printer's 16-byte words: staged tiles held as Workgroup arrays of ``uvec4``
(``backends.spirv.lower.quad_arrays``), cooperative-matrix accesses to them at word offsets and
strides, and ``StageCopy`` as 16-byte loads held in registers until the ``StageWait`` that lands
them (``specs/backends.md``, "Staged copies")."""

from __future__ import annotations

import math
from dataclasses import dataclass

from backends.cuda.lower import divisor
from backends.spirv.builder import ArraySym, T, memory_type
from backends.spirv.expressions import ExpressionPrinter
from backends.spirv.lower import per_quad, quad_arrays
from sarek import ir, stage_copy
from sarek.ir import BinOp, ElemType
from sarek.ir_build import add, binary, const, is_literal, mul, var
from sarek.ir_walk import walk


@dataclass(frozen=True)
class Held:
    """The registers of a copy in flight: (word, word index) Function variables per word of
    an invocation, a bool variable that says whether they wait to land and, where copies are
    held several groups deep, an i32 variable with the copy's group (the count of
    ``StageCommit`` before it was issued)."""

    words: tuple[tuple[str, str], ...]
    flag: str
    group: str | None = None


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
        self.depth = hold_depth(kernel)
        self.commits = 0  # the commits printed so far: which set the next copy takes
        self.committed = ""  # the i32 variable counting commits as they run (depth > 1)

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

    def fragment_place(self, arr: ArraySym, offset: ir.Expr, stride: ir.Expr
                       ) -> tuple[str, str]:
        """The pointer and stride of a cooperative-matrix load or store at ``offset``: in
        elements, or for an array of 16-byte words in words (the load reinterprets them)."""
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
        """``s`` in 16-byte words: each invocation takes whole words of the tile (word ``w =
        trip * threads + thread``, row ``w / words per row``) and loads them all before it
        stores any, so that the loads are in flight together. Where the whole tile lies
        inside the limits, its source rows are consecutive elements and 16-byte aligned (one
        uniform test), each word is one ``uvec4`` load; else each word is tested alone
        (``word``). The words are held in the registers of the copy's group (modulo
        ``depth``) and stored into the shared array at the first ``StageWait`` that completes
        the group (the copy's latest completion), or before those registers take another
        copy, whichever comes first; ``uvec4`` stores."""
        assert self.kernel.block is not None
        per = per_quad(memory_type(s.fill.type))
        threads = math.prod(self.kernel.block)
        across = s.cols // per
        thread = stage_copy.linear_thread(self.kernel.block)
        self.scope = self.scope.new_child()
        places: list[tuple[str, str]] = []
        for trip in range(s.rows * s.cols // per // threads):
            number = add(const(trip * threads), thread)
            places.append((self.value(binary(BinOp.DIV, number, const(across))),
                           self.value(mul(binary(BinOp.REM, number, const(across)),
                                          const(per)))))
        words = self.tile_words(s, places, per)
        i32 = self.type_of(T.I32)
        offset, shift = self.value(s.dst_offset), self.const(per.bit_length() - 1, T.I32)
        indices = []
        for row, col in places:
            self.scope["sk copy row"], self.scope["sk copy col"] = row, col
            at = self.value(add(mul(var("sk copy row"), const(s.dst_pitch)),
                                var("sk copy col")))
            indices.append(self.op(i32, "OpShiftRightArithmetic",
                                   self.op(i32, "OpIAdd", offset, at), shift))
        self.scope = self.scope.parents
        held = self.held[self.copy_key(s)][self.commits % self.depth]
        self.land(s.dst, held)  # the registers' earlier copy lands first
        for (word_var, index_var), word, index in zip(held.words, words, indices, strict=True):
            self.do("OpStore", word_var, word)
            self.do("OpStore", index_var, index)
        self.do("OpStore", held.flag, self.const(True, T.BOOL))
        if held.group is not None:
            self.do("OpStore", held.group, self.op(self.type_of(T.I32), "OpLoad",
                                                   self.committed))

    def tile_words(self, s: ir.StageCopy, places: list[tuple[str, str]], per: int
                   ) -> list[str]:
        """The words at ``places`` (row, column ids) of ``s``'s tile (see ``stage_copy``)."""
        def each_alone() -> list[str]:
            out = []
            for row, col in places:
                self.scope["sk copy row"], self.scope["sk copy col"] = row, col
                out.append(self.word(s, var("sk copy row"), var("sk copy col"), per))
            return out

        if not is_literal(s.src_col_stride, 1):
            return each_alone()
        mask = const(per - 1)
        whole = binary(BinOp.LAND, binary(BinOp.LE, const(s.rows), s.row_limit),
                       binary(BinOp.LE, const(s.cols), s.col_limit))
        for start in (s.src_offset, s.src_row_stride):
            if divisor(start) % per:
                whole = binary(BinOp.LAND, whole, binary(
                    BinOp.EQ, binary(BinOp.AND, start, mask), const(0)))
        cond = self.value(whole)
        v4 = self.quad_type()
        fast, slow, merge = self.fresh("tile"), self.fresh("tile_edge"), self.fresh("tile_end")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", cond, fast, slow)
        self.start(fast)
        view = self.quad_view(s.src)
        loaded = []
        for row, col in places:
            self.scope["sk copy row"], self.scope["sk copy col"] = row, col
            first = stage_copy.source_index(s, var("sk copy row"), var("sk copy col"))
            ptr = self.op(self.pointer("StorageBuffer", v4), "OpAccessChain", view,
                          self.const(0, T.I32), self.in_quads(first, per))
            loaded.append(self.op(v4, "OpLoad", ptr))
        end_fast = self.label
        self.branch(merge)
        self.start(slow)
        edge, end_slow = each_alone(), self.label
        self.branch(merge)
        self.start(merge)
        return [self.op(v4, "OpPhi", a, end_fast, b, end_slow)
                for a, b in zip(loaded, edge, strict=True)]

    def copy_key(self, s: ir.StageCopy) -> tuple[str, int, int]:
        """Which held registers copy ``s`` uses: its destination, its place among the copies
        into that destination since the last ``StageCommit``, its words per invocation."""
        assert self.kernel.block is not None
        ordinal = self.issued.get(s.dst, 0)
        self.issued[s.dst] = ordinal + 1
        trips = s.rows * s.cols // per_quad(memory_type(s.fill.type)) // math.prod(
            self.kernel.block)
        return s.dst, ordinal, trips

    def hold_registers(self) -> None:
        """Function variables for every copy key the kernel uses (found before the body is
        printed, so that every ``StageWait`` lands them all): per key ``depth`` sets of its
        words, their indices, whether they wait to land (false on entry) and, where
        ``depth`` exceeds one, their group; then the count of commits (0 on entry)."""
        for s in walk(self.kernel.body):
            if isinstance(s, ir.StageCommit):
                self.issued.clear()
            elif isinstance(s, ir.StageCopy):
                key = self.copy_key(s)
                if key in self.held:
                    continue
                v4, i32 = self.quad_type(), self.type_of(T.I32)
                if self.depth > 1 and not self.committed:
                    self.committed = self.fresh("committed")
                    self.fn_vars.append(f"{self.committed} = OpVariable "
                                        f"{self.pointer('Function', i32)} Function")
                    self.entry.append(f"OpStore {self.committed} {self.const(0, T.I32)}")
                sets = []
                for _ in range(self.depth):
                    regs = []
                    for _ in range(key[2]):
                        word, index = self.fresh(f"{s.dst}_held"), self.fresh(f"{s.dst}_at")
                        self.fn_vars += [
                            f"{word} = OpVariable {self.pointer('Function', v4)} Function",
                            f"{index} = OpVariable {self.pointer('Function', i32)} Function"]
                        regs.append((word, index))
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
                    sets.append(Held(tuple(regs), flag, group))
                self.held[key] = tuple(sets)
        self.issued.clear()

    def commit(self) -> None:
        """``StageCommit``: a new group begins (counted as printed, and as run where copies
        are held several groups deep)."""
        self.issued.clear()
        self.commits += 1
        if self.committed:
            i32 = self.type_of(T.I32)
            self.do("OpStore", self.committed, self.op(
                i32, "OpIAdd", self.op(i32, "OpLoad", self.committed), self.const(1, T.I32)))

    def wait(self, pending: int) -> None:
        """``StageWait``: every held copy lands, or where copies are held several groups deep
        every held copy of a group older than the ``pending`` most recent (earlier than asked
        is allowed)."""
        for (dst, _, _), sets in self.held.items():
            for held in sets:
                self.land(dst, held, pending)

    def land(self, dst: str, held: Held, pending: int = 0) -> None:
        """The held words of one copy stored into ``dst`` if they wait to land (and, where
        groups are counted, belong to a group older than the ``pending`` most recent)."""
        arr, v4, i32 = self.array(dst), self.quad_type(), self.type_of(T.I32)
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
        for word_var, index_var in held.words:
            ptr = self.op(self.pointer("Workgroup", v4), "OpAccessChain", arr.var,
                          self.op(i32, "OpLoad", index_var))
            self.do("OpStore", ptr, self.op(v4, "OpLoad", word_var), *self.access(arr))
        self.do("OpStore", held.flag, self.const(False, T.BOOL))
        self.branch(merge)
        self.start(merge)

    def word(self, s: ir.StageCopy, row: ir.Expr, col: ir.Expr, per: int) -> str:
        """The 16-byte word of tile row ``row`` from column ``col`` (see ``stage_copy``)."""
        v4 = self.quad_type()
        first = stage_copy.source_index(s, row, col)
        if not is_literal(s.src_col_stride, 1):
            return self.packed(s, row, col, per)
        start = self.value(first)
        self.scope["sk copy at"] = start
        at = var("sk copy at")
        whole = binary(BinOp.LAND, binary(BinOp.LT, row, s.row_limit), binary(
            BinOp.LE, add(col, const(per)), s.col_limit))
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
        packed, end_slow = self.packed(s, row, col, per), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(v4, "OpPhi", loaded, end_fast, packed, end_slow)

    def packed(self, s: ir.StageCopy, row: ir.Expr, col: ir.Expr, per: int) -> str:
        """The word of ``per`` elements from (``row``, ``col``), each read inside the limits
        and the fill outside, packed least significant first."""
        elem = s.fill.type
        bits = memory_type(elem).bits
        u32 = self.type_of(T.U32)
        parts: list[str] = []
        for w in range(4):
            word = ""
            for i in range(32 // bits):
                c = add(col, const(w * (32 // bits) + i))
                value = self.value(ir.Select(
                    cond=stage_copy.inside(s, row, c),
                    a=ir.Load(array=s.src, index=stage_copy.source_index(s, row, c), type=elem),
                    b=s.fill, type=elem))
                part = self.unsigned_bits(value, elem)
                if i:
                    part = self.op(u32, "OpShiftLeftLogical", part, self.u32(i * bits))
                word = self.op(u32, "OpBitwiseOr", word, part) if word else part
            parts.append(word)
        return self.op(self.quad_type(), "OpCompositeConstruct", *parts)

    def unsigned_bits(self, value: str, elem: ElemType) -> str:
        """The bits of ``value`` (of ``elem``) zero-extended to 32 bits."""
        mt = memory_type(elem)
        unsigned = {8: T.U8, 16: T.U16, 32: T.U32}[mt.bits]
        if mt is not unsigned:
            value = self.op(self.type_of(unsigned), "OpBitcast", value)
        if mt.bits < 32:
            value = self.op(self.type_of(T.U32), "OpUConvert", value)
        return value
