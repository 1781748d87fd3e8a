"""Launching a compiled kernel on CUDA with the caller's own arrays (``sarek.dispatch``).

* **Arrays.** An object with ``__cuda_array_interface__`` (CuPy, PyTorch, numba) is used in
  place: its pointer, checked for the parameter's dtype, C-contiguity and the launch's device.
  An object with only ``__dlpack__`` is viewed through ``cuda.core``'s ``StridedMemoryView``.
  A rewritten launch runs a device array that does not start 16-byte aligned (a view at an
  offset, ``x[1:]``) on an aligned copy of it, copied back after the launch (``staged``).
  A NumPy array is copied to the device before the launch and back after it (numba's
  behaviour), the launch then synchronizing its stream.
* **Streams.** The stream given (``kernel[grid, block, stream]``: an integer handle, a CuPy
  ``Stream`` (``.ptr``), a PyTorch stream (``.cuda_stream``) or any ``__cuda_stream__`` object),
  else the current stream of the framework whose arrays are passed (PyTorch's, CuPy's), else
  the legacy default stream.
* **Compile once.** The cubin of a printed kernel is cached under a key of the text, the
  architecture, NVRTC's version and the options (``sarek.cache``: in memory and on disk,
  across processes); the loaded module's function is kept per (cubin, device) for the
  process.
"""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Any

import numpy as np

from backends.cuda.run import _check, device_arch
from backends.cuda.tma import Request, encode, holder, requests
from sarek import cache as kernel_cache
from sarek.errors import LaunchError, SarekError

if TYPE_CHECKING:
    from backends.pipeline import Compiled, Step

CUBINS = kernel_cache.Cache("cuda")
"""Cubins by ``cubin_key``."""

_FUNCTIONS: dict[tuple[str, int], tuple[Any, int]] = {}  # (cubin key, device) -> (function, smem)
_LOADED: dict[tuple[int, int], tuple[Ready, Any, int]] = {}  # by id(record), device
_LOADING = threading.Lock()


@dataclass(frozen=True, slots=True)
class DeviceArray:
    """A caller's array on a GPU: its device pointer, element count, its device (None: the
    only one) and the framework it came from (for its current stream)."""

    name: str
    ptr: int
    size: int
    device: int | None
    framework: str


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...] | None, itemsize: int) -> bool:
    if strides is None:
        return True
    expected, step = [], itemsize
    for extent in reversed(shape):
        expected.append(step)
        step *= extent
    return all(s == e or n == 1 for s, e, n in zip(strides, reversed(expected), shape,
                                                   strict=True))


@cache
def _several_devices() -> bool:
    from cuda.bindings import driver as cu

    _check(cu.cuInit(0), "cuInit")
    return int(_check(cu.cuDeviceGetCount(), "cuDeviceGetCount")) > 1


@cache
def _framework(kind: Any) -> str:
    """The top-level package of an array type (``torch``, ``cupy``, ...)."""
    return str(kind.__module__).partition(".")[0]


def _device_of(value: Any, framework: str) -> int | None:
    """The GPU ``value`` lives on, where there are several (None where there is one)."""
    if not _several_devices():
        return None
    device = getattr(value, "device", None)
    index = getattr(device, "index" if framework == "torch" else "id", None)
    return int(index) if index is not None else None


def fast_device_array(name: str, ptr: int, size: int, kind: type) -> DeviceArray:
    """The common case of ``device_array`` on a machine with one GPU (``one_gpu``), its checks
    done by the caller: a contiguous array of the parameter's type."""
    return DeviceArray(name, ptr, size, None, _framework(kind))


def one_gpu() -> bool:
    """Whether the driver reports exactly one GPU (False where it cannot be asked)."""
    try:
        return not _several_devices()
    except Exception:  # no driver: the launch reports it
        return False


