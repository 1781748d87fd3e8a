"""Probe the GPU's Vulkan cooperative-matrix support and consult the gate with it.

Runs ``backends.spirv.probe.vulkan_devices()`` (vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR
through the ``vulkan`` package), compares each device's list with the recorded H200 list the
tests use, and gives the gate's verdict for every lowering's configuration at fragments 16
and 8. Writes bench/results/vulkan_probe_h200.json and prints a table. Needs a Vulkan driver
(the GPU machine, with the loader and VK_DRIVER_FILES set).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backends.spirv import probe  # noqa: E402
from sarek import coopmat, device_support  # noqa: E402
from sarek.ir import ElemType  # noqa: E402
from sarek.matrix_scheme import Lowering, config_of  # noqa: E402

OPERANDS = {Lowering.INT32_BYTE_PLANES: ElemType.I32, Lowering.F16_OPERANDS: ElemType.F16,
            Lowering.BF16_OPERANDS: ElemType.BF16, Lowering.BF16X3_OPERANDS: ElemType.F32}


def main() -> int:
    recorded = device_support.recorded_h200_vulkan()
    out = []
    for support in probe.vulkan_devices():
        configs = sorted(str(c) for c in support.configs or ())
        verdicts = {}
        for lowering, operand in OPERANDS.items():
            for frag in (16, 8):
                v = coopmat.verdict(config_of(lowering, operand, frag), support)
                verdicts[f"{lowering.value} frag {frag}"] = (
                    "available" if isinstance(v, coopmat.Available) else v.reason)
        same = support.configs == recorded.configs
        out.append({"device": support.device, "configs": configs,
                    "equals_recorded_h200_list": same, "verdicts": verdicts})
        print(f"{support.device}: {len(configs)} configurations"
              f"{' (the recorded H200 list)' if same else ' (DIFFERS from the recorded list)'}")
        for c in configs:
            print(f"  {c}")
        for what, v in verdicts.items():
            print(f"  gate {what:28} {v}")
    path = ROOT / "bench" / "results" / "vulkan_probe_h200.json"
    path.write_text(json.dumps({"devices": out}, indent=2) + "\n")
    return 0 if out else 1


if __name__ == "__main__":
    sys.exit(main())
