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
  ``SPV_KHR_bfloat16``;
* the shared arrays staged copies fill are arrays of 16-byte words, and the copies 16-byte
  loads held in registers until a ``StageWait`` (``backends.spirv.copies``).
"""

from __future__ import annotations

from collections.abc import Iterator

from backends.cstyle import EmitError
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
from backends.spirv.copies import CopyPrinter
from backends.spirv.lower import per_quad
from sarek import ir, ir_check
from sarek.ir import ElemType, FragUse, MemSpace


class _Module(CopyPrinter):
    """Prints one kernel: statements, fragments and the module's header sections."""

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
                self.commit()
            case ir.StageWait(pending=pending):
                self.wait(pending)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                self.mul_add(d, a, b, c)
            case ir.FragAdd(d=d, a=a, b=b, subtract=subtract):
                self.add(d, a, b, subtract)
            case _:
                raise EmitError(f"SPIR-V cannot print {type(s).__name__} statements "
                                "(lower the kernel for spirv first)")

    def for_loop(self, s: ir.For) -> None:
        """``s`` as a structured loop. A loop whose body commits groups of copies held several
        groups deep is printed unrolled ``depth`` times (each later trip behind its own test
        of the bound), so that each copy printed takes one set of registers
        (``backends.spirv.copies``). A loop with copies whose tests of the limits can be
        evaluated before a trip (``hoisted``) is printed twice over one variable: first the
        trips (``depth`` at a time) that lie within the bound and whose copies all lie
        inside their limits, each such copy printed as its 16-byte loads alone, then, from
        the first trip that does not, the loop as it is (its copies tested one by one), so
        that the code for tiles crossing the limits is out of the way of the trips inside
        them."""
        start, stop, step = (self.value(x) for x in (s.start, s.stop, s.step))
        self.type_of(T.BOOL)  # declared before i32, as loops always declared them
        unroll = self.depth if self.depth > 1 and any(
            isinstance(x, ir.StageCommit) for x in s.body) else 1
        self.scope = self.scope.new_child()
        var = self.local(s.var, T.I32)
        self.do("OpStore", var, start)
        hoisted = self.hoisted(s)
        if hoisted:
            issued, loading, commits = dict(self.issued), dict(self.loading), self.commits
            self.trips(s, var, stop, step, unroll, hoisted)
            # the loop leaves after whole rounds of ``unroll`` trips: the commits it ran are
            # a multiple of ``depth``, and the loop below is printed as if it came first
            self.issued, self.loading, self.commits = issued, loading, commits
        self.trips(s, var, stop, step, unroll, [])
        self.scope = self.scope.parents
        if unroll > 1:
            self.in_step = False  # the loop may end after any of its trips

    def trips(self, s: ir.For, var: str, stop: str, step: str, unroll: int,
              inside: list[tuple[ir.StageCopy, ir.Expr]]) -> None:
        """The loop ``s`` from the trip at ``var``, ``unroll`` trips a round; where ``inside``
        names copies, only while a whole round lies within the bound and every one of those
        copies inside its limits in each of its trips (each printed unchecked)."""
        i32 = self.type_of(T.I32)
        header, check, body = self.fresh("for"), self.fresh("for_check"), self.fresh("for_body")
        cont, merge = self.fresh("for_next"), self.fresh("for_end")
        self.branch(header)
        self.start(header)
        self.do("OpLoopMerge", merge, cont, "Unroll" if short_loop(s) else "None")
        self.branch(check)
        self.start(check)
        i = self.op(i32, "OpLoad", var)
        trip_vars = [i, *(self.op(i32, "OpIAdd", i, self.op(i32, "OpIMul", step,
                                                            self.const(trip, T.I32)))
                          for trip in range(1, unroll if inside else 1))]
        going = self.within(s, trip_vars[-1], stop, step)
        for at in trip_vars if inside else []:
            self.scope = self.scope.new_child()
            self.scope[s.var] = at
            for _, whole in inside:
                going = self.op(self.type_of(T.BOOL), "OpLogicalAnd", going,
                                self.value(whole))
            self.scope = self.scope.parents
        self.do("OpBranchConditional", going, body, merge)
        self.terminated = True
        self.start(body)
        outer = self.unchecked
        self.unchecked = outer | {id(c) for c, _ in inside}
        self.block(s.body)
        if unroll > 1 and not self.terminated:
            self.later_trips(s, var, stop, step, unroll)
            step = self.op(i32, "OpIMul", step, self.const(unroll, T.I32))
        self.unchecked = outer
        self.branch(cont)
        self.start(cont)
        self.do("OpStore", var, self.op(i32, "OpIAdd", self.op(i32, "OpLoad", var), step))
        self.branch(header)
        self.start(merge)

    def within(self, s: ir.For, i: str, stop: str, step: str) -> str:
        """Whether ``i`` is a trip of ``s`` (below ``stop``, or above it for a negative
        step)."""
        bool_t = self.type_of(T.BOOL)
        if isinstance(s.step, ir.Const):
            return self.op(bool_t, "OpSLessThan" if int(s.step.value) > 0
                           else "OpSGreaterThan", i, stop)
        up = self.op(bool_t, "OpSGreaterThan", step, self.const(0, T.I32))  # its sign decides
        return self.op(bool_t, "OpSelect", up, self.op(bool_t, "OpSLessThan", i, stop),
                       self.op(bool_t, "OpSGreaterThan", i, stop))

    def later_trips(self, s: ir.For, var: str, stop: str, step: str, unroll: int) -> None:
        """Trips 1 .. ``unroll - 1`` after the one at ``var`` of the loop ``s``, each printed
        inside the test of the one before."""
        i32 = self.type_of(T.I32)
        merges = []
        for trip in range(1, unroll):
            i = self.op(i32, "OpIAdd", self.op(i32, "OpLoad", var),
                        self.op(i32, "OpIMul", step, self.const(trip, T.I32)))
            yes, done = self.fresh("trip"), self.fresh("trip_end")
            going = self.within(s, i, stop, step)
            self.do("OpSelectionMerge", done, "None")
            self.do("OpBranchConditional", going, yes, done)
            self.terminated = True
            self.start(yes)
            self.scope = self.scope.new_child()
            self.do("OpStore", self.local(s.var, T.I32), i)
            self.block(s.body)
            merges.append(done)
        for done in reversed(merges):
            self.scope = self.scope.parents
            self.branch(done)
            self.start(done)

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
        if s.shares is not None:  # no variable of its own: the other's, read and written as
            host = self.array(s.shares)
            self.scope[s.name] = ArraySym(host.var, host.storage, s.elem, s.size, s.align,
                                          host.quad, stored=host.elem)
            return
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

    def add(self, d: str, a: str, b: str, subtract: bool = False) -> None:
        """``d = a + b`` (``a - b`` with ``subtract``) as one arithmetic instruction on the
        whole cooperative matrices, which SPV_KHR_cooperative_matrix applies element by
        element (``NoContraction`` on floats)."""
        fd, fa, fb = (self.frag(x) for x in (d, a, b))
        loaded = [self.op(f.type, "OpLoad", f.var) for f in (fa, fb)]
        op = "Sub" if subtract else "Add"
        total = (self.exact(fd.type, f"OpF{op}", *loaded) if fd.decl.elem.is_float
                 else self.op(fd.type, f"OpI{op}", *loaded))
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
