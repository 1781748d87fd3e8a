"""Generic traversal and rebuilding of the IR, for every analysis that reads or rewrites
kernels: the direct operands of an expression, every expression inside one (as a tree, or each
shared node once), every statement of a body, a kernel's shared arrays, a copy of an
expression with some of its nodes replaced (``rebuild``, ``substitute``) and the size of an
expression written out as a tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from sarek import ir


def children(e: ir.Expr) -> tuple[ir.Expr, ...]:
    """The direct operands of ``e``, in field order (none for constants, names, builtins)."""
    match e:
        case ir.Unary(x=x) | ir.Cast(x=x) | ir.Bitcast(x=x):
            return (x,)
        case ir.Binary(a=a, b=b):
            return (a, b)
        case ir.Load(index=index):
            return (index,)
        case ir.Select(cond=cond, a=a, b=b):
            return (cond, a, b)
        case ir.Call(args=args):
            return tuple(args)
    return ()


def subexpressions(e: ir.Expr) -> Iterator[ir.Expr]:
    """``e`` and every expression inside it, outermost first; a node shared by two parents is
    visited under each of them."""
    yield e
    for child in children(e):
        yield from subexpressions(child)


def distinct_subexpressions(e: ir.Expr) -> Iterator[ir.Expr]:
    """Every distinct node of ``e``, ``e`` first: an expression built by inlining is a DAG
    whose shared nodes are visited once, so the walk is linear in its distinct nodes."""
    seen: set[int] = set()
    stack = [e]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(children(node))


def with_blocks(s: ir.Stmt, block: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]
                ) -> ir.Stmt:
    """``s`` with each block it holds (a loop's body, an ``if``'s two, a role's) replaced by
    ``block(that block)``; any other statement as it is."""
    match s:
        case ir.For(body=body) | ir.While(body=body):
            return s.model_copy(update={"body": block(body)})
        case ir.If(then=then, orelse=orelse):
            return s.model_copy(update={"then": block(then), "orelse": block(orelse)})
        case ir.WarpRoles(roles=roles):
            return s.model_copy(update={"roles": tuple(
                r.model_copy(update={"body": block(r.body)}) for r in roles)})
    return s


def replace_statements(stmts: tuple[ir.Stmt, ...],
                       replace: Callable[[ir.Stmt], list[ir.Stmt] | None]
                       ) -> tuple[ir.Stmt, ...]:
    """``stmts`` with every statement, nested ones included, replaced by ``replace(s)`` (any
    number of statements), or kept, its blocks rebuilt the same way, where that is None."""
    out: list[ir.Stmt] = []
    for s in stmts:
        new = replace(s)
        out += new if new is not None else [
            with_blocks(s, lambda b: replace_statements(b, replace))]
    return tuple(out)


def map_blocks(stmts: tuple[ir.Stmt, ...],
               level: Callable[[tuple[ir.Stmt, ...]], tuple[ir.Stmt, ...]]
               ) -> tuple[ir.Stmt, ...]:
    """``level(block)`` for ``stmts`` and every block nested in it, inner blocks first: a pass
    that rewrites the statements of one block at a time (runs of them) without recursing."""
    return level(tuple(with_blocks(s, lambda b: map_blocks(b, level)) for s in stmts))


def walk(stmts: tuple[ir.Stmt, ...]) -> Iterator[ir.Stmt]:
    """Every statement of ``stmts``, nested ones included, in program order."""
    for s in stmts:
        yield s
        match s:
            case ir.For(body=body) | ir.While(body=body):
                yield from walk(body)
            case ir.If(then=then, orelse=orelse):
                yield from walk(then)
                yield from walk(orelse)
            case ir.WarpRoles(roles=roles):
                for r in roles:
                    yield from walk(r.body)


def shared_arrays(kernel: ir.Kernel) -> list[ir.ArrayDecl]:
    """The kernel's shared-memory arrays, in declaration order."""
    return [s for s in walk(kernel.body)
            if isinstance(s, ir.ArrayDecl) and s.space is ir.MemSpace.SHARED]


def rebuild(e: ir.Expr, leaf: Callable[[ir.Expr], ir.Expr | None],
            memo: dict[int, ir.Expr] | None = None) -> ir.Expr:
    """``e`` with every node for which ``leaf`` returns an expression replaced by it; nodes
    whose operands did not change are kept (sharing is preserved). ``memo`` carries the
    replacements over several calls with the same ``leaf``."""
    memo = {} if memo is None else memo
    key = id(e)
    if key in memo:
        return memo[key]
    out = leaf(e)
    if out is None:
        match e:
            case ir.Unary(x=x) | ir.Cast(x=x) | ir.Bitcast(x=x):
                new_x = rebuild(x, leaf, memo)
                out = e if new_x is x else e.model_copy(update={"x": new_x})
            case ir.Binary(a=a, b=b):
                new_a, new_b = rebuild(a, leaf, memo), rebuild(b, leaf, memo)
                out = e if (new_a is a and new_b is b) else e.model_copy(
                    update={"a": new_a, "b": new_b})
            case ir.Load(index=index):
                new_index = rebuild(index, leaf, memo)
                out = e if new_index is index else e.model_copy(update={"index": new_index})
            case ir.Select(cond=cond, a=a, b=b):
                new_cond, new_a, new_b = (rebuild(x, leaf, memo) for x in (cond, a, b))
                same = new_cond is cond and new_a is a and new_b is b
                out = e if same else e.model_copy(
                    update={"cond": new_cond, "a": new_a, "b": new_b})
            case ir.Call(args=args):
                new_args = tuple(rebuild(x, leaf, memo) for x in args)
                same = all(new is old for new, old in zip(new_args, args, strict=True))
                out = e if same else e.model_copy(update={"args": new_args})
            case _:
                out = e
    memo[key] = out
    return out


def substitute(e: ir.Expr, values: dict[str, ir.Expr]) -> ir.Expr:
    """``e`` with every ``Var`` named in ``values`` replaced by its expression."""
    return rebuild(e, lambda x: values.get(x.name) if isinstance(x, ir.Var) else None)


def tree_size(e: ir.Expr) -> int:
    """The number of nodes of ``e`` written out as a tree (a shared node counts once per use)."""
    sizes: dict[int, int] = {}
    order = list(distinct_subexpressions(e))
    for node in reversed(order):
        sizes[id(node)] = 1 + sum(sizes.get(id(child), 1) for child in children(node))
    return sizes[id(e)]
