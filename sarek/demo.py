"""The demo: every bundled GEMM example simulated and checked against its NumPy reference,
then rewritten onto matrix fragments under every applicable lowering, subgroup and fragment
size, and compared with the original.

Each example module (``examples/gemm_*.py``) defines one kernel, ``make(m, n, k, seed)``
returning a ``Launch`` and ``reference(launch)`` returning the expected arrays.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sarek.ir import ElemType
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, lowerings_taking


@dataclass(frozen=True)
class Row:
    """One checked example."""

    example: str
    kernel: str
    size: tuple[int, int, int]
    invocations: int
    seconds: float
    verdict: str  # "bit-identical", or how the results differ
    ok: bool


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, str]:
    """Bitwise comparison (NaNs with equal bits compare equal); on a difference, the count and
    the largest difference."""
    g, w = np.ascontiguousarray(got), np.ascontiguousarray(want)
    if g.shape != w.shape or g.dtype != w.dtype:
        return False, f"shape/type {g.shape} {g.dtype} vs {w.shape} {w.dtype}"
    if g.size == 0:
        return True, "bit-identical"
    same = g.view(np.uint8).reshape(g.size, -1) == w.view(np.uint8).reshape(w.size, -1)
    bad = ~same.all(axis=1)
    if not bad.any():
        return True, "bit-identical"
    diff = np.abs(g[bad].astype(np.float64) - w[bad].astype(np.float64)).max()
    return False, f"{int(bad.sum())} of {g.size} differ, max |diff| {diff:.3g}"


def check_example(path: Path, size: tuple[int, int, int], seed: int = 0) -> Row:
    module = load_module(path)
    launch = module.make(*size, seed=seed)
    start = time.perf_counter()
    out = launch.simulate()
    seconds = time.perf_counter() - start
    ok, verdict = True, "bit-identical"
    for name, want in module.reference(launch).items():
        same, how = compare(out[name], want)
        if not same:
            ok, verdict = False, f"{name}: {how}"
    invocations = int(np.prod(launch.grid) * np.prod(launch.block))
    return Row(path.stem, launch.kernel.name, size, invocations, seconds, verdict, ok)


def run(examples: Path, size: tuple[int, int, int] = (70, 45, 33)) -> list[Row]:
    """Checks every ``gemm_*.py`` example in ``examples`` at ``size`` (m, n, k)."""
    return [check_example(p, size) for p in sorted(examples.glob("gemm_*.py"))]


CONFIGS = ((32, 16), (32, 8), (64, 16), (64, 8))  # (subgroup, fragment)
# Largest difference from the f32 original, relative to max|C|, that the demo accepts for f32
# operands (the tests check the rigorous per-element bounds): a few units of each lowering's
# operand rounding.
SANITY = {Lowering.BF16X3_OPERANDS: 1e-5, Lowering.F16_OPERANDS: 4e-3,
          Lowering.BF16_OPERANDS: 3e-2}


@dataclass(frozen=True)
class RewriteRow:
    """One example under one lowering: per (subgroup, fragment) how the rewritten kernel's
    output compares with the original's (``"exact"`` or the normwise relative difference)."""

    example: str
    lowering: str
    results: tuple[str, ...]
    ok: bool


def rewrite_example(path: Path, size: tuple[int, int, int], seed: int = 0) -> list[RewriteRow]:
    module = load_module(path)
    original = module.make(*size, seed=seed)
    gemm = recognize(original.kernel)
    want = original.simulate()[gemm.c.array]
    exact_lowering = gemm.operand_elt in (ElemType.I32, ElemType.F16)
    rows = []
    for lowering in lowerings_taking(gemm.operand_elt):
        results, ok = [], True
        for subgroup, frag in CONFIGS:
            rw = rewrite_launch(original, lowering=lowering, subgroup=subgroup, frag=frag)
            got = rw.launch.simulate(subgroup=subgroup)[gemm.c.array]
            same, _ = compare(got, want)
            if same:
                results.append("exact")
                continue
            scale = float(np.abs(want.astype(np.float64)).max()) or 1.0
            diff = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max())
            results.append(f"{diff / scale:.1e}")
            # int32 and f16 operands must come out exact, f32 within a sanity bound
            ok = ok and not exact_lowering and diff / scale <= SANITY[lowering]
        rows.append(RewriteRow(path.stem, lowering.value, tuple(results), ok))
    return rows


