r"""Beyond a single token (chapter "Beyond a single token", notebook ``ch07_beyond``): with a
nonlinear (ReLU MLP) head, attention keeps a *set* of tokens per sequence, and the direction of
:math:`W` is compared with the Att-SVM of those sets.

* :func:`multi_token_selection` (:class:`MultiTokenRun`): train the attention model with a linear
  or an MLP head, read the sets :math:`S_i` that keep softmax mass
  (``attnsvm.metrics.selected_sets``) and compare with their Att-SVM
  (``attnsvm.svm.att_svm_batch``);
* :func:`multi_token_horizons` (:class:`MultiTokenHorizons`): the same at several training
  horizons and dimensions;
* :func:`beyond_study` (:class:`BeyondStudy`): the chapter's study.

The chapters on the nuclear norm and on prompt attention are
:mod:`attnsvm.experiments.selection`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import check_int
from ..data import unit_instances
from .. import metrics as _metrics
from .. import svm as _svm
from .. import tokens as _tokens
from .. import train as _train

__all__ = ["MultiTokenRun", "multi_token_selection", "MultiTokenHorizons", "multi_token_horizons", "BeyondStudy",
           "beyond_study"]


@dataclass
class MultiTokenRun:
    """Result of :func:`multi_token_selection` (arrays over ``B`` trials).

    Attributes
    ----------
    history : History (snapshots of W)
    sets : list of B lists of n tuples: tokens with final softmax mass >= ``mass_tol``
    set_sizes : (B, n) int
    resolved : (B,) bool: some sequence leaves a token out of its set (a set of all ``T``
        tokens is accepted and gives that sequence equalities only; when every set is full the
        trial has selected nothing and no SVM is built)
    W_gen : (B, d, d) the generalized SVM of ``sets`` (zeros where infeasible or unresolved)
    feasible : (B,) bool: resolved and the generalized SVM is feasible
    W_single : (B, d, d) the single-token SVM of the argmax tokens (for comparison)
    feasible_single : (B,) bool
    corr_gen, corr_single : (K, B) correlation of :math:`W_t` with ``W_gen`` / ``W_single``
    predicted : (B,) bool: feasible and final ``corr_gen >= threshold``
    """

    history: object
    sets: list
    set_sizes: np.ndarray
    resolved: np.ndarray
    W_gen: np.ndarray
    feasible: np.ndarray
    W_single: np.ndarray
    feasible_single: np.ndarray
    corr_gen: np.ndarray
    corr_single: np.ndarray
    predicted: np.ndarray
    steps: np.ndarray
    config: dict = field(default_factory=dict)

    @property
    def fraction_predicted(self):
        """Fraction of all trials on which the generalized SVM predicts the limit direction."""
        return float(np.mean(self.predicted))

    @property
    def multi(self):
        """(B,) bool: some sequence keeps more than one token."""
        return (self.set_sizes > 1).any(axis=1)

    def summary(self):
        r"""The headline numbers (medians NaN-safe): ``frac_pred``, final median correlations
        ``corr_gen`` / ``corr_single``, ``frac_multi``, ``mean_set_size``, ``n_unresolved``,
        ``n_infeasible`` (resolved but infeasible), ``frac_gen_better`` (final corr with the
        generalized SVM at least that with the single-token SVM, NaN counted as -1),
        ``norm_growth`` (median :math:`\|W_T\| / \|W_{T/2}\|`) and ``loss_final`` (median)."""
        h, T = self.history, int(self.steps[-1])
        return {
            "frac_pred": self.fraction_predicted,
            "corr_gen": _metrics.nanmedian(self.corr_gen[-1]),
            "corr_single": _metrics.nanmedian(self.corr_single[-1]),
            "frac_multi": float(np.mean(self.multi)),
            "mean_set_size": float(np.mean(self.set_sizes)),
            "n_unresolved": int(np.sum(~self.resolved)),
            "n_infeasible": int(np.sum(self.resolved & ~self.feasible)),
            "frac_gen_better": float(np.mean(np.nan_to_num(self.corr_gen[-1], nan=-1)
                                             >= np.nan_to_num(self.corr_single[-1], nan=-1))),
            "norm_growth": float(np.median(h.norm[-1] / h.norm[np.searchsorted(self.steps, T // 2)])),
            "loss_final": float(np.median(h.final("loss"))),
        }

    def claims(self, control=None):
        r"""Checked claims (``name -> (holds, detail)``), from :meth:`summary`.

        Linear head: ``sets_single``, every set is a single token. Nonlinear head:
        ``most_multi``, more than half of the instances keep a set of several tokens in some
        sequence; ``gen_mostly_closer``, the generalized SVM is at least as close to
        :math:`W_T` as the single-token one on more than half of the instances;
        ``threshold_partial``, it clears the threshold on fewer instances than that. Given the
        linear-head run ``control`` on the same instances: ``norm_grows_slower``, the median
        growth of :math:`\|W_t\|` over the second half is smaller by at least 0.3 than the
        control's."""
        s = self.summary()
        if self.config.get("head") == "linear":
            return {"sets_single": (bool(s["mean_set_size"] == 1.0 and s["frac_multi"] == 0.0),
                                    f"mean set size {s['mean_set_size']:.3f}, "
                                    f"fraction with a larger set {s['frac_multi']:.3f}")}
        fm, fb, fp = s["frac_multi"], s["frac_gen_better"], s["frac_pred"]
        out = {"most_multi": (bool(fm > 0.5), f"fraction with a set of size > 1: {fm:.3f} (> 0.5)"),
               "gen_mostly_closer": (bool(fb > 0.5),
                                     f"generalized at least as close in {fb:.3f} (> 0.5)"),
               "threshold_partial": (bool(fp < fb),
                                     f"predicted {fp:.3f} < at least as close {fb:.3f}")}
        if control is not None:
            g, gc = s["norm_growth"], control.summary()["norm_growth"]
            out["norm_grows_slower"] = (bool(g <= gc - 0.3),
                                        f"norm growth {g:.3f} vs control {gc:.3f} (<= control - 0.3)")
        return out


