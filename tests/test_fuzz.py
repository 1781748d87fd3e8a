"""The fuzz tests, bounded for CI (about a minute in all on two cores): hostile inputs of every
kind ``fuzz_gen`` makes, each through every stage that takes it. An input passes when every
stage either ran or refused with the project's own error and a reason, and a rewritten kernel
wrote every covered output with the original's value and nothing else.
``tests/fuzz_campaign.py`` runs the long version (``bench/results/fuzz_campaign.json``).

A failure names the input's seed; ``python tests/fuzz_campaign.py --replay KIND SEED`` runs it
again."""

from __future__ import annotations

import random

import pytest
from fuzz_gen import CASES, Outcome, quiet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.slow

SEEDS = st.integers(0, 2**63)


def run(kind: str, seed: int) -> Outcome:
    with quiet():
        outcome = CASES[kind](random.Random(seed))
    assert not outcome.failed, (f"{outcome.kind} at {outcome.stage} (replay: "
                                f"python tests/fuzz_campaign.py --replay {kind} {seed}): "
                                f"{outcome.detail}")
    return outcome


def budget(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@budget(150)
@given(SEEDS)
def test_mutated_ir_json_is_parsed_or_refused_and_every_stage_runs_or_refuses(
        seed: int) -> None:
    run("json", seed)


@budget(1000)
@given(SEEDS)
def test_random_dsl_sources_build_a_kernel_or_raise_dsl_error(seed: int) -> None:
    run("dsl", seed)


@budget(400)
@given(SEEDS)
def test_random_launches_and_argument_lists_run_or_are_refused(seed: int) -> None:
    run("launch", seed)


@budget(400)
@given(SEEDS)
def test_bad_command_lines_are_one_line_on_stderr(seed: int) -> None:
    run("cli", seed)


@budget(100)
@given(SEEDS)
def test_mutated_gemm_kernels_are_refused_or_rewritten_exactly(seed: int) -> None:
    run("gemm", seed)


@budget(500)
@given(SEEDS)
def test_random_tile_layouts_build_and_transform_or_raise_layout_error(seed: int) -> None:
    run("layout", seed)


def test_the_mutated_gemms_reach_the_comparison_with_canaries() -> None:
    """The GEMM inputs are not all refused before the rewrite: most compare a rewritten
    kernel with the original (so that the test above checks something)."""
    compared = sum(run("gemm", seed).compared for seed in range(30))
    assert compared >= 10


def test_a_crash_is_reported_as_one() -> None:
    """The harness tells a crash from a refusal: an exception that is not the project's own,
    raised from inside sarek, fails the input."""
    import fuzz_gen

    from sarek import ir, ir_check

    def body(r: fuzz_gen._Run) -> None:
        r.call("check", ir_check.check, ir.Kernel(name="k", params=(), body=()))
        r.call("boom", lambda: ir.Kernel.param(ir.Kernel(name="k", params=(), body=()), "x"))

    outcome = fuzz_gen.run_case("probe", body)
    assert (outcome.kind, outcome.stage) == ("crash", "boom")
    assert outcome.detail.startswith("KeyError: 'x' [sarek/ir.py:")
