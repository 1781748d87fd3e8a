"""The IR's statement families (``sarek.ir.STATEMENT_FAMILIES``) and what each target prints
(``backends.families``): every statement type is in one family, the neutral rewrite emits
only neutral families, and a target refuses a statement of a family it does not take with
the one message that says why."""

from __future__ import annotations

import typing

import pytest

from backends.cstyle import EmitError
from backends.families import NEUTRAL, WHY, refusal
from backends.metal import lower as metal_lower
from backends.opencl.emit import PORTABLE
from backends.opencl.emit_nv import NV
from backends.spirv import lower as spirv_lower
from sarek import ir
from sarek.ir_walk import walk
from sarek.matrix_rewrite import rewrite_launch
from tests.conftest import example

STATEMENT_TYPES = typing.get_args(typing.get_args(ir.Stmt)[0])


def test_every_statement_type_is_in_exactly_one_family() -> None:
    listed = [t for types in ir.STATEMENT_FAMILIES.values() for t in types]
    assert sorted(t.__name__ for t in listed) == sorted(t.__name__ for t in STATEMENT_TYPES)
    assert len(listed) == len(set(listed))
    assert set(WHY) == set(ir.STATEMENT_FAMILIES)


@pytest.mark.parametrize("name", ["gemm_f16", "gemm_f32", "gemm_i32", "gemm_tiled_2d"])
def test_the_neutral_rewrite_emits_only_neutral_families(name: str) -> None:
    for size in ((70, 45, 33), (1024, 1024, 256)):  # the seed's schedule and a large one
        kernel = rewrite_launch(example(name).make(*size)).launch.kernel
        assert {ir.family(s) for s in walk(kernel.body)} <= NEUTRAL, (name, size)


@pytest.mark.parametrize("family", sorted(ir.STATEMENT_FAMILIES))
def test_a_family_a_target_does_not_take_is_refused_with_its_reason(family: str) -> None:
    other = frozenset({"fragment" if family == "plain" else "plain"})
    for kind in ir.STATEMENT_FAMILIES[family]:
        s = kind.model_construct()
        error = refusal(s, other, "T")  # type: ignore[arg-type]
        assert isinstance(error, EmitError)
        assert error.reason == f"T has no {s.kind} statement: {WHY[family]}"
        assert refusal(s, frozenset({family}), "T") is None  # type: ignore[arg-type]


def test_the_matrix_level_targets_take_nothing_of_nvidias() -> None:
    assert not PORTABLE & {"fragment", "tile", "warp", "warpgroup"}
    assert not NEUTRAL & {"tile", "warp", "warpgroup"}
    assert "warpgroup" not in NV and "warp" in NV


@pytest.mark.parametrize(("lower", "target"), [(spirv_lower.lower, "SPIR-V"),
                                               (metal_lower.lower, "Metal")])
def test_spirv_and_metal_refuse_a_warpgroup_statement_by_its_family(
        lower: typing.Callable[[ir.Kernel], ir.Kernel], target: str) -> None:
    kernel = ir.Kernel(name="k", params=(ir.ArrayParam(name="a", elem=ir.ElemType.F32),),
                       body=(ir.WgmmaWait(),))
    with pytest.raises(EmitError, match=f"^{target} has no wgmma_wait statement: wgmma is an "
                       "sm_90a warpgroup instruction"):
        lower(kernel)
