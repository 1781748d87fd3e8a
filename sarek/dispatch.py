"""Launching a kernel from Python, numba's way: ``kernel[grid, block](*args)``.

``grid`` and ``block`` are the original kernel's. The call binds the arguments to the
kernel's parameters (checking each: a wrong type, size, layout or device is a ``LaunchError``
naming the parameter, raised before anything runs), compiles the launch for the target
(``Target.compile``: a recognized GEMM is rewritten onto the matrix unit, anything else runs as
written), memoizes that per kernel, launch shape and options, and runs it:

* ``cuda`` (the default where a CUDA device exists): ``backends.cuda.launch`` takes device
  arrays (``__cuda_array_interface__`` or ``__dlpack__``: CuPy, PyTorch, ...) in place on
  their stream, and copies NumPy arrays in and back;
* ``vulkan``, ``opencl``, ``opencl-nv``: NumPy arrays, run by the target's runner and copied
  back into the caller's arrays;
* ``sim`` (``SAREK_TARGET=sim``): the same call in the simulator, running the kernel CUDA would
  run (lowered for CUDA, under its arithmetic model), written back into the NumPy arrays;
  ``sim-T`` does the same for target ``T``.

Options (``kernel.with_options(target=..., lowering=..., precision=..., schedule=...,
rewrite=False)``) default from the environment: ``SAREK_TARGET``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.errors import LaunchError, SarekError
from sarek.launch import Dim3, Launch, dim3

if TYPE_CHECKING:
    from backends.pipeline import Compiled, Precision
    from sarek.matrix_scheme import Lowering
    from sarek.schedule import Schedule

HOST_TARGETS = ("vulkan", "opencl", "opencl-nv")
"""Targets whose runners take NumPy arrays and give back every array."""


@dataclass(frozen=True)
class Options:
    """How a kernel is launched; None means the default (``SAREK_TARGET``, else ``cuda``)."""

    target: str | None = None
    lowering: Lowering | None = None
    precision: Precision = "accurate"
    schedule: Schedule | None = None
    rewrite: bool = True

    def compile_options(self) -> dict[str, Any]:
        return {"lowering": self.lowering, "precision": self.precision,
                "schedule": self.schedule, "rewrite": self.rewrite}


def target_name(options: Options) -> str:
    """The target a launch runs on: the option, else ``$SAREK_TARGET``, else ``cuda``."""
    from backends import registry

    name = options.target or os.environ.get("SAREK_TARGET") or "cuda"
    base = name.removeprefix("sim-") if name != "sim" else "cuda"
    if base not in registry.names():
        raise LaunchError(f"unknown target {name!r} (SAREK_TARGET or target=); the targets are "
                          f"{', '.join(registry.names())}, sim, and sim-T for a target T")
    return name


# --------------------------------------------------------------------------- the arguments


@dataclass(frozen=True)
class Bound:
    """One call's arguments checked against the kernel's parameters: the values by name (a
    device array as its ``backends.cuda.launch.DeviceArray``), and what decides the compiled
    launch (scalar values and array sizes)."""

    values: dict[str, Any]
    shape_key: tuple[Any, ...]
    device: bool  # some array lives on a GPU


def _device_view(param: ir.ArrayParam, value: Any) -> Any:
    from backends.cuda.launch import device_array

    return device_array(param.name, value, numpy_dtype(param.elem))


def bind(kernel: ir.Kernel, args: Sequence[Any]) -> Bound:
    """``args`` checked against ``kernel``'s parameters, in order."""
    params = kernel.params
    if len(args) != len(params):
        raise LaunchError(f"kernel {kernel.name!r} takes {len(params)} arguments "
                          f"({', '.join(p.name for p in params)}), got {len(args)}")
    values: dict[str, Any] = {}
    key: list[Any] = []
    device = False
    for p, value in zip(params, args, strict=True):
        want = numpy_dtype(p.elem)
        if isinstance(p, ir.ArrayParam):
            if isinstance(value, np.ndarray):
                values[p.name] = host_array(p.name, value, want)
            elif hasattr(value, "__cuda_array_interface__") or hasattr(value, "__dlpack__"):
                values[p.name] = _device_view(p, value)
                device = True
            else:
                raise LaunchError(f"argument {p.name!r}: expected an array of {p.elem} (NumPy, "
                                  f"CuPy, PyTorch or any __cuda_array_interface__ / __dlpack__ "
                                  f"object), got {type(value).__name__}")
            key.append(values[p.name].size)
        else:
            values[p.name] = scalar(p, value)
            key.append(values[p.name].item())
    return Bound(values, tuple(key), device)


def host_array(name: str, value: np.ndarray, want: np.dtype[Any]) -> np.ndarray:
    """A NumPy argument, checked: its dtype is the parameter's and it is C-contiguous (the
    kernel indexes it flat)."""
    if value.dtype != want:
        raise LaunchError(f"argument {name!r} is an array of {value.dtype}; the kernel's "
                          f"parameter holds {want} (convert it with .astype)")
    if not value.flags.c_contiguous:
        raise LaunchError(f"argument {name!r} is not contiguous; the kernel indexes it flat "
                          "(pass np.ascontiguousarray(...))")
    return value


