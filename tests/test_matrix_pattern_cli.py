"""``sarek analyze``: what it prints for a GEMM, a refused kernel and a gate refusal; it takes
the registry's target names, with a device of the target as an option."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarek.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_analyze_prints_nest_region_lowering_and_an_available_gate(capsys,
                                                                   h200_vulkan: None) -> None:
    code = main(["analyze", f"{EXAMPLES / 'gemm_f16.py'}:matmul_f16", "--size", "70,45,33"])
    out = capsys.readouterr().out
    assert code == 0
    assert "me=70 ne=45 ze=1 d=33 t=3150" in out
    assert "F16_operands" in out and "available" in out


def test_analyze_says_the_h200_runs_the_byte_planes_through_u32_accumulators(capsys) -> None:
    code = main(["analyze", str(EXAMPLES / "gemm_i32.py"), "--target", "vulkan", "--device",
                 "h200"])
    out = capsys.readouterr().out
    assert code == 0
    # the configuration the vulkan target multiplies with: its staging reduces u8 32 deep
    assert "Int32_byte_planes" in out and "as 16x16x32 u8 x u8 + u32 -> u32" in out


def test_analyze_asks_the_gate_of_the_configuration_the_target_multiplies(capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_i32.py"), "--target", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "configuration 16x16x32 u8 x u8 + s32" in out and "CUDA sm_90: available" in out


def test_analyze_takes_the_fragment_the_target_has_without_frag(capsys) -> None:
    # Metal multiplies 8x8 simdgroup matrices only
    assert main(["analyze", str(EXAMPLES / "gemm_f16.py"), "--target", "metal"]) == 0
    assert "configuration 8x8x8 f16 x f16 + f32" in capsys.readouterr().out


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


@pytest.mark.parametrize(("device", "why"), [
    (("--target", "cuda", "--compute-capability", "7.5"), "needs sm_80; this GPU is sm_75"),
    (("--target", "opencl-nv", "--compute-capability", "sm_70"), "this GPU is sm_70"),
    (("--target", "metal", "--apple-family", "6"), "need an Apple7 GPU")])
def test_analyze_refuses_when_the_gate_of_the_device_does_not_permit(
        device: tuple[str, ...], why: str, capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), *device]) == 1
    assert why in capsys.readouterr().out


@pytest.mark.parametrize(("old", "new"), [
    ("vulkan-h200", "--target vulkan --device h200"),
    ("cuda:8.0", "--target cuda --compute-capability 8.0"),
    ("metal:apple7", "--target metal --apple-family apple7")])
def test_an_old_target_spelling_is_one_error_line_naming_the_new_one(old: str, new: str,
                                                                       capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), "--target", old]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert f"is now spelled {new} " in line


@pytest.mark.parametrize("argv", [("--target", "cuda", "--device", "h200"),
                                  ("--target", "vulkan", "--apple-family", "7"),
                                  ("--target", "metal", "--compute-capability", "8.0")])
def test_a_device_option_of_another_target_is_one_error_line(argv: tuple[str, ...],
                                                             capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), *argv]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "describes a device of" in line and f"not of {argv[1]}" in line


def test_an_unknown_target_is_one_error_line_listing_the_targets(capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), "--target", "unprobed:GPU"]) == 2
    assert "the targets are cuda, metal" in capsys.readouterr().err


def test_analyze_says_the_portable_target_runs_f32_as_written_unless_asked(capsys) -> None:
    assert main(["analyze", str(EXAMPLES / "gemm_f32.py"), "--target", "opencl"]) == 0
    out = capsys.readouterr().out
    assert "Bf16x3_operands (accurate)" in out
    assert "opencl runs it as written unless asked for Bf16x3_operands by name" in out
    assert main(["analyze", str(EXAMPLES / "gemm_i32.py"), "--target", "opencl"]) == 0
    out = capsys.readouterr().out  # the byte planes' words multiplied whole, as s32
    assert "configuration 16x16x16 s32 x s32 + s32 -> s32" in out and "target " not in out
