r"""Sweeps over instance sizes: feasibility and rank of the Att-SVM as functions of (n, T, d).

For every grid point :math:`(n, T, d)` of a Cartesian grid, :func:`feasibility_sweep` draws
``instances`` seeded attention instances (:func:`attnsvm.data.keyed_trials`), computes the optimal tokens,
and solves the Frobenius Att-SVM (:math:`W_{mm}`, ``attnsvm.svm.att_svm``) and optionally the
nuclear-norm one (:math:`W^*_{mm}`). An infeasible instance (``InfeasibleError``) is *counted as
infeasible* and never enters the rank statistics: ranks are summarized over the feasible
instances only, with the relative threshold of ``attnsvm.svm.rank``.

The result (:class:`SweepResult`) is tidy: ``per_point`` holds one row per grid point and
``per_instance`` one row per instance, each a dict of equal-length numpy columns.

Instance ``j`` of grid point ``(n, T, d)`` is drawn from the key ``(seed, n, T, d, j)``, so it
does not depend on the rest of the grid or on the number of instances.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np

from .. import metrics as _metrics
from .._checks import check_int, renamed
from ..data import keyed_instance
from ..svm import InfeasibleError, att_svm, rank
from ..tokens import optimal_tokens

__all__ = ["SweepResult", "feasibility_sweep", "FeasibilityStudy",
           "feasibility_study"]


@dataclass
class SweepResult:
    """Result of :func:`feasibility_sweep`.

    Attributes
    ----------
    per_point : dict of str -> ndarray (G,)
        One row per grid point: ``n, T, d, instances, ties, feasible, infeasible,
        feasible_frac`` (``ties``: instances whose optimal token is not unique, excluded from
        everything; ``feasible_frac = feasible / (instances - ties)``)
        and, over the feasible instances only, ``rank_fro_{mean,median,q25,q75,min,max}`` and
        (if computed) ``rank_nuc_{...}`` (NaN where no instance is feasible or the nuclear
        norm was not solved). ``rank_bound`` is :math:`\\min(n, d)`.
    per_instance : dict of str -> ndarray (G * instances,)
        ``n, T, d, instance, feasible, rank_fro, rank_nuc`` (``-1`` where infeasible or not
        computed), ``tie``, ``span_z`` (numerical rank of the queries), and the relative singular values
        around the rank cut, ``kept_fro, left_fro, kept_nuc, left_nuc`` (NaN where undefined).
    config : dict
        The arguments of the sweep.
    """

    per_point: dict
    per_instance: dict
    config: dict

    def rows(self, **fixed):
        """Boolean mask of the grid points whose columns equal ``fixed`` (e.g. ``n=5, T=4``)."""
        mask = np.ones(len(self.per_point["n"]), dtype=bool)
        for k, val in fixed.items():
            mask &= self.per_point[k] == val
        return mask

    def curve(self, x, column, **fixed):
        """``(x values, column values)`` over the grid points matching ``fixed``, sorted by x."""
        m = self.rows(**fixed)
        order = np.argsort(self.per_point[x][m], kind="stable")
        return self.per_point[x][m][order], self.per_point[column][m][order]

    def sure_points(self):
        r"""Mask of the grid points where feasibility is guaranteed (:math:`n \le d`,
        :math:`T \le d + 1`)."""
        q = self.per_point
        return (q["n"] <= q["d"]) & (q["T"] <= q["d"] + 1)

    def first_full_d(self, n):
        """Smallest ``d`` at which every instance with this ``n`` is feasible (-1 if none)."""
        q = self.per_point
        return int(min(q["d"][self.rows(n=n) & (q["feasible_frac"] == 1)], default=-1))

    def summary(self):
        r"""Headline numbers of the sweep (NaN where undefined, e.g. no feasible instance).

        ``sure_points``/``sure_feasible``: grid points with :math:`n \le d, T \le d+1` and
        those among them where every instance is feasible; ``rank_violations``: feasible
        instances whose rank (Frobenius or nuclear) exceeds :math:`\min(n, d)`;
        ``infeasible``/``total``: instances; ``rank_{fro,nuc}_mean_all``: mean rank over the
        feasible instances; ``left_{fro,nuc}_max``, ``kept_{fro,nuc}_min``: the extreme relative
        singular values around the rank cut.
        """
        p = self.per_instance
        f = p["feasible"]
        sure = self.sure_points()
        bound = np.minimum(p["n"][f], p["d"][f])
        out = {
            "sure_points": int(sure.sum()),
            "sure_feasible": int((self.per_point["feasible_frac"][sure] == 1).sum()),
            "rank_violations": int(np.sum(p["rank_fro"][f] > bound) + np.sum(p["rank_nuc"][f] > bound)),
            "infeasible": int(np.sum(~f)), "total": int(len(f)),
        }
        for key in ("rank_fro", "rank_nuc"):
            out[f"{key}_mean_all"] = _nan_reduce(np.mean, p[key][f])
        for key in ("left_fro", "left_nuc"):
            out[f"{key}_max"] = _nan_reduce(np.nanmax, p[key][f])
        for key in ("kept_fro", "kept_nuc"):
            out[f"{key}_min"] = _nan_reduce(np.nanmin, p[key][f])
        return out


def _nan_reduce(fn, vals):
    """``float(fn(vals))``, NaN when ``vals`` is empty or all NaN."""
    vals = np.asarray(vals, dtype=float)
    if vals.size == 0 or np.all(np.isnan(vals)):
        return float("nan")
    return float(fn(vals))


@dataclass
class FeasibilityStudy:
    """Chapter 2's three sweeps (:func:`feasibility_study`): ``over_n`` (n x d at fixed T),
    ``over_T`` (T x d at fixed n) and ``ranks`` (d at fixed n, T, with the nuclear norm)."""

    over_n: SweepResult
    over_T: SweepResult
    ranks: SweepResult

    @property
    def config(self):
        """The study's parameters, named as the chapter's parameters cell names them."""
        on, ot, rk = self.over_n.config, self.over_T.config, self.ranks.config
        return {"ns_feas": on["ns"], "T_feas": on["Ts"][0], "n_T": ot["ns"][0], "Ts_feas": ot["Ts"],
                "ds_feas": on["ds"], "trials_feas": on["trials"], "n_rank": rk["ns"][0],
                "T_rank": rk["Ts"][0], "ds_rank": rk["ds"], "trials_rank": rk["trials"],
                "rtol": rk["rtol"], "seed": on["seed"]}

    def summary(self):
        """The chapter's headline numbers (NaN-safe): the guaranteed-feasible points of all three
        sweeps (``sure_points``, ``sure_feasible``), the rank sweep's counts and extremes
        (``rank_violations``, ``rank_infeasible``, ``rank_total``, ``rank_{fro,nuc}_dmax`` at
        the largest d, ``rank_{fro,nuc}_mean_all``, ``left_*_max``, ``kept_*_min``), the feasible
        fraction at the largest n and smallest d (``feas_nmax_dmin``) and the first fully
        feasible d at the largest n (``full_d_nmax``); the grid's ends ``n_feas_max``,
        ``d_feas_min`` (sweep over n) and ``d_max_rank`` (rank sweep)."""
        sweeps = (self.over_n, self.over_T, self.ranks)
        parts = [sw.summary() for sw in sweeps]
        r = parts[2]
        q = self.ranks.per_point
        big = self.ranks.rows(d=max(self.ranks.config["ds"]))
        on = self.over_n
        nmax, dmin = max(on.config["ns"]), min(on.config["ds"])
        return {
            "sure_points": sum(s["sure_points"] for s in parts),
            "sure_feasible": sum(s["sure_feasible"] for s in parts),
            "rank_violations": r["rank_violations"],
            "rank_infeasible": r["infeasible"], "rank_total": r["total"],
            "rank_fro_dmax": float(q["rank_fro_mean"][big][0]),
            "rank_nuc_dmax": float(q["rank_nuc_mean"][big][0]),
            "rank_nuc_mean_all": r["rank_nuc_mean_all"],
            "rank_fro_mean_all": r["rank_fro_mean_all"],
            "left_nuc_max": r["left_nuc_max"], "kept_nuc_min": r["kept_nuc_min"],
            "left_fro_max": r["left_fro_max"], "kept_fro_min": r["kept_fro_min"],
            "feas_nmax_dmin": float(on.per_point["feasible_frac"][on.rows(n=nmax, d=dmin)][0]),
            "full_d_nmax": on.first_full_d(nmax),
            "n_feas_max": nmax, "d_feas_min": dmin, "d_max_rank": max(self.ranks.config["ds"]),
        }

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``), from :meth:`summary`.

        * ``sure_all_feasible``: every instance is feasible at every grid point where
          feasibility is guaranteed (:math:`n \le d`, :math:`T \le d+1`), and there is one;
        * ``feasibility_fades``: at the largest ``n`` and smallest ``d`` of the sweep over
          ``n`` at most half of the instances are feasible, and from some larger ``d`` on all
          are (every ``d`` at or above ``full_d_nmax``);
        * ``rank_bound_holds``: no feasible instance has rank above :math:`\min(n, d)`;
        * ``rank_cut_clean``: the smallest relative singular value counted (over the feasible
          instances, both SVMs) is at least 100 times the largest one left out, so every
          threshold between the two, ``rtol`` among them, gives the same ranks (at the
          ``paper`` sizes the gap is narrower than at the ``quick`` ones: ~1e3 against ~1e6);
        * ``fro_on_bound``: at the largest ``d`` of the rank sweep the mean rank of
          :math:`W_{mm}` equals :math:`\min(n, d)`;
        * ``nuc_lower``: there the mean rank of :math:`W^\star_{mm}` is at least 1 lower.
        """
        s = self.summary()
        on, rk = self.over_n, self.ranks
        nmax, dmin = max(on.config["ns"]), min(on.config["ds"])
        full = s["full_d_nmax"]
        q = on.per_point
        after = on.rows(n=nmax) & (q["d"] >= full)
        fades = bool(s["feas_nmax_dmin"] <= 0.5 and full > dmin
                     and np.all(q["feasible_frac"][after] == 1))
        rtol = rk.config["rtol"]
        kept = min(s["kept_fro_min"], s["kept_nuc_min"])
        left = max(s["left_fro_max"], s["left_nuc_max"])
        bound = float(rk.per_point["rank_bound"][rk.rows(d=max(rk.config["ds"]))][0])
        return {
            "sure_all_feasible": (bool(s["sure_points"] > 0
                                       and s["sure_feasible"] == s["sure_points"]),
                                  f"{s['sure_feasible']} of {s['sure_points']} guaranteed points "
                                  "fully feasible"),
            "feasibility_fades": (fades, f"feasible fraction {s['feas_nmax_dmin']:.3f} at n = {nmax}, "
                                         f"d = {dmin} (<= 0.5); all feasible from d = {full} on"),
            "rank_bound_holds": (bool(s["rank_violations"] == 0),
                                 f"{s['rank_violations']} violations"),
            "rank_cut_clean": (bool(kept >= 100 * left and left <= rtol < kept),
                               f"smallest kept {kept:.2e}, largest left out {left:.2e}: a gap "
                               f"of {kept / max(left, 1e-300):.3g} (>= 100) around rtol {rtol:g}"),
            "fro_on_bound": (bool(s["rank_fro_dmax"] == bound),
                             f"mean rank of W_mm {s['rank_fro_dmax']:.3f}, bound {bound:g}"),
            "nuc_lower": (bool(s["rank_nuc_dmax"] <= s["rank_fro_dmax"] - 1),
                          f"mean rank of W*_mm {s['rank_nuc_dmax']:.3f}, of W_mm "
                          f"{s['rank_fro_dmax']:.3f} (at least 1 lower)"),
        }