def multi_token_selection(data, *, head="mlp", width=None, train_v=False, loss="logistic",
                          optimizer="ngd", lr=0.1, steps=2000, mass_tol=1e-3, threshold=0.95,
                          n_records=60, seed=0, device="auto"):
    r"""Train ``W`` (from 0) with a linear or MLP head and test the generalized SVM.

    At the end, :math:`S_i` is the set of tokens with softmax mass at least ``mass_tol``
    (:func:`attnsvm.metrics.selected_sets`); the generalized SVM is ``att_svm(X, Z, sets)`` (tokens in
    :math:`S_i` get equal scores, all others at least 1 lower; a set of all ``T`` tokens gives
    equalities only). The generalized SVM
    *predicts the limit direction* on a trial when it is feasible and the final correlation
    :math:`\mathrm{corr}(W_T, W^{S}_{mm}) \ge` ``threshold``.

    Returns
    -------
    MultiTokenRun
    """
    X, Z = data.X, data.Z
    B, n, T, d = X.shape
    threshold = float(threshold)
    h = _train.fit(data, model="W", head=head, width=width, train_v=train_v, loss=loss,
                   optimizer=optimizer, lr=lr, steps=steps, n_records=n_records,
                   snapshots=True, seed=seed, device=device)
    W = h.params["W"]
    sets = _metrics.selected_sets(X, W, Z, mass_tol=mass_tol)
    sizes = np.array([[len(s) for s in st] for st in sets])
    resolved = (sizes < T).any(axis=1)        # every set full: no margin row, no direction
    Wg = np.zeros((B, d, d))
    fg = np.zeros(B, dtype=bool)
    idx = np.flatnonzero(resolved)
    if idx.size:
        Wg[idx], fg[idx] = _svm.att_svm_batch(X[idx], Z[idx], [sets[b] for b in idx])
    single = _tokens.selected_tokens(X, W, Z)
    Ws, fs = _svm.att_svm_batch(X, Z, single)
    cg = _metrics.corr(h.snapshots, Wg[None])
    cs = _metrics.corr(h.snapshots, Ws[None])
    cg[:, ~fg] = np.nan
    cs[:, ~fs] = np.nan
    pred = fg & (np.nan_to_num(cg[-1], nan=-1.0) >= threshold)
    return MultiTokenRun(history=h, sets=sets, set_sizes=sizes, resolved=resolved, W_gen=Wg,
                         feasible=fg,
                         W_single=Ws, feasible_single=fs, corr_gen=cg, corr_single=cs,
                         predicted=pred, steps=h.steps,
                         config=dict(head=head, width=width, train_v=train_v, loss=loss,
                                     optimizer=optimizer, lr=lr, steps=steps, T=T,
                                     mass_tol=mass_tol, threshold=threshold, seed=seed))


