"""Translation of the kernel function and its statements: parameters, assignments, shared and
local arrays, tensor views, tile patterns (checked where they stand) and ``for`` loops."""

from __future__ import annotations

import ast
import builtins
import copy
from collections.abc import Callable, Sequence
from typing import Any

from sarek import ir, tile
from sarek.dsl.expressions import ArraySymbol, ExprTranslator, ScalarSymbol
from sarek.dsl.typing_rules import arith_type, cast, const
from sarek.dsl.vocabulary import ArrayType, ScalarType, barrier, local, shared, view
from sarek.ir import ElemType, MemSpace
from sarek.layout import LayoutError, TileLayout


class Translator(ExprTranslator):
    """Translates one ``@sarek.kernel`` function into a ``sarek.ir.Kernel``."""

    # ------------------------------------------------------------------ the function

    def kernel(self, tree: ast.FunctionDef) -> ir.Kernel:
        args = tree.args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs or args.defaults:
            self.fail("kernel parameters must be plain positional parameters without defaults",
                      tree)
        params: list[ir.Param] = []
        self.scopes.append({})
        for a in args.args:
            if a.annotation is None:
                self.fail(f"parameter {a.arg!r} needs a type annotation such as Global[f32] "
                          "or i32", a)
            t = self.python_value(a.annotation)
            if isinstance(t, ArrayType):
                param = ir.ArrayParam(name=a.arg, elem=t.elem, readonly=t.readonly)
                params.append(param)
                self.tensors[a.arg] = param
                self.define(a.arg, ArraySymbol(t.elem, a.arg, None, 0, t.elem), a)
            elif isinstance(t, ScalarType):
                params.append(ir.ScalarParam(name=a.arg, elem=t.elem))
                self.define(a.arg, ScalarSymbol(t.elem, writable=False), a)
            else:
                self.fail(f"the annotation of {a.arg!r} is not a sarek type (Global[T], "
                          "ReadOnly[T] or a scalar type such as i32)", a)
        body = tree.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # the docstring
        return ir.Kernel(name=tree.name, params=tuple(params), body=self.block(body))

    # ------------------------------------------------------------------ statements

    def block(self, body: Sequence[ast.stmt]) -> tuple[ir.Stmt, ...]:
        self.scopes.append({})
        out: list[ir.Stmt] = []
        for s in body:
            out.extend(self.stmt(s))
        for name in self.scopes.pop():
            self.dead.setdefault(name, 0)
        return tuple(out)

    def stmt(self, s: ast.stmt) -> list[ir.Stmt]:
        self.node = s
        line = self.line(s)
        match s:
            case ast.Assign(targets=[target], value=value):
                return self.assign(target, value, line)
            case ast.Assign():
                self.fail("chained assignment (a = b = ...) is not supported")
            case ast.AnnAssign(target=ast.Name(id=name), annotation=ann, value=value) \
                    if value is not None:
                t = self.python_value(ann)
                if not isinstance(t, ScalarType):
                    self.fail(f"the annotation of {name!r} must be a scalar type such as f32")
                v = self.convert(self.expr(value), t.elem)
                self.define(name, ScalarSymbol(t.elem, writable=True), s)
                return [ir.Let(name=name, type=t.elem, value=v, line=line)]
            case ast.AugAssign(target=target, op=op, value=value):
                combined = ast.BinOp(left=as_load(target), op=op, right=value)
                ast.copy_location(combined, s)
                return self.assign(target, combined, line, augmented=True)
            case ast.For(target=ast.Name(id=var), iter=ast.Call() as it, body=body, orelse=[]):
                return [self.for_range(var, it, body, line)]
            case ast.For(orelse=[]):
                self.fail("only 'for NAME in range(...)' loops are supported")
            case ast.While(test=test, body=body, orelse=[]):
                cond = self.condition(test)
                return [ir.While(cond=cond, body=self.block(body), line=line)]
            case ast.If(test=test, body=body, orelse=orelse):
                cond = self.condition(test)
                return [ir.If(cond=cond, then=self.block(body), orelse=self.block(orelse),
                              line=line)]
            case ast.Expr(value=ast.Call(func=func, args=[], keywords=[])) \
                    if self.is_marker(func, barrier):
                return [ir.Barrier(line=line)]
            case ast.Expr(value=ast.Call(func=func) as call) if self.is_marker(func, tile.apply):
                return [self.tile_apply(call, line)]
            case ast.Return(value=None):
                return [ir.Return(line=line)]
            case ast.Return():
                self.fail("a kernel returns nothing; write results to an array")
            case ast.Pass():
                return []
            case ast.For() | ast.While():
                self.fail("'else' clauses on loops are not supported")
            case ast.Break() | ast.Continue():
                self.fail(f"'{type(s).__name__.lower()}' is not supported; use a while loop "
                          "with a condition")
            case ast.Expr(value=ast.Call(func=ast.Name(id="print"))):
                self.fail("print() does not run in a kernel; store the value in an output "
                          "array and print it after the launch (sarek.simulate returns every "
                          "array)")
            case ast.Expr():
                self.fail("an expression statement has no effect (only barrier() stands alone)")
        self.fail(f"the statement {type(s).__name__} is not supported in a kernel")

    def assign(self, target: ast.expr, value: ast.expr, line: int,
               augmented: bool = False) -> list[ir.Stmt]:
        match target:
            case ast.Name(id=name):
                sym = self.lookup(name)
                if sym is None and not augmented:
                    if isinstance(value, ast.Call) and any(
                            self.is_marker(value.func, m) for m in (shared, local)):
                        decl = self.array_decl(name, value, line)
                        self.tensors[name] = decl
                        return [decl]
                    if isinstance(value, ast.Call) and self.is_view(value):
                        tv = self.tensor_view(name, value, line)
                        self.tensors[name] = tv
                        return [tv]
                    v = self.expr(value)
                    t = arith_type(v.type) if v.weak else v.type
                    self.define(name, ScalarSymbol(t, writable=True), target)
                    return [ir.Let(name=name, type=t, value=cast(v.expr, t), line=line)]
                if sym is None:
                    self.fail(f"undefined name {name!r}", target)
                if isinstance(sym, ArraySymbol):
                    self.fail(f"{name!r} is an array; assign to its elements, {name}[i] = ...")
                if not sym.writable:
                    self.fail(f"{name!r} is read-only (a parameter or loop variable)")
                return [ir.Assign(name=name, value=self.convert(self.expr(value), sym.type),
                                  line=line)]
            case ast.Subscript(value=ast.Name(id=name), slice=index):
                storage, idx, elem = self.element(name, index, target)
                return [ir.Store(array=storage, index=idx,
                                 value=self.convert(self.expr(value), elem), line=line)]
        if isinstance(target, ast.Tuple):
            self.fail(f"cannot assign to {ast.unparse(target)}: assign one name at a time "
                      f"({'; '.join(f'{ast.unparse(t)} = ...' for t in target.elts)})")
        self.fail(f"cannot assign to {ast.unparse(target)}")

    def array_decl(self, name: str, call: ast.Call, line: int) -> ir.ArrayDecl:
        """``shared(T, size | layout, align=16)`` and ``local(...)``."""
        space = MemSpace.SHARED if self.is_marker(call.func, shared) else MemSpace.LOCAL
        if len(call.args) != 2 or any(k.arg != "align" for k in call.keywords):
            self.fail(f"{space.value}(T, size_or_layout, align=16) takes an element type and "
                      "a size or a layout", call)
        t = self.python_value(call.args[0])
        if not isinstance(t, ScalarType):
            self.fail(f"the element type of {name!r} must be a sarek type such as f32", call)
        align = self.compile_time_int(call.keywords[0].value) if call.keywords else 16
        layout = self.python_value(call.args[1]) if isinstance(
            call.args[1], ast.Name | ast.Attribute) else None
        if isinstance(layout, TileLayout):
            size = self.layout_fact(layout.cosize, call)
        else:
            layout, size = None, self.compile_time_int(call.args[1])
        if size <= 0:
            self.fail(f"the size of {name!r} must be positive, got {size}", call)
        self.define(name, ArraySymbol(t.elem, name, layout, 0, t.elem), call)
        return ir.ArrayDecl(name=name, elem=t.elem, size=size, space=space, align=align,
                            layout=layout, line=line)

    def layout_fact(self, compute: Callable[[], Any], node: ast.AST) -> Any:
        try:
            return compute()
        except LayoutError as e:
            self.fail(e.reason, node)

    def tensor_view(self, name: str, call: ast.Call, line: int) -> ir.TensorView:
        """``view(array, T, layout, offset=0)`` and ``tensor.rearrange(pattern, **sizes)``."""
        if self.is_marker(call.func, view):
            if len(call.args) != 3 or any(k.arg != "offset" for k in call.keywords):
                self.fail("view(array, T, layout, offset=0) takes an array, an element type "
                          "and a layout", call)
            base = self.tensor_arg(call.args[0])
            t, layout = self.python_value(call.args[1]), self.python_value(call.args[2])
            if not isinstance(t, ScalarType) or not isinstance(layout, TileLayout):
                self.fail("view(array, T, layout): T must be a sarek type and layout a "
                          "TileLayout", call)
            extra = self.compile_time_int(call.keywords[0].value) if call.keywords else 0
            elem, offset = t.elem, base.offset + extra
        else:
            assert isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
            base = self.tensor_arg(call.func.value)
            if base.layout is None:
                self.fail(f"{call.func.value.id!r} has no layout to rearrange", call)
            pattern = call.args[0] if len(call.args) == 1 else None
            if not (isinstance(pattern, ast.Constant) and isinstance(pattern.value, str)):
                self.fail("rearrange takes a pattern string and mode sizes as keywords", call)
            sizes = {k.arg: self.compile_time_int(k.value) for k in call.keywords if k.arg}
            source, text = base.layout, pattern.value
            layout = self.layout_fact(lambda: source.rearrange(text, **sizes), call)
            elem, offset = base.elem, base.offset
        self.define(name, ArraySymbol(elem, base.storage, layout, offset, base.storage_elem), call)
        return ir.TensorView(name=name, storage=base.storage, elem=elem, layout=layout,
                             offset=offset, line=line)

    def tile_operand(self, name: str, node: ast.AST) -> tile.Operand:
        tensor = self.tensors.get(name)
        if not isinstance(tensor, ir.ArrayDecl | ir.TensorView):
            raise tile.ContractError(f"{name!r} is not a tensor (declare it with a layout, or "
                                     "make a view)")
        storage = self.tensors[tensor.storage] if isinstance(tensor, ir.TensorView) else tensor
        assert not isinstance(storage, ir.TensorView)
        return tile.operand(tensor, storage)

    def tensor_arg(self, node: ast.expr) -> ArraySymbol:
        if not isinstance(node, ast.Name):
            self.fail(f"{ast.unparse(node)} must name an array or a tensor", node)
        return self.array(node.id, node)

    def tile_apply(self, call: ast.Call, line: int) -> ir.TileApply:
        """``tile.apply(op, dst, src, scope="warp")``: checks the contract here, at the line."""
        if len(call.args) != 3 or any(k.arg != "scope" for k in call.keywords):
            self.fail("tile.apply(op, dst, src, scope='warp') takes an opcode and two tensors",
                      call)
        op = self.python_value(call.args[0]) if not isinstance(call.args[0], ast.Constant) \
            else call.args[0].value
        scope = call.keywords[0].value if call.keywords else None
        if scope is not None and not (isinstance(scope, ast.Constant) and scope.value == "warp"):
            self.fail("tile patterns have warp scope only (scope='warp')", call)
        if not isinstance(op, str):
            self.fail("the opcode of tile.apply must be a string such as "
                      "'ldmatrix.sync.aligned.m8n8.x2.shared.b16'", call)
        names = []
        for node in call.args[1:]:
            self.tensor_arg(node)
            names.append(node.id)  # type: ignore[attr-defined]
        try:
            parsed = tile.parse_op(op)
            dst, src = (self.tile_operand(n, call) for n in names)
            tile.check(parsed, *tile.roles(parsed, dst, src))
        except tile.ContractError as e:
            raise tile.ContractError(f"{self.file}:{line}: {e.reason}") from None
        return ir.TileApply(op=parsed, dst=names[0], src=names[1], line=line)

    def compile_time_int(self, node: ast.expr) -> int:
        v = self.expr(node)
        if not (isinstance(v.expr, ir.Const) and v.type.is_int):
            self.fail(f"{ast.unparse(node)} must be a compile-time integer", node)
        return int(v.expr.value)

    def for_range(self, var: str, it: ast.Call, body: list[ast.stmt], line: int) -> ir.For:
        if not self.is_marker(it.func, builtins.range) or it.keywords or not 1 <= len(it.args) <= 3:
            self.fail("only 'for NAME in range(...)' loops with 1 to 3 arguments are supported")
        bounds = [self.convert(self.expr(a), ElemType.I32, "a range bound") for a in it.args]
        one, zero = const(1, ElemType.I32), const(0, ElemType.I32)
        if len(bounds) == 1:
            bounds = [zero, bounds[0]]
        start, stop, step = (*bounds, one) if len(bounds) == 2 else bounds
        if isinstance(step, ir.Const) and step.value == 0:
            self.fail("range() step must not be zero")
        self.scopes.append({})
        self.define(var, ScalarSymbol(ElemType.I32, writable=False), it)
        loop_body = self.block(body)
        self.scopes.pop()
        self.dead.setdefault(var, 0)
        return ir.For(var=var, start=start, stop=stop, step=step, body=loop_body, line=line)


def as_load(target: ast.expr) -> ast.expr:
    """The augmented assignment's target read as a value (``a[i]`` of ``a[i] += x``)."""
    load = copy.deepcopy(target)
    for node in ast.walk(load):
        if hasattr(node, "ctx"):
            node.ctx = ast.Load()
    return load
