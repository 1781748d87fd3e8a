"""Launching a kernel from Python, numba's way: ``kernel[grid, block](*args)``.

``grid`` and ``block`` are the original kernel's. The call binds the arguments to the
kernel's parameters (checking each: a wrong type, size, layout or device is a ``LaunchError``
naming the parameter, raised before anything runs), compiles the launch for the target
(``backends.pipeline.compile_launch``: a recognized GEMM is rewritten onto the matrix unit,
anything else runs as written), memoizes that per kernel, launch shape and options, and runs it:

* ``cuda`` (the default where a CUDA device exists): ``backends.cuda.launch`` takes device
  arrays (``__cuda_array_interface__`` or ``__dlpack__``: CuPy, PyTorch, ...) in place on
  their stream, and copies NumPy arrays in and back;
* ``vulkan``, ``opencl``, ``opencl-nv``: NumPy arrays (and, for OpenCL, pyopencl arrays,
  whose contents are read before and written after), run by the target's runner and copied
  back into the caller's arrays;
* ``sim`` (``SAREK_TARGET=sim``): the same call in the simulator, running the kernel CUDA would
  run (lowered for CUDA, under its arithmetic model), written back into the NumPy arrays;
  ``sim-T`` does the same for target ``T``.

Options (``kernel.with_options(target=..., lowering=..., precision=..., schedule=...,
rewrite=False)``) default from the environment: ``SAREK_TARGET``.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import numpy as np

from sarek import ir
from sarek.dtypes import int_range, numpy_dtype
from sarek.errors import LaunchError, SarekError, user_facing
from sarek.launch import Dim3, Launch, dim3

if TYPE_CHECKING:
    from backends.cuda.launch import Ready
    from backends.pipeline import Compiled, Precision
    from sarek.matrix_scheme import Lowering
    from sarek.schedule import Schedule

@dataclass(frozen=True)
class Options:
    """How a kernel is launched; None means the default (``SAREK_TARGET``, else ``cuda``)."""

    target: str | None = None
    lowering: Lowering | None = None
    precision: Precision = "accurate"
    schedule: Schedule | Literal["autotune"] | None = None
    rewrite: bool = True

    def compile_options(self) -> dict[str, Any]:
        return {"lowering": self.lowering, "precision": self.precision,
                "schedule": self.schedule, "rewrite": self.rewrite}


def target_name(options: Options) -> str:
    """The target a launch runs on: the option, else ``$SAREK_TARGET``, else ``cuda``."""
    name = options.target or os.environ.get("SAREK_TARGET") or "cuda"
    if name not in _valid_targets():
        from backends import registry

        raise LaunchError(f"unknown target {name!r} (SAREK_TARGET or target=); the targets are "
                          f"{', '.join(registry.names())}, sim, and sim-T for a target T")
    return name


@cache
def _valid_targets() -> frozenset[str]:
    from backends import registry

    return frozenset((*registry.names(), "sim", *(f"sim-{n}" for n in registry.names())))


# --------------------------------------------------------------------------- the arguments


@dataclass(frozen=True)
class Slot:
    """What one parameter takes, worked out once per kernel: its dtype (and the dtype's
    ``typestr``, which a ``__cuda_array_interface__`` must match) and, for an integer scalar,
    its range."""

    param: ir.ArrayParam | ir.ScalarParam
    array: bool
    dtype: np.dtype[Any]
    typestr: str
    low: int | None
    high: int | None
    floating: bool  # a float scalar


def slots(kernel: ir.Kernel) -> tuple[Slot, ...]:
    """The kernel's parameters as ``Slot``s."""
    out = []
    for p in kernel.params:
        dt = numpy_dtype(p.elem)
        array = isinstance(p, ir.ArrayParam)
        low, high = int_range(p.elem) if p.elem.is_int and not array else (None, None)
        out.append(Slot(p, array, dt, dt.str, low, high, p.elem.is_float and not array))
    return tuple(out)


class Bound(NamedTuple):
    """One call's arguments checked against the kernel's parameters: the values in parameter
    order (a NumPy array as it is, a device array as a ``backends.cuda.launch.DeviceArray``, a
    scalar as a checked Python number), and what decides the compiled launch (scalar values
    and array sizes)."""

    values: list[Any]
    shape_key: tuple[Any, ...]
    device: bool  # some array lives on a GPU


