r"""Global convergence, finite-time rates and sparsification of attention (Part III).

The chapters on rates work in the *equal-score* data model (the book's
{prf:ref}`def-equal-scores`): in every sequence the optimal token has score
:math:`\gamma^\star_i` and every other token the same lower score :math:`\gamma^\circ_i`,
:math:`\Delta_i = \gamma^\star_i - \gamma^\circ_i > 0`. The model then depends on ``W`` only
through the margins :math:`m_{it} = \langle A_{it}, W\rangle` of the lifted features
:math:`A_{it} = (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top`, and

.. math::

    u_i = \gamma^\star_i - \Delta_i (1 - s_i),\qquad
    s_i = \frac{1}{1 + q_i},\qquad q_i = \sum_{t \ne \mathrm{opt}_i} e^{-m_{it}} .

This module holds

* data: :func:`score_data` (equal or distinct non-optimal scores), :func:`find_trap`
  (an instance with a locally optimal token choice other than ``opt``);
* constants of the proofs: :func:`constants` (:math:`R_A`, :math:`\gamma_A`,
  :math:`\kappa`, :math:`\lambda`, :math:`\mu`, :math:`H`, :math:`\varepsilon_0`, ...);
* exact, log-space metrics of a matrix ``W``: :func:`excess_loss`, :func:`nonopt_mass`,
  :func:`min_margin`, :func:`one_minus_corr`, :func:`grad`;
* experiments: :func:`random_inits`, :func:`run` (one batched ``attnsvm.train.fit`` call per
  optimizer, snapshots on), :func:`trajectory_metrics`, :func:`attnsvm.metrics.slopes`,
  :func:`exp_rate`, :func:`sensitivity`;
* theory curves: :func:`ngd_norm_bounds`, :func:`orth_floor`, :func:`polyak_cap_threshold`;
* hypotheses and proved bounds along a run, from each trial's first step :math:`t_0` in the
  theorems' region: :func:`first_step`, :func:`gd_step_condition`, :func:`ngd_linear_holds`,
  :func:`gd_inverse_excess_holds`, :func:`direction_bound_from_t0`.
* global convergence under the cross-sequence condition (Cx) (book: ``thm-global-region``):
  :func:`cross_gram_min`, :func:`log_q`, :func:`global_constants`, :func:`every_step`,
  :func:`q_monotone`, :func:`first_in_region`, :func:`global_run`,
  :func:`global_cx_experiment`, :func:`global_cx_summary`.

All losses here are logistic, :math:`\ell(u) = \log(1 + e^{-u})`.
"""
from __future__ import annotations

import numpy as np

from .. import bounds, metrics, svm, tokens, train
from .._checks import check_int
from ..data import AttnData, Stream, prescribed_scores, stream
from ..losses import get_loss, log_excess_loss

__all__ = [
    "score_data", "find_trap", "features", "constants", "grad", "excess_loss", "nonopt_mass",
    "min_margin", "one_minus_corr", "random_inits", "run", "trajectory_metrics",
    "exp_rate", "sensitivity", "ngd_norm_bounds", "orth_floor", "polyak_cap_threshold",
    "svm_batch", "GLOBAL_GROUPS", "GlobalExperiment", "global_experiment",
    "polyak_star_progress_bound", "orth_component", "first_step", "gd_step_condition", "ngd_linear_holds",
    "gd_inverse_excess_holds", "direction_bound_from_t0", "scale_to_excess", "cross_gram_min", "log_q",
    "global_constants", "every_step",
    "q_monotone", "first_in_region", "global_run", "global_cx_experiment", "global_cx_summary",
]


#: the logistic loss of the rates chapters (:math:`\ell` and :math:`-\ell'` from attnsvm.losses)
_LOGISTIC = get_loss("logistic")


# ----------------------------------------------------------------------------- data
def score_data(n, T, d, *, trials=1, gamma_opt=1.0, gamma_other=0.0, distinct=False,
               spread=0.8, queries="uniform", seed=0):
    r"""Seeded attention instances with prescribed token scores (cross-attention queries):
    :func:`attnsvm.data.prescribed_scores` batched with ``trials`` trials (trial ``b`` does not
    depend on ``trials``). The token scores are exactly :math:`\gamma^\star` (``gamma_opt``)
    at the optimal position and :math:`\gamma^\circ` (``gamma_other``) elsewhere, or, with
    ``distinct=True``, distinct values in
    :math:`[\gamma^\circ, \gamma^\circ + \mathrm{spread}\,(\gamma^\star - \gamma^\circ)]`.
    ``gamma_opt`` and ``gamma_other`` are numbers or per-sequence arrays (n,) (heterogeneous
    scores :math:`\gamma^\star_i`, :math:`\gamma^\circ_i`). ``queries="orthogonal"`` draws
    orthonormal queries (needs ``d >= n``): then :math:`\langle A_{it}, A_{js}\rangle = 0` for
    :math:`i \ne j`, the cross-sequence condition (Cx) of the global-convergence theorem
    (:func:`cross_gram_min`).

    Returns
    -------
    data : AttnData, batched (trials, n, T, d)
    opt : ndarray (trials, n) int
    """
    trials = check_int("trials", trials, minimum=1)
    return prescribed_scores(n, T, d, gamma_opt=gamma_opt, gamma_other=gamma_other,
                             distinct=distinct, spread=spread, queries=queries, trials=trials,
                             seed=Stream(seed, "scores"))


def svm_batch(data, alpha):
    """Frobenius Att-SVM of every trial for the token choice ``alpha`` (trials, n): (B, d, d).

    Raises :class:`attnsvm.svm.InfeasibleError` naming the trials where it does not exist."""
    return svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]


def find_trap(n=3, T=3, d=4, *, seed=0, max_tries=200, **kw):
    r"""A distinct-score instance with a locally optimal choice :math:`\alpha \ne \mathrm{opt}`.

    Draws unbatched instances ``attnsvm.data.prescribed_scores(n, T, d, distinct=True,
    seed=Stream(seed + k, "scores"))`` for
    ``k = 0, 1, ...`` and, for each, tries the choices that swap one sequence's optimal token for
    its second-best token; returns the first locally optimal one (checked with
    ``attnsvm.svm.is_locally_optimal``).

    Returns
    -------
    data : AttnData, unbatched
    opt, alpha : ndarray (n,) int
    tries : int, the number of instances drawn
    """
    for k in range(max_tries):
        one, opt = prescribed_scores(n, T, d, distinct=True, seed=Stream(seed + k, "scores"),
                                     **kw)
        g = tokens.token_scores(one.X, one.y, one.v)
        second = np.argsort(-g, axis=-1)[:, 1]
        for i in range(n):
            alpha = opt.copy()
            alpha[i] = second[i]
            if svm.is_locally_optimal(one.X, one.y, one.Z, one.v, alpha):
                return one, opt, alpha, k + 1
    raise RuntimeError(f"no locally optimal alpha != opt found in {max_tries} instances")


