"""f32 GEMM tiled through shared memory: 16x16 tiles of A and B staged per step, two barriers
per step. Products are added in the same k order as the naive kernel (zero padding past k adds
+0.0, which leaves the sum's bits unchanged)."""

import numpy as np

import sarek
from sarek import Global, barrier, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential

TILE = 16


@sarek.kernel
def matmul_tiled(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_tile = sarek.shared(f32, TILE * TILE)
    b_tile = sarek.shared(f32, TILE * TILE)
    tx = thread_idx.x
    ty = thread_idx.y
    row = block_idx.y * TILE + ty
    col = block_idx.x * TILE + tx
    acc = f32(0.0)
    for t in range(0, k, TILE):
        a_tile[ty * TILE + tx] = a[row * k + t + tx] if row < m and t + tx < k else 0.0
        b_tile[ty * TILE + tx] = b[(t + ty) * n + col] if t + ty < k and col < n else 0.0
        barrier()
        for kk in range(TILE):
            acc += a_tile[ty * TILE + kk] * b_tile[kk * TILE + tx]
        barrier()
    if row < m and col < n:
        c[row * n + col] = acc


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    return Launch(matmul_tiled.ir, args, grid=(-(-n // TILE), -(-m // TILE), 1),
                  block=(TILE, TILE, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
