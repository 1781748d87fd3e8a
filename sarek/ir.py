"""The typed kernel IR.

A kernel is a tree of frozen pydantic models: parameters, then a body of statements over typed
expressions. Every expression carries its element type; the DSL inserts the casts, so the IR
itself has no implicit conversions (``specs/ir.md`` is the normative text). Vocabularies are
closed enums, and expression and statement nodes are discriminated unions on ``kind``, so a
kernel round-trips through JSON exactly::

    Kernel.model_validate_json(k.model_dump_json()) == k

The IR is pure types (as Sarek's ``Sarek_ir_types``), in two modules: ``sarek.ir_expr`` holds
the vocabularies, parameters and expressions, this module the statements, their families and
the kernel, and re-exports the rest, so that ``sarek.ir`` names every node. Nothing of the
project is imported but the layout type some statements carry.
"""

from __future__ import annotations

from typing import Annotated, Literal, TypeAlias, get_args

from pydantic import Field

from sarek.ir_expr import (
    BITWISE,
    COMPARISONS,
    LOGICAL,
    MATH_ARITY,
    ArrayParam,
    Binary,
    BinOp,
    Bitcast,
    Builtin,
    BuiltinValue,
    Call,
    Cast,
    Const,
    ElemType,
    Expr,
    FragLayout,
    FragUse,
    Load,
    MathFn,
    MemSpace,
    MmaAtom,
    Node,
    Param,
    ScalarParam,
    Select,
    Unary,
    UnOp,
    Var,
)
from sarek.layout import TileLayout

# --------------------------------------------------------------------------- statements


class _Stmt(Node):
    line: int | None = None  # source line in the DSL, for error messages; not semantic


class Let(_Stmt):
    """Declares a scalar variable, visible to the end of the enclosing block."""

    kind: Literal["let"] = "let"
    name: str
    type: ElemType
    value: Expr


class Assign(_Stmt):
    """Gives a declared scalar variable a new value of its type."""

    kind: Literal["assign"] = "assign"
    name: str
    value: Expr


class Store(_Stmt):
    """``array[index] = value`` with ``value`` of the array's element type."""

    kind: Literal["store"] = "store"
    array: str
    index: Expr
    value: Expr


class StorePacked(_Stmt):
    """``value``, an unsigned integer ``n`` times as wide as the elements of ``array`` (``n`` of
    2, 4 or 8), stored as one access into ``array[index]`` .. ``array[index + n - 1]``, its
    least significant element first (the elements' bytes in little-endian order); ``index`` is
    a multiple of ``n``."""

    kind: Literal["store_packed"] = "store_packed"
    array: str
    index: Expr
    value: Expr


class For(_Stmt):
    """``for (var = start; step > 0 ? var < stop : var > stop; var += step)``; i32 bounds, the
    variable is read-only in the body and ``step`` must not be 0."""

    kind: Literal["for"] = "for"
    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]


class While(_Stmt):
    """Runs ``body`` while ``cond`` (a bool) holds."""

    kind: Literal["while"] = "while"
    cond: Expr
    body: tuple[Stmt, ...]


class If(_Stmt):
    """Runs ``then`` where ``cond`` holds and ``orelse`` where it does not."""

    kind: Literal["if"] = "if"
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()


class Barrier(_Stmt):
    """Block-wide barrier with shared-memory ordering; every invocation of the block must reach
    it together."""

    kind: Literal["barrier"] = "barrier"


class Return(_Stmt):
    """Ends the invocation."""

    kind: Literal["return"] = "return"


class ArrayDecl(_Stmt):
    """Declares a shared (one per block) or local (one per invocation) array of ``size``
    elements, aligned to ``align`` bytes. Shared arrays start with unspecified contents (the
    simulator fills them with a canary); local arrays too. With a ``layout`` the array is also
    a tensor whose coordinates map to element offsets (``specs/tile-patterns.md``). A target's
    lowering may place a shared array at byte ``dynamic_offset`` of the block's one dynamic
    shared allocation (None: an allocation of its own). A shared array that ``shares`` another
    (declared before it, sharing none itself) has no storage of its own: it reuses that
    array's bytes from the first, so that both names reach the same bytes (an access through
    either is an access of them, for races too; what one writes the other reads
    reinterpreted, little-endian). It fits in them: its bytes at most theirs, which hold a
    whole number of its elements, and its alignment at most theirs."""

    kind: Literal["array_decl"] = "array_decl"
    name: str
    elem: ElemType
    size: int = Field(gt=0)
    space: MemSpace
    align: int = 16
    layout: TileLayout | None = None
    dynamic_offset: int | None = Field(default=None, ge=0, exclude_if=lambda v: v is None)
    shares: str | None = Field(default=None, exclude_if=lambda v: v is None)


