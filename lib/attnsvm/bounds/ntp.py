r"""Bounds of next-token prediction, as functions (chapters 15 and 16).

* the finite part of the logits (chapter 15): :func:`finite_part_bound`, and the logit geometry of
  a UFM run checked against it (:func:`ufm_geometry`);
* the smoothness constant of the next-token log-loss (chapter 16): :func:`smoothness_bound`;
* the regularization path of next-token attention (book: ``thm-ntpattn-path``):
  :func:`ntp_path_constants`, :func:`ntp_path_bounds`; its order :math:`1/R^2` under strict
  complementarity (book: ``thm-ntpattn-squared``): :func:`ntp_support_constants`,
  :func:`ntp_squared_bounds`, :func:`ntp_support_potential`, :func:`ntp_support_radius`,
  :func:`ntp_support_minimizer`, :func:`ntp_sharp_bounds`.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import nnls
from scipy.special import log_softmax, logsumexp

from .. import metrics, svm
from .._checks import as_float_array
from ..data import NTPData, support_sets
from ..losses import entropy, lse_argmin
from .squared import _sharpness_exact, _sharpness_lower

__all__ = ["finite_part_bound", "ntp_path_constants", "ntp_path_bounds", "ntp_support_constants",
           "ntp_squared_bounds", "ntp_support_potential", "ntp_support_radius", "smoothness_bound",
           "ntp_support_minimizer", "ntp_sharp_bounds",
           "ufm_geometry"]


def finite_part_bound(gap_j, P):
    r"""The bound of the chapter's lemma on the finite part (proved there): if the per-context
    excess :math:`\mathrm{KL}(p_j\,\|\,\mathrm{softmax}(L_j)) = \kappa_j` and
    :math:`\delta_j = \sqrt{\kappa_j/2} < p_{\min,j} = \min_{z\in S_j}p_{jz}`, then every entry of
    :math:`P_{F_L}L - L^*` in row :math:`j` is at most
    :math:`2\log(1 + \delta_j/(p_{\min,j} - \delta_j))` in absolute value. Returns the bound per
    row (``inf`` where :math:`\delta_j \ge p_{\min,j}`), shape of ``gap_j``."""
    P, sup = support_sets(P)
    gap_j = as_float_array("gap_j", gap_j, shape=P.shape[:-1])
    if np.any(gap_j < -1e-12):
        raise ValueError("gap_j must be nonnegative (a KL divergence)")
    delta = np.sqrt(0.5 * np.maximum(gap_j, 0.0))       # Pinsker: TV <= sqrt(KL/2)
    pmin = np.where(sup, P, np.inf).min(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = 2.0 * np.log1p(delta / (pmin - delta))
    return np.where(delta < pmin, b, np.inf)


def smoothness_bound(data):
    r"""The smoothness constant of the log-loss in :math:`W` (Frobenius norm), per trial:
    :math:`L = \tfrac14\max_i\max_{a,b}\|x_{ia} - x_{ib}\|^2\|z_i\|^2` (Chapter 16)."""
    X, Z = data.X, data.Z
    diff = np.linalg.norm(X[..., :, None, :] - X[..., None, :, :], axis=-1).max(axis=(-2, -1))
    return 0.25 * (diff ** 2 * np.sum(Z * Z, axis=-1)).max(axis=-1)


def ntp_path_constants(data, W_star, W_G, mask, Q):
    r"""The constants of the regularization-path theorem of Chapter 16 (book:
    ``thm-ntpattn-path``), for one trial of next-token data.

    With the scores :math:`s_{it} = x_{it}^\top W^* z_i` of the finite part and
    :math:`\mathrm{LSE}_i = \log\sum_{t\in O_i}e^{s_{it}}`:

    * ``C_Omega`` :math:`C_\Omega = \frac1n\sum_i\sum_{b\notin O_i}e^{s_{ib} - \mathrm{LSE}_i}`;
    * ``D_star`` :math:`D_* = \max_{i,\,b\notin O_i}(\mathrm{LSE}_i - s_{ib})`;
    * ``M`` :math:`\max_{i,t}\|x_{it}\|\,\|z_i\|`;
    * ``kappa`` :math:`\kappa`, the smallest eigenvalue on :math:`F` of the Hessian of
      :math:`L_O` at :math:`W^*` (:math:`\frac1n\sum_i` of the covariance of the features
      :math:`x_{it}z_i^\top`, :math:`t\in O_i`, under :math:`\mathrm{softmax}_{O_i}(s_i)`);
    * ``g`` :math:`\|W^G_{mm}\|_F`, ``W_star_norm`` :math:`\|W^*\|_F`, ``n``.

    Parameters
    ----------
    data : attnsvm.data.NTPSeqData, one trial
    W_star, W_G : (d, d) the finite part and the graph SVM
    mask : bool (n, T), the top components :math:`O_i` (:func:`attnsvm.graphs.top_component`)
    Q : (d*d, r) an orthonormal basis of :math:`F` (:func:`attnsvm.svm.graph_subspace`), r >= 1
    """
    X, Z = np.asarray(data.X, dtype=float), np.asarray(data.Z, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    W_star = as_float_array("W_star", W_star, ndim=2)
    Q = as_float_array("Q", Q, ndim=2)
    if Q.shape[1] == 0:
        raise ValueError("Q must have at least one column (F = {0} has no finite part)")
    n = X.shape[0]
    s = np.einsum("ntd,de,ne->nt", X, W_star, Z)
    C, D = 0.0, -np.inf
    Hq = np.zeros((Q.shape[1], Q.shape[1]))
    for i in range(n):
        O = mask[i]
        lse = float(logsumexp(s[i, O]))
        if (~O).any():
            C += np.exp(s[i, ~O] - lse).sum() / n
            D = max(D, float((lse - s[i, ~O]).max()))
        p = np.exp(s[i, O] - lse)
        J = np.einsum("td,e->tde", X[i, O], Z[i]).reshape(O.sum(), -1) @ Q       # (|O_i|, r)
        Jc = J - p @ J
        Hq += (Jc.T * p) @ Jc / n
    if not np.isfinite(D):
        raise ValueError("every sequence lies in its top component: no path to describe")
    M = float((np.linalg.norm(X, axis=-1) * np.linalg.norm(Z, axis=-1)[:, None]).max())
    return dict(C_Omega=float(C), D_star=D, M=M, kappa=float(np.linalg.eigvalsh(Hq)[0]),
                g=float(np.linalg.norm(W_G)), W_star_norm=float(np.linalg.norm(W_star)), n=n)


def ntp_path_bounds(R, consts):
    r"""The bounds of the regularization-path theorem of Chapter 16 (book: ``thm-ntpattn-path``)
    at radii ``R``, from :func:`ntp_path_constants`. With
    :math:`\rho = \sqrt{R^2 - \|W^*\|^2}/g` and :math:`\varepsilon_R = C_\Omega e^{-\rho}`:

    * ``eps`` :math:`\varepsilon_R`, the bound on both parts of the excess loss of :math:`W_R`;
    * ``r1`` :math:`\sqrt{e\,\varepsilon_R/\kappa}` and ``r2``
      :math:`e^{2Mr_1}\,2M\varepsilon_R\,\sqrt{1 + ((\|W^*\| + r_1)/(g(\rho - K^{(1)}_R)))^2}/\kappa`,
      two bounds on :math:`\|P_FW_R - W^*\|_F` (``r`` their minimum);
    * ``K`` :math:`K_R = \log(nC_\Omega) + n\varepsilon_R + D_* + 2Mr`: every graph margin of
      :math:`P_\perp W_R` is at least :math:`\rho - K_R`;
    * ``beta`` :math:`1 - (\sqrt{R^2-\|W^*\|^2} - gK_R)/\sqrt{R^2 - (\|W^*\| - r)_+^2}`, the bound
      on :math:`1 - \mathrm{corr}(P_\perp W_R, W^G_{mm})`;
    * ``K_inf`` :math:`\log(nC_\Omega) + D_*`: :math:`R\,\beta_R \to gK_\infty`;
    * ``valid``: the hypotheses :math:`R > \|W^*\|`, :math:`\varepsilon_R < \kappa/(4eM^2)` and
      :math:`\rho > K_R` of items 2-5 (where they fail ``r1``, ``r2``, ``r``, ``K`` and ``beta``
      are NaN; ``rho`` and ``eps``, item 1, need only :math:`R > \|W^*\|` and are NaN only
      where it fails).
    """
    R = np.atleast_1d(np.asarray(R, dtype=float))
    if np.any(R <= 0):
        raise ValueError("R must contain positive radii")
    c = consts
    n, g, w, M, kap = c["n"], c["g"], c["W_star_norm"], c["M"], c["kappa"]
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.sqrt(np.where(R > w, R ** 2 - w ** 2, np.nan)) / g
        eps = c["C_Omega"] * np.exp(-rho)
        r1 = np.sqrt(np.e * eps / kap)
        K1 = np.log(n * c["C_Omega"]) + n * eps + c["D_star"] + 2 * M * r1
        r2 = np.exp(2 * M * r1) * 2 * M * eps * np.sqrt(1 + ((w + r1) / (g * (rho - K1))) ** 2) / kap
        r = np.minimum(r1, np.where(rho > K1, r2, np.inf))
        K = np.log(n * c["C_Omega"]) + n * eps + c["D_star"] + 2 * M * r
        beta = 1 - (g * rho - g * K) / np.sqrt(R ** 2 - np.maximum(w - r, 0) ** 2)
    valid = (R > w) & (eps < kap / (4 * np.e * M ** 2)) & (rho > K1)
    nan = np.where(valid, 0.0, np.nan)
    return dict(rho=rho, eps=eps, r1=r1 + nan, r2=r2 + nan, r=r + nan, K=K + nan,
                beta=beta + nan, K_inf=float(np.log(n * c["C_Omega"]) + c["D_star"]), valid=valid)


def ntp_support_constants(data, W_G, W_star, mask, Q, *, tol=1e-7):
    r"""The graph SVM's multipliers, support and sharpness constants (book:
    ``thm-ntpattn-squared``), for one trial of next-token data.

    The constraints are :math:`k = (i, b)`, :math:`b\notin O_i`, with the features
    :math:`\bar A_k = P_\perp\big((x_{ia} - x_{ib})z_i^\top\big)` (any :math:`a\in O_i`: the
    differences inside :math:`O_i` lie in :math:`F`), so that :math:`\langle\bar A_k, U\rangle` is the
    graph margin of any :math:`U\perp F` and the graph SVM is
    :math:`\min\|W\|_F` s.t. :math:`W\perp F`, :math:`\langle\bar A_k, W\rangle\ge1`. Identical
    features (several sequences with the same query, component and token) are merged. The
    multipliers :math:`W^G_{mm} = \sum_j\lambda_j\bar A_j`, :math:`\lambda\ge0`, over the active
    distinct features are found by non-negative least squares (unique when those features are
    linearly independent; otherwise the choice is conservative as in :func:`support_constants`:
    a zero multiplier on an active feature reports :math:`\delta = 0`). The support :math:`S` is
    :math:`\{\lambda_j > \mathrm{tol}\sum_l\lambda_l\}`; a constraint lies in :math:`S` when its
    feature does.

    Returns a dict: ``feats`` (N, d*d) :math:`\bar A_k`; ``pairs`` (N, 2) :math:`(i, b)`;
    ``support`` (N,) bool; ``lam`` the multipliers of the distinct support features;
    ``fit_err`` :math:`\|\sum_j\lambda_j\bar A_j - W^G_{mm}\|_F/g`; ``active_err``
    :math:`\max_{k\in S}|\langle\bar A_k, W^G_{mm}\rangle - 1|`; ``delta``
    :math:`\min_{k\notin S}\langle\bar A_k, W^G_{mm}\rangle - 1` (``inf`` when every constraint is
    in :math:`S`); ``lam_min``; ``n_S`` (distinct features in :math:`S`); ``sigma_S`` (their
    smallest positive singular value); ``c_S`` :math:`\lambda_{\min}\sigma_S/(g^2\sqrt{1 +
    |S|\lambda_{\min}^2/g^4})` (``lem-sharpness`` with :math:`\gamma_A = 1/g`); ``c_star`` the best
    sharpness constant (:func:`sharpness_constant`'s vertex enumeration); ``K_N`` the number of
    constraints off :math:`S`; ``R_A`` :math:`\max_k\|\bar A_k\|_F`; ``R_N``
    :math:`\max_{k\notin S}\|(P_{\mathcal{A}} - P_S)\bar A_k\|_F` (0 if :math:`K_N = 0`); ``d``
    (N,) :math:`d_k = \mathrm{LSE}_{O_i}(s_i) - s_{ib}` (:math:`s` the scores of :math:`W^*`);
    ``d_gap`` :math:`\max_{k\in S}d_k - \min_{k\notin S}d_k` (0 if :math:`K_N = 0`); ``D_S``
    :math:`\max_{k\in S}d_k`; ``w`` (N,) :math:`w_k = e^{-d_k}/\sum_je^{-d_j}` (the weights of
    :func:`ntp_support_potential`; :math:`\sum_je^{-d_j} = nC_\Omega`); ``omega`` the merged
    weights :math:`\omega_j = \sum_{k\to j}w_k` of the distinct support features (the order of
    ``lam``); ``feats_S`` the distinct support features (rows, the order of ``lam``); and, in the
    layout of :func:`residual_parts` (one trial), ``W_mm`` (1, d, d) :math:`W^G_{mm}`,
    ``gamma_A`` :math:`(1/g,)`, ``Q_S``, ``Q_A`` (orthonormal bases of :math:`\mathcal{A}_S` and
    :math:`\mathcal{A} = \mathrm{span}\{\bar A_k\}`). Nothing is assumed: the caller checks
    ``delta > 0`` (strict complementarity) and ``fit_err``, ``active_err`` small.
    """

    X, Z = np.asarray(data.X, dtype=float), np.asarray(data.Z, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    W_G = as_float_array("W_G", W_G, ndim=2)
    W_star = as_float_array("W_star", W_star, ndim=2)
    Q = as_float_array("Q", Q, ndim=2)
    n, _, d = X.shape
    Pp = np.eye(d * d) - Q @ Q.T
    s = np.einsum("ntd,de,ne->nt", X, W_star, Z)
    feats, pairs, dk = [], [], []
    for i in range(n):
        a = np.flatnonzero(mask[i])[0]
        lse = float(logsumexp(s[i, mask[i]]))
        for b in np.flatnonzero(~mask[i]):
            feats.append(Pp @ np.outer(X[i, a] - X[i, b], Z[i]).ravel())
            pairs.append((i, b))
            dk.append(lse - s[i, b])
    if not feats:
        raise ValueError("every sequence lies in its top component: the graph SVM has no constraint")
    A, dk = np.array(feats), np.array(dk)
    g = float(np.linalg.norm(W_G))
    w = W_G.ravel()
    m = A @ w
    group, reps = np.empty(len(A), int), []                          # merge identical features
    for k, Ak in enumerate(A):
        j = next((j for j, r in enumerate(reps)
                  if np.linalg.norm(Ak - A[r]) <= 1e-10 * max(1.0, np.linalg.norm(Ak))), None)
        if j is None:
            reps.append(k)
            j = len(reps) - 1
        group[k] = j
    Au, mu = A[reps], m[reps]
    act = mu <= 1 + 1e3 * tol
    lam = np.zeros(len(reps))
    lam[act] = nnls(Au[act].T, w)[0]
    Su = lam > tol * lam.sum()
    S = Su[group]
    _, sv, vt = np.linalg.svd(Au[Su], full_matrices=False)
    Q_S = vt[sv > 1e-10 * sv[0]].T
    _, sa, va = np.linalg.svd(A, full_matrices=False)
    Q_A = va[sa > 1e-10 * sa[0]].T
    sigma_S, lam_min, n_S = float(sv[sv > 1e-10 * sv[0]].min()), float(lam[Su].min()), int(Su.sum())
    N = ~S
    RN = np.linalg.norm(A[N] - (A[N] @ Q_S) @ Q_S.T, axis=1)
    wk = np.exp(-dk - logsumexp(-dk))
    return dict(
        feats=A, pairs=np.array(pairs), support=S, lam=lam[Su], feats_S=Au[Su],
        fit_err=float(np.linalg.norm(Au.T @ lam - w) / g),
        active_err=float(np.abs(m[S] - 1).max()),
        delta=float(m[N].min() - 1) if N.any() else np.inf,
        lam_min=lam_min, n_S=n_S, sigma_S=sigma_S,
        c_S=float(_sharpness_lower(1 / g, lam_min, sigma_S, n_S)),
        c_star=float(_sharpness_exact(Au[Su], Q_S, w / g)),
        K_N=int(N.sum()), R_A=float(np.linalg.norm(A, axis=1).max()),
        R_N=float(RN.max(initial=0.0)), d=dk,
        d_gap=float(dk[S].max() - dk[N].min()) if N.any() else 0.0, D_S=float(dk[S].max()),
        w=wk, omega=np.bincount(group[S], weights=wk[S], minlength=len(reps))[Su],
        W_mm=W_G[None], gamma_A=np.array([1 / g]), Q_S=[Q_S], Q_A=[Q_A])


def ntp_support_radius(ell, sc, *, iters=200):
    r"""The coordinate bound of ``thm-ntpattn-squared`` (3) on the support part of the offset:
    every :math:`x\in\mathcal{A}_S` with :math:`\langle x, W^G_{mm}\rangle = 0` and
    :math:`\varphi(x)\le e^{\ell}` has :math:`\|x\|_F\le V(\ell)/\sigma_S`, where, over the
    distinct support features :math:`j` (multipliers :math:`\lambda_j`, merged weights
    :math:`\omega_j`, :math:`\Lambda_j = g^2 - \lambda_j`,
    :math:`c_j = \sum_{l\ne j}\lambda_l\log(\omega_l/\lambda_l)`),

    .. math::

        f_j(t) = \omega_je^{-t} + \Lambda_j\exp\Big(\frac{c_j + \lambda_jt}{\Lambda_j}\Big),\qquad
        [\mathrm{lo}_j, \mathrm{hi}_j] = \{t : f_j(t)\le e^{\ell}\},\qquad
        V(\ell)^2 = \sum_j\max(\mathrm{lo}_j^2, \mathrm{hi}_j^2).

    :math:`f_j` is convex with its minimum at
    :math:`t_j = (\Lambda_j\log(\omega_j/\lambda_j) - c_j)/g^2`; each end of the interval is found by
    bisection and the outer end of the final bracket is returned, so the result is an upper bound
    (up to rounding). ``ell`` array-like; returns ``V/sigma_S`` of its shape (``nan`` where
    :math:`\min f_j > e^{\ell}` for some :math:`j`: no such :math:`x`; 0 when :math:`|S| = 1`).
    """
    ell = np.asarray(ell, dtype=float)
    if len(sc["lam"]) < 2:
        return np.where(np.isfinite(ell), 0.0, np.nan)
    out = np.full(ell.shape, np.nan)
    for idx in np.ndindex(ell.shape):
        e = float(ell[idx])
        if not np.isfinite(e):
            continue
        ends = _ntp_support_intervals(e, sc, iters)
        if ends is not None:
            out[idx] = np.sqrt(np.sum(np.maximum(ends[0] ** 2, ends[1] ** 2))) / sc["sigma_S"]
    return out


def _ntp_support_intervals(e, sc, iters=200):
    r"""The intervals :math:`I_j(e) = \{t : f_j(t)\le e^{e}\} = [\mathrm{lo}_j, \mathrm{hi}_j]` of
    :func:`ntp_support_radius` (``|S| >= 2``), ends by bisection, each rounded outwards (the outer
    end of the final bracket); ``None`` where some :math:`I_j(e)` is empty."""
    lam, om = np.asarray(sc["lam"], dtype=float), np.asarray(sc["omega"], dtype=float)
    G2 = lam.sum()
    lo, hi = np.empty(len(lam)), np.empty(len(lam))
    for j in range(len(lam)):
        o = np.arange(len(lam)) != j
        Lj, cj = G2 - lam[j], float(np.sum(lam[o] * np.log(om[o] / lam[o])))

        def f(t, j=j, Lj=Lj, cj=cj):
            return om[j] * np.exp(-t) + Lj * np.exp((cj + lam[j] * t) / Lj)

        t0 = (Lj * np.log(om[j] / lam[j]) - cj) / G2
        if f(t0) > np.exp(e):
            return None
        ends = []
        for sgn in (-1.0, 1.0):
            a, b = t0, t0 + sgn
            while f(b) <= np.exp(e):
                a, b = b, t0 + 2 * (b - t0)
            for _ in range(iters):
                m = (a + b) / 2
                a, b = (m, b) if f(m) <= np.exp(e) else (a, m)
            ends.append(b)
        lo[j], hi[j] = ends
    return lo, hi


def ntp_squared_bounds(R, consts, sc):
    r"""The bounds of ``thm-ntpattn-squared`` (Chapter 16) at radii ``R``, from
    :func:`ntp_path_constants` (``consts``) and :func:`ntp_support_constants` (``sc``), with
    :math:`\rho`, :math:`\varepsilon_R`, :math:`r` and :math:`K_R` of :func:`ntp_path_bounds`
    (NaN where items 2-5 of ``thm-ntpattn-path`` do not apply) and :math:`w = \|W^*\|_F`:

    .. math::

        N_U = \sqrt{R^2 - (w - r)_+^2},\quad \xi_R = N_U/g - \rho,\quad
        \ell_R = 2Mr + n\varepsilon_R + \xi_R,\qquad N_L = \sqrt{R^2 - (w + r)^2},

    .. math::

        H_S = \min\Big\{\frac{V(\ell_R)}{\sigma_S},\ \frac{\ell_R + \log(nC_\Omega) + D_S}{c_S}\Big\},
        \qquad H_0 = \sqrt{N_U^2 - g^2(\rho - K_R)^2},

    .. math::

        \pi_R = \min\Big\{1,\ K_N\exp\big(4Mr + n\varepsilon_R + d_{\mathrm{gap}}
        - \delta(\rho - K_R) + R_AH_0\big)\Big\},\qquad H_N = gN_UR_N\pi_R,

    (:math:`V` of :func:`ntp_support_radius`; :math:`H_N = 0` when :math:`K_N = 0`),
    :math:`H_R = \sqrt{H_S^2 + H_N^2}` and

    .. math::

        \beta^{(2)}_R = \frac{H_R^2}{N_L\big(N_L + \sqrt{N_L^2 - H_R^2}\big)}\ \le\ \frac{H_R^2}{N_L^2}

    (``nan`` unless :math:`H_R < N_L`; :math:`N_L` is ``nan`` unless :math:`R > w + r`). The two
    forms of :math:`H_S` (and of :math:`H_\infty`) are combined with ``np.fmin``, so a ``nan`` from
    :func:`ntp_support_radius` (possible by rounding as :math:`\ell\to0`) leaves the :math:`c_S` form.

    Tested (tests/test_ch16_ntp_attention.py) with the factors by which a weakened constant is
    caught stated there; NOT detected by those tests: setting :math:`\ell_R` to 0 or dropping one of
    its terms (:math:`\varphi(P_Sh)\ge\min\varphi\approx0.945`, resp. 0.69, is below 1 on both
    instances), doubling :math:`c_S` (caught only by :math:`c_S\le c^*`, from a factor 1.35, resp.
    1.14: the :math:`c_S` form of :math:`H_S` is 3.8-8.9, resp. 1.9-2.9, times :math:`V/\sigma_S`
    at the tested radii and never binds), and the exponential part of :math:`\pi_R`, since
    :math:`\pi_R = 1` (:math:`H_N` vacuous) up to :math:`R = 512` on the off-support instance
    (:math:`\pi_R = 2.5\cdot10^{-10}` at :math:`R = 1024`, :math:`\beta^{(2)}_R` finite only from
    :math:`R\approx820`).

    Returns a dict of arrays ``N_U, N_L, xi, ell, H_S, H_0, pi, H_N, H, beta2`` and the floats
    ``H_inf`` :math:`= \min\{V(0)/\sigma_S, (\log(nC_\Omega) + D_S)/c_S\}` (the limit of
    :math:`H_R` when :math:`\delta > 0`) and ``R2beta_inf`` :math:`= H_\infty^2/2` (the limit of
    :math:`R^2\beta^{(2)}_R`). The theorem: :math:`\varphi(P_Sh)\le e^{\ell_R}`
    (:func:`ntp_support_potential`), :math:`\|P_Sh\|\le H_S`, :math:`\|h_N\|\le H_N`,
    :math:`\|h\|\le H_R` and :math:`1 - \mathrm{corr}(P_\perp W_R, W^G_{mm})\le\beta^{(2)}_R`.
    """
    c = consts
    b = ntp_path_bounds(R, c)
    R = np.atleast_1d(np.asarray(R, dtype=float))
    g, w, n, M = c["g"], c["W_star_norm"], c["n"], c["M"]
    rho, eps, r, K = b["rho"], b["eps"], b["r"], b["K"]
    with np.errstate(invalid="ignore", over="ignore"):
        N_U = np.sqrt(R ** 2 - np.maximum(w - r, 0) ** 2)
        xi = N_U / g - rho
        N_L = np.sqrt(np.where(R > w + r, R ** 2 - (w + r) ** 2, np.nan))
        ell = 2 * M * r + n * eps + xi
        H_S = np.fmin(ntp_support_radius(ell, sc),            # fmin: a NaN V falls back on c_S
                      (ell + np.log(n * c["C_Omega"]) + sc["D_S"]) / sc["c_S"])
        H_0 = np.sqrt(np.maximum(N_U ** 2 - g ** 2 * (rho - K) ** 2, 0))
        if sc["K_N"] > 0:
            log_pi = (np.log(sc["K_N"]) + 4 * M * r + n * eps + sc["d_gap"] - sc["delta"] * (rho - K)
                      + sc["R_A"] * H_0)
            pi = np.minimum(1.0, np.exp(log_pi))
        else:
            pi = np.zeros_like(R) + 0 * r
        H_N = g * N_U * sc["R_N"] * pi
        H = np.sqrt(H_S ** 2 + H_N ** 2)
        beta2 = np.where(H < N_L, H ** 2 / (N_L * (N_L + np.sqrt(N_L ** 2 - H ** 2))), np.nan)
    H_inf = np.fmin(float(ntp_support_radius(0.0, sc)),
                    (np.log(n * c["C_Omega"]) + sc["D_S"]) / sc["c_S"])
    return dict(N_U=N_U, N_L=N_L, xi=xi, ell=ell, H_S=H_S, H_0=H_0, pi=pi, H_N=H_N, H=H, beta2=beta2,
                H_inf=float(H_inf), R2beta_inf=float(H_inf ** 2 / 2))


def ntp_support_potential(U, sc):
    r"""The potential of ``thm-ntpattn-squared`` (3) at :math:`U = P_\perp W` (any :math:`U\perp F`,
    shape (..., d, d)):

    .. math::

        \varphi(P_Sh) = \sum_{k\in S}w_k\,e^{-\langle\bar A_k, h\rangle}
        = \sum_{k\in S}w_k\,e^{-(m_k(U) - a/g)},\qquad w_k = \frac{e^{-d_k}}{\sum_je^{-d_j}},

    with :math:`a = \langle U, W^G_{mm}\rangle/g`, :math:`h = U - aW^G_{mm}/g` and
    :math:`m_k(U) = \langle\bar A_k, U\rangle` the graph margins (``sc`` from
    :func:`ntp_support_constants`). The theorem: :math:`\varphi(P_Sh)\le e^{\ell_R}` at
    :math:`U = P_\perp W_R` (:func:`ntp_squared_bounds`); :math:`\varphi(0) = \sum_{k\in S}w_k\le1`.
    The tests do not pin the weights: uniform :math:`w_k` on :math:`S` (same total) pass them.
    """
    U = np.asarray(U, dtype=float)
    D = U.shape[-1] * U.shape[-2]
    u = U.reshape(U.shape[:-2] + (D,))
    g = 1 / float(sc["gamma_A"][0])
    a_g = u @ sc["W_mm"][0].ravel() / g ** 2
    m = u @ sc["feats"][sc["support"]].T
    return np.sum(sc["w"][sc["support"]] * np.exp(-(m - a_g[..., None])), axis=-1)


def ntp_support_minimizer(sc, *, iters=100):
    r"""The minimizer :math:`x_\infty` of the support potential
    :math:`\varphi(x) = \sum_{j\in S}\omega_je^{-\langle\bar A_j, x\rangle}` (:func:`ntp_support_potential`)
    on :math:`\mathcal{V} = \mathcal{A}_S\cap(W^G_{mm})^\perp` (book: ``thm-ntpattn-squared``, item 6),
    in an orthonormal basis :math:`B` of :math:`\mathcal{V}`, from 0, by
    :func:`attnsvm.losses.lse_argmin` on :math:`\log\varphi = \mathrm{lse}(\log\omega - \bar A_SBz)`
    (same minimizer). :math:`\varphi`
    is strictly convex and coercive on :math:`\mathcal{V}` (its features span :math:`\mathcal{A}_S`
    and :math:`\sum_j\lambda_j\langle\bar A_j, x\rangle = 0` there with :math:`\lambda > 0`), so
    :math:`x_\infty` is unique. Nothing downstream needs the exact minimizer: the bounds of
    :func:`ntp_sharp_bounds` hold for the returned point :math:`\hat x`, with its gradient norm
    :math:`\gamma = \|B^\top\nabla\varphi(\hat x)\| = \varphi(\hat x)\|B^\top\nabla\log\varphi(\hat x)\|`
    carried along.

    Returns a dict: ``x`` (d*d,) :math:`\hat x`; ``norm`` :math:`\|\hat x\|`; ``phi``
    :math:`\varphi(\hat x)`; ``grad`` :math:`\gamma`; ``B`` (d*d, dim V); ``AV`` the distinct support
    features in that basis, :math:`B^\top\bar A_j` (rows, the order of ``sc["lam"]``).
    """
    A = np.asarray(sc["feats_S"], dtype=float)
    om = np.asarray(sc["omega"], dtype=float)
    QS, u = sc["Q_S"][0], sc["W_mm"][0].ravel() * sc["gamma_A"][0]
    Bv = QS - np.outer(u, u @ QS)                                     # A_S minus the W^G direction
    Ub, sv, _ = np.linalg.svd(Bv, full_matrices=False)
    B = Ub[:, sv > 1e-10 * max(1.0, sv.max(initial=0.0))]
    AV = A @ B
    z, glog = lse_argmin(np.log(om), AV, iters=iters)
    phi = float(om @ np.exp(-AV @ z))
    return dict(x=B @ z, norm=float(np.linalg.norm(z)), phi=phi, grad=phi * glog, B=B, AV=AV)


def ntp_sharp_bounds(R, consts, sc, sm, *, iters=200):
    r"""The sharp-limit bounds of ``thm-ntpattn-squared`` (6) at radii ``R``, from
    :func:`ntp_path_constants` (``consts``), :func:`ntp_support_constants` (``sc``) and
    :func:`ntp_support_minimizer` (``sm``: the point :math:`\hat x\in\mathcal{V}`, its potential
    :math:`\hat\varphi = \varphi(\hat x)` and gradient norm :math:`\gamma` on :math:`\mathcal{V}`).
    With :math:`r`, :math:`N_U`, :math:`N_L`, :math:`H_S`, :math:`H_N` of :func:`ntp_squared_bounds`,
    :math:`w = \|W^*\|_F` and the comparison point :math:`W^* + \rho'W^G_{mm} + \hat x` of norm
    :math:`R`:

    .. math::

        \rho' = \frac{\sqrt{R^2 - w^2 - \|\hat x\|^2}}{g},\quad
        \tau_R = \sum_{k\notin S}w_ke^{-\delta\rho' - \langle\bar A_k, \hat x\rangle},\quad
        \varepsilon'_R = C_\Omega e^{-\rho'}(\hat\varphi + \tau_R),\quad
        \ell'_R = 2Mr + n\varepsilon'_R + \log(1 + \tau_R/\hat\varphi),

    .. math::

        \xi'(s) = \frac{\sqrt{N_U^2 - s^2} - g\rho'}{g}\ (s\le N_U),\quad \xi'(s) = -\rho'\ (s > N_U),\qquad
        \kappa_R = \lambda_{\min}\Big(\sum_{j\in S}\omega_je^{-\mathrm{hi}_j}\,
        B^\top\bar A_j\bar A_j^\top B\Big),\qquad
        \Delta_R = \frac{\gamma + \sqrt{\gamma^2 + 2\kappa_R\hat\varphi(e^{\ell'_R + \xi'(0)} - 1)}}{\kappa_R},

    with :math:`\mathrm{hi}_j` the upper end of :math:`I_j(\log\hat\varphi + \ell'_R + \xi'(0))`
    (:func:`ntp_support_radius`), and :math:`H'_S = \|\hat x\| + t^*`, :math:`t^*` the largest
    :math:`t\in[0, \Delta_R]` with
    :math:`\frac{\kappa_R}{2}t^2\le\hat\varphi(e^{\ell'_R + \xi'(\|\hat x\| + t)} - 1) + \gamma\Delta_R`
    (bisection, upper end kept). The theorem: :math:`\varphi(P_Sh)\le\hat\varphi\,e^{\ell'_R +
    \xi'(\|P_Sh\|)}`, :math:`\|P_Sh - \hat x\|\le\Delta_R`, :math:`\|P_Sh\|\le H'_S`,
    :math:`\|h\|\le H'_R = \sqrt{\min(H_S, H'_S)^2 + H_N^2}` and
    :math:`1 - \mathrm{corr}\le\beta'_R = H'^2_R/(N_L(N_L + \sqrt{N_L^2 - H'^2_R}))`, and from
    below :math:`1 - \mathrm{corr}\ge\beta^{\mathrm{low}}_R = (\|\hat x\| - \Delta_R)_+^2/(2N_U^2)`. As
    :math:`R\to\infty` (with :math:`\hat x = x_\infty`, :math:`\gamma = 0`): :math:`\Delta_R\to0`,
    :math:`H'_R\to\|x_\infty\|` and :math:`R^2\beta'_R\to\|x_\infty\|^2/2` (``H_inf``,
    ``R2beta_inf``). :math:`\kappa_R` bounds the Hessian of :math:`\varphi` on :math:`\mathcal{V}`
    from below on the whole sublevel set (each weight :math:`e^{-\langle\bar A_j, x\rangle}\ge
    e^{-\mathrm{hi}_j}` there): certified up to floating-point rounding (outward-rounded
    :math:`\mathrm{hi}_j`, a floating-point eigenvalue).

    NOT detected by the tests (``tests/test_ch16_ntp_attention.py``, by mutation): setting
    :math:`\ell'_R` to 0 (all three terms; only :math:`\ell'_R` and :math:`\xi'` set to 0 together
    are caught, and then by the finiteness of :math:`H'_R`); multiplying :math:`\kappa_R` by
    :math:`f` is caught by the sampled-Hessian check of ``test_ntp_sharp_limit`` from
    :math:`f = 1.161`, by the path checks only from :math:`f = 17.7` (:math:`R = 16`) or
    :math:`f = 33` (:math:`R\le12`), and never on the off-support instance (:math:`f = 64` passes).

    Returns a dict of arrays ``rho_p, tau, eps_p, ell_p, xi0, xi_x, kappa, Delta, H_S, H, beta2,
    beta2_low``
    (NaN where items 2-5 of ``thm-ntpattn-path`` do not apply) and the floats ``H_inf``,
    ``R2beta_inf``.
    """
    c = consts
    R = np.atleast_1d(np.asarray(R, dtype=float))
    pb, sb = ntp_path_bounds(R, c), ntp_squared_bounds(R, c, sc)
    g, w, n, M = c["g"], c["W_star_norm"], c["n"], c["M"]
    xn, ph, gam, AV = sm["norm"], sm["phi"], sm["grad"], sm["AV"]
    r, N_U = pb["r"], sb["N_U"]
    with np.errstate(invalid="ignore", over="ignore"):
        rho_p = np.sqrt(np.where(R ** 2 > w ** 2 + xn ** 2, R ** 2 - w ** 2 - xn ** 2, np.nan)) / g
        if sc["K_N"] > 0:
            off = ~np.asarray(sc["support"])
            mx = sc["feats"][off] @ sm["x"]
            tau = np.sum(sc["w"][off] * np.exp(-sc["delta"] * rho_p[:, None] - mx), axis=1)
        else:
            tau = np.zeros_like(R)
        eps_p = c["C_Omega"] * np.exp(-rho_p) * (ph + tau)
        ell_p = 2 * M * r + n * eps_p + np.log1p(tau / ph)

        def xi(s, i):
            return (np.sqrt(np.maximum(N_U[i] ** 2 - s ** 2, 0.0)) - g * rho_p[i]) / g

        kap, Delta, H_Sp = (np.full(R.shape, np.nan) for _ in range(3))
        xi0 = np.array([xi(0.0, i) for i in range(len(R))])
        for i in range(len(R)):
            if not np.isfinite(ell_p[i] + xi0[i]):
                continue
            if AV.shape[1] == 0:                                  # |S| = 1: P_S h = 0 = x_hat
                kap[i], Delta[i], H_Sp[i] = np.inf, 0.0, 0.0
                continue
            ends = _ntp_support_intervals(np.log(ph) + ell_p[i] + xi0[i], sc, iters)
            if ends is None:
                continue
            Hlow = (AV.T * (sc["omega"] * np.exp(-ends[1]))) @ AV
            kap[i] = np.linalg.eigvalsh(Hlow)[0]
            Delta[i] = (gam + np.sqrt(gam ** 2 + 2 * kap[i] * ph * np.expm1(ell_p[i] + xi0[i]))) / kap[i]

            def ok(t, i=i):
                return kap[i] / 2 * t ** 2 <= ph * np.expm1(ell_p[i] + xi(xn + t, i)) + gam * Delta[i]

            a, b = 0.0, Delta[i]
            if ok(b):
                a = b
            else:
                for _ in range(iters):
                    m = (a + b) / 2
                    a, b = (m, b) if ok(m) else (a, m)
            H_Sp[i] = xn + b
        H = np.sqrt(np.fmin(sb["H_S"], H_Sp) ** 2 + sb["H_N"] ** 2)
        H = np.where(np.isfinite(H_Sp), H, np.nan)
        N_L = sb["N_L"]
        beta2 = np.where(H < N_L, H ** 2 / (N_L * (N_L + np.sqrt(N_L ** 2 - H ** 2))), np.nan)
        xi_x = np.array([xi(xn, i) for i in range(len(R))])
        beta2_low = np.maximum(xn - Delta, 0.0) ** 2 / (2 * N_U ** 2)
    return dict(rho_p=rho_p, tau=tau, eps_p=eps_p, ell_p=ell_p, xi0=xi0, xi_x=xi_x, kappa=kap,
                Delta=Delta, H_S=H_Sp, H=H, beta2=beta2, beta2_low=beta2_low, H_inf=float(xn),
                R2beta_inf=float(xn ** 2 / 2))


def ufm_geometry(P, pi, groups, run):
    r"""The logit geometry of a UFM run (a dict of recorded ``steps``, ``W``, ``H``, ``loss``, as
    :func:`attnsvm.experiments.ntp.ufm_experiment` trains it), at every recorded step.

    With :math:`L_t = H_tW_t^\top`, :math:`L^* =` :func:`attnsvm.svm.logit_finite` and the logit
    SVMs :math:`L^{mm}_F, L^{mm}_*` (:func:`attnsvm.svm.logit_svm`, Frobenius and nuclear):

    - ``relerr``: :math:`\|P_{F_L}L_t - L^*\|_F/\|L^*\|_F`;
    - ``bound_ok``: every entry of :math:`P_{F_L}L_t - L^*` within
      :func:`finite_part_bound` of the per-context excess loss (bool);
    - ``corr_nuc``, ``corr_fro``: correlation of :math:`L_t - P_{F_L}L_t` with the two SVMs;
    - ``tail``: share of :math:`\|L_t - P_{F_L}L_t\|_F^2` outside its top-G singular values
      (G = number of support patterns);
    - ``collapse``: :func:`attnsvm.metrics.collapse_ratio` of the context embeddings :math:`H_t`;
    - ``bound_ratio``: the largest ratio, over contexts where the bound is finite, of the entry
      error of :math:`P_{F_L}L_t - L^*` to the bound (at most 1 by the lemma);
    - ``nuc_ratio``: :math:`\|L_t - P_{F_L}L_t\|_*/\gamma_t` over :math:`\|L^{mm}_*\|_*`, with
      :math:`\gamma_t` the margin of :math:`L_t - P_{F_L}L_t` (:func:`attnsvm.svm.logit_margin`;
      ``inf`` while :math:`\gamma_t \le 0`). The rescaled orthogonal part is feasible for the
      nuclear-norm logit SVM, so the ratio is at least 1, and it equals 1 exactly when the rescaled
      part is one of the SVM's minimizers;
    - ``gap``: loss minus entropy;
    - ``pattern_corr`` (final step only): correlations of the normalized orthogonal parts of
      every pair of trials (same support pattern, different probabilities and initializations).

    Returns
    -------
    dict of arrays (K, B) (``pattern_corr``: (B(B-1)/2,)), plus ``L_nuc``, ``L_fro``, ``L_perp``
    (the final orthogonal part) (B, m, V), ``sv`` (K, B, min(m, V)) (singular values of the
    orthogonal part over the largest) and
    ``rank_nuc`` (B,), the numerical rank of :math:`L^{mm}_*`.
    """
    L = np.einsum("kbmd,kbvd->kbmv", run["H"], run["W"])
    Lstar = svm.logit_finite(P)
    PFL = svm.logit_project_F(L, np.broadcast_to(P, L.shape))
    Lperp = L - PFL
    L_fro = svm.logit_svm(P, "fro")
    L_nuc = svm.logit_svm(P, "nuc")
    G = int(len(np.unique(groups)))
    sv = np.linalg.svd(Lperp, compute_uv=False)
    tail = (sv[..., G:] ** 2).sum(-1) / (sv ** 2).sum(-1)
    data = NTPData(np.zeros(P.shape[:2] + (1,)), P, pi)
    ent = entropy(data)
    # per-context KL(p_j || softmax(L_j)) and the proved bound on the finite part
    lq = log_softmax(L, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(P > 0, P * (np.log(np.where(P > 0, P, 1.0)) - lq), 0.0).sum(-1)
    bound = finite_part_bound(np.maximum(kl, 0.0), np.broadcast_to(P, L.shape))
    err = np.abs(PFL - Lstar).max(-1)
    ok = np.isfinite(bound) & (bound > 0)
    bound_ratio = np.where(ok, err / np.where(ok, bound, 1.0), 0.0).max(-1)
    gam = svm.logit_margin(Lperp, np.broadcast_to(P, L.shape))
    nuc_svm = np.linalg.svd(L_nuc, compute_uv=False).sum(-1) / svm.logit_margin(L_nuc, P)
    with np.errstate(divide="ignore", invalid="ignore"):
        nuc_ratio = np.where(gam > 0, np.linalg.svd(Lperp, compute_uv=False).sum(-1)
                             / np.where(gam > 0, gam, 1.0) / nuc_svm, np.inf)
    B = P.shape[0]
    iu = np.triu_indices(B, 1)
    pc = metrics.corr(Lperp[-1][:, None], Lperp[-1][None], elem_ndim=2)[iu]
    s_nuc = np.linalg.svd(L_nuc, compute_uv=False)
    return {"steps": run["steps"],
            "relerr": np.linalg.norm(PFL - Lstar, axis=(-2, -1)) / np.linalg.norm(Lstar, axis=(-2, -1)),
            "bound_ok": np.all(err <= bound + 1e-9, axis=-1), "bound_ratio": bound_ratio,
            "nuc_ratio": nuc_ratio,
            "corr_nuc": metrics.corr(Lperp, L_nuc, elem_ndim=2),
            "corr_fro": metrics.corr(Lperp, L_fro, elem_ndim=2),
            "tail": tail, "collapse": metrics.collapse_ratio(run["H"], groups),
            "gap": run["loss"] - ent, "pattern_corr": pc, "L_nuc": L_nuc, "L_fro": L_fro,
            "L_perp": Lperp[-1],
            "rank_nuc": (s_nuc > 1e-6 * s_nuc[..., :1]).sum(-1),
            "sv": sv / sv[..., :1]}
