"""Warpgroup schedules staged by bulk tensor copies on the H200 through the launch path
(``kernel[grid, block]``, ``backends.cuda.launch``): the tensor maps are encoded from the
caller's arrays, and the outputs are the simulator's bits, where the operands take the maps
and where they fall back to ``cp.async``."""

from __future__ import annotations

import needs
import numpy as np
import pytest
from conftest import example

SCHEDULE = "t128x256k64s3gfb"


@needs.hopper
@pytest.mark.parametrize("size", [(256, 136, 136), (150, 136, 72), (150, 133, 70)],
                         ids=["whole-tiles", "maps", "cp-async"])
def test_a_bulk_schedule_launched_on_the_device_gives_the_simulators_bits(
        size: tuple[int, int, int]) -> None:
    module = example("gemm_f16")
    launch = module.make(*size, seed=11)
    kernel = module.matmul_f16
    outs = {}
    for where in ("cuda", "sim"):
        args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in launch.args.items()}
        run = kernel.with_options(target=where, lowering="F16_operands", schedule=SCHEDULE)
        run[launch.grid, launch.block](*args.values())
        outs[where] = args["c"].view(np.uint16)
    assert np.array_equal(outs["cuda"], outs["sim"])
