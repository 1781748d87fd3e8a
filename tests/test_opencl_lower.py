"""The portable OpenCL lowering, executed as printed: fragments emulated lane by lane in local
memory give, in the simulator, the bits the neutral kernel gives under the ``sequential`` model
(the target's arithmetic model), for every example, lowering, subgroup and fragment. Planted
errors in the lowering (a missing barrier, a wrong element, products out of k order, an operand
read in place after its tile changed) are caught without any OpenCL device."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES

import sarek
from backends import conformance, registry
from backends.cstyle import EmitError
from backends.opencl import lower as opencl_lower
from backends.opencl.emit import emit, print_kernel
from sarek import ir
from sarek.ir_walk import walk
from sarek.launch import Launch
from sarek.loader import load_module
from sarek.matrix_rewrite import rewrite_launch
from sarek.matrix_scheme import Lowering

OPENCL = registry.target("opencl")
CONFIGS = ((32, 16), (32, 8), (64, 16), (64, 8))


def rewrite(example: str, lowering: Lowering, subgroup: int = 32, frag: int = 16,
            size: tuple[int, int, int] = (70, 45, 33)) -> Launch:
    launch = load_module(EXAMPLES / f"{example}.py").make(*size)
    return rewrite_launch(launch, lowering=lowering, subgroup=subgroup, frag=frag,
                          staging=OPENCL.staging).launch


def same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        np.array_equal(a[k].view(np.uint8), b[k].view(np.uint8)) for k in a)


def lowered_matches_neutral(rw: Launch) -> bool:
    return same_bits(rw.simulate(arith="sequential"), rw.simulate(target="opencl"))


def conform(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    conformance.add_arguments(parser)
    return conformance.main(parser.parse_args(argv))


@pytest.mark.slow
def test_sim_opencl_quick_every_example_lowering_subgroup_and_fragment(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-opencl", "--quick", "--report", str(path)) == 0
    data = json.loads(path.read_text())
    # 10 originals; 7 f32 examples x 3 lowerings, f16, i32 and i8 x 1, each at 4 configurations
    assert data["totals"] == {"cases": 106, "passed": 106, "mismatches": 0,
                              "canary_violations": 0, "errors": 0}
    rewritten = {(c["subgroup"], c["frag"]) for c in data["cases"] if c["lowering"]}
    assert rewritten == set(CONFIGS)


@pytest.mark.parametrize("subgroup,frag", CONFIGS, ids=lambda v: str(v))
def test_byte_planes_lowered_equal_the_neutral_kernel_exactly(subgroup: int, frag: int) -> None:
    assert lowered_matches_neutral(rewrite("gemm_i32", Lowering.INT32_BYTE_PLANES, subgroup,
                                           frag))


def test_the_lowered_kernel_is_plain_lane_explicit_ir() -> None:
    rw = rewrite("gemm_f32", Lowering.BF16X3_OPERANDS, 64, 8)
    lowered = opencl_lower.lower(rw.kernel)
    kinds = {s.kind for s in walk(lowered.body)}
    assert not kinds & {"frag_decl", "frag_fill", "frag_load", "frag_store", "frag_mul_add",
                        "frag_add", "ldmatrix", "mma"}
    assert ir.Kernel.model_validate_json(lowered.model_dump_json()) == lowered
    arrays = [s for s in walk(lowered.body) if isinstance(s, ir.ArrayDecl)]
    # accumulators are variables, not private arrays; operands are read from the staged
    # tiles (held as f32, what they are multiplied in), not copied into matrices of their own
    assert all(s.space is ir.MemSpace.SHARED for s in arrays)
    assert not any(s.name.startswith(("sk_fa_", "sk_fb_")) for s in arrays)
    tiles = {s.name: s.elem for s in arrays if s.name != "sk_cs"}
    neutral = {s.name: s.elem for s in walk(rw.kernel.body) if isinstance(s, ir.ArrayDecl)}
    assert tiles and all(neutral[n] is ir.ElemType.BF16 and t is ir.ElemType.F32
                         for n, t in tiles.items())
    accumulators = [s for s in rw.kernel.body if isinstance(s, ir.FragDecl)
                    and s.use is ir.FragUse.ACCUMULATOR]
    variables = [s for s in lowered.body if isinstance(s, ir.Let) and s.type is ir.ElemType.F32]
    # 16 running and 16 fresh accumulators (Bf16x3 sums each sub-step apart) and 16 totals
    # (of its chunks), 1 slot a lane
    assert len(accumulators) == 3 * 16 and len(variables) == 3 * 16 * (8 * 8 // 64)


@pytest.mark.parametrize("subgroup,frag", CONFIGS, ids=lambda v: str(v))
def test_bf16x3_with_its_fragment_adds_lowered_equals_the_neutral_kernel(subgroup: int,
                                                                         frag: int) -> None:
    assert lowered_matches_neutral(rewrite("gemm_f32", Lowering.BF16X3_OPERANDS, subgroup,
                                           frag))


def _loops(body: tuple[ir.Stmt, ...], stem: str) -> list[ir.For]:
    return [s for s in body if isinstance(s, ir.For) and s.var.startswith(stem)]


def _trips(loop: ir.For) -> int:
    assert isinstance(loop.stop, ir.Const)
    return int(loop.stop.value)


def test_fragment_fills_and_adds_are_written_out_slot_by_slot() -> None:
    rw = rewrite("gemm_f32", Lowering.BF16X3_OPERANDS, 32, 8, size=(70, 45, 200))  # 2 chunks
    lowered = opencl_lower.lower(rw.kernel)
    step, neutral = _loops(lowered.body, "sk_k0")[0], _loops(rw.kernel.body, "sk_k0")[0]
    fills = [s for s in walk(neutral.body) if isinstance(s, ir.FragFill)]
    adds = [s for s in walk(neutral.body) if isinstance(s, ir.FragAdd)]
    # per sub-step of 8: 16 fresh accumulators filled, then added to the 16 running ones; at
    # a chunk's end the 16 running ones added to their totals and filled again; an 8x8
    # accumulator over 32 lanes is 2 slots a lane, each an assignment of its own
    assert len(fills) == 2 * 16 + 16 and len(adds) == 2 * 16 + 16
    [end] = [s for s in step.body if isinstance(s, ir.If)
             and any(isinstance(x, ir.Assign) and x.name.startswith("sk_tot") for x in s.then)]
    for block, subs in ((step.body, 2), (end.then, 1)):
        assigns = [s for s in block if isinstance(s, ir.Assign)]
        filled = [s for s in assigns if isinstance(s.value, ir.Const)]
        added = [s for s in assigns if isinstance(s.value, ir.Binary)]
        assert len(filled) == len(added) == subs * 16 * 2
    assert not _loops(step.body, "sk_r") and not _loops(step.body, "sk_slot")


def _b_values_and_products(run: ir.For) -> tuple[list[ir.Let], list[ir.Assign]]:
    """What a run's k loop does for one trip: the B values it reads, the products it adds."""
    lets = [s for s in run.body if isinstance(s, ir.Let)]
    return ([s for s in lets if isinstance(v := s.value.x if isinstance(s.value, ir.Cast)
                                           else s.value, ir.Load)],
            [s for s in run.body if isinstance(s, ir.Assign)])


