"""Element-type facts that need NumPy: the dtype holding each type's values, the way back from
a dtype, and the range of each integer type. The one home of these facts; the DSL, the
simulator, the oracle and the device runners all read them here."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import ml_dtypes
import numpy as np

from sarek.ir import ElemType

NUMPY_DTYPES: Mapping[ElemType, np.dtype[Any]] = MappingProxyType({
    ElemType.I8: np.dtype(np.int8), ElemType.U8: np.dtype(np.uint8),
    ElemType.I16: np.dtype(np.int16), ElemType.U16: np.dtype(np.uint16),
    ElemType.I32: np.dtype(np.int32), ElemType.U32: np.dtype(np.uint32),
    ElemType.I64: np.dtype(np.int64), ElemType.U64: np.dtype(np.uint64),
    ElemType.F16: np.dtype(np.float16), ElemType.BF16: np.dtype(ml_dtypes.bfloat16),
    ElemType.F32: np.dtype(np.float32), ElemType.F64: np.dtype(np.float64),
    ElemType.BOOL: np.dtype(np.bool_),
})
_ELEMS = {dt: t for t, dt in NUMPY_DTYPES.items()}


def numpy_dtype(elem: ElemType) -> np.dtype[Any]:
    """The NumPy dtype that holds ``elem`` values (ml_dtypes' bfloat16 for bf16)."""
    return NUMPY_DTYPES[elem]


def elem_of(dt: np.dtype[Any]) -> ElemType | None:
    """The element type whose values ``dt`` holds, or None for a dtype no element type uses."""
    return _ELEMS.get(np.dtype(dt))


def int_range(t: ElemType) -> tuple[int, int]:
    """The smallest and largest value of an integer type."""
    if t.is_signed:
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1
