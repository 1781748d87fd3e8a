"""Assembly: a walked nest read through one candidate mapping becomes a ``Gemm``. Every address
must come out affine in row, column, batch and the reduction index, with coefficients built from
scalar parameters and constants; the guard's conjuncts must be upper bounds on the coordinates
(or on the linear index); the initial value and the epilogue are rewritten over the
placeholders."""

from __future__ import annotations

import math
from collections.abc import Iterator

from sarek import ir
from sarek.affine import Poly
from sarek.gemm import ACC, BATCH, COL, ROW, Access, Gemm, Staging
from sarek.ir import BinOp, ElemType, MathFn, UnOp
from sarek.ir_build import const, is_literal, logical_not, mul, var
from sarek.ir_format import format_expr
from sarek.ir_walk import distinct_subexpressions, rebuild, tree_size
from sarek.matrix_pattern.mapping import Candidate
from sarek.matrix_pattern.normalize import AtomTable, Normalizer, is_uniform
from sarek.matrix_pattern.operands import Operand
from sarek.matrix_pattern.structure import KLoop, Nest
from sarek.matrix_pattern.vocabulary import (
    COORD_NAMES,
    I32_MAX,
    I32_MIN,
    MAX_NODES,
    REDUCTION_INDEX,
    REDUCTION_NAMES,
    STEP_OFFSET,
    STEP_START,
    Refusal,
)


def _is_acc(e: ir.Expr) -> bool:
    return isinstance(e, ir.Var) and e.name == ACC


