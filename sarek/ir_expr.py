"""The IR's vocabularies, parameters and expressions (``sarek.ir`` holds the statements and the
kernel, and re-exports everything here): closed enums, frozen pydantic models, the expression
union discriminated on ``kind``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field


class Node(BaseModel):
    """Every IR node: frozen, no extra fields, infinities and NaN as JSON constants."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


# --------------------------------------------------------------------------- vocabularies


class ElemType(StrEnum):
    """Element types. f16 and bf16 are storage types: arithmetic on them is not allowed."""

    I8 = "i8"
    U8 = "u8"
    I16 = "i16"
    U16 = "u16"
    I32 = "i32"
    U32 = "u32"
    I64 = "i64"
    U64 = "u64"
    F16 = "f16"
    BF16 = "bf16"
    F32 = "f32"
    F64 = "f64"
    BOOL = "bool"

    @property
    def is_int(self) -> bool:
        return self in _INT_BITS

    @property
    def is_signed(self) -> bool:
        return self in (ElemType.I8, ElemType.I16, ElemType.I32, ElemType.I64)

    @property
    def is_float(self) -> bool:
        return self in (ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.F64)

    @property
    def is_storage_only(self) -> bool:
        """f16 and bf16: values are loaded, stored and converted, never computed on."""
        return self in (ElemType.F16, ElemType.BF16)

    @property
    def is_arith(self) -> bool:
        """Types arithmetic is defined on: the integers, f32 and f64."""
        return self.is_int or self in (ElemType.F32, ElemType.F64)

    @property
    def bits(self) -> int:
        return 1 if self is ElemType.BOOL else _INT_BITS.get(self) or _FLOAT_BITS[self]


_INT_BITS = {
    ElemType.I8: 8, ElemType.U8: 8, ElemType.I16: 16, ElemType.U16: 16,
    ElemType.I32: 32, ElemType.U32: 32, ElemType.I64: 64, ElemType.U64: 64,
}
_FLOAT_BITS = {ElemType.F16: 16, ElemType.BF16: 16, ElemType.F32: 32, ElemType.F64: 64}


class MemSpace(StrEnum):
    """Where an array lives: global (parameters), shared (per block), local (per invocation)."""

    GLOBAL = "global"
    SHARED = "shared"
    LOCAL = "local"


class UnOp(StrEnum):
    NEG = "neg"      # arithmetic negation (wraps for integers)
    NOT = "not"      # logical not of a bool
    BITNOT = "bitnot"  # bitwise complement of an integer


class BinOp(StrEnum):
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"      # integers: truncates toward zero (C); floats: IEEE division
    REM = "rem"      # integers: C remainder, the sign of the dividend
    AND = "and"      # bitwise, integers
    OR = "or"
    XOR = "xor"
    SHL = "shl"      # shift amount must lie in [0, bits)
    SHR = "shr"      # arithmetic for signed types, logical for unsigned
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    EQ = "eq"
    NE = "ne"
    LAND = "land"    # short-circuit logical and of bools: b is evaluated only where a holds
    LOR = "lor"      # short-circuit logical or of bools: b is evaluated only where a fails


COMPARISONS = frozenset({BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE, BinOp.EQ, BinOp.NE})
LOGICAL = frozenset({BinOp.LAND, BinOp.LOR})
BITWISE = frozenset({BinOp.AND, BinOp.OR, BinOp.XOR, BinOp.SHL, BinOp.SHR})


class MathFn(StrEnum):
    """Math functions. ``fma`` rounds once; the others are defined on f32 and f64 (abs, min and
    max on integers too)."""

    ABS = "abs"
    MIN = "min"
    MAX = "max"
    SQRT = "sqrt"
    EXP = "exp"
    LOG = "log"
    SIN = "sin"
    COS = "cos"
    TANH = "tanh"
    FLOOR = "floor"
    CEIL = "ceil"
    FMA = "fma"


MATH_ARITY = {fn: 1 for fn in MathFn} | {MathFn.MIN: 2, MathFn.MAX: 2, MathFn.FMA: 3}


class Builtin(StrEnum):
    """Launch coordinates and sizes, all i32. Subgroups are the linear thread index within the
    block divided by the simulated or target subgroup size."""

    THREAD_IDX_X = "thread_idx.x"
    THREAD_IDX_Y = "thread_idx.y"
    THREAD_IDX_Z = "thread_idx.z"
    BLOCK_IDX_X = "block_idx.x"
    BLOCK_IDX_Y = "block_idx.y"
    BLOCK_IDX_Z = "block_idx.z"
    BLOCK_DIM_X = "block_dim.x"
    BLOCK_DIM_Y = "block_dim.y"
    BLOCK_DIM_Z = "block_dim.z"
    GRID_DIM_X = "grid_dim.x"
    GRID_DIM_Y = "grid_dim.y"
    GRID_DIM_Z = "grid_dim.z"
    SUBGROUP_ID = "subgroup_id"
    SUBGROUP_LANE = "subgroup_lane"
    SUBGROUP_SIZE = "subgroup_size"

    @property
    def varies_in_block(self) -> bool:
        """True for the builtins that differ between invocations of one block."""
        return self.name.startswith(("THREAD_IDX", "SUBGROUP_ID", "SUBGROUP_LANE"))


