"""ldmatrix with interleaved shared rows and separated register slots (the seed's example).

The shared tensor is (16, 4, 2) words with strides (8, 1, 128): even rows of its first mode
form the first 8x8 matrix, odd rows the second, and the last mode selects one of two x2
instructions. Each lane's registers are twelve words of which the loads fill slots 0, 2, 8
and 10; the others keep the sentinel. Two x2 instructions run per warp, no x4 and no copy
through a temporary fragment.
"""

import numpy as np

import sarek
from sarek import Global, S, TileLayout, laneid, thread_idx, u32
from sarek.launch import Launch

LDMATRIX = "ldmatrix.sync.aligned.m8n8.x2.shared.b16"
SENTINEL = 4294966519  # the bit pattern of int32(-777)

shared_layout = TileLayout(S[(16, 4, 2) : (8, 1, 128)])
register_layout = TileLayout(S[(2, 2, 8, 4) : (8, 2, 4 @ laneid, 1 @ laneid)])


@sarek.kernel
def ldmatrix_interleaved(a: Global[u32], out: Global[u32]):
    lane = thread_idx.x
    sm = sarek.shared(u32, shared_layout, align=16)
    for q in range(4):
        n = lane + 32 * q
        sm[n // 8, (n // 2) % 4, n % 2] = a[n]
    sarek.barrier()
    raw = sarek.local(u32, 12)
    for i in range(12):
        raw[i] = u32(SENTINEL)
    regs = sarek.view(raw, u32, register_layout)
    rows = sm.rearrange("(r m) w k -> k m r w", r=8, m=2)
    sarek.tile.apply(LDMATRIX, regs, rows, scope="warp")
    for i in range(12):
        out[lane * 12 + i] = raw[i]


def make() -> Launch:
    """One warp loading x = arange(128) viewed as (16, 4, 2)."""
    args = {"a": np.arange(128, dtype=np.uint32), "out": np.zeros(32 * 12, np.uint32)}
    return Launch(ldmatrix_interleaved.ir, args, grid=(1, 1, 1), block=(32, 1, 1))


def expected() -> np.ndarray:
    """The seed's table: raw[8*k + 2*m] = x[2*(lane//4) + m, lane % 4, k], sentinel elsewhere."""
    x = np.arange(128, dtype=np.uint32).reshape(16, 4, 2)
    want = np.full((32, 12), SENTINEL, np.uint32)
    for lane in range(32):
        for k in range(2):
            for m in range(2):
                want[lane, 8 * k + 2 * m] = x[2 * (lane // 4) + m, lane % 4, k]
    return want


if __name__ == "__main__":
    got = make().simulate()["out"].reshape(32, 12)
    print("matches the seed's table:", np.array_equal(got, expected()))
