"""Fragments printed for NVIDIA tensor cores: ``mma.sync.m16n8k16`` lane by lane.

A 16x16 fragment of a warp lives in each lane's registers as ``sarek.lane_maps`` says: A as one
m16n8k16 A operand, B (k x n) as two B operands (columns 0-7 and 8-15), the accumulator as two
C operands. Loads from shared memory whose rows are 16-byte aligned use ``ldmatrix`` (``.trans``
for a row-major B); every other load or store moves element by element at the addresses the
lane maps give. ``FragMulAdd`` is two ``mma.sync`` instructions, one per half of the columns,
each output one fused dot-add of its 16 products and the addend, which is what the simulator's
``h200`` arithmetic model computes. Only 16x16x16 fragments of subgroups of 32 exist here (no
8x8x8 float shape on NVIDIA); anything else is refused with the reason.
"""

from __future__ import annotations

import math

import numpy as np

from backends.cstyle import EmitError, Printer
from sarek import ir, lane_maps
from sarek.ir import BinOp, ElemType, FragLayout, FragUse

EDGE = 16
_MMA = {
    ElemType.F16: "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    ElemType.BF16: "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    ElemType.U8: "mma.sync.aligned.m16n8k16.row.col.s32.u8.u8.s32",
    ElemType.I8: "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32",
}
_OPERAND: dict[FragUse, lane_maps.Operand] = {FragUse.A: "a", FragUse.B: "b",
                                              FragUse.ACCUMULATOR: "c"}
_LANE = ("const int sk_lane = (int)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * "
         "threadIdx.z)) & 31), sk_g = sk_lane >> 2, sk_t = sk_lane & 3;")