# ----------------------------------------------------------------------------- constants
def _lead(data):
    X, y, Z, v = data.X, data.y, data.Z, data.v
    if not data.batched:
        X, y, Z, v = X[None], y[None], Z[None], v[None]
    return X, y, Z, v


def features(data, opt):
    r"""Lifted features :math:`A_{it} = (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top`.

    Returns ``U`` (B, n, T, d) with rows :math:`x_{i,\mathrm{opt}_i} - x_{it}` (zero at the
    optimal token) and ``Z`` (B, n, d); :math:`A_{it} = U_{it} z_i^\top`.
    """
    X, _, Z, _ = _lead(data)
    opt = np.asarray(opt).reshape(X.shape[0], X.shape[1])
    return tokens.token_differences(X, opt), Z


def _scores(data, opt):
    X, y, _, v = _lead(data)
    g = tokens.token_scores(X, y, v)
    opt = np.asarray(opt).reshape(g.shape[:2])
    gs = np.take_along_axis(g, opt[..., None], axis=-1)[..., 0]
    mask = np.ones(g.shape, dtype=bool)
    np.put_along_axis(mask, opt[..., None], False, axis=-1)
    return g, gs, mask, opt


def constants(data, opt, W_mm):
    r"""The constants of the proofs, per trial (dict of (B,) arrays).

    ``R_A`` :math:`\max_{it}\|A_{it}\|_F`; ``gamma_A`` :math:`1/\|W_{mm}\|_F`;
    ``kappa`` :math:`\gamma_A/R_A`; ``Delta_min``, ``Delta_max`` (equal-score model:
    :math:`\Delta_i = \gamma^\star_i - \max_{t\neq\mathrm{opt}}\gamma_{it}`);
    ``b_minus`` :math:`\min_i -\ell'(\gamma^\star_i)`, ``b_plus`` :math:`\max_i
    -\ell'(\gamma^\circ_i)`; ``lam`` :math:`\lambda = \min_i \ell'(\gamma^\star_i)/\ell'(\gamma^\circ_i)`;
    ``mu`` :math:`\tfrac23\gamma_A` (the gradient-excess sandwich on :math:`E \le \varepsilon_0`);
    ``H`` :math:`3R_A^2\max_i(3 b^+_i/b^-_i + \Delta_i/(4b^-_i))`;
    ``eps0`` :math:`\min_i b^-_i\Delta_i/(3n)`; ``L_star`` :math:`\frac1n\sum_i\ell(\gamma^\star_i)`;
    ``eta_ngd`` :math:`\min(\log 2/R_A, \mu/H)` (NGD step of the linear-rate theorem);
    ``bD_plus`` :math:`\max_i b^+_i\Delta_i` and ``bD_minus`` :math:`\min_i b^-_i\Delta_i` (the
    global theorem and the sparsity corollaries).
    """
    U, Z = features(data, opt)
    g, gs, mask, _ = _scores(data, opt)
    W_mm = np.asarray(W_mm).reshape(U.shape[0], U.shape[-1], U.shape[-1])
    n = U.shape[1]
    RA = (np.linalg.norm(U, axis=-1) * np.linalg.norm(Z, axis=-1)[..., None]).max(axis=(1, 2))
    gA = 1.0 / np.linalg.norm(W_mm, axis=(-2, -1))
    go = np.where(mask, g, -np.inf).max(axis=-1)          # best non-optimal score
    Delta = gs - go
    bm, bp = _LOGISTIC.neg_deriv_np(gs), _LOGISTIC.neg_deriv_np(np.where(mask, g, np.inf).min(axis=-1))
    lam = (bm / bp).min(axis=-1)
    mu = 2.0 / 3.0 * gA
    H = 3 * RA ** 2 * (3 * bp / bm + Delta / (4 * bm)).max(axis=-1)
    return dict(R_A=RA, gamma_A=gA, kappa=gA / RA, Delta_min=Delta.min(-1), Delta_max=Delta.max(-1),
                b_minus=bm.min(-1), b_plus=bp.max(-1), lam=lam, mu=mu, H=H,
                eps0=(bm * Delta).min(-1) / (3 * n), L_star=_LOGISTIC.value_np(gs).mean(-1),
                eta_ngd=np.minimum(np.log(2) / RA, mu / H), bD_plus=(bp * Delta).max(-1),
                bD_minus=(bm * Delta).min(-1))


# ----------------------------------------------------------------------------- exact metrics
def _margins(data, opt, W):
    """m (..., B, n, T) = <A_it, W> (+inf at the optimal token), for W (..., B, d, d)."""
    X, _, Z, _ = _lead(data)
    opt = np.asarray(opt).reshape(X.shape[0], X.shape[1])
    return tokens.selection_margins(W, X, Z, opt)


def _log_q(data, opt, W):
    m = _margins(data, opt, W)
    mx = np.min(m, axis=-1, keepdims=True)
    return -mx[..., 0] + np.log(np.sum(np.exp(-(m - mx)), axis=-1))


def nonopt_mass(data, opt, W, *, log=False):
    r"""Softmax mass on the non-optimal tokens, :math:`1 - s_{i,\mathrm{opt}_i}`, shape (..., B, n).

    Computed in log space (:math:`\log(1-s_i) = \log q_i - \log(1+q_i)`), exact far below
    :math:`10^{-16}`. ``log=True`` returns the logarithm.
    """
    lq = _log_q(data, opt, np.asarray(W, dtype=float))
    out = lq - np.logaddexp(0.0, lq)
    return out if log else np.exp(out)


