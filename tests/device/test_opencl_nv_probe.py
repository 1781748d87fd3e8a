"""How OpenCL C on NVIDIA's OpenCL gives ``ldmatrix`` a shared-window address: one warp loads
four 8x8 matrices of 16-bit words from a ``__local`` array with ``ldmatrix .x4``, the address
spelled several ways, and each lane's four registers are compared with ``sarek.atoms.LDMATRIX``
(word ``w`` of row ``r`` of matrix ``m`` goes to register ``m`` of lane ``4r + w``). opencl-nv
prints the first spelling (``backends.opencl.emit_nv.shared_address``), which must load every
register right; the others are recorded. Records ``opencl_nv_probe``.
"""

from __future__ import annotations

from typing import Any

import needs
import numpy as np
import pytest
from records import record

from backends.opencl.run import NVIDIA, find_device
from sarek import atoms, tile

_OP = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
PRINTED = "asm, (uint)(ulong)&a[i]"
VARIANTS = {
    # the __local pointer's value as a 32-bit integer: what opencl-nv prints
    PRINTED: ('asm volatile("' + _OP + '" : {outs} : '
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


def source(variant: str) -> str:
    """The probe kernel with ``variant``'s ldmatrix statement."""
    outs = ", ".join(f'"=r"(r[{m}])' for m in range(4))
    return _KERNEL.format(asm=VARIANTS[variant].replace("{outs}", outs),
                          rows=tile.PROVIDER_ROWS)


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, Any]]:
    import pyopencl as cl

    device = find_device(NVIDIA)
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx)
    words = np.arange(256, dtype=np.uint16).reshape(4, 8, 8) * 3 + 1
    want = expected(words)
    rows: list[dict[str, Any]] = []
    for name in VARIANTS:
        row: dict[str, Any] = {"variant": name}
        rows.append(row)
        try:
            program = cl.Program(ctx, source(name)).build()
        except cl.Error as e:
            row.update(builds=False, error=str(e).splitlines()[-1][:300])
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
            continue
        row.update(builds=True, runs=True, registers_right=int((got == want).sum()),
                   registers=int(want.size), exact=bool(np.array_equal(got, want)))
    record("opencl_nv_probe", {
        "device": device.name.strip(), "platform": device.platform.name.strip(),
        "version": device.version.strip(), "driver": device.driver_version.strip(),
        "local_mem_size": int(device.local_mem_size), "rows": rows})
    return {r["variant"]: r for r in rows}


def test_the_expected_registers_are_the_ptx_isas_for_lane_5() -> None:
    words = np.arange(256, dtype=np.uint16).reshape(4, 8, 8)
    # lane 5 = 4 * 1 + 1: row 1, word 1 (elements 2 and 3) of each matrix
    assert expected(words)[5].tolist() == [
        int(words[m, 1, 2]) | int(words[m, 1, 3]) << 16 for m in range(4)]


@pytest.mark.device
@needs.opencl_nv
def test_the_address_opencl_nv_prints_loads_every_register_right(
        measured: dict[str, dict[str, Any]]) -> None:
    assert measured[PRINTED].get("exact"), measured[PRINTED]