@dataclass
class MultiTokenHorizons:
    """Result of :func:`multi_token_horizons`.

    Attributes
    ----------
    runs : dict ``d -> {horizon: MultiTokenRun}`` (the run of ``horizon`` steps on the instances
        of dimension ``d``; the runs of one ``d`` share instances and initializations, so the
        shorter one is the start of the longer one)
    horizons : tuple of int, increasing
    config : dict
    """

    runs: dict
    horizons: tuple
    config: dict = field(default_factory=dict)

    def fraction_predicted(self):
        """``{d: {horizon: fraction}}``: the fraction of instances on which the generalized SVM
        predicts the limit direction (:attr:`MultiTokenRun.fraction_predicted`)."""
        return {d: {h: r.fraction_predicted for h, r in by_h.items()} for d, by_h in self.runs.items()}

    def summary(self):
        """Headline numbers, keyed by position so that a chapter's prose does not depend on the
        parameters: ``horizon_short`` / ``horizon_long`` (the shortest and longest horizon),
        ``frac_pred_short`` / ``frac_pred_long`` (pooled over ``d``), ``d_{k}`` and
        ``frac_pred_{k}_short`` / ``frac_pred_{k}_long`` for the ``k``-th ``d``,
        ``n_full_sets_short`` / ``n_full_sets_long`` (instances in which some sequence keeps all
        ``T`` tokens, which then gives equalities only), ``n_instances`` (over all ``d``) and
        ``trials`` (per ``d``)."""
        out = {}
        ends = {"short": self.horizons[0], "long": self.horizons[-1]}
        runs = list(self.runs.items())
        for end, h in ends.items():
            out[f"horizon_{end}"] = int(h)
            out[f"frac_pred_{end}"] = float(np.mean(np.concatenate(
                [by_h[h].predicted for _, by_h in runs])))
            out[f"n_full_sets_{end}"] = int(sum(
                np.sum((by_h[h].set_sizes == by_h[h].config["T"]).any(axis=1)) for _, by_h in runs))
            for k, (d, by_h) in enumerate(runs):
                out[f"d_{k}"] = int(d)
                out[f"frac_pred_{k}_{end}"] = by_h[h].fraction_predicted
        out["trials"] = int(runs[0][1][self.horizons[0]].predicted.size)
        out["n_instances"] = out["trials"] * len(runs)
        return out

    def claims(self):
        """Checked claims: ``rate_rises`` (pooled over ``d``, the fraction predicted at the
        longest horizon exceeds that at the shortest) and ``rate_rises_each_d`` (it does not
        fall with the horizon for any ``d``)."""
        f = self.fraction_predicted()
        h0, h1 = self.horizons[0], self.horizons[-1]
        s = self.summary()
        pooled = (s["frac_pred_long"] > s["frac_pred_short"],
                  f"pooled fraction {s['frac_pred_short']:.3f} at {h0} steps, "
                  f"{s['frac_pred_long']:.3f} at {h1}")
        each = (all(f[d][h1] >= f[d][h0] for d in f),
                "; ".join(f"d={d}: {f[d][h0]:.3f} -> {f[d][h1]:.3f}" for d in f))
        return {"rate_rises": pooled, "rate_rises_each_d": each}


