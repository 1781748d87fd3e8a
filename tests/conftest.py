"""Shared fixtures: the bundled examples, loaded once per session; the vulkan target as the
H200 gates it; the built wheel."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import backends.spirv.target as spirv_target
from sarek import memo
from sarek.loader import load_module

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
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


@pytest.fixture
def h200_vulkan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The vulkan target as the H200 gates it (its recorded support and subgroups of 32),
    whatever Vulkan device is here: lavapipe has no cooperative matrices and subgroups of 8.
    For tests of what the target does with the H200's support, in this process."""
    monkeypatch.setattr(spirv_target, "_live", lambda: False)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package built as a wheel (``pip wheel``), as a user would install it."""
    out = tmp_path_factory.mktemp("wheel")
    # without hatchling here, pip fetches the build backend as the install itself did
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation,
                           "-w", str(out), str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (built,) = out.glob("sarek-*.whl")
    return built
