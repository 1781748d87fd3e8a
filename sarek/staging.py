"""How the rewrite lays the staged A and B tiles out in shared memory: a policy the target
supplies.

The neutral rewrite stages tiles densely, B row-major. A target may ask for padded rows (so
that the rows one warp instruction reads fall in distinct shared-memory banks) or for 8-bit B
staged column-major (so that each lane's consecutive k of one column form one 32-bit word, as
NVIDIA's integer ``mma.sync`` B operand wants them). The policy changes where staged elements
lie, never what the kernel computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from sarek.errors import SarekError


class StagingError(SarekError):
    """A staging policy the rewrite cannot use."""


@dataclass(frozen=True)
class Staging:
    """``row_pad_bytes``: bytes appended to every staged row of 16-bit terms (a multiple of 16,
    so that staged rows stay 16-byte aligned); ``narrow_b_col_major``: stage 8-bit B
    column-major."""

    row_pad_bytes: int = 0
    narrow_b_col_major: bool = False

    def __post_init__(self) -> None:
        if self.row_pad_bytes < 0 or self.row_pad_bytes % 16 or self.row_pad_bytes > 256:
            raise StagingError(f"row padding must be a multiple of 16 bytes from 0 to 256, not "
                               f"{self.row_pad_bytes}")


DENSE = Staging()
"""The neutral policy: dense rows, B row-major."""
