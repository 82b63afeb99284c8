r"""Tokens: scores, optimal tokens and the lifted features of the Att-SVM.

For a sequence :math:`X_i` (rows :math:`x_{it}`), label :math:`y_i` and head :math:`v`, the token
score is :math:`\gamma_{it} = y_i v^\top x_{it}` and the optimal token is
:math:`\mathrm{opt}_i = \arg\max_t \gamma_{it}`. The Att-SVM's constraint for the pair
:math:`(i, t)` reads :math:`\langle A_{it}, W\rangle \ge 1` with the lifted feature
:math:`A_{it} = (x_{i\alpha_i} - x_{it}) z_i^\top`.
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array

__all__ = ["TIE_TOL", "token_scores", "optimal_tokens", "lifted_features"]

#: relative tolerance under which two token scores count as tied
TIE_TOL = 1e-12


def token_scores(X, y, v):
    r"""Token scores :math:`\gamma_{it} = y_i v^\top x_{it}`, shape (n, T) or (B, n, T).

    Parameters
    ----------
    X : array_like, shape (n, T, d) or (B, n, T, d)
    y : array_like, shape (n,) or (B, n)
    v : array_like, shape (d,) or (B, d)
    """
    X = as_float_array("X", X, min_ndim=3, max_ndim=4)
    lead = X.shape[:1] if X.ndim == 4 else ()
    n, T, d = X.shape[-3:]
    if n == 0:
        raise ValueError("X must hold at least one sequence (n >= 1), got n = 0")
    if T < 2:
        raise ValueError(f"X must have at least T = 2 tokens per sequence, got T = {T}")
    y = as_float_array("y", y, shape=lead + (n,))
    v = as_float_array("v", v, shape=lead + (d,))
    return y[..., None] * np.einsum("...ntd,...d->...nt", X, v)


def optimal_tokens(X, y, v):
    r"""The optimal tokens :math:`\mathrm{opt}_i = \arg\max_t \gamma_{it}`.

    Parameters
    ----------
    X : array_like, shape (n, T, d) or (B, n, T, d)
    y : array_like, shape (n,) or (B, n)
    v : array_like, shape (d,) or (B, d)

    Returns
    -------
    opt : ndarray of int, shape (n,) or (B, n)

    Raises
    ------
    ValueError
        If a sequence's two best scores are within ``1e-12 * max(1, |best score|)``
        (the optimal token is not unique); the message names the sequence (and trial).
    """
    g = token_scores(X, y, v)
    opt = np.argmax(g, axis=-1)
    top2 = -np.partition(-g, 1, axis=-1)[..., :2]
    tie = (top2[..., 0] - top2[..., 1]) <= TIE_TOL * np.maximum(1.0, np.abs(top2[..., 0]))
    if np.any(tie):
        idx = np.argwhere(tie)[0]
        where = (f"sequence i={idx[-1]}" + (f" of trial b={idx[0]}" if g.ndim == 3 else ""))
        raise ValueError(f"the optimal token of {where} is not unique: its two best scores "
                         f"{top2[tuple(idx)][0]!r} and {top2[tuple(idx)][1]!r} tie within "
                         f"{TIE_TOL:g}")
    return opt.astype(np.int64)


def lifted_features(X, Z, opt):
    r"""The lifted features :math:`A_{it} = (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top` of the
    Att-SVM, one per constraint (:math:`t \ne \mathrm{opt}_i`), in the order of ``(i, t)``.

    Parameters
    ----------
    X : array_like (n, T, d); Z : array_like (n, d); opt : array_like of int (n,)

    Returns
    -------
    A : ndarray (n (T-1), d, d)
    idx : ndarray of int (n (T-1), 2), the pairs ``(i, t)``
    """
    X = np.asarray(X, dtype=float)
    Z = np.asarray(Z, dtype=float)
    opt = np.asarray(opt, dtype=np.int64)
    n, T, d = X.shape
    mask = np.ones((n, T), dtype=bool)
    mask[np.arange(n), opt] = False
    i, t = np.nonzero(mask)
    U = X[i, opt[i]] - X[i, t]
    return U[:, :, None] * Z[i][:, None, :], np.stack([i, t], axis=1)
