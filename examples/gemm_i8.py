"""int8 GEMM as quantized inference writes it: i8 operands widened to i32 and summed in a
wrapping i32 accumulator, plus an i32 bias per column."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, i8, i32, thread_idx
from sarek.launch import Launch


@sarek.kernel
def matmul_i8(a: Global[i8], b: Global[i8], bias: Global[i32], c: Global[i32], m: i32, n: i32,
              k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = bias[col]
        for p in range(k):
            acc += i32(a[row * k + p]) * i32(b[p * n + col])
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.integers(-128, 128, m * k).astype(np.int8),
            "b": rng.integers(-128, 128, k * n).astype(np.int8),
            # near the i32 limits, so that sums wrap
            "bias": rng.integers(-2**31, 2**31, max(n, 1), dtype=np.int64).astype(np.int32),
            "c": np.zeros(m * n, np.int32), "m": m, "n": n, "k": k}
    return Launch(matmul_i8.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    m, n, k = (launch.args[x] for x in "mnk")
    a = launch.args["a"].reshape(m, k).astype(np.int64)
    b = launch.args["b"].reshape(k, n).astype(np.int64)
    exact = launch.args["bias"][:n].astype(np.int64) + a @ b
    return {"c": exact.astype(np.uint64).astype(np.uint32).view(np.int32).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
