"""The strongest check of Metal text that Linux allows: clang parses it as C++14 against a
stand-in ``<metal_stdlib>`` (``standin/metal_stdlib``) that declares exactly the Metal types,
attributes and functions the printer uses.

This is a syntax and type check, not Apple's compiler: it finds misspelt or undeclared names,
calls with the wrong number or types of arguments (a half matrix loaded from a float array, a
float stored into a half without a conversion, operands of two component types), a store
through a ``constant`` or read-only buffer. It cannot see address-space errors, Metal's own
restrictions beyond C++, whether the pragmas are honoured, or anything about execution.

clang comes from Debian's ``clang`` package (``make test`` installs it when run as root).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sarek.errors import SarekError

STANDIN = Path(__file__).resolve().parent / "standin"
"""The folder holding the stand-in ``metal_stdlib``."""

FLAGS = ("-x", "c++", "-std=c++14", "-fsyntax-only", "-nostdinc", "-nostdinc++",
         "-D__METAL_VERSION__=310", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
         "-Wno-unused-variable", "-Wno-unused-but-set-variable", "-ferror-limit=20")
"""How clang reads the text: C++14 (MSL's base language), no system headers, every warning
an error except those about names the kernel declares and does not use. ``__METAL_VERSION__``
is 310 (MSL 3.1, which ``bfloat`` needs), so the 3.2 pragmas are skipped as an older
compiler would skip them."""

_CANDIDATES = ("clang", *(f"clang-{v}" for v in range(22, 13, -1)))


class MetalCheckError(SarekError):
    """clang rejected a Metal text; ``reason`` holds its diagnostics."""


def clang() -> str | None:
    """The clang executable to check with: ``$SAREK_CLANG`` when set, else the first of
    ``clang``, ``clang-22`` ... ``clang-14`` on the PATH; None when there is none."""
    chosen = os.environ.get("SAREK_CLANG")
    if chosen:
        return shutil.which(chosen)
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def clang_unavailable() -> str | None:
    """Why Metal text cannot be checked here (one line), or None when it can."""
    if clang() is None:
        return ("no clang on the PATH (install Debian's 'clang' package: make test does so "
                "when run as root)")
    if not (STANDIN / "metal_stdlib").is_file():
        return f"the stand-in header {STANDIN / 'metal_stdlib'} is missing"
    return None


def syntax_check(source: str, name: str = "kernel.metal") -> None:
    """Parses ``source`` with clang as C++ against the stand-in header; raises
    ``MetalCheckError`` with clang's diagnostics (naming the text ``name``) when it is
    rejected, or when no clang can be found."""
    missing = clang_unavailable()
    if missing:
        raise MetalCheckError(f"cannot check {name}: {missing}")
    exe = clang()
    assert exe is not None
    try:
        done = subprocess.run([exe, *FLAGS, "-I", str(STANDIN), "-"], input=source,
                              capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MetalCheckError(f"cannot check {name}: running {exe} failed ({e})") from None
    if done.returncode != 0:
        log = done.stderr.replace("<stdin>", name).strip()
        raise MetalCheckError(f"clang rejected {name}:\n{log}")
