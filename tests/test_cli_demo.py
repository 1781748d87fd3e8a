"""The command line's demo and simulate commands, run as a user runs them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from backends.pipeline import compile_launch
from sarek.cli import main


def test_demo_checks_everything_and_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--size", "20,12,9"]) == 0
    out = capsys.readouterr().out
    assert "10 of 10 examples agree with NumPy; 24 of 24 rewrites keep their promise" in out
    for section in ("1. Every bundled GEMM example", "2. Every example rewritten",
                    "3. CUDA", "OpenCL", "4. Conformance recorded"):
        assert section in out


def test_simulate_compares_with_the_reference(capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import EXAMPLES

    assert main(["simulate", f"{EXAMPLES}/gemm_i32.py", "--size", "9,7,5"]) == 0
    assert "c: 63 x int32, vs reference: bit-identical" in capsys.readouterr().out


def test_rewrite_check_reports_bit_identity(capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import EXAMPLES

    assert main(["rewrite", f"{EXAMPLES}/gemm_f16.py", "--size", "20,12,9", "--check"]) == 0
    assert "rewritten vs original, simulated: bit-identical" in capsys.readouterr().out


def test_bad_request_is_an_error_line_not_a_traceback(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    from conftest import EXAMPLES

    assert main(["rewrite", f"{EXAMPLES}/gemm_f16.py", "--frag", "32"]) == 2
    assert capsys.readouterr().err.strip() == (
        "sarek: error: fragment 32 has no template; supported: 16, 8")


def test_the_demos_cuda_rewrite_is_the_kernel_the_cuda_target_compiles(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import EXAMPLES

    import backends.cuda
    from backends.registry import target
    from sarek import demo
    from sarek.loader import load_module

    for name in ("gemm_i32.py", "ldmatrix_interleaved.py"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    compiled: list[str] = []
    monkeypatch.setattr(backends.cuda, "nvrtc_available", lambda: None)
    monkeypatch.setattr(backends.cuda, "compile_cubin",
                        lambda src, arch: compiled.append(src) or b"cubin")
    demo.cuda_rows(tmp_path)
    launch = load_module(tmp_path / "gemm_i32.py").make(70, 45, 33)
    # the original for sm_80 and sm_90, then the rewrite under CUDA's staging for sm_90
    assert compiled[2] == compile_launch(target("cuda"), launch).text
