"""The SPIR-V module under construction: its vocabulary tables (scopes, cooperative-matrix
uses and layouts, integer names), the symbols a kernel body defines, and ``ModuleBuilder``,
which accumulates ids, types, constants and instructions (``specs/backends.md``, "SPIR-V")."""

from __future__ import annotations

import re
from collections import ChainMap
from dataclasses import dataclass

import numpy as np

from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, FragLayout, FragUse, MathFn
from sarek.ir_walk import subexpressions

T = ElemType
SUBGROUP_SCOPE = 3  # Scope Subgroup
WORKGROUP_SCOPE = 2  # Scope Workgroup
BARRIER_SEMANTICS = 0x8 | 0x100  # AcquireRelease | WorkgroupMemory
USE = {FragUse.A: 0, FragUse.B: 1, FragUse.ACCUMULATOR: 2}  # MatrixAKHR, MatrixBKHR, ...
LAYOUT = {FragLayout.ROW: 0, FragLayout.COL: 1}  # RowMajorKHR, ColumnMajorKHR
SIGNED_OPERANDS = ("MatrixASignedComponentsKHR", "MatrixBSignedComponentsKHR",
                    "MatrixCSignedComponentsKHR", "MatrixResultSignedComponentsKHR")
INT_NAMES = {T.I8: "i8", T.U8: "u8", T.I16: "i16", T.U16: "u16", T.I32: "i32", T.U32: "u32",
              T.I64: "i64", T.U64: "u64"}
UNSIGNED_OF = {8: T.U8, 16: T.U16, 32: T.U32, 64: T.U64}
SIGNED_OF = {8: T.I8, 16: T.I16, 32: T.I32, 64: T.I64}
TRANSCENDENTAL = {MathFn.EXP: "Exp", MathFn.LOG: "Log", MathFn.SIN: "Sin", MathFn.COS: "Cos",
                   MathFn.TANH: "Tanh"}
BUILTIN_VECTORS = {"thread_idx": "LocalInvocationId", "block_idx": "WorkgroupId",
                    "grid_dim": "NumWorkgroups"}


_NAMED = re.compile(r"%[A-Za-z][A-Za-z0-9_]*")
"""The printer's named ids begin with a letter; numbered ids (``fresh``) with a digit."""
_STEM_OUTSIDE = re.compile(r"[^A-Za-z0-9_]")
"""Characters an id may not hold (user names are Python identifiers, Unicode included)."""


def memory_type(t: ElemType) -> ElemType:
    """The type an element of ``t`` has in memory: bool as a byte, bf16 as its pattern."""
    return T.U8 if t is T.BOOL else T.U16 if t is T.BF16 else t


def value_type(t: ElemType) -> ElemType:
    """The type a value of ``t`` has in registers: bf16 as its 16-bit pattern."""
    return T.U16 if t is T.BF16 else t


def float_bits(value: float, t: ElemType) -> int:
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


def nonfinite(bits: int, t: ElemType) -> str:
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


def short_loop(s: ir.For) -> bool:
    """Whether ``s`` has constant bounds and at most ``UNROLL_TRIPS`` trips."""
    bounds = (s.start, s.stop, s.step)
    if not all(isinstance(x, ir.Const) for x in bounds):
        return False
    start, stop, step = (int(x.value) for x in bounds if isinstance(x, ir.Const))
    return step != 0 and len(range(start, stop, step)) <= UNROLL_TRIPS


def may_fault(e: ir.Expr) -> bool:
    """Whether evaluating ``e`` where the IR would not could fault or be undefined (a load
    out of bounds, an integer division by zero): such operands are evaluated lazily."""
    for x in subexpressions(e):
        if isinstance(x, ir.Load):
            return True
        if isinstance(x, ir.Binary) and x.op in (BinOp.DIV, BinOp.REM) and x.a.type.is_int:
            return True
    return False


@dataclass(frozen=True)
class Pointer:
    """A scalar held in a Function variable (a ``Let`` or a loop variable)."""

    var: str
    type: ElemType