def excess_loss(data, opt, W, *, log=False):
    r"""Excess logistic risk :math:`E(W) = \mathcal{L}(W) - \mathcal{L}^\star`, shape (..., B).

    :math:`\mathcal{L}^\star = \frac1n\sum_i \ell(\gamma^\star_i)` (the infimum in the equal-score
    model). Per sequence, with :math:`\delta_i = \gamma^\star_i - u_i = \sum_t s_{it}
    (\gamma^\star_i - \gamma_{it})`, :math:`\ell(\gamma^\star - \delta) - \ell(\gamma^\star)
    = \log(1 + \sigma(-\gamma^\star)(e^{\delta} - 1))` is evaluated with ``log1p``/``expm1``;
    accurate at any size. ``log=True`` returns :math:`\log E`.
    """
    W = np.asarray(W, dtype=float)
    g, gs, mask, _ = _scores(data, opt)
    m = _margins(data, opt, W)
    lq = _log_q(data, opt, W)
    log_s_t = -m - np.logaddexp(0.0, lq)[..., None]           # log s_it (t != opt)
    Dl = np.where(mask, gs[..., None] - g, 1.0)
    log_E = log_excess_loss(log_s_t, np.where(mask, np.log(np.maximum(Dl, 1e-300)), -np.inf), gs)
    return log_E if log else np.exp(log_E)


def scale_to_excess(data, opt, W_mm, target, *, k_max=64.0, iters=60):
    r"""Per trial, the scale :math:`k` with :math:`E(kW_{mm}) = ` ``target``, by bisection on
    :math:`[0, k_{\max}]` (:math:`E` decreases along :math:`kW_{mm}`, :math:`k \ge 0`), shape (B,).
    Starts at a prescribed excess risk, e.g. at the edge of the region
    :math:`\{E\le\varepsilon_0\}` or just outside it. ``target`` is a number or (B,) array in
    :math:`(E(k_{\max}W_{mm}), E(0)]`; the upper end of the final bracket is returned."""
    W_mm = np.asarray(W_mm, dtype=float)
    target = np.broadcast_to(np.asarray(target, dtype=float), W_mm.shape[:1])
    k_max = float(k_max)
    if not (np.all(target > excess_loss(data, opt, k_max * W_mm))
            and np.all(target <= excess_loss(data, opt, 0 * W_mm))):
        raise ValueError("target must lie in (E(k_max W_mm), E(0)] for every trial")
    lo, hi = np.zeros(W_mm.shape[0]), np.full(W_mm.shape[0], k_max)
    for _ in range(check_int("iters", iters, minimum=1)):
        k = (lo + hi) / 2
        big = excess_loss(data, opt, k[:, None, None] * W_mm) > target
        lo, hi = np.where(big, k, lo), np.where(big, hi, k)
    return hi


def min_margin(data, opt, W):
    r"""Smallest margin :math:`\min_{i,t\neq\mathrm{opt}_i}\langle A_{it}, W\rangle`, shape (..., B)."""
    return _margins(data, opt, np.asarray(W, dtype=float)).min(axis=(-2, -1))


def grad(data, W):
    r"""The logistic-risk gradient :math:`\nabla\mathcal{L}(W)` (B, d, d), from the chapter's
    formula :math:`-\nabla\mathcal{L} = \frac1n\sum_i \beta_i \sum_t s_{it}(\gamma_{it} - u_i)
    x_{it} z_i^\top` (numpy, float64)."""
    X, y, Z, v = _lead(data)
    W = np.asarray(W, dtype=float).reshape(X.shape[0], X.shape[-1], X.shape[-1])
    a = np.einsum("bntd,bde,bne->bnt", X, W, Z)
    s = metrics.softmax(a)
    g = y[..., None] * np.einsum("bntd,bd->bnt", X, v)
    u = (s * g).sum(-1)
    c = _LOGISTIC.neg_deriv_np(u)[..., None] * s * (g - u[..., None]) / X.shape[1]
    return -np.einsum("bnt,bntd,bne->bde", c, X, Z)


def one_minus_corr(W, W_ref):
    r""":math:`1 - \mathrm{corr}(W, W_{\mathrm{ref}}) = \tfrac12\|\hat W - \hat W_{\mathrm{ref}}\|_F^2`,
    computed from the normalized difference (no cancellation), shape (...)."""
    return 0.5 * metrics.direction_error(W, W_ref) ** 2


# ----------------------------------------------------------------------------- experiments
def random_inits(d, trials, *, radius, seed=0):
    r"""``trials`` Gaussian matrices (trials, d, d) rescaled to Frobenius norm ``radius``."""
    rng = stream(seed, "init")
    W = rng.standard_normal((trials, d, d))
    return radius * W / np.linalg.norm(W, axis=(-2, -1), keepdims=True)


#: the default optimizer settings of the rates experiments
DEFAULTS = {"gd": dict(lr=1.0), "ngd": dict(lr=0.1), "polyak": dict(lr=1.0, eta_max=10.0),
            "adam": dict(lr=0.01)}


def run(data, W_mm, *, settings=None, steps=10000, init=None, n_records=120, seed=0,
        device="auto"):
    r"""Train every optimizer of ``settings`` (name -> ``fit`` keyword arguments) on all trials at
    once: one ``attnsvm.train.fit`` call per optimizer, snapshots of ``W`` on the record grid.

    Returns dict name -> ``History``.
    """
    settings = DEFAULTS if settings is None else settings
    out = {}
    for name, kw in settings.items():
        kw = dict(kw)
        opt_name = kw.pop("optimizer", name)
        out[name] = train.fit(data, model="W", optimizer=opt_name, steps=steps, init=init,
                              refs={"W_mm": W_mm}, snapshots=True, n_records=n_records, seed=seed,
                              device=device, **kw)
    return out


def trajectory_metrics(data, opt, W_mm, hist):
    r"""Exact metrics along a recorded run (dict of (K, B) arrays, plus ``t`` (K,)).

    ``one_minus_corr``, ``dir_err`` (:math:`\|\hat W_t - \hat W_{mm}\|_F`), ``norm``,
    ``excess`` (:math:`E(W_t)`), ``log_excess``, ``mass`` (mean over sequences of the
    non-optimal softmax mass), ``max_mass``, ``log_mass`` (log of ``mass``), ``min_margin``,
    ``loss``.
    """
    S = hist.snapshots                                              # (K, B, d, d)
    lm = nonopt_mass(data, opt, S, log=True)                        # (K, B, n)
    mx = lm.max(-1, keepdims=True)
    log_mass = mx[..., 0] + np.log(np.exp(lm - mx).mean(-1))
    return dict(t=hist.steps, one_minus_corr=one_minus_corr(S, W_mm[None]),
                dir_err=metrics.direction_error(S, W_mm[None]), norm=hist.norm,
                excess=excess_loss(data, opt, S), log_excess=excess_loss(data, opt, S, log=True),
                mass=np.exp(log_mass), log_mass=log_mass, max_mass=np.exp(mx[..., 0]),
                min_margin=min_margin(data, opt, S), loss=hist.loss)


