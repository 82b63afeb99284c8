r"""Optimizer geometry (Part IV): steepest descent in a norm, mirror descent, progressive norm
rescaling (PRGD) and Adam with a step schedule, batched over trials, float64.

One small batched loop, :func:`run`, drives the models of :mod:`attnsvm.models` that have a
single trained parameter (``LinearClassifier``: ``w``; ``AttentionClassifier("W")``: ``W``)
through their log-scaled gradients (``model.grad``: :math:`\nabla L = e^{\sigma}\tilde g`), so
the loss is the one of :mod:`attnsvm.losses` and nothing underflows. It lives here, beside
``attnsvm.train.fit``, because these rules act through a norm or a mirror map on the whole
parameter and are not increments of the engine's rule table.

Rules (:math:`g = \nabla L(w_t)`, :math:`\eta_t = \eta\,(t+1)^{-a}` with ``decay`` :math:`a`):

* ``"gd"``: :math:`w_{t+1} = w_t - \eta_t g`.
* ``"sd"``: normalized steepest descent w.r.t. the norm ``norm``:
  :math:`w_{t+1} = w_t - \eta_t\, d_t`, :math:`d_t = \arg\max_{\|d\|\le1}\langle g, d\rangle`
  (:func:`steepest_direction`): ``norm=2`` is normalized GD, ``inf`` sign descent, ``1``
  (greedy) coordinate descent, ``"spectral"`` (matrices) :math:`d = UV^\top` from the SVD.
* ``"md"``: mirror descent with potential :math:`\psi(w) = \frac1p\|w\|_p^p` (entrywise,
  :math:`\nabla\psi(w) = \mathrm{sign}(w)|w|^{p-1}`, ``p > 1``):
  :math:`\nabla\psi(w_{t+1}) = \nabla\psi(w_t) - \eta_t g`; with ``normalize=True`` the
  gradient is divided by its dual norm :math:`\|g\|_{p/(p-1)}`.
* ``"prgd"``: progressive norm rescaling (our variant, documented here): phase ``k`` starts at
  step :math:`k P` (``period`` :math:`P`) by rescaling :math:`w \leftarrow R_k w/\|w\|_2`,
  :math:`R_k = R_0 c^k` (``R0``, ``growth`` :math:`c`), and takes :math:`P` normalized
  gradient steps of length :math:`\eta_t R_k^{\beta}` (``step_power`` :math:`\beta`, default
  1/2) from there. The schedule of Wang, Min and Wu could not be read; :math:`\beta = 1/2` is
  our choice (with :math:`\beta = 0` the angular steps :math:`\eta/R_k` vanish too fast, with
  :math:`\beta = 1` they do not shrink and the margin oscillates).
* ``"adam"``: Adam with bias correction, :math:`\Delta = -\eta_t \hat m/(\sqrt{\hat v}+\epsilon)`;
  ``eps=0`` is Adam without its stability constant. The moments are held in the log-scaled
  form of the gradients (:math:`m = e^{s}\tilde m`), so ``eps=0`` is exact at any loss.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._checks import check_choice, check_int, check_positive
from .losses import get_loss, log_mean_loss

__all__ = ["RULES", "steepest_direction", "dual_norm", "mirror_map", "run"]

RULES = ("gd", "sd", "md", "prgd", "adam")


def _dims(g, batch_ndim):
    return tuple(range(batch_ndim, g.ndim))


def _bc(x, g):
    return x.reshape(x.shape + (1,) * (g.ndim - x.ndim))


def _parse_norm(norm):
    if norm == "spectral":
        return norm
    if isinstance(norm, str) and norm == "inf":
        return math.inf
    if isinstance(norm, bool) or not isinstance(norm, (int, float)) or not norm >= 1:
        raise ValueError(f"norm must be a real p >= 1, inf or 'spectral', got {norm!r}")
    return float(norm)


def dual_norm(g, norm, batch_ndim=1):
    r"""Dual norm :math:`\|g\|_* = \max_{\|d\|\le1}\langle g,d\rangle` per trial (torch)."""
    norm = _parse_norm(norm)
    dims = _dims(g, batch_ndim)
    if norm == "spectral":
        return torch.linalg.matrix_norm(g, ord="nuc")
    q = math.inf if norm == 1 else (1.0 if norm == math.inf else norm / (norm - 1))
    return torch.linalg.vector_norm(g, ord=q, dim=dims)


def steepest_direction(g, norm, batch_ndim=1):
    r"""The unit steepest direction :math:`d = \arg\max_{\|d\|\le 1}\langle g, d\rangle`.

    ``norm`` 2: :math:`g/\|g\|_2`; ``inf``: :math:`\mathrm{sign}(g)`; ``1``: :math:`\pm e_k` at the
    largest :math:`|g_k|` (first on ties); real ``p``: :math:`\mathrm{sign}(g)|g|^{q-1}/
    \|g\|_q^{q-1}` with :math:`q = p/(p-1)`; ``"spectral"``: :math:`UV^\top` (thin SVD of
    :math:`g`, matrices only). Zero gradients give zero directions. Then
    :math:`\langle g, d\rangle = \|g\|_*` (:func:`dual_norm`) and :math:`\|d\| = 1`.
    """
    norm = _parse_norm(norm)
    dims = _dims(g, batch_ndim)
    if norm == "spectral":
        if g.ndim - batch_ndim != 2:
            raise ValueError("norm='spectral' needs matrix parameters")
        U, S, Vh = torch.linalg.svd(g, full_matrices=False)
        keep = (S > S[..., :1] * 1e-12).to(g.dtype)
        return (U * keep.unsqueeze(-2)) @ Vh
    if norm == math.inf:
        return torch.sign(g)
    if norm == 1:
        flat = g.reshape(g.shape[:batch_ndim] + (-1,))
        k = flat.abs().argmax(-1, keepdim=True)
        d = torch.zeros_like(flat).scatter_(-1, k, torch.sign(flat.gather(-1, k)))
        return d.reshape(g.shape)
    q = norm / (norm - 1)
    scale = g.abs().amax(dim=dims, keepdim=True)
    gs = g / torch.where(scale > 0, scale, 1.0)
    a = torch.sign(gs) * gs.abs() ** (q - 1)
    nq = torch.linalg.vector_norm(gs, ord=q, dim=dims, keepdim=True) ** (q - 1)
    return a / torch.where(nq > 0, nq, 1.0)


def mirror_map(w, p, inverse=False):
    r""":math:`\nabla\psi(w) = \mathrm{sign}(w)|w|^{p-1}` (or its inverse, exponent
    :math:`1/(p-1)`), entrywise."""
    e = 1.0 / (p - 1) if inverse else p - 1
    return torch.sign(w) * w.abs() ** e


def run(model, params, batch, *, rule, steps, lr, loss="exponential", norm=2, p=None,
        normalize=False, decay=0.0, period=100, growth=2.0, R0=1.0, betas=(0.9, 0.999),
        eps=0.0, step_power=0.5, record_steps=None):
    r"""Train the single trained parameter of ``model`` with a geometry rule, all trials at once.

    Parameters
    ----------
    model : ``attnsvm.models.LinearClassifier`` or ``AttentionClassifier("W")``
    params : dict of Tensor
        From ``model.init_params`` (leading trial axis B); the trained one is copied.
    batch : dict of Tensor
        The model's data batch (``X``, ``y``[, ``Z``, ``G``]).
    rule : {"gd", "sd", "md", "prgd", "adam"}
    steps : int >= 1
    lr : float > 0
        :math:`\eta` (the schedule is :math:`\eta (t+1)^{-\mathrm{decay}}`).
    loss : str
        A loss of :mod:`attnsvm.losses` (default exponential).
    norm : 2, inf, 1, real p or "spectral"
        Norm of ``"sd"``.
    p : float > 1
        Potential exponent of ``"md"``.
    normalize : bool
        ``"md"``: divide the gradient by its dual norm.
    decay : float >= 0
        Exponent ``a`` of the step schedule.
    period, growth, R0, step_power
        PRGD's phase length, radius growth factor, first radius and step exponent.
    betas, eps
        Adam's constants (``eps=0``: no stability constant).
    record_steps : array of int, optional
        Steps at which the iterate is recorded (default: 60 log-spaced steps up to ``steps``).

    Returns
    -------
    dict
        ``steps`` (K,), ``iterates`` (K, B, ...) numpy float64, ``log_loss`` (K, B).
    """
    rule = check_choice("rule", rule, RULES)
    steps = check_int("steps", steps, minimum=1)
    lr = check_positive("lr", lr)
    decay = check_positive("decay", decay, allow_zero=True)
    lossf = get_loss(loss)
    if rule == "sd":
        norm = _parse_norm(norm)
    if rule == "md":
        if p is None or not p > 1:
            raise ValueError(f"p must be a real number > 1 for rule='md', got {p!r}")
    if rule == "prgd":
        period = check_int("period", period, minimum=1)
        growth = check_positive("growth", growth)
        R0 = check_positive("R0", R0)
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 60)).astype(int))
    record_steps = np.asarray(record_steps, dtype=int)
    if record_steps.ndim != 1 or record_steps.min() < 0 or record_steps.max() > steps:
        raise ValueError(f"record_steps must be integers in [0, {steps}]")
    rec = set(record_steps.tolist())
    name = model.trainable[0]
    params = {k: v.clone() for k, v in params.items()}
    w = params[name]
    theta = mirror_map(w, p) if rule == "md" else None
    m_t = v_t = s_t = None
    its, lls, out_steps = [], [], []

    def record(t, u):
        out_steps.append(t)
        its.append(w.detach().cpu().numpy().copy())
        lls.append(log_mean_loss(lossf, u).cpu().numpy().copy())

    for t in range(steps + 1):
        u, grads, scales = model.grad(params, batch, lossf)
        if t in rec:
            record(t, u)
        if t == steps:
            break
        g, sig = grads[name], scales[name]
        eta = lr * (t + 1) ** (-decay)
        if rule == "gd":
            w = w - eta * g * _bc(torch.exp(sig), g)
        elif rule == "sd":
            w = w - eta * steepest_direction(g, norm)
        elif rule == "md":
            if normalize:
                step = g / _bc(dual_norm(g, p), g).clamp_min(1e-300)   # ||g||_{p/(p-1)}
            else:
                step = g * _bc(torch.exp(sig), g)
            theta = theta - eta * step
            w = mirror_map(theta, p, inverse=True)
        elif rule == "prgd":
            if t % period == 0:
                k = t // period
                nrm = torch.linalg.vector_norm(w, dim=_dims(w, 1))
                Rk = R0 * growth ** k
                w = torch.where(_bc(nrm, w) > 0, w * _bc(Rk / nrm.clamp_min(1e-300), w), w)
            w = w - eta * (R0 * growth ** (t // period)) ** step_power * steepest_direction(g, 2)
        else:  # adam, moments in log-scaled form: m_true = e^s m, v_true = e^{2s} v
            b1, b2 = betas
            if m_t is None:
                m_t, v_t, s_t = torch.zeros_like(g), torch.zeros_like(g), sig.clone()
            r = _bc(torch.exp(s_t - sig), g)                     # rescale old moments to e^sig
            m_t = b1 * m_t * r + (1 - b1) * g
            v_t = b2 * v_t * r * r + (1 - b2) * g * g
            s_t = sig.clone()
            bc1, bc2 = 1 - b1 ** (t + 1), 1 - b2 ** (t + 1)
            den = torch.sqrt(v_t / bc2)
            if eps > 0:
                den = den + eps * _bc(torch.exp(-sig).clamp(max=1e300), g)
            w = w - eta * (m_t / bc1) / torch.where(den > 0, den, 1.0)
        params[name] = w
    return {"steps": np.asarray(out_steps), "iterates": np.stack(its), "log_loss": np.stack(lls)}
