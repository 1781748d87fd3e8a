"""The machine code NVIDIA's Vulkan driver made of a module, read from a pipeline cache.

``backends.spirv.run.time_kernel(binary=...)`` (``bench/vulkan_profile_h200.py
--machine-code DIR``) keeps the data of a pipeline cache that compiled one module. On the
H200 (driver 580) that data is a 100-byte header and a zstd frame; the frame holds an
``NVDANVVM`` container whose code is raw sm_90 instructions, 16 bytes each, ending with the
last ``EXIT``, which ``nvdisasm -b SM90`` disassembles from the first instruction on (byte
408 of the container in the modules read so far). ``disassembly`` finds that start by trying
each 16-byte slot before it until ``nvdisasm`` reads the code to its end.

``python -m bench.vulkan_machine_code CACHE...`` writes ``CACHE.sass`` beside each (where
``nvdisasm`` is on ``PATH``, as on the device machine, or given by ``--nvdisasm``).
"""

from __future__ import annotations

import argparse
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HEADER = 100
"""Bytes before the zstd frame in the cache data (VkPipelineCacheHeaderVersionOne and the
driver's own)."""

EXIT = 0x94D
"""The low 12 bits of an sm_90 ``EXIT`` instruction's first word."""


def container(cache: bytes) -> bytes:
    """The decompressed container of the cache data ``cache``."""
    frame = cache[HEADER:]
    try:
        import zstandard  # type: ignore[import-not-found, unused-ignore]

        return bytes(zstandard.ZstdDecompressor().decompressobj().decompress(frame))
    except ImportError:
        pass
    zstd = shutil.which("zstd")
    if zstd is None:
        raise RuntimeError("decompressing the cache needs the zstandard package or zstd")
    return subprocess.run([zstd, "-d", "-c", "-q"], input=frame, capture_output=True,
                          check=True).stdout


def code_end(data: bytes) -> int:
    """The byte after the container's last ``EXIT`` instruction (aligned as its
    instructions are: the slots whose first word is an ``EXIT`` share one offset modulo 16)."""
    ends = [i for i in range(0, len(data) - 8, 8)
            if struct.unpack_from("<Q", data, i)[0] & 0xFFFF == 0x7000 | EXIT]
    if not ends:
        raise ValueError("no EXIT instruction in the container")
    return ends[-1] + 16


def disassembly(cache: bytes, nvdisasm: str = "nvdisasm") -> str:
    """``nvdisasm -b SM90``'s text of the code in the cache data ``cache``."""
    data = container(cache)
    end = code_end(data)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "code.bin")
        for start in range(end % 16, min(end, 4096), 16):
            raw.write_bytes(data[start:end])
            done = subprocess.run([nvdisasm, "-b", "SM90", str(raw)], capture_output=True,
                                  text=True)
            if done.returncode == 0 and "EXIT" in done.stdout:
                return done.stdout
    raise ValueError("nvdisasm read no code ending at the last EXIT")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("caches", nargs="+", type=Path)
    parser.add_argument("--nvdisasm", default="nvdisasm")
    opts = parser.parse_args(argv)
    for path in opts.caches:
        text = disassembly(path.read_bytes(), opts.nvdisasm)
        path.with_name(path.name + ".sass").write_text(text)
        print(f"{path}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
