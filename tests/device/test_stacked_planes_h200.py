"""The byte planes on ``wgmma`` on the H200 through the launch path: the pre-pass that splits
int32 operands into stacked byte planes, then ``wgmma.mma_async ... .s32.u8.u8``, gives the
simulator's bits and NumPy's int64 product modulo 2^32, on NumPy arrays and on torch tensors;
the operands are read only."""

from __future__ import annotations

import needs
import numpy as np
import pytest
from conftest import example
from torch_launch import launched_twice

SCHEDULE = "t128x256k128s4gf"


def modular(a: np.ndarray, b: np.ndarray, m: int, n: int, k: int) -> np.ndarray:
    """``A @ B`` modulo 2^32, as int32."""
    a64, b64 = a.reshape(m, k).astype(np.int64), b.reshape(k, n).astype(np.int64)
    return ((a64 @ b64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32).ravel()


@needs.hopper
@pytest.mark.parametrize("size", [(150, 300, 70), (256, 512, 200), (70, 45, 33)])
def test_the_stacked_planes_on_the_device_give_the_simulators_bits(
        size: tuple[int, int, int]) -> None:
    module = example("gemm_i32")
    launch = module.make(*size, seed=19)
    outs = {}
    for where in ("cuda", "sim"):
        args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in launch.args.items()}
        run = module.matmul_i32.with_options(target=where, lowering="Int32_byte_planes",
                                             schedule=SCHEDULE)
        run[launch.grid, launch.block](*args.values())
        outs[where] = args["c"]
        assert np.array_equal(args["a"], launch.args["a"])
        assert np.array_equal(args["b"], launch.args["b"])
    assert np.array_equal(outs["cuda"], outs["sim"])
    assert np.array_equal(outs["cuda"], modular(launch.args["a"], launch.args["b"], *size))


@needs.hopper
def test_the_stacked_planes_on_torch_tensors_wrap_modulo_2_32() -> None:
    pytest.importorskip("torch")
    module = example("gemm_i32")
    m, n, k = 1024, 1024, 512
    launch = module.make(m, n, k, seed=23)
    run = module.matmul_i32.with_options(lowering="Int32_byte_planes", schedule=SCHEDULE)
    args = launched_twice(run, launch)
    got = args[2].cpu().numpy()
    assert np.array_equal(got, modular(launch.args["a"], launch.args["b"], m, n, k))
