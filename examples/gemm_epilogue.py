"""f32 GEMM with an epilogue: ``c = relu(alpha * (a @ b) + beta * c)``, reading c's old value."""

import numpy as np

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.launch import Launch
from sarek.reference import gemm_sequential


@sarek.kernel
def gemm_relu(a: Global[f32], b: Global[f32], c: Global[f32], m: i32, n: i32, k: i32,
              alpha: f32, beta: f32):
    row = block_idx.y * block_dim.y + thread_idx.y
    col = block_idx.x * block_dim.x + thread_idx.x
    if row < m and col < n:
        acc = f32(0.0)
        for p in range(k):
            acc += a[row * k + p] * b[p * n + col]
        c[row * n + col] = max(alpha * acc + beta * c[row * n + col], 0.0)


def make(m: int, n: int, k: int, seed: int = 0) -> Launch:
    rng = np.random.default_rng(seed)
    args = {"a": rng.standard_normal(m * k, dtype=np.float32),
            "b": rng.standard_normal(k * n, dtype=np.float32),
            "c": rng.standard_normal(m * n, dtype=np.float32), "m": m, "n": n, "k": k,
            "alpha": np.float32(0.75), "beta": np.float32(-1.25)}
    return Launch(gemm_relu.ir, args, grid=(-(-n // 16), -(-m // 16), 1), block=(16, 16, 1))


def reference(launch: Launch) -> dict[str, np.ndarray]:
    """Each operation of the epilogue rounded to f32 on its own (no fused multiply-add)."""
    m, n, k = (launch.args[x] for x in "mnk")
    a, b = launch.args["a"].reshape(m, k), launch.args["b"].reshape(k, n)
    alpha, beta = np.float32(launch.args["alpha"]), np.float32(launch.args["beta"])
    acc = gemm_sequential(a, b).ravel()
    return {"c": np.fmax(alpha * acc + beta * launch.args["c"], np.float32(0.0))}


if __name__ == "__main__":
    run = make(40, 24, 30)
    print("bit-identical to NumPy:", np.array_equal(run.simulate()["c"], reference(run)["c"]))
