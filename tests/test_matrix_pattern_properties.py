"""Properties of recognition: the description computes what the original kernel computes.

For random GEMM kernels (``gemm_gen``) the ``Gemm`` evaluated with NumPy over the ``Region``
equals the simulated original kernel bit for bit (int32, so sums wrap), and the elements the
original writes are exactly the covered ones. Mutated kernels are either recognized (and then
still described correctly) or refused with ``NotAGemm``, never a crash.
"""

from __future__ import annotations

import numpy as np
import oracle
import pytest
from gemm_gen import GemmSpec, build, build_source, gemm_specs, geometry, launch, source
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from sarek import matrix_mapping, matrix_pattern
from sarek.errors import DslError, SarekError
from sarek.matrix_pattern import NotAGemm

sim = pytest.importorskip("sim")

SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def changed_and_unchanged_writes(gemm, region, kernel, args, grid, block):  # type: ignore[no-untyped-def]
    """Simulates with two different contents of c. Returns the element indices that changed in
    either run, and those the description writes with the value they already had in both runs
    (a write no run can observe)."""
    changed = np.zeros(args["c"].size, dtype=bool)
    silent = np.ones(args["c"].size, dtype=bool)
    for fill in (0x5A5A5A5A, -0x2B2B2B2C):
        run = {**args, "c": np.full_like(args["c"], fill)}
        after = sim.simulate(kernel, run, grid=grid, block=block)["c"]
        changed |= after != run["c"]
        silent &= oracle.evaluate(gemm, region, run) == run["c"]
    return np.flatnonzero(changed), np.flatnonzero(silent)


@SETTINGS
@given(gemm_specs())
def test_description_equals_the_simulated_kernel_bit_for_bit(spec: GemmSpec) -> None:
    kernel = build(spec).ir
    grid, block = geometry(spec)
    args = launch(spec)
    gemm = matrix_pattern.recognize(kernel)
    region = matrix_mapping.region(gemm, grid, block, args)
    simulated = sim.simulate(kernel, args, grid=grid, block=block)["c"]
    assert np.array_equal(oracle.evaluate(gemm, region, args), simulated)


@SETTINGS
@given(gemm_specs())
def test_written_outputs_are_exactly_the_covered_ones(spec: GemmSpec) -> None:
    kernel = build(spec).ir
    grid, block = geometry(spec)
    args = launch(spec)
    gemm = matrix_pattern.recognize(kernel)
    region = matrix_mapping.region(gemm, grid, block, args)
    cover = matrix_mapping.covered(gemm, region, args)
    assert len(set(cover.tolist())) == len(cover) == region.outputs
    changed, silent = changed_and_unchanged_writes(gemm, region, kernel, args, grid, block)
    assert set(changed.tolist()) <= set(cover.tolist())
    assert set(cover.tolist()) - set(changed.tolist()) <= set(silent.tolist())


_MUTATIONS = (
    ("row", "col"), ("col", "row"), (" + ", " * "), (" * ", " + "), (" < ", " > "),
    ("range(0, k)", "range(0, k, 2)"), ("range(1, k)", "range(k)"), ("p]", "row]"),
    ("acc += ", "acc -= "), ("acc = acc + ", "acc = acc * "), ("block_idx.y", "thread_idx.y"),
    ("block_dim.x", "4"), ("tid // n", "tid // k"), ("tid % m", "tid % n"), (" and ", " or "),
    ("a[", "c["), ("b[", "a["), ("+ p", "+ p * p"), ("return", "pass"), ("max(", "min("),
    ("m * n", "m"), ("z = block_idx.z", "z = thread_idx.z"), ("k):", "row):"),
)


def _mutate(text: str, picks: list[tuple[int, int]]) -> str:
    lines = text.splitlines(True)
    for what, where in picks:
        if what < len(_MUTATIONS):
            old, new = _MUTATIONS[what]
            hits = [i for i, line in enumerate(lines) if old in line and i > 0]
            if hits:
                i = hits[where % len(hits)]
                lines[i] = lines[i].replace(old, new, 1)
        elif len(lines) > 2:
            i = 1 + where % (len(lines) - 1)
            if what % 2:
                del lines[i]
            else:
                lines.insert(i, lines[i])
    return "".join(lines)


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(gemm_specs(), st.lists(st.tuples(st.integers(0, len(_MUTATIONS) + 1),
                                        st.integers(0, 50)), min_size=1, max_size=3))
def test_mutated_kernels_are_recognized_correctly_or_refused(
        spec: GemmSpec, picks: list[tuple[int, int]]) -> None:
    text = _mutate(source(spec), picks)
    try:
        kernel = build_source(text).ir
    except (DslError, SyntaxError, IndentationError):
        assume(False)
        return
    try:
        gemm = matrix_pattern.recognize(kernel)
    except NotAGemm as e:
        assert e.reason
        event("refused")
        return
    event("recognized")
    grid, block = geometry(spec)
    args = launch(spec)
    try:
        region = matrix_mapping.region(gemm, grid, block, args)
        simulated = sim.simulate(kernel, args, grid=grid, block=block)["c"]
        expected = oracle.evaluate(gemm, region, args)
    except SarekError:
        event("recognized, but the launch faults")
        return  # the mutant faults (out of bounds) or its launch does not fit: nothing to compare
    assert np.array_equal(expected, simulated), text