@renamed(instances="trials", instances_rank="trials_rank")
def feasibility_study(ns, T_n, n_T, Ts, ds, trials, *, n_rank, T_rank, ds_rank,
                      trials_rank, rtol=1e-6, seed=0):
    """Chapter 2: feasibility over ``ns x {T_n} x ds`` and over ``{n_T} x Ts x ds``
    (``trials`` instances each), and the ranks of both SVMs over ``{n_rank} x {T_rank} x ds_rank``
    (``trials_rank`` each, nuclear norm included). Returns a :class:`FeasibilityStudy`."""
    return FeasibilityStudy(
        feasibility_sweep(ns, [T_n], ds, trials, seed=seed),
        feasibility_sweep([n_T], Ts, ds, trials, seed=seed),
        feasibility_sweep([n_rank], [T_rank], ds_rank, trials_rank, seed=seed, nuclear=True,
                          rtol=rtol))


def _stats(prefix, vals):
    if vals.size == 0:
        return {f"{prefix}_{k}": np.nan for k in ("mean", "median", "q25", "q75", "min", "max")}
    return {f"{prefix}_mean": float(vals.mean()), f"{prefix}_median": float(np.median(vals)),
            f"{prefix}_q25": float(np.quantile(vals, 0.25)),
            f"{prefix}_q75": float(np.quantile(vals, 0.75)),
            f"{prefix}_min": float(vals.min()), f"{prefix}_max": float(vals.max())}


