"""Results remembered by object identity (``sarek.memo``): the checker's verdicts and the
targets' lowerings are computed once per kernel object, never handed to another object."""

from __future__ import annotations

import pytest
from conftest import example

from backends.cuda import lower as cuda_lower
from sarek import ir, ir_check
from sarek.errors import IRError
from sarek.ir import ElemType
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.memo import ByIdentity, forget_all, remembered


class Box:
    def __init__(self, value: int) -> None:
        self.value = value


def test_a_result_is_found_for_the_same_object_only() -> None:
    memo: ByIdentity[Box, int] = ByIdentity(4)
    first, twin = Box(1), Box(1)
    memo.put(first, 10)
    assert memo.get(first) == 10
    assert memo.get(twin) is None  # equal contents, another object
    assert memo.get(first, "other tag") is None


def test_an_entry_under_an_objects_id_is_not_its_result_unless_it_holds_that_object() -> None:
    memo: ByIdentity[Box, int] = ByIdentity(4)
    newcomer, departed = Box(1), Box(1)
    # what a memo keyed by id alone would hand out once an object was gone and its id reused
    memo._entries[(id(newcomer), "")] = (departed, 99)
    assert memo.get(newcomer) is None


def test_the_least_recently_used_result_is_forgotten_past_the_limit() -> None:
    memo: ByIdentity[Box, int] = ByIdentity(2)
    a, b, c = Box(0), Box(1), Box(2)
    memo.put(a, 0)
    memo.put(b, 1)
    assert memo.get(a) == 0  # a is now the most recent
    memo.put(c, 2)
    assert (memo.get(a), memo.get(b), memo.get(c)) == (0, None, 2)


def test_a_remembered_function_runs_once_per_object_and_not_for_what_raises() -> None:
    calls: list[int] = []

    @remembered(8)
    def square(box: Box) -> int:
        calls.append(box.value)
        if box.value < 0:
            raise ValueError("negative")
        return box.value * box.value

    two, bad = Box(2), Box(-1)
    assert (square(two), square(two), square(Box(2))) == (4, 4, 4)
    assert calls == [2, 2]
    for _ in range(2):
        with pytest.raises(ValueError):
            square(bad)
    assert calls == [2, 2, -1, -1]
    forget_all()
    square(two)
    assert calls == [2, 2, -1, -1, 2]


def test_an_ill_formed_kernel_is_refused_every_time() -> None:
    bad = ir.Kernel(name="k", params=(ir.ArrayParam(name="a", elem=ElemType.I32),),
                    body=(ir.Store(array="a", index=ir.Var(name="i", type=ElemType.I32),
                                   value=ir.Const(value=0, type=ElemType.I32)),))
    for _ in range(2):
        with pytest.raises(IRError, match="'i'"):
            ir_check.ensure_valid(bad)


def test_a_lowering_is_computed_once_per_kernel_object() -> None:
    launch = example("gemm_f16").make(20, 12, 9)
    kernel = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS).launch.kernel
    lowered = cuda_lower.lower(kernel)
    assert cuda_lower.lower(kernel) is lowered
    copy = kernel.model_copy(deep=True)
    again = cuda_lower.lower(copy)
    assert again is not lowered and again == lowered  # computed afresh, the same kernel
