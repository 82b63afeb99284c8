"""Token optimality around an SVM: support tokens, local optimality, cones, rank."""
from __future__ import annotations


import numpy as np

from .._checks import as_float_array, check_positive
from ..tokens import TIE_TOL, token_scores
from ._common import InfeasibleError, _check_alpha, _check_X, _check_Z
from .attsvm import att_svm

__all__ = ["support_tokens", "is_locally_optimal", "in_cone", "rank"]


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
