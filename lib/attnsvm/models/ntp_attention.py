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
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import check_choice, check_positive
from ._init import _broadcast_init, _stack

__all__ = ["SelfAttentionNTP", "ntp_attention_objective"]


def ntp_attention_objective(W, X, Z, ypos, mask=None):
    r"""Log-loss of the next token and its gradient, per trial (log-sum-exp, no autograd).

    Parameters
    ----------
    W : Tensor (B, d, d)
    X : Tensor (B, n, T, d); Z : Tensor (B, n, d); ypos : LongTensor (B, n)
    mask : BoolTensor (B, n, T), optional
        Softmax over the masked tokens only (each row must contain ``ypos``).

    Returns
    -------
    loss : Tensor (B,); grad : Tensor (B, d, d); attn : Tensor (B, n, T) the softmax.
    """
    a = torch.einsum("bntd,bde,bne->bnt", X, W, Z)
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    logp = torch.log_softmax(a, dim=-1)
    n = X.shape[1]
    loss = -logp.gather(-1, ypos.unsqueeze(-1)).squeeze(-1).sum(-1) / n
    s = torch.exp(logp)
    r = s.scatter_add(-1, ypos.unsqueeze(-1), -torch.ones_like(s[..., :1]))
    grad = torch.einsum("bnt,bntd,bne->bde", r, X, Z) / n
    return loss, grad, s


class SelfAttentionNTP:
    r"""One self-attention layer trained by next-token prediction (log-loss), batched over trials.

    Parameters: ``W`` (B, d, d). Data batch (:meth:`batch`): ``X`` (B,n,T,d), ``Z`` (B,n,d),
    ``ypos`` (B,n) and optionally ``mask`` (B,n,T). See the module docstring for the loss.
    """

    param_names = ("W",)
    trainable = ("W",)

    def init_params(self, d, rngs, *, init="zeros", init_scale=0.01, dtype=torch.float64,
                    device="cpu"):
        """``W`` for ``len(rngs)`` trials: zeros, i.i.d. :math:`N(0, \\mathrm{init\\_scale}^2)`
        (trial ``b`` draws only from ``rngs[b]``) or a given array ((d,d) or (B,d,d))."""
        B = len(rngs)
        kw = dict(dtype=dtype, device=device)
        if isinstance(init, str):
            check_choice("init", init, ("zeros", "random"))
            if init == "zeros":
                return {"W": torch.zeros((B, d, d), **kw)}
            scale = check_positive("init_scale", init_scale)
            return {"W": torch.as_tensor(_stack([r.standard_normal((d, d)) * scale for r in rngs]),
                                         **kw)}
        return {"W": _broadcast_init("W", init, B, (d, d), kw)}

    @staticmethod
    def batch(data, *, mask=None, dtype=torch.float64, device="cpu"):
        """The tensors of a batched :class:`~attnsvm.data.NTPSeqData` (and an optional mask)."""
        from ..data import NTPSeqData
        if not isinstance(data, NTPSeqData) or not data.batched:
            raise ValueError("data must be a batched attnsvm.data.NTPSeqData")
        kw = dict(dtype=dtype, device=device)
        out = {"X": torch.as_tensor(data.X, **kw), "Z": torch.as_tensor(data.Z, **kw),
               "ypos": torch.as_tensor(data.ypos, device=device)}
        if mask is not None:
            m = np.asarray(mask)
            if m.dtype != bool or m.shape != data.tokens.shape:
                raise ValueError(f"mask must be boolean of shape {data.tokens.shape}")
            if not np.all(np.take_along_axis(m, data.ypos[..., None], -1)):
                raise ValueError("mask must contain the next token of every sequence")
            out["mask"] = torch.as_tensor(m, device=device)
        return out

    def objective(self, params, batch):
        """``(loss (B,), {"W": grad}, None)``."""
        loss, grad, _ = ntp_attention_objective(params["W"], batch["X"], batch["Z"],
                                                batch["ypos"], batch.get("mask"))
        return loss, {"W": grad}, None

    def attention(self, params, batch):
        """The attention weights :math:`\\mathrm{softmax}(a_i)`, (B, n, T)."""
        return ntp_attention_objective(params["W"], batch["X"], batch["Z"], batch["ypos"],
                                       batch.get("mask"))[2]
