r"""Optimizer geometry (Part IV, chapters 13-14): which margin, in which norm, and how fast.

The driver owns no mathematics: the step rules are :mod:`attnsvm.optim`'s (trained by
:func:`attnsvm.train.fit`, the model wrapped as an :class:`attnsvm.models.MarginObjective`), the
max-margin problems :mod:`attnsvm.svm`'s, the fits :mod:`attnsvm.metrics`'s. It batches over
trials what the chapters compare:

* linear (chapter 13): :func:`attnsvm.svm.margin_ratios` (the table
  :math:`\bar\gamma_q(w_T)/\gamma_q`), :func:`attnsvm.svm.margin_gaps` (along a run),
  :func:`attnsvm.bounds.sd_margin_radius` and :func:`attnsvm.bounds.check_sd_bound` (the bound
  :math:`r_t` of ``thm-sd-margin`` and where it holds), :func:`attnsvm.metrics.slopes` (fitted
  log-log slopes of a gap), :func:`attnsvm.metrics.phase_fit` (PRGD's log-gap against its phase
  index, with :math:`R^2`);
* attention (chapter 14): :func:`attnsvm.svm.att_margin_gap` (the relative Att-SVM margin gap
  along a run), :func:`attnsvm.tokens.selected_tokens` and :func:`attnsvm.svm.compare_att_svms`
  (the Att-SVMs of every run and norm on the tokens each run selects,
  :class:`attnsvm.svm.AttSVMComparison`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .. import data as _data
from .. import metrics, svm, tokens
from .._checks import check_int
from ..bounds import adam_eps_split, check_sd_bound, sd_margin_radius
from ..devices import resolve_device
from ..history import record_grid
from ..models import AttentionClassifier, LinearClassifier
from ..norms import vector_norm
from ..runs import fit_margin

__all__ = ["LinearGeometryRun", "linear_geometry", "AttentionGeometryRun", "attention_geometry"]


# ----------------------------------------------------------------------------- chapter drivers

def _sd(norm, lr, decay):
    return dict(optimizer="sd", norm=norm, lr=lr, decay=decay)


def _md(p, lr, decay):
    return dict(optimizer="md", p=p, lr=lr, decay=decay, normalize=True)


def _adam(lr, beta2, decay=0.0, eps=0.0):
    return dict(optimizer="adam", lr=lr, decay=decay, eps=eps, betas=(0.9, beta2))


def _adam_key(beta2, t):
    return f"adam_{beta2:g}_{int(t)}"


def _prgd(lr, period, growth):
    return dict(optimizer="prgd", lr=lr, period=period, growth=growth, R0=1.0, step_power=0.5,
                decay=0.0)


def _rate_grid(steps, period):
    """0, 40 log-spaced record steps and every phase boundary ``k * period``."""
    return record_grid(steps, n_records=41, extra=np.arange(period, steps + 1, period))


#: chapter 13: each rule's own norm (the key of ``LinearGeometryRun.norms``)
OWN_NORM = {"cd": "1", "ngd": "2", "md_small": "1_5", "md": "3", "sign": "inf", "adam": "inf"}
_SD = ("cd", "ngd", "sign")


@dataclass
class LinearGeometryRun:
    r"""Result of :func:`linear_geometry` (chapter 13).

    Attributes
    ----------
    data : LinearData (batched)
    norms : dict key -> p          the compared norms (``"1"``, ``"1_5"``, ``"2"``, ``"3"``, ``"inf"``)
    w_p, gam : dict key -> (B, d), (B,)   the :math:`\ell_p` max-margin classifiers and margins
    runs : dict rule -> run        the geometry runs (``steps``, ``iterates``, ``log_loss``)
    ratio : dict rule -> dict key -> float   median :math:`\bar\gamma_q(w_T)/\gamma_q`
    bound : dict rule -> (holds, live)       ``thm-sd-margin``'s bound at step ``lr_bound``
    slope, slope_bound : dict rule -> float  fitted log-log slopes of the own-norm gap / bound
    rate_runs : dict rule -> run   GD, NGD, PRGD recorded at every phase boundary
    rate_gap : dict rule -> (K, B)  their :math:`\ell_2` margin gaps
    """

    data: object
    norms: dict
    w_p: dict
    gam: dict
    runs: dict
    ratio: dict
    bound: dict
    slope: dict
    slope_bound: dict
    rate_runs: dict
    rate_gap: dict
    config: dict = field(default_factory=dict)

    def _rates(self):
        c, gap = self.config, self.rate_gap
        t, T, P = self.rate_runs["gd"]["steps"], c["rate_steps"], c["prgd_period"]
        at = lambda g, k: np.median(g[np.flatnonzero(t >= k)[0]] / np.maximum(g[-1], 1e-300))  # noqa: E731
        fit = {k: metrics.phase_fit(t, gap[k], P) for k in ("prgd", "ngd")}
        early = {k: metrics.phase_fit(t, gap[k], P, stop=T / 2)[0] for k in ("prgd", "ngd")}
        late = {k: metrics.phase_fit(t, gap[k], P, start=T / 2)[0] for k in ("prgd", "ngd")}
        late_t = t >= T / 10
        ngd_t = gap["ngd"][late_t] * t[late_t, None]
        return {"final": {k: float(np.median(g[-1])) for k, g in gap.items()},
                "drop": {k: float(at(gap[k], T / 2)) for k in ("prgd", "ngd", "gd")},
                "rate_ratio": {k: float(np.median(late[k] / early[k])) for k in ("prgd", "ngd")},
                "logslope": -float(np.median(fit["prgd"][0])) / P,
                "r2": float(np.median(fit["prgd"][1])), "phases": fit["prgd"][2],
                "ngd_t_ratio": float(np.median(ngd_t.max(0) / ngd_t.min(0)))}

    def _eps(self):
        """:func:`attnsvm.bounds.adam_eps_split` of the constant-step Adam runs (beta_2 = 0.999)."""
        return adam_eps_split(self.runs["adam_const999"], self.runs["adam_eps"], self.data.X,
                               self.data.y, self.norms, self.gam, self.w_p["2"],
                               eps=self.config["eps_adam"], beta2=0.999)

    def summary(self):
        r"""``ratio_<rule>_<norm>``, ``slope_<rule>``, ``slope_bound_<rule>``, ``bound_checks``
        (fewest non-vacuous checks of the bound over the steepest-descent rules),
        ``sign_main_checks`` (those of the main sign-descent run), ``records``, ``corr_w2_w3``,
        ``adam_eps_diff``; Adam's :math:`\epsilon` split at :math:`t_\epsilon`
        (:func:`attnsvm.bounds.adam_eps_split`): ``adam_t_eps`` (median), ``adam_t_eps_measured`` and
        ``adam_eps_past`` (trials where it is reached within the run), ``adam_rate_ratio``
        (median), ``adam_eps_noop_diff``, ``adam_eps_l2_gain`` (median over the trials past
        :math:`t_\epsilon`, NaN if none); the rate comparison: ``gap_<rule>`` (final :math:`\ell_2` gaps),
        ``prgd_logslope``, ``prgd_r2``, ``prgd_phases``, ``prgd_rate_ratio``,
        ``ngd_rate_ratio``, ``<rule>_drop`` (gap at half the run over the final gap) and
        ``ngd_t_ratio``."""
        c, ratio, r, e = self.config, self.ratio, self._rates(), self._eps()
        out = {f"ratio_{k}_{q}": ratio[k][q] for k in ratio for q in self.norms}
        out.update({f"slope_{k}": v for k, v in self.slope.items()})
        out.update({f"slope_bound_{k}": v for k, v in self.slope_bound.items()})
        X, y = self.data.X, self.data.y
        out.update({
            "bound_checks": min(live for _, live in self.bound.values()),
            "corr_w2_w3": float(np.median(metrics.corr(self.w_p["2"], self.w_p["3"], elem_ndim=1))),
            "adam_eps_diff": max(abs(ratio["adam_eps"][q] - ratio["adam_const999"][q])
                                 for q in self.norms),
            "adam_t_eps": float(np.median(e["t_eps"])), "adam_t_eps_measured": int(e["measured"].sum()),
            "adam_eps_past": int(e["past"].sum()), "adam_rate_ratio": float(np.median(e["rate_ratio"])),
            "adam_eps_noop_diff": e["noop_diff"],
            "adam_eps_l2_gain": float(np.median(e["gain"][e["past"]])) if e["past"].any() else float("nan"),
            "sign_main_checks": check_sd_bound(self.runs["sign"], X, y, np.inf, self.gam["inf"],
                                               lr=c["lr_sd"], decay=c["decay"])[1],
            "records": int(np.sum(self.runs["sign"]["steps"] > 0) * c["trials"]),
            "gap_gd": r["final"]["gd"], "gap_ngd": r["final"]["ngd"],
            "gap_prgd": r["final"]["prgd"], "prgd_logslope": r["logslope"], "prgd_r2": r["r2"],
            "prgd_phases": r["phases"], "prgd_rate_ratio": r["rate_ratio"]["prgd"],
            "ngd_rate_ratio": r["rate_ratio"]["ngd"], "prgd_drop": r["drop"]["prgd"],
            "ngd_drop": r["drop"]["ngd"], "gd_drop": r["drop"]["gd"],
            "ngd_t_ratio": r["ngd_t_ratio"]})
        return out

    def claims(self):
        r"""Each steepest-descent rule is best in its own norm and within 0.95 of its max margin;
        mirror descent (:math:`p = 3`) best in :math:`\ell_3` and behind them, with :math:`p < 2`
        best in its own norm; Adam's :math:`\ell_\infty` bias and what :math:`\beta_2`, a constant
        step and :math:`\epsilon` change; the bound of ``thm-sd-margin`` with non-vacuous checks;
        the observed rates (slopes near -1/2 for steepest descent, faster for :math:`p < 2`,
        slower for :math:`p > 2`); GD, NGD and PRGD: order, :math:`1/t`, PRGD's exponential
        rate."""
        c, ratio, slope, bound = self.config, self.ratio, self.slope, self.bound
        own = OWN_NORM
        s, r, e = self.summary(), self._rates(), self._eps()
        row_best = {k: max(ratio[k], key=ratio[k].get) for k in own}
        final, rate_ratio = r["final"], r["rate_ratio"]
        return {
            "sd_own_best": (all(row_best[k] == own[k] for k in _SD), f"steepest descent: {ratio}"),
            "sd_own_close": (all(ratio[k][own[k]] >= 0.95 for k in _SD),
                             f"steepest descent: {ratio}"),
            "md_l3": (ratio["md"]["3"] > max(ratio["md"]["1"], ratio["md"]["inf"])
                      and ratio["md"]["3"] >= max(ratio["md"].values()) - 0.01,
                      f"mirror descent p={c['p_md']}: {ratio['md']}"),
            "md_small_own": (row_best["md_small"] == "1_5" and ratio["md_small"]["1_5"] >= 0.99,
                             f"mirror descent p={c['p_md_small']}: {ratio['md_small']}"),
            "md_slower": (ratio["md"]["3"] < min(ratio[k][own[k]] for k in _SD),
                          f"mirror descent {ratio['md']} against steepest descent {ratio}"),
            "adam_linf": (ratio["adam"]["inf"] >= 0.97
                          and ratio["adam"]["inf"] >= max(ratio["adam"].values()) - 0.01,
                          f"Adam: {ratio['adam']}"),
            "adam999_worse": (ratio["adam999"]["inf"] < ratio["adam"]["inf"],
                              f"Adam: {ratio['adam']}, {ratio['adam999']}"),
            "adam_const_linf": (ratio["adam_const"]["inf"] >= 0.97 and max(
                ratio["adam_const"], key=ratio["adam_const"].get) == "inf",
                f"constant-step Adam, eps = 0: {ratio['adam_const']}"),
            # eps changes nothing before t_eps and pulls Adam toward the l2 direction after
            # (notes/paper_claims.md): at 20000 steps no trial reaches t_eps (~28000), at 50000
            # every one does
            "adam_eps_noop": (s["adam_eps_noop_diff"] < 0.005, f"eps = {c['eps_adam']} against "
                              "eps = 0 at the records with eps <= ||grad L||_inf / 30: largest "
                              f"difference of a margin ratio {s['adam_eps_noop_diff']:.2e} "
                              f"({e['noop_pairs']} (record, trial) pairs); final medians "
                              f"{ratio['adam_eps']} vs {ratio['adam_const999']}"),
            "adam_eps_rate": (abs(s["adam_rate_ratio"] - 1) < 0.1, "eps = 0: fitted decay rate of "
                              "log ||grad L||_inf over the second half / (log beta_2)/2 = "
                              f"{s['adam_rate_ratio']:.3f} (median); t_eps {s['adam_t_eps']:.0f} "
                              f"(median; reached within the run in {s['adam_t_eps_measured']} of "
                              f"{c['trials']} trials, predicted in the rest)"),
            "adam_eps_l2": ((s["adam_eps_l2_gain"] > 0) if e["past"].any() else True,
                            (f"{s['adam_eps_past']} trials past t_eps; median gain in corr with "
                             f"the l2 max-margin direction {s['adam_eps_l2_gain']:.2e}")
                            if e["past"].any() else "no trial reaches t_eps within the "
                            f"{c['steps']} steps (median t_eps {s['adam_t_eps']:.0f}): nothing to "
                            "check"),
            "adam_eps_below": (max(ratio["adam_eps"].values()) < ratio["adam"]["inf"],
                               f"Adam with eps: {ratio['adam_eps']} against {ratio['adam']['inf']}"),
            "adam999_const_below": (max(ratio["adam_const999"].values())
                                    < ratio["adam_const"]["inf"],
                                    f"constant step, beta_2 = 0.999: {ratio['adam_const999']} "
                                    f"against beta_2 = {c['adam_beta2']}: {ratio['adam_const']}"),
            "bound": (all(ok and live > 0 for ok, live in bound.values()), "the steepest-descent "
                      f"margin bound (holds, non-vacuous checks): {bound}"),
            "sd_rate_half": (all(-0.6 <= slope[k] <= -0.4 for k in _SD),
                             f"steepest-descent gap slopes {slope}"),
            "md_small_faster": (slope["md_small"] < min(slope[k] for k in _SD) - 0.2,
                                f"slopes {slope}"),
            "md_large_slower": (slope["md"] > max(slope[k] for k in _SD) + 0.1, f"slopes {slope}"),
            "order": (final["prgd"] < final["ngd"] < final["gd"], f"final gaps {final}"),
            "ngd_1_over_t": (r["ngd_t_ratio"] < 1.5, "NGD gap * t varies by a factor "
                             f"{r['ngd_t_ratio']} over the last decade"),
            "prgd_line": (r["r2"] >= 0.95, "median R^2 of the per-phase log-gap line over the run "
                          f"{r['r2']:.4f}"),
            "prgd_rate_constant": (2 / 3 <= rate_ratio["prgd"] <= 3 / 2 and rate_ratio["ngd"] < 0.5,
                                   f"late/early per-phase rates {rate_ratio}"),
            "prgd_exp": (r["logslope"] < 0 and r["drop"]["prgd"] > 10 * r["drop"]["ngd"],
                         f"PRGD slope {r['logslope']}, drops PRGD {r['drop']['prgd']} NGD "
                         f"{r['drop']['ngd']}"),
        }


def linear_geometry(n=30, d=8, *, margin=0.1, trials=8, steps=20000, lr_sd=1.0, lr_bound=0.2,
                    decay=0.5, p_md=3.0, p_md_small=1.5, lr_md=3.0, lr_adam=1.0,
                    adam_beta2=0.99, lr_adam_const=0.01, eps_adam=1e-8, rate_steps=5000,
                    lr_gd=1.0, lr_ngd=0.1, prgd_lr=0.1, prgd_period=100, prgd_growth=1.5,
                    seed=0, device="auto"):
    r"""Chapter 13: exponential-loss linear classification on ``trials`` separable data sets
    (:func:`attnsvm.data.separable`) from :math:`w_0 = 0`, with steepest descent in
    :math:`\ell_1, \ell_2, \ell_\infty`, mirror descent (``p_md_small``, ``p_md``) and Adam
    variants, all with the schedule :math:`\eta_0 (t+1)^{-\mathrm{decay}}` where stated, for
    ``steps`` steps; the steepest-descent rules again at ``lr_bound`` for ``thm-sd-margin``'s
    bound; GD, NGD and PRGD for ``rate_steps`` steps recorded at every phase boundary.

    Returns
    -------
    LinearGeometryRun
    """
    data = _data.separable(n, d, margin=margin, trials=trials, seed=seed)
    dev = resolve_device(device)
    batch = {"X": torch.as_tensor(data.X, device=dev), "y": torch.as_tensor(data.y, device=dev)}
    model = LinearClassifier()
    w0 = model.init_params(d, None, [None] * trials, device=dev)      # w_0 = 0
    norms = {"1": 1.0, "1_5": p_md_small, "2": 2.0, "3": 3.0, "inf": np.inf}
    w_p = {k: svm.linear_svm_p(data.X, data.y, q) for k, q in norms.items()}
    gam = {k: 1.0 / vector_norm(w_p[k], q) for k, q in norms.items()}
    methods = {"cd": _sd(1, lr_sd, decay), "ngd": _sd(2, lr_sd, decay),
               "md_small": _md(p_md_small, lr_md, decay), "md": _md(p_md, lr_md, decay),
               "sign": _sd("inf", lr_sd, decay),
               "adam": _adam(lr_adam, adam_beta2, decay), "adam999": _adam(lr_adam, 0.999, decay),
               "adam_const": _adam(lr_adam_const, adam_beta2),
               "adam_const999": _adam(lr_adam_const, 0.999),
               "adam_eps": _adam(lr_adam_const, 0.999, eps=eps_adam)}
    runs = {k: fit_margin(model, w0, batch, steps=steps, **kw) for k, kw in methods.items()}
    ratio = {k: {q: float(np.median(v)) for q, v in svm.margin_ratios(
        r["iterates"][-1], data.X, data.y, norms, gam).items()} for k, r in runs.items()}
    bound = {k: check_sd_bound(fit_margin(model, w0, batch, steps=steps, **dict(methods[k], lr=lr_bound)),
                               data.X, data.y, norms[OWN_NORM[k]], gam[OWN_NORM[k]], lr=lr_bound,
                               decay=decay) for k in _SD}
    t = runs["cd"]["steps"]
    slope = {k: float(np.median(metrics.slopes(t, svm.margin_gaps(
        runs[k]["iterates"], data.X, data.y, norms[OWN_NORM[k]], gam[OWN_NORM[k]]))))
        for k in ("cd", "ngd", "sign", "md_small", "md")}
    slope_bound = {k: float(np.median(metrics.slopes(t, sd_margin_radius(
        t, data.X, norms[OWN_NORM[k]], lr=lr_sd, decay=decay)))) for k in _SD}
    rate_methods = {"gd": dict(optimizer="gd", lr=lr_gd, decay=0.0), "ngd": _sd(2, lr_ngd, 0.0),
                    "prgd": _prgd(prgd_lr, prgd_period, prgd_growth)}
    rec = _rate_grid(rate_steps, prgd_period)
    rate_runs = {k: fit_margin(model, w0, batch, steps=rate_steps, record_steps=rec, **kw)
                 for k, kw in rate_methods.items()}
    rate_gap = {k: svm.margin_gaps(r["iterates"], data.X, data.y, 2.0, gam["2"])
                for k, r in rate_runs.items()}
    config = dict(n=n, d=d, margin=margin, trials=trials, steps=steps, lr_sd=lr_sd,
                  lr_bound=lr_bound, decay=decay, p_md=p_md, p_md_small=p_md_small, lr_md=lr_md,
                  lr_adam=lr_adam, adam_beta2=adam_beta2, lr_adam_const=lr_adam_const,
                  eps_adam=eps_adam, rate_steps=rate_steps, lr_gd=lr_gd, lr_ngd=lr_ngd,
                  prgd_lr=prgd_lr, prgd_period=prgd_period, prgd_growth=prgd_growth, seed=seed)
    return LinearGeometryRun(data, norms, w_p, gam, runs, ratio, bound, slope, slope_bound,
                             rate_runs, rate_gap, config)


@dataclass
class AttentionGeometryRun:
    r"""Result of :func:`attention_geometry` (chapter 14).

    Attributes
    ----------
    data : AttnData (batched)
    ps : list of float             mirror-descent potentials
    runs : dict rule -> run        (``steps``, ``iterates`` (K, B, d, d), ``log_loss``);
                                   ``ngd`` is ``md2`` (dual-normalized MD with p = 2 is NGD)
    cmp : AttSVMComparison         final iterates against the Att-SVMs of their norms
    md_corr : dict p -> (K, B)     correlation of MD-p's iterates with its l_p Att-SVM
    rate_runs : dict rule -> run   NGD and PRGD, recorded at every phase boundary
    sel_rate, W_ref : dict rule -> (B, n), (B, d, d)   their final token choice and Att-SVM
    att_gap, rate_corr : dict rule -> (K, B)   relative margin gap and correlation with W_ref
    md_ratio : dict p -> (K, B)    MD-p's own l_p margin ratio along its records (on the tokens
                                   its final iterate selects)
    adam_cmp : AttSVMComparison    Adam (constant step) for every ``beta_2`` of
                                   ``adam_beta2s``, one run each, recorded at ``adam_horizons``:
                                   runs ``"adam_<beta2>_<t>"`` against the l_inf and Frobenius
                                   Att-SVMs of the tokens each record selects
    """

    data: object
    ps: list
    runs: dict
    norms: dict
    cmp: object
    md_corr: dict
    rate_runs: dict
    sel_rate: dict
    W_ref: dict
    att_gap: dict
    rate_corr: dict
    md_ratio: dict
    adam_cmp: object
    config: dict = field(default_factory=dict)

    def cross(self):
        """``(p, q) ->`` median correlation of MD-p's final iterate with the l_q Att-SVM."""
        return {(p, q): self.cmp.median("corr", f"md{p:g}", q) for p in self.ps for q in self.ps}

    def ratio_cross(self):
        """``(p, q) ->`` median own-norm margin ratio of MD-p's final iterate in the l_q norm."""
        return {(p, q): self.cmp.median("ratio", f"md{p:g}", q) for p in self.ps for q in self.ps}

    def md_trend(self):
        """``p -> [(t, median l_p margin ratio of MD-p at step t)]`` at ``md_horizons``."""
        t = self.runs[f"md{self.ps[0]:g}"]["steps"]
        idx = np.searchsorted(t, self.config["md_horizons"])
        return {p: [(int(t[i]), float(metrics.nanmedian(self.md_ratio[p][i]))) for i in idx]
                for p in self.ps}

    def adam_trend(self):
        """``(beta2, norm) -> [(t, median own-norm margin ratio of Adam at step t)]`` for the
        norms ``inf`` and 2.0 (Frobenius), at ``adam_horizons``."""
        return {(b2, q): [(t, self.adam_cmp.median("ratio", _adam_key(b2, t), q))
                          for t in self.config["adam_horizons"]]
                for b2 in self.config["adam_beta2s"] for q in (np.inf, 2.0)}

    def observed(self):
        """``(run, str(norm)) ->`` median correlations of sign, Adam, spectral descent and NGD."""
        return {(k, str(q)): self.cmp.median("corr", k, q)
                for k in ("sign", "adam", "adam_decay", "spectral", "ngd") for q in self.norms[k]}

    def observed_ratio(self):
        """``(run, str(norm)) ->`` median own-norm margin ratios of sign, Adam, spectral descent
        and NGD (the invariant counterpart of :meth:`observed`)."""
        return {(k, str(q)): self.cmp.median("ratio", k, q)
                for k in ("sign", "adam", "adam_decay", "spectral", "ngd") for q in self.norms[k]}

    def flagged_solves(self):
        """The Att-SVM solves whose status is not optimal, as a sentence (``"none"``)."""
        return ", ".join(f"{k} / {q} / trial {b}: {s}" for k, q, b, s in self.cmp.flagged()) or "none"

    def _rates(self):
        t, T, P, gap = self.rate_runs["ngd"]["steps"], self.config["rate_steps"], \
            self.config["prgd_period"], self.att_gap
        early = {k: metrics.phase_fit(t, g, P, stop=T / 2)[0] for k, g in gap.items()}
        late = {k: metrics.phase_fit(t, g, P, start=T / 2)[0] for k, g in gap.items()}
        err = {k: float(np.median(1 - c[-1])) for k, c in self.rate_corr.items()}
        return {"err": err, "speedup": err["ngd"] / err["prgd"],
                "rate_ratio": {k: float(np.median(late[k] / early[k])) for k in gap},
                "r2": float(np.median(metrics.phase_fit(t, gap["prgd"], P)[1])),
                "gap_final": {k: float(np.median(g[-1])) for k, g in gap.items()},
                "optfrac": {k: float(np.mean(s == self.data.opt)) for k, s in self.sel_rate.items()}}

    def summary(self):
        r"""``cross_<p>_<q>``, ``corr_md_lp`` (MD p = 3 against the l_3 Att-SVM), ``obs_<run>_<norm>``,
        ``own_ratio_<run>`` (own-norm margin ratios), ``optfrac_<run>``, ``n_inaccurate``,
        ``n_solves``; NGD against PRGD: ``err_<rule>_att`` (final one minus correlation),
        ``prgd_speedup_att``, ``<rule>_att_rate_ratio``, ``prgd_att_r2``, ``optfrac_rate_<rule>``,
        ``att_gap_<rule>``."""
        cross, cmp, r = self.cross(), self.cmp, self._rates()
        out = {f"cross_{p:g}_{q:g}".replace(".", "_"): c for (p, q), c in cross.items()}
        out["corr_md_lp"] = cross[(3.0, 3.0)] if 3.0 in self.ps else float("nan")
        out.update({f"obs_{k}_{q}".replace(".0", "").replace("inf", "linf"): c
                    for (k, q), c in self.observed().items()})
        out.update({f"own_ratio_{k}": cmp.median("ratio", k, q) for k, q in [
            ("sign", np.inf), ("adam", np.inf), ("adam_decay", np.inf), ("spectral", "spectral"),
            ("ngd", 2.0), ("md3", 3.0)]})
        out.update({f"optfrac_{k}".replace(".", "_"): f for k, f in cmp.opt_frac.items()})
        out.update({f"fro_ratio_{k}": cmp.median("ratio", k, 2.0)
                    for k in ("sign", "adam", "adam_decay", "spectral")})
        out["spec_ratio_ngd"] = cmp.median("ratio", "ngd", "spectral")
        out.update({f"ratio_cross_{p:g}_{q:g}".replace(".", "_"): v
                    for (p, q), v in self.ratio_cross().items()})
        for p, tr in self.md_trend().items():
            for i, (t, v) in enumerate(tr):
                out[f"md_h{i}"] = t
                out[f"md{p:g}_ratio_h{i}".replace(".", "_")] = v
        for (b2, q), tr in self.adam_trend().items():
            for i, (t, v) in enumerate(tr):
                out[f"adam_h{i}"] = t
                out[f"adam_{'linf' if np.isinf(q) else 'fro'}_{svm.norm_key(b2)}_h{i}"] = v
        out["n_inaccurate"] = cmp.summary()["n_inaccurate"]
        out["n_solves"] = sum(s.size for s in cmp.status.values())
        out["n_inaccurate_adam"] = self.adam_cmp.summary()["n_inaccurate"]
        out.update({"err_ngd_att": r["err"]["ngd"], "err_prgd_att": r["err"]["prgd"],
                    "prgd_speedup_att": r["speedup"],
                    "prgd_att_rate_ratio": r["rate_ratio"]["prgd"],
                    "ngd_att_rate_ratio": r["rate_ratio"]["ngd"], "prgd_att_r2": r["r2"],
                    "optfrac_rate_ngd": r["optfrac"]["ngd"], "optfrac_rate_prgd": r["optfrac"]["prgd"],
                    "att_gap_ngd": r["gap_final"]["ngd"], "att_gap_prgd": r["gap_final"]["prgd"]})
        return out

    def claims(self):
        r"""Every claim on own-norm margin ratios (invariant to which minimizer of a norm that is
        not strictly convex the solver returns). Each MD-p's final ratio is largest in its own
        :math:`\ell_p` norm (``md_diag``); MD with :math:`p = 3` raises its :math:`\ell_3` ratio
        across ``md_horizons`` by more than 0.01 each time (``md_l3_rises``) and is still below
        0.95 at the last (``md_l3_short``); sign descent's :math:`\ell_\infty` ratio exceeds its
        Frobenius one (``sign_linf``), spectral descent's spectral ratio its Frobenius one and
        NGD's Frobenius ratio its spectral one (``spec``); Adam's :math:`\ell_\infty` ratio rises
        by more than 0.01 between consecutive ``adam_horizons`` for every :math:`\beta_2 \le 0.99`
        (``adam_linf_rises``), is still below 0.6 at the last horizon for every
        :math:`\beta_2 > 0.99` (``adam_large_beta2_slow``), falls with :math:`\beta_2` at the last horizon
        (``adam_beta2_order``), moves more than its Frobenius ratio at :math:`\beta_2 = 0.99`
        (``adam_fro_flat``) and lies at least 0.1 below sign descent's after ``steps`` steps
        (``adam_lags_sign``); every Att-SVM solved; PRGD beats NGD with a constant per-phase rate
        and a smaller final margin gap."""
        obs, r = self.observed_ratio(), self._rates()
        rc, md, ad = self.ratio_cross(), self.md_trend(), self.adam_trend()
        md_diag = all(rc[(p, p)] > max(rc[(p, q)] for q in self.ps if q != p) for p in self.ps)
        l3 = [v for _, v in md.get(3.0, [(0, np.nan)])]
        b2s = self.config["adam_beta2s"]
        rises = {b2: np.diff([v for _, v in ad[(b2, np.inf)]]) for b2 in b2s if b2 <= 0.99}
        slow = [ad[(b2, np.inf)][-1] for b2 in b2s if b2 > 0.99]
        last = [ad[(b2, np.inf)][-1][1] for b2 in b2s]
        lin, fro = ad.get((0.99, np.inf)), ad.get((0.99, 2.0))
        fro_flat = (lin is not None and abs(fro[-1][1] - fro[0][1]) < lin[-1][1] - lin[0][1])
        adam_first = {b2: ad[(b2, np.inf)][0] for b2 in b2s}
        lag = [(t, v) for b2, (t, v) in adam_first.items() if b2 == 0.99]
        rr, gf, err = r["rate_ratio"], r["gap_final"], r["err"]
        return {
            "md_diag": (bool(md_diag), f"own-norm ratio table not diagonal-dominant: {rc}"),
            "md_l3_rises": (bool(np.all(np.diff(l3) > 0.01)),
                            f"l_3 ratio of p=3 mirror descent along {md.get(3.0)}"),
            "md_l3_short": (bool(l3[-1] < 0.95), f"l_3 ratio of p=3 mirror descent {md.get(3.0)}"),
            "sign_linf": (bool(obs[("sign", "inf")] > obs[("sign", "2.0")]),
                          f"own-norm ratios {obs}"),
            "spec": (bool(obs[("spectral", "spectral")] > obs[("spectral", "2.0")]
                          and obs[("ngd", "2.0")] > obs[("ngd", "spectral")]),
                     f"own-norm ratios {obs}"),
            "adam_linf_rises": (bool(rises) and all(bool(np.all(d > 0.01)) for d in rises.values()),
                                f"Adam l_inf ratios along the horizons {ad}"),
            "adam_large_beta2_slow": (all(v < 0.6 for _, v in slow),
                                      f"Adam l_inf ratios at the last horizon, beta_2 > 0.99: {slow}"),
            "adam_beta2_order": (bool(np.all(np.diff(last) < 0)) if np.all(np.diff(b2s) > 0)
                                 else False, f"Adam l_inf ratios at the last horizon {last} "
                                 f"for beta_2 {b2s} (increasing)"),
            "adam_fro_flat": (bool(fro_flat), f"Adam (beta_2 = 0.99) ratios {lin} and {fro}"),
            "adam_lags_sign": (bool(lag and lag[0][0] == self.config["steps"]
                                    and lag[0][1] < obs[("sign", "inf")] - 0.1),
                               f"Adam (beta_2 = 0.99) at {lag} against sign descent "
                               f"{obs[('sign', 'inf')]} (the first Adam horizon must be steps)"),
            "svms_solved": (self.cmp.summary()["n_failed"] == 0
                            and self.adam_cmp.summary()["n_failed"] == 0,
                            "Att-SVM solves without a solution: "
                            f"{self.cmp.flagged() + self.adam_cmp.flagged()}"),
            "prgd_beats_ngd_att": (bool(r["speedup"] > 1), "PRGD does not beat NGD on attention: "
                                   f"{err['prgd']} vs {err['ngd']}"),
            "prgd_att_rate_constant": (2 / 3 <= rr["prgd"] <= 3 / 2 and rr["ngd"] < 0.5,
                                       "late/early per-phase rates of the attention margin gap "
                                       f"{rr}"),
            "prgd_att_gap": (gf["prgd"] < gf["ngd"], f"final attention margin gaps {gf}"),
        }


