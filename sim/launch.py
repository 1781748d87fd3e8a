"""A launch as the simulator sees it: checked arguments and the geometry of every invocation.

Invocation ``i`` of a launch is thread ``i % block_size`` of block ``i // block_size``; threads
and blocks are numbered with x fastest, then y, then z (``linear = x + bx*(y + by*z)``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from sarek import dtypes, ir
from sarek.errors import LaunchError, LimitError
from sarek.ir import Builtin, ElemType
from sarek.ir_walk import walk
from sim import arith
from sim.arith import Value

MAX_BLOCK = 1024
"""The most invocations a block may have (CUDA's limit)."""

MAX_DIM = (1 << 31) - 1
"""The largest grid or block dimension: the launch builtins are i32."""

PER_INVOCATION_BYTES = 256
"""What the memory estimate counts per invocation for the values a kernel computes (each an
array of one element per invocation: coordinates, masks, temporaries)."""


@dataclass(frozen=True)
class Limits:
    """The most a simulated launch may use (``specs/simulator.md``, "Limits"). A launch past
    one is refused with a ``LimitError`` naming the field, before anything is allocated for
    the sizes and while it runs for the loops; raise a limit by passing
    ``limits=sim.launch.Limits(memory=16 << 30)`` (``sarek.simulate`` and ``Launch.simulate``
    take it too; the CLI has ``--max-invocations``, ``--max-memory``, ``--max-loop-trips``
    and ``--max-trips``).

    ``invocations``: blocks times invocations per block. ``memory``: bytes the launch's copies
    of the arrays, its shared, local and fragment storage and its per-invocation values are
    estimated to take. ``loop_trips``: the trips one execution of one ``for`` or ``while``
    loop may run (None: ``sim.exec_control.MAX_WHILE_TRIPS``, 2^20). ``trips``: the trips all the
    loops of the launch may run together (each trip of a loop runs every active invocation
    at once and counts once)."""

    invocations: int = 1 << 24
    memory: int = 4 << 30
    loop_trips: int | None = None
    trips: int = 1 << 24

    def __post_init__(self) -> None:
        for name in ("invocations", "memory", "loop_trips", "trips"):
            v = getattr(self, name)
            if v is None and name == "loop_trips":
                continue
            if not isinstance(v, int | np.integer) or isinstance(v, bool) or v < 1:
                raise LaunchError(f"Limits.{name} must be a positive integer, got {v!r}")


def _raise_hint(field_name: str, flag: str) -> str:
    return (f"raise it with simulate(..., limits=sim.launch.Limits({field_name}=...)) or the "
            f"CLI's {flag}")


def size_text(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps a digit before the point."""
    value, unit = float(n), "bytes"
    for u in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, u
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"

Dim3 = tuple[int, int, int]
Invocation = tuple[Dim3, Dim3]


def dims(what: str, value: object) -> Dim3:
    """A grid or block given as an int or 1 to 3 non-negative ints, padded with 1."""
    items = (value,) if isinstance(value, int | np.integer) else value
    if not isinstance(items, Sequence) or isinstance(items, str | bytes) or not (
        1 <= len(items) <= 3) or not all(
        isinstance(d, int | np.integer) and not isinstance(d, bool | np.bool_) and d >= 0
        for d in items
    ):
        raise LaunchError(f"{what} must be 1 to 3 non-negative integers, got {_short(value)}")
    x, y, z = (*(int(d) for d in items), 1, 1)[:3]
    if max(x, y, z) > MAX_DIM:
        raise LaunchError(f"{what} {(x, y, z)} has a dimension above {MAX_DIM} (the launch "
                          "builtins are i32)")
    return x, y, z


def _short(value: object) -> str:
    """``repr(value)`` cut to a readable length (an argument may be a huge list)."""
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or an int too long to print
        text = f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass
class Geometry:
    """Grid, block and subgroup size of a launch, and the coordinates of its invocations."""

    grid: Dim3
    block: Dim3
    subgroup: int
    _builtins: dict[Builtin, Value] = field(default_factory=dict, compare=False, repr=False)

    @property
    def block_size(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def num_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def invocations(self) -> int:
        return self.num_blocks * self.block_size

    @cached_property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """The axes of a value over the launch (``sim.state``): grid z, y, x, then block z, y,
        x; their C order is the invocation order."""
        (gx, gy, gz), (bx, by, bz) = self.grid, self.block
        return gz, gy, gx, bz, by, bx

    @cached_property
    def thread_linear(self) -> np.ndarray:
        """The linear thread index within its block, over the block axes of ``shape``."""
        bx, by, bz = self.block
        return np.arange(self.block_size, dtype=np.int64).reshape(1, 1, 1, bz, by, bx)

    @cached_property
    def block_linear(self) -> np.ndarray:
        """The linear block index, over the grid axes of ``shape``."""
        gx, gy, gz = self.grid
        return np.arange(self.num_blocks, dtype=np.int64).reshape(gz, gy, gx, 1, 1, 1)

    @cached_property
    def lane_thread(self) -> np.ndarray:
        """The linear thread index within its block of every invocation (int64)."""
        return np.tile(np.arange(self.block_size, dtype=np.int64), self.num_blocks)

    @cached_property
    def lane_block(self) -> np.ndarray:
        """The linear block index of every invocation (int64)."""
        return np.repeat(np.arange(self.num_blocks, dtype=np.int64), self.block_size)

    def builtin(self, which: Builtin) -> Value:
        """The value of a builtin: an i32 scalar when every invocation has the same one."""
        if which not in self._builtins:
            self._builtins[which] = self._compute(which)
        return self._builtins[which]

    def _compute(self, which: Builtin) -> Value:
        """The builtin over the axes it depends on (``shape``), or a scalar."""
        name = which.value.split(".")[0]
        sizes = {"block_dim": self.block, "grid_dim": self.grid}
        if name in sizes:
            return np.int32(sizes[name]["xyz".index(which.value[-1])])
        if which is Builtin.SUBGROUP_SIZE:
            return np.int32(self.subgroup)
        if which is Builtin.SUBGROUP_ID:
            if self.block_size <= self.subgroup:
                return np.int32(0)
            return (self.thread_linear // self.subgroup).astype(np.int32)
        if which is Builtin.SUBGROUP_LANE:
            if self.block_size == 1:
                return np.int32(0)
            return (self.thread_linear % self.subgroup).astype(np.int32)
        axis = "xyz".index(which.value[-1])
        extent = (self.block if name == "thread_idx" else self.grid)[axis]
        if extent == 1:
            return np.int32(0)
        where = [1] * 6
        where[(5 if name == "thread_idx" else 2) - axis] = extent
        return np.arange(extent, dtype=np.int32).reshape(where)

    def invocation(self, lane: int) -> Invocation:
        """The ``((block x, y, z), (thread x, y, z))`` of invocation ``lane``."""
        b, t = divmod(int(lane), self.block_size)
        return self.block_of(b), self.thread(t)

    def thread(self, linear: int) -> Dim3:
        """The thread coordinates of a linear thread index within a block."""
        return _unravel(linear, self.block)

    def block_of(self, linear: int) -> Dim3:
        """The block coordinates of a linear block index."""
        return _unravel(linear, self.grid)

    def describe(self, lanes: np.ndarray, limit: int = 8) -> tuple[Invocation, ...]:
        """The first ``limit`` of the invocations ``lanes`` (indices) as block and thread
        triples."""
        return tuple(self.invocation(i) for i in lanes[:limit])


def _unravel(i: int, extent: Dim3) -> Dim3:
    x, rest = i % extent[0], i // extent[0]
    return x, rest % extent[1], rest // extent[1]


def geometry(grid: object, block: object, subgroup: object) -> Geometry:
    """Checks a launch's geometry: a block needs 1 to ``MAX_BLOCK`` invocations; a grid may have
    a zero dimension (an empty launch)."""
    g, b = dims("grid", grid), dims("block", block)
    if 0 in b:
        raise LaunchError(f"block {b} has a zero dimension")
    if b[0] * b[1] * b[2] > MAX_BLOCK:
        raise LaunchError(f"block {b} has {b[0] * b[1] * b[2]} invocations, more than "
                          f"{MAX_BLOCK}")
    if not isinstance(subgroup, int | np.integer) or isinstance(subgroup, bool) or not (
            1 <= subgroup <= MAX_BLOCK):
        raise LaunchError(f"subgroup must be an integer from 1 to {MAX_BLOCK}, got "
                          f"{_short(subgroup)}")
    return Geometry(g, b, int(subgroup))


def check_size(kernel: ir.Kernel, geo: Geometry, values: Sequence[object],
               limits: Limits) -> None:
    """Refuses, before anything is allocated, a launch of more invocations than
    ``limits.invocations`` or whose estimated memory exceeds ``limits.memory``. The estimate
    counts the copies of the array arguments (``values``, in parameter order), every shared,
    local and fragment declaration once (a declaration in a loop replaces its storage), the
    race detector's records of shared arrays (and of copies in flight, for a kernel with
    ``CpAsync``) and ``PER_INVOCATION_BYTES`` per invocation."""
    n = geo.invocations
    if n > limits.invocations:
        raise LimitError(f"the launch has {n} invocations ({geo.num_blocks} blocks of "
                         f"{geo.block_size}), more than the simulator's limit of "
                         f"{limits.invocations}; " + _raise_hint("invocations",
                                                                  "--max-invocations"),
                         "invocations")
    parts: list[tuple[int, str]] = [(n * PER_INVOCATION_BYTES, "values per invocation")]
    for p, v in zip(kernel.params, values, strict=True):
        if isinstance(p, ir.ArrayParam) and isinstance(v, np.ndarray):
            parts.append((v.nbytes, f"the copy of {p.name!r}"))
    shared = False
    decls = {s.name: s for s in walk(kernel.body) if isinstance(s, ir.ArrayDecl)}
    for s in walk(kernel.body):
        match s:
            case ir.ArrayDecl(name=name, elem=elem, size=size, space=space):
                item = dtypes.numpy_dtype(elem).itemsize
                if space is ir.MemSpace.SHARED and s.shares in decls:
                    # no data of its own; records over the other's bytes, in its elements
                    host = decls[s.shares]
                    pitch = host.size * dtypes.numpy_dtype(host.elem).itemsize // item
                    parts.append((geo.num_blocks * pitch * 12,
                                  f"the race records of shared array {name!r}"))
                elif space is ir.MemSpace.SHARED:
                    shared = True
                    # data, and three i32 records of the race detector per element
                    parts.append((geo.num_blocks * size * (item + 12),
                                  f"shared array {name!r} ({size} elements per block)"))
                else:
                    parts.append((n * size * item,
                                  f"local array {name!r} ({size} elements per invocation)"))
            case ir.FragDecl(name=name, rows=rows, cols=cols, elem=elem):
                # the fragment and the float64 operands of its multiply
                groups = -(-n // geo.subgroup)
                parts.append((groups * rows * cols * (dtypes.numpy_dtype(elem).itemsize + 16),
                              f"fragment {name!r} ({rows}x{cols} per subgroup)"))
    if shared:
        parts.append((SHARED_LOG_ELEMENTS * 12, "the race detector's log of shared reads"))
    if any(isinstance(s, ir.CpAsync) for s in walk(kernel.body)):
        # two i32 records per shared element of copies in flight (``sim.memory``)
        parts.append((8 * geo.num_blocks * sum(s.size for s in walk(kernel.body)
                                               if isinstance(s, ir.ArrayDecl)
                                               and s.space is ir.MemSpace.SHARED),
                      "the records of copies in flight"))
    total = sum(b for b, _ in parts)
    if total > limits.memory:
        largest = sorted(parts, key=lambda x: -x[0])[:3]
        shown = "; ".join(f"{what}: {size_text(b)}" for b, what in largest)
        raise LimitError(f"the launch would need about {size_text(total)} ({shown}), more than "
                         f"the simulator's memory limit of {size_text(limits.memory)}; "
                         + _raise_hint("memory", "--max-memory"), "memory")


SHARED_LOG_ELEMENTS = 1 << 24
"""Logged shared reads (an int64 element and an i32 thread each) before ``sim.memory`` folds
them into its records."""


# --------------------------------------------------------------------------- arguments


def bind(kernel: ir.Kernel, args: Sequence[object] | Mapping[str, object]
         ) -> tuple[dict[str, np.ndarray], dict[str, np.generic]]:
    """Checks ``args`` against the kernel's parameters (in order, or by name) and returns
    fresh copies of the arrays (raveled) and the scalars converted to their parameter types."""
    return convert(kernel, match_args(kernel, args))


def match_args(kernel: ir.Kernel, args: Sequence[object] | Mapping[str, object]
               ) -> list[object]:
    """The arguments in parameter order; a wrong count, an unknown or a missing name is a
    ``LaunchError``."""
    names = [p.name for p in kernel.params]
    if isinstance(args, Mapping):
        unknown = [str(k) for k in args if k not in names]
        missing = [n for n in names if n not in args]
        if unknown or missing:
            parts = [f"unknown parameter(s) {', '.join(map(repr, unknown))}"] if unknown else []
            parts += [f"missing argument(s) for {', '.join(map(repr, missing))}"] if missing else []
            raise LaunchError(f"kernel {kernel.name!r}: " + "; ".join(parts))
        values = [args[n] for n in names]
    elif isinstance(args, Sequence) and not isinstance(args, str | bytes):
        if len(args) != len(names):
            raise LaunchError(f"kernel {kernel.name!r} takes {len(names)} arguments "
                              f"({', '.join(names)}), got {len(args)}")
        values = list(args)
    else:
        raise LaunchError(f"arguments must be a list in parameter order or a dict by name, "
                          f"got {type(args).__name__}")
    return values


def convert(kernel: ir.Kernel, values: Sequence[object]
            ) -> tuple[dict[str, np.ndarray], dict[str, np.generic]]:
    """Fresh raveled copies of the array arguments and the scalars converted to their
    parameter types (``values`` in parameter order, as ``match_args`` gives them)."""
    arrays: dict[str, np.ndarray] = {}
    scalars: dict[str, np.generic] = {}
    for p, v in zip(kernel.params, values, strict=True):
        if isinstance(p, ir.ArrayParam):
            arrays[p.name] = _array(p, v)
        else:
            scalars[p.name] = _scalar(p, v)
    return arrays, scalars


def _array(p: ir.ArrayParam, v: object) -> np.ndarray:
    want = dtypes.numpy_dtype(p.elem)
    if not isinstance(v, np.ndarray):
        raise LaunchError(f"parameter {p.name!r} expects a NumPy array of {want} ({p.elem}), "
                          f"got {type(v).__name__}")
    if v.dtype != want:
        raise LaunchError(f"parameter {p.name!r} expects dtype {want} ({p.elem}), "
                          f"got an array of {v.dtype}")
    return v.flatten()  # a copy, in C order


def _scalar(p: ir.ScalarParam, v: object) -> np.generic:
    t = p.elem
    given = _scalar_elem(v)
    if given is None:
        raise LaunchError(f"parameter {p.name!r} expects a {t} scalar, got {type(v).__name__}")
    if t is ElemType.BOOL:
        if given is not ElemType.BOOL:
            raise LaunchError(f"parameter {p.name!r} expects a bool, got {v!r}")
        return np.bool_(bool(v))
    if given is ElemType.BOOL:
        raise LaunchError(f"parameter {p.name!r} expects a {t} number, got the bool {v!r}")
    if t.is_int:
        if given.is_float:
            raise LaunchError(f"parameter {p.name!r} is {t} and cannot take the float {v!r}")
        assert isinstance(v, (int, np.integer))  # given is an integer type: see _scalar_elem
        lo, hi = dtypes.int_range(t)
        if not lo <= int(v) <= hi:
            raise LaunchError(f"parameter {p.name!r} is {t}: {int(v)} is outside "
                              f"[{lo}, {hi}]")
        exact: np.generic = dtypes.numpy_dtype(t).type(int(v))
        return exact
    if given.is_int:
        assert isinstance(v, (int, np.integer))  # as above
        # A Python int of any size: i64 or u64 hold it when a float parameter can.
        source = ElemType.I64 if int(v) < 0 else ElemType.U64
        lo, hi = dtypes.int_range(source)
        if not lo <= int(v) <= hi:
            raise LaunchError(f"parameter {p.name!r} is {t}: {v} is too large")
        value = dtypes.numpy_dtype(source).type(int(v))
        rounded: np.generic = arith.convert(value, source, t)  # a scalar in, a scalar out
        return rounded
    value = np.float64(v) if isinstance(v, float) else v
    converted: np.generic = arith.convert(value, given, t)
    return converted


def _scalar_elem(v: object) -> ElemType | None:
    """The element type a scalar argument arrives as (Python numbers as bool, i64 or f64)."""
    if isinstance(v, bool):
        return ElemType.BOOL
    if isinstance(v, int):
        return ElemType.I64
    if isinstance(v, float):
        return ElemType.F64
    if isinstance(v, np.generic):
        return dtypes.elem_of(v.dtype)
    return None
