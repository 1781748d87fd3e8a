"""Shared fixtures: the bundled examples, loaded once per session."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from sarek.loader import load_module

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GEMM_EXAMPLES = sorted(p.stem for p in EXAMPLES.glob("gemm_*.py"))


def example(name: str) -> ModuleType:
    """The example module ``examples/NAME.py``."""
    return load_module(EXAMPLES / f"{name}.py")


@pytest.fixture(params=GEMM_EXAMPLES)
def gemm_example(request: pytest.FixtureRequest) -> ModuleType:
    return example(request.param)
