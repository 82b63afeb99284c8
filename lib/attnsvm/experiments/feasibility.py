r"""Sweeps over instance sizes: feasibility and rank of the Att-SVM as functions of (n, T, d).

For every grid point :math:`(n, T, d)` of a Cartesian grid, :func:`feasibility_sweep` draws
``instances`` seeded attention instances (:func:`draw_instances`), computes the optimal tokens,
and solves the Frobenius Att-SVM (:math:`W_{mm}`, ``attnsvm.svm.att_svm``) and optionally the
nuclear-norm one (:math:`W^*_{mm}`). An infeasible instance (``InfeasibleError``) is *counted as
infeasible* and never enters the rank statistics: ranks are summarized over the feasible
instances only, with the relative threshold of ``attnsvm.svm.rank``.

The result (:class:`SweepResult`) is tidy: ``summary`` holds one row per grid point and
``per_instance`` one row per instance, each a dict of equal-length numpy columns.

Instance ``j`` of grid point ``(n, T, d)`` is drawn from the key ``(seed, n, T, d, j)``, so it
does not depend on the rest of the grid or on the number of instances.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass

import numpy as np

from .._checks import check_choice, check_int
from ..data import AttnData, random_unit
from ..svm import InfeasibleError, att_svm, rank
from ..tokens import optimal_tokens

__all__ = ["draw_instance", "draw_instances", "SweepResult", "feasibility_sweep",
           "singular_gap"]


def draw_instance(n, T, d, *, seed, query="self"):
    r"""One seeded attention instance of ``attnsvm.data.random_unit``: tokens, queries and head
    drawn :math:`N(0, I)` and normalized to unit length, labels :math:`y_i = \pm 1` with
    probability 1/2 each.

    Parameters
    ----------
    n, T, d : int
        Sequences, tokens per sequence (>= 2), dimension.
    seed : int or sequence of int
        Entropy of the ``numpy.random.SeedSequence`` passed to the generator.
    query : {"self", "cross"}
        ``"self"``: :math:`z_i = x_{i1}` (the first token, index 0); ``"cross"``: :math:`z_i`
        drawn independently (unit length).

    Returns
    -------
    AttnData (unbatched)
    """
    check_choice("query", query, ("self", "cross"))
    key = [int(k) for k in np.atleast_1d(seed)]
    return random_unit(n, T, d, cross=query == "cross", seed=np.random.SeedSequence(key))


def draw_instances(n, T, d, trials, *, seed, query="self"):
    """``trials`` instances of :func:`draw_instance` (trial ``j`` from key ``(*seed, j)``),
    stacked as a batched ``AttnData``."""
    trials = check_int("trials", trials, minimum=1)
    key = tuple(np.atleast_1d(seed).tolist())
    return AttnData.stack([draw_instance(n, T, d, seed=key + (j,), query=query)
                           for j in range(trials)])


def singular_gap(W, r):
    r"""``(sigma_r / sigma_1, sigma_{r+1} / sigma_1)``: the smallest singular value counted in
    the rank ``r`` and the largest one left out, both relative to the largest (the second is 0
    when ``r`` is full). A rank is trustworthy when the first is far above the threshold and the
    second far below it."""
    s = np.linalg.svd(np.asarray(W, dtype=float), compute_uv=False)
    top = s[0] if s.size and s[0] > 0 else 1.0
    kept = s[r - 1] / top if r >= 1 else np.nan
    left = s[r] / top if r < s.size else 0.0
    return float(kept), float(left)


@dataclass
class SweepResult:
    """Result of :func:`feasibility_sweep`.

    Attributes
    ----------
    summary : dict of str -> ndarray (G,)
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

    summary: dict
    per_instance: dict
    config: dict

    def rows(self, **fixed):
        """Boolean mask of the summary rows whose columns equal ``fixed`` (e.g. ``n=5, T=4``)."""
        mask = np.ones(len(self.summary["n"]), dtype=bool)
        for k, val in fixed.items():
            mask &= self.summary[k] == val
        return mask

    def curve(self, x, column, **fixed):
        """``(x values, column values)`` over the summary rows matching ``fixed``, sorted by x."""
        m = self.rows(**fixed)
        order = np.argsort(self.summary[x][m], kind="stable")
        return self.summary[x][m][order], self.summary[column][m][order]


