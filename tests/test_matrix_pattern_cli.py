"""``sarek analyze``: what it prints for a GEMM, a refused kernel and a gate refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarek.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_analyze_prints_nest_region_lowering_and_an_available_gate(capsys) -> None:
    code = main(["analyze", f"{EXAMPLES / 'gemm_f16.py'}:matmul_f16", "--size", "70,45,33"])
    out = capsys.readouterr().out
    assert code == 0
    assert "me=70 ne=45 ze=1 d=33 t=3150" in out
    assert "F16_operands" in out and "available" in out


def test_analyze_reports_the_h200_refusal_of_byte_planes(capsys) -> None:
    code = main(["analyze", str(EXAMPLES / "gemm_i32.py"), "--target", "vulkan-h200"])
    out = capsys.readouterr().out
    assert code == 1
    assert "Int32_byte_planes" in out and "does not support 16x16x16 u8" in out


def test_analyze_takes_an_explicit_launch(capsys) -> None:
    code = main(["analyze", str(EXAMPLES / "gemm_f32_1d.py"), "--grid", "1", "--block", "23",
                 "--args", "m=10", "n=7", "k=3", "--target", "opencl"])
    assert code == 0
    assert "me=4 ne=7 ze=1 d=3 t=23" in capsys.readouterr().out


def test_analyze_prints_the_refusal_of_a_non_gemm(tmp_path: Path, capsys) -> None:
    src = tmp_path / "axpy.py"
    src.write_text("import sarek\nfrom sarek import Global, f32, i32, thread_idx\n\n"
                   "@sarek.kernel\n"
                   "def axpy(x: Global[f32], y: Global[f32], n: i32):\n"
                   "    i = thread_idx.x\n"
                   "    if i < n:\n"
                   "        y[i] = 2.0 * x[i] + y[i]\n")
    assert main(["analyze", f"{src}:axpy"]) == 1
    assert "not a GEMM nest" in capsys.readouterr().out


def test_analyze_rejects_args_without_a_launch(capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), "--args", "m=4"]) == 2
    assert "--args needs --grid and --block" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["cuda:7.5", "unprobed:GPU"])
def test_analyze_refuses_when_the_gate_does_not_permit(target: str, capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), "--target", target]) == 1
