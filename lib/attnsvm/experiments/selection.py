r"""Attention as token selection: the experiments of Part II on the nuclear norm and on prompt
attention (multi-token selection, the chapter "Beyond a single token", is
:mod:`attnsvm.experiments.beyond`).

Everything that loops over trials, calls a solver or trains lives here; the notebooks only
call these functions and plot.

Data models
-----------
* ``attnsvm.data.unit_instances``: the setting of "Transformers as SVMs" (tokens, queries and head
  drawn :math:`N(0, I)` and normalized to unit length, labels random signs).
* ``attnsvm.data.prompt_instances``: a planted token-selection model with a controlled *score gap*
  for prompt attention (``d = 2`` gives the two-dimensional picture).

Selections and SVMs
-------------------
* :func:`attnsvm.tokens.selected_tokens`, ``attnsvm.metrics.selected_sets``: the tokens attention selects at a given
  parameter (argmax of the scores; the set of tokens keeping softmax mass).
* the SVMs of the selections: ``attnsvm.svm.att_svm_batch`` (Frobenius or nuclear, for
  ``opt``, any choice :math:`\alpha` or token sets), infeasible trials flagged, identical
  selections solved once.
* ``attnsvm.metrics.balanced_factors``, ``factor_cost``: the factorization that attains
  :math:`\|W\|_* = \min_{KQ^\top = W} (\|K\|_F^2 + \|Q\|_F^2)/2`.

Experiments
-----------
* :func:`compare_w_kq`, :func:`kq_study` (chapter "(K,Q) and the nuclear norm");
* :func:`prompt_joint`, :func:`prompt_loss_sweep`, :func:`prompt_gap_sweep`, :func:`prompt_study`
  (chapter "Prompt attention").
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np

from .._checks import check_int
from ..data import AttnData, prompt_instances, stream, unit_instances
from .. import metrics as _metrics
from .. import svm as _svm
from .. import tokens as _tokens
from .. import train as _train

__all__ = [
    "KQComparison",
    "kq_study",
    "compare_w_kq",
    "PromptRun",
    "PromptGapSweep",
    "PromptLossComparison",
    "prompt_loss_comparison",
    "LearnedReferences",
    "prompt_joint",
    "prompt_loss_sweep",
    "prompt_gap_sweep",
    "PromptStudy",
    "prompt_study",
]


# ----------------------------------------------------------------------------- chapter: (K,Q)
@dataclass
class KQComparison:
    """Result of :func:`compare_w_kq` (arrays over ``B`` trials).

    Attributes
    ----------
    data : AttnData
    opt : (B, n) optimal tokens
    selected : dict model -> (B, n) tokens selected at the end ("W", "KQ")
    svm : dict (norm, basis) -> (B, d, d); norm "fro"/"nuc", basis "opt", "W" or "KQ" (the
        tokens selected at the end by that model)
    feasible : dict (norm, basis) -> (B,) bool
    history : dict model -> History (with snapshots of the main matrix)
    corr : dict (model, norm, basis) -> (K, B) correlation of the iterate with that SVM
    steps : (K,) record steps
    """

    data: AttnData
    opt: np.ndarray
    selected: dict
    svm: dict
    feasible: dict
    history: dict
    corr: dict
    steps: np.ndarray
    config: dict = field(default_factory=dict)
    unpenalized: object = None

    def final_corr(self, model, norm, basis=None):
        """Final correlation per trial; ``basis`` defaults to the model's own selection.
        NaN on trials whose SVM is infeasible."""
        c = self.corr[(model, norm, basis or model)][-1].copy()
        c[~self.feasible[(norm, basis or model)]] = np.nan
        return c

    def singular_values(self, which):
        """Singular values normalized by the largest, (B, d): ``which`` is a key of
        :attr:`svm` or ``"iter_W"`` / ``"iter_KQ"`` (the final iterates)."""
        M = self.history[which[5:]].params["W"] if isinstance(which, str) else self.svm[which]
        s = np.linalg.svd(M, compute_uv=False)
        with np.errstate(invalid="ignore", divide="ignore"):
            return s / s[:, :1]

    def summary(self, unpenalized=None):
        """The headline numbers (NaN-safe medians over trials; an infeasible SVM counts as NaN).

        Final correlations with the SVMs of each model's own final selection (``corr_w_fro``,
        ``corr_kq_nuc``, ``corr_w_nuc``, ``corr_kq_fro``) and of opt (``corr_w_fro_opt``,
        ``corr_kq_nuc_opt``), the minima ``min_corr_w_fro`` and ``min_corr_kq_nuc``;
        ``frac_opt_w`` and ``frac_opt_kq`` (final selection equal to opt); ``n_infeasible``
        (over all SVMs); on the ``rank_trials`` trials where both SVMs of opt exist,
        ``rank_fro_median``, ``rank_nuc_median``, ``rank_fro_max`` and ``frac_rank_gap`` (the
        nuclear SVM of strictly smaller rank); for (K,Q), ``kq_cost_ratio`` (the factor cost
        over the nuclear norm of the product) and ``kq_imbalance``. With ``unpenalized`` (the
        same runs without the penalty; default the result's own ``unpenalized``, see
        :func:`kq_study`), ``corr_kq_nuc_nopen``.
        """
        med = _metrics.nanmedian
        unpenalized = self.unpenalized if unpenalized is None else unpenalized

        def nanmin(x):
            x = np.asarray(x, dtype=float)
            return float(np.nanmin(x)) if np.any(~np.isnan(x)) else float("nan")

        out = {
            "corr_w_fro": med(self.final_corr("W", "fro")),
            "corr_kq_nuc": med(self.final_corr("KQ", "nuc")),
        }
        if unpenalized is not None:
            out["corr_kq_nuc_nopen"] = med(unpenalized.final_corr("KQ", "nuc"))
        out.update({
            "corr_w_nuc": med(self.final_corr("W", "nuc")),
            "corr_kq_fro": med(self.final_corr("KQ", "fro")),
            "corr_w_fro_opt": med(self.final_corr("W", "fro", "opt")),
            "corr_kq_nuc_opt": med(self.final_corr("KQ", "nuc", "opt")),
            "min_corr_w_fro": nanmin(self.final_corr("W", "fro")),
            "min_corr_kq_nuc": nanmin(self.final_corr("KQ", "nuc")),
            "frac_opt_w": float(np.mean((self.selected["W"] == self.opt).all(axis=1))),
            "frac_opt_kq": float(np.mean((self.selected["KQ"] == self.opt).all(axis=1))),
            "n_infeasible": int(sum((~f).sum() for f in self.feasible.values())),
        })
        both = self.feasible[("fro", "opt")] & self.feasible[("nuc", "opt")]
        rank_fro = _svm.rank(self.svm[("fro", "opt")][both])
        rank_nuc = _svm.rank(self.svm[("nuc", "opt")][both])
        out["rank_trials"] = int(both.sum())
        if both.any():
            out["rank_fro_median"] = float(np.median(rank_fro))
            out["rank_nuc_median"] = float(np.median(rank_nuc))
            out["rank_fro_max"] = int(rank_fro.max())
            out["frac_rank_gap"] = float(np.mean(rank_nuc < rank_fro))
        else:
            out.update(rank_fro_median=float("nan"), rank_nuc_median=float("nan"),
                       rank_fro_max=-1, frac_rank_gap=float("nan"))
        h = self.history["KQ"]
        nuc = np.linalg.svd(h.params["W"], compute_uv=False).sum(-1)
        out["kq_cost_ratio"] = med(_metrics.factor_cost(h.params["K"], h.params["Q"]) / nuc)
        out["kq_imbalance"] = med(_metrics.imbalance(h.params["K"], h.params["Q"]))
        return out

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``), from :meth:`summary`.

        * ``kq_slower``: the median final correlation of :math:`KQ^\top` with
          :math:`W^*_{mm}` is below that of :math:`W` with :math:`W_{mm}` (after the same number
          of steps the factored iterate is the farther from its SVM; one horizon, not a rate;
          the medians, since at the papers' 100 instances the smallest ``W`` correlation is an
          outlier, 0.91, below every (K, Q) one);
        * ``own_norm_closer``: each model's crossed median correlation (with the other
          norm's SVM) is at least 0.05 below its matched one (each iterate is closer to the SVM
          of its own norm);
        * ``kq_balanced``: the final factors are nearly balanced (median relative imbalance
          below 0.05) and pay the nuclear norm to within 1% (median cost ratio below 1.01).
        """
        s = self.summary()
        gaps = (s["corr_w_fro"] - s["corr_w_nuc"], s["corr_kq_nuc"] - s["corr_kq_fro"])
        return {
            "kq_slower": (bool(s["corr_kq_nuc"] < s["corr_w_fro"]),
                          f"median corr KQ vs W*_mm {s['corr_kq_nuc']:.4f}, "
                          f"W vs W_mm {s['corr_w_fro']:.4f} (smallest: KQ "
                          f"{s['min_corr_kq_nuc']:.4f}, W {s['min_corr_w_fro']:.4f})"),
            "own_norm_closer": (bool(min(gaps) >= 0.05),
                                   f"matched minus crossed median corr: W {gaps[0]:.4f}, "
                                   f"KQ {gaps[1]:.4f} (>= 0.05)"),
            "kq_balanced": (bool(s["kq_imbalance"] < 0.05 and s["kq_cost_ratio"] < 1.01),
                            f"imbalance {s['kq_imbalance']:.4f} (< 0.05), cost ratio "
                            f"{s['kq_cost_ratio']:.5f} (< 1.01)"),
        }


