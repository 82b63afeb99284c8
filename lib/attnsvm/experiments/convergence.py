r"""Gradient descent on attention: local and global convergence (the chapter "Gradient descent:
global and local convergence").

Everything that loops over trials, solves SVMs or trains lives here; the notebooks only call
these functions and plot.

Notation (the book's): ``X`` (n, T, d) tokens, ``y`` (n,) labels, ``Z`` (n, d) queries, ``v``
(d,) head, token scores :math:`\gamma_{it} = y_i v^\top x_{it}`, a choice of one selected
token per sequence :math:`\alpha` (``alpha``, (n,) int), its Att-SVM
:math:`W^\alpha_{mm}` (``attnsvm.svm.att_svm(X, Z, alpha)``) and the *selection margins*
:math:`m_{it}(W) = (x_{i\alpha_i} - x_{it})^\top W z_i`.

Theory helpers (numpy, one instance)
------------------------------------
* ``selection_margins`` (``attnsvm.tokens``, re-exported), ``attnsvm.metrics.nonselected_mass``:
  the margins of a choice and the softmax mass :math:`1 - s_{i\alpha_i}` left on the other
  tokens (log-sum-exp, exact at any norm).
* ``attnsvm.bounds.saturation_bound``, ``attnsvm.bounds.cone_margin_bound``: the bounds of the
  saturation lemma and of its cone version.
* ``attnsvm.losses.loss_value``, ``attnsvm.losses.loss_grad``: :math:`\mathcal{L}(W)` and
  :math:`\nabla\mathcal{L}(W)` of the W-parameterization with a fixed linear head.
* ``attnsvm.svm.ray_alignment``, ``attnsvm.svm.ray_alignment_limit``: :math:`\langle
  -\nabla\mathcal{L}(c W^\alpha_{mm}), W^\alpha_{mm}\rangle` (computed in a cancellation-free
  form) and its asymptotic constant :math:`\Lambda_\alpha`; ``attnsvm.svm.find_choices``: a
  seeded search for choices that are (or are not) locally optimal.
* ``loss_floor`` (``attnsvm.losses``, re-exported): :math:`\frac1n\sum_i \ell(\gamma_{i\alpha_i})`.

Experiments (batched: one ``attnsvm.train.fit`` call per setting)
-----------------------------------------------------------------
* :func:`classify`: the outcome of each trial (global / local / other), see :data:`GLOBAL_CORR`.
* :func:`local_experiment`: random initializations, correlations with :math:`W_{mm}` (for
  ``opt``) and with :math:`W^\alpha_{mm}` (for the tokens selected at the end).
* :func:`cone_experiment`: initializations inside a cone around :math:`W^\alpha_{mm}`.
* :func:`overparam_sweep`: the fraction of trials converging to the global :math:`W_{mm}`
  as a function of ``d``.
* the W, (K,Q) and prompt trajectories of a two-dimensional instance (notebook ``ch04a``):
  :mod:`attnsvm.experiments.trajectories`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import as_float_array, check_positive, renamed
from ..data import AttnData
from .. import data as _data
from .. import metrics as _metrics
from .. import svm as _svm
from .. import tokens as _tokens
from .. import train as _train
from ..losses import loss_floor  # noqa: F401  (re-exported: ch04's API)
from ..tokens import selection_margins  # noqa: F401  (re-exported: ch04's API)

__all__ = [
    "GLOBAL_CORR",
    "selection_margins",
    "loss_floor",
    "Outcomes",
    "classify",
    "LocalRun",
    "local_experiment",
    "LocalFollowups",
    "local_followups",
    "ConeRun",
    "cone_experiment",
    "follow",
    "OverparamSweep",
    "overparam_sweep",
]

#: default correlation threshold of "converged in direction" (see :func:`classify`)
GLOBAL_CORR = 0.99


def _check_batched_choice(data, alpha):
    """Validate a batched instance and a (B, n) choice of tokens; return (B, n, d)."""
    if not isinstance(data, AttnData) or not data.batched:
        raise ValueError("data must be a batched AttnData")
    B, n, d = data.trials, data.n, data.d
    if np.shape(alpha) != (B, n):
        raise ValueError(f"alpha must have shape ({B}, {n}), got {np.shape(alpha)}")
    return B, n, d


# ----------------------------------------------------------------------------- outcomes
@dataclass
class Outcomes:
    r"""The outcome of each trial of a batch (arrays with a leading trials axis ``B``).

    A trial *converges to the global* :math:`W_{mm}` when its final selected tokens (argmax of
    the attention scores) are ``opt`` in every sequence **and**
    :math:`\mathrm{corr}(W_{\mathrm{final}}, W_{mm}) \ge` ``threshold``; it *converges to a
    local* :math:`W^\alpha_{mm}` when the final selection :math:`\alpha` differs from ``opt``
    in some sequence, :math:`W^\alpha_{mm}` exists and
    :math:`\mathrm{corr}(W_{\mathrm{final}}, W^\alpha_{mm}) \ge` ``threshold``. Everything else
    (not yet aligned, or the selection's SVM infeasible) is "other".

    Attributes
    ----------
    opt, selected : (B, n) int
    is_opt : (B,) bool            final selection == opt
    feasible_opt : (B,) bool      W_mm exists
    feasible_sel : (B,) bool      W_mm^alpha exists for the final selection alpha
    corr_opt, corr_sel : (B,)     corr(W_final, W_mm), corr(W_final, W_mm^alpha) (NaN if infeasible)
    locally_optimal : (B,) bool   the final selection is locally optimal
    is_global, is_local : (B,) bool
    W_mm, W_sel : (B, d, d)       zeros where infeasible
    threshold : float
    """

    opt: np.ndarray
    selected: np.ndarray
    is_opt: np.ndarray
    feasible_opt: np.ndarray
    feasible_sel: np.ndarray
    corr_opt: np.ndarray
    corr_sel: np.ndarray
    locally_optimal: np.ndarray
    is_global: np.ndarray
    is_local: np.ndarray
    W_mm: np.ndarray
    W_sel: np.ndarray
    threshold: float

    @property
    def frac_global(self):
        return float(np.mean(self.is_global))

    @property
    def frac_local(self):
        return float(np.mean(self.is_local))

    @property
    def frac_other(self):
        return float(1.0 - np.mean(self.is_global | self.is_local))


def classify(data, W, selected, *, threshold=GLOBAL_CORR, W_mm=None, feasible_opt=None):
    r"""Classify each trial's outcome (see :class:`Outcomes` for the definitions).

    Parameters
    ----------
    data : AttnData, batched (B trials)
    W : array_like (B, d, d)
        Final iterates.
    selected : int array (B, n)
        Final selected tokens (argmax of the attention scores).
    threshold : float in (0, 1)
        Correlation threshold (default :data:`GLOBAL_CORR`).
    W_mm, feasible_opt : optional
        Precomputed ``attnsvm.svm.att_svm_batch(X, Z, opt)``.
    """
    if not isinstance(data, AttnData) or not data.batched:
        raise ValueError("data must be a batched AttnData")
    B, n, d = data.trials, data.n, data.d
    W = as_float_array("W", W, shape=(B, d, d))
    selected = np.asarray(selected)
    if selected.shape != (B, n) or not np.issubdtype(selected.dtype, np.integer):
        raise ValueError(f"selected must be an integer array of shape ({B}, {n})")
    threshold = check_positive("threshold", threshold)
    if threshold >= 1:
        raise ValueError(f"threshold must be < 1, got {threshold}")
    opt = _tokens.optimal_tokens(data.X, data.y, data.v)
    if W_mm is None:
        W_mm, feasible_opt = _svm.att_svm_batch(data.X, data.Z, opt)
    is_opt = np.all(selected == opt, axis=-1)
    W_sel = np.where(is_opt[:, None, None], W_mm, 0.0)
    feasible_sel = np.where(is_opt, feasible_opt, False)
    lo = np.where(is_opt, feasible_opt, False)
    for b in np.flatnonzero(~is_opt):
        try:
            W_sel[b] = _svm.att_svm(data.X[b], data.Z[b], selected[b])
            feasible_sel[b] = True
            lo[b] = _svm.is_locally_optimal(data.X[b], data.y[b], data.Z[b], data.v[b],
                                            selected[b])
        except _svm.InfeasibleError:
            pass
    with np.errstate(invalid="ignore"):
        corr_opt = np.where(feasible_opt, _metrics.corr(W, np.where(feasible_opt[:, None, None],
                                                                   W_mm, 1.0)), np.nan)
        corr_sel = np.where(feasible_sel, _metrics.corr(W, np.where(feasible_sel[:, None, None],
                                                                   W_sel, 1.0)), np.nan)
    is_global = is_opt & feasible_opt & (np.nan_to_num(corr_opt, nan=-1.0) >= threshold)
    is_local = ~is_opt & feasible_sel & (np.nan_to_num(corr_sel, nan=-1.0) >= threshold)
    return Outcomes(opt=opt, selected=selected, is_opt=is_opt, feasible_opt=feasible_opt,
                    feasible_sel=feasible_sel, corr_opt=corr_opt, corr_sel=corr_sel,
                    locally_optimal=lo, is_global=is_global, is_local=is_local, W_mm=W_mm,
                    W_sel=W_sel, threshold=threshold)


# ----------------------------------------------------------------------------- local experiment
@dataclass
class LocalRun:
    r"""Trajectories of :func:`local_experiment` (``K`` records, ``B`` trials).

    Attributes
    ----------
    steps : (K,)
    corr_opt : (K, B)      corr(W_t, W_mm), W_mm the SVM of ``opt`` (NaN where infeasible)
    corr_sel : (K, B)      corr(W_t, W^alpha_mm), alpha = the tokens selected *at the end*
    mass_opt : (K, B)      mean over sequences of the softmax mass on ``opt``
    mass_sel : (K, B)      mean over sequences of the softmax mass on the final selection
    loss : (K, B)
    loss_floor_opt, loss_floor_sel : (B,)   (1/n) sum_i ell(gamma_{i,opt_i}), ... alpha_i
    outcomes : Outcomes
    data : AttnData
    W_final : (B, d, d)    the last iterates
    config : dict
    """

    steps: np.ndarray
    corr_opt: np.ndarray
    corr_sel: np.ndarray
    mass_opt: np.ndarray
    mass_sel: np.ndarray
    loss: np.ndarray
    loss_floor_opt: np.ndarray
    loss_floor_sel: np.ndarray
    outcomes: Outcomes
    data: AttnData
    W_final: np.ndarray
    config: dict = field(default_factory=dict)

    def summary(self):
        r"""The headline numbers (NaN where the set they are taken over is empty).

        ``frac_opt`` (final selection = opt), ``frac_global``, ``frac_local``, ``frac_other``,
        ``n_local``; over the converged trials (global or local): ``frac_conv_lo`` (locally
        optimal final selection), ``mass_sel_median`` (final mass on the selection); medians
        ``corr_global_median`` (corr with :math:`W_{mm}`, global trials),
        ``corr_local_sel_median`` / ``corr_local_opt_median`` (local trials, against
        :math:`W^\alpha_{mm}` and :math:`W_{mm}`) and ``excess_local_median`` (final loss above
        the floor of opt, local trials).
        """
        out = self.outcomes
        g, loc = out.is_global, out.is_local
        conv = g | loc
        nan = float("nan")
        return {
            "frac_opt": float(out.is_opt.mean()),
            "frac_global": out.frac_global, "frac_local": out.frac_local, "frac_other": out.frac_other,
            "n_local": int(loc.sum()),
            "frac_conv_lo": float(out.locally_optimal[conv].mean()) if conv.any() else nan,
            "corr_global_median": float(np.median(out.corr_opt[g])) if g.any() else nan,
            "corr_local_sel_median": float(np.median(out.corr_sel[loc])) if loc.any() else nan,
            "corr_local_opt_median": float(np.nanmedian(out.corr_opt[loc])) if loc.any() else nan,
            "mass_sel_median": float(np.median(self.mass_sel[-1, conv])) if conv.any() else nan,
            "excess_local_median": (float(np.median(self.loss[-1, loc] - self.loss_floor_opt[loc]))
                                    if loc.any() else nan),
            "floor_gap_local_median": (float(np.median(self.loss_floor_sel[loc]
                                                       - self.loss_floor_opt[loc]))
                                       if loc.any() else nan),
        }

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``) after the run's ``steps`` steps.

        * ``local_exists``: some trials (``frac_local > 0``) converge in direction to
          :math:`W^\alpha_{mm}` of a final selection :math:`\alpha \ne` opt, and their median
          correlation with :math:`W_{mm}` is below that with :math:`W^\alpha_{mm}` by at least 0.1;
        * ``local_floor``: their median excess loss over :math:`L^\star` is at least half the
          median gap :math:`L^\star_\alpha - L^\star` of their floors (they stall above
          :math:`L^\star`, near :math:`L^\star_\alpha`);
        * ``converged_lo``: at least 0.9 of the converging trials (global or local) end on a
          locally optimal selection (``frac_conv_lo >= 0.9``).
        """
        s = self.summary()
        steps = self.config.get("steps")
        sel, opt_ = s["corr_local_sel_median"], s["corr_local_opt_median"]
        ex, gap = s["excess_local_median"], s["floor_gap_local_median"]
        return {
            "local_exists": (bool(s["frac_local"] > 0 and opt_ <= sel - 0.1),
                             f"after {steps} steps: local fraction {s['frac_local']:.3f} (> 0), "
                             f"median corr with W_mm {opt_:.4f} vs with W^alpha_mm {sel:.4f} "
                             f"(at least 0.1 lower)"),
            "local_floor": (bool(ex >= 0.5 * gap > 0),
                            f"after {steps} steps: median excess loss {ex:.3e}, at least half the "
                            f"median floor gap L*_alpha - L* = {gap:.3e}"),
            "converged_lo": (bool(s["frac_conv_lo"] >= 0.9),
                             f"after {steps} steps: locally optimal fraction of the converging "
                             f"trials {s['frac_conv_lo']:.3f} (>= 0.9)"),
        }


@renamed(query="cross (a bool: cross=True for query='cross', False for 'self')")
def local_experiment(n=6, T=8, d=10, *, trials=30, steps=2000, model="W", optimizer="ngd",
                     lr=0.1, init_scale=0.01, loss="logistic", cross=True,
                     threshold=GLOBAL_CORR, n_records=60, seed=0, device="auto"):
    r"""Train ``trials`` random instances from random initializations (one batched fit) and
    record the correlation of :math:`W_t` with :math:`W_{mm}` (``opt``) and with
    :math:`W^\alpha_{mm}` for :math:`\alpha` = the tokens selected *at the end of training*,
    and the softmax mass on both. Default: the sizes of "Transformers as SVMs"
    (n=6, T=8, d=10) with normalized GD, lr 0.1, random init :math:`N(0, 0.01^2)`.

    Returns
    -------
    LocalRun
    """
    data = _data.sized_trials(n, T, d, trials=trials, seed=seed, cross=cross)
    opt = _tokens.optimal_tokens(data.X, data.y, data.v)
    W_mm, feas = _svm.att_svm_batch(data.X, data.Z, opt)
    h = _train.fit(data, model=model, optimizer=optimizer, lr=lr, steps=steps,
                   init="random", init_scale=init_scale, loss=loss, n_records=n_records,
                   snapshots=True, seed=seed, device=device)
    snaps = h.snapshots                                         # (K, B, d, d)
    sel = h.selected[-1]
    out = classify(data, h.W, sel, threshold=threshold, W_mm=W_mm, feasible_opt=feas)
    with np.errstate(invalid="ignore"):
        corr_opt = np.where(feas, _metrics.corr(snaps, np.where(feas[:, None, None], W_mm, 1.0), elem_ndim=2),
                            np.nan)
        corr_sel = np.where(out.feasible_sel,
                            _metrics.corr(snaps, np.where(out.feasible_sel[:, None, None],
                                                          out.W_sel, 1.0), elem_ndim=2), np.nan)
    S = _metrics.attention(data.X[None], snaps, data.Z[None])     # (K, B, n, T)
    return LocalRun(steps=h.steps, corr_opt=corr_opt, corr_sel=corr_sel,
                    mass_opt=_metrics.opt_mass(S, opt), mass_sel=_metrics.opt_mass(S, sel), loss=h.loss,
                    loss_floor_opt=loss_floor(data, loss=loss),
                    loss_floor_sel=loss_floor(data, sel, loss=loss), outcomes=out, data=data,
                    W_final=h.W,
                    config=dict(n=n, T=T, d=d, trials=trials, steps=steps, model=model,
                                optimizer=optimizer, lr=lr, init_scale=init_scale, loss=loss,
                                cross=cross, threshold=threshold, seed=seed))


# ----------------------------------------------------------------------------- cone experiment
@dataclass
class ConeRun:
    r"""Trajectories of :func:`cone_experiment` (``K`` records, ``B`` trials).

    Attributes
    ----------
    steps : (K,)
    corr_alpha : (K, B)   corr(W_t, W^alpha_mm)
    corr_opt : (K, B)     corr(W_t, W_mm) (NaN where infeasible)
    mass_alpha : (K, B)   mean softmax mass on alpha
    kept : (B,)           the final selection is still alpha
    selected : (B, n)     the final selection
    alpha : (B, n)
    lambda_alpha : (B,)   the constant Lambda_alpha of the ray lemma
    corr_init : (B,)      corr(W_0, W^alpha_mm)
    """

    steps: np.ndarray
    corr_alpha: np.ndarray
    corr_opt: np.ndarray
    mass_alpha: np.ndarray
    kept: np.ndarray
    selected: np.ndarray
    alpha: np.ndarray
    lambda_alpha: np.ndarray
    corr_init: np.ndarray
    config: dict = field(default_factory=dict)


def cone_experiment(data, alpha, *, R0=5.0, eps=0.05, steps=1000, optimizer="ngd", lr=0.1,
                    loss="logistic", n_records=60, seed=0, device="auto"):
    r"""Start gradient descent inside a cone around :math:`W^\alpha_{mm}` and follow it.

    Trial ``b`` starts at :math:`W_0 = R_0\,\widehat{W}` with
    :math:`\widehat{W} = (\bar W + \epsilon\,G)/\|\bar W + \epsilon\,G\|_F`,
    :math:`\bar W = W^\alpha_{mm}/\|W^\alpha_{mm}\|_F` and :math:`G` a seeded Gaussian matrix
    of unit Frobenius norm, so :math:`\|W_0\|_F = R_0` and
    :math:`\mathrm{corr}(W_0, W^\alpha_{mm}) \approx 1/\sqrt{1+\epsilon^2}`.

    Parameters
    ----------
    data : AttnData, batched
    alpha : int array (B, n): the choices (every Att-SVM must exist)

    Returns
    -------
    ConeRun
    """
    B, n, d = _check_batched_choice(data, alpha)
    alpha = np.asarray(alpha)
    R0 = check_positive("R0", R0)
    eps = check_positive("eps", eps, allow_zero=True)
    W_a = _svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    r = _data.stream(seed, "cone-start")
    G = r.standard_normal((B, d, d))
    G /= np.linalg.norm(G, axis=(1, 2), keepdims=True)
    Wbar = W_a / np.linalg.norm(W_a, axis=(1, 2), keepdims=True)
    W0 = Wbar + eps * G
    W0 = R0 * W0 / np.linalg.norm(W0, axis=(1, 2), keepdims=True)
    run = follow(data, alpha, W0, steps=steps, optimizer=optimizer, lr=lr, loss=loss,
                 n_records=n_records, seed=seed, device=device, W_alpha=W_a)
    run.config.update(R0=R0, eps=eps)
    return run


def follow(data, alpha, W0, *, steps=1000, optimizer="ngd", lr=0.1, loss="logistic",
           n_records=60, seed=0, device="auto", W_alpha=None):
    r"""Run gradient descent from given initial matrices ``W0`` (B, d, d) and follow the
    correlation with :math:`W^\alpha_{mm}` and :math:`W_{mm}`, the softmax mass on
    :math:`\alpha` and whether the final selection is still :math:`\alpha` (used by
    :func:`cone_experiment`, and to continue the runs of :func:`local_experiment` from their
    last iterates).

    Returns
    -------
    ConeRun
    """
    B, n, d = _check_batched_choice(data, alpha)
    alpha = np.asarray(alpha)
    W0 = as_float_array("W0", W0, shape=(B, d, d))
    if W_alpha is None:
        W_alpha = _svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    W_a = W_alpha
    opt = _tokens.optimal_tokens(data.X, data.y, data.v)
    W_mm, feas_opt = _svm.att_svm_batch(data.X, data.Z, opt)
    lam = np.array([_svm.ray_alignment_limit(data.trial(b), alpha[b], W_alpha=W_a[b], loss=loss)
                    for b in range(B)])
    h = _train.fit(data, model="W", optimizer=optimizer, lr=lr, steps=steps, init=W0,
                   loss=loss, n_records=n_records, snapshots=True, seed=seed, device=device)
    snaps = h.snapshots
    S = _metrics.attention(data.X[None], snaps, data.Z[None])
    with np.errstate(invalid="ignore"):
        corr_opt = np.where(feas_opt, _metrics.corr(snaps, np.where(feas_opt[:, None, None],
                                                                   W_mm, 1.0), elem_ndim=2),
                            np.nan)
    return ConeRun(steps=h.steps, corr_alpha=_metrics.corr(snaps, W_a, elem_ndim=2),
                   corr_opt=corr_opt, mass_alpha=_metrics.opt_mass(S, alpha),
                   kept=np.all(h.selected[-1] == alpha, axis=-1), selected=h.selected[-1],
                   alpha=alpha, lambda_alpha=lam,
                   corr_init=_metrics.corr(W0, W_a, elem_ndim=2),
                   config=dict(steps=steps, optimizer=optimizer, lr=lr, loss=loss, seed=seed))


# ----------------------------------------------------------------------------- over-parameterization
@dataclass
class OverparamSweep:
    r"""Result of :func:`overparam_sweep`: one row per (n, T, d), as equal-length columns.

    ``rows`` keys: ``n, T, d, trials, frac_global, frac_local, frac_other, frac_feasible``
    (the fraction of trials whose :math:`W_{mm}` exists), ``frac_opt`` (final selection ==
    opt, whatever the correlation) and ``median_corr_global`` (median corr with
    :math:`W_{mm}` over the trials that converge globally; NaN if none).
    """

    rows: dict
    threshold: float
    config: dict = field(default_factory=dict)

    def column(self, name, n=None, T=None):
        """Column ``name`` restricted to the shape (n, T), ordered by d."""
        keep = np.ones(len(self.rows["d"]), dtype=bool)
        if n is not None:
            keep &= self.rows["n"] == n
        if T is not None:
            keep &= self.rows["T"] == T
        order = np.argsort(self.rows["d"][keep], kind="stable")
        return np.asarray(self.rows[name])[keep][order]

    def summary(self):
        """The headline numbers: for the first shape ``(n0, T0)`` of the sweep,
        ``frac_{global,local,other,feasible}_d{d}`` at every d and ``frac_global_dmin``,
        ``frac_global_dmax``; for every row, ``frac_global_n{n}_T{T}_d{d}``; the grid:
        ``n0``, ``T0``, ``d_min``, ``d_max`` and ``shapes_text``."""
        n0, T0 = self.config["shapes"][0]
        out = {"n0": int(n0), "T0": int(T0), "d_min": min(self.config["ds"]),
               "d_max": max(self.config["ds"]),
               "shapes_text": ", ".join(f"({a}, {b})" for a, b in self.config["shapes"])}
        for i, d in enumerate(self.column("d", n0, T0)):
            for name in ("frac_global", "frac_local", "frac_other", "frac_feasible"):
                out[f"{name}_d{int(d)}"] = float(self.column(name, n0, T0)[i])
        ds = self.column("d", n0, T0)
        out["frac_global_dmin"] = out[f"frac_global_d{int(min(ds))}"]
        out["frac_global_dmax"] = out[f"frac_global_d{int(max(ds))}"]
        for row in range(len(self.rows["d"])):
            n_, T_, d_ = (int(self.rows[k][row]) for k in ("n", "T", "d"))
            out[f"frac_global_n{n_}_T{T_}_d{d_}"] = float(self.rows["frac_global"][row])
        return out

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``) on the first shape ``(n0, T0)``.

        * ``global_grows``: the fraction converging to :math:`W_{mm}` is largest at the largest
          ``d`` and exceeds that at the smallest ``d`` by at least 0.5 (between neighbouring
          ``d`` it may dip by a trial or two);
        * ``feasible_from_n``: :math:`W_{mm}` exists in every trial at every ``d >= n0``;
        * ``global_beyond_feasible``: at the largest ``d`` the global fraction exceeds by at
          least 0.2 its value at the first ``d`` where every trial is feasible (over-
          parameterization acts beyond feasibility).
        """
        n0, T0 = self.config["shapes"][0]
        ds = self.column("d", n0, T0)
        g = self.column("frac_global", n0, T0)
        f = self.column("frac_feasible", n0, T0)
        full = np.flatnonzero(f == 1)
        curve = ", ".join(f"{x:.3f} (d={int(d)})" for d, x in zip(ds, g))
        out = {"global_grows": (bool(g[-1] == g.max() and g[-1] >= g[0] + 0.5),
                                f"global fraction {curve}"),
               "feasible_from_n": (bool(np.all(f[ds >= n0] == 1)),
                                   "feasible fraction " + ", ".join(
                                       f"{x:.3f} (d={int(d)})" for d, x in zip(ds, f)))}
        if full.size:
            k = full[0]
            out["global_beyond_feasible"] = (
                bool(g[-1] >= g[k] + 0.2),
                f"global fraction {g[k]:.3f} at d={int(ds[k])} (first fully feasible), "
                f"{g[-1]:.3f} at d={int(ds[-1])}")
        else:
            out["global_beyond_feasible"] = (False, "no d with every trial feasible")
        return out


@renamed(query="cross (a bool: cross=True for query='cross', False for 'self')")
def overparam_sweep(shapes=((6, 8),), ds=(2, 4, 8, 15, 30), *, trials=16, steps=2000,
                    optimizer="ngd", lr=0.1, init_scale=0.01, loss="logistic", cross=True,
                    threshold=GLOBAL_CORR, seed=0, device="auto"):
    r"""For every (n, T) in ``shapes`` and d in ``ds``: draw ``trials`` instances, train them
    from random initializations in one batched fit, and classify the outcomes
    (:func:`classify`).

    Returns
    -------
    OverparamSweep
    """
    cols = {k: [] for k in ("n", "T", "d", "trials", "frac_global", "frac_local", "frac_other",
                            "frac_feasible", "frac_opt", "median_corr_global")}
    for (n, T) in shapes:
        for d in ds:
            data = _data.sized_trials(n, T, d, trials=trials, seed=seed, cross=cross)
            h = _train.fit(data, model="W", optimizer=optimizer, lr=lr, steps=steps,
                           init="random", init_scale=init_scale, loss=loss,
                           n_records=2, seed=seed, device=device)
            out = classify(data, h.W, h.selected[-1], threshold=threshold)
            for k, val in (("n", n), ("T", T), ("d", d), ("trials", trials),
                           ("frac_global", out.frac_global), ("frac_local", out.frac_local),
                           ("frac_other", out.frac_other),
                           ("frac_feasible", float(np.mean(out.feasible_opt))),
                           ("frac_opt", float(np.mean(out.is_opt))),
                           ("median_corr_global", float(np.median(out.corr_opt[out.is_global]))
                            if out.is_global.any() else np.nan)):
                cols[k].append(val)
    rows = {k: np.asarray(v) for k, v in cols.items()}
    return OverparamSweep(rows=rows, threshold=threshold,
                          config=dict(shapes=tuple(shapes), ds=tuple(ds), trials=trials,
                                      steps=steps, optimizer=optimizer, lr=lr,
                                      init_scale=init_scale, loss=loss, cross=cross, seed=seed,
                                      threshold=threshold))


# ----------------------------------------------------------------------------- chapter 4 follow-ups
@dataclass
class LocalFollowups:
    r"""Chapter 4's follow-ups of a :class:`LocalRun` (:func:`local_followups`).

    Attributes
    ----------
    local : (L,) int        the trials that ended on a selection other than opt (``is_local``)
    more : ConeRun-like or None   :func:`follow` of those trials from their last iterate
    cone_lo : ConeRun or None     started in the cone of their (locally optimal or not) selection
    cone_nlo : ConeRun            started in the cone of a selection that is *not* locally optimal
    found : (B,) bool       trials where such a selection was found; opt_nlo (F, n) their opt
    locally_optimal : (L,) bool   whether each local trial's final selection is locally optimal
    """

    local: np.ndarray
    more: object
    cone_lo: ConeRun | None
    cone_nlo: ConeRun
    found: np.ndarray
    opt_nlo: np.ndarray
    locally_optimal: np.ndarray
    config: dict = field(default_factory=dict)

    def summary(self):
        """``more_n_lo``, ``more_n_nlo``, ``more_kept_lo``, ``more_kept_nlo`` (continued local
        trials, with a locally optimal final selection or not, and the fraction keeping it),
        ``more_kept_nlo_n`` (how many of the latter keep it: a count, defined when there are none);
        ``cone_n_lo``, ``cone_n_nlo``, ``cone_corr_init``, ``cone_kept_lo``,
        ``cone_corr_lo_median``, ``cone_kept_nlo``, ``cone_nlo_to_opt``,
        ``cone_corr_lo_init`` (median initial correlation of the locally optimal cone runs),
        ``cone_nlo_corr_opt_median``, ``cone_nlo_lambda_neg``, ``cone_kept_nlo_lambda_pos`` (the
        fraction keeping alpha among the runs with :math:`\\Lambda_\\alpha > 0`) (NaN where the set
        is empty)."""
        nan = float("nan")
        lo = self.locally_optimal
        out = {"more_n_lo": int(lo.sum()), "more_n_nlo": int((~lo).sum())}
        if self.more is not None:
            out["more_kept_lo"] = float(self.more.kept[lo].mean()) if lo.any() else nan
            out["more_kept_nlo"] = float(self.more.kept[~lo].mean()) if (~lo).any() else nan
            out["more_kept_nlo_n"] = int(self.more.kept[~lo].sum())
        else:
            out.update(more_n_lo=0, more_n_nlo=0, more_kept_lo=nan, more_kept_nlo=nan,
                       more_kept_nlo_n=0)
        cl, cn = self.cone_lo, self.cone_nlo
        out.update({
            "cone_n_lo": int(self.local.size), "cone_n_nlo": int(self.found.sum()),
            "cone_corr_init": float(np.median(cn.corr_init)),
            "cone_kept_lo": float(cl.kept.mean()) if cl is not None else nan,
            "cone_corr_lo_median": float(np.median(cl.corr_alpha[-1])) if cl is not None else nan,
            "cone_corr_lo_init": float(np.median(cl.corr_init)) if cl is not None else nan,
            "cone_kept_nlo": float(cn.kept.mean()),
            "cone_nlo_to_opt": float(np.mean(np.all(cn.selected == self.opt_nlo, axis=-1))),
            "cone_nlo_corr_opt_median": float(np.nanmedian(cn.corr_opt[-1])),
            "cone_nlo_lambda_neg": float(np.mean(cn.lambda_alpha < 0)),
            "cone_kept_nlo_lambda_pos": (float(cn.kept[cn.lambda_alpha > 0].mean())
                                         if np.any(cn.lambda_alpha > 0) else nan),
        })
        return out

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``), each at the horizons of its runs.

        * ``lo_persists``: the local trials whose final selection is locally optimal still select
          it after ``more_steps`` more steps (fraction at least 0.9; two horizons: the run's
          steps and that plus ``more_steps``); vacuous with no such trial;
        * ``cone_lo_stable``: started in the cone of a locally optimal :math:`\alpha \ne` opt,
          at least 0.9 of the runs keep :math:`\alpha` after ``cone_steps`` steps and their
          median correlation with :math:`W^\alpha_{mm}` exceeds the initial one;
        * ``cone_nlo_unstable``: started in the cone of a non-locally-optimal :math:`\alpha`, at
          most 0.1 of the runs keep it, also among those with :math:`\Lambda_\alpha > 0` (and
          there are such runs).
        """
        s = self.summary()
        nan = float("nan")
        more_steps = self.more.config.get("steps") if self.more is not None else None
        cone_steps = self.cone_nlo.config.get("steps")
        n_lo, kept_lo = s["more_n_lo"], s["more_kept_lo"]
        out = {"lo_persists": (
            bool(n_lo == 0 or kept_lo >= 0.9),
            f"{n_lo} locally optimal local trials; after {more_steps} more steps a fraction "
            f"{kept_lo:.3f} still selects alpha (>= 0.9)")}
        k, c, c0 = (s["cone_kept_lo"], s["cone_corr_lo_median"], s["cone_corr_lo_init"])
        out["cone_lo_stable"] = (
            bool(s["cone_n_lo"] > 0 and k >= 0.9 and c > c0),
            f"{s['cone_n_lo']} runs, after {cone_steps} steps: kept {k:.3f} (>= 0.9), median corr "
            f"{c:.4f} vs initial {c0:.4f}")
        kn, kp = s["cone_kept_nlo"], s["cone_kept_nlo_lambda_pos"]
        n_pos = round((1 - s["cone_nlo_lambda_neg"]) * s["cone_n_nlo"])
        out["cone_nlo_unstable"] = (
            bool(s["cone_n_nlo"] > 0 and n_pos > 0 and kn <= 0.1 and kp <= 0.1),
            f"{s['cone_n_nlo']} runs ({n_pos} with Lambda_alpha > 0), after {cone_steps} steps: "
            f"kept {kn:.3f}, among Lambda_alpha > 0 {kp if n_pos else nan:.3f} (<= 0.1)")
        return out