def _products(e: ir.Expr) -> int:
    """How many products a sum adds to the accumulator it starts from."""
    return _products(e.a) + 1 if isinstance(e, ir.Binary) and e.op is ir.BinOp.ADD else 0


def test_a_run_of_multiply_accumulates_is_one_k_loop_around_the_fragments() -> None:
    rw = rewrite("gemm_i32", Lowering.INT32_BYTE_PLANES, 32, 8)
    lowered = opencl_lower.lower(rw.kernel)
    products = 1 * 2  # one product of the int32 words per sub-step, two sub-steps of 8 a step
    step = _loops(lowered.body, "sk_k0")[0]
    runs = _loops(step.body, "sk_kk")
    assert len(runs) == products
    for run in runs:  # k in order outside, 8 at a time (CHAIN); inside, every product
        assert _trips(run) == 8 and isinstance(run.step, ir.Const) and run.step.value == 8
        b_values, updates = _b_values_and_products(run)
        # an 8x8 accumulator over 32 lanes: 2 rows of one column a lane; 4 B fragments of
        # 4x4 a wave, a B value for each k; each slot of the 16 accumulators one statement
        # adding its 8 products in k order
        assert len(b_values) == 4 * 8 and len(updates) == 16 * 2
        assert all(_products(u.value) == 8 for u in updates)
        assert not [s for s in run.body if isinstance(s, ir.For)]


