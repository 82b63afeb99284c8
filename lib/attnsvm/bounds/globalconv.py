r"""Global convergence under the cross-sequence condition (Cx), as functions (chapters 8 and 10;
book: ``lem-no-attention-loss``, ``thm-global-region``, ``cor-sparsity-global``,
``cor-global-direction``).

* the global theorem: :func:`noloss_steps`, :func:`s0_lower`, :func:`global_mu0`,
  :func:`global_steps`, :func:`t_reach`, :func:`global_excess_bound`, :func:`mass_from_excess`; its
  constants at a start (:func:`global_constants`) and its lemma checked along an every-step record
  (:func:`q_monotone`);
* global directional convergence from :math:`t = 0`: :func:`global_ngd_direction_bound`,
  :func:`global_gd_direction_constant`, :func:`global_gd_direction_bound`.
"""
from __future__ import annotations

import numpy as np

from .. import metrics
from ..losses import excess_loss
from .model import _arrays, constants, cross_gram_min

__all__ = ["noloss_steps", "s0_lower", "global_mu0", "global_steps", "t_reach", "global_excess_bound",
           "mass_from_excess", "global_constants", "q_monotone", "global_ngd_direction_bound",
           "global_gd_direction_constant", "global_gd_direction_bound"]


def noloss_steps(R_A, gamma_A, bD_plus, n):
    r"""Step sizes below which no sequence loses attention (book: ``lem-no-attention-loss``;
    equal-score model under the cross-sequence condition (Cx)):

    .. math::

        \eta_{\mathrm{GD}} = \frac{2n}{R_A^2\max_i b^+_i\Delta_i},\qquad
        \eta_{\mathrm{NGD}} = \frac{2\gamma_A}{e\,R_A^2}.

    For steps at most these, every :math:`q_i(W_t) = \sum_{t'\ne\mathrm{opt}_i}e^{-m_{it'}(W_t)}`
    is nonincreasing along GD, respectively NGD.

    Parameters
    ----------
    R_A, gamma_A : array_like (> 0)
    bD_plus : array_like (> 0), :math:`\max_i b^+_i\Delta_i`
    n : int, number of sequences

    Returns
    -------
    eta_gd, eta_ngd : ndarray
    """
    R_A, gamma_A, bD_plus, n = _arrays(R_A=R_A, gamma_A=gamma_A, bD_plus=bD_plus, n=n)
    return 2 * n / (R_A ** 2 * bD_plus), 2 * gamma_A / (np.e * R_A ** 2)


def s0_lower(R_A, T, W0_norm):
    r"""The a-priori lower bound :math:`s_0 \ge 1/(1 + (T-1)e^{R_A\|W_0\|_F})` on the smallest
    initial attention to an optimal token (book: ``lem-no-attention-loss``), computed without
    overflow. ``W0_norm`` may be 0."""
    R_A, T = _arrays(R_A=R_A, T=T)
    W0_norm = np.asarray(W0_norm, dtype=float)
    if np.any(W0_norm < 0) or np.any(~np.isfinite(W0_norm)):
        raise ValueError(f"W0_norm must be finite and >= 0, got {W0_norm!r}")
    if np.any(T < 2):
        raise ValueError(f"T must be at least 2, got {T!r}")
    return np.exp(-np.logaddexp(0.0, np.log(T - 1) + R_A * W0_norm))


def global_mu0(gamma_A, s0):
    r""":math:`\mu_0 = \gamma_A\min(s_0, 2/3)` (book: ``thm-global-region``), with
    :math:`s_0 = \min_i s_i(W_0)` in :math:`(0, 1)`."""
    gamma_A, s0 = _arrays(gamma_A=gamma_A, s0=s0)
    if np.any(s0 >= 1):
        raise ValueError(f"s0 must lie in (0, 1), got {s0!r}")
    return gamma_A * np.minimum(s0, 2.0 / 3.0)


