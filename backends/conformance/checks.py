"""Running one conformance case: canaries in the output, the two sides it compares, the
verdict per array and the canary violations."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

import numpy as np

from backends.conformance.cases import Case, rewritten
from backends.target import Target
from sarek import ir, simulate
from sarek.demo_rows import compare
from sarek.errors import SarekError
from sarek.launch import Launch, Steps
from sarek.loader import load_module
from sarek.matrix_mapping import covered, region
from sarek.matrix_pattern import recognize

GUARD = 64  # canary elements appended to every array the kernel writes
CANARY = np.array([0x5A, 0xA5, 0xC3, 0x3C], np.uint8)  # finite in f16, bf16 and f32


@dataclass(frozen=True)
class Violation:
    """Elements of ``array`` that ``side`` changed although the launch must not write them."""

    side: str
    array: str
    count: int
    first: tuple[int, ...]  # the first few element indices


@dataclass(frozen=True)
class Outcome:
    """What one case gave: a verdict per array (``"bit-identical"`` or how they differ), the
    canary violations of each side that ran the kernel, or the error that stopped it."""

    case: Case
    kernel: str
    compared: str
    arrays: Mapping[str, str]
    violations: tuple[Violation, ...] = ()
    error: str | None = None
    seconds: float = 0.0

    @property
    def mismatches(self) -> int:
        return sum(v != "bit-identical" for v in self.arrays.values())

    @property
    def canary_violations(self) -> int:
        return sum(v.count for v in self.violations)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.mismatches and not self.violations


def canary(dtype: np.dtype[Any], count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` holding the canary byte pattern."""
    return np.resize(CANARY, count * dtype.itemsize).view(dtype)


@dataclass(frozen=True)
class Prepared:
    """A case ready to run: the launches with canaries in their output (the rewritten GEMM's,
    after the conversion pre-pass where it has one; the original's), and per array of the
    caller's the mask of the elements the launches may write."""

    steps: Steps
    writable: Mapping[str, np.ndarray]
    original: Launch  # the example's launch (no canaries), for its reference()
    module: ModuleType

    @property
    def launch(self) -> Launch:
        """The launch whose outputs the case compares (the last)."""
        return self.steps.last


def _prepare(case: Case, target: Target) -> Prepared:
    module = load_module(case.example)
    original: Launch = module.make(case.size.m, case.size.n, case.size.k)
    if case.size.grid is not None:
        original = replace(original, grid=case.size.grid)
    gemm = recognize(original.kernel)
    args = dict(original.args)
    out = np.asarray(args[gemm.c.array])
    cover = covered(gemm, region(gemm, original.grid, original.block, args), args)
    writable = np.zeros(out.size + GUARD, bool)
    writable[cover] = True
    guarded = np.concatenate([out.ravel(), canary(out.dtype, GUARD)])
    guarded[~writable] = canary(out.dtype, int((~writable).sum()))

    steps = Steps((original,))
    if case.lowering is not None:
        steps = rewritten(target, original, (case.lowering, case.subgroup or 32,
                                             case.frag or 16), case.schedule)
    steps = steps.with_args({gemm.c.array: guarded})
    temporary = {s.name for s in steps.scratch}
    last = steps.last
    masks = {p.name: (writable if p.name == gemm.c.array
                      else np.zeros(np.asarray(last.args[p.name]).size, bool))
             for p in last.kernel.params
             if isinstance(p, ir.ArrayParam) and p.name not in temporary}
    return Prepared(steps, masks, original, module)


def simulated(launch: Launch, target: str | None, arith: str) -> dict[str, np.ndarray]:
    """``launch`` in the simulator under the arithmetic model ``arith``: its kernel lowered for
    the target called ``target`` (what that target prints), or as given for None."""
    return simulate(launch.kernel, dict(launch.args), launch.grid, launch.block, target=target,
                    arith=arith)


def _expected(prep: Prepared) -> dict[str, np.ndarray]:
    """What the original kernel must leave: its inputs, with the covered outputs replaced by
    the example's NumPy reference."""
    want = {name: np.array(prep.launch.args[name], copy=True).ravel() for name in prep.writable}
    for name, ref in prep.module.reference(prep.original).items():
        cover = prep.writable[name]
        want[name][cover] = np.asarray(ref).ravel()[cover[:ref.size]]
    return want


def _bits(a: np.ndarray) -> np.ndarray:
    """Each element's bits as one unsigned integer, so that comparing them is bitwise."""
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _violations(side: str, got: Mapping[str, np.ndarray], prep: Prepared) -> list[Violation]:
    """The elements ``side`` changed that the launch must not write (a side that returned an
    array of another shape is a mismatch, reported by the comparison)."""
    found = []
    for name, may in prep.writable.items():
        before, after = np.asarray(prep.launch.args[name]).ravel(), np.asarray(got[name])
        if after.shape == before.shape:
            bad = np.flatnonzero((_bits(after) != _bits(before)) & ~may)
            if bad.size:
                found.append(Violation(side, name, int(bad.size),
                                       tuple(int(i) for i in bad[:8])))
    return found


@dataclass(frozen=True)
class Side:
    """One of the two results a case compares."""

    name: str
    arrays: dict[str, np.ndarray]
    ran: bool = True  # it ran the kernel, so its canaries are checked


def _sides(case: Case, prep: Prepared, target: Target, device: bool) -> tuple[Side, Side]:
    lowered = Side("lowered", prep.steps.run(
        lambda launch: simulated(launch, target.name, target.arith)))
    if device:
        assert target.run is not None  # the CLI's main() checked
        run = target.run
        got = prep.steps.run(lambda launch: run(launch.kernel, dict(launch.args), launch.grid,
                                                launch.block))
        return Side("device", got), replace(lowered, name="simulator")
    if case.lowering is None:
        return lowered, Side("NumPy reference", _expected(prep), ran=False)
    return lowered, Side("neutral", prep.steps.run(
        lambda launch: simulated(launch, None, target.arith)))


def check(case: Case, target: Target, device: bool) -> Outcome:
    """Runs one case: on the device against the simulator (``device``), else the lowered kernel
    against the neutral rewrite or, for an original, against the NumPy reference; both under
    the target's arithmetic model. An error anywhere is the case's verdict, never the end of
    the run."""
    start = time.perf_counter()
    kernel = case.example.stem
    try:
        prep = _prepare(case, target)
        kernel = prep.launch.kernel.name
        left, right = _sides(case, prep, target, device)
        arrays = {name: compare(left.arrays[name], right.arrays[name])[1]
                  for name in prep.writable}
        violations = [v for side in (left, right) if side.ran
                      for v in _violations(side.name, side.arrays, prep)]
    except Exception as e:  # a failing case is reported with the others, not raised
        reason = e.reason if isinstance(e, SarekError) else str(e)
        return Outcome(case, kernel, "", {}, (), f"{type(e).__name__}: {reason}",
                       time.perf_counter() - start)
    return Outcome(case, kernel, f"{left.name} vs {right.name}", arrays, tuple(violations),
                   None, time.perf_counter() - start)
