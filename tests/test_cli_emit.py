"""``sarek emit``: a kernel printed for a target, rewritten or as written, to stdout or a file;
bad requests are one error line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backends import registry
from backends.pipeline import compile_launch
from sarek.cli import main
from sarek.loader import load_module

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gemm_f16.py"
KERNEL = str(Path(__file__).resolve().parent.parent / "examples" / "gemm_f16.py") + ":matmul_f16"


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command printed on stderr."""
    (line,) = capsys.readouterr().err.splitlines()
    return line


def test_emit_prints_the_rewrite_on_tensor_cores(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--size", "20,12,9"]) == 0
    assert "mma.sync" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["cuda", "metal", "vulkan"])
def test_emit_prints_what_the_target_compiles(target: str, capsys: pytest.CaptureFixture[str],
                                              h200_vulkan: None) -> None:
    assert main(["emit", KERNEL, "--target", target, "--size", "20,12,9"]) == 0
    launch = load_module(EXAMPLE).make(20, 12, 9)
    assert capsys.readouterr().out == compile_launch(registry.target(target), launch).text


def test_a_kernel_that_is_not_a_gemm_is_one_error_line_pointing_at_original(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "axpy.py"
    src.write_text("import sarek\nfrom sarek import Global, f32, i32, thread_idx\n\n"
                   "@sarek.kernel\n"
                   "def axpy(x: Global[f32], y: Global[f32], n: i32):\n"
                   "    i = thread_idx.x\n"
                   "    if i < n:\n"
                   "        y[i] = 2.0 * x[i] + y[i]\n\n"
                   "def make(m, n, k):\n"
                   "    import numpy as np\n"
                   "    from sarek.launch import Launch\n"
                   "    x = np.ones(4, np.float32)\n"
                   "    return Launch(axpy.ir, {'x': x, 'y': x, 'n': 4}, (1, 1, 1), (4, 1, 1))\n")
    assert main(["emit", f"{src}:axpy", "--target", "cuda"]) == 2
    line = error_line(capsys)
    assert "not a GEMM nest" in line and line.endswith("--original prints the kernel as written")
    assert main(["emit", f"{src}:axpy", "--target", "cuda", "--original"]) == 0


def test_emit_takes_the_schedule_the_user_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--schedule", "t128k64s2"]) == 0
    out = capsys.readouterr().out
    assert "matmul_f16_f16_operands_t128k64s2" in out and "cp.async.cg.shared.global" in out


@pytest.mark.parametrize(("name", "reason"), [
    ("t96k16", "block tiles of 64 or 128 outputs are built, not 96"),
    ("t64k16s9", "a schedule keeps 1 to 4 steps in shared memory, not 9"),
    ("fast", "'fast' is not a schedule name")])
def test_a_schedule_that_cannot_be_built_is_one_line(name: str, reason: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--schedule", name]) == 2
    assert reason in error_line(capsys)


def test_emit_original_prints_the_kernel_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--original"]) == 0
    out = capsys.readouterr().out
    assert "matmul_f16" in out
    assert "mma.sync" not in out


def test_emit_o_writes_the_text_to_the_file(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--size", "20,12,9"]) == 0
    printed = capsys.readouterr().out
    out = tmp_path / "matmul_f16.cu"
    assert main(["emit", KERNEL, "--target", "cuda", "--size", "20,12,9", "-o", str(out)]) == 0
    assert out.read_text() == printed
    assert capsys.readouterr().out == f"wrote {out}\n"


def test_without_frag_a_target_gets_the_fragment_it_has(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Metal multiplies 8x8 simdgroup matrices only: the default 16 would be refused
    assert main(["emit", KERNEL, "--target", "metal", "--size", "20,12,9"]) == 0
    assert "simdgroup_multiply_accumulate" in capsys.readouterr().out


def test_an_unknown_target_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "nowhere"]) == 2
    assert error_line(capsys).startswith("sarek: error: unknown target 'nowhere'; the targets are")


def test_a_configuration_the_target_refuses_is_one_error_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--subgroup", "64"]) == 2
    assert error_line(capsys) == "sarek: error: cuda runs subgroups of 32 lanes, not 64"


def test_a_missing_output_directory_is_one_error_line(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "absent" / "matmul_f16.cu"
    assert main(["emit", KERNEL, "--target", "cuda", "--original", "-o", str(out)]) == 2
    assert error_line(capsys).startswith(f"sarek: error: cannot write {out}:")


def test_original_with_rewrite_options_is_one_error_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["emit", KERNEL, "--target", "cuda", "--original", "--frag", "8"]) == 2
    assert error_line(capsys).startswith("sarek: error: --original prints the kernel as written")


def test_the_installed_script_refuses_without_a_traceback() -> None:
    sarek = Path(sys.executable).parent / "sarek"
    done = subprocess.run([str(sarek), "emit", KERNEL, "--target", "cuda", "--subgroup", "64"],
                          capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.splitlines() == ["sarek: error: cuda runs subgroups of 32 lanes, not 64"]
