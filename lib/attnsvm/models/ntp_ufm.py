r"""The next-token-prediction unconstrained-features model (Chapter 15) on the objective
interface.

Context embeddings :math:`H \in \R^{m\times d}` (rows :math:`h_j`) and word embeddings
:math:`W \in \R^{V\times d}` are both trained; the logits are :math:`L = HW^\top` (m, V) and the
objective is the cross-entropy with the soft labels :math:`p_j` and frequencies :math:`\pi_j`,

.. math::

    \mathcal L(W, H) = -\sum_j \pi_j \sum_z p_{jz}\log\mathrm{softmax}(L_j)_z, \qquad
    \nabla_W = R^\top H,\quad \nabla_H = R\,W,\quad R_{jz} = \pi_j(\mathrm{softmax}(L_j)_z - p_{jz}),

with log-sum-exp softmax; its infimum is the entropy
:math:`L^\star = -\sum_j\pi_j\sum_z p_{jz}\log p_{jz}`. The logit geometry of its iterates is
read with :mod:`attnsvm.svm` (``logit_project_F``, ``logit_finite``, ``logit_svm``) and
:func:`attnsvm.metrics.collapse_ratio`.
"""
from __future__ import annotations

import numpy as np
import torch

from .._checks import as_float_array, check_int
from ..data import NTPData
from .objective import ObjectiveModel

__all__ = ["NTPUFM"]


class NTPUFM(ObjectiveModel):
    r"""NTP unconstrained-features model with embedding dimension ``d`` (see the module).

    ``data`` for :meth:`batch` is a dict with ``"P"`` (B, m, V) and ``"pi"`` (B, m) (or one data
    set without the trials axis), or an :class:`attnsvm.data.NTPData` (its ``P`` and ``pi``; its
    fixed embeddings are not used). The default initialization is random, scale 0.01 (a
    zero initialization is a saddle point).
    """

    trainable = ("W", "H")
    default_init = "random"

    def __init__(self, d):
        self.d = check_int("d", d, minimum=1)

    def batch(self, data, *, dtype=torch.float64, device="cpu"):
        if isinstance(data, NTPData):
            P, pi = data.P, data.pi
        elif isinstance(data, dict) and "P" in data and "pi" in data:
            P, pi = data["P"], data["pi"]
        else:
            raise ValueError("data must be an NTPData or a dict with 'P' and 'pi' for NTPUFM, "
                             f"got {type(data).__name__}")
        P = as_float_array("P", P, min_ndim=2, max_ndim=3)
        pi = as_float_array("pi", pi, shape=P.shape[:-1])
        if np.any(P < 0) or not np.allclose(P.sum(-1), 1.0, atol=1e-10):
            raise ValueError("P must hold probability vectors (nonnegative rows summing to 1)")
        if np.any(pi <= 0) or not np.allclose(pi.sum(-1), 1.0, atol=1e-10):
            raise ValueError("pi must be positive and sum to 1")
        if P.ndim == 2:
            P, pi = P[None], pi[None]
        kw = dict(dtype=dtype, device=device)
        return {"P": torch.as_tensor(P, **kw), "pi": torch.as_tensor(pi, **kw)}

    def param_shapes(self, batch):
        _, m, V = batch["P"].shape
        return {"W": (V, self.d), "H": (m, self.d)}

    def objective(self, params, batch):
        W, H = params["W"], params["H"]
        P, pi = batch["P"], batch["pi"]
        lq = torch.log_softmax(torch.einsum("bmd,bvd->bmv", H, W), dim=-1)
        loss = -(pi * torch.where(P > 0, P * lq, 0.0).sum(-1)).sum(-1)
        R = pi.unsqueeze(-1) * (torch.exp(lq) - P)                       # (B, m, V)
        return loss, {"W": torch.einsum("bmv,bmd->bvd", R, H),
                      "H": torch.einsum("bmv,bvd->bmd", R, W)}, None

    def L_star(self, batch):
        P, pi = batch["P"], batch["pi"]
        t = torch.where(P > 0, P * torch.log(torch.where(P > 0, P, 1.0)), 0.0)
        return -(pi * t.sum(-1)).sum(-1)

    def sharpness(self, W, H, data, *, iters=100):
        r"""The sharpness :math:`\lambda_{\max}(\nabla^2\mathcal L(W, H))` of every trial, by power
        iteration on Hessian-vector products (``torch.func``, float64, a seeded start), shape
        (..., B).

        GD with step :math:`\eta` decreases :math:`\mathcal L` at a step along which the loss is
        :math:`\lambda`-smooth with :math:`\eta\lambda < 2` (the descent lemma); the sharpness at
        the iterate is the local :math:`\lambda`. Power iteration finds the eigenvalue of largest
        modulus; at the UFM's late iterates it is the largest one (the tests compare it with the
        full Hessian).

        Parameters
        ----------
        W, H : array_like (..., B, V, d), (..., B, m, d)
        data : as for :meth:`batch` (B trials)
        iters : int, power iterations
        """
        b = self.batch(data)
        W = torch.as_tensor(np.asarray(W, dtype=float))
        H = torch.as_tensor(np.asarray(H, dtype=float))
        lead = W.shape[:-3]
        W, H = W.reshape(-1, *W.shape[-3:]), H.reshape(-1, *H.shape[-3:])
        P = b["P"].expand(W.shape[0], *b["P"].shape).reshape(-1, *b["P"].shape[1:])
        pi = b["pi"].expand(W.shape[0], *b["pi"].shape).reshape(-1, *b["pi"].shape[1:])
        W, H = W.reshape(-1, *W.shape[-2:]), H.reshape(-1, *H.shape[-2:])

        def total(W, H):
            lq = torch.log_softmax(torch.einsum("bmd,bvd->bmv", H, W), dim=-1)
            return -(pi * torch.where(P > 0, P * lq, 0.0).sum(-1)).sum()

        grad = torch.func.grad(total, argnums=(0, 1))
        gen = torch.Generator().manual_seed(0)
        v = (torch.randn(W.shape, generator=gen, dtype=W.dtype),
             torch.randn(H.shape, generator=gen, dtype=H.dtype))
        lam = torch.zeros(W.shape[0], dtype=W.dtype)
        for _ in range(check_int("iters", iters, minimum=1)):
            n = torch.sqrt((v[0] ** 2).sum((1, 2)) + (v[1] ** 2).sum((1, 2)))[:, None, None]
            v = (v[0] / n, v[1] / n)
            hv = torch.func.jvp(grad, (W, H), v)[1]
            lam = (hv[0] * v[0]).sum((1, 2)) + (hv[1] * v[1]).sum((1, 2))
            v = hv
        return lam.numpy().reshape(*lead, -1)
