"""Mapping inference: how the kernel combines its block and thread coordinates into one global
index per launch axis, and the candidate readings of those indices as the output's row, column
and batch (a 2-D mapping, either way round, or a 1-D linear index divided by the row length,
row- or column-major). A kernel that reads a 1-D block as a tile (``thread_idx.x // W`` and
``thread_idx.x % W``, each added to a block coordinate times a constant) has 2-D readings of
its own (``split_candidates``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

from sarek.affine import Poly
from sarek.gemm import BATCH, COL, ROW, GlobalIndex, Mapping, Mapping1D, Mapping2D, ThreadSplit
from sarek.ir_format import format_expr
from sarek.matrix_pattern.normalize import AtomTable, Quotient, quotient
from sarek.matrix_pattern.vocabulary import GLOBAL_ID, Refusal


@dataclass(frozen=True)
class AxisUse:
    """How the kernel combines block_idx.a and thread_idx.a."""

    uses_block: bool
    uses_thread: bool
    stride: Poly | None  # block_idx's multiplier when both are used


def launch_axes(polys: list[Poly], atoms: AtomTable) -> dict[str, AxisUse]:
    """Finds, per launch axis, the global index the kernel's indices are built from."""
    every: list[Poly] = list(polys)
    for kind, payload in atoms.info.values():
        if kind in ("div", "rem"):
            num, den, _ = quotient(payload)
            every.extend((num, den))
    out: dict[str, AxisUse] = {}
    for axis in "xyz":
        block, thread, dim = f"@block_idx.{axis}", f"@thread_idx.{axis}", f"@block_dim.{axis}"
        uses_block = uses_thread = False
        stride: Poly | None = None
        for poly in every:
            names = poly.atoms()
            uses_block, uses_thread = uses_block or block in names, uses_thread or thread in names
            if block not in names or thread not in names:
                continue
            coefs, _, bad = poly.split((block, thread))
            if bad is not None:
                continue  # not affine: the coordinate analysis reports it with names
            found = _block_stride(coefs[block], coefs[thread], Poly.atom(dim))
            if found is None:
                raise Refusal(f"block_idx.{axis} and thread_idx.{axis} are not combined as "
                              f"block_idx.{axis} * block_dim.{axis} + thread_idx.{axis}")
            if stride is not None and found != stride:
                raise Refusal(f"two different global indices along {axis}")
            stride = found
        if uses_block or uses_thread:
            out[axis] = AxisUse(uses_block, uses_thread, stride)
    return out


def _block_stride(block_coef: Poly, thread_coef: Poly, dim: Poly) -> Poly | None:
    """``block_coef / thread_coef`` when it is ``block_dim`` or a positive integer constant."""
    if block_coef == thread_coef * dim:
        return dim
    lead = next(iter(thread_coef.terms.items()), None)
    if lead is None:
        return None
    mono, coef = lead
    quot, rem = divmod(block_coef.terms.get(mono, 0), coef)
    if rem == 0 and quot > 0 and block_coef == thread_coef * Poly.const(quot):
        return Poly.const(quot)
    return None


def global_id_substitution(axes: dict[str, AxisUse]) -> dict[str, Poly]:
    """The builtins to replace by each axis's global index atom (``GLOBAL_ID``)."""
    subst: dict[str, Poly] = {}
    for axis, use in axes.items():
        gid = Poly.atom(GLOBAL_ID[axis])
        if use.uses_block and use.stride is not None:
            subst[f"@thread_idx.{axis}"] = gid - use.stride * Poly.atom(f"@block_idx.{axis}")
        elif use.uses_block:
            subst[f"@block_idx.{axis}"] = gid
        else:
            subst[f"@thread_idx.{axis}"] = gid
    return subst


def _global_index(axis_name: str, use: AxisUse) -> GlobalIndex:
    tile = None
    if use.stride is not None and use.stride.constant is not None:
        tile = use.stride.constant
    both = use.uses_block and use.stride is not None
    axis = cast(Literal["x", "y", "z"], axis_name)  # the callers' axes are "x", "y" and "z"
    return GlobalIndex(axis=axis, uses_block=use.uses_block,
                       uses_thread=both or not use.uses_block, tile=tile)


