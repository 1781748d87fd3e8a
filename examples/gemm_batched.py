"""Batched f32 GEMM: the batch is the z coordinate of the launch, each matrix stored densely."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def matmul_batched(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32,
                   batches: i32):
    z = block_idx.z
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n and z < batches:
        acc = f32(0.0)
        for p in range(k):
            acc += a[z * m * k + row * k + p] * b[z * k * n + p * n + col]
        c[z * m * n + row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0, batches: int = 3) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(batches * m * k, dtype=np.float32),
            "b": rng.standard_normal(batches * k * n, dtype=np.float32),
            "c": np.zeros(batches * m * n, np.float32), "m": m, "n": n, "k": k,
            "batches": batches}
    return Launch(matmul_batched.ir, args, grid=(-(-n // 16), -(-m // 16), batches),
                  block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    m, n, k, nb = (launch.args[x] for x in ("m", "n", "k", "batches"))
    a, b = launch.args["a"].reshape(nb, m, k), launch.args["b"].reshape(nb, k, n)
    return {"c": np.concatenate([gemm_sequential(a[z], b[z]).ravel() for z in range(nb)])}


if __name__ == "__main__":
    run = make(20, 18, 9)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