def _svm_cache(X, Z, sels, norm):
    """Solve each distinct (trial, selection) once."""
    B = X.shape[0]
    out, feas = {}, {}
    cache = {}
    for key, sel in sels.items():
        W = np.zeros((B,) + (X.shape[-1],) * 2)
        f = np.zeros(B, dtype=bool)
        for b in range(B):
            ck = (b, tuple(int(t) for t in sel[b]))
            if ck not in cache:
                Wb, fb = _svm.att_svm_batch(X[b:b + 1], Z[b:b + 1], sel[b:b + 1], norm=norm)
                cache[ck] = (Wb[0], fb[0])
            W[b], f[b] = cache[ck]
        out[(norm, key)], feas[(norm, key)] = W, f
    return out, feas


def compare_w_kq(data, *, steps=2000, lr=0.1, optimizer="ngd_param", m=None, init_scale=0.01,
                 penalty=0.0, n_records=60, seed=0, device="auto"):
    r"""Train the ``W`` and the ``(K, Q)`` parameterizations on the same instances and compare
    their final directions with the Frobenius and nuclear-norm SVMs.

    Both models start from small random parameters (scale ``init_scale``; ``(K,Q)`` cannot
    start at zero, a saddle), use the same step rule (default ``"ngd_param"``: each
    parameter's gradient divided by its own Frobenius norm, step ``lr``) and the logistic
    loss. ``penalty`` adds :math:`\epsilon(\|K\|_F^2 + \|Q\|_F^2)` to the ``(K, Q)`` run only
    (the earlier public code used :math:`\epsilon \approx 2.2\times10^{-16}`; by the variational
    form of the nuclear norm it is a vanishing nuclear-norm penalty). SVMs are solved for three
    selections per trial: ``opt``, and the tokens selected at the end by each model.

    Returns
    -------
    KQComparison
    """
    steps = check_int("steps", steps, minimum=1)
    X, Z, y, v = data.X, data.Z, data.y, data.v
    opt = _tokens.optimal_tokens(X, y, v)
    hist = {}
    for model in ("W", "KQ"):
        kw = dict(m=m, penalty=penalty) if model == "KQ" else {}
        hist[model] = _train.fit(data, model=model, optimizer=optimizer, lr=lr, steps=steps,
                                 init="random", init_scale=init_scale, n_records=n_records,
                                 snapshots=True, seed=seed, device=device, **kw)
    sel = {"opt": opt}
    for model in ("W", "KQ"):
        sel[model] = _tokens.selected_tokens(X, hist[model].params["W"], Z)
    svms, feas = {}, {}
    for norm in ("fro", "nuc"):
        s, f = _svm_cache(X, Z, sel, norm)
        svms.update(s)
        feas.update(f)
    corr = {}
    for model in ("W", "KQ"):
        snaps = hist[model].snapshots                       # (K, B, d, d)
        for (norm, basis), R in svms.items():
            corr[(model, norm, basis)] = _metrics.corr(snaps, R[None])
    return KQComparison(data=data, opt=opt, selected={k: sel[k] for k in ("W", "KQ")}, svm=svms,
                        feasible=feas, history=hist, corr=corr, steps=hist["W"].steps,
                        config=dict(steps=steps, lr=lr, optimizer=optimizer, m=m,
                                    init_scale=init_scale, penalty=penalty, seed=seed))


