r"""The reduced dynamics of a single attention layer with a fixed head: training in margin space
(book: ``ch-rates``, the reduced dynamics behind ``lem-bounded-residual`` and
``thm-sc-necessity``).

With a fixed head :math:`v`, softmax attention and a margin loss, the risk depends on the
key-query matrix :math:`W` only through the margins :math:`m_k = \langle A_k, W\rangle` of the
lifted features :math:`A_k = A_{it} = (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top`,
:math:`k = (i, t)`, :math:`t \ne \mathrm{opt}_i`: the softmax is invariant to shifts, so
:math:`s_{it} = e^{-m_{it}}/(1 + \sum_{t'\ne\mathrm{opt}_i}e^{-m_{it'}})` and
:math:`u_i = \sum_t s_{it}\gamma_{it}`. The gradient is a combination of the lifted features,

.. math::

    -\nabla\mathcal{L}(W) = \sum_k w_k A_k,\qquad
    w_{it} = \frac1n\,\beta_i\,s_{it}\,(u_i - \gamma_{it}),\qquad \beta_i = -\ell'(u_i),

(the formula of :func:`attnsvm.losses.risk_grad`, with :math:`\sum_t s_{it}(\gamma_{it} - u_i)
= 0` used to subtract :math:`x_{i,\mathrm{opt}_i}z_i^\top`), so a step
:math:`W_{s+1} = W_s + \ell_s\,(-\nabla\mathcal{L})/\|\nabla\mathcal{L}\|_F` of length
:math:`\ell_s` moves the margins, and every inner product with a fixed matrix :math:`V`, by

.. math::

    m_{s+1} = m_s + \ell_s\,\frac{G w}{\sqrt{w^\top G w}},\qquad
    \langle V, W_{s+1}\rangle = \langle V, W_s\rangle
        + \ell_s\,\frac{\sum_k w_k\langle V, A_k\rangle}{\sqrt{w^\top G w}},

with the Gram matrix :math:`G_{kl} = \langle A_k, A_l\rangle`: a closed system of
:math:`K = n(T-1)` numbers, exact (no approximation), at a cost independent of :math:`d`. The
step length is :math:`\ell_s = \eta` (NGD), :math:`\eta\|\nabla\mathcal{L}\|_F` (GD) or
:math:`\eta E/\|\nabla\mathcal{L}\|_F` (the :math:`(\mathcal{L}-\mathcal{L}^\star)` Polyak
step). Everything is in float64 and in log space: :math:`\log s`, :math:`\log|w_k|` and the
scale :math:`\max_k\log|w_k|` are carried separately, so NGD runs to margins of :math:`10^4`
and beyond, where :math:`s_{it}` underflows.

The residual of the book's squared orders is read from the margins: with
:math:`u^\star = W_{mm}/\|W_{mm}\|_F`, :math:`a = \langle W, u^\star\rangle` and
:math:`h = W - a u^\star`, the part of :math:`h` in :math:`\mathcal{A} = \mathrm{span}\{A_k\}` has
:math:`\langle A_k, h\rangle = r_k = m_k - a\langle A_k, u^\star\rangle`, so
:math:`\|P_{\mathcal{A}}h\|_F^2 = r^\top G^+ r` (and on a subset :math:`S`,
:math:`\|P_Sh\|_F^2 = r_S^\top G_{SS}^+ r_S`), while :math:`P^\perp W` never moves
(``prop-invariant``). The differences :math:`r_k` are computed from margins of any size without
cancellation of the residual itself.

Functions: :func:`margin_system` (one instance's Gram matrix, scores and start),
:func:`reduced_step` (one step, the formula above), :func:`reduced_run` (a run with records),
:func:`residual_sq` (the residual's parts from margins), :func:`reconstruct` (:math:`W` from its
margins and invariant part). The limit potential of the residual on the support, with
per-constraint weights: :func:`attnsvm.bounds.residual_limit` (``weights="constraint"``).
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_choice, check_int
from .losses import log_excess_loss
from .tokens import lifted_features, optimal_tokens

__all__ = ["margin_system", "reduced_step", "reduced_run", "residual_sq", "reconstruct"]

_RULES = ("gd", "ngd", "polyak_star")


def margin_system(data, W0, W_mm=None, *, opt=None, directions=None, support=None):
    r"""The reduced system of one instance (unbatched ``data``) started at ``W0``.

    Parameters
    ----------
    data : AttnData, one instance (n, T, d)
    W0 : array_like (d, d), the start
    W_mm : array_like (d, d), optional; gives :math:`u^\star = W_{mm}/\|W_{mm}\|_F` and
        ``cu`` :math:`= \langle A_k, u^\star\rangle`
    opt : array_like of int (n,), optional (default: the optimal tokens of the scores)
    directions : array_like (J, d, d), optional; matrices :math:`V_j` whose inner products
        :math:`\langle V_j, W\rangle` the run tracks exactly
    support : array_like of bool (K,), optional; a subset :math:`S` of the constraints (order of
        :func:`attnsvm.tokens.lifted_features`) for :func:`residual_sq`

    Returns
    -------
    dict with ``G`` (K, K), ``Gpinv``, ``feat`` (K, d, d) the lifted features, ``idx`` (K, 2) the
    pairs (i, t), ``seq`` (K,), ``gap`` (K,) :math:`\gamma^\star_i - \gamma_{it}`, ``gs`` (n,),
    ``m0`` (K,), ``a0``, ``cu`` (K,) (``None`` without ``W_mm``), ``P`` (J, K)
    :math:`\langle V_j, A_k\rangle` and ``p0`` (J,), ``hP2`` :math:`\|P^\perp W_0\|_F^2`, ``perp``
    (d, d) :math:`P^\perp W_0`, ``support``, ``n``.
    """
    if data.batched:
        raise ValueError("margin_system takes one instance (data.batched is False); use data.trial(b)")
    X, Z, y, v = (np.asarray(a, dtype=float) for a in (data.X, data.Z, data.y, data.v))
    n, T, d = X.shape
    W0 = as_float_array("W0", W0, shape=(d, d))
    opt = optimal_tokens(X, y, v) if opt is None else np.asarray(opt, dtype=np.int64)
    feat, idx = lifted_features(X, Z, opt)
    F = feat.reshape(len(feat), d * d)
    G = F @ F.T
    g = y[:, None] * (X @ v)                                                  # scores (n, T)
    gs = g[np.arange(n), opt]
    out = dict(G=G, Gpinv=np.linalg.pinv(G, rcond=1e-12, hermitian=True), feat=feat, idx=idx,
               seq=idx[:, 0], gap=gs[idx[:, 0]] - g[idx[:, 0], idx[:, 1]], gs=gs, n=n,
               m0=F @ W0.ravel(), cu=None, a0=None, support=None)
    alpha = out["Gpinv"] @ out["m0"]
    perp = W0.ravel() - F.T @ alpha
    out["perp"], out["hP2"] = perp.reshape(d, d), float(perp @ perp)
    if W_mm is not None:
        u = as_float_array("W_mm", W_mm, shape=(d, d)).ravel()
        u = u / np.linalg.norm(u)
        out["cu"], out["a0"] = F @ u, float(u @ W0.ravel())
    if directions is not None:
        V = as_float_array("directions", directions, min_ndim=3, max_ndim=3).reshape(-1, d * d)
        out["P"], out["p0"] = V @ F.T, V @ W0.ravel()
    if support is not None:
        out["support"] = np.asarray(support, dtype=bool).reshape(len(feat))
    return out


def _coefficients(sys, m):
    r"""Log attention, the gradient's coefficients in log scale and the log excess risk at the
    margins ``m`` (..., K): returns ``(w_hat, log_scale, log_E)`` with :math:`w = e^{\text{scale}}
    \hat w`, :math:`\max_k|\hat w_k| = 1`."""
    seq, n, gap = sys["seq"], sys["n"], sys["gap"]
    K = len(seq)
    T1 = K // n
    mm = m.reshape(m.shape[:-1] + (n, T1))
    lse = np.logaddexp(0.0, np.logaddexp.reduce(-mm, axis=-1))              # log(1 + q_i)
    log_s = -mm - lse[..., None]                                              # log s_it (n, T-1)
    s = np.exp(log_s)
    s_opt = np.exp(-lse)
    gp = gap.reshape(n, T1)
    # u_i - gamma_it = gap_it s_opt,i + sum_l s_il (gap_it - gap_il): no cancellation
    diff = gp * s_opt[..., None] + np.einsum("...il,ikl->...ik", s, gp[:, :, None] - gp[:, None, :])
    delta = np.einsum("...il,il->...i", s, gp)                                # gamma*_i - u_i
    u = sys["gs"] - delta
    log_beta = -np.logaddexp(0.0, u)                                           # -l'(u) = sigma(-u)
    with np.errstate(divide="ignore"):
        logw = log_beta[..., None] + log_s + np.log(np.abs(diff)) - np.log(n)
        log_gap = np.log(np.maximum(gp, 0.0))
    scale = logw.max(axis=(-2, -1))
    w_hat = np.sign(diff) * np.exp(logw - scale[..., None, None])
    log_E = log_excess_loss(log_s, np.broadcast_to(log_gap, log_s.shape), sys["gs"])
    return w_hat.reshape(m.shape), scale, log_E


def reduced_step(sys, state, *, optimizer, lr):
    r"""One step of ``optimizer`` (``"gd"``, ``"ngd"``, ``"polyak_star"``) with step size / multiplier
    ``lr`` from ``state`` (dict ``m``, ``a``, ``r``, ``p``; ``a``, ``r`` (the residual's margins
    :math:`r = m - a\,\langle A_k, u^\star\rangle`) and ``p`` may be ``None``), by the
    formula of the module docstring. Returns the new state and the step length
    :math:`\ell_s = \|W_{s+1} - W_s\|_F`."""
    m = state["m"]
    w_hat, scale, log_E = _coefficients(sys, m)
    Gw = sys["G"] @ w_hat
    N = np.sqrt(max(float(w_hat @ Gw), 0.0))                  # ||grad|| = e^scale N
    if optimizer == "ngd":
        ell = lr
    elif optimizer == "gd":
        ell = lr * np.exp(scale) * N
    else:                                                      # (L - L*) Polyak: lr E / ||grad||
        ell = lr * np.exp(log_E - scale) / N
    new = dict(m=m + ell * Gw / N, a=None, p=None, r=None)
    if state.get("a") is not None:
        cw = float(sys["cu"] @ w_hat)
        new["a"] = state["a"] + ell * cw / N
        # the residual's margins r = m - a cu, carried on their own (O(1), no cancellation)
        r = state.get("r")
        r = m - state["a"] * sys["cu"] if r is None else r
        new["r"] = r + ell * (Gw - cw * sys["cu"]) / N
    if state.get("p") is not None:
        new["p"] = state["p"] + ell * (sys["P"] @ w_hat) / N
    return new, float(ell)


def reduced_run(sys, *, optimizer, lr, steps, record=None):
    r"""Run ``optimizer`` for ``steps`` steps from the system's start, recording at the steps
    ``record`` (sorted ints in [0, steps]; default: every step).

    Returns
    -------
    dict with ``t`` (R,), ``m`` (R, K), ``a`` (R,) and ``r`` (R, K) the residual's margins (NaN
    without ``W_mm``), ``p`` (R, J) (empty
    without ``directions``), ``L`` (R,) the path length :math:`\sum_{s<t}\ell_s`, ``ell`` (steps,)
    the step lengths, ``log_E`` (R,) the log excess risk.
    """
    optimizer = check_choice("optimizer", optimizer, _RULES)
    steps = check_int("steps", steps, minimum=1)
    rec = np.arange(steps + 1) if record is None else np.unique(np.asarray(record, dtype=np.int64))
    if rec.size == 0 or rec[0] < 0 or rec[-1] > steps:
        raise ValueError(f"record must hold steps in [0, {steps}], got {record!r}")
    state = dict(m=sys["m0"].copy(), a=sys["a0"], p=None if sys.get("P") is None else sys["p0"].copy(),
                 r=None if sys["a0"] is None else sys["m0"] - sys["a0"] * sys["cu"])
    K, J = len(sys["m0"]), 0 if sys.get("P") is None else sys["P"].shape[0]
    out = dict(t=rec, m=np.empty((rec.size, K)), a=np.full(rec.size, np.nan), p=np.empty((rec.size, J)),
               r=np.full((rec.size, K), np.nan),
               L=np.empty(rec.size), ell=np.empty(steps), log_E=np.empty(rec.size))
    L, j = 0.0, 0
    for s in range(steps + 1):
        if j < rec.size and rec[j] == s:
            out["m"][j], out["L"][j] = state["m"], L
            if state["a"] is not None:
                out["a"][j], out["r"][j] = state["a"], state["r"]
            if J:
                out["p"][j] = state["p"]
            out["log_E"][j] = _coefficients(sys, state["m"])[2]
            j += 1
        if s == steps:
            break
        state, ell = reduced_step(sys, state, optimizer=optimizer, lr=lr)
        out["ell"][s] = ell
        L += ell
    return out


def residual_sq(sys, r, a):
    r"""The parts of :math:`\|h\|_F^2`, :math:`h = W - \langle W, u^\star\rangle u^\star`, from the
    residual's margins ``r`` (..., K), :math:`r_k = \langle A_k, h\rangle = m_k - a\langle A_k,
    u^\star\rangle` (``reduced_run``'s ``r``), and ``a`` (...,): ``A`` :math:`\|P_{\mathcal{A}}h\|_F^2 = r^\top G^+r`,
    ``S`` :math:`\|P_Sh\|_F^2` and ``N`` :math:`\|P_{\mathcal{A}}h\|^2 - \|P_Sh\|^2` (with the
    system's ``support``), ``h2`` :math:`\|h\|_F^2` (adding :math:`\|P^\perp W_0\|_F^2`),
    ``norm`` :math:`\|W\|_F` and ``omc`` :math:`1 - \mathrm{corr}(W, W_{mm}) =
    \|h\|^2/(\|W\|(\|W\| + a))`, all without cancellation."""
    r = np.asarray(r, dtype=float)
    out = dict(A=np.einsum("...k,kl,...l->...", r, sys["Gpinv"], r))
    if sys.get("support") is not None:
        S = sys["support"]
        GS = np.linalg.pinv(sys["G"][np.ix_(S, S)], rcond=1e-12, hermitian=True)
        out["S"] = np.einsum("...k,kl,...l->...", r[..., S], GS, r[..., S])
        out["N"] = np.maximum(out["A"] - out["S"], 0.0)
    out["h2"] = out["A"] + sys["hP2"]
    out["norm"] = np.sqrt(np.asarray(a) ** 2 + out["h2"])
    out["omc"] = out["h2"] / (out["norm"] * (out["norm"] + a))
    return out


def reconstruct(sys, m):
    r""":math:`W = \sum_k\alpha_kA_k + P^\perp W_0` with :math:`G\alpha = m` (least squares): the
    iterate whose margins are ``m`` (K,) on the run of the system (exact up to rounding, since
    the steps lie in :math:`\mathcal{A}` and :math:`P^\perp W` is invariant)."""
    alpha = sys["Gpinv"] @ np.asarray(m, dtype=float)
    return np.einsum("k,kde->de", alpha, sys["feat"]) + sys["perp"]