class Assembler:
    """Reads the nest through one candidate mapping; ``stage`` says how far it got, so that the
    most telling refusal among the candidates is the one reported."""

    def __init__(self, nest: Nest, candidate: Candidate, normalizer: Normalizer,
                 atoms: AtomTable, kernel: ir.Kernel) -> None:
        self.nest = nest
        self.candidate = candidate
        self.normalizer = normalizer
        self.atoms = atoms
        self.kernel = kernel
        self.arrays = {p.name: p for p in kernel.params if isinstance(p, ir.ArrayParam)}
        self.stage = 0
        self.memo: dict[int, ir.Expr] = {}

    def in_coordinates(self, e: ir.Expr) -> Poly:
        """``e`` as a polynomial over the candidate's coordinates and the parameters."""
        return self.normalizer.poly(e).subst(self.candidate.subst)

    def affine(self, e: ir.Expr, coords: tuple[str, ...], what: str) -> tuple[dict[str, Poly],
                                                                                Poly]:
        """The coefficient of each coordinate in ``e`` and the rest, each uniform; refuses
        (naming ``what``) an index that is not affine."""
        poly = self.in_coordinates(e)
        coefs, rest, bad = poly.split(coords)
        if bad is not None:
            hits = [COORD_NAMES.get(atom, atom) for atom in bad if atom in coords]
            raise Refusal(f"{what} {format_expr(e)} is not affine: it multiplies "
                          f"{' by '.join(hits)}")
        for part in (*coefs.values(), rest):
            self.check_uniform(part, what, e)
        return coefs, rest

    def check_uniform(self, poly: Poly, what: str, e: ir.Expr) -> None:
        """Refuses a coefficient that still depends on the invocation or the reduction."""
        for atom in sorted(poly.atoms()):  # sorted: the same reason whatever the hash seed
            if atom.startswith("@"):
                raise Refusal(f"{what} {format_expr(e)} uses {atom[1:]} other than through the "
                              "global index of a mapping")
            if atom in REDUCTION_NAMES:
                raise Refusal(f"{what} {format_expr(e)} depends on the reduction index")
            if atom.startswith("%"):
                raise Refusal(f"{what} {format_expr(e)} uses the invocation's coordinates in a "
                              "way no mapping explains")
            if atom.startswith("#") and self.atoms.info[atom][0] != "expr":
                raise Refusal(f"{what} {format_expr(e)} divides by an expression in a way no "
                              "mapping explains")

    def as_expr(self, poly: Poly) -> ir.Expr:
        """A polynomial over parameters (and coordinates) as an i32 IR expression."""
        terms: list[tuple[int, ir.Expr | None]] = []
        for mono, coef in sorted(poly.terms.items(), key=lambda term: (len(term[0]) == 0,
                                                                     term[0])):
            if not I32_MIN <= coef <= I32_MAX:
                raise Refusal(f"a coefficient ({coef}) does not fit i32")
            product: ir.Expr | None = None
            for factor in (self.atom_expr(atom) for atom in mono):
                product = factor if product is None else mul(product, factor)
            terms.append((coef, product))
        if not terms:
            return const(0)
        out: ir.Expr | None = None
        for coef, product in terms:
            magnitude = abs(coef)
            term = (const(magnitude) if product is None else product if magnitude == 1
                    else mul(product, const(magnitude)))
            if out is None:
                out = term if coef > 0 else ir.Unary(op=UnOp.NEG, x=term, type=ElemType.I32)
            else:
                out = ir.Binary(op=BinOp.ADD if coef > 0 else BinOp.SUB, a=out, b=term,
                                type=ElemType.I32)
        assert out is not None
        return out

    def atom_expr(self, atom: str) -> ir.Expr:
        """An atom as the expression it stands for (a parameter or placeholder by name)."""
        if atom.startswith("#"):
            kind, payload = self.atoms.info[atom]
            assert kind == "expr" and not isinstance(payload, tuple)
            return payload
        return var(atom)

    # ------------------------------------------------------------------ pieces

    def access(self, load: ir.Load, coords: tuple[str, ...], what: str) -> Access:
        coefs, rest = self.affine(load.index, coords, what)
        zero = Poly({})
        red_stride = coefs.get(REDUCTION_INDEX, zero)
        if STEP_START in coefs:
            scale = self.nest.loop.scale
            if coefs[STEP_START] != coefs[STEP_OFFSET] * Poly.const(scale):
                tiles = f" (the step counts tiles of {scale})" if scale != 1 else ""
                raise Refusal(f"{what} {format_expr(load.index)} weighs the step and the "
                              f"position inside the step differently{tiles}")
            red_stride = coefs[STEP_OFFSET]
        array = self.kernel.param(load.array)
        return Access(load.array, array.elem, self.as_expr(rest),
                      self.as_expr(coefs.get(ROW, zero)), self.as_expr(coefs.get(COL, zero)),
                      self.as_expr(coefs.get(BATCH, zero)), self.as_expr(red_stride))

    def bounds(self, conds: list[ir.Expr]) -> dict[str, list[Poly]]:
        """Each guard conjunct as an upper bound on row, col, batch or the linear index."""
        out: dict[str, list[Poly]] = {ROW: [], COL: [], BATCH: [], "linear": []}
        for cond in conds:
            for conj in _conjuncts(cond):
                kind, bound = self.bound(conj)
                if kind:
                    out[kind].append(bound)
        return out

    def bound(self, conj: ir.Expr) -> tuple[str, Poly]:
        """What ``conj`` bounds and by what (``""`` for a lower bound every index meets)."""
        text = format_expr(conj)
        if not (isinstance(conj, ir.Binary) and conj.op in ir.COMPARISONS):
            raise Refusal(f"the guard {text} is not a comparison")
        if conj.op in (BinOp.EQ, BinOp.NE):
            raise Refusal(f"the guard {text} tests equality; a bounds guard compares with < "
                          "or >=")
        if not conj.a.type.is_int:
            raise Refusal(f"the guard {text} compares {conj.a.type} values, not indices")
        for sub in distinct_subexpressions(conj):
            if isinstance(sub, ir.Load):
                raise Refusal(f"the guard {text} reads memory: the store is conditional on data")
            if _is_acc(sub):
                raise Refusal(f"the guard {text} reads the accumulator")
        lhs, rhs = self.in_coordinates(conj.a), self.in_coordinates(conj.b)
        one = Poly.const(1)
        negative = {BinOp.LT: lhs - rhs, BinOp.LE: lhs - rhs - one, BinOp.GT: rhs - lhs,
                    BinOp.GE: rhs - lhs - one}[conj.op]  # the condition is negative < 0
        coords = (ROW, COL, BATCH)
        if self.candidate.linear is not None:
            rest = negative - self.candidate.linear
            _, _, bad = rest.split(coords)
            if bad is None and not (rest.atoms() & set(coords)):
                self.check_uniform(rest, "the guard", conj)
                return "linear", -rest
        coefs, rest, bad = negative.split(coords)
        used = [coord for coord in coords if coefs[coord].terms]
        if bad is not None or len(used) != 1:
            raise Refusal(f"the guard {text} is not a bound on the row, the column, the batch "
                          "or the linear index")
        self.check_uniform(rest, "the guard", conj)
        coord = used[0]
        alpha = coefs[coord].constant
        if alpha == 1:
            return coord, -rest
        if alpha == -1 and rest.constant is not None and rest.constant < 0:
            return "", rest  # a lower bound every index satisfies (row >= 0)
        raise Refusal(f"the guard {text} is not an upper bound 'index < bound' on "
                      f"{COORD_NAMES[coord]}")

    def value(self, e: ir.Expr, what: str) -> ir.Expr:
        """An initial value or epilogue over placeholders and parameters."""
        output = self.c_access

        def leaf(x: ir.Expr) -> ir.Expr | None:
            match x:
                case ir.Load(array=name, index=index):
                    if name not in self.arrays:
                        raise Refusal(f"{what} reads the {name!r} array, which is not a "
                                      "parameter")
                    access = self.access(x, (ROW, COL, BATCH), f"{what}'s read of {name} at")
                    if name == output.array and access != output:
                        raise Refusal(f"{what} reads {name} at {format_expr(index)}, another "
                                      "element than the one the invocation writes")
                    address = access.address(var(ROW), var(COL), var(BATCH), const(0))
                    return x.model_copy(update={"index": address})
                case ir.Var(name=name) if name in REDUCTION_NAMES:
                    raise Refusal(f"{what} depends on the reduction index")
                case _ if x.type.is_int and not is_uniform(x) and not any(
                        isinstance(y, ir.Load) or _is_acc(y)
                        for y in distinct_subexpressions(x)):
                    poly = self.in_coordinates(x)
                    for atom in sorted(poly.atoms()):
                        if atom not in (ROW, COL, BATCH):
                            self.check_uniform(Poly.atom(atom), what, x)
                    return self.as_expr(poly)
            return None

        out = rebuild(e, leaf, self.memo)
        if tree_size(out) > MAX_NODES:
            raise Refusal(f"{what} expands to more than {MAX_NODES} operations")
        return out

    def run(self) -> Gemm:
        """The ``Gemm`` this candidate reads; raises ``Refusal`` when it does not fit."""
        nest, loop = self.nest, self.nest.loop
        reduction = (STEP_START, STEP_OFFSET) if loop.tile is not None else (REDUCTION_INDEX,)
        coords = (ROW, COL, BATCH, *reduction)
        store = nest.store
        coefs, rest = self.affine(store.index, (ROW, COL, BATCH), "the store index")
        self.c_access = Access(store.array, self.kernel.param(store.array).elem,
                               self.as_expr(rest), self.as_expr(coefs[ROW]),
                               self.as_expr(coefs[COL]), self.as_expr(coefs[BATCH]), const(0))
        self.stage = 1
        left = self.access(loop.left.load, coords, "the operand index")
        right = self.access(loop.right.load, coords, "the operand index")
        if is_literal(left.col_stride, 0) and is_literal(right.row_stride, 0):
            a, b, a_operand, b_operand = left, right, loop.left, loop.right
        elif is_literal(right.col_stride, 0) and is_literal(left.row_stride, 0):
            a, b, a_operand, b_operand = right, left, loop.right, loop.left
        else:
            raise Refusal("the product is not A[row, p] * B[p, col]: "
                          f"{format_expr(loop.left.load)} and {format_expr(loop.right.load)} "
                          "do not split into one factor without the column and one without "
                          "the row")
        if store.array in (a.array, b.array):
            # Lockstep simulation would give an answer, but on a GPU an invocation's store can
            # land before or after another invocation's loads of that element: a race.
            role = "A" if store.array == a.array else "B"
            raise Refusal(f"the output {store.array} is also the operand {role} of the product: "
                          "invocations would overwrite elements that others still read (a race "
                          "on a GPU); write the result to another array")
        if all(is_literal(stride, 0) for stride in (a.row_stride, b.col_stride)):
            raise Refusal("the product depends on neither the output's row nor its column")
        self.stage = 2
        bounds = self.bounds(nest.guards)
        self.stage = 3
        k_start, k_stop = self.reduction_range(a_operand, b_operand, bounds, loop)
        self.stage = 4
        init = self.value(loop.init, "the initial value")
        epilogue = self.value(store.value, "the stored value")
        if not any(_is_acc(x) for x in distinct_subexpressions(epilogue)):
            raise Refusal("the stored value does not use the accumulator")
        if a.elem != b.elem:
            raise Refusal(_mixed_operands(a, b))

        def bound(kind: str) -> ir.Expr | None:
            polys = bounds[kind]
            if not polys:
                return None
            exprs = [self.as_expr(poly) for poly in dict.fromkeys(polys)]
            out = exprs[0]
            for e in exprs[1:]:
                out = ir.Call(fn=MathFn.MIN, args=(out, e), type=ElemType.I32)
            return out

        staging: Staging | None = None
        if loop.tile is not None and loop.block is not None:  # a blocked loop stages nothing
            staging = Staging(loop.tile, loop.block)
        return Gemm(
            kernel=self.kernel.name, params=tuple(self.kernel.params),
            mapping=self.candidate.mapping, a=a, b=b, c=self.c_access, m=bound(ROW),
            n=bound(COL), batches=bound(BATCH), linear_bound=bound("linear"),
            k_start=k_start, k_stop=k_stop, acc_type=loop.acc_type, fused=loop.fused,
            init=init, epilogue=epilogue, staging=staging)

    def reduction_range(self, a_operand: Operand, b_operand: Operand,
                        bounds: dict[str, list[Poly]], loop: KLoop) -> tuple[ir.Expr, ir.Expr]:
        """Where the reduction starts and stops. Conditions that zero an operand must hold
        wherever the output is covered, or bound the reduction index (``p < K``); a staged loop
        whose steps run past its stop must zero its products there."""
        if loop.tile is None:
            stop = self.normalizer.poly(loop.stop) if loop.stop.type.is_int else None
            self.operand_stops(a_operand, b_operand, bounds, loop, stop)
            return loop.start, loop.stop
        if loop.scale == 1:
            # range(start, stop, T): the last step runs past the stop, which the zeroing
            # conditions must name
            stop = self.normalizer.poly(loop.stop)
            padded = self.operand_stops(a_operand, b_operand, bounds, loop, stop)
            self.check_padding(padded, loop, loop.stop)
            return loop.start, loop.stop
        # range(start, stop) counting tiles of T: the steps cover [start*T, stop*T), narrowed
        # by the zeroing conditions to a stop K of their own
        padded = self.operand_stops(a_operand, b_operand, bounds, loop, None)
        tile = const(loop.tile)
        k_start = loop.start if is_literal(loop.start, 0) else mul(loop.start, tile)
        k_end = mul(loop.stop, tile)
        stops = {poly for pads in padded for poly in pads}
        if not stops:
            return k_start, k_end
        if len(stops) > 1:
            shown = sorted(format_expr(self.as_expr(poly)) for poly in stops)
            raise Refusal(f"the operands are zeroed past different depths ({' and '.join(shown)}"
                          "), which cannot be shown equal; bound both by the same size "
                          "parameter")
        k_poly = stops.pop()
        k_stop = self.as_expr(k_poly)
        count = _tile_count(loop.stop, loop.tile, self.normalizer, k_poly) \
            if is_literal(loop.start, 0) else None
        match count:
            case "floor":
                return k_start, k_end  # the steps stop at or before K: the zeroing is idle
            case "ceil":
                self.check_padding(padded, loop, k_stop)
                return k_start, k_stop
        self.check_padding(padded, loop, k_stop)
        return k_start, ir.Call(fn=MathFn.MIN, args=(k_stop, k_end), type=ElemType.I32)

    def operand_stops(self, a_operand: Operand, b_operand: Operand,
                      bounds: dict[str, list[Poly]], loop: KLoop,
                      k_stop: Poly | None) -> list[list[Poly]]:
        """For A and B, the depths ``K`` past which each is zeroed (``p < K``); every other
        zeroing condition must be implied by the bounds guard. ``k_stop``, when given, is the
        only depth allowed."""
        reduction = (STEP_START, STEP_OFFSET) if loop.tile is not None else (REDUCTION_INDEX,)
        out: list[list[Poly]] = []
        for operand in (a_operand, b_operand):
            pads: list[Poly] = []
            for cond in operand.conds:
                for conj in _conjuncts(cond):
                    depth = self.reduction_bound(conj, reduction, loop.scale)
                    if depth is not None and (k_stop is None or depth == k_stop):
                        pads.append(depth)
                        continue
                    if depth is not None and loop.tile is not None:
                        raise Refusal(f"the operand is zeroed by {format_expr(conj)}, but the "
                                      f"k-loop stops at {format_expr(loop.stop)}: "
                                      f"{format_expr(self.as_expr(depth))} cannot be shown "
                                      f"equal to {format_expr(loop.stop)}; bound both by the "
                                      "same size parameter")
                    kind, bound = self.bound(conj)
                    if kind and bound not in bounds[kind]:
                        raise Refusal(f"the operand is zeroed by {format_expr(conj)}, which the "
                                      "bounds guard does not imply"
                                      + self.other_bound(kind, bound, bounds[kind]))
            out.append(pads)
        return out

    def other_bound(self, kind: str, bound: Poly, guard: list[Poly]) -> str:
        """Why a zeroing bound is not the guard's, naming both."""
        what = COORD_NAMES.get(kind, "linear index")
        if not guard:
            return f" (the guard does not bound the {what})"
        shown = " and ".join(format_expr(self.as_expr(poly)) for poly in guard)
        return (f" (it bounds the {what} by {format_expr(self.as_expr(bound))}, the guard by "
                f"{shown}, which cannot be shown equal; bound both by the same size parameter)")

    def check_padding(self, padded: list[list[Poly]], loop: KLoop, k_stop: ir.Expr) -> None:
        """Past ``k_stop`` the last step's products must vanish without changing the sum: both
        operands zero for floats (and an initial value other than -0.0), one for integers."""
        floats = loop.acc_type.is_float
        if (floats and not all(padded)) or not any(padded):
            raise Refusal(f"the staged k-loop runs past {format_expr(k_stop)} without zeroing "
                          + ("both operands" if floats else "an operand")
                          + f" there (... if p < {format_expr(k_stop)} else 0)")
        init = loop.init
        if floats and not (isinstance(init, ir.Const)
                           and not (init.value == 0 and math.copysign(1.0, init.value) < 0)):
            raise Refusal(f"the staged k-loop adds +0.0 products past {format_expr(k_stop)}, "
                          "which would turn an initial -0.0 into +0.0; its initial value must "
                          "be a constant other than -0.0")

    def reduction_bound(self, conj: ir.Expr, reduction: tuple[str, ...],
                        scale: int) -> Poly | None:
        """``K`` when ``conj`` is ``p < K`` (``p <= K - 1``, ``K > p`` ...) for the reduction
        index ``p`` (``scale * t + kk`` in a staged loop), else None."""
        if not (isinstance(conj, ir.Binary) and conj.op in _UPPER_BOUNDS
                and conj.a.type.is_int):
            return None
        lhs, rhs = self.in_coordinates(conj.a), self.in_coordinates(conj.b)
        one = Poly.const(1)
        negative = {BinOp.LT: lhs - rhs, BinOp.LE: lhs - rhs - one, BinOp.GT: rhs - lhs,
                    BinOp.GE: rhs - lhs - one}[conj.op]  # the condition is negative < 0
        coefs, rest, bad = negative.split(reduction)
        weights = {STEP_START: Poly.const(scale)}
        if bad is not None or any(coefs[coord] != weights.get(coord, one)
                                  for coord in reduction):
            return None
        if any(atom in (ROW, COL, BATCH) or atom.startswith(("@", "%"))
               or (atom.startswith("#") and self.atoms.info[atom][0] != "expr")
               for atom in rest.atoms()):
            return None  # not a depth: it moves with the invocation
        return -rest