def global_steps(mu0, H, E0, *, eta_gd_noloss, lam, R_A):
    r"""The step conditions of the global theorem (book: ``thm-global-region``):

    .. math::

        \eta^{\mathrm{NGD}} = \frac{\mu_0}{H},\qquad
        \eta^{\mathrm{GD}} = \min\Big(\eta_{\mathrm{GD}},\ \frac{1}{HE_0},\
        \frac{\lambda\log 2}{R_A^2E_0},\ \frac{\lambda^2}{3R_A^2E_0}\Big),

    :math:`E_0 = E(W_0)`, :math:`\eta_{\mathrm{GD}}` from :func:`noloss_steps`. (The NGD step
    implies :math:`\eta \le \eta_{\mathrm{NGD}}` and :math:`\eta\le\log 2/R_A`, since
    :math:`H \ge 9R_A^2`.)

    Returns
    -------
    eta_ngd, eta_gd : ndarray, the largest steps the theorem allows
    """
    mu0, H, E0, eta_gd_noloss, lam, R_A = _arrays(mu0=mu0, H=H, E0=E0, eta_gd_noloss=eta_gd_noloss,
                                                 lam=lam, R_A=R_A)
    R2 = R_A ** 2
    eta_gd = np.minimum(np.minimum(eta_gd_noloss, 1 / (H * E0)),
                        np.minimum(lam * np.log(2) / (R2 * E0), lam ** 2 / (3 * R2 * E0)))
    return mu0 / H, eta_gd


def t_reach(E0, eps0, eta, mu0, *, optimizer):
    r"""Steps after which :math:`E(W_t) \le \varepsilon_0` holds for good (book:
    ``thm-global-region``):

    * ``optimizer="ngd"``: :math:`\lceil 2\log(E_0/\varepsilon_0)_+/(\eta\mu_0)\rceil`;
    * ``optimizer="gd"``: :math:`\lceil 2(1/\varepsilon_0 - 1/E_0)_+/(\eta\mu_0^2)\rceil`.

    Parameters
    ----------
    E0, eps0, eta, mu0 : array_like (> 0)
    optimizer : {"ngd", "gd"}
    """
    E0, eps0, eta, mu0 = _arrays(E0=E0, eps0=eps0, eta=eta, mu0=mu0)
    if optimizer == "ngd":
        return np.ceil(2 * np.maximum(np.log(E0 / eps0), 0.0) / (eta * mu0))
    if optimizer == "gd":
        return np.ceil(2 * np.maximum(1 / eps0 - 1 / E0, 0.0) / (eta * mu0 ** 2))
    raise ValueError(f"optimizer must be 'ngd' or 'gd', got {optimizer!r}")


def global_excess_bound(t, E0, eta, mu0, *, optimizer):
    r"""Upper bound on the excess risk :math:`E(W_t)` from :math:`t = 0` (book:
    ``thm-global-region``), at the theorem's steps:

    * ``optimizer="ngd"``: :math:`E_0(1 - \eta\mu_0/2)^t`;
    * ``optimizer="gd"``: :math:`(1/E_0 + \eta\mu_0^2t/2)^{-1}`.

    ``t`` (K,) and per-trial (B,) arrays give (K, B).
    """
    E0, eta, mu0 = _arrays(E0=E0, eta=eta, mu0=mu0)
    t = np.asarray(t, dtype=float)
    if np.any(t < 0):
        raise ValueError("t must be >= 0")
    if E0.ndim or eta.ndim or mu0.ndim:
        t = t[:, None] if t.ndim == 1 else t
    if optimizer == "ngd":
        if np.any(eta * mu0 / 2 >= 1):
            raise ValueError("eta * mu0 / 2 must be < 1")
        return E0 * np.exp(t * np.log1p(-eta * mu0 / 2))
    if optimizer == "gd":
        return 1 / (1 / E0 + eta * mu0 ** 2 * t / 2)
    raise ValueError(f"optimizer must be 'ngd' or 'gd', got {optimizer!r}")


def mass_from_excess(excess, n, bD_minus):
    r"""Bound on the largest non-optimal mass from the excess risk (book: ``cor-mass-excess``,
    used from :math:`t=0` in ``cor-sparsity-global``):
    :math:`\max_i(1 - s_i) \le nE/\min_i b^-_i\Delta_i`.

    Parameters
    ----------
    excess : array_like (>= 0), :math:`E(W)` or a bound on it
    n : int, number of sequences
    bD_minus : array_like (> 0), :math:`\min_i b^-_i\Delta_i`
    """
    n, bD_minus = _arrays(n=n, bD_minus=bD_minus)
    excess = np.asarray(excess, dtype=float)
    if np.any(excess < 0):
        raise ValueError("excess must be >= 0")
    return n * excess / bD_minus


