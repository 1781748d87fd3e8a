"""The SPIR-V printer: a kernel as SPIR-V assembly text (``spirv-as`` syntax) for Vulkan compute.

``print_kernel(kernel)`` prints a kernel that ``backends.spirv.lower`` has checked (``emit``
lowers first). It is a printer of its own, not the C-like one: SPIR-V is SSA with structured
control flow. The text keeps the IR's semantics exactly (``specs/backends.md``, "SPIR-V"):

* integers wrap (SPIR-V's integer arithmetic is two's complement); signed division and
  remainder by -1 are computed without the undefined ``MIN / -1``; float to integer
  conversions truncate, saturate and give 0 for NaN;
* every f32/f64 add, subtract and multiply carries ``NoContraction``; f32 division and square
  root are computed in f64 and rounded once to f32 (exact, and immune to Vulkan's 2.5-ulp
  allowance for f32 division); the float-controls execution modes keep denormals, signed
  zeros, infinities and NaNs and round to nearest even;
* f16 is a 16-bit float in memory (16-bit storage) converted to f32 for arithmetic; bf16 is
  its 16-bit pattern, rounded to nearest even by integer arithmetic; conversions that could
  round twice (f64 to f16 or bf16, 64-bit integers to bf16) round to odd first;
* arrays are storage buffers (descriptor set 0, binding = the array's position among the
  array parameters), scalars one push-constant block (8- and 16-bit scalars and bool widened
  to 32 bits), shared arrays Workgroup variables accessed with ``NonPrivatePointer`` (the
  Vulkan memory model orders only those), bool in memory as one byte;
* the workgroup size is three specialization constants (SpecId 0, 1, 2) used by
  ``LocalSizeId``; barriers are ``OpControlBarrier`` Workgroup/Workgroup with
  AcquireRelease | WorkgroupMemory;
* fragments are ``OpTypeCooperativeMatrixKHR`` at Subgroup scope, moved and multiplied by
  ``OpCooperativeMatrixLoadKHR``/``StoreKHR``/``MulAddKHR`` (signedness operands for
  integers) and added with ``OpFAdd``/``OpIAdd`` on whole matrices; bf16 components use
  ``SPV_KHR_bfloat16``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from backends.cstyle import EmitError
from backends.cuda.lower import divisor
from backends.spirv.builder import (
    BARRIER_SEMANTICS,
    LAYOUT,
    SIGNED_OPERANDS,
    SUBGROUP_SCOPE,
    USE,
    WORKGROUP_SCOPE,
    ArraySym,
    FragSym,
    Pointer,
    T,
    memory_type,
    short_loop,
)
from backends.spirv.expressions import ExpressionPrinter
from backends.spirv.lower import per_quad, quad_arrays
from sarek import ir, ir_check, stage_copy
from sarek.ir import BinOp, ElemType, FragUse, MemSpace
from sarek.ir_build import add, binary, const, is_literal, mul, var
from sarek.ir_walk import walk


@dataclass(frozen=True)
class Held:
    """The registers of a copy in flight: (word, word index) Function variables per word of
    an invocation, and a bool variable that says whether they wait to land."""

    words: tuple[tuple[str, str], ...]
    flag: str


class _Module(ExpressionPrinter):
    """Prints one kernel: statements, fragments and the module's header sections."""

    def __init__(self, kernel: ir.Kernel) -> None:
        super().__init__(kernel)
        self.quads = quad_arrays(kernel)
        self.held: dict[tuple[str, int, int], Held] = {}  # registers of copies in flight
        self.issued: dict[str, int] = {}  # copies per destination since the last commit

    # ------------------------------------------------------------------ statements

    def block(self, stmts: tuple[ir.Stmt, ...]) -> None:
        self.scope = self.scope.new_child()
        for s in stmts:
            if self.terminated:
                break  # after a Return nothing in this block runs
            self.stmt(s)
        self.scope = self.scope.parents

    def local(self, name: str, t: ElemType) -> str:
        """A Function variable for the scalar ``name`` (declared in the entry block)."""
        var = self.fresh(name)
        self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', self.type_of(t))} "
                            "Function")
        self.names.append(f'OpName {var} "{name}"')
        self.scope[name] = Pointer(var, t)
        return var

    def stmt(self, s: ir.Stmt) -> None:
        match s:
            case ir.Let(name=name, type=t, value=v):
                value = self.value(v)
                self.do("OpStore", self.local(name, t), value)
            case ir.Assign(name=name, value=v):
                sym = self.scope.get(name)
                if not isinstance(sym, Pointer):
                    raise EmitError(f"{name!r} is not a variable that can be assigned")
                self.do("OpStore", sym.var, self.value(v))
            case ir.Store(array=name, index=i, value=v):
                self.store(name, i, v)
            case ir.For():
                self.for_loop(s)
            case ir.While(cond=c, body=body):
                self.while_loop(c, body)
            case ir.If(cond=c, then=then, orelse=orelse):
                self.if_stmt(c, then, orelse)
            case ir.Barrier():
                scope = self.u32(WORKGROUP_SCOPE)
                self.do("OpControlBarrier", scope, scope, self.u32(BARRIER_SEMANTICS))
            case ir.Return():
                self.do("OpReturn")
                self.terminated = True
            case ir.ArrayDecl():
                self.array_decl(s)
            case ir.FragDecl():
                self.frag_decl(s)
            case ir.FragFill(frag=name, value=v):
                frag = self.frag(name)
                scalar = self.component(self.value(v), frag.decl.elem)
                whole = self.op(frag.type, "OpCompositeConstruct", scalar)
                self.do("OpStore", frag.var, whole)
            case ir.FragLoad(frag=name, array=array, offset=off, stride=stride, layout=layout):
                frag, arr = self.frag(name), self.array(array)
                ptr, step = self.fragment_place(arr, off, stride)
                loaded = self.op(frag.type, "OpCooperativeMatrixLoadKHR", ptr,
                                 self.u32(LAYOUT[layout]), step, *self.access(arr))
                self.do("OpStore", frag.var, loaded)
            case ir.FragStore(frag=name, array=array, offset=off, stride=stride, layout=layout):
                frag, arr = self.frag(name), self.array(array)
                ptr, step = self.fragment_place(arr, off, stride)
                whole = self.op(frag.type, "OpLoad", frag.var)
                self.do("OpCooperativeMatrixStoreKHR", ptr, whole, self.u32(LAYOUT[layout]),
                        step, *self.access(arr))
            case ir.StageCopy():
                self.stage_copy(s)
            case ir.StageCommit():
                self.issued.clear()
            case ir.StageWait():  # every held copy lands (earlier than asked is allowed)
                for (dst, _, _), held in self.held.items():
                    self.land(dst, held)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                self.mul_add(d, a, b, c)
            case ir.FragAdd(d=d, a=a, b=b):
                self.add(d, a, b)
            case _:
                raise EmitError(f"SPIR-V cannot print {type(s).__name__} statements "
                                "(lower the kernel for spirv first)")

    def for_loop(self, s: ir.For) -> None:
        start, stop, step = (self.value(x) for x in (s.start, s.stop, s.step))
        bool_t, i32 = self.type_of(T.BOOL), self.type_of(T.I32)
        self.scope = self.scope.new_child()
        var = self.local(s.var, T.I32)
        self.do("OpStore", var, start)
        header, check, body = self.fresh("for"), self.fresh("for_check"), self.fresh("for_body")
        cont, merge = self.fresh("for_next"), self.fresh("for_end")
        self.branch(header)
        self.start(header)
        self.do("OpLoopMerge", merge, cont, "Unroll" if short_loop(s) else "None")
        self.branch(check)
        self.start(check)
        i = self.op(i32, "OpLoad", var)
        if isinstance(s.step, ir.Const):
            going = self.op(bool_t, "OpSLessThan" if int(s.step.value) > 0
                            else "OpSGreaterThan", i, stop)
        else:  # a step known at run time: its sign picks the direction
            up = self.op(bool_t, "OpSGreaterThan", step, self.const(0, T.I32))
            going = self.op(bool_t, "OpSelect", up, self.op(bool_t, "OpSLessThan", i, stop),
                            self.op(bool_t, "OpSGreaterThan", i, stop))
        self.do("OpBranchConditional", going, body, merge)
        self.terminated = True
        self.start(body)
        self.block(s.body)
        self.branch(cont)
        self.start(cont)
        self.do("OpStore", var, self.op(i32, "OpIAdd", self.op(i32, "OpLoad", var), step))
        self.branch(header)
        self.start(merge)
        self.scope = self.scope.parents

    def while_loop(self, cond: ir.Expr, body: tuple[ir.Stmt, ...]) -> None:
        header, check, inner = self.fresh("while"), self.fresh("while_check"), self.fresh("do")
        cont, merge = self.fresh("while_next"), self.fresh("while_end")
        self.branch(header)
        self.start(header)
        self.do("OpLoopMerge", merge, cont, "None")
        self.branch(check)
        self.start(check)
        self.do("OpBranchConditional", self.value(cond), inner, merge)
        self.terminated = True
        self.start(inner)
        self.block(body)
        self.branch(cont)
        self.start(cont)
        self.branch(header)
        self.start(merge)

    def if_stmt(self, cond: ir.Expr, then: tuple[ir.Stmt, ...],
                orelse: tuple[ir.Stmt, ...]) -> None:
        c = self.value(cond)
        yes, no, merge = self.fresh("then"), self.fresh("else"), self.fresh("endif")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", c, yes, no if orelse else merge)
        self.terminated = True
        self.start(yes)
        self.block(then)
        self.branch(merge)
        if orelse:
            self.start(no)
            self.block(orelse)
            self.branch(merge)
        self.start(merge)

    def array_decl(self, s: ir.ArrayDecl) -> None:
        quad = s.name in self.quads
        elem = self.quad_type() if quad else self.type_of(memory_type(s.elem))
        size = s.size // per_quad(s.elem) if quad else s.size
        arr_t = self.declare(("array", elem, size), f"%arr_{elem.lstrip('%')}_{size}",
                             f"{{id}} = OpTypeArray {elem} {self.u32(size)}")
        if s.space is MemSpace.SHARED:
            var = self.fresh(s.name)
            self.globals.append(f"{var} = OpVariable {self.pointer('Workgroup', arr_t)} "
                                "Workgroup")
            self.interface.append(var)
            self.scope[s.name] = ArraySym(var, "Workgroup", s.elem, s.size, s.align, quad)
        else:
            var = self.fresh(s.name)
            self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', arr_t)} "
                                "Function")
            self.scope[s.name] = ArraySym(var, "Function", s.elem, s.size, s.align)
        self.names.append(f'OpName {var} "{s.name}"')

    # ------------------------------------------------------------------ 16-byte words

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
        (``word``). The words are held in registers and stored into the shared array at the
        next ``StageWait`` (the copy's latest completion), or before the same copy is issued
        again, whichever comes first; ``uvec4`` stores."""
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
        held = self.held[self.copy_key(s)]
        self.land(s.dst, held)  # the same copy issued again: the earlier one lands first
        for (word_var, index_var), word, index in zip(held.words, words, indices, strict=True):
            self.do("OpStore", word_var, word)
            self.do("OpStore", index_var, index)
        self.do("OpStore", held.flag, self.const(True, T.BOOL))

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
        printed, so that every ``StageWait`` lands them all): each key's words, their
        indices and whether they wait to land (false on entry)."""
        for s in walk(self.kernel.body):
            if isinstance(s, ir.StageCommit):
                self.issued.clear()
            elif isinstance(s, ir.StageCopy):
                key = self.copy_key(s)
                if key in self.held:
                    continue
                v4, i32 = self.quad_type(), self.type_of(T.I32)
                regs = []
                for _ in range(key[2]):
                    word, index = self.fresh(f"{s.dst}_held"), self.fresh(f"{s.dst}_at")
                    self.fn_vars += [
                        f"{word} = OpVariable {self.pointer('Function', v4)} Function",
                        f"{index} = OpVariable {self.pointer('Function', i32)} Function"]
                    regs.append((word, index))
                flag = self.fresh(f"{s.dst}_pending")
                bool_t = self.type_of(T.BOOL)
                self.fn_vars.append(f"{flag} = OpVariable {self.pointer('Function', bool_t)} "
                                    "Function")
                self.entry.append(f"OpStore {flag} {self.const(False, T.BOOL)}")
                self.held[key] = Held(tuple(regs), flag)
        self.issued.clear()

    def land(self, dst: str, held: Held) -> None:
        """The held words of one copy stored into ``dst`` if they wait to land."""
        arr, v4, i32 = self.array(dst), self.quad_type(), self.type_of(T.I32)
        bool_t = self.type_of(T.BOOL)
        yes, merge = self.fresh("land"), self.fresh("landed")
        waiting = self.op(bool_t, "OpLoad", held.flag)
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

    # ------------------------------------------------------------------ fragments

    def component(self, x: str, elem: ElemType) -> str:
        """A fragment component from a value: bf16 patterns become bf16 floats."""
        return self.op(self.bf16_component(), "OpBitcast", x) if elem is T.BF16 else x

    def frag_type(self, d: ir.FragDecl) -> str:
        self.caps.add("CooperativeMatrixKHR")
        self.exts.add("SPV_KHR_cooperative_matrix")
        if d.elem is T.BF16:
            self.caps.add("BFloat16CooperativeMatrixKHR")
        comp = self.bf16_component() if d.elem is T.BF16 else self.type_of(d.elem)
        use = {FragUse.A: "a", FragUse.B: "b", FragUse.ACCUMULATOR: "acc"}[d.use]
        return self.declare(("coopmat", comp, d.use, d.rows, d.cols),
                            f"%cm_{use}_{comp.lstrip('%')}_{d.rows}x{d.cols}",
                            f"{{id}} = OpTypeCooperativeMatrixKHR {comp} "
                            f"{self.u32(SUBGROUP_SCOPE)} {self.u32(d.rows)} {self.u32(d.cols)} "
                            f"{self.u32(USE[d.use])}")

    def frag_decl(self, d: ir.FragDecl) -> None:
        t = self.frag_type(d)
        var = self.fresh(d.name)
        self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', t)} Function")
        self.names.append(f'OpName {var} "{d.name}"')
        self.scope[d.name] = FragSym(var, t, d)

    def frag(self, name: str) -> FragSym:
        sym = self.scope.get(name)
        if not isinstance(sym, FragSym):
            raise EmitError(f"{name!r} is not a fragment in scope")
        return sym

    def mul_add(self, d: str, a: str, b: str, c: str) -> None:
        fd, fa, fb, fc = (self.frag(x) for x in (d, a, b, c))
        operands = [name for name, decl in zip(SIGNED_OPERANDS, (fa, fb, fc, fd), strict=True)
                    if decl.decl.elem.is_signed]
        loaded = [self.op(f.type, "OpLoad", f.var) for f in (fa, fb, fc)]
        product = self.op(fd.type, "OpCooperativeMatrixMulAddKHR", *loaded,
                          *(["|".join(operands)] if operands else []))
        self.do("OpStore", fd.var, product)

    def add(self, d: str, a: str, b: str) -> None:
        """``d = a + b`` as one arithmetic instruction on the whole cooperative matrices, which
        SPV_KHR_cooperative_matrix applies element by element (``NoContraction`` on floats)."""
        fd, fa, fb = (self.frag(x) for x in (d, a, b))
        loaded = [self.op(f.type, "OpLoad", f.var) for f in (fa, fb)]
        total = (self.exact(fd.type, "OpFAdd", *loaded) if fd.decl.elem.is_float
                 else self.op(fd.type, "OpIAdd", *loaded))
        self.do("OpStore", fd.var, total)

    # ------------------------------------------------------------------ the module

    def parameters(self) -> None:
        """Array parameters as storage buffers (binding = position among the arrays), scalars
        as members of one push-constant block, read once in the entry block."""
        binding = 0
        members: list[tuple[str, ir.ScalarParam, int]] = []
        for p in self.kernel.params:
            if isinstance(p, ir.ArrayParam):
                elem = self.type_of(memory_type(p.elem))
                rta = self.declare(("rta", elem), f"%rta_{elem.lstrip('%')}",
                                   f"{{id}} = OpTypeRuntimeArray {elem}")
                if ("stride", rta) not in self.ids:
                    self.ids[("stride", rta)] = rta
                    size = memory_type(p.elem)
                    assert isinstance(size, ElemType)
                    self.decorations.append(f"OpDecorate {rta} ArrayStride {size.bits // 8}")
                    if size.bits == 8:
                        self.caps.add("StorageBuffer8BitAccess")
                    if size.bits == 16:
                        self.caps.add("StorageBuffer16BitAccess")
                block = self.declare(("block", rta), f"%buffer_{elem.lstrip('%')}",
                                     f"{{id}} = OpTypeStruct {rta}")
                if ("block_decorated", block) not in self.ids:
                    self.ids[("block_decorated", block)] = block
                    self.decorations += [f"OpDecorate {block} Block",
                                         f"OpMemberDecorate {block} 0 Offset 0"]
                var = self.fresh(p.name)
                self.globals.append(f"{var} = OpVariable "
                                    f"{self.pointer('StorageBuffer', block)} StorageBuffer")
                self.decorations += [f"OpDecorate {var} DescriptorSet 0",
                                     f"OpDecorate {var} Binding {binding}"]
                if p.readonly:
                    self.decorations.append(f"OpDecorate {var} NonWritable")
                self.names.append(f'OpName {var} "{p.name}"')
                self.interface.append(var)
                self.scope[p.name] = ArraySym(var, "StorageBuffer", p.elem, None, 16,
                                              binding=binding)
                binding += 1
            else:
                wire = push_constant_type(p.elem)
                self.pc_offset = -(-self.pc_offset // (wire.bits // 8)) * (wire.bits // 8)
                members.append((self.type_of(wire), p, self.pc_offset))
                self.pc_offset += wire.bits // 8
        if not members:
            return
        block = self.declare(("push",), "%PushConstants",
                             f"{{id}} = OpTypeStruct {' '.join(m[0] for m in members)}")
        self.decorations.append(f"OpDecorate {block} Block")
        var = self.declare(("push_var",), "%params",
                           f"{{id}} = OpVariable {self.pointer('PushConstant', block)} "
                           "PushConstant")
        self.interface.append(var)
        for i, (wire_t, p, offset) in enumerate(members):
            self.decorations.append(f"OpMemberDecorate {block} {i} Offset {offset}")
            self.names.append(f'OpMemberName {block} {i} "{p.name}"')
            ptr, raw = self.fresh(), self.fresh(p.name)
            self.entry += [f"{ptr} = OpAccessChain {self.pointer('PushConstant', wire_t)} "
                           f"{var} {self.const(i, T.I32)}", f"{raw} = OpLoad {wire_t} {ptr}"]
            self.scope[p.name] = self.from_wire(raw, p.elem)

    def from_wire(self, raw: str, t: ElemType) -> str:
        """A scalar parameter's value from its 32-bit push-constant word (narrow types)."""
        if push_constant_type(t) is t:
            return raw
        saved, self.code = self.code, []
        if t is T.BOOL:
            out = self.op(self.type_of(T.BOOL), "OpINotEqual", raw, self.u32(0))
        elif t.is_int:
            out = self.int_convert(raw, T.I32 if t.is_signed else T.U32, t)
        else:
            bits = self.op(self.type_of(T.U16), "OpUConvert", raw)
            out = bits if t is T.BF16 else self.op(self.type_of(T.F16), "OpBitcast", bits)
        self.entry += self.code
        self.code = saved
        return out

    def render(self) -> str:
        self.parameters()
        self.hold_registers()
        self.scope = self.scope.new_child()
        self.block(self.kernel.body)
        if not self.terminated:
            self.do("OpReturn")
        void = self.void_type()
        fn_t = self.declare(("fn",), "%fn_void", f"{{id}} = OpTypeFunction {void}")
        size = self.workgroup_size()
        widths = sorted(self.float_widths)
        head = [f"; SPIR-V for Vulkan compute: kernel {self.kernel.name} (printed by sarek)",
                *(f"OpCapability {c}" for c in _ordered(self.caps)),
                *(f'OpExtension "{x}"' for x in sorted(self.exts))]
        if self.glsl:
            head.append('%glsl = OpExtInstImport "GLSL.std.450"')
        head += ["OpMemoryModel Logical Vulkan",
                 f'OpEntryPoint GLCompute %main "{self.kernel.name}" '
                 + " ".join(dict.fromkeys(self.interface)),
                 f"OpExecutionModeId %main LocalSizeId {' '.join(size)}",
                 *(f"OpExecutionMode %main {mode} {w}" for w in widths
                   for mode in ("DenormPreserve", "SignedZeroInfNanPreserve", "RoundingModeRTE"))]
        body = ["%main = OpFunction " + void + " None " + fn_t, "%entry = OpLabel",
                *self.fn_vars, *self.entry, *self.code, "OpFunctionEnd"]
        return "\n".join([*head, *self.names, *self.decorations, *self.globals,
                          *(_indent(x) for x in body)]) + "\n"


_CAPABILITY_ORDER = ("Shader", "VulkanMemoryModel")


def _ordered(caps: set[str]) -> Iterator[str]:
    yield from (c for c in _CAPABILITY_ORDER if c in caps)
    yield from sorted(caps - set(_CAPABILITY_ORDER))


def _indent(line: str) -> str:
    return line if line.startswith("%") and line.endswith("OpLabel") else "    " + line


def push_constant_type(t: ElemType) -> ElemType:
    """The type a scalar parameter of ``t`` has in the push-constant block: 8- and 16-bit
    values and bool widened to a 32-bit word (f16 and bf16 as their bits)."""
    if t is T.BOOL or t.is_storage_only:
        return T.U32
    if t.is_int and t.bits < 32:
        return T.I32 if t.is_signed else T.U32
    return t


def push_constant_layout(kernel: ir.Kernel) -> list[tuple[ir.ScalarParam, int, ElemType]]:
    """Each scalar parameter's byte offset in the push-constant block and its type there."""
    out, offset = [], 0
    for p in kernel.params:
        if isinstance(p, ir.ScalarParam):
            wire = push_constant_type(p.elem)
            size = wire.bits // 8
            offset = -(-offset // size) * size
            out.append((p, offset, wire))
            offset += size
    return out


def print_kernel(kernel: ir.Kernel) -> str:
    """``kernel`` (checked by ``backends.spirv.lower``) as SPIR-V assembly text."""
    return _Module(kernel).render()


def emit(kernel: ir.Kernel) -> str:
    """``kernel`` validated, lowered for SPIR-V and printed as SPIR-V assembly."""
    from backends.spirv.lower import lower

    ir_check.ensure_valid(kernel)
    return print_kernel(lower(kernel))
