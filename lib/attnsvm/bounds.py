r"""Proved bounds of the book, as functions (the chapters state and prove them; tests and
notebooks evaluate them here).

* :func:`direction_from_margin`: for any :math:`W` whose smallest Att-SVM margin
  :math:`m_{\min}(W) = \min_{i,t\ne\mathrm{opt}_i}\langle A_{it}, W\rangle` is positive,
  :math:`\mathrm{corr}(W, W_{mm}) \ge \gamma(W)/\gamma_A` with :math:`\gamma(W) = m_{\min}(W)/\|W\|_F`
  and :math:`\gamma_A = 1/\|W_{mm}\|_F` (book: ``lem-dir-margin``);
* :func:`ngd_direction_bound`: the explicit, decaying upper bound on
  :math:`1 - \mathrm{corr}(W_t, W_{mm})` along NGD in the equal-score model, from the first step
  :math:`t_0` in the region :math:`E \le \varepsilon_0`, for any steps below the theorem's
  (book: ``cor-ngd-direction``).
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


def ngd_direction_bound(etas, E_t0, norm_t0, *, mu, eps0, gamma_A, H):
    r"""NGD's decaying directional bound (book: ``cor-ngd-direction``), at every step from
    :math:`t_0` on, for steps :math:`\eta_s \le \min(\log 2/R_A, \mu/H)` and
    :math:`E(W_{t_0}) \le \varepsilon_0` (equal-score model):

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le
        \frac{\|W_{t_0}\|_F - \log(2\varepsilon_0/E(W_{t_0}))/\gamma_A
              + \frac{2E(W_{t_0})}{3\varepsilon_0\mu}(1 - P_t)
              + \frac{H}{2\gamma_A}\sum_{s<t}\eta_s^2}
             {\|W_{t_0}\|_F + \sum_{s<t}\eta_s},
        \qquad P_t = \prod_{s<t}\Big(1 - \frac{\eta_s\mu}{2}\Big),

    sums and product over :math:`s = t_0, \dots, t-1`. With a constant step it tends to
    :math:`\eta H/(2\gamma_A)`; with :math:`\eta_s = \eta_0/\sqrt{s - t_0 + 1}` it is
    :math:`O(\log t/\sqrt t)`.

    Parameters
    ----------
    etas : array_like, shape (K,) or (K, B)
        The steps :math:`\eta_{t_0}, \dots, \eta_{t_0+K-1}` (> 0); a (K,) schedule with
        per-trial (B,) constants gives a (K + 1, B) result.
    E_t0, norm_t0 : array_like, shape () or (B,)
        :math:`E(W_{t_0})` (in :math:`(0, \varepsilon_0]`) and :math:`\|W_{t_0}\|_F` (> 0).
    mu, eps0, gamma_A, H : array_like, shape () or (B,)
        The constants of the chapter (``attnsvm.experiments.rates.constants``).

    Returns
    -------
    ndarray, shape (K + 1,) or (K + 1, B)
        The bound at :math:`t = t_0, \dots, t_0 + K`.
    """
    etas = np.asarray(etas, dtype=float)
    if etas.ndim not in (1, 2) or np.any(etas <= 0):
        raise ValueError("etas must be a 1-d or 2-d array of positive steps")
    E_t0, norm_t0, mu, eps0, gamma_A, H = (np.asarray(a, dtype=float)
                                           for a in (E_t0, norm_t0, mu, eps0, gamma_A, H))
    if np.any(E_t0 <= 0) or np.any(E_t0 > eps0):
        raise ValueError("E_t0 must lie in (0, eps0] (the hypothesis of the bound)")
    if np.any(norm_t0 <= 0):
        raise ValueError("norm_t0 must be positive")
    if etas.ndim == 1 and np.broadcast(E_t0, norm_t0, mu, eps0, gamma_A, H).ndim:
        etas = etas[:, None]                                  # one schedule, per-trial constants
    if np.any(etas * mu / 2 >= 1):
        raise ValueError("etas must satisfy eta * mu / 2 < 1")
    def csum(x):                                              # sums over s < t, t = t0..t0+K
        return np.concatenate([np.zeros((1,) + x.shape[1:]), np.cumsum(x, axis=0)])

    S1, S2 = csum(etas), csum(etas ** 2)
    P = np.exp(csum(np.log1p(-etas * mu / 2)))
    num = (norm_t0 - np.log(2 * eps0 / E_t0) / gamma_A + 2 * E_t0 / (3 * eps0 * mu) * (1 - P)
           + H / (2 * gamma_A) * S2)
    return num / (norm_t0 + S1)
