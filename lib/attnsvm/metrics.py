r"""Metrics (numpy): correlation, direction error, stable softmax, attention maps, rates.

* :func:`corr`: :math:`\mathrm{corr}(A,B) = \langle A,B\rangle / (\|A\|_F \|B\|_F)`.
* :func:`direction_error`: :math:`\| A/\|A\|_F - B/\|B\|_F \|_F = \sqrt{2 - 2\,\mathrm{corr}(A,B)}`.
* :func:`softmax`: log-sum-exp softmax, exact for scores of any finite size.
* :func:`attention`: :math:`\mathrm{softmax}(X W z_i)` per sequence (or :math:`\mathrm{softmax}(X p)`).
* :func:`opt_mass`: softmax mass on the optimal token :math:`s_{i,\mathrm{opt}_i}`.
* :func:`fit_rate`: the least-squares slope of :math:`\log \mathrm{err}` against
  :math:`\log t` on the tail of a trajectory (err :math:`\approx C t^{\mathrm{slope}}`);
  :func:`slopes`, the same per trial on the last decade; :func:`exp_rate`, the exponential rate
  of a series in log space; :func:`first_step`, the first record from which a condition holds.
* :func:`phase_fit`: PRGD's log-gap against its phase index (per-phase rate and :math:`R^2`).
* :func:`one_minus_corr`: :math:`1 - \mathrm{corr}` without cancellation.
* the softmax mass off the selected tokens, in log space: :func:`log_q`, :func:`nonopt_mass`
  (batched, at ``opt``), :func:`nonselected_mass` (one instance, at a choice ``alpha``);
  :func:`min_margin`, the smallest selection margin.
* :func:`collapse_ratio`: subspace collapse of embeddings with pattern labels (Chapter 15).

All functions broadcast over leading (trials) axes.
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_int, check_positive
from .tokens import attention_scores, check_alpha, opt_margins

__all__ = ["nanmedian", "nanmax", "corr", "direction_error", "direction_error_from_corr", "softmax", "attention",
           "opt_mass", "fit_rate", "slopes", "exp_rate", "first_step", "collapse_ratio", "one_minus_corr",
           "log_q", "nonopt_mass", "captured",
           "nonselected_mass", "min_margin", "selected_sets", "balanced_factors", "factor_cost", "imbalance",
           "singular_gap", "phase_fit"]


def nanmedian(x, axis=None):
    """Median ignoring NaN, NaN (not a warning) where nothing finite is left: the NaN-safe
    reduction of the chapters' headline numbers (a float when ``axis`` is None)."""
    x = np.asarray(x, dtype=float)
    if not np.any(np.isfinite(x)):
        return float("nan") if axis is None else np.full(np.delete(x.shape, axis), np.nan)
    with np.errstate(all="ignore"):
        r = np.nanmedian(x, axis=axis)
    return float(r) if axis is None else r


def nanmax(x):
    """Largest finite entry of ``x`` as a float, NaN (not a warning) when there is none: e.g. the
    latest first step over the trials that reach a set, :func:`first_step` giving NaN for the
    others."""
    x = np.asarray(x, dtype=float)
    return float(np.max(x[np.isfinite(x)])) if np.isfinite(x).any() else float("nan")


def _elem_axes(A, B, elem_ndim):
    if elem_ndim is None:
        if A.ndim == B.ndim:
            elem_ndim = 1 if A.ndim == 1 else 2
        else:
            elem_ndim = min(A.ndim, B.ndim)
    elem_ndim = check_int("elem_ndim", elem_ndim, minimum=1)
    if elem_ndim > min(A.ndim, B.ndim):
        raise ValueError(f"elem_ndim={elem_ndim} exceeds the rank of A {A.shape} or B {B.shape}")
    if A.shape[A.ndim - elem_ndim:] != B.shape[B.ndim - elem_ndim:]:
        raise ValueError(f"A and B elements must have equal shapes, got {A.shape} and {B.shape}")
    return tuple(range(-elem_ndim, 0))