def test_a_lane_reads_each_b_value_once_per_k_and_its_rows_of_a_in_place() -> None:
    rw = rewrite("gemm_f16", Lowering.F16_OPERANDS, 32, 16)
    lowered = opencl_lower.lower(rw.kernel)
    (run,) = _loops(_loops(lowered.body, "sk_k0")[0].body, "sk_kk")
    b_values, updates = _b_values_and_products(run)
    # a 16x16 accumulator over 32 lanes: each lane 8 rows of one column, so one B value per
    # k and B fragment (2), and 2 x 2 x 8 slots (2x2 fragments a wave) each given 8 products
    # a trip, reading A from the staged tile, held as f32 (each f16 converted once, as it is
    # staged)
    assert _trips(run) == 16 and len(b_values) == 2 * 8 and len(updates) == 2 * 2 * 8
    tiles = {s.name: s.elem for s in lowered.body if isinstance(s, ir.ArrayDecl)}
    loads = {n.array for u in updates for n in opencl_lower._nodes(u) if isinstance(n, ir.Load)}
    assert loads == {"sk_a"} and tiles["sk_a"] is ir.ElemType.F32
    assert not any(name.startswith(("sk_fa_", "sk_fb_")) for name in tiles)


def shapes_kernel(m: int, n: int, k: int, subgroup: int) -> ir.Kernel:
    """One wave: ``out[0] = a @ b[0] + c`` and ``out[1] = a @ b[1] + c`` on ``m x n x k``
    fragments from global memory, a run of two multiply-accumulates whose ``c`` is not their
    ``d``."""
    f16, f32 = ir.ElemType.F16, ir.ElemType.F32
    shape = ir.FragShape(m=m, n=n, k=k)

    def decl(name: str, use: ir.FragUse, elem: ir.ElemType) -> ir.FragDecl:
        return ir.FragDecl(name=name, use=use, shape=shape, elem=elem)

    def at(x: int) -> ir.Const:
        return ir.Const(value=x, type=ir.ElemType.I32)

    body = (decl("fa", ir.FragUse.A, f16), decl("fb0", ir.FragUse.B, f16),
            decl("fb1", ir.FragUse.B, f16), decl("fc", ir.FragUse.ACCUMULATOR, f32),
            decl("fd0", ir.FragUse.ACCUMULATOR, f32), decl("fd1", ir.FragUse.ACCUMULATOR, f32),
            ir.FragLoad(frag="fa", array="a", offset=at(0), stride=at(k)),
            ir.FragLoad(frag="fb0", array="b", offset=at(0), stride=at(n)),
            ir.FragLoad(frag="fb1", array="b", offset=at(k * n), stride=at(n)),
            ir.FragLoad(frag="fc", array="c", offset=at(0), stride=at(n)),
            ir.FragMulAdd(d="fd0", a="fa", b="fb0", c="fc"),
            ir.FragMulAdd(d="fd1", a="fa", b="fb1", c="fc"),
            ir.FragStore(frag="fd0", array="out", offset=at(0), stride=at(n)),
            ir.FragStore(frag="fd1", array="out", offset=at(m * n), stride=at(n)))
    params = (ir.ArrayParam(name="a", elem=f16), ir.ArrayParam(name="b", elem=f16),
              ir.ArrayParam(name="c", elem=f32), ir.ArrayParam(name="out", elem=f32))
    return ir.Kernel(name="shapes", params=params, body=body, subgroup=subgroup,
                     block=(subgroup, 1, 1))


