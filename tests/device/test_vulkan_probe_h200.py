"""The GPU's Vulkan cooperative-matrix support, probed live, against the list the gate uses.

``backends.spirv.probe.vulkan_devices()`` asks every Vulkan device
(``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`` through the ``vulkan`` package) for its
configurations; the ``vulkan`` target's gate decides with the recorded H200 list
(``sarek.device_support.recorded_h200_vulkan``), so on an H200 the live list must be that
list. The gate's verdict for every lowering's configuration at fragments 16 and 8 is recorded
for each device, and so are its extensions (``probe.vulkan_extensions``) and the runner's
device's compute limits (``backends.spirv.device.Device``); an H200's must be those Vulkan's
staging policy was fitted to. Records ``vulkan_probe_h200``.
"""

from __future__ import annotations

from typing import Any

import needs
import pytest
from records import record

from backends.spirv.device import COOPMAT2, COOPMAT2_NAMES, device
from sarek import coopmat, device_support
from sarek.ir import ElemType
from sarek.matrix_scheme import Lowering, config_of

OPERANDS = {Lowering.INT32_BYTE_PLANES: ElemType.I32, Lowering.F16_OPERANDS: ElemType.F16,
            Lowering.BF16_OPERANDS: ElemType.BF16, Lowering.BF16X3_OPERANDS: ElemType.F32}


@pytest.fixture(scope="module")
def measured() -> list[dict[str, Any]]:
    from backends.spirv import probe

    recorded = device_support.recorded_h200_vulkan()
    out = []
    for support in probe.vulkan_devices():
        verdicts = {}
        for lowering, operand in OPERANDS.items():
            for frag in (16, 8):
                v = coopmat.verdict(config_of(lowering, operand, frag), support)
                verdicts[f"{lowering.value} frag {frag}"] = (
                    "available" if isinstance(v, coopmat.Available) else v.reason)
        out.append({"device": support.device,
                    "configs": sorted(str(c) for c in support.configs or ()),
                    "equals_recorded_h200_list": support.configs == recorded.configs,
                    "verdicts": verdicts})
    d = device()
    record("vulkan_probe_h200", {
        "devices": out, "extensions": probe.vulkan_extensions(),
        "runner_device": {"device": d.name, "shared_bytes": d.shared_bytes,
                          "invocations": d.invocations,
                          "cooperative_matrix2": {f: d.features[f] for f in COOPMAT2_NAMES}}})
    return out


@pytest.mark.device
@needs.vulkan
def test_a_vulkan_device_answers_the_probe(measured: list[dict[str, Any]]) -> None:
    assert measured


@pytest.mark.device
@needs.vulkan
def test_an_h200_lists_the_configurations_the_gate_was_given(measured: list[dict[str, Any]]
                                                             ) -> None:
    h200 = [d for d in measured if "H200" in d["device"]]
    if not h200:
        pytest.skip(f"no H200 among the Vulkan devices ({[d['device'] for d in measured]})")
    assert all(d["equals_recorded_h200_list"] for d in h200), [d["configs"] for d in h200]


@pytest.mark.device
@needs.vulkan
def test_an_h200_reports_the_limits_vulkans_staging_policy_was_fitted_to() -> None:
    """The policy's schedules were chosen to fit 48 KiB of workgroup memory; a device with
    less refuses them with the reason (``backends.spirv.device.over_limits``)."""
    from backends.spirv.lower import STAGING

    d = device()
    if "H200" not in d.name:
        pytest.skip(f"the Vulkan device is {d.name}, not an H200")
    assert d.shared_bytes == STAGING.shared_bytes
    assert 32 * max(schedule.block_waves for _, schedule in STAGING.declared) <= d.invocations


@pytest.mark.device
@needs.vulkan
def test_the_runner_reads_the_workgroup_scope_features_a_driver_offers() -> None:
    """The features chain holds ``VK_NV_cooperative_matrix2``'s block where the driver offers
    the extension; NVIDIA's driver 580 on an H200 does, with workgroup scope."""
    from backends.spirv import probe

    d = device()
    extensions = {name.removesuffix(" (Vulkan)"): e
                  for name, e in probe.vulkan_extensions().items()}
    offered = COOPMAT2 in extensions.get(d.name, [])
    if not offered:
        pytest.skip(f"{d.name}'s driver does not offer {COOPMAT2}")
    assert d.features["cooperativeMatrixWorkgroupScope"]
