"""``sarek conformance --target vulkan`` with the device gate's refusals in the record (slow).

Runs the conformance matrix of ``backends.conformance`` for the ``vulkan`` target (every
example at every size, the original and each rewrite the gate permits on this device, run
through Vulkan and compared bit for bit with the simulator running the same lowered kernel
under the target's arithmetic model, canaries included) and records beside it every (lowering,
subgroup, fragment) the target refuses, with the reason, and the float-controls modes the
device leaves to itself. Records ``conformance_vulkan``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from conftest import EXAMPLES
from records import record

from backends import conformance, registry
from backends.target import Target
from sarek.ir import ElemType
from sarek.matrix_scheme import SUPPORTED_FRAGMENT, SUPPORTED_SUBGROUP, lowerings_taking

FLOAT_MODES = ("shaderDenorm", "shaderSignedZero", "shaderRounding")


def refusals(target: Target) -> list[dict[str, object]]:
    """Every (lowering, subgroup, fragment) of the examples' lowerings the target refuses."""
    lowerings = dict.fromkeys(low for t in (ElemType.I32, ElemType.F16, ElemType.F32)
                              for low in lowerings_taking(t))
    return [{"lowering": low.value, "subgroup": sg, "frag": frag, "reason": reason}
            for low in lowerings for sg in SUPPORTED_SUBGROUP for frag in SUPPORTED_FRAGMENT
            if (reason := target.refuses(low, sg, frag)) is not None]


def test_the_target_refuses_subgroups_of_64_with_a_reason() -> None:
    refused = refusals(registry.target("vulkan"))
    assert any(r["subgroup"] == 64 for r in refused)
    assert all(isinstance(r["reason"], str) and r["reason"] for r in refused)


@pytest.mark.device
@pytest.mark.slow
@needs.vulkan
def test_every_case_of_the_matrix_is_bit_identical_with_no_canary_changed() -> None:
    from backends.spirv.device import device, device_name

    target = registry.target("vulkan")
    with np.errstate(all="ignore"):
        outcomes = [conformance.check(case, target, device=True)
                    for case in conformance.matrix(target, EXAMPLES)]
    result: dict[str, Any] = conformance.report("vulkan", device_name(), target.arith, False,
                                                outcomes)
    result["refused"] = refusals(target)
    result["support"] = {"device": target.support().device, "note": target.support().note}
    result["float_modes_left_to_the_device"] = sorted(
        name for name, ok in device().features.items() if name.startswith(FLOAT_MODES)
        and not ok)
    record("conformance_vulkan", result)
    assert not [conformance.failure(o) for o in outcomes if not o.ok]
