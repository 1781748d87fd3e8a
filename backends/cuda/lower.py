"""Lowering for CUDA (in progress: kernels without fragments pass through unchanged)."""

from __future__ import annotations

from sarek import ir
from sarek.staging import Staging

SUBGROUPS = (32,)
FRAGMENTS = (16,)
STAGING = Staging(row_pad_bytes=16, narrow_b_col_major=True)


def lower(kernel: ir.Kernel) -> ir.Kernel:
    return kernel