def multi_token_horizons(n, T, ds, *, trials=40, horizons=(2000, 20000), seed=0, **kw):
    r""":func:`multi_token_selection` on :func:`attnsvm.data.unit_instances` ``(n, T, d)`` for every ``d`` in
    ``ds`` and every training horizon (number of steps) in ``horizons``, from the same instances
    and initializations (so a shorter run is the start of a longer one).

    Parameters
    ----------
    n, T : int
    ds : sequence of int
    trials : int
        Instances per ``d``.
    horizons : sequence of int, increasing
    seed : int
    **kw
        Passed to :func:`multi_token_selection` (``head``, ``width``, ``mass_tol``,
        ``threshold``, ``optimizer``, ``lr``, ``device``, ...).

    Returns
    -------
    MultiTokenHorizons
    """
    horizons = tuple(check_int("horizons", h, minimum=1) for h in horizons)
    if len(horizons) < 1 or any(b <= a for a, b in zip(horizons, horizons[1:])):
        raise ValueError(f"horizons must be strictly increasing, got {horizons}")
    runs = {}
    for d in ds:
        d = check_int("ds", d, minimum=1)
        data = unit_instances(n, T, d, trials=trials, seed=seed)
        runs[d] = {h: multi_token_selection(data, steps=h, seed=seed, **kw) for h in horizons}
    return MultiTokenHorizons(runs=runs, horizons=horizons,
                              config=dict(n=n, T=T, ds=tuple(runs), trials=trials, seed=seed, **kw))


@dataclass
class BeyondStudy:
    r"""Chapter 7's study (:func:`beyond_study`): :func:`multi_token_selection` with the MLP and
    the linear head on the same instances (``runs``, head -> :class:`MultiTokenRun`) and
    :func:`multi_token_horizons` (``horiz``)."""

    runs: dict
    horiz: object
    config: dict = field(default_factory=dict)

    def summary(self):
        """Every run's summary with its head as a suffix (``<key>_mlp``, ``<key>_linear``) and the
        horizon study's with the prefix ``h_``."""
        out = {f"{key}_{head}": value for head, r in self.runs.items() for key, value in r.summary().items()}
        out.update({f"h_{key}": value for key, value in self.horiz.summary().items()})
        return out

    def claims(self):
        """Each run's claims against the linear head as control (prefixed by the head), and the
        horizon study's."""
        out = {f"{head}_{name}": value for head, r in self.runs.items()
               for name, value in r.claims(control=self.runs["linear"]).items()}
        out.update(self.horiz.claims())
        return out


def beyond_study(n, T, d, *, trials, steps, lr, width, mass_tol, threshold, h_n, h_T, h_ds, h_trials,
                 horizons, seed=0, device="auto"):
    r"""Chapter 7: NGD with the MLP head (width ``width``) and with the linear head on
    :func:`attnsvm.data.unit_instances` ``(n, T, d)`` (:func:`multi_token_selection`), and the
    horizon study :func:`multi_token_horizons` ``(h_n, h_T, h_ds)`` with the MLP head. Returns a
    :class:`BeyondStudy`."""
    data = unit_instances(n, T, d, trials=trials, seed=seed)
    kw = dict(optimizer="ngd", lr=lr, steps=steps, mass_tol=mass_tol, threshold=threshold, seed=seed,
              device=device)
    runs = {"mlp": multi_token_selection(data, head="mlp", width=width, **kw),
            "linear": multi_token_selection(data, head="linear", **kw)}
    horiz = multi_token_horizons(h_n, h_T, h_ds, trials=h_trials, horizons=horizons, head="mlp",
                                 optimizer="ngd", lr=lr, mass_tol=mass_tol, threshold=threshold, seed=seed,
                                 device=device)
    return BeyondStudy(runs, horiz, config=dict(
        n=n, T=T, d=d, trials=trials, steps=steps, lr=lr, width=width, mass_tol=mass_tol,
        threshold=threshold, h_n=h_n, h_T=h_T, h_ds=list(h_ds), h_trials=h_trials,
        horizons=list(horizons), seed=seed))
