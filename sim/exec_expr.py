"""Expressions compiled to closures: constants, variables, builtins, operators (short-circuit
``and``/``or`` and ``Select`` evaluate a side only where it is chosen), casts, calls."""

from __future__ import annotations

import numpy as np

from sarek import dtypes, ir
from sarek.errors import LaunchError
from sarek.ir import BinOp, ElemType, MathFn
from sim import arith
from sim.arith import Value
from sim.compiler import Core
from sim.memory import Site
from sim.state import ExprFn, Mask, Scope, State, combine, first_where


class Expressions(Core):
    """Compiles expressions; loads come from the memory family (``Core.load``)."""

    def expr(self, e: ir.Expr, scope: Scope, site: Site) -> ExprFn:
        match e:
            case ir.Const(value=value, type=t):
                c = arith.constant(value, t)
                return lambda st, m: c
            case ir.Var(name=name):
                slot = self._scalar(scope, name).slot
                return lambda st, m: st.env[slot]
            case ir.BuiltinValue(which=which):
                b = self.geo.builtin(which)
                return lambda st, m: b
            case ir.Unary(op=op, x=x):
                f, fx = arith.UNARY[op], self.expr(x, scope, site)
                return lambda st, m: f(fx(st, m))
            case ir.Binary():
                return self.binary(e, scope, site)
            case ir.Cast(x=x, type=dst):
                fx, src = self.expr(x, scope, site), x.type
                return lambda st, m: arith.convert(fx(st, m), src, dst)
            case ir.Bitcast(x=x, type=dst):
                fx, as_type = self.expr(x, scope, site), dtypes.numpy_dtype(dst)
                return lambda st, m: arith.reinterpret(fx(st, m), as_type)
            case ir.Load(array=name, index=index):
                return self.load(self._array(scope, name), self.expr(index, scope, site), site)
            case ir.Select(cond=cond, a=a, b=b):
                return self.select(*(self.expr(x, scope, site) for x in (cond, a, b)))
            case ir.Call(fn=fn, args=args, type=t):
                return self.call(fn, t, [self.expr(x, scope, site) for x in args])
        raise AssertionError(e)

    def binary(self, e: ir.Binary, scope: Scope, site: Site) -> ExprFn:
        fa, fb = self.expr(e.a, scope, site), self.expr(e.b, scope, site)
        op, t = e.op, e.a.type
        if op is BinOp.LAND or op is BinOp.LOR:
            return self.logical(op, fa, fb)
        if op in arith.SIMPLE_BINARY or (t.is_float and op in arith.FLOAT_BINARY):
            f = arith.SIMPLE_BINARY.get(op) or arith.FLOAT_BINARY[op]
            # A constant operand is captured: the hot loops of kernels are full of them.
            if isinstance(e.b, ir.Const):
                cb = arith.constant(e.b.value, e.b.type)
                fb = lambda st, m: cb  # noqa: E731
            if isinstance(e.a, ir.Const):
                ca = arith.constant(e.a.value, e.a.type)
                fa = lambda st, m: ca  # noqa: E731
            return _remembered(f, fa, fb, (_combined(e.a), _combined(e.b)))
        if op is BinOp.DIV or op is BinOp.REM:
            return self.int_division(op, t, fa, fb, site)
        return self.shift(op, t, fa, fb, site)

    def logical(self, op: BinOp, fa: ExprFn, fb: ExprFn) -> ExprFn:
        """Short-circuit ``and``/``or``: ``b`` runs only where ``a`` does not decide."""
        decides = op is BinOp.LOR  # the value of ``a`` that makes ``b`` irrelevant

        def run(st: State, m: Mask) -> Value:
            a = fa(st, m)
            if not isinstance(a, np.ndarray):
                return a if bool(a) == decides else fb(st, m)
            rest, any_left = self._narrow(m, ~a if decides else a)
            if not any_left:
                return a
            return (a | fb(st, rest)) if decides else (a & fb(st, rest))

        return run

    def select(self, fc: ExprFn, fa: ExprFn, fb: ExprFn) -> ExprFn:
        def run(st: State, m: Mask) -> Value:
            c = fc(st, m)
            if not isinstance(c, np.ndarray):
                return fa(st, m) if c else fb(st, m)
            on_a, any_a = self._narrow(m, c)
            if m is None and on_a is None:  # every invocation chooses a
                return fa(st, None)
            on_b, any_b = self._narrow(m, ~c)
            if not any_b:
                return fa(st, on_a)
            if not any_a:
                return fb(st, on_b)
            return np.where(c, fa(st, on_a), fb(st, on_b))

        return run

    def int_division(self, op: BinOp, t: ElemType, fa: ExprFn, fb: ExprFn, site: Site
                     ) -> ExprFn:
        f = arith.int_div if op is BinOp.DIV else np.fmod
        reason = f"{t} {'division' if op is BinOp.DIV else 'remainder'} by zero"

        def run(st: State, m: Mask) -> Value:
            a, b = fa(st, m), fb(st, m)
            zero = b == 0
            if isinstance(zero, np.ndarray):
                if zero.any():
                    bad = zero if m is None else zero & m
                    if bad.any():
                        self._fail(LaunchError, reason, site, bad)
            elif zero:
                self._fail(LaunchError, reason, site, m)
            return f(a, b)

        return run

    def shift(self, op: BinOp, t: ElemType, fa: ExprFn, fb: ExprFn, site: Site) -> ExprFn:
        f = arith.shl if op is BinOp.SHL else arith.shr

        def run(st: State, m: Mask) -> Value:
            a, b = fa(st, m), fb(st, m)
            ok = arith.shift_amount_ok(b, t)
            if isinstance(ok, np.ndarray):
                bad = ~ok if m is None else ~ok & m
                if bad.any():
                    self._fail(LaunchError, f"{op} of {t} by {first_where(b, bad)}: the amount "
                               f"must lie in [0, {t.bits})", site, bad)
            elif not ok:
                self._fail(LaunchError, f"{op} of {t} by {int(b)}: the amount must lie in "
                           f"[0, {t.bits})", site, m)
            return f(a, b)

        return run

    def call(self, fn: MathFn, t: ElemType, fargs: list[ExprFn]) -> ExprFn:
        if fn is MathFn.FMA and t is ElemType.F64:
            fa, fb, fc = fargs
            return lambda st, m: arith.fma_f64(fa(st, m), fb(st, m), fc(st, m), m)
        f = arith.math_fn(fn, t)
        if len(fargs) == 1:
            (fx,) = fargs
            return lambda st, m: f(fx(st, m))
        return lambda st, m: f(*(g(st, m) for g in fargs))