def exp_rate(t, log_series, *, tail=0.5):
    r"""Per-trial exponential rate :math:`r` of :math:`\log(\mathrm{series}) \approx c - r t`
    (least squares on the last ``tail`` fraction of the record steps), shape (B,)."""
    t = np.asarray(t, dtype=float)
    keep = t >= t.max() * (1 - tail)
    Amat = np.stack([np.ones(keep.sum()), t[keep]], axis=1)
    coef, *_ = np.linalg.lstsq(Amat, np.asarray(log_series)[keep], rcond=None)
    return -coef[1]


def sensitivity(data, opt, W_mm, *, optimizer, values, key="lr", base=None, steps=5000, init=None,
                seed=0, device="auto"):
    r"""Final ``1 - corr`` and ``norm`` for a sweep of one hyper-parameter (``lr`` or
    ``eta_max``): one batched ``fit`` per value. Returns dict with ``values`` (V,),
    ``one_minus_corr`` (V, B), ``norm`` (V, B), ``log_excess`` (V, B)."""
    base = dict(base or {})
    oc, nr, le = [], [], []
    for val in values:
        kw = dict(base)
        kw[key] = val
        h = train.fit(data, model="W", optimizer=optimizer, steps=steps, init=init, n_records=2,
                      seed=seed, device=device, **kw)
        oc.append(one_minus_corr(h.W, W_mm))
        nr.append(h.norm[-1])
        le.append(excess_loss(data, opt, h.W, log=True))
    return dict(values=np.asarray(values, dtype=float), one_minus_corr=np.array(oc),
                norm=np.array(nr), log_excess=np.array(le))


# ----------------------------------------------------------------------------- theory curves
def ngd_norm_bounds(t, *, eta, kappa, W0_norm, W0_proj=None):
    r"""NGD's norm bounds of the chapter: lower :math:`\langle W_0,\hat W_{mm}\rangle + \eta\kappa t`
    (``W0_proj``; default :math:`-\|W_0\|`) and upper :math:`\|W_0\| + \eta t`; shape (K,) or,
    for per-trial ``kappa`` (B,), (K, B)."""
    t = np.asarray(t, dtype=float)
    kappa = np.asarray(kappa, dtype=float)
    if kappa.ndim:
        t = t[:, None]
    p = -np.asarray(W0_norm, dtype=float) if W0_proj is None else np.asarray(W0_proj, dtype=float)
    return p + eta * kappa * t, W0_norm + eta * t


def orth_component(data, opt, W):
    r""":math:`P^\perp W`, the component of ``W`` (B, d, d) off
    :math:`\mathcal{A} = \mathrm{span}\{A_{it}\}` (per trial), which GD, NGD and the Polyak
    steps never change (the invariance proposition); returns (B, d, d)."""
    U, Z = features(data, opt)
    _, _, mask, _ = _scores(data, opt)
    W = np.asarray(W, dtype=float).reshape(U.shape[0], U.shape[-1], U.shape[-1])
    out = np.empty_like(W)
    for b in range(U.shape[0]):
        A = np.einsum("ktd,ke->ktde", U[b], Z[b])[mask[b]].reshape(-1, U.shape[-1] ** 2)
        Q, _ = np.linalg.qr(A.T)
        w = W[b].ravel()
        out[b] = (w - Q @ (Q.T @ w)).reshape(W.shape[1:])
    return out


def orth_floor(data, opt, W0, norms):
    r"""The floor of the invariance proposition: :math:`1-\sqrt{1 - r_t^2}` with
    :math:`r_t = \|P^\perp W_0\|_F/\|W_t\|_F`, :math:`P^\perp` the projection off
    :math:`\mathcal{A} = \mathrm{span}\{A_{it}\}` (:func:`orth_component`). ``W0`` (B, d, d),
    ``norms`` (K, B); returns (K, B)."""
    perp = np.linalg.norm(orth_component(data, opt, W0), axis=(-2, -1))
    r = np.minimum(perp[None, :] / np.asarray(norms), 1.0)
    return -np.expm1(0.5 * np.log1p(-r ** 2))


def polyak_cap_threshold(consts, eta_max):
    r"""Excess risk below which the Polyak step is capped at ``eta_max`` (proved bound):
    :math:`E \le \lambda\sqrt{\mathcal{L}^\star/\eta_{\max}}/R_A`, per trial."""
    return consts["lam"] * np.sqrt(consts["L_star"] / eta_max) / consts["R_A"]


# ----------------------------------------------------------------------------- global convergence
#: the four groups of the global-convergence experiment, in plotting order
GLOBAL_GROUPS = ("equal-score, random init", "equal-score, adversarial init",
                 "trap, random init", "trap, adversarial init")


class GlobalExperiment:
    r"""Result of :func:`global_experiment`: ``G = 4`` groups of ``trials`` trials each.

    Attributes
    ----------
    runs : dict optimizer -> History (``corr`` has keys ``"W_mm"`` and ``"W_alpha"``)
    slices : dict group -> slice of the trials axis
    W_mm, W_alpha, W0 : (G * trials, d, d) SVM of ``opt``, of ``alpha``, and the initializations
    eq, opt_eq : the equal-score instances and their optimal tokens
    eq_locopt : (trials,) bool, whether ``alpha`` is locally optimal on the equal-score instances
    trap_tries : instances drawn before a trap (a locally optimal ``alpha != opt``) was found
    corr_trap_alpha : corr of the trap's two SVM solutions
    kappa : (trials,) the gradient-alignment constant of the equal-score instances
    ngd_progress : min over the adversarial equal-score trials of NGD's progress
        :math:`\langle W_T - W_0, W_{mm}\rangle\gamma_A` divided by its guaranteed value
        :math:`\eta\kappa T`
    """

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def final(self, name, ref="W_mm"):
        """Median final correlation with ``ref`` per group (dict group -> float)."""
        c = self.runs[name].corr[ref][-1]
        return {g: float(np.median(c[sl])) for g, sl in self.slices.items()}


