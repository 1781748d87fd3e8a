"""Staged copies: what ``StageCopy`` copies, how each target lowers it, and the simulator's
account of ``cp.async`` copies in flight (``specs/ir.md``, "Staged copies")."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import sarek
from backends.cuda import copies
from backends.cuda import lower as cuda_lower
from sarek import ir, ir_check
from sarek.errors import IRError, OutOfBounds, SharedRace
from sarek.ir import BinOp, Builtin, ElemType, MemSpace
from sarek.ir_build import add, binary, const, mul, var
from sarek.ir_walk import walk
from sim import memory

E = ElemType
ROWS, COLS, PITCH, THREADS = 16, 16, 24, 64
TID = ir.BuiltinValue(which=Builtin.THREAD_IDX_X)


def copy_stmt(*, row_stride: ir.Expr | None = None, fill: float = -0.0,
              src_offset: ir.Expr | None = None) -> ir.StageCopy:
    return ir.StageCopy(dst="s", dst_offset=const(0), dst_pitch=PITCH, src="a",
                        src_offset=src_offset or var("off"),
                        src_row_stride=row_stride or var("lda"), src_col_stride=const(1),
                        rows=ROWS, cols=COLS, row_limit=var("rl"), col_limit=var("cl"),
                        fill=ir.Const(value=fill, type=E.F16))


def read_back() -> ir.For:
    """``o[e] = s[row * PITCH + col]`` for every tile element ``e``, four per thread."""
    e = var("e")
    at = add(mul(binary(BinOp.DIV, e, const(COLS)), const(PITCH)), binary(BinOp.REM, e,
                                                                          const(COLS)))
    return ir.For(var="q", start=const(0), stop=const(ROWS * COLS // THREADS), step=const(1),
                  body=(ir.Let(name="e", type=E.I32, value=add(mul(var("q"), const(THREADS)),
                                                               TID)),
                        ir.Store(array="o", index=e,
                                 value=ir.Load(array="s", index=at, type=E.F16))))


def kernel(*body: ir.Stmt, block: tuple[int, int, int] | None = (THREADS, 1, 1)) -> ir.Kernel:
    params = (ir.ArrayParam(name="a", elem=E.F16, readonly=True),
              ir.ArrayParam(name="o", elem=E.F16),
              *(ir.ScalarParam(name=x, elem=E.I32) for x in ("off", "lda", "rl", "cl")))
    decl = ir.ArrayDecl(name="s", elem=E.F16, size=ROWS * PITCH, space=MemSpace.SHARED,
                        align=16)
    return ir.Kernel(name="k", params=params, body=(decl, *body), block=block)


def staged(**kw: object) -> ir.Kernel:
    return kernel(copy_stmt(**kw), ir.StageCommit(), ir.StageWait(pending=0), ir.Barrier(),
                  read_back())


def args(off: int = 0, lda: int = 16, rl: int = ROWS, cl: int = COLS) -> dict[str, object]:
    a = np.arange(2048).astype(np.float16)
    return {"a": a, "o": np.zeros(ROWS * COLS, np.float16), "off": off, "lda": lda, "rl": rl,
            "cl": cl}


def expected(values: dict[str, object]) -> np.ndarray:
    """The tile as NumPy reads it: row r, column c from a[off + r*lda + c] inside the limits,
    -0.0 outside."""
    a = values["a"]
    assert isinstance(a, np.ndarray)
    off, lda, rl, cl = (int(values[x]) for x in ("off", "lda", "rl", "cl"))  # type: ignore[call-overload]
    r, c = np.mgrid[0:ROWS, 0:COLS]
    inside = (r < rl) & (c < cl)
    tile = np.where(inside, a[np.where(inside, off + r * lda + c, 0)], np.float16(-0.0))
    return tile.astype(np.float16).ravel().view(np.uint16)


def run(k: ir.Kernel, values: dict[str, object], target: str | None = None) -> np.ndarray:
    out = sarek.simulate(k, values, grid=(1, 1, 1), block=(THREADS, 1, 1), target=target)
    return out["o"].view(np.uint16)


CASES = [
    pytest.param({}, id="whole aligned tile"),
    pytest.param({"rl": 10, "cl": 13}, id="partial rows and columns"),
    pytest.param({"lda": 19}, id="rows not 16-byte aligned"),
    pytest.param({"off": 3}, id="tile start not aligned"),
    pytest.param({"rl": 0}, id="nothing inside"),
]


@pytest.mark.parametrize("values", CASES)
def test_a_staged_copy_reads_the_tile_inside_its_limits_and_fills_the_rest(
        values: dict[str, int]) -> None:
    v = args(**values)
    assert np.array_equal(run(staged(), v), expected(v))


@pytest.mark.parametrize("values", CASES)
@pytest.mark.parametrize("target", ["cuda", "opencl", "metal"])
def test_every_target_lowering_copies_what_the_neutral_copy_does(
        values: dict[str, int], target: str) -> None:
    v = args(**values)
    assert np.array_equal(run(staged(), v, target), expected(v))


@pytest.fixture
def issued(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The number of elements each ``cp.async`` issue put in flight, as the simulator ran."""
    counts: list[int] = []
    issue = memory.SharedArray.issue

    def counting(self: memory.SharedArray, flat: np.ndarray, owners: np.ndarray,
                 groups: np.ndarray) -> None:
        counts.append(flat.size)
        issue(self, flat, owners, groups)

    monkeypatch.setattr(memory.SharedArray, "issue", counting)
    yield counts