def local_followups(run, *, more_steps=4000, cone_R0=20.0, cone_eps=0.05, cone_steps=2000,
                    lr=0.1, seed=0, device="auto"):
    r"""Chapter 4's follow-ups of a :class:`LocalRun`: continue the trials that ended elsewhere
    than opt for ``more_steps`` (:func:`follow`), start them again in the cone of their final
    selection (:func:`cone_experiment`), and start every trial where one is found
    (:func:`attnsvm.svm.find_choices`) in the cone of a selection that is not locally optimal.

    Returns
    -------
    LocalFollowups
    """
    out = run.outcomes
    idx = np.flatnonzero(out.is_local)
    lo = out.locally_optimal[idx]
    more = cone_lo = None
    if idx.size:
        sub = run.data.take(idx)
        more = follow(sub, out.selected[idx], run.W_final[idx], steps=more_steps, lr=lr, seed=seed,
                      device=device)
        cone_lo = cone_experiment(sub, out.selected[idx], R0=cone_R0, eps=cone_eps,
                                  steps=cone_steps, lr=lr, seed=seed, device=device)
    alpha_nlo, found = _svm.find_choices(run.data, locally_optimal=False, seed=seed)
    nlo_data = run.data.take(np.flatnonzero(found))
    cone_nlo = cone_experiment(nlo_data, alpha_nlo[found], R0=cone_R0, eps=cone_eps,
                               steps=cone_steps, lr=lr, seed=seed, device=device)
    opt_nlo = _tokens.optimal_tokens(nlo_data.X, nlo_data.y, nlo_data.v)
    return LocalFollowups(idx, more, cone_lo, cone_nlo, found, opt_nlo, lo,
                          config=dict(more_steps=more_steps, cone_R0=cone_R0, cone_eps=cone_eps,
                                      cone_steps=cone_steps, lr=lr, seed=seed))
