"""``kernel[grid, block](*args)`` (``sarek.dispatch``): the user's call, with the user's arrays.

On the ``sim`` target the call runs the kernel CUDA would run, in the simulator, and writes the
results into the caller's NumPy arrays, so this file exercises the launch path a GPU user takes
without a GPU. Expected values come from NumPy (float64 products of small integers are exact)
or from the original kernel simulated as written. The tests marked ``device`` run on a CUDA GPU
(CuPy or PyTorch arrays, zero copies checked by pointer) and are skipped with the reason
elsewhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.errors import LaunchError


@sarek.kernel
def matmul(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc


@sarek.kernel
def scale(x: Global[f32], y: Global[f32], s: f32, n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        y[i] = s * x[i]


M, N, K = 70, 45, 33
GRID, BLOCK = (-(-N // 16), -(-M // 16), 1), (16, 16, 1)
SIM = matmul.with_options(target="sim")


def operands(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(-8, 9, (M, K)).astype(np.float32)
    b = rng.integers(-8, 9, (K, N)).astype(np.float32)
    return a, b, np.zeros((M, N), np.float32)


def test_a_gemm_launch_writes_the_product_into_the_callers_array() -> None:
    a, b, c = operands()
    SIM[GRID, BLOCK](a, b, c, M, N, K)
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


def test_a_gemm_launch_runs_the_rewrite_onto_the_matrix_unit() -> None:
    a, b, c = operands()
    SIM[GRID, BLOCK](a, b, c, M, N, K)
    (done,) = SIM.memo.entries.values()
    assert done.rewritten is not None and done.rewritten.lowering.value == "Bf16x3_operands"
    assert done.launch.grid == (1, 2, 1) and done.launch.block == (128, 1, 1)
    assert "mma.sync" in done.text  # what CUDA prints is what ran in the simulator


def test_rewrite_false_runs_the_kernel_as_written() -> None:
    a, b, c = operands()
    plain = matmul.with_options(target="sim", rewrite=False)
    plain[GRID, BLOCK](a, b, c, M, N, K)
    (done,) = plain.memo.entries.values()
    assert done.rewritten is None and done.launch.grid == GRID
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


def test_a_kernel_that_is_not_a_gemm_runs_as_written_and_says_why() -> None:
    x = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    run = scale.with_options(target="sim")
    run[(4, 1, 1), (32, 1, 1)](x, y, 2.5, 100)
    assert np.array_equal(y, x * np.float32(2.5))
    (done,) = run.memo.entries.values()
    assert done.not_rewritten is not None and done.not_rewritten.startswith("not a GEMM nest")


def test_launches_of_one_shape_compile_once_and_other_shapes_again() -> None:
    run = matmul.with_options(target="sim")
    for seed in range(3):
        a, b, c = operands(seed)
        run[GRID, BLOCK](a, b, c, M, N, K)
    assert len(run.memo.entries) == 1
    a, b, c = operands()
    run[GRID, BLOCK](a, b, c, M, N, 17)  # another reduction depth: another region
    assert len(run.memo.entries) == 2


def test_sarek_target_sim_in_the_environment_picks_the_simulator(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAREK_TARGET", "sim")
    a, b, c = operands()
    matmul[GRID, BLOCK](a, b, c, M, N, K)
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


def test_sim_of_another_target_runs_that_targets_kernel() -> None:
    a, b, c = operands()
    run = matmul.with_options(target="sim-opencl")
    run[GRID, BLOCK](a, b, c, M, N, K)
    (done,) = run.memo.entries.values()
    assert done.target == "opencl" and "__kernel" in done.text
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


def test_an_empty_launch_writes_nothing() -> None:
    a, b, c = operands()
    c[:] = 7
    SIM[GRID, BLOCK](a, b, c, 0, N, K)
    assert (c == 7).all()


def test_threads_launching_at_once_each_get_their_own_result() -> None:
    run = matmul.with_options(target="sim")
    results: dict[int, bool] = {}

    def one(seed: int) -> None:
        a, b, c = operands(seed)
        run[GRID, BLOCK](a, b, c, M, N, K)
        results[seed] = np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))

    threads = [threading.Thread(target=one, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: True, 1: True, 2: True, 3: True}


# --------------------------------------------------------------------------- bad launches


@pytest.mark.parametrize(("change", "message"), [
    (lambda a, b, c: (a, b, c, M, N), "takes 6 arguments (a, b, c, m, n, k), got 5"),
    (lambda a, b, c: (a.astype(np.float64), b, c, M, N, K),
     "argument 'a' is an array of float64; the kernel's parameter holds float32"),
    (lambda a, b, c: (a.T, b, c, M, N, K), "argument 'a' is not contiguous"),
    (lambda a, b, c: (list(a), b, c, M, N, K), "argument 'a': expected an array of f32"),
    (lambda a, b, c: (a, b, c, M, N, 2**40), "argument 'k' = 1099511627776 does not fit i32"),
    (lambda a, b, c: (a, b, c, M, 4.5, K), "argument 'n' is float 4.5; the parameter is a i32"),
    (lambda a, b, c: (a, b, c, M, a, K), "argument 'n' is an array"),
], ids=["count", "dtype", "layout", "list", "range", "float-for-int", "array-for-scalar"])
def test_a_bad_argument_is_a_launch_error_naming_the_parameter(change, message) -> None:  # type: ignore[no-untyped-def]
    a, b, c = operands()
    with pytest.raises(LaunchError) as info:
        SIM[GRID, BLOCK](*change(a, b, c))
    assert message in info.value.reason


def test_the_launch_configuration_is_grid_and_block() -> None:
    with pytest.raises(LaunchError, match=r"kernel\[grid, block\]\(\*args\)"):
        SIM[GRID[0]]


def test_an_unknown_target_names_the_targets() -> None:
    a, b, c = operands()
    with pytest.raises(LaunchError, match="unknown target 'cuba'"):
        matmul.with_options(target="cuba")[GRID, BLOCK](a, b, c, M, N, K)


def test_an_unknown_option_names_the_options() -> None:
    with pytest.raises(LaunchError, match="unknown launch option"):
        matmul.with_options(targte="sim")


def test_options_take_a_lowering_and_a_schedule_by_name() -> None:
    a, b, c = operands()
    run = matmul.with_options(target="sim", lowering="F16_operands", schedule="t128k16")
    run[GRID, BLOCK](a, b, c, M, N, K)
    (done,) = run.memo.entries.values()
    assert done.rewritten is not None
    assert (done.rewritten.lowering.value, done.rewritten.schedule.name) == (
        "F16_operands", "t128k16")
    assert np.array_equal(c, (a.astype(np.float64) @ b).astype(np.float32))


@pytest.mark.parametrize(("options", "message"), [
    ({"lowering": "F17_operands"}, "lowering 'F17_operands' is not one of"),
    ({"schedule": "t99"}, "is not a schedule name"),
    ({"precision": "exact"}, "precision is 'accurate' or 'fast'"),
    ({"rewrite": "no"}, "rewrite is True or False"),
], ids=["lowering", "schedule", "precision", "rewrite"])
def test_a_bad_option_value_is_a_launch_error(options: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        matmul.with_options(**options)


def test_a_stream_on_the_simulator_is_refused() -> None:
    a, b, c = operands()
    with pytest.raises(LaunchError, match="a stream is a CUDA launch's"):
        SIM[GRID, BLOCK, 0](a, b, c, M, N, K)


def _nvrtc_reason() -> str | None:
    from backends.cuda.nvrtc import nvrtc_available

    return nvrtc_available()


def _cuda_reason() -> str | None:
    from backends.cuda.run import unavailable_reason

    return unavailable_reason()


@pytest.mark.skipif(_cuda_reason() is None, reason="a CUDA device is present")
def test_cuda_without_a_device_says_what_is_missing_and_how_to_simulate() -> None:
    a, b, c = operands()
    with pytest.raises(sarek.SarekError, match="SAREK_TARGET=sim"):
        matmul.with_options(target="cuda")[GRID, BLOCK](a, b, c, M, N, K)


# --------------------------------------------------------------------------- on a GPU

needs_cuda = pytest.mark.skipif(_cuda_reason() is not None,
                                reason=f"no CUDA device: {_cuda_reason()}")


@pytest.mark.device
@needs_cuda
def test_numpy_arrays_are_copied_in_and_back_on_cuda() -> None:
    a, b, c = operands()
    matmul.with_options(target="cuda")[GRID, BLOCK](a, b, c, M, N, K)
    want = np.zeros_like(c)
    SIM[GRID, BLOCK](a, b, want, M, N, K)
    assert np.array_equal(c, want)  # bit for bit: the simulator runs what CUDA runs


@pytest.mark.device
@needs_cuda
def test_cupy_arrays_are_used_in_place_bit_identical_to_the_simulator() -> None:
    cupy = pytest.importorskip("cupy")
    a, b, c = operands()
    da, db, dc = (cupy.asarray(x) for x in (a, b, c))
    pointer = dc.data.ptr
    matmul.with_options(target="cuda")[GRID, BLOCK](da, db, dc, M, N, K)
    cupy.cuda.get_current_stream().synchronize()
    assert dc.data.ptr == pointer  # no copy: the kernel wrote the caller's memory
    want = np.zeros_like(c)
    SIM[GRID, BLOCK](a, b, want, M, N, K)
    assert np.array_equal(cupy.asnumpy(dc), want)


@pytest.mark.device
@needs_cuda
def test_torch_tensors_are_used_in_place_on_the_current_stream() -> None:
    torch = pytest.importorskip("torch")
    a, b, c = operands()
    ta, tb, tc = (torch.from_numpy(x).cuda() for x in (a, b, c))
    pointer = tc.data_ptr()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        matmul.with_options(target="cuda")[GRID, BLOCK](ta, tb, tc, M, N, K)
    stream.synchronize()
    assert tc.data_ptr() == pointer
    want = np.zeros_like(c)
    SIM[GRID, BLOCK](a, b, want, M, N, K)
    assert np.array_equal(tc.cpu().numpy(), want)


@pytest.mark.device
@needs_cuda
def test_a_repeated_launch_follows_a_changed_argument() -> None:
    """The repeat path (the very same arguments launch again without being bound) must not
    serve a call whose output array or scalar changed."""
    cupy = pytest.importorskip("cupy")
    a, b, c = operands()
    da, db = cupy.asarray(a), cupy.asarray(b)
    first, second = cupy.zeros((M, N), cupy.float32), cupy.zeros((M, N), cupy.float32)
    run = matmul.with_options(target="cuda")
    for _ in range(2):
        run[GRID, BLOCK](da, db, first, M, N, K)
    run[GRID, BLOCK](da, db, second, M, N, 17)
    want_k, want_17 = np.zeros_like(c), np.zeros_like(c)
    SIM[GRID, BLOCK](a, b, want_k, M, N, K)
    SIM[GRID, BLOCK](a, b, want_17, M, N, 17)
    assert np.array_equal(cupy.asnumpy(first), want_k)
    assert np.array_equal(cupy.asnumpy(second), want_17)


def _on_gpu(framework: str, host: np.ndarray) -> Any:
    """``host`` copied to a fresh (aligned) allocation of ``framework``."""
    if framework == "cupy":
        return pytest.importorskip("cupy").asarray(host)
    return pytest.importorskip("torch").from_numpy(host).cuda()


def _off_by_one(framework: str, host: np.ndarray) -> tuple[Any, Any]:
    """``host`` on the GPU one element past the start of an allocation of two elements more
    (those two -7): the view, and the whole allocation."""
    whole = _on_gpu(framework, np.concatenate([[-7], host, [-7]]).astype(host.dtype))
    return whole[1:-1], whole


def _to_host(framework: str, x: Any) -> np.ndarray:
    if framework == "cupy":
        return np.asarray(pytest.importorskip("cupy").asnumpy(x))
    return np.asarray(x.cpu().numpy())


WGMMA_SCHEDULE = "t128x256k64s3gwr"  # bulk tensor copies through tensor maps


@pytest.mark.device
@needs_cuda
@pytest.mark.parametrize("framework", ["cupy", "torch"])
@pytest.mark.parametrize("schedule", ["t128k64s2", WGMMA_SCHEDULE],
                         ids=["cp.async", "tensor-maps"])
def test_a_rewritten_gemm_on_views_off_16_bytes_gives_the_bits_of_aligned_arrays(
        framework: str, schedule: str) -> None:
    """Each array a contiguous view one f16 past an aligned allocation, which the rewrite's
    16-byte copies and tensor maps cannot read in place: the launch stages them through
    aligned temporaries and writes back the view alone."""
    from conftest import example

    from backends.cuda.fit import WGMMA_ARCHS
    from backends.cuda.run import device_arch

    if schedule == WGMMA_SCHEDULE and device_arch(0) not in WGMMA_ARCHS:
        pytest.skip(f"{schedule} multiplies with wgmma, which {device_arch(0)} does not have")
    gemm = example("gemm_f16")
    m = n = k = 64
    launch = gemm.make(m, n, k)
    a, b, c = launch.args["a"], launch.args["b"], launch.args["c"]
    config = (launch.grid, launch.block)
    want = c.copy()
    gemm.matmul_f16.with_options(target="sim", schedule=schedule)[config](a, b, want, m, n, k)
    run = gemm.matmul_f16.with_options(target="cuda", schedule=schedule)
    aligned = [_on_gpu(framework, x) for x in (a, b, c)]
    run[config](*aligned, m, n, k)
    offset = [_off_by_one(framework, x) for x in (a, b, c)]
    views = [view for view, _ in offset]
    assert [v.__cuda_array_interface__["data"][0] % 16 for v in views] == [2, 2, 2]
    run[config](*views, m, n, k)
    (record,) = run.memo.ready.values()  # one record for both launches: the same kernels
    assert record.assumes_aligned
    assert run.memo.repeat.last is None  # a staged launch is never repeated unbound
    got = _to_host(framework, views[2])
    assert np.array_equal(got.view(np.uint16), _to_host(framework, aligned[2]).view(np.uint16))
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
    for (view, _), host in zip(offset[:2], (a, b), strict=True):  # inputs as given
        assert np.array_equal(_to_host(framework, view).view(np.uint16), host.view(np.uint16))
    for _, whole in offset:  # the caller's memory around each view, untouched
        around = _to_host(framework, whole)
        assert (around[0], around[-1]) == (-7, -7)


FIRST_LAUNCH = '''
import sys
import cupy
import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx

@sarek.kernel
def matmul(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = acc

a, b = cupy.ones(64 * 32, cupy.float32), cupy.ones(32 * 48, cupy.float32)
c = cupy.zeros(64 * 48, cupy.float32)
matmul[(3, 4, 1), (16, 16, 1)](a, b, c, 64, 48, 32)
assert float(c.sum()) == 64 * 48 * 32
print("sarek.matrix_pattern" in sys.modules, "cuda.bindings.nvrtc" in sys.modules)
'''


@pytest.mark.device
@needs_cuda
def test_a_new_process_launches_a_cached_launch_without_the_rewrite_or_nvrtc(
        tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    script = tmp_path / "first_launch.py"
    script.write_text(FIRST_LAUNCH)
    env = {**os.environ, "SAREK_CACHE_DIR": str(tmp_path / "cache"), "SAREK_TARGET": "cuda"}

    def run() -> str:
        done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                              text=True, check=True)
        return done.stdout.strip()

    assert run() == "True True"  # the first process recognizes, rewrites and compiles
    assert run() == "False False"  # the next takes the launch record and the cubin from disk


@pytest.mark.skipif(_nvrtc_reason() is not None, reason=f"no NVRTC: {_nvrtc_reason()}")
def test_a_launch_record_reads_back_as_it_was_written() -> None:
    from backends import registry
    from backends.cuda.launch import Ready
    from backends.pipeline import compile_launch
    from sarek.launch import Launch

    a, b, c = operands()
    launch = Launch(matmul.ir, dict(zip("abcmnk", (a, b, c, M, N, K), strict=True)), GRID,
                    BLOCK)
    done = compile_launch(registry.target("cuda"), launch)
    record = Ready.of(done, "sm_90")
    assert Ready.from_bytes(record.to_bytes()) == record
    assert (record.grid, record.block, record.user_count) == ((1, 2, 1), (128, 1, 1), 6)
    assert done.rewritten is not None
    assert record.region == tuple(int(x) for x in done.rewritten.region.args)


# --------------------------------------------------------------------------- alignment


def _device_array(ptr: int) -> object:
    from backends.cuda.launch import DeviceArray

    return DeviceArray("x", ptr, 64, None, "cupy")


def test_a_rewritten_launch_stages_each_device_array_off_16_bytes() -> None:
    from backends.cuda.launch import staged

    values = [_device_array(0x1000), _device_array(0x1002), _device_array(0x1008), 64]
    assert staged(values, assumes_aligned=True) == [1, 2]


def test_a_rewritten_launch_of_aligned_arrays_stages_nothing() -> None:
    from backends.cuda.launch import staged

    values = [_device_array(0x1000), _device_array(0x1010), np.zeros(3, np.float16), 64]
    assert staged(values, assumes_aligned=True) == []


def test_a_launch_run_as_written_stages_no_array_even_off_16_bytes() -> None:
    from backends.cuda.launch import staged

    values = [_device_array(0x1002), _device_array(0x1003), 64]
    assert staged(values, assumes_aligned=False) == []


def _record(monkeypatch: pytest.MonkeyPatch, **options: bool) -> object:
    """The launch record of ``matmul`` compiled for CUDA (NVRTC's version stood in: only the
    cubin's key depends on it)."""
    from backends import registry
    from backends.cuda import launch as cuda_launch
    from backends.pipeline import compile_launch
    from sarek.launch import Launch

    monkeypatch.setattr(cuda_launch, "nvrtc_version", lambda: "12.0")
    a, b, c = operands()
    launch = Launch(matmul.ir, dict(zip("abcmnk", (a, b, c, M, N, K), strict=True)), GRID,
                    BLOCK)
    return cuda_launch.Ready.of(compile_launch(registry.target("cuda"), launch, **options),
                                "sm_90")


def test_the_record_of_a_rewritten_launch_assumes_aligned_arrays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.cuda.launch import Ready

    record = _record(monkeypatch)
    assert isinstance(record, Ready) and record.assumes_aligned
    assert Ready.from_bytes(record.to_bytes()) == record


def test_the_record_of_a_launch_run_as_written_does_not_assume_aligned_arrays(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from backends.cuda.launch import Ready

    record = _record(monkeypatch, rewrite=False)
    assert isinstance(record, Ready) and not record.assumes_aligned
    assert Ready.from_bytes(record.to_bytes()) == record


def test_a_launch_record_without_assumes_aligned_is_not_read_back() -> None:
    """A record of the layout before the field (``ready_for`` makes it again)."""
    import json

    from backends.cuda.launch import Ready

    record = Ready("k", "text", "sm_90", "key", (1, 2, 1), (128, 1, 1), ("f16", "i32"), 1,
                   (7,), 0, assumes_aligned=True)
    old = {k: v for k, v in json.loads(record.to_bytes()).items() if k != "assumes_aligned"}
    with pytest.raises(KeyError):
        Ready.from_bytes(json.dumps(old).encode())


def _opencl_reason() -> str | None:
    from backends.opencl.run import opencl_available

    return opencl_available()


@pytest.mark.skipif(_opencl_reason() is not None, reason=f"no OpenCL device: {_opencl_reason()}")
def test_the_opencl_target_takes_numpy_and_pyopencl_arrays() -> None:
    """The portable OpenCL rewrite built and run on the OpenCL device (PoCL on a CPU machine),
    on NumPy arrays and on pyopencl arrays of the device's context, bit for bit what the
    simulator gives for the same rewrite."""
    import pyopencl
    import pyopencl.array

    from backends.opencl.run import find_device

    a, b, c = operands()
    run = matmul.with_options(target="opencl")
    run[GRID, BLOCK](a, b, c, M, N, K)
    want = np.zeros_like(c)
    matmul.with_options(target="sim-opencl")[GRID, BLOCK](a, b, want, M, N, K)
    assert np.array_equal(c, want)
    queue = pyopencl.CommandQueue(pyopencl.Context([find_device()]))
    ca, cb, cc = (pyopencl.array.to_device(queue, x) for x in (a, b, np.zeros_like(c)))
    run[GRID, BLOCK](ca, cb, cc, M, N, K)
    assert np.array_equal(cc.get(), want)


# --------------------------------------------------------------------------- Launch objects


def test_a_launch_takes_a_kernel_function_and_arguments_in_parameter_order() -> None:
    from sarek.launch import Launch

    a, b, c = operands()
    run = Launch(matmul, [a, b, c, M, N, K], GRID, [16, 16])  # type: ignore[arg-type]
    assert run.kernel is matmul.ir and run.block == (16, 16, 1)
    assert list(run.args) == ["a", "b", "c", "m", "n", "k"]


@pytest.mark.parametrize(("kernel", "args", "message"), [
    ("matmul", {}, "a launch takes a kernel (sarek.ir.Kernel or a @sarek.kernel function), "
                   "not str"),
    (None, [1, 2], "kernel 'matmul' takes 6 arguments (a, b, c, m, n, k), got 2"),
    (None, 7, "a launch's arguments are a dict by parameter name or a list in parameter order, "
              "not int"),
], ids=["kernel", "count", "args"])
def test_a_launch_that_means_nothing_clear_is_a_launch_error(kernel, args, message) -> None:  # type: ignore[no-untyped-def]
    from sarek.launch import Launch

    with pytest.raises(LaunchError) as info:
        Launch(kernel or matmul.ir, args, GRID, BLOCK)
    assert info.value.reason == message


def test_rewrite_launch_names_a_missing_argument_before_any_work() -> None:
    from sarek.launch import Launch
    from sarek.matrix_rewrite import rewrite_launch

    a, b, c = operands()
    with pytest.raises(LaunchError, match="has no argument for 'k'"):
        rewrite_launch(Launch(matmul.ir, {"a": a, "b": b, "c": c, "m": M, "n": N}, GRID, BLOCK))
