"""How the rewrite stages its tiles: a policy the target supplies.

The neutral rewrite stages tiles densely, B row-major. A target may ask for padded rows (so
that the rows one warp instruction reads fall in distinct shared-memory banks) or for 8-bit B
staged column-major (so that each lane's consecutive k of one column form one 32-bit word, as
NVIDIA's integer ``mma.sync`` B operand wants them). The policy also names the larger
schedules (``sarek.schedule``) the target runs large regions with, those it offers besides
for a user to select, and how deep its 8-bit multiply-accumulates reduce. It changes where
staged elements lie and how work is cut, never what the kernel computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sarek.errors import SarekError
from sarek.schedule import SEED, Schedule

LARGE_REGION = 1024
"""Regions with at least this many rows and columns take a target's large schedule."""

HUGE_REGION = 8192
"""Regions with at least this many rows and columns prefer a target's huge schedules to its
large ones."""


class StagingError(SarekError):
    """A staging policy the rewrite cannot use."""


@dataclass(frozen=True)
class Fragments:
    """How each wave of a block holds its accumulators, as a target's policy answers for a
    schedule (``Staging.fragments``): a grid of ``rows`` x ``cols`` accumulator fragments,
    each ``m`` x ``n``. Without ``shared_b`` the grid is square over the wave's tile (fragment
    (i, j) at rows ``i * m`` and columns ``j * n`` of it) and each wave loads its own A per row
    and B per column of fragments; with ``shared_b`` every fragment is a strip as wide as the
    block's tile (wave ``w``'s strip ``i`` at rows ``m * (w + waves * i)``), and the block's
    waves all multiply by one B fragment per sub-step."""

    rows: int
    cols: int
    m: int
    n: int
    shared_b: bool = False


