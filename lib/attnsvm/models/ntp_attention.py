r"""Next-token prediction with one self-attention layer (Chapter 16), on the engine's interface.

A sequence of distinct vocabulary tokens with embeddings :math:`x_{i1}, \dots, x_{iT}` (rows of
:math:`X_i`) ends with its query :math:`z_i = x_{iT}`. The layer attends with scores
:math:`a_{it} = x_{it}^\top W z_i` and outputs :math:`X_i^\top\mathrm{softmax}(a_i)`; read with the
identity head on the vocabulary (orthonormal embeddings), this output is the distribution that
puts on each token of the sequence its attention weight. The loss is the log-loss of the next
token :math:`y_i` (at position :math:`\tau_i`),

.. math::

    L(W) = \frac1n\sum_i -\log\mathrm{softmax}(a_i)_{\tau_i}
         = \frac1n\sum_i \Big(\log\sum_t e^{a_{it}} - a_{i\tau_i}\Big),

convex in :math:`W` (a log-sum-exp of linear functions minus a linear function), with gradient

.. math::

    \nabla L(W) = \frac1n\sum_i X_i^\top\big(\mathrm{softmax}(a_i) - e_{\tau_i}\big)\, z_i^\top .

An optional mask restricts the softmax to a subset :math:`O_i` of each sequence (the loss
:math:`L_O` whose minimizer on :math:`F` is the finite part, :func:`attnsvm.svm.graph_finite`).
The loss and its gradient are :func:`attnsvm.losses.ntp_attention_objective`.
"""
from __future__ import annotations

import numpy as np
import torch

from ..data import NTPSeqData
from ..losses import ntp_attention_objective
from .objective import ObjectiveModel

__all__ = ["SelfAttentionNTP"]


class SelfAttentionNTP(ObjectiveModel):
    r"""One self-attention layer trained by next-token prediction (log-loss), batched over trials,
    on the objective interface of :func:`attnsvm.train.fit` (:class:`ObjectiveModel`).

    Parameters
    ----------
    mask : array of bool (n, T) or (B, n, T), optional
        Restrict the softmax of sequence :math:`i` to the tokens ``mask[i]`` (each must contain
        the next token): the loss :math:`L_O` of Chapter 16.
    floor : array (B,), optional
        The infimum of the objective (e.g. :math:`L_O(W^*)`); when given, the model has
        ``L_star`` and :func:`attnsvm.train.fit` records the excess loss.

    Notes
    -----
    Parameters: ``W`` (B, d, d). Data: :class:`~attnsvm.data.NTPSeqData` (batched or one
    trial); the batch holds ``X`` (B,n,T,d), ``Z`` (B,n,d), ``ypos`` (B,n) and optionally
    ``mask`` (B,n,T). See the module docstring for the loss and its gradient.
    """

    trainable = ("W",)

    def __init__(self, mask=None, floor=None):
        self.mask = None if mask is None else np.asarray(mask)
        if self.mask is not None and self.mask.dtype != bool:
            raise ValueError(f"mask must be a boolean array, got dtype {self.mask.dtype}")
        if floor is not None:
            f = np.atleast_1d(np.asarray(floor, dtype=float))
            if f.ndim != 1 or not np.all(np.isfinite(f)):
                raise ValueError("floor must be a finite array of shape (B,)")
            self.floor = f
            self.L_star = self._L_star

    def batch(self, data, *, dtype=torch.float64, device="cpu"):
        """The tensors of :class:`~attnsvm.data.NTPSeqData` (a trials axis is added if absent)."""
        if not isinstance(data, NTPSeqData):
            raise ValueError(f"data must be attnsvm.data.NTPSeqData for SelfAttentionNTP, got "
                             f"{type(data).__name__}")
        lead = (lambda a: a) if data.batched else (lambda a: a[None])
        kw = dict(dtype=dtype, device=device)
        ypos = lead(data.ypos)
        out = {"X": torch.as_tensor(lead(data.X), **kw), "Z": torch.as_tensor(lead(data.Z), **kw),
               "ypos": torch.as_tensor(ypos, device=device)}
        if self.mask is not None:
            m = self.mask if self.mask.ndim == 3 else self.mask[None]
            if m.shape != ypos.shape + (data.T,):
                raise ValueError(f"mask must have shape {ypos.shape + (data.T,)}, got {m.shape}")
            if not np.all(np.take_along_axis(m, ypos[..., None], -1)):
                raise ValueError("mask must contain the next token of every sequence")
            out["mask"] = torch.as_tensor(m, device=device)
        return out

    def param_shapes(self, batch):
        d = batch["X"].shape[-1]
        return {"W": (d, d)}

    def objective(self, params, batch):
        """``(loss (B,), {"W": grad}, None)``."""
        loss, grad, _ = ntp_attention_objective(params["W"], batch["X"], batch["Z"],
                                                batch["ypos"], batch.get("mask"))
        return loss, {"W": grad}, None

    def attention(self, params, batch):
        """The attention weights :math:`\\mathrm{softmax}(a_i)`, (B, n, T)."""
        return ntp_attention_objective(params["W"], batch["X"], batch["Z"], batch["ypos"],
                                       batch.get("mask"))[2]

    def _L_star(self, batch):
        X = batch["X"]
        if len(self.floor) != X.shape[0]:
            raise ValueError(f"floor has {len(self.floor)} entries for {X.shape[0]} trials")
        return torch.as_tensor(self.floor, dtype=X.dtype, device=X.device)