def shapes_args(m: int, n: int, k: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(m * n * k)
    return {"a": rng.standard_normal(m * k).astype(np.float16),
            "b": rng.standard_normal(2 * k * n).astype(np.float16),
            "c": rng.standard_normal(m * n).astype(np.float32),
            "out": np.zeros(2 * m * n, np.float32)}


# 16x16 and 8x8: a lane's slots are rows of one column; 16x64: two columns of 16 rows; 16x24:
# no grid (24 neither divides nor is divided by the subgroup), a row and column per slot
SHAPES = ((16, 16, 16), (8, 8, 8), (16, 64, 16), (16, 24, 8))


@pytest.mark.parametrize("subgroup", (32, 64))
@pytest.mark.parametrize("m,n,k", SHAPES, ids=lambda v: str(v))
def test_every_lane_grid_and_a_run_from_other_accumulators_equal_the_neutral_kernel(
        m: int, n: int, k: int, subgroup: int) -> None:
    kernel = shapes_kernel(m, n, k, subgroup)
    block = (subgroup, 1, 1)
    neutral = sarek.simulate(kernel, shapes_args(m, n, k), (1, 1, 1), block,
                             arith="sequential")
    assert same_bits(neutral, sarek.simulate(kernel, shapes_args(m, n, k), (1, 1, 1), block,
                                             target="opencl"))
    args = shapes_args(m, n, k)
    a, b = args["a"].astype(np.float32).reshape(m, k), args["b"].astype(np.float32)
    for half in range(2):  # the products added in k order, each sum rounded to f32
        want = args["c"].reshape(m, n).copy()
        for kk in range(k):
            want = want + np.outer(a[:, kk], b.reshape(2, k, n)[half, kk])
        assert np.array_equal(neutral["out"].reshape(2, m, n)[half], want)


def test_the_printed_kernel_needs_no_extension_and_contracts_nothing() -> None:
    text = emit(rewrite("gemm_f16", Lowering.F16_OPERANDS).kernel)
    assert "#pragma OPENCL FP_CONTRACT OFF" in text
    assert "cl_khr_fp16" not in text and "cl_khr_subgroups" not in text
    assert "sub_group" not in text and "asm" not in text
    # f16 by integer arithmetic: no half object is ever read through a pointer (the NaN case)
    assert "half*" not in text and "vload_half" not in text and "vstore_half" not in text
    assert "barrier(CLK_LOCAL_MEM_FENCE" in text


def test_sarek_emit_prints_the_lowered_kernel() -> None:
    rw = rewrite("gemm_f32", Lowering.BF16_OPERANDS)
    assert sarek.emit(rw.kernel, "opencl") == print_kernel(opencl_lower.lower(rw.kernel))


def test_printing_neutral_fragments_without_lowering_is_refused() -> None:
    rw = rewrite("gemm_f16", Lowering.F16_OPERANDS)
    with pytest.raises(EmitError, match=r"portable OpenCL C has no frag_[a-z_]* statement: "
                       "neutral fragment statements are lowered for the target first"):
        print_kernel(rw.kernel)


def test_the_portable_target_offers_subgroups_32_64_and_fragments_16_8() -> None:
    cases = conformance.matrix(OPENCL, EXAMPLES, quick=True)
    assert {(c.subgroup, c.frag) for c in cases if c.lowering} == set(CONFIGS)
    assert OPENCL.arith == "sequential" and OPENCL.support().universal


def test_a_kernel_for_another_subgroup_is_refused_with_the_reason() -> None:
    rw = rewrite("gemm_f16", Lowering.F16_OPERANDS)
    with pytest.raises(EmitError, match="subgroups of 32, 64 lanes"):
        opencl_lower.lower(rw.kernel.model_copy(update={"subgroup": 16}))


def test_an_accumulator_multiplied_as_an_operand_is_refused_with_the_reason() -> None:
    kernel = shapes_kernel(16, 16, 16, 32)
    body = tuple(s.model_copy(update={"a": "fc"}) if isinstance(s, ir.FragMulAdd) else s
                 for s in kernel.body)
    with pytest.raises(EmitError, match="'fc' is an accumulator, multiplied as an operand"):
        opencl_lower.lower(kernel.model_copy(update={"body": body}))


def test_tile_patterns_are_refused_with_the_reason() -> None:
    seed = load_module(EXAMPLES / "ldmatrix_interleaved.py").make()
    with pytest.raises(EmitError, match="no ldmatrix/stmatrix"):
        sarek.emit(seed.kernel, "opencl")


# ----------------------------------------------------------------- planted lowering errors

PLANT = ("gemm_f16", Lowering.F16_OPERANDS, 32, 8)


def own_tiles_kernel(restage_first: bool) -> ir.Kernel:
    """One wave of 32 lanes, 16x16x16 f16 fragments loaded from shared tiles that each lane
    fills with the elements it owns (element f by lane f % 32, so the neutral kernel needs no
    barrier): ``out = a0 @ b + a1 @ b``, the A tile refilled with ``a1`` after the first
    product; with ``restage_first``, ``out = a0 @ b`` with the A tile refilled with ``a1``
    between the load of ``a0`` and its product."""
    f16, f32, i32 = ir.ElemType.F16, ir.ElemType.F32, ir.ElemType.I32
    shape = ir.FragShape(m=16, n=16, k=16)
    lane = ir.BuiltinValue(which=ir.Builtin.THREAD_IDX_X)

    def at(x: int) -> ir.Const:
        return ir.Const(value=x, type=i32)

    def stage(tile: str, src: str, start: int) -> ir.For:
        own = ir.Binary(op=ir.BinOp.ADD, type=i32, a=lane, b=ir.Binary(
            op=ir.BinOp.MUL, type=i32, a=ir.Var(name="slot", type=i32), b=at(32)))
        value = ir.Load(array=src, type=f16, index=ir.Binary(op=ir.BinOp.ADD, type=i32,
                                                             a=own, b=at(start)))
        return ir.For(var="slot", start=at(0), stop=at(8), step=at(1),
                      body=(ir.Store(array=tile, index=own, value=value),))

    def load(frag: str, tile: str) -> ir.FragLoad:
        return ir.FragLoad(frag=frag, array=tile, offset=at(0), stride=at(16))

    product = ir.FragMulAdd(d="fc", a="fa", b="fb", c="fc")
    staged = (stage("ta", "a", 0), stage("tb", "b", 0), load("fa", "ta"), load("fb", "tb"))
    steps = (stage("ta", "a", 256), product) if restage_first else (
        product, stage("ta", "a", 256), load("fa", "ta"), product)
    body = (ir.ArrayDecl(name="ta", elem=f16, size=256, space=ir.MemSpace.SHARED),
            ir.ArrayDecl(name="tb", elem=f16, size=256, space=ir.MemSpace.SHARED),
            ir.FragDecl(name="fa", use=ir.FragUse.A, shape=shape, elem=f16),
            ir.FragDecl(name="fb", use=ir.FragUse.B, shape=shape, elem=f16),
            ir.FragDecl(name="fc", use=ir.FragUse.ACCUMULATOR, shape=shape, elem=f32),
            ir.FragFill(frag="fc", value=ir.Const(value=0.0, type=f32)), *staged, *steps,
            ir.FragStore(frag="fc", array="out", offset=at(0), stride=at(16)))
    params = (ir.ArrayParam(name="a", elem=f16), ir.ArrayParam(name="b", elem=f16),
              ir.ArrayParam(name="out", elem=f32))
    return ir.Kernel(name="own_tiles", params=params, body=body, subgroup=32, block=(32, 1, 1))


def own_tiles(restage_first: bool, target: str | None = None) -> np.ndarray:
    rng = np.random.default_rng(7)
    args = {"a": rng.standard_normal(512).astype(np.float16),
            "b": rng.standard_normal(256).astype(np.float16), "out": np.zeros(256, np.float32)}
    arith = {} if target else {"arith": "sequential"}
    return sarek.simulate(own_tiles_kernel(restage_first), args, (1, 1, 1), (32, 1, 1),
                          target=target, **arith)["out"]


def own_tiles_expected(restage_first: bool) -> np.ndarray:
    """The products added in k order, each sum rounded to f32."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal(512).astype(np.float16).astype(np.float32).reshape(2, 16, 16)
    b = rng.standard_normal(256).astype(np.float16).astype(np.float32).reshape(16, 16)
    want = np.zeros((16, 16), np.float32)
    for tile in (0,) if restage_first else (0, 1):
        for kk in range(16):
            want = want + np.outer(a[tile, :, kk], b[kk])
    return want.ravel()


def test_operands_read_in_place_get_the_barriers_their_tiles_need() -> None:
    """Read where they lie, the tiles are read by every lane: a barrier before each product
    (its tiles were written by their owners only) and before the A tile is refilled."""
    lowered = opencl_lower.lower(own_tiles_kernel(False))
    arrays = {s.name for s in lowered.body if isinstance(s, ir.ArrayDecl)}
    assert arrays == {"ta", "tb"}  # no copies of the operands
    assert sum(isinstance(s, ir.Barrier) for s in lowered.body) == 3
    assert np.array_equal(own_tiles(False), own_tiles_expected(False))
    assert same_bits({"out": own_tiles(False, "opencl")}, {"out": own_tiles(False)})


def test_an_operand_whose_tile_changes_before_its_product_is_copied() -> None:
    lowered = opencl_lower.lower(own_tiles_kernel(True))
    arrays = {s.name for s in lowered.body if isinstance(s, ir.ArrayDecl)}
    assert any(name.startswith("sk_fa_") for name in arrays)
    assert not any(name.startswith("sk_fb_") for name in arrays)
    assert np.array_equal(own_tiles(True), own_tiles_expected(True))
    assert same_bits({"out": own_tiles(True, "opencl")}, {"out": own_tiles(True)})


def test_an_operand_read_in_place_after_its_tile_changed_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def everything(body: tuple[ir.Stmt, ...], frags: dict[str, ir.FragDecl],
                   shared: dict[str, ir.ArrayDecl]) -> set[str]:
        return {n for n, d in frags.items() if d.use is not ir.FragUse.ACCUMULATOR}

    monkeypatch.setattr(opencl_lower, "_viewable", everything)
    assert not same_bits({"out": own_tiles(True, "opencl")}, {"out": own_tiles(True)})


def test_a_missing_barrier_is_a_shared_race(monkeypatch: pytest.MonkeyPatch) -> None:
    real_run, real_stmt = opencl_lower._Lowering.run_stmts, opencl_lower._Lowering.stmt

    def no_barrier(real: Any) -> Any:
        def lowered(self: opencl_lower._Lowering, *args: Any) -> Any:
            out, state = real(self, *args)
            return [s for s in out if not isinstance(s, ir.Barrier)], state
        return lowered

    monkeypatch.setattr(opencl_lower._Lowering, "run_stmts", no_barrier(real_run))
    monkeypatch.setattr(opencl_lower._Lowering, "stmt", no_barrier(real_stmt))
    with pytest.raises(sarek.SharedRace, match="read-after-write"):
        own_tiles(False, "opencl")


def test_an_operand_loaded_transposed_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = opencl_lower._Lowering.move

    def transposed(self: opencl_lower._Lowering, s: ir.FragLoad | ir.FragStore
                   ) -> list[ir.Stmt]:
        if isinstance(s, ir.FragLoad) and self.frag(s.frag).use is ir.FragUse.A:
            s = s.model_copy(update={"layout": ir.FragLayout.COL})
        return real(self, s)

    monkeypatch.setattr(opencl_lower._Lowering, "move", transposed)
    assert not lowered_matches_neutral(rewrite(*PLANT))


def test_products_out_of_k_order_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    real = opencl_lower._Lowering.mul_add

    def reversed_k(self: opencl_lower._Lowering, *args: object) -> list[ir.Stmt]:
        return [_reverse_k_loops(s) for s in real(self, *args)]  # type: ignore[arg-type]

    monkeypatch.setattr(opencl_lower._Lowering, "mul_add", reversed_k)
    assert not lowered_matches_neutral(rewrite("gemm_f32", Lowering.BF16X3_OPERANDS))


def _reverse_k_loops(s: ir.Stmt) -> ir.Stmt:
    """The loops over the products (``sk_kk...``) run their trips from the last to the
    first."""
    if isinstance(s, ir.For) and s.var.startswith("sk_kk"):
        assert isinstance(s.stop, ir.Const) and isinstance(s.step, ir.Const)
        stop, step = int(s.stop.value), int(s.step.value)
        return s.model_copy(update={
            "start": ir.Const(value=stop - step, type=ir.ElemType.I32),
            "stop": ir.Const(value=-step, type=ir.ElemType.I32),
            "step": ir.Const(value=-step, type=ir.ElemType.I32)})
    if isinstance(s, ir.For):
        return s.model_copy(update={"body": tuple(_reverse_k_loops(x) for x in s.body)})
    return s


def test_a_fragment_add_of_the_wrong_accumulator_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = opencl_lower._Lowering.frag_add

    def doubled(self: opencl_lower._Lowering, s: ir.FragAdd) -> list[ir.Stmt]:
        # the running sum added to itself, not the fresh one
        return real(self, s.model_copy(update={"b": s.a}))

    monkeypatch.setattr(opencl_lower._Lowering, "frag_add", doubled)
    assert not lowered_matches_neutral(rewrite("gemm_f32", Lowering.BF16X3_OPERANDS))


def test_the_byte_planes_multiply_whole_int32_words_with_the_planes_bits() -> None:
    """The portable target stages int32 words and takes one wrapping product where the byte
    planes take ten (``Staging.whole_int32``): the same bits as the planes, as the original
    kernel and as NumPy's product modulo 2^32, with the operands' extremes in every tile."""
    module = load_module(EXAMPLES / "gemm_i32.py")
    launch = module.make(70, 45, 33, seed=3)
    edges = np.array([-2**31, 2**31 - 1, -1, 0, 1, 255, 256, -256, 2**24 - 1], np.int32)
    for name in ("a", "b"):  # every third element an edge of the range or of a byte plane
        launch.args[name][::3] = np.resize(edges, launch.args[name][::3].size)
    whole = rewrite_launch(launch, lowering=Lowering.INT32_BYTE_PLANES,
                           staging=OPENCL.staging).launch
    planes = rewrite_launch(launch, lowering=Lowering.INT32_BYTE_PLANES).launch
    staged = {s.elem for s in walk(whole.kernel.body) if isinstance(s, ir.ArrayDecl)}
    assert ir.ElemType.U8 not in staged and ir.ElemType.I32 in staged
    products = [s for s in walk(whole.kernel.body) if isinstance(s, ir.FragMulAdd)]
    plane_products = [s for s in walk(planes.kernel.body) if isinstance(s, ir.FragMulAdd)]
    assert len(plane_products) == 10 * len(products)
    expected = module.reference(launch)["c"]
    assert np.array_equal(launch.simulate()["c"], expected)
    assert np.array_equal(planes.simulate()["c"], expected)
    assert np.array_equal(whole.simulate(target="opencl")["c"], expected)


def test_the_portable_target_runs_f32_gemms_as_written_unless_bf16x3_is_asked_for() -> None:
    """Six emulated bf16 products per f32 product are slower than the kernel's own f32
    arithmetic: the target does not pick Bf16x3 itself, but rewrites with it when asked, and
    picks the fast lowering when asked for speed."""
    from backends.pipeline import compile_launch

    launch = load_module(EXAMPLES / "gemm_f32.py").make(70, 45, 33)
    plain = compile_launch(OPENCL, launch)
    assert plain.rewritten is None and plain.launch is launch
    assert plain.not_rewritten is not None and "runs it as written" in plain.not_rewritten
    asked = compile_launch(OPENCL, launch, lowering=Lowering.BF16X3_OPERANDS)
    assert asked.rewritten is not None and asked.rewritten.lowering is Lowering.BF16X3_OPERANDS
    fast = compile_launch(OPENCL, launch, precision="fast")
    assert fast.rewritten is not None and fast.rewritten.lowering is Lowering.BF16_OPERANDS
    cuda = compile_launch(registry.target("cuda"), launch)
    assert cuda.rewritten is not None and cuda.rewritten.lowering is Lowering.BF16X3_OPERANDS
