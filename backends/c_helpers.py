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


def helpers(fn: str, types: dict[ElemType, str], clz: tuple[str, str] | None = None) -> str:
    """C text of the helpers, each declared with the prefix ``fn`` (``__device__ inline``).
    With ``clz``, the target's counts of leading zeros of 32- and 64-bit integers, also the
    conversions of integers wider than f32's significand to f32 rounding to odd, through which
    they reach bf16 with a single rounding."""
    out = []
    fn = f"{fn} " if fn else ""
    if clz is not None:
        f32 = types[ElemType.F32]
        for (signed, unsigned), count in zip(((ElemType.I32, ElemType.U32),
                                              (ElemType.I64, ElemType.U64)), clz, strict=True):
            u, i, bits = types[unsigned], types[signed], unsigned.bits
            # Keep the top 24 bits and fold every lower one into the last kept bit (round to
            # odd): the f32 is exact, and rounding it to bf16 is the single correct rounding.
            out.append(f"{fn}{f32} sk_{unsigned.value}_to_f32_odd({u} a) {{ int s = "
                       f"{bits - 24} - (int){count}(({i})a); if (s > 0) {{ {u} keep = a >> s "
                       f"<< s; if (keep != a) keep |= ({u})1 << s; a = keep; }} "
                       f"return ({f32})a; }}")
            out.append(f"{fn}{f32} sk_{signed.value}_to_f32_odd({i} x) {{ {u} m = x < 0 ? "
                       f"({u})0 - ({u})x : ({u})x; {f32} f = sk_{unsigned.value}_to_f32_odd(m); "
                       f"return x < 0 ? -f : f; }}")
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
