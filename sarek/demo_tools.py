"""The compilers, validators and devices ``sarek demo`` hands the printed text to, when they
are installed: each named once, with what installs it, when it is missing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sarek.errors import SarekError
from sarek.launch import Launch

if TYPE_CHECKING:
    from backends.pipeline import Compiled
from sarek.demo_rows import (
    Example,
    Refused,
    Row,
    compare_all,
    compile_for,
    reason_of,
    refusal_cell,
)

Check = Callable[["Example", "Compiled | Refused | None"], Row]
"""A tool's check of one example: its original and the rewrite the tool's target printed
(a refusal's reason, or None when compiling failed, which section 3 reported)."""


@dataclass(frozen=True)
class Tool:
    """A compiler, validator or device that checks what a target prints."""

    name: str  # as the tables name it
    about: str  # what it does with the text
    target: str  # the printer whose text it checks
    missing: Callable[[], str | None]  # why it cannot be used here (None: it can)
    install: str | None  # what installs it, said when the reason does not say
    check: Check
    needs: str | None = None  # a tool it cannot work without: missing for the same reason
    device: bool = False  # it runs the kernels (the demo names the device)


def _both(ex: Example, compiled: Compiled | Refused | None, original: str,
          one: Callable[[str, str], tuple[str, str | None]]) -> Row:
    """The original's text and the rewrite's, each checked by ``one(text, name)``, which
    returns the cell and the problem found (None when there is none)."""
    texts: list[tuple[str, str]] = [(original, ex.name)]
    if compiled is not None and not isinstance(compiled, str):
        texts.append((compiled.text, f"{ex.name}_rewritten"))
    cells, problems = [], []
    for text, name in texts:
        cell, problem = one(text, name)
        cells.append(cell)
        if problem:
            problems.append(f"{name}: {problem}")
    refused = (compiled,) if isinstance(compiled, str) else ()
    if len(cells) == 1:
        cells.append(refusal_cell(compiled) if isinstance(compiled, str) else "-")
    return Row((ex.name, *cells), (*problems, *refused), problems[0] if problems else None)


def _nvrtc(ex: Example, compiled: Compiled | Refused | None) -> Row:
    from backends.cuda import NvrtcError, compile_cubin
    from backends.registry import emit

    def one(text: str, name: str) -> tuple[str, str | None]:
        try:
            return f"cubin {len(compile_cubin(text, 'sm_90', f'{name}.cu'))} bytes", None
        except NvrtcError as e:
            return "REJECTED", reason_of(e)

    return _both(ex, compiled, emit(ex.launch.kernel, "cuda"), one)


def _spirv_val(ex: Example, compiled: Compiled | Refused | None) -> Row:
    from backends.registry import emit
    from backends.spirv import check

    def one(text: str, name: str) -> tuple[str, str | None]:
        try:
            check(text)
        except SarekError as e:
            return "INVALID", reason_of(e)
        return "valid", None

    return _both(ex, compiled, emit(ex.launch.kernel, "spirv"), one)


def _metal_check(text: str, name: str) -> tuple[str, str | None]:
    """clang's verdict on Metal ``text`` (printed as ``name``.metal), and its first complaint."""
    from backends.metal import MetalCheckError, syntax_check

    try:
        syntax_check(text, f"{name}.metal")
    except MetalCheckError as e:
        return "REJECTED by clang", reason_of(e)
    return "clang: no error", None


def _clang(ex: Example, compiled: Compiled | Refused | None) -> Row:
    from backends.registry import emit

    return _both(ex, compiled, emit(ex.launch.kernel, "metal"), _metal_check)


def _on_device(name: str) -> Check:
    """Runs the original and the rewrite for target ``name`` on its device, each against the
    simulator running the same lowered kernel."""

    def check(ex: Example, compiled: Compiled | Refused | None) -> Row:
        from backends.registry import target

        t = target(name)
        if name == "vulkan":  # the device's gate decides what runs, not the printer's list
            compiled = compile_for(ex, name)
        launches: list[Launch | str] = [ex.launch]
        if compiled is None:
            launches.append("-")
        else:
            launches.append(compiled if isinstance(compiled, str) else compiled.launch)
        cells, problems, refusals = [], [], []
        for launch in launches:
            if isinstance(launch, str):
                cells.append("-" if launch == "-" else refusal_cell(launch))
                refusals += [launch] if launch != "-" else []
                continue
            refusal = t.run_refusal(launch.kernel, launch.block)
            if refusal:
                cells.append("refused")
                refusals.append(refusal)
                continue
            assert t.run is not None  # a tool runs on a device target
            try:
                got = t.run(launch.kernel, dict(launch.args), launch.grid, launch.block)
            except Exception as e:
                cells.append("ERROR")
                problems.append(reason_of(e))
                continue
            how = compare_all(got, launch.simulate(target=name))
            cells.append("bit-identical" if how is None else f"DIFFERS ({how})")
            if how:
                problems.append(f"not a documented difference: {how}")
        return Row((ex.name, *cells), (*problems, *refusals),
                   f"{ex.name} on {name}: {problems[0]}" if problems else None)

    return check


def device_label(name: str) -> str:
    """``, the device's name`` for device target ``name`` (one that was found), else
    nothing."""
    try:
        match name:
            case "cuda":
                from backends.cuda.run import device_arch, device_name

                return f", {device_name()} ({device_arch()})"
            case "opencl" | "opencl-nv":
                from backends.opencl.run import NVIDIA, device_label

                return f", {device_label(NVIDIA if name == 'opencl-nv' else None)}"
            case "vulkan":
                from backends.spirv.device import device_name as vulkan_name

                return f", {vulkan_name()}"
    except Exception:  # the device was found: only its name is missing
        return ""
    return ""


def _device_reason(name: str) -> Callable[[], str | None]:
    def reason() -> str | None:
        from backends.registry import target

        return target(name).device_reason()

    return reason


def _nvrtc_missing() -> str | None:
    from backends.cuda import nvrtc_available

    return nvrtc_available()


def _spirv_missing() -> str | None:
    from backends.spirv import tools_reason

    return tools_reason()


def _clang_missing() -> str | None:
    from backends.metal import clang_unavailable

    return clang_unavailable()


TOOLS = (
    Tool("NVRTC", "each CUDA text compiled for sm_90", "cuda", _nvrtc_missing,
         "pip install 'sarek[cuda]'", _nvrtc),
    Tool("a CUDA device", "each CUDA kernel run, against the simulator running it (h200 model)",
         "cuda", _device_reason("cuda"), None, _on_device("cuda"), needs="NVRTC", device=True),
    Tool("an OpenCL device", "each portable OpenCL kernel run, against the simulator running it",
         "opencl", _device_reason("opencl"),
         "pip install 'sarek[opencl]' (pyopencl, and PoCL: a CPU device)", _on_device("opencl"),
         device=True),
    Tool("NVIDIA's OpenCL", "each OpenCL kernel with inline PTX run, against the simulator "
         "running it", "opencl-nv", _device_reason("opencl-nv"), None, _on_device("opencl-nv"),
         needs="an OpenCL device", device=True),
    Tool("spirv-val", "each SPIR-V module assembled and validated (--target-env vulkan1.3)",
         "spirv", _spirv_missing, "pip install 'sarek[spirv]'", _spirv_val),
    Tool("a Vulkan device", "each SPIR-V kernel run through Vulkan, against the simulator "
         "running it", "vulkan", _device_reason("vulkan"), None, _on_device("vulkan"),
         needs="spirv-val", device=True),
    Tool("clang", "each Metal text checked as C++ against a stand-in <metal_stdlib> (syntax "
         "and types: no Metal compiler exists off macOS)", "metal", _clang_missing,
         "install clang", _clang),
)
"""What checks the printed text here, when it is installed; in the order the demo shows them."""


def missing_tools(tools: Sequence[Tool] = TOOLS) -> dict[str, str]:
    """Per tool that cannot be used here, why, with what installs it where the reason does not
    say. A tool whose ``needs`` is missing is missing for the same reason."""
    missing: dict[str, str] = {}
    for tool in tools:
        if tool.needs in missing:
            missing[tool.name] = missing[tool.needs]
            continue
        try:
            reason = tool.missing()
        except Exception as e:  # a probe that crashes: the tool cannot be used
            reason = reason_of(e)
        if reason:
            said = tool.install is None or "install" in reason
            missing[tool.name] = reason if said else f"{reason}; {tool.install}"
    return missing


def skipped_lines(missing: Mapping[str, str]) -> list[str]:
    """One line per missing component: the tools it takes away, and why."""
    by_reason: dict[str, list[str]] = {}
    for name, reason in missing.items():
        by_reason.setdefault(reason, []).append(name)
    return [f"{' and '.join(names)}: {reason}" for reason, names in by_reason.items()]