def corr(A, B, *, elem_ndim=None):
    r"""Correlation :math:`\langle A,B\rangle / (\|A\|_F \|B\|_F)`, batched over leading axes.

    Parameters
    ----------
    A, B : array_like
        Elements are the trailing ``elem_ndim`` axes; leading axes broadcast.
    elem_ndim : int, optional
        Number of trailing axes forming one element. Default: when the ranks differ, the
        smaller rank (e.g. (B,d,d) against (d,d) -> 2, (B,d) against (d,) -> 1); when equal,
        1 for vectors and 2 otherwise (so two (B,d) batches of vectors need ``elem_ndim=1``).

    Returns
    -------
    ndarray or float
        NaN where either element is zero.
    """
    A = as_float_array("A", A, finite=False)
    B = as_float_array("B", B, finite=False)
    ax = _elem_axes(A, B, elem_ndim)
    # rescale by the max entry first so huge or tiny norms do not overflow / underflow
    sa = np.max(np.abs(A), axis=ax, keepdims=True)
    sb = np.max(np.abs(B), axis=ax, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        A = A / sa
        B = B / sb
        num = np.sum(A * B, axis=ax)
        den = np.sqrt(np.sum(A * A, axis=ax) * np.sum(B * B, axis=ax))
        out = num / den
    return out[()] if out.ndim == 0 else out


def direction_error(A, B, *, elem_ndim=None):
    r""":math:`\| A/\|A\|_F - B/\|B\|_F \|_F`, batched like :func:`corr` (in :math:`[0, 2]`)."""
    A = as_float_array("A", A, finite=False)
    B = as_float_array("B", B, finite=False)
    ax = _elem_axes(A, B, elem_ndim)
    with np.errstate(invalid="ignore", divide="ignore"):
        sa = np.max(np.abs(A), axis=ax, keepdims=True)
        sb = np.max(np.abs(B), axis=ax, keepdims=True)
        A = A / sa
        B = B / sb
        A = A / np.sqrt(np.sum(A * A, axis=ax, keepdims=True))
        B = B / np.sqrt(np.sum(B * B, axis=ax, keepdims=True))
        out = np.sqrt(np.sum((A - B) ** 2, axis=ax))
    return out[()] if out.ndim == 0 else out


def direction_error_from_corr(c):
    r"""Direction error from a correlation: :math:`\sqrt{2 - 2c} = \|A/\|A\| - B/\|B\|\|`.

    For recorded correlations (``History.corr``), where the matrices themselves are not kept.
    Accurate down to about :math:`10^{-8}` (the square root of the float64 resolution of ``c``);
    use :func:`direction_error` on the matrices for smaller errors.

    Parameters
    ----------
    c : array_like
        Correlations in :math:`[-1, 1]` (NaN passes through, e.g. for a zero iterate).
    """
    c = as_float_array("c", c, finite=False)
    if np.any(np.abs(c[np.isfinite(c)]) > 1 + 1e-9):
        raise ValueError("c must contain correlations in [-1, 1]")
    out = np.sqrt(np.clip(2.0 - 2.0 * c, 0.0, None))
    return out[()] if out.ndim == 0 else out


def softmax(a, axis=-1):
    r"""Softmax :math:`e^{a_t - \max a} / \sum_\tau e^{a_\tau - \max a}` (log-sum-exp stable)."""
    a = as_float_array("a", a, finite=False)
    mx = np.max(a, axis=axis, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    e = np.exp(a - mx)
    return e / np.sum(e, axis=axis, keepdims=True)


def attention(X, W, Z=None):
    r"""Attention maps :math:`s_i = \mathrm{softmax}(X_i W z_i)`, shape (..., n, T).

    Parameters
    ----------
    X : array_like, shape (..., n, T, d)
    W : array_like, shape (..., d, d); or the prompt ``p`` (..., d) when ``Z`` is None
    Z : array_like, shape (..., n, d), optional
        Queries. Without ``Z`` the scores are :math:`X_i p` (prompt attention).
    """
    X = as_float_array("X", X, min_ndim=3)
    W = as_float_array("W", W, finite=False)
    if Z is None:
        if W.shape[-1:] != X.shape[-1:]:
            raise ValueError(f"p must have shape (..., d) with d = {X.shape[-1]}, got {W.shape}")
    else:
        Z = as_float_array("Z", Z, min_ndim=2)
        if W.ndim < 2 or W.shape[-2:] != (X.shape[-1],) * 2:
            raise ValueError(f"W must have shape (..., d, d) with d = {X.shape[-1]}, got {W.shape}")
    return softmax(attention_scores(X, W, Z), axis=-1)


def opt_mass(S, opt, *, reduce="mean"):
    r"""Softmax mass on the optimal tokens, :math:`s_{i,\mathrm{opt}_i}`.

    Parameters
    ----------
    S : array_like, shape (..., n, T)
        Attention maps (e.g. from :func:`attention`).
    opt : array_like of int, shape (..., n)
    reduce : {"mean", "min", None}
        Reduce over the n sequences, or return all (..., n).
    """
    S = as_float_array("S", S, min_ndim=2, finite=False)
    opt = np.asarray(opt)
    if not np.issubdtype(opt.dtype, np.integer):
        raise ValueError(f"opt must be an integer array, got dtype {opt.dtype}")
    if np.any(opt < 0) or np.any(opt >= S.shape[-1]):
        raise ValueError(f"opt entries must lie in [0, {S.shape[-1]})")
    opt_b = np.broadcast_to(opt, S.shape[:-1])
    m = np.take_along_axis(S, opt_b[..., None], axis=-1)[..., 0]
    if reduce is None:
        return m
    if reduce == "mean":
        return m.mean(axis=-1)
    if reduce == "min":
        return m.min(axis=-1)
    raise ValueError(f"reduce must be 'mean', 'min' or None, got {reduce!r}")


def fit_rate(t, err, *, tail=0.5, return_intercept=False, log=False):
    r"""Fitted log-log slope of ``err`` against ``t`` on the tail of the trajectory.

    Least squares of :math:`\log \mathrm{err}_k = \beta_0 + \beta_1 \log t_k` over the points
    with :math:`t_k > 0` in the tail; :math:`\mathrm{err} \approx e^{\beta_0} t^{\beta_1}`.
    With ``log=True``, ``err`` holds :math:`\log\mathrm{err}` (finite), for errors that float64
    cannot hold (NGD's non-optimal mass reaches :math:`10^{-593}` at the papers' sizes, chapter 10).

    Parameters
    ----------
    t : array_like, shape (K,)
        Steps (only ``t > 0`` are used).
    err : array_like, shape (K,) or (K, B)
        Positive errors; several columns are fitted independently.
    tail : float in (0, 1] or tuple (t_min, t_max)
        The last fraction of the points (with ``t > 0``), or a closed range of ``t``.
    return_intercept : bool
    log : bool
        ``err`` is the logarithm of the errors.

    Returns
    -------
    slope : float or ndarray (B,)
    intercept : same, if ``return_intercept``
    """
    t = as_float_array("t", t, ndim=1)
    err = as_float_array("err", err, min_ndim=1, max_ndim=2, finite=False)
    if err.shape[0] != t.shape[0]:
        raise ValueError(f"err must have {t.shape[0]} rows (one per t), got shape {err.shape}")
    keep = t > 0
    if isinstance(tail, tuple):
        if len(tail) != 2 or not tail[0] < tail[1]:
            raise ValueError(f"tail must be (t_min, t_max) with t_min < t_max, got {tail!r}")
        keep &= (t >= tail[0]) & (t <= tail[1])
    else:
        tail = float(tail)
        if not 0 < tail <= 1:
            raise ValueError(f"tail must be in (0, 1] or a (t_min, t_max) tuple, got {tail!r}")
        idx = np.flatnonzero(keep)
        k0 = idx[int(np.floor(len(idx) * (1 - tail)))] if len(idx) else 0
        keep &= np.arange(len(t)) >= k0
    if keep.sum() < 2:
        raise ValueError("tail must contain at least two points with t > 0")
    e = err[keep]
    if log:
        if not np.all(np.isfinite(e)):
            raise ValueError("err (log errors) must be finite on the fitted tail")
        le = e
    else:
        if np.any(~(e > 0)) or not np.all(np.isfinite(e)):
            raise ValueError("err must be finite and > 0 on the fitted tail")
        le = np.log(e)
    lt = np.log(t[keep])
    Amat = np.stack([np.ones_like(lt), lt], axis=1)
    coef, *_ = np.linalg.lstsq(Amat, le.reshape(len(lt), -1), rcond=None)
    b0, b1 = coef[0], coef[1]
    if err.ndim == 1:
        b0, b1 = float(b0[0]), float(b1[0])
    return (b1, b0) if return_intercept else b1


def slopes(t, series, *, tail=0.1, log=False):
    r"""Per-trial log-log slope of ``series`` (K, B) against ``t`` on the last decade
    ``[t_max * tail, t_max]`` (:func:`fit_rate`). Trials whose series is not
    positive there give NaN. ``log=True``: ``series`` is the logarithm of the series (trials
    with a non-finite value there give NaN)."""
    t = np.asarray(t, dtype=float)
    series = np.asarray(series, dtype=float)
    lo = t.max() * tail
    out = np.full(series.shape[1], np.nan)
    keep = t >= lo
    for b in range(series.shape[1]):
        col = series[keep, b]
        if np.all(np.isfinite(col)) and (log or np.all(col > 0)):
            out[b] = fit_rate(t[keep], col, log=log)
    return out


def exp_rate(t, log_series, *, tail=0.5):
    r"""Per-trial exponential rate :math:`r` of :math:`\log(\mathrm{series}) \approx c - r t`
    (least squares on the last ``tail`` fraction of the record steps), shape (B,)."""
    t = np.asarray(t, dtype=float)
    keep = t >= t.max() * (1 - tail)
    Amat = np.stack([np.ones(keep.sum()), t[keep]], axis=1)
    coef, *_ = np.linalg.lstsq(Amat, np.asarray(log_series)[keep], rcond=None)
    return -coef[1]


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


def captured(max_mass, *, tol=1e-3):
    r"""Whether a trial is *captured by wrong-token saturation*: some sequence puts at least
    :math:`1 - \mathrm{tol}` of its softmax mass on non-optimal tokens (chapter 8's mechanism:
    its optimal token's weight is then :math:`\le\mathrm{tol}`, its gradient term vanishes with
    it, and the run does not reach the region :math:`E\le\varepsilon_0` on the horizons the
    book runs). ``max_mass`` is the largest non-optimal mass over the sequences
    (``trajectory_metrics(...)["max_mass"]``), any shape; returns bool of that shape."""
    if not 0 < tol < 1:
        raise ValueError(f"tol must lie in (0, 1), got {tol!r}")
    return np.asarray(max_mass, dtype=float) >= 1 - tol


def phase_fit(t, gap, period, *, start=0, stop=None):
    r"""Fit :math:`\log \mathrm{gap} = c - \rho\,k` over the phase boundaries :math:`t = kP`
    with :math:`P \le t`, ``start`` :math:`\le t \le` ``stop`` (one point per phase of PRGD, at
    the same place of every phase, so the saw-tooth inside a phase does not enter the fit). A
    constant ``rate`` over successive windows is an exponential rate in :math:`t`; a gap
    :math:`\propto t^{-\beta}` has a per-phase rate that falls like :math:`\beta/k`.

    Returns
    -------
    rate : ndarray (B,)
        :math:`\rho` per phase (``> 0``: the gap shrinks by :math:`e^{-\rho}` per phase).
    r2 : ndarray (B,)
        :math:`R^2` of each trial's line.
    phases : int
        The number of fitted phase boundaries.
    """
    t = np.asarray(t, dtype=int)
    period = check_int("period", period, minimum=1)
    gap = as_float_array("gap", gap, ndim=2, finite=False)
    keep = (t % period == 0) & (t >= max(start, period))
    if stop is not None:
        keep &= t <= stop
    if keep.sum() < 3:
        raise ValueError(f"need at least 3 recorded phase boundaries t = k*{period} >= {start}, "
                         f"got {int(keep.sum())}")
    if np.any(~(gap[keep] > 0)):
        raise ValueError("gap must be positive at the fitted phase boundaries")
    k = t[keep] / period
    z = np.log(gap[keep])                                                 # (P, B)
    coef = np.polyfit(k, z, 1)                                            # (2, B)
    rate = -coef[0]
    res = z - (coef[0][None] * k[:, None] + coef[1][None])
    r2 = 1.0 - (res ** 2).sum(0) / ((z - z.mean(0)) ** 2).sum(0)
    return rate, r2, int(keep.sum())


def collapse_ratio(E, groups):
    r"""Subspace-collapse measure of embeddings ``E`` (..., m, d) with pattern labels ``groups``
    (m,): the mean distance between the normalized embeddings :math:`E/\|E\|_F` of two contexts
    with the same label, divided by the mean distance between contexts with different labels.
    0 means complete collapse of each pattern to one point."""
    E = as_float_array("E", E, min_ndim=2)
    groups = np.asarray(groups)
    if groups.shape != (E.shape[-2],):
        raise ValueError(f"groups must have one label per context ({E.shape[-2]}), got {groups.shape}")
    same = (groups[:, None] == groups[None]) & ~np.eye(len(groups), dtype=bool)
    diff = groups[:, None] != groups[None]
    if not same.any() or not diff.any():
        raise ValueError("groups needs two contexts with one label and two different labels")
    En = E / np.linalg.norm(E, axis=(-2, -1), keepdims=True)
    D = np.linalg.norm(En[..., :, None, :] - En[..., None, :, :], axis=-1)
    return D[..., same].mean(-1) / D[..., diff].mean(-1)


# ----------------------------------------------------------------------------- selection mass
def one_minus_corr(W, W_ref):
    r""":math:`1 - \mathrm{corr}(W, W_{\mathrm{ref}}) = \tfrac12\|\hat W - \hat W_{\mathrm{ref}}\|_F^2`,
    computed from the normalized difference (no cancellation), shape (...)."""
    return 0.5 * direction_error(W, W_ref) ** 2


def log_q(data, opt, W):
    r""":math:`\log q_i(W) = \log\sum_{t\ne\mathrm{opt}_i}e^{-m_{it}(W)}` (log-sum-exp), shape
    (..., B, n); :math:`s_i = 1/(1 + q_i)`."""
    W = np.asarray(W, dtype=float)
    m = opt_margins(data, opt, W)
    mx = np.min(m, axis=-1, keepdims=True)
    return -mx[..., 0] + np.log(np.sum(np.exp(-(m - mx)), axis=-1))


def nonopt_mass(data, opt, W, *, log=False):
    r"""Softmax mass on the non-optimal tokens, :math:`1 - s_{i,\mathrm{opt}_i}`, shape (..., B, n).

    Computed in log space (:math:`\log(1-s_i) = \log q_i - \log(1+q_i)`), exact far below
    :math:`10^{-16}`. ``log=True`` returns the logarithm.
    """
    lq = log_q(data, opt, W)
    out = lq - np.logaddexp(0.0, lq)
    return out if log else np.exp(out)


def nonselected_mass(W, X, Z, alpha):
    r"""Softmax mass on the non-selected tokens, :math:`1 - s_{i\alpha_i}(W)`, shape (n,).

    Computed as :math:`\exp(\mathrm{lse}_{t\ne\alpha_i} a_{it} - \mathrm{lse}_t a_{it})`, so it
    stays accurate (relative error ~1e-15) when it is far below machine epsilon.
    """
    X = as_float_array("X", X, ndim=3)
    n, T, d = X.shape
    W = as_float_array("W", W, shape=(d, d))
    Z = as_float_array("Z", Z, shape=(n, d))
    alpha = check_alpha(alpha, (n,), T)
    a = np.einsum("ntd,nd->nt", X, Z @ W.T)
    other = a.copy()
    other[np.arange(n), alpha] = -np.inf
    lse_all = np.logaddexp.reduce(a, axis=1)
    lse_other = np.logaddexp.reduce(other, axis=1)
    return np.exp(lse_other - lse_all)


def min_margin(data, opt, W):
    r"""Smallest margin :math:`\min_{i,t\neq\mathrm{opt}_i}\langle A_{it}, W\rangle`, shape (..., B)."""
    return opt_margins(data, opt, np.asarray(W, dtype=float)).min(axis=(-2, -1))


# ----------------------------------------------------------------------------- selections and factors
def selected_sets(X, W, Z=None, *, mass_tol=1e-3):
    r"""The tokens that keep softmax mass: :math:`S_i = \{t : s_{it} \ge \tau\}` with
    :math:`s_i = \mathrm{softmax}(X_i W z_i)` and :math:`\tau` = ``mass_tol``.

    Returns a list (one per trial; a single list for unbatched input) of ``n`` sorted tuples.
    The argmax token is always in its set.
    """
    X = as_float_array("X", X, min_ndim=3)
    mass_tol = check_positive("mass_tol", mass_tol)
    if mass_tol >= 1:
        raise ValueError(f"mass_tol must be < 1, got {mass_tol}")
    W = as_float_array("W", W)
    S = softmax(attention_scores(X, W, None if Z is None else as_float_array("Z", Z)))
    keep = (S >= mass_tol) | (S == S.max(axis=-1, keepdims=True))

    def sets(k):
        return [tuple(int(t) for t in np.flatnonzero(row)) for row in k]

    return sets(keep) if keep.ndim == 2 else [sets(k) for k in keep]




def balanced_factors(W, m=None):
    r"""Factors :math:`K = A\Sigma^{1/2}`, :math:`Q = B\Sigma^{1/2}` of :math:`W = A\Sigma B^\top`
    (SVD), padded with zero columns to width ``m`` (default ``d``; needs ``m >= rank W``).
    They satisfy :math:`KQ^\top = W`, :math:`K^\top K = Q^\top Q` and
    :math:`(\|K\|_F^2 + \|Q\|_F^2)/2 = \|W\|_*`."""
    W = as_float_array("W", W, ndim=2)
    d1, d2 = W.shape
    U, s, Vt = np.linalg.svd(W, full_matrices=False)
    r = int(np.sum(s > 1e-12 * max(s[0], 1e-300))) if s.size else 0
    m = min(d1, d2) if m is None else check_int("m", m, minimum=1)
    if m < r:
        raise ValueError(f"m = {m} is smaller than rank(W) = {r}: W = K Q^T needs m >= rank W")
    K = np.zeros((d1, m))
    Q = np.zeros((d2, m))
    k = min(m, s.size)
    K[:, :k] = U[:, :k] * np.sqrt(s[:k])
    Q[:, :k] = Vt[:k].T * np.sqrt(s[:k])
    return K, Q


def factor_cost(K, Q):
    r""":math:`(\|K\|_F^2 + \|Q\|_F^2)/2`, batched over leading axes."""
    K = as_float_array("K", K, min_ndim=2)
    Q = as_float_array("Q", Q, min_ndim=2)
    return 0.5 * (np.sum(K * K, axis=(-2, -1)) + np.sum(Q * Q, axis=(-2, -1)))


def imbalance(K, Q):
    r"""Relative imbalance :math:`\|K^\top K - Q^\top Q\|_F / (\|K\|_F^2 + \|Q\|_F^2)`,
    batched over leading axes (0 for balanced factors)."""
    K = as_float_array("K", K, min_ndim=2)
    Q = as_float_array("Q", Q, min_ndim=2)
    D = np.swapaxes(K, -1, -2) @ K - np.swapaxes(Q, -1, -2) @ Q
    return np.linalg.norm(D, axis=(-2, -1)) / (2 * factor_cost(K, Q))


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
