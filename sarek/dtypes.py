"""Element-type facts that need NumPy: the dtype holding each type's values, the way back from
a dtype, and the range of each integer type. The one home of these facts; the DSL, the
simulator, the oracle and the device runners all read them here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np

from sarek.ir import ElemType


class _Dtypes(Mapping[ElemType, "np.dtype[Any]"]):
    """The dtype of every element type; bf16's (ml_dtypes' ``bfloat16``) is made on first use,
    so that a process that never touches bf16 never imports ml_dtypes (over a second on a
    slow machine, most of a new process's start)."""

    _plain: Mapping[ElemType, np.dtype[Any]] = MappingProxyType({
        ElemType.I8: np.dtype(np.int8), ElemType.U8: np.dtype(np.uint8),
        ElemType.I16: np.dtype(np.int16), ElemType.U16: np.dtype(np.uint16),
        ElemType.I32: np.dtype(np.int32), ElemType.U32: np.dtype(np.uint32),
        ElemType.I64: np.dtype(np.int64), ElemType.U64: np.dtype(np.uint64),
        ElemType.F16: np.dtype(np.float16), ElemType.F32: np.dtype(np.float32),
        ElemType.F64: np.dtype(np.float64), ElemType.BOOL: np.dtype(np.bool_),
    })

    def __getitem__(self, t: ElemType) -> np.dtype[Any]:
        if t is ElemType.BF16:
            return bfloat16()
        return self._plain[t]

    def __iter__(self) -> Iterator[ElemType]:
        return iter(ElemType)

    def __len__(self) -> int:
        return len(ElemType)

    def __contains__(self, t: object) -> bool:
        return t in self._plain or t == ElemType.BF16


@cache
def bfloat16() -> np.dtype[Any]:
    """ml_dtypes' ``bfloat16`` dtype (imported on first use)."""
    import ml_dtypes

    out: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return out


NUMPY_DTYPES: Mapping[ElemType, np.dtype[Any]] = _Dtypes()


def numpy_dtype(elem: ElemType) -> np.dtype[Any]:
    """The NumPy dtype that holds ``elem`` values (ml_dtypes' bfloat16 for bf16)."""
    return NUMPY_DTYPES[elem]


def elem_of(dt: np.dtype[Any]) -> ElemType | None:
    """The element type whose values ``dt`` holds, or None for a dtype no element type uses."""
    dt = np.dtype(dt)
    if dt.name == "bfloat16":
        return ElemType.BF16 if dt == bfloat16() else None
    return _ELEMS.get(dt)


_ELEMS = {dt: t for t, dt in _Dtypes._plain.items()}


def int_range(t: ElemType) -> tuple[int, int]:
    """The smallest and largest value of an integer type."""
    if t.is_signed:
        return -(1 << (t.bits - 1)), (1 << (t.bits - 1)) - 1
    return 0, (1 << t.bits) - 1
