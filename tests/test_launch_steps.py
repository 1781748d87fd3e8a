"""A sequence of launches over one set of arrays (``sarek.launch.Steps``): each launch takes
the arrays as the launches before it left them, temporaries are allocated for the sequence and
not returned, and a parameter nothing gives is named."""

from __future__ import annotations

import numpy as np
import pytest

import sarek
from sarek import Global, block_dim, block_idx, f32, i32, thread_idx
from sarek.errors import LaunchError
from sarek.ir import ElemType
from sarek.launch import Launch, Scratch, Steps


@sarek.kernel
def scale(x: Global[f32], y: Global[f32], s: f32, n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        y[i] = s * x[i]


@sarek.kernel
def scale_on(y: Global[f32], z: Global[f32], s: f32, n: i32):
    i = block_idx.x * block_dim.x + thread_idx.x
    if i < n:
        z[i] = s * y[i] + z[i]


def test_each_launch_reads_what_the_launches_before_it_wrote() -> None:
    x, z = np.arange(8, dtype=np.float32), np.ones(8, np.float32)
    steps = Steps((Launch(scale, {"x": x, "s": 2.0, "n": 8}, 1, 8),
                   Launch(scale_on, {"z": z, "s": 3.0, "n": 8}, 1, 8)),
                  (Scratch("y", ElemType.F32, 8),))
    out = steps.simulate()
    assert sorted(out) == ["x", "z"]  # the temporary y is not returned
    assert np.array_equal(out["z"], 6 * x + 1) and np.array_equal(out["x"], x)
    assert np.array_equal(z, np.ones(8, np.float32))  # the caller's array is a copy's source


def test_with_args_reaches_every_launch() -> None:
    x = np.arange(4, dtype=np.float32)
    steps = Steps((Launch(scale, {"s": 2.0, "n": 4}, 1, 4),
                   Launch(scale_on, {"s": 1.0, "n": 4}, 1, 4)), (Scratch("y", ElemType.F32, 4),))
    out = steps.with_args({"x": x, "z": np.zeros(4, np.float32)}).simulate()
    assert np.array_equal(out["z"], 2 * x)


def test_a_parameter_no_launch_gives_is_named() -> None:
    steps = Steps((Launch(scale, {"x": np.zeros(4, np.float32), "s": 1.0, "n": 4}, 1, 4),))
    with pytest.raises(LaunchError, match="no argument for 'y'"):
        steps.simulate()
