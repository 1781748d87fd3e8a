"""Exact polynomials with integer coefficients over named atoms: the normal form in which the
recognizer compares index expressions and reads strides off them."""

from __future__ import annotations

from typing import TypeAlias

Monomial: TypeAlias = tuple[str, ...]
"""A product of atoms, sorted (an atom appears once per power); ``()`` is the constant term."""


class Poly:
    """A polynomial with integer coefficients over named atoms (exact, no wrap-around)."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Monomial, int]) -> None:
        self.terms = {mono: coef for mono, coef in terms.items() if coef != 0}

    @staticmethod
    def const(value: int) -> Poly:
        """The constant polynomial ``value``."""
        return Poly({(): value})

    @staticmethod
    def atom(name: str) -> Poly:
        """The polynomial made of the one atom ``name``."""
        return Poly({(name,): 1})

    def __add__(self, other: Poly) -> Poly:
        out = dict(self.terms)
        for mono, coef in other.terms.items():
            out[mono] = out.get(mono, 0) + coef
        return Poly(out)

    def __neg__(self) -> Poly:
        return Poly({mono: -coef for mono, coef in self.terms.items()})

    def __sub__(self, other: Poly) -> Poly:
        return self + (-other)

    def __mul__(self, other: Poly) -> Poly:
        out: dict[Monomial, int] = {}
        for mono1, coef1 in self.terms.items():
            for mono2, coef2 in other.terms.items():
                mono = tuple(sorted(mono1 + mono2))
                out[mono] = out.get(mono, 0) + coef1 * coef2
        return Poly(out)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    @property
    def constant(self) -> int | None:
        """The value when the polynomial is a constant, else None."""
        if not self.terms:
            return 0
        if len(self.terms) == 1 and () in self.terms:
            return self.terms[()]
        return None

    def atoms(self) -> set[str]:
        """Every atom that occurs in a term."""
        return {atom for mono in self.terms for atom in mono}

    def key(self) -> tuple[tuple[Monomial, int], ...]:
        """A hashable value equal for equal polynomials (the terms, sorted)."""
        return tuple(sorted(self.terms.items()))

    def subst(self, values: dict[str, Poly]) -> Poly:
        """Simultaneous substitution of atoms by polynomials."""
        out = Poly({})
        for mono, coef in self.terms.items():
            term = Poly.const(coef)
            rest: list[str] = []
            for atom in mono:
                if atom in values:
                    term = term * values[atom]
                else:
                    rest.append(atom)
            out = out + term * Poly({tuple(rest): 1})
        return out

    def split(self, coords: tuple[str, ...]) -> tuple[dict[str, Poly], Poly, Monomial | None]:
        """The coefficient of each coordinate and the rest, for an affine polynomial; the third
        value is the first monomial that is not affine in ``coords`` (else None)."""
        coefs: dict[str, dict[Monomial, int]] = {coord: {} for coord in coords}
        rest: dict[Monomial, int] = {}
        for mono, coef in self.terms.items():
            hits = [atom for atom in mono if atom in coefs]
            if len(hits) > 1:
                return {}, Poly({}), mono
            if hits:
                others = list(mono)
                others.remove(hits[0])
                coefs[hits[0]][tuple(others)] = coef
            else:
                rest[mono] = coef
        return {coord: Poly(terms) for coord, terms in coefs.items()}, Poly(rest), None
