"""``sarek demo``: a few bundled GEMM examples taken through every stage, in well under a minute.

Each example is simulated and compared bit for bit with its NumPy reference, recognized,
rewritten onto matrix fragments, lowered and printed for every target and simulated as
printed under the target's arithmetic model, then handed to the compilers, validators and
devices installed here. A missing one is named once, with what installs it, and its checks are
skipped. Last come the device checks recorded in ``bench/results``, each difference with its
documented reason. The full matrix (every example, size, lowering, subgroup and fragment) is
``sarek conformance``'s.

Each example module (``examples/gemm_*.py``) defines one kernel, ``make(m, n, k, seed)``
returning a ``Launch`` and ``reference(launch)`` returning the expected arrays.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from sarek.demo_records import recorded_results, records
from sarek.errors import SarekError
from sarek.ir_format import format_expr
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import Lowering, scheme_for

if TYPE_CHECKING:
    from backends.pipeline import Compiled
    from sarek.ir import ElemType

FEATURED = ("gemm_epilogue", "gemm_f16", "gemm_i8", "gemm_i32")
"""The examples the demo takes through every stage: f32 operands (Bf16x3) with a fused
epilogue, f16 operands, int8 operands with an i32 accumulator and a bias, int32 operands (byte
planes)."""

SIZE = (70, 45, 33)
"""The demo's m x n x k: no extent a multiple of a tile."""

PRINTERS = ("cuda", "opencl-nv", "opencl", "spirv", "metal")
"""The targets every example is printed for (``vulkan`` prints what ``spirv`` prints)."""

MATRIX_OPERATION = {"cuda": "mma.sync.aligned", "opencl-nv": "mma.sync.aligned",
                    "spirv": "OpCooperativeMatrixMulAddKHR ",
                    "metal": "simdgroup_multiply_accumulate("}
"""What each printer's text multiplies fragments with (the portable OpenCL target emulates
fragments in local memory and has none)."""

SANITY = {Lowering.BF16X3_OPERANDS: 1e-5, Lowering.F16_OPERANDS: 4e-3,
          Lowering.BF16_OPERANDS: 3e-2}
"""Largest difference from the f32 original, relative to max|C|, that the demo accepts for f32
operands (the tests check the rigorous per-element bounds): a few units of each lowering's
operand rounding. Every other lowering must be bit-identical."""


def rounding(lowering: Lowering, operand: ElemType) -> str:
    """Why ``lowering`` of ``operand`` operands is not bit-identical to the original: how its
    scheme (``sarek.matrix_scheme``) carries each operand to the matrix unit."""
    scheme = scheme_for(lowering, operand)
    if len(scheme.terms) > 1:
        return f"each {operand} operand carried as {len(scheme.terms)} {scheme.operand} terms"
    return f"{operand} operands rounded to {scheme.operand}"


FULL_MATRIX = ("The demo shows a few examples at one size. Every example at every size under "
               "every lowering,\nsubgroup and fragment, in the simulator (--target opencl, cuda "
               "or vulkan: on the device):\n    sarek conformance --target sim-opencl")
"""The demo's last words: where the long matrices are."""

WIDTH = 100
"""Where the lines saying why are wrapped."""

COMMAND = re.compile(r"pip install '[^']*'")
"""A command the reader may copy: never wrapped."""

Refused = str
"""A target's reason for not rewriting an example."""


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