def bind(kernel: ir.Kernel, args: Sequence[Any], plan: tuple[Slot, ...] | None = None
         ) -> Bound:
    """``args`` checked against ``kernel``'s parameters, in order. The common cases (a
    contiguous device array of the parameter's type, an int or float scalar in range) take
    the first branch of each test: this runs on every launch."""
    plan = plan if plan is not None else slots(kernel)
    if len(args) != len(plan):
        raise LaunchError(f"kernel {kernel.name!r} takes {len(plan)} arguments "
                          f"({', '.join(sl.param.name for sl in plan)}), got {len(args)}")
    values: list[Any] = []
    key: list[Any] = []
    device = False
    for sl, value in zip(plan, args):  # noqa: B905 (the lengths were just compared)
        kind = type(value)
        x: Any
        if sl.array:
            if kind is np.ndarray:
                x = host_array(sl.param.name, value, sl.dtype)
            else:
                cai = getattr(value, "__cuda_array_interface__", None)
                fast = _cuda_arrays()[1]
                if cai is not None and fast is not None and cai["typestr"] == sl.typestr \
                        and cai.get("strides") is None:  # contiguous, of the right type
                    x = fast(sl.param.name, cai["data"][0], math.prod(cai["shape"]), kind)
                else:
                    x = _device_view(sl, value, cai)
                device = True
            values.append(x)
            key.append(x.size)
        elif kind is int and sl.low is not None and sl.low <= value <= sl.high:
            values.append(value)
            key.append(value)
        elif (kind is float or kind is np.float32) and sl.floating:
            values.append(float(value))
            key.append(values[-1])
        else:
            x = scalar(sl, value)
            values.append(x)
            key.append(x)
    return Bound(values, tuple(key), device)


@cache
def _cuda_arrays() -> tuple[Any, Any]:
    """``backends.cuda.launch``'s ``device_array`` and, on a machine of one GPU, its
    ``fast_device_array`` (None elsewhere), imported on the first array that is not NumPy's."""
    from backends.cuda.launch import device_array, fast_device_array, one_gpu

    return device_array, fast_device_array if one_gpu() else None


def _device_view(sl: Slot, value: Any, cai: dict[str, Any] | None) -> Any:
    if cai is None and not hasattr(value, "__dlpack__"):
        raise LaunchError(f"argument {sl.param.name!r}: expected an array of {sl.param.elem} "
                          f"(NumPy, CuPy, PyTorch or any __cuda_array_interface__ / __dlpack__ "
                          f"object), got {type(value).__name__}")
    return _cuda_arrays()[0](sl.param.name, value, sl.dtype, sl.typestr, cai)


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


def scalar(sl: Slot, value: Any) -> int | float | bool:
    """A scalar argument checked for the parameter's type, as a Python number;
    ``LaunchError`` for a value of another kind or one the type cannot hold."""
    p = sl.param
    if sl.low is not None and sl.high is not None:
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
                raise LaunchError(f"argument {p.name!r} is an array; the parameter is a "
                                  f"{p.elem} scalar")
            raise LaunchError(f"argument {p.name!r} is {type(value).__name__} "
                              f"{str(value)[:40]}; the parameter is a {p.elem} integer")
        if not sl.low <= value <= sl.high:
            raise LaunchError(f"argument {p.name!r} = {value} does not fit {p.elem} "
                              f"({sl.low} to {sl.high})")
        return int(value)
    if isinstance(value, np.ndarray) or hasattr(value, "__cuda_array_interface__"):
        raise LaunchError(f"argument {p.name!r} is an array; the parameter is a {p.elem} scalar")
    if p.elem.is_float:
        if isinstance(value, bool) or not isinstance(value, int | float | np.integer
                                                     | np.floating):
            raise LaunchError(f"argument {p.name!r} is {type(value).__name__}; the parameter "
                              f"is a {p.elem} number")
        return float(value)
    return bool(value)


# --------------------------------------------------------------------------- compiling


def _stand_in(sl: Slot, value: Any) -> Any:
    """What the pipeline sees of an argument: a scalar as a NumPy scalar of the parameter's
    type, an array as a zero-cost view of its size and type (the region checks addresses
    against sizes only)."""
    if not sl.array:
        return sl.dtype.type(value)
    return np.broadcast_to(np.zeros((), sl.dtype), (value.size,))