def global_experiment(n, T, d, *, trials, steps, R0, radius, lr_gd, lr_ngd, n_records=60, seed=0,
                      device="auto"):
    r"""GD and NGD from random and adversarial initializations, in two data settings.

    * *equal-score*: :func:`score_data` instances (NGD's projection on W_mm provably grows); ``alpha`` swaps the
      optimal token of sequence 0 for the next one;
    * *trap*: one distinct-score instance with a locally optimal ``alpha != opt``
      (:func:`find_trap`), repeated ``trials`` times.

    Random initializations have Frobenius norm ``radius`` (:func:`random_inits`); adversarial
    ones are :math:`R_0 W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`. All ``4 * trials`` runs of an
    optimizer are one batched :func:`attnsvm.train.fit` call.
    """
    eq, opt_eq = score_data(n, T, d, trials=trials, seed=seed)
    alpha_eq = opt_eq.copy()
    alpha_eq[:, 0] = (alpha_eq[:, 0] + 1) % T
    Wmm_eq, Wa_eq = svm_batch(eq, opt_eq), svm_batch(eq, alpha_eq)
    eq_locopt = np.array([svm.is_locally_optimal(eq.X[b], eq.y[b], eq.Z[b], eq.v[b], alpha_eq[b])
                          for b in range(trials)])
    trap, opt_tr, alpha_tr, tries = find_trap(n, T, d, seed=seed)
    trap_b = AttnData.stack([trap] * trials)
    Wmm_tr = np.broadcast_to(svm.att_svm(trap.X, trap.Z, opt_tr), (trials, d, d))
    Wa_tr = np.broadcast_to(svm.att_svm(trap.X, trap.Z, alpha_tr), (trials, d, d))

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
    c = constants(eq, opt_eq, Wmm_eq)
    sl = slices["equal-score, adversarial init"]
    proj0 = np.einsum("bij,bij->b", W0[sl], Wmm_eq) * c["gamma_A"]
    projT = np.einsum("bij,bij->b", runs["ngd"].W[sl], Wmm_eq) * c["gamma_A"]
    ngd_progress = float(np.min((projT - proj0) / (lr_ngd * steps * c["kappa"])))
    return GlobalExperiment(runs=runs, slices=slices, W_mm=W_mm, W_alpha=W_a, W0=W0, eq=eq,
                            opt_eq=opt_eq, eq_locopt=eq_locopt, trap_tries=tries,
                            corr_trap_alpha=float(metrics.corr(Wa_tr[0], Wmm_tr[0])),
                            kappa=c["kappa"], ngd_progress=ngd_progress)


# ----------------------------------------------------------------------------- Polyak (L - L*)
def polyak_star_progress_bound(t, consts, W0_proj, *, eta=1.0):
    r"""Lower bound of the (L - L*) Polyak proposition on the projection
    :math:`\langle W_t, W_{mm}\rangle/\|W_{mm}\|_F`: :math:`\langle W_0, \hat W_{mm}\rangle +
    \eta\kappa\lambda t/R_A` (``eta`` the multiplier of the step), shape (K, B) for ``t`` (K,)
    and per-trial constants (``consts`` from :func:`constants`) and ``W0_proj`` (B,)."""
    t = np.asarray(t, dtype=float)[:, None]
    return (np.asarray(W0_proj, dtype=float)[None, :]
            + eta * consts["kappa"] * consts["lam"] / consts["R_A"] * t)


