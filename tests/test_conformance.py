"""`sarek conformance`'s engine (backends.conformance): the simulator-only matrix passes and
writes its report; a wrong result, a write outside the covered outputs and a missing device are
each reported, with the exit status the module documents; the matrix runs every schedule the
target declares and those `--schedule` adds, each once."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import EXAMPLES

import sarek
from backends import conformance, registry
from backends.pipeline import compile_launch
from backends.target import Target
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.loader import load_module
from sarek.matrix_scheme import Lowering
from sarek.schedule import SEED, Schedule


@sarek.kernel
def matmul_plus_one(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(1.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


@sarek.kernel
def matmul_one_past(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col + 1] = acc


def conform(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    conformance.add_arguments(parser)
    return conformance.main(parser.parse_args(argv))


def planted(monkeypatch: pytest.MonkeyPatch, **changes: Any) -> Target:
    """The cuda target with ``changes``, as the registry now gives it."""
    real = registry.target("cuda")
    fake = replace(real, **changes)
    monkeypatch.setattr(registry, "target", lambda name: fake if name == "cuda" else real)
    return real


def lowering_swapping(kernel: sarek.ir.Kernel) -> Callable[[sarek.ir.Kernel], sarek.ir.Kernel]:
    """A lowering that replaces the f32 example's original kernel by ``kernel``."""
    return lambda k: kernel if k.name == "matmul" else k


