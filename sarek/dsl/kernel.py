"""``@sarek.kernel``: reads a function's source with ``ast`` (never running it), refuses
expressions nested deeper than the IR allows, translates it and validates the result."""

from __future__ import annotations

import ast
import copy
import inspect
import textwrap
from collections.abc import Callable
from typing import Any

from sarek import dispatch, ir, ir_check
from sarek.dsl.statements import Translator
from sarek.errors import DslError, user_facing
from sarek.ir_check import MAX_EXPR_DEPTH


class KernelFunction:
    """What ``@sarek.kernel`` returns: the parsed ``ir`` and where it came from. Launch it as
    numba launches a kernel, ``kernel[grid, block](*args)`` or ``kernel[grid, block,
    stream](*args)`` (``sarek.dispatch``), with the options of ``with_options``."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.ir: ir.Kernel = _parse(fn)
        self.options = dispatch.Options()
        self.memo = dispatch.Memo()

    def __repr__(self) -> str:
        return f"<sarek kernel {self.name} ({len(self.ir.params)} parameters)>"

    @user_facing
    def __getitem__(self, config: Any) -> dispatch.Configured:
        """``kernel[grid, block]`` or ``kernel[grid, block, stream]``: the original kernel's
        grid and block; call the result with the arguments to launch."""
        return dispatch.configure(self, config)

    @user_facing
    def with_options(self, **options: Any) -> KernelFunction:
        """This kernel launched with other options: ``target`` (``cuda``, ``vulkan``,
        ``opencl``, ``opencl-nv``, ``sim``, ``sim-T``), ``lowering``, ``precision``
        (``"accurate"`` or ``"fast"``), ``schedule`` and ``rewrite`` (False runs the kernel
        as written)."""
        other = copy.copy(self)
        other.options = dispatch.with_options(self.options, **options)
        other.memo = dispatch.Memo()
        return other


@user_facing
def kernel(fn: Callable[..., Any]) -> KernelFunction:
    """Decorator: parse ``fn`` as a kernel; raises ``DslError`` naming the file, line and
    construct when it uses Python the DSL does not support."""
    return KernelFunction(fn)


def check_depth(fdef: ast.FunctionDef, file: str, line_offset: int) -> None:
    """Refuses an expression nested deeper than the IR allows (``ir_check.MAX_EXPR_DEPTH``)
    before translating it: the translation recurses over expressions. Found without
    recursion."""
    stack: list[tuple[ast.AST, int, int]] = [(fdef, 0, fdef.lineno)]
    while stack:
        node, depth, line = stack.pop()
        if isinstance(node, ast.stmt):
            depth, line = 0, node.lineno
        elif isinstance(node, ast.expr):
            depth += 1
            if depth > MAX_EXPR_DEPTH:
                raise DslError(f"an expression nests more than {MAX_EXPR_DEPTH} deep, the most a "
                               "kernel may hold; compute it in several assignments", file,
                               line + line_offset)
        stack += [(child, depth, line) for child in ast.iter_child_nodes(node)]


def _parse(fn: Callable[..., Any]) -> ir.Kernel:
    file = inspect.getsourcefile(fn) or "<unknown>"
    try:
        lines, first = inspect.getsourcelines(fn)
    except OSError as e:
        raise DslError(f"the source of {fn.__name__} is not available ({e})", file) from None
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (SyntaxError, RecursionError, MemoryError) as e:
        raise DslError(f"the source of {fn.__name__} cannot be parsed on its own ({e})", file,
                       first) from None
    fdef = tree.body[0] if tree.body else None
    if not isinstance(fdef, ast.FunctionDef):
        raise DslError("@sarek.kernel applies to a function definition", file, first)
    check_depth(fdef, file, first - 1)
    t = Translator(fn, file, first)
    kernel_ir = t.kernel(fdef)
    problems = ir_check.check(kernel_ir)
    if problems:
        p = problems[0]
        raise DslError(p.reason, file, p.line or first)
    return kernel_ir