class TensorView(_Stmt):
    """Names a tensor over the storage of array ``storage`` without copying: coordinate ``c``
    is element ``offset + layout(c)`` counted in ``elem`` units, which may be wider or narrower
    than the storage's own (a dtype view, not a conversion); register tensors also map
    coordinates to lanes."""

    kind: Literal["tensor_view"] = "tensor_view"
    name: str
    storage: str
    elem: ElemType
    layout: TileLayout
    offset: int = 0


class FragShape(Node):
    """The ``m x n x k`` multiply-accumulate a fragment takes part in: A is m x k, B is k x n,
    the accumulators m x n."""

    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)


class FragDecl(_Stmt):
    """Declares a fragment of ``elem`` owned by a whole subgroup, for role ``use`` in a
    multiply-accumulate of ``shape``; its ``rows`` and ``cols`` follow from both."""

    kind: Literal["frag_decl"] = "frag_decl"
    name: str
    use: FragUse
    shape: FragShape
    elem: ElemType

    @property
    def rows(self) -> int:
        return self.shape.k if self.use is FragUse.B else self.shape.m

    @property
    def cols(self) -> int:
        return self.shape.k if self.use is FragUse.A else self.shape.n


class FragFill(_Stmt):
    """Sets every element of a fragment to ``value``."""

    kind: Literal["frag_fill"] = "frag_fill"
    frag: str
    value: Expr


class FragLoad(_Stmt):
    """Loads a fragment from ``array`` at element ``offset``; consecutive rows (``layout`` row)
    or columns (col) are ``stride`` elements apart."""

    kind: Literal["frag_load"] = "frag_load"
    frag: str
    array: str
    offset: Expr
    stride: Expr
    layout: FragLayout = FragLayout.ROW


class FragStore(_Stmt):
    """Stores a fragment to ``array`` at ``offset`` with ``stride`` and ``layout`` as for
    ``FragLoad``."""

    kind: Literal["frag_store"] = "frag_store"
    frag: str
    array: str
    offset: Expr
    stride: Expr
    layout: FragLayout = FragLayout.ROW


class FragMulAdd(_Stmt):
    """``d = a * b + c`` over fragments (a: m x k, b: k x n, c and d: m x n)."""

    kind: Literal["frag_mul_add"] = "frag_mul_add"
    d: str
    a: str
    b: str
    c: str


class FragAdd(_Stmt):
    """``d = a + b`` element by element over accumulator fragments of one shape and element
    type, or with ``subtract`` ``d = a - b``; float adds and subtractions round to nearest
    even, integer ones wrap."""

    kind: Literal["frag_add"] = "frag_add"
    d: str
    a: str
    b: str
    subtract: bool = False


class TileOp(Node):
    """A warp-level tile instruction: ``ldmatrix`` (shared rows into registers) or ``stmatrix``
    (registers into shared rows) of ``count`` 8x8 matrices of 16-bit elements, transposed or
    not; ``opcode`` is its PTX form."""

    kind: Literal["ldmatrix", "stmatrix"]
    count: Literal[1, 2, 4]
    trans: bool = False

    @property
    def opcode(self) -> str:
        trans = ".trans" if self.trans else ""
        return f"{self.kind}.sync.aligned.m8n8.x{self.count}{trans}.shared.b16"


class TileApply(_Stmt):
    """The tile instruction ``op`` repeated over the leading modes of two tensors; ``dst`` and
    ``src`` name arrays with a layout or tensor views (``specs/tile-patterns.md``)."""

    kind: Literal["tile_apply"] = "tile_apply"
    op: TileOp
    dst: str
    src: str
    scope: Literal["warp"] = "warp"


class ProvidedRows(Node):
    """The rows the lanes of a tile pattern's ``Ldmatrix`` or ``Stmatrix`` address, as one affine
    map over the shared array viewed as 32-bit words: row ``r`` of matrix ``m`` starts at word
    ``start + m * matrix_stride + r * row_stride`` (which lane gives which row is
    ``LaneTile``'s rule)."""

    start: int
    matrix_stride: int
    row_stride: int