def _combined(e: ir.Expr) -> bool:
    """Whether ``e`` compiles to ``_remembered``: its large results are arrays ``combine`` has
    just made, which nothing but the operation using them refers to."""
    return isinstance(e, ir.Binary) and (e.op in arith.SIMPLE_BINARY or (
        e.a.type.is_float and e.op in arith.FLOAT_BINARY))


def _remembered(f: np.ufunc, fa: ExprFn, fb: ExprFn, temporaries: tuple[bool, bool]
                ) -> ExprFn:
    """``f(a, b)`` (``combine``), the last result kept while it and its operands are small: a
    loop evaluates its loop-invariant index arithmetic (``ty*16 + tx``, ``row*k``) on every
    trip, and the same operand objects give the same result (values are never changed in
    place; the kept operands keep their identities from being reused)."""
    last: list[Value] = [_NOTHING, _NOTHING, _NOTHING]  # a, b, f(a, b)

    def run(st: State, m: Mask) -> Value:
        a, b = fa(st, m), fb(st, m)
        if a is last[0] and b is last[1]:
            return last[2]
        if a.size <= _REMEMBERED and b.size <= _REMEMBERED:
            out = combine(f, a, b, st.buffers)
            if out.size <= _REMEMBERED:
                last[0], last[1], last[2] = a, b, out
            return out
        # a large result is never kept, so an operand computed by ``combine`` is a temporary
        return combine(f, a, b, st.buffers, temporaries)

    return run


_NOTHING = object()
_REMEMBERED = 1 << 12
"""The most elements of a result (and of each operand) ``_remembered`` keeps."""
