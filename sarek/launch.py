"""A kernel together with its arguments and launch geometry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.errors import LaunchError
from sarek.targets import simulate

Dim3 = tuple[int, int, int]


def dim3(v: int | tuple[int, ...] | list[int]) -> Dim3:
    """``v`` as an ``(x, y, z)`` triple, missing components 1; ``LaunchError`` unless it is
    an integer or 1 to 3 of them."""
    t = (v,) if isinstance(v, int | np.integer) else tuple(v) if isinstance(
        v, tuple | list) else ()
    if not 1 <= len(t) <= 3 or not all(
            isinstance(x, int | np.integer) and not isinstance(x, bool) for x in t):
        raise LaunchError(f"a launch dimension is 1 to 3 integers, got {str(v)[:80]}")
    x, y, z = (*t, 1, 1)[:3]
    return int(x), int(y), int(z)


@dataclass(frozen=True)
class Launch:
    """One launch of ``kernel``: arguments by parameter name, grid and block as (x, y, z).

    Taken where the meaning is clear: a ``@sarek.kernel`` function for its IR, the arguments
    as a list or tuple in parameter order, grid and block as 1 to 3 integers. Anything else,
    and a list of the wrong length, is a ``LaunchError`` saying what to pass."""

    kernel: ir.Kernel
    args: Mapping[str, Any]
    grid: Dim3
    block: Dim3
    notes: Mapping[str, Any] = field(default_factory=dict)  # e.g. the sizes the launch was made for

    def __post_init__(self) -> None:
        kernel = self.kernel
        if not isinstance(kernel, ir.Kernel):
            kernel = getattr(kernel, "ir", None)
            if not isinstance(kernel, ir.Kernel):
                raise LaunchError(f"a launch takes a kernel (sarek.ir.Kernel or a "
                                  f"@sarek.kernel function), not {type(self.kernel).__name__}")
            object.__setattr__(self, "kernel", kernel)
        args = self.args
        if isinstance(args, list | tuple):
            names = [p.name for p in kernel.params]
            if len(args) != len(names):
                raise LaunchError(f"kernel {kernel.name!r} takes {len(names)} arguments "
                                  f"({', '.join(names)}), got {len(args)}")
            object.__setattr__(self, "args", dict(zip(names, args, strict=True)))
        elif not isinstance(args, Mapping):
            raise LaunchError("a launch's arguments are a dict by parameter name or a list in "
                              f"parameter order, not {type(args).__name__}")
        object.__setattr__(self, "grid", dim3(self.grid))
        object.__setattr__(self, "block", dim3(self.block))

    def arg_list(self) -> list[Any]:
        """The arguments in parameter order; ``LaunchError`` names a missing one."""
        missing = [p.name for p in self.kernel.params if p.name not in self.args]
        if missing:
            raise LaunchError(f"the launch of {self.kernel.name!r} has no argument for "
                              f"{', '.join(map(repr, missing))}")
        return [self.args[p.name] for p in self.kernel.params]

    def simulate(self, **options: Any) -> dict[str, np.ndarray]:
        """Runs the launch in the simulator (``sarek.simulate``, which takes ``target=`` and
        ``arith=``) and returns every array."""
        return simulate(self.kernel, dict(self.args), grid=self.grid, block=self.block, **options)


@dataclass(frozen=True)
class Scratch:
    """A temporary array that a sequence of launches allocates for itself: the parameter name
    its kernels give it, its element type and its element count. Its contents before the
    first launch that writes it are undefined (zeros in the simulator); no launch reads an
    element that an earlier one of the sequence did not write."""

    name: str
    elem: ir.ElemType
    size: int


@dataclass(frozen=True)
class Steps:
    """Launches run one after another over one set of arrays: the caller's arguments and the
    ``scratch`` temporaries. Each launch takes the arrays its kernel names, as the launches
    before it left them; the last launch is the one the caller asked for (a rewritten GEMM),
    those before it prepare its temporaries (a conversion pre-pass). A single launch is the
    sequence of one with no temporaries."""

    launches: tuple[Launch, ...]
    scratch: tuple[Scratch, ...] = ()

    @property
    def last(self) -> Launch:
        """The launch whose results the caller sees."""
        return self.launches[-1]

    def with_args(self, changes: Mapping[str, Any]) -> Steps:
        """The sequence with ``changes`` among every launch's arguments."""
        return replace(self, launches=tuple(replace(launch, args={**launch.args, **changes})
                                            for launch in self.launches))

    def run(self, one: Callable[[Launch], Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        """Runs every launch in order through ``one`` (which returns the final contents of its
        launch's arrays by name, as ``sarek.simulate`` does) and returns the final contents of
        every array the launches name except the temporaries."""
        temporary = {s.name for s in self.scratch}
        arrays: dict[str, np.ndarray] = {
            s.name: np.zeros(s.size, numpy_dtype(s.elem)) for s in self.scratch}
        for launch in self.launches:
            args = {p.name: arrays.get(p.name, launch.args.get(p.name))
                    for p in launch.kernel.params}
            missing = [name for name, v in args.items() if v is None]
            if missing:
                raise LaunchError(f"the launch of {launch.kernel.name!r} has no argument for "
                                  f"{', '.join(map(repr, missing))}")
            out = one(replace(launch, args=args))
            arrays.update({name: np.asarray(a) for name, a in out.items()
                           if isinstance(launch.kernel.param(name), ir.ArrayParam)})
        return {name: a for name, a in arrays.items() if name not in temporary}

    def simulate(self, **options: Any) -> dict[str, np.ndarray]:
        """Runs the sequence in the simulator (``Launch.simulate``'s options)."""
        return self.run(lambda launch: launch.simulate(**options))