@dataclass(frozen=True)
class ArraySym:
    """An array: its variable, storage class and element type; ``quad``: held as 16-byte
    words (``backends.spirv.lower.quad_arrays``), ``binding``: a storage buffer's binding;
    ``stored``: for an array in another's storage (``ir.ArrayDecl.shares``), whose variable
    ``var`` is, that array's element type (its elements are read and written through it)."""

    var: str
    storage: str  # StorageBuffer, Workgroup, Function
    elem: ElemType
    size: int | None  # None for a runtime-sized storage buffer
    align: int
    quad: bool = False
    binding: int | None = None
    stored: ElemType | None = None

    @property
    def variable(self) -> ArraySym:
        """The array its variable declares: itself, or the one whose storage it shares."""
        if self.stored is None:
            return self
        return ArraySym(self.var, self.storage, self.stored, None, self.align, self.quad)

    @property
    def ratio(self) -> int:
        """Elements of the variable per element of this array (1 unless it shares another's
        storage of narrower elements)."""
        return memory_type(self.elem).bits // memory_type(self.variable.elem).bits


@dataclass(frozen=True)
class FragSym:
    var: str
    type: str
    decl: ir.FragDecl


Symbol = str | Pointer | ArraySym | FragSym  # str: an SSA id (a scalar parameter)


class ModuleBuilder:
    """Accumulates the sections of one module while the kernel body is printed: ids, types,
    constants and single instructions. ``ExpressionPrinter`` and the printer in ``emit``
    extend it. Its ids are of two kinds that cannot meet: named ids (``declare``) begin with a
    letter and are the printer's own words, numbered ids (``fresh``) begin with their number
    and are the only ones that carry a user's name."""

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
        self.counter = 0  # the last numbered id
        # the named ids in use: these three are written directly, the others by ``declare``
        self.named = {"%main", "%entry", "%glsl"}
        self.label = "%entry"
        self.terminated = False
        self.scope: ChainMap[str, Symbol] = ChainMap()
        self.builtins: dict[Builtin, str] = {}
        self.pc_offset = 0

    # ------------------------------------------------------------------ ids and types

    def fresh(self, stem: str = "") -> str:
        """A numbered id: the next number, then ``stem`` (what it holds, for a reader)."""
        self.counter += 1
        suffix = _STEM_OUTSIDE.sub("_", stem)
        return f"%{self.counter}_{suffix}" if suffix else f"%{self.counter}"

    def declare(self, key: tuple[object, ...], name: str, line: str) -> str:
        """The named id ``name`` of the global ``line`` (with ``{id}`` for its result),
        declared once per ``key``. ``name`` is the printer's own, never user text."""
        if key not in self.ids:
            assert _NAMED.fullmatch(name) and name not in self.named, (key, name)
            self.named.add(name)
            self.ids[key] = name
            self.globals.append(line.format(id=name))
        return self.ids[key]

    def void_type(self) -> str:
        return self.declare(("void",), "%void", "{id} = OpTypeVoid")

    def bf16_component(self) -> str:
        """``OpTypeFloat 16 BFloat16KHR``: the components of bf16 cooperative matrices (a bf16
        value anywhere else is its 16-bit pattern, ``type_of(T.BF16)``)."""
        self.caps.add("BFloat16TypeKHR")
        self.exts.add("SPV_KHR_bfloat16")
        return self.declare(("bf16",), "%bf16", "{id} = OpTypeFloat 16 BFloat16KHR")

    def type_of(self, t: ElemType) -> str:
        """The SPIR-V type of a value of ``t`` in registers (``value_type``: bf16 as u16)."""
        if t is T.BOOL:
            return self.declare(("bool",), "%bool", "{id} = OpTypeBool")
        if t is T.BF16:
            return self.type_of(T.U16)
        if t.is_int:
            self.caps.update({8: ["Int8"], 16: ["Int16"], 64: ["Int64"]}.get(t.bits, []))
            return self.declare(("int", t), f"%{INT_NAMES[t]}",
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
            bits = float_bits(float(value), t)
            if t is T.BF16:
                return self.const(bits, T.U16)
            as_float = float(np.array([bits], f"u{t.bits // 8}").view(f"f{t.bits // 8}")[0])
            text = as_float.hex() if np.isfinite(as_float) else nonfinite(bits, t)
            name = re.sub(r"\W", "_", text.replace("-", "m"))
            return self.declare(("const", t, bits), f"%c_{t.value}_{name}",
                                f"{{id}} = OpConstant {self.type_of(t)} {text}")
        v = int(value)
        return self.declare(("const", t, v), f"%c_{INT_NAMES[t]}_{'m' if v < 0 else ''}"
                            f"{abs(v)}", f"{{id}} = OpConstant {self.type_of(t)} {v}")

    def u32(self, v: int) -> str:
        return self.const(v, T.U32)

    # ------------------------------------------------------------------ instructions

    def op(self, result_type: str, name: str, *operands: str) -> str:
        ident = self.fresh()
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
