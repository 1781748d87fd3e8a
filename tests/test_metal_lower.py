"""The Metal lowering, simulated as printed: the lowered kernel keeps matrix-level fragments
(Metal's simdgroup matrices have an opaque lane layout), so for every example and lowering it
must give the neutral rewrite's bits under the target's model (``sequential``), and, where the
arithmetic fixes the answer, the NumPy reference's. Everything Metal lacks is refused with
the reason, through the registry and in the lowering itself; errors planted in a lowered
kernel make the comparison fail."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import sarek
from backends.cstyle import EmitError
from backends.metal import lower as metal_lower
from backends.registry import names, target
from sarek import ir
from sarek.coopmat import Available, Unavailable, verdict
from sarek.ir import ElemType, FragLayout, FragUse, MemSpace
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_pattern import recognize
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering, config_of, lowerings_taking

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("gemm_*.py"))
METAL = target("metal")
EIGHT = ir.FragShape(m=8, n=8, k=8)  # Metal's one simdgroup matrix shape


def rewrites(size: tuple[int, int, int] = (70, 45, 33)) -> Iterator[tuple[str, Launch]]:
    """Every example rewritten under every lowering Metal prints for its operands."""
    for path in EXAMPLES:
        launch = load_module(path).make(*size)
        for lowering in lowerings_taking(recognize(launch.kernel).operand_elt):
            if METAL.refuses(lowering, 32, 8) is None:
                yield f"{path.stem}-{lowering}", rewrite_launch(
                    launch, lowering=lowering, subgroup=32, frag=8,
                    staging=METAL.staging).launch


CASES = list(rewrites())


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def neutral(rw: Launch) -> dict[str, np.ndarray]:
    return rw.simulate(arith=METAL.arith)


def test_metal_is_registered_with_sequential_arithmetic_and_no_device() -> None:
    assert "metal" in names()
    assert METAL.arith == "sequential"
    assert METAL.run is None
    assert "macOS" in (METAL.device_reason() or "")


@pytest.mark.parametrize("rw", [rw for _, rw in CASES], ids=[name for name, _ in CASES])
def test_the_metal_lowered_kernel_simulates_to_the_neutral_kernels_bits(rw: Launch) -> None:
    assert same_bits(rw.simulate(target="metal"), neutral(rw))


def test_every_float_example_has_a_metal_rewrite() -> None:
    covered = {name.split("-")[0] for name, _ in CASES}
    assert covered == {p.stem for p in EXAMPLES} - {"gemm_i32", "gemm_i8"}
    assert len(CASES) == 22


def test_the_f16_rewrite_on_metal_is_bit_identical_to_numpy() -> None:
    """f16 products are exact in f32 and the sequential model adds them in k order, as the
    original kernel does: the Metal rewrite must reproduce the reference exactly."""
    module = load_module(next(p for p in EXAMPLES if p.stem == "gemm_f16"))
    for size in ((70, 45, 33), (128, 96, 64), (17, 5, 0)):
        launch = module.make(*size)
        rw = rewrite_launch(launch, lowering=Lowering.F16_OPERANDS, subgroup=32, frag=8,
                            staging=METAL.staging).launch
        got = rw.simulate(target="metal")["c"]
        assert np.array_equal(got.view(np.uint16), module.reference(launch)["c"].view(np.uint16))


def test_the_lowered_kernel_keeps_the_fragments_whole() -> None:
    for _, rw in CASES:
        lowered = metal_lower.lower(rw.kernel)
        assert lowered.body == rw.kernel.body and lowered.subgroup == 32
        kinds = {s.kind for s in walk(lowered.body)}
        assert {"frag_decl", "frag_load", "frag_mul_add", "frag_store"} <= kinds
        assert not kinds & {"ldmatrix", "mma", "tile_apply"}


def test_originals_lower_unchanged() -> None:
    for path in EXAMPLES:
        kernel = load_module(path).make(8, 8, 8).kernel
        assert metal_lower.lower(kernel) == kernel


def test_lowering_validates_its_input() -> None:
    bad = ir.Kernel(name="bad", params=(), body=(
        ir.Store(array="nowhere", index=ir.Const(value=0, type=ElemType.I32),
                 value=ir.Const(value=0, type=ElemType.I32)),))
    with pytest.raises(sarek.IRError, match="nowhere"):
        metal_lower.lower(bad)


# ----------------------------------------------------------------- refusals, with reasons


def f16_launch(size: tuple[int, int, int] = (16, 16, 16)) -> Launch:
    launch: Launch = load_module(next(p for p in EXAMPLES if p.stem == "gemm_f16")).make(*size)
    return launch


def test_the_registry_refuses_fragment_16_subgroup_64_and_byte_planes_saying_why() -> None:
    assert METAL.refuses(Lowering.F16_OPERANDS, 32, 8) is None
    assert "8x8" in (METAL.refuses(Lowering.F16_OPERANDS, 32, 16) or "")
    assert "SIMD-groups of 32" in (METAL.refuses(Lowering.F16_OPERANDS, 64, 8) or "")
    assert "no integer simdgroup matrices" in (
        METAL.refuses(Lowering.INT32_BYTE_PLANES, 32, 8) or "")


def test_a_16x16_fragment_is_refused_with_the_reason() -> None:
    rw = rewrite_launch(f16_launch(), lowering=Lowering.F16_OPERANDS, frag=16).launch
    with pytest.raises(EmitError, match="16x16; Metal's simdgroup matrices are 8x8"):
        sarek.emit(rw.kernel, "metal")
    with pytest.raises(EmitError, match="8x8"):
        sarek.simulate(rw.kernel, dict(rw.args), rw.grid, rw.block, target="metal")


def test_a_kernel_for_subgroups_of_64_is_refused_with_the_reason() -> None:
    rw = rewrite_launch(f16_launch(), lowering=Lowering.F16_OPERANDS, subgroup=64,
                        frag=8).launch
    with pytest.raises(EmitError, match="subgroups of 64; Apple GPUs run SIMD-groups of 32"):
        sarek.emit(rw.kernel, "metal")


def test_the_byte_planes_are_refused_with_the_reason() -> None:
    launch = load_module(next(p for p in EXAMPLES if p.stem == "gemm_i32")).make(16, 16, 16)
    rw = rewrite_launch(launch, lowering=Lowering.INT32_BYTE_PLANES, frag=8).launch
    with pytest.raises(EmitError, match="i32: Metal has no integer simdgroup matrices"):
        sarek.emit(rw.kernel, "metal")


def frag_kernel(a_elem: ElemType, acc_elem: ElemType = ElemType.F32,
                space: MemSpace = MemSpace.SHARED, layout: FragLayout = FragLayout.ROW,
                stride: int = 8) -> ir.Kernel:
    """One SIMD-group: A and B from an array, multiplied into a filled accumulator, stored."""
    zero = ir.Const(value=0, type=ElemType.I32)
    body: list[ir.Stmt] = [
        ir.ArrayDecl(name="s", elem=a_elem, size=64, space=space),
        ir.ArrayDecl(name="cs", elem=acc_elem, size=64, space=MemSpace.SHARED),
        ir.FragDecl(name="fa", use=FragUse.A, shape=EIGHT, elem=a_elem),
        ir.FragDecl(name="fb", use=FragUse.B, shape=EIGHT, elem=a_elem),
        ir.FragDecl(name="acc", use=FragUse.ACCUMULATOR, shape=EIGHT, elem=acc_elem),
        ir.FragFill(frag="acc", value=ir.Const(value=0.0 if acc_elem.is_float else 0,
                                               type=acc_elem)),
        ir.FragLoad(frag="fa", array="s", offset=zero,
                    stride=ir.Const(value=stride, type=ElemType.I32), layout=layout),
        ir.FragLoad(frag="fb", array="s", offset=zero,
                    stride=ir.Const(value=8, type=ElemType.I32)),
        ir.FragMulAdd(d="acc", a="fa", b="fb", c="acc"),
        ir.FragStore(frag="acc", array="cs", offset=zero,
                     stride=ir.Const(value=8, type=ElemType.I32)),
    ]
    return ir.Kernel(name="one_product", params=(), body=tuple(body), subgroup=32)


def test_f32_operand_fragments_are_refused_with_the_reason() -> None:
    with pytest.raises(EmitError, match="multiplies f16 and bf16 operands"):
        sarek.emit(frag_kernel(ElemType.F32), "metal")


def test_a_negative_constant_stride_is_refused() -> None:
    with pytest.raises(EmitError, match="elements_per_row is unsigned"):
        sarek.emit(frag_kernel(ElemType.F16, stride=-8), "metal")


def test_f64_anywhere_is_refused_with_the_reason() -> None:
    from arith_cases import binary_kernel, cast_kernel

    kernel, _ = binary_kernel(ElemType.F64)
    with pytest.raises(EmitError, match=r"parameter 'a'.*Metal has no double-precision type"):
        sarek.emit(kernel, "metal")
    with pytest.raises(EmitError, match=r"f64 .*Metal has no double"):
        sarek.emit(cast_kernel(ElemType.F32), "metal")  # a cast to f64, among others


def test_nvidia_tile_instructions_are_refused() -> None:
    seed = load_module(EXAMPLES[0].parent / "ldmatrix_interleaved.py").make()
    with pytest.raises(EmitError,
                       match=r"Metal has no (tensor_view|tile_apply) statement: tile patterns"):
        sarek.emit(seed.kernel, "metal")


def test_names_metal_reserves_are_refused() -> None:
    kernel = ir.Kernel(name="k", params=(ir.ArrayParam(name="half", elem=ElemType.F32),),
                       body=())
    with pytest.raises(EmitError, match=r"'half' .* Metal or the Metal printer reserves"):
        sarek.emit(kernel, "metal")


# ----------------------------------------------------------------- the gate


def test_the_gate_offers_exactly_what_the_printer_prints() -> None:
    support = METAL.support()
    assert support.configs is not None
    offered = set()
    for lowering in Lowering:
        for elt in (ElemType.F16, ElemType.BF16, ElemType.F32, ElemType.I32):
            try:
                config = config_of(lowering, elt, 8)
            except sarek.SarekError:
                continue
            if lowering in METAL.lowerings:
                assert verdict(config, support) == Available(), config
                offered.add(config)
            else:
                assert isinstance(verdict(config, support), Unavailable), config
    assert offered == set(support.configs)
    for config in support.configs:  # every offered form prints
        kernel = frag_kernel(ElemType.F16 if config.a.value == "f16" else ElemType.BF16)
        assert "simdgroup_multiply_accumulate" in sarek.emit(kernel, "metal")


# ----------------------------------------------------------------- planted errors


def mutated(kernel: ir.Kernel, change: Callable[[ir.Stmt], ir.Stmt | None]) -> ir.Kernel:
    """``kernel`` with ``change`` applied to the first statement (program order, nested ones
    included) it changes."""
    done = False

    def block(stmts: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
        nonlocal done
        out = []
        for s in stmts:
            new = None if done else change(s)
            if new is not None:
                done = True
                out.append(new)
                continue
            if isinstance(s, ir.For | ir.While):
                s = s.model_copy(update={"body": block(s.body)})
            elif isinstance(s, ir.If):
                s = s.model_copy(update={"then": block(s.then), "orelse": block(s.orelse)})
            out.append(s)
        return tuple(out)

    result = kernel.model_copy(update={"body": block(kernel.body)})
    assert done, "the mutation found nothing to change"
    return result


def caught(change: Callable[[ir.Stmt], ir.Stmt | None]) -> bool:
    """Whether a lowering that made ``change`` would be caught: the lowered kernel with the
    change, simulated, differs from the neutral kernel for some case."""
    for _, rw in CASES[:4]:
        bad = mutated(metal_lower.lower(rw.kernel), change)
        if not same_bits(sarek.simulate(bad, dict(rw.args), rw.grid, rw.block,
                                        arith=METAL.arith), neutral(rw)):
            return True
    return False


def transpose_b(s: ir.Stmt) -> ir.Stmt | None:
    if isinstance(s, ir.FragLoad) and s.frag.startswith("sk_fb"):
        return s.model_copy(update={"layout": FragLayout.COL})
    return None


def wrong_a_fragment(s: ir.Stmt) -> ir.Stmt | None:
    """A multiply-accumulate reading the A fragment of the next 8 rows."""
    if isinstance(s, ir.FragMulAdd) and s.a.endswith("_0"):
        return s.model_copy(update={"a": s.a[:-1] + "1"})
    return None


def shift_a_by_one_row(s: ir.Stmt) -> ir.Stmt | None:
    if isinstance(s, ir.FragLoad) and s.frag.startswith("sk_fa"):
        return s.model_copy(update={"offset": ir.Binary(
            op=ir.BinOp.ADD, a=s.offset, b=s.stride, type=ElemType.I32)})
    return None


def a_load_at_the_tile_origin(s: ir.Stmt) -> ir.Stmt | None:
    """An A fragment loaded from the staged tile's first rows instead of its own."""
    if isinstance(s, ir.FragLoad) and s.frag.startswith("sk_fa") and s.offset != ZERO:
        return s.model_copy(update={"offset": ZERO})
    return None