def run_rewrites(examples: Path, size: tuple[int, int, int] = (70, 45, 33)) -> list[RewriteRow]:
    """Rewrites every example under each lowering that takes its operands, in every
    (subgroup, fragment) configuration, and compares with the original (both simulated)."""
    return [row for p in sorted(examples.glob("gemm_*.py")) for row in rewrite_example(p, size)]


def cuda_rows(examples: Path) -> list[tuple[str, ...]]:
    """Each example's kernel printed as CUDA and compiled by NVRTC for sm_80 and sm_90, and
    its rewrite as the CUDA target compiles it (the selected lowering, subgroup 32, fragment
    16, CUDA's staging) for sm_90."""
    from backends.cuda import compile_cubin, emit, nvrtc_available
    from backends.pipeline import compile_launch
    from backends.registry import target

    cuda = target("cuda")
    missing = nvrtc_available()
    rows: list[tuple[str, ...]] = []
    for path in [*sorted(examples.glob("gemm_*.py")), examples / "ldmatrix_interleaved.py"]:
        module = load_module(path)
        gemm = path.stem.startswith("gemm")
        launch = module.make(70, 45, 33) if gemm else module.make()
        src = emit(launch.kernel)
        rw = compile_launch(cuda, launch).text if gemm else ""
        if missing:
            rows.append((path.stem, f"{len(src.splitlines())} lines", missing, "", ""))
            continue
        sizes = [len(compile_cubin(src, arch)) for arch in ("sm_80", "sm_90")]
        rows.append((path.stem, f"{len(src.splitlines())} lines",
                     f"cubin {sizes[0]} / {sizes[1]} bytes",
                     f"{rw.count('mma.sync.aligned')} mma.sync" if gemm else "-",
                     f"cubin {len(compile_cubin(rw, 'sm_90'))} bytes" if gemm else "-"))
    return rows


def recorded_results(examples: Path) -> Path | None:
    """``bench/results`` of the source checkout that holds ``examples``, where the device
    checks are recorded; None outside a checkout (an installed package carries no results)."""
    results = examples.parent / "bench" / "results"
    return results if results.is_dir() else None


def recorded_conformance(results: Path) -> list[tuple[str, str, str, str]]:
    """The device checks recorded in ``bench/results`` (never rerun by the demo): which check,
    on which device, how many cases and whether all were bit-exact."""
    import json

    rows = []
    for name, what in (("conformance_cuda.json", "examples and rewrites, CUDA vs simulator"),
                       ("tile_patterns_h200.json", "ldmatrix/stmatrix vs simulator"),
                       ("tensor_core_h200.json", "mma.sync outputs vs the h200 model"),
                       ("arith_h200.json", "operations and conversions (exact ones)"),
                       ("conformance_opencl_nvidia.json", "OpenCL examples and probes"),
                       ("conformance_opencl-nv.json",
                        "examples and rewrites, OpenCL inline PTX vs simulator"),
                       ("conformance_opencl.json",
                        "examples and rewrites, portable OpenCL vs simulator"),
                       ("conformance_vulkan.json", "examples and rewrites, Vulkan vs simulator"),
                       ("vulkan_coopmat_h200.json", "Vulkan cooperative matrices vs h200 model"),
                       ("vulkan_arith_h200.json", "Vulkan operations and conversions")):
        path = results / name
        if not path.is_file():
            rows.append((what, "-", "-", f"not recorded ({name} missing)"))
            continue
        data = json.loads(path.read_text())
        if "h200_model_bit_exact" in data:  # the tensor-core check counts outputs
            cases = sum(r["outputs"] for r in data["rows"])
            exact = data["h200_model_bit_exact"]
        elif "bit_exact_models" in data:  # the Vulkan cooperative-matrix probe, likewise
            cases = sum(r.get("outputs", 0) for r in data["rows"])
            exact = "h200" in data["bit_exact_models"]
        elif "all_exact_operations_bit_exact" in data:
            transcendental = {"exp", "log", "sin", "cos", "tanh"}
            cases = sum(r["what"] not in transcendental for r in data["rows"])
            exact = data["all_exact_operations_bit_exact"]
        else:
            cases, exact = len(data["cases"]), data["all_bit_exact"]
        where = data.get("arch") or data.get("platform", "")
        device = data.get("opencl_device") or (  # OpenCL reports name their device
            f"{data['device']} ({where})" if where else data["device"])
        rows.append((what, device, str(cases),
                     "all bit-exact" if exact else "MISMATCHES"))
    return rows


