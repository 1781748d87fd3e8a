"""The SPIR-V printer's expressions, conversions and memory accesses: each IR expression as
instructions of the module under construction, with the IR's exact semantics (wrapping
integers, ``NoContraction``, once-rounded conversions; ``specs/backends.md``, "SPIR-V")."""

from __future__ import annotations

from backends.cstyle import EmitError
from backends.spirv.builder import (
    BUILTIN_VECTORS,
    SIGNED_OF,
    TRANSCENDENTAL,
    UNSIGNED_OF,
    ArraySym,
    ModuleBuilder,
    Pointer,
    T,
    may_fault,
    memory_type,
    value_type,
)
from sarek import ir
from sarek.ir import BinOp, Builtin, ElemType, MathFn, UnOp


class ExpressionPrinter(ModuleBuilder):
    """``ModuleBuilder`` that prints expressions."""

    # ------------------------------------------------------------------ expressions

    def value(self, e: ir.Expr) -> str:
        """The id of ``e``'s value (of ``value_type(e.type)``)."""
        match e:
            case ir.Const(value=v, type=t):
                return self.const(v, t)
            case ir.Var(name=name):
                sym = self.scope.get(name)
                if isinstance(sym, str):
                    return sym
                if isinstance(sym, Pointer):
                    return self.op(self.type_of(sym.type), "OpLoad", sym.var)
                raise EmitError(f"{name!r} is not a scalar in scope")
            case ir.BuiltinValue(which=w):
                return self.builtin(w)
            case ir.Unary(op=op, x=x, type=t):
                return self.unary(op, self.value(x), t)
            case ir.Binary():
                return self.binary(e)
            case ir.Cast(x=x, type=t):
                return self.convert(self.value(x), x.type, t)
            case ir.Bitcast(x=x, type=t):
                return self.bitcast(self.value(x), x.type, t)
            case ir.Load(array=name, index=index):
                return self.load(name, index)
            case ir.Select(cond=c, a=a, b=b, type=t):
                cond = self.value(c)
                if may_fault(a) or may_fault(b):
                    return self.lazy(cond, a, b, t)
                return self.op(self.type_of(t), "OpSelect", cond, self.value(a), self.value(b))
            case ir.Call(fn=fn, args=args, type=t):
                return self.call(fn, [self.value(a) for a in args], t)
        raise AssertionError(f"unhandled expression {e!r}")

    def lazy(self, cond: str, a: ir.Expr, b: ir.Expr, t: ElemType) -> str:
        """``cond ? a : b`` evaluating only the chosen side, through a selection construct."""
        then, other, merge = self.fresh("sel_a"), self.fresh("sel_b"), self.fresh("sel_end")
        self.do("OpSelectionMerge", merge, "None")
        self.do("OpBranchConditional", cond, then, other)
        self.start(then)
        va, end_a = self.value(a), self.label
        self.branch(merge)
        self.start(other)
        vb, end_b = self.value(b), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(self.type_of(t), "OpPhi", va, end_a, vb, end_b)

    def builtin(self, which: Builtin) -> str:
        """Builtins are read once, in the entry block."""
        if which in self.builtins:
            return self.builtins[which]
        i32, u32 = self.type_of(T.I32), self.type_of(T.U32)
        group, _, axis = which.value.partition(".")
        out = self.fresh(group)
        if group in BUILTIN_VECTORS:
            var = self.input_builtin(BUILTIN_VECTORS[group], vector=True)
            v3 = self.declare(("v3",), "%v3u32", f"{{id}} = OpTypeVector {u32} 3")
            whole, part = self.fresh(), self.fresh()
            self.entry += [f"{whole} = OpLoad {v3} {var}",
                           f"{part} = OpCompositeExtract {u32} {whole} {'xyz'.index(axis)}",
                           f"{out} = OpBitcast {i32} {part}"]
        elif group == "block_dim":
            size = self.workgroup_size()["xyz".index(axis)]
            self.entry.append(f"{out} = OpBitcast {i32} {size}")
        elif which is Builtin.SUBGROUP_SIZE:
            return self.const(self.subgroup(), T.I32)
        else:
            # Subgroups are the linear thread index divided by the kernel's subgroup size,
            # as in the simulator (the runner pins the device's subgroup size to it).
            index = self.input_builtin("LocalInvocationIndex", vector=False)
            raw, linear = self.fresh(), self.fresh()
            opname = "OpUDiv" if which is Builtin.SUBGROUP_ID else "OpUMod"
            self.entry += [f"{raw} = OpLoad {u32} {index}",
                           f"{linear} = {opname} {u32} {raw} {self.u32(self.subgroup())}",
                           f"{out} = OpBitcast {i32} {linear}"]
        self.builtins[which] = out
        return out

    def subgroup(self) -> int:
        return self.kernel.subgroup or 32

    def input_builtin(self, name: str, vector: bool) -> str:
        u32 = self.type_of(T.U32)
        t = self.declare(("v3",), "%v3u32", f"{{id}} = OpTypeVector {u32} 3") if vector else u32
        ptr = self.pointer("Input", t)
        key = ("builtin", name)
        if key not in self.ids:
            var = self.declare(key, f"%{name}", f"{{id}} = OpVariable {ptr} Input")
            self.decorations.append(f"OpDecorate {var} BuiltIn {name}")
            self.interface.append(var)
        return self.ids[key]

    def workgroup_size(self) -> list[str]:
        u32 = self.type_of(T.U32)
        block = self.kernel.block or (1, 1, 1)
        out = []
        for axis, n in enumerate(block):
            key = ("local_size", axis)
            if key not in self.ids:
                self.decorations.append(f"OpDecorate %local_size_{'xyz'[axis]} SpecId {axis}")
            out.append(self.declare(key, f"%local_size_{'xyz'[axis]}",
                                    f"{{id}} = OpSpecConstant {u32} {n}"))
        return out

    def unary(self, op: UnOp, x: str, t: ElemType) -> str:
        ty = self.type_of(t)
        match op:
            case UnOp.NOT:
                return self.op(ty, "OpLogicalNot", x)
            case UnOp.BITNOT:
                return self.op(ty, "OpNot", x)
            case UnOp.NEG if t.is_int:
                return self.op(ty, "OpISub", self.const(0, t), x)  # wraps: -MIN is MIN
        # float negation flips the sign bit, NaN payloads included (as NumPy does)
        return self.sign_bits(x, t, "OpBitwiseXor")

    def sign_bits(self, x: str, t: ElemType, opname: str) -> str:
        """``x`` with its sign bit flipped (OpBitwiseXor) or cleared (OpBitwiseAnd)."""
        u = UNSIGNED_OF[t.bits]
        sign = 1 << (t.bits - 1)
        mask = sign if opname == "OpBitwiseXor" else sign - 1
        bits = self.op(self.type_of(u), "OpBitcast", x)
        changed = self.op(self.type_of(u), opname, bits, self.const(mask, u))
        return self.op(self.type_of(t), "OpBitcast", changed)

    def binary(self, e: ir.Binary) -> str:
        op, t = e.op, e.a.type
        if op in (BinOp.LAND, BinOp.LOR):
            return self.logical(e)
        a = self.value(e.a)
        b = self.value(e.b)
        bool_t = self.type_of(T.BOOL)
        if op in ir.COMPARISONS:
            return self.op(bool_t, self.comparison(op, t), a, b)
        ty = self.type_of(t)
        if t is T.BOOL:
            name = {BinOp.AND: "OpLogicalAnd", BinOp.OR: "OpLogicalOr",
                    BinOp.XOR: "OpLogicalNotEqual"}[op]
            return self.op(ty, name, a, b)
        if t.is_float:
            if op is BinOp.DIV and t is T.F32:
                return self.via_f64(a, b, "OpFDiv")
            name = {BinOp.ADD: "OpFAdd", BinOp.SUB: "OpFSub", BinOp.MUL: "OpFMul",
                    BinOp.DIV: "OpFDiv"}[op]
            return self.exact(ty, name, a, b)
        match op:
            case BinOp.ADD | BinOp.SUB | BinOp.MUL:
                name = {BinOp.ADD: "OpIAdd", BinOp.SUB: "OpISub", BinOp.MUL: "OpIMul"}[op]
                return self.op(ty, name, a, b)
            case BinOp.DIV | BinOp.REM:
                return self.division(op, t, a, b, e.b)
            case BinOp.AND | BinOp.OR | BinOp.XOR:
                name = {BinOp.AND: "OpBitwiseAnd", BinOp.OR: "OpBitwiseOr",
                        BinOp.XOR: "OpBitwiseXor"}[op]
                return self.op(ty, name, a, b)
            case BinOp.SHL:
                return self.op(ty, "OpShiftLeftLogical", a, b)
            case BinOp.SHR:
                name = "OpShiftRightArithmetic" if t.is_signed else "OpShiftRightLogical"
                return self.op(ty, name, a, b)
        raise AssertionError(op)

    def comparison(self, op: BinOp, t: ElemType) -> str:
        if t is T.BOOL:
            return {BinOp.EQ: "OpLogicalEqual", BinOp.NE: "OpLogicalNotEqual"}[op]
        if t.is_float:  # ordered, except != which NaN satisfies
            return {BinOp.LT: "OpFOrdLessThan", BinOp.LE: "OpFOrdLessThanEqual",
                    BinOp.GT: "OpFOrdGreaterThan", BinOp.GE: "OpFOrdGreaterThanEqual",
                    BinOp.EQ: "OpFOrdEqual", BinOp.NE: "OpFUnordNotEqual"}[op]
        if op is BinOp.EQ:
            return "OpIEqual"
        if op is BinOp.NE:
            return "OpINotEqual"
        sign = "S" if t.is_signed else "U"
        return {BinOp.LT: f"Op{sign}LessThan", BinOp.LE: f"Op{sign}LessThanEqual",
                BinOp.GT: f"Op{sign}GreaterThan", BinOp.GE: f"Op{sign}GreaterThanEqual"}[op]

    def logical(self, e: ir.Binary) -> str:
        """Short-circuit ``and``/``or``: ``b`` is evaluated only where ``a`` does not decide,
        through a selection construct when evaluating it could fault."""
        a = self.value(e.a)
        bool_t = self.type_of(T.BOOL)
        if not may_fault(e.b):
            name = "OpLogicalAnd" if e.op is BinOp.LAND else "OpLogicalOr"
            return self.op(bool_t, name, a, self.value(e.b))
        rhs, merge = self.fresh("rhs"), self.fresh("rhs_end")
        start = self.label
        self.do("OpSelectionMerge", merge, "None")
        targets = (rhs, merge) if e.op is BinOp.LAND else (merge, rhs)
        self.do("OpBranchConditional", a, *targets)
        self.start(rhs)
        b, end = self.value(e.b), self.label
        self.branch(merge)
        self.start(merge)
        return self.op(bool_t, "OpPhi", a, start, b, end)

    def division(self, op: BinOp, t: ElemType, a: str, b: str, divisor: ir.Expr) -> str:
        ty = self.type_of(t)
        if not t.is_signed:
            return self.op(ty, "OpUDiv" if op is BinOp.DIV else "OpUMod", a, b)
        # Vulkan leaves OpSRem and OpSMod undefined for negative operands (the H200 gives
        # other answers): the remainder is a - (a / b) * b from the truncating OpSDiv.
        if isinstance(divisor, ir.Const) and int(divisor.value) not in (0, -1):
            quotient = self.op(ty, "OpSDiv", a, b)
        else:
            # MIN / -1 is undefined in SPIR-V: divide by 1 instead and pick the wrapped answer
            minus_one = self.op(self.type_of(T.BOOL), "OpIEqual", b, self.const(-1, t))
            safe = self.op(ty, "OpSelect", minus_one, self.const(1, t), b)
            divided = self.op(ty, "OpSDiv", a, safe)
            quotient = self.op(ty, "OpSelect", minus_one,
                               self.op(ty, "OpISub", self.const(0, t), a), divided)
        if op is BinOp.DIV:
            return quotient
        return self.op(ty, "OpISub", a, self.op(ty, "OpIMul", quotient, b))

    def via_f64(self, a: str, b: str | None, opname: str) -> str:
        """An f32 division (or square root, ``b`` None) computed in f64 and rounded once to
        f32: correctly rounded, since f64 carries more than twice f32's precision (and the
        result stays on the right side of every f32 rounding boundary even if the f64
        operation is a few f64 ulps off, as Vulkan allows)."""
        f32, f64 = self.type_of(T.F32), self.type_of(T.F64)
        wa = self.op(f64, "OpFConvert", a)
        if b is None:
            wide = self.glsl_op(f64, "Sqrt", wa)
        else:
            wide = self.exact(f64, opname, wa, self.op(f64, "OpFConvert", b))
        return self.op(f32, "OpFConvert", wide)

    def call(self, fn: MathFn, args: list[str], t: ElemType) -> str:
        ty = self.type_of(t)
        bool_t = self.type_of(T.BOOL)
        if t.is_int:
            match fn:
                case MathFn.ABS:
                    neg = self.op(bool_t, "OpSLessThan" if t.is_signed else "OpULessThan",
                                  args[0], self.const(0, t))
                    flipped = self.op(ty, "OpISub", self.const(0, t), args[0])
                    return self.op(ty, "OpSelect", neg, flipped, args[0])
                case MathFn.MIN | MathFn.MAX:
                    sign = "S" if t.is_signed else "U"
                    cmp = f"Op{sign}LessThan" if fn is MathFn.MIN else f"Op{sign}GreaterThan"
                    pick = self.op(bool_t, cmp, args[0], args[1])
                    return self.op(ty, "OpSelect", pick, args[0], args[1])
            raise EmitError(f"{fn.value} is not defined on {t}")
        match fn:
            case MathFn.ABS:
                return self.sign_bits(args[0], t, "OpBitwiseAnd")
            case MathFn.MIN | MathFn.MAX:
                return self.min_max(fn, args[0], args[1], t)
            case MathFn.SQRT:
                if t is T.F32:
                    return self.via_f64(args[0], None, "Sqrt")
                return self.glsl_op(ty, "Sqrt", args[0])
            case MathFn.FLOOR | MathFn.CEIL:
                return self.glsl_op(ty, "Floor" if fn is MathFn.FLOOR else "Ceil", args[0])
            case MathFn.FMA:
                return self.glsl_op(ty, "Fma", *args)
        if t is T.F64:
            raise EmitError(f"{fn.value} on f64: Vulkan's GLSL.std.450 has {fn.value} for 16- "
                            "and 32-bit floats only")
        return self.glsl_op(ty, TRANSCENDENTAL[fn], args[0])

    def min_max(self, fn: MathFn, a: str, b: str, t: ElemType) -> str:
        """IEEE minimumNumber / maximumNumber: a NaN loses to a number, -0 is below +0."""
        ty, bool_t = self.type_of(t), self.type_of(T.BOOL)
        u = self.type_of(UNSIGNED_OF[t.bits])
        first, second = ("OpFOrdLessThan", "OpFOrdGreaterThan") if fn is MathFn.MIN else (
            "OpFOrdGreaterThan", "OpFOrdLessThan")
        a_wins = self.op(bool_t, first, a, b)
        b_wins = self.op(bool_t, second, a, b)
        # equal: the bits or-ed (min) or and-ed (max) give -0 / +0 for a pair of zeros
        ua, ub = self.op(u, "OpBitcast", a), self.op(u, "OpBitcast", b)
        tie = self.op(ty, "OpBitcast", self.op(
            u, "OpBitwiseOr" if fn is MathFn.MIN else "OpBitwiseAnd", ua, ub))
        out = self.op(ty, "OpSelect", b_wins, b, tie)
        out = self.op(ty, "OpSelect", a_wins, a, out)
        out = self.op(ty, "OpSelect", self.op(bool_t, "OpIsNan", b), a, out)
        return self.op(ty, "OpSelect", self.op(bool_t, "OpIsNan", a), b, out)

    # ------------------------------------------------------------------ conversions

    def convert(self, x: str, src: ElemType, dst: ElemType) -> str:
        """``x`` (a value of ``src``) converted to ``dst`` as ``specs/ir.md`` says."""
        if src is dst:
            return x
        bool_t = self.type_of(T.BOOL)
        if dst is T.BOOL:
            if src.is_int:
                return self.op(bool_t, "OpINotEqual", x, self.const(0, src))
            wide, wt = (x, src) if src in (T.F32, T.F64) else (self.convert(x, src, T.F32),
                                                                T.F32)
            return self.op(bool_t, "OpFUnordNotEqual", wide, self.const(0.0, wt))
        if src is T.BOOL:
            one = self.const(1.0 if dst.is_float else 1, dst)
            zero = self.const(0.0 if dst.is_float else 0, dst)
            return self.op(self.type_of(dst), "OpSelect", x, one, zero)
        if src.is_int and dst.is_int:
            return self.int_convert(x, src, dst)
        if src.is_int:
            return self.int_to_float(x, src, dst)
        if dst.is_int:
            return self.float_to_int(x, src, dst)
        return self.float_to_float(x, src, dst)

    def int_convert(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src.bits == dst.bits:
            return self.op(self.type_of(dst), "OpBitcast", x)
        if src.is_signed:  # sign-extends or truncates
            return self.op(self.type_of(dst), "OpSConvert", x)
        wide = self.op(self.type_of(UNSIGNED_OF[dst.bits]), "OpUConvert", x)
        return wide if not dst.is_signed else self.op(self.type_of(dst), "OpBitcast", wide)

    def int_to_float(self, x: str, src: ElemType, dst: ElemType) -> str:
        name = "OpConvertSToF" if src.is_signed else "OpConvertUToF"
        if dst in (T.F32, T.F64):
            return self.op(self.type_of(dst), name, x)
        if dst is T.F16:  # exact in f32 below 2^24; above, both roundings overflow to inf
            return self.op(self.type_of(T.F16), "OpFConvert",
                           self.op(self.type_of(T.F32), name, x))
        if src.bits <= 32:  # exact in f64, then rounded once
            return self.f64_to_bf16(self.op(self.type_of(T.F64), name, x))
        return self.f64_to_bf16(self.int64_to_f64_odd(x, src))

    def float_to_int(self, x: str, src: ElemType, dst: ElemType) -> str:
        """Truncation toward zero, saturating, NaN to 0 (PTX ``cvt.rzi``)."""
        if src.is_storage_only:
            x, src = self.convert(x, src, T.F32), T.F32
        bool_t, ty = self.type_of(T.BOOL), self.type_of(dst)
        lo = -(1 << (dst.bits - 1)) if dst.is_signed else 0
        hi = (1 << (dst.bits - 1)) - 1 if dst.is_signed else (1 << dst.bits) - 1
        nan = self.op(bool_t, "OpIsNan", x)
        low = self.op(bool_t, "OpFOrdLessThanEqual", x, self.const(float(lo), src))
        high = self.op(bool_t, "OpFOrdGreaterThanEqual", x, self.const(float(hi + 1), src))
        outside = self.op(bool_t, "OpLogicalOr", nan, self.op(bool_t, "OpLogicalOr", low, high))
        # the conversion only sees values inside the range (outside it SPIR-V is undefined)
        inside = self.op(self.type_of(src), "OpSelect", outside, self.const(0.0, src), x)
        cut = self.op(ty, "OpConvertFToS" if dst.is_signed else "OpConvertFToU", inside)
        out = self.op(ty, "OpSelect", high, self.const(hi, dst), cut)
        out = self.op(ty, "OpSelect", low, self.const(lo, dst), out)
        return self.op(ty, "OpSelect", nan, self.const(0, dst), out)

    def float_to_float(self, x: str, src: ElemType, dst: ElemType) -> str:
        if src is T.BF16:
            wide = self.bf16_to_f32(x)
            return wide if dst is T.F32 else self.float_to_float(wide, T.F32, dst)
        if dst is T.BF16:
            if src is T.F64:
                return self.f32_to_bf16(self.f64_to_f32_odd(x))
            narrow = x if src is T.F32 else self.convert(x, src, T.F32)
            return self.f32_to_bf16(narrow)
        if src is T.F64 and dst is T.F16:  # one rounding: to odd in f32, then to f16
            return self.f16_nan(x, src, self.op(self.type_of(T.F16), "OpFConvert",
                                                self.f64_to_f32_odd(x)))
        if dst is T.F16:
            return self.f16_nan(x, src, self.op(self.type_of(T.F16), "OpFConvert", x))
        return self.op(self.type_of(dst), "OpFConvert", x)

    def f16_nan(self, x: str, src: ElemType, converted: str) -> str:
        """``converted`` (``x`` of f32 or f64 rounded to f16), but a NaN gives the simulator's
        f16 NaN: its sign and its payload's upper ten bits, the lowest set when those are all
        zero (``OpFConvert`` leaves a NaN's payload to the driver: lavapipe gives ``0x7E00``)."""
        u32, bool_t = self.type_of(T.U32), self.type_of(T.BOOL)
        if src is T.F64:  # the sign and the payload's upper bits are in the high word
            u64 = self.type_of(T.U64)
            wide = self.op(u64, "OpBitcast", x)
            high = self.op(u32, "OpUConvert",
                           self.op(u64, "OpShiftRightLogical", wide, self.u32(32)))
            payload = self.op(u32, "OpShiftRightLogical", high, self.u32(10))
        else:
            high = self.op(u32, "OpBitcast", x)
            payload = self.op(u32, "OpShiftRightLogical", high, self.u32(13))
        payload = self.op(u32, "OpBitwiseAnd", payload, self.u32(0x3FF))
        empty = self.op(bool_t, "OpIEqual", payload, self.u32(0))
        payload = self.op(u32, "OpSelect", empty, self.u32(1), payload)
        sign = self.op(u32, "OpBitwiseAnd",
                       self.op(u32, "OpShiftRightLogical", high, self.u32(16)),
                       self.u32(0x8000))
        bits = self.op(u32, "OpBitwiseOr", self.op(u32, "OpBitwiseOr", sign, self.u32(0x7C00)),
                       payload)
        nan = self.op(self.type_of(T.F16), "OpBitcast",
                      self.op(self.type_of(T.U16), "OpUConvert", bits))
        return self.op(self.type_of(T.F16), "OpSelect", self.op(bool_t, "OpIsNan", x), nan,
                       converted)

    def bf16_to_f32(self, h: str) -> str:
        u32 = self.type_of(T.U32)
        wide = self.op(u32, "OpUConvert", h)
        shifted = self.op(u32, "OpShiftLeftLogical", wide, self.u32(16))
        return self.op(self.type_of(T.F32), "OpBitcast", shifted)

    def f32_to_bf16(self, f: str) -> str:
        """Round to nearest even by integer arithmetic; a NaN gives the quiet NaN of its sign
        (``0x7FC0`` or ``0xFFC0``)."""
        u32, bool_t = self.type_of(T.U32), self.type_of(T.BOOL)
        u = self.op(u32, "OpBitcast", f)
        high = self.op(u32, "OpShiftRightLogical", u, self.u32(16))
        sign = self.op(u32, "OpBitwiseAnd", high, self.u32(0x8000))
        quiet = self.op(u32, "OpBitwiseOr", sign, self.u32(0x7FC0))
        odd = self.op(u32, "OpBitwiseAnd", high, self.u32(1))
        biased = self.op(u32, "OpIAdd", self.op(u32, "OpIAdd", u, self.u32(0x7FFF)), odd)
        rounded = self.op(u32, "OpShiftRightLogical", biased, self.u32(16))
        pick = self.op(u32, "OpSelect", self.op(bool_t, "OpIsNan", f), quiet, rounded)
        return self.op(self.type_of(T.U16), "OpUConvert", pick)

    def f64_to_bf16(self, d: str) -> str:
        """Rounded once (to odd in f32, then to nearest even); a NaN gives the quiet NaN of its
        own sign, read from ``d``'s bits, as a driver's f64 to f32 conversion of a NaN need not
        keep it."""
        u32, u64, bool_t = self.type_of(T.U32), self.type_of(T.U64), self.type_of(T.BOOL)
        rounded = self.f32_to_bf16(self.f64_to_f32_odd(d))
        high = self.op(u32, "OpUConvert", self.op(u64, "OpShiftRightLogical",
                                                  self.op(u64, "OpBitcast", d), self.u32(48)))
        quiet = self.op(u32, "OpBitwiseOr", self.op(u32, "OpBitwiseAnd", high, self.u32(0x8000)),
                        self.u32(0x7FC0))
        return self.op(self.type_of(T.U16), "OpSelect", self.op(bool_t, "OpIsNan", d),
                       self.op(self.type_of(T.U16), "OpUConvert", quiet), rounded)

    def f64_to_f32_odd(self, d: str) -> str:
        """``d`` rounded to f32 *to odd* (truncated, the last bit set when inexact), so that a
        later rounding to a narrower type is the only one."""
        f32, f64, u32 = self.type_of(T.F32), self.type_of(T.F64), self.type_of(T.U32)
        bool_t = self.type_of(T.BOOL)
        r = self.op(f32, "OpFConvert", d)
        back = self.op(f64, "OpFConvert", r)
        keep = self.op(bool_t, "OpLogicalOr", self.op(bool_t, "OpFOrdEqual", back, d),
                       self.op(bool_t, "OpIsNan", d))
        bits = self.op(u32, "OpBitcast", r)
        above = self.op(bool_t, "OpFOrdGreaterThan", self.glsl_op(f64, "FAbs", back),
                        self.glsl_op(f64, "FAbs", d))
        toward_zero = self.op(u32, "OpSelect", above,
                              self.op(u32, "OpISub", bits, self.u32(1)), bits)
        odd = self.op(u32, "OpBitwiseOr", toward_zero, self.u32(1))
        return self.op(f32, "OpBitcast", self.op(u32, "OpSelect", keep, bits, odd))

    def int64_to_f64_odd(self, x: str, src: ElemType) -> str:
        """A 64-bit integer rounded to f64 to odd: its two 32-bit halves are exact in f64 and
        TwoSum gives their rounded sum and the exact error."""
        f64, u64, bool_t = self.type_of(T.F64), self.type_of(T.U64), self.type_of(T.BOOL)
        half = SIGNED_OF[32] if src.is_signed else T.U32
        shift = "OpShiftRightArithmetic" if src.is_signed else "OpShiftRightLogical"
        high = self.op(self.type_of(src), shift, x, self.u32(32))
        high32 = self.int_convert(high, src, half)
        low32 = self.int_convert(x, src, T.U32)
        convert = "OpConvertSToF" if src.is_signed else "OpConvertUToF"
        hf = self.exact(f64, "OpFMul", self.op(f64, convert, high32),
                        self.const(2.0**32, T.F64))
        lf = self.op(f64, "OpConvertUToF", low32)
        s = self.exact(f64, "OpFAdd", hf, lf)
        bp = self.exact(f64, "OpFSub", s, hf)
        ap = self.exact(f64, "OpFSub", s, bp)
        err = self.exact(f64, "OpFAdd", self.exact(f64, "OpFSub", hf, ap),
                         self.exact(f64, "OpFSub", lf, bp))
        bits = self.op(u64, "OpBitcast", s)
        even = self.op(bool_t, "OpIEqual", self.op(u64, "OpBitwiseAnd", bits,
                                                   self.const(1, T.U64)), self.const(0, T.U64))
        inexact = self.op(bool_t, "OpFOrdNotEqual", err, self.const(0.0, T.F64))
        # one step toward the error: up in magnitude when it has the sum's sign
        same_sign = self.op(bool_t, "OpLogicalEqual",
                            self.op(bool_t, "OpFOrdLessThan", err, self.const(0.0, T.F64)),
                            self.op(bool_t, "OpFOrdLessThan", s, self.const(0.0, T.F64)))
        step = self.op(u64, "OpSelect", same_sign,
                       self.op(u64, "OpIAdd", bits, self.const(1, T.U64)),
                       self.op(u64, "OpISub", bits, self.const(1, T.U64)))
        fix = self.op(bool_t, "OpLogicalAnd", inexact, even)
        return self.op(f64, "OpBitcast", self.op(u64, "OpSelect", fix, step, bits))

    def bitcast(self, x: str, src: ElemType, dst: ElemType) -> str:
        if value_type(src) is value_type(dst):
            return x
        return self.op(self.type_of(dst), "OpBitcast", x)

    # ------------------------------------------------------------------ memory

    def array(self, name: str) -> ArraySym:
        sym = self.scope.get(name)
        if not isinstance(sym, ArraySym):
            raise EmitError(f"{name!r} is not an array in scope")
        return sym

    def element(self, arr: ArraySym, index: str) -> str:
        """A pointer to element ``index`` of ``arr``."""
        elem = self.type_of(memory_type(arr.elem))
        ptr = self.pointer(arr.storage, elem)
        if arr.storage == "StorageBuffer":
            return self.op(ptr, "OpAccessChain", arr.var, self.const(0, T.I32), index)
        return self.op(ptr, "OpAccessChain", arr.var, index)

    def access(self, arr: ArraySym) -> tuple[str, ...]:
        """Memory operands: Workgroup accesses are non-private, so that barriers order them
        (the Vulkan memory model orders nothing else)."""
        return ("NonPrivatePointer",) if arr.storage == "Workgroup" else ()

    def load(self, name: str, index: ir.Expr) -> str:
        arr = self.array(name)
        if arr.quad:  # a 32-bit element of an array of 16-byte words: a word's component
            return self.component_load(arr, self.value(index))
        if arr.stored is not None:
            return self.shared_load(arr, self.value(index))
        ptr = self.element(arr, self.value(index))
        raw = self.op(self.type_of(memory_type(arr.elem)), "OpLoad", ptr, *self.access(arr))
        if arr.elem is T.BOOL:
            return self.op(self.type_of(T.BOOL), "OpINotEqual", raw, self.const(0, T.U8))
        return raw

    def component_load(self, arr: ArraySym, index: str) -> str:
        ptr = self.word_part(arr, index)
        u32 = self.type_of(T.U32)
        raw = self.op(u32, "OpLoad", ptr, *self.access(arr))
        return raw if arr.elem is T.U32 else self.op(self.type_of(arr.elem), "OpBitcast", raw)

    def word_part(self, arr: ArraySym, index: str) -> str:
        """A pointer to the 32-bit element ``index`` of ``arr``, an array of 16-byte words."""
        i32, u32 = self.type_of(T.I32), self.type_of(T.U32)
        word = self.op(i32, "OpShiftRightArithmetic", index, self.const(2, T.I32))
        part = self.op(i32, "OpBitwiseAnd", index, self.const(3, T.I32))
        return self.op(self.pointer(arr.storage, u32), "OpAccessChain", arr.var, word, part)

    def parts(self, arr: ArraySym) -> tuple[str, str]:
        """The type of the storage's elements that one element of ``arr``, an array in
        another's storage, spans, and the vector of that many of them (``ArraySym.ratio``)."""
        part = self.type_of(memory_type(arr.variable.elem))
        return part, self.declare(("vector", part, arr.ratio), f"%v{arr.ratio}"
                                  f"{part.lstrip('%')}", f"{{id}} = OpTypeVector {part} "
                                  f"{arr.ratio}")

    def spanned(self, arr: ArraySym, index: str) -> list[str]:
        """Pointers to the storage's elements that element ``index`` of ``arr`` (an array in
        another's storage) spans, in order."""
        i32 = self.type_of(T.I32)
        first = index if arr.ratio == 1 else self.op(i32, "OpIMul", index,
                                                      self.const(arr.ratio, T.I32))
        return [self.element(arr.variable, first if j == 0 else self.op(
            i32, "OpIAdd", first, self.const(j, T.I32))) for j in range(arr.ratio)]

    def shared_load(self, arr: ArraySym, index: str) -> str:
        """Element ``index`` of ``arr``, an array in another's storage: the storage's elements
        it spans, reinterpreted."""
        part, vector = self.parts(arr)
        loaded = [self.op(part, "OpLoad", ptr, *self.access(arr))
                  for ptr in self.spanned(arr, index)]
        whole = loaded[0] if arr.ratio == 1 else self.op(vector, "OpCompositeConstruct",
                                                         *loaded)
        if memory_type(arr.elem) is memory_type(arr.variable.elem):
            return whole
        return self.op(self.type_of(arr.elem), "OpBitcast", whole)

    def shared_store(self, arr: ArraySym, index: str, v: str) -> None:
        """``v`` into element ``index`` of ``arr``, an array in another's storage: into the
        storage's elements it spans (a 32-bit component of a 16-byte word where the storage
        is held as words), reinterpreted."""
        if arr.quad:
            u32 = self.type_of(T.U32)
            bits = v if arr.elem is T.U32 else self.op(u32, "OpBitcast", v)
            self.do("OpStore", self.word_part(arr, index), bits, *self.access(arr))
            return
        part, vector = self.parts(arr)
        if memory_type(arr.elem) is not memory_type(arr.variable.elem):
            v = self.op(vector if arr.ratio > 1 else part, "OpBitcast", v)
        for j, ptr in enumerate(self.spanned(arr, index)):
            one = v if arr.ratio == 1 else self.op(part, "OpCompositeExtract", v, str(j))
            self.do("OpStore", ptr, one, *self.access(arr))

    def store(self, name: str, index: ir.Expr, value: ir.Expr) -> None:
        arr = self.array(name)
        if arr.stored is not None:
            self.shared_store(arr, self.value(index), self.value(value))
            return
        ptr = self.element(arr, self.value(index))
        v = self.value(value)
        if arr.elem is T.BOOL:
            v = self.op(self.type_of(T.U8), "OpSelect", v, self.const(1, T.U8),
                        self.const(0, T.U8))
        self.do("OpStore", ptr, v, *self.access(arr))
