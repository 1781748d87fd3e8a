"""Reading NVIDIA's machine code out of a Vulkan pipeline cache (``bench/vulkan_machine_code``):
the container behind the cache's header, the end of its code; and the runner keeping a
pipeline cache's data where asked."""

from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from backends.spirv import device as vulkan_device
from backends.spirv import run as vulkan
from bench.vulkan_machine_code import HEADER, code_end, container
from sarek import ir
from sarek.ir import ElemType

EXIT_WORD = 0x000000000000794D  # sm_90 EXIT's first word (its control word follows)


def instruction(first: int) -> bytes:
    return struct.pack("<QQ", first, 0x000FEA0003800000)


def cache_of(data: bytes) -> bytes:
    zstd = shutil.which("zstd")
    if zstd is None:
        pytest.skip("no zstd here to build a cache's frame")
    frame = subprocess.run([zstd, "-q", "-c"], input=data, capture_output=True,
                           check=True).stdout
    return bytes(HEADER) + frame


def test_the_container_is_the_frame_behind_the_header() -> None:
    data = b"NVDANVVM" + bytes(range(200))
    assert container(cache_of(data)) == data


def test_the_code_ends_after_the_last_exit() -> None:
    code = instruction(0x7919) + instruction(EXIT_WORD) + instruction(0x7947) + instruction(
        EXIT_WORD) + instruction(0x7918)
    data = bytes(24) + code + bytes(40)
    assert code_end(data) == 24 + 4 * 16


def test_a_container_without_exit_is_refused() -> None:
    with pytest.raises(ValueError, match="no EXIT"):
        code_end(bytes(256))


@pytest.mark.skipif(vulkan_device.unavailable_reason() is not None,
                    reason=str(vulkan_device.unavailable_reason()))
def test_the_runner_keeps_the_pipeline_caches_data_where_asked() -> None:
    kernel = ir.Kernel(name="one", block=(1, 1, 1), params=(
        ir.ArrayParam(name="out", elem=ElemType.I32),), body=(
        ir.Store(array="out", index=ir.Const(value=0, type=ElemType.I32),
                 value=ir.Const(value=7, type=ElemType.I32)),))
    binary: list[bytes] = []
    out, _ = vulkan.time_kernel(kernel, {"out": np.zeros(1, np.int32)}, (1,), (1,), 1,
                                binary=binary)
    assert out["out"][0] == 7
    # VkPipelineCacheHeaderVersionOne: its length (32) and version (1) lead the data
    assert struct.unpack_from("<II", binary[0]) == (32, 1)
