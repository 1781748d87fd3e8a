"""OpenCL C: the printer (``emit``) and PoCL / vendor runs through pyopencl (``run``)."""

from backends.opencl.emit import emit
from backends.opencl.run import opencl_available, run

__all__ = ["emit", "opencl_available", "run"]