@dataclass
class Candidate:
    """One way of reading the indices as (row, col, batch)."""

    mapping: Mapping
    subst: dict[str, Poly]  # gid and div/rem atoms -> coordinates
    linear: Poly | None  # the linear index in coordinates (1-D mappings)


def candidates(axes: dict[str, AxisUse], atoms: AtomTable, used: set[str]) -> list[Candidate]:
    """Every mapping the indices allow; ``used`` are the atoms the indices use."""
    batch = _global_index("z", axes["z"]) if "z" in axes else None
    batch_subst = {GLOBAL_ID["z"]: Poly.atom(BATCH)} if batch is not None else {}
    divisions = [(name, kind, quotient(payload)) for name, (kind, payload) in atoms.info.items()
                 if kind in ("div", "rem") and name in used]
    if divisions:
        return _linear_candidates(axes, atoms, divisions, batch, batch_subst)
    out = []
    for row_axis, col_axis in (("y", "x"), ("x", "y")):
        if row_axis not in axes or col_axis not in axes:
            continue
        row_index = _global_index(row_axis, axes[row_axis])
        col_index = _global_index(col_axis, axes[col_axis])
        subst = {GLOBAL_ID[row_axis]: Poly.atom(ROW), GLOBAL_ID[col_axis]: Poly.atom(COL),
                 **batch_subst}
        out.append(Candidate(Mapping2D(row_index, col_index, batch), subst, None))
    if not out:
        used_axes = " and ".join(axis for axis in "xy" if axis in axes) or "none"
        raise Refusal("the output's row and column do not come from two launch coordinates or "
                      f"from a divided linear index (coordinates used: {used_axes})")
    return out


def _linear_candidates(axes: dict[str, AxisUse], atoms: AtomTable,
                       divisions: list[tuple[str, str, Quotient]],
                       batch: GlobalIndex | None,
                       batch_subst: dict[str, Poly]) -> list[Candidate]:
    """The row- and column-major readings of a linear index that the kernel divides (the
    ``div``/``rem`` atoms in ``divisions``)."""
    gids = {axis for axis in "xy" if axis in axes}
    shapes = {(num.key(), den.key()) for _, _, (num, den, _) in divisions}
    if len(shapes) > 1:
        raise Refusal("the linear index is divided and reduced by different expressions")
    num, den, den_expr = divisions[0][2]
    lin_axes = [axis for axis in "xy" if num == Poly.atom(GLOBAL_ID[axis])]
    if not lin_axes:
        raise Refusal(f"an index divides by {format_expr(den_expr)} something other than "
                      "the global linear index: it is not affine")
    axis = lin_axes[0]
    if gids - {axis}:
        raise Refusal(f"a 1-D mapping over {axis} that also uses the "
                      f"{''.join(gids - {axis})} coordinates")
    names = {kind: name for name, kind, _ in divisions}
    div = names.get("div") or atoms.intern("div", (num.key(), den.key()), (num, den, den_expr))
    rem = names.get("rem") or atoms.intern("rem", (num.key(), den.key()), (num, den, den_expr))
    linear = _global_index(axis, axes[axis])
    out = []
    orders: tuple[tuple[Literal["row-major", "col-major"], str, str], ...] = (
        ("row-major", ROW, COL), ("col-major", COL, ROW))
    for order, major, minor in orders:
        subst = {GLOBAL_ID[axis]: Poly.atom(major) * den + Poly.atom(minor),
                 div: Poly.atom(major), rem: Poly.atom(minor), **batch_subst}
        out.append(Candidate(Mapping1D(linear, den_expr, order, batch), subst,
                             Poly.atom(major) * den + Poly.atom(minor)))
    return out