def device_array(name: str, value: Any, want: np.dtype[Any], typestr: str,
                 cai: dict[str, Any] | None = None) -> DeviceArray:
    """``value`` (whose ``__cuda_array_interface__`` is ``cai`` when the caller read it) as a
    ``DeviceArray`` for the parameter ``name`` holding ``want`` (whose ``typestr`` is given);
    ``LaunchError`` naming the parameter for another dtype, a non-contiguous layout or an
    object that describes no device memory."""
    if cai is None:
        cai = getattr(value, "__cuda_array_interface__", None)
    framework = _framework(type(value))  # type: ignore[arg-type]
    if cai is not None:
        shape = cai["shape"]
        if cai["typestr"] == typestr and cai.get("strides") is None:  # the common case
            return DeviceArray(name, cai["data"][0], math.prod(shape),
                               _device_of(value, framework), framework)
        dtype = np.dtype(cai["typestr"])
        ptr = int(cai["data"][0])
        strides = cai.get("strides")
        device = _device_of(value, framework)
    else:
        view = _dlpack_view(name, value)
        shape, dtype, ptr = tuple(view.shape), np.dtype(view.dtype), int(view.ptr)
        strides = None if view.strides is None else tuple(s * dtype.itemsize
                                                          for s in view.strides)
        device = int(view.device_id)
        if device < 0:
            raise LaunchError(f"argument {name!r} lives in host memory (DLPack); pass a NumPy "
                              "array or a GPU array")
    if dtype != want:
        raise LaunchError(f"argument {name!r} is an array of {dtype}; the kernel's parameter "
                          f"holds {want} (convert it before the launch)")
    if not _contiguous(tuple(shape), strides, dtype.itemsize):
        raise LaunchError(f"argument {name!r} is not contiguous; the kernel indexes it flat "
                          "(pass a contiguous copy)")
    return DeviceArray(name, ptr, math.prod(shape), device, framework)


def _dlpack_view(name: str, value: Any) -> Any:
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        try:
            from cuda.core.experimental.utils import StridedMemoryView
        except ImportError:
            raise LaunchError(f"argument {name!r} offers only __dlpack__, which sarek reads "
                              "through cuda-core (pip install cuda-core)") from None
    try:
        return StridedMemoryView(value, stream_ptr=-1)
    except Exception as e:  # the producer refuses: a CPU tensor, a dtype DLPack lacks ...
        raise LaunchError(f"argument {name!r} cannot be viewed through DLPack: {e}") from None


# --------------------------------------------------------------------------- the driver


@cache
def _driver_reason() -> str | None:
    from backends.cuda.run import driver_reason

    return driver_reason()


def ensure_driver() -> None:
    """``SarekError`` with what is missing (and how to get it) unless a CUDA device can run
    kernels here."""
    reason = _driver_reason()
    if reason is not None:
        raise SarekError(f"the cuda target cannot run here: {reason} (SAREK_TARGET=sim runs "
                         "the same launch in the simulator)")