class Ldmatrix(_Stmt):
    """Lane-explicit ``ldmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16`` of a whole
    warp: lane ``8*m + r`` gives the shared address of row ``r`` of matrix ``m`` (16 bytes,
    16-byte aligned), either in ``address``, an element index into the shared array ``src``,
    or, inside a ``LaneTile``, through ``rows``; matrix ``m`` arrives in the local array ``dst``
    at element ``offset + m`` of a u32 array, or at 32-bit word ``slots[m]`` of any local array
    when ``slots`` is given; word ``w`` of row ``r`` in lane ``4*r + w``
    (``sarek.atoms.LDMATRIX``); ``trans`` transposes each 8x8 of 16-bit elements."""

    kind: Literal["ldmatrix"] = "ldmatrix"
    dst: str
    offset: int = Field(ge=0)
    src: str
    address: Expr | None = None
    count: Literal[1, 2, 4]
    trans: bool = False
    rows: ProvidedRows | None = None
    slots: tuple[int, ...] | None = None


class Stmatrix(_Stmt):
    """Lane-explicit ``stmatrix.sync.aligned.m8n8.x{count}[.trans].shared.b16`` of a whole
    warp, the inverse of ``Ldmatrix``: the registers of local array ``src`` (element ``offset +
    m`` of a u32 array, or 32-bit word ``slots[m]``) are written to the rows of the shared
    array ``dst`` that ``address`` or ``rows`` give, as ``Ldmatrix`` reads them."""

    kind: Literal["stmatrix"] = "stmatrix"
    dst: str
    src: str
    offset: int = Field(default=0, ge=0)
    address: Expr | None = None
    count: Literal[1, 2, 4]
    trans: bool = False
    rows: ProvidedRows | None = None
    slots: tuple[int, ...] | None = None


class LaneTile(_Stmt):
    """A tile pattern (``TileApply`` of ``op`` from ``src`` into ``dst``, the names as written)
    lowered lane by lane: lane ``l`` of the warp gives row ``l % rows`` of matrix ``(l / rows)
    % op.count`` (``sarek.atoms.LDMATRIX``'s provider rule), and ``moves`` are the pattern's
    instructions, one ``Ldmatrix`` or ``Stmatrix`` per repeat, in order, each with its
    ``rows`` and ``slots`` over the operands' storage."""

    kind: Literal["lane_tile"] = "lane_tile"
    op: TileOp
    dst: str
    src: str
    rows: int = Field(gt=0)
    moves: tuple[Ldmatrix | Stmatrix, ...]


class Mma(_Stmt):
    """Lane-explicit ``mma.sync`` of ``atom`` by a whole warp: ``D = A * B + C`` where each
    lane holds its registers of A in the u32 local array ``a`` from ``a_offset``, of B in
    ``b`` from ``b_offset``, its elements of C in the local array ``c`` from ``c_offset`` and
    receives those of D in ``d`` from ``d_offset``, as the atom's lane layouts say
    (``sarek.atoms.MMA``)."""

    kind: Literal["mma"] = "mma"
    atom: MmaAtom
    d: str
    a: str
    b: str
    c: str
    d_offset: int = Field(default=0, ge=0)
    a_offset: int = Field(default=0, ge=0)
    b_offset: int = Field(default=0, ge=0)
    c_offset: int = Field(default=0, ge=0)


class MatrixDescriptor(Node):
    """What a ``wgmma`` shared-memory matrix descriptor carries besides the start address: the
    leading and stride byte offsets and the layout type (0: none, 1: 128-byte swizzle), as
    the target's lowering chose them for the operand's layout (``sarek.atoms.GmmaAtom``)."""

    leading_bytes: int = Field(gt=0)
    stride_bytes: int = Field(gt=0)
    mode: int = Field(ge=0, le=3)