# ----------------------------------------------------------------------------- hypotheses
def first_step(t, mask):
    r"""Per trial, the first recorded step from which ``mask`` (K, B) holds at every later record
    (NaN where it does not hold at the last record), shape (B,)."""
    t = np.asarray(t, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    tail = np.flip(np.logical_and.accumulate(np.flip(mask, 0), axis=0), 0)   # holds from k on
    out = np.full(mask.shape[1], np.nan)
    for b in range(mask.shape[1]):
        k = np.flatnonzero(tail[:, b])
        if k.size:
            out[b] = t[k[0]]
    return out


def gd_step_condition(consts, eta, excess):
    r"""The hypotheses of the GD theorem at a recorded point: :math:`E \le \varepsilon_0` and
    :math:`\eta E \le \min(1/H, \lambda\log 2/R_A^2, \lambda^2/(3R_A^2))`; ``excess`` (K, B),
    returns (K, B) bool."""
    R2 = consts["R_A"] ** 2
    cap = np.minimum(np.minimum(1 / consts["H"], consts["lam"] * np.log(2) / R2),
                     consts["lam"] ** 2 / (3 * R2))
    return (excess <= consts["eps0"]) & (eta * excess <= cap)


def _from_t0(t, t0, *series):
    r"""Align the records on each trial's ``t0`` (record steps, NaN for none): returns ``dt``
    (K, B), :math:`t - t_0` where ``later`` and NaN elsewhere; ``later`` (K, B) bool,
    :math:`t \ge t_0` with ``t0`` finite; and the value of each (K, B) series at ``t0`` ((B,),
    NaN where ``t0`` is NaN)."""
    t, t0 = np.asarray(t, dtype=float), np.asarray(t0, dtype=float)
    ok = np.isfinite(t0)
    k0 = np.minimum(np.searchsorted(t, np.where(ok, t0, t[0])), len(t) - 1)
    if np.any(ok & (t[k0] != t0)):
        raise ValueError("t0 must hold record steps of t (or NaN)")
    later = ok[None, :] & (t[:, None] >= np.where(ok, t0, np.inf)[None, :])
    dt = np.where(later, t[:, None] - np.where(ok, t0, 0.0)[None, :], np.nan)
    vals = [np.where(ok, np.asarray(x, dtype=float)[k0, np.arange(t0.size)], np.nan) for x in series]
    return dt, later, vals


def ngd_linear_holds(t, excess, t0, eta, consts):
    r"""Whether :math:`E(W_t) \le (1 - \eta\mu/2)^{t - t_0}E(W_{t_0})` at every record
    :math:`t \ge t_0` (the NGD linear-rate theorem), per trial ((B,) bool; False where
    ``t0`` is NaN). ``excess`` (K, B) on the record grid ``t`` (K,), ``t0`` (B,) record steps."""
    dt, later, (E0,) = _from_t0(t, t0, excess)
    bound = np.log(E0) + dt * np.log1p(-eta * consts["mu"] / 2)
    ok = np.where(later, np.log(excess) <= bound + 1e-9, True)
    return np.isfinite(t0) & ok.all(axis=0)


def gd_inverse_excess_holds(t, excess, t0, eta, consts):
    r"""Whether the two bounds of the GD theorem on :math:`1/E(W_t)` hold at every record
    :math:`t \ge t_0`, per trial ((B,) bool; False where ``t0`` is NaN)."""
    dt, later, (E0,) = _from_t0(t, t0, excess)
    inv = 1 / np.asarray(excess, dtype=float)
    lo = 1 / E0 + eta * consts["mu"] ** 2 / 2 * dt
    hi = 1 / E0 + 3 * eta * consts["R_A"] ** 2 / consts["lam"] ** 2 * dt
    ok = np.where(later, (inv >= lo * (1 - 1e-9)) & (inv <= hi * (1 + 1e-9)), True)
    return np.isfinite(t0) & ok.all(axis=0)


def direction_bound_from_t0(t, t0, metrics, consts, *, optimizer, eta, measured_norm=False):
    r"""A proved upper bound on :math:`1 - \mathrm{corr}(W_t, W_{mm})` along a recorded run, from
    each trial's :math:`t_0`, and whether it holds, for all trials at once.

    * ``optimizer="ngd"``: NGD's decaying bound at the constant step ``eta``
      (:func:`attnsvm.bounds.ngd_direction_bound`; book ``cor-ngd-direction``), with ``t0`` a
      record from which :math:`E \le \varepsilon_0` and ``eta`` at most the theorem's step;
    * ``optimizer="gd"``: GD's logarithmic bound at the step ``eta``
      (:func:`attnsvm.bounds.gd_direction_bound`; book ``thm-gd-direction``), with ``t0`` a record
      from which :func:`gd_step_condition` holds; for the capped Polyak step once it is capped,
      ``eta`` is the cap (``cor-polyak-cap-direction``). With ``measured_norm=True`` the
      theorem's sharper first bound :math:`D/\|W_t\|_F` is evaluated with the recorded norms.

    Parameters
    ----------
    t : (K,) record steps; t0 : (B,) record steps (NaN: the trial is skipped)
    metrics : dict with (K, B) arrays ``excess``, ``norm``, ``one_minus_corr``
        (:func:`trajectory_metrics`)
    consts : dict of (B,) constants (:func:`constants`)
    optimizer : {"ngd", "gd"}; eta : float > 0
    measured_norm : bool, ``"gd"`` only: the bound :math:`D/\|W_t\|_F` instead of the
        deterministic :math:`\gamma_AD/\log(2\varepsilon_0/E_0 + \varepsilon_0\eta\mu^2(t-t_0))`

    Returns
    -------
    dict
        ``bound`` (K, B), NaN before ``t0``; ``later`` (K, B) bool, the (trial, record) pairs
        from ``t0`` on; ``holds`` (K, B) bool, :math:`1-\mathrm{corr} \le` ``bound`` there (False
        elsewhere); ``fraction``, the fraction of ``later`` pairs where it holds (NaN if none);
        ``first`` and ``final`` (B,), the bound at ``t0`` and at the last record (NaN where ``t0``
        is NaN).
    """
    if optimizer not in ("ngd", "gd"):
        raise ValueError(f"optimizer must be 'ngd' or 'gd', got {optimizer!r}")
    if measured_norm and optimizer != "gd":
        raise ValueError("measured_norm applies to optimizer='gd' only")
    if not (np.isscalar(eta) and eta > 0):
        raise ValueError(f"eta must be a positive number, got {eta!r}")
    dt, later, (E0, N0) = _from_t0(t, t0, metrics["excess"], metrics["norm"])
    ok = np.isfinite(np.asarray(t0, dtype=float))
    bound = np.full(dt.shape, np.nan)
    if ok.any():
        kw = {k: consts[k][ok] for k in ("mu", "eps0", "gamma_A", "H")}
        k = np.where(later[:, ok], dt[:, ok], 0.0)
        if optimizer == "ngd":
            full = bounds.ngd_direction_bound(np.full(int(k.max()), float(eta)), E0[ok], N0[ok], **kw)
            vals = np.take_along_axis(full, k.astype(int), axis=0)
        else:
            norm = (np.where(later[:, ok], np.asarray(metrics["norm"], dtype=float)[:, ok], 1.0)
                    if measured_norm else None)                  # records before t0 do not count
            vals = bounds.gd_direction_bound(k, E0[ok], N0[ok], eta=float(eta), norm=norm, **kw)
        bound[:, ok] = np.where(later[:, ok], vals, np.nan)
    omc = np.asarray(metrics["one_minus_corr"], dtype=float)
    holds = later & (omc <= np.where(later, bound, -np.inf) + 1e-12)
    k0 = np.argmax(later, axis=0)
    first = np.where(ok, bound[k0, np.arange(bound.shape[1])], np.nan)
    return dict(bound=bound, later=later, holds=holds,
                fraction=float(holds.sum() / later.sum()) if later.any() else float("nan"),
                first=first, final=np.where(ok, bound[-1], np.nan))


# ----------------------------------------------------------------------------- global, under (Cx)
def cross_gram_min(data, opt):
    r"""The smallest cross-sequence inner product
    :math:`\min_{i\ne j,\ t\ne\mathrm{opt}_i,\ s\ne\mathrm{opt}_j}\langle A_{it}, A_{js}\rangle`
    per trial, shape (B,): the cross-sequence condition (Cx) of the global theorem holds iff it is
    :math:`\ge 0`. ``+inf`` when ``n = 1`` (the condition is then empty). Uses
    :math:`\langle A_{it}, A_{js}\rangle = \langle x_{i,\mathrm{opt}_i} - x_{it},
    x_{j,\mathrm{opt}_j} - x_{js}\rangle\langle z_i, z_j\rangle`.
    """
    U, Z = features(data, opt)
    _, _, mask, _ = _scores(data, opt)
    n = U.shape[1]
    G = np.einsum("bitd,bjsd->bitjs", U, U) * np.einsum("bid,bjd->bij", Z, Z)[:, :, None, :, None]
    valid = (mask[:, :, :, None, None] & mask[:, None, None, :, :]
             & ~np.eye(n, dtype=bool)[None, :, None, :, None])
    return np.where(valid, G, np.inf).min(axis=(1, 2, 3, 4))


def log_q(data, opt, W):
    r""":math:`\log q_i(W) = \log\sum_{t\ne\mathrm{opt}_i}e^{-m_{it}(W)}` (log-sum-exp), shape
    (..., B, n); :math:`s_i = 1/(1 + q_i)`."""
    return _log_q(data, opt, np.asarray(W, dtype=float))


def global_constants(data, opt, W_mm, W0):
    r"""The constants of the global theorem (book: ``thm-global-region``) per trial: the dict of
    :func:`constants` plus ``E0`` :math:`E(W_0)`, ``s0`` :math:`\min_i s_i(W_0)`, ``s0_lower``
    (:func:`attnsvm.bounds.s0_lower`), ``mu0`` :math:`\gamma_A\min(s_0, 2/3)`,
    ``eta_gd_noloss``, ``eta_ngd_noloss`` (:func:`attnsvm.bounds.noloss_steps`), ``eta_ngd_global``,
    ``eta_gd_global`` (the largest steps of the theorem, :func:`attnsvm.bounds.global_steps`) and
    ``cross_min`` (:func:`cross_gram_min`). All (B,) arrays."""
    c = constants(data, opt, W_mm)
    W0 = np.asarray(W0, dtype=float)
    n, T = data.X.shape[-3], data.X.shape[-2]
    E0 = excess_loss(data, opt, W0)
    s0 = np.exp(-np.logaddexp(0.0, log_q(data, opt, W0).max(-1)))
    mu0 = bounds.global_mu0(c["gamma_A"], s0)
    eta_gd0, eta_ngd0 = bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], n)
    eta_ngd, eta_gd = bounds.global_steps(mu0, c["H"], E0, eta_gd_noloss=eta_gd0, lam=c["lam"],
                                          R_A=c["R_A"])
    return dict(c, E0=E0, s0=s0, mu0=mu0,
                s0_lower=bounds.s0_lower(c["R_A"], T, np.linalg.norm(W0, axis=(-2, -1))),
                eta_gd_noloss=eta_gd0, eta_ngd_noloss=eta_ngd0, eta_ngd_global=eta_ngd,
                eta_gd_global=eta_gd, cross_min=cross_gram_min(data, opt))