@dataclass
class Memo:
    """A kernel's parameter slots, its compiled launches by (target, grid, block, shape key)
    and CUDA's launch records likewise (one ``Memo`` per set of options); ``repeat`` holds,
    per thread, the last CUDA launch (``backends.cuda.launch.Repeat``), which a call with the
    very same arguments launches again without binding them."""

    plan: tuple[Slot, ...] | None = None
    entries: dict[tuple[Any, ...], Compiled] = field(default_factory=dict)
    ready: dict[tuple[Any, ...], Ready] = field(default_factory=dict)  # CUDA's launch records
    lock: threading.Lock = field(default_factory=threading.Lock)
    repeat: threading.local = field(default_factory=threading.local)


def compiled(kernel: ir.Kernel, memo: Memo, target: str, grid: Dim3, block: Dim3,
             bound: Bound, options: Options) -> Compiled:
    """The launch compiled for ``target`` (memoized)."""
    k = (target, grid, block, bound.shape_key)
    found = memo.entries.get(k)
    if found is not None:
        return found
    from backends import registry
    from backends.pipeline import compile_launch

    plan = memo.plan or slots(kernel)
    base = "cuda" if target == "sim" else target.removeprefix("sim-")
    args = {sl.param.name: _stand_in(sl, v) for sl, v in zip(plan, bound.values, strict=True)}
    launch = Launch(kernel, args, grid, block)
    settings = options.compile_options()
    if options.schedule == "autotune":
        from backends.autotune import choose

        settings["schedule"] = choose(target, launch, typed(plan, bound), code_fingerprint(), **{
            **settings, "schedule": None})
    if target == "cuda":  # the device launching it: the H200's policy, or what it runs
        from backends.cuda.fit import current

        settings["refusal"] = current().refusal
    made = compile_launch(registry.target(base), launch, **settings)
    with memo.lock:
        memo.entries[k] = made
    return made


def cuda_ready(kernel: ir.Kernel, memo: Memo, grid: Dim3, block: Dim3, bound: Bound,
               options: Options) -> Ready:
    """The CUDA launch's ``Ready`` record: from the memo, else from the disk cache (a new
    process launching what an earlier one launched runs neither the recognizer nor the rewrite
    nor NVRTC), else from the whole pipeline."""
    k = ("cuda", grid, block, bound.shape_key)
    found = memo.ready.get(k)
    if found is not None:
        return found
    from backends.cuda.launch import ready_for
    from backends.cuda.run import device_arch
    from sarek.cache import key

    record = key("launch", code_fingerprint(), kernel.model_dump_json(), repr(grid),
                 repr(block), repr(bound.shape_key), repr(options), device_arch())
    made = ready_for(record, lambda: compiled(kernel, memo, "cuda", grid, block, bound,
                                              options))
    with memo.lock:
        memo.ready[k] = made
    return made