def opencl_rows(examples: Path) -> list[tuple[str, ...]]:
    """Each example printed as OpenCL C and run on the first OpenCL device (PoCL on a CPU),
    compared bit for bit with the simulator."""
    from backends.opencl import emit, opencl_available, run

    missing = opencl_available()
    rows: list[tuple[str, ...]] = []
    for path in sorted(examples.glob("gemm_*.py")):
        launch = load_module(path).make(70, 45, 33)
        src = emit(launch.kernel)
        if missing:
            rows.append((path.stem, f"{len(src.splitlines())} lines", missing))
            continue
        want = launch.simulate()
        got = run(launch.kernel, dict(launch.args), launch.grid, launch.block)
        same = all(compare(got[k], want[k])[0] for k in want)
        rows.append((path.stem, f"{len(src.splitlines())} lines",
                     "bit-identical" if same else "DIFFERS"))
    return rows


def opencl_rewrite_rows(examples: Path, size: tuple[int, int, int] = (70, 45, 33)
                        ) -> tuple[list[tuple[str, ...]], int, int, str]:
    """Each example rewritten under every lowering that takes its operands at subgroups 32 and
    64 and fragments 16 and 8, printed as portable OpenCL C (fragments emulated in local
    memory), run on the first OpenCL device (PoCL on a CPU) and compared bit for bit with the
    simulator running the same lowered kernel: the rows, how many were bit-identical of how
    many ran (none ran when there is no device: the rows say why), and the device."""
    from backends.opencl import opencl_available
    from backends.opencl.run import device_label
    from backends.pipeline import compile_launch
    from backends.registry import target

    opencl = target("opencl")
    missing = opencl_available()
    rows: list[tuple[str, ...]] = []
    same_count = ran = 0
    for path in sorted(examples.glob("gemm_*.py")):
        launch = load_module(path).make(*size)
        for lowering in lowerings_taking(recognize(launch.kernel).operand_elt):
            cells = []
            for subgroup, frag in CONFIGS:
                compiled = compile_launch(opencl, launch, lowering=lowering, subgroup=subgroup,
                                          frag=frag)
                if missing:
                    cells.append(f"{len(compiled.text.splitlines())} lines")
                    continue
                rw = compiled.launch
                assert opencl.run is not None
                got = opencl.run(rw.kernel, dict(rw.args), rw.grid, rw.block)
                want = rw.simulate(target="opencl")
                same = all(compare(got[k], want[k])[0] for k in want)
                ran += 1
                same_count += same
                cells.append("bit-identical" if same else "DIFFERS")
            rows.append((path.stem, lowering.value, *cells))
    if missing:
        rows.append(("(not run)", missing, "", "", "", ""))
    return rows, same_count, ran, "no OpenCL device" if missing else device_label()


