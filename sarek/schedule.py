"""Schedules of the rewrite: how large a block's output tile is, how it is split between the
block's four waves, and how deep each staged reduction step is.

The seed's schedule (``SEED``: 64x64 per block, 32x32 per wave, steps of 16) is the default and
always works. Larger schedules trade shared memory and registers for fewer barriers and less
staging per product; a target names the ones it runs well (``sarek.staging.Staging.large``)
and ``rewrite_launch`` takes it for large regions. Every schedule keeps the same promise: every
covered output is written with the original's initial value and epilogue, nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sarek.errors import SarekError

STAGE_QUANTUM = 16  # reduction steps are whole multiples of 16
MAX_STAGES = 4  # steps a schedule keeps in shared memory at once
WIDE_STEP = 128  # a warpgroup schedule's deepest step: one 128-byte row of 8-bit operands
RESIDENT_BLOCKS = 132  # a persistent grid's blocks: the H100's and H200's multiprocessors
ORDER_ROWS = 16  # tile rows per group of the grouped tile order
_NAME = re.compile(r"t(\d{1,4})(?:x(\d{1,4}))?k(\d{1,4})(p?)(?:s(\d))?(g?)(f?)(b?)(w?)(r?)(o?)")


class ScheduleError(SarekError):
    """A schedule the rewrite cannot build."""


@dataclass(frozen=True)
class Schedule:
    """``tile`` x ``tile`` outputs per block of four waves (2 x 2), or with ``wide`` ``tile`` x
    ``2 * tile`` per block of eight (2 x 4); ``tile / 2`` square per wave; ``step`` deep
    reduction steps staged through shared memory; with ``prefetch`` each invocation fetches
    the next step's elements into registers while the current step multiplies; with
    ``stages`` of 2 to 4 the block keeps that many steps in shared memory, copying the tiles
    of ``stages - 1`` steps ahead (``StageCopy``, asynchronous where the target's copies are)
    while it multiplies the current one. With ``warpgroup`` (128-row tiles, 128 or with
    ``wide`` 256 columns, pipelined) the waves hold accumulator strips as wide as the tile, as
    high as the target's policy says (``sarek.staging.Staging.fragments``), and multiply them
    by one B fragment per sub-step that the block shares: the shape of an instruction such as
    Hopper's ``wgmma``, which multiplies the A of a warpgroup's four warps by one B (a wide
    block is two such groups of four waves). With ``in_flight`` (a warpgroup schedule of 3 or
    4 stages) the copies go ``stages - 2`` steps ahead, so that no step refills the buffer the
    step before it read: a target whose multiplies run asynchronously (``wgmma``) may leave
    one step's multiplies running while the next step is issued. With ``bulk`` (a warpgroup
    schedule) the staged copies are marked ``StageCopy.bulk``: a target with bulk tensor
    copies (CUDA on sm_90: ``backends.cuda.tma``) issues each step's tiles from one
    invocation, completed by an mbarrier, where the region's operands allow it. With
    ``specialized`` (``w``, which implies ``bulk``) the block has one warpgroup more, which
    multiplies nothing: a target that specializes warps (CUDA: ``backends.cuda.roles``) makes
    it the producer that alone issues the staged copies, while the others only multiply; the
    neutral kernel's copies spread over the whole block as always. With ``persistent``
    (``r``, after a ``w``) the grid has at most ``RESIDENT_BLOCKS`` blocks, each taking the
    output tiles ``block_idx.x``, ``block_idx.x + grid_dim.x``, ... in turn (batch, then tile
    row, then tile column, the column fastest), so that a target's producer runs into the
    next tile while the consumers finish one; with ``ordered`` (``o``, after an ``r``) they
    go down ``ORDER_ROWS`` tile rows before the next column (the last group as many rows as
    are left), so that the tiles in flight at once share fewer rows of B and A. With
    ``narrow`` (``t128x128``, a wide warpgroup schedule) the eight waves share a ``tile`` x
    ``tile`` tile, each wave one strip: half the accumulators of ``t128k..g``'s waves, for a
    lowering that holds a second set of them (Bf16x3's sub-step sums)."""

    tile: int = 64
    step: int = 16
    prefetch: bool = False
    stages: int = 1
    wide: bool = False
    warpgroup: bool = False
    narrow: bool = False
    in_flight: bool = False
    bulk: bool = False
    specialized: bool = False
    persistent: bool = False
    ordered: bool = False

    def __post_init__(self) -> None:
        if self.specialized and not self.bulk:
            object.__setattr__(self, "bulk", True)  # warp specialization copies in bulk

    @property
    def ahead(self) -> int:
        """Steps the copies run ahead of the step that multiplies (pipelined schedules)."""
        return self.stages - (2 if self.in_flight else 1)

    @property
    def wave_tile(self) -> int:
        return self.tile // 2

    @property
    def wave_columns(self) -> int:
        """Waves side by side along the block's columns (2 rows of them)."""
        return 4 if self.wide else 2

    @property
    def waves(self) -> int:
        """Waves per block."""
        return 2 * self.wave_columns

    @property
    def block_waves(self) -> int:
        """Waves per block: the multiplying ones and, with ``specialized``, a warpgroup's
        four more."""
        return self.waves + (4 if self.specialized else 0)

    @property
    def groups(self) -> int:
        """Groups of four consecutive waves (warpgroups) per block."""
        return self.waves // 4

    @property
    def tile_n(self) -> int:
        """Output columns per block (``tile`` rows)."""
        return self.tile if self.narrow else self.wave_columns * self.wave_tile

    @classmethod
    def parse(cls, name: str) -> Schedule:
        """The schedule ``name`` spells (``t128k64s2``: tile 128, steps of 64, two stages;
        ``p`` after the step for register prefetch); ``ScheduleError`` for anything else."""
        m = _NAME.fullmatch(name)
        narrow = m is not None and m[2] is not None and int(m[2]) == int(m[1]) and bool(m[6])
        if m is None or (m[2] is not None and int(m[2]) != 2 * int(m[1]) and not narrow):
            raise ScheduleError(f"{name!r} is not a schedule name such as t64k16, t128k64s2, "
                                "t128x256k64s2, t128k16p or t128k64s2g (tile, step, p for "
                                "prefetch, s and the stages, g for a warpgroup's fragments, f "
                                "after it for one step's multiplies in flight, b for bulk "
                                "tensor copies, w for a producer warpgroup, r for a persistent "
                                "grid, o last for its grouped tile order)")
        return cls(tile=int(m[1]), step=int(m[3]), prefetch=bool(m[4]), stages=int(m[5] or 1),
                   wide=m[2] is not None, warpgroup=bool(m[6]), narrow=narrow,
                   in_flight=bool(m[7]),
                   bulk=bool(m[8]), specialized=bool(m[9]), persistent=bool(m[10]),
                   ordered=bool(m[11]))

    @property
    def name(self) -> str:
        stages = f"s{self.stages}" if self.stages > 1 else ""
        tile = f"{self.tile}x{self.tile_n}" if self.wide else str(self.tile)
        group = "g" if self.warpgroup else ""
        flight = "f" if self.in_flight else ""
        bulk = "w" if self.specialized else "b" if self.bulk else ""
        resident = ("r" if self.persistent else "") + ("o" if self.ordered else "")
        return (f"t{tile}k{self.step}{'p' if self.prefetch else ''}{stages}{group}{flight}{bulk}"
                f"{resident}")

    def check(self, frag: int, threads: int) -> None:
        """``ScheduleError`` when the schedule does not divide into ``frag`` fragments and the
        block's ``threads`` invocations."""
        if self.tile not in (64, 128):
            raise ScheduleError(f"block tiles of 64 or 128 outputs are built, not {self.tile}")
        if (self.step % STAGE_QUANTUM or not STAGE_QUANTUM <= self.step <= 64) and not (
                self.step == WIDE_STEP and self.warpgroup):
            raise ScheduleError(f"the reduction step must be 16, 32, 48 or 64 (or {WIDE_STEP} "
                                f"under a warpgroup schedule), not {self.step}")
        if not 1 <= self.stages <= MAX_STAGES:
            raise ScheduleError(f"a schedule keeps 1 to {MAX_STAGES} steps in shared memory, "
                                f"not {self.stages}")
        if self.stages > 1 and self.prefetch:
            raise ScheduleError("a schedule either prefetches into registers or keeps several "
                                "steps in shared memory, not both")
        if self.warpgroup and (self.tile != 128 or self.stages < 2 or frag != 16
                               or threads != 32 * self.waves):
            raise ScheduleError("a warpgroup schedule takes 128x128 tiles over one warpgroup "
                                "(four waves of 32) or 128x256 over two, 16x16 fragments and "
                                "2 to 4 stages")
        if self.narrow and not (self.wide and self.warpgroup):
            raise ScheduleError("a square tile over eight waves ('t128x128') is a warpgroup "
                                "schedule's: two warpgroups, one strip a wave")
        if self.in_flight and (not self.warpgroup or self.stages < 3):
            raise ScheduleError("a schedule with a step's multiplies in flight is a warpgroup "
                                "schedule of 3 or 4 stages (the step after one that is still "
                                "multiplying refills neither its buffer nor its own)")
        if self.bulk and not self.warpgroup:
            raise ScheduleError("bulk tensor copies stage a warpgroup schedule's tiles (a 'b' "
                                "after its 'g')")
        if self.persistent and not self.specialized:
            raise ScheduleError("a persistent grid ('r') is a warp-specialized schedule's (an "
                                "'r' after its 'w')")
        if self.ordered and not self.persistent:
            raise ScheduleError("a grouped tile order ('o') orders a persistent grid's tiles "
                                "(an 'o' after its 'r')")
        if self.wave_tile % frag or self.step % frag:
            raise ScheduleError(f"a {self.wave_tile}x{self.wave_tile} wave tile with "
                                f"{self.step}-deep steps does not divide into {frag}x{frag} "
                                "fragments")
        if (self.tile * self.step) % threads or (frag * frag) % (threads // self.waves):
            raise ScheduleError(f"a block of {threads} invocations does not share a "
                                f"{self.tile}x{self.step} staging tile evenly")


SEED = Schedule()
"""The seed's tiling: 64x64 per block of four waves, 32x32 per wave, steps of 16."""
LARGE = Schedule(tile=128, step=32)
"""128x128 per block, 64x64 per wave, steps of 32."""
