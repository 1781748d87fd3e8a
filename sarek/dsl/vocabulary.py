"""The DSL's vocabulary as a user meets it outside a kernel: the element types (annotations,
casts, NumPy converters), the array annotations ``Global[T]`` and ``ReadOnly[T]``, and the
names that only mean something inside a kernel (``thread_idx``, ``barrier``, ``sqrt`` ...),
which raise ``OutsideKernel`` at the caller's line when called from plain Python."""

from __future__ import annotations

import builtins
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from sarek import dtypes
from sarek.errors import DslError
from sarek.ir import Builtin, ElemType, MathFn

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def numpy_dtype(elem: ElemType) -> np.dtype[Any]:
    """The NumPy dtype that holds ``elem`` values (ml_dtypes' bfloat16 for bf16)."""
    if not isinstance(elem, str) or elem not in dtypes.NUMPY_DTYPES:  # ElemType is a str enum
        raise DslError(f"{short(elem)} is not an element type (the types are "
                       f"{', '.join(t.value for t in ElemType)})", *user_line())
    return dtypes.numpy_dtype(ElemType(elem))


class ScalarType:
    """An element type as the DSL names it: an annotation (``n: i32``), a cast inside a kernel
    (``f32(0.0)``), and outside one a converter to the matching NumPy scalar."""

    def __init__(self, elem: ElemType) -> None:
        self.elem = elem

    def __call__(self, value: Any) -> Any:
        return numpy_dtype(self.elem).type(value)

    def __repr__(self) -> str:
        return f"sarek.{self.elem.value}"


i8, u8, i16, u16 = map(ScalarType, (ElemType.I8, ElemType.U8, ElemType.I16, ElemType.U16))
i32, u32, i64, u64 = map(ScalarType, (ElemType.I32, ElemType.U32, ElemType.I64, ElemType.U64))
f16, bf16, f32, f64 = map(ScalarType, (ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.F64))
boolean = ScalarType(ElemType.BOOL)


@dataclass(frozen=True)
class ArrayType:
    """The annotation of an array parameter: its element type and whether it is read-only."""

    elem: ElemType
    readonly: bool


class Global:
    """``Global[T]``: a writable array parameter in global memory."""

    def __class_getitem__(cls, t: ScalarType) -> ArrayType:
        return ArrayType(scalar_type(t).elem, readonly=False)


class ReadOnly:
    """``ReadOnly[T]``: a global array parameter the kernel only reads."""

    def __class_getitem__(cls, t: ScalarType) -> ArrayType:
        return ArrayType(scalar_type(t).elem, readonly=True)


def scalar_type(t: object) -> ScalarType:
    if not isinstance(t, ScalarType):
        raise DslError(f"an array element type must be a sarek type such as sarek.f32, not "
                       f"{short(t)}", *user_line())
    return t


def user_line() -> tuple[str, int]:
    """The file and line of the innermost caller outside this module (the user's line that
    misused a DSL name)."""
    frame = sys._getframe(1)
    while (frame.f_back is not None
           and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _PACKAGE):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def hashable(obj: object) -> bool:
    """Whether ``obj`` can be looked up in a dict (a kernel may name any module-level value)."""
    try:
        hash(obj)
    except TypeError:
        return False
    return True


class OutsideKernel(DslError, RuntimeError):
    """A name that only means something inside a kernel (``barrier``, ``shared`` ...) called
    from plain Python; a ``DslError`` at the caller's line (and a ``RuntimeError``, as it was
    before it had a reason)."""


class Marker:
    """A name that only has a meaning inside a kernel."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *args: object) -> NoReturn:
        raise OutsideKernel(f"sarek.{self.name} can only be used inside a @sarek.kernel "
                            "function", *user_line())

    def __repr__(self) -> str:
        return f"sarek.{self.name}"


class Dim3(Marker):
    """``thread_idx`` and friends: ``.x``, ``.y`` and ``.z`` inside a kernel."""


thread_idx, block_idx, block_dim, grid_dim = (
    Dim3(n) for n in ("thread_idx", "block_idx", "block_dim", "grid_dim"))
subgroup_id, subgroup_lane, subgroup_size = (
    Marker(n) for n in ("subgroup_id", "subgroup_lane", "subgroup_size"))
barrier, shared, local, view = (Marker(n) for n in ("barrier", "shared", "local", "view"))
sqrt, exp, log, sin, cos, tanh, floor, ceil, fma = (
    Marker(fn.value) for fn in (MathFn.SQRT, MathFn.EXP, MathFn.LOG, MathFn.SIN, MathFn.COS,
                                 MathFn.TANH, MathFn.FLOOR, MathFn.CEIL, MathFn.FMA))

SCALAR_BUILTINS = {subgroup_id: Builtin.SUBGROUP_ID, subgroup_lane: Builtin.SUBGROUP_LANE,
                    subgroup_size: Builtin.SUBGROUP_SIZE}
MATH_FUNCTIONS: dict[object, MathFn] = {
    sqrt: MathFn.SQRT, exp: MathFn.EXP, log: MathFn.LOG, sin: MathFn.SIN, cos: MathFn.COS,
    tanh: MathFn.TANH, floor: MathFn.FLOOR, ceil: MathFn.CEIL, fma: MathFn.FMA,
    math.sqrt: MathFn.SQRT, math.exp: MathFn.EXP, math.log: MathFn.LOG, math.sin: MathFn.SIN,
    math.cos: MathFn.COS, math.tanh: MathFn.TANH, math.floor: MathFn.FLOOR,
    math.ceil: MathFn.CEIL, builtins.abs: MathFn.ABS, builtins.min: MathFn.MIN,
    builtins.max: MathFn.MAX,
}