def compare_all(got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> str | None:
    """None when every array of ``want`` is bit-identical in ``got``, else how the first that
    is not differs."""
    for name, expected in want.items():
        same, how = compare(got[name], expected)
        if not same:
            return f"{name}: {how}"
    return None


@dataclass(frozen=True)
class Row:
    """One line of a table: ``why`` says why it is not bit-identical (printed under it),
    ``failure`` what failed (a difference no documented reason covers, or an error)."""

    cells: tuple[str, ...]
    why: tuple[str, ...] = ()
    failure: str | None = None


@dataclass(frozen=True)
class Example:
    """A bundled example's module and its launch at the demo's size."""

    path: Path
    module: ModuleType
    launch: Launch

    @property
    def name(self) -> str:
        """The example's module name (``gemm_f16``)."""
        return self.path.stem


def load(path: Path, size: tuple[int, int, int]) -> Example:
    """The example at ``path`` with its launch at ``size`` (m, n, k)."""
    module = load_module(path)
    return Example(path, module, module.make(*size))


def _reason(e: Exception) -> str:
    text = e.reason if isinstance(e, SarekError) else f"{type(e).__name__}: {e}"
    return text.splitlines()[0] if text else type(e).__name__


def wrap(text: str, first: str, rest: str) -> str:
    """``text`` wrapped at ``WIDTH``, its first line after ``first``, the others after
    ``rest``; a command stays on one line."""
    kept = COMMAND.sub(lambda m: m.group().replace(" ", "\xa0"), text)
    return textwrap.fill(kept, WIDTH, initial_indent=first, subsequent_indent=rest,
                         break_on_hyphens=False).replace("\xa0", " ")


def guarded(prefix: tuple[str, ...], width: int, make: Callable[[], Row]) -> Row:
    """``make()``'s row, or, when it raises, a row of ``width`` cells starting with ``prefix``
    that says what went wrong: a failure, not the end of the demo."""
    try:
        return make()
    except Exception as e:
        cells = (*prefix, "ERROR", *["-"] * (width - len(prefix) - 1))
        return Row(cells, (_reason(e),), f"{' '.join(prefix)}: {_reason(e)}")


# --------------------------------------------------------------------------- 1. against NumPy


def numpy_row(ex: Example) -> Row:
    """The example as written, simulated, against its NumPy reference."""
    launch = ex.launch
    start = time.perf_counter()
    out = launch.simulate()
    seconds = time.perf_counter() - start
    how = compare_all(out, ex.module.reference(launch))
    invocations = int(np.prod(launch.grid) * np.prod(launch.block))
    cells = (ex.name, launch.kernel.name, str(invocations), f"{seconds * 1e3:.1f} ms",
             "bit-identical" if how is None else f"DIFFERS ({how})")
    return Row(cells, failure=None if how is None else f"{ex.name} vs NumPy: {how}")


# --------------------------------------------------------------------------- 2. rewritten


def rewrite_row(ex: Example) -> Row:
    """The recognized nest, and its rewrite under the selected lowering (subgroup 32,
    fragment 16) simulated against the original."""
    from sarek.matrix_rewrite import rewrite_launch

    gemm = recognize(ex.launch.kernel)
    a, b, c = gemm.a, gemm.b, gemm.c
    rw = rewrite_launch(ex.launch)
    want = ex.launch.simulate()[c.array]
    got = rw.launch.simulate(subgroup=rw.subgroup)[c.array]
    head = (ex.name, f"{a.array} {a.elem} x {b.array} {b.elem} -> {c.array} {c.elem}",
            f"{c.array} = {format_expr(gemm.epilogue)}", str(rw.lowering))
    if compare(got, want)[0]:
        return Row((*head, "bit-identical"))
    wide_got, wide_want = got.astype(np.float64), want.astype(np.float64)
    relative = float(np.abs(wide_got - wide_want).max()) / (float(np.abs(wide_want).max())
                                                            or 1.0)
    bound = SANITY.get(rw.lowering)
    if bound is None or relative > bound:
        promise = "bit-identical" if bound is None else f"within {bound:.0e} of max|C|"
        return Row((*head, f"{relative:.1e} of max|C|: FAILS"),
                   (f"{rw.lowering} promises {promise}",),
                   f"{ex.name} rewritten under {rw.lowering}: {relative:.1e} of max|C| from "
                   f"the original, promised {promise}")
    return Row((*head, f"{relative:.1e} of max|C|"),
               (f"{rounding(rw.lowering, a.elem)}: within {bound:.0e} of max|C|, the bound the "
                "demo accepts (specs/matrix-pattern-rewrite.md gives the per-element bounds)",))


# --------------------------------------------------------------------------- 3. every target


def compile_for(ex: Example, name: str) -> Compiled | Refused:
    """The example compiled for target ``name`` (its own lowering, subgroup, fragment and
    staging), or the target's reason for refusing it."""
    from backends.pipeline import compile_launch
    from backends.registry import target

    try:
        return compile_launch(target(name), ex.launch)
    except SarekError as e:
        return e.reason


def target_row(ex: Example, name: str, compiled: Compiled | Refused) -> Row:
    """What target ``name`` prints of the rewrite, and the printed kernel simulated lane by
    lane under the target's model against the neutral rewrite under the same model."""
    from backends.registry import target

    if isinstance(compiled, str):
        return Row((ex.name, name, "refused", "-", "-", "-"), (compiled,))
    rw = compiled.rewritten
    if rw is None:
        raise SarekError(f"not rewritten: {compiled.not_rewritten}")
    text = compiled.text
    operation = MATRIX_OPERATION.get(name)
    ops = (f"{text.count(operation)} {operation.strip('( ')}" if operation else
           "fragments in local memory")
    arith = target(name).arith
    lowered = compiled.launch.simulate(target=name)
    neutral = compiled.launch.simulate(arith=arith, subgroup=rw.subgroup)
    how = compare_all(lowered, neutral)
    cells = (ex.name, name, f"{len(text.splitlines())} lines",
             f"{rw.lowering}, sg {rw.subgroup} frag {rw.frag}: {ops}", arith,
             "bit-identical" if how is None else f"DIFFERS ({how})")
    return Row(cells, failure=None if how is None else f"{ex.name} lowered for {name}: {how}")


# --------------------------------------------------------------------------- 4. real tools


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
        cells.append("refused" if refused else "-")
    return Row((ex.name, *cells), (*problems, *refused), problems[0] if problems else None)


def _nvrtc(ex: Example, compiled: Compiled | Refused | None) -> Row:
    from backends.cuda import NvrtcError, compile_cubin
    from backends.registry import emit

    def one(text: str, name: str) -> tuple[str, str | None]:
        try:
            return f"cubin {len(compile_cubin(text, 'sm_90', f'{name}.cu'))} bytes", None
        except NvrtcError as e:
            return "REJECTED", _reason(e)

    return _both(ex, compiled, emit(ex.launch.kernel, "cuda"), one)


def _spirv_val(ex: Example, compiled: Compiled | Refused | None) -> Row:
    from backends.registry import emit
    from backends.spirv import check

    def one(text: str, name: str) -> tuple[str, str | None]:
        try:
            check(text)
        except SarekError as e:
            return "INVALID", _reason(e)
        return "valid", None

    return _both(ex, compiled, emit(ex.launch.kernel, "spirv"), one)


def _metal_check(text: str, name: str) -> tuple[str, str | None]:
    """clang's verdict on Metal ``text`` (printed as ``name``.metal), and its first complaint."""
    from backends.metal import MetalCheckError, syntax_check

    try:
        syntax_check(text, f"{name}.metal")
    except MetalCheckError as e:
        return "REJECTED by clang", _reason(e)
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
                cells.append("-" if launch == "-" else "refused")
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
                problems.append(_reason(e))
                continue
            how = compare_all(got, launch.simulate(target=name))
            cells.append("bit-identical" if how is None else f"DIFFERS ({how})")
            if how:
                problems.append(f"not a documented difference: {how}")
        return Row((ex.name, *cells), (*problems, *refusals),
                   f"{ex.name} on {name}: {problems[0]}" if problems else None)

    return check


def _device_label(name: str) -> str:
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
            reason = _reason(e)
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


# --------------------------------------------------------------------------- running, printing


def render(head: tuple[str, ...], rows: Sequence[Row], indent: str = "") -> str:
    """A plain text table; a row's ``why`` lines are printed under it."""
    widths = [max(len(x) for x in col)
              for col in zip(head, *(r.cells for r in rows), strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return indent + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    lines = [line(head), line(tuple("-" * w for w in widths))]
    for r in rows:
        lines += [line(r.cells), *(wrap(why, f"{indent}    why: ", f"{indent}         ")
                                   for why in r.why)]
    return "\n".join(lines)


class Steps:
    """The demo's steps, shown on the terminal as a spinner, a bar and the step running, so
    that the screen is never silent while a step runs (rich, on stderr: the tables on stdout
    stay plain text; nothing is drawn when stderr is not a terminal)."""

    def __init__(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(stderr=True)
        self._bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                             transient=True, redirect_stdout=sys.stdout.isatty(),
                             redirect_stderr=False, disable=not console.is_terminal)
        self._task = self._bar.add_task("starting", total=total)
        self.done = -1

    def __call__(self, what: str) -> None:
        """Marks the step before done and shows ``what`` as the one running."""
        self.done += 1
        self._bar.update(self._task, completed=self.done, description=what)

    def add(self, count: int) -> None:
        """Counts ``count`` more steps to run."""
        total = self._bar.tasks[0].total or 0
        self._bar.update(self._task, total=total + count)

    @contextmanager
    def shown(self) -> Iterator[Steps]:
        with self._bar:
            yield self


def run_demo(examples: Path, names: Sequence[str] = FEATURED,
             size: tuple[int, int, int] = SIZE, out: Callable[[str], None] = print) -> int:
    """Takes the examples ``names`` of the folder ``examples`` through every stage at ``size``
    (m, n, k), printing what each stage found; returns 0 when every check passed or differs
    for a documented reason, else 1."""
    paths = [examples / f"{n}.py" for n in names]
    absent = [p.name for p in paths if not p.is_file()]
    if absent:
        raise SarekError(f"{examples} has no {', '.join(absent)}: name the examples to show "
                         "with --example NAME")
    failures: list[str] = []

    def section(text: str, rows: Sequence[Row] = (), head: tuple[str, ...] = ()) -> None:
        failures.extend(r.failure for r in rows if r.failure)
        out(text + (f"\n\n{render(head, rows, '   ')}" if rows else ""))

    m, n, k = size
    steps = Steps(2 + len(paths) * (2 + 2 * len(PRINTERS)))  # tools are added when found
    with steps.shown():
        steps("loading the examples")
        cases = [load(p, size) for p in paths]
        kernels = "kernel" if len(cases) == 1 else "kernels"
        out(f"sarek demo: {len(cases)} bundled GEMM {kernels} at m x n x k = {m}x{n}x{k}, taken "
            "through every stage.\n")
        rows = []
        for ex in cases:
            steps(f"{ex.name}: simulating, comparing with NumPy")
            rows.append(guarded((ex.name,), 5, partial(numpy_row, ex)))
        section("1. Simulated: each kernel as written, every invocation of its launch run by the "
                "simulator,\n   compared bit for bit with an independent NumPy computation:",
                rows, ("example", "kernel", "invocations", "sim time", "vs NumPy"))

        rows = []
        for ex in cases:
            steps(f"{ex.name}: recognizing and rewriting")
            rows.append(guarded((ex.name,), 5, partial(rewrite_row, ex)))
        section("\n2. Recognized and rewritten: the GEMM nest found in each kernel, rewritten "
                "onto matrix\n   fragments (64x64 tiles, four waves, subgroup 32, fragment 16) "
                "under the lowering selected\n   for its operands, simulated and compared with "
                "the original:",
                rows, ("example", "A x B -> C", "epilogue", "lowering", "rewritten vs original"))

        compiled: dict[tuple[str, str], Compiled | Refused | None] = {}
        rows = []
        for ex in cases:
            for name in PRINTERS:
                steps(f"{ex.name}: lowering and printing for {name}")
                try:
                    result = compile_for(ex, name)
                except Exception as e:
                    compiled[ex.name, name] = None
                    rows.append(Row((ex.name, name, "ERROR", "-", "-", "-"), (_reason(e),),
                                    f"{ex.name} printed for {name}: {_reason(e)}"))
                    continue
                compiled[ex.name, name] = result
                steps(f"{ex.name}: simulating what {name} prints")
                rows.append(guarded((ex.name, name), 6, partial(target_row, ex, name, result)))
        section("\n3. Printed for each target: the rewrite lowered lane by lane for the target "
                "(its own subgroup,\n   fragment and staging), printed, and run by the simulator "
                "as printed under the target's\n   arithmetic model, against the neutral rewrite "
                "under the same model (sarek emit FILE.py\n   --target T prints any of them):",
                rows, ("example", "target", "printed", "matrix operations", "model",
                       "lowered vs neutral"))

        steps("looking for compilers, validators and devices")
        missing = missing_tools()
        present = [t for t in TOOLS if t.name not in missing]
        steps.add(len(present) * len(cases))
        out("\n4. Checked by the compilers, validators and devices here:")
        for tool in present:
            rows = []
            for ex in cases:
                steps(f"{ex.name}: {tool.name}")
                rows.append(guarded((ex.name,), 3, partial(
                    tool.check, ex, compiled.get((ex.name, tool.target)))))
            device = _device_label(tool.target) if tool.device else ""
            title = f"{tool.name}{device}: {tool.about}:"
            section("\n" + wrap(title, "   ", "   "), rows,
                    ("example", "original", "rewritten"))
        if missing:
            out("\n   Not here, so not checked:\n" + "\n".join(
                wrap(line, "   - ", "     ") for line in skipped_lines(missing)))
        results = recorded_results(examples)

    if results is None:
        out("\n5. Conformance recorded on real devices: not part of an installed package "
            "(bench/results in a\n   source checkout).")
    else:
        section(f"\n5. Conformance recorded on real devices ({results.parent.name}/"
                f"{results.name}, not rerun here):",
                [Row((r.what, r.device, str(r.cases), r.result), r.why, r.failure)
                 for r in records(results)], ("check", "device", "cases", "result"))
    if failures:
        out(f"\nFAILED, {len(failures)} checks:\n" + "\n".join(f"  {f}" for f in failures))
    else:
        out("\nEvery check passed: each difference shown is a documented one.")
    out(FULL_MATRIX)
    return 1 if failures else 0


def main(args: argparse.Namespace) -> int:
    """``sarek demo`` (``--size``, ``--examples``, ``--example``)."""
    from sarek.loader import examples_dir

    examples = Path(args.examples) if args.examples else examples_dir()
    return run_demo(examples, args.example or FEATURED, args.size)
