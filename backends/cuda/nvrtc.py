"""Compile CUDA C++ to a cubin with NVRTC (``cuda-bindings`` and ``nvidia-cuda-nvrtc``)."""

from __future__ import annotations

import functools

from sarek.errors import SarekError


class NvrtcError(SarekError):
    """NVRTC refused the program; ``log`` holds its compile log."""

    def __init__(self, reason: str, log: str = "") -> None:
        super().__init__(reason + (f"\n{log}" if log else ""))
        self.log = log


INSTALL = "pip install 'sarek[cuda]'"
"""What installs NVRTC's Python bindings and library (``cuda-bindings``, ``nvidia-cuda-nvrtc``)."""


@functools.cache
def nvrtc_available() -> str | None:
    """None when NVRTC can be loaded, else the reason it cannot and what installs it (found
    once per process)."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        return f"NVRTC's Python bindings (cuda-bindings) are not installed: {INSTALL}"
    try:
        err, *_ = nvrtc.nvrtcVersion()
    except Exception as e:  # the bindings found no NVRTC library
        return (f"the NVRTC library cannot be loaded ({type(e).__name__}: "
                f"{' '.join(str(e).split())[:160]}): {INSTALL}")
    return None if int(err) == 0 else f"NVRTC reports {err}"


def compile_cubin(source: str, arch: str = "sm_80", name: str = "kernel.cu",
                  options: tuple[str, ...] = ()) -> bytes:
    """The cubin NVRTC builds from ``source`` for ``arch``; ``NvrtcError`` with the log when
    it does not compile. Source that uses ``wgmma`` is compiled for ``sm_90a`` where
    ``arch`` is ``sm_90`` (the instruction exists only in the arch-specific target) and
    refused for every other ``arch`` with the reason."""
    return compile_logged(source, arch, name, options)[0]


def compile_logged(source: str, arch: str = "sm_80", name: str = "kernel.cu",
                   options: tuple[str, ...] = ()) -> tuple[bytes, str]:
    """``compile_cubin``'s cubin and NVRTC's log (with ``--ptxas-options=-v`` among
    ``options``, ptxas's register and spill counts)."""
    if (reason := nvrtc_available()) is not None:
        raise NvrtcError(reason)
    from cuda.bindings import nvrtc

    if "wgmma." in source:
        if arch not in ("sm_90", "sm_90a"):
            raise NvrtcError(f"{name} multiplies with wgmma (a warpgroup schedule), which only "
                             f"sm_90a has, not {arch}: compile it for sm_90, or rewrite with "
                             "an mma.sync schedule (--schedule t128k64s2)")
        arch = "sm_90a"

    def ok(result: tuple[object, ...], what: str) -> tuple[object, ...]:
        if int(result[0]) != 0:  # type: ignore[call-overload]
            raise NvrtcError(f"NVRTC {what} failed: {result[0]}")
        return result[1:]

    (prog,) = ok(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options)]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        (size,) = ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        # Fresh buffers NVRTC writes into: ``b" " * 1`` is CPython's shared one-byte object,
        # and writing into it turned every encoded space of the process into a NUL.
        raw = bytearray(int(size))  # type: ignore[call-overload]
        ok(nvrtc.nvrtcGetProgramLog(prog, raw), "log")
        log = raw.decode(errors="replace").rstrip("\x00 ")
        if int(status) != 0:
            raise NvrtcError(f"{name} does not compile for {arch}", log)
        (size,) = ok(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = bytearray(int(size))  # type: ignore[call-overload]
        ok(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        return bytes(cubin), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