def kq_study(n, T, d, *, trials, steps=2000, lr=0.1, init_scale=0.1, penalty=2.2e-16, seed=0,
             device="auto", **kw):
    r"""Chapter 5: :func:`compare_w_kq` on :func:`attnsvm.data.unit_instances` ``(n, T, d)``
    with the penalty ``penalty``, and the same runs without it (the result's ``unpenalized``,
    quoted by its summary as ``corr_kq_nuc_nopen``). Returns a :class:`KQComparison` whose
    ``config`` adds ``n, T, d, trials``."""
    data = unit_instances(n, T, d, trials=trials, seed=seed)
    common = dict(steps=steps, lr=lr, init_scale=init_scale, seed=seed, device=device, **kw)
    res = compare_w_kq(data, penalty=penalty, **common)
    res0 = compare_w_kq(data, penalty=0.0, **common)
    return replace(res, unpenalized=res0, config=dict(n=n, T=T, d=d, trials=trials, **res.config))


# ----------------------------------------------------------------------------- chapter: prompt
class LearnedReferences(NamedTuple):
    """Result of :meth:`PromptRun.learned_references` (arrays over ``B`` trials)."""

    corr_p: np.ndarray
    corr_v: np.ndarray
    opt_T: np.ndarray
    corr_p_relaxed: np.ndarray
    support: np.ndarray

    def relaxed_closer(self, tol=1e-6):
        """(B,) bool: the relaxed p-SVM is closer to ``p`` than the strict one by more than
        ``tol`` (False where either is undefined, and where every sequence is a support
        sequence: then both are the same SVM)."""
        ok = ~np.isnan(self.corr_p) & ~np.isnan(self.corr_p_relaxed)
        return ok & (np.nan_to_num(self.corr_p_relaxed) > np.nan_to_num(self.corr_p) + tol)

    def strict_closer(self, tol=1e-6):
        """(B,) bool: the strict p-SVM is closer by more than ``tol``."""
        ok = ~np.isnan(self.corr_p) & ~np.isnan(self.corr_p_relaxed)
        return ok & (np.nan_to_num(self.corr_p) > np.nan_to_num(self.corr_p_relaxed) + tol)