def global_ngd_direction_bound(etas, E0, W0_norm, *, mu0, eps0, gamma_A, H):
    r"""NGD's directional bound from :math:`t = 0` under (Cx) (book: ``cor-global-direction``
    (a)): for steps :math:`\eta_s \le \mu_0/H` (any schedule), with :math:`t_r` the first
    :math:`t` with :math:`\sum_{s<t}\eta_s \ge 2\log(E_0/\varepsilon_0)_+/\mu_0`, at every
    :math:`t \ge t_r`

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le
        \max\Big(\frac{N_{\mathrm{lo}} + a_t}{N_{\mathrm{lo}} + S_t},\
                 \frac{\bar N + a_t}{\bar N + S_t}\Big),

    with :math:`S_t = \sum_{t_r\le s<t}\eta_s`,
    :math:`a_t = (1-\log 2)/\gamma_A + \frac{H}{2\gamma_A}\sum_{t_r\le s<t}\eta_s^2`,
    :math:`\bar N = \|W_0\|_F + \sum_{s<t_r}\eta_s` and :math:`N_{\mathrm{lo}} = \log 2/\gamma_A`.
    For :math:`\eta_s = \eta_0/\sqrt{s+1}` it is :math:`O(\log t/\sqrt t)`.

    Parameters
    ----------
    etas : array_like, shape (K,)
        The steps :math:`\eta_0, \dots, \eta_{K-1}` (> 0), one schedule for every trial.
    E0, W0_norm : array_like, shape () or (B,)
        :math:`E(W_0)` and :math:`\|W_0\|_F` (>= 0).
    mu0, eps0, gamma_A, H : array_like, shape () or (B,)
        :math:`\mu_0` (:func:`global_mu0`) and the constants of the chapter.

    Returns
    -------
    bound : ndarray, shape (K + 1, B)
        The bound at :math:`t = 0, \dots, K`; NaN where :math:`t < t_r`.
    t_r : ndarray, shape (B,)
        The reaching step (``inf`` where the schedule is too short).
    """
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or np.any(etas <= 0):
        raise ValueError("etas must be a 1-d array of positive steps")
    E0, mu0, eps0, gamma_A, H = (np.atleast_1d(a).astype(float) for a in
                                 _arrays(E0=E0, mu0=mu0, eps0=eps0, gamma_A=gamma_A, H=H))
    W0_norm = np.atleast_1d(np.asarray(W0_norm, dtype=float))
    if np.any(W0_norm < 0) or np.any(~np.isfinite(W0_norm)):
        raise ValueError("W0_norm must be finite and >= 0")
    if np.any(etas[:, None] > (mu0 / H)[None, :] * (1 + 1e-12)):
        raise ValueError("etas must be at most mu0/H (the step condition of thm-global-region)")
    S1 = np.concatenate([[0.0], np.cumsum(etas)])                  # sum_{s<t} eta_s, t = 0..K
    S2 = np.concatenate([[0.0], np.cumsum(etas ** 2)])
    need = 2 * np.maximum(np.log(E0 / eps0), 0.0) / mu0            # (B,)
    ok = S1[:, None] >= need[None, :] * (1 - 1e-15)
    reached = ok.any(axis=0)
    k_r = np.where(reached, np.argmax(ok, axis=0), 0)
    t_r = np.where(reached, k_r.astype(float), np.inf)
    S = S1[:, None] - S1[k_r][None, :]
    a = (1 - np.log(2)) / gamma_A + H / (2 * gamma_A) * (S2[:, None] - S2[k_r][None, :])
    N_bar = W0_norm + S1[k_r]
    N_lo = np.log(2) / gamma_A
    b = np.maximum((N_lo + a) / (N_lo + S), (N_bar + a) / (N_bar + S))
    later = reached[None, :] & (np.arange(etas.size + 1)[:, None] >= k_r[None, :])
    return np.where(later, b, np.nan), t_r


