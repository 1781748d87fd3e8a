"""Every SPIR-V module the printer gives for a GEMM passes ``spirv-val``, whatever number of ids
comes before an instruction and whatever the user named things: generated GEMMs (``gemm_gen``)
over i32, f16, bf16 and f32 operands, in its layouts, guards, mappings and epilogues, with
parameters dropped, added and renamed to words the printer uses for its own ids (``u32``,
``float``, ``main`` ...), as written and rewritten with the target's staging under every
lowering that takes their operands at every subgroup and fragment the target prints. Two
regressions are pinned apart: a numbered id printed as ``%u32``, the name of the 32-bit unsigned
type, and a guarded bf16 operand typed as a bf16 float where its padding was a 16-bit pattern."""

from __future__ import annotations

import hashlib
import linecache
import re
from dataclasses import dataclass, replace
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from gemm_gen import GemmSpec, gemm_specs, geometry, launch, source
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import sarek
from backends.registry import target
from backends.spirv import check, tools_reason
from sarek import Global, bf16, block_dim, block_idx, f32, i32, ir, thread_idx
from sarek.launch import Launch
from sarek.matrix_rewrite import EXTRA_NAMES, rewrite_launch
from sarek.matrix_scheme import Lowering

pytestmark = pytest.mark.skipif(tools_reason() is not None,
                                reason=f"SPIRV-Tools unavailable: {tools_reason()}")

SPIRV = target("spirv")
LOWERINGS = {"i32": (Lowering.INT32_BYTE_PLANES,), "f16": (Lowering.F16_OPERANDS,),
             "bf16": (Lowering.BF16_OPERANDS,),
             "f32": (Lowering.BF16X3_OPERANDS, Lowering.BF16_OPERANDS, Lowering.F16_OPERANDS)}
"""The lowerings that take each operand type."""

PRINTER_WORDS = ("u32", "float", "int", "uint", "f32", "v4", "i32", "u16", "u8", "f16", "bf16",
                 "bool", "void", "main", "entry", "glsl", "params", "true", "false", "c_i32_0",
                 "c_u32_1", "fn_void", "v3u32", "PushConstants", "LocalInvocationId",
                 "local_size_x", "p_st_u32", "rta_u32", "buffer_f32", "cm_acc_f32_16x16", "x1")
"""Names a user may give that are, or look like, ids the printer names itself."""

GEN_NAMES = ("a", "b", "c", "bias", "m", "n", "k", "alpha", "beta", "batches", "acc", "row",
             "col", "p", "tid", "z")
"""The names ``gemm_gen.source`` writes (parameters and locals)."""

