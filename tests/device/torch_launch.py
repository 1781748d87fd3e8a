"""Launching a kernel through the launch path on torch tensors, as a user of PyTorch would."""

from __future__ import annotations

from typing import Any

import numpy as np

from sarek.launch import Launch


def launched_twice(run: Any, launch: Launch) -> list[Any]:
    """``launch``'s arguments as CUDA tensors (scalars as they are), after ``run`` (a
    ``kernel.with_options(...)``) launched on them twice over ``launch``'s grid and block (the
    second launch reuses what the first allocated, such as a pre-pass's temporaries) and
    the device synchronized."""
    import torch

    args = [torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v
            for v in launch.args.values()]
    for _ in range(2):
        run[launch.grid, launch.block](*args)
    torch.cuda.synchronize()
    return args