class Wgmma(_Stmt):
    """Lane-explicit ``wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{elem}.{elem}`` of each
    warpgroup of the block (four consecutive warps; the block is one or more), B from shared
    memory, A from registers or from shared memory: for each warp ``w`` of the warpgroup,
    ``D_w = A_w * B + D_w``.

    Without ``a_index``, ``A_w`` is the warp's 16x16 A in the u32 local array ``a``
    (``mma.sync.m16n8k16``'s A layout). With it, ``a`` is a shared array of ``elem`` holding
    the warpgroup's 64x16 A K-major in 128-byte swizzle atoms: row ``m``, column ``k`` at
    ``swizzled(a_index + (m/8)*a_core_m + (m%8)*64 + k)``, ``A_w`` its rows ``16w .. 16w+15``
    (``swizzled(x) = x ^ (((x / 64) % 8) * 8)``: in each 128-byte row of a 1024-byte aligned
    atom the 16-byte chunks are permuted by the row's index; ``a_index % 64`` at most 48, so
    the 16 columns stay in one row).

    ``D_w`` is the warp's 16 x ``n`` f32 accumulator in the local array ``d`` (columns
    ``8j .. 8j+7`` in elements ``4j .. 4j+3``, ``mma.sync``'s C layout), and B the 16 x ``n``
    matrix of the shared array ``b`` in 8x8 core matrices: element ``(k, c)`` at ``b_index +
    (k/8)*core_k + (k%8)*8 + (c/8)*core_n + c%8``; with ``swizzle`` 128 in 128-byte swizzle
    atoms of 8 rows of 64: at ``b_index + (k/8)*core_k + (c/64)*core_n + (k%8)*64 + (((c%64)/8)
    ^ (k%8))*8 + c%8``, the atoms 1024-byte aligned. ``a_index`` and ``b_index`` are the same
    for the whole warpgroup.

    With ``elem`` u8 or i8 the instruction is ``m64n{n}k32.s32.{u8,s8}``: 32 deep, ``D_w`` the
    warp's i32 accumulator (same layout; products exact, sums wrapping modulo 2^32), ``A_w``
    the warp's 16x32 A in four u32 registers (``mma.sync.m16n8k32``'s A layout), and B the
    32 x ``n`` matrix K-major in core matrices of 8 columns of 16 bytes (the 8-bit operands
    ``wgmma`` reads are K-major only): element ``(k, c)`` at
    ``b_index + (k/16)*core_k + (c/8)*core_n + (c%8)*16 + k%16``; with ``swizzle`` 128 in
    128-byte swizzle atoms of 8 columns of 128 k, at ``swizzled8(b_index + (c/8)*core_n +
    (c%8)*128 + k)`` (``swizzled8(x) = x ^ (((x / 128) % 8) * 16)``, ``b_index % 128`` at most
    96). A from shared memory likewise: row ``m``, column ``k`` at ``a_index + (m/8)*a_core_m
    + (k/16)*128 + (m%8)*16 + k%16``, or with ``swizzle`` at ``swizzled8(a_index +
    (m/8)*a_core_m + (m%8)*128 + k)``.

    ``b_descriptor`` and ``a_descriptor`` (A from shared memory) are the descriptors'
    strides and modes for those layouts, which a printer prints. The
    instruction is preceded by a ``wgmma.fence`` (unless ``fenced`` is false: it directly
    follows a ``Wgmma`` of the same shape, which orders their accumulators, and no other
    instruction touched its registers in between) and complete after the ``WgmmaWait`` that
    retires its group."""

    kind: Literal["wgmma"] = "wgmma"
    elem: ElemType
    n: int = Field(ge=8, le=256, multiple_of=8)
    d: str
    a: str
    b: str
    b_index: Expr
    core_k: int = Field(gt=0)
    core_n: int = Field(gt=0)
    swizzle: Literal[0, 128] = 0
    a_index: Expr | None = None
    a_core_m: int = Field(default=512, gt=0)
    b_descriptor: MatrixDescriptor | None = None
    a_descriptor: MatrixDescriptor | None = None
    fenced: bool = True


class WgmmaWait(_Stmt):
    """``wgmma.commit_group`` then ``wgmma.wait_group pending``: the ``Wgmma`` the warpgroup
    issued since its last wait form a group, and every group but the ``pending`` newest is
    complete, its accumulators and shared operands free to be touched (with 0: every
    ``Wgmma`` issued)."""

    kind: Literal["wgmma_wait"] = "wgmma_wait"
    pending: int = Field(default=0, ge=0)


class AsyncProxyFence(_Stmt):
    """``fence.proxy.async.shared::cta``: the invocation's shared-memory writes, its landed
    copies included, become visible to the asynchronous proxy through which ``wgmma`` reads
    B."""

    kind: Literal["async_proxy_fence"] = "async_proxy_fence"


class CopyPart(Node):
    """Which part of each element a staged copy lands: term or byte plane ``index`` of its
    split into ``into`` (``sarek.stage_copy.part``)."""

    into: ElemType
    index: int = Field(ge=0)


