"""Integer index expressions as polynomials (``sarek.affine.Poly``): parameters, placeholders
and launch builtins become atoms, and the parts that are not polynomial (an expression over
parameters only, an index divided by one) become named atoms of an ``AtomTable``, so that equal
parts compare equal."""

from __future__ import annotations

from typing import TypeAlias

from sarek import ir
from sarek.affine import Poly
from sarek.ir import BinOp, ElemType, UnOp
from sarek.ir_format import format_expr
from sarek.ir_walk import distinct_subexpressions
from sarek.matrix_pattern.vocabulary import I32_MAX, I32_MIN, Refusal

Quotient: TypeAlias = tuple[Poly, Poly, ir.Expr]
"""A ``div``/``rem`` atom's payload: numerator, denominator, and the denominator as written."""


def quotient(payload: ir.Expr | Quotient) -> Quotient:
    """The payload of a ``div``/``rem`` atom (an ``expr`` atom's payload is an expression)."""
    assert isinstance(payload, tuple)
    return payload


class AtomTable:
    """Names the non-polynomial parts of index expressions, so that equal ones share a name:
    ``expr`` atoms are invocation-independent expressions over parameters (``k // 2``,
    ``min(m, 8)``), ``div``/``rem`` atoms divide an index by such an expression."""

    def __init__(self) -> None:
        self.by_key: dict[object, str] = {}
        self.info: dict[str, tuple[str, ir.Expr | Quotient]] = {}

    def intern(self, kind: str, key: object, payload: ir.Expr | Quotient) -> str:
        """The atom's name for ``(kind, key)``, made (with ``payload``) on first use."""
        full = (kind, key)
        if full not in self.by_key:
            name = f"#{len(self.by_key)}"
            self.by_key[full] = name
            self.info[name] = (kind, payload)
        return self.by_key[full]


def is_uniform(e: ir.Expr) -> bool:
    """Whether ``e`` depends only on scalar parameters and constants."""
    for x in distinct_subexpressions(e):
        match x:
            case ir.BuiltinValue() | ir.Load():
                return False
            case ir.Var(name=name) if name.startswith("%"):
                return False
    return True


def _canonical_text(e: ir.Expr) -> str:
    """A text equal for structurally equal expressions (the key of an ``expr`` atom)."""
    return e.model_dump_json(exclude_none=True)


class Normalizer:
    """Integer expressions to polynomials. ``subst`` replaces builtins (by their key
    ``@thread_idx.x`` ...) with polynomials; placeholders and parameters become atoms."""

    def __init__(self, atoms: AtomTable, subst: dict[str, Poly],
                 seen: list[Poly] | None = None) -> None:
        self.atoms = atoms
        self.subst = subst
        self.memo: dict[int, Poly] = {}
        self.seen = seen  # every polynomial made (for the global-index analysis)

    def poly(self, e: ir.Expr) -> Poly:
        """``e`` as a polynomial; raises ``Refusal`` when it is not an affine-able index."""
        key = id(e)
        if key not in self.memo:
            poly = self._poly(e)
            self.memo[key] = poly
            if self.seen is not None:
                self.seen.append(poly)
        return self.memo[key]

    def _opaque(self, e: ir.Expr) -> Poly:
        return Poly.atom(self.atoms.intern("expr", _canonical_text(e), e))

    def _poly(self, e: ir.Expr) -> Poly:
        if not e.type.is_int:
            raise Refusal(f"the index uses the {e.type} value {format_expr(e)}")
        match e:
            case ir.Const(value=value):
                if not I32_MIN <= int(value) <= I32_MAX:
                    raise Refusal(f"the index uses the constant {value}, which does not fit i32")
                return Poly.const(int(value))
            case ir.Var(name=name, type=t):
                if not name.startswith("%") and t is not ElemType.I32:
                    raise Refusal(f"index arithmetic must be i32; parameter {name!r} is {t}")
                return Poly.atom(name)
            case ir.BuiltinValue(which=which):
                if which.name.startswith(("GRID_DIM", "SUBGROUP")):
                    raise Refusal(f"the index uses {which.value}")
                key = f"@{which.value}"
                return self.subst.get(key, Poly.atom(key))
            case ir.Binary(op=BinOp.ADD, a=a, b=b):
                return self.poly(a) + self.poly(b)
            case ir.Binary(op=BinOp.SUB, a=a, b=b):
                return self.poly(a) - self.poly(b)
            case ir.Binary(op=BinOp.MUL, a=a, b=b):
                return self.poly(a) * self.poly(b)
            case ir.Binary(op=BinOp.SHL, a=a, b=ir.Const(value=int() as shift)) \
                    if 0 <= shift < 31:
                return self.poly(a) * Poly.const(1 << shift)
            case ir.Unary(op=UnOp.NEG, x=x):
                return -self.poly(x)
            case ir.Cast(x=x) if x.type in (ElemType.I32, ElemType.U32, ElemType.I64,
                                             ElemType.U64) and e.type.bits >= 32:
                return self.poly(x)
            case ir.Binary(op=BinOp.DIV | BinOp.REM as op, a=a, b=b) if is_uniform(b) \
                    and not is_uniform(a):
                num, den = self.poly(a), self.poly(b)
                kind = "div" if op is BinOp.DIV else "rem"
                return Poly.atom(self.atoms.intern(kind, (num.key(), den.key()), (num, den, b)))
            case ir.Load(array=name):
                raise Refusal(f"the index reads memory ({name}[...]): an indirect access")
        if is_uniform(e):
            return self._opaque(e)
        raise Refusal(f"the index {format_expr(e)} is not affine")