def test_cuda_copies_a_whole_aligned_tile_by_cp_async_alone(issued: list[int]) -> None:
    run(staged(), args(), "cuda")
    assert sum(issued) == ROWS * COLS


def test_cuda_copies_unaligned_rows_element_by_element(issued: list[int]) -> None:
    v = args(lda=19)
    run(staged(), v, "cuda")
    aligned_rows = sum(1 for r in range(ROWS) if (r * 19) % 8 == 0)  # rows 0 and 8
    assert sum(issued) == aligned_rows * COLS


def test_cuda_copies_the_whole_chunks_of_a_partial_tile_by_cp_async(issued: list[int]) -> None:
    run(staged(), args(rl=10, cl=13), "cuda")
    assert sum(issued) == 10 * 8  # of each of the 10 rows inside, the first 8-element chunk


def test_cuda_prints_cp_async_and_the_group_instructions() -> None:
    text = sarek.emit(staged(), target="cuda")
    assert "cp.async.cg.shared.global [%0], [%1], 16;" in text
    assert "cp.async.commit_group;" in text and "cp.async.wait_group 0;" in text


def test_opencl_nv_prints_cp_async_into_local_memory() -> None:
    text = sarek.emit(staged(), target="opencl-nv")
    assert "cp.async.cg.shared.global" in text and "(uint)(ulong)(&s[" in text


@pytest.mark.skipif(shutil.which("clang") is None, reason="no clang to compile OpenCL C for NVPTX")
def test_opencl_nv_cp_async_compiles_to_ptx(tmp_path: Path) -> None:
    (tmp_path / "k.cl").write_text(sarek.emit(staged(), target="opencl-nv"))
    done = subprocess.run(["clang", "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
                           "-Xclang", "-finclude-default-header", "-march=sm_80",
                           "-Dasm=__asm__", "-O2", "-S", "-o", str(tmp_path / "k.ptx"),
                           str(tmp_path / "k.cl")], capture_output=True, text=True, check=False)
    if done.returncode and "unknown target" in done.stderr.lower():
        pytest.skip("this clang has no NVPTX target")
    assert done.returncode == 0, done.stderr[-2000:]
    ptx = (tmp_path / "k.ptx").read_text()
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 0;" in ptx


@pytest.mark.parametrize("target", ["opencl", "spirv", "metal"])
def test_targets_with_synchronous_copies_print_plain_element_copies(target: str) -> None:
    text = sarek.emit(staged(), target=target)
    assert "cp.async" not in text


def test_a_copy_a_target_cannot_vectorize_is_lowered_element_by_element() -> None:
    strided = copy_stmt().model_copy(update={"src_col_stride": const(2)})
    lowered = cuda_lower.lower(kernel(strided, ir.StageCommit(), ir.StageWait(pending=0)))
    assert not any(isinstance(s, ir.CpAsync) for s in walk(lowered.body))
    assert not copies.vectorizable(strided)


