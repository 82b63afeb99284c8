r"""The linear classifier :math:`f(x) = w^\top x` (Chapter 1), on the engine's interface."""
from __future__ import annotations

import torch

from .._checks import check_choice
from ..losses import grad_coefficients
from ._init import _broadcast_init, _stack

__all__ = ["LinearClassifier"]


class LinearClassifier:
    r"""The linear classifier :math:`f(x) = w^\top x` on :class:`~attnsvm.data.LinearData`.

    Margins :math:`u_i = y_i w^\top x_i`; :math:`\nabla_w \sum_i c_i u_i = \sum_i c_i y_i x_i`.
    Parameters: ``w`` (B,d). Data batch: ``X`` (B,n,d), ``y`` (B,n).
    """

    param = "linear"
    param_names = ("w",)
    trainable = ("w",)
    autograd = False
    train_v = False
    head = None

    def init_params(self, d, v, rngs, *, init="zeros", init_scale=None, dtype=torch.float64,
                    device="cpu"):
        B = len(rngs)
        kw = dict(dtype=dtype, device=device)
        scale = 0.01 if init_scale is None else init_scale
        if isinstance(init, dict):
            bad = set(init) - {"w"}
            if bad:
                raise ValueError(f"init has unknown parameter names {sorted(bad)}; expected ['w']")
            return {"w": _broadcast_init("w", init["w"], B, (d,), kw)}
        if isinstance(init, str):
            check_choice("init", init, ("zeros", "random"))
            if init == "zeros":
                return {"w": torch.zeros((B, d), **kw)}
            return {"w": torch.as_tensor(_stack([r.standard_normal(d) * scale for r in rngs]), **kw)}
        return {"w": _broadcast_init("w", init, B, (d,), kw)}

    def matrix(self, params):
        return params["w"]

    def forward(self, params, batch):
        u = batch["y"] * (batch["X"] * params["w"].unsqueeze(-2)).sum(-1)
        return u, {}

    def grad(self, params, batch, loss):
        """Margins and log-scaled gradient ``(u, {"w": g}, {"w": sigma})`` (see
        :meth:`AttentionClassifier.grad`)."""
        u, _ = self.forward(params, batch)
        coef, sig = grad_coefficients(loss, u)
        g = ((coef * batch["y"]).unsqueeze(-1) * batch["X"]).sum(-2)
        return u, {"w": g}, {"w": sig}
