r"""Joint training of the attention matrix and the head (Chapter 11).

The data: seeded instances with one planted label-carrying token per sequence
(:func:`attnsvm.data.planted_token`, batched; the head starts at :math:`v_0 = 0`);
:func:`attnsvm.svm.joint_references` solves the attention SVM and the max-margin head of the reference
tokens, and :func:`joint_fit` trains ``W`` and ``v`` jointly in one :func:`attnsvm.train.fit`
call (snapshots of both along the way) and compares them with the references.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import check_int
from ..data import planted_token
from ..svm import att_svm_batch, head_svm, joint_references
from ..metrics import attention, corr
from ..optim import settings_config
from ..tokens import optimal_tokens
from ..train import fit

__all__ = ["JointRun", "joint_fit", "JointExperiment", "joint_experiment"]


@dataclass
class JointRun:
    r"""Joint training of ``W`` and ``v`` recorded at ``steps`` (K,), for B trials.

    ``loss``, ``log_loss`` (natural log, exact when ``loss`` underflows), ``norm_W``,
    ``norm_v``, ``corr_W``, ``corr_v``, ``mass`` (mean softmax mass on the reference tokens) and
    ``min_margin`` (:math:`\min_i y_i f(X_i)`) are (K, B); ``W`` (B,d,d), ``v`` (B,d) final; ``W_ref``, ``v_ref`` the
    attention SVM and the max-margin head of the reference tokens ``alpha`` (B, n).
    """
    steps: np.ndarray
    loss: np.ndarray
    log_loss: np.ndarray
    norm_W: np.ndarray
    norm_v: np.ndarray
    corr_W: np.ndarray
    corr_v: np.ndarray
    mass: np.ndarray
    min_margin: np.ndarray
    W: np.ndarray
    v: np.ndarray
    W_ref: np.ndarray
    v_ref: np.ndarray
    alpha: np.ndarray


def joint_fit(data, alpha, *, optimizer="gd", lr=None, eta_max="auto", steps=10000, segments=24,
              record_steps=None, refs=None, seed=0, device="auto"):
    r"""Train ``W`` and ``v`` jointly from ``W_0 = 0`` and the data's ``v`` and record both along
    the way: one :func:`attnsvm.train.fit` call (``model="W", train_v=True``,
    ``snapshots=("W", "v")``), for any step rule of :data:`attnsvm.optim.OPTIMIZERS`.

    Parameters
    ----------
    data : AttnData with a trials axis; alpha : (B, n) reference tokens (e.g. the planted ones).
    lr, eta_max : the step size and the Polyak cap, as in :func:`attnsvm.train.fit`.
    segments : int
        Number of log-spaced record steps after 0 (``record_grid(steps, "log", segments + 1)``).
    record_steps : increasing ints from 0 to ``steps``, optional: explicit record steps (instead
        of ``segments`` log-spaced ones).
    refs : ``(W_ref, v_ref)``, optional (default :func:`attnsvm.svm.joint_references`).
    """
    W_ref, v_ref = joint_references(data, alpha) if refs is None else refs
    if record_steps is None:
        grid = "log"
    else:
        grid = np.asarray(record_steps, dtype=int)
        if grid[0] != 0 or grid[-1] != steps or np.any(np.diff(grid) <= 0):
            raise ValueError("record_steps must increase strictly from 0 to steps")
    kw = dict(model="W", train_v=True, optimizer=optimizer, lr=lr, eta_max=eta_max, opt=alpha,
              seed=seed, device=device)
    B, d = data.trials, data.d
    h = fit(data, steps=steps, init={"W": np.zeros((B, d, d)), "v": np.array(data.v, dtype=float)},
            record_every=grid, n_records=segments + 1, snapshots=("W", "v"), **kw)
    Ws, vs = h.trajectory["W"], h.trajectory["v"]                       # (K,B,d,d), (K,B,d)

    def min_margin(W, v):                                               # min_i y_i f(X_i), (B,)
        S = attention(data.X, W, data.Z)                                # (B,n,T)
        return (data.y * np.einsum("bnt,bnt->bn", S, np.einsum("bntd,bd->bnt", data.X, v))).min(-1)

    def per_record(fn):
        return np.stack([fn(W, v) for W, v in zip(Ws, vs)])

    return JointRun(
        h.steps, h.loss, h.log_loss,
        per_record(lambda W, v: np.linalg.norm(W, axis=(-2, -1))),
        per_record(lambda W, v: np.linalg.norm(v, axis=-1)),
        per_record(lambda W, v: corr(W, W_ref)),
        per_record(lambda W, v: corr(v, v_ref, elem_ndim=1)),
        h.opt_mass, per_record(min_margin), h.params["W"], h.params["v"], W_ref, v_ref,
        np.asarray(alpha))


def _ell_inv(log_loss):
    r"""The logistic inverse :math:`\ell^{-1}(L)` (the :math:`u` with :math:`\log(1 + e^{-u}) = L`)
    from :math:`\log L`; :math:`\mathrm{expm1}(L) = L` to double precision below
    :math:`\log L = -30`."""
    with np.errstate(divide="ignore"):
        exact = -np.log(np.expm1(np.exp(log_loss)))
    return np.where(log_loss < -30, -log_loss, exact)


@dataclass
class JointExperiment:
    r"""Result of :func:`joint_experiment`: ``runs`` (dict optimizer -> :class:`JointRun`) on
    ``data`` with planted tokens ``alpha`` (B, n), and ``first_W_norm``, the largest entry of
    ``W`` after one GD step from ``W_0 = 0`` (the head moves first)."""

    data: object
    alpha: np.ndarray
    runs: dict
    first_W_norm: float
    config: dict = field(default_factory=dict)

    def _analysis(self):
        data, alpha = self.data, self.alpha
        R = np.linalg.norm(data.X, axis=-1).max(axis=(-2, -1))            # radius per instance
        checks, stats, learned = {}, {}, {}
        for name, r in self.runs.items():
            bound = _ell_inv(r.log_loss) / R                               # lower bound on ||v_t||
            grew = np.diff(r.norm_v, axis=0) > 0
            opt_T = optimal_tokens(data.X, data.y, r.v)             # (B, n)
            checks[name] = dict(v_bound_slack=float(np.min(r.norm_v[1:] - bound[1:])),
                                v_monotone_after_sep=bool(np.all(grew[r.min_margin[:-1] > 0])))
            stats[name] = dict(corr_W=float(np.median(r.corr_W[-1])),
                               corr_v=float(np.median(r.corr_v[-1])), mass=float(np.median(r.mass[-1])),
                               norm_W=float(np.median(r.norm_W[-1])),
                               norm_v=float(np.median(r.norm_v[-1])),
                               log10_loss=float(np.median(r.log_loss[-1]) / np.log(10)),
                               opt_is_planted=float(np.mean(opt_T == alpha)))
            # references built from the tokens that are optimal under the learned head v_T
            W_l, feas = att_svm_batch(data.X, data.Z, opt_T)
            v_l = head_svm(data.X, data.y, opt_T)
            cW = np.where(feas, corr(r.W, np.nan_to_num(W_l), elem_ndim=2), np.nan)
            learned[name] = dict(corr_W=float(np.nanmedian(cW)),
                                 corr_v=float(np.median(corr(r.v, v_l, elem_ndim=1))),
                                 feasible=int(feas.sum()))
        # W_0 = 0; a step at which every trial's corr is NaN (W still 0) is left out before the
        # median, so no "All-NaN slice" warning is printed on the notebook page
        rows = self.runs["ngd"].corr_W[1:]
        rows = rows[np.isfinite(rows).any(axis=1)]
        peak = float(np.max(np.nanmedian(rows, axis=1))) if len(rows) else float("nan")
        return checks, stats, learned, peak

    def summary(self):
        r"""The chapter's glued numbers: per optimizer, the medians over trials of the final
        ``corr_W_<opt>``, ``corr_v_<opt>``, ``mass_<opt>``, ``norm_W_<opt>``, ``norm_v_<opt>``,
        ``log10_loss_<opt>``, ``opt_is_planted_<opt>`` (fraction of tokens optimal under
        :math:`v_T` that are the planted ones) and against the learned-head references
        ``corr_W_learned_<opt>``, ``corr_v_learned_<opt>``, ``feasible_learned_<opt>``;
        ``v_bound_slack`` (smallest :math:`\|v_t\| - \ell^{-1}(\mathcal{L})/R`), ``v_monotone``
        (bool), ``first_W_norm`` and ``peak_corr_W_ngd``."""
        checks, stats, learned, peak = self._analysis()
        out = {f"{key}_{name}": v for name in self.runs for key, v in stats[name].items()}
        out.update(v_bound_slack=min(c["v_bound_slack"] for c in checks.values()),
                   v_monotone=all(c["v_monotone_after_sep"] for c in checks.values()),
                   first_W_norm=self.first_W_norm)
        for name, lv in learned.items():
            out.update({f"{k}_learned_{name}": v for k, v in lv.items()})
        out["peak_corr_W_ngd"] = peak
        return out

    def claims(self):
        """The chapter's checked sentences: name -> (holds, detail)."""
        checks, stats, _, peak = self._analysis()
        runs, slack = self.runs, min(c["v_bound_slack"] for c in checks.values())
        corr_v = "median final corr(v_T, v_mm): " + ", ".join(f"{k} {stats[k]['corr_v']:.3f}"
                                                              for k in runs)
        return {
            "head_first": (self.first_W_norm == 0.0,
                           f"max |W_1| after one GD step: {self.first_W_norm:g}"),
            "head_norm_bound": (slack >= 0, f"smallest slack of ||v_t|| >= ell^-1(L)/R: {slack:.4f}"),
            "head_monotone": (all(c["v_monotone_after_sep"] for c in checks.values()),
                              "||v_t|| increased between consecutive records after separation, for "
                              + ", ".join(f"{k}: {c['v_monotone_after_sep']}" for k, c in checks.items())),
            "head_aligns": (all(stats[k]["corr_v"] > 0.8 for k in runs), corr_v),
            "ngd_head_closest": (all(stats["ngd"]["corr_v"] > stats[k]["corr_v"]
                                     for k in runs if k != "ngd"), corr_v),
            "attention_selects": (all(stats[k]["mass"] > 0.5 and 0.5 < stats[k]["corr_W"] < 0.95
                                      for k in runs),
                                  "median final mass on alpha / corr(W_T, W_mm^alpha): "
                                  + ", ".join(f"{k} {stats[k]['mass']:.3f}/{stats[k]['corr_W']:.3f}"
                                              for k in runs)),
            "ngd_drifts_back": (peak > stats["ngd"]["corr_W"] + 0.01, "NGD median "
                                f"corr(W_t, W_mm^alpha): peak {peak:.3f}, final {stats['ngd']['corr_W']:.3f}"),
            "head_outgrows": (all(bool(np.all(r.norm_v[-1] > r.norm_W[-1])) for r in runs.values()),
                              "final ||v_T|| > ||W_T|| in every trial of every rule"),
        }