@dataclass
class PromptRun:
    r"""Result of :func:`prompt_joint` (arrays over ``B`` trials).

    Attributes
    ----------
    history : History (snapshots of p; final p and v in ``history.params``)
    selected : (B, n) tokens selected by the final p
    planted : (B, n) or None, the planted relevant tokens
    p_mm, v_mm : (B, d) SVMs built from ``selected`` (``p_svm`` and ``head_svm``); zeros where
        infeasible (``feasible_p``, ``feasible_v``)
    centroid : (B, d) :math:`\frac1n\sum_i y_i x_{i\alpha_i}` on the selected tokens
    corr_p : (K, B) corr of :math:`p_t` with ``p_mm``
    corr_v, corr_v_centroid : (K, B) corr of :math:`v_t` with ``v_mm`` / ``centroid``
        (only when the head is trained; recorded only at the end otherwise)
    """

    history: object
    selected: np.ndarray
    planted: np.ndarray | None
    p_mm: np.ndarray
    v_mm: np.ndarray
    feasible_p: np.ndarray
    feasible_v: np.ndarray
    centroid: np.ndarray
    corr_p: np.ndarray
    corr_v: np.ndarray | None
    corr_v_centroid: np.ndarray | None
    steps: np.ndarray
    config: dict = field(default_factory=dict)

    def final(self, what):
        """Final value per trial of ``"corr_p"``, ``"corr_v"`` or ``"corr_v_centroid"``,
        NaN where the corresponding SVM is infeasible."""
        c = getattr(self, what)[-1].copy()
        bad = ~(self.feasible_p if what == "corr_p" else self.feasible_v)
        c[bad] = np.nan
        return c

    def learned_references(self, data):
        r"""Correlations of the final ``p`` and ``v`` with the SVMs of the tokens optimal under
        the learned head :math:`v_T` (``opt_T``): the strict p-SVM (``p_svm``), the relaxed
        p-SVM (margin 1 only on the support sequences of the head SVM, ``p_svm(...,
        support=head_support(...))``) and the head SVM (``head_svm``).

        Returns
        -------
        LearnedReferences
            ``corr_p``, ``corr_p_relaxed``, ``corr_v`` (B,) with NaN where that SVM is
            infeasible, ``opt_T`` (B, n) and ``support`` (B, n) bool (all False where the head
            SVM is infeasible). ``corr_p, corr_v, opt_T = ...[:3]`` unpacks the first three.
        """
        p, vT = self.history.params["p"], self.history.params["v"]
        opt_T = _tokens.optimal_tokens(data.X, data.y, vT)                  # (B, n)
        B, n = opt_T.shape
        cp, cr, cv = (np.full(B, np.nan) for _ in range(3))
        sup = np.zeros((B, n), dtype=bool)
        for b in range(B):
            X, y = data.X[b], data.y[b]
            try:
                cp[b] = _metrics.corr(p[b], _svm.p_svm(X, opt_T[b]))
            except _svm.InfeasibleError:
                pass
            try:
                cv[b] = _metrics.corr(vT[b], _svm.head_svm(X, y, opt_T[b]))
                sup[b] = _svm.head_support(X, y, opt_T[b])
                cr[b] = _metrics.corr(p[b], _svm.p_svm(X, opt_T[b], support=sup[b]))
            except _svm.InfeasibleError:
                pass
        return LearnedReferences(cp, cv, opt_T, cr, sup)

    def summary(self, data=None):
        """The headline numbers (NaN-safe medians over trials): ``corr_p`` (final, with
        :math:`p_{mm}`), ``opt_mass`` (final mean mass on opt), ``frac_planted`` (selected =
        planted, NaN without planted tokens), ``n_infeasible`` (SVMs of p and v); when the head
        is trained, ``corr_v``, ``corr_vc`` (with the max-margin head and the centroid) and,
        given ``data``, ``corr_p_learned`` (strict p-SVM), ``corr_p_relaxed`` (relaxed p-SVM),
        ``corr_v_learned``, ``frac_selected_is_opt`` and the trial counts ``n_relaxed_closer``,
        ``n_strict_closer``, ``n_all_support`` (every sequence a support sequence: the two
        coincide) (:meth:`~attnsvm.experiments.selection.PromptRun.learned_references`)."""
        med = _metrics.nanmedian
        h = self.history
        out = {"corr_p": med(self.final("corr_p")),
               "opt_mass": med(h.final("opt_mass")) if h.opt_mass is not None else float("nan"),
               "frac_planted": (float(np.mean(self.selected == self.planted))
                                if self.planted is not None else float("nan")),
               "n_infeasible": int((~self.feasible_p).sum() + (~self.feasible_v).sum())}
        if self.config.get("train_v"):
            out["corr_v"] = med(self.final("corr_v"))
            out["corr_vc"] = med(self.final("corr_v_centroid"))
            if data is not None:
                ref = self.learned_references(data)
                out["corr_p_learned"] = med(ref.corr_p)
                out["corr_p_relaxed"] = med(ref.corr_p_relaxed)
                out["corr_v_learned"] = med(ref.corr_v)
                out["frac_selected_is_opt"] = float(np.mean(self.selected == ref.opt_T))
                out["n_relaxed_closer"] = int(ref.relaxed_closer().sum())
                out["n_strict_closer"] = int(ref.strict_closer().sum())
                out["n_all_support"] = int(ref.support.all(axis=1).sum())
        return out


    def claims(self, data):
        r"""Checked claims of a joint run (``name -> (holds, detail)``) on the two references
        of :meth:`learned_references`. With an exponentially tailed loss (logistic,
        exponential): ``relaxed_sometimes_closer``, the relaxed p-SVM is the closer reference
        in at least one trial and the strict one in at least one (neither is *the* limit of
        every run). With the correlation loss (no tail: every sequence keeps weight 1, so every
        sequence pushes :math:`p`): ``relaxed_never_closer``, the relaxed p-SVM is the closer
        reference in no trial and the strict one in at least one (in any other the two
        correlations agree to ``1e-6``).

        The sentences on where the directions go (medians of the final correlations):

        * head fixed: ``p_near_pmm``, :math:`\mathrm{corr}(p_T, p_{mm}) \ge 0.99`;
        * head trained, logistic or exponential loss: ``v_near_vmm``, :math:`v_T` is closer to
          :math:`v_{mm}` than to the centroid by at least 0.02;
        * head trained, correlation loss: ``v_near_centroid``, the reverse, and
          :math:`\mathrm{corr}(v_T, c) \ge 0.999`;
        * head trained (``data`` given): ``selected_mostly_opt``, the selected token is the one
          optimal under :math:`v_T` in at least 3/4 of the sequences."""
        own = self._direction_claims(data)
        if not self.config.get("train_v"):
            return own
        ref = self.learned_references(data)
        nr, ns = int(ref.relaxed_closer().sum()), int(ref.strict_closer().sum())
        both = int(np.sum(~np.isnan(ref.corr_p) & ~np.isnan(ref.corr_p_relaxed)))
        detail = (f"relaxed closer in {nr}, strict closer in {ns}, equal (to 1e-6) in "
                  f"{both - nr - ns} of {both} trials")
        if self.config.get("loss") == "correlation":
            return {"relaxed_never_closer": (nr == 0 and ns > 0, detail), **own}
        return {"relaxed_sometimes_closer": (nr > 0 and ns > 0, detail), **own}

    def _direction_claims(self, data):
        """The direction claims of :meth:`claims` (from :meth:`summary`)."""
        s = self.summary(data)
        if not self.config.get("train_v"):
            return {"p_near_pmm": (bool(s["corr_p"] >= 0.99),
                                   f"median corr(p, p_mm) {s['corr_p']:.4f} (>= 0.99)")}
        v, vc = s["corr_v"], s["corr_vc"]
        detail = f"median corr(v, v_mm) {v:.4f}, corr(v, centroid) {vc:.4f}"
        if self.config.get("loss") == "correlation":
            out = {"v_near_centroid": (bool(vc >= v + 0.02 and vc >= 0.999),
                                       detail + " (centroid >= v_mm + 0.02, centroid >= 0.999)")}
        else:
            out = {"v_near_vmm": (bool(v >= vc + 0.02), detail + " (v_mm >= centroid + 0.02)")}
        if data is not None:
            f = s["frac_selected_is_opt"]
            out["selected_mostly_opt"] = (bool(f >= 0.75),
                                          f"selected token optimal under v_T in {f:.3f} (>= 0.75)")
        return out


