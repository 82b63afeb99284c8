r"""The linear next-token-prediction model (Chapter 15) on the objective interface.

Contexts :math:`h_j` (rows of ``H``, (B,m,d)), frequencies :math:`\pi_j` and next-token
distributions :math:`p_j` (rows of ``P``, (B,m,V)) of :class:`attnsvm.data.NTPData`; the decoder
:math:`W \in \R^{V\times d}` gives logits :math:`W h_j` over the vocabulary and the objective is
the cross-entropy with the soft labels :math:`p_j`,

.. math::

    \mathrm{CE}(W) = -\sum_j \pi_j \sum_z p_{jz}\log\mathrm{softmax}(W h_j)_z, \qquad
    \nabla\mathrm{CE}(W) = \sum_j \pi_j (\mathrm{softmax}(W h_j) - p_j)\, h_j^\top,

with log-sum-exp softmax; its infimum is the entropy
:math:`L^\star = H = -\sum_j\pi_j\sum_z p_{jz}\log p_{jz}` (:func:`attnsvm.losses.entropy`).
"""
from __future__ import annotations

import torch

from ..data import NTPData
from .objective import ObjectiveModel

__all__ = ["NTPLinear"]


class NTPLinear(ObjectiveModel):
    r"""Linear NTP decoder :math:`W` (B,V,d) trained on the cross-entropy (see the module)."""

    trainable = ("W",)

    def batch(self, data, *, dtype=torch.float64, device="cpu"):
        """``H`` (B,m,d), ``P`` (B,m,V), ``pi`` (B,m) and ``piP`` :math:`= \\pi_j p_j` (B,m,V)."""
        if not isinstance(data, NTPData):
            raise ValueError(f"data must be attnsvm.data.NTPData for NTPLinear, got {type(data).__name__}")
        lead = (lambda a: a) if data.batched else (lambda a: a[None])
        kw = dict(dtype=dtype, device=device)
        out = {"H": torch.as_tensor(lead(data.H), **kw), "P": torch.as_tensor(lead(data.P), **kw),
               "pi": torch.as_tensor(lead(data.pi), **kw)}
        out["piP"] = out["pi"].unsqueeze(-1) * out["P"]
        return out

    def param_shapes(self, batch):
        return {"W": (batch["P"].shape[-1], batch["H"].shape[-1])}

    def log_probs(self, params, batch):
        r""":math:`\log\mathrm{softmax}(W h_j)` (B,m,V)."""
        return torch.log_softmax(batch["H"] @ params["W"].transpose(-1, -2), dim=-1)

    def objective(self, params, batch):
        lq = self.log_probs(params, batch)            # finite: p_jz log q_jz = 0 where p_jz = 0
        piP = batch["piP"]
        ce = -(piP * lq).sum((-2, -1))
        R = batch["pi"].unsqueeze(-1) * torch.exp(lq) - piP        # pi_j (q_j - p_j), (B,m,V)
        return ce, {"W": R.transpose(-1, -2) @ batch["H"]}, None

    def L_star(self, batch):
        P, pi = batch["P"], batch["pi"]
        t = torch.where(P > 0, P * torch.log(torch.where(P > 0, P, 1.0)), 0.0)
        return -(pi * t.sum(-1)).sum(-1)
