r"""Finite-time rates on the equal-score model, as functions (chapter 9, book: ``ch-rates``).

* :func:`direction_from_margin`: for any :math:`W` whose smallest Att-SVM margin
  :math:`m_{\min}(W) = \min_{i,t\ne\mathrm{opt}_i}\langle A_{it}, W\rangle` is positive,
  :math:`\mathrm{corr}(W, W_{mm}) \ge \gamma(W)/\gamma_A` with :math:`\gamma(W) = m_{\min}(W)/\|W\|_F`
  and :math:`\gamma_A = 1/\|W_{mm}\|_F` (book: ``lem-dir-margin``);
* :func:`ngd_direction_bound`: the explicit, decaying upper bound on
  :math:`1 - \mathrm{corr}(W_t, W_{mm})` along NGD, from the first step :math:`t_0` in the region
  :math:`E \le \varepsilon_0`, for any steps below the theorem's (book: ``cor-ngd-direction``);
* :func:`gd_error_constant` and :func:`gd_direction_bound`: GD's logarithmic upper bound from the
  first step :math:`t_0` at which the hypotheses of the GD rate theorem hold (book:
  ``thm-gd-direction``; also the capped Polyak step once capped, ``cor-polyak-cap-direction``);
* NGD's directional bound without the curvature floor (book: ``thm-ngd-no-floor``):
  :func:`ngd_floorless_constants`, :func:`ngd_floorless_bound`;
* theory curves: NGD's norm bounds (:func:`ngd_norm_bounds`), the invariance floor
  (:func:`orth_component`, :func:`orth_floor`), the Polyak cap threshold
  (:func:`polyak_cap_threshold`), the (L - L*) Polyak step's progress
  (:func:`polyak_star_progress_bound`);
* the theorems' hypotheses and bounds checked along a recorded run from each trial's first step
  :math:`t_0` in the region: :func:`gd_step_condition`, :func:`ngd_linear_holds`,
  :func:`gd_inverse_excess_holds`, :func:`direction_bound_from_t0`.

The squared orders under strict complementarity are :mod:`attnsvm.bounds.squared`.
"""
from __future__ import annotations

import numpy as np

from .. import tokens
from .model import _arrays, lifted_factors

__all__ = ["direction_from_margin", "ngd_direction_bound", "gd_error_constant", "gd_direction_bound",
           "ngd_norm_bounds", "orth_component", "orth_floor", "polyak_cap_threshold",
           "polyak_star_progress_bound", "gd_step_condition", "ngd_linear_holds", "gd_inverse_excess_holds",
           "direction_bound_from_t0", "ngd_floorless_constants", "ngd_floorless_bound"]


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
        The constants of the chapter (:func:`constants`).

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


def _gd_args(E_t0, eta, eps0, H):
    E_t0, eps0, H = (np.asarray(a, dtype=float) for a in (E_t0, eps0, H))
    eta = np.asarray(eta, dtype=float)
    if np.any(eta <= 0):
        raise ValueError("eta must be positive")
    if np.any(E_t0 <= 0) or np.any(E_t0 > eps0):
        raise ValueError("E_t0 must lie in (0, eps0] (the hypothesis of the bound)")
    if np.any(eta * E_t0 * H > 1 + 1e-12):
        raise ValueError("eta * E_t0 must be at most 1/H (the step condition of the bound)")
    return E_t0, eta, eps0, H


def gd_error_constant(E_t0, *, eta, eps0, H):
    r"""The summed error of GD's directional bound (book: ``thm-gd-direction``),

    .. math::

        C = \Big(\frac{1}{\varepsilon_0} + \frac{3\eta H}{2}\Big)E(W_{t_0}) \le \frac52,

    which bounds :math:`\log E_t - \log E_{t_0} + \gamma_A\sum_{s<t}\|W_{s+1} - W_s\|_F` for
    every :math:`t \ge t_0`.

    Parameters
    ----------
    E_t0 : array_like, :math:`E(W_{t_0})` in :math:`(0, \varepsilon_0]`
    eta : array_like, the step (> 0), with :math:`\eta E(W_{t_0}) \le 1/H`
    eps0, H : array_like, the constants of the chapter (:func:`constants`)
    """
    E_t0, eta, eps0, H = _gd_args(E_t0, eta, eps0, H)
    return (1 / eps0 + 1.5 * eta * H) * E_t0


