"""f32 GEMM in the shape of the CUDA programming guide's shared-memory kernel: each block stages
a 16x16 tile of A and one of B per step into 2-D shared tiles (indexed ``[row, col]``), counts
its steps ``range((k + 15) // 16)`` and zero-pads the tiles past the matrices with ``if``/``else``
stores; two barriers per step. Products are added in the same k order as the naive kernel (the
padding adds +0.0 products, which leave the sum's bits unchanged)."""

import numpy as np

import sarek
from sarek import Global, S, barrier, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential

BLOCK = 16
TILE = S[(BLOCK, BLOCK) : (BLOCK, 1)]


@sarek.kernel
def matmul_tiled_2d(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32):
    a_sub = sarek.shared(f32, TILE)
    b_sub = sarek.shared(f32, TILE)
    ty = thread_idx.y
    tx = thread_idx.x
    row = block_idx.y * BLOCK + ty
    col = block_idx.x * BLOCK + tx
    value = f32(0.0)
    for step in range((k + BLOCK - 1) // BLOCK):
        if row < m and step * BLOCK + tx < k:
            a_sub[ty, tx] = a[row * k + step * BLOCK + tx]
        else:
            a_sub[ty, tx] = 0.0
        if step * BLOCK + ty < k and col < n:
            b_sub[ty, tx] = b[(step * BLOCK + ty) * n + col]
        else:
            b_sub[ty, tx] = 0.0
        barrier()
        for e in range(BLOCK):
            value += a_sub[ty, e] * b_sub[e, tx]
        barrier()
    if row < m and col < n:
        c[row * n + col] = value


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    """A launch of ``matmul_tiled_2d`` on random inputs, one 16x16 block per tile of C."""
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": np.zeros(m * n, np.float32), "m": m, "n": n, "k": k}
    return Launch(matmul_tiled_2d.ir, args, grid=(-(-n // BLOCK), -(-m // BLOCK), 1),
                  block=(BLOCK, BLOCK, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    """The expected ``c``: products added in k order, each operation rounded to f32."""
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    return {"c": gemm_sequential(a, b).ravel()}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