def every_step(data, opt, *, optimizer, lr, steps, init, chunk=500, device="auto"):
    r"""Run a stateless optimizer (``"gd"`` or ``"ngd"``) for ``steps`` steps on all trials and
    return :math:`\log q_i(W_t)` (steps + 1, B, n) and :math:`E(W_t)` (steps + 1, B) at *every*
    step, plus the final ``W`` (B, d, d). The run is cut into batched ``attnsvm.train.fit`` calls
    of ``chunk`` steps (exact for these rules, which keep no state), so memory stays
    :math:`O(\mathrm{chunk}\cdot Bd^2)`."""
    if optimizer not in ("gd", "ngd"):
        raise ValueError(f"optimizer must be 'gd' or 'ngd' (stateless rules), got {optimizer!r}")
    steps = check_int("steps", steps, minimum=1)
    chunk = check_int("chunk", chunk, minimum=1)
    W = np.asarray(init, dtype=float)
    lq, ex = [log_q(data, opt, W)[None]], [excess_loss(data, opt, W)[None]]
    done = 0
    while done < steps:
        k = min(chunk, steps - done)
        h = train.fit(data, model="W", optimizer=optimizer, lr=lr, steps=k, init=W,
                      snapshots=True, record_every=1, device=device)
        S = h.snapshots[1:]
        lq.append(log_q(data, opt, S))
        ex.append(excess_loss(data, opt, S))
        W = h.W
        done += k
    return np.concatenate(lq), np.concatenate(ex), W


def q_monotone(log_q_steps, excess, *, excess_floor=1e-10, tol=1e-9):
    r"""Whether every :math:`q_i` is nonincreasing at every step (book:
    ``lem-no-attention-loss``), per trial.

    A step :math:`t\to t+1` is checked while :math:`E(W_t) \ge` ``excess_floor``: below it the
    float64 gradient has lost its relative accuracy (its optimal-token coefficient
    :math:`\gamma_{i\mathrm{opt}_i} - u_i = \Delta_i(1 - s_i)` is a difference of numbers of
    order one), and the computed step no longer follows the exact one.

    Parameters
    ----------
    log_q_steps : (K, B, n) from :func:`every_step`
    excess : (K, B)

    Returns
    -------
    holds : (B,) bool, ``log q_i(W_{t+1}) <= log q_i(W_t) + tol`` at every checked step
    checked : (B,) int, number of checked steps
    max_increase : (B,) the largest :math:`\log q_i(W_{t+1}) - \log q_i(W_t)` over checked steps
    """
    log_q_steps, excess = np.asarray(log_q_steps, dtype=float), np.asarray(excess, dtype=float)
    if log_q_steps.ndim != 3 or excess.shape != log_q_steps.shape[:2]:
        raise ValueError(f"log_q_steps must be (K, B, n) and excess (K, B), got "
                         f"{log_q_steps.shape} and {excess.shape}")
    inc = np.diff(log_q_steps, axis=0).max(-1)                  # (K-1, B)
    use = excess[:-1] >= excess_floor
    worst = np.where(use, inc, -np.inf).max(0)
    return worst <= tol, use.sum(0), worst


def first_in_region(excess, eps0):
    r"""Per trial, the first step :math:`t` with :math:`E(W_{t'})\le\varepsilon_0` for every later
    step :math:`t'` of an every-step record ``excess`` (K, B) (:func:`every_step`); NaN where the
    run ends outside the region."""
    return first_step(np.arange(np.asarray(excess).shape[0]), np.asarray(excess) <= eps0)


