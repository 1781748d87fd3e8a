"""Where the time of a rewritten GEMM goes through Vulkan: the module as printed, variants of it
that leave one stage out or order it otherwise, and the driver's compile statistics, each timed
with GPU timestamps in one run.

At 4096^3 (``--n``), for each case ``LOWERING=SCHEDULE`` (``--case``, repeated; on the
lowering's bundled example), the kernel the ``vulkan`` target builds is printed as SPIR-V and
timed (``backends.spirv.run.time_kernel(text=...)``, median of 10 dispatches) as printed, then
as each variant ``--variant`` names (those that do not apply to a case are left out):

* ``no global loads``: staged words (elements) made of zeros (undefined) instead of loaded;
* ``no staging``: nothing stored into the staged tiles (so no global loads either);
* ``no fragment loads``, ``no A fragment loads``, ``no B fragment loads``: the A and B
  fragments (f16 or u8), or those of one operand, made of a constant instead of loaded;
* ``B loads column-major``, ``B loads column-major, padded``, ``A loads padded``: u8
  fragments loaded in another layout or at another stride (32 or 48 bytes) than the tiles
  are staged in: what staging them so would cost the fragment loads (garbage out);
* ``workgroups by 8 rows``, ``workgroups by 4 rows``: workgroup ids remapped so that
  consecutive workgroups cover that many block rows column by column (a bijection of the
  grid: the same bits where its rows divide);
* ``no multiply-adds``: the accumulators passed through unchanged (fragment loads then die);
* ``no barriers``: every ``OpControlBarrier`` removed;
* ``barriers without memory semantics``: every ``OpControlBarrier`` an execution barrier
  alone (the memory model then orders nothing through it: a diagnostic);
* ``lazy fragment loads``: each fragment loaded just before its first multiply-add (B's four,
  then A's one row at a time) instead of all of a sub-step's first;
* ``refills late``: converting copies issued after the first sub-step's products, where the
  neutral rewrite issues raw copies, instead of right after the step's barrier;
* ``no edge paths``: each staged tile's path for tiles crossing the limits made zeros (bits
  unchanged where every tile lies inside them but those past the last step);
* ``unconditional trips``: a loop printed several steps a trip without the tests of the
  bound before its later steps (bits unchanged where the trip count divides);
* ``partial unroll 2``, ``unroll``: the reduction loop's ``OpLoopMerge`` asking the driver to
  unroll it twice, or as it sees fit;
* ``spirv-opt -O``: the module after ``spirv-opt -O``;
* ``one loop``: each loop printed once, every trip's copies tested against their limits (the
  printing before loops were printed twice, their trips inside the limits first unchecked);
* ``land at once``: each copy's words stored into workgroup memory right after their loads
  instead of held in registers until the wait (a copy complete when issued);
* ``land after the first loop``: where a loop is printed twice, every held copy landed as
  the first loop ends and its words then made zeros;
* ``fragments a step ahead``: each step of a loop of one sub-step a step multiplies the
  fragments the step before loaded, after its barrier, and then loads its own
  (``fragments_ahead``), the last step's products after the loop;
* ``unsigned divisions``: every ``OpSDiv`` an ``OpUDiv`` (the same bits where no dividend or
  divisor is negative, as in a GEMM inside its limits);
* ``byte shuffles``: each byte plane a converting copy lands made by ``OpVectorShuffle`` of
  the loaded components as ``u8vec4`` instead of shifts and masks;
* ``bf16 by OpFConvert``: f32 rounded to bf16 by ``OpFConvert`` to the bf16 float type
  instead of integer arithmetic (NaNs as before);
* ``always land``: each wait's landing of held words without the test that they wait to land
  (a diagnostic).

The stripped variants compute garbage; only their times mean something. The others must give
the printed module's bits. Each case's output is compared bit for bit with the lowering's
output through CUDA under CUDA's own policy (timed in the same run, ``CUDA policy`` rows): every
schedule sums in the same order. With ``--same-tiling`` CUDA also runs each case's schedule.
The driver's statistics (``VK_KHR_pipeline_executable_properties``: registers, spills, ...)
are recorded per row where it reports them, and with ``--machine-code DIR`` its binary (a
pipeline cache's data) and, where ``nvdisasm`` is on ``PATH``, its disassembly
(``bench/vulkan_machine_code.py``). Writes bench/results/vulkan_profile_h200.json
(``--out``) and prints a table.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from backends.cuda.run import device_arch
from backends.pipeline import compile_launch
from backends.registry import target
from backends.spirv import lower as spirv_lower
from backends.spirv.converting import converting_copies
from backends.spirv.device import device, device_name, runnable
from backends.spirv.emit import _Module, print_kernel
from backends.spirv.run import time_kernel
from backends.spirv.tools import TARGET_ENV, tool
from bench.backends_speed_h200 import EXAMPLES
from bench.gpu_speed_h200 import REPEATS, kernel_output, kernel_seconds
from bench.vulkan_machine_code import disassembly
from sarek import ir, packed_store
from sarek.errors import SarekError
from sarek.ir import BinOp
from sarek.ir_build import binary, var
from sarek.ir_walk import replace_statements, walk
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import Schedule

ROOT = Path(__file__).resolve().parent.parent


def optimized(text: str, passes: tuple[str, ...]) -> str:
    """``text`` through ``spirv-opt`` with ``passes``, disassembled again."""
    with tempfile.TemporaryDirectory() as tmp:
        src, mid, out = (Path(tmp, x) for x in ("m.spvasm", "m.spv", "o.spv"))
        src.write_text(text)
        subprocess.run([str(tool("spirv-as")), "--target-env", TARGET_ENV, str(src), "-o",
                        str(mid)], check=True)
        subprocess.run([str(tool("spirv-opt")), f"--target-env={TARGET_ENV}", *passes,
                        str(mid), "-o", str(out)], check=True)
        text = subprocess.run([str(tool("spirv-dis")), "--raw-id", "--no-indent", str(out)],
                              check=True, capture_output=True, text=True).stdout
    entry = re.search(r"^OpEntryPoint GLCompute (%\w+) ", text, re.M)
    assert entry is not None
    return re.sub(rf"{entry[1]}\b", "%main", text)  # the name ``runnable`` looks for


def _chains(text: str, pointer: str) -> set[str]:
    return set(re.findall(rf"^\s*(%\w+) = OpAccessChain {pointer} ", text, re.M))


def no_global_loads(text: str) -> str:
    ptrs = _chains(text, r"%p_st_(?:f16|f32|i8|i32|u16|v4u32) %\w+")
    zero = {"%v4u32": "OpCompositeConstruct %v4u32 %c_u32_0 %c_u32_0 %c_u32_0 %c_u32_0"}
    return re.sub(r"^(\s*%\w+) = OpLoad (%\w+) (%\w+)$",
                  lambda m: f"{m[1]} = {zero.get(m[2], 'OpUndef ' + m[2])}" if m[3] in ptrs
                  else m[0], text, flags=re.M)


def no_staging(text: str) -> str:
    ptrs = _chains(text, r"%p_wo_(?:f16|u16|u8|v4u32) %\w+_sk_(?:a|b|ra|rb)\w*")
    return re.sub(r"^\s*OpStore (%\w+) %\w+ NonPrivatePointer\n",
                  lambda m: "" if m[1] in ptrs else m[0], text, flags=re.M)


def _fragments_made(uses: str) -> Callable[[str], str]:
    """The A or B fragments (``uses``: ``a``, ``b`` or ``ab``) of f16 or u8 made of a
    constant instead of loaded."""
    def edit(text: str) -> str:
        if "%c_u8_1 = " not in text and "%u8 = OpTypeInt 8 0" in text:
            text = text.replace("%u8 = OpTypeInt 8 0\n",
                                "%u8 = OpTypeInt 8 0\n%c_u8_1 = OpConstant %u8 1\n", 1)
        value = {"f16": "%c_f16_0x0_0p_0", "u8": "%c_u8_1"}
        return re.sub(rf"^(\s*%\w+) = OpCooperativeMatrixLoadKHR (%cm_[{uses}]_(f16|u8)_\w+) .*$",
                      lambda m: f"{m[1]} = OpCompositeConstruct {m[2]} {value[m[3]]}", text,
                      flags=re.M)
    return edit


no_fragment_loads = _fragments_made("ab")


def _fragment_strides(use: str, layout: str, words: int) -> Callable[[str], str]:
    """Every ``use`` (``a``, ``b``) fragment of u8 loaded in ``layout`` (0 row-major, 1
    column-major) at a stride of ``words`` 16-byte words: what another staged layout of the
    same bytes would cost the fragment loads (a diagnostic: the fragments are garbage)."""
    def edit(text: str) -> str:
        if f"%c_i32_{words} = " not in text:
            text = re.sub(r"^(%i32 = OpTypeInt 32 1)$", rf"\1\n%c_i32_{words} = OpConstant "
                          rf"%i32 {words}", text, count=1, flags=re.M)
        return re.sub(rf"^(\s*%\w+ = OpCooperativeMatrixLoadKHR %cm_{use}_u8_\w+ %\w+) "
                      r"%c_u32_\d+ %c_i32_\d+ ", rf"\1 %c_u32_{layout} %c_i32_{words} ", text,
                      flags=re.M)
    return edit


def grouped_workgroups(rows: int) -> Callable[[str], str]:
    """Workgroup ids remapped so that consecutive workgroups cover ``rows`` block rows,
    column by column, within each group of ``rows`` block rows (for the L2 cache; a
    bijection of the grid, so the same bits, where the grid's rows divide into ``rows``)."""
    def edit(text: str) -> str:
        first = re.search(r"^(\s*)%\w+ = OpLoad %v3u32 %WorkgroupId$", text, re.M)
        if first is None:
            return text
        start = first.start()
        rest = re.sub(r"^(\s*%\w+) = OpLoad %v3u32 %WorkgroupId$",
                      r"\1 = OpCopyObject %v3u32 %gw_new", text[start:], flags=re.M)
        if "%NumWorkgroups = OpVariable" not in text:
            head = text[:start].replace(
                "%WorkgroupId = OpVariable %p_in_v3u32 Input\n",
                "%WorkgroupId = OpVariable %p_in_v3u32 Input\n"
                "%NumWorkgroups = OpVariable %p_in_v3u32 Input\n", 1).replace(
                "OpDecorate %WorkgroupId BuiltIn WorkgroupId\n",
                "OpDecorate %WorkgroupId BuiltIn WorkgroupId\n"
                "OpDecorate %NumWorkgroups BuiltIn NumWorkgroups\n", 1)
            head = re.sub(r"^(OpEntryPoint GLCompute .*)$", r"\1 %NumWorkgroups", head,
                          count=1, flags=re.M)
        else:
            head = text[:start]
        head = re.sub(r"^(%u32 = OpTypeInt 32 0)$", rf"\1\n%gw_rows = OpConstant %u32 {rows}",
                      head, count=1, flags=re.M)
        u = "%u32"
        body = ["%gw_id = OpLoad %v3u32 %WorkgroupId", "%gw_n = OpLoad %v3u32 %NumWorkgroups",
                f"%gw_x = OpCompositeExtract {u} %gw_id 0",
                f"%gw_y = OpCompositeExtract {u} %gw_id 1",
                f"%gw_z = OpCompositeExtract {u} %gw_id 2",
                f"%gw_nx = OpCompositeExtract {u} %gw_n 0",
                f"%gw_row = OpIMul {u} %gw_y %gw_nx", f"%gw_l = OpIAdd {u} %gw_row %gw_x",
                f"%gw_span = OpIMul {u} %gw_nx %gw_rows", f"%gw_g = OpUDiv {u} %gw_l %gw_span",
                f"%gw_r = OpUMod {u} %gw_l %gw_span", f"%gw_g0 = OpIMul {u} %gw_g %gw_rows",
                f"%gw_ry = OpUMod {u} %gw_r %gw_rows", f"%gw_ny = OpIAdd {u} %gw_g0 %gw_ry",
                f"%gw_nxx = OpUDiv {u} %gw_r %gw_rows",
                "%gw_new = OpCompositeConstruct %v3u32 %gw_nxx %gw_ny %gw_z"]
        return head + "".join(f"{first[1]}{line}\n" for line in body) + rest
    return edit


def no_multiply_adds(text: str) -> str:
    return re.sub(r"^(\s*%\w+) = OpCooperativeMatrixMulAddKHR (%\w+) %\w+ %\w+ (%\w+)$",
                  r"\1 = OpCopyObject \2 \3", text, flags=re.M)


def always_land(text: str) -> str:
    """Every wait's landing of held words done without testing that they wait to land (a
    diagnostic: a set that does not wait stores its old words again)."""
    return re.sub(r"OpBranchConditional %\w+ (%\d+_land) (%\d+_landed)$",
                  r"OpBranchConditional %true \1 \2", text, flags=re.M)


def unsigned_divisions(text: str) -> str:
    """Every 32-bit ``OpSDiv`` an ``OpUDiv`` of the operands' bits."""
    def udiv(m: re.Match[str]) -> str:
        pad, r, a, b = m[1], m[2], m[3], m[4]
        return (f"{pad}{r}_ua = OpBitcast %u32 {a}\n{pad}{r}_ub = OpBitcast %u32 {b}\n"
                f"{pad}{r}_uq = OpUDiv %u32 {r}_ua {r}_ub\n{pad}{r} = OpBitcast %i32 {r}_uq")
    return re.sub(r"^(\s*)(%\w+) = OpSDiv %i32 (%\w+) (%\w+)$", udiv, text, flags=re.M)


def no_barriers(text: str) -> str:
    return re.sub(r"^\s*OpControlBarrier .*\n", "", text, flags=re.M)


def barriers_without_memory_semantics(text: str) -> str:
    """Every ``OpControlBarrier`` an execution barrier alone (Semantics None): a diagnostic
    (the Vulkan memory model then orders no workgroup memory), to see what the barriers'
    memory semantics cost."""
    text = re.sub(r"^(\s*OpControlBarrier %\w+ %\w+) %\w+$", r"\1 %c_u32_0", text, flags=re.M)
    if "%c_u32_0 = OpConstant" not in text:
        text = re.sub(r"^(%u32 = OpTypeInt 32 0)$", r"\1\n%c_u32_0 = OpConstant %u32 0", text,
                      count=1, flags=re.M)
    return text


def no_edge_paths(text: str) -> str:
    """Each staged tile's path for a tile crossing the limits (words tested one by one,
    elements packed) made a word of zeros per word: how much the code the fast path never
    runs costs. At sizes whose tiles all lie inside the limits only copies past the
    last step take it, whose words no step reads, so the bits stay the printed module's."""
    def cut(m: re.Match[str]) -> str:
        edge, end = m[1], m[2]
        phis = re.findall(r"^\s*(%\w+) = OpPhi %v4u32 (%\w+ %\w+) %\w+ %\w+$", m[4], re.M)
        return "".join([f"{edge} = OpLabel\n",
                        *(f"    {p}_zero = OpCompositeConstruct %v4u32 %c_u32_0 %c_u32_0 "
                          "%c_u32_0 %c_u32_0\n" for p, _ in phis),
                        f"    OpBranch {end}\n{end} = OpLabel\n",
                        *(f"    {p} = OpPhi %v4u32 {fast} {p}_zero {edge}\n"
                          for p, fast in phis)])
    return re.sub(r"^(%\w+_tile_edge) = OpLabel\n.*?^\s*OpBranch (%\w+_tile_end)\n"
                  r"(\2 = OpLabel\n)((?:[ \t]*%\w+ = OpPhi [^\n]*\n)+)", cut, text,
                  flags=re.M | re.S)


def unconditional_trips(text: str) -> str:
    """The later trips of a loop printed several steps a trip run without their test of the
    bound: the same bits where the trip count is a multiple of the steps a trip (4096 / 16
    with three stages), to see what the test costs."""
    return re.sub(r"^(\s*OpBranchConditional) %\w+ (%\w+_trip) ", r"\1 %true \2 ", text,
                  flags=re.M)


def _reduction_loop(control: str) -> Callable[[str], str]:
    """The first loop that is not short (the reduction) with ``control`` as its loop
    control."""
    def edit(text: str) -> str:
        return re.sub(r"^(\s*OpLoopMerge %\w+ %\w+) None$", rf"\1 {control}", text, count=1,
                      flags=re.M)
    return edit


TEXT_VARIANTS: dict[str, Callable[[str], str]] = {
    "no global loads": no_global_loads, "no staging": no_staging,
    "no fragment loads": no_fragment_loads, "no multiply-adds": no_multiply_adds,
    "no barriers": no_barriers, "partial unroll 2": _reduction_loop("PartialCount 2"),
    "unroll": _reduction_loop("Unroll"),
    "barriers without memory semantics": barriers_without_memory_semantics,
    "spirv-opt -O": lambda text: optimized(text, ("-O",)),
    "no edge paths": no_edge_paths, "unconditional trips": unconditional_trips,
    "always land": always_land, "unsigned divisions": unsigned_divisions,
    "no A fragment loads": _fragments_made("a"), "no B fragment loads": _fragments_made("b"),
    "B loads column-major": _fragment_strides("b", "1", 2),
    "B loads column-major, padded": _fragment_strides("b", "1", 3),
    "A loads padded": _fragment_strides("a", "0", 3),
    "workgroups by 8 rows": grouped_workgroups(8), "workgroups by 4 rows": grouped_workgroups(4),
}
STRIPPED = ("always land", "no A fragment loads", "no B fragment loads", "B loads column-major",
            "B loads column-major, padded", "A loads padded", "no global loads", "no staging",
            "no fragment loads", "no multiply-adds", "no barriers",
            "barriers without memory semantics")


def lazy_fragment_loads(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``stmts`` (and every block in them) with each fragment load moved down to just before
    the first statement that uses its fragment, never past a statement that is no fragment
    load or multiply-add."""
    out: list[ir.Stmt] = []
    pending: dict[str, ir.FragLoad] = {}
    for s in stmts:
        if isinstance(s, ir.FragLoad):
            pending[s.frag] = s
            continue
        if isinstance(s, ir.FragMulAdd):
            for name in (s.a, s.b, s.c):
                if name in pending:
                    out.append(pending.pop(name))
        else:
            out += pending.values()
            pending.clear()
        if isinstance(s, ir.For):
            s = s.model_copy(update={"body": lazy_fragment_loads(s.body)})
        out.append(s)
    out += pending.values()
    return tuple(out)


def lowered(kernel: ir.Kernel, refills_first: bool = True) -> ir.Kernel:
    """``backends.spirv.lower.lower``'s kernel, with the converting copies' refills where
    asked."""
    kernel = spirv_lower.staged_copies(converting_copies(kernel, refills_first))
    return packed_store.elements(spirv_lower.unsigned_accumulators(kernel))


def fragments_ahead(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` (lowered) with each loop of staged steps (``_step_loop``) multiplying one
    step late: each trip loads its step's fragments after its barrier and multiplies those
    the trip before loaded (from its second trip on), and the last trip's products follow
    the loop (where it ran), so that no multiply-add waits on the fragment loads just issued;
    the fragments of two steps are held at once. Each accumulator takes the same products in
    the same order: the kernel's bits."""
    def ahead(s: ir.Stmt) -> list[ir.Stmt] | None:
        split = _step_loop(s)
        if split is None:
            return None
        assert isinstance(s, ir.For)
        head, loads, products = split
        later = ir.If(cond=binary(BinOp.GT, var(s.var), s.start), then=products)
        last = ir.If(cond=binary(BinOp.LT, s.start, s.stop), then=products)
        return [s.model_copy(update={"body": (*head, later, *loads)}), last]

    return kernel.model_copy(update={"body": replace_statements(kernel.body, ahead)})


def _step_loop(s: ir.Stmt) -> tuple[tuple[ir.Stmt, ...], tuple[ir.Stmt, ...],
                                    tuple[ir.Stmt, ...]] | None:
    """A loop of staged steps split into what precedes its fragment statements (a barrier
    among them), its fragment loads and its multiply-adds, or None for any other statement:
    a ``For`` of constant positive step whose bounds are constants or variables the body
    assigns nothing to, whose body ends with loads of distinct fragments, then multiply-adds
    that read those alone as A and B and accumulate into fragments nothing else in the loop
    names, with no other fragment statement (one sub-step a step)."""
    if not (isinstance(s, ir.For) and isinstance(s.step, ir.Const) and s.step.value > 0
            and all(isinstance(b, ir.Const | ir.Var) for b in (s.start, s.stop))):
        return None
    body = s.body
    n = len(body)
    while n and isinstance(body[n - 1], ir.FragMulAdd):
        n -= 1
    first = n
    while first and isinstance(body[first - 1], ir.FragLoad):
        first -= 1
    head, loads, products = body[:first], body[first:n], body[n:]
    loaded = [x.frag for x in loads if isinstance(x, ir.FragLoad)]
    accs = {p.d for p in products if isinstance(p, ir.FragMulAdd)}
    assigned = {a.name for a in walk(head) if isinstance(a, ir.Assign | ir.Let)}
    bounds = {b.name for b in (s.start, s.stop) if isinstance(b, ir.Var)}
    fragment = ir.STATEMENT_FAMILIES["fragment"]
    if (not products or not loads or len(set(loaded)) != len(loaded)
            or not any(isinstance(h, ir.Barrier) for h in head)
            or any(isinstance(h, fragment) for h in walk(head)) or assigned & bounds
            or accs & set(loaded)
            or any(isinstance(p, ir.FragMulAdd) and (p.c != p.d or {p.a, p.b} - set(loaded))
                   for p in products)):
        return None
    return head, loads, products


class _OneLoop(_Module):
    """The printer with no loop printed twice: every trip's copies tested."""

    def hoisted(self, loop: ir.For) -> list[tuple[ir.StageCopy, ir.Expr]]:
        return []


class _LandAfterFirstLoop(_Module):
    """The printer with every held copy landed where the first of a loop printed twice ends,
    its words then zeros: the words still in flight there are dead past it, so the driver
    needs no copies of them at that loop's exit (its code copied the words the last step
    loaded into the second loop's registers on every trip, which waited for the loads)."""

    def trips(self, s: ir.For, var: str, stop: str, step: str, unroll: int,
              inside: list[tuple[ir.StageCopy, ir.Expr]]) -> None:
        super().trips(s, var, stop, step, unroll, inside)
        if not inside:
            return
        v4, zero = self.quad_type(), self.const(0, ir.ElemType.U32)
        empty = self.op(v4, "OpCompositeConstruct", zero, zero, zero, zero)
        for sets in self.held.values():
            for held in sets:
                self.land(held)
                for word in held.words:
                    self.do("OpStore", word, empty)


class _LandAtOnce(_Module):
    """The printer with each copy's words stored into workgroup memory right after their
    loads (a copy complete when issued), instead of held until the wait."""

    last: tuple[str, int, int] | None = None

    def copy_key(self, s: ir.StageCopy) -> tuple[str, int, int] | None:
        self.last = super().copy_key(s)
        return self.last

    def stage_copy(self, s: ir.StageCopy) -> None:
        self.last = None
        super().stage_copy(s)
        if self.last is not None:
            self.land(self.held[self.last][self.commits % self.depth])


class _ByteShuffles(_Module):
    """The printer with each byte plane of a landed word made by byte shuffles of the loaded
    words' components (``OpVectorShuffle`` of ``u8vec4``) instead of shifts and masks."""

    def converted(self, words: list[str], part: ir.CopyPart) -> str:
        if part.into is not ir.ElemType.U8:
            return super().converted(words, part)
        u8 = self.type_of(ir.ElemType.U8)
        v2 = self.declare(("v2u8",), "%v2u8", f"{{id}} = OpTypeVector {u8} 2")
        v4 = self.declare(("v4u8",), "%v4u8", f"{{id}} = OpTypeVector {u8} 4")
        u32 = self.type_of(ir.ElemType.U32)
        p = part.index
        out = []
        for loaded in words:
            c = [self.op(v4, "OpBitcast", self.op(u32, "OpCompositeExtract", loaded, str(i)))
                 for i in range(4)]
            low = self.op(v2, "OpVectorShuffle", c[0], c[1], str(p), str(4 + p))
            high = self.op(v2, "OpVectorShuffle", c[2], c[3], str(p), str(4 + p))
            out.append(self.op(u32, "OpBitcast", self.op(v4, "OpVectorShuffle", low, high,
                                                         "0", "1", "2", "3")))
        return self.op(self.quad_type(), "OpCompositeConstruct", *out)


class _ConvertBf16(_Module):
    """The printer with f32 rounded to bf16 by ``OpFConvert`` to the bf16 float type (under
    RoundingModeRTE 16) instead of integer arithmetic; NaNs as before."""

    def f32_to_bf16(self, f: str) -> str:
        u16, u32 = self.type_of(ir.ElemType.U16), self.type_of(ir.ElemType.U32)
        bool_t = self.type_of(ir.ElemType.BOOL)
        self.float_widths.add(16)
        bits = self.op(u16, "OpBitcast", self.op(self.bf16_component(), "OpFConvert", f))
        high = self.op(u32, "OpShiftRightLogical", self.op(u32, "OpBitcast", f), self.u32(16))
        quiet = self.op(u16, "OpUConvert", self.op(u32, "OpBitwiseOr", high, self.u32(0x40)))
        return self.op(u16, "OpSelect", self.op(bool_t, "OpIsNan", f), quiet, bits)


PRINTERS: dict[str, type[_Module]] = {"one loop": _OneLoop, "land at once": _LandAtOnce,
                                      "land after the first loop": _LandAfterFirstLoop,
                                      "byte shuffles": _ByteShuffles,
                                      "bf16 by OpFConvert": _ConvertBf16}


def kernel_variant(kernel: ir.Kernel, name: str) -> str | None:
    """The module of variant ``name`` built from the kernel (None where it is a text
    variant, or changes nothing)."""
    if name in PRINTERS:
        return PRINTERS[name](spirv_lower.lower(kernel)).render()
    if name == "fragments a step ahead":
        low = spirv_lower.lower(kernel)
        ahead = fragments_ahead(low)
        return None if ahead == low else print_kernel(ahead)
    if name == "lazy fragment loads":
        low = spirv_lower.lower(kernel)
        return print_kernel(low.model_copy(update={"body": lazy_fragment_loads(low.body)}))
    if name == "refills late":
        late = lowered(kernel, refills_first=False)
        return None if late == spirv_lower.lower(kernel) else print_kernel(late)
    return None


def keep_machine_code(folder: Path, name: str, cache: bytes) -> None:
    """``cache`` (a pipeline cache's data) as ``folder/name.cache``, with its disassembly
    as ``.cache.sass`` where ``nvdisasm`` is on ``PATH``; ``name`` made a file name."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (re.sub(r"[^A-Za-z0-9_.-]+", "_", name) + ".cache")
    path.write_bytes(cache)
    if shutil.which("nvdisasm"):
        try:
            path.with_name(path.name + ".sass").write_text(disassembly(cache))
        except (ValueError, RuntimeError, subprocess.CalledProcessError) as e:
            print(f"{path}: no disassembly ({e})", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--case", action="append", default=[], metavar="LOWERING=SCHEDULE",
                        help="a lowering and a schedule to profile (F16_operands="
                             "t128x256k16s2); may be repeated")
    parser.add_argument("--variant", action="append", default=[], metavar="CASE:VARIANT",
                        help="a variant (see the module docstring) of a case (its "
                             "LOWERING=SCHEDULE, or * for every case); may be repeated")
    parser.add_argument("--same-tiling", action="store_true",
                        help="also time each case's schedule through CUDA")
    parser.add_argument("--out", default="vulkan_profile_h200.json")
    parser.add_argument("--machine-code", type=Path, metavar="DIR",
                        help="write each row's pipeline cache data (the driver's binary) to "
                             "DIR, and its disassembly where nvdisasm is on PATH "
                             "(bench/vulkan_machine_code.py)")
    opts = parser.parse_args(argv)
    n, flops = opts.n, 2.0 * opts.n ** 3
    arch = device_arch()
    rows: list[dict[str, Any]] = []

    def row(**r: Any) -> None:
        if "median_s" in r:
            r["tflops"] = flops / r["median_s"] / 1e12
        rows.append(r)
        stats = r.get("statistics", {})
        regs = next((v for k, v in stats.items() if "register" in k.lower()), None)
        print(f"{r['lowering']:17} {r['schedule']:14} {r['variant']:28} "
              + (f"{r['median_s'] * 1e3:8.3f} ms {r['tflops']:7.1f} TFLOP/s"
                 + (f"  regs {regs:.0f}" if regs is not None else "")
                 + (f"  same bits as printed: {r['same_bits']}" if "same_bits" in r else "")
                 + (f"  as CUDA's: {r['bit_identical_to_cuda']}"
                    if "bit_identical_to_cuda" in r else "")
                 if "median_s" in r else f"error: {r.get('error')}"), flush=True)

    cases = [tuple(c.split("=", 1)) for c in opts.case]
    wanted: dict[str, list[str]] = {}
    for v in opts.variant:
        which, _, name = v.rpartition(":")
        wanted.setdefault(which, []).append(name)
    references: dict[str, np.ndarray] = {}
    originals: dict[str, Any] = {}
    for lowering_name, schedule_name in cases:
        lowering = Lowering(lowering_name)
        example = EXAMPLES[lowering]
        if example not in originals:
            originals[example] = load_module(ROOT / "examples" / f"{example}.py").make(n, n, n)
        original = originals[example]
        want = references.get(lowering_name)
        if want is None:
            cuda = compile_launch(target("cuda"), original, lowering=lowering)
            assert cuda.rewritten is not None
            c = cuda.gemm.c.array if cuda.gemm else "c"
            row(lowering=lowering_name, schedule=cuda.rewritten.schedule.name,
                variant="CUDA policy", median_s=kernel_seconds(cuda, arch))
            want = references[lowering_name] = kernel_output(cuda, arch, c)
        schedule = Schedule.parse(schedule_name)
        if opts.same_tiling:
            try:
                same = compile_launch(target("cuda"), original, lowering=lowering,
                                      schedule=schedule)
                row(lowering=lowering_name, schedule=schedule_name, variant="CUDA",
                    median_s=kernel_seconds(same, arch))
            except Exception as e:  # the Vulkan rows still mean something
                row(lowering=lowering_name, schedule=schedule_name, variant="CUDA",
                    error=str(e)[:300])
        try:
            compiled = compile_launch(target("vulkan"), original, lowering=lowering,
                                      schedule=schedule)
        except SarekError as e:
            row(lowering=lowering_name, schedule=schedule_name, variant="Vulkan as printed",
                error=e.reason[:300])
            continue
        launch = compiled.launch
        c = compiled.gemm.c.array if compiled.gemm else "c"
        printed = spirv_lower.lower(launch.kernel)
        text = print_kernel(printed)
        variants: dict[str, str | None] = {"as printed": text}
        for name in wanted.get("*", []) + wanted.get(f"{lowering_name}={schedule_name}", []):
            variants[name] = (TEXT_VARIANTS[name](text) if name in TEXT_VARIANTS
                              else kernel_variant(launch.kernel, name))
        reference: np.ndarray | None = None
        for label, module in variants.items():
            if module is None:
                continue
            stats: dict[str, float] = {}
            binary: list[bytes] | None = [] if opts.machine_code else None
            try:
                out, times = time_kernel(launch.kernel, dict(launch.args), launch.grid,
                                         launch.block, REPEATS, text=runnable(module, device()),
                                         statistics=stats, binary=binary)
                if binary:
                    keep_machine_code(opts.machine_code, f"{lowering_name}_{schedule_name}_"
                                      f"{label}", binary[0])
            except (SarekError, subprocess.CalledProcessError, AssertionError) as e:
                row(lowering=lowering_name, schedule=schedule_name, variant=label,
                    error=str(e)[:300])
                continue
            except Exception as e:  # a driver refusal of one variant ends no run
                row(lowering=lowering_name, schedule=schedule_name, variant=label,
                    error=f"{type(e).__name__}: {e}"[:300])
                continue
            bits = out[c].view(f"u{out[c].dtype.itemsize}")
            extra: dict[str, Any] = {"statistics": stats}
            if label not in STRIPPED:
                if reference is None:
                    reference = bits
                else:
                    extra["same_bits"] = bool(np.array_equal(bits, reference))
                extra["bit_identical_to_cuda"] = bool(np.array_equal(bits, want))
            row(lowering=lowering_name, schedule=schedule_name, variant=label,
                median_s=statistics.median(times), **extra)
    (ROOT / "bench" / "results" / opts.out).write_text(json.dumps(
        {"device": device_name(), "n": n, "repeats": REPEATS, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
