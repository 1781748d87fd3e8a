"""How OpenCL C on NVIDIA's OpenCL gives ``ldmatrix`` a shared-window address: one warp loads
four 8x8 matrices of 16-bit words from a ``__local`` array with ``ldmatrix .x4``, the address
spelled several ways, and each lane's four registers are compared with ``sarek.atoms.LDMATRIX``
(word ``w`` of row ``r`` of matrix ``m`` goes to register ``m`` of lane ``4r + w``).

Usage: ``python -m bench.opencl_nv_probe [--out PATH]`` on a machine with NVIDIA's OpenCL;
writes ``bench/results/opencl_nv_probe.json``. opencl-nv prints the first spelling
(``backends.opencl.emit_nv.shared_address``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from backends.opencl.run import NVIDIA, find_device
from bench.harness import RESULTS, write
from sarek import atoms, tile

_OP = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
VARIANTS = {
    # the __local pointer's value as a 32-bit integer: what opencl-nv prints
    "asm, (uint)(ulong)&a[i]": ('asm volatile("' + _OP + '" : {outs} : '
                                '"r"((uint)(ulong)(&tile[row])) : "memory");'),
    "__asm__, (uint)(ulong)&a[i]": ('__asm__ volatile("' + _OP + '" : {outs} : '
                                    '"r"((uint)(ulong)(&tile[row])) : "memory");'),
    "asm, 64-bit (ulong)&a[i]": ('asm volatile("' + _OP + '" : {outs} : '
                                 '"l"((ulong)(&tile[row])) : "memory");'),
}
_KERNEL = """
__kernel void probe(__global const ushort* in, __global uint* out) {{
    __local ushort tile[256] __attribute__((aligned(16)));
    int lane = get_local_id(0);
    for (int i = lane; i < 256; i += 32) tile[i] = in[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    uint r[4];
    int row = ((lane / {rows}) * {rows} + lane % {rows}) * 8;  /* row r of matrix m */
    {asm}
    for (int m = 0; m < 4; m++) out[lane * 4 + m] = r[m];
}}
"""


def expected(words: np.ndarray) -> np.ndarray:
    """``[lane, register]`` after ldmatrix .x4 of the four 8x8 matrices ``words[m, r, c]``."""
    lm = atoms.LDMATRIX
    out = np.zeros((lm.lanes, 4), np.uint32)
    owners = lm.owners()  # [row, word] -> lane
    for m in range(4):
        for r in range(lm.rows):
            for w in range(lm.row_words):
                pair = words[m, r, 2 * w:2 * w + 2].astype(np.uint32)
                out[owners[r, w], m] = pair[0] | (pair[1] << 16)
    return out


def main() -> int:
    import pyopencl as cl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path,
                        default=RESULTS / "opencl_nv_probe.json")
    args = parser.parse_args()
    device = find_device(NVIDIA)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    words = np.arange(256, dtype=np.uint16).reshape(4, 8, 8) * 3 + 1
    want = expected(words)
    rows: list[dict[str, Any]] = []
    outs = ", ".join(f'"=r"(r[{m}])' for m in range(4))
    for name, template in VARIANTS.items():
        source = _KERNEL.format(asm=template.replace("{outs}", outs), rows=tile.PROVIDER_ROWS)
        row: dict[str, Any] = {"variant": name}
        try:
            program = cl.Program(ctx, source).build()
        except cl.Error as e:
            row.update(builds=False, error=str(e).splitlines()[-1][:300])
            rows.append(row)
            continue
        src = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                        hostbuf=words.ravel())
        dst = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, 32 * 4 * 4)
        got = np.zeros((32, 4), np.uint32)
        try:
            program.probe(queue, (32,), (32,), src, dst)
            cl.enqueue_copy(queue, got, dst)
            queue.finish()
        except cl.Error as e:
            row.update(builds=True, runs=False, error=str(e)[:300])
            rows.append(row)
            continue
        row.update(builds=True, runs=True, registers_right=int((got == want).sum()),
                   registers=int(want.size), exact=bool(np.array_equal(got, want)))
        rows.append(row)
    result = {"device": device.name.strip(), "platform": device.platform.name.strip(),
              "version": device.version.strip(), "driver": device.driver_version.strip(),
              "local_mem_size": int(device.local_mem_size), "rows": rows}
    write("opencl_nv_probe", result, args.out)
    for r in rows:
        print(r)
    return 0 if rows[0].get("exact") else 1


if __name__ == "__main__":
    sys.exit(main())
