"""Token optimality around an SVM: support tokens, local optimality, cones, rank; the alignment
of the negative gradient with the ray of an Att-SVM (:func:`ray_alignment`, its limit
:func:`ray_alignment_limit`), and a seeded search for choices of tokens that are (or are not)
locally optimal (:func:`find_choices`)."""
from __future__ import annotations


import numpy as np

from .._checks import as_float_array, check_int, check_positive
from ..data import AttnData, prescribed_scores, stream, stream_seed
from ..losses import check_instance, nonneg_loss
from ..tokens import TIE_TOL, check_alpha, optimal_tokens, selection_margins, token_scores
from ._common import InfeasibleError, _check_alpha, _check_X, _check_Z
from .attsvm import att_svm

__all__ = ["support_tokens", "is_locally_optimal", "in_cone", "rank", "ray_alignment", "ray_alignment_limit",
           "find_choices", "find_traps"]


# ----------------------------------------------------------------------------- local optimality

def support_tokens(X, Z, alpha, W=None, *, tol=1e-6):
    r"""The support tokens of the choice :math:`\alpha`.

    The non-selected tokens whose constraint is active at :math:`W^{\alpha}_{mm}`
    (Frobenius): :math:`(x_{i\alpha_i} - x_{it})^\top W^{\alpha}_{mm} z_i \le 1 + \mathrm{tol}`.
    Margins are normalized to 1, so ``tol`` is relative.

    Parameters
    ----------
    X, Z : as in :func:`att_svm`
    alpha : array_like of int, shape (n,)
    W : array_like, shape (d, d), optional
        :math:`W^{\alpha}_{mm}` if already computed (otherwise solved here).
    tol : float
        Activity tolerance (default 1e-6).

    Returns
    -------
    mask : ndarray of bool, shape (n, T)
        ``mask[i, t]`` is True for support tokens; always False at :math:`t = \alpha_i`.

    Raises
    ------
    InfeasibleError
        If :math:`W^{\alpha}_{mm}` does not exist (and ``W`` is not given).
    """
    X = _check_X(X)
    n, T, d = X.shape
    Z = _check_Z(Z, n, d)
    alpha = _check_alpha(alpha, n, T, "alpha")
    tol = check_positive("tol", tol, allow_zero=True)
    if W is None:
        W = att_svm(X, Z, alpha)
    else:
        W = as_float_array("W", W, shape=(d, d))
    sel = X[np.arange(n), alpha]                                  # (n, d)
    mg = np.einsum("ntd,nd->nt", sel[:, None, :] - X, Z @ W.T)   # (x_sel - x_t)^T W z
    mask = mg <= 1 + tol
    mask[np.arange(n), alpha] = False
    return mask


def is_locally_optimal(X, y, Z, v, alpha, *, tol=1e-6):
    r"""Whether the choice :math:`\alpha` is locally optimal (Tarzanagh et al.).

    True when :math:`W^{\alpha}_{mm}` exists and every support token (see
    :func:`support_tokens`) scores strictly below the selected one,
    :math:`\gamma_{i\alpha_i} > \gamma_{it}` (by more than ``1e-12 * max(1, |gamma|)``).
    False when the SVM is infeasible. ``opt`` itself is always locally optimal when its
    SVM is feasible (every other token scores lower).

    Parameters
    ----------
    X, y, Z, v : the instance
    alpha : array_like of int, shape (n,)
    tol : float
        Activity tolerance for the support tokens.

    Returns
    -------
    bool
    """
    X = _check_X(X)
    n, T, d = X.shape
    g = token_scores(X, y, v)
    Z = _check_Z(Z, n, d)
    alpha = _check_alpha(alpha, n, T, "alpha")
    try:
        mask = support_tokens(X, Z, alpha, tol=tol)
    except InfeasibleError:
        return False
    gsel = g[np.arange(n), alpha][:, None]
    strict = gsel - g > TIE_TOL * np.maximum(1.0, np.abs(gsel))
    return bool(np.all(strict[mask]))


