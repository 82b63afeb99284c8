r"""Tokens: scores, optimal tokens, attention scores, margins and the lifted features.

For a sequence :math:`X_i` (rows :math:`x_{it}`), label :math:`y_i` and head :math:`v`, the token
score is :math:`\gamma_{it} = y_i v^\top x_{it}` and the optimal token is
:math:`\mathrm{opt}_i = \arg\max_t \gamma_{it}`. The attention score of a key-query matrix
:math:`W` is :math:`a_{it} = x_{it}^\top W z_i` (of a prompt :math:`p`: :math:`x_{it}^\top p`).
The Att-SVM's constraint for the pair :math:`(i, t)` reads :math:`\langle A_{it}, W\rangle \ge 1`
with the lifted feature :math:`A_{it} = (x_{i\alpha_i} - x_{it}) z_i^\top`; its left side is the
selection margin :math:`m_{it} = (x_{i\alpha_i} - x_{it})^\top W z_i`.
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array

__all__ = ["TIE_TOL", "token_scores", "optimal_tokens", "attention_scores", "selected_tokens",
           "token_differences", "selection_margins", "lifted_features", "check_alpha",
           "trial_arrays", "opt_scores", "opt_margins"]

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


def attention_scores(X, W, Z=None):
    r"""Attention scores :math:`a_{it} = x_{it}^\top W z_i`, or :math:`x_{it}^\top p` when ``Z``
    is None and ``W`` is a prompt ``p``; leading (trial) axes broadcast.

    Parameters
    ----------
    X : array_like (..., n, T, d)
    W : array_like (..., d, d), or (..., d) (a prompt) when ``Z`` is None
    Z : array_like (..., n, d), optional

    Returns
    -------
    a : ndarray (..., n, T)
    """
    X = np.asarray(X, dtype=float)
    W = np.asarray(W, dtype=float)
    if Z is None:
        return np.einsum("...ntd,...d->...nt", X, W)
    Wz = np.einsum("...de,...ne->...nd", W, np.asarray(Z, dtype=float))
    return np.einsum("...ntd,...nd->...nt", X, Wz)


def check_alpha(alpha, shape, T):
    """Validate a choice of one token per sequence: an integer array of ``shape`` with entries
    in [0, T); returns it as int64."""
    a = np.asarray(alpha)
    if a.shape != shape or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"alpha must be an integer array of shape {shape}, got {a.shape} {a.dtype}")
    if np.any(a < 0) or np.any(a >= T):
        raise ValueError(f"alpha entries must lie in [0, {T})")
    return a.astype(np.int64)


def selected_tokens(X, W, Z=None):
    r"""The token each sequence selects, :math:`\arg\max_t x_{it}^\top W z_i` (or
    :math:`\arg\max_t x_{it}^\top p` when ``Z`` is None and ``W`` is a prompt ``p``): the
    largest attention score, hence the largest attention weight.

    Shapes broadcast over a leading trials axis: X (..., n, T, d), W (..., d, d) or (..., d),
    Z (..., n, d). Returns int array (..., n).
    """
    X = as_float_array("X", X, min_ndim=3)
    W = as_float_array("W", W)
    return np.argmax(attention_scores(X, W, None if Z is None else as_float_array("Z", Z)), axis=-1)


def token_differences(X, alpha):
    r"""The rows :math:`u_{it} = x_{i\alpha_i} - x_{it}` of the lifted features
    :math:`A_{it} = u_{it} z_i^\top` (zero at :math:`t = \alpha_i`).

    Parameters
    ----------
    X : array_like (..., n, T, d)
    alpha : int array (..., n)

    Returns
    -------
    U : ndarray (..., n, T, d)
    """
    X = as_float_array("X", X, min_ndim=3)
    alpha = check_alpha(alpha, X.shape[:-2], X.shape[-2])
    xa = np.take_along_axis(X, alpha[..., None, None], axis=-2)
    return xa - X


def selection_margins(W, X, Z, alpha):
    r"""Selection margins :math:`m_{it} = \langle A_{it}, W\rangle
    = (x_{i\alpha_i} - x_{it})^\top W z_i`, ``+inf`` at :math:`t = \alpha_i`.

    Parameters
    ----------
    W : array_like (..., d, d)
        Leading axes broadcast against those of ``X`` (e.g. ``(K, B, d, d)`` for ``K``
        snapshots of ``B`` trials).
    X : array_like (n, T, d) or (B, n, T, d)
    Z : array_like (n, d) or (B, n, d)
    alpha : int array (n,) or (B, n)

    Returns
    -------
    m : ndarray (..., n, T)
    """
    X = as_float_array("X", X, min_ndim=3, max_ndim=4)
    lead, (n, T, d) = X.shape[:-3], X.shape[-3:]
    Z = as_float_array("Z", Z, shape=lead + (n, d))
    W = as_float_array("W", W, min_ndim=2)
    if W.shape[-2:] != (d, d):
        raise ValueError(f"W must have shape (..., {d}, {d}), got {W.shape}")
    U = token_differences(X, alpha)
    a = check_alpha(alpha, lead + (n,), T)
    m = np.einsum("...ntd,...nd->...nt", U, np.einsum("...de,...ne->...nd", W, Z))
    mask = np.ones(lead + (n, T), dtype=bool)
    np.put_along_axis(mask, a[..., None], False, axis=-1)
    return np.where(mask, m, np.inf)


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
    U = token_differences(X, opt)[i, t]
    return U[:, :, None] * Z[i][:, None, :], np.stack([i, t], axis=1)


# ----------------------------------------------------------------------------- batched data
def trial_arrays(data):
    """The arrays X, y, Z, v of ``data`` with a leading trials axis."""
    X, y, Z, v = data.X, data.y, data.Z, data.v
    if not data.batched:
        X, y, Z, v = X[None], y[None], Z[None], v[None]
    return X, y, Z, v


def opt_scores(data, opt):
    r"""The token scores :math:`\gamma_{it}` split at ``opt``.

    Returns ``g`` (B, n, T) the scores, ``gs`` (B, n) :math:`\gamma^\star_i = \gamma_{i,\mathrm{opt}_i}`,
    ``mask`` (B, n, T) bool, True off the optimal token, and ``opt`` (B, n).
    """
    X, y, _, v = trial_arrays(data)
    g = token_scores(X, y, v)
    opt = np.asarray(opt).reshape(g.shape[:2])
    gs = np.take_along_axis(g, opt[..., None], axis=-1)[..., 0]
    mask = np.ones(g.shape, dtype=bool)
    np.put_along_axis(mask, opt[..., None], False, axis=-1)
    return g, gs, mask, opt


def opt_margins(data, opt, W):
    r"""The margins :math:`m_{it} = \langle A_{it}, W\rangle` of every trial of ``data`` at the
    choice ``opt`` (B, n) (:func:`selection_margins`, ``+inf`` at the optimal token), shape
    (..., B, n, T) for ``W`` (..., B, d, d)."""
    X, _, Z, _ = trial_arrays(data)
    opt = np.asarray(opt).reshape(X.shape[0], X.shape[1])
    return selection_margins(W, X, Z, opt)
