"""Runs of fragment statements reordered one chain at a time, for CUDA's registers.

The neutral rewrite orders a sub-step's multiply-accumulates products outer, fragments inner:
every run of one product over the fragments is independent, which the simulator batches. On
CUDA every fragment is registers, and a fragment that is born and dies inside the run (a
fresh accumulator that a ``FragAdd`` then adds to the running one) holds its registers from
its first statement to its last: with products outer, all of them are alive at once. So the
lowering emits such a run chain by chain: statements that touch a fragment one of them writes
belong to one chain, chains keep their statements' order, and come out in the order of their
first statement. Statements of different chains touch no common written fragment, so every
interleaving computes the same values; only the registers alive at once change. Runs without
an add (no fresh accumulators) keep their order, and so do runs that fill a fresh accumulator
after a product: the warpgroup strips' order, one strip's fill and products after another's,
whose add the rewrite holds back until the next strip's products are issued, so that the add
runs while those are in flight (``sarek.rewrite.multiply``).
"""

from __future__ import annotations

from sarek import ir
from sarek.ir_walk import map_blocks

_RUN = (ir.FragFill, ir.FragMulAdd, ir.FragAdd)


def _writes(s: ir.Stmt) -> str:
    match s:
        case ir.FragFill(frag=f):
            return f
        case ir.FragMulAdd(d=d) | ir.FragAdd(d=d):
            return d
    raise AssertionError(s)


def _reads(s: ir.Stmt) -> tuple[str, ...]:
    match s:
        case ir.FragMulAdd(a=a, b=b, c=c):
            return (a, b, c)
        case ir.FragAdd(a=a, b=b):
            return (a, b)
    return ()


def by_chain(run: list[ir.Stmt]) -> list[ir.Stmt]:
    """``run`` (fills, multiply-accumulates and adds) reordered chain by chain when it adds
    fragments (where fresh accumulators live), else as it is: a run of multiply-accumulates
    alone keeps its order, whose independent neighbours a device overlaps."""
    if not any(isinstance(s, ir.FragAdd) for s in run):
        return run
    fills = [i for i, s in enumerate(run) if isinstance(s, ir.FragFill)]
    products = [i for i, s in enumerate(run) if isinstance(s, ir.FragMulAdd)]
    if fills and products and fills[-1] > products[0]:
        return run  # fills between products: ordered strip by strip already (see above)
    written = {_writes(s) for s in run}
    parent = list(range(len(run)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    last: dict[str, int] = {}  # the latest statement touching each written fragment
    for i, s in enumerate(run):
        for name in (_writes(s), *_reads(s)):
            if name in written:
                if name in last:
                    parent[root(i)] = root(last[name])
                last[name] = i
    chains: dict[int, list[ir.Stmt]] = {}
    for i, s in enumerate(run):
        chains.setdefault(root(i), []).append(s)
    return [s for chain in chains.values() for s in chain]


def regroup(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``body`` with every maximal run of fragment fills, multiply-accumulates and adds
    reordered by ``by_chain`` (in nested blocks too)."""
    def level(block: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        out: list[ir.Stmt] = []
        run: list[ir.Stmt] = []
        for s in block:
            if isinstance(s, _RUN):
                run.append(s)
                continue
            out += [*by_chain(run), s]
            run = []
        return (*out, *by_chain(run))

    return map_blocks(body, level)
