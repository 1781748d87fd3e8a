"""The region of output a launch of a recognized kernel covers, and what it writes there.

``region(gemm, grid, block, args)`` evaluates the kernel's bounds with the launch's scalar
arguments and combines them with the launch geometry into ``Region(me, ne, ze, d, t)``
(``specs/matrix-pattern-rewrite.md``, "The region"). ``covered(gemm, region, args)`` gives the
covered element indices. What the launch writes there is computed independently of the
simulator by the tests' oracle (``tests/oracle.py``), which extends ``IndexEvaluator``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import numpy as np

from sarek import ir
from sarek.dtypes import numpy_dtype
from sarek.errors import SarekError, user_facing
from sarek.gemm import (
    BATCH,
    COL,
    ROW,
    Access,
    Gemm,
    GlobalIndex,
    Mapping1D,
    Mapping2D,
    ThreadSplit,
)
from sarek.ir import BinOp, ElemType, MathFn, UnOp
from sarek.ir_build import binary
from sarek.ir_format import format_expr
from sarek.ir_walk import subexpressions
from sarek.launch import Dim3, Launch

_I32_MAX = 2**31 - 1

_Num: TypeAlias = np.ndarray | np.generic
"""What a NumPy operation on arrays gives: an array, or a scalar when the operands are 0-d."""


class RegionError(SarekError):
    """The launch or its arguments do not fit the recognized kernel; ``reason`` says how."""


@dataclass(frozen=True)
class Region:
    """What one launch covers: ``me`` rows, ``ne`` columns, ``ze`` batches of output, the
    reduction depth ``d`` and the linear cover bound ``t`` (outputs in the mapping's linear
    order; ``t == me * ne * ze`` unless a 1-D launch stops part-way through the output).
    An output (row, col, batch) is covered when ``row < me``, ``col < ne``, ``batch < ze`` and
    its linear index is below ``t``."""

    me: int
    ne: int
    ze: int
    d: int
    t: int

    @property
    def args(self) -> tuple[int, int, int, int, int]:
        """The five values in the order a rewritten kernel takes them."""
        return self.me, self.ne, self.ze, self.d, self.t

    @property
    def outputs(self) -> int:
        """How many outputs are covered."""
        return min(self.t, self.me * self.ne * self.ze)


# --------------------------------------------------------------------------- arguments


def _launch_dim(v: object, what: str) -> Dim3:
    t = (v,) if isinstance(v, int | np.integer) else tuple(v) if isinstance(
        v, Sequence) and not isinstance(v, str | bytes) else None
    if t is None or not 1 <= len(t) <= 3 or not all(
            isinstance(x, int | np.integer) and not isinstance(x, bool | np.bool_) for x in t):
        raise RegionError(f"the {what} must be 1 to 3 integers, got {_short(v)}")
    if any(x < 0 for x in t):
        raise RegionError(f"the {what} {tuple(int(x) for x in t)} has a negative dimension")
    if any(x > _I32_MAX for x in t):
        raise RegionError(f"the {what} {tuple(int(x) for x in t)} has a dimension beyond i32 "
                          "(the launch builtins are i32)")
    x, y, z = (*(int(a) for a in t), 1, 1)[:3]
    return x, y, z


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def bind(gemm: Gemm, args: Sequence[object] | Mapping[str, object]) -> dict[str, Any]:
    """Arguments by name; arrays may be left out of a mapping (the region needs scalars)."""
    params = gemm.params
    if isinstance(args, Mapping):
        names = {p.name for p in params}
        unknown = [k for k in args if not (isinstance(k, str) and k in names)]
        if unknown:
            raise RegionError(f"kernel {gemm.kernel!r} has no parameter {_short(unknown[0])}")
        named = dict(args)
    elif isinstance(args, Sequence) and not isinstance(args, str | bytes):
        if len(args) != len(params):
            raise RegionError(f"kernel {gemm.kernel!r} takes {len(params)} arguments "
                              f"({', '.join(p.name for p in params)}), got {len(args)}")
        named = {p.name: a for p, a in zip(params, args, strict=True)}
    else:
        raise RegionError("the arguments must be a list in parameter order or a dict by name")
    out: dict[str, Any] = {}
    for p in params:
        if p.name not in named:
            if isinstance(p, ir.ScalarParam):
                raise RegionError(f"the scalar argument {p.name!r} is missing")
            continue
        v = named[p.name]
        if isinstance(p, ir.ScalarParam):
            out[p.name] = _scalar(p, v)
        else:
            out[p.name] = v
    return out


def _scalar(p: ir.ScalarParam, v: object) -> Any:
    dt = numpy_dtype(p.elem)
    if isinstance(v, np.ndarray) and v.ndim == 0:
        v = v.item()
    if p.elem.is_int:
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise RegionError(f"the argument {p.name!r} ({p.elem}) must be an integer, "
                              f"got {v!r}")
        info = np.iinfo(dt)
        if not info.min <= int(v) <= info.max:
            raise RegionError(f"the argument {p.name!r} = {v} does not fit {p.elem}")
        return dt.type(int(v))
    if not isinstance(v, int | float | np.integer | np.floating | bool | np.bool_):
        raise RegionError(f"the argument {p.name!r} ({p.elem}) must be a number, got "
                          f"{_short(v)}")
    try:
        return dt.type(v)
    except OverflowError:
        raise RegionError(f"the argument {p.name!r} = {_short(v)} is beyond the range of "
                          f"{p.elem}") from None


# --------------------------------------------------------------------------- the region


def _reached(ix: GlobalIndex, grid: Dim3, block: Dim3) -> int:
    """How many distinct values the global index takes over the launch; refuses launches in
    which two invocations would compute the same output."""
    a = "xyz".index(ix.axis)
    g, b = grid[a], block[a]
    if ix.split is not None and ix.tile is not None:
        return g * ix.tile  # the block's shape is checked by _check_split
    if ix.uses_block and ix.uses_thread:
        if ix.tile is not None and ix.tile != b and g * b > 0:
            raise RegionError(f"the kernel computes its {ix.axis} index as block_idx.{ix.axis} "
                              f"* {ix.tile} + thread_idx.{ix.axis}, which assumes blocks of "
                              f"{ix.tile} along {ix.axis}; this launch has {b}")
        return g * b
    if ix.uses_block:
        if b > 1 and g > 0:
            raise RegionError(f"the kernel's {ix.axis} index is block_idx.{ix.axis} alone, so "
                              f"the {b} invocations along {ix.axis} of a block would compute "
                              f"the same outputs; launch with block {ix.axis} = 1")
        return g
    if g > 1 and b > 0:
        raise RegionError(f"the kernel's {ix.axis} index is thread_idx.{ix.axis} alone, so the "
                          f"{g} blocks along {ix.axis} would compute the same outputs; launch "
                          f"with grid {ix.axis} = 1")
    return b


def _check_split(gemm: Gemm, block: Dim3) -> None:
    """A kernel that reads its 1-D block as a tile (``thread_idx.x // W``, ``thread_idx.x % W``)
    needs blocks of exactly that tile: ``W`` times the rows its row part steps by, and one
    invocation along the other axes (except the batch's)."""
    tiled = _split_tile(gemm)
    if tiled is None:
        return
    split, rows = tiled
    want = [1, 1, 1]
    want["xyz".index(split.axis)] = split.width * rows
    z = gemm.mapping.batch
    if z is not None and z.uses_thread:
        want[2] = block[2]
    if tuple(want) != block:
        raise RegionError(f"the kernel reads its block as {rows} rows of {split.width} "
                          f"invocations (thread_idx.{split.axis} // {split.width} and "
                          f"thread_idx.{split.axis} % {split.width}), so its blocks must be "
                          f"{tuple(want)}; this launch has {block}")


def _split_tile(gemm: Gemm) -> tuple[ThreadSplit, int] | None:
    """How a kernel reads its 1-D block as a tile: the split of ``thread_idx`` and the rows
    its row part steps by; None for a kernel that reads no block that way."""
    indices = _used_axes(gemm)
    split = next((ix.split for ix in indices if ix.split is not None), None)
    if split is None:
        return None
    rows = next((ix.tile for ix in indices if ix.split is not None
                 and ix.split.part == "div" and ix.tile is not None), 1)
    return split, rows


def _used_axes(gemm: Gemm) -> list[GlobalIndex]:
    match gemm.mapping:
        case Mapping2D(row=r, col=c, batch=z):
            out = [r, c]
        case Mapping1D(linear=lin, batch=z):
            out = [lin]
    return out + ([z] if z is not None else [])


@user_facing
def region(gemm: Gemm, grid: object, block: object,
           args: Sequence[object] | Mapping[str, object]) -> Region:
    """The region one launch of the original kernel covers.

    ``grid`` and ``block`` are ``(x, y, z)`` (1 to 3 integers, zeros allowed); ``args`` the
    kernel's arguments in parameter order, or by name (arrays may then be left out). Raises
    ``RegionError`` with the reason for missing or ill-typed arguments, a launch the kernel's
    indices do not fit (a staged kernel launched with other blocks, an index that would give
    two invocations one output), a zero divisor, or extents beyond i32.
    """
    if not isinstance(gemm, Gemm):
        raise RegionError(f"region takes the Gemm that matrix_pattern.recognize returns, got "
                          f"{type(gemm).__name__}")
    g, b = _launch_dim(grid, "grid"), _launch_dim(block, "block")
    bound = bind(gemm, args)
    invocations = math.prod(g) * math.prod(b)
    if gemm.staging is not None and b != gemm.staging.block and invocations > 0:
        raise RegionError(f"the kernel stages its operands for blocks of {gemm.staging.block}; "
                          f"this launch has blocks of {b}")
    used = {ix.axis for ix in _used_axes(gemm)}
    for i, a in enumerate("xyz"):
        if a not in used and (g[i] > 1 or b[i] > 1) and invocations > 0:
            raise RegionError(f"the kernel does not use the {a} coordinate, so the launch's "
                              f"{g[i] * b[i]} invocations along {a} would compute the same "
                              f"outputs; launch with grid and block {a} = 1")
    if invocations > 0:
        _check_split(gemm, b)
    ev = IndexEvaluator(gemm, bound, {})
    d = max(0, int(ev.scalar(gemm.k_stop)) - int(ev.scalar(gemm.k_start)))
    if invocations == 0:
        return Region(0, 0, 0, d, 0)  # an empty launch covers nothing

    def value(e: ir.Expr | None) -> int | None:
        return None if e is None else int(ev.scalar(e))

    def clip(reached: int, limit: int | None) -> int:
        return max(0, reached if limit is None else min(reached, limit))

    m, n, nb = value(gemm.m), value(gemm.n), value(gemm.batches)
    z = gemm.mapping.batch
    ze = clip(_reached(z, g, b), nb) if z is not None else 1
    match gemm.mapping:
        case Mapping2D(row=r, col=c):
            me, ne = clip(_reached(r, g, b), m), clip(_reached(c, g, b), n)
            t = me * ne * ze
        case Mapping1D(linear=lin, divisor=div, order=order):
            dv = int(ev.scalar(div))
            total = clip(_reached(lin, g, b), value(gemm.linear_bound))
            if total == 0 or (order == "row-major" and n == 0) or (
                    order == "col-major" and m == 0):
                return Region(0, 0, ze, d, 0)
            if dv <= 0:
                raise RegionError(f"the 1-D mapping divides the linear index by {dv}; the "
                                  "divisor must be positive")
            full, part = divmod(total, dv)
            if order == "row-major":
                ne = clip(dv, n)
                me = clip(-(-total // dv), m)
                t = min(me * ne, full * ne + min(part, ne))
            else:
                me = clip(dv, m)
                ne = clip(-(-total // dv), n)
                t = min(me * ne, full * me + min(part, me))
            if t < me * ne and ze > 1:
                raise RegionError("the 1-D launch covers only part of each batch, which one "
                                  "linear bound over all batches cannot describe")
            t *= ze
    reg = Region(me, ne, ze, d, t)
    if max(reg.args) > _I32_MAX or me * ne * ze > _I32_MAX:
        raise RegionError(f"the region {reg.args} does not fit the i32 region parameters")
    _check_distinct(gemm.c, reg, ev)
    return reg


DEFAULT_BLOCK_EDGE = {"2-D": 16, "1-D": 256}
"""The block a sized launch (``launch_for_sizes``) gives an index of the form ``block_idx.a *
block_dim.a + thread_idx.a`` along its axis: 16x16 for a 2-D mapping, 256 for a 1-D one."""


def launch_for_sizes(kernel: ir.Kernel, gemm: Gemm, m: int, n: int, k: int, *,
                     batches: int = 1, block: Dim3 | None = None) -> Launch:
    """A launch of ``kernel`` whose region is exactly ``m`` x ``n`` x ``batches`` outputs of
    depth ``k``, built from the sizes alone to print a rewrite (``specs/matrix-pattern-
    rewrite.md`` §2): the size expressions' scalar parameters get the sizes, the block is
    ``block`` or the one the indices need, the grid the fewest blocks that cover the output,
    the arrays empty placeholders. ``RegionError`` names a parameter the sizes do not give."""
    if min(m, n, k, batches) < 0:
        raise RegionError(f"sizes are not negative, got {m},{n},{k} and {batches} batches")
    values: dict[str, int] = {}
    scalars = {p.name: p for p in kernel.params if isinstance(p, ir.ScalarParam)}

    def unknown(e: ir.Expr) -> set[str]:
        return {x.name for x in subexpressions(e) if isinstance(x, ir.Var)
                and x.name in scalars and x.name not in values}

    k_extent = binary(BinOp.SUB, gemm.k_stop, gemm.k_start)
    wanted: list[tuple[str, ir.Expr | None, int]] = [
        ("rows", gemm.m, m), ("columns", gemm.n, n), ("batches", gemm.batches, batches),
        ("reduction", k_extent, k)]
    if isinstance(gemm.mapping, Mapping1D):
        by = n if gemm.mapping.order == "row-major" else m
        wanted += [("1-D divisor", gemm.mapping.divisor, by),
                   ("1-D bound", gemm.linear_bound, m * n * batches)]
    pending = [(what, e, v) for what, e, v in wanted if e is not None]
    while pending:
        solvable = [(what, e, v) for what, e, v in pending if len(unknown(e)) == 1]
        if not solvable:
            break
        what, e, v = solvable[0]
        (name,) = unknown(e)
        values[name] = _solve(gemm, e, name, v, values, what)
        pending = [x for x in pending if unknown(x[1])]
    indexing = [gemm.a.offset, gemm.a.row_stride, gemm.a.col_stride, gemm.a.batch_stride,
                gemm.a.red_stride, gemm.b.offset, gemm.b.row_stride, gemm.b.col_stride,
                gemm.b.batch_stride, gemm.b.red_stride, gemm.c.offset, gemm.c.row_stride,
                gemm.c.col_stride, gemm.c.batch_stride, *(e for _, e, _ in wanted if e is not None)]
    missing = sorted(set().union(*(unknown(e) for e in indexing)))
    if missing:
        raise RegionError(f"kernel {kernel.name!r} indexes its arrays with "
                          f"{', '.join(map(repr, missing))}, which the sizes m, n, k do not "
                          "give; launch it with its arguments (sarek emit --inputs FILE.npz "
                          "--grid ... --block ...)")
    args: dict[str, Any] = {}
    for p in kernel.params:
        if isinstance(p, ir.ScalarParam):  # one the indices do not use (an epilogue's alpha)
            args[p.name] = numpy_dtype(p.elem).type(values.get(p.name, 0))
        else:
            args[p.name] = np.zeros(0, numpy_dtype(p.elem))
    blk = _sized_block(gemm) if block is None else block
    grid = [1, 1, 1]
    extents = _extents(gemm, m, n, batches)
    for ix, extent in extents:
        axis = "xyz".index(ix.axis)
        if ix.uses_block:
            per_block = _reached(ix, (1, 1, 1), blk)
            grid[axis] = -(-extent // per_block) if per_block else 0
    launch = Launch(kernel, args, (grid[0], grid[1], grid[2]), blk,
                    {"sizes": (m, n, k, batches),
                     "data": "none: empty placeholder arrays, to print, not to run"})
    reg = region(gemm, launch.grid, launch.block, {name: args[name] for name in scalars})
    if (reg.me, reg.ne, reg.ze, reg.d) != (m, n, batches, k) and m * n * batches > 0:
        raise RegionError(f"a launch of grid {launch.grid} and block {launch.block} covers "
                          f"{reg.me}x{reg.ne}x{reg.ze} outputs with reduction {reg.d}, not the "
                          f"sizes {m}x{n}x{batches} with {k}; launch it with its arguments")
    return launch


def _solve(gemm: Gemm, e: ir.Expr, name: str, want: int, known: dict[str, int],
           what: str) -> int:
    """The value of ``name`` that makes ``e`` (affine in it, the other names ``known``) equal
    ``want``; ``RegionError`` when there is none."""
    def at(v: int) -> int:
        return int(IndexEvaluator(gemm, {**known, name: v}, {}).scalar(e))

    base, step = at(0), at(1) - at(0)
    value = (want - base) // step if step else None
    if value is None or at(value) != want:
        raise RegionError(f"cannot give the kernel's {what} ({format_expr(e)}) the size "
                          f"{want} through {name!r}; launch it with its arguments")
    return value


def _sized_block(gemm: Gemm) -> Dim3:
    """The block ``launch_for_sizes`` gives ``gemm``'s kernel when none is asked for."""
    if gemm.staging is not None:
        return gemm.staging.block
    block = [1, 1, 1]
    tiled = _split_tile(gemm)
    if tiled is not None:  # the block the kernel reads as a tile (_check_split)
        split, rows = tiled
        block["xyz".index(split.axis)] = split.width * rows
    edge = DEFAULT_BLOCK_EDGE["2-D" if isinstance(gemm.mapping, Mapping2D) else "1-D"]
    for ix in _used_axes(gemm):
        a = "xyz".index(ix.axis)
        if ix.split is not None:
            continue
        if ix.tile is not None:
            block[a] = ix.tile
        elif ix.uses_thread and ix is not gemm.mapping.batch:
            block[a] = edge
    return block[0], block[1], block[2]


def _extents(gemm: Gemm, m: int, n: int, batches: int) -> list[tuple[GlobalIndex, int]]:
    """Each global index of the mapping and how far it must reach to cover the sizes."""
    z = [(gemm.mapping.batch, batches)] if gemm.mapping.batch is not None else []
    match gemm.mapping:
        case Mapping2D(row=r, col=c):
            return [(r, m), (c, n), *z]
        case Mapping1D(linear=lin):
            return [(lin, m * n), *z]


def _check_distinct(c: Access, reg: Region, ev: IndexEvaluator) -> None:
    """Refuses a store address that maps two covered outputs to one element."""
    if reg.outputs == 0:
        return
    dims = [(abs(int(ev.scalar(s))), e) for s, e in
            ((c.row_stride, reg.me), (c.col_stride, reg.ne), (c.batch_stride, reg.ze)) if e > 1]
    span = 0
    for stride, extent in sorted(dims):
        if stride <= span:
            raise RegionError(f"the store to {c.array} writes two covered outputs to one "
                              "element (its strides overlap over this region)")
        span += stride * (extent - 1)


# --------------------------------------------------------------------------- the outputs


MAX_DESCRIBED_OUTPUTS = 1 << 26
"""The most outputs ``covered`` (and the tests' oracle) describe (NumPy arrays of a few int64 per
output: about 4 GiB at this size)."""


def coordinates(gemm: Gemm, reg: Region) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row, column and batch of every covered output (int64), in the mapping's linear order."""
    if reg.me * reg.ne * reg.ze > MAX_DESCRIBED_OUTPUTS:
        raise RegionError(f"the region {reg.me}x{reg.ne}x{reg.ze} has more outputs than the "
                          f"{MAX_DESCRIBED_OUTPUTS} a description of outputs lists")
    zg, rg, cg = np.meshgrid(np.arange(reg.ze), np.arange(reg.me), np.arange(reg.ne),
                             indexing="ij")
    z, r, c = zg.ravel(), rg.ravel(), cg.ravel()
    col_major = isinstance(gemm.mapping, Mapping1D) and gemm.mapping.order == "col-major"
    lin = z * reg.me * reg.ne + (c * reg.me + r if col_major else r * reg.ne + c)
    keep = lin < reg.t
    order = np.argsort(lin[keep], kind="stable")
    return r[keep][order], c[keep][order], z[keep][order]


def covered(gemm: Gemm, reg: Region, args: Sequence[object] | Mapping[str, object]
            ) -> np.ndarray:
    """The element indices of C that the launch writes (int64, one per covered output)."""
    bound = bind(gemm, args)
    r, c, z = coordinates(gemm, reg)
    ev = IndexEvaluator(gemm, bound, {ROW: r, COL: c, BATCH: z})
    return ev.address(gemm.c, r, c, z, 0)


class IndexEvaluator:
    """Evaluates the integer expressions of a description (bounds, strides, offsets) over
    NumPy arrays of outputs, with the IR's semantics (wrapping integers). Loads, float
    conversions and math functions on floats are not index arithmetic: ``load``, ``cast``
    and ``call`` refuse them here, and the tests' oracle (``tests/oracle.py``), which
    evaluates whole descriptions, extends them."""

    def __init__(self, gemm: Gemm, args: dict[str, Any], values: dict[str, np.ndarray]) -> None:
        self.gemm = gemm
        self.args = args
        self.values: dict[str, Any] = dict(values)

    def scalar(self, e: ir.Expr) -> Any:
        return np.asarray(self.eval(e)).reshape(-1)[0]

    def address(self, acc: Access, r: Any, c: Any, z: Any, p: int) -> np.ndarray:
        parts = [(acc.row_stride, r), (acc.col_stride, c), (acc.batch_stride, z),
                 (acc.red_stride, p)]
        out = np.asarray(self.eval(acc.offset), dtype=np.int64)
        for stride, coord in parts:
            out = out + np.asarray(self.eval(stride), dtype=np.int64) * np.asarray(coord)
        # The kernel computes addresses in wrapping i32; so does the description.
        return ((out + 2**31) % 2**32 - 2**31).astype(np.int64)

    def gather(self, acc: Access, r: Any, c: Any, z: Any, p: int) -> np.ndarray:
        arr = np.asarray(self.args[acc.array]).ravel()
        idx = np.broadcast_to(self.address(acc, r, c, z, p), np.shape(r))
        if idx.size and (idx.min() < 0 or idx.max() >= arr.size):
            bad = int(idx[(idx < 0) | (idx >= arr.size)][0])
            raise RegionError(f"{acc.array}[{bad}] is outside the array ({arr.size} elements)")
        return cast(np.ndarray, arr[idx])  # idx has r's shape, 1-D: an array, not a scalar

    def eval(self, e: ir.Expr, mask: np.ndarray | None = None) -> Any:
        dt = numpy_dtype(e.type)
        match e:
            case ir.Const(value=v):
                return dt.type(v)
            case ir.Var(name=name):
                if name in self.values:
                    return self.values[name]
                if name not in self.args:
                    raise RegionError(f"the value of {name!r} is needed but was not given")
                return self.args[name]
            case ir.Load(array=name, index=i):
                return self.load(name, i, mask)
            case ir.Cast(x=x, type=t):
                return self.cast(np.asarray(self.eval(x, mask)), x.type, t)
            case ir.Unary(op=op, x=x):
                xv = np.asarray(self.eval(x, mask))
                with np.errstate(all="ignore"):
                    if op is UnOp.NEG:
                        return (-xv).astype(dt)
                    if op is UnOp.NOT:
                        return ~xv.astype(bool)
                    return (~xv).astype(dt)
            case ir.Select(cond=cnd, a=a, b=b):
                cv = np.asarray(self.eval(cnd, mask), dtype=bool)
                ma = cv if mask is None else mask & cv
                mb = ~cv if mask is None else mask & ~cv
                return np.where(cv, self.eval(a, ma), self.eval(b, mb)).astype(dt)
            case ir.Binary():
                return self._binary(e, mask)
            case ir.Call(fn=fn, args=args):
                vals = [np.asarray(self.eval(a, mask)) for a in args]
                return self.call(fn, vals, e.type)
            case ir.BuiltinValue(which=w):
                raise RegionError(f"{w.value} has no value outside a launch")
        raise RegionError(f"cannot evaluate {e.kind}")

    def load(self, name: str, index: ir.Expr, mask: np.ndarray | None) -> Any:
        raise RegionError(f"the region's bounds and addresses cannot read arrays ({name!r})")

    def cast(self, v: np.ndarray, src: ElemType, dst: ElemType) -> Any:
        if dst is ElemType.BOOL:
            return v != 0
        if not (src.is_int or src is ElemType.BOOL) or not dst.is_int:
            raise RegionError(f"a conversion from {src} to {dst} is not index arithmetic")
        return v.astype(np.int64 if src.is_signed else np.uint64).astype(numpy_dtype(dst))

    def call(self, fn: MathFn, vals: list[np.ndarray], t: ElemType) -> Any:
        with np.errstate(all="ignore"):
            match fn:
                case MathFn.ABS if t.is_int:
                    return np.abs(vals[0]).astype(numpy_dtype(t))
                case MathFn.MIN if t.is_int:
                    return np.minimum(vals[0], vals[1]).astype(numpy_dtype(t))
                case MathFn.MAX if t.is_int:
                    return np.maximum(vals[0], vals[1]).astype(numpy_dtype(t))
        raise RegionError(f"{fn.value} on {t} is not index arithmetic")

    def _binary(self, e: ir.Binary, mask: np.ndarray | None) -> Any:
        op, dt = e.op, numpy_dtype(e.a.type)
        a = np.asarray(self.eval(e.a, mask))
        if op in ir.LOGICAL:
            av = a.astype(bool)
            inner = av if op is BinOp.LAND else ~av
            sub = inner if mask is None else mask & inner
            bv = np.asarray(self.eval(e.b, sub), dtype=bool)
            return (av & bv) if op is BinOp.LAND else (av | bv)
        b = np.asarray(self.eval(e.b, mask))
        with np.errstate(all="ignore"):
            match op:
                case BinOp.ADD:
                    return (a + b).astype(dt)
                case BinOp.SUB:
                    return (a - b).astype(dt)
                case BinOp.MUL:
                    return (a * b).astype(dt)
                case BinOp.DIV | BinOp.REM if e.type.is_int:
                    if np.any(b == 0):
                        raise RegionError(f"division by zero in {e.kind}")
                    r = np.fmod(a, b).astype(dt)
                    if op is BinOp.REM:
                        return r
                    return ((a.astype(np.int64) - r) // b).astype(dt)
                case BinOp.DIV:
                    return (a / b).astype(dt)
                case BinOp.AND:
                    return a & b
                case BinOp.OR:
                    return a | b
                case BinOp.XOR:
                    return a ^ b
                case BinOp.SHL | BinOp.SHR:
                    bits = e.a.type.bits
                    if np.any((b < 0) | (b >= bits)):
                        raise RegionError(f"a shift by an amount outside [0, {bits})")
                    sh = b.astype(dt)
                    return (a << sh if op is BinOp.SHL else a >> sh).astype(dt)
                case BinOp.LT:
                    return a < b
                case BinOp.LE:
                    return a <= b
                case BinOp.GT:
                    return a > b
                case BinOp.GE:
                    return a >= b
                case BinOp.EQ:
                    return a == b
                case BinOp.NE:
                    return a != b
        raise RegionError(f"cannot evaluate the operator {op}")