def prompt_joint(data, *, planted=None, train_v=True, loss="logistic", optimizer="ngd_param",
                 lr=0.1, steps=2000, v_init_scale=0.01, n_records=60, seed=0, device="auto"):
    r"""Train prompt attention :math:`f(X) = v^\top X^\top\mathrm{softmax}(Xp)` from
    :math:`p_0 = 0`, jointly with the head when ``train_v`` (then :math:`v_0` is random with
    scale ``v_init_scale``, drawn from the named stream ``"prompt-head-init"`` of trial ``b``),
    and compare the final
    directions with :math:`p_{mm}` and :math:`v_{mm}` built from the tokens selected at the end.

    Returns
    -------
    PromptRun
    """
    X, y = data.X, data.y
    B, n, T, d = X.shape
    if train_v:
        v0 = np.stack([stream(seed, "prompt-head-init", b).standard_normal(d) * v_init_scale
                       for b in range(B)])
        init = {"p": np.zeros((B, d)), "v": v0}
    else:
        init = "zeros"
    h = _train.fit(data, model="prompt", train_v=train_v, loss=loss, optimizer=optimizer,
                   lr=lr, steps=steps, init=init, n_records=n_records, snapshots=True,
                   seed=seed, device=device)
    p = h.params["p"]
    sel = _tokens.selected_tokens(X, p)
    p_mm = np.zeros((B, d))
    v_mm = np.zeros((B, d))
    fp = np.zeros(B, dtype=bool)
    fv = np.zeros(B, dtype=bool)
    cen = np.zeros((B, d))
    for b in range(B):
        try:
            p_mm[b] = _svm.p_svm(X[b], sel[b])
            fp[b] = True
        except _svm.InfeasibleError:
            pass
        try:
            v_mm[b] = _svm.head_svm(X[b], y[b], sel[b])
            fv[b] = True
        except _svm.InfeasibleError:
            pass
        cen[b] = (y[b][:, None] * X[b][np.arange(n), sel[b]]).mean(0)
    corr_p = _metrics.corr(h.snapshots, p_mm[None], elem_ndim=1)
    if train_v:
        vfin = h.params["v"]
        # v is not snapshotted by the engine: its trajectory is recorded only at the end
        corr_v = _metrics.corr(vfin, v_mm, elem_ndim=1)[None]
        corr_vc = _metrics.corr(vfin, cen, elem_ndim=1)[None]
    else:
        corr_v = corr_vc = None
    return PromptRun(history=h, selected=sel, planted=planted, p_mm=p_mm, v_mm=v_mm,
                     feasible_p=fp, feasible_v=fv, centroid=cen, corr_p=corr_p, corr_v=corr_v,
                     corr_v_centroid=corr_vc, steps=h.steps,
                     config=dict(train_v=train_v, loss=loss, optimizer=optimizer, lr=lr,
                                 steps=steps, seed=seed))


