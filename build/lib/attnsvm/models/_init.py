"""Initialization helpers shared by the models: per-trial draws stacked into a trials axis, and
a given initial value broadcast to it."""
from __future__ import annotations

import numpy as np
import torch

from .._checks import as_float_array


def _stack(arrs):
    return np.stack(arrs)


def _broadcast_init(name, value, B, shape, kw):
    a = as_float_array(f"init[{name!r}]" if name else "init", value)
    if a.shape == shape:
        a = np.broadcast_to(a, (B,) + shape)
    elif a.shape != (B,) + shape:
        raise ValueError(f"init for {name} must have shape {shape} or {(B,) + shape}, got {a.shape}")
    return torch.as_tensor(np.array(a, copy=True), **kw)