def gd_direction_bound(steps, E_t0, norm_t0, *, eta, mu, eps0, gamma_A, H, norm=None):
    r"""GD's logarithmic directional bound (book: ``thm-gd-direction``): in the equal-score
    model, if at :math:`t_0` the hypotheses of the GD rate theorem hold
    (:math:`E_0 = E(W_{t_0}) \le \varepsilon_0` and :math:`\eta E_0 \le \min(1/H,
    \lambda\log 2/R_A^2, \lambda^2/(3R_A^2))`; only :math:`E_0 \le \varepsilon_0` and
    :math:`\eta E_0 H \le 1` are checked here, :func:`gd_step_condition`
    checks them all), then for :math:`t \ge t_0`

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le \frac{D}{\|W_t\|_F}
        \le \frac{\gamma_A D}{\log\big(2\varepsilon_0/E_0 + \varepsilon_0\eta\mu^2(t - t_0)\big)},
        \qquad D = \|W_{t_0}\|_F - \frac{\log(2\varepsilon_0/E_0)}{\gamma_A} + \frac{C}{\gamma_A} \ge 0,

    with :math:`C` of :func:`gd_error_constant`: :math:`O(1/\log t)`. The same holds for the
    capped Polyak step from the step at which it is capped, with :math:`\eta = \eta_{\max}`.

    Parameters
    ----------
    steps : array_like, shape (K,) or (K, B)
        :math:`t - t_0 \ge 0`.
    E_t0, norm_t0 : array_like, shape () or (B,)
        :math:`E(W_{t_0})` and :math:`\|W_{t_0}\|_F` (> 0).
    eta : array_like, the step (> 0).
    mu, eps0, gamma_A, H : array_like, shape () or (B,)
        The constants of the chapter (:func:`constants`).
    norm : array_like, optional
        The measured :math:`\|W_t\|_F`, broadcastable to the result: then the sharper first
        bound :math:`D/\|W_t\|_F` is returned.

    Returns
    -------
    ndarray, shape of ``steps`` broadcast with the constants
        The bound at :math:`t = t_0 + ` ``steps``.
    """
    steps = np.asarray(steps, dtype=float)
    if steps.ndim not in (1, 2) or not np.all(steps >= 0):
        raise ValueError("steps must be a 1-d or 2-d array of t - t0 >= 0")
    E_t0, eta, eps0, H = _gd_args(E_t0, eta, eps0, H)
    norm_t0, mu, gamma_A = (np.asarray(a, dtype=float) for a in (norm_t0, mu, gamma_A))
    if np.any(norm_t0 <= 0):
        raise ValueError("norm_t0 must be positive")
    if np.any(gamma_A <= 0) or np.any(mu <= 0):
        raise ValueError("gamma_A and mu must be positive")
    if steps.ndim == 1 and np.broadcast(E_t0, norm_t0, eta, mu, eps0, gamma_A, H).ndim:
        steps = steps[:, None]                                 # one grid, per-trial constants
    log_ratio = np.log(2 * eps0 / E_t0)
    if np.any(gamma_A * norm_t0 < log_ratio * (1 - 1e-9)):
        raise ValueError("norm_t0 must be at least log(2 eps0/E_t0)/gamma_A (no W in the "
                         "equal-score model has a smaller norm at that excess risk)")
    D = norm_t0 - log_ratio / gamma_A + gd_error_constant(E_t0, eta=eta, eps0=eps0, H=H) / gamma_A
    if norm is not None:
        norm = np.asarray(norm, dtype=float)
        if np.any(norm <= 0):
            raise ValueError("norm must be positive")
        return D / norm + 0 * steps
    return gamma_A * D / np.log(2 * eps0 / E_t0 + eps0 * eta * mu ** 2 * steps)


