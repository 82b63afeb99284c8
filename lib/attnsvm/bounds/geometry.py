r"""Bounds of Part IV's geometries, as functions (chapters 13 and 14).

* NGD's :math:`O(1/t)` margin rate on separable linear data (book: ``thm-ngd-margin-rate``):
  :func:`ngd_margin_step`, :func:`ngd_margin_gap_bound`; idealized progressive rescaling (book:
  ``prop-prgd-ideal``): :func:`prgd_ideal_gap_bound`;
* the steepest-descent margin bound of ``thm-sd-margin`` (chapter 13): :func:`sd_margin_radius` and
  :func:`check_sd_bound` (where it holds along a run);
* steepest descent on the equal-score model in its own norm (book: ``thm-sd-att``, chapter 14):
  :func:`sd_att_constants`, :func:`sd_att_margin_bound`;
* Adam's stability constant (chapter 13): the step :math:`t_\epsilon` predicted from
  :math:`\beta_2` and what :math:`\epsilon` changes before and after it (:func:`adam_eps_split`).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.special import lambertw

from .. import metrics, svm, tokens
from .._checks import as_float_array, check_positive
from ..losses import linear_log_grad_norm
from ..norms import dual_exponent, dual_norm, matrix_norm
from .model import _arrays, constants, lifted_factors

__all__ = ["ngd_margin_step", "ngd_margin_gap_bound", "prgd_ideal_gap_bound", "sd_att_constants",
           "sd_att_margin_bound", "sd_margin_radius", "check_sd_bound",
           "adam_eps_split"]


def ngd_margin_step(gamma, R):
    r"""The largest step of the NGD margin-rate theorem (book: ``thm-ngd-margin-rate``): the
    :math:`\eta` with :math:`\eta\,e^{2\eta R} = \gamma/(2R^2)`, i.e.
    :math:`\eta = W_0(\gamma/R)/(2R)` (:math:`W_0` the principal Lambert function); every
    :math:`\eta` at most this satisfies the theorem's condition :math:`\eta e^{2\eta R} \le
    \gamma/(2R^2)`.

    Parameters
    ----------
    gamma : array_like (> 0), the :math:`\ell_2` maximum margin :math:`\gamma`
    R : array_like (> 0), :math:`\max_i\|x_i\|_2`
    """
    gamma, R = _arrays(gamma=gamma, R=R)
    if np.any(gamma > R * (1 + 1e-12)):
        raise ValueError("gamma must be at most R (the margin of a unit vector is at most max |x_i|)")
    return np.real(lambertw(gamma / R)) / (2 * R)


def ngd_margin_gap_bound(etas, n, *, gamma, R):
    r"""NGD's margin-gap bound on separable linear data (book: ``thm-ngd-margin-rate``;
    exponential loss, :math:`\ell_2`, :math:`w_0 = 0`, steps :math:`\eta_s e^{2\eta_sR} \le
    \gamma/(2R^2)`):

    .. math::

        \gamma - \bar\gamma(w_t) \le \frac{\log n}{S_t},\qquad S_t = \sum_{s<t}\eta_s,

    at every :math:`t` with :math:`\gamma S_t \ge \log n`; :math:`\log n/(\eta t)` for a
    constant step.

    Parameters
    ----------
    etas : array_like, shape (K,), the steps (> 0), one schedule for every trial; every step
        must satisfy the theorem's condition for every trial (else ValueError naming ``etas``)
    n : int, number of data points (>= 1)
    gamma, R : array_like, shape () or (B,), the :math:`\ell_2` maximum margin and
        :math:`\max_i\|x_i\|_2` (> 0)

    Returns
    -------
    ndarray, shape (K + 1,) + shape of ``gamma`` and ``R`` broadcast: the bound at
    :math:`t = 0, \dots, K`; NaN where :math:`\gamma S_t < \log n` (the theorem says nothing
    there; in particular at :math:`t = 0`).
    """
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or np.any(etas <= 0):
        raise ValueError("etas must be a 1-d array of positive steps")
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    gamma, R = np.broadcast_arrays(*_arrays(gamma=gamma, R=R))
    e = etas.reshape((-1,) + (1,) * gamma.ndim)
    if np.any(e * np.exp(2 * e * R) > gamma / (2 * R ** 2) * (1 + 1e-12)):
        raise ValueError("etas must satisfy eta e^{2 eta R} <= gamma/(2 R^2) (the step condition "
                         "of thm-ngd-margin-rate)")
    S = np.concatenate([[0.0], np.cumsum(etas)]).reshape((-1,) + (1,) * gamma.ndim)
    ok = gamma * S >= np.log(n)
    return np.where(ok, np.log(n) / np.where(ok, S, 1.0), np.nan)


def prgd_ideal_gap_bound(R, n, delta=0.0, *, gamma):
    r"""The margin-gap bound of idealized progressive rescaling (book: ``prop-prgd-ideal``;
    exponential loss, :math:`\ell_2`): any :math:`w` with :math:`\|w\|_2 \le R` and
    :math:`\log\mathcal{L}(w) \le \log\min_{\|v\|_2\le R}\mathcal{L}(v) + \delta` has

    .. math::

        \gamma - \bar\gamma(w) \le \frac{\log n + \delta}{R}
        \qquad\text{whenever } R\gamma \ge \log n + \delta ;

    at :math:`R_k = c^k` and exact inner minimization (:math:`\delta = 0`) this is
    :math:`c^{-k}\log n`.

    Parameters
    ----------
    R : array_like (> 0), the radius
    n : int, number of data points (>= 1)
    delta : array_like (>= 0), the inner loop's excess of :math:`\log\mathcal{L}`
    gamma : array_like (> 0), the :math:`\ell_2` maximum margin

    Returns
    -------
    ndarray, the shape of ``R``, ``delta`` and ``gamma`` broadcast: the bound; NaN where
    :math:`R\gamma < \log n + \delta` (the proposition says nothing there).
    """
    R, gamma = _arrays(R=R, gamma=gamma)
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    delta = np.asarray(delta, dtype=float)
    if np.any(delta < 0) or np.any(~np.isfinite(delta)):
        raise ValueError("delta must be finite and >= 0")
    b = np.log(n) + delta
    return np.where(R * gamma >= b, b / R, np.nan)


def sd_margin_radius(steps, X, norm, *, lr, decay):
    r"""The bound :math:`r_t = (\log n + \tfrac12 B^2 Q_t)/S_t` of ``thm-sd-margin`` at the
    recorded ``steps`` (:math:`S_t = \sum_{s<t}\eta_s`, :math:`Q_t = \sum_{s<t}\eta_s^2
    e^{\eta_s B}`, :math:`\eta_s = \mathrm{lr}\,(s+1)^{-\mathrm{decay}}`,
    :math:`B = \max_i\|x_i\|_*` per trial).

    Parameters
    ----------
    steps : int array (K,), recorded steps (``t = 0`` gives ``inf``)
    X : array_like (B, n, d)
    norm : 1, 2 or inf (the steepest-descent norm; its dual is used for ``B``)

    Returns
    -------
    ndarray (K, B)
    """
    X = as_float_array("X", X, ndim=3)
    lr = check_positive("lr", lr)
    decay = check_positive("decay", decay, allow_zero=True)
    steps = np.asarray(steps, dtype=int)
    dual = {1.0: np.inf, 2.0: 2.0, np.inf: 1.0}.get(float(norm))
    if dual is None:
        raise ValueError(f"norm must be 1, 2 or inf, got {norm!r}")
    Bq = np.linalg.norm(X, ord=dual, axis=-1).max(axis=-1)                  # (B,)
    eta = lr * (np.arange(max(int(steps.max()), 1)) + 1.0) ** (-decay)
    S = np.r_[0.0, np.cumsum(eta)][steps]                                   # (K,)
    Q = np.concatenate([np.zeros((1, Bq.size)),
                        np.cumsum(eta[:, None] ** 2 * np.exp(eta[:, None] * Bq[None]), axis=0)])
    Q = Q[steps]                                                           # (K, B)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (np.log(X.shape[1]) + Bq[None] ** 2 * Q / 2) / S[:, None]
    return np.where(S[:, None] > 0, r, np.inf)


def check_sd_bound(run, X, y, norm, gamma, *, lr, decay):
    r"""Check :math:`\gamma - \bar\gamma(w_t) \le r_t` of ``thm-sd-margin`` along a run (a dict
    of recorded ``steps`` and ``iterates``, as the chapters record them) wherever it is
    non-vacuous (:math:`r_t < \gamma`).

    Returns
    -------
    holds : bool
        The inequality holds at every non-vacuous recorded (step, trial) pair.
    live : int
        The number of those pairs.
    """
    r = sd_margin_radius(run["steps"], X, norm, lr=lr, decay=decay)
    gap = svm.margin_gaps(run["iterates"], X, y, norm, gamma)
    live = r < np.asarray(gamma)[None]
    return bool(np.all(gap[live] <= r[live] + 1e-12)), int(live.sum())


def sd_att_constants(data, opt, W_norm, norm):
    r"""The constants of the steepest-descent theorem on the equal-score model (book:
    ``thm-sd-att``), per trial, for the entrywise :math:`\ell_p` norm (``norm`` a real
    :math:`p \ge 1`, ``"inf"`` or ``"fro"``) or the spectral norm (``"spectral"``).

    ``gamma`` :math:`\gamma_{\|\cdot\|} = 1/\|W^{\|\cdot\|}_{mm}\|` (``W_norm``: the own-norm
    Att-SVM of each trial, (B, d, d)); ``B`` :math:`\max_{i,t\ne\mathrm{opt}_i}\|A_{it}\|_*`, with
    :math:`\|u z^\top\|_* = \|u\|_q\|z\|_q` for the entrywise dual :math:`\ell_q` and
    :math:`\|u\|_2\|z\|_2` for the nuclear norm (rank one); ``H`` :math:`H_{\|\cdot\|} =
    3B^2\max_i(3b^+_i/b^-_i + \Delta_i/(4b^-_i))` (the :math:`H` of :func:`constants` with
    :math:`R_A` replaced by :math:`B`); ``mu`` :math:`\frac23\gamma_{\|\cdot\|}`; ``eps0`` as in
    :func:`constants`; ``eta_max`` :math:`\min(\log 2/B,\ \mu/H_{\|\cdot\|})`.
    """
    q = dual_exponent(norm)
    W_norm = np.asarray(W_norm, dtype=float)
    U, Z = lifted_factors(data, opt)
    W_norm = W_norm.reshape(U.shape[0], U.shape[-1], U.shape[-1])
    c = constants(data, opt, W_norm)
    _, _, mask, _ = tokens.opt_scores(data, opt)
    A = torch.as_tensor(np.einsum("bntd,bne->bntde", U, Z))
    dn = dual_norm(A, "spectral" if q == "nuc" else (2.0 if norm == "fro" else norm), batch_ndim=3)
    B = np.where(mask, dn.numpy(), 0.0).max(axis=(1, 2))
    gamma = 1.0 / matrix_norm(W_norm, norm)
    H = c["H"] * (B / c["R_A"]) ** 2
    mu = 2.0 / 3.0 * gamma
    return dict(gamma=gamma, B=B, H=H, mu=mu, eps0=c["eps0"],
                eta_max=np.minimum(np.log(2) / B, mu / H))


def sd_att_margin_bound(etas, E_t0, norm_t0, *, gamma, eps0, H, B):
    r"""The own-norm margin-gap bound of normalized steepest descent on the equal-score model
    (book: ``thm-sd-att``), from a step :math:`t_0` with :math:`E(W_{t_0}) \le \varepsilon_0`,
    for steps :math:`\eta_s \le \min(\log 2/B,\ \mu/H)`, :math:`\mu = \frac23\gamma`:

    .. math::

        \gamma - \bar\gamma(W_t) \le r_t = \frac{\gamma N_0 + c_0 + \tfrac12 H Q_t}{N_0 + S_t},
        \quad c_0 = \frac{E(W_{t_0})}{\varepsilon_0} - \log\frac{2\varepsilon_0}{E(W_{t_0})},

    with :math:`N_0 = \|W_{t_0}\|`, :math:`S_t = \sum_{t_0\le s<t}\eta_s`,
    :math:`Q_t = \sum_{t_0\le s<t}\eta_s^2` (all norms the method's own).

    Parameters
    ----------
    etas : array_like (K,), the steps from :math:`t_0` on (> 0, within the theorem's bound)
    E_t0, norm_t0 : float, :math:`E(W_{t_0})` (in :math:`(0, \varepsilon_0]`) and :math:`N_0`
    gamma, eps0, H, B : float, from :func:`sd_att_constants` (one trial)

    Returns
    -------
    ndarray (K + 1,): :math:`r_t` at :math:`t = t_0, \dots, t_0 + K`.
    """
    etas = np.asarray(etas, dtype=float)
    if etas.ndim != 1 or np.any(etas <= 0):
        raise ValueError("etas must be a 1-d array of positive steps")
    gamma, eps0, H, B = (float(check_positive(k, v)) for k, v in
                         (("gamma", gamma), ("eps0", eps0), ("H", H), ("B", B)))
    if np.any(etas > min(np.log(2) / B, 2 * gamma / (3 * H)) * (1 + 1e-12)):
        raise ValueError("etas must be at most min(log 2/B, mu/H) (the step condition of thm-sd-att)")
    E_t0, N0 = float(E_t0), float(check_positive("norm_t0", norm_t0))
    if not 0 < E_t0 <= eps0:
        raise ValueError(f"E_t0 must lie in (0, eps0] (the region), got {E_t0}")
    S = np.concatenate([[0.0], np.cumsum(etas)])
    Q = np.concatenate([[0.0], np.cumsum(etas ** 2)])
    c0 = E_t0 / eps0 - np.log(2 * eps0 / E_t0)
    return (gamma * N0 + c0 + 0.5 * H * Q) / (N0 + S)


#: chapter 13, Adam's stability constant: the records at which :math:`\epsilon` is at most this
#: fraction of the largest gradient entry of the :math:`\epsilon = 0` run count as before
#: :math:`t_\epsilon`
_EPS_SMALL = 1 / 30


def adam_eps_split(run0, run_eps, X, y, norms, gam, w_2, *, eps, beta2):
    r"""What Adam's stability constant changes, split at :math:`t_\epsilon` (chapter 13).

    ``run0`` and ``run_eps`` are the constant-step Adam runs with :math:`\epsilon = 0` and
    ``eps`` (same start, same records). :math:`G_t = \|\nabla L(w_t)\|_\infty` of the
    :math:`\epsilon = 0` run (:func:`attnsvm.losses.linear_log_grad_norm`) decays like
    :math:`\beta_2^{t/2}` (observed: once the steps are bounded by the second moment's memory,
    :math:`\sqrt{\hat v_t}` falls by :math:`\beta_2^{1/2}` per step and the gradient with it), so
    :math:`t_\epsilon`, the step at which :math:`G_t` reaches :math:`\epsilon`, is read off the
    records where it is reached and predicted where it is not:
    :math:`t_\epsilon = T + 2\log(G_T/\epsilon)/\log(1/\beta_2)`.

    Returns
    -------
    dict with ``t_eps`` (B,), ``measured`` (B,) bool (reached within the run),
    ``rate_ratio`` (B,) (fitted slope of :math:`\log G_t` over the second half of the run divided
    by :math:`\tfrac12\log\beta_2`), ``noop_diff`` (largest difference of one trial's margin
    ratio, any norm, at the records with :math:`\epsilon \le G_t/30`), ``noop_pairs`` (their
    number of (record, trial) pairs), ``past`` (B,) bool (:math:`t_\epsilon \le T`) and ``gain``
    (B,) (:math:`\mathrm{corr}(w^\epsilon_T, w_2) - \mathrm{corr}(w^0_T, w_2)`).
    """
    t = np.asarray(run0["steps"], dtype=float)
    lg = linear_log_grad_norm(run0["iterates"], X, y)                  # (K, B), eps = 0 run
    rate = 0.5 * np.log(beta2)                                         # predicted d log G / dt
    late = t >= t[-1] / 2
    fitted = np.polyfit(t[late], lg[late], 1)[0]
    le = np.log(eps)
    crossed = lg <= le
    t_eps = t[-1] + (lg[-1] - le) / -rate                              # predicted beyond the run
    for b in np.flatnonzero(crossed.any(0)):
        k = int(np.argmax(crossed[:, b]))
        t_eps[b] = t[k] if k == 0 else np.interp(le, lg[[k, k - 1], b], t[[k, k - 1]])
    r0 = svm.margin_ratios(run0["iterates"], X, y, norms, gam)
    r1 = svm.margin_ratios(run_eps["iterates"], X, y, norms, gam)
    diff = np.max([np.abs(r1[q] - r0[q]) for q in norms], axis=0)      # (K, B)
    before = lg >= le - np.log(_EPS_SMALL)
    gain = (metrics.corr(run_eps["iterates"][-1], w_2, elem_ndim=1)
            - metrics.corr(run0["iterates"][-1], w_2, elem_ndim=1))
    return {"t_eps": t_eps, "measured": crossed.any(0), "rate_ratio": fitted / rate,
            "noop_diff": float(diff[before].max()) if before.any() else float("nan"),
            "noop_pairs": int(before.sum()), "past": t_eps <= t[-1], "gain": gain}