def in_cone(W, W_mm_alpha, *, R0, eps):
    r"""Whether ``W`` lies in the cone
    :math:`\{W : \|W\|_F \ge R_0,\ \mathrm{corr}(W, W^{\alpha}_{mm}) \ge 1 - \epsilon\}`.

    Parameters
    ----------
    W : array_like, shape (d, d) or (B, d, d)
    W_mm_alpha : array_like, shape (d, d), nonzero
    R0 : float >= 0
    eps : float >= 0

    Returns
    -------
    bool, or ndarray of bool (B,) for a batch
    """
    W_mm_alpha = as_float_array("W_mm_alpha", W_mm_alpha, ndim=2)
    d = W_mm_alpha.shape[0]
    if W_mm_alpha.shape != (d, d):
        raise ValueError(f"W_mm_alpha must be square, got {W_mm_alpha.shape}")
    nm = np.linalg.norm(W_mm_alpha)
    if nm == 0:
        raise ValueError("W_mm_alpha must be nonzero")
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    if W.shape[-2:] != (d, d):
        raise ValueError(f"W must have shape (..., {d}, {d}), got {W.shape}")
    R0 = check_positive("R0", R0, allow_zero=True)
    eps = check_positive("eps", eps, allow_zero=True)
    nw = np.linalg.norm(W, axis=(-2, -1))
    inner = np.einsum("...jk,jk->...", W, W_mm_alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(nw > 0, inner / np.where(nw > 0, nw, 1.0) / nm, -np.inf)
    out = (nw >= R0) & (c >= 1 - eps)
    return bool(out) if out.ndim == 0 else out


def rank(W, rtol=1e-6):
    r"""Numerical rank: the number of singular values :math:`\sigma_j > \mathrm{rtol}\,\sigma_1`.

    The threshold is relative to the largest singular value, so the rank does not depend on
    the scale of ``W``; ``rtol = 1e-6`` sits far above the trailing singular values of the
    tightly solved SVMs (about 1e-9 relative or less) and far below the genuine ones.
    The zero matrix has rank 0.

    Parameters
    ----------
    W : array_like, shape (d1, d2) or (B, d1, d2)
    rtol : float in (0, 1)

    Returns
    -------
    int, or ndarray of int (B,)
    """
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    rtol = check_positive("rtol", rtol)
    if rtol >= 1:
        raise ValueError(f"rtol must be < 1, got {rtol}")
    sv = np.linalg.svd(W, compute_uv=False)
    if sv.shape[-1] == 0:
        out = np.zeros(W.shape[:-2], dtype=np.int64)
    else:
        top = sv[..., :1]
        out = np.sum((sv > rtol * top) & (top > 0), axis=-1)
    return int(out) if out.ndim == 0 else out.astype(np.int64)


# ----------------------------------------------------------------------------- the ray of an Att-SVM

def ray_alignment(data, alpha, c, *, W_alpha=None, loss="logistic", scaled=False):
    r""":math:`\langle -\nabla\mathcal{L}(cW^\alpha_{mm}), W^\alpha_{mm}\rangle` (or times
    :math:`e^{c}` if ``scaled``), for scalars ``c`` (array_like, any shape).

    Uses the cancellation-free form (:math:`m_{it}` the margins of :math:`W^\alpha_{mm}`,
    :math:`\Delta_{it} = \gamma_{i\alpha_i} - \gamma_{it}`)

    .. math::

        \langle -\nabla\mathcal{L}(W), W^\alpha_{mm}\rangle = \frac1n\sum_i
        \big(-\ell'(u_i)\big) \sum_{t\ne\alpha_i} s_{it}\, m_{it}
        \Big(\Delta_{it} - \sum_{\tau\ne\alpha_i} s_{i\tau}\Delta_{i\tau}\Big),

    with :math:`s_{it}` for :math:`t \ne \alpha_i` from log-softmax, so ``scaled`` values stay
    exact for large ``c``.
    """
    data = check_instance(data)
    n, T = data.n, data.T
    alpha = check_alpha(alpha, (n,), T)
    if W_alpha is None:
        W_alpha = att_svm(data.X, data.Z, alpha)
    nd = nonneg_loss(loss).neg_deriv_np
    m = selection_margins(W_alpha, data.X, data.Z, alpha)          # (n, T), inf at alpha
    g = token_scores(data.X, data.y, data.v)
    delta = g[np.arange(n), alpha][:, None] - g                      # (n, T), 0 at alpha
    c = np.asarray(c, dtype=float)
    out = np.empty(c.shape)
    for idx, cc in np.ndenumerate(c):
        # log s_it = -c m_it - log(1 + sum_tau e^{-c m_tau})  (t != alpha), log s_alpha = -log(...)
        e = np.where(np.isfinite(m), -cc * np.where(np.isfinite(m), m, 0.0), -np.inf)
        lz = np.logaddexp(0.0, np.logaddexp.reduce(e, axis=1))                   # (n,)
        ls = e - lz[:, None]                                                     # -inf at alpha
        s = np.exp(ls)
        avg = (s * delta).sum(1)                                                 # sum_tau s Δ
        u = g[np.arange(n), alpha] - avg
        mm = np.where(np.isfinite(m), m, 0.0)
        if scaled:
            inner = (np.exp(ls + cc) * mm * (delta - avg[:, None])).sum(1)
        else:
            inner = (s * mm * (delta - avg[:, None])).sum(1)
        out[idx] = float(np.mean(nd(u) * inner))
    return out[()] if out.ndim == 0 else out


def ray_alignment_limit(data, alpha, *, W_alpha=None, loss="logistic", tol=1e-6):
    r"""The constant :math:`\Lambda_\alpha = \lim_{c\to\infty} e^{c}\langle
    -\nabla\mathcal{L}(cW^\alpha_{mm}), W^\alpha_{mm}\rangle
    = \frac1n\sum_i -\ell'(\gamma_{i\alpha_i}) \sum_{t\in S_i}(\gamma_{i\alpha_i} - \gamma_{it})`,
    :math:`S_i` the support tokens (``attnsvm.svm.support_tokens`` with ``tol``)."""
    data = check_instance(data)
    n, T = data.n, data.T
    alpha = check_alpha(alpha, (n,), T)
    if W_alpha is None:
        W_alpha = att_svm(data.X, data.Z, alpha)
    S = support_tokens(data.X, data.Z, alpha, W_alpha, tol=tol)
    nd = nonneg_loss(loss).neg_deriv_np
    g = token_scores(data.X, data.y, data.v)
    ga = g[np.arange(n), alpha]
    return float(np.mean(nd(ga) * np.where(S, ga[:, None] - g, 0.0).sum(1)))


def find_choices(data, *, locally_optimal=True, max_tries=200, seed=0):
    r"""For each trial, a choice :math:`\alpha \ne \mathrm{opt}` whose Att-SVM exists and which
    is (``locally_optimal=True``) or is not (``False``) locally optimal, by seeded random
    search: each candidate changes the selected token of one random sequence of ``opt`` (or of
    the last candidate) to a random other token.

    Returns
    -------
    alpha : (B, n) int
    found : (B,) bool      False where no such choice was found in ``max_tries`` candidates
    """
    if not isinstance(data, AttnData) or not data.batched:
        raise ValueError("data must be a batched AttnData")
    B, n, T = data.trials, data.n, data.T
    opt = optimal_tokens(data.X, data.y, data.v)
    alpha = opt.copy()
    found = np.zeros(B, dtype=bool)
    for b in range(B):
        r = stream(seed, "choice-search", b)
        cur = opt[b].copy()
        for _ in range(max_tries):
            cand = cur.copy()
            i = r.integers(n)
            cand[i] = (cand[i] + r.integers(1, T)) % T
            if np.all(cand == opt[b]):
                continue
            lo = is_locally_optimal(data.X[b], data.y[b], data.Z[b], data.v[b], cand)
            if lo == locally_optimal:
                try:
                    att_svm(data.X[b], data.Z[b], cand)
                except InfeasibleError:
                    cur = opt[b].copy()
                    continue
                alpha[b], found[b] = cand, True
                break
            cur = cand if r.random() < 0.5 else opt[b].copy()
    return alpha, found


def find_traps(n=3, T=3, d=4, *, trials, seed=0, max_tries=2000, **kw):
    r"""``trials`` distinct distinct-score instances, each with a locally optimal choice
    :math:`\alpha \ne \mathrm{opt}` (the trap group of chapter 8's global experiment).

    Candidate ``k = 0, 1, ...`` is the unbatched instance
    ``attnsvm.data.prescribed_scores(n, T, d, distinct=True, seed=stream_seed(seed,
    "trap-search", k))`` (so different seeds never share a candidate); for each, the choices that
    swap one sequence's optimal token for its second-best token are tried in sequence order, and
    the first locally optimal one (:func:`is_locally_optimal`) is kept. The first
    ``trials`` candidates that have one are returned.

    Returns
    -------
    data : AttnData, batched (trials, ...)
    opt, alpha : ndarray (trials, n) int
    tries : int, the number of candidates drawn
    """
    trials = check_int("trials", trials, minimum=1)
    found = []
    for k in range(check_int("max_tries", max_tries, minimum=1)):
        one, opt = prescribed_scores(n, T, d, distinct=True,
                                     seed=stream_seed(seed, "trap-search", k), **kw)
        g = token_scores(one.X, one.y, one.v)
        second = np.argsort(-g, axis=-1)[:, 1]
        for i in range(n):
            alpha = opt.copy()
            alpha[i] = second[i]
            if is_locally_optimal(one.X, one.y, one.Z, one.v, alpha):
                found.append((one, opt, alpha))
                break
        if len(found) == trials:
            return (AttnData.stack([f[0] for f in found]), np.stack([f[1] for f in found]),
                    np.stack([f[2] for f in found]), k + 1)
    raise RuntimeError(f"only {len(found)} of {trials} trap instances found in {max_tries} candidates")
