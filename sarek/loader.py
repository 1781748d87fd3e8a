"""Load kernels from Python files, as the command line names them (``FILE.py:KERNEL``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from sarek.dsl import KernelFunction
from sarek.errors import SarekError


def load_module(path: str | Path) -> ModuleType:
    """Imports the Python file at ``path`` as a module of its own (its kernels parse on import)."""
    p = Path(path)
    try:
        if not p.is_file():
            raise SarekError(f"no such file: {p}")
    except (OSError, ValueError) as e:  # a name the OS cannot look up (too long, a NUL byte)
        raise SarekError(f"cannot read {str(p)[:100]!r}: {e}") from None
    name = f"sarek_user_{p.stem}_{abs(hash(p.resolve()))}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, p)
    if spec is None or spec.loader is None:
        raise SarekError(f"{p} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SarekError:  # a kernel the DSL refused: its own reason, file and line
        del sys.modules[name]
        raise
    except SyntaxError as e:
        del sys.modules[name]
        raise SarekError(f"{p}:{e.lineno or 0}: not valid Python: {e.msg}") from None
    except Exception as e:  # the module's own code failed: say where, not sarek's traceback
        del sys.modules[name]
        raise SarekError(f"{p}: importing it raised {user_error(e)}") from None
    except BaseException:
        del sys.modules[name]
        raise
    return module


def user_error(e: BaseException) -> str:
    """``e``, raised by a user's module, in one line: its type, message and the innermost
    line of the user's own code it came from."""
    where = ""
    tb = e.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(name, str) and name.startswith("sarek_user_"):
            where = f" at {tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}"
        tb = tb.tb_next
    message = " ".join(str(e).split())
    if len(message) > 200:
        message = message[:197] + "..."
    return f"{type(e).__name__}{': ' + message if message else ''}{where}"


def load_kernel(spec: str) -> tuple[ModuleType, KernelFunction]:
    """The module and kernel that ``FILE.py:KERNEL`` names; with no ``:KERNEL`` the file must
    define exactly one kernel. ``FILE`` may also be a bundled example's name (``gemm_f32``,
    as ``sarek examples`` lists them) where no such file exists."""
    path, _, name = spec.partition(":")
    module = load_module(resolve(path))
    kernels = {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}
    if name:
        if name not in kernels:
            known = ", ".join(sorted(kernels)) or "none"
            raise SarekError(f"{path} defines no kernel {name!r} (kernels there: {known})")
        return module, kernels[name]
    if len(kernels) != 1:
        raise SarekError(f"{path} defines {len(kernels)} kernels; name one as {path}:KERNEL")
    return module, next(iter(kernels.values()))


def resolve(path: str) -> Path:
    """``path`` as given when it names a file; else the bundled example of that name
    (``gemm_f32`` or ``gemm_f32.py``) when there is one; else ``path`` as given, which
    ``load_module`` refuses naming it and the bundled examples."""
    given = Path(path)
    try:
        if given.is_file() or given.parent != Path() or given.name in ("", ".", ".."):
            return given
        bundled = examples_dir() / f"{given.name.removesuffix('.py')}.py"
        if bundled.is_file():
            return bundled
    except (OSError, ValueError, SarekError):  # a name the OS cannot look up: load_module says
        return given
    raise SarekError(f"no such file: {path} (nor a bundled example of that name; "
                     "sarek examples lists them)")


def bundled_examples() -> list[tuple[str, str, list[str]]]:
    """Each bundled example: its name (what ``FILE`` may be on the command line), the first
    sentence of its docstring and the kernels it defines."""
    out = []
    for path in sorted(examples_dir().glob("*.py")):
        module = load_module(path)
        paragraph = " ".join((module.__doc__ or "").strip().split("\n\n")[0].split())
        sentence = paragraph.split(". ")[0].removesuffix(".")
        kernels = sorted(k for k, v in vars(module).items() if isinstance(v, KernelFunction))
        out.append((path.stem, sentence, kernels))
    return out


MAKE_BYTES_PER_ELEMENT = 8
"""What a size check counts per element of the arrays an example's ``make(m, n, k)`` builds."""


def make_elements(m: int, n: int, k: int) -> int:
    """About how many elements an example's ``make(m, n, k)`` allocates: A, B and C of a
    batch, m*k + k*n + m*n."""
    return m * k + k * n + m * n


def examples_dir() -> Path:
    """The bundled examples: ``sarek/examples`` in an installed package (the wheel carries
    them there), else ``examples/`` beside the package in a source checkout."""
    package = Path(__file__).resolve().parent
    installed, checkout = package / "examples", package.parent / "examples"
    for here in (installed, checkout):
        if here.is_dir():
            return here
    raise SarekError(f"the bundled examples are in neither {installed} nor {checkout}; "
                     "pass --examples DIR")