def scalar(p: ir.ScalarParam | ir.ArrayParam, value: Any) -> np.generic:
    """A scalar argument as the parameter's type; ``LaunchError`` for a value of another kind
    or one the type cannot hold."""
    dt = numpy_dtype(p.elem)
    if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
        raise LaunchError(f"argument {p.name!r} is an array; the parameter is a {p.elem} scalar")
    if p.elem.is_int:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise LaunchError(f"argument {p.name!r} is {type(value).__name__} "
                              f"{str(value)[:40]}; the parameter is a {p.elem} integer")
        info = np.iinfo(dt)
        if not info.min <= int(value) <= info.max:
            raise LaunchError(f"argument {p.name!r} = {value} does not fit {p.elem} "
                              f"({info.min} to {info.max})")
        return dt.type(int(value))  # type: ignore[no-any-return]
    if p.elem.is_float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer
                                                     | np.floating):
            raise LaunchError(f"argument {p.name!r} is {type(value).__name__}; the parameter "
                              f"is a {p.elem} number")
        with np.errstate(over="ignore"):
            return dt.type(value)  # type: ignore[no-any-return]
    return dt.type(bool(value))  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- compiling


def _stand_in(value: Any) -> Any:
    """What the pipeline sees of an argument: a scalar as it is, an array as a zero-cost view
    of its size and type (the region checks addresses against sizes only)."""
    if isinstance(value, np.generic):
        return value
    return np.broadcast_to(np.zeros((), value.dtype), (value.size,))


@dataclass
class Memo:
    """A kernel's compiled launches, by (target, grid, block, shape key, options)."""

    entries: dict[tuple[Any, ...], Compiled] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


def compiled(kernel: ir.Kernel, memo: Memo, target: str, grid: Dim3, block: Dim3,
             bound: Bound, options: Options) -> Compiled:
    """The launch compiled for ``target`` (memoized)."""
    k = (target, grid, block, bound.shape_key, options)
    found = memo.entries.get(k)
    if found is not None:
        return found
    from backends import registry

    base = "cuda" if target == "sim" else target.removeprefix("sim-")
    launch = Launch(kernel, {n: _stand_in(v) for n, v in bound.values.items()}, grid, block)
    made = registry.target(base).compile(launch, **options.compile_options())
    with memo.lock:
        memo.entries[k] = made
    return made


def arguments(done: Compiled, bound: Bound) -> list[Any]:
    """The rewritten (or original) kernel's arguments in parameter order: the caller's, then
    the region's values."""
    user = list(bound.values.values())
    extra = [done.launch.args[p.name] for p in done.launch.kernel.params[len(user):]]
    return [*user, *extra]


# --------------------------------------------------------------------------- running


def launch(kernel: ir.Kernel, memo: Memo, grid: Any, block: Any, stream: Any,
           args: Sequence[Any], options: Options) -> None:
    """One launch (the module docstring)."""
    g, b = dim3(grid), dim3(block)
    target = target_name(options)
    bound = bind(kernel, args)
    if bound.device and target != "cuda":
        raise LaunchError(f"the {target} target takes NumPy arrays; device arrays (CuPy, "
                          "PyTorch, ...) run on the cuda target")
    if target == "cuda":
        from backends.cuda.launch import ensure_driver

        ensure_driver()
    done = compiled(kernel, memo, target, g, b, bound, options)
    values = arguments(done, bound)
    if not all(done.launch.grid):
        return  # an empty launch: nothing runs, nothing is written
    if target == "cuda":
        from backends.cuda.launch import run_compiled

        run_compiled(done, values, stream)
        return
    if stream is not None:
        raise LaunchError(f"a stream is a CUDA launch's; the {target} target runs synchronously")
    names = [p.name for p in done.launch.kernel.params]
    if target.startswith("sim"):
        base = "cuda" if target == "sim" else target.removeprefix("sim-")
        out = Launch(done.launch.kernel, dict(zip(names, values, strict=True)),
                     done.launch.grid, done.launch.block).simulate(target=base)
    else:
        from backends import registry

        runner = registry.target(target)
        reason = runner.device_reason()
        if reason is not None or runner.run is None:
            raise SarekError(f"the {target} target cannot run here: {reason}")
        out = runner.run(done.launch.kernel, values, done.launch.grid, done.launch.block)
    _write_back(out, names, values)


def _write_back(out: Mapping[str, np.ndarray], names: list[str], values: list[Any]) -> None:
    for name, value in zip(names, values, strict=True):
        if isinstance(value, np.ndarray) and name in out:
            np.copyto(value.reshape(-1), np.asarray(out[name]).reshape(-1))


class Configured:
    """``kernel[grid, block]`` or ``kernel[grid, block, stream]``: call it with the kernel's
    arguments to launch."""

    __slots__ = ("block", "function", "grid", "stream")

    def __init__(self, function: Any, grid: Any, block: Any, stream: Any) -> None:
        self.function, self.grid, self.block, self.stream = function, grid, block, stream

    def __call__(self, *args: Any) -> None:
        f = self.function
        launch(f.ir, f.memo, self.grid, self.block, self.stream, args, f.options)


def configure(function: Any, config: Any) -> Configured:
    """``kernel[config]``: ``(grid, block)`` or ``(grid, block, stream)``."""
    if not isinstance(config, tuple) or len(config) not in (2, 3):
        raise LaunchError("launch a kernel as kernel[grid, block](*args) or "
                          "kernel[grid, block, stream](*args)")
    grid, block, *rest = config
    return Configured(function, grid, block, rest[0] if rest else None)


def with_options(options: Options, **changes: Any) -> Options:
    """``options`` with ``changes`` (the names of ``Options``); ``LaunchError`` for another."""
    unknown = sorted(set(changes) - set(Options.__dataclass_fields__))
    if unknown:
        raise LaunchError(f"unknown launch option(s) {', '.join(unknown)}; the options are "
                          f"{', '.join(Options.__dataclass_fields__)}")
    return replace(options, **changes)