@dataclass(frozen=True)
class Staging:
    """``row_pad_bytes``: bytes appended to every staged row of 16-bit terms (a multiple of 16,
    so that staged rows stay 16-byte aligned); ``narrow_b_col_major``: stage 8-bit B
    column-major; ``byte_k``: how deep a multiply-accumulate of 8-bit 16x16 fragments reduces
    (16, or 32 where the target multiplies 32 deep and the schedule's steps divide into it);
    ``large``: (lowering name, schedule) pairs for large regions, the preferred first;
    ``huge``: pairs that regions of at least ``HUGE_REGION`` rows and columns prefer to the
    large ones;
    ``small``: (lowering name, schedule) pairs for every other region (a target whose 8-bit
    multiply-accumulates reduce only 32 deep needs 32-deep steps at every size);
    ``offered``: (lowering name, schedule) pairs the target prints beyond its policy, which
    ``rewrite_launch`` never picks but a user selects (``sarek emit --schedule``) and ``sarek
    conformance`` checks as it checks ``large``; ``packed_planes``: where invocations stage
    byte planes from registers (the seed's and prefetching schedules), each converts four
    consecutive k of one row of A or column of column-major B and writes every plane's four
    bytes with one 32-bit ``StorePacked``; ``shared_bytes``: the most shared memory a block
    of the target may declare (None: no limit the rewrite heeds), under which a schedule that
    does not fit as the policy stages it takes, in this order, what makes it fit: the
    exchange array in a staged tile's bytes (where ``exchange_in_tiles`` allows it), then A's
    rows unpadded, then B's too (padding only spreads banks); ``exchange_in_tiles``: the
    exchange array the accumulators leave (and a varying initial value enters) through may
    reuse the bytes of a staged tile (``ir.ArrayDecl.shares``), which it uses only before
    and after the reduction; ``converting_copies``: the target's copies land raw tiles
    converted (its lowering fuses each raw copy and its conversion), so that a pipelined
    schedule's term arrays take a buffer per stage and its raw arrays none, as
    ``Layout.shared_bytes`` then counts them; ``strip_rows``: how high each wave's
    accumulator strips are under a schedule that asks for strips multiplied by a B the block
    shares (``Schedule.warpgroup``), the rows the target's instruction gives each wave (None:
    one fragment); ``whole_int32``: the target multiplies 32-bit integer fragments itself (an
    emulation without a matrix unit), so the byte planes stage the int32 words as they are and
    take one wrapping product where the planes take ten, with the same bits
    (``sarek.matrix_scheme.WHOLE_INT32``); ``planes_b_col_major``: under pipelined
    schedules (whose staged copies land the planes) stage the byte planes' B column-major
    (each column's k consecutive), whatever ``narrow_b_col_major`` says of other 8-bit B;
    ``planes_pad_bytes``: under pipelined schedules, bytes appended to every staged row of A's
    byte planes and column of column-major B's (a multiple of 16, like ``row_pad_bytes``);
    ``prepass_pipelined``: f32 operands that a lowering rounds to one 16-bit term are
    converted by the pre-pass (``sarek.rewrite.prepass``) under every pipelined schedule, as
    under warpgroup ones, and the GEMM stages the 16-bit temporaries as they are;
    ``prepass_terms``: f32 operands that a lowering splits into several 16-bit terms
    (``Bf16x3_operands``) are split by the pre-pass under every pipelined schedule, each term
    into a temporary of its own, and the GEMM stages each term's temporary as it is into that
    term's arrays; ``packed_out``: where a block's whole tile of outputs is covered and C's
    rows are contiguous and suitably aligned, each lane stores the epilogue values of
    consecutive outputs (8 bytes of them) as one ``StorePacked`` (the other tiles store one
    output at a time); ``exchange_pad``: elements appended to every row of the exchange
    array (so that the rows a warp's accumulator stores reach fall in distinct banks);
    ``swizzled_depth``: under warpgroup schedules whose steps are this deep, the staged 16-bit
    tiles take no row padding, since the target lays them out in swizzle atoms of its own
    (where padding would only leave bytes unused and make the target's index arithmetic
    divide by the padded row); 0: none; ``sum_strip_cols``: under a lowering with sub-step
    sums (``Scheme.step_sums``), each strip is this many columns wide, the tile's columns
    split between several strips of a wave, where the tile's width is a multiple larger than
    it (0: strips as wide as the tile), so that one strip's sums can be added while the
    next strip's products are in flight; ``chunk_loops``: a reduction whose running sums take
    totals every ``Scheme.chunk`` of k runs as a loop over the chunks around the loop over
    their steps, the totals taken after each chunk's steps, rather than as one loop that asks
    at every step whether the step ends a chunk (the same additions in the same order; not
    under a warp-specialized schedule, whose roles split the one loop)."""

    row_pad_bytes: int = 0
    narrow_b_col_major: bool = False
    byte_k: int = 16
    large: tuple[tuple[str, Schedule], ...] = ()
    huge: tuple[tuple[str, Schedule], ...] = ()
    small: tuple[tuple[str, Schedule], ...] = ()
    offered: tuple[tuple[str, Schedule], ...] = ()
    packed_planes: bool = False
    shared_bytes: int | None = None
    strip_rows: int | None = None
    exchange_in_tiles: bool = False
    converting_copies: bool = False
    whole_int32: bool = False
    planes_b_col_major: bool = False
    planes_pad_bytes: int = 0
    prepass_pipelined: bool = False
    prepass_terms: bool = False
    packed_out: bool = False
    exchange_pad: int = 0
    swizzled_depth: int = 0
    sum_strip_cols: int = 0
    chunk_loops: bool = False

    def fragments(self, schedule: Schedule, frag: int, step_sums: bool = False) -> Fragments:
        """Each wave's accumulators under ``schedule`` with ``frag`` x ``frag`` fragments: a
        square grid over the wave's tile, or under a schedule with ``warpgroup`` strips
        ``strip_rows`` high (one fragment when the policy names none) covering the block's
        tile between its waves, as wide as the tile or, under ``step_sums`` (the lowering's
        sub-step sums), ``sum_strip_cols`` wide."""
        if not schedule.warpgroup:
            per_wave = schedule.wave_tile // frag
            return Fragments(rows=per_wave, cols=per_wave, m=frag, n=frag)
        height = self.strip_rows or frag
        rows = schedule.tile // (height * schedule.waves)
        width = self.sum_strip_cols
        if step_sums and width and schedule.tile_n > width and schedule.tile_n % width == 0:
            return Fragments(rows=rows, cols=schedule.tile_n // width, m=height, n=width,
                             shared_b=True)
        return Fragments(rows=rows, cols=1, m=height, n=schedule.tile_n, shared_b=True)

    @property
    def declared(self) -> tuple[tuple[str, Schedule], ...]:
        """Every (lowering name, schedule) pair the target names beyond its small ones: its
        huge, large and offered schedules, the ones conformance checks besides the seed's."""
        return self.huge + self.large + self.offered

    def candidates(self, lowering: str, me: int, ne: int) -> tuple[Schedule, ...]:
        """The schedules a region of ``me`` x ``ne`` outputs may take under the lowering
        named ``lowering``, the preferred first: when both extents reach ``HUGE_REGION``, the
        target's huge ones for it; when both reach ``LARGE_REGION``, its large ones for it (in
        the order ``large`` lists them); then its small ones for it, then the seed's, which
        every target builds."""
        listed = self.small
        if me >= LARGE_REGION and ne >= LARGE_REGION:
            listed = self.large + self.small
        if me >= HUGE_REGION and ne >= HUGE_REGION:
            listed = self.huge + listed
        found = tuple(schedule for name, schedule in listed if name == lowering)
        return tuple(dict.fromkeys((*found, SEED)))

    def schedule_for(self, lowering: str, me: int, ne: int,
                     takes: Callable[[Schedule], bool] = lambda _: True) -> Schedule:
        """The first of ``candidates`` that ``takes`` accepts (the rewrite can build it for
        the region's operands), else the seed's."""
        return next((s for s in self.candidates(lowering, me, ne) if takes(s)), SEED)

    def __post_init__(self) -> None:
        if self.row_pad_bytes < 0 or self.row_pad_bytes % 16 or self.row_pad_bytes > 256:
            raise StagingError(f"row padding must be a multiple of 16 bytes from 0 to 256, not "
                               f"{self.row_pad_bytes}")
        if self.planes_pad_bytes < 0 or self.planes_pad_bytes % 16 or self.planes_pad_bytes > 256:
            raise StagingError(f"byte-plane padding must be a multiple of 16 bytes from 0 to "
                               f"256, not {self.planes_pad_bytes}")
        if not 0 <= self.exchange_pad <= 64:
            raise StagingError(f"the exchange array's row padding must be 0 to 64 elements, "
                               f"not {self.exchange_pad}")
        if self.swizzled_depth < 0:
            raise StagingError(f"the depth of swizzled steps must be 0 or more, not "
                               f"{self.swizzled_depth}")
        if self.sum_strip_cols < 0 or self.sum_strip_cols % 8:
            raise StagingError(f"strips under sub-step sums are a multiple of 8 columns wide "
                               f"(0: the tile's width), not {self.sum_strip_cols}")
        if self.byte_k not in (16, 32):
            raise StagingError(f"8-bit fragments reduce 16 or 32 deep, not {self.byte_k}")


DENSE = Staging()
"""The neutral policy: dense rows, B row-major."""
