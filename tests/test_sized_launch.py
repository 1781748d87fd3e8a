"""A launch built from sizes alone (``matrix_mapping.launch_for_sizes``), so that a user's own
kernel prints without data, and bundled examples addressed by name on the command line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backends import registry
from backends.pipeline import compile_launch
from sarek.cli import main
from sarek.matrix_mapping import RegionError, launch_for_sizes, region
from sarek.matrix_pattern import recognize
from tests.conftest import EXAMPLES, GEMM_EXAMPLES, example

USER_KERNEL = '''
import sarek
from sarek import Global, f32, i32, thread_idx, block_idx, block_dim

@sarek.kernel
def mm(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32{extra}):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * {lda} + p] * b[p * n + col]
        c[row * n + col] = acc
'''


@pytest.mark.parametrize("name", GEMM_EXAMPLES)
@pytest.mark.parametrize("size", [(70, 45, 33), (1, 1, 1), (300, 260, 40)])
def test_sizes_give_the_region_and_the_text_of_the_examples_own_launch(
        name: str, size: tuple[int, int, int]) -> None:
    made = example(name).make(*size)  # the example's make(): its own grid, block and data
    gemm = recognize(made.kernel)
    batches = int(made.args.get("batches", 1))
    sized = launch_for_sizes(made.kernel, gemm, *size, batches=batches)
    assert region(gemm, sized.grid, sized.block, dict(sized.args)) == region(
        gemm, made.grid, made.block, dict(made.args))
    for target in ("cuda", "spirv", "opencl"):
        t = registry.target(target)
        assert compile_launch(t, sized).text == compile_launch(t, made).text


def test_the_sized_launch_says_it_holds_no_data() -> None:
    made = example("gemm_f32").make(8, 8, 8)
    sized = launch_for_sizes(made.kernel, recognize(made.kernel), 8, 8, 8)
    assert sized.notes["sizes"] == (8, 8, 8, 1)
    assert all(np.asarray(sized.args[p]).size == 0 for p in ("a", "b", "c"))


def test_a_stride_that_is_none_of_the_sizes_is_named(tmp_path: Path) -> None:
    from sarek.loader import load_kernel

    (tmp_path / "strided.py").write_text(USER_KERNEL.format(extra=", lda: i32", lda="lda"))
    _, kern = load_kernel(str(tmp_path / "strided.py"))
    with pytest.raises(RegionError, match="'lda'"):
        launch_for_sizes(kern.ir, recognize(kern.ir), 64, 64, 64)


def test_emit_prints_a_users_kernel_from_sizes_alone(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.py").write_text(USER_KERNEL.format(extra="", lda="k"))
    assert main(["emit", f"{tmp_path / 'mine.py'}:mm", "--target", "cuda",
                 "--size", "256,256,64"]) == 0
    text = capsys.readouterr().out
    # the same text as the bundled example of the same shape, launched with its data
    made = example("gemm_f32").make(256, 256, 64)
    assert text == compile_launch(registry.target("cuda"), made).text.replace(
        "matmul", "mm")


def test_simulating_a_users_kernel_without_data_says_what_to_give(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "mine.py").write_text(USER_KERNEL.format(extra="", lda="k"))
    assert main(["simulate", str(tmp_path / "mine.py")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "--inputs" in line and "sarek emit" in line


def test_examples_lists_every_bundled_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    for path in EXAMPLES.glob("*.py"):
        assert f"\n  {path.stem}:" in out


def test_a_bundled_example_is_addressed_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ir", "gemm_tiled"]) == 0
    by_name = capsys.readouterr().out
    assert main(["ir", str(EXAMPLES / "gemm_tiled.py")]) == 0
    assert capsys.readouterr().out == by_name


def test_a_file_in_the_working_directory_comes_before_an_example_of_that_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gemm_f32.py").write_text(USER_KERNEL.format(extra="", lda="k"))
    assert main(["ir", "gemm_f32.py"]) == 0
    assert '"name": "mm"' in capsys.readouterr().out


def test_a_name_that_is_neither_file_nor_example_says_both(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ir", "gemm_nonesuch"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "no such file: gemm_nonesuch" in line and "sarek examples" in line
