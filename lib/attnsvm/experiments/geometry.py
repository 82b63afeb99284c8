r"""Optimizer geometry (Part IV, chapters 13-14): which margin, in which norm, and how fast.

The driver owns no mathematics: the step rules are :func:`attnsvm.optim_geometry.run`'s, the
max-margin problems :mod:`attnsvm.svm`'s, the fits
:mod:`attnsvm.experiments.rates`'s. It batches over trials what the chapters compare:

* linear (chapter 13): :func:`margin_ratios` (the table :math:`\bar\gamma_q(w_T)/\gamma_q`),
  :func:`margin_gaps` (:math:`\gamma_q - \bar\gamma_q(w_t)` along a run),
  :func:`sd_margin_radius` and :func:`check_sd_bound` (the bound :math:`r_t` of
  ``thm-sd-margin`` and where it holds), :func:`gap_slopes` (fitted log-log slopes of a gap),
  :func:`phase_fit` (PRGD's log-gap against its phase index, with :math:`R^2`);
* attention (chapter 14): :func:`att_margin_gap` (the relative Att-SVM margin gap along a run),
  :func:`attnsvm.tokens.selected_tokens` and :func:`compare_att_svms`, which solves
  the Att-SVM of every (run, norm) on the tokens each run selects, with each trial's solver
  status, and returns correlations and own-norm margin ratios (:class:`AttSVMComparison`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import metrics, svm, tokens
from .._checks import as_float_array, check_int, check_positive, renamed

__all__ = ["margin_ratios", "margin_gaps", "sd_margin_radius", "check_sd_bound", "gap_slopes",
           "phase_fit", "att_margin_gap", "AttSVMComparison", "compare_att_svms"]


# ----------------------------------------------------------------------------- linear

def _key(q):
    """Glue-friendly name of a norm: 1.75 -> "1_75", 2.0 -> "2", inf -> "inf"."""
    if isinstance(q, str):
        return q
    return "inf" if np.isinf(q) else f"{q:g}".replace(".", "_")


def margin_ratios(w, X, y, norms, gammas):
    r"""Per-trial :math:`\bar\gamma_q(w)/\gamma_q` for every named norm.

    Parameters
    ----------
    w : array_like (..., B, d)
    X, y : (B, n, d), (B, n)
    norms : dict name -> p (a real ``p >= 1`` or ``inf``)
    gammas : dict name -> (B,) maximum margins :math:`\gamma_q = 1/\|w_q\|_q`

    Returns
    -------
    dict name -> ndarray (..., B)
    """
    return {k: svm.margin_in_norm(w, X, y, q) / np.asarray(gammas[k])
            for k, q in norms.items()}


def margin_gaps(iterates, X, y, q, gamma):
    r""":math:`\gamma_q - \bar\gamma_q(w_t)` for recorded iterates (K, B, d): shape (K, B)."""
    return np.asarray(gamma)[None] - svm.margin_in_norm(iterates, X[None], y[None], q)


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
    r"""Check :math:`\gamma - \bar\gamma(w_t) \le r_t` of ``thm-sd-margin`` along a run of
    ``optim_geometry.run`` wherever it is non-vacuous (:math:`r_t < \gamma`).

    Returns
    -------
    holds : bool
        The inequality holds at every non-vacuous recorded (step, trial) pair.
    live : int
        The number of those pairs.
    """
    r = sd_margin_radius(run["steps"], X, norm, lr=lr, decay=decay)
    gap = margin_gaps(run["iterates"], X, y, norm, gamma)
    live = r < np.asarray(gamma)[None]
    return bool(np.all(gap[live] <= r[live] + 1e-12)), int(live.sum())


def gap_slopes(t, gap, *, tail=0.1):
    r"""Per-trial fitted log-log slope of a positive gap (K, B) on the last decade
    ``[tail * t_max, t_max]`` (:func:`attnsvm.metrics.slopes`): :math:`\mathrm{gap} \approx c\,t^{\beta}`.
    NaN for trials whose gap is not positive there."""
    return metrics.slopes(t, gap, tail=tail)


def phase_fit(t, gap, period, *, start=0, stop=None):
    r"""Fit :math:`\log \mathrm{gap} = c - \rho\,k` over the phase boundaries :math:`t = kP`
    with :math:`P \le t`, ``start`` :math:`\le t \le` ``stop`` (one point per phase of PRGD, at
    the same place of every phase, so the saw-tooth inside a phase does not enter the fit). A
    constant ``rate`` over successive windows is an exponential rate in :math:`t`; a gap
    :math:`\propto t^{-\beta}` has a per-phase rate that falls like :math:`\beta/k`.

    Returns
    -------
    rate : ndarray (B,)
        :math:`\rho` per phase (``> 0``: the gap shrinks by :math:`e^{-\rho}` per phase).
    r2 : ndarray (B,)
        :math:`R^2` of each trial's line.
    phases : int
        The number of fitted phase boundaries.
    """
    t = np.asarray(t, dtype=int)
    period = check_int("period", period, minimum=1)
    gap = as_float_array("gap", gap, ndim=2, finite=False)
    keep = (t % period == 0) & (t >= max(start, period))
    if stop is not None:
        keep &= t <= stop
    if keep.sum() < 3:
        raise ValueError(f"need at least 3 recorded phase boundaries t = k*{period} >= {start}, "
                         f"got {int(keep.sum())}")
    if np.any(~(gap[keep] > 0)):
        raise ValueError("gap must be positive at the fitted phase boundaries")
    k = t[keep] / period
    z = np.log(gap[keep])                                                 # (P, B)
    coef = np.polyfit(k, z, 1)                                            # (2, B)
    rate = -coef[0]
    res = z - (coef[0][None] * k[:, None] + coef[1][None])
    r2 = 1.0 - (res ** 2).sum(0) / ((z - z.mean(0)) ** 2).sum(0)
    return rate, r2, int(keep.sum())


# ----------------------------------------------------------------------------- attention

@renamed(sel="alpha")
def att_margin_gap(iterates, X, Z, alpha, W_svm, norm="fro"):
    r"""Relative Att-SVM margin gap :math:`1 - \bar\gamma(W_t)/\bar\gamma(W^\alpha)` of recorded
    iterates (K, B, d, d) against the Att-SVM ``W_svm`` (B, d, d) of the same norm and token
    choice ``alpha`` (B, n) (``attnsvm.svm.att_margin_in_norm``): shape (K, B), :math:`\ge 0`, and 0
    exactly at the maximizers of the normalized margin."""
    best = svm.att_margin_in_norm(W_svm, X, Z, alpha, norm)
    return 1.0 - svm.att_margin_in_norm(iterates, X, Z, alpha, norm) / best[None]


@dataclass
class AttSVMComparison:
    r"""Final iterates of several runs against the Att-SVMs of several norms, per trial.

    For run ``k`` and norm ``q`` (keys ``(k, q)``), on the tokens ``sel[k]`` that the run's
    final iterate selects: the Att-SVM ``svms[k, q]`` (B, d, d) and its solver ``status``
    (B,) (``attnsvm.svm.att_svm_batch(..., return_status=True)``), the correlation ``corr``
    (B,) of the iterate with it, and the own-norm margin ratio
    ``ratio`` (B,) :math:`\bar\gamma_q(W_T)/\bar\gamma_q(W^{\alpha}_q) \le 1`
    (``attnsvm.svm.att_margin_in_norm``), which does not depend on which minimizer the solver
    returns when the norm is not strictly convex. Trials without a solution give NaN.
    """

    sel: dict
    opt_frac: dict
    svms: dict = field(default_factory=dict)
    status: dict = field(default_factory=dict)
    corr: dict = field(default_factory=dict)
    ratio: dict = field(default_factory=dict)

    def median(self, what, run, norm):
        """NaN-safe median over trials of ``corr`` or ``ratio`` for (run, norm)."""
        return float(metrics.nanmedian(getattr(self, what)[(run, norm)]))

    def flagged(self):
        """Every solve whose status is not ``"optimal"``: a list of ``(run, norm, trial,
        status)``, each named (``"optimal_inaccurate"``, ``"infeasible"`` or ``"failed"``)."""
        return [(k, q, int(b), str(s[b])) for (k, q), s in self.status.items()
                for b in np.flatnonzero(s != "optimal")]

    def summary(self):
        """Medians of ``corr_<run>_<norm>`` and ``ratio_<run>_<norm>``, ``optfrac_<run>`` and
        the counts of flagged (run, norm, trial) comparisons: ``n_inaccurate`` (status
        ``"optimal_inaccurate"``) and ``n_failed`` (``"failed"`` or ``"infeasible"``)."""
        out = {}
        for (k, q) in self.corr:
            out[f"corr_{k}_{_key(q)}"] = self.median("corr", k, q)
            out[f"ratio_{k}_{_key(q)}"] = self.median("ratio", k, q)
        for k, f in self.opt_frac.items():
            out[f"optfrac_{k}"] = f
        flags = self.flagged()
        out["n_inaccurate"] = sum(s == "optimal_inaccurate" for *_, s in flags)
        out["n_failed"] = sum(s in ("failed", "infeasible") for *_, s in flags)
        return out


def compare_att_svms(X, Z, finals, norms, *, opt=None):
    r"""Compare final iterates with the Att-SVMs of several norms on the tokens they select.

    Parameters
    ----------
    X : array_like (B, n, T, d); Z : (B, n, d)
    finals : dict run -> ndarray (B, d, d), the final iterates
    norms : dict run -> list of norms (a real ``p >= 1``, ``inf``, ``"fro"``, ``"spectral"``,
        ``"nuc"``); 2.0 is the Frobenius norm
    opt : int array (B, n), optional
        The optimal tokens; gives ``opt_frac`` (fraction of sequences where a run selects them).

    Returns
    -------
    AttSVMComparison
        Identical selections are solved once per norm (runs that select the same tokens share
        their Att-SVMs).
    """
    X = as_float_array("X", X, ndim=4)
    Z = as_float_array("Z", Z, shape=X.shape[:2] + X.shape[3:])
    unknown = sorted(set(norms) - set(finals))
    if unknown:
        raise ValueError(f"norms names runs {unknown} that are not in finals {sorted(finals)}")
    sel = {k: tokens.selected_tokens(X, np.asarray(W, dtype=float), Z) for k, W in finals.items()}
    opt_frac = {} if opt is None else {k: float(np.mean(s == np.asarray(opt))) for k, s in sel.items()}
    out = AttSVMComparison(sel=sel, opt_frac=opt_frac)
    cache = {}
    for k, qs in norms.items():
        W = np.asarray(finals[k], dtype=float)
        for q in qs:
            ck = (sel[k].tobytes(), str(q))
            if ck not in cache:
                cache[ck] = svm.att_svm_batch(X, Z, sel[k], norm=q, return_status=True)
            Ws, ok, status = cache[ck]
            nq = "fro" if q == 2.0 else q
            c = metrics.corr(W, Ws, elem_ndim=2)
            own = svm.att_margin_in_norm(W, X, Z, sel[k], nq)
            best = svm.att_margin_in_norm(Ws, X, Z, sel[k], nq)
            with np.errstate(invalid="ignore", divide="ignore"):
                r = own / best
            out.svms[k, q], out.status[k, q] = Ws, status
            out.corr[k, q] = np.where(ok, c, np.nan)
            out.ratio[k, q] = np.where(ok, r, np.nan)
    return out