@cache
def code_fingerprint() -> str:
    """A digest of the name, size and modification time of every module of sarek, backends
    and sim: a launch record made by other code than this is never taken."""
    import hashlib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for package in ("sarek", "backends", "sim"):
        for path in sorted((root / package).rglob("*.py")):
            st = path.stat()
            h.update(f"{path.relative_to(root)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()


def typed(plan: tuple[Slot, ...], bound: Bound) -> list[Any]:
    """The caller's values in parameter order, scalars as NumPy scalars of their types."""
    return [v if sl.array else sl.dtype.type(v) for sl, v in zip(plan, bound.values,
                                                                 strict=True)]


# --------------------------------------------------------------------------- running


def launch(kernel: ir.Kernel, memo: Memo, grid: Any, block: Any, stream: Any,
           args: Sequence[Any], options: Options) -> None:
    """One launch (the module docstring)."""
    g = grid if _is_dim3(grid) else dim3(grid)
    b = block if _is_dim3(block) else dim3(block)
    target = target_name(options)
    if memo.plan is None:
        memo.plan = slots(kernel)
    opencl_arrays: dict[int, Any] = {}
    if target in ("opencl", "opencl-nv"):  # pyopencl arrays: their contents, copied back below
        opencl_arrays = {i: v for i, v in enumerate(args) if _is_pyopencl_array(v)}
        args = [v.get() if i in opencl_arrays else v for i, v in enumerate(args)]
    bound = bind(kernel, args, memo.plan)
    if target == "cuda":
        from backends.cuda.launch import ensure_driver, run_compiled

        ensure_driver()
        ready = cuda_ready(kernel, memo, g, b, bound, options)
        if all(ready.grid):  # an empty launch runs nothing and writes nothing
            memo.repeat.last = run_compiled(ready, bound.values, stream,
                                           (grid, block, tuple(args)))
        return
    if bound.device:
        raise LaunchError(f"the {target} target takes NumPy arrays; device arrays (CuPy, "
                          "PyTorch, ...) run on the cuda target")
    if stream is not None:
        raise LaunchError(f"a stream is a CUDA launch's; the {target} target runs synchronously")
    done = compiled(kernel, memo, target, g, b, bound, options)
    if not all(done.launch.grid):
        return
    values = typed(memo.plan, bound)
    names = [p.name for p in done.launch.kernel.params[:len(values)]]
    steps = done.steps.with_args(dict(zip(names, values, strict=True)))
    if target.startswith("sim"):
        base = "cuda" if target == "sim" else target.removeprefix("sim-")
        out = steps.simulate(target=base)
    else:
        from backends import registry

        runner = registry.target(target)
        reason = runner.device_reason()
        run = runner.run
        if reason is not None or run is None:
            raise SarekError(f"the {target} target cannot run here: {reason}")
        out = steps.run(lambda one: run(one.kernel, one.arg_list(), one.grid, one.block))
    _write_back(out, names, values)
    for i, array in opencl_arrays.items():
        array.set(values[i])


def _is_pyopencl_array(value: Any) -> bool:
    return type(value).__module__.startswith("pyopencl") and hasattr(value, "get") and hasattr(
        value, "set")


def _is_dim3(v: Any) -> bool:
    return (type(v) is tuple and len(v) == 3 and type(v[0]) is int and type(v[1]) is int
            and type(v[2]) is int and v[0] >= 0 and v[1] >= 0 and v[2] >= 0)


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

    @user_facing
    def __call__(self, *args: Any) -> None:
        f = self.function
        last = getattr(f.memo.repeat, "last", None)
        if last is not None and last.same(self.grid, self.block, self.stream, args) and (
                (f.options.target or os.environ.get("SAREK_TARGET") or "cuda") == "cuda"):
            last.launch()
            return
        launch(f.ir, f.memo, self.grid, self.block, self.stream, args, f.options)


def configure(function: Any, config: Any) -> Configured:
    """``kernel[config]``: ``(grid, block)`` or ``(grid, block, stream)``."""
    if not isinstance(config, tuple) or len(config) not in (2, 3):
        raise LaunchError("launch a kernel as kernel[grid, block](*args) or "
                          "kernel[grid, block, stream](*args)")
    grid, block, *rest = config
    return Configured(function, grid, block, rest[0] if rest else None)


def with_options(options: Options, **changes: Any) -> Options:
    """``options`` with ``changes`` (the names of ``Options``; a lowering and a schedule may be
    given by name, ``"F16_operands"``, ``"t128k64s2"``, and the schedule as ``"autotune"``:
    ``backends.autotune``); ``LaunchError`` for another name or a value the option does not
    take."""
    from sarek.matrix_scheme import Lowering
    from sarek.schedule import Schedule

    unknown = sorted(set(changes) - set(Options.__dataclass_fields__))
    if unknown:
        raise LaunchError(f"unknown launch option(s) {', '.join(unknown)}; the options are "
                          f"{', '.join(Options.__dataclass_fields__)}")
    lowering, schedule = changes.get("lowering"), changes.get("schedule")
    try:
        if isinstance(lowering, str):
            changes["lowering"] = Lowering(lowering)
        if isinstance(schedule, str) and schedule != "autotune":
            changes["schedule"] = Schedule.parse(schedule)
    except ValueError:
        raise LaunchError(f"lowering {lowering!r} is not one of "
                          f"{', '.join(x.value for x in Lowering)}") from None
    except SarekError as e:
        raise LaunchError(e.reason) from None
    checks = (("lowering", Lowering), ("schedule", Schedule), ("target", str))
    for name, kind in checks:
        value = changes.get(name)
        if value is not None and value != "autotune" and not isinstance(value, kind):
            raise LaunchError(f"option {name} takes a {kind.__name__}, not {value!r}")
    if changes.get("precision", "accurate") not in ("accurate", "fast"):
        raise LaunchError(f"precision is 'accurate' or 'fast', not {changes['precision']!r}")
    if not isinstance(changes.get("rewrite", True), bool):
        raise LaunchError(f"rewrite is True or False, not {changes['rewrite']!r}")
    return replace(options, **changes)
