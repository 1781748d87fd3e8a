"""The schedules of CUDA's policy run through Vulkan: each F16 rewrite of ``gemm_f16`` at
150x133x70 either runs bit-identically to the simulator or is refused, before it runs, with the
reason (a cooperative-matrix configuration the device does not report, more workgroup memory
than it has). Before the refusals existed, ``t128k32s3`` (60,928 bytes of workgroup memory on a
device with 49,152) lost the Vulkan device. Records ``vulkan_schedules_h200`` with the device's
limits.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from conftest import example
from records import record

from backends.pipeline import rewrite_for
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

SCHEDULES = ("t64k16", "t128k16", "t64k32s2", "t128k32s2", "t128k32s3", "t128k64s2",
             "t128k64s2g", "t128x256k32s3")


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.spirv import run as vulkan
    from backends.spirv.device import VulkanError, device

    d = device()
    launch = example("gemm_f16").make(150, 133, 70)
    rows: list[dict[str, Any]] = []
    for name in SCHEDULES:
        rw = rewrite_for(launch, lowering=Lowering.F16_OPERANDS, target="vulkan",
                         schedule=Schedule.parse(name)).launch
        try:
            got = vulkan.run(rw.kernel, dict(rw.args), rw.grid, rw.block)
        except VulkanError as e:
            rows.append({"schedule": name, "refused": e.reason})
            continue
        want = rw.simulate(target="vulkan")
        rows.append({"schedule": name, "bit_identical": all(
            np.array_equal(got[k].view(np.uint8), want[k].view(np.uint8)) for k in want)})
    record("vulkan_schedules_h200", {"device": d.name, "maxComputeSharedMemorySize":
                                     d.shared_bytes, "maxComputeWorkGroupInvocations":
                                     d.invocations, "rows": rows})
    return rows


@pytest.mark.device
@needs.vulkan_matrices
def test_every_schedule_runs_bit_identically_or_is_refused_with_a_reason(
        measured: list[dict[str, Any]]) -> None:
    assert not [r["schedule"] for r in measured if not r.get("bit_identical", True)]
    assert all(r["refused"] for r in measured if "refused" in r)
