"""Tile layouts: shapes with strides over memory and over hardware axes.

A ``TileLayout`` maps a coordinate of its shape to one offset per axis: an element offset in
memory, and for register tensors a lane (``laneid``) and possibly a warp (``warpid``). A layout
is written as compactly as a CuTe layout::

    S[(16, 4, 2) : (8, 1, 128)]                        # memory strides
    S[(2, 2, 8, 4) : (8, 2, 4 @ laneid, 1 @ laneid)]   # register slots, lanes 4*row + word

Everything else (``rearrange``, dtype views, composition, the tile-pattern contract, the
simulator's gathers) is derived from the shape and the strides; the notation is specified in
``specs/tile-patterns.md``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from sarek.errors import SarekError


class LayoutError(SarekError):
    """A layout that cannot be built or transformed as asked."""


class Axis(StrEnum):
    """What a stride moves along: memory elements, lanes of a warp, or warps of a block."""

    MEM = "mem"
    LANEID = "laneid"
    WARPID = "warpid"


class Stride(BaseModel):
    """``value`` steps along ``axis`` per unit of a coordinate (``4 @ laneid``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: int
    axis: Axis = Axis.MEM

    def __repr__(self) -> str:
        return str(self.value) if self.axis is Axis.MEM else f"{self.value}@{self.axis.value}"

    __str__ = __repr__


class HardwareAxis:
    """``laneid`` / ``warpid``: ``4 @ laneid`` is a stride of 4 along that axis."""

    def __init__(self, axis: Axis) -> None:
        self.axis = axis

    def __rmatmul__(self, value: int) -> Stride:
        return Stride(value=int(value), axis=self.axis)

    def __repr__(self) -> str:
        return self.axis.value


laneid = HardwareAxis(Axis.LANEID)
warpid = HardwareAxis(Axis.WARPID)


def _as_stride(s: object) -> object:
    """A plain integer stride as a memory ``Stride``; anything else (a ``Stride``, or its
    JSON form) is left for pydantic to validate."""
    return Stride(value=int(s)) if isinstance(s, int | np.integer) and not isinstance(
        s, bool) else s


MAX_COORDS = 1 << 31
"""The most coordinates a layout may have, and the bound on its strides: offsets are i32."""


class TileLayout(BaseModel):
    """A shape and one stride per mode. ``TileLayout(S[shape : strides])`` and
    ``TileLayout(shape=..., stride=...)`` build the same layout."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shape: tuple[int, ...]
    stride: tuple[Stride, ...]

    def __init__(self, layout: TileLayout | None = None, /, **fields: Any) -> None:
        if layout is not None:
            fields = {"shape": layout.shape, "stride": layout.stride}
        if isinstance(fields.get("stride"), list | tuple):
            fields["stride"] = tuple(_as_stride(s) for s in fields["stride"])
        super().__init__(**fields)

    @model_validator(mode="after")
    def _modes_match(self) -> TileLayout:
        if len(self.shape) != len(self.stride):
            raise ValueError(f"a layout needs one stride per mode: shape {self.shape} has "
                             f"{len(self.shape)} modes, strides {self.stride} {len(self.stride)}")
        if any(n <= 0 for n in self.shape):
            raise ValueError(f"every mode of a layout has a positive extent, got {self.shape}")
        if math.prod(self.shape) >= MAX_COORDS or any(abs(s.value) >= MAX_COORDS
                                                      for s in self.stride):
            raise ValueError(f"a layout has fewer than 2^31 coordinates and strides below "
                             f"2^31 (offsets are i32), got {self!r}")
        return self

    def __repr__(self) -> str:
        return f"S[{self.shape} : ({', '.join(map(repr, self.stride))})]"

    __str__ = __repr__

    # ---------------------------------------------------------------- derived facts

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of coordinates."""
        return math.prod(self.shape)

    @property
    def axes(self) -> frozenset[Axis]:
        return frozenset(s.axis for s in self.stride)

    def strides(self, axis: Axis) -> tuple[int, ...]:
        """The strides along ``axis`` (0 for modes that step along another axis)."""
        return tuple(s.value if s.axis is axis else 0 for s in self.stride)

    def __call__(self, *coord: int, axis: Axis = Axis.MEM) -> int:
        """The offset of one coordinate along ``axis``."""
        if len(coord) != self.rank or any(not 0 <= c < n for c, n in zip(coord, self.shape,
                                                                         strict=True)):
            raise LayoutError(f"coordinate {coord} is outside the shape {self.shape}")
        return sum(c * s for c, s in zip(coord, self.strides(axis), strict=True))

    def offsets(self, axis: Axis = Axis.MEM) -> np.ndarray:
        """The offset along ``axis`` of every coordinate, as an array of ``shape``."""
        out = np.zeros(self.shape, np.int64)
        for mode, (n, s) in enumerate(zip(self.shape, self.strides(axis), strict=True)):
            ix = [1] * self.rank
            ix[mode] = n
            out = out + (np.arange(n, dtype=np.int64) * s).reshape(ix)
        return out

    def cosize(self, axis: Axis = Axis.MEM) -> int:
        """One more than the largest offset along ``axis`` (strides must be non-negative)."""
        if any(s < 0 for s in self.strides(axis)):
            raise LayoutError(f"{self!r} has negative strides along {axis}")
        return 1 + sum((n - 1) * s for n, s in zip(self.shape, self.strides(axis), strict=True))

    # ---------------------------------------------------------------- transformations

    def rearrange(self, pattern: str, **sizes: int) -> TileLayout:
        """Splits, merges and permutes modes, einops style:
        ``rearrange("(r m) w k -> k m r w", r=8, m=2)``. A group ``(a b)`` on the left splits a
        mode with ``a`` major; on the right it merges modes, which must then be contiguous along
        one axis."""
        left, arrow, right = pattern.partition("->")
        if not arrow:
            raise LayoutError(f"a rearrange pattern needs '->': {pattern!r}")
        groups_in, groups_out = _groups(left), _groups(right)
        if len(groups_in) != self.rank:
            raise LayoutError(f"{pattern!r} names {len(groups_in)} modes, the layout has "
                              f"{self.rank}")
        named: dict[str, tuple[int, Stride]] = {}
        for group, n, stride in zip(groups_in, self.shape, self.stride, strict=True):
            for name, (extent, step) in zip(group, _split(group, n, sizes, pattern),
                                            strict=True):
                if name in named:
                    raise LayoutError(f"{name!r} appears twice in {pattern!r}")
                named[name] = (extent, Stride(value=stride.value * step, axis=stride.axis))
        used = [name for group in groups_out for name in group]
        if sorted(used) != sorted(named):
            raise LayoutError(f"{pattern!r} must use every name of its left side once on the "
                              "right")
        shape, strides = [], []
        for group in groups_out:
            extent, stride = _merge([named[name] for name in group], pattern)
            shape.append(extent)
            strides.append(stride)
        return TileLayout(shape=tuple(shape), stride=tuple(strides))

    def recast(self, from_bits: int, to_bits: int) -> TileLayout:
        """The same storage seen through elements of ``to_bits`` instead of ``from_bits``
        (a dtype view, not a conversion): the innermost memory mode of unit stride is
        rescaled and every other memory stride converted to the new unit."""
        if not all(isinstance(b, int) and b > 0 for b in (from_bits, to_bits)):
            raise LayoutError(f"element widths are positive bit counts, got {from_bits!r} and "
                              f"{to_bits!r}")
        if from_bits == to_bits:
            return self
        if to_bits > from_bits:
            ratio = to_bits // from_bits
            inner = [i for i, s in enumerate(self.stride) if s.axis is Axis.MEM and s.value == 1]
            if to_bits % from_bits or not inner or self.shape[inner[-1]] % ratio:
                raise LayoutError(f"{self!r} has no unit-stride mode divisible by {ratio} to "
                                  f"pack {from_bits}-bit elements into {to_bits}-bit ones")
            unit = inner[-1]
            shape = list(self.shape)
            shape[unit] //= ratio
            strides = []
            for i, s in enumerate(self.stride):
                if s.axis is Axis.MEM and i != unit:
                    if s.value % ratio:
                        raise LayoutError(f"stride {s.value} of {self!r} is not a whole "
                                          f"number of {to_bits}-bit elements")
                    strides.append(Stride(value=s.value // ratio))
                else:
                    strides.append(s)
            return TileLayout(shape=tuple(shape), stride=tuple(strides))
        ratio = from_bits // to_bits
        if from_bits % to_bits:
            raise LayoutError(f"cannot view {from_bits}-bit elements as {to_bits}-bit ones")
        scaled = tuple(Stride(value=s.value * ratio) if s.axis is Axis.MEM else s
                       for s in self.stride)
        return TileLayout(shape=(*self.shape, ratio), stride=(*scaled, Stride(value=1)))

    def compose(self, inner: TileLayout) -> TileLayout:
        """``self ∘ inner``: coordinate ``c`` of ``inner`` gives a memory offset that is read as
        a row-major index into ``self``'s shape, which ``self`` maps on. Raises ``LayoutError``
        when the result is not a layout (not affine in ``c``)."""
        if inner.axes - {Axis.MEM}:
            raise LayoutError(f"the inner layout of a composition must be a memory layout, "
                              f"got {inner!r}")
        index = inner.offsets()
        if index.min() < 0 or index.max() >= self.size:
            raise LayoutError(f"{inner!r} reaches outside the {self.size} coordinates of {self!r}")
        coords = np.unravel_index(index, self.shape)
        per_axis: dict[Axis, np.ndarray] = {
            axis: np.asarray(sum(c * s for c, s in zip(coords, self.strides(axis), strict=True)))
            for axis in self.axes}
        strides: list[Stride] = []
        for mode, n in enumerate(inner.shape):
            step = [0] * inner.rank
            step[mode] = min(1, n - 1)
            moved = [(axis, int(v[tuple(step)] - v[(0,) * inner.rank])) for axis, v in
                     per_axis.items()]
            nonzero = [(a, d) for a, d in moved if d != 0]
            if len(nonzero) > 1:
                raise LayoutError(f"mode {mode} of the composition moves along several axes")
            axis, value = nonzero[0] if nonzero else (Axis.MEM, 0)
            strides.append(Stride(value=value, axis=axis))
        out = TileLayout(shape=inner.shape, stride=tuple(strides))
        for axis, v in per_axis.items():
            if not np.array_equal(out.offsets(axis) + v[(0,) * inner.rank], v):
                raise LayoutError(f"{self!r} composed with {inner!r} is not affine")
        if any(int(v[(0,) * inner.rank]) for v in per_axis.values()):
            raise LayoutError("a composition that does not start at offset 0 is not a layout")
        return out


def _groups(side: str) -> list[list[str]]:
    tokens = re.findall(r"\(|\)|[A-Za-z_][A-Za-z0-9_]*|\S", side)
    groups: list[list[str]] = []
    current: list[str] | None = None
    for tok in tokens:
        if tok == "(":
            if current is not None:
                raise LayoutError(f"nested parentheses in {side.strip()!r}")
            current = []
        elif tok == ")":
            if current is None:
                raise LayoutError(f"unbalanced ')' in {side.strip()!r}")
            groups.append(current)
            current = None
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", tok):
            if current is not None:
                current.append(tok)
            else:
                groups.append([tok])
        else:
            raise LayoutError(f"unexpected {tok!r} in a rearrange pattern")
    if current is not None:
        raise LayoutError(f"unbalanced '(' in {side.strip()!r}")
    return groups


def _split(group: Sequence[str], n: int, sizes: dict[str, int],
           pattern: str) -> list[tuple[int, int]]:
    """Extents of the names of a split group (the first major) and their steps within it."""
    known = [sizes.get(name) for name in group]
    for name, k in zip(group, known, strict=True):
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise LayoutError(f"the size of {name!r} in {pattern!r} must be a positive "
                              f"integer, got {k!r}")
    missing = [i for i, k in enumerate(known) if k is None]
    if len(missing) > 1:
        raise LayoutError(f"give the sizes of {[group[i] for i in missing]} in {pattern!r}")
    if missing:
        rest = math.prod(k for k in known if k is not None)
        if n % rest:
            raise LayoutError(f"a mode of {n} does not split into {group} in {pattern!r}")
        known[missing[0]] = n // rest
    extents = [int(k) for k in known if k is not None]
    if math.prod(extents) != n:
        raise LayoutError(f"{group} of sizes {extents} do not make the mode of {n} in "
                          f"{pattern!r}")
    steps = [math.prod(extents[i + 1:]) for i in range(len(extents))]
    return list(zip(extents, steps, strict=True))


def _merge(modes: Iterable[tuple[int, Stride]], pattern: str) -> tuple[int, Stride]:
    """Merges modes (the first major) into one, which must step evenly along one axis."""
    items = list(modes)
    extent, stride = items[-1]
    for n, s in reversed(items[:-1]):
        if s.axis is not stride.axis or s.value != stride.value * extent:
            raise LayoutError(f"the modes merged in {pattern!r} are not contiguous")
        extent *= n
    return extent, stride


class _LayoutBuilder:
    """``S[shape : strides]``."""

    def __getitem__(self, key: slice) -> TileLayout:
        if not isinstance(key, slice) or key.step is not None:
            raise LayoutError("write a layout as S[(shape...) : (strides...)]")
        shape = key.start if isinstance(key.start, tuple) else (key.start,)
        stride = key.stop if isinstance(key.stop, tuple) else (key.stop,)
        shape = tuple(int(n) if isinstance(n, np.integer) else n for n in shape)
        try:
            return TileLayout(shape=shape, stride=stride)
        except ValidationError as e:
            problem = e.errors()[0]
            raise LayoutError(f"S[{shape} : {stride}] is not a layout: {problem['msg']}"
                              ) from None


S = _LayoutBuilder()
