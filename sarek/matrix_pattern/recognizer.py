"""The entry point, ``recognize``: checks the kernel, walks its statements to the nest,
normalizes its index expressions, infers the global index of each launch axis, tries every
candidate mapping and returns the ``Gemm`` one of them reads, or the most telling refusal."""

from __future__ import annotations

from sarek import ir, ir_check
from sarek.affine import Poly
from sarek.errors import user_facing
from sarek.gemm import Gemm, NotAGemm
from sarek.ir_walk import distinct_subexpressions
from sarek.matrix_pattern.assemble import Assembler
from sarek.matrix_pattern.mapping import (
    candidates,
    global_id_substitution,
    launch_axes,
    split_candidates,
)
from sarek.matrix_pattern.normalize import AtomTable, Normalizer
from sarek.matrix_pattern.structure import Nest, Structure
from sarek.matrix_pattern.vocabulary import TOO_DEEP, Refusal


@user_facing
def recognize(kernel: ir.Kernel | object) -> Gemm:
    """The GEMM nest of ``kernel`` (an ``ir.Kernel`` or a ``@sarek.kernel`` function).

    Raises ``NotAGemm`` with the reason, naming the construct and its source line, when the
    kernel is not one of the shapes ``specs/matrix-pattern-rewrite.md`` lists.
    """
    kernel_ir = getattr(kernel, "ir", kernel)
    if not isinstance(kernel_ir, ir.Kernel):
        raise NotAGemm(f"expected a sarek.ir.Kernel or a @sarek.kernel function, got "
                       f"{type(kernel).__name__}")
    try:
        problems = ir_check.check(kernel_ir)
    except RecursionError:
        raise NotAGemm(TOO_DEEP) from None
    if problems:
        raise NotAGemm(f"the kernel is not well-formed: {problems[0]}", problems[0].line)
    structure: Structure | None = None
    try:
        structure = Structure(kernel_ir)
        nest = structure.run()
    except Refusal as e:
        raise NotAGemm(e.reason, structure.line if structure else None) from None
    except RecursionError:
        raise NotAGemm(TOO_DEEP) from None
    try:
        return _assemble(kernel_ir, nest)
    except Refusal as e:
        raise NotAGemm(e.reason, nest.line) from None
    except RecursionError:
        raise NotAGemm(TOO_DEEP, nest.line) from None


def _index_exprs(nest: Nest) -> list[ir.Expr]:
    """Every integer expression the mapping analysis must explain."""
    loop = nest.loop
    out: list[ir.Expr] = [nest.store.index, loop.left.load.index, loop.right.load.index]
    for cond in (*nest.guards, *loop.left.conds, *loop.right.conds):
        for x in distinct_subexpressions(cond):
            if isinstance(x, ir.Binary) and x.op in ir.COMPARISONS and x.a.type.is_int:
                out.extend((x.a, x.b))
    for value in (loop.init, nest.store.value):
        for x in distinct_subexpressions(value):
            if isinstance(x, ir.Load):
                out.append(x.index)
            elif x.type.is_int and isinstance(x, ir.BuiltinValue):
                out.append(x)
    return out


def _assemble(kernel: ir.Kernel, nest: Nest) -> Gemm:
    atoms = AtomTable()
    seen: list[Poly] = []
    raw = Normalizer(atoms, {}, seen)
    exprs = _index_exprs(nest)
    for e in exprs:
        raw.poly(e)
    axes = launch_axes(seen, atoms)
    split = split_candidates(seen, atoms, axes)
    if split is not None:
        # the x and y builtins stay: the candidates replace the thread parts by coordinates
        batch = {axis: use for axis, use in axes.items() if axis == "z"}
        normalizer = Normalizer(atoms, global_id_substitution(batch))
        readings = split
    else:
        normalizer = Normalizer(atoms, global_id_substitution(axes))
        used: set[str] = set()
        for e in exprs:
            used |= normalizer.poly(e).atoms()
        readings = candidates(axes, atoms, used)
    best: tuple[int, Refusal] | None = None
    found: list[Gemm] = []
    for candidate in readings:
        assembler = Assembler(nest, candidate, normalizer, atoms, kernel)
        try:
            found.append(assembler.run())
        except Refusal as e:
            if best is None or assembler.stage > best[0]:
                best = (assembler.stage, e)
    if found:
        # Two mappings can describe one kernel (one is the transpose of the other); prefer
        # the one whose A comes before B in the parameter list, as users name them.
        order = [p.name for p in kernel.params]
        return min(found, key=lambda gemm: order.index(gemm.a.array) > order.index(gemm.b.array))
    assert best is not None
    raise best[1]