ZERO = ir.Const(value=0, type=ElemType.I32)


@pytest.mark.parametrize("change", [transpose_b, wrong_a_fragment, shift_a_by_one_row,
                                    a_load_at_the_tile_origin], ids=lambda f: f.__name__)
def test_a_planted_lowering_error_is_caught_by_the_comparison(
        change: Callable[[ir.Stmt], ir.Stmt | None]) -> None:
    assert caught(change)


def test_the_lowering_records_each_float_constant_rounded_to_its_type() -> None:
    import ml_dtypes

    values = {ElemType.F16: 0.1, ElemType.BF16: 0.1, ElemType.F32: 0.1}
    want = {ElemType.F16: float(np.float16(0.1)), ElemType.BF16: float(ml_dtypes.bfloat16(0.1)),
            ElemType.F32: float(np.float32(0.1))}
    body = tuple(ir.Store(array=f"out_{t.value}", index=ir.Const(value=0, type=ElemType.I32),
                          value=ir.Const(value=v, type=t)) for t, v in values.items())
    kernel = ir.Kernel(name="k", params=tuple(
        ir.ArrayParam(name=f"out_{t.value}", elem=t) for t in values), body=body)
    lowered = metal_lower.lower(kernel)
    got = {s.value.type: s.value.value for s in lowered.body if isinstance(s, ir.Store)
           and isinstance(s.value, ir.Const)}
    assert got == want and want[ElemType.F16] != 0.1


def test_the_metal_printer_imports_nothing_of_the_simulator() -> None:
    import ast

    source = Path(metal_lower.__file__).with_name("emit.py").read_text()
    imported = {alias.name.split(".")[0] for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {(node.module or "").split(".")[0] for node in ast.walk(ast.parse(source))
                 if isinstance(node, ast.ImportFrom)}
    assert "sim" not in imported
