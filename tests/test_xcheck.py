"""The ``h200`` model against an independent one: MMA-Sim's Hopper model of ``mma.sync
m16n8k16`` (f16 and bf16 operands, f32 accumulator; ``pip install 'sarek[xcheck]'``).

The inputs are the adversarial probe's distributions (``bench/tensor_core_adversarial_h200.py``).
The models agree everywhere except two cases, which ``specs/simulator.md`` ("MMA-Sim") explains
and the probe's ``mmasim_disagreements`` distribution puts before the H200: a negative sum of
the aligned terms smaller than 2^-149, which ``h200`` truncates to -0 and MMA-Sim gives as +0
(MMA-Sim never gives -0); and, with bf16 operands
only, a zero addend with every product below 2^-133, where MMA-Sim aligns the terms to 2^-133
and ``h200`` to the largest product (the results then differ by at most one unit of 2^-149).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sarek.loader import load_module
from sim import tensor_core

mma = pytest.importorskip("mmasim.nv_ptx", reason="MMA-Sim is not installed (it needs "
                          "PyTorch): pip install 'sarek[xcheck]'")
torch = pytest.importorskip("torch", reason="MMA-Sim's PyTorch is missing")

pytestmark = pytest.mark.xcheck

PROBE = load_module(Path(__file__).resolve().parent.parent / "bench"
                    / "tensor_core_adversarial_h200.py")
TILES = 64
SMALLEST = 2.0**-149  # f32's smallest subnormal: the most the aligned case may move a result
ZERO_EXPONENT = -133  # MMA-Sim's exponent of a zero term for Hopper's f32 mma
TORCH = {"f16": torch.float16, "bf16": torch.bfloat16}
CASES = [(op, name) for op in ("f16", "bf16") for name in PROBE.DISTRIBUTIONS]


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


def below_mmasim_zero(operand: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Outputs whose addend is zero and whose nonzero products all lie below 2^-133: the
    only ones whose largest term exponent MMA-Sim's zero exponent exceeds."""
    with np.errstate(invalid="ignore"):  # inf and NaN: their products are not small
        a64, b64 = a.astype(np.float64), np.moveaxis(b.astype(np.float64), 1, 2)
        ea, eb = np.frexp(a64)[1] - 1, np.frexp(b64)[1] - 1
    e = np.maximum(ea, -126)[:, :, None, :] + np.maximum(eb, -126)[:, None]
    nonzero = (a64[:, :, None, :] != 0) & (b64[:, None] != 0)
    top = np.where(nonzero, e, -10_000).max(axis=-1)
    small: np.ndarray = (c == 0) & (top < ZERO_EXPONENT)
    return small & (operand == "bf16")


def both(operand: str, name: str) -> tuple[np.ndarray, ...]:
    a, b, c = PROBE.draw(PROBE.SEED, operand, name, TILES)
    with np.errstate(all="ignore"):
        return a, b, c, tensor_core.mul_add(a, b, c), mmasim(operand, a, b, c)


@pytest.mark.parametrize(("operand", "name"), CASES)
def test_the_models_differ_only_where_the_spec_explains(operand: str, name: str) -> None:
    a, b, c, ours, theirs = both(operand, name)
    negative_zero = ours.view(np.uint32) == 0x80000000  # a negative sum under 2^-149
    aligned = below_mmasim_zero(operand, a, b, c) & ~negative_zero
    differ = ~PROBE.agree(ours, theirs)
    assert operand == "bf16" or not differ.any()  # f16 products never fall below 2^-48
    unexplained = np.argwhere(differ & ~negative_zero & ~aligned)
    assert not len(unexplained), f"{len(unexplained)} unexplained, first at {unexplained[0]}"
    assert (theirs[negative_zero].view(np.uint32) == 0).all()
    gap = np.abs(ours[aligned].astype(np.float64) - theirs[aligned].astype(np.float64))
    assert (gap <= SMALLEST).all()


def test_both_explained_cases_occur_in_the_probe_s_distribution() -> None:
    a, b, c, ours, theirs = both("bf16", "mmasim_disagreements")
    differ = ~PROBE.agree(ours, theirs)
    zeros = differ & (ours.view(np.uint32) == 0x80000000)
    assert zeros.sum() > 100
    assert (differ & ~zeros & below_mmasim_zero("bf16", a, b, c)).sum() > 100