def _affine(coords: np.ndarray) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Per element: (row, col) as ``g * a + t * b + c`` coefficients, read off the lane map
    (and checked to be affine in g and t on every lane)."""
    out = []
    lanes = np.arange(lane_maps.LANES)
    g, t = lanes // 4, lanes % 4
    for e in range(coords.shape[1]):
        pair = []
        for axis in (0, 1):
            v = coords[:, e, axis]
            a, b, c = int(v[4] - v[0]), int(v[1] - v[0]), int(v[0])
            if not np.array_equal(g * a + t * b + c, v):
                raise AssertionError("lane map is not affine in g and t")
            pair.append((a, b, c))
        out.append((pair[0], pair[1]))
    return out


def _expr(coef: tuple[int, int, int], extra: int = 0) -> str:
    a, b, c = coef
    terms = [f"{a} * sk_g" if a != 1 else "sk_g"] if a else []
    terms += [f"{b} * sk_t" if b != 1 else "sk_t"] if b else []
    if c + extra or not terms:
        terms.append(str(c + extra))
    return " + ".join(terms)


def ldmatrix_blocks(operand: lane_maps.Operand, bits: int,
                    layout: FragLayout = FragLayout.ROW) -> list[tuple[int, int]]:
    """The origin, in the fragment as it lies in memory, of the 8-row block each register of
    the operand is loaded from by one ldmatrix (register order; B's columns 8-15 after 0-7):
    where the register's first element lies for lane 0, read off the lane map. With the
    column layout memory rows are the fragment's columns, so the origin is (column, row)."""
    coords = lane_maps.coordinates(operand, bits)
    per = 32 // bits
    blocks = []
    for h in range(1 if operand == "a" else 2):
        for j in range(lane_maps.registers(operand, bits)):
            first = coords[:, j * per]
            row, col = int(first[:, 0].min()), int(first[:, 1].min()) + 8 * h
            blocks.append((row, col) if layout is FragLayout.ROW else (col, row))
    return blocks


def divisor(e: ir.Expr) -> int:
    """A number ``e``'s value is always a multiple of (1 when nothing is known)."""
    match e:
        case ir.Const(value=v) if isinstance(v, int) and not isinstance(v, bool):
            return abs(v) or 1 << 30
        case ir.Binary(op=BinOp.ADD | BinOp.SUB, a=a, b=b):
            return math.gcd(divisor(a), divisor(b))
        case ir.Binary(op=BinOp.MUL, a=a, b=b):
            return min(divisor(a) * divisor(b), 1 << 30)
        case ir.Binary(op=BinOp.SHL, a=a, b=ir.Const(value=int(c))):
            return min(divisor(a) << c, 1 << 30)
    return 1


class FragmentPrinter:
    """Prints the fragment statements of one kernel (a ``Printer`` hook)."""

    def __init__(self, p: Printer) -> None:
        self.p = p
        if p.kernel.subgroup not in (None, lane_maps.LANES):
            raise EmitError(f"CUDA runs subgroups of 32 lanes; kernel {p.kernel.name!r} is "
                            f"written for {p.kernel.subgroup}")

    def decl(self, name: str) -> ir.FragDecl:
        return self.p.frags[name]

    def bits(self, d: ir.FragDecl) -> int:
        return 32 if d.use is FragUse.ACCUMULATOR else d.elem.bits

    def stmt(self, s: ir.Stmt) -> list[str]:
        match s:
            case ir.FragDecl(name=name, use=use, rows=rows, cols=cols, elem=elem):
                if (rows, cols) != (EDGE, EDGE):
                    raise EmitError(f"fragment {name!r} is {rows}x{cols}; CUDA multiplies "
                                    "16x16x16 fragments (m16n8k16) and has no 8x8x8 float "
                                    "shape")
                self.p.frags[name] = s
                if use is FragUse.ACCUMULATOR:
                    if elem not in (ElemType.F32, ElemType.I32):
                        raise EmitError(f"accumulator {name!r} of {elem}: mma.sync "
                                        "accumulates in f32 or s32")
                    return [f"{self.p.t(elem)} {name}[8];"]
                if elem not in _MMA:
                    raise EmitError(f"fragment {name!r} of {elem}: mma.sync multiplies f16, "
                                    "bf16, u8 and s8 operands")
                regs = lane_maps.registers("a" if use is FragUse.A else "b", elem.bits)
                return [f"unsigned {name}[{regs if use is FragUse.A else 2 * regs}];"]
            case ir.FragFill(frag=name, value=value):
                d = self.decl(name)
                if d.use is not FragUse.ACCUMULATOR:
                    raise EmitError(f"only accumulators are filled on CUDA, not {name!r}")
                return [f"for (int sk_i = 0; sk_i < 8; ++sk_i) {name}[sk_i] = "
                        f"{self.p.expr(value)};"]
            case ir.FragLoad():
                return self.move(s, load=True)
            case ir.FragStore():
                return self.move(s, load=False)
            case ir.FragMulAdd(d=d, a=a, b=b, c=c):
                return self.mul_add(d, a, b, c)
        raise AssertionError(s)

    # ------------------------------------------------------------------ loads and stores

    def move(self, s: ir.FragLoad | ir.FragStore, load: bool) -> list[str]:
        d = self.decl(s.frag)
        operand = _OPERAND[d.use]
        if not load and operand != "c":
            raise EmitError(f"only accumulators are stored on CUDA, not {s.frag!r}")
        if isinstance(s, ir.FragLoad) and self.ldmatrix_fits(s, d):
            return self.ldmatrix(s, d)
        bits = self.bits(d)
        per = 32 // bits if operand != "c" else 1
        coef = _affine(lane_maps.coordinates(operand, d.elem.bits if operand != "c" else 32))
        halves = 1 if operand == "a" else 2
        lines = [_LANE, f"const int sk_off = {self.p.expr(s.offset)}, "
                 f"sk_ld = {self.p.expr(s.stride)};"]
        count = len(coef)
        words: dict[int, list[str]] = {}
        for h in range(halves):
            for e, (rc, cc) in enumerate(coef):
                # B's and C's second half are columns 8-15 of the fragment (B's rows are k)
                row = _expr(rc)
                col = _expr(cc, 8 * h if operand in ("b", "c") else 0)
                index = (f"sk_off + ({row}) * sk_ld + ({col})" if s.layout is FragLayout.ROW
                         else f"sk_off + ({col}) * sk_ld + ({row})")
                slot = h * count + e
                if operand == "c":
                    if load:
                        lines.append(f"{s.frag}[{slot}] = {s.array}[{index}];")
                    else:
                        lines.append(f"{s.array}[{index}] = {s.frag}[{slot}];")
                else:
                    reg, part = divmod(slot, per)
                    words.setdefault(reg, []).append(
                        f"((unsigned){s.array}[{index}] << {part * bits})")
        for reg, parts in words.items():
            lines.append(f"{s.frag}[{reg}] = {' | '.join(parts)};")
        return ["{", *("    " + x for x in lines), "}"]

    def ldmatrix_fits(self, s: ir.FragLoad, d: ir.FragDecl) -> bool:
        """``ldmatrix`` serves, from shared memory whose rows are 16-byte aligned, a row-major
        A (16-bit or 8-bit), a row-major 16-bit B (``.trans``) and a column-major B (its
        memory rows are the fragment's columns, which is what each lane holds of B)."""
        arr = self.p.arrays.get(s.array)
        if not isinstance(arr, ir.ArrayDecl) or arr.space is not ir.MemSpace.SHARED:
            return False
        if arr.align % 16 or d.use is FragUse.ACCUMULATOR:
            return False
        if d.use is FragUse.A and s.layout is not FragLayout.ROW:
            return False
        if d.use is FragUse.B and s.layout is FragLayout.ROW and d.elem.bits == 8:
            return False  # B's 8-bit columns are not 16-bit pairs: no transpose serves them
        per_row = 16 * 8 // d.elem.bits  # elements in 16 bytes
        return divisor(s.offset) % per_row == 0 and divisor(s.stride) % per_row == 0

    def ldmatrix(self, s: ir.FragLoad, d: ir.FragDecl) -> list[str]:
        """One ldmatrix: each register of the operand is one 8x8 matrix of 16-bit elements
        (two 8-row blocks of 16 bytes for 8-bit A). Register ``j``'s block starts where its
        first element lies in the lane map; lane ``8m + r`` gives row ``r`` of block ``m``."""
        operand: lane_maps.Operand = "a" if d.use is FragUse.A else "b"
        blocks = ldmatrix_blocks(operand, d.elem.bits, s.layout)
        count = len(blocks)
        trans = ".trans" if operand == "b" and s.layout is FragLayout.ROW else ""
        op = f"ldmatrix.sync.aligned.m8n8.x{count}{trans}.shared.b16"
        # the block of the lane's matrix, as selects (a table indexed by lane would live in
        # local memory)
        table = f"{blocks[-1][0]} * sk_ld + {blocks[-1][1]}"
        for m in range(count - 2, -1, -1):
            r0, c0 = blocks[m]
            table = f"(sk_m == {m} ? {r0} * sk_ld + {c0} : {table})"
        regs = ", ".join(f"%{j}" for j in range(count))
        outs = ", ".join(f'"=r"({s.frag}[{j}])' for j in range(count))
        return ["{", "    " + _LANE,
                f"    const int sk_off = {self.p.expr(s.offset)}, sk_ld = "
                f"{self.p.expr(s.stride)};",
                f"    const int sk_m = (sk_lane >> 3) % {count};",
                f"    const unsigned sk_addr = (unsigned)__cvta_generic_to_shared({s.array} + "
                f"sk_off + {table} + (sk_lane & 7) * sk_ld);",
                f'    asm volatile("{op} {{{regs}}}, [%{count}];" : {outs} : "r"(sk_addr) '
                ': "memory");', "}"]

    # ------------------------------------------------------------------ multiply

    def mul_add(self, d: str, a: str, b: str, c: str) -> list[str]:
        fa = self.decl(a)
        op = _MMA[fa.elem]
        a_regs = lane_maps.registers("a", fa.elem.bits)
        b_regs = lane_maps.registers("b", fa.elem.bits)
        acc = "f" if self.decl(d).elem is ElemType.F32 else "r"
        lines = []
        for h in range(2):  # columns 0-7, then 8-15
            n = 0
            outs = ", ".join(f'"={acc}"({d}[{4 * h + i}])' for i in range(4))
            ins = [f'"r"({a}[{j}])' for j in range(a_regs)]
            ins += [f'"r"({b}[{h * b_regs + j}])' for j in range(b_regs)]
            ins += [f'"{acc}"({c}[{4 * h + i}])' for i in range(4)]
            groups = []
            for size in (4, a_regs, b_regs, 4):
                groups.append("{" + ", ".join(f"%{n + i}" for i in range(size)) + "}")
                n += size
            # not volatile: a pure function of its registers, which the compiler may schedule
            lines.append(f'asm("{op} {", ".join(groups)};" : {outs} : {", ".join(ins)});')
        return lines