@cache
def _context(device: int) -> Any:
    from cuda.bindings import driver as cu

    dev = _check(cu.cuDeviceGet(device), "cuDeviceGet")
    return _check(cu.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


@cache
def nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return f"{major}.{minor}"


def cubin_key(text: str, arch: str, options: tuple[str, ...] = ()) -> str:
    """The cache key of ``text`` compiled for ``arch`` by this NVRTC with ``options``."""
    return kernel_cache.key("cubin", text, arch, nvrtc_version(), *options)


def cubin(text: str, name: str, arch: str) -> tuple[str, bytes]:
    """The cubin of ``text`` for ``arch`` (compiled once, then from the cache) and its key."""
    k = cubin_key(text, arch)
    return k, CUBINS.get_or_make(k, lambda: _compile(text, name, arch))


def _compile(text: str, name: str, arch: str) -> bytes:
    """NVRTC's cubin (``SarekError`` with the reason where NVRTC cannot be loaded: a cached
    kernel launches without it)."""
    from backends.cuda.nvrtc import compile_cubin, nvrtc_available

    reason = nvrtc_available()
    if reason is not None:
        raise SarekError(f"the cuda target cannot compile {name}: {reason}")
    return compile_cubin(text, arch, f"{name}.cu")


@dataclass(frozen=True)
class Ready:
    """What a CUDA launch needs of a compiled one (``backends.pipeline.Compiled``), small and
    plain enough to keep on disk: the kernel's name, text and the key of its cubin (for the
    architecture it was made for), the rewritten (or original) grid and block, every
    parameter's element type, how many are the caller's, the region's values that follow them,
    and the dynamic shared memory. A sequence (a conversion pre-pass, then the GEMM) is the
    GEMM's record with the records of the launches before it (``before``) and its temporaries
    (``scratch``: element type and count of each), which are the last parameters of every
    kernel of the sequence. ``assumes_aligned`` (on that last record) says whether its kernels
    assume every array starts 16-byte aligned: those of a rewrite (``staged``)."""

    name: str
    text: str
    arch: str
    cubin_key: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    elems: tuple[str, ...]
    user_count: int
    region: tuple[int, ...]
    shared: int
    maps: tuple[Request, ...] = ()  # the tensor maps after the parameters (backends.cuda.tma)
    before: tuple[Ready, ...] = ()
    scratch: tuple[tuple[str, int], ...] = ()
    assumes_aligned: bool = False

    @classmethod
    def of(cls, done: Compiled, arch: str) -> Ready:
        user = len(done.original.kernel.params)
        *before, last = (cls.of_step(step, arch, user) for step in done.runs)
        return dataclasses.replace(last, before=tuple(before), scratch=tuple(
            (s.elem.value, s.size) for s in done.scratch),
            assumes_aligned=done.rewritten is not None)

    @classmethod
    def of_step(cls, step: Step, arch: str, user: int) -> Ready:
        """The record of one launch of a compiled sequence whose first ``user`` parameters
        are the caller's."""
        from backends.cuda.shared import dynamic_bytes
        from sarek import ir

        launch = step.launch
        params = launch.kernel.params
        return cls(step.lowered.name, step.text, arch, cubin_key(step.text, arch), launch.grid,
                   launch.block, tuple(p.elem.value for p in params), user,
                   tuple(int(launch.args[p.name]) for p in params[user:]
                         if isinstance(p, ir.ScalarParam)),
                   dynamic_bytes(step.lowered), requests(step.lowered, dict(launch.args)))

    def to_bytes(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Ready:
        return cls.from_dict(json.loads(raw))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Ready:
        return cls(**{**d, "grid": tuple(d["grid"]), "block": tuple(d["block"]),
                      "elems": tuple(d["elems"]), "region": tuple(d["region"]),
                      "maps": tuple(Request(**m) for m in d.get("maps", ())),
                      "before": tuple(cls.from_dict(b) for b in d.get("before", ())),
                      "scratch": tuple((str(e), int(n)) for e, n in d.get("scratch", ())),
                      # required: a record without it is of an older layout, made again
                      "assumes_aligned": bool(d["assumes_aligned"])})


READY = kernel_cache.Cache("cuda-launch")
"""``Ready`` records by the key ``dispatch`` derives from the kernel, the launch's shape, the
options, the architecture and the fingerprint of sarek's own code."""


def ready_for(key: str, compile_it: Callable[[], Compiled]) -> Ready:
    """The ``Ready`` record under ``key``, from the cache, else made from ``compile_it()`` (the
    whole pipeline) and stored. A record the cache cannot read back is made again."""
    raw = READY.get(key)
    if raw is not None:
        try:
            return Ready.from_bytes(raw)
        except (ValueError, TypeError, KeyError):
            pass  # an entry of another layout: made again below
    made = Ready.of(compile_it(), device_arch(0))
    READY.put(key, made.to_bytes())
    return made


def _function(done: Ready, device: int) -> tuple[Any, int]:
    """The kernel's function loaded on ``device`` and its dynamic shared memory in bytes
    (found by the record's identity first)."""
    known = _LOADED.get((id(done), device))
    if known is not None and known[0] is done:
        return known[1], known[2]
    function, shared = _load(done, device)
    _LOADED[(id(done), device)] = (done, function, shared)
    return function, shared


def _load(done: Ready, device: int) -> tuple[Any, int]:
    from cuda.bindings import driver as cu

    arch = device_arch(device)
    if arch == done.arch:  # the record's cubin, compiled once and kept
        k = done.cubin_key
        binary = CUBINS.get_or_make(k, lambda: _compile(done.text, done.name, arch))
    else:  # another GPU than the one the record was made on
        k, binary = cubin(done.text, done.name, arch)
    found = _FUNCTIONS.get((k, device))
    if found is not None:
        return found
    with _LOADING:
        if (k, device) not in _FUNCTIONS:
            _check(cu.cuCtxSetCurrent(_context(device)), "cuCtxSetCurrent")
            module = _check(cu.cuModuleLoadData(binary), "cuModuleLoadData")
            function = _check(cu.cuModuleGetFunction(module, done.name.encode()),
                              "cuModuleGetFunction")
            shared = done.shared
            if shared:
                _check(cu.cuFuncSetAttribute(
                    function,
                    cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    shared), "cuFuncSetAttribute")
            _FUNCTIONS[(k, device)] = (function, shared)
    return _FUNCTIONS[(k, device)]


def _stream_handle(stream: Any, values: list[Any], device: int) -> int:
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attribute in ("cuda_stream", "ptr", "handle"):
            handle = getattr(stream, attribute, None)
            if isinstance(handle, int):
                return handle
        if hasattr(stream, "__cuda_stream__"):
            return int(stream.__cuda_stream__()[1])
        raise LaunchError(f"a stream is an integer handle, a CuPy or PyTorch stream or a "
                          f"__cuda_stream__ object, not {type(stream).__name__}")
    for v in values:
        if type(v) is DeviceArray:
            if v.framework == "torch":
                import torch

                return int(torch.cuda.current_stream(device).cuda_stream)
            if v.framework == "cupy":
                import cupy

                return int(cupy.cuda.get_current_stream().ptr)
    return 0


class _Params:
    """One compiled launch's kernel-parameter block on one device, for one thread: every
    parameter in an 8-byte slot of ``block`` (the region's values written once), the array of
    the slots' addresses that ``cuLaunchKernel`` takes, and a typed view of each scalar's
    slot."""

    def __init__(self, done: Ready, device: int) -> None:
        from sarek.dtypes import numpy_dtype
        from sarek.ir import ElemType

        self.function, self.shared = _function(done, device)
        dtypes = [numpy_dtype(ElemType(e)) for e in done.elems]
        self.block = np.zeros(len(dtypes), np.uint64)
        base = self.block.ctypes.data
        self.maps = [holder() for _ in done.maps]  # encoded by each launch (run_compiled)
        self.addresses = np.array([base + 8 * i for i in range(len(dtypes))]
                                  + [m.ctypes.data for m in self.maps], np.uint64)
        self.views = [self.block[i:i + 1].view(np.uint8)[:dt.itemsize].view(dt)
                      for i, dt in enumerate(dtypes)]
        for i, value in enumerate(done.region, done.user_count):
            self.views[i][0] = value  # the region's values
        self.grid, self.dims = done.grid, done.block


_THREADS = threading.local()


def _params(done: Ready, device: int) -> _Params:
    table: dict[tuple[int, int], tuple[Ready, _Params]] | None = getattr(
        _THREADS, "params", None)
    if table is None:
        table = _THREADS.params = {}
    found = table.get((id(done), device))
    if found is not None and found[0] is done:
        return found[1]
    made = _Params(done, device)
    table[(id(done), device)] = (done, made)
    return made


@cache
def _driver() -> Any:
    from cuda.bindings import driver

    return driver


class Repeat:
    """A launch of device arrays that can be made again as it is: ``same`` tells whether a
    call has the very same grid, block, stream and argument objects (scalars equal and of the
    same type), which then bind to the same values, so that ``launch`` needs only the current
    stream. It holds the arguments (so their ids stay theirs) until the next launch of the
    kernel in this thread."""

    __slots__ = ("addresses", "args", "block", "device", "dims", "function", "grid",
                 "grid_dims", "shared", "stream", "stream_source")

    def __init__(self, call: tuple[Any, Any, tuple[Any, ...]], stream: Any, p: _Params,
                 values: list[Any], device: int) -> None:
        self.grid, self.block, self.args = call
        self.stream, self.device = stream, device
        self.function, self.shared = p.function, p.shared
        self.grid_dims, self.dims = p.grid, p.dims
        self.addresses = int(p.addresses.ctypes.data)
        self.stream_source = values  # a device array, whose framework's stream is current

    def same(self, grid: Any, block: Any, stream: Any, args: tuple[Any, ...]) -> bool:
        if grid != self.grid or block != self.block or stream is not self.stream or len(
                args) != len(self.args):
            return False
        for a, b in zip(args, self.args):  # noqa: B905 (the lengths were just compared)
            if a is not b and (type(a) is not type(b) or type(a) not in (int, float)
                               or a != b):
                return False
        return True

    def launch(self) -> None:
        (gx, gy, gz), (bx, by, bz) = self.grid_dims, self.dims
        handle = _stream_handle(self.stream, self.stream_source, self.device)
        _check(_driver().cuLaunchKernel(self.function, gx, gy, gz, bx, by, bz, self.shared,
                                        handle, self.addresses, 0), "cuLaunchKernel")


ALIGN = 16
"""Bytes a rewritten kernel assumes each array's address a multiple of (``cp.async``, tensor
maps)."""


def staged(values: list[Any], assumes_aligned: bool) -> list[int]:
    """The positions among a launch's ``values`` of the device arrays it runs on aligned
    temporaries: with ``assumes_aligned`` (a rewrite, whose ``cp.async`` copies and tensor maps
    check element indices only, taking arrays to be whole allocations), each ``DeviceArray``
    whose address is not a multiple of ``ALIGN``; otherwise none (a kernel run as written
    reads and writes element by element, at any address, and a copy would change what it does
    with overlapping views). NumPy arrays are copied to fresh allocations in any case."""
    if not assumes_aligned:
        return []
    return [i for i, v in enumerate(values) if type(v) is DeviceArray and v.ptr % ALIGN]


def run_compiled(done: Ready, values: list[Any], stream: Any,
                 call: tuple[Any, Any, tuple[Any, ...]] | None = None) -> Repeat | None:
    """Launches ``done`` with the caller's ``values`` (parameter order: NumPy arrays,
    ``DeviceArray``s and checked Python scalars); the region's values follow them. A sequence
    launches its kernels in order on the one stream, over temporaries of this device and
    stream (``_scratch``). A device array of ``staged`` is copied into an aligned temporary
    before the first kernel and back after the last, the stream then synchronized. With
    ``call`` (the caller's grid, block and arguments), a launch of device arrays alone (none
    staged) by one kernel returns the ``Repeat`` that launches it again."""
    cu = _driver()

    devices = {v.device for v in values if type(v) is DeviceArray and v.device is not None}
    if len(devices) > 1:
        raise LaunchError("the arrays live on different GPUs: " + ", ".join(
            f"{a.name} on {a.device}" for a in values if type(a) is DeviceArray))
    device = devices.pop() if devices else 0
    if getattr(_THREADS, "device", None) != device:
        _check(cu.cuCtxSetCurrent(_context(device)), "cuCtxSetCurrent")  # in this thread
        _THREADS.device = device
    records = (*done.before, done)
    handle = _stream_handle(stream, values, device)
    copies: list[tuple[Any, np.ndarray]] = []
    temporaries: list[tuple[int, int, int]] = []  # staged: (temporary, caller's, bytes)
    try:
        slots: list[Any] = []  # per caller's value: a pointer, or the scalar itself
        for v in values:
            if type(v) is DeviceArray:
                slots.append(v.ptr)
            elif type(v) is np.ndarray:
                ptr = _check(cu.cuMemAlloc(max(v.nbytes, 1)), "cuMemAlloc")
                copies.append((ptr, v))
                if v.nbytes:
                    _check(cu.cuMemcpyHtoDAsync(ptr, v.ctypes.data, v.nbytes, handle),
                           "cuMemcpyHtoDAsync")
                slots.append(int(ptr))
            else:
                slots.append(None)
        # A rewrite's cp.async copies and tensor maps take every array to start 16-byte
        # aligned; a view at an offset runs on an aligned copy of itself (``staged``).
        for i in staged(values, done.assumes_aligned):
            nbytes = values[i].size * _dtype(done.elems[i]).itemsize
            ptr = int(_check(cu.cuMemAlloc(max(nbytes, 1)), "cuMemAlloc"))
            temporaries.append((ptr, values[i].ptr, nbytes))
            if nbytes:
                _check(cu.cuMemcpyDtoDAsync(ptr, values[i].ptr, nbytes, handle),
                       "cuMemcpyDtoDAsync")
            slots[i] = ptr  # what the kernels and the tensor maps encoded below see
        scratch = _scratch(done.scratch, device, handle) if done.scratch else ()
        for record in records:
            p = _params(record, device)
            for i, (v, slot) in enumerate(zip(values, slots, strict=True)):
                if slot is None:
                    p.views[i][0] = v
                else:
                    p.block[i] = slot
            for i, ptr in enumerate(scratch, len(record.elems) - len(scratch)):
                p.block[i] = ptr
            for request, held in zip(record.maps, p.maps, strict=True):
                encode(request, int(p.block[request.param]), held)
            (gx, gy, gz), (bx, by, bz) = p.grid, p.dims
            if gx and gy and gz:
                _check(cu.cuLaunchKernel(p.function, gx, gy, gz, bx, by, bz, p.shared, handle,
                                         p.addresses.ctypes.data, 0), "cuLaunchKernel")
        for ptr, host in copies:
            if host.nbytes:
                _check(cu.cuMemcpyDtoHAsync(host.ctypes.data, ptr, host.nbytes, handle),
                       "cuMemcpyDtoHAsync")
        for ptr, caller, nbytes in temporaries:  # every one: the kernels may write any array
            if nbytes:
                _check(cu.cuMemcpyDtoDAsync(caller, ptr, nbytes, handle), "cuMemcpyDtoDAsync")
        if copies or temporaries:  # the device is done with them before they are freed
            _check(cu.cuStreamSynchronize(handle), "cuStreamSynchronize")
    finally:
        for ptr in [c for c, _ in copies] + [t for t, _, _ in temporaries]:
            cu.cuMemFree(ptr)
    if copies or temporaries or call is None or done.before:
        return None
    return Repeat(call, stream, p, [v for v in values if type(v) is DeviceArray][:1], device)


_SCRATCH: OrderedDict[tuple[int, int, tuple[tuple[str, int], ...]], tuple[int, ...]] = (
    OrderedDict())
_SCRATCH_LOCK = threading.Lock()
SCRATCH_KEPT = 4
"""Sets of temporaries kept allocated (the most recently used first)."""


def _scratch(layout: tuple[tuple[str, int], ...], device: int, stream: int) -> tuple[int, ...]:
    """Device pointers to temporaries of ``layout`` (element type and count of each) on
    ``device`` for launches on ``stream``: allocated on the first launch of that layout there
    and kept (launches on one stream run in order, so each finds them free), up to
    ``SCRATCH_KEPT`` sets; the oldest is freed after the device has finished with it."""
    from sarek.dtypes import numpy_dtype
    from sarek.ir import ElemType

    cu = _driver()
    key = (device, stream, layout)
    with _SCRATCH_LOCK:
        found = _SCRATCH.get(key)
        if found is not None:
            _SCRATCH.move_to_end(key)
            return found
        made = tuple(int(_check(cu.cuMemAlloc(max(
            count * numpy_dtype(ElemType(elem)).itemsize, 1)), "cuMemAlloc"))
            for elem, count in layout)
        _SCRATCH[key] = made
        while len(_SCRATCH) > SCRATCH_KEPT:
            _, old = _SCRATCH.popitem(last=False)
            _check(cu.cuCtxSynchronize(), "cuCtxSynchronize")
            for ptr in old:
                cu.cuMemFree(ptr)
        return made


def measure(done: Compiled, values: list[Any], repeats: int = 5
            ) -> tuple[float, dict[str, np.ndarray]]:
    """Median seconds of a launch of ``done`` (CUDA events, after a warm-up; every kernel of a
    sequence) and the caller's arrays one launch leaves, both on copies of ``values`` (device
    arrays copied to the host first): for ``schedule="autotune"``, which must not write the
    caller's arrays."""
    from backends.cuda.run import launch_steps, time_steps

    cu = _driver()
    params = done.launch.kernel.params
    host: dict[str, Any] = {}
    for p, v in zip(params, values, strict=False):
        if type(v) is DeviceArray:
            copy = np.empty(v.size, _dtype(p.elem.value))
            if copy.nbytes:
                _check(cu.cuMemcpyDtoH(copy.ctypes.data, v.ptr, copy.nbytes), "cuMemcpyDtoH")
            host[p.name] = copy
        else:
            host[p.name] = v
    user = list(host)
    steps = launchables(done, host)
    out = launch_steps(steps, host)
    times = time_steps(steps, host, repeats)
    arrays = {name: out[name] for name in user if name in out}
    return float(np.median(times)), arrays


def _dtype(elem: str) -> np.dtype[Any]:
    from sarek.dtypes import numpy_dtype
    from sarek.ir import ElemType

    return numpy_dtype(ElemType(elem))


def launchables(done: Compiled, host: dict[str, Any]) -> list[Any]:
    """``done``'s kernels in the order they run, as ``backends.cuda.run.Launchable``s (compiled
    for device 0, from the cache where they were compiled before), ``host`` given the region's
    values (i32) and the temporaries (host arrays) by name beside the caller's arrays."""
    from backends.cuda.run import Launchable

    record = Ready.of(done, device_arch(0))
    for s in done.scratch:
        host[s.name] = np.zeros(s.size, _dtype(s.elem.value))
    steps = []
    for r, step in zip((*record.before, record), done.runs, strict=True):
        names = tuple(p.name for p in step.launch.kernel.params)
        for name in names[r.user_count:r.user_count + len(r.region)]:
            host[name] = np.int32(step.launch.args[name])
        binary = CUBINS.get_or_make(r.cubin_key, partial(_compile, r.text, r.name, r.arch))
        steps.append(Launchable(binary, r.name, names, r.grid, r.block, r.shared, r.maps))
    return steps