def report_of(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def failed(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in data["cases"] if not c["ok"]]


QUICK_F32 = ("--quick", "--example", "gemm_f32")


def test_sim_cuda_quick_passes_and_writes_a_report_of_every_case(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--report", str(path)) == 0
    data = report_of(path)
    assert data["target"] == "sim-cuda" and data["device"].startswith("simulator")
    assert data["totals"] == {"cases": 34, "passed": 34, "mismatches": 0,
                              "canary_violations": 0, "errors": 0}
    case = data["cases"][0]
    assert set(case) >= {"example", "kernel", "lowering", "subgroup", "frag", "size", "arrays",
                         "canary_violations"}
    assert {c["example"] for c in data["cases"]} >= {"gemm_f32", "gemm_i32", "gemm_batched"}
    assert {c["lowering"] for c in data["cases"]} == {None, "Bf16x3_operands", "Bf16_operands",
                                                      "F16_operands", "Int32_byte_planes",
                                                      "Int8_operands"}
    assert all(v == "bit-identical" for c in data["cases"] for v in c["arrays"].values())


@pytest.mark.parametrize(("example", "lowering", "schedule"), [
    ("gemm_f32", Lowering.BF16X3_OPERANDS, None),
    ("gemm_i32", Lowering.INT32_BYTE_PLANES, None),
    ("gemm_f16", Lowering.F16_OPERANDS, Schedule.parse("t128k64s2g"))])
def test_a_rewrite_case_runs_the_launch_the_target_compiles(
        example: str, lowering: Lowering, schedule: Schedule | None) -> None:
    cuda = registry.target("cuda")
    original = load_module(EXAMPLES / f"{example}.py").make(70, 45, 33)
    case = conformance.rewritten(cuda, original, (lowering, 32, 16), schedule).last
    compiled = compile_launch(cuda, original, lowering=lowering, schedule=schedule).launch
    assert (case.kernel, case.grid, case.block) == (compiled.kernel, compiled.grid,
                                                    compiled.block)
    assert list(case.args) == list(compiled.args)


@cache
def cuda_matrix() -> tuple[conformance.Case, ...]:
    """The full matrix for cuda, once a worker (each of its refusals lowers a kernel)."""
    return tuple(conformance.matrix(registry.target("cuda"), EXAMPLES))


def test_the_full_matrix_has_the_edge_sizes_and_partial_launches() -> None:
    cases = cuda_matrix()
    sizes = {(c.size.m, c.size.n, c.size.k) for c in cases}
    assert {(70, 45, 33), (128, 96, 64), (17, 5, 0), (33, 20, 1), (1, 1, 1)} <= sizes
    # past thirteen of Bf16x3's chunks, for gemm_f32 only
    assert {c.example.stem for c in cases if c.size.k == 1700} == {"gemm_f32"}
    partial = {c.example.stem for c in cases if c.size.grid is not None}
    assert partial == {"gemm_f32_1d", "gemm_batched"}
    # cuda multiplies fragments of 16 in subgroups of 32 only
    assert {(c.subgroup, c.frag) for c in cases if c.lowering} == {(32, 16)}


def test_the_full_matrix_runs_the_targets_large_and_offered_schedules_too() -> None:
    cuda = registry.target("cuda")
    cases = cuda_matrix()
    declared = set(cuda.staging.huge) | set(cuda.staging.large) | set(cuda.staging.offered)
    scheduled = {(c.lowering.value, c.schedule) for c in cases
                 if c.lowering is not None and c.schedule is not None}
    assert scheduled == {(name, schedule) for name, schedule in declared
                         if any(c.lowering is not None and c.lowering.value == name
                                for c in cases)}
    assert {(c.size.m, c.size.n) for c in cases if c.schedule is not None} == {
        (150, 133), (256, 136), (70, 45)}


def offering(target: Target, *offered: tuple[str, str]) -> Target:
    """``target`` offering these (lowering, schedule name) pairs beyond its policy and what it
    offers already."""
    pairs = tuple((low, Schedule.parse(name)) for low, name in offered)
    return replace(target, staging=replace(target.staging,
                                           offered=target.staging.offered + pairs))


def scheduled(cases: list[conformance.Case], name: str
              ) -> list[tuple[str, str, int | None, int | None, str]]:
    """The cases running the schedule called ``name``: example, lowering, subgroup, frag, size."""
    return sorted((c.example.stem, c.lowering.value, c.subgroup, c.frag, c.size.label)
                  for c in cases if c.schedule == Schedule.parse(name) and c.lowering)


def test_an_offered_schedule_runs_under_its_lowering_at_the_large_schedules_sizes() -> None:
    cuda = registry.target("cuda")
    cases = conformance.matrix(offering(cuda, ("F16_operands", "t128k16p")), EXAMPLES)
    f16 = {(c.example.stem, c.subgroup, c.frag) for c in cases
           if c.lowering is Lowering.F16_OPERANDS}
    assert len(f16) == 8  # every float example: not the integer gemm_i32 and gemm_i8
    assert scheduled(cases, "t128k16p") == sorted(
        (example, "F16_operands", sg, frag, size.label) for example, sg, frag in f16
        for size in conformance.SCHEDULE_SIZES)


def test_quick_leaves_the_offered_schedules_out() -> None:
    cuda = offering(registry.target("cuda"), ("F16_operands", "t128k16p"))
    assert conformance.matrix(cuda, EXAMPLES, quick=True) == conformance.matrix(
        registry.target("cuda"), EXAMPLES, quick=True)


def test_a_schedule_the_policy_already_runs_is_not_run_twice() -> None:
    cuda = registry.target("cuda")
    large = next(s for name, s in cuda.staging.large if name == "F16_operands")
    assert conformance.matrix(offering(cuda, ("F16_operands", large.name)), EXAMPLES) == list(
        cuda_matrix())
    # the seed's schedule is what the ragged size gets anyway: only the two large sizes remain
    cases = conformance.matrix(cuda, EXAMPLES, only=("gemm_f16",), schedules=(SEED, large))
    assert len(set(cases)) == len(cases)
    assert [size for *_, size in scheduled(cases, SEED.name)] == [
        conformance.LARGE_TILES.label, conformance.ALIGNED_TILES.label]
    assert len(scheduled(cases, large.name)) == 3


def test_a_runs_refusals_are_decided_once_for_its_matrix_and_its_left_out_rewrites(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``sarek conformance --schedule`` asks of each rewrite whether the schedule is refused
    twice (for the matrix, then for the report's left-out rewrites); ``Refusals`` decides each
    once, with the answers ``refusal`` gives."""
    from backends.conformance import cases

    cuda = registry.target("cuda")
    schedule, only = Schedule.parse("t128k64s2g"), ("gemm_f16", "gemm_i32")
    asked: list[tuple[Any, ...]] = []
    decide = cases.refusal

    def counted(*args: Any) -> str | None:
        asked.append(args[2:])
        return decide(*args)

    monkeypatch.setattr(cases, "refusal", counted)
    refusals = conformance.Refusals(cuda)
    matrix = conformance.matrix(cuda, EXAMPLES, quick=True, only=only, schedules=(schedule,),
                                refusals=refusals)
    for_matrix = len(asked)
    out = conformance.left_out(cuda, EXAMPLES, schedule, only=only, refusals=refusals)
    assert for_matrix == out[0] > 0 and len(asked) == for_matrix
    monkeypatch.undo()
    assert matrix == conformance.matrix(cuda, EXAMPLES, quick=True, only=only,
                                        schedules=(schedule,))
    assert out == conformance.left_out(cuda, EXAMPLES, schedule, only=only)
    with pytest.raises(ValueError, match="another target"):
        conformance.matrix(offering(cuda), EXAMPLES, only=only, refusals=refusals)


def test_an_added_schedule_runs_wherever_the_rewrite_takes_it() -> None:
    cuda = registry.target("cuda")
    warpgroup = Schedule.parse("t128k64s2g")
    cases = conformance.matrix(cuda, EXAMPLES, schedules=(warpgroup,),
                               only=("gemm_f16", "gemm_i32", "gemm_f32", "gemm_i8"))
    rewrites = {(c.example, c.lowering, c.subgroup, c.frag) for c in cases
                if c.lowering and c.schedule is None}  # each once, not once a size
    takes = {(path.stem, lowering.value, subgroup, frag)
             for path, lowering, subgroup, frag in rewrites if conformance.refusal(
                 cuda, load_module(path).make(1, 1, 1), (lowering, subgroup or 32, frag or 16),
                 warpgroup) is None}
    assert ("gemm_f16", "F16_operands", 32, 16) in takes
    assert ("gemm_i32", "Int32_byte_planes", 32, 16) in takes  # after the plane pre-pass
    assert ("gemm_f32", "Bf16x3_operands", 32, 16) in takes  # after the split pre-pass
    assert ("gemm_i8", "Int8_operands", 32, 16) not in takes  # 16-bit terms only
    assert scheduled(cases, warpgroup.name) == sorted(
        (*rewrite, size.label) for rewrite in takes for size in conformance.SCHEDULE_SIZES)


def test_sarek_conformance_schedule_adds_its_cases_to_the_report_and_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--example", "gemm_f16",
                   "--schedule", "t128k64s2g", "--report", str(path)) == 0
    data = report_of(path)
    assert data["schedules"] == ["t128k64s2g"] and data["totals"]["passed"] == 3
    (added,) = [c for c in data["cases"] if c["schedule"] == "t128k64s2g"]
    assert added["lowering"] == "F16_operands" and added["size"] == [70, 45, 33]  # --quick
    assert "t128k64s2g" in capsys.readouterr().out


def test_the_rewrites_an_added_schedule_is_left_out_of_are_reported_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--example", "gemm_f16", "--example",
                   "gemm_f32", "--example", "gemm_i8", "--schedule", "t128k64s2g",
                   "--report", str(path)) == 0
    data = report_of(path)
    # f32 operands take it after the conversion pre-pass (Bf16x3's split into its terms)
    assert [(c["example"], c["lowering"]) for c in data["cases"]
            if c["schedule"] == "t128k64s2g"] == [("gemm_f16", "F16_operands"),
                                                  ("gemm_f32", "Bf16x3_operands"),
                                                  ("gemm_f32", "Bf16_operands"),
                                                  ("gemm_f32", "F16_operands")]
    left = {(r["example"], r["lowering"]) for r in data["left_out"]}
    assert left == {("gemm_i8", "Int8_operands")}
    assert all("a warpgroup schedule multiplies one 16-bit term" in r["reason"]
               for r in data["left_out"])
    assert "1 rewrites left out of the added schedules" in capsys.readouterr().out


def test_a_schedule_name_that_does_not_parse_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--schedule", "t128k64s2",
                   "--schedule", "t12", "--report", str(path)) == conformance.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'t12' is not a schedule name" in err
    assert not path.exists()


def test_a_schedule_no_rewrite_takes_is_a_one_line_error_with_the_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--schedule", "t96k16",
                   "--report", str(path)) == conformance.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "t96k16" in err and "not 96" in err
    assert not path.exists()


def test_a_lowering_that_computes_something_else_is_a_mismatch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted(monkeypatch, lower=lowering_swapping(matmul_plus_one.ir))
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", *QUICK_F32, "--report", str(path)) == 1
    data = report_of(path)
    (bad,) = failed(data)
    assert bad["lowering"] is None and bad["arrays"]["c"].startswith("3150 of 3214 differ")
    assert bad["canary_violations"] == [] and data["totals"]["mismatches"] == 1


def test_a_kernel_writing_one_element_past_its_output_is_a_canary_violation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    planted(monkeypatch, lower=lowering_swapping(matmul_one_past.ir))
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", *QUICK_F32, "--report", str(path)) == 1
    (bad,) = failed(report_of(path))
    # 70x45 outputs: the last one lands on the first guard element
    assert bad["canary_violations"] == [{"side": "lowered", "array": "c", "count": 1,
                                         "first": [70 * 45]}]


def simulating_device(real: Target, tamper: Callable[[dict[str, np.ndarray]], None]
                      ) -> Callable[..., dict[str, np.ndarray]]:
    """A device runner that is the simulator, its result passed through ``tamper``."""
    def run(kernel: sarek.ir.Kernel, args: Sequence[Any] | Mapping[str, Any],
            grid: tuple[int, int, int], block: tuple[int, int, int]) -> dict[str, np.ndarray]:
        out = sarek.simulate(real.lower(kernel), args, grid=grid, block=block, arith=real.arith)
        tamper(out)
        return out
    return run


def first_output_flipped(out: dict[str, np.ndarray]) -> None:
    out["c"][0] = -out["c"][0] if out["c"][0] else 1.0


def last_guard_written(out: dict[str, np.ndarray]) -> None:
    out["c"][-1] = 0.0


@pytest.mark.parametrize(("tamper", "status"), [(lambda out: None, 0),
                                                (first_output_flipped, 1),
                                                (last_guard_written, 1)],
                         ids=["honest", "wrong-output", "guard-written"])
def test_a_device_is_compared_with_the_simulator_bit_for_bit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        tamper: Callable[[dict[str, np.ndarray]], None], status: int) -> None:
    real = registry.target("cuda")
    planted(monkeypatch, device_reason=lambda: None, run=simulating_device(real, tamper))
    monkeypatch.setitem(conformance.DEVICE_NAMES, "cuda", lambda: "the simulator, as a device")
    path = tmp_path / "report.json"
    assert conform("--target", "cuda", *QUICK_F32, "--report", str(path)) == status
    data = report_of(path)
    assert data["device"] == "the simulator, as a device"
    assert {c["compared"] for c in data["cases"]} == {"device vs simulator"}
    if tamper is first_output_flipped:
        assert data["totals"]["mismatches"] == 4 and data["totals"]["canary_violations"] == 0
    if tamper is last_guard_written:
        assert {(v["side"], v["count"]) for c in data["cases"]
                for v in c["canary_violations"]} == {("device", 1)}
        assert data["totals"]["mismatches"] == 4  # the guard is part of the array compared


def test_a_device_target_without_a_device_says_why_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    planted(monkeypatch, device_reason=lambda: "no CUDA device (planted)")
    path = tmp_path / "report.json"
    assert conform("--target", "cuda", "--report", str(path)) == conformance.EXIT_NO_DEVICE == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cuda" in err and "no CUDA device (planted)" in err
    assert not path.exists()


def test_without_a_driver_the_cuda_target_reports_the_real_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    reason = registry.target("cuda").device_reason()
    if reason is None:
        pytest.skip("a CUDA device is present")
    assert conform("--target", "cuda", "--report", str(tmp_path / "r.json")) == 3
    assert capsys.readouterr().err == f"sarek conformance: no device for target cuda: {reason}\n"


@pytest.mark.parametrize("argv", [("--target", "sim-nope"), ("--target", "nope")])
def test_an_unknown_target_is_a_one_line_error(
        argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert conform(*argv) == conformance.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sim-cuda" in err


def test_a_report_directory_that_does_not_exist_is_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere" / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--report", str(missing)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing.parent) in err


def test_a_schedule_the_device_would_refuse_is_left_out_with_the_devices_reason() -> None:
    cuda = registry.target("cuda")
    wide = Schedule.parse("t128x256k32s3")  # eight waves: blocks of 256

    def small(kernel: sarek.ir.Kernel, block: tuple[int, int, int]) -> str | None:
        size = block[0] * block[1] * block[2]
        return f"blocks of {size} invocations (it has 128)" if size > 128 else None

    device = replace(cuda, run_refusal=small)
    only = ("gemm_f16",)  # what each rewrite is refused is computed per example
    assert [c for c in conformance.matrix(cuda, EXAMPLES, quick=True, schedules=(wide,),
                                          only=only) if c.schedule == wide]
    assert not [c for c in conformance.matrix(device, EXAMPLES, quick=True, schedules=(wide,),
                                              only=only) if c.schedule == wide]
    assert str(conformance.unaccepted(device, EXAMPLES, wide, only=only)).endswith(
        "blocks of 256 invocations (it has 128)")
    assert conformance.unaccepted(device, EXAMPLES, Schedule.parse("t128k32s3"),
                                  only=only) is None


def test_sarek_conformance_size_replaces_the_matrixs_sizes(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    assert conform("--target", "sim-cuda", "--quick", "--example", "gemm_f16",
                   "--schedule", "t128k64s2g", "--size", "20x12x5", "--size", "9x3x40",
                   "--report", str(path)) == 0
    data = report_of(path)
    assert {tuple(c["size"]) for c in data["cases"]} == {(20, 12, 5), (9, 3, 40)}
    # the original, F16 under the region's schedule and under t128k64s2g, at each size
    assert data["totals"]["passed"] == data["totals"]["cases"] == 6


@pytest.mark.parametrize("size", ["20x12", "20x12x-5", "axbxc", "20*12*5", "100000x100000x100000"])
def test_a_size_that_is_not_three_whole_numbers_is_a_one_line_error(
        size: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert conform("--target", "sim-cuda", "--quick", "--size", size,
                   "--report", str(tmp_path / "r.json")) == conformance.EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not (tmp_path / "r.json").exists()
    assert ("memory limit" if size.startswith("100000") else "MxNxK") in err
