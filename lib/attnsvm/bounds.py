r"""Proved bounds of the book, as functions (the chapters state and prove them; tests and
notebooks evaluate them here).

* :func:`direction_from_margin`: for any :math:`W` whose smallest Att-SVM margin
  :math:`m_{\min}(W) = \min_{i,t\ne\mathrm{opt}_i}\langle A_{it}, W\rangle` is positive,
  :math:`\mathrm{corr}(W, W_{mm}) \ge \gamma(W)/\gamma_A` with :math:`\gamma(W) = m_{\min}(W)/\|W\|_F`
  and :math:`\gamma_A = 1/\|W_{mm}\|_F` (book: ``lem-dir-margin``);
* :func:`ngd_direction_bound`: the explicit upper bound on :math:`1 - \mathrm{corr}(W_t, W_{mm})`
  along NGD in the equal-score model, from the first step :math:`t_0` in the region
  :math:`E \le \varepsilon_0` (book: ``cor-ngd-direction``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["direction_from_margin", "ngd_direction_bound"]


def direction_from_margin(m_min, norm, gamma_A):
    r"""Upper bound :math:`1 - m_{\min}(W)/(\gamma_A\|W\|_F)` on :math:`1 - \mathrm{corr}(W, W_{mm})`.

    Valid where ``m_min > 0``; elsewhere the trivial bound 2 is returned. Arrays broadcast.

    Parameters
    ----------
    m_min : array_like, smallest margin :math:`\min_{i,t}\langle A_{it}, W\rangle`
    norm : array_like, :math:`\|W\|_F` (> 0)
    gamma_A : array_like, :math:`1/\|W_{mm}\|_F` (> 0)
    """
    m_min, norm, gamma_A = (np.asarray(a, dtype=float) for a in (m_min, norm, gamma_A))
    if np.any(norm <= 0):
        raise ValueError("norm must be positive")
    if np.any(gamma_A <= 0):
        raise ValueError("gamma_A must be positive")
    return np.where(m_min > 0, 1.0 - m_min / (gamma_A * norm), 2.0)


def ngd_direction_bound(t, t0, E_t0, norm_t0, *, eta, mu, eps0, gamma_A):
    r"""NGD's explicit directional bound for :math:`t \ge t_0` (equal-score model, NGD step
    :math:`\eta \le \min(\log 2/R_A, \mu/H)`, :math:`E(W_{t_0}) \le \varepsilon_0`):

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le 1 - \frac{\log(2\varepsilon_0/E(W_{t_0}))
        + (t - t_0)\eta\mu/2}{\gamma_A(\|W_{t_0}\|_F + \eta(t - t_0))} .

    All arguments broadcast; ``t0``, ``E_t0``, ``norm_t0`` and the constants are per trial.
    """
    t, t0 = np.asarray(t, dtype=float), np.asarray(t0, dtype=float)
    E_t0 = np.asarray(E_t0, dtype=float)
    if np.any(E_t0 > np.asarray(eps0, dtype=float)):
        raise ValueError("E_t0 must be <= eps0 (the hypothesis of the bound)")
    if np.any(t < t0):
        raise ValueError("t must be >= t0")
    m = np.log(2 * np.asarray(eps0, dtype=float) / E_t0) + (t - t0) * eta * np.asarray(mu) / 2
    return 1.0 - m / (np.asarray(gamma_A) * (np.asarray(norm_t0, dtype=float) + eta * (t - t0)))
