"""The conversion pre-pass on the H200 through the launch path (``kernel[grid, block]``,
``backends.cuda.launch``): the sequence of a conversion kernel and the ``wgmma`` GEMM gives the
simulator's bits, on NumPy arrays (copied in and back) and on device arrays (the temporaries
allocated on their device and stream), and writes nothing of the caller's but C."""

from __future__ import annotations

import needs
import numpy as np
import pytest
from conftest import example
from torch_launch import launched_twice

SCHEDULE = "t128x256k64s3gf"


@needs.hopper
@pytest.mark.parametrize("lowering", ["Bf16_operands", "F16_operands"])
def test_the_prepass_launched_on_the_device_gives_the_simulators_bits(lowering: str) -> None:
    module = example("gemm_f32")
    launch = module.make(150, 133, 70, seed=13)
    outs = {}
    for where in ("cuda", "sim"):
        args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in launch.args.items()}
        run = module.matmul.with_options(target=where, lowering=lowering, schedule=SCHEDULE)
        run[launch.grid, launch.block](*args.values())
        outs[where] = args["c"].view(np.uint32)
        assert np.array_equal(args["a"], launch.args["a"])
        assert np.array_equal(args["b"], launch.args["b"])
    assert np.array_equal(outs["cuda"], outs["sim"])


@needs.hopper
def test_the_policys_prepass_on_torch_tensors_gives_the_bits_of_the_staged_kernel() -> None:
    pytest.importorskip("torch")
    module = example("gemm_f32")
    launch = module.make(1024, 1024, 256, seed=17)
    outs = {}
    for schedule in (None, "t128x256k32s3"):  # the policy's pre-pass; converting as it stages
        run = module.matmul.with_options(lowering="Bf16_operands", schedule=schedule)
        args = launched_twice(run, launch)
        outs[schedule] = args[2].cpu().numpy().view(np.uint32)
        assert np.array_equal(args[0].cpu().numpy(), launch.args["a"])
    assert np.array_equal(outs[None], outs["t128x256k32s3"])