def attention_geometry(n=6, T=8, d=10, *, trials=8, steps=1500, lr_md=0.3, ps=(1.75, 2.0, 3.0),
                       lr_sign=0.01, lr_adam=0.01, lr_adam_decay=0.1, lr_spec=0.1,
                       rate_steps=4000, prgd_period=100, prgd_growth=1.5,
                       adam_horizons=None, adam_beta2s=(0.9, 0.99, 0.999),
                       md_horizons=None, seed=0, device="auto"):
    r"""Chapter 14: the attention classifier with trained :math:`W` (cross-attention on
    :func:`attnsvm.data.random_unit`, logistic loss, from W_0 = 0) trained for
    ``steps`` steps by dual-normalized mirror descent for every ``p`` of ``ps`` (2 must be one:
    it is NGD), sign descent, Adam (:math:`\epsilon = 0`, :math:`\beta_2 = 0.99`, constant step
    and :math:`\eta_0 (t+1)^{-1/2}`) and spectral descent; each final iterate compared with the
    Att-SVMs of its norms on the tokens it selects (:func:`attnsvm.svm.compare_att_svms`); NGD and PRGD for
    ``rate_steps`` steps recorded at every phase boundary, against the Frobenius Att-SVM of the
    tokens each selects at the end. Mirror descent's own-norm margin ratios are also recorded at
    ``md_horizons`` (default ``steps // 5, steps // 2, steps``), on the tokens of the final
    iterate; Adam (constant step ``lr_adam``, :math:`\epsilon = 0`) is run once for every
    :math:`\beta_2` of ``adam_beta2s`` up to the last of ``adam_horizons`` (default ``steps``,
    ``10 steps / 3``, ``10 steps``) and each record
    compared with the :math:`\ell_\infty` and Frobenius Att-SVMs of the tokens it selects
    (``adam_cmp``), so the trend of the ratios with the horizon is measured on one run.

    Returns
    -------
    AttentionGeometryRun
    """
    ps = [float(p) for p in ps]
    if 2.0 not in ps:
        raise ValueError(f"ps must contain 2.0 (mirror descent with p = 2 is NGD), got {ps}")
    data = _data.random_unit(n, T, d, cross=True, trials=trials, seed=seed)
    model = AttentionClassifier("W")
    dev = resolve_device(device)
    batch = {k: torch.as_tensor(getattr(data, k), device=dev) for k in ("X", "y", "Z")}
    W0 = model.init_params(d, torch.as_tensor(data.v, device=dev),
                           [_data.keyed_stream("geometry-init", b) for b in range(trials)], device=dev)
    batch["G"] = model.head_values(W0, batch["X"])
    rules = {f"md{p:g}": _md(p, lr_md, 0.0) for p in ps}
    rules.update({"sign": _sd("inf", lr_sign, 0.0), "adam": _adam(lr_adam, 0.99),
                  "adam_decay": _adam(lr_adam_decay, 0.99, decay=0.5),
                  "spectral": _sd("spectral", lr_spec, 0.0)})
    if adam_horizons is None:
        adam_horizons = (steps, round(10 * steps / 3), 10 * steps)
    adam_horizons = sorted({check_int("adam_horizons", t, minimum=1) for t in adam_horizons})
    adam_beta2s = [float(b) for b in adam_beta2s]
    md_horizons = (sorted({max(1, steps // 5), max(1, steps // 2), steps}) if md_horizons is None
                   else sorted({check_int("md_horizons", t, minimum=1) for t in md_horizons}))
    if md_horizons[-1] > steps:
        raise ValueError(f"md_horizons must not exceed steps = {steps}, got {md_horizons}")
    rec = record_grid(steps, n_records=60, initial=False, extra=md_horizons)
    runs = {k: fit_margin(model, W0, batch, steps=steps, loss="logistic",
                           record_steps=rec if k.startswith("md") else None, **kw)
            for k, kw in rules.items()}
    runs["ngd"] = runs["md2"]
    norms = {f"md{p:g}": ps for p in ps}
    norms.update({"sign": [np.inf, 2.0], "adam": [np.inf, 2.0], "adam_decay": [np.inf, 2.0],
                  "spectral": ["spectral", 2.0], "ngd": [2.0, "spectral"]})
    cmp = svm.compare_att_svms(data.X, data.Z, {k: r["iterates"][-1] for k, r in runs.items()}, norms,
                           opt=data.opt)
    md_corr = {p: metrics.corr(runs[f"md{p:g}"]["iterates"], cmp.svms[f"md{p:g}", p][None],
                               elem_ndim=2) for p in ps}
    md_ratio = {p: 1.0 - svm.att_margin_gap(runs[f"md{p:g}"]["iterates"], data.X, data.Z,
                                        cmp.sel[f"md{p:g}"], cmp.svms[f"md{p:g}", p], norm=p)
                for p in ps}
    adam_finals = {}
    for b2 in adam_beta2s:
        a = fit_margin(model, W0, batch, steps=adam_horizons[-1], loss="logistic",
                        record_steps=adam_horizons, **_adam(lr_adam, b2))
        adam_finals.update({_adam_key(b2, t): W for t, W in zip(a["steps"], a["iterates"])})
    adam_cmp = svm.compare_att_svms(data.X, data.Z, adam_finals,
                                {k: [np.inf, 2.0] for k in adam_finals}, opt=data.opt)
    rec = _rate_grid(rate_steps, prgd_period)
    rate_rules = {"ngd": _sd(2, lr_md, 0.0), "prgd": _prgd(lr_md, prgd_period, prgd_growth)}
    rate_runs = {k: fit_margin(model, W0, batch, steps=rate_steps, loss="logistic",
                                record_steps=rec, **kw) for k, kw in rate_rules.items()}
    sel = {k: tokens.selected_tokens(data.X, r["iterates"][-1], data.Z) for k, r in rate_runs.items()}
    W_ref = {k: svm.att_svm_batch(data.X, data.Z, s, strict=True)[0] for k, s in sel.items()}
    att_gap = {k: svm.att_margin_gap(r["iterates"], data.X, data.Z, sel[k], W_ref[k])
               for k, r in rate_runs.items()}
    rate_corr = {k: metrics.corr(r["iterates"], W_ref[k][None], elem_ndim=2)
                 for k, r in rate_runs.items()}
    config = dict(n=n, T=T, d=d, trials=trials, steps=steps, lr_md=lr_md, ps=ps, lr_sign=lr_sign,
                  lr_adam=lr_adam, lr_adam_decay=lr_adam_decay, lr_spec=lr_spec,
                  rate_steps=rate_steps, prgd_period=prgd_period, prgd_growth=prgd_growth,
                  adam_horizons=adam_horizons, adam_beta2s=adam_beta2s, md_horizons=md_horizons,
                  seed=seed)
    return AttentionGeometryRun(data, ps, runs, norms, cmp, md_corr, rate_runs, sel, W_ref,
                                att_gap, rate_corr, md_ratio, adam_cmp, config)
