"""The kernel checker's rules for warp roles (``ir.RoleStmt``): a ``WarpRoles`` splits the
block's whole warpgroups into roles, once, reached by every invocation; inside a role the
block-wide statements (``Barrier``, staged copies) are refused, and a role's own barrier is a
``NamedBarrier`` of its invocations; ``SetMaxNReg`` asks for a register count a warpgroup can
have."""

from __future__ import annotations

from abc import abstractmethod

from sarek import atoms, ir
from sarek.ir_check_expr import ExpressionRules, Scope

WARPGROUP = atoms.WGMMA.threads  # invocations of one warpgroup
REGISTERS = (24, 256)  # setmaxnreg's range; counts are multiples of 8


class RoleRules(ExpressionRules):
    """Rules for ``WarpRoles``, ``SetMaxNReg`` and ``NamedBarrier``, and the statements a role
    may not hold."""

    role_threads: int | None = None  # invocations of the role being checked (None: outside)
    role_barriers: dict[int, int] | None = None  # named barrier id -> its role's first group

    @abstractmethod
    def block(self, stmts: tuple[ir.Stmt, ...], scope: Scope, path: str,
              divergent: bool) -> bool:
        """Checks a statement list (``sarek.ir_check``)."""

    def _warp_roles(self, s: ir.WarpRoles, scope: Scope, path: str, divergent: bool) -> None:
        if self.role_threads is not None:
            self.report(path, "warp roles inside a role: a block splits its warpgroups once")
            return
        if divergent:
            self.report(path, "warp roles in divergent code: every invocation of the block "
                        "enters the statement")
        size = self.block_size
        if size is None or size % WARPGROUP:
            self.report(path, f"warp roles split a block of whole warpgroups ({WARPGROUP} "
                        "invocations each) that the kernel records (Kernel.block)")
            return
        groups = size // WARPGROUP
        owner: dict[int, int] = {}
        for j, role in enumerate(s.roles):
            if role.first + role.count > groups:  # checked before counting: count is unbounded
                self.report(f"{path}.roles[{j}]", f"role {j} takes warpgroups {role.first} to "
                            f"{role.first + role.count - 1}; the block has {groups}")
            for g in range(role.first, min(role.first + role.count, groups)):
                if g in owner:
                    self.report(f"{path}.roles[{j}]", f"warpgroup {g} is in roles {owner[g]} "
                                f"and {j}")
                owner.setdefault(g, j)
        missing = sorted(set(range(groups)) - owner.keys())
        if missing:
            self.report(path, f"warpgroups {missing} of the block are in no role")
        self.role_barriers = {}
        for j, role in enumerate(s.roles):
            self.role_threads = role.count * WARPGROUP
            self._role_first = role.first
            self.block(role.body, Scope(parent=scope), f"{path}.roles[{j}].body", False)
        self.role_threads = None

    def _set_max_nreg(self, s: ir.SetMaxNReg, path: str, divergent: bool) -> None:
        low, high = REGISTERS
        if s.registers % 8 or not low <= s.registers <= high:
            self.report(path, f"setmaxnreg takes a multiple of 8 registers from {low} to "
                        f"{high}, not {s.registers}")
        if self.role_threads is None:
            self.report(path, "setmaxnreg belongs to a warp role (WarpRoles), whose "
                        "warpgroups run it together")
        elif divergent:
            self.report(path, "setmaxnreg in divergent code: every invocation of the "
                        "warpgroup runs it together")

    def _named_barrier(self, s: ir.NamedBarrier, path: str, divergent: bool) -> None:
        if self.role_threads is None or self.role_barriers is None:
            self.report(path, "a named barrier is a warp role's barrier; outside WarpRoles "
                        "use Barrier")
            return
        if s.threads != self.role_threads:
            self.report(path, f"named barrier {s.id} counts {s.threads} invocations; its role "
                        f"has {self.role_threads}")
        other = self.role_barriers.setdefault(s.id, self._role_first)
        if other != self._role_first:
            self.report(path, f"named barrier {s.id} is used by two roles")
        if divergent:
            self.report(path, "named barrier in divergent code: the invocations of the role "
                        "may not all reach it")

    def _outside_roles(self, s: ir.Stmt, path: str) -> None:
        """Block-wide statements refused inside a role."""
        if self.role_threads is None:
            return
        match s:
            case ir.Barrier():
                self.report(path, "a block-wide barrier inside a warp role waits for the "
                            "other roles, which never reach it: use a NamedBarrier of the "
                            "role")
            case ir.StageCopy() | ir.StageCommit() | ir.StageWait():
                self.report(path, f"a {s.kind} is the whole block's; a warp role's copies "
                            "are bulk tensor copies or its own stores")

    _role_first: int = 0
