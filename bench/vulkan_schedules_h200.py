"""The schedules of CUDA's policy run through Vulkan: each rewrite of ``gemm_f16`` under F16
at 150x133x70 either runs bit-identically to the simulator or is refused, before it runs,
with the reason (a cooperative-matrix configuration the device does not report, more
workgroup memory than it has). Before the refusals existed, ``t128k32s3`` (60,928 bytes of
workgroup memory on a device with 49,152) lost the Vulkan device.

Prints a table and writes bench/results/vulkan_schedules_h200.json with the device's limits.
Needs a Vulkan driver (the GPU machine, with the loader and VK_DRIVER_FILES set).

    python bench/vulkan_schedules_h200.py [--schedule t64k16 ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from backends.pipeline import rewrite_for  # noqa: E402
from backends.spirv import run as vulkan  # noqa: E402
from backends.spirv.device import VulkanError, device  # noqa: E402
from sarek.loader import load_module  # noqa: E402
from sarek.matrix_scheme import Lowering  # noqa: E402
from sarek.schedule import Schedule  # noqa: E402

SCHEDULES = ("t64k16", "t128k16", "t64k32s2", "t128k32s2", "t128k32s3", "t128k64s2",
             "t128k64s2g", "t128x256k32s3")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedule", action="append", help="these instead of the list")
    args = parser.parse_args()
    d = device()
    launch = load_module(ROOT / "examples" / "gemm_f16.py").make(150, 133, 70)
    table = Table(title=f"F16 rewrites of gemm_f16 at 150x133x70 through Vulkan on {d.name}")
    for col in ("schedule", "outcome"):
        table.add_column(col)
    rows: list[dict[str, Any]] = []
    for name in args.schedule or SCHEDULES:
        rw = rewrite_for(launch, lowering=Lowering.F16_OPERANDS, target="vulkan",
                            schedule=Schedule.parse(name)).launch
        try:
            got = vulkan.run(rw.kernel, dict(rw.args), rw.grid, rw.block)
        except VulkanError as e:
            row = {"schedule": name, "refused": e.reason}
        else:
            want = rw.simulate(target="vulkan")
            row = {"schedule": name, "bit_identical": all(
                np.array_equal(got[k].view(np.uint8), want[k].view(np.uint8)) for k in want)}
        rows.append(row)
        table.add_row(name, row.get("refused") or ("bit-identical" if row["bit_identical"]
                                                   else "DIFFERS"))
    Console(width=140).print(table)
    path = ROOT / "bench" / "results" / "vulkan_schedules_h200.json"
    path.write_text(json.dumps({"device": d.name, "maxComputeSharedMemorySize": d.shared_bytes,
                                "maxComputeWorkGroupInvocations": d.invocations,
                                "rows": rows}, indent=2) + "\n")
    return 0 if all(r.get("bit_identical", True) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
