"""Data models: seeded, float64 instances of the attention model and of linear classification.

Shapes follow the book's notation (see the notation page):

* ``X`` : (n, T, d) tokens, row ``X[i, t]`` is :math:`x_{it}`;
* ``y`` : (n,) labels in :math:`\\{\\pm 1\\}`;
* ``Z`` : (n, d) queries :math:`z_i` (self-attention: :math:`z_i = x_{i1}`);
* ``v`` : (d,) the linear head.

Every array may carry an optional leading trials axis ``B`` for batched experiments.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_float_array

__all__ = ["AttnData", "LinearData"]


@dataclass(frozen=True)
class AttnData:
    """One instance (or a batch of ``B`` instances) of the attention classification problem.

    Attributes
    ----------
    X : ndarray, shape (n, T, d) or (B, n, T, d)
    y : ndarray, shape (n,) or (B, n), entries +1 or -1
    Z : ndarray, shape (n, d) or (B, n, d)
    v : ndarray, shape (d,) or (B, d)
    """

    X: np.ndarray
    y: np.ndarray
    Z: np.ndarray
    v: np.ndarray

    def __post_init__(self):
        X = as_float_array("X", self.X, min_ndim=3, max_ndim=4)
        batched = X.ndim == 4
        lead = X.shape[:1] if batched else ()
        n, T, d = X.shape[-3:]
        if n == 0:
            raise ValueError("X must hold at least one sequence (n >= 1), got n = 0")
        if T < 2:
            raise ValueError(f"X must have at least T = 2 tokens per sequence, got T = {T}")
        y = as_float_array("y", self.y, shape=lead + (n,))
        if not np.all(np.abs(y) == 1):
            raise ValueError("y must contain only +1 and -1")
        Z = as_float_array("Z", self.Z, shape=lead + (n, d))
        v = as_float_array("v", self.v, shape=lead + (d,))
        for name, val in (("X", X), ("y", y), ("Z", Z), ("v", v)):
            object.__setattr__(self, name, val)

    @property
    def batched(self) -> bool:
        """Whether the arrays carry a leading trials axis."""
        return self.X.ndim == 4

    @property
    def trials(self) -> int:
        """Number of trials ``B`` (1 when not batched)."""
        return self.X.shape[0] if self.batched else 1

    @property
    def n(self) -> int:
        return self.X.shape[-3]

    @property
    def T(self) -> int:
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        return self.X.shape[-1]

    def trial(self, b: int) -> "AttnData":
        """The ``b``-th trial as an unbatched instance."""
        if not self.batched:
            raise ValueError("trial(b) needs batched data (a leading trials axis)")
        if not 0 <= b < self.trials:
            raise ValueError(f"b must be in [0, {self.trials}), got {b}")
        return AttnData(self.X[b], self.y[b], self.Z[b], self.v[b])

    @classmethod
    def stack(cls, items) -> "AttnData":
        """Stack unbatched instances of equal shape along a new leading trials axis."""
        items = list(items)
        if not items:
            raise ValueError("items must contain at least one AttnData")
        if any(it.batched for it in items):
            raise ValueError("items must be unbatched AttnData instances")
        return cls(*(np.stack([getattr(it, f) for it in items]) for f in ("X", "y", "Z", "v")))


@dataclass(frozen=True)
class LinearData:
    """Linear binary classification data: features ``X`` (n, d) and labels ``y`` (n,).

    Optionally batched with a leading trials axis: ``X`` (B, n, d), ``y`` (B, n).
    """

    X: np.ndarray
    y: np.ndarray

    def __post_init__(self):
        X = as_float_array("X", self.X, min_ndim=2, max_ndim=3)
        if X.shape[-2] == 0:
            raise ValueError("X must hold at least one sample (n >= 1), got n = 0")
        y = as_float_array("y", self.y, shape=X.shape[:-1])
        if not np.all(np.abs(y) == 1):
            raise ValueError("y must contain only +1 and -1")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)

    @property
    def batched(self) -> bool:
        return self.X.ndim == 3

    @property
    def trials(self) -> int:
        return self.X.shape[0] if self.batched else 1

    @property
    def n(self) -> int:
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        return self.X.shape[-1]

    def trial(self, b: int) -> "LinearData":
        if not self.batched:
            raise ValueError("trial(b) needs batched data (a leading trials axis)")
        if not 0 <= b < self.trials:
            raise ValueError(f"b must be in [0, {self.trials}), got {b}")
        return LinearData(self.X[b], self.y[b])