@renamed(instances="trials", query="cross (a bool: cross=True for query='cross', False for 'self')")
def feasibility_sweep(ns, Ts, ds, trials, *, seed=0, cross=False, nuclear=False,
                      rtol=1e-6, progress=False):
    r"""Feasibility and rank of the Att-SVM over the grid ``ns x Ts x ds``.

    Parameters
    ----------
    ns, Ts, ds : iterables of int
        Grid values of :math:`n`, :math:`T` (>= 2) and :math:`d`.
    trials : int
        Instances per grid point.
    seed : int
        Instance ``j`` of ``(n, T, d)`` uses the key ``(seed, n, T, d, j)``.
    cross : bool
        Query model of :func:`attnsvm.data.keyed_instance`.
    nuclear : bool
        Also solve the nuclear-norm SVM :math:`W^*_{mm}` (a cone program; slower) on the
        feasible instances. Feasibility does not depend on the norm.
    rtol : float
        Relative rank threshold of ``attnsvm.svm.rank``.
    progress : bool
        Print one line per grid point.

    Returns
    -------
    SweepResult
    """
    trials = check_int("trials", trials, minimum=1)
    grid = list(itertools.product(*(sorted({check_int(nm, v, minimum=lo) for v in vals})
                                    for nm, vals, lo in (("n", ns, 1), ("T", Ts, 2),
                                                         ("d", ds, 1)))))
    cols = {k: [] for k in ("n", "T", "d", "instance", "feasible", "rank_fro", "rank_nuc",
                            "span_z", "kept_fro", "left_fro", "kept_nuc", "left_nuc", "tie")}
    summary = []
    for (n, T, d) in grid:
        rf, rn = [], []
        for j in range(trials):
            inst = keyed_instance(n, T, d, seed=(seed, n, T, d, j), cross=cross)
            row = dict(n=n, T=T, d=d, instance=j, feasible=False, rank_fro=-1, rank_nuc=-1,
                       span_z=rank(inst.Z, rtol=1e-10), kept_fro=np.nan, left_fro=np.nan,
                       kept_nuc=np.nan, left_nuc=np.nan, tie=False)
            W = None
            try:
                opt = optimal_tokens(inst.X, inst.y, inst.v)
            except ValueError:          # optimal token not unique: excluded from everything
                row["tie"] = True
                opt = None
            if opt is not None:
                try:
                    W = att_svm(inst.X, inst.Z, opt)
                except InfeasibleError:
                    W = None
            if W is not None:
                row["feasible"] = True
                row["rank_fro"] = rank(W, rtol=rtol)
                row["kept_fro"], row["left_fro"] = _metrics.singular_gap(W, row["rank_fro"])
                rf.append(row["rank_fro"])
                if nuclear:
                    with warnings.catch_warnings():   # cvxpy's "may be inaccurate": post-checked
                        warnings.simplefilter("ignore", UserWarning)
                        Wn = att_svm(inst.X, inst.Z, opt, norm="nuc")
                    row["rank_nuc"] = rank(Wn, rtol=rtol)
                    row["kept_nuc"], row["left_nuc"] = _metrics.singular_gap(Wn, row["rank_nuc"])
                    rn.append(row["rank_nuc"])
            for k in cols:
                cols[k].append(row[k])
        nf = len(rf)
        nt = int(sum(cols["tie"][-trials:]))
        srow = dict(n=n, T=T, d=d, instances=trials, ties=nt, feasible=nf,
                    infeasible=trials - nt - nf,
                    feasible_frac=nf / max(trials - nt, 1), rank_bound=min(n, d))
        srow.update(_stats("rank_fro", np.array(rf, dtype=float)))
        srow.update(_stats("rank_nuc", np.array(rn, dtype=float)))
        summary.append(srow)
        if progress:
            print(f"n={n} T={T} d={d}: feasible {nf}/{trials}", flush=True)
    summ = {k: np.array([r[k] for r in summary]) for k in summary[0]}
    per = {k: np.array(v) for k, v in cols.items()}
    config = dict(ns=list(ns), Ts=list(Ts), ds=list(ds), trials=trials, seed=seed,
                  cross=cross, nuclear=nuclear, rtol=rtol)
    return SweepResult(summ, per, config)