class StageCopy(_Stmt):
    """The block's copy of a ``rows`` x ``cols`` tile of the global array ``src`` into the
    shared array ``dst``: tile element ``(r, c)`` is
    ``src[src_offset + r*src_row_stride + c*src_col_stride]`` where ``r < row_limit`` and
    ``c < col_limit``, else ``fill`` (of ``src``'s type), and lands at
    ``dst[dst_offset + r*dst_pitch + c]``: unchanged where ``part`` is None (``dst`` holds
    ``src``'s type), else as that part of its split into ``dst``'s narrower type
    (``sarek.stage_copy.part``: a bf16 or f16 term, or a byte plane). The offsets, strides
    and limits are i32 and the same for the whole block; every invocation of the block
    issues the copy together (as a barrier). A target may run it asynchronously: it belongs
    to the group the next ``StageCommit`` closes and is visible to the block after the
    ``StageWait`` that completes that group and a barrier (``specs/ir.md``). With ``bulk`` a
    target that has bulk tensor copies may issue the tile as such copies from one invocation
    (CUDA: ``backends.cuda.tma``); the copy means the same either way."""

    kind: Literal["stage_copy"] = "stage_copy"
    dst: str
    dst_offset: Expr
    dst_pitch: int = Field(ge=1)
    src: str
    src_offset: Expr
    src_row_stride: Expr
    src_col_stride: Expr
    rows: int = Field(ge=1)
    cols: int = Field(ge=1)
    row_limit: Expr
    col_limit: Expr
    fill: Const
    part: CopyPart | None = None
    bulk: bool = Field(default=False, exclude_if=lambda v: not v)


class StageCommit(_Stmt):
    """Closes the group of copies this invocation issued since its last commit."""

    kind: Literal["stage_commit"] = "stage_commit"


class StageWait(_Stmt):
    """Waits until at most the ``pending`` most recent groups this invocation committed are
    incomplete; the copies of every older group have landed."""

    kind: Literal["stage_wait"] = "stage_wait"
    pending: int = Field(ge=0)


class CpAsync(_Stmt):
    """Lane-explicit ``cp.async.cg.shared.global`` of 16 bytes by each invocation: the
    ``16 / size`` elements from ``src[src_index]`` (a global array) land at
    ``dst[dst_index]`` (a shared array of the same element type), both 16-byte aligned; the
    copy joins the invocation's open group (``StageCommit``, ``StageWait``)."""

    kind: Literal["cp_async"] = "cp_async"
    dst: str
    dst_index: Expr
    src: str
    src_index: Expr


class MbarrierInit(_Stmt):
    """``mbarrier.init.shared::cta.b64``: mbarrier ``index`` of ``barriers`` (a shared array of
    u64 that only the mbarrier statements and bulk copies touch, one mbarrier per element)
    starts phase 0, which completes once ``arrivals`` arrivals are in and every byte expected
    of it has landed; later phases likewise. Each invocation that runs it initializes the
    mbarrier (a kernel runs it in one invocation, then fences the initialization toward the
    asynchronous proxy and passes a ``Barrier`` before any other use)."""

    kind: Literal["mbarrier_init"] = "mbarrier_init"
    barriers: str
    index: Expr
    arrivals: int = Field(ge=1)


class MbarrierArrive(_Stmt):
    """``mbarrier.arrive.expect_tx.shared::cta.b64`` by each invocation that runs it: the bytes
    the current phase of mbarrier ``index`` of ``barriers`` waits for grow by ``tx_bytes`` (an
    i32, 0 or more), then the invocation arrives; the phase completes when all its arrivals
    are in and all its expected bytes have landed (``BulkTensorCopy``)."""

    kind: Literal["mbarrier_arrive"] = "mbarrier_arrive"
    barriers: str
    index: Expr
    tx_bytes: Expr


class MbarrierWait(_Stmt):
    """``mbarrier.try_wait.parity.shared::cta.b64``, retried until it succeeds: the invocation
    waits until the phase of mbarrier ``index`` of ``barriers`` whose parity is ``parity`` (an
    i32, 0 or 1) has completed, which the hardware tells by the current phase's parity being
    the other one; the bulk copies that completed that phase are then visible to the
    invocation."""

    kind: Literal["mbarrier_wait"] = "mbarrier_wait"
    barriers: str
    index: Expr
    parity: Expr