def _tile_count(stop: ir.Expr, tile: int, normalizer: Normalizer, depth: Poly) -> str | None:
    """``floor`` when ``stop`` is ``K // tile``, ``ceil`` when ``(K + tile - 1) // tile``, for
    the depth ``K``; else None."""
    if not (isinstance(stop, ir.Binary) and stop.op is BinOp.DIV
            and is_literal(stop.b, tile) and stop.a.type.is_int):
        return None
    numerator = normalizer.poly(stop.a)
    if numerator == depth:
        return "floor"
    return "ceil" if numerator == depth + Poly.const(tile - 1) else None


_UPPER_BOUNDS = (BinOp.LT, BinOp.LE, BinOp.GT, BinOp.GE)


def _conjuncts(cond: ir.Expr) -> Iterator[ir.Expr]:
    """The conjuncts of a condition, negations pushed inward."""
    match cond:
        case ir.Binary(op=BinOp.LAND, a=a, b=b):
            yield from _conjuncts(a)
            yield from _conjuncts(b)
        case ir.Unary(op=UnOp.NOT, x=ir.Binary(op=BinOp.LOR, a=a, b=b)):
            yield from _conjuncts(logical_not(a))
            yield from _conjuncts(logical_not(b))
        case ir.Unary(op=UnOp.NOT, x=ir.Unary(op=UnOp.NOT, x=x)):
            yield from _conjuncts(x)
        case ir.Unary(op=UnOp.NOT, x=ir.Binary(op=op, a=a, b=b)) if op in _NEGATED \
                and a.type.is_int:
            yield ir.Binary(op=_NEGATED[op], a=a, b=b, type=ElemType.BOOL)
        case ir.Binary(op=BinOp.LOR):
            raise Refusal(f"the guard {format_expr(cond)} uses 'or'; a bounds guard is a "
                          "conjunction")
        case _:
            yield cond


_NEGATED = {BinOp.LT: BinOp.GE, BinOp.GE: BinOp.LT, BinOp.LE: BinOp.GT, BinOp.GT: BinOp.LE,
            BinOp.EQ: BinOp.NE, BinOp.NE: BinOp.EQ}
"""The comparison that holds exactly when the key does not."""


def _mixed_operands(a: Access, b: Access) -> str:
    """Why operands of two element types are refused, and the conversion that makes them one:
    the narrower widened to the wider type, which keeps every value (a matrix unit multiplies
    operands of one type)."""
    what = (f"the operands have different element types: {a.array} is {a.elem}, {b.array} is "
            f"{b.elem}; a matrix unit multiplies operands of one type")
    if a.elem.is_float == b.elem.is_float and a.elem.bits != b.elem.bits:
        narrow, wide = (a, b) if a.elem.bits < b.elem.bits else (b, a)
        return (f"{what}: store {narrow.array} as {wide.elem} (exact) so that both are "
                f"{wide.elem}, or {wide.array} as {narrow.elem} if its values fit")
    return f"{what}: convert one of them so that both have the same type"