def ngd_floorless_constants(eta, *, R_A, gamma_A, Delta_max, b_minus, b_plus):
    r"""The constants of NGD's floor-free directional bound (book: ``thm-ngd-no-floor``), for
    steps at most ``eta``:

    .. math::

        \omega = 3\eta R_A + 2\Delta_{\max}\sinh(\eta R_A),\qquad
        \vartheta = \frac{2\eta R_A^2}{\gamma_A}e^{\Delta_{\max} + 2\omega},

    .. math::

        c_r = \max(2, \Delta_{\max}e^{\Delta_{\max}}),\quad
        c_3 = 2R_A^2\Big(\frac{\Delta_{\max}}{4b^-} + \frac{2b^+}{b^-}\Big),\quad
        c_\psi = c_rR_A + \frac{\eta}{2}\big(e^{\Delta_{\max}}c_rR_A^2 + c_3\big),

    with :math:`b^- = \min_ib^-_i`, :math:`b^+ = \max_ib^+_i`. The theorem needs
    :math:`\vartheta \le 1` (and :math:`\eta \le \min(\log 2/R_A, \mu/H)`).

    Returns
    -------
    theta, c_psi : ndarray
    """
    eta, R_A, gamma_A, Delta_max, b_minus, b_plus = _arrays(
        eta=eta, R_A=R_A, gamma_A=gamma_A, Delta_max=Delta_max, b_minus=b_minus, b_plus=b_plus)
    omega = 3 * eta * R_A + 2 * Delta_max * np.sinh(eta * R_A)
    theta = 2 * eta * R_A ** 2 / gamma_A * np.exp(Delta_max + 2 * omega)
    c_r = np.maximum(2.0, Delta_max * np.exp(Delta_max))
    c3 = 2 * R_A ** 2 * (Delta_max / (4 * b_minus) + 2 * b_plus / b_minus)
    c_psi = c_r * R_A + eta / 2 * (np.exp(Delta_max) * c_r * R_A ** 2 + c3)
    return theta, c_psi


def ngd_floorless_bound(etas, E_t0, norm_t0, *, mu, eps0, gamma_A, H, R_A, Delta_max, b_minus,
                        b_plus):
    r"""NGD's directional bound without the curvature floor (book: ``thm-ngd-no-floor``): in the
    equal-score model, for steps :math:`\eta_s \le \bar\eta` with
    :math:`\bar\eta \le \min(\log 2/R_A, \mu/H)` and :math:`\vartheta(\bar\eta) \le 1`
    (:func:`ngd_floorless_constants`), from :math:`E(W_{t_0}) \le \varepsilon_0`,

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le
        \frac{\|W_{t_0}\|_F - \log(2\varepsilon_0/E(W_{t_0}))/\gamma_A
              + \frac{2c_\psi E(W_{t_0})}{\gamma_A\mu\varepsilon_0}(1 - P_t)}
             {\|W_{t_0}\|_F + \sum_{s<t}\eta_s},

    :math:`P_t = \prod_{s<t}(1 - \eta_s\mu/2)`: :math:`O(1/t)` at a constant step, where
    :func:`ngd_direction_bound` stops at :math:`\eta H/(2\gamma_A)`.

    Parameters
    ----------
    etas : array_like, shape (K,), the steps from :math:`t_0` (one schedule for every trial)
    E_t0, norm_t0 : array_like, shape () or (B,)
    mu, eps0, gamma_A, H, R_A, Delta_max, b_minus, b_plus : array_like, shape () or (B,)
        The constants of the chapter (:func:`constants`).

    Returns
    -------
    ndarray, shape (K + 1, B): the bound at :math:`t = t_0, \dots, t_0 + K`.
    """
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or np.any(etas <= 0):
        raise ValueError("etas must be a 1-d array of positive steps")
    E_t0, norm_t0, mu, eps0, gamma_A, H, R_A = (np.atleast_1d(np.asarray(a, dtype=float))
                                                for a in (E_t0, norm_t0, mu, eps0, gamma_A, H, R_A))
    if np.any(E_t0 <= 0) or np.any(E_t0 > eps0):
        raise ValueError("E_t0 must lie in (0, eps0] (the hypothesis of the bound)")
    if np.any(norm_t0 <= 0):
        raise ValueError("norm_t0 must be positive")
    eta_bar = etas.max()
    if np.any(eta_bar > np.minimum(np.log(2) / R_A, mu / H) * (1 + 1e-12)):
        raise ValueError("etas must be at most min(log 2/R_A, mu/H)")
    theta, c_psi = ngd_floorless_constants(eta_bar, R_A=R_A, gamma_A=gamma_A, Delta_max=Delta_max,
                                           b_minus=b_minus, b_plus=b_plus)
    if np.any(theta > 1 + 1e-12):
        raise ValueError("etas too large: the variance condition theta <= 1 fails")
    S1 = np.concatenate([[0.0], np.cumsum(etas)])[:, None]
    P = np.exp(np.concatenate([np.zeros((1, mu.size)),
                               np.cumsum(np.log1p(-etas[:, None] * mu[None, :] / 2), axis=0)]))
    num = (norm_t0 - np.log(2 * eps0 / E_t0) / gamma_A
           + 2 * c_psi * E_t0 / (gamma_A * mu * eps0) * (1 - P))
    return num / (norm_t0 + S1)


