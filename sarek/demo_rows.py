"""What ``sarek demo`` checks of one example, and how a row of its tables reads: the example
loaded at the demo's size, compared with its NumPy reference, rewritten and compared with the
original, compiled for each target and simulated as printed."""

from __future__ import annotations

import re
import textwrap
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from sarek.errors import SarekError
from sarek.ir_format import format_expr
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_scheme import Lowering, scheme_for

if TYPE_CHECKING:
    from backends.pipeline import Compiled
    from sarek.ir import ElemType


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


WIDTH = 100
"""Where the lines saying why are wrapped."""


COMMAND = re.compile(r"pip install '[^']*'")
"""A command the reader may copy: never wrapped."""


Refused = str
"""A target's reason for not rewriting an example."""


class AsWritten(str):
    """A target's reason for running an example as written (``Target.unselected``): a
    ``Refused`` that the tables label ``as written``."""


def refusal_cell(reason: Refused) -> str:
    """How a table labels a rewrite the target did not make."""
    return "as written" if isinstance(reason, AsWritten) else "refused"


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


def reason_of(e: Exception) -> str:
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
        return Row(cells, (reason_of(e),), f"{' '.join(prefix)}: {reason_of(e)}")


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


def compile_for(ex: Example, name: str) -> Compiled | Refused:
    """The example compiled for target ``name`` (its own lowering, subgroup, fragment and
    staging), or the target's reason for refusing it or for running it as written."""
    from backends.pipeline import compile_launch
    from backends.registry import target

    try:
        compiled = compile_launch(target(name), ex.launch)
    except SarekError as e:
        return e.reason
    if compiled.rewritten is None and compiled.not_rewritten is not None:
        return AsWritten(compiled.not_rewritten)
    return compiled


def target_row(ex: Example, name: str, compiled: Compiled | Refused) -> Row:
    """What target ``name`` prints of the rewrite, and the printed kernel simulated lane by
    lane under the target's model against the neutral rewrite under the same model."""
    from backends.registry import target

    if isinstance(compiled, str):
        return Row((ex.name, name, refusal_cell(compiled), "-", "-", "-"), (compiled,))
    rw = compiled.rewritten
    if rw is None:
        raise SarekError(f"not rewritten: {compiled.not_rewritten}")
    text = compiled.text
    operation = MATRIX_OPERATION.get(name)
    ops = (f"{text.count(operation)} {operation.strip('( ')}" if operation else
           "fragments in local memory")
    arith = target(name).arith
    lowered = compiled.steps.simulate(target=name)  # a conversion pre-pass first, if any
    neutral = compiled.steps.simulate(arith=arith, subgroup=rw.subgroup)
    how = compare_all(lowered, neutral)
    cells = (ex.name, name, f"{len(text.splitlines())} lines",
             f"{rw.lowering}, sg {rw.subgroup} frag {rw.frag}: {ops}", arith,
             "bit-identical" if how is None else f"DIFFERS ({how})")
    return Row(cells, failure=None if how is None else f"{ex.name} lowered for {name}: {how}")