# ---------------------------------------------------------------- copies in flight


def test_reading_a_cp_async_destination_before_the_wait_is_a_race() -> None:
    k = cuda_lower.lower(kernel(copy_stmt(), ir.StageCommit(), ir.Barrier(), read_back()))
    with pytest.raises(SharedRace, match="still being copied"):
        run(k, args())


def test_another_thread_reads_a_landed_copy_only_after_a_barrier() -> None:
    k = cuda_lower.lower(kernel(copy_stmt(), ir.StageCommit(), ir.StageWait(pending=0),
                                read_back()))
    with pytest.raises(SharedRace, match="read-after-write"):
        run(k, args())


def test_a_wait_for_all_but_the_newest_group_leaves_the_newest_in_flight() -> None:
    second = copy_stmt().model_copy(update={"dst_offset": const(0)})
    k = cuda_lower.lower(kernel(
        ir.ArrayDecl(name="t", elem=E.F16, size=ROWS * PITCH, space=MemSpace.SHARED, align=16),
        copy_stmt().model_copy(update={"dst": "t"}), ir.StageCommit(),
        second, ir.StageCommit(), ir.StageWait(pending=1), ir.Barrier(), read_back()))
    with pytest.raises(SharedRace, match="still being copied"):
        run(k, args())


def test_waiting_for_the_older_group_is_enough_to_read_it() -> None:
    k = cuda_lower.lower(kernel(
        ir.ArrayDecl(name="t", elem=E.F16, size=ROWS * PITCH, space=MemSpace.SHARED, align=16),
        copy_stmt(), ir.StageCommit(), copy_stmt().model_copy(update={"dst": "t"}),
        ir.StageCommit(), ir.StageWait(pending=1), ir.Barrier(), read_back()))
    assert np.array_equal(run(k, args()), expected(args()))


def test_a_misaligned_cp_async_is_refused_with_the_address() -> None:
    k = kernel(ir.CpAsync(dst="s", dst_index=const(4), src="a", src_index=const(0)),
               ir.StageCommit(), ir.StageWait(pending=0))
    with pytest.raises(OutOfBounds, match="not aligned"):
        run(k, args())


# ---------------------------------------------------------------- well-formedness


def problems(k: ir.Kernel) -> str:
    return "\n".join(str(p) for p in ir_check.check(k))


def test_a_staged_copy_needs_the_kernels_block_shape() -> None:
    assert "block shape" in problems(kernel(copy_stmt(), block=None))


def test_a_staged_copy_in_divergent_code_is_refused() -> None:
    guarded = ir.If(cond=binary(BinOp.LT, TID, const(3)), then=(copy_stmt(),))
    assert "divergent" in problems(kernel(guarded))


def test_a_staged_copy_moves_elements_unchanged() -> None:
    wrong_fill = copy_stmt().model_copy(update={"fill": ir.Const(value=0.0, type=E.F32)})
    assert "fill value" in problems(kernel(wrong_fill))
    to_global = copy_stmt().model_copy(update={"dst": "o"})
    assert "writes a shared array" in problems(kernel(to_global))
    from_shared = copy_stmt().model_copy(update={"src": "s"})
    assert "reads a global array" in problems(kernel(from_shared))


def test_a_staged_tile_wider_than_its_rows_is_refused() -> None:
    assert "does not fit" in problems(kernel(copy_stmt().model_copy(update={"dst_pitch": 8})))


def test_cp_async_between_arrays_of_different_types_is_refused() -> None:
    k = kernel(ir.ArrayDecl(name="w", elem=E.F32, size=64, space=MemSpace.SHARED, align=16),
               ir.CpAsync(dst="w", dst_index=const(0), src="a", src_index=const(0)))
    with pytest.raises(IRError, match="moves elements unchanged"):
        ir_check.ensure_valid(k)


def test_staged_copies_round_trip_through_json() -> None:
    k = cuda_lower.lower(staged())
    assert any(isinstance(s, ir.CpAsync) for s in walk(k.body))
    assert ir.Kernel.model_validate_json(k.model_dump_json()) == k
    assert ir.Kernel.model_validate_json(staged().model_dump_json()) == staged()
