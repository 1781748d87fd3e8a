"""Helper functions C-like targets print before a kernel: the operations whose C spelling
would be undefined or differently rounded (signed division edge cases, saturating float to
integer conversion, integer absolute value)."""

from __future__ import annotations

from sarek.ir import ElemType

SIGNED = (ElemType.I8, ElemType.I16, ElemType.I32, ElemType.I64)
UNSIGNED = {ElemType.I8: ElemType.U8, ElemType.I16: ElemType.U16, ElemType.I32: ElemType.U32,
            ElemType.I64: ElemType.U64}
"""The unsigned type of each signed one's width (signed arithmetic is done in it, to wrap)."""
INTS = (ElemType.I8, ElemType.U8, ElemType.I16, ElemType.U16, ElemType.I32, ElemType.U32,
        ElemType.I64, ElemType.U64)


def helpers(fn: str, types: dict[ElemType, str], clz64: str = "") -> str:
    """C text of the helpers, each declared with the prefix ``fn`` (``__device__ inline``).
    With ``clz64``, the target's count of leading zeros of a 64-bit integer, also the
    conversions of 64-bit integers to f64 rounding to odd, through which they reach bf16 with
    a single rounding."""
    out = []
    fn = f"{fn} " if fn else ""
    if clz64:
        u64, f64 = types[ElemType.U64], types[ElemType.F64]
        # Keep the top 53 bits and fold every lower one into the last kept bit (round to odd):
        # the f64 is exact, and rounding it to bf16 once more is the single correct rounding.
        out.append(f"{fn}{f64} sk_u64_to_f64_odd({u64} a) {{ int s = 11 - (int){clz64}(a); "
                   f"if (s > 0) {{ {u64} keep = a >> s << s; if (keep != a) keep |= "
                   f"({u64})1 << s; a = keep; }} return ({f64})a; }}")
        i64 = types[ElemType.I64]
        out.append(f"{fn}{f64} sk_i64_to_f64_odd({i64} x) {{ {u64} m = x < 0 ? ({u64})0 - "
                   f"({u64})x : ({u64})x; {f64} d = sk_u64_to_f64_odd(m); "
                   f"return x < 0 ? -d : d; }}")
    for t in SIGNED:
        c, u = types[t], types[UNSIGNED[t]]
        out.append(f"{fn}{c} sk_div_{t.value}({c} a, {c} b) "
                   f"{{ return b == -1 ? ({c})({u})(0u - ({u})a) : ({c})(a / b); }}")
        out.append(f"{fn}{c} sk_rem_{t.value}({c} a, {c} b) "
                   f"{{ return b == -1 ? ({c})0 : ({c})(a % b); }}")
        out.append(f"{fn}{c} sk_abs_{t.value}({c} a) "
                   f"{{ return a < 0 ? ({c})({u})(0u - ({u})a) : a; }}")
    for f in (ElemType.F32, ElemType.F64):
        ft = types[f]
        for t in INTS:
            c = types[t]
            lo = -(1 << (t.bits - 1)) if t.is_signed else 0
            hi = (1 << (t.bits - 1)) - 1 if t.is_signed else (1 << t.bits) - 1
            # Truncate toward zero, saturate, NaN -> 0 (PTX cvt.rzi semantics).
            lo_lit = f"({c})({types[UNSIGNED.get(t, t)]}){lo}" if lo else f"({c})0"
            suffix = "ULL" if t.bits == 64 else "u"
            out.append(
                f"{fn}{c} sk_cvt_{t.value}_{f.value}({ft} x) {{ return x != x ? ({c})0 : "
                f"x <= ({ft}){lo}.0 ? {lo_lit} : x >= ({ft}){hi + 1}.0 ? ({c}){hi}{suffix} : "
                f"({c})x; }}")
    return "\n".join(out)