def joint_experiment(n=8, T=6, d=16, *, trials=4, signal=1.0, steps=10000, segments=24,
                     settings=None, seed=0, device="auto"):
    r"""Chapter 11's experiment: :func:`attnsvm.data.planted_token` instances, every optimizer of ``settings``
    (name -> :func:`joint_fit` keyword arguments; default GD at 1, NGD at 0.1, Polyak capped at
    100) trained jointly from ``W_0 = 0``, and one GD step to show that the head moves first.

    Returns
    -------
    JointExperiment
    """
    settings = settings if settings is not None else {
        "gd": dict(lr=1.0), "ngd": dict(lr=0.1), "polyak": dict(lr=1.0, eta_max=100.0)}
    data, alpha = planted_token(n, T, d, signal=signal, trials=check_int("trials", trials, minimum=1),
                                seed=seed)
    refs = joint_references(data, alpha)
    runs = {name: joint_fit(data, alpha, optimizer=name, steps=steps, segments=segments,
                            refs=refs, seed=seed, device=device, **kw)
            for name, kw in settings.items()}
    first = joint_fit(data, alpha, optimizer="gd", lr=settings.get("gd", {}).get("lr", 1.0),
                      steps=1, segments=1, refs=refs, device=device)
    config = dict(n=n, T=T, d=d, trials=trials, signal=signal, steps=steps, segments=segments,
                  seed=seed, **settings_config(settings))
    return JointExperiment(data, alpha, runs, float(np.abs(first.W).max()), config)