def ngd_norm_bounds(t, *, eta, kappa, W0_norm, W0_proj=None):
    r"""NGD's norm bounds of the chapter: lower :math:`\langle W_0,\hat W_{mm}\rangle + \eta\kappa t`
    (``W0_proj``; default :math:`-\|W_0\|`) and upper :math:`\|W_0\| + \eta t`; shape (K,) or,
    for per-trial ``kappa`` (B,), (K, B)."""
    t = np.asarray(t, dtype=float)
    kappa = np.asarray(kappa, dtype=float)
    if kappa.ndim:
        t = t[:, None]
    p = -np.asarray(W0_norm, dtype=float) if W0_proj is None else np.asarray(W0_proj, dtype=float)
    return p + eta * kappa * t, W0_norm + eta * t


def orth_component(data, opt, W):
    r""":math:`P^\perp W`, the component of ``W`` (B, d, d) off
    :math:`\mathcal{A} = \mathrm{span}\{A_{it}\}` (per trial), which GD, NGD and the Polyak
    steps never change (the invariance proposition); returns (B, d, d)."""
    U, Z = lifted_factors(data, opt)
    _, _, mask, _ = tokens.opt_scores(data, opt)
    W = np.asarray(W, dtype=float).reshape(U.shape[0], U.shape[-1], U.shape[-1])
    out = np.empty_like(W)
    for b in range(U.shape[0]):
        A = np.einsum("ktd,ke->ktde", U[b], Z[b])[mask[b]].reshape(-1, U.shape[-1] ** 2)
        Q, _ = np.linalg.qr(A.T)
        w = W[b].ravel()
        out[b] = (w - Q @ (Q.T @ w)).reshape(W.shape[1:])
    return out


def orth_floor(data, opt, W0, norms):
    r"""The floor of the invariance proposition: :math:`1-\sqrt{1 - r_t^2}` with
    :math:`r_t = \|P^\perp W_0\|_F/\|W_t\|_F`, :math:`P^\perp` the projection off
    :math:`\mathcal{A} = \mathrm{span}\{A_{it}\}` (:func:`orth_component`). ``W0`` (B, d, d),
    ``norms`` (K, B); returns (K, B)."""
    perp = np.linalg.norm(orth_component(data, opt, W0), axis=(-2, -1))
    r = np.minimum(perp[None, :] / np.asarray(norms), 1.0)
    return -np.expm1(0.5 * np.log1p(-r ** 2))


def polyak_cap_threshold(consts, eta_max):
    r"""Excess risk below which the Polyak step is capped at ``eta_max`` (proved bound):
    :math:`E \le \lambda\sqrt{\mathcal{L}^\star/\eta_{\max}}/R_A`, per trial."""
    return consts["lam"] * np.sqrt(consts["L_star"] / eta_max) / consts["R_A"]


