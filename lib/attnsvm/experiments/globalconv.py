r"""Global convergence of GD and NGD on attention (chapter 8, book: ``ch-global``).

The chapter works in the *equal-score* data model (the book's {prf:ref}`def-equal-scores`,
:func:`attnsvm.data.score_instances`): in every sequence the optimal token has score
:math:`\gamma^\star_i` and every other token the same lower score :math:`\gamma^\circ_i`. The
proved constants and bounds live in :mod:`attnsvm.bounds`, the runs in :mod:`attnsvm.runs`
(:func:`attnsvm.runs.global_run`: one run recorded at every step and checked against the global
theorem). This module holds the chapter's experiments and their result objects
(``.summary()``, ``.claims()``): :func:`global_experiment` (GD and NGD from random and
adversarial starts, on equal-score instances and on traps with a locally optimal choice other
than ``opt``) and :func:`global_cx_experiment` (the global theorem under the cross-sequence
condition (Cx)).

All losses here are logistic, :math:`\ell(u) = \log(1 + e^{-u})`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.stats import spearmanr

from .. import bounds, metrics, svm, train
from ..data import AttnData, random_inits, score_instances
from ..losses import risk_grad
from ..metrics import log_q
from ..runs import global_run, global_runs

__all__ = ["GLOBAL_GROUPS", "GlobalExperiment", "global_experiment", "GlobalCxRun",
           "global_cx_experiment"]


# ----------------------------------------------------------------------------- global convergence
#: the four groups of the global-convergence experiment, in plotting order
GLOBAL_GROUPS = ("equal-score, random init", "equal-score, adversarial init",
                 "trap, random init", "trap, adversarial init")


@dataclass
class GlobalExperiment:
    r"""Result of :func:`global_experiment`: ``G = 4`` groups of ``trials`` trials each.

    Attributes
    ----------
    runs : dict optimizer -> History (``corr`` has keys ``"W_mm"`` and ``"W_alpha"``)
    slices : dict group -> slice of the trials axis
    W_mm, W_alpha, W0 : (G * trials, d, d) SVM of ``opt``, of ``alpha``, and the initializations
    eq, opt_eq : the equal-score instances and their optimal tokens
    eq_locopt : (trials,) bool, whether ``alpha`` is locally optimal on the equal-score instances
    trap_tries : candidate instances drawn to find the ``trials`` traps (each with a locally
        optimal ``alpha != opt``)
    corr_trap_alpha : (trials,) corr of each trap's two SVM solutions
    kappa : (trials,) the gradient-alignment constant of the equal-score instances
    ngd_progress : min over the adversarial equal-score trials of NGD's progress
        :math:`\langle W_T - W_0, W_{mm}\rangle\gamma_A` divided by its guaranteed value
        :math:`\eta\kappa T`
    trap_cos : (trials,) cosine between :math:`-\nabla\mathcal{L}(W_0)` and :math:`W_{mm}` at
        each trap's adversarial start
    eq_cross : (trials,) :func:`attnsvm.bounds.cross_gram_min` of the equal-score instances
    lr_gd, steps : GD's step size and the horizon ``T``
    gd_plateau_time : (trials,) :math:`t_p = 1/(\eta\|\nabla\mathcal{L}(W_0)\|_F)` of GD at the
        adversarial equal-score starts: the steps GD needs to move its iterate by a unit
        distance at its initial speed (the gradient there is exponentially small in
        :math:`R_0`, so the plateau lasts about that long)
    ngd_log_smin : (trials,) :math:`\min_i\log s_i(W_T)` of NGD's final iterates from the
        random equal-score starts (log-space: a sequence saturated on a non-optimal token has
        :math:`s_i \approx e^{-\text{its margin}}`)
    trap_plateau_time : (trials,) GD's :math:`t_p` at the traps' adversarial starts

    The thresholds of the claims: NGD from random starts reaches :math:`W_{mm}` (final
    correlation :math:`> 0.99`) in at least ``REACH_FRAC`` of them, and every start that does
    not has a sequence saturated on a non-optimal token (:math:`s_i < 10^{-6}`); GD's plateau:
    every adversarial start with :math:`t_p > 2T` still has :math:`\mathrm{corr}(W_T,
    W^\alpha_{mm}) > 0.999`, and :math:`t_p` orders the trials (Spearman correlation of
    :math:`t_p` with :math:`1 - \mathrm{corr}(W_T, W^\alpha_{mm})` at most ``-0.9``); (Cx) holds on
    fewer than half of the random-query instances. On the traps: GD keeps every adversarial start
    with :math:`t_p > 2T` at :math:`\mathrm{corr}(W_T, W^\alpha_{mm}) > 0.999` (NGD's are counted,
    not claimed: some leave), NGD reaches :math:`W_{mm}` from at least ``REACH_FRAC`` of the random starts, and the
    negative gradient at every adversarial start has a positive cosine with :math:`W_{mm}`.
    GD's claim on the traps is, as for the plateau, about the starts with :math:`t_p > 2T`
    (at the papers' size a trap start with a smaller :math:`t_p` was left within the run).
    """

    #: the fraction of random starts from which NGD must reach W_mm (claims ngd_random_most_reach
    #: and trap_random_ngd)
    REACH_FRAC = 0.8

    runs: dict
    slices: dict
    W_mm: np.ndarray
    W_alpha: np.ndarray
    W0: np.ndarray
    eq: object
    opt_eq: np.ndarray
    eq_locopt: np.ndarray
    trap_tries: int
    corr_trap_alpha: np.ndarray
    kappa: np.ndarray
    ngd_progress: float
    trap_cos: np.ndarray
    eq_cross: np.ndarray
    lr_gd: float
    steps: int
    gd_plateau_time: np.ndarray
    ngd_log_smin: np.ndarray
    trap_plateau_time: np.ndarray
    config: dict = field(default_factory=dict)

    #: short names of the groups in the glued keys
    SHORT = {"equal-score, random init": "eq_rand", "equal-score, adversarial init": "eq_adv",
             "trap, random init": "trap_rand", "trap, adversarial init": "trap_adv"}

    def final(self, name, ref="W_mm"):
        """Median final correlation with ``ref`` per group (dict group -> float)."""
        c = self.runs[name].corr[ref][-1]
        return {g: float(np.median(c[sl])) for g, sl in self.slices.items()}

    def _group(self, name, group, ref="W_mm", k=-1):
        return self.runs[name].corr[ref][k][self.slices[group]]

    def summary(self):
        r"""The chapter's numbers: ``corr_<opt>_<group>`` and ``corra_<opt>_<group>``, median final
        correlation with :math:`W_{mm}` and :math:`W^\alpha_{mm}` per group (:attr:`SHORT`);
        ``tries``, ``eq_locopt`` (count), ``kappa_med``, ``ngd_progress``, ``corr_trap_alpha``;
        ``ngd_eq_min`` (NGD's smallest final corr, equal-score random starts), ``ngd_adv_reach``
        (adversarial equal-score starts NGD takes to corr > 0.99), ``ngd_adv_stay_min`` (the
        others' smallest corr with :math:`W^\alpha_{mm}`, 1 if none), ``trap_gd_far`` (the
        traps' adversarial starts with GD plateau time :math:`t_p > 2T`), ``trap_stay`` (GD's
        smallest corr with :math:`W^\alpha_{mm}` from those, NaN if none), ``trap_gd_left``
        (adversarial trap starts GD has left, corr :math:`\le 0.999`),
        ``trap_ngd_stay`` (the adversarial trap starts NGD keeps at corr > 0.999 with
        :math:`W^\alpha_{mm}`) and ``trap_ngd_min`` (NGD's smallest corr there),
        ``trap_rand_ngd`` (NGD's smallest final corr from the traps' random starts),
        ``trap_rand_reach`` (those with corr > 0.99), ``trap_cos`` (smallest over the traps),
        ``corr_trap_alpha`` (median), ``gd_rand_min``, ``gd_rand_start`` and ``eq_cross_max``.
        """
        out = {}
        for name in self.runs:
            for ref, pre in (("W_mm", "corr"), ("W_alpha", "corra")):
                for g, v in self.final(name, ref).items():
                    out[f"{pre}_{name}_{self.SHORT[g]}"] = v
        eq_r, eq_a, tr_a = GLOBAL_GROUPS[0], GLOBAL_GROUPS[1], GLOBAL_GROUPS[3]
        trap_gd = self._group("gd", tr_a, "W_alpha")
        trap_far = self.trap_plateau_time > 2 * self.steps
        reach = self._group("ngd", eq_a) > 0.99
        stay = self._group("ngd", eq_a, "W_alpha")[~reach]
        out.update(tries=self.trap_tries, eq_locopt=int(np.sum(self.eq_locopt)),
                   kappa_med=float(np.median(self.kappa)), ngd_progress=self.ngd_progress,
                   corr_trap_alpha=float(np.median(self.corr_trap_alpha)),
                   ngd_eq_min=float(self._group("ngd", eq_r).min()), ngd_adv_reach=int(reach.sum()),
                   ngd_adv_stay_min=float(stay.min()) if stay.size else 1.0,
                   trap_gd_far=int(np.sum(trap_far)),
                   trap_stay=float(trap_gd[trap_far].min()) if trap_far.any() else np.nan,
                   trap_gd_left=int(np.sum(trap_gd <= 0.999)),
                   trap_ngd_stay=int(np.sum(self._group("ngd", tr_a, "W_alpha") > 0.999)),
                   trap_ngd_min=float(self._group("ngd", tr_a, "W_alpha").min()),
                   trap_rand_ngd=float(self._group("ngd", GLOBAL_GROUPS[2]).min()),
                   trap_rand_reach=int(np.sum(self._group("ngd", GLOBAL_GROUPS[2]) > 0.99)),
                   trap_cos=float(np.min(self.trap_cos)), gd_rand_min=float(self._group("gd", eq_r).min()),
                   gd_rand_start=float(np.median(self._group("gd", eq_r, k=0))),
                   eq_cross_max=float(self.eq_cross.max()),
                   eq_cx_count=int(np.sum(self.eq_cross >= 0)))
        ngd_r = self._group("ngd", eq_r)
        stuck = self.ngd_log_smin[ngd_r <= 0.99]
        out.update(ngd_rand_reach=int(np.sum(ngd_r > 0.99)), ngd_stuck=int(stuck.size),
                   ngd_stuck_log10_smin=float(stuck.max() / np.log(10)) if stuck.size else np.nan)
        tp, left = self.gd_plateau_time, 1.0 - self._group("gd", eq_a, "W_alpha")
        far = tp > 2 * self.steps
        out.update(gd_tp_med=float(np.median(tp)), gd_adv_far=int(far.sum()),
                   gd_adv_left=int(np.sum(left >= 1e-3)),
                   gd_far_min_corra=float(1.0 - left[far].max()) if far.any() else np.nan,
                   gd_left_max_tp=float(tp[left >= 1e-3].max()) if np.any(left >= 1e-3) else np.nan,
                   gd_tp_spearman=float(_spearman(tp, left)))
        return out

    def claims(self):
        """The chapter's checked sentences: name -> (holds, detail)."""
        s, trials = self.summary(), self.eq_locopt.size
        eq_r, eq_a = GLOBAL_GROUPS[0], GLOBAL_GROUPS[1]
        gd_end, gd_start = self._group("gd", eq_r), self._group("gd", eq_r, k=0)
        gd_adv_a = float(self._group("gd", eq_a, "W_alpha").min())
        return {
            "no_local_trap_eq": (s["eq_locopt"] == 0,
                                 f"{s['eq_locopt']} of {trials} adversarial choices locally optimal"),
            "ngd_random_most_reach": (s["ngd_rand_reach"] >= self.REACH_FRAC * trials,
                                      f"NGD random starts: {s['ngd_rand_reach']}/{trials} reach "
                                      f"corr(W_T, W_mm) > 0.99 (at least {self.REACH_FRAC:.0%})"),
            "ngd_stuck_saturated": (s["ngd_stuck"] == 0 or s["ngd_stuck_log10_smin"] < -6,
                                    f"{s['ngd_stuck']} random starts do not reach; "
                                    + ("the largest of their smallest optimal-token masses is "
                                       f"1e{s['ngd_stuck_log10_smin']:.0f} (< 1e-6: a sequence "
                                       "saturated on a non-optimal token)" if s["ngd_stuck"]
                                       else "nothing to check")),
            "ngd_adv_most_reach": (s["ngd_adv_reach"] > trials / 2,
                                   f"NGD adversarial starts: {s['ngd_adv_reach']}/{trials} reach "
                                   "corr(W_T, W_mm) > 0.99 (more than half); the others' smallest "
                                   f"corr(W_T, W_alpha) is {s['ngd_adv_stay_min']:.4f}"),
            "ngd_progress": (self.ngd_progress >= 1.0,
                             f"progress / guaranteed = {self.ngd_progress:.3f}"),
            "gd_random_progress": (bool(np.all(gd_end > gd_start)) and s["corr_gd_eq_rand"] > 0.9,
                                   f"GD random starts: median corr {s['gd_rand_start']:.3f} -> "
                                   f"{s['corr_gd_eq_rand']:.4f}, every trial increased"),
            "gd_plateau": (s["gd_adv_far"] > 0 and s["gd_far_min_corra"] > 0.999,
                           f"GD, adversarial starts: the {s['gd_adv_far']} with t_p > 2T = "
                           f"{2 * self.steps} keep corr(W_T, W_alpha) >= "
                           f"{s['gd_far_min_corra']:.6f} (> 0.999); {s['gd_adv_left']} have left "
                           f"(overall min {gd_adv_a:.4f})"),
            "gd_plateau_time": (s["gd_tp_spearman"] <= -0.9,
                                "Spearman correlation of t_p with 1 - corr(W_T, W_alpha): "
                                f"{s['gd_tp_spearman']:.3f} (<= -0.9)"),
            "trap_holds": (s["trap_gd_far"] > 0 and s["trap_stay"] > 0.999,
                           f"GD on the traps, adversarial: the {s['trap_gd_far']} starts with "
                           f"t_p > 2T keep corr(W_T, W_alpha) >= {s['trap_stay']:.5f} (> 0.999); "
                           f"{s['trap_gd_left']} of {trials} have left (NGD stays at corr > 0.999 "
                           f"in {s['trap_ngd_stay']}, min {s['trap_ngd_min']:.4f})"),
            "trap_random_ngd": (s["trap_rand_reach"] >= self.REACH_FRAC * trials,
                                f"NGD random starts on the traps: {s['trap_rand_reach']}/{trials} "
                                f"reach corr(W_T, W_mm) > 0.99 (at least {self.REACH_FRAC:.0%}; "
                                f"min corr {s['trap_rand_ngd']:.4f})"),
            "trap_cos_positive": (s["trap_cos"] > 0, "min cos(-grad L(W_0), W_mm) at the traps' "
                                  f"adversarial starts: {s['trap_cos']:.4f}"),
            "eq_cx_rare": (s["eq_cx_count"] < trials / 2,
                           f"(Cx) holds on {s['eq_cx_count']} of {trials} random-query instances "
                           f"(fewer than half; largest min <A_it, A_js> {s['eq_cross_max']:.3g})"),
        }


def _spearman(a, b):
    """Spearman's rank correlation of two 1-d arrays (average ranks for ties); NaN if one is
    constant."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return np.nan
    return spearmanr(a, b).correlation


def global_experiment(n, T, d, *, trials, steps, R0, radius, lr_gd, lr_ngd, n_records=60, seed=0,
                      device="auto"):
    r"""GD and NGD from random and adversarial initializations, in two data settings.

    * *equal-score*: :func:`attnsvm.data.score_instances` instances (NGD's projection on W_mm
      provably grows); ``alpha`` swaps the optimal token of sequence 0 for the next one;
    * *trap*: ``trials`` distinct distinct-score instances, each with a locally optimal
      ``alpha != opt`` (:func:`attnsvm.svm.find_traps`: the first ``trials`` candidates of the stream
      ``"trap-search"`` of ``seed`` that have one).

    Random initializations have Frobenius norm ``radius`` (:func:`attnsvm.data.random_inits`); adversarial
    ones are :math:`R_0 W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`. All ``4 * trials`` runs of an
    optimizer are one batched :func:`attnsvm.train.fit` call.
    """
    eq, opt_eq = score_instances(n, T, d, trials=trials, seed=seed)
    alpha_eq = opt_eq.copy()
    alpha_eq[:, 0] = (alpha_eq[:, 0] + 1) % T
    Wmm_eq = svm.att_svm_batch(eq.X, eq.Z, opt_eq, strict=True)[0]
    Wa_eq = svm.att_svm_batch(eq.X, eq.Z, alpha_eq, strict=True)[0]
    eq_locopt = np.array([svm.is_locally_optimal(eq.X[b], eq.y[b], eq.Z[b], eq.v[b], alpha_eq[b])
                          for b in range(trials)])
    trap_b, opt_tr, alpha_tr, tries = svm.find_traps(n, T, d, trials=trials, seed=seed)
    Wmm_tr = svm.att_svm_batch(trap_b.X, trap_b.Z, opt_tr, strict=True)[0]
    Wa_tr = svm.att_svm_batch(trap_b.X, trap_b.Z, alpha_tr, strict=True)[0]

    def unit(W):
        return W / np.linalg.norm(W, axis=(-2, -1), keepdims=True)

    groups = dict(zip(GLOBAL_GROUPS, [
        (eq, Wmm_eq, Wa_eq, random_inits(d, trials, radius=radius, seed=seed)),
        (eq, Wmm_eq, Wa_eq, R0 * unit(Wa_eq)),
        (trap_b, Wmm_tr, Wa_tr, random_inits(d, trials, radius=radius, seed=seed + 1)),
        (trap_b, Wmm_tr, Wa_tr, R0 * unit(Wa_tr))]))
    data = AttnData.stack([g[0].trial(b) for g in groups.values() for b in range(trials)])
    W_mm = np.concatenate([g[1] for g in groups.values()])
    W_a = np.concatenate([g[2] for g in groups.values()])
    W0 = np.concatenate([g[3] for g in groups.values()])
    runs = {name: train.fit(data, model="W", optimizer=name, lr=lr, steps=steps, init=W0,
                            refs={"W_mm": W_mm, "W_alpha": W_a}, n_records=n_records, seed=seed,
                            device=device)
            for name, lr in (("gd", lr_gd), ("ngd", lr_ngd))}
    slices = {g: slice(k * trials, (k + 1) * trials) for k, g in enumerate(groups)}
    # NGD's proved progress <W_t, W_mm> gamma_A >= <W_0, W_mm> gamma_A + eta kappa t
    c = bounds.constants(eq, opt_eq, Wmm_eq)
    sl = slices["equal-score, adversarial init"]
    proj0 = np.einsum("bij,bij->b", W0[sl], Wmm_eq) * c["gamma_A"]
    projT = np.einsum("bij,bij->b", runs["ngd"].W[sl], Wmm_eq) * c["gamma_A"]
    ngd_progress = float(np.min((projT - proj0) / (lr_ngd * steps * c["kappa"])))
    # GD's plateau time at the adversarial equal-score starts, t_p = 1/(eta ||grad L(W_0)||)
    gnorm = np.linalg.norm(risk_grad(eq, W0[sl]), axis=(-2, -1))
    gd_tp = 1.0 / (lr_gd * gnorm)
    # min_i log s_i at NGD's final iterate from the random equal-score starts (log-space)
    lq = log_q(eq, opt_eq, runs["ngd"].W[slices["equal-score, random init"]])
    ngd_log_smin = np.min(-np.logaddexp(0.0, lq), axis=-1)
    G_trap = risk_grad(trap_b, W0[slices["trap, adversarial init"]])
    trap_cos = np.array([metrics.corr(-G_trap[b], Wmm_tr[b]) for b in range(trials)])
    trap_tp = 1.0 / (lr_gd * np.linalg.norm(G_trap, axis=(-2, -1)))       # GD's plateau time there
    return GlobalExperiment(runs=runs, slices=slices, W_mm=W_mm, W_alpha=W_a, W0=W0, eq=eq,
                            opt_eq=opt_eq, eq_locopt=eq_locopt, trap_tries=tries,
                            corr_trap_alpha=np.array([metrics.corr(Wa_tr[b], Wmm_tr[b])
                                                      for b in range(trials)]),
                            kappa=c["kappa"], ngd_progress=ngd_progress, trap_cos=trap_cos,
                            eq_cross=bounds.cross_gram_min(eq, opt_eq), lr_gd=float(lr_gd),
                            steps=int(steps), gd_plateau_time=gd_tp, ngd_log_smin=ngd_log_smin,
                            trap_plateau_time=trap_tp,
                            config=dict(n=n, T=T, d=d, trials=trials, steps=steps, R0=R0, radius=radius,
                                        lr_gd=lr_gd, lr_ngd=lr_ngd, seed=seed))


def global_cx_experiment(n, T, d, *, trials, steps, radius, R_adv, R_big, lr_gd, lr_ngd,
                         short_steps=None, seed=0, device="auto"):
    r"""The global theorem on orthogonal-query equal-score instances (the cross-sequence
    condition (Cx) holds), every run checked at every step (:func:`attnsvm.runs.global_run`).

    Starts: ``"random"`` (norm ``radius``, :func:`attnsvm.data.random_inits`) and ``"adversarial"``
    (:math:`R_{\mathrm{adv}}W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`, ``alpha`` swapping sequence 0's
    optimal token for the next one), each run by GD and NGD at the theorem's steps
    (``"theorem"``) and at the given steps ``lr_gd``, ``lr_ngd`` (``"default"``); and ``"large"``
    (:math:`R_{\mathrm{big}}W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`, saturated on a wrong token), run
    at the lemma's steps :math:`\min(\mathrm{lr\_gd}, \eta_{\mathrm{GD}})` and
    :math:`\eta_{\mathrm{NGD}}` (``"noloss"``, the smallest over the trials). The theorem runs
    take ``steps`` steps, the others ``short_steps`` (default ``steps // 10``).
    The random and adversarial starts of one optimizer and step kind run as one batched call
    (:func:`attnsvm.runs.global_runs`, each start at its own step).

    Returns
    -------
    GlobalCxRun
    """
    data, opt = score_instances(n, T, d, trials=trials, queries="orthogonal", seed=seed)
    W_mm = svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    alpha = opt.copy()
    alpha[:, 0] = (alpha[:, 0] + 1) % T
    Wa = svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    Wa = Wa / np.linalg.norm(Wa, axis=(-2, -1), keepdims=True)
    c = bounds.constants(data, opt, W_mm)
    eta_gd0, eta_ngd0 = bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], n)
    starts = {"random": random_inits(d, trials, radius=radius, seed=seed), "adversarial": R_adv * Wa}
    short = max(steps // 10, 1) if short_steps is None else short_steps
    runs = {}
    for name, lr in (("ngd", lr_ngd), ("gd", lr_gd)):
        for kind, step, k in (("theorem", "theorem", steps), ("default", lr, short)):
            # both starts in one run, each at its own step (runs.global_runs)
            for sname, r in global_runs(data, opt, W_mm, starts, optimizer=name, lr=step,
                                              steps=k, device=device).items():
                runs[sname, name, kind] = r
    runs = {key: runs[key] for key in ((s, o, k) for s in starts for o in ("ngd", "gd")
                                       for k in ("theorem", "default"))}     # the old order
    for name, step in (("ngd", float(eta_ngd0.min())), ("gd", min(lr_gd, float(eta_gd0.min())))):
        runs["large", name, "noloss"] = global_run(data, opt, W_mm, R_big * Wa,
                                                         optimizer=name, lr=step, steps=short,
                                                         device=device)
    return GlobalCxRun(runs, bounds.cross_gram_min(data, opt),
                       config=dict(cx_trials=trials, cx_steps=steps, cx_radius=radius, cx_R=R_adv))


def _global_cx_numbers(runs):
    r"""The numbers of the global-theorem experiment (:func:`global_cx_experiment`), as a flat
    dict of floats, ints and bools (medians and extremes over trials):

    ``eta_{opt}_{start}`` the theorem's step, ``treach_{opt}_{start}`` the largest bound
    :math:`t_{\mathrm{reach}}`, ``first_{opt}_{start}`` the largest observed first step in the
    region, ``bound_over_first_{opt}_{start}`` the smallest ratio of the two, for the theorem
    runs (opt ``ngd``/``gd``, start ``random``/``adversarial``); ``reached`` whether every
    theorem run reached the region within its bound, or has its bound beyond its record and has
    not reached it yet (bool), ``pending`` the number of the latter; ``excess_frac`` and ``mass_frac``
    the fractions of (trial, step) pairs of the theorem runs where the from-0 bounds hold;
    ``mono_proved`` whether every :math:`q_i` is nonincreasing at every checked step of every run
    covered by the lemma (theorem runs and the ``"noloss"`` runs; bool), ``mono_pairs`` the
    number of (trial, step) pairs checked there; ``default_mono`` and ``default_trials`` the
    number of (run, trial) pairs of the default-step runs with monotone :math:`q_i`, and their
    total; ``default_first_{opt}`` the largest first step in the region at the default step
    (NaN-free: trials that never reach count as the run length); ``default_noloss_{opt}``
    whether the default step is within the lemma's in every trial (bool); ``large_reached_{opt}`` the
    number of large-norm trials that reach the region and ``large_trials``.
    """
    out, reached, ex, ms, mono, pairs = {"pending": 0}, True, [], [], True, 0
    dmono = dtot = 0
    for (start, name, kind), r in runs.items():
        if kind == "theorem":
            key = f"{name}_{start}"
            out[f"eta_{key}"] = r["eta"]
            out[f"treach_{key}"] = float(np.max(r["t_reach"]))
            fin = np.isfinite(r["first"])
            out[f"first_{key}"] = float(np.max(np.where(fin, r["first"], r["excess"].shape[0])))
            out[f"bound_over_first_{key}"] = float(np.min(r["t_reach"] / np.maximum(
                np.where(fin, r["first"], np.inf), 1)))
            # the theorem promises the region by t_reach: a run not yet there at the end of its
            # record is consistent with it only if its t_reach lies beyond the record
            horizon = r["excess"].shape[0] - 1
            reached &= bool(np.all(np.where(fin, r["first"] <= r["t_reach"],
                                            r["t_reach"] > horizon)))
            out["pending"] += int(np.sum(~fin))
            ex.append(r["excess_holds"])
            ms.append(r["mass_holds"])
        if kind in ("theorem", "noloss"):
            ok = bool(np.all(r["noloss"])) if kind == "noloss" else bool(np.all(r["proved"]))
            if not ok:
                raise ValueError(f"run {(start, name, kind)} is not covered by the lemma")
            mono &= bool(np.all(r["mono"]))
            pairs += int(np.sum(r["mono_checked"]))
        if kind == "default":
            dmono += int(np.sum(r["mono"]))
            dtot += r["mono"].size
            fin = np.isfinite(r["first"])
            first = float(np.max(np.where(fin, r["first"], r["excess"].shape[0])))
            out[f"default_first_{name}"] = max(out.get(f"default_first_{name}", 0.0), first)
            out[f"default_noloss_{name}"] = (out.get(f"default_noloss_{name}", True)
                                             and bool(np.all(r["noloss"])))
        if kind == "noloss":
            out[f"large_reached_{name}"] = int(np.sum(np.isfinite(r["first"])))
            out["large_trials"] = int(r["first"].size)
    out.update(reached=reached, excess_frac=float(np.mean(np.concatenate(ex, axis=1))),
               mass_frac=float(np.mean(np.concatenate(ms, axis=1))), mono_proved=mono,
               mono_pairs=pairs, default_mono=dmono, default_trials=dtot)
    return out


@dataclass
class GlobalCxRun:
    r"""Result of :func:`global_cx_experiment`.

    Attributes
    ----------
    runs : dict (start, optimizer, kind) -> dict of :func:`attnsvm.runs.global_run`
    cross_min : (trials,) :func:`attnsvm.bounds.cross_gram_min`, :math:`\ge 0` where (Cx) holds
    """

    runs: dict
    cross_min: np.ndarray
    config: dict = field(default_factory=dict)

    def summary(self):
        r"""The numbers of :func:`_global_cx_numbers`, each prefixed ``cx_``, plus
        ``cx_cross_min``, ``cx_bound_over_first_min`` (smallest ratio bound / observed reaching
        step), ``cx_first_max`` (largest observed reaching step) and ``cx_default_<opt>_within``
        (the words ``"is"`` / ``"is not"``: the default step within the lemma's)."""
        cx = _global_cx_numbers(self.runs)
        out = {f"cx_{k}": v for k, v in cx.items()}
        out.update(cx_cross_min=float(self.cross_min.min()),
                   cx_bound_over_first_min=min(v for k, v in cx.items()
                                               if k.startswith("bound_over_first")),
                   cx_first_max=max(v for k, v in cx.items() if k.startswith("first_")))
        for name in ("gd", "ngd"):
            out[f"cx_default_{name}_within"] = "is" if cx[f"default_noloss_{name}"] else "is not"
        return out

    def claims(self):
        """The checked sentences on the global theorem: name -> (holds, detail)."""
        cx = _global_cx_numbers(self.runs)
        times = ", ".join(f"{k} {v:.0f}" for k, v in cx.items() if k.startswith(("first_", "treach_")))
        return {
            "cx_holds": (bool(np.all(self.cross_min >= 0)),
                         f"min cross inner product <A_it, A_js>: {self.cross_min.min():.3g}"),
            "cx_q_monotone": (cx["mono_proved"], "every q_i nonincreasing at each of "
                              f"{cx['mono_pairs']} checked (trial, step) pairs"),
            "cx_reached": (cx["reached"], "every theorem run reaches E <= eps0 no later than "
                           f"t_reach ({cx['pending']} whose t_reach lies beyond the record have "
                           "not reached it yet): " + times),
            "cx_excess_bound": (cx["excess_frac"] == 1.0, "fraction of (trial, step) pairs under "
                                f"the from-0 bound: {cx['excess_frac']}"),
        }

