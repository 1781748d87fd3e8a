"""f32 GEMM whose B operand is stored column-major (``B[p, col]`` at ``col * k + p``)."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul_bt(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[col * k + p]
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(n * k, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    return Launch(matmul_bt.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    m, n, k = (launch.args[x] for x in "mnk")
    a, bt = launch.args["a"].reshape(m, k), launch.args["b"].reshape(n, k)
    return {"c": gemm_sequential(a, bt.T).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
