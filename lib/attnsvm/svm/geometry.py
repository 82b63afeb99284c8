r"""Max-margin problems in other geometries (Part IV): l_p linear SVMs, margins in a norm and
the spectral-norm Att-SVM.

* :func:`linear_svm_p`: :math:`w_p = \arg\min \|w\|_p` s.t. :math:`y_i w^\top x_i \ge 1`
  (:math:`1 \le p \le \infty`); its margin :math:`\gamma_p = 1/\|w_p\|_p` is the largest
  value of :math:`\min_i y_i u^\top x_i` over :math:`\|u\|_p \le 1`.
* :func:`margin_in_norm`: the normalized margin :math:`\min_i y_i w^\top x_i / \|w\|`.
* :func:`att_svm_spectral`: the Att-SVM with the spectral norm :math:`\|W\|_2` (largest singular
  value) as objective, ``attnsvm.svm.att_svm(..., norm="spectral")``. (The entrywise
  :math:`\ell_p` Att-SVM is ``attnsvm.svm.att_svm(..., norm=p)``; both batched, with each
  trial's solver status, in ``attnsvm.svm.att_svm_batch(..., return_status=True)``.)
* :func:`matrix_norm` and :func:`vector_norm` (defined in :mod:`attnsvm.norms`) and :func:`att_margin_in_norm`:
  the norms of these Att-SVMs and the normalized selection margin
  :math:`\min_{i, t \ne \alpha_i} (x_{i\alpha_i} - x_{it})^\top W z_i / \|W\|` of an iterate,
  batched (the attention analogue of :func:`margin_in_norm`).
* :func:`margin_ratios` (the table :math:`\bar\gamma_q(w_T)/\gamma_q`), :func:`margin_gaps`
  (:math:`\gamma_q - \bar\gamma_q(w_t)` along a run), :func:`att_margin_gap` (the relative
  Att-SVM margin gap along a run) and :func:`compare_att_svms`, which solves the Att-SVM of
  every (run, norm) on the tokens each run selects, with each trial's solver status, and returns
  correlations and own-norm margin ratios (:class:`AttSVMComparison`); :func:`norm_key`, the
  glue-friendly name of a norm.

All problems are solved with cvxpy + Clarabel at tight tolerances; infeasibility raises
:class:`attnsvm.svm.InfeasibleError`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import as_float_array, renamed
from ..metrics import corr, nanmedian
from ..norms import matrix_norm, parse_norm, vector_norm
from ..tokens import selected_tokens, selection_margins
from ._common import InfeasibleError, SolverError, per_trial, solve_quietly
from .attsvm import att_svm, att_svm_batch

__all__ = ["linear_svm_p", "margin_in_norm", "att_svm_spectral",
           "att_margin_in_norm", "norm_key", "margin_ratios", "margin_gaps", "att_margin_gap",
           "AttSVMComparison", "compare_att_svms"]

_CLARABEL = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=400)


def margin_in_norm(w, X, y, p):
    r"""Normalized margin :math:`\min_i y_i w^\top x_i / \|w\|_p`, batched.

    Parameters
    ----------
    w : array_like, shape (..., d)
    X : array_like, shape (..., n, d)
    y : array_like, shape (..., n)
    p : float >= 1 or inf

    Returns
    -------
    ndarray, shape (...): NaN where ``w = 0``.
    """
    w = as_float_array("w", w, min_ndim=1)
    X = as_float_array("X", X, min_ndim=2)
    y = as_float_array("y", y, min_ndim=1)
    if X.shape[-1] != w.shape[-1]:
        raise ValueError(f"w has dimension {w.shape[-1]} but X has {X.shape[-1]}")
    u = (y * np.einsum("...nd,...d->...n", X, w)).min(axis=-1)
    nrm = vector_norm(w, p)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nrm > 0, u / np.where(nrm > 0, nrm, 1.0), np.nan)


def _run(pr, what):
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    try:
        solve_quietly(pr, "CLARABEL", **_CLARABEL)  # its status says "inaccurate" (below)
    except cp.error.SolverError:
        if pr.status is None:
            raise SolverError(f"Clarabel failed on the {what}") from None
    if pr.status in ("infeasible", "infeasible_inaccurate"):
        raise InfeasibleError(f"the {what} is infeasible")
    if pr.status not in ("optimal", "optimal_inaccurate"):
        raise SolverError(f"Clarabel returned status {pr.status!r} for the {what}")


def linear_svm_p(X, y, p):
    r"""The :math:`\ell_p` hard-margin linear SVM without bias.

    .. math::

        w_p = \arg\min_w \|w\|_p \quad\text{s.t.}\quad y_i w^\top x_i \ge 1\ \ \forall i,
        \qquad \gamma_p = 1/\|w_p\|_p = \max_{\|u\|_p\le1}\min_i y_i u^\top x_i .

    Parameters
    ----------
    X : array_like, shape (n, d) or (B, n, d)
    y : array_like, shape (n,) or (B, n), entries +1 or -1
    p : float in [1, inf] (or "inf")

    Returns
    -------
    w : ndarray, shape (d,) or (B, d), with smallest margin exactly 1 (rescaled).

    Raises
    ------
    InfeasibleError
        Data not separable through the origin (the trial is named).
    """
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    p = parse_norm(p, matrix=(), name="p")
    X = as_float_array("X", X, min_ndim=2, max_ndim=3)
    if X.ndim == 3:
        y = as_float_array("y", y, shape=X.shape[:2])
        return np.stack(per_trial(lambda Xb, yb: linear_svm_p(Xb, yb, p), X, y))
    n, d = X.shape
    y = as_float_array("y", y, shape=(n,))
    if not np.all(np.abs(y) == 1):
        raise ValueError("y must contain only +1 and -1")
    U = y[:, None] * X
    w = cp.Variable(d)
    pr = cp.Problem(cp.Minimize(cp.norm(w, p)), [U @ w >= 1])
    _run(pr, f"l_{p:g} linear SVM (n={n}, d={d})")
    wv = np.asarray(w.value, dtype=float)
    mmin = float((U @ wv).min())
    if mmin < 1 - 1e-6:
        raise SolverError(f"l_{p:g} SVM solution violates a margin by {1 - mmin:.2e}")
    return wv / mmin


def att_svm_spectral(X, Z, alpha):
    r"""The Att-SVM with the spectral norm:
    :math:`\min_W \|W\|_2` s.t. :math:`(x_{i\alpha_i} - x_{it})^\top W z_i \ge 1`;
    ``attnsvm.svm.att_svm(X, Z, alpha, norm="spectral")`` (Clarabel, on the subspaces spanned by
    the token differences and the queries, which the unitarily invariant norm allows).

    Parameters
    ----------
    X : array_like, shape (n, T, d); Z : (n, d); alpha : int array (n,) (e.g. ``opt``)

    Returns
    -------
    W : ndarray (d, d), smallest margin 1 (up to rounding).
    """
    return att_svm(X, Z, alpha, norm="spectral")


def att_margin_in_norm(W, X, Z, alpha, norm):
    r"""Normalized Att-SVM margin of ``W`` for the token choice ``alpha``, in a norm:

    .. math::

        \bar\gamma_{\|\cdot\|}(W) = \frac{\min_i \min_{t \ne \alpha_i}
        (x_{i\alpha_i} - x_{it})^\top W z_i}{\|W\|},

    so that the Att-SVM :math:`W^\alpha` of that norm (smallest margin 1) has
    :math:`\bar\gamma(W^\alpha) = 1/\|W^\alpha\| = \max_W \bar\gamma(W)`: the ratio
    :math:`\bar\gamma(W)/\bar\gamma(W^\alpha)` is at most 1, equals 1 exactly at the
    maximizers, and does not depend on which maximizer a solver returns.

    Parameters
    ----------
    W : array_like (..., d, d), leading axes broadcast against those of ``X``
    X : array_like (n, T, d) or (B, n, T, d); Z : (n, d) or (B, n, d)
    alpha : int array (n,) or (B, n), the selected token of each sequence
    norm : as in :func:`matrix_norm`

    Returns
    -------
    ndarray, shape (...): NaN where ``W = 0``.
    """
    m = selection_margins(W, X, Z, alpha).min(axis=(-2, -1))
    nrm = matrix_norm(W, norm)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(nrm > 0, m / np.where(nrm > 0, nrm, 1.0), np.nan)


def norm_key(q):
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
    return {k: margin_in_norm(w, X, y, q) / np.asarray(gammas[k])
            for k, q in norms.items()}


def margin_gaps(iterates, X, y, q, gamma):
    r""":math:`\gamma_q - \bar\gamma_q(w_t)` for recorded iterates (K, B, d): shape (K, B)."""
    return np.asarray(gamma)[None] - margin_in_norm(iterates, X[None], y[None], q)


@renamed(sel="alpha")
def att_margin_gap(iterates, X, Z, alpha, W_svm, norm="fro"):
    r"""Relative Att-SVM margin gap :math:`1 - \bar\gamma(W_t)/\bar\gamma(W^\alpha)` of recorded
    iterates (K, B, d, d) against the Att-SVM ``W_svm`` (B, d, d) of the same norm and token
    choice ``alpha`` (B, n) (``attnsvm.svm.att_margin_in_norm``): shape (K, B), :math:`\ge 0`, and 0
    exactly at the maximizers of the normalized margin."""
    best = att_margin_in_norm(W_svm, X, Z, alpha, norm)
    return 1.0 - att_margin_in_norm(iterates, X, Z, alpha, norm) / best[None]


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
        return float(nanmedian(getattr(self, what)[(run, norm)]))

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
            out[f"corr_{k}_{norm_key(q)}"] = self.median("corr", k, q)
            out[f"ratio_{k}_{norm_key(q)}"] = self.median("ratio", k, q)
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
    sel = {k: selected_tokens(X, np.asarray(W, dtype=float), Z) for k, W in finals.items()}
    opt_frac = {} if opt is None else {k: float(np.mean(s == np.asarray(opt))) for k, s in sel.items()}
    out = AttSVMComparison(sel=sel, opt_frac=opt_frac)
    cache = {}
    for k, qs in norms.items():
        W = np.asarray(finals[k], dtype=float)
        for q in qs:
            ck = (sel[k].tobytes(), str(q))
            if ck not in cache:
                cache[ck] = att_svm_batch(X, Z, sel[k], norm=q, return_status=True)
            Ws, ok, status = cache[ck]
            nq = "fro" if q == 2.0 else q
            c = corr(W, Ws, elem_ndim=2)
            own = att_margin_in_norm(W, X, Z, sel[k], nq)
            best = att_margin_in_norm(Ws, X, Z, sel[k], nq)
            with np.errstate(invalid="ignore", divide="ignore"):
                r = own / best
            out.svms[k, q], out.status[k, q] = Ws, status
            out.corr[k, q] = np.where(ok, c, np.nan)
            out.ratio[k, q] = np.where(ok, r, np.nan)
    return out
