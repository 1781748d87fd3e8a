"""opencl-nv: one lowering (CUDA's), two printers. The OpenCL C text carries exactly the CUDA
printer's inline PTX for every lowered ldmatrix and mma.sync (opcodes from ``sarek.atoms``),
with the shared-window address of a ``__local`` element instead of ``__cvta_generic_to_shared``;
where clang can compile OpenCL C for NVPTX, the text compiles to PTX with those instructions and
no address conversion. The device run is on the H200 (``bench/results``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES

import sarek
from backends import registry
from backends.cstyle import EmitError
from backends.cuda import lower as cuda_lower
from backends.cuda.emit import print_kernel as print_cuda
from backends.opencl.emit_nv import emit_nv, print_nv
from sarek import atoms, ir
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, lowerings_taking

NV = registry.target("opencl-nv")


def rewrites() -> list[tuple[str, Launch]]:
    out = []
    for path in sorted(EXAMPLES.glob("gemm_*.py")):
        launch = load_module(path).make(70, 45, 33)
        for lowering in lowerings_taking(recognize(launch.kernel).operand_elt):
            rw = rewrite_launch(launch, lowering=lowering, staging=NV.staging).launch
            out.append((f"{path.stem}-{lowering}", rw))
    return out


CASES = rewrites()
_ASM = re.compile(r"^\s*(asm(?: volatile)?\(.*\);)$", re.M)
_ADDRESS = re.compile(r'"r"\(\(uint\)\(ulong\)\(&(\w+)\[(.*)\]\)\)')
_CUDA_ADDRESS = re.compile(r'"r"\(\(unsigned\)__cvta_generic_to_shared\(&(\w+)\[(.*)\]\)\)')


def test_one_lowering_for_cuda_and_opencl_nv() -> None:
    assert NV.lower is registry.target("cuda").lower is cuda_lower.lower
    assert NV.arith == "h200" and (NV.subgroups, NV.fragments) == ((32,), (16,))


TIMED_ON = {"F16_operands": "gemm_f16", "Bf16_operands": "gemm_f32",
            "Bf16x3_operands": "gemm_f32", "Int8_operands": "gemm_i8",
            "Int32_byte_planes": "gemm_i32"}


def test_opencl_nv_stages_like_cuda_within_48_kib_of_local_memory() -> None:
    from backends.cuda import shared

    cuda = registry.target("cuda").staging
    assert (NV.staging.row_pad_bytes, NV.staging.narrow_b_col_major, NV.staging.byte_k,
            NV.staging.packed_planes) == (cuda.row_pad_bytes, cuda.narrow_b_col_major,
                                          cuda.byte_k, cuda.packed_planes)
    for lowering, schedule in NV.staging.declared:
        big = rewrite_launch(load_module(EXAMPLES / f"{TIMED_ON[lowering]}.py").make(64, 64, 64),
                             lowering=Lowering(lowering), staging=NV.staging,
                             schedule=schedule).launch
        assert shared.offsets(big.kernel) is None  # static: at most 48 KiB


def test_every_lowering_has_a_large_schedule_and_f16_and_int8_are_pipelined() -> None:
    large = dict(NV.staging.large)
    assert set(large) == set(TIMED_ON)
    assert large["F16_operands"].stages > 1 and large["Int8_operands"].stages > 1
    assert not any(s.warpgroup for s in large.values())  # wgmma is sm_90a, OpenCL's is sm_90


def test_large_regions_take_the_policys_schedule() -> None:
    for lowering, schedule in NV.staging.large:
        launch = load_module(EXAMPLES / f"{TIMED_ON[lowering]}.py").make(1024, 1024, 32)
        rw = rewrite_launch(launch, lowering=Lowering(lowering), staging=NV.staging)
        assert rw.schedule == schedule, lowering


@pytest.mark.parametrize("rw", [rw for _, rw in CASES], ids=[name for name, _ in CASES])
def test_the_inline_ptx_is_the_cuda_printers_with_a_local_address(rw: Launch) -> None:
    lowered = cuda_lower.lower(rw.kernel)
    ocl = _ASM.findall(print_nv(lowered))
    cuda = _ASM.findall(print_cuda(lowered))
    stmts = [s for s in walk(lowered.body) if isinstance(s, ir.Ldmatrix | ir.Mma)]
    assert len(ocl) == len(cuda) == len(stmts) > 0
    cuda_text = print_cuda(lowered)
    for o, c in zip(ocl, cuda, strict=True):
        # the CUDA printer's text, but for the address: the __local pointer's value (the index
        # expression is the same IR, printed with each dialect's type names)
        assert _ADDRESS.sub(r'"r"(ADDRESS of \1)', o) == \
            _CUDA_ADDRESS.sub(r'"r"(ADDRESS of \1)', c)
        assert "cvta" not in o
    for s in stmts:
        if isinstance(s, ir.Mma):
            assert atoms.MMA[s.atom].ptx in cuda_text
    assert emit_nv(rw.kernel) == print_nv(lowered) == sarek.emit(rw.kernel, "opencl-nv")


@pytest.mark.parametrize("rw", [rw for _, rw in CASES[:4]], ids=[name for name, _ in CASES[:4]])
def test_constant_loops_are_unrolled_as_cuda_unrolls_them(rw: Launch) -> None:
    lowered = cuda_lower.lower(rw.kernel)
    unrolled = print_nv(lowered).count("#pragma unroll")
    assert unrolled == print_cuda(lowered).count("#pragma unroll") > 0


def test_f32_is_rounded_to_f16_and_bf16_by_cvt_rn_but_a_nan_by_the_portable_code() -> None:
    from backends.opencl.emit import DIALECT
    from backends.opencl.emit_nv import HARDWARE_ROUNDING, NV_DIALECT

    text = HARDWARE_ROUNDING["sk_f32_to_f16"]
    assert text in NV_DIALECT.prelude and "(a & 0x7FFFFFu) >> 13" in DIALECT.prelude
    assert (text.index("if (a > 0x7F800000u)") < text.index("(a & 0x7FFFFFu) >> 13")
            < text.index("cvt.rn.f16.f32"))
    # bf16: the portable helper's NaN, the quiet NaN of the sign (0x8000 = 32768, 0x7FC0 =
    # 32704), selected in PTX without a branch
    text = HARDWARE_ROUNDING["sk_f32_to_bf16"]
    assert text in NV_DIALECT.prelude and "((u >> 16) & 0x8000u) | 0x7FC0u" in DIALECT.prelude
    assert "if" not in text and "?" not in text
    steps = ("cvt.rn.bf16.f32 t, %1", "setp.nan.f32 n, %1, %1", "shr.b32 q, q, 16",
             "and.b32 q, q, 32768", "or.b32 q, q, 32704", "selp.b32 %0, q, %0, n")
    assert [text.index(step) for step in steps] == sorted(text.index(step) for step in steps)
    rest = NV_DIALECT.prelude  # everything else is the portable prelude
    for text in HARDWARE_ROUNDING.values():
        rest = rest.replace(text, "")
    assert all(line in DIALECT.prelude for line in rest.splitlines())


def test_the_rounding_instructions_assemble_for_sm_90() -> None:
    from backends.cuda.nvrtc import compile_logged, nvrtc_available
    from backends.opencl.emit_nv import HARDWARE_ROUNDING

    if nvrtc_available() is not None:
        pytest.skip(str(nvrtc_available()))
    asm = [line.strip() for text in HARDWARE_ROUNDING.values() for line in text.splitlines()
           if "asm(" in line]
    body = "\n".join(f"{{ float f = x[{i}]; {line} y[{i}] = h; }}" for i, line in enumerate(asm))
    cubin, _ = compile_logged('extern "C" __global__ void k(const float* x, unsigned* y) {\n'
                              f"typedef unsigned uint;\n{body}\n}}", "sm_90")
    assert cubin


def test_the_address_is_of_a_local_array() -> None:
    _, rw = CASES[0]
    text = emit_nv(rw.kernel)
    arrays = {m[1] for m in _ADDRESS.finditer(text)}
    assert arrays and all(re.search(rf"__local \w+ {a}\[", text) for a in arrays)


def test_fragment_8_and_subgroup_64_are_refused_with_the_reason() -> None:
    assert NV.refuses(Lowering.F16_OPERANDS, 64, 16) == "opencl-nv runs subgroups of 32 " \
        "lanes, not 64"
    assert "fragments of 16, not 8" in str(NV.refuses(Lowering.F16_OPERANDS, 32, 8))
    launch = load_module(EXAMPLES / "gemm_f16.py").make(16, 16, 16)
    rw = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS, frag=8).launch
    with pytest.raises(EmitError, match="no 8x8x8 float shape"):
        sarek.emit(rw.kernel, "opencl-nv")


def test_printing_neutral_fragments_for_opencl_nv_is_refused() -> None:
    _, rw = CASES[0]
    with pytest.raises(EmitError, match=r"opencl-nv has no frag_[a-z_]* statement: neutral "
                       "fragment statements are lowered for the target first"):
        print_nv(rw.kernel)


def test_without_nvidias_opencl_the_reason_names_it() -> None:
    reason = NV.device_reason()
    if reason is not None:
        assert "NVIDIA" in reason


CLANG = shutil.which("clang-14") or shutil.which("clang")


def _nvptx(source: str, tmp: Path) -> str | None:
    """PTX clang makes of ``source`` (``asm`` spelled ``__asm__``, which clang's OpenCL mode
    wants), or None when this clang has no NVPTX target."""
    assert CLANG is not None
    (tmp / "k.cl").write_text(source)
    done = subprocess.run([CLANG, "-x", "cl", "-cl-std=CL1.2", "-target", "nvptx64-nvidia-nvcl",
                           "-Xclang", "-finclude-default-header", "-march=sm_80",
                           "-Dasm=__asm__", "-O2", "-S", "-o", str(tmp / "k.ptx"),
                           str(tmp / "k.cl")], capture_output=True, text=True, check=False)
    if done.returncode and "unknown target" in done.stderr.lower():
        return None
    assert done.returncode == 0, done.stderr[-2000:]
    return (tmp / "k.ptx").read_text()


@pytest.mark.skipif(CLANG is None, reason="no clang to compile OpenCL C for NVPTX")
@pytest.mark.parametrize("name", ["gemm_f16-F16_operands", "gemm_i32-Int32_byte_planes",
                                  "gemm_f32-Bf16x3_operands"])
def test_the_text_compiles_to_ptx_with_shared_window_addresses(name: str, tmp_path: Path
                                                               ) -> None:
    rw = dict(CASES)[name]
    lowered = cuda_lower.lower(rw.kernel)
    ptx = _nvptx(print_nv(lowered), tmp_path)
    if ptx is None:
        pytest.skip("this clang has no NVPTX target")
    count = sum(isinstance(s, ir.Ldmatrix | ir.Mma) for s in walk(lowered.body))
    assert len(re.findall(r"^\s*(ldmatrix|mma)\.sync", ptx, re.M)) == count
    # a __local pointer is already a shared-window address: nothing converts it
    assert "cvta" not in ptx and ".shared .align 16" in ptx


def test_a_local_id_is_printed_below_1024_so_the_compiler_knows_it_is_not_negative() -> None:
    _, rw = CASES[0]
    text = emit_nv(rw.kernel)
    assert "((int)(get_local_id(0) & 1023u))" in text
    assert "((int)get_local_id(0))" not in text
    assert "((int)get_local_id(0))" in sarek.emit(rw.kernel, "opencl")
