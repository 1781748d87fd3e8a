"""The ``h200`` model against an independent one: MMA-Sim's Hopper model of ``mma.sync
m16n8k16`` (f16 and bf16 operands, f32 accumulator; ``pip install 'sarek[xcheck]'``).

The inputs are the adversarial device check's distributions (``tests/adversarial_cases.py``).
The two models first differed in two bf16 cases (``specs/simulator.md``, "MMA-Sim"): a negative
aligned sum smaller than 2^-149, which ``h200`` gave as -0 and MMA-Sim as +0; and a zero addend
with every product below 2^-133, where MMA-Sim aligns at 2^-133. The H200 sided with MMA-Sim
on every such output of the probe, ``h200`` now follows it, and the models agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from adversarial_cases import DISTRIBUTIONS, SEED, agree, draw

from sim import tensor_core

mma = pytest.importorskip("mmasim.nv_ptx", reason="MMA-Sim is not installed (it needs "
                          "PyTorch): pip install 'sarek[xcheck]'")
torch = pytest.importorskip("torch", reason="MMA-Sim's PyTorch is missing")

pytestmark = pytest.mark.xcheck

TILES = 64
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
CASES = [(op, name) for op in ("f16", "bf16") for name in DISTRIBUTIONS]


def mmasim(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """MMA-Sim's ``d = a @ b + c`` per fragment: the dot-add its ``mma`` applies to every
    output of a 16x8 instruction (``MMA.__call__`` expands the rows and columns the same way),
    here over whole batches."""
    op = mma.MMA("Hopper", f"m16n8k16.f32.{operand}.{operand}.f32")
    ta = torch.from_numpy(a.view(np.int16)).view(TORCH[operand])
    tb = torch.from_numpy(b.view(np.int16)).view(TORCH[operand])
    g = a.shape[0]
    rows = ta[:, :, None, :].expand(g, 16, 16, 16)
    cols = tb.transpose(1, 2)[:, None, :, :].expand(g, 16, 16, 16)
    return np.asarray(op.dpa(rows, cols, torch.from_numpy(c.copy())).numpy())


@pytest.mark.parametrize(("operand", "name"), CASES)
def test_the_models_give_the_same_bits(operand: str, name: str) -> None:
    a, b, c = draw(SEED, operand, name, TILES)
    with np.errstate(all="ignore"):
        ours, theirs = tensor_core.mul_add(a, b, c), mmasim(operand, a, b, c)
    differ = np.argwhere(~agree(ours, theirs))
    assert not len(differ), f"{len(differ)} outputs differ, the first at {differ[0]}"
