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
  integers); bf16 components use ``SPV_KHR_bfloat16``.
"""

from __future__ import annotations

import re
from collections import ChainMap
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from backends.cstyle import EmitError
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MathFn, MemSpace, UnOp
from sarek.ir_check import subexpressions

T = ElemType
SUBGROUP_SCOPE = 3  # Scope Subgroup
WORKGROUP_SCOPE = 2  # Scope Workgroup
BARRIER_SEMANTICS = 0x8 | 0x100  # AcquireRelease | WorkgroupMemory
_USE = {FragUse.A: 0, FragUse.B: 1, FragUse.ACCUMULATOR: 2}  # MatrixAKHR, MatrixBKHR, ...
_LAYOUT = {FragLayout.ROW: 0, FragLayout.COL: 1}  # RowMajorKHR, ColumnMajorKHR
_SIGNED_OPERANDS = ("MatrixASignedComponentsKHR", "MatrixBSignedComponentsKHR",
                    "MatrixCSignedComponentsKHR", "MatrixResultSignedComponentsKHR")
_INT_NAMES = {T.I8: "i8", T.U8: "u8", T.I16: "i16", T.U16: "u16", T.I32: "i32", T.U32: "u32",
              T.I64: "i64", T.U64: "u64"}
_UNSIGNED_OF = {8: T.U8, 16: T.U16, 32: T.U32, 64: T.U64}
_SIGNED_OF = {8: T.I8, 16: T.I16, 32: T.I32, 64: T.I64}
_TRANSCENDENTAL = {MathFn.EXP: "Exp", MathFn.LOG: "Log", MathFn.SIN: "Sin", MathFn.COS: "Cos",
                   MathFn.TANH: "Tanh"}
_BUILTIN_VECTORS = {"thread_idx": "LocalInvocationId", "block_idx": "WorkgroupId",
                    "grid_dim": "NumWorkgroups"}


def _memory(t: ElemType) -> ElemType | str:
    """The type an element of ``t`` has in memory: bool as a byte, bf16 as its pattern."""
    return T.U8 if t is T.BOOL else T.U16 if t is T.BF16 else t


def _value(t: ElemType) -> ElemType:
    """The type a value of ``t`` has in registers: bf16 as its 16-bit pattern."""
    return T.U16 if t is T.BF16 else t


def _float_bits(value: float, t: ElemType) -> int:
    """The bits of ``value`` (a Python float) rounded once to nearest even in ``t``."""
    if t is T.F64:
        return int(np.float64(value).view(np.uint64))
    if t is T.F32:
        return int(np.float32(value).view(np.uint32))
    if t is T.F16:
        return int(np.float16(value).view(np.uint16))
    # bf16: round to odd in f32 first, so that the final rounding is the only one
    if value != value:
        return 0x7FC0
    with np.errstate(over="ignore"):
        f = np.float32(value)
    bits = int(f.view(np.uint32))
    if float(f) != value:
        if abs(float(f)) > abs(value):
            bits -= 1
        bits |= 1
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) & 0xFFFF


def _nonfinite(bits: int, t: ElemType) -> str:
    """An infinity or NaN as spirv-as reads it: a hex float one binade above the largest
    exponent, its fraction the payload (``0x1p+128`` is f32's infinity)."""
    fraction_bits = {16: 10, 32: 23, 64: 52}[t.bits]
    digits = -(-fraction_bits // 4)
    fraction = (bits & ((1 << fraction_bits) - 1)) << (4 * digits - fraction_bits)
    sign = "-" if bits >> (t.bits - 1) else ""
    top = {16: 16, 32: 128, 64: 1024}[t.bits]
    return f"{sign}0x1.{fraction:0{digits}x}p+{top}" if fraction else f"{sign}0x1p+{top}"


UNROLL_TRIPS = 16
"""Loops of constant bounds with at most this many trips carry the ``Unroll`` hint (the
staging and fragment loops of a rewrite: the CUDA compiler unrolls them on its own)."""


def _short(s: ir.For) -> bool:
    """Whether ``s`` has constant bounds and at most ``UNROLL_TRIPS`` trips."""
    bounds = (s.start, s.stop, s.step)
    if not all(isinstance(x, ir.Const) for x in bounds):
        return False
    start, stop, step = (int(x.value) for x in bounds if isinstance(x, ir.Const))
    return step != 0 and len(range(start, stop, step)) <= UNROLL_TRIPS


def _risky(e: ir.Expr) -> bool:
    """Whether evaluating ``e`` where the IR would not could fault or be undefined (a load
    out of bounds, an integer division by zero): such operands are evaluated lazily."""
    for x in subexpressions(e):
        if isinstance(x, ir.Load):
            return True
        if isinstance(x, ir.Binary) and x.op in (BinOp.DIV, BinOp.REM) and x.a.type.is_int:
            return True
    return False


@dataclass(frozen=True)
class _Ptr:
    """A scalar held in a Function variable (a ``Let`` or a loop variable)."""

    var: str
    type: ElemType


@dataclass(frozen=True)
class _Arr:
    """An array: its variable, storage class and element type."""

    var: str
    storage: str  # StorageBuffer, Workgroup, Function
    elem: ElemType
    size: int | None  # None for a runtime-sized storage buffer
    align: int


@dataclass(frozen=True)
class _Frag:
    var: str
    type: str
    decl: ir.FragDecl


_Symbol = str | _Ptr | _Arr | _Frag  # str: an SSA id (a scalar parameter)


class _Module:
    """Accumulates the sections of one module while the kernel body is printed."""

    def __init__(self, kernel: ir.Kernel) -> None:
        self.kernel = kernel
        self.caps: set[str] = {"Shader", "VulkanMemoryModel"}
        self.exts: set[str] = set()
        self.float_widths: set[int] = set()  # the float-controls modes name these widths
        self.glsl = False
        self.names: list[str] = []
        self.decorations: list[str] = []
        self.globals: list[str] = []  # types, constants and global variables, in order
        self.ids: dict[tuple[object, ...], str] = {}
        self.interface: list[str] = []
        self.fn_vars: list[str] = []
        self.entry: list[str] = []  # computed once in the entry block (builtins, parameters)
        self.code: list[str] = []
        self.counter = 0
        self.label = "%entry"
        self.terminated = False
        self.scope: ChainMap[str, _Symbol] = ChainMap()
        self.builtins: dict[Builtin, str] = {}
        self.pc_offset = 0

    # ------------------------------------------------------------------ ids and types

    def fresh(self, stem: str = "x") -> str:
        self.counter += 1
        return f"%{stem}{self.counter}"

    def declare(self, key: tuple[object, ...], name: str, line: str) -> str:
        """The id of the global ``line`` (with ``{id}`` for its result), declared once."""
        if key not in self.ids:
            ident = name if name not in self.ids.values() else f"{name}_{len(self.ids)}"
            self.ids[key] = ident
            self.globals.append(line.format(id=ident))
        return self.ids[key]

    def type_of(self, t: ElemType | str) -> str:
        """The SPIR-V type of an IR element type (or of ``"bf16"``, the float type of bf16
        cooperative-matrix components; ``"void"``)."""
        if t == "void":
            return self.declare(("void",), "%void", "{id} = OpTypeVoid")
        if t == "bf16":
            self.caps.add("BFloat16TypeKHR")
            self.exts.add("SPV_KHR_bfloat16")
            return self.declare(("bf16",), "%bf16", "{id} = OpTypeFloat 16 BFloat16KHR")
        assert isinstance(t, ElemType)
        if t is T.BOOL:
            return self.declare(("bool",), "%bool", "{id} = OpTypeBool")
        if t is T.BF16:
            return self.type_of(T.U16)
        if t.is_int:
            self.caps.update({8: ["Int8"], 16: ["Int16"], 64: ["Int64"]}.get(t.bits, []))
            return self.declare(("int", t), f"%{_INT_NAMES[t]}",
                                f"{{id}} = OpTypeInt {t.bits} {int(t.is_signed)}")
        self.caps.update({16: ["Float16"], 64: ["Float64"]}.get(t.bits, []))
        self.caps.update({"DenormPreserve", "SignedZeroInfNanPreserve", "RoundingModeRTE"})
        self.float_widths.add(t.bits)
        return self.declare(("float", t), f"%{t.value}", f"{{id}} = OpTypeFloat {t.bits}")

    def pointer(self, storage: str, pointee: str) -> str:
        return self.declare(("ptr", storage, pointee), f"%p_{storage[:2].lower()}_"
                            f"{pointee.lstrip('%')}", f"{{id}} = OpTypePointer {storage} "
                            f"{pointee}")

    def const(self, value: bool | int | float, t: ElemType) -> str:
        """A constant of the value type of ``t``."""
        if t is T.BOOL:
            word = "True" if value else "False"
            return self.declare(("const", t, bool(value)), f"%{word.lower()}",
                                f"{{id}} = OpConstant{word} {self.type_of(t)}")
        if t.is_float:
            bits = _float_bits(float(value), t)
            if t is T.BF16:
                return self.const(bits, T.U16)
            as_float = float(np.array([bits], f"u{t.bits // 8}").view(f"f{t.bits // 8}")[0])
            text = as_float.hex() if np.isfinite(as_float) else _nonfinite(bits, t)
            name = re.sub(r"\W", "_", text.replace("-", "m"))
            return self.declare(("const", t, bits), f"%c_{t.value}_{name}",
                                f"{{id}} = OpConstant {self.type_of(t)} {text}")
        v = int(value)
        return self.declare(("const", t, v), f"%c_{_INT_NAMES[t]}_{'m' if v < 0 else ''}"
                            f"{abs(v)}", f"{{id}} = OpConstant {self.type_of(t)} {v}")

    def u32(self, v: int) -> str:
        return self.const(v, T.U32)

    # ------------------------------------------------------------------ instructions

    def op(self, result_type: str, name: str, *operands: str, stem: str = "x") -> str:
        ident = self.fresh(stem)
        self.code.append(f"{ident} = {name} {result_type} {' '.join(operands)}".rstrip())
        return ident

    def do(self, name: str, *operands: str) -> None:
        self.code.append(f"{name} {' '.join(operands)}".rstrip())

    def exact(self, result_type: str, name: str, *operands: str) -> str:
        """A float operation that must not be contracted (``NoContraction``)."""
        ident = self.op(result_type, name, *operands)
        self.decorations.append(f"OpDecorate {ident} NoContraction")
        return ident

    def glsl_op(self, result_type: str, name: str, *operands: str) -> str:
        self.glsl = True
        return self.op(result_type, "OpExtInst", "%glsl", name, *operands)

    def start(self, label: str) -> None:
        self.code.append(f"{label} = OpLabel")
        self.label = label
        self.terminated = False

    def branch(self, label: str) -> None:
        if not self.terminated:
            self.do("OpBranch", label)
        self.terminated = True

    # ------------------------------------------------------------------ expressions

    def value(self, e: ir.Expr) -> str:
        """The id of ``e``'s value (of ``_value(e.type)``)."""
        match e:
            case ir.Const(value=v, type=t):
                return self.const(v, t)
            case ir.Var(name=name):
                sym = self.scope.get(name)
                if isinstance(sym, str):
                    return sym
                if isinstance(sym, _Ptr):
                    return self.op(self.type_of(sym.type), "OpLoad", sym.var)
                raise EmitError(f"{name!r} is not a scalar in scope")
            case ir.BuiltinValue(which=w):
                return self.builtin(w)
            case ir.Unary(op=op, x=x, type=t):
                return self.unary(op, self.value(x), t)
            case ir.Binary():
                return self.binary(e)
            case ir.Cast(x=x, type=t):
                return self.convert(self.value(x), x.type, t)
            case ir.Bitcast(x=x, type=t):
                return self.bitcast(self.value(x), x.type, t)
            case ir.Load(array=name, index=index):
                return self.load(name, index)
            case ir.Select(cond=c, a=a, b=b, type=t):
                cond = self.value(c)
                if _risky(a) or _risky(b):
                    return self.lazy(cond, a, b, t)
                return self.op(self.type_of(t), "OpSelect", cond, self.value(a), self.value(b))
            case ir.Call(fn=fn, args=args, type=t):
                return self.call(fn, [self.value(a) for a in args], t)
        raise AssertionError(f"unhandled expression {e!r}")

    def lazy(self, cond: str, a: ir.Expr, b: ir.Expr, t: ElemType) -> str:
        """``cond ? a : b`` evaluating only the chosen side, through a selection construct."""
        then, other, merge = self.fresh("sel_a"), self.fresh("sel_b"), self.fresh("sel_end")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", cond, then, other)
        self.start(then)
        va, end_a = self.value(a), self.label
        self.branch(merge)
        self.start(other)
        vb, end_b = self.value(b), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(self.type_of(t), "OpPhi", va, end_a, vb, end_b)

    def builtin(self, which: Builtin) -> str:
        """Builtins are read once, in the entry block."""
        if which in self.builtins:
            return self.builtins[which]
        i32, u32 = self.type_of(T.I32), self.type_of(T.U32)
        group, _, axis = which.value.partition(".")
        out = self.fresh(group)
        if group in _BUILTIN_VECTORS:
            var = self.input_builtin(_BUILTIN_VECTORS[group], vector=True)
            v3 = self.declare(("v3",), "%v3u32", f"{{id}} = OpTypeVector {u32} 3")
            whole, part = self.fresh("v"), self.fresh("u")
            self.entry += [f"{whole} = OpLoad {v3} {var}",
                           f"{part} = OpCompositeExtract {u32} {whole} {'xyz'.index(axis)}",
                           f"{out} = OpBitcast {i32} {part}"]
        elif group == "block_dim":
            size = self.workgroup_size()["xyz".index(axis)]
            self.entry.append(f"{out} = OpBitcast {i32} {size}")
        elif which is Builtin.SUBGROUP_SIZE:
            return self.const(self.subgroup(), T.I32)
        else:
            # Subgroups are the linear thread index divided by the kernel's subgroup size,
            # as in the simulator (the runner pins the device's subgroup size to it).
            index = self.input_builtin("LocalInvocationIndex", vector=False)
            raw, linear = self.fresh("u"), self.fresh("lin")
            opname = "OpUDiv" if which is Builtin.SUBGROUP_ID else "OpUMod"
            self.entry += [f"{raw} = OpLoad {u32} {index}",
                           f"{linear} = {opname} {u32} {raw} {self.u32(self.subgroup())}",
                           f"{out} = OpBitcast {i32} {linear}"]
        self.builtins[which] = out
        return out

    def subgroup(self) -> int:
        return self.kernel.subgroup or 32

    def input_builtin(self, name: str, vector: bool) -> str:
        u32 = self.type_of(T.U32)
        t = self.declare(("v3",), "%v3u32", f"{{id}} = OpTypeVector {u32} 3") if vector else u32
        ptr = self.pointer("Input", t)
        key = ("builtin", name)
        if key not in self.ids:
            var = self.declare(key, f"%{name}", f"{{id}} = OpVariable {ptr} Input")
            self.decorations.append(f"OpDecorate {var} BuiltIn {name}")
            self.interface.append(var)
        return self.ids[key]

    def workgroup_size(self) -> list[str]:
        u32 = self.type_of(T.U32)
        block = self.kernel.block or (1, 1, 1)
        out = []
        for axis, n in enumerate(block):
            key = ("local_size", axis)
            if key not in self.ids:
                self.decorations.append(f"OpDecorate %local_size_{'xyz'[axis]} SpecId {axis}")
            out.append(self.declare(key, f"%local_size_{'xyz'[axis]}",
                                    f"{{id}} = OpSpecConstant {u32} {n}"))
        return out

    def unary(self, op: UnOp, x: str, t: ElemType) -> str:
        ty = self.type_of(t)
        match op:
            case UnOp.NOT:
                return self.op(ty, "OpLogicalNot", x)
            case UnOp.BITNOT:
                return self.op(ty, "OpNot", x)
            case UnOp.NEG if t.is_int:
                return self.op(ty, "OpISub", self.const(0, t), x)  # wraps: -MIN is MIN
        # float negation flips the sign bit, NaN payloads included (as NumPy does)
        return self.sign_bits(x, t, "OpBitwiseXor")

    def sign_bits(self, x: str, t: ElemType, opname: str) -> str:
        """``x`` with its sign bit flipped (OpBitwiseXor) or cleared (OpBitwiseAnd)."""
        u = _UNSIGNED_OF[t.bits]
        sign = 1 << (t.bits - 1)
        mask = sign if opname == "OpBitwiseXor" else sign - 1
        bits = self.op(self.type_of(u), "OpBitcast", x)
        changed = self.op(self.type_of(u), opname, bits, self.const(mask, u))
        return self.op(self.type_of(t), "OpBitcast", changed)

    def binary(self, e: ir.Binary) -> str:
        op, t = e.op, e.a.type
        if op in (BinOp.LAND, BinOp.LOR):
            return self.logical(e)
        a = self.value(e.a)
        b = self.value(e.b)
        bool_t = self.type_of(T.BOOL)
        if op in ir.COMPARISONS:
            return self.op(bool_t, self.comparison(op, t), a, b)
        ty = self.type_of(t)
        if t is T.BOOL:
            name = {BinOp.AND: "OpLogicalAnd", BinOp.OR: "OpLogicalOr",
                    BinOp.XOR: "OpLogicalNotEqual"}[op]
            return self.op(ty, name, a, b)
        if t.is_float:
            if op is BinOp.DIV and t is T.F32:
                return self.via_f64(a, b, "OpFDiv")
            name = {BinOp.ADD: "OpFAdd", BinOp.SUB: "OpFSub", BinOp.MUL: "OpFMul",
                    BinOp.DIV: "OpFDiv"}[op]
            return self.exact(ty, name, a, b)
        match op:
            case BinOp.ADD | BinOp.SUB | BinOp.MUL:
                name = {BinOp.ADD: "OpIAdd", BinOp.SUB: "OpISub", BinOp.MUL: "OpIMul"}[op]
                return self.op(ty, name, a, b)
            case BinOp.DIV | BinOp.REM:
                return self.division(op, t, a, b, e.b)
            case BinOp.AND | BinOp.OR | BinOp.XOR:
                name = {BinOp.AND: "OpBitwiseAnd", BinOp.OR: "OpBitwiseOr",
                        BinOp.XOR: "OpBitwiseXor"}[op]
                return self.op(ty, name, a, b)
            case BinOp.SHL:
                return self.op(ty, "OpShiftLeftLogical", a, b)
            case BinOp.SHR:
                name = "OpShiftRightArithmetic" if t.is_signed else "OpShiftRightLogical"
                return self.op(ty, name, a, b)
        raise AssertionError(op)

    def comparison(self, op: BinOp, t: ElemType) -> str:
        if t is T.BOOL:
            return {BinOp.EQ: "OpLogicalEqual", BinOp.NE: "OpLogicalNotEqual"}[op]
        if t.is_float:  # ordered, except != which NaN satisfies
            return {BinOp.LT: "OpFOrdLessThan", BinOp.LE: "OpFOrdLessThanEqual",
                    BinOp.GT: "OpFOrdGreaterThan", BinOp.GE: "OpFOrdGreaterThanEqual",
                    BinOp.EQ: "OpFOrdEqual", BinOp.NE: "OpFUnordNotEqual"}[op]
        if op is BinOp.EQ:
            return "OpIEqual"
        if op is BinOp.NE:
            return "OpINotEqual"
        sign = "S" if t.is_signed else "U"
        return {BinOp.LT: f"Op{sign}LessThan", BinOp.LE: f"Op{sign}LessThanEqual",
                BinOp.GT: f"Op{sign}GreaterThan", BinOp.GE: f"Op{sign}GreaterThanEqual"}[op]

    def logical(self, e: ir.Binary) -> str:
        """Short-circuit ``and``/``or``: ``b`` is evaluated only where ``a`` does not decide,
        through a selection construct when evaluating it could fault."""
        a = self.value(e.a)
        bool_t = self.type_of(T.BOOL)
        if not _risky(e.b):
            name = "OpLogicalAnd" if e.op is BinOp.LAND else "OpLogicalOr"
            return self.op(bool_t, name, a, self.value(e.b))
        rhs, merge = self.fresh("rhs"), self.fresh("rhs_end")
        start = self.label
        self.do("OpSelectionMerge", merge, "None")
        targets = (rhs, merge) if e.op is BinOp.LAND else (merge, rhs)
        self.do("OpBranchConditional", a, *targets)
        self.start(rhs)
        b, end = self.value(e.b), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(bool_t, "OpPhi", a, start, b, end)

    def division(self, op: BinOp, t: ElemType, a: str, b: str, divisor: ir.Expr) -> str:
        ty = self.type_of(t)
        if not t.is_signed:
            return self.op(ty, "OpUDiv" if op is BinOp.DIV else "OpUMod", a, b)
        # Vulkan leaves OpSRem and OpSMod undefined for negative operands (the H200 gives
        # other answers): the remainder is a - (a / b) * b from the truncating OpSDiv.
        if isinstance(divisor, ir.Const) and int(divisor.value) not in (0, -1):
            quotient = self.op(ty, "OpSDiv", a, b)
        else:
            # MIN / -1 is undefined in SPIR-V: divide by 1 instead and pick the wrapped answer
            minus_one = self.op(self.type_of(T.BOOL), "OpIEqual", b, self.const(-1, t))
            safe = self.op(ty, "OpSelect", minus_one, self.const(1, t), b)
            divided = self.op(ty, "OpSDiv", a, safe)
            quotient = self.op(ty, "OpSelect", minus_one,
                               self.op(ty, "OpISub", self.const(0, t), a), divided)
        if op is BinOp.DIV:
            return quotient
        return self.op(ty, "OpISub", a, self.op(ty, "OpIMul", quotient, b))

    def via_f64(self, a: str, b: str | None, opname: str) -> str:
        """An f32 division (or square root, ``b`` None) computed in f64 and rounded once to
        f32: correctly rounded, since f64 carries more than twice f32's precision (and the
        result stays on the right side of every f32 rounding boundary even if the f64
        operation is a few f64 ulps off, as Vulkan allows)."""
        f32, f64 = self.type_of(T.F32), self.type_of(T.F64)
        wa = self.op(f64, "OpFConvert", a)
        if b is None:
            wide = self.glsl_op(f64, "Sqrt", wa)
        else:
            wide = self.exact(f64, opname, wa, self.op(f64, "OpFConvert", b))
        return self.op(f32, "OpFConvert", wide)

    def call(self, fn: MathFn, args: list[str], t: ElemType) -> str:
        ty = self.type_of(t)
        bool_t = self.type_of(T.BOOL)
        if t.is_int:
            match fn:
                case MathFn.ABS:
                    neg = self.op(bool_t, "OpSLessThan" if t.is_signed else "OpULessThan",
                                  args[0], self.const(0, t))
                    flipped = self.op(ty, "OpISub", self.const(0, t), args[0])
                    return self.op(ty, "OpSelect", neg, flipped, args[0])
                case MathFn.MIN | MathFn.MAX:
                    sign = "S" if t.is_signed else "U"
                    cmp = f"Op{sign}LessThan" if fn is MathFn.MIN else f"Op{sign}GreaterThan"
                    pick = self.op(bool_t, cmp, args[0], args[1])
                    return self.op(ty, "OpSelect", pick, args[0], args[1])
            raise EmitError(f"{fn.value} is not defined on {t}")
        match fn:
            case MathFn.ABS:
                return self.sign_bits(args[0], t, "OpBitwiseAnd")
            case MathFn.MIN | MathFn.MAX:
                return self.min_max(fn, args[0], args[1], t)
            case MathFn.SQRT:
                if t is T.F32:
                    return self.via_f64(args[0], None, "Sqrt")
                return self.glsl_op(ty, "Sqrt", args[0])
            case MathFn.FLOOR | MathFn.CEIL:
                return self.glsl_op(ty, "Floor" if fn is MathFn.FLOOR else "Ceil", args[0])
            case MathFn.FMA:
                return self.glsl_op(ty, "Fma", *args)
        if t is T.F64:
            raise EmitError(f"{fn.value} on f64: Vulkan's GLSL.std.450 has {fn.value} for 16- "
                            "and 32-bit floats only")
        return self.glsl_op(ty, _TRANSCENDENTAL[fn], args[0])

    def min_max(self, fn: MathFn, a: str, b: str, t: ElemType) -> str:
        """IEEE minimumNumber / maximumNumber: a NaN loses to a number, -0 is below +0."""
        ty, bool_t = self.type_of(t), self.type_of(T.BOOL)
        u = self.type_of(_UNSIGNED_OF[t.bits])
        first, second = ("OpFOrdLessThan", "OpFOrdGreaterThan") if fn is MathFn.MIN else (
            "OpFOrdGreaterThan", "OpFOrdLessThan")
        a_wins = self.op(bool_t, first, a, b)
        b_wins = self.op(bool_t, second, a, b)
        # equal: the bits or-ed (min) or and-ed (max) give -0 / +0 for a pair of zeros
        ua, ub = self.op(u, "OpBitcast", a), self.op(u, "OpBitcast", b)
        tie = self.op(ty, "OpBitcast", self.op(
            u, "OpBitwiseOr" if fn is MathFn.MIN else "OpBitwiseAnd", ua, ub))
        out = self.op(ty, "OpSelect", b_wins, b, tie)
        out = self.op(ty, "OpSelect", a_wins, a, out)
        out = self.op(ty, "OpSelect", self.op(bool_t, "OpIsNan", b), a, out)
        return self.op(ty, "OpSelect", self.op(bool_t, "OpIsNan", a), b, out)

    # ------------------------------------------------------------------ conversions

    def convert(self, x: str, src: ElemType, dst: ElemType) -> str:
        """``x`` (a value of ``src``) converted to ``dst`` as ``specs/ir.md`` says."""
        if src is dst:
            return x
        bool_t = self.type_of(T.BOOL)
        if dst is T.BOOL:
            if src.is_int:
                return self.op(bool_t, "OpINotEqual", x, self.const(0, src))
            wide, wt = (x, src) if src in (T.F32, T.F64) else (self.convert(x, src, T.F32),
                                                                T.F32)
            return self.op(bool_t, "OpFUnordNotEqual", wide, self.const(0.0, wt))
        if src is T.BOOL:
            one = self.const(1.0 if dst.is_float else 1, dst)
            zero = self.const(0.0 if dst.is_float else 0, dst)
            return self.op(self.type_of(dst), "OpSelect", x, one, zero)
        if src.is_int and dst.is_int:
            return self.int_convert(x, src, dst)
        if src.is_int:
            return self.int_to_float(x, src, dst)
        if dst.is_int:
            return self.float_to_int(x, src, dst)
        return self.float_to_float(x, src, dst)

    def int_convert(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src.bits == dst.bits:
            return self.op(self.type_of(dst), "OpBitcast", x)
        if src.is_signed:  # sign-extends or truncates
            return self.op(self.type_of(dst), "OpSConvert", x)
        wide = self.op(self.type_of(_UNSIGNED_OF[dst.bits]), "OpUConvert", x)
        return wide if not dst.is_signed else self.op(self.type_of(dst), "OpBitcast", wide)

    def int_to_float(self, x: str, src: ElemType, dst: ElemType) -> str:
        name = "OpConvertSToF" if src.is_signed else "OpConvertUToF"
        if dst in (T.F32, T.F64):
            return self.op(self.type_of(dst), name, x)
        if dst is T.F16:  # exact in f32 below 2^24; above, both roundings overflow to inf
            return self.op(self.type_of(T.F16), "OpFConvert",
                           self.op(self.type_of(T.F32), name, x))
        if src.bits <= 32:  # exact in f64, then rounded once
            return self.f64_to_bf16(self.op(self.type_of(T.F64), name, x))
        return self.f64_to_bf16(self.int64_to_f64_odd(x, src))

    def float_to_int(self, x: str, src: ElemType, dst: ElemType) -> str:
        """Truncation toward zero, saturating, NaN to 0 (PTX ``cvt.rzi``)."""
        if src.is_storage_only:
            x, src = self.convert(x, src, T.F32), T.F32
        bool_t, ty = self.type_of(T.BOOL), self.type_of(dst)
        lo = -(1 << (dst.bits - 1)) if dst.is_signed else 0
        hi = (1 << (dst.bits - 1)) - 1 if dst.is_signed else (1 << dst.bits) - 1
        nan = self.op(bool_t, "OpIsNan", x)
        low = self.op(bool_t, "OpFOrdLessThanEqual", x, self.const(float(lo), src))
        high = self.op(bool_t, "OpFOrdGreaterThanEqual", x, self.const(float(hi + 1), src))
        outside = self.op(bool_t, "OpLogicalOr", nan, self.op(bool_t, "OpLogicalOr", low, high))
        # the conversion only sees values inside the range (outside it SPIR-V is undefined)
        inside = self.op(self.type_of(src), "OpSelect", outside, self.const(0.0, src), x)
        cut = self.op(ty, "OpConvertFToS" if dst.is_signed else "OpConvertFToU", inside)
        out = self.op(ty, "OpSelect", high, self.const(hi, dst), cut)
        out = self.op(ty, "OpSelect", low, self.const(lo, dst), out)
        return self.op(ty, "OpSelect", nan, self.const(0, dst), out)

    def float_to_float(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src is T.BF16:
            wide = self.bf16_to_f32(x)
            return wide if dst is T.F32 else self.float_to_float(wide, T.F32, dst)
        if dst is T.BF16:
            if src is T.F64:
                return self.f32_to_bf16(self.f64_to_f32_odd(x))
            narrow = x if src is T.F32 else self.convert(x, src, T.F32)
            return self.f32_to_bf16(narrow)
        if src is T.F64 and dst is T.F16:  # one rounding: to odd in f32, then to f16
            return self.op(self.type_of(T.F16), "OpFConvert", self.f64_to_f32_odd(x))
        return self.op(self.type_of(dst), "OpFConvert", x)

    def bf16_to_f32(self, h: str) -> str:
        u32 = self.type_of(T.U32)
        wide = self.op(u32, "OpUConvert", h)
        shifted = self.op(u32, "OpShiftLeftLogical", wide, self.u32(16))
        return self.op(self.type_of(T.F32), "OpBitcast", shifted)

    def f32_to_bf16(self, f: str) -> str:
        """Round to nearest even by integer arithmetic; a NaN stays a NaN (quiet bit set)."""
        u32, bool_t = self.type_of(T.U32), self.type_of(T.BOOL)
        u = self.op(u32, "OpBitcast", f)
        high = self.op(u32, "OpShiftRightLogical", u, self.u32(16))
        quiet = self.op(u32, "OpBitwiseOr", high, self.u32(0x40))
        odd = self.op(u32, "OpBitwiseAnd", high, self.u32(1))
        biased = self.op(u32, "OpIAdd", self.op(u32, "OpIAdd", u, self.u32(0x7FFF)), odd)
        rounded = self.op(u32, "OpShiftRightLogical", biased, self.u32(16))
        pick = self.op(u32, "OpSelect", self.op(bool_t, "OpIsNan", f), quiet, rounded)
        return self.op(self.type_of(T.U16), "OpUConvert", pick)

    def f64_to_bf16(self, d: str) -> str:
        return self.f32_to_bf16(self.f64_to_f32_odd(d))

    def f64_to_f32_odd(self, d: str) -> str:
        """``d`` rounded to f32 *to odd* (truncated, the last bit set when inexact), so that a
        later rounding to a narrower type is the only one."""
        f32, f64, u32 = self.type_of(T.F32), self.type_of(T.F64), self.type_of(T.U32)
        bool_t = self.type_of(T.BOOL)
        r = self.op(f32, "OpFConvert", d)
        back = self.op(f64, "OpFConvert", r)
        keep = self.op(bool_t, "OpLogicalOr", self.op(bool_t, "OpFOrdEqual", back, d),
                       self.op(bool_t, "OpIsNan", d))
        bits = self.op(u32, "OpBitcast", r)
        above = self.op(bool_t, "OpFOrdGreaterThan", self.glsl_op(f64, "FAbs", back),
                        self.glsl_op(f64, "FAbs", d))
        toward_zero = self.op(u32, "OpSelect", above,
                              self.op(u32, "OpISub", bits, self.u32(1)), bits)
        odd = self.op(u32, "OpBitwiseOr", toward_zero, self.u32(1))
        return self.op(f32, "OpBitcast", self.op(u32, "OpSelect", keep, bits, odd))

    def int64_to_f64_odd(self, x: str, src: ElemType) -> str:
        """A 64-bit integer rounded to f64 to odd: its two 32-bit halves are exact in f64 and
        TwoSum gives their rounded sum and the exact error."""
        f64, u64, bool_t = self.type_of(T.F64), self.type_of(T.U64), self.type_of(T.BOOL)
        half = _SIGNED_OF[32] if src.is_signed else T.U32
        shift = "OpShiftRightArithmetic" if src.is_signed else "OpShiftRightLogical"
        high = self.op(self.type_of(src), shift, x, self.u32(32))
        high32 = self.int_convert(high, src, half)
        low32 = self.int_convert(x, src, T.U32)
        convert = "OpConvertSToF" if src.is_signed else "OpConvertUToF"
        hf = self.exact(f64, "OpFMul", self.op(f64, convert, high32),
                        self.const(2.0**32, T.F64))
        lf = self.op(f64, "OpConvertUToF", low32)
        s = self.exact(f64, "OpFAdd", hf, lf)
        bp = self.exact(f64, "OpFSub", s, hf)
        ap = self.exact(f64, "OpFSub", s, bp)
        err = self.exact(f64, "OpFAdd", self.exact(f64, "OpFSub", hf, ap),
                         self.exact(f64, "OpFSub", lf, bp))
        bits = self.op(u64, "OpBitcast", s)
        even = self.op(bool_t, "OpIEqual", self.op(u64, "OpBitwiseAnd", bits,
                                                   self.const(1, T.U64)), self.const(0, T.U64))
        inexact = self.op(bool_t, "OpFOrdNotEqual", err, self.const(0.0, T.F64))
        # one step toward the error: up in magnitude when it has the sum's sign
        same_sign = self.op(bool_t, "OpLogicalEqual",
                            self.op(bool_t, "OpFOrdLessThan", err, self.const(0.0, T.F64)),
                            self.op(bool_t, "OpFOrdLessThan", s, self.const(0.0, T.F64)))
        step = self.op(u64, "OpSelect", same_sign,
                       self.op(u64, "OpIAdd", bits, self.const(1, T.U64)),
                       self.op(u64, "OpISub", bits, self.const(1, T.U64)))
        fix = self.op(bool_t, "OpLogicalAnd", inexact, even)
        return self.op(f64, "OpBitcast", self.op(u64, "OpSelect", fix, step, bits))

    def bitcast(self, x: str, src: ElemType, dst: ElemType) -> str:
        if _value(src) is _value(dst):
            return x
        return self.op(self.type_of(dst), "OpBitcast", x)

    # ------------------------------------------------------------------ memory

    def array(self, name: str) -> _Arr:
        sym = self.scope.get(name)
        if not isinstance(sym, _Arr):
            raise EmitError(f"{name!r} is not an array in scope")
        return sym

    def element(self, arr: _Arr, index: str) -> str:
        """A pointer to element ``index`` of ``arr``."""
        elem = self.type_of(_memory(arr.elem))
        ptr = self.pointer(arr.storage, elem)
        if arr.storage == "StorageBuffer":
            return self.op(ptr, "OpAccessChain", arr.var, self.const(0, T.I32), index)
        return self.op(ptr, "OpAccessChain", arr.var, index)

    def access(self, arr: _Arr) -> tuple[str, ...]:
        """Memory operands: Workgroup accesses are non-private, so that barriers order them
        (the Vulkan memory model orders nothing else)."""
        return ("NonPrivatePointer",) if arr.storage == "Workgroup" else ()

    def load(self, name: str, index: ir.Expr) -> str:
        arr = self.array(name)
        ptr = self.element(arr, self.value(index))
        raw = self.op(self.type_of(_memory(arr.elem)), "OpLoad", ptr, *self.access(arr))
        if arr.elem is T.BOOL:
            return self.op(self.type_of(T.BOOL), "OpINotEqual", raw, self.const(0, T.U8))
        return raw

    def store(self, name: str, index: ir.Expr, value: ir.Expr) -> None:
        arr = self.array(name)
        ptr = self.element(arr, self.value(index))
        v = self.value(value)
        if arr.elem is T.BOOL:
            v = self.op(self.type_of(T.U8), "OpSelect", v, self.const(1, T.U8),
                        self.const(0, T.U8))
        self.do("OpStore", ptr, v, *self.access(arr))

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
        var = self.fresh(f"v_{name}_")
        self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', self.type_of(t))} "
                            "Function")
        self.names.append(f'OpName {var} "{name}"')
        self.scope[name] = _Ptr(var, t)
        return var

    def stmt(self, s: ir.Stmt) -> None:
        match s:
            case ir.Let(name=name, type=t, value=v):
                value = self.value(v)
                self.do("OpStore", self.local(name, t), value)
            case ir.Assign(name=name, value=v):
                sym = self.scope.get(name)
                if not isinstance(sym, _Ptr):
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
                ptr = self.element(arr, self.value(off))
                loaded = self.op(frag.type, "OpCooperativeMatrixLoadKHR", ptr,
                                 self.u32(_LAYOUT[layout]), self.value(stride),
                                 *self.access(arr))
                self.do("OpStore", frag.var, loaded)
            case ir.FragStore(frag=name, array=array, offset=off, stride=stride, layout=layout):
                frag, arr = self.frag(name), self.array(array)
                ptr = self.element(arr, self.value(off))
                whole = self.op(frag.type, "OpLoad", frag.var)
                self.do("OpCooperativeMatrixStoreKHR", ptr, whole, self.u32(_LAYOUT[layout]),
                        self.value(stride), *self.access(arr))
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                self.mul_add(d, a, b, c)
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
        self.do("OpLoopMerge", merge, cont, "Unroll" if _short(s) else "None")
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
        elem = self.type_of(_memory(s.elem))
        arr_t = self.declare(("array", elem, s.size), f"%arr_{elem.lstrip('%')}_{s.size}",
                             f"{{id}} = OpTypeArray {elem} {self.u32(s.size)}")
        if s.space is MemSpace.SHARED:
            var = self.declare(("shared", s.name), f"%shared_{s.name}",
                               f"{{id}} = OpVariable {self.pointer('Workgroup', arr_t)} "
                               "Workgroup")
            self.interface.append(var)
            self.scope[s.name] = _Arr(var, "Workgroup", s.elem, s.size, s.align)
        else:
            var = self.fresh(f"local_{s.name}_")
            self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', arr_t)} "
                                "Function")
            self.scope[s.name] = _Arr(var, "Function", s.elem, s.size, s.align)
        self.names.append(f'OpName {var} "{s.name}"')

    # ------------------------------------------------------------------ fragments

    def component(self, x: str, elem: ElemType) -> str:
        """A fragment component from a value: bf16 patterns become bf16 floats."""
        return self.op(self.type_of("bf16"), "OpBitcast", x) if elem is T.BF16 else x

    def frag_type(self, d: ir.FragDecl) -> str:
        self.caps.add("CooperativeMatrixKHR")
        self.exts.add("SPV_KHR_cooperative_matrix")
        if d.elem is T.BF16:
            self.caps.add("BFloat16CooperativeMatrixKHR")
        comp = self.type_of("bf16" if d.elem is T.BF16 else d.elem)
        use = {FragUse.A: "a", FragUse.B: "b", FragUse.ACCUMULATOR: "acc"}[d.use]
        return self.declare(("coopmat", comp, d.use, d.rows, d.cols),
                            f"%cm_{use}_{comp.lstrip('%')}_{d.rows}x{d.cols}",
                            f"{{id}} = OpTypeCooperativeMatrixKHR {comp} "
                            f"{self.u32(SUBGROUP_SCOPE)} {self.u32(d.rows)} {self.u32(d.cols)} "
                            f"{self.u32(_USE[d.use])}")

    def frag_decl(self, d: ir.FragDecl) -> None:
        t = self.frag_type(d)
        var = self.fresh(f"frag_{d.name}_")
        self.fn_vars.append(f"{var} = OpVariable {self.pointer('Function', t)} Function")
        self.names.append(f'OpName {var} "{d.name}"')
        self.scope[d.name] = _Frag(var, t, d)

    def frag(self, name: str) -> _Frag:
        sym = self.scope.get(name)
        if not isinstance(sym, _Frag):
            raise EmitError(f"{name!r} is not a fragment in scope")
        return sym

    def mul_add(self, d: str, a: str, b: str, c: str) -> None:
        fd, fa, fb, fc = (self.frag(x) for x in (d, a, b, c))
        operands = [name for name, decl in zip(_SIGNED_OPERANDS, (fa, fb, fc, fd), strict=True)
                    if decl.decl.elem.is_signed]
        loaded = [self.op(f.type, "OpLoad", f.var) for f in (fa, fb, fc)]
        product = self.op(fd.type, "OpCooperativeMatrixMulAddKHR", *loaded,
                          *(["|".join(operands)] if operands else []))
        self.do("OpStore", fd.var, product)

    # ------------------------------------------------------------------ the module

    def parameters(self) -> None:
        """Array parameters as storage buffers (binding = position among the arrays), scalars
        as members of one push-constant block, read once in the entry block."""
        binding = 0
        members: list[tuple[str, ir.ScalarParam, int]] = []
        for p in self.kernel.params:
            if isinstance(p, ir.ArrayParam):
                elem = self.type_of(_memory(p.elem))
                rta = self.declare(("rta", elem), f"%rta_{elem.lstrip('%')}",
                                   f"{{id}} = OpTypeRuntimeArray {elem}")
                if ("stride", rta) not in self.ids:
                    self.ids[("stride", rta)] = rta
                    size = _memory(p.elem)
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
                var = self.declare(("param", p.name), f"%buf_{p.name}",
                                   f"{{id}} = OpVariable {self.pointer('StorageBuffer', block)} "
                                   "StorageBuffer")
                self.decorations += [f"OpDecorate {var} DescriptorSet 0",
                                     f"OpDecorate {var} Binding {binding}"]
                if p.readonly:
                    self.decorations.append(f"OpDecorate {var} NonWritable")
                self.names.append(f'OpName {var} "{p.name}"')
                self.interface.append(var)
                self.scope[p.name] = _Arr(var, "StorageBuffer", p.elem, None, 16)
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
            ptr, raw = self.fresh("pc"), self.fresh(f"param_{p.name}_")
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
        self.scope = self.scope.new_child()
        self.block(self.kernel.body)
        if not self.terminated:
            self.do("OpReturn")
        void = self.type_of("void")
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

    ir.ensure_valid(kernel)
    return print_kernel(lower(kernel))
