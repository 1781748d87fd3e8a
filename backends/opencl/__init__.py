"""OpenCL C: the portable printer (``emit``: fragments emulated lane by lane in local memory)
and the NVIDIA one (``emit_nv``: the CUDA lowering's ldmatrix and mma.sync as inline PTX), and
their runs through pyopencl (``run`` on PoCL or any device, ``run_nv`` on NVIDIA's OpenCL)."""

from backends.opencl.emit import emit
from backends.opencl.emit_nv import emit_nv
from backends.opencl.run import nv_available, opencl_available, run, run_nv

__all__ = ["emit", "emit_nv", "nv_available", "opencl_available", "run", "run_nv"]