def _stats(prefix, vals):
    if vals.size == 0:
        return {f"{prefix}_{k}": np.nan for k in ("mean", "median", "q25", "q75", "min", "max")}
    return {f"{prefix}_mean": float(vals.mean()), f"{prefix}_median": float(np.median(vals)),
            f"{prefix}_q25": float(np.quantile(vals, 0.25)),
            f"{prefix}_q75": float(np.quantile(vals, 0.75)),
            f"{prefix}_min": float(vals.min()), f"{prefix}_max": float(vals.max())}


def feasibility_sweep(ns, Ts, ds, instances, *, seed=0, query="self", nuclear=False,
                      rtol=1e-6, progress=False):
    r"""Feasibility and rank of the Att-SVM over the grid ``ns x Ts x ds``.

    Parameters
    ----------
    ns, Ts, ds : iterables of int
        Grid values of :math:`n`, :math:`T` (>= 2) and :math:`d`.
    instances : int
        Instances per grid point.
    seed : int
        Instance ``j`` of ``(n, T, d)`` uses the key ``(seed, n, T, d, j)``.
    query : {"self", "cross"}
        Query model of :func:`draw_instance`.
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
    instances = check_int("instances", instances, minimum=1)
    grid = list(itertools.product(*(sorted({check_int(nm, v, minimum=lo) for v in vals})
                                    for nm, vals, lo in (("n", ns, 1), ("T", Ts, 2),
                                                         ("d", ds, 1)))))
    cols = {k: [] for k in ("n", "T", "d", "instance", "feasible", "rank_fro", "rank_nuc",
                            "span_z", "kept_fro", "left_fro", "kept_nuc", "left_nuc", "tie")}
    summary = []
    for (n, T, d) in grid:
        rf, rn = [], []
        for j in range(instances):
            inst = draw_instance(n, T, d, seed=(seed, n, T, d, j), query=query)
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
                row["kept_fro"], row["left_fro"] = singular_gap(W, row["rank_fro"])
                rf.append(row["rank_fro"])
                if nuclear:
                    with warnings.catch_warnings():   # cvxpy's "may be inaccurate": post-checked
                        warnings.simplefilter("ignore", UserWarning)
                        Wn = att_svm(inst.X, inst.Z, opt, norm="nuc")
                    row["rank_nuc"] = rank(Wn, rtol=rtol)
                    row["kept_nuc"], row["left_nuc"] = singular_gap(Wn, row["rank_nuc"])
                    rn.append(row["rank_nuc"])
            for k in cols:
                cols[k].append(row[k])
        nf = len(rf)
        nt = int(sum(cols["tie"][-instances:]))
        srow = dict(n=n, T=T, d=d, instances=instances, ties=nt, feasible=nf,
                    infeasible=instances - nt - nf,
                    feasible_frac=nf / max(instances - nt, 1), rank_bound=min(n, d))
        srow.update(_stats("rank_fro", np.array(rf, dtype=float)))
        srow.update(_stats("rank_nuc", np.array(rn, dtype=float)))
        summary.append(srow)
        if progress:
            print(f"n={n} T={T} d={d}: feasible {nf}/{instances}", flush=True)
    summ = {k: np.array([r[k] for r in summary]) for k in summary[0]}
    per = {k: np.array(v) for k, v in cols.items()}
    config = dict(ns=list(ns), Ts=list(Ts), ds=list(ds), instances=instances, seed=seed,
                  query=query, nuclear=nuclear, rtol=rtol)
    return SweepResult(summ, per, config)
