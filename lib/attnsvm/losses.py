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
:func:`loss_floor` is the loss floor :math:`\frac1n\sum_i \ell(\gamma_{i\alpha_i})`, and
:func:`log_excess_loss` the log of the excess loss above it (numpy and torch, every loss).

Attention risk (numpy)
----------------------
:func:`loss_value` and :func:`loss_grad`: :math:`\mathcal{L}(W)` and its gradient for one
instance and any nonnegative loss; :func:`risk_grad`, the logistic gradient of every trial;
:func:`excess_loss` (exact, log space) and :func:`scale_to_excess` in the equal-score model.

Next-token prediction
---------------------
The cross-entropy of the linear decoder (:func:`ce_loss`, :func:`ce_grad`, its lower bound
:func:`entropy` and smoothness :func:`ce_smoothness`; data :class:`attnsvm.data.NTPData`),

.. math::

    \mathrm{CE}(W) = -\sum_j \pi_j \sum_{z} p_{jz} \log \mathrm{softmax}(W h_j)_z
    = H + \sum_j \pi_j \,\mathrm{KL}(p_j \,\|\, \mathrm{softmax}(W h_j)),

and the log-loss of the next token with one self-attention layer
(:func:`ntp_attention_objective`, Chapter 16).
"""
from __future__ import annotations

import math

import numpy as np
import torch
from scipy.special import log_softmax

from ._checks import as_float_array, check_choice, check_int
from .data import AttnData
from .devices import cpu_threads
from .jacobian import jacobian_products, softmax_parts
from .metrics import log_q
from .tokens import opt_margins, opt_scores, token_scores, trial_arrays

__all__ = ["Loss", "LOSSES", "get_loss", "grad_coefficients", "linear_log_grad_norm",
           "log_mean_loss", "loss_floor",
           "log_excess_loss", "ce_loss", "ce_grad", "entropy", "ce_smoothness",
           "ntp_attention_objective", "excess_loss", "scale_to_excess", "risk_grad", "loss_value",
           "loss_grad", "nonneg_loss", "check_instance", "lse_argmin"]


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

    def neg_log_neg_deriv(self, u):
        """:math:`-\\log(-\\ell'(u))` (one op fewer than negating :meth:`log_neg_deriv`)."""
        return -self.log_neg_deriv(u)

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

    def neg_log_neg_deriv(self, u):
        return torch.nn.functional.softplus(u)

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

    def neg_log_neg_deriv(self, u):
        return u

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


def linear_log_grad_norm(w, X, y, *, loss="exponential", ord=np.inf):
    r""":math:`\log\|\nabla L(w)\|_{\mathrm{ord}}` of the linear risk
    :math:`L(w) = \frac1n\sum_i \ell(y_i x_i^\top w)`, in log space (exact where the gradient
    underflows), shape (..., B).

    :math:`\nabla L = e^{\sigma}\sum_i c_i y_i x_i` with the coefficients of
    :func:`grad_coefficients`.

    Parameters
    ----------
    w : array_like (..., B, d)
    X, y : (B, n, d), (B, n)
    loss : loss name or :class:`Loss`
    ord : the vector norm (``numpy.linalg.norm``'s ``ord``)
    """
    w = np.asarray(w, dtype=float)
    u = np.einsum("...bd,bnd->...bn", w, np.asarray(X, dtype=float)) * np.asarray(y, dtype=float)
    coef, sigma = grad_coefficients(get_loss(loss), torch.as_tensor(u))
    g = np.einsum("...bn,bnd->...bd", coef.numpy() * y, X)
    return sigma.numpy() + np.log(np.linalg.norm(g, ord=ord, axis=-1))


def _logsumexp(x, dim=-1):
    """``torch.logsumexp`` over ``dim`` in 7 ops instead of 10 (the same values to rounding;
    -inf for an all -inf row, +inf with a +inf entry)."""
    fi = torch.finfo(x.dtype)
    m = x.amax(dim, keepdim=True).clamp(fi.min, fi.max)
    return (torch.log(torch.exp(x - m).sum(dim, keepdim=True)) + m).squeeze(dim)


def log_mean_loss(loss, u):
    r""":math:`\log L = \operatorname{logsumexp}_i \log \ell(u_i) - \log n` per trial, shape (B,)."""
    return _logsumexp(loss.log_value(u)) - math.log(u.shape[-1])


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


# ----------------------------------------------------------------------------- excess loss

def log_excess_loss(log_s, log_gap, gamma_star, loss="logistic", *, small_gap=1e-8):
    r""":math:`\log(\mathcal{L} - \mathcal{L}_\infty)`, the log of the excess margin loss of
    attention with fixed token scores, per trial (numpy arrays or torch tensors).

    Sequence :math:`i` attends with weights :math:`s_{it}` to tokens of scores
    :math:`\gamma_{it}`; its margin is :math:`\gamma^\star_i - \delta_i` with
    :math:`\gamma^\star_i` the score of the selected token and
    :math:`\delta_i = \sum_t s_{it}(\gamma^\star_i - \gamma_{it}) \ge 0`, summed in log space.
    The excess of sequence :math:`i` is :math:`E_i = \ell(\gamma^\star_i - \delta_i) -
    \ell(\gamma^\star_i)`:

    * logistic: :math:`E_i = \log(1 + \sigma(-\gamma^\star_i)(e^{\delta_i} - 1))`;
    * exponential: :math:`E_i = e^{-\gamma^\star_i}(e^{\delta_i} - 1)`;
    * correlation: :math:`E_i = \delta_i`;

    evaluated with ``log1p``/``expm1``, and for :math:`\delta_i \le` ``small_gap`` from the expansion
    :math:`\log E_i = \log b_i + \log\delta_i + \log(1 + c_i\delta_i/2)` (:math:`b_i =
    -\ell'(\gamma^\star_i)`, :math:`c_i = 1 - b_i` (logistic) or 1 (exponential)), so that no
    term underflows. The result is :math:`\log\frac1n\sum_i E_i`.

    Parameters
    ----------
    log_s : array or Tensor (..., n, T)
        Log attention weights :math:`\log s_{it}` (only the entries with a finite ``log_gap``
        are used).
    log_gap : array or Tensor (..., n, T)
        :math:`\log(\gamma^\star_i - \gamma_{it})`, ``-inf`` where the gap is zero (the
        selected token).
    gamma_star : array or Tensor (..., n)
        :math:`\gamma^\star_i`.
    loss : str or Loss
    small_gap : float
        Below this :math:`\delta_i` the expansion is used (default :math:`10^{-8}`; 0 never
        uses it, the direct formula then underflows to ``-inf`` once :math:`E_i` does).

    Returns
    -------
    array or Tensor, shape (...)
    """
    name = get_loss(loss).name
    if isinstance(log_s, torch.Tensor):
        log_delta = _logsumexp(log_s + log_gap)
        if name == "correlation":
            return _logsumexp(log_delta) - math.log(log_delta.shape[-1])
        delta = torch.exp(log_delta)
        if name == "logistic":
            b = torch.sigmoid(-gamma_star)
            big = torch.log(torch.log1p(b * torch.expm1(delta)))
            small = torch.log(b) + log_delta + torch.log1p((1 - b) * delta / 2)
        else:
            big = -gamma_star + torch.log(torch.expm1(delta))
            small = -gamma_star + log_delta + torch.log1p(delta / 2)
        log_Ei = torch.where(delta > small_gap, big, small) if small_gap > 0 else big
        return _logsumexp(log_Ei) - math.log(log_Ei.shape[-1])
    terms = np.asarray(log_s, dtype=float) + np.asarray(log_gap, dtype=float)
    gamma_star = np.asarray(gamma_star, dtype=float)
    tm = terms.max(axis=-1, keepdims=True)
    log_delta = tm[..., 0] + np.log(np.sum(np.exp(terms - tm), axis=-1))
    delta = np.exp(log_delta)
    with np.errstate(divide="ignore"):
        if name == "correlation":
            log_Ei = log_delta
        elif name == "logistic":
            b = LOSSES["logistic"].neg_deriv_np(gamma_star)
            big = np.log(np.log1p(b * np.expm1(delta)))
            log_Ei = np.where(delta > small_gap, big, np.log(b) + log_delta + np.log1p((1 - b) * delta / 2)) \
                if small_gap > 0 else big
        else:
            big = -gamma_star + np.log(np.expm1(delta))
            log_Ei = np.where(delta > small_gap, big, -gamma_star + log_delta + np.log1p(delta / 2)) \
                if small_gap > 0 else big
    mx = log_Ei.max(axis=-1, keepdims=True)
    return mx[..., 0] + np.log(np.mean(np.exp(log_Ei - mx), axis=-1))


# ----------------------------------------------------------------------------- next-token prediction

def _logq(W, H):
    return log_softmax(np.einsum("...vd,...md->...mv", W, H), axis=-1)


def ce_loss(W, data):
    r"""Cross-entropy :math:`\mathrm{CE}(W)` (log-sum-exp), per trial."""
    lq = _logq(W, data.H)
    with np.errstate(invalid="ignore"):
        terms = np.where(data.P > 0, data.P * lq, 0.0)
    return -np.einsum("...m,...m->...", data.pi, terms.sum(-1))


def entropy(data):
    r"""The lower bound :math:`H = -\sum_j \pi_j \sum_z p_{jz}\log p_{jz}`, per trial."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(data.P > 0, data.P * np.log(np.where(data.P > 0, data.P, 1.0)), 0.0)
    return -np.einsum("...m,...m->...", data.pi, t.sum(-1))


def ce_grad(W, data):
    r""":math:`\nabla\mathrm{CE}(W) = \sum_j \pi_j(\mathrm{softmax}(W h_j) - p_j)h_j^\top`."""
    q = np.exp(_logq(W, data.H))
    R = data.pi[..., :, None] * (q - data.P)                    # (..., m, V)
    return np.einsum("...mv,...md->...vd", R, data.H)


def ce_smoothness(data):
    r"""An upper bound on the smoothness of CE: :math:`\frac12\|\sum_j\pi_j h_j h_j^\top\|_2`
    (the softmax Jacobian :math:`\mathrm{diag}(q) - qq^\top` has norm at most 1/2)."""
    C = np.einsum("...m,...md,...me->...de", data.pi, data.H, data.H)
    return 0.5 * np.linalg.eigvalsh(C)[..., -1]



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
    B, n, T, d = X.shape
    Wz = torch.bmm(Z, W.transpose(-1, -2))                     # rows W z_i (B,n,d)
    a = torch.bmm(X.reshape(-1, T, d), Wz.reshape(-1, d, 1)).view(B, n, T)   # x_it^T W z_i
    if mask is not None:
        a = a.masked_fill(~mask, float("-inf"))
    logp = torch.log_softmax(a, dim=-1)
    loss = -logp.gather(-1, ypos.unsqueeze(-1)).squeeze(-1).sum(-1) / n
    s = torch.exp(logp)
    r = s.scatter_add(-1, ypos.unsqueeze(-1), -torch.ones_like(s[..., :1]))
    xbar = torch.bmm(r.reshape(-1, 1, T), X.reshape(-1, T, d)).view(B, n, d)   # X_i^T r_i
    grad = torch.bmm(xbar.transpose(-1, -2), Z) / n           # sum_i xbar_i z_i^T / n
    return loss, grad, s


# ----------------------------------------------------------------------------- attention risk (numpy)

def check_instance(data):
    """``data``, checked to be one unbatched :class:`attnsvm.data.AttnData` instance."""
    if not isinstance(data, AttnData):
        raise ValueError(f"data must be an AttnData instance, got {type(data).__name__}")
    if data.batched:
        raise ValueError("data must be a single (unbatched) instance; use data.trial(b)")
    return data


def nonneg_loss(loss):
    """The :class:`attnsvm.losses.Loss` of a nonnegative decreasing loss (logistic or
    exponential): the theory helpers below need one."""
    return get_loss(check_choice("loss", loss, ("logistic", "exponential")))


def _risk(X, y, Z, v, W, loss):
    r"""The margins :math:`u_i = \sum_t s_{it}\gamma_{it}` (B, n) and the gradient
    :math:`\nabla\mathcal{L}(W) = \frac1n\sum_i \ell'(u_i)\sum_t s_{it}(\gamma_{it} - u_i)
    x_{it} z_i^\top` (B, d, d) of every trial (arrays with a leading trials axis): the one numpy
    risk gradient of the library, evaluated by the engine's softmax Jacobian
    (:func:`attnsvm.jacobian.jacobian_products`, the formula of the library's step), so without
    cancellation at any margin. The textbook :math:`s_{it}(\gamma_{it} - u_i)` of the optimal
    token is rounding noise once its mass is within :math:`10^{-16}` of 1: in that form the
    direction had a relative error :math:`\approx \epsilon\,e^{m}` at margins :math:`m`
    (3e-6 at :math:`m = 25`, wrong at :math:`m \ge 40` on ``thm-sc-necessity``'s instance,
    measured against a 60-digit mpmath reference). The returned gradient itself underflows to 0
    only where it is below the float range (margins above ~740)."""
    loss = nonneg_loss(loss)
    t = torch.as_tensor
    with cpu_threads("cpu", 1):              # tiny tensors: one thread (devices.cpu_threads)
        top, e, S, s = softmax_parts(t(np.einsum("bntd,bde,bne->bnt", X, W, Z)))
        Gam = t(y[..., None] * np.einsum("bntd,bd->bnt", X, v))
        u = torch.linalg.vecdot(s, Gam)
        Q, sig = jacobian_products(e, torch.log(S), s, top, Gam, loss.neg_log_neg_deriv(u).unsqueeze(-1), (-2, -1))
    # nabla L = e^(sig - log n) sum_i sum_t Q_it x_it z_i^T (attnsvm.models.AttentionClassifier.grad)
    scale = np.exp(sig.numpy() - math.log(X.shape[1]))
    return u.numpy(), scale[:, None, None] * np.einsum("bnt,bntd,bne->bde", Q.numpy(), X, Z)


def _one(W, data):
    data = check_instance(data)
    W = as_float_array("W", W, shape=(data.d, data.d))
    return trial_arrays(data), W[None]


def loss_value(W, data, *, loss="logistic"):
    r""":math:`\mathcal{L}(W) = \frac1n\sum_i \ell(y_i v^\top X_i^\top \mathrm{softmax}(X_i W z_i))`
    of one instance."""
    return loss_grad(W, data, loss=loss)[0]


def loss_grad(W, data, *, loss="logistic"):
    r"""Loss and gradient of the W-parameterization (fixed head) of one instance, numpy
    (:func:`risk_grad` for every trial):

    .. math::

        \nabla\mathcal{L}(W) = \frac1n\sum_i \ell'(u_i)\sum_t s_{it}(\gamma_{it} - u_i)\,
        x_{it} z_i^\top, \qquad u_i = \sum_t s_{it}\gamma_{it}.

    Returns
    -------
    L : float
    G : ndarray (d, d)
    """
    arrays, W = _one(W, data)
    u, G = _risk(*arrays, W, loss)
    return float(np.mean(nonneg_loss(loss).value_np(u[0]))), G[0]


def excess_loss(data, opt, W, *, log=False):
    r"""Excess logistic risk :math:`E(W) = \mathcal{L}(W) - \mathcal{L}^\star`, shape (..., B).

    :math:`\mathcal{L}^\star = \frac1n\sum_i \ell(\gamma^\star_i)` (the infimum in the equal-score
    model). Per sequence, with :math:`\delta_i = \gamma^\star_i - u_i = \sum_t s_{it}
    (\gamma^\star_i - \gamma_{it})`, :math:`\ell(\gamma^\star - \delta) - \ell(\gamma^\star)
    = \log(1 + \sigma(-\gamma^\star)(e^{\delta} - 1))` is evaluated with ``log1p``/``expm1``;
    accurate at any size. ``log=True`` returns :math:`\log E`.
    """
    W = np.asarray(W, dtype=float)
    g, gs, mask, _ = opt_scores(data, opt)
    m = opt_margins(data, opt, W)
    lq = log_q(data, opt, W)
    log_s_t = -m - np.logaddexp(0.0, lq)[..., None]           # log s_it (t != opt)
    Dl = np.where(mask, gs[..., None] - g, 1.0)
    log_E = log_excess_loss(log_s_t, np.where(mask, np.log(np.maximum(Dl, 1e-300)), -np.inf), gs)
    return log_E if log else np.exp(log_E)


def scale_to_excess(data, opt, W_mm, target, *, k_max=64.0, iters=60):
    r"""Per trial, the scale :math:`k` with :math:`E(kW_{mm}) = ` ``target``, by bisection on
    :math:`[0, k_{\max}]` (:math:`E` decreases along :math:`kW_{mm}`, :math:`k \ge 0`), shape (B,).
    Starts at a prescribed excess risk, e.g. at the edge of the region
    :math:`\{E\le\varepsilon_0\}` or just outside it. ``target`` is a number or (B,) array in
    :math:`(E(k_{\max}W_{mm}), E(0)]`; the upper end of the final bracket is returned."""
    W_mm = np.asarray(W_mm, dtype=float)
    target = np.broadcast_to(np.asarray(target, dtype=float), W_mm.shape[:1])
    k_max = float(k_max)
    if not (np.all(target > excess_loss(data, opt, k_max * W_mm))
            and np.all(target <= excess_loss(data, opt, 0 * W_mm))):
        raise ValueError("target must lie in (E(k_max W_mm), E(0)] for every trial")
    lo, hi = np.zeros(W_mm.shape[0]), np.full(W_mm.shape[0], k_max)
    for _ in range(check_int("iters", iters, minimum=1)):
        k = (lo + hi) / 2
        big = excess_loss(data, opt, k[:, None, None] * W_mm) > target
        lo, hi = np.where(big, k, lo), np.where(big, hi, k)
    return hi


def risk_grad(data, W, *, loss="logistic"):
    r"""The risk gradient :math:`\nabla\mathcal{L}(W)` (B, d, d) of every trial, from the
    chapter's formula :math:`-\nabla\mathcal{L} = \frac1n\sum_i \beta_i \sum_t s_{it}(\gamma_{it}
    - u_i) x_{it} z_i^\top`, :math:`\beta_i = -\ell'(u_i)` (numpy, float64; logistic loss by
    default)."""
    X, y, Z, v = trial_arrays(data)
    W = np.asarray(W, dtype=float).reshape(X.shape[0], X.shape[-1], X.shape[-1])
    return _risk(X, y, Z, v, W, loss)[1]


def lse_argmin(logw, G, *, iters=200):
    r"""The minimizer of the log of an exponential loss of affine margins,

    .. math::

        f(z) = \log\sum_k e^{\,\mathrm{logw}_k - (Gz)_k},

    by damped Newton (Armijo backtracking) from :math:`z = 0`: :math:`\nabla f = -G^\top p` and
    :math:`\nabla^2 f = G^\top\mathrm{diag}(p)G - (G^\top p)(G^\top p)^\top` with the softmax
    weights :math:`p \propto e^{\mathrm{logw} - Gz}`. ``f`` must be coercive and strictly convex
    on the coordinates (``G`` of full column rank, the book's limit potentials on :math:`V`:
    ``thm-restart-residual``). Returns ``(z, grad_norm)``, the gradient's norm left at the end
    (it stops below 1e-15 or after ``iters`` steps). A backtracking step is accepted by
    Armijo's test on ``f`` or when it halves the gradient's norm: near the minimizer ``f`` moves
    less than its rounding and Armijo alone stalls (at a gradient of ~1e-12, measured)."""
    logw = np.asarray(logw, dtype=float)
    G = np.asarray(G, dtype=float)

    def f(z):
        lg = logw - G @ z
        mx = lg.max()
        return mx + np.log(np.sum(np.exp(lg - mx)))
    def gradient(z):
        return -G.T @ np.exp(logw - G @ z - f(z))
    z = np.zeros(G.shape[1])
    for _ in range(check_int("iters", iters, minimum=1)):
        p = np.exp(logw - G @ z - f(z))
        grad = -G.T @ p
        gnorm = np.linalg.norm(grad)
        if gnorm < 1e-15:
            break
        H = G.T @ (p[:, None] * G) - np.outer(G.T @ p, G.T @ p)
        step = np.linalg.solve(H, grad)
        t, f0 = 1.0, f(z)
        # Armijo on f; near the minimizer f's decrease is below its rounding, so a step that
        # halves the gradient's norm is taken too (Newton's local quadratic convergence)
        while (f(z - t * step) > f0 - 0.25 * t * (grad @ step)
               and np.linalg.norm(gradient(z - t * step)) > 0.5 * gnorm and t > 1e-12):
            t /= 2
        z = z - t * step
    return z, float(np.linalg.norm(gradient(z)))
