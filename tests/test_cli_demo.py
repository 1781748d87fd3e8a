"""The command line's demo and simulate commands, run as a user runs them.

The demo runs here on one example at a small size (a few seconds); the whole demo, at its
own size, is marked slow.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from backends import registry
from backends.pipeline import compile_launch
from sarek.cli import main
from sarek.matrix_scheme import Lowering

SMALL = ["--example", "gemm_f16", "--size", "20,12,9"]
INSTALLS = ("pip install 'sarek[cuda]'", "pip install 'sarek[opencl]'",
            "pip install 'sarek[spirv]'")
TOOL_TABLES = ("NVRTC", "an OpenCL device", "spirv-val", "clang")


def rows_of(out: str, example: str) -> list[list[str]]:
    """The table rows of ``example``, cell by cell."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()
            if line.startswith(f"   {example} ")]


def not_here(out: str) -> str:
    """The demo's list of what is missing here (empty when nothing is)."""
    _, _, rest = out.partition("Not here, so not checked:")
    return rest.partition("\n5. ")[0]


@pytest.fixture(scope="module")
def small_demo() -> str:
    """What ``sarek demo`` prints for one example at a small size (it must succeed)."""
    with redirect_stdout(io.StringIO()) as out:
        assert main(["demo", *SMALL]) == 0
    return out.getvalue()


