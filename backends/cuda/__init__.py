"""CUDA C++: the printer (``emit``) and NVRTC compilation (``compile_cubin``)."""

from backends.cuda.emit import DIALECT, emit
from backends.cuda.nvrtc import NvrtcError, compile_cubin, nvrtc_available

__all__ = ["DIALECT", "NvrtcError", "compile_cubin", "emit", "nvrtc_available"]