class BulkTensorCopy(_Stmt):
    """``cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes`` by each
    invocation that runs it, through a tensor map of the global array ``src`` viewed as a
    2-D tensor whose element ``(r, c)`` is ``src[origin + r * row_stride + c]`` for ``r <
    extent_rows`` and ``c < extent_cols``: the ``rows`` x ``cols`` box at (``row``, ``col``)
    lands in the shared array ``dst`` (of ``src``'s type) from element ``dst_offset``, its
    element ``(r, c)`` at ``dst_offset + r * cols + c``, with ``swizzle`` 128 at that index's
    byte address permuted by ``sarek.atoms.TMA_SWIZZLE[128]``; box elements outside the
    tensor land as zero (+0.0). ``origin``, ``row_stride`` and the extents are i32
    expressions of the kernel's scalar parameters and constants (the launch builds the tensor
    map from them); ``row``, ``col`` and ``dst_offset`` are i32. The copy's ``rows * cols``
    element bytes complete the current phase of mbarrier ``index`` of ``barriers``
    (``MbarrierArrive`` expects them); its elements may be read only by an invocation that
    has waited for that phase (``MbarrierWait``), and it must not overwrite elements another
    invocation read since the last ``Barrier``, nor ones a ``wgmma`` in flight reads."""

    kind: Literal["bulk_tensor_copy"] = "bulk_tensor_copy"
    dst: str
    dst_offset: Expr
    src: str
    origin: Expr
    row_stride: Expr
    extent_rows: Expr
    extent_cols: Expr
    row: Expr
    col: Expr
    rows: int = Field(ge=1, le=256)
    cols: int = Field(ge=1, le=256)
    swizzle: Literal[0, 128] = 0
    barriers: str
    index: Expr


class WarpRole(Node):
    """One role of a ``WarpRoles``: the ``count`` warpgroups from warpgroup ``first`` of the
    block (four consecutive warps each) run ``body``."""

    first: int = Field(ge=0)
    count: int = Field(ge=1)
    body: tuple[Stmt, ...]


class WarpRoles(_Stmt):
    """Splits the block's warpgroups into roles, each running its own body: every warpgroup
    of the block belongs to exactly one role, and the roles run concurrently, ordered only by
    mbarriers (a role waits for another's arrivals; ``Barrier`` is refused inside a role, a
    role's own barrier is a ``NamedBarrier``). Printed as one branch per role on the
    warpgroup's index; the invocations leave the statement when their role's body ends."""

    kind: Literal["warp_roles"] = "warp_roles"
    roles: tuple[WarpRole, ...]