def prompt_loss_sweep(data, *, losses=("logistic", "exponential", "correlation"), **kw):
    """:func:`prompt_joint` for each loss; returns ``{loss: PromptRun}``."""
    return {loss: prompt_joint(data, loss=loss, **kw) for loss in losses}


@dataclass
class PromptLossComparison:
    """The ch06 loss comparison: the same instances trained with the head fixed and jointly,
    one :class:`PromptRun` per loss in each (:func:`prompt_loss_sweep`).

    :meth:`summary` collects each loss's numbers under a ``_<loss>`` suffix: ``corr_p_fixed``,
    ``corr_p_joint``, ``corr_v``, ``corr_vc``, ``frac_planted_joint`` and the learned-head
    references of :meth:`PromptRun.summary` (``corr_p_learned``, ``corr_p_relaxed``,
    ``n_relaxed_closer``, ``n_strict_closer``, ``corr_v_learned``, ``frac_selected_is_opt``),
    plus ``frac_planted_fixed`` (logistic, head fixed) and ``n_infeasible`` (all runs).
    :meth:`claims` prefixes each run's claims with ``<loss>_`` (joint) or ``fixed_<loss>_``.
    """

    fixed: dict
    joint: dict
    data: object

    def summary(self):
        out, n_infeasible = {}, 0
        for loss in self.fixed:
            sf, sj = self.fixed[loss].summary(), self.joint[loss].summary(self.data)
            out.update({f"corr_p_fixed_{loss}": sf["corr_p"], f"corr_p_joint_{loss}": sj["corr_p"],
                        f"frac_planted_joint_{loss}": sj["frac_planted"]})
            for key in ("corr_v", "corr_vc", "corr_p_learned", "corr_p_relaxed", "n_relaxed_closer",
                        "n_strict_closer", "corr_v_learned", "frac_selected_is_opt"):
                out[f"{key}_{loss}"] = sj[key]
            n_infeasible += sf["n_infeasible"] + sj["n_infeasible"]
        out["frac_planted_fixed"] = self.fixed["logistic"].summary()["frac_planted"]
        out["n_infeasible"] = n_infeasible
        return out

    def claims(self):
        out = {}
        for loss in self.fixed:
            out.update({f"{loss}_{k}": v for k, v in self.joint[loss].claims(self.data).items()})
            out.update({f"fixed_{loss}_{k}": v for k, v in self.fixed[loss].claims(self.data).items()})
        return out