class FragUse(StrEnum):
    """The role of a fragment in a multiply-accumulate ``d = a * b + c``."""

    A = "a"
    B = "b"
    ACCUMULATOR = "accumulator"


class MmaAtom(StrEnum):
    """The warp-wide ``mma.sync`` instructions lowered kernels use, by shape and types
    (D.A.B.C); ``sarek.atoms.MMA`` holds each one's lane layouts."""

    M16N8K16_F32_F16 = "m16n8k16.f32.f16.f16.f32"
    M16N8K16_F32_BF16 = "m16n8k16.f32.bf16.bf16.f32"
    M16N8K16_S32_U8 = "m16n8k16.s32.u8.u8.s32"
    M16N8K16_S32_S8 = "m16n8k16.s32.s8.s8.s32"
    M16N8K32_S32_U8 = "m16n8k32.s32.u8.u8.s32"
    M16N8K32_S32_S8 = "m16n8k32.s32.s8.s8.s32"


class FragLayout(StrEnum):
    """How a fragment's rows lie in memory: row-major (rows contiguous) or column-major."""

    ROW = "row"
    COL = "col"


# --------------------------------------------------------------------------- parameters


class ArrayParam(Node):
    """A global array argument; ``readonly`` arrays may not be stored to."""

    kind: Literal["array"] = "array"
    name: str
    elem: ElemType
    space: MemSpace = MemSpace.GLOBAL
    readonly: bool = False


class ScalarParam(Node):
    """A scalar argument passed by value."""

    kind: Literal["scalar"] = "scalar"
    name: str
    elem: ElemType


Param: TypeAlias = Annotated[ArrayParam | ScalarParam, Field(discriminator="kind")]


# --------------------------------------------------------------------------- expressions


class Const(Node):
    """A literal of an element type (bool for True/False, int for integers, float for floats)."""

    kind: Literal["const"] = "const"
    value: bool | int | float
    type: ElemType


class Var(Node):
    """A scalar variable: a parameter, a ``Let``-declared local or a loop variable."""

    kind: Literal["var"] = "var"
    name: str
    type: ElemType


class BuiltinValue(Node):
    """A launch coordinate or size."""

    kind: Literal["builtin"] = "builtin"
    which: Builtin
    type: Literal[ElemType.I32] = ElemType.I32


class Unary(Node):
    """``op x``; the result has ``x``'s type."""

    kind: Literal["unary"] = "unary"
    op: UnOp
    x: Expr
    type: ElemType


class Binary(Node):
    """``a op b`` with ``a`` and ``b`` of one type (shift amounts excepted: any integer type);
    comparisons and logical operators give bool."""

    kind: Literal["binary"] = "binary"
    op: BinOp
    a: Expr
    b: Expr
    type: ElemType


class Cast(Node):
    """Conversion of ``x`` to ``type``: integers wrap, floats round to nearest even, floats to
    integers truncate toward zero and saturate (NaN gives 0), bool is ``x != 0``."""

    kind: Literal["cast"] = "cast"
    x: Expr
    type: ElemType


class Bitcast(Node):
    """The bits of ``x`` read as ``type``, of the same width (f16 and bf16 included): no
    conversion."""

    kind: Literal["bitcast"] = "bitcast"
    x: Expr
    type: ElemType


class Load(Node):
    """``array[index]``; the result has the array's element type."""

    kind: Literal["load"] = "load"
    array: str
    index: Expr
    type: ElemType


class Select(Node):
    """``cond ? a : b``; only the chosen side is evaluated for each invocation."""

    kind: Literal["select"] = "select"
    cond: Expr
    a: Expr
    b: Expr
    type: ElemType


class Call(Node):
    """A math function applied to arguments of the result type."""

    kind: Literal["call"] = "call"
    fn: MathFn
    args: tuple[Expr, ...]
    type: ElemType


Expr: TypeAlias = Annotated[
    Const | Var | BuiltinValue | Unary | Binary | Cast | Bitcast | Load | Select | Call,
    Field(discriminator="kind"),
]


for _model in (Unary, Binary, Cast, Bitcast, Load, Select, Call):
    _model.model_rebuild()