def metal_rows(examples: Path) -> list[tuple[str, ...]]:
    """Each example printed as Metal Shading Language, and its rewrite onto simdgroup
    matrices (the selected lowering, subgroup 32, fragment 8, or Metal's reason for refusing
    it), each checked by clang as C++ against the stand-in <metal_stdlib>: a syntax and type
    check, not Apple's compiler."""
    from backends.metal import MetalCheckError, clang_unavailable, emit, syntax_check
    from backends.pipeline import compile_launch
    from backends.registry import target
    from sarek.errors import SarekError
    from sarek.matrix_scheme import select

    metal = target("metal")
    missing = clang_unavailable()

    def checked(text: str, name: str) -> str:
        if missing:
            return f"not checked: {missing}"
        try:
            syntax_check(text, name)
        except MetalCheckError:
            return "REJECTED by clang"
        return "clang: no error"

    rows: list[tuple[str, ...]] = []
    for path in sorted(examples.glob("gemm_*.py")):
        launch = load_module(path).make(70, 45, 33)
        src = emit(launch.kernel)
        try:
            compiled = compile_launch(metal, launch, subgroup=32, frag=8)
        except SarekError as e:
            # the refusal does not say which lowering it refused: the one compile selects
            lowering = select(recognize(launch.kernel))
            rewritten, verdict = f"{lowering}: refused", e.reason.split(": ")[-1]
        else:
            rw = compiled.text
            done = compiled.rewritten
            rewritten = (f"{done.lowering}: {rw.count('simdgroup_multiply_accumulate(')} "
                         "simdgroup_multiply_accumulate" if done else "not rewritten")
            verdict = checked(rw, f"{path.stem}_rewritten.metal") if done else str(
                compiled.not_rewritten)
        rows.append((path.stem, f"{len(src.splitlines())} lines",
                     checked(src, f"{path.stem}.metal"), rewritten, verdict))
    return rows


def spirv_rows(examples: Path) -> tuple[list[tuple[str, ...]], int, int]:
    """Each example printed as SPIR-V, and rewritten under every lowering that takes its
    operands at subgroups 32 and 64 and fragments 16 and 8, each module assembled by spirv-as
    and validated by ``spirv-val --target-env vulkan1.3``: the rows, and how many modules
    validated of how many."""
    from backends.pipeline import compile_launch
    from backends.registry import target
    from backends.spirv import check, emit, tools_reason
    from sarek.errors import SarekError

    spirv = target("spirv")
    missing = tools_reason()
    rows: list[tuple[str, ...]] = []
    passed = total = 0
    for path in sorted(examples.glob("gemm_*.py")):
        launch = load_module(path).make(70, 45, 33)
        modules = [emit(launch.kernel)]
        for lowering in lowerings_taking(recognize(launch.kernel).operand_elt):
            for subgroup, frag in CONFIGS:
                modules.append(compile_launch(spirv, launch, lowering=lowering, subgroup=subgroup,
                                             frag=frag).text)
        ok = []
        for text in modules:
            try:
                if not missing:
                    check(text)
                ok.append(not missing)
            except SarekError:
                ok.append(False)
        passed, total = passed + sum(ok), total + len(ok)
        rewrites = sum(m.count("OpCooperativeMatrixMulAddKHR ") > 0 for m in modules[1:])
        rows.append((path.stem, f"{len(modules[0].splitlines())} lines",
                     missing or ("valid" if ok[0] else "INVALID"),
                     f"{rewrites} cooperative-matrix modules",
                     missing or f"{sum(ok[1:])} of {len(ok) - 1} valid"))
    return rows, passed, total


def render(head: tuple[str, ...], body: Sequence[tuple[str, ...]]) -> str:
    """A plain text table."""
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return "\n".join([line(head), line(tuple("-" * w for w in widths)), *map(line, body)])


def table(rows: list[Row]) -> str:
    head = ("example", "kernel", "m x n x k", "invocations", "sim time", "vs NumPy reference")
    return render(head, [(r.example, r.kernel, "x".join(map(str, r.size)), str(r.invocations),
                          f"{r.seconds * 1e3:.1f} ms", r.verdict) for r in rows])


def rewrite_table(rows: list[RewriteRow]) -> str:
    head = ("example", "lowering", *(f"sg {s} frag {f}" for s, f in CONFIGS))
    return render(head, [(r.example, r.lowering, *r.results) for r in rows])
