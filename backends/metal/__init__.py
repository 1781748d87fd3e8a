"""Metal Shading Language: the lowering (``backends.metal.lower``: fragments kept whole as
simdgroup matrices, everything Metal lacks refused with the reason), the printer (``emit``)
and the strongest check Linux allows (``syntax_check``: clang, as C++, against a stand-in
header; a syntax and type check, not Apple's compiler). No Metal device exists off macOS, so
nothing here runs a kernel."""

from backends.metal.check import MetalCheckError, clang_unavailable, syntax_check
from backends.metal.emit import emit, print_kernel

__all__ = ["MetalCheckError", "clang_unavailable", "emit", "print_kernel", "syntax_check"]
