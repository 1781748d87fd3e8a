"""Warp-specialized schedules (``w``, ``backends.cuda.roles``): the neutral kernel has one
warpgroup more, which multiplies nothing; CUDA's lowering makes it the producer of warp
roles that hand the staged buffers to the multiplying warpgroups through mbarriers. The
lowered kernel runs in the simulator as printed and gives the seed's bits where the tiles
take tensor maps and where the producer stores them itself; a consumer that skips its
wait, or a producer that refills a buffer before the consumers free it, is reported."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import example
from test_matrix_rewrite import bits

import sarek
from backends.cuda import compile_cubin, nvrtc_available, roles
from backends.cuda import lower as cuda_lower
from backends.cuda.emit import print_kernel
from backends.registry import target
from sarek import ir
from sarek.ir_walk import replace_statements, walk
from sarek.launch import Launch
from sarek.matrix_rewrite import RewriteError, rewrite_launch
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

SPECIALIZED = Schedule.parse("t128x256k64s3gw")
IN_FLIGHT = Schedule.parse("t128x256k64s3gfw")
ALIGNED = (150, 136, 200)  # rows of 400 and 272 bytes: tensor maps; ragged tiles, 4 steps
UNALIGNED = (150, 133, 70)  # rows of 140 and 266 bytes: the producer's own stores
WHOLE = (128, 256, 192)  # one block, every tile whole: every copy a bulk tensor copy


def rewrite(schedule: Schedule, size: tuple[int, int, int]) -> Launch:
    launch = example("gemm_f16").make(*size, seed=9)
    return rewrite_launch(launch, staging=target("cuda").staging, schedule=schedule).launch


def simulate(rw: Launch, kernel: ir.Kernel | None = None) -> np.ndarray:
    return bits(sarek.simulate(rw.kernel if kernel is None else kernel, dict(rw.args),
                               grid=rw.grid, block=rw.block, arith="h200",
                               target="cuda" if kernel is None else None)["c"])


def test_w_names_a_producer_warpgroup_and_implies_bulk_copies() -> None:
    assert SPECIALIZED.specialized and SPECIALIZED.bulk
    assert SPECIALIZED.name == "t128x256k64s3gw" and IN_FLIGHT.name == "t128x256k64s3gfw"
    assert Schedule.parse("t128x256k64s3gbw") == SPECIALIZED
    assert SPECIALIZED.block_waves == SPECIALIZED.waves + 4 == 12


def test_the_neutral_kernel_has_a_warpgroup_more_that_multiplies_nothing() -> None:
    rw = rewrite(SPECIALIZED, ALIGNED)
    assert rw.block == (384, 1, 1) and rw.kernel.block == (384, 1, 1)
    guards = [s for s in walk(rw.kernel.body) if isinstance(s, ir.If)
              and any(isinstance(x, ir.FragMulAdd) for x in s.then)]
    assert [s.cond for s in guards] == [ir.Binary(op=ir.BinOp.LT, a=ir.Var(
        name="sk_wave", type=ir.ElemType.I32), b=ir.Const(value=8, type=ir.ElemType.I32),
        type=ir.ElemType.BOOL)]
    plain = rewrite(Schedule.parse("t128x256k64s3gf"), ALIGNED)
    assert np.array_equal(bits(rw.simulate()["c"]), bits(plain.simulate()["c"]))


def test_a_producer_warpgroup_is_refused_where_a_is_converted() -> None:
    launch = example("gemm_f32").make(64, 64, 64)
    with pytest.raises(RewriteError, match="a warpgroup schedule multiplies one 16-bit term"):
        rewrite_launch(launch, lowering=Lowering.F16_OPERANDS,
                       staging=target("cuda").staging, schedule=SPECIALIZED)


@pytest.mark.parametrize("schedule", [SPECIALIZED, IN_FLIGHT], ids=["gw", "gfw"])
@pytest.mark.parametrize("size", [ALIGNED, UNALIGNED], ids=["maps", "stores"])
def test_the_lowered_roles_give_the_seeds_bits(schedule: Schedule,
                                               size: tuple[int, int, int]) -> None:
    assert np.array_equal(simulate(rewrite(schedule, size)),
                          simulate(rewrite(Schedule(), size)))


def test_the_lowering_splits_the_block_into_consumers_and_a_producer() -> None:
    kernel = cuda_lower.lower(rewrite(SPECIALIZED, ALIGNED).kernel)
    (split,) = [s for s in kernel.body if isinstance(s, ir.WarpRoles)]
    consumers, producer = split.roles
    assert (consumers.first, consumers.count, producer.first, producer.count) == (0, 2, 2, 1)
    assert consumers.body[0] == ir.SetMaxNReg(registers=roles.CONSUMER_REGISTERS, increase=True)
    assert producer.body[0] == ir.SetMaxNReg(registers=roles.PRODUCER_REGISTERS,
                                             increase=False)
    # 232 registers for 256 consumers and 40 for 128 producers: the 168 x 384 of the entry
    assert 2 * 128 * roles.CONSUMER_REGISTERS + 128 * roles.PRODUCER_REGISTERS == 168 * 384
    made = [s for s in walk(producer.body) if isinstance(s, ir.BulkTensorCopy)]
    assert made and not any(isinstance(s, ir.BulkTensorCopy | ir.CpAsync)
                            for s in walk(consumers.body))
    assert any(isinstance(s, ir.Wgmma) for s in walk(consumers.body))
    assert not any(isinstance(s, ir.Wgmma | ir.Barrier) for s in walk(producer.body))
    text = print_kernel(kernel)
    assert "__launch_bounds__(384, 1)" in text
    assert "setmaxnreg.inc.sync.aligned.u32 232;" in text
    assert "setmaxnreg.dec.sync.aligned.u32 40;" in text
    assert "bar.sync 1, 256;" in text


def without(kernel: ir.Kernel, drop: type[ir.Stmt], barriers: str) -> ir.Kernel:
    """``kernel`` without its waits (``drop``) on the mbarriers ``barriers``."""
    def gone(s: ir.Stmt) -> list[ir.Stmt] | None:
        if isinstance(s, drop) and getattr(s, "barriers", None) == barriers:
            return []
        return None

    out = kernel.model_copy(update={"body": replace_statements(kernel.body, gone)})
    assert out != kernel
    return out


def test_a_consumer_that_does_not_wait_for_its_buffer_races_with_the_copy() -> None:
    rw = rewrite(SPECIALIZED, WHOLE)
    kernel = without(cuda_lower.lower(rw.kernel), ir.MbarrierWait, roles.FULL)
    # the consumers run first and read the buffer; the producer's copy then meets their reads
    with pytest.raises(sarek.SharedRace, match=r"write-after-read race on shared array 'sk_a' "
                       r"element 0 .*thread \(0, 0, 0\) read it and thread \(256, 0, 0\) "
                       "writes it"):
        simulate(rw, kernel)


@pytest.mark.parametrize("schedule", [SPECIALIZED, IN_FLIGHT], ids=["gw", "gfw"])
def test_a_producer_that_does_not_wait_for_the_consumers_races_with_their_reads(
        schedule: Schedule) -> None:
    rw = rewrite(schedule, ALIGNED)
    kernel = without(cuda_lower.lower(rw.kernel), ir.MbarrierWait, roles.EMPTY)
    # the refill meets the copy into the same buffer that only the consumers waited for
    with pytest.raises(sarek.SharedRace, match=r"'sk_a' element 0 .* still being copied by a "
                       r"bulk tensor copy \(thread \(256, 0, 0\) has not waited for phase 0"):
        simulate(rw, kernel)


def test_consumers_that_never_free_a_buffer_are_misuse_not_a_hang() -> None:
    rw = rewrite(SPECIALIZED, ALIGNED)
    kernel = without(cuda_lower.lower(rw.kernel), ir.MbarrierArrive, roles.EMPTY)
    with pytest.raises(sarek.MbarrierMisuse, match="no role can complete"):
        simulate(rw, kernel)


@pytest.mark.skipif(nvrtc_available() is not None, reason=f"NVRTC: {nvrtc_available()}")
def test_the_printed_roles_compile_for_sm_90a() -> None:
    assert compile_cubin(sarek.emit(rewrite(SPECIALIZED, ALIGNED).kernel, "cuda"),
                         arch="sm_90")


PERSISTENT = Schedule.parse("t128x256k64s3gwr")
MANY = (300, 600, 136)  # 3 x 3 tiles of 128 x 256, ragged both ways, partial last step


def test_r_names_a_persistent_grid_of_a_warp_specialized_schedule() -> None:
    assert PERSISTENT.persistent and PERSISTENT.specialized
    assert PERSISTENT.name == "t128x256k64s3gwr"
    with pytest.raises(sarek.errors.SarekError, match=r"a persistent grid \('r'\) is a "
                       "warp-specialized schedule's"):
        Schedule.parse("t128x256k64s3gfbr").check(16, 256)


def test_a_persistent_grid_has_at_most_one_block_per_multiprocessor() -> None:
    from sarek.matrix_rewrite import launch_dims
    from sarek.schedule import RESIDENT_BLOCKS

    assert launch_dims(me=4096, ne=4096, ze=1, schedule=PERSISTENT) == (
        (384, 1, 1), (RESIDENT_BLOCKS, 1, 1))
    assert launch_dims(me=300, ne=600, ze=2, schedule=PERSISTENT)[1] == (18, 1, 1)


@pytest.mark.parametrize("schedule", [PERSISTENT, Schedule.parse("t128x256k64s3gfwr")],
                         ids=["gwr", "gfwr"])
@pytest.mark.parametrize("blocks", [1, 2, 9])
def test_each_block_takes_its_tiles_in_turn_with_the_seeds_bits(schedule: Schedule,
                                                                blocks: int) -> None:
    # fewer blocks than tiles: the ring of buffers runs on from one tile into the next
    rw = rewrite(schedule, MANY)
    seed = simulate(rewrite(Schedule(), MANY))
    lowered = cuda_lower.lower(rw.kernel)
    out = bits(sarek.simulate(lowered, dict(rw.args), grid=(blocks, 1, 1), block=rw.block,
                              arith="h200")["c"])
    neutral = bits(sarek.simulate(rw.kernel, dict(rw.args), grid=(blocks, 1, 1),
                                  block=rw.block)["c"])
    assert np.array_equal(out, seed)
    assert np.array_equal(neutral, bits(rewrite(Schedule(), MANY).simulate()["c"]))


def test_a_persistent_producer_that_runs_into_a_buffer_still_read_races() -> None:
    rw = rewrite(PERSISTENT, MANY)
    kernel = without(cuda_lower.lower(rw.kernel), ir.MbarrierWait, roles.EMPTY)
    with pytest.raises(sarek.SharedRace):
        sarek.simulate(kernel, dict(rw.args), grid=(1, 1, 1), block=rw.block, arith="h200")


def test_a_persistent_grid_refuses_the_exchange_array_in_the_staged_buffers() -> None:
    from backends.cstyle import EmitError

    rw = rewrite(Schedule.parse("t128x256k64s4gwr"), MANY)
    assert any(isinstance(s, ir.ArrayDecl) and s.shares for s in rw.kernel.body)
    with pytest.raises(EmitError, match="a persistent producer refills the staged buffers"):
        cuda_lower.lower(rw.kernel)


def test_four_stages_put_the_exchange_array_in_the_staged_b_and_give_the_seeds_bits() -> None:
    # A's four unpadded 16 KiB buffers hold less than the 66 KiB exchange array; B's hold it
    rw = rewrite(Schedule.parse("t128x256k64s4gw"), UNALIGNED)
    (cs,) = [s for s in rw.kernel.body if isinstance(s, ir.ArrayDecl) and s.name == "sk_cs"]
    assert cs.shares == "sk_b"
    text = sarek.emit(rw.kernel, "cuda")
    assert "float* const sk_cs = (float*)(sk_dynamic + 65536);" in text
    assert "unsigned short* const sk_b = (unsigned short*)(sk_dynamic + 65536);" in text
    assert np.array_equal(simulate(rw), simulate(rewrite(Schedule(), UNALIGNED)))


def test_the_grouped_order_covers_every_tile_once_with_the_seeds_bits() -> None:
    # 18 tile rows: a group of 16, then one of 2; two tile columns; five blocks in turn
    size = (17 * 128 + 5, 300, 16)
    ordered = Schedule.parse("t128x256k64s3gwro")
    assert ordered.ordered and ordered.name == "t128x256k64s3gwro"
    rw = rewrite(ordered, size)
    seed = simulate(rewrite(Schedule(), size))
    out = bits(sarek.simulate(cuda_lower.lower(rw.kernel), dict(rw.args), grid=(5, 1, 1),
                              block=rw.block, arith="h200")["c"])
    assert np.array_equal(out, seed)