def global_run(data, opt, W_mm, W0, *, optimizer, lr="theorem", steps, chunk=500, device="auto"):
    r"""One GD or NGD run from ``W0`` on all trials, checked against the global theorem (book:
    ``lem-no-attention-loss``, ``thm-global-region``, ``cor-sparsity-global``) at every step.

    ``lr="theorem"`` uses the smallest over the trials of the theorem's step
    (``eta_ngd_global`` or ``eta_gd_global`` of :func:`global_constants`), valid for every trial;
    a number runs that step, and the bounds are then evaluated only where it is within the
    theorem's step of the trial.

    Returns
    -------
    dict with ``eta`` (float), ``consts`` (:func:`global_constants`), ``proved`` (B,) bool (the
    step is within the theorem's), ``noloss`` (B,) bool (the step is within
    :func:`attnsvm.bounds.noloss_steps`), ``excess`` (steps + 1, B), ``log_q`` (steps + 1, B, n),
    ``W`` (B, d, d) final, ``t_reach`` (B,) the theorem's reaching time at ``eta`` (NaN where
    not ``proved``),
    ``first`` (B,) the observed first step in the region (:func:`first_in_region`),
    ``mono``, ``mono_checked``, ``mono_worst`` (:func:`q_monotone`), ``excess_holds`` and
    ``mass_holds`` (steps + 1, B) bool: :math:`E(W_t)` below the theorem's bound and
    :math:`\max_i(1-s_i(W_t))` below the corollary's (False where not ``proved``).
    """
    if optimizer not in ("gd", "ngd"):
        raise ValueError(f"optimizer must be 'gd' or 'ngd', got {optimizer!r}")
    g = global_constants(data, opt, W_mm, W0)
    thm = g[f"eta_{optimizer}_global"]
    if isinstance(lr, str):
        if lr != "theorem":
            raise ValueError(f"lr must be a positive number or 'theorem', got {lr!r}")
        eta = float(thm.min())
    else:
        eta = float(lr)
        if not eta > 0:
            raise ValueError(f"lr must be positive, got {lr!r}")
    proved = eta <= thm * (1 + 1e-12)
    noloss = eta <= g[f"eta_{optimizer}_noloss"]
    lq, ex, W = every_step(data, opt, optimizer=optimizer, lr=eta, steps=steps, init=W0,
                           chunk=chunk, device=device)
    t = np.arange(ex.shape[0])
    mono, checked, worst = q_monotone(lq, ex)
    n = lq.shape[-1]
    bound = bounds.global_excess_bound(t, g["E0"], eta, g["mu0"], optimizer=optimizer)
    mass = np.exp(-np.logaddexp(0.0, -lq)).max(-1)                 # max_i q_i/(1+q_i)
    with np.errstate(divide="ignore"):
        excess_holds = np.log(ex) <= np.log(bound) + 1e-9
        mass_holds = (np.log(mass) <= np.log(bounds.mass_from_excess(bound, n, g["bD_minus"]))
                      + 1e-9)
    return dict(eta=eta, consts=g, proved=proved, noloss=noloss, excess=ex, log_q=lq, W=W,
                t_reach=np.where(proved, bounds.t_reach(g["E0"], g["eps0"], eta, g["mu0"],
                                                        optimizer=optimizer), np.nan),
                first=first_in_region(ex, g["eps0"]), mono=mono, mono_checked=checked,
                mono_worst=worst, excess_holds=excess_holds & proved, mass_holds=mass_holds & proved)


def global_cx_experiment(n, T, d, *, trials, steps, radius, R_adv, R_big, lr_gd, lr_ngd,
                         short_steps=None, seed=0, chunk=500, device="auto"):
    r"""The global theorem on orthogonal-query equal-score instances (the cross-sequence
    condition (Cx) holds), every run checked at every step (:func:`global_run`).

    Starts: ``"random"`` (norm ``radius``, :func:`random_inits`) and ``"adversarial"``
    (:math:`R_{\mathrm{adv}}W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`, ``alpha`` swapping sequence 0's
    optimal token for the next one), each run by GD and NGD at the theorem's steps
    (``"theorem"``) and at the given steps ``lr_gd``, ``lr_ngd`` (``"default"``); and ``"large"``
    (:math:`R_{\mathrm{big}}W^\alpha_{mm}/\|W^\alpha_{mm}\|_F`, saturated on a wrong token), run
    at the lemma's steps :math:`\min(\mathrm{lr\_gd}, \eta_{\mathrm{GD}})` and
    :math:`\eta_{\mathrm{NGD}}` (``"noloss"``, the smallest over the trials). The theorem runs
    take ``steps`` steps, the others ``short_steps`` (default ``steps // 10``).

    Returns
    -------
    runs : dict (start, optimizer, kind) -> dict of :func:`global_run`
    cross_min : (trials,) :func:`cross_gram_min`
    """
    data, opt = score_data(n, T, d, trials=trials, queries="orthogonal", seed=seed)
    W_mm = svm_batch(data, opt)
    alpha = opt.copy()
    alpha[:, 0] = (alpha[:, 0] + 1) % T
    Wa = svm_batch(data, alpha)
    Wa = Wa / np.linalg.norm(Wa, axis=(-2, -1), keepdims=True)
    c = constants(data, opt, W_mm)
    eta_gd0, eta_ngd0 = bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], n)
    starts = {"random": random_inits(d, trials, radius=radius, seed=seed), "adversarial": R_adv * Wa}
    short = max(steps // 10, 1) if short_steps is None else short_steps
    runs = {}
    for sname, W0 in starts.items():
        for name, lr in (("ngd", lr_ngd), ("gd", lr_gd)):
            for kind, step, k in (("theorem", "theorem", steps), ("default", lr, short)):
                runs[sname, name, kind] = global_run(data, opt, W_mm, W0, optimizer=name, lr=step,
                                                     steps=k, chunk=chunk, device=device)
    for name, step in (("ngd", float(eta_ngd0.min())), ("gd", min(lr_gd, float(eta_gd0.min())))):
        runs["large", name, "noloss"] = global_run(data, opt, W_mm, R_big * Wa, optimizer=name,
                                                   lr=step, steps=short, chunk=chunk, device=device)
    return runs, cross_gram_min(data, opt)


def global_cx_summary(runs):
    r"""The numbers of the global-theorem experiment (:func:`global_cx_experiment`), as a flat
    dict of floats and ints (medians and extremes over trials):

    ``eta_{opt}_{start}`` the theorem's step, ``treach_{opt}_{start}`` the largest bound
    :math:`t_{\mathrm{reach}}`, ``first_{opt}_{start}`` the largest observed first step in the
    region, ``bound_over_first_{opt}_{start}`` the smallest ratio of the two, for the theorem
    runs (opt ``ngd``/``gd``, start ``random``/``adversarial``); ``reached`` whether every
    theorem run reached the region within its bound (bool); ``excess_frac`` and ``mass_frac``
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
    out, reached, ex, ms, mono, pairs = {}, True, [], [], True, 0
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
            reached &= bool(np.all(fin) and np.all(r["first"] <= r["t_reach"]))
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