def polyak_star_progress_bound(t, consts, W0_proj, *, eta=1.0):
    r"""Lower bound of the (L - L*) Polyak proposition on the projection
    :math:`\langle W_t, W_{mm}\rangle/\|W_{mm}\|_F`: :math:`\langle W_0, \hat W_{mm}\rangle +
    \eta\kappa\lambda t/R_A` (``eta`` the multiplier of the step), shape (K, B) for ``t`` (K,)
    and per-trial constants (``consts`` from :func:`constants`) and ``W0_proj`` (B,)."""
    t = np.asarray(t, dtype=float)[:, None]
    return (np.asarray(W0_proj, dtype=float)[None, :]
            + eta * consts["kappa"] * consts["lam"] / consts["R_A"] * t)


def gd_step_condition(consts, eta, excess):
    r"""The hypotheses of the GD theorem at a recorded point: :math:`E \le \varepsilon_0` and
    :math:`\eta E \le \min(1/H, \lambda\log 2/R_A^2, \lambda^2/(3R_A^2))`; ``excess`` (K, B),
    returns (K, B) bool."""
    R2 = consts["R_A"] ** 2
    cap = np.minimum(np.minimum(1 / consts["H"], consts["lam"] * np.log(2) / R2),
                     consts["lam"] ** 2 / (3 * R2))
    return (excess <= consts["eps0"]) & (eta * excess <= cap)


def _from_t0(t, t0, *series):
    r"""Align the records on each trial's ``t0`` (record steps, NaN for none): returns ``dt``
    (K, B), :math:`t - t_0` where ``later`` and NaN elsewhere; ``later`` (K, B) bool,
    :math:`t \ge t_0` with ``t0`` finite; and the value of each (K, B) series at ``t0`` ((B,),
    NaN where ``t0`` is NaN)."""
    t, t0 = np.asarray(t, dtype=float), np.asarray(t0, dtype=float)
    ok = np.isfinite(t0)
    k0 = np.minimum(np.searchsorted(t, np.where(ok, t0, t[0])), len(t) - 1)
    if np.any(ok & (t[k0] != t0)):
        raise ValueError("t0 must hold record steps of t (or NaN)")
    later = ok[None, :] & (t[:, None] >= np.where(ok, t0, np.inf)[None, :])
    dt = np.where(later, t[:, None] - np.where(ok, t0, 0.0)[None, :], np.nan)
    vals = [np.where(ok, np.asarray(x, dtype=float)[k0, np.arange(t0.size)], np.nan) for x in series]
    return dt, later, vals


def ngd_linear_holds(t, excess, t0, eta, consts):
    r"""Whether :math:`E(W_t) \le (1 - \eta\mu/2)^{t - t_0}E(W_{t_0})` at every record
    :math:`t \ge t_0` (the NGD linear-rate theorem), per trial ((B,) bool; False where
    ``t0`` is NaN). ``excess`` (K, B) on the record grid ``t`` (K,), ``t0`` (B,) record steps."""
    dt, later, (E0,) = _from_t0(t, t0, excess)
    bound = np.log(E0) + dt * np.log1p(-eta * consts["mu"] / 2)
    ok = np.where(later, np.log(excess) <= bound + 1e-9, True)
    return np.isfinite(t0) & ok.all(axis=0)


def gd_inverse_excess_holds(t, excess, t0, eta, consts):
    r"""Whether the two bounds of the GD theorem on :math:`1/E(W_t)` hold at every record
    :math:`t \ge t_0`, per trial ((B,) bool; False where ``t0`` is NaN)."""
    dt, later, (E0,) = _from_t0(t, t0, excess)
    inv = 1 / np.asarray(excess, dtype=float)
    lo = 1 / E0 + eta * consts["mu"] ** 2 / 2 * dt
    hi = 1 / E0 + 3 * eta * consts["R_A"] ** 2 / consts["lam"] ** 2 * dt
    ok = np.where(later, (inv >= lo * (1 - 1e-9)) & (inv <= hi * (1 + 1e-9)), True)
    return np.isfinite(t0) & ok.all(axis=0)