def prompt_loss_comparison(data, *, losses=("logistic", "exponential", "correlation"), **kw):
    """:func:`prompt_loss_sweep` with the head fixed and trained jointly, on the same data;
    returns a :class:`PromptLossComparison`."""
    return PromptLossComparison(prompt_loss_sweep(data, losses=losses, train_v=False, **kw),
                                prompt_loss_sweep(data, losses=losses, train_v=True, **kw), data)


def prompt_gap_sweep(n, T, d, *, gaps, trials=8, noise=0.1, seed=0, **kw):
    r""":func:`prompt_joint` on :func:`attnsvm.data.prompt_instances` for each score gap in ``gaps``
    (same seed, so the same noise draws); returns a :class:`PromptGapSweep`
    (``{gap: PromptRun}``)."""
    out = PromptGapSweep()
    for g in gaps:
        data, planted = prompt_instances(n, T, d, trials=trials, gap=g, noise=noise, seed=seed)
        out[float(g)] = prompt_joint(data, planted=planted, seed=seed, **kw)
    return out


class PromptGapSweep(dict):
    """Result of :func:`prompt_gap_sweep`: ``{gap: PromptRun}`` in increasing gap, with
    :meth:`claims`."""

    def claims(self):
        r"""Checked claim ``small_gap_late``: the final median softmax mass on the optimal token
        does not fall by more than 0.005 from one gap to the next larger one (at large gaps it
        saturates near 1), and at the smallest gap it is at least 0.2 below that at the largest
        (small gaps select late)."""
        gaps = sorted(self)
        mass = [self[g].summary()["opt_mass"] for g in gaps]
        ok = all(b >= a - 0.005 for a, b in zip(mass, mass[1:])) and mass[0] <= mass[-1] - 0.2
        return {"small_gap_late": (bool(ok), "mass on opt " + ", ".join(
            f"{m:.4f} (gap {g:g})" for g, m in zip(gaps, mass)))}


