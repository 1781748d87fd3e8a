"""Tile layouts: the notation, evaluation, rearrange, dtype views and composition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarek.layout import Axis, LayoutError, S, Stride, TileLayout, laneid, warpid


def test_notation_builds_shape_and_strides() -> None:
    layout = TileLayout(S[(16, 4, 2) : (8, 1, 128)])
    assert layout.shape == (16, 4, 2)
    assert layout.stride == (Stride(value=8), Stride(value=1), Stride(value=128))


def test_hardware_axes_are_written_with_at() -> None:
    layout = TileLayout(S[(2, 2, 8, 4) : (8, 2, 4 @ laneid, 1 @ laneid)])
    assert layout.stride[2] == Stride(value=4, axis=Axis.LANEID)
    assert layout.axes == {Axis.MEM, Axis.LANEID}
    assert repr(layout) == "S[(2, 2, 8, 4) : (8, 2, 4@laneid, 1@laneid)]"
    assert (3 @ warpid).axis is Axis.WARPID


def test_evaluation_gives_one_offset_per_axis() -> None:
    layout = TileLayout(S[(2, 2, 8, 4) : (8, 2, 4 @ laneid, 1 @ laneid)])
    assert layout(1, 1, 5, 3) == 10
    assert layout(1, 1, 5, 3, axis=Axis.LANEID) == 23


def test_offsets_match_pointwise_evaluation() -> None:
    layout = TileLayout(S[(3, 4, 2) : (1, 6, 3)])
    table = layout.offsets()
    for c in np.ndindex(*layout.shape):
        assert table[c] == sum(i * s for i, s in zip(c, (1, 6, 3), strict=True))


def test_rearrange_splits_and_permutes_like_the_seed() -> None:
    shared = TileLayout(S[(16, 4, 2) : (8, 1, 128)])
    view = shared.rearrange("(r m) w k -> k m r w", r=8, m=2)
    assert view == TileLayout(S[(2, 2, 8, 4) : (128, 8, 16, 1)])
    # view[k, m, r, w] is shared[2r + m, w, k]
    for k, m, r, w in np.ndindex(2, 2, 8, 4):
        assert view(k, m, r, w) == shared(2 * r + m, w, k)


def test_rearrange_merges_contiguous_modes() -> None:
    assert TileLayout(S[(8, 4) : (4, 1)]).rearrange("r w -> (r w)") == TileLayout(S[(32,) : (1,)])


def test_rearrange_refuses_non_contiguous_merge() -> None:
    with pytest.raises(LayoutError, match="not contiguous"):
        TileLayout(S[(8, 4) : (16, 1)]).rearrange("r w -> (r w)")


def test_rearrange_infers_one_missing_size() -> None:
    assert TileLayout(S[(16,) : (1,)]).rearrange("(a b) -> b a", b=4) == TileLayout(
        S[(4, 4) : (1, 4)])


@pytest.mark.parametrize(("pattern", "sizes", "reason"), [
    ("a b c", {}, "needs '->'"),
    ("a -> a", {}, "names 1 modes, the layout has 2"),
    ("(a b) c -> a b c", {}, "give the sizes"),
    ("(a b) c -> a b c", {"a": 3}, "does not split"),
    ("a c -> a", {}, "every name of its left side once"),
])
def test_rearrange_errors_name_the_problem(pattern: str, sizes: dict[str, int],
                                           reason: str) -> None:
    with pytest.raises(LayoutError, match=reason):
        TileLayout(S[(8, 4) : (4, 1)]).rearrange(pattern, **sizes)


def test_dtype_view_packs_halves_into_words() -> None:
    halves = TileLayout(S[(8, 8) : (16, 1)])
    words = halves.recast(16, 32)
    assert words == TileLayout(S[(8, 4) : (8, 1)])
    # word (r, w) starts where half (r, 2w) is
    for r, w in np.ndindex(8, 4):
        assert 2 * words(r, w) == halves(r, 2 * w)


def test_dtype_view_splits_words_into_halves() -> None:
    assert TileLayout(S[(8, 4) : (4, 1)]).recast(32, 16) == TileLayout(S[(8, 4, 2) : (8, 2, 1)])


def test_dtype_view_needs_an_even_unit_mode() -> None:
    with pytest.raises(LayoutError, match="no unit-stride mode"):
        TileLayout(S[(8, 3) : (3, 1)]).recast(16, 32)


def test_composition_applies_the_inner_layout_first() -> None:
    outer = TileLayout(S[(4, 4) : (4, 1)])  # row-major 4x4
    inner = TileLayout(S[(4, 4) : (1, 4)])  # transposed coordinates
    composed = outer.compose(inner)
    for i, j in np.ndindex(4, 4):
        assert composed(i, j) == outer(*np.unravel_index(inner(i, j), outer.shape))


def test_composition_that_is_not_affine_is_refused() -> None:
    with pytest.raises(LayoutError, match="not affine"):
        TileLayout(S[(3, 5) : (1, 3)]).compose(TileLayout(S[(4,) : (4,)]))


def test_mismatched_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="one stride per mode"):
        TileLayout(shape=(2, 2), stride=(1,))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 9)), min_size=1, max_size=4),
       st.randoms(use_true_random=False))
def test_rearrange_permutation_preserves_every_offset(modes, rnd) -> None:
    layout = TileLayout(shape=tuple(n for n, _ in modes), stride=tuple(s for _, s in modes))
    names = [f"m{i}" for i in range(len(modes))]
    order = list(range(len(modes)))
    rnd.shuffle(order)
    out = layout.rearrange(f"{' '.join(names)} -> {' '.join(names[i] for i in order)}")
    assert np.array_equal(out.offsets(), np.transpose(layout.offsets(), order))