def direction_bound_from_t0(t, t0, metrics, consts, *, optimizer, eta, measured_norm=False):
    r"""A proved upper bound on :math:`1 - \mathrm{corr}(W_t, W_{mm})` along a recorded run, from
    each trial's :math:`t_0`, and whether it holds, for all trials at once.

    * ``optimizer="ngd"``: NGD's decaying bound at the constant step ``eta``
      (:func:`ngd_direction_bound`; book ``cor-ngd-direction``), with ``t0`` a
      record from which :math:`E \le \varepsilon_0` and ``eta`` at most the theorem's step;
    * ``optimizer="gd"``: GD's logarithmic bound at the step ``eta``
      (:func:`gd_direction_bound`; book ``thm-gd-direction``), with ``t0`` a record
      from which :func:`gd_step_condition` holds; for the capped Polyak step once it is capped,
      ``eta`` is the cap (``cor-polyak-cap-direction``). With ``measured_norm=True`` the
      theorem's sharper first bound :math:`D/\|W_t\|_F` is evaluated with the recorded norms.

    Parameters
    ----------
    t : (K,) record steps; t0 : (B,) record steps (NaN: the trial is skipped)
    metrics : dict with (K, B) arrays ``excess``, ``norm``, ``one_minus_corr``
        (:func:`attnsvm.runs.trajectory_metrics`)
    consts : dict of (B,) constants (:func:`constants`)
    optimizer : {"ngd", "gd"}; eta : float > 0
    measured_norm : bool, ``"gd"`` only: the bound :math:`D/\|W_t\|_F` instead of the
        deterministic :math:`\gamma_AD/\log(2\varepsilon_0/E_0 + \varepsilon_0\eta\mu^2(t-t_0))`

    Returns
    -------
    dict
        ``bound`` (K, B), NaN before ``t0``; ``later`` (K, B) bool, the (trial, record) pairs
        from ``t0`` on; ``holds`` (K, B) bool, :math:`1-\mathrm{corr} \le` ``bound`` there (False
        elsewhere); ``fraction``, the fraction of ``later`` pairs where it holds (NaN if none);
        ``first`` and ``final`` (B,), the bound at ``t0`` and at the last record (NaN where ``t0``
        is NaN).
    """
    if optimizer not in ("ngd", "gd"):
        raise ValueError(f"optimizer must be 'ngd' or 'gd', got {optimizer!r}")
    if measured_norm and optimizer != "gd":
        raise ValueError("measured_norm applies to optimizer='gd' only")
    if not (np.isscalar(eta) and eta > 0):
        raise ValueError(f"eta must be a positive number, got {eta!r}")
    dt, later, (E0, N0) = _from_t0(t, t0, metrics["excess"], metrics["norm"])
    ok = np.isfinite(np.asarray(t0, dtype=float))
    bound = np.full(dt.shape, np.nan)
    if ok.any():
        kw = {k: consts[k][ok] for k in ("mu", "eps0", "gamma_A", "H")}
        k = np.where(later[:, ok], dt[:, ok], 0.0)
        if optimizer == "ngd":
            full = ngd_direction_bound(np.full(int(k.max()), float(eta)), E0[ok], N0[ok], **kw)
            vals = np.take_along_axis(full, k.astype(int), axis=0)
        else:
            norm = (np.where(later[:, ok], np.asarray(metrics["norm"], dtype=float)[:, ok], 1.0)
                    if measured_norm else None)                  # records before t0 do not count
            vals = gd_direction_bound(k, E0[ok], N0[ok], eta=float(eta), norm=norm, **kw)
        bound[:, ok] = np.where(later[:, ok], vals, np.nan)
    omc = np.asarray(metrics["one_minus_corr"], dtype=float)
    holds = later & (omc <= np.where(later, bound, -np.inf) + 1e-12)
    k0 = np.argmax(later, axis=0)
    first = np.where(ok, bound[k0, np.arange(bound.shape[1])], np.nan)
    return dict(bound=bound, later=later, holds=holds,
                fraction=float(holds.sum() / later.sum()) if later.any() else float("nan"),
                first=first, final=np.where(ok, bound[-1], np.nan))