def global_gd_direction_constant(E0, W0_norm, *, eta, mu0, eps0, gamma_A, H, eta_gd_noloss, lam, R_A):
    r"""The constant :math:`\bar D` of GD's directional bound from :math:`t = 0` under (Cx)
    (book: ``cor-global-direction`` (b)), at a step :math:`\eta` within the global theorem's
    (:func:`global_steps`): with :math:`\tilde E = \min(E_0, \varepsilon_0)`,

    .. math::

        \bar D = \|W_0\|_F + \frac{1}{\gamma_A}\Big(\Big(\frac{1}{\varepsilon_0}
                 + \frac{3\eta H}{2}\Big)\tilde E - \log\frac{2\varepsilon_0}{\tilde E}\Big)
               + \frac{2}{\mu_0}\log\frac{2E_0}{\varepsilon_0}\,[E_0 > \varepsilon_0].

    Then :math:`1-\mathrm{corr}(W_t, W_{mm}) \le \bar D/\|W_t\|_F \le \gamma_A\bar D/
    \log(2\varepsilon_0/E_0 + \varepsilon_0\eta\mu_0^2t)` for every :math:`t \ge t_r`, the
    GD reaching time of :func:`t_reach`.

    Every step condition of ``thm-global-region`` (b) is checked (those of
    :func:`global_steps`): :math:`\eta \le \eta_{\mathrm{GD}}` (``eta_gd_noloss``, from
    :func:`noloss_steps`), :math:`\eta E_0H \le 1`, :math:`\eta \le \lambda\log 2/(R_A^2E_0)`
    and :math:`\eta \le \lambda^2/(3R_A^2E_0)`; a ValueError names the one that fails.

    Parameters
    ----------
    E0, W0_norm : array_like, shape () or (B,)
        :math:`E(W_0)` (> 0) and :math:`\|W_0\|_F` (>= 0).
    eta, mu0, eps0, gamma_A, H : array_like, shape () or (B,)
        The step and the constants of the chapter (> 0).
    eta_gd_noloss, lam, R_A : array_like, shape () or (B,)
        The no-loss GD step of :func:`noloss_steps`, :math:`\lambda` and :math:`R_A` (> 0),
        for the step conditions.

    Returns
    -------
    D_bar, t_r : ndarray, shape () or (B,)
    """
    E0, eta, mu0, eps0, gamma_A, H, eta_gd_noloss, lam, R_A = _arrays(
        E0=E0, eta=eta, mu0=mu0, eps0=eps0, gamma_A=gamma_A, H=H, eta_gd_noloss=eta_gd_noloss,
        lam=lam, R_A=R_A)
    W0_norm = np.asarray(W0_norm, dtype=float)
    if np.any(W0_norm < 0) or np.any(~np.isfinite(W0_norm)):
        raise ValueError("W0_norm must be finite and >= 0")
    tol = 1 + 1e-12
    if np.any(eta > eta_gd_noloss * tol):
        raise ValueError("eta must be at most eta_gd_noloss (a step condition of thm-global-region)")
    if np.any(eta * E0 * H > tol):
        raise ValueError("eta * E0 must be at most 1/H (a step condition of thm-global-region)")
    if np.any(eta * R_A ** 2 * E0 > lam * np.log(2) * tol):
        raise ValueError("eta must be at most lam log 2/(R_A^2 E0) (a step condition of "
                         "thm-global-region)")
    if np.any(3 * eta * R_A ** 2 * E0 > lam ** 2 * tol):
        raise ValueError("eta must be at most lam^2/(3 R_A^2 E0) (a step condition of "
                         "thm-global-region)")
    t_r = t_reach(E0, eps0, eta, mu0, optimizer="gd")
    Et = np.minimum(E0, eps0)
    reach = np.where(E0 > eps0, 2 / mu0 * np.log(2 * E0 / eps0), 0.0)
    D_bar = W0_norm + ((1 / eps0 + 1.5 * eta * H) * Et - np.log(2 * eps0 / Et)) / gamma_A + reach
    return D_bar, t_r


def global_gd_direction_bound(t, E0, W0_norm, *, eta, mu0, eps0, gamma_A, H, eta_gd_noloss, lam, R_A,
                              norm=None):
    r"""GD's directional bound from :math:`t = 0` under (Cx) (book: ``cor-global-direction``
    (b)): :math:`\gamma_A\bar D/\log(2\varepsilon_0/E_0 + \varepsilon_0\eta\mu_0^2t)`, or with
    the measured ``norm`` :math:`\|W_t\|_F` the sharper :math:`\bar D/\|W_t\|_F`;
    :math:`\bar D` of :func:`global_gd_direction_constant`. NaN where :math:`t < t_r`.

    Parameters
    ----------
    t : array_like, shape (K,), steps >= 0
    E0, W0_norm, eta, mu0, eps0, gamma_A, H, eta_gd_noloss, lam, R_A : array_like, shape () or (B,)
        As in :func:`global_gd_direction_constant` (which checks the step conditions).
    norm : array_like, shape (K, B), optional

    Returns
    -------
    ndarray, shape (K, B)
    """
    t = np.asarray(t, dtype=float)
    if t.ndim != 1 or np.any(t < 0):
        raise ValueError("t must be a 1-d array of steps >= 0")
    D_bar, t_r = global_gd_direction_constant(E0, W0_norm, eta=eta, mu0=mu0, eps0=eps0,
                                              gamma_A=gamma_A, H=H, eta_gd_noloss=eta_gd_noloss,
                                              lam=lam, R_A=R_A)
    D_bar, t_r = np.atleast_1d(D_bar), np.atleast_1d(t_r)
    E0, eta, mu0, eps0, gamma_A = (np.atleast_1d(np.asarray(a, dtype=float))
                                   for a in (E0, eta, mu0, eps0, gamma_A))
    later = t[:, None] >= t_r[None, :]
    if norm is not None:
        norm = np.asarray(norm, dtype=float)
        if np.any(norm <= 0):
            raise ValueError("norm must be positive")
        b = D_bar / norm
    else:
        b = gamma_A * D_bar / np.log(2 * eps0 / E0 + eps0 * eta * mu0 ** 2 * t[:, None])
    return np.where(later, b, np.nan)