def split_candidates(polys: list[Poly], atoms: AtomTable,
                     axes: dict[str, AxisUse]) -> list[Candidate] | None:
    """The 2-D readings of a kernel that reads its 1-D block as a tile: ``block_idx.a * S +
    thread_idx.x // W`` and ``block_idx.b * W + thread_idx.x % W`` are the global row and
    column, or column and row (``polys`` are the index polynomials over the builtins). None
    when the kernel does not split a thread coordinate so."""
    used = set().union(*(poly.atoms() for poly in polys)) if polys else set()
    parts: dict[str, ThreadSplit] = {}
    for name, (kind, payload) in atoms.info.items():
        if kind not in ("div", "rem") or name not in used:
            continue
        num, den, _ = quotient(payload)
        axis = next((a for a in "xyz" if num == Poly.atom(f"@thread_idx.{a}")), None)
        if axis is None or den.constant is None or den.constant <= 0:
            return None
        parts[name] = ThreadSplit(axis=cast(Literal["x", "y", "z"], axis), width=den.constant,
                                  part="div" if kind == "div" else "rem")
    by_part = {split.part: (name, split) for name, split in parts.items()}
    if len(parts) != 2 or len(by_part) != 2:
        return None
    (high, high_split), (low, low_split) = by_part["div"], by_part["rem"]
    if (high_split.axis, high_split.width) != (low_split.axis, low_split.width):
        return None
    pairs = {name: _block_pairing(name, polys) for name in (high, low)}
    if any(pair is None for pair in pairs.values()):
        return None
    (high_axis, high_tile), (low_axis, low_tile) = (p for p in pairs.values() if p is not None)
    width = low_split.width
    if low_tile != width:
        raise Refusal(f"block_idx.{low_axis} * {low_tile} + thread_idx.{low_split.axis} % "
                      f"{width} steps by {low_tile} blocks whose {width} columns "
                      f"(thread_idx.{low_split.axis} % {width}) do not tile it")
    if "z" in (high_axis, low_axis):
        return None  # z is the batch's
    if high_axis == low_axis:
        raise Refusal(f"thread_idx.{low_split.axis} // {width} and thread_idx.{low_split.axis} "
                      f"% {width} are both added to block_idx.{low_axis}")
    batch = _global_index("z", axes["z"]) if "z" in axes else None
    batch_subst = {GLOBAL_ID["z"]: Poly.atom(BATCH)} if batch is not None else {}
    indices = {high: GlobalIndex(axis=cast(Literal["x", "y", "z"], high_axis), tile=high_tile,
                                 split=high_split),
               low: GlobalIndex(axis=cast(Literal["x", "y", "z"], low_axis), tile=low_tile,
                                split=low_split)}
    tiles = {high: (high_axis, high_tile), low: (low_axis, low_tile)}
    out = []
    for row, col in ((high, low), (low, high)):
        subst = {**batch_subst}
        for name, coord in ((row, ROW), (col, COL)):
            axis, tile = tiles[name]
            subst[name] = Poly.atom(coord) - Poly.const(tile) * Poly.atom(f"@block_idx.{axis}")
        out.append(Candidate(Mapping2D(indices[row], indices[col], batch), subst, None))
    return out


def _block_pairing(part: str, polys: list[Poly]) -> tuple[str, int] | None:
    """The block coordinate a thread part is added to and its multiplier, read off the
    polynomials ``S * block_idx.a + part`` (the global index alone)."""
    found: set[tuple[str, int]] = set()
    for poly in polys:
        blocks = [a for a in "xyz" if f"@block_idx.{a}" in poly.atoms()]
        if len(blocks) != 1 or poly.atoms() != {part, f"@block_idx.{blocks[0]}"}:
            continue
        coefs, _, bad = poly.split((part, f"@block_idx.{blocks[0]}"))
        block_coef, part_coef = coefs[f"@block_idx.{blocks[0]}"].constant, coefs[part].constant
        if bad is not None or not block_coef or not part_coef or block_coef % part_coef:
            continue
        if block_coef // part_coef > 0:
            found.add((blocks[0], block_coef // part_coef))
    if len(found) > 1:
        raise Refusal("two different global indices combine one part of the block's "
                      "thread_idx with block coordinates")
    return found.pop() if found else None