@pytest.fixture
def bare(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An environment as a bare ``pip install sarek`` leaves it: no cuda-bindings, pyopencl,
    vulkan or SPIRV-Tools, and no clang."""
    import backends.spirv.tools
    from backends.cuda import nvrtc

    for name in ("cuda", "cuda.bindings", "cuda.bindings.nvrtc", "cuda.bindings.driver",
                 "pyopencl", "vulkan"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it fails
    monkeypatch.setattr(backends.spirv.tools, "_candidates", lambda name: [])
    monkeypatch.setenv("SAREK_CLANG", "no-such-clang")
    nvrtc.nvrtc_available.cache_clear()  # remembered per process
    yield
    nvrtc.nvrtc_available.cache_clear()


def test_the_demo_takes_an_example_through_every_stage(small_demo: str) -> None:
    out = small_demo
    rows = rows_of(out, "gemm_f16")
    # 20 x 12 outputs in 16x16 blocks: 1 x 2 blocks of 256 invocations
    simulated = next(r for r in rows if r[1] == "matmul_f16")
    assert simulated[2] == "512" and simulated[-1] == "bit-identical"
    assert ["gemm_f16", "a f16 x b f16 -> c f16", "c = f16(acc)", "F16_operands",
            "bit-identical"] in rows
    printed = {r[1]: r for r in rows if len(r) == 6}
    for target, model, operation in (("cuda", "h200", "mma.sync"),
                                     ("opencl-nv", "h200", "mma.sync"),
                                     ("opencl", "sequential", "local memory"),
                                     ("spirv", "h200", "OpCooperativeMatrixMulAddKHR"),
                                     ("metal", "sequential", "simdgroup_multiply_accumulate")):
        row = printed[target]
        assert row[2].endswith(" lines") and operation in row[3], row
        assert row[4:] == [model, "bit-identical"], row
    missing = not_here(out)
    for tool in TOOL_TABLES:  # each checked here, or said to be missing
        assert (f"\n   {tool}" in out) != (f"- {tool}" in missing or f" and {tool}" in missing)
    tool_rows = [r for r in rows if len(r) == 3]
    # a Vulkan device here whose gate refuses the rewrite (lavapipe: no cooperative matrices)
    # runs the original and says why the rewrite is refused
    gate = registry.target("vulkan").refuses(Lowering.F16_OPERANDS, 32, 16)
    refused = [r for r in tool_rows if r[2] == "refused"]
    assert refused == ([["gemm_f16", "bit-identical", "refused"]] if gate else [])
    assert gate is None or gate in " ".join(out.split())
    assert tool_rows and all(r[1] == r[2] or "cubin" in r[1] for r in tool_rows
                             if r not in refused)
    for cell in (c for r in tool_rows if r not in refused for c in r[1:]):
        assert cell in ("bit-identical", "valid", "clang: no error") or re.fullmatch(
            r"cubin \d+ bytes", cell), cell
    assert "\nEvery check passed" in out
    assert out.splitlines()[-1] == "    sarek conformance --target sim-opencl"


def test_each_recorded_difference_says_why(small_demo: str) -> None:
    from conftest import ROOT

    if not (ROOT / "bench" / "results" / "vulkan_arith_h200.json").is_file():
        pytest.skip("no recorded Vulkan arithmetic in this checkout")
    recorded = small_demo.partition("\n5. ")[2]
    vulkan = recorded.partition("operations and conversions, Vulkan")[2]
    assert re.match(r"\s+NVIDIA H200 \(Vulkan.*\)\s+\d+\s+\d+ of \d+ bit-exact\n", vulkan)
    why = " ".join(vulkan.split())
    assert "why: neg (f32), sqrt (f32): subnormal f32 results flushed to zero" in why
    assert "fma (f32): Vulkan does not promise a fused Fma" in why
    assert "the transcendental functions differ by a few ulps, as documented" in why
    assert "MISMATCHES" not in recorded


@pytest.mark.usefixtures("bare")
def test_a_missing_component_is_named_once_with_what_installs_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *SMALL]) == 0
    out = capsys.readouterr().out
    for install in INSTALLS:
        assert out.count(install) == 1, install
    missing = not_here(out)
    assert "NVRTC and a CUDA device: " in missing  # one line for both: the same package
    assert "an OpenCL device and NVIDIA's OpenCL: " in missing
    assert "spirv-val and a Vulkan device: " in missing
    assert "- clang: no clang" in missing
    for tool in TOOL_TABLES:  # no table, not even an empty one
        assert f"\n   {tool}" not in out
    assert not re.search(r"\b0 of \d", out) and "cubin" not in out
    # what needs nothing installed still runs
    assert sum(r[-1] == "bit-identical" for r in rows_of(out, "gemm_f16") if len(r) == 6) == 5


@pytest.mark.usefixtures("bare")
def test_an_undocumented_difference_fails_the_demo(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import EXAMPLES

    examples = tmp_path / "examples"
    examples.mkdir()
    off_by_one = ("\n\n_reference = reference\n\n\ndef reference(launch):\n"
                  "    out = {k: v.copy() for k, v in _reference(launch).items()}\n"
                  "    out['c'].view('u2')[0] ^= 1\n    return out\n")
    (examples / "gemm_f16.py").write_text((EXAMPLES / "gemm_f16.py").read_text() + off_by_one)
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "vulkan_arith_h200.json").write_text(json.dumps({"device": "GPU", "rows": [
        {"kernel": "binary_f32", "what": "neg", "mismatches": 3},
        {"kernel": "binary_i32", "what": "add", "mismatches": 1}]}))
    assert main(["demo", *SMALL, "--examples", str(examples)]) == 1
    out = capsys.readouterr().out
    assert next(r for r in rows_of(out, "gemm_f16") if r[1] == "matmul_f16")[-1].startswith(
        "DIFFERS (c: 1 of 240 differ")
    failed = out.partition("\nFAILED, 2 checks:\n")[2]
    assert "gemm_f16 vs NumPy: c: 1 of 240 differ" in failed
    assert "add (i32) differ from the simulator, which no documented reason covers" in failed
    assert "neg" not in failed and "Every check passed" not in out


def test_the_demos_nvrtc_compiles_what_the_cuda_target_compiles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import EXAMPLES

    import backends.cuda
    from backends.registry import emit, target
    from sarek import demo

    compiled: list[str] = []

    def compile_cubin(source: str, arch: str, name: str) -> bytes:
        compiled.append(source)
        return b"cubin"

    monkeypatch.setattr(backends.cuda, "compile_cubin", compile_cubin)
    example = demo.load(EXAMPLES / "gemm_i32.py", (20, 12, 9))
    cuda = compile_launch(target("cuda"), example.launch)
    row = demo.TOOLS[0].check(example, cuda)
    assert compiled == [emit(example.launch.kernel, "cuda"), cuda.text]
    assert row.cells == ("gemm_i32", "cubin 5 bytes", "cubin 5 bytes") and row.failure is None


def test_the_progress_bar_names_the_step_running_on_a_terminal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sarek.demo import Steps

    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: stderr is a terminal
    with Steps(2).shown() as steps:
        steps("compiling the kernel")
    captured = capsys.readouterr()
    assert "compiling the kernel" in captured.err and captured.out == ""


def test_no_progress_is_drawn_where_stderr_is_not_a_terminal(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from sarek.demo import Steps

    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    with Steps(2).shown() as steps:
        steps("compiling the kernel")
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_the_whole_demo_passes_every_check(capsys: pytest.CaptureFixture[str]) -> None:
    from sarek.demo import FEATURED

    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"sarek demo: {len(FEATURED)} bundled GEMM kernels at m x n x k = "
                          "70x45x33")
    for name in FEATURED:
        assert rows_of(out, name), name
    assert "\nEvery check passed" in out


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


def test_a_target_that_runs_an_example_as_written_is_labelled_so(
        capsys: pytest.CaptureFixture[str]) -> None:
    from conftest import EXAMPLES

    assert main(["demo", "--examples", str(EXAMPLES), "--example", "gemm_f32", "--size",
                 "20,12,9"]) == 0
    out = capsys.readouterr().out
    opencl = next(r for r in rows_of(out, "gemm_f32") if len(r) == 6 and r[1] == "opencl")
    assert opencl[2] == "as written", opencl
    assert "why: opencl runs it as written: without a matrix unit" in out
