r"""The saturation lemma and its cone version (chapter 4): :func:`saturation_bound`,
:func:`cone_margin_bound`.
"""
from __future__ import annotations

import numpy as np

from .. import metrics, tokens
from .._checks import as_float_array, check_int, check_positive


__all__ = ["saturation_bound", "cone_margin_bound"]


def saturation_bound(W_alpha, R, T):
    r"""The saturation lemma's bound :math:`(T-1)\exp(-R/\|W^\alpha_{mm}\|_F)` on the
    non-selected mass of every sequence at :math:`W = R\,W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`."""
    W_alpha = as_float_array("W_alpha", W_alpha, ndim=2)
    T = check_int("T", T, minimum=2)
    R = check_positive("R", R, allow_zero=True)
    return (T - 1) * np.exp(-R / np.linalg.norm(W_alpha))


def cone_margin_bound(W, W_alpha, X, Z, alpha):
    r"""Lower bound on every selection margin of :math:`W` from its norm and its correlation
    with :math:`W^\alpha_{mm}` (cone lemma):

    .. math::

        \min_{i, t\ne\alpha_i} m_{it}(W) \ \ge\ \|W\|_F\Big(\frac{1}{\|W^\alpha_{mm}\|_F}
        - D\sqrt{2 - 2\,\mathrm{corr}(W, W^\alpha_{mm})}\Big),\qquad
        D = \max_{i,t} \|x_{i\alpha_i} - x_{it}\|\,\|z_i\| .
    """
    X = as_float_array("X", X, ndim=3)
    n, T, d = X.shape
    W = as_float_array("W", W, shape=(d, d))
    W_alpha = as_float_array("W_alpha", W_alpha, shape=(d, d))
    Z = as_float_array("Z", Z, shape=(n, d))
    alpha = tokens.check_alpha(alpha, (n,), T)
    diff = X[np.arange(n), alpha][:, None, :] - X
    D = float(np.max(np.linalg.norm(diff, axis=-1) * np.linalg.norm(Z, axis=-1)[:, None]))
    c = float(metrics.corr(W, W_alpha))
    return float(np.linalg.norm(W) * (1.0 / np.linalg.norm(W_alpha)
                                      - D * np.sqrt(max(2.0 - 2.0 * c, 0.0))))