def global_constants(data, opt, W_mm, W0):
    r"""The constants of the global theorem (book: ``thm-global-region``) per trial: the dict of
    :func:`constants` plus ``E0`` :math:`E(W_0)`, ``s0`` :math:`\min_i s_i(W_0)`, ``s0_lower``
    (:func:`s0_lower`), ``mu0`` :math:`\gamma_A\min(s_0, 2/3)`, ``eta_gd_noloss``,
    ``eta_ngd_noloss`` (:func:`noloss_steps`), ``eta_ngd_global``, ``eta_gd_global`` (the largest
    steps of the theorem, :func:`global_steps`) and ``cross_min`` (:func:`cross_gram_min`). All
    (B,) arrays."""
    c = constants(data, opt, W_mm)
    W0 = np.asarray(W0, dtype=float)
    n, T = data.X.shape[-3], data.X.shape[-2]
    E0 = excess_loss(data, opt, W0)
    s0 = np.exp(-np.logaddexp(0.0, metrics.log_q(data, opt, W0).max(-1)))
    mu0 = global_mu0(c["gamma_A"], s0)
    eta_gd0, eta_ngd0 = noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], n)
    eta_ngd, eta_gd = global_steps(mu0, c["H"], E0, eta_gd_noloss=eta_gd0, lam=c["lam"],
                                   R_A=c["R_A"])
    return dict(c, E0=E0, s0=s0, mu0=mu0,
                s0_lower=s0_lower(c["R_A"], T, np.linalg.norm(W0, axis=(-2, -1))),
                eta_gd_noloss=eta_gd0, eta_ngd_noloss=eta_ngd0, eta_ngd_global=eta_ngd,
                eta_gd_global=eta_gd, cross_min=cross_gram_min(data, opt))


def q_monotone(log_q_steps, excess, *, excess_floor=1e-10, tol=1e-9):
    r"""Whether every :math:`q_i` is nonincreasing at every step (book:
    ``lem-no-attention-loss``), per trial.

    A step :math:`t\to t+1` is checked while :math:`E(W_t) \ge` ``excess_floor``: below it the
    float64 gradient has lost its relative accuracy (its optimal-token coefficient
    :math:`\gamma_{i\mathrm{opt}_i} - u_i = \Delta_i(1 - s_i)` is a difference of numbers of
    order one), and the computed step no longer follows the exact one.

    Parameters
    ----------
    log_q_steps : (K, B, n) from :func:`attnsvm.runs.every_step`
    excess : (K, B)

    Returns
    -------
    holds : (B,) bool, ``log q_i(W_{t+1}) <= log q_i(W_t) + tol`` at every checked step
    checked : (B,) int, number of checked steps
    max_increase : (B,) the largest :math:`\log q_i(W_{t+1}) - \log q_i(W_t)` over checked steps
    """
    log_q_steps, excess = np.asarray(log_q_steps, dtype=float), np.asarray(excess, dtype=float)
    if log_q_steps.ndim != 3 or excess.shape != log_q_steps.shape[:2]:
        raise ValueError(f"log_q_steps must be (K, B, n) and excess (K, B), got "
                         f"{log_q_steps.shape} and {excess.shape}")
    inc = np.diff(log_q_steps, axis=0).max(-1)                  # (K-1, B)
    use = excess[:-1] >= excess_floor
    worst = np.where(use, inc, -np.inf).max(0)
    return worst <= tol, use.sum(0), worst