@dataclass
class PromptStudy:
    r"""Chapter 6's study (:func:`prompt_study`): the two-dimensional picture (``run_2d`` on
    ``data_2d``), the loss comparison on the planted instances (``comp`` on ``data``) and the
    score-gap sweep (``sweep``)."""

    data_2d: object
    run_2d: object
    data: object
    comp: object
    sweep: object
    config: dict = field(default_factory=dict)

    def summary(self):
        """``corr_2d`` (the picture's final correlation with :math:`p_{mm}`), the loss
        comparison's summary, and per gap ``k`` of the sweep ``gap_k``, ``mass_gap_k``
        (mean softmax mass on opt) and ``corr_gap_k``."""
        out = {"corr_2d": float(self.run_2d.corr_p[-1, 0]), **self.comp.summary()}
        for k, (g, r) in enumerate(self.sweep.items()):
            s = r.summary()
            out.update({f"mass_gap_{k}": s["opt_mass"], f"corr_gap_{k}": s["corr_p"], f"gap_{k}": float(g)})
        return out

    def claims(self):
        """The loss comparison's claims and the sweep's."""
        return {**self.comp.claims(), **self.sweep.claims()}


def prompt_study(n, T, d, *, gap, noise, trials, steps, lr, lr_gd, gaps, seed=0, device="auto"):
    r"""Chapter 6: the two-dimensional picture (the first :func:`attnsvm.data.prompt_instances`
    draw ``(4, 3, 2)`` from ``seed`` on with both labels, :func:`prompt_joint` with the head
    fixed), :func:`prompt_loss_comparison` on ``(n, T, d)`` planted instances, and
    :func:`prompt_gap_sweep` over ``gaps`` with plain GD (step ``lr_gd``). Returns a
    :class:`PromptStudy`."""
    seed_2d = next(s for s in range(seed, seed + 100) if np.ptp(
        prompt_instances(4, 3, 2, trials=1, gap=gap, noise=0.15, seed=s)[0].y) > 0)
    data2, planted2 = prompt_instances(4, 3, 2, trials=1, gap=gap, noise=0.15, seed=seed_2d)
    run2 = prompt_joint(data2, planted=planted2, train_v=False, lr=lr, steps=steps, seed=seed, device=device)
    data, planted = prompt_instances(n, T, d, trials=trials, gap=gap, noise=noise, seed=seed)
    comp = prompt_loss_comparison(data, planted=planted, lr=lr, steps=steps, seed=seed, device=device)
    sweep = prompt_gap_sweep(n, T, d, gaps=gaps, trials=trials, noise=noise, train_v=False, optimizer="gd",
                             lr=lr_gd, steps=steps, seed=seed, device=device)
    return PromptStudy(data2, run2, data, comp, sweep, config=dict(
        n=n, T=T, d=d, gap=gap, noise=noise, trials=trials, steps=steps, lr=lr, lr_gd=lr_gd,
        gaps=list(gaps), seed=seed))