class SetMaxNReg(_Stmt):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 registers``: the warpgroup's registers per
    thread rise (``increase``) or fall to ``registers`` (a multiple of 8 from 24 to 256),
    run by every invocation of a warpgroup together. It changes no value."""

    kind: Literal["set_max_nreg"] = "set_max_nreg"
    registers: int
    increase: bool


class NamedBarrier(_Stmt):
    """``bar.sync id, threads``: a barrier among the ``threads`` invocations of a role (its
    warpgroups' invocations, ``threads`` of them) on hardware barrier ``id`` (1 to 15; 0 is
    the block's ``Barrier``), with shared-memory ordering among them."""

    kind: Literal["named_barrier"] = "named_barrier"
    id: int = Field(ge=1, le=15)
    threads: int = Field(ge=32)


PlainStmt: TypeAlias = (Let | Assign | Store | StorePacked | For | While | If | Barrier | Return
                        | ArrayDecl)
"""Scalar code, control flow, memory and barriers: what every target prints."""
StagingStmt: TypeAlias = StageCopy | StageCommit | StageWait
"""Copies into shared memory in groups an invocation waits for: neutral; a target prints them
as its asynchronous copies or lowers them to plain copies."""
FragmentStmt: TypeAlias = FragDecl | FragFill | FragLoad | FragStore | FragMulAdd | FragAdd
"""The neutral fragment operations the rewrite emits: whole matrices per subgroup, their lane
layout left to the target (cooperative and simdgroup matrices take them as they are; CUDA and
the OpenCL emulation lower them to lane-explicit code)."""
TileStmt: TypeAlias = TensorView | TileApply
"""Tile patterns in the layout language (``sarek.tile``): ldmatrix/stmatrix moves before CUDA's
lowering writes them out lane by lane."""
WarpStmt: TypeAlias = Ldmatrix | Stmatrix | LaneTile | Mma | CpAsync
"""NVIDIA's per-lane warp instructions: what CUDA's lowering produces for ``mma.sync``."""
WarpgroupStmt: TypeAlias = Wgmma | WgmmaWait | AsyncProxyFence
"""NVIDIA's warpgroup instructions (sm_90a): what CUDA's lowering produces for ``wgmma``."""
RoleStmt: TypeAlias = WarpRoles | SetMaxNReg | NamedBarrier
"""Warp specialization (sm_90a): the block's warpgroups in roles that hand work to each other
through mbarriers, their registers reallocated; what CUDA's lowering produces for a
warp-specialized schedule."""
BulkStmt: TypeAlias = MbarrierInit | MbarrierArrive | MbarrierWait | BulkTensorCopy
"""NVIDIA's bulk tensor copies and the mbarriers that complete them (sm_90): what CUDA's
lowering produces for staged copies marked ``bulk``."""

Stmt: TypeAlias = Annotated[
    PlainStmt | StagingStmt | FragmentStmt | TileStmt | WarpStmt | WarpgroupStmt
    | BulkStmt | RoleStmt,
    Field(discriminator="kind"),
]

STATEMENT_FAMILIES: dict[str, tuple[type[_Stmt], ...]] = {
    "plain": get_args(PlainStmt), "staging": get_args(StagingStmt),
    "fragment": get_args(FragmentStmt), "tile": get_args(TileStmt),
    "warp": get_args(WarpStmt), "warpgroup": get_args(WarpgroupStmt),
    "bulk": get_args(BulkStmt), "roles": get_args(RoleStmt)}
"""Each statement family by name; every statement type is in exactly one."""
FAMILY_OF: dict[type[_Stmt], str] = {t: name for name, types in STATEMENT_FAMILIES.items()
                                     for t in types}
"""The family of each statement type."""


def family(s: _Stmt) -> str:
    """The name of the family statement ``s`` belongs to (``STATEMENT_FAMILIES``)."""
    return FAMILY_OF[type(s)]


class Kernel(Node):
    """A kernel: a name, parameters in call order, and a body run by every invocation.
    ``subgroup`` is the subgroup size the kernel is written for (a rewritten kernel's waves
    and fragments depend on it) and ``block`` the block shape, each None when any will do."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    subgroup: int | None = Field(default=None, gt=0)
    block: tuple[int, int, int] | None = None  # the block shape it is written for, if one

    def param(self, name: str) -> ArrayParam | ScalarParam:
        """The parameter called ``name``; ``KeyError`` when there is none."""
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


for _model in (For, While, If, Ldmatrix, Stmatrix, LaneTile, StageCopy, CpAsync, MbarrierInit,
               MbarrierArrive, MbarrierWait, BulkTensorCopy, WarpRole, WarpRoles, Kernel):
    _model.model_rebuild()


def schema() -> dict[str, object]:
    """The JSON schema of a serialized ``Kernel``."""
    return Kernel.model_json_schema()


__all__ = [
    "BITWISE", "COMPARISONS", "FAMILY_OF", "LOGICAL", "MATH_ARITY", "STATEMENT_FAMILIES",
    "ArrayDecl", "ArrayParam", "Assign", "Barrier", "BinOp", "Binary", "Bitcast", "Builtin",
    "BuiltinValue", "BulkStmt", "BulkTensorCopy", "Call", "Cast", "Const", "CopyPart", "CpAsync",
    "ElemType", "Expr", "For", "FragAdd", "FragDecl", "FragFill", "FragLayout", "FragLoad",
    "FragMulAdd", "FragShape", "FragStore", "FragUse", "FragmentStmt", "If", "Kernel", "LaneTile",
    "Ldmatrix", "Let", "Load", "MathFn", "MatrixDescriptor", "MbarrierArrive", "MbarrierInit",
    "MbarrierWait", "MemSpace", "Mma", "MmaAtom", "NamedBarrier", "Param", "PlainStmt",
    "ProvidedRows", "Return", "RoleStmt", "ScalarParam", "Select", "SetMaxNReg", "StageCommit",
    "StageCopy", "StageWait", "StagingStmt", "Stmatrix", "Stmt", "Store", "TensorView",
    "TileApply", "TileOp", "TileStmt", "UnOp", "Unary", "Var", "WarpRole", "WarpRoles", "WarpStmt",
    "WarpgroupStmt", "While", "family", "schema",
]
