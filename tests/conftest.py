"""Shared fixtures: the bundled examples, loaded once per session."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from sarek import memo
from sarek.loader import load_module

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GEMM_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("gemm_*.py"))


def example(name: str) -> ModuleType:
    """The example module ``examples/NAME.py``."""
    return load_module(EXAMPLES / f"{name}.py")


@pytest.fixture(params=GEMM_EXAMPLES)
def gemm_example(request: pytest.FixtureRequest) -> ModuleType:
    return example(request.param)


@pytest.fixture(autouse=True)
def fresh_memos() -> None:
    """Each test computes its own checks and lowerings (``sarek.memo``): one that plants a
    fault in a lowering must not be handed another test's result for the same kernel."""
    memo.forget_all()
