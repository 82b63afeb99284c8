r"""Margin losses :math:`\ell(u)` of the book, with stable log-space companions.

Losses and log-space coefficients
---------------------------------
A loss :math:`\ell` (logistic :math:`\log(1+e^{-u})`, exponential :math:`e^{-u}`,
correlation :math:`-u`) provides :math:`\ell(u)`, :math:`\log \ell(u)` and
:math:`\log|\ell'(u)|` computed stably for any finite :math:`u`, so the engine can write
:math:`\nabla L = e^{\sigma} \tilde g` with a per-trial log-scale :math:`\sigma` and a
well-scaled :math:`\tilde g`, and step rules never see an underflowed loss or gradient.

The same objects evaluate :math:`\ell` and :math:`-\ell'` on numpy arrays
(:meth:`Loss.value_np`, :meth:`Loss.neg_deriv_np`) for the experiments' closed forms, and
:func:`loss_floor` is the loss floor :math:`\frac1n\sum_i \ell(\gamma_{i\alpha_i})`.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._checks import check_choice

__all__ = ["Loss", "LOSSES", "get_loss", "grad_coefficients", "log_mean_loss", "loss_floor"]


class Loss:
    r"""A decreasing margin loss :math:`\ell(u)` with stable log-space companions.

    Methods take a tensor of margins ``u`` and work elementwise.
    """

    name = "loss"
    nonnegative = True

    def value(self, u):
        """:math:`\\ell(u)`."""
        raise NotImplementedError

    def log_value(self, u):
        """:math:`\\log \\ell(u)`, finite for every finite ``u`` (only for nonnegative losses)."""
        raise NotImplementedError

    def log_neg_deriv(self, u):
        """:math:`\\log(-\\ell'(u))`, finite for every finite ``u``."""
        raise NotImplementedError

    def value_np(self, u):
        """:math:`\\ell(u)` of a numpy array, stable for every finite ``u``."""
        raise NotImplementedError

    def neg_deriv_np(self, u):
        """:math:`-\\ell'(u)` of a numpy array, stable (no overflow, no cancellation)."""
        raise NotImplementedError

    def __repr__(self):
        return f"Loss({self.name!r})"


class _Logistic(Loss):
    r""":math:`\ell(u) = \log(1 + e^{-u})`, :math:`-\ell'(u) = \sigma(-u)`,
    :math:`\log(-\ell'(u)) = -\mathrm{softplus}(u)`; for :math:`u > 30`,
    :math:`\log \ell(u) = -u + \log(\log(1+w)/w) \approx -u - w/2` with :math:`w = e^{-u}`."""

    name = "logistic"

    def value(self, u):
        return torch.nn.functional.softplus(-u)

    def log_value(self, u):
        big = u > 30.0
        small_branch = torch.log(torch.nn.functional.softplus(-u.clamp(max=30.0)))
        big_branch = -u - 0.5 * torch.exp(-u.clamp(min=30.0))
        return torch.where(big, big_branch, small_branch)

    def log_neg_deriv(self, u):
        return -torch.nn.functional.softplus(u)

    def value_np(self, u):
        return np.logaddexp(0.0, -np.asarray(u, dtype=float))

    def neg_deriv_np(self, u):
        return np.exp(-np.logaddexp(0.0, np.asarray(u, dtype=float)))


class _Exponential(Loss):
    r""":math:`\ell(u) = e^{-u}`, :math:`\log \ell = \log(-\ell') = -u`."""

    name = "exponential"

    def value(self, u):
        return torch.exp(-u)

    def log_value(self, u):
        return -u

    def log_neg_deriv(self, u):
        return -u

    def value_np(self, u):
        return np.exp(-np.asarray(u, dtype=float))

    def neg_deriv_np(self, u):
        return np.exp(-np.asarray(u, dtype=float))


class _Correlation(Loss):
    r""":math:`\ell(u) = -u`, :math:`-\ell' = 1`. Unbounded below, so it has no log value."""

    name = "correlation"
    nonnegative = False

    def value(self, u):
        return -u

    def log_value(self, u):
        raise ValueError("loss='correlation' can be negative: it has no log value "
                         "(the Polyak step needs a nonnegative loss)")

    def log_neg_deriv(self, u):
        return torch.zeros_like(u)

    def value_np(self, u):
        return -np.asarray(u, dtype=float)

    def neg_deriv_np(self, u):
        return np.ones_like(np.asarray(u, dtype=float))


LOSSES = {"logistic": _Logistic(), "exponential": _Exponential(), "correlation": _Correlation()}


def get_loss(loss):
    """Return the :class:`Loss` named ``loss`` (or ``loss`` itself if it is a :class:`Loss`)."""
    if isinstance(loss, Loss):
        return loss
    return LOSSES[check_choice("loss", loss, LOSSES)]


def grad_coefficients(loss, u):
    r"""Per-sample coefficients of the loss gradient in log-scaled form.

    With :math:`L = \frac1n \sum_i \ell(u_i)`, :math:`\nabla L = \sum_i \frac{\ell'(u_i)}{n}
    \nabla u_i = e^{\sigma} \sum_i c_i \nabla u_i`, where
    :math:`\sigma = \max_i \log(-\ell'(u_i)/n)` per trial and
    :math:`c_i = -\exp(\log(-\ell'(u_i)/n) - \sigma) \in [-1, 0)`.

    Parameters
    ----------
    loss : Loss
    u : Tensor, shape (B, n)
        Margins.

    Returns
    -------
    coef : Tensor, shape (B, n)
    log_scale : Tensor, shape (B,)
    """
    logc = loss.log_neg_deriv(u) - math.log(u.shape[-1])
    sigma = logc.amax(dim=-1)
    coef = -torch.exp(logc - sigma.unsqueeze(-1))
    return coef, sigma


def log_mean_loss(loss, u):
    r""":math:`\log L = \operatorname{logsumexp}_i \log \ell(u_i) - \log n` per trial, shape (B,)."""
    return torch.logsumexp(loss.log_value(u), dim=-1) - math.log(u.shape[-1])


def loss_floor(data, alpha=None, *, loss="logistic"):
    r"""The loss floor :math:`\mathcal{L}_\infty(\alpha) = \frac1n\sum_i \ell(\gamma_{i\alpha_i})`:
    the limit of :math:`\mathcal{L}(cW^\alpha_{mm})` as :math:`c\to\infty`; for
    :math:`\alpha = \mathrm{opt}` (the default, :math:`\gamma_{i\alpha_i} = \max_t\gamma_{it}`)
    the infimum of the risk, attained only in the limit.

    Parameters
    ----------
    data : AttnData, unbatched or batched
    alpha : int array (n,) or (B, n), optional
    loss : str or Loss

    Returns
    -------
    float, or ndarray (B,) for batched data
    """
    from .data import AttnData
    from .tokens import token_scores

    if not isinstance(data, AttnData):
        raise ValueError(f"data must be AttnData, got {type(data).__name__}")
    ell = get_loss(loss)
    g = token_scores(data.X, data.y, data.v)
    if alpha is None:
        ga = g.max(-1)
    else:
        a = np.asarray(alpha)
        if a.shape != g.shape[:-1]:
            raise ValueError(f"alpha must have shape {g.shape[:-1]}, got {a.shape}")
        ga = np.take_along_axis(g, a[..., None].astype(np.int64), axis=-1)[..., 0]
    out = np.mean(ell.value_np(ga), axis=-1)
    return float(out) if np.ndim(out) == 0 else out