SETTINGS = settings(deadline=None, derandomize=True,  # the same cases, and time, every run
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# --------------------------------------------------------------------------- the cases


@dataclass(frozen=True)
class Case:
    """A generated GEMM: ``spec`` over ``elem`` operands into a ``c_elem`` output, the names
    ``gemm_gen`` writes renamed by ``names``, and unused parameters ``extra`` added."""

    spec: GemmSpec
    elem: str
    c_elem: str
    names: tuple[tuple[str, str], ...]
    extra: tuple[tuple[str, str], ...]  # (name, annotation)

    def used(self) -> set[str]:
        """The parameters the kernel reads (``gemm_gen`` declares them all)."""
        s = self.spec
        out = {"a", "b", "c", "m", "n", "k"}
        if "bias" in (s.init, s.epilogue):
            out.add("bias")
        if s.epilogue == "alpha_beta":
            out |= {"alpha", "beta"}
        if s.batch:
            out.add("batches")
        return out

    def base(self) -> GemmSpec:
        """The spec ``gemm_gen`` writes: i32 throughout, or f32 for float operands."""
        return replace(self.spec, elem="i32" if self.elem == "i32" else "f32")


def case_source(case: Case) -> str:
    """The case's kernel as DSL source text."""
    head, body = source(case.base()).split("\n", 1)
    params = [p.strip() for p in head[head.index("(") + 1:head.rindex(")")].split(",")]
    kept = [p for p in params if p.split(":")[0] in case.used()]
    kept = [re.sub(r"^(a|b): Global\[\w+\]", rf"\1: Global[{case.elem}]", p) for p in kept]
    kept = [re.sub(r"^c: Global\[\w+\]", f"c: Global[{case.c_elem}]", p) for p in kept]
    kept += [f"{name}: {annotation}" for name, annotation in case.extra]
    rename = dict(case.names)
    return re.sub(r"(?<![.\w])\w+\b", lambda m: rename.get(m[0], m[0]),
                  f"def gemm({', '.join(kept)}):\n{body}")


def case_args(case: Case) -> dict[str, Any]:
    """The case's arguments by (renamed) parameter name."""
    values = launch(case.base())
    dtypes = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
    for name, elem in (("a", case.elem), ("b", case.elem), ("c", case.c_elem)):
        if elem in dtypes:
            values[name] = values[name].astype(dtypes[elem])
    args = {name: v for name, v in values.items() if name in case.used()}
    for name, annotation in case.extra:
        args[name] = np.zeros(4, np.float32) if annotation.startswith("Global") else 0
    rename = dict(case.names)
    return {rename.get(name, name): v for name, v in args.items()}


_NAMESPACE = {name: getattr(sarek, name) for name in (
    "Global", "i32", "f16", "bf16", "f32", "block_idx", "block_dim", "thread_idx")}


def kernel_of(text: str) -> ir.Kernel:
    """The kernel of DSL source text (one ``def gemm``), parsed as if it were in a file."""
    filename = f"<spirv_validity {hashlib.sha1(text.encode()).hexdigest()[:12]}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    namespace: dict[str, Any] = dict(_NAMESPACE)
    exec(compile(text, filename, "exec"), namespace)
    return sarek.kernel(namespace["gemm"]).ir


def case_launch(case: Case) -> Launch:
    """The case's kernel and its launch."""
    text = case_source(case)
    note(text)
    grid, block = geometry(case.spec)
    return Launch(kernel_of(text), case_args(case), grid, block)


@st.composite
def cases(draw: st.DrawFn, elem: str) -> Case:
    """A generated GEMM over ``elem`` operands, its sizes, names and parameters varied."""
    spec = draw(gemm_specs(elem="i32" if elem == "i32" else "f32"))
    spec = replace(spec, m=draw(st.integers(1, 70)), n=draw(st.integers(1, 70)),
                   k=draw(st.integers(1, 40)), grid_delta=(0, 0, 0))
    # a float kernel calls f32(...); the rewrite adds parameters of its own
    taken = {*EXTRA_NAMES, *(("f32",) if elem != "i32" else ())}
    words = draw(st.permutations([w for w in PRINTER_WORDS if w not in taken]))
    renamed = draw(st.lists(st.sampled_from(GEN_NAMES), unique=True))
    names = tuple(zip(renamed, words, strict=False))
    spare = words[len(names):len(names) + draw(st.integers(0, 6))]
    extra = tuple((w, draw(st.sampled_from(("i32", "f32", "Global[f32]", "Global[i32]"))))
                  for w in spare)
    c_elem = draw(st.sampled_from((elem, "f32"))) if elem in ("f16", "bf16") else elem
    return Case(spec, elem, c_elem, names, extra)


def validates(kernel: ir.Kernel) -> None:
    """Prints ``kernel`` for SPIR-V; ``SpirvToolError`` with spirv-val's message if rejected."""
    check(sarek.emit(kernel, target="spirv"))


# --------------------------------------------------------------------------- generated GEMMs


@pytest.mark.parametrize("elem", list(LOWERINGS))
@settings(SETTINGS, max_examples=10)
@given(data=st.data())
def test_every_generated_gemm_as_written_validates(elem: str, data: st.DataObject) -> None:
    validates(case_launch(data.draw(cases(elem))).kernel)


@pytest.mark.parametrize("elem, lowering", [(e, low) for e, lows in LOWERINGS.items()
                                            for low in lows])
@settings(SETTINGS, max_examples=2)
@given(data=st.data())
def test_every_generated_gemm_rewritten_validates_at_every_subgroup_and_fragment(
        elem: str, lowering: Lowering, data: st.DataObject) -> None:
    original = case_launch(data.draw(cases(elem)))
    printed = 0
    for subgroup in SPIRV.subgroups:
        for frag in SPIRV.fragments:
            if SPIRV.refuses(lowering, subgroup, frag) is None:
                note(f"{lowering} at subgroup {subgroup}, fragment {frag}")
                validates(rewrite_launch(original, lowering=lowering, subgroup=subgroup,
                                         frag=frag, staging=SPIRV.staging).launch.kernel)
                printed += 1
    assert printed == 4


# --------------------------------------------------------------------------- regressions


@sarek.kernel
def square(a: Global[f32], b: Global[f32], c: Global[f32], n: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < n and col < n:
        acc = f32(0.0)
        for p in range(n):
            acc += a[row * n + p] * b[p * n + col]
        c[row * n + col] = acc


@sarek.kernel
def square_bf16(a: Global[bf16], b: Global[bf16], c: Global[f32], n: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < n and col < n:
        acc = f32(0.0)
        for p in range(n):
            acc += a[row * n + p] * b[p * n + col]
        c[row * n + col] = acc


@sarek.kernel
def printer_words(u32: Global[i32], float: Global[i32], int: Global[i32], uint: i32, f32: i32,
                  v4: i32):
    main = block_idx.y * block_dim.y + thread_idx.y
    entry = block_idx.x * block_dim.x + thread_idx.x
    if main < uint and entry < f32:
        i32 = 0
        for bool in range(v4):
            i32 += u32[main * v4 + bool] * float[bool * f32 + entry]
        int[main * f32 + entry] = i32


def square_launch(kernel: ir.Kernel, operands: type, n: int = 48) -> Launch:
    args = {"a": np.ones(n * n, operands), "b": np.ones(n * n, operands),
            "c": np.zeros(n * n, np.float32), "n": n}
    return Launch(kernel, args, grid=(3, 3, 1), block=(16, 16, 1))


def test_numbered_ids_never_take_the_name_of_a_type_or_constant() -> None:
    launch = square_launch(square.ir, np.float32)
    rewritten = rewrite_launch(launch, staging=SPIRV.staging).launch.kernel
    for kernel in (launch.kernel, rewritten):
        text = sarek.emit(kernel, target="spirv")
        check(text)
        defined = re.findall(r"^\s*(%\w+) = ", text, re.MULTILINE)
        assert defined.count("%u32") == 1  # the type, never the 32nd numbered id
        assert all(re.fullmatch(r"%(\d+(_\w+)?|[A-Za-z]\w*)", x) for x in defined)


def test_parameters_and_locals_named_like_the_printers_ids_get_ids_of_their_own() -> None:
    args = {"u32": np.ones(32 * 32, np.int32), "float": np.ones(32 * 32, np.int32),
            "int": np.zeros(32 * 32, np.int32), "uint": 32, "f32": 32, "v4": 32}
    launch = Launch(printer_words.ir, args, grid=(2, 2, 1), block=(16, 16, 1))
    validates(launch.kernel)
    validates(rewrite_launch(launch, staging=SPIRV.staging).launch.kernel)


def test_a_guarded_bf16_operand_has_the_16_bit_pattern_type_of_its_padding() -> None:
    launch = square_launch(square_bf16.ir, ml_dtypes.bfloat16)
    rewritten = rewrite_launch(launch, lowering=Lowering.BF16_OPERANDS,
                               staging=SPIRV.staging).launch.kernel
    text = sarek.emit(rewritten, target="spirv")
    check(text)
    # the bf16 float type is for cooperative-matrix components only, reached by OpBitcast
    assert set(re.findall(r"%\d+ = (Op\w+) %bf16 ", text)) <= {"OpBitcast"}
