r"""The squared directional orders under strict complementarity (chapter 9): the Att-SVM's
support and its constants (:func:`support_constants`), the residual off the support
(:func:`residual_parts`, :func:`residual_constants`, :func:`residual_limit`,
:func:`residual_limit_distance`), the margin offsets of NGD and GD (:func:`ngd_margin_offset`,
:func:`gd_margin_offset`), the squared bound (:func:`squared_direction_bound`), the non-support mass
(:func:`nonsupport_mass`), the sharpness constant (:func:`sharpness_constant`) and the bound
after a restart (:func:`restart_constants`, :func:`restart_direction_bound`).
"""
from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.special import logsumexp

from .. import svm, tokens
from .._checks import check_choice
from ..losses import lse_argmin
from .model import _LOGISTIC, constants, lifted_factors
from .rates import gd_error_constant, ngd_floorless_constants

__all__ = ["support_constants", "strictly_complementary", "SC_FACTOR", "SC_EXACT",
           "residual_parts", "residual_constants", "ngd_margin_offset",
           "gd_margin_offset", "squared_direction_bound", "nonsupport_mass", "sharpness_constant",
           "residual_limit", "residual_limit_distance", "restart_constants", "restart_direction_bound",
           "distinct_restart_constants", "distinct_restart_bound", "distinct_gd_margin_bounds"]


def support_constants(data, opt, *, tol=1e-7, solver=None):
    r"""The Att-SVM's support and the constants of the squared directional orders (book:
    ``lem-sharpness``, ``lem-bounded-residual``), per trial.

    Solves the Frobenius Att-SVM with its multipliers (:func:`attnsvm.svm.att_svm`) and takes the
    support of those multipliers, :math:`S = \{k : \lambda_k > 0\}`, as the book does; "> 0" is
    decided as :math:`\lambda_k > \mathrm{tol}\cdot\sum_l\lambda_l` (the solver returns exact
    zeros off the support on the tests' instances, ``lam_off`` says how large the discarded
    multipliers are). Strict complementarity is then the single hypothesis
    :math:`\delta = \min_{k\notin S}\langle A_k, W_{mm}\rangle - 1 > 0`: an active constraint
    with a zero multiplier gives :math:`\delta = 0`. When the support features are linearly
    dependent the multipliers are not unique; the lemmas hold for any multipliers positive on
    :math:`S`, and this function uses the solver's choice, which is conservative: a choice whose
    support misses an active constraint reports :math:`\delta = 0`, so the check can reject a
    strictly complementary instance but never accept one that is not, *provided the multipliers
    are exact*: the default solver polishes them (exact zeros off the support, support margins 1
    to rounding); an interior-point solution that is not polished (``solver="CLARABEL"``, or the
    Clarabel fallback of :func:`attnsvm.svm.att_svm`) can put a multiplier of order
    :math:`\sqrt\mu` on an active constraint whose multiplier is 0, with a margin slack of the
    same order, and then report :math:`\delta = \infty` on an instance that is not strictly
    complementary. :func:`strictly_complementary` therefore also asks the support margins to be
    exact (``active_err``), which rejects that case. The constants are valid for the choice made.
    ``solver`` is passed to :func:`attnsvm.svm.att_svm`.

    Returns a dict: ``W_mm`` (B, d, d); ``lam`` (B, n, T); ``support`` (B, n, T) bool; ``lam_min``
    :math:`\min_{k\in S}\lambda_k`; ``lam_off`` :math:`\max_{k\notin S}\lambda_k/\sum_l\lambda_l`;
    ``active_err`` :math:`\max_{k\in S}|\langle A_k, W_{mm}\rangle - 1|`; ``delta``
    :math:`\min_{k\notin S}\langle A_k, W_{mm}\rangle - 1` (``inf`` when every constraint is in
    :math:`S`); ``sigma_S`` the smallest positive singular value of the support features (rows
    :math:`\mathrm{vec}\,A_k`, :math:`k\in S`); ``n_S`` :math:`|S|`; ``c_S``
    :math:`\gamma_A^2\lambda_{\min}\sigma_S/\sqrt{1 + |S|\gamma_A^4\lambda_{\min}^2}` (the
    sharpness constant; at least the cruder :math:`\gamma_A^2\lambda_{\min}\sigma_S/\sqrt2`);
    ``K_N`` the number of constraints off :math:`S`; ``kappa_phi``
    :math:`\tfrac94\max_ib^+_i\Delta_i/\min_ib^-_i\Delta_i`; ``Q_S``, ``Q_A`` (lists of (d^2, r)
    orthonormal bases of :math:`\mathrm{span}_S` and of :math:`\mathcal{A}`). The caller checks
    the hypothesis (``delta`` positive, far above ``active_err``; nothing is assumed here).
    """
    X, _, Z, _ = tokens.trial_arrays(data)
    B, n, T, d = X.shape
    opt = np.asarray(opt).reshape(B, n)
    U, Zq = lifted_factors(data, opt)
    _, _, mask, _ = tokens.opt_scores(data, opt)
    out = {k: np.empty(B) for k in ("lam_min", "lam_off", "active_err", "delta", "sigma_S", "c_S",
                                   "K_N", "n_S", "gamma_A")}
    out.update(W_mm=np.empty((B, d, d)), lam=np.empty((B, n, T)), support=np.empty((B, n, T), bool),
               Q_S=[], Q_A=[])
    for b in range(B):
        W, lam = svm.att_svm(X[b], Z[b], opt[b], return_dual=True, solver=solver)
        A = np.einsum("ktd,ke->ktde", U[b], Zq[b])                      # (n, T, d, d)
        m = np.einsum("ktde,de->kt", A, W)
        S = mask[b] & (lam > tol * lam[mask[b]].sum())
        out["W_mm"][b], out["lam"][b], out["support"][b] = W, lam, S
        out["lam_min"][b] = lam[S].min()
        out["lam_off"][b] = max(lam[mask[b] & ~S].max(initial=0.0), 0.0) / lam[mask[b]].sum()
        out["n_S"][b] = S.sum()
        out["active_err"][b] = np.abs(m[S] - 1).max()
        N = mask[b] & ~S
        out["delta"][b] = m[N].min() - 1 if N.any() else np.inf
        out["K_N"][b] = N.sum()
        MS = A[S].reshape(-1, d * d)
        u, sv, vt = np.linalg.svd(MS, full_matrices=False)
        r = sv > 1e-10 * sv[0]
        out["sigma_S"][b] = sv[r].min()
        out["Q_S"].append(vt[r].T)
        MA = A[mask[b]].reshape(-1, d * d)
        _, sa, va = np.linalg.svd(MA, full_matrices=False)
        out["Q_A"].append(va[sa > 1e-10 * sa[0]].T)
        out["gamma_A"][b] = 1 / np.linalg.norm(W)
    out["c_S"] = _sharpness_lower(out["gamma_A"], out["lam_min"], out["sigma_S"], out["n_S"])
    c = constants(data, opt, out["W_mm"])
    out["kappa_phi"] = 2.25 * c["bD_plus"] / c["bD_minus"]
    return out


#: the support margins of exact multipliers are 1 to rounding (measured <= 3e-15 on ch09's
#: instances); an unpolished interior-point solution leaves slacks of order sqrt(mu) (~1e-6)
SC_EXACT = 1e-10
#: delta must exceed this factor times the rounding of the active margins (and machine epsilon)
SC_FACTOR = 1e4


def strictly_complementary(sc, *, factor=SC_FACTOR, exact=SC_EXACT):
    r"""Per trial, whether :func:`support_constants` certifies strict complementarity (book:
    ``thm-sc-generic``): the support margins are exact (``active_err`` :math:`\le` ``exact``, so
    the multipliers are the polished ones and a constraint with a spurious small multiplier is
    not counted in :math:`S`) and :math:`\delta >` ``factor`` :math:`\cdot\max(`
    ``active_err``, :math:`\epsilon)`, so that a constraint active in exact arithmetic but left
    out of :math:`S`, whose :math:`\delta` would be of the order of that rounding, is rejected.
    Returns a (B,) bool array."""
    floor = np.maximum(sc["active_err"], np.finfo(float).eps)
    return (sc["active_err"] <= exact) & (sc["delta"] > factor * floor)


def residual_parts(W, sc):
    r"""The parts of :math:`W = a\,u^\star + h` (:math:`u^\star = W_{mm}/\|W_{mm}\|_F`,
    :math:`h \perp W_{mm}`) that the squared orders track (book: ``lem-bounded-residual``):
    ``a`` :math:`\langle W, u^\star\rangle`, ``hS`` :math:`\|P_Sh\|_F`, ``hN``
    :math:`\|(P_{\mathcal{A}} - P_S)W\|_F`, ``hP`` :math:`\|P^\perp W\|_F`, each of shape
    ``W.shape[:-2]`` (the trial axis last); ``sc`` from :func:`support_constants`."""
    W = np.asarray(W, dtype=float)
    B, d = sc["W_mm"].shape[0], sc["W_mm"].shape[-1]
    w = W.reshape(W.shape[:-2] + (d * d,))
    if w.shape[-2] != B:
        raise ValueError(f"W must have the trial axis (B = {B}) just before (d, d), got {W.shape}")
    u = (sc["W_mm"] * sc["gamma_A"][:, None, None]).reshape(B, d * d)
    a = np.einsum("...bk,bk->...b", w, u)
    out = {k: np.empty(w.shape[:-1]) for k in ("hS", "hN", "hP")}
    for b in range(B):
        wb = w[..., b, :]
        pS = wb @ sc["Q_S"][b]
        pA = wb @ sc["Q_A"][b]
        out["hS"][..., b] = np.sqrt(np.maximum(np.sum(pS ** 2, -1) - a[..., b] ** 2, 0))
        out["hN"][..., b] = np.sqrt(np.maximum(np.sum(pA ** 2, -1) - np.sum(pS ** 2, -1), 0))
        out["hP"][..., b] = np.sqrt(np.maximum(np.sum(wb ** 2, -1) - np.sum(pA ** 2, -1), 0))
    out["a"] = a
    return out


def residual_constants(W_t0, offset, ell_bar, sc, consts):
    r"""The constants of ``lem-bounded-residual``, per trial, for a run of steps along
    :math:`-\nabla\mathcal{L}` of lengths :math:`\ell_s \le \bar\ell` (``ell_bar``) from
    :math:`W_{t_0}` whose margin obeys :math:`m_{\min}(W_t) \ge B + \gamma_A L_t`
    (``offset`` :math:`= B`, :func:`ngd_margin_offset` or :func:`gd_margin_offset`):

    .. math::

        D_a = \gamma_A a_{t_0} - B,\quad D_{\mathcal{A}} = \gamma_A\|P_{\mathcal{A}}W_{t_0}\|_F - B,\quad
        X = \tfrac32\delta D_{\mathcal{A}} + \frac{R_A^2D_{\mathcal{A}}}{\gamma_A^2\delta},

    .. math::

        M = \frac{2R_AK_N\kappa_\varphi}{\gamma_A^2\delta}
            \exp\Big(X + \frac{\gamma_A\delta\bar\ell}{2} - \frac{\gamma_A\delta\|P_{\mathcal{A}}W_{t_0}\|_F}{2}\Big),
        \qquad
        \bar H^2 = \Big(\frac{D_a}{c_S}\Big)^2 + \big(\|h_N(t_0)\|_F + M\big)^2 + \|P^\perp W_{t_0}\|_F^2 .

    Returns a dict of (B,) arrays ``D_a, D_A, X, M, H2`` (``M`` is computed in log space and may
    be ``inf``).

    Not tested at any factor: :math:`\bar H^2` (through :math:`M`, :math:`\log M` = 129-577 or
    ``inf`` on the tests' instances) is astronomically larger than the measured
    :math:`\|h_t\|^2`, so no test can see it halved; the tests bind only part 4's first bound
    (with the measured residual). Neither do they see :math:`\kappa_\varphi` divided by 2.25,
    :math:`X` set to 0, or :math:`D_a` halved (parts 1-3 hold with room: :math:`D_a` is 3.6-19
    times the measured gap, part 2's bound 11-235 times the measured mass).
    """
    p = residual_parts(W_t0, sc)
    gA, RA, dl = sc["gamma_A"], consts["R_A"], sc["delta"]
    offset = np.asarray(offset, dtype=float)
    nA = np.sqrt(p["a"] ** 2 + p["hS"] ** 2 + p["hN"] ** 2)
    D_a = gA * p["a"] - offset
    D_A = gA * nA - offset
    X = 1.5 * dl * D_A + RA ** 2 * D_A / (gA ** 2 * dl)
    with np.errstate(over="ignore"):
        logM = (np.log(2 * RA * np.maximum(sc["K_N"], 1e-300) * sc["kappa_phi"] / (gA ** 2 * dl))
                + X + gA * dl * ell_bar / 2 - gA * dl * nA / 2)
        M = np.where(sc["K_N"] > 0, np.exp(logM), 0.0)
        H2 = (D_a / sc["c_S"]) ** 2 + (p["hN"] + M) ** 2 + p["hP"] ** 2
    return dict(D_a=D_a, D_A=D_A, X=X, M=M, H2=H2)


def ngd_margin_offset(E_t0, eta_bar, consts):
    r"""NGD's margin offset :math:`B = \log(2\varepsilon_0/E(W_{t_0})) - 2c_\psi E(W_{t_0})/(\mu\varepsilon_0)`
    of ``thm-ngd-no-floor`` (:math:`m_{\min}(W_t) \ge B + \gamma_A\sum_{s<t}\eta_s`), per trial.
    The :math:`c_\psi` term (0.13-8.9 on ch09's test instances) is not exercised by the
    squared-order tests: without it their runs' margins still exceed
    :math:`\log(2\varepsilon_0/E_0) + \gamma_AS_t` by 1.6-2.4
    (``test_ngd_no_floor_correction_needed`` exercises :math:`c_\psi` elsewhere)."""
    c = consts
    _, c_psi = ngd_floorless_constants(eta_bar, R_A=c["R_A"], gamma_A=c["gamma_A"],
                                       Delta_max=c["Delta_max"], b_minus=c["b_minus"],
                                       b_plus=c["b_plus"])
    E_t0 = np.asarray(E_t0, dtype=float)
    return np.log(2 * c["eps0"] / E_t0) - 2 * c_psi * E_t0 / (c["mu"] * c["eps0"])


def gd_margin_offset(E_t0, eta, consts):
    r"""GD's margin offset :math:`B = \log(2\varepsilon_0/E(W_{t_0})) - C` of ``thm-gd-direction``
    (:math:`m_{\min}(W_t) \ge B + \gamma_A\sum_{s<t}\|W_{s+1} - W_s\|_F`), per trial. The
    squared-order tests do not see :math:`C` halved (:math:`C` = 0.016-0.18 there; without it
    the runs' margins still exceed :math:`\log(2\varepsilon_0/E_0) + \gamma_AL_t` by 1.6-2.5)."""
    C = gd_error_constant(E_t0, eta=eta, eps0=consts["eps0"], H=consts["H"])
    return np.log(2 * consts["eps0"] / np.asarray(E_t0, dtype=float)) - C


def squared_direction_bound(m_min, H2, gamma_A):
    r"""The squared-order bound of ``lem-bounded-residual`` (iv):
    :math:`1 - \mathrm{corr}(W_t, W_{mm}) \le \gamma_A^2\bar H^2/(2\,m^2)` for any lower bound
    :math:`m > 0` on :math:`m_{\min}(W_t)` (``nan`` where ``m_min <= 0``)."""
    m = np.asarray(m_min, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m > 0, gamma_A ** 2 * H2 / (2 * m ** 2), np.nan)


def nonsupport_mass(data, opt, W, sc):
    r"""The mass :math:`\pi = \sum_{k\notin S}p_k(W)` of the NGD direction's weights off the
    Att-SVM's support (book: ``lem-bounded-residual``, part 2), with
    :math:`-\nabla\mathcal{L} = \sum_ka_kA_k`, :math:`a_{it} = \frac1n\phi_i'(q_i)e^{-m_{it}}`,
    :math:`p = a/\sum a`, and the lemma's bound
    :math:`\kappa_\varphi\sum_{k\notin S}e^{-(m_k - m_{\min})}`. ``W`` (..., B, d, d); returns
    ``(pi, pi_bound)``, each (..., B)."""
    m = tokens.opt_margins(data, opt, np.asarray(W, dtype=float))        # (..., B, n, T), inf at opt
    _, gs, mask, _ = tokens.opt_scores(data, opt)
    go = np.where(mask, tokens.opt_scores(data, opt)[0], np.inf).min(-1)  # gamma°_i (B, n)
    Delta = gs - go
    lq = np.logaddexp.reduce(np.where(mask, -m, -np.inf), axis=-1)        # log q_i (..., B, n)
    q = np.exp(lq)
    u = gs - Delta * q / (1 + q)
    la = (np.log(_LOGISTIC.neg_deriv_np(u)) + np.log(Delta) - 2 * np.log1p(q))[..., None] - m
    la = np.where(mask, la, -np.inf)
    off = mask & ~sc["support"]
    lse_all = np.logaddexp.reduce(la.reshape(la.shape[:-2] + (-1,)), axis=-1)
    lse_off = np.logaddexp.reduce(np.where(off, la, -np.inf).reshape(la.shape[:-2] + (-1,)), axis=-1)
    pi = np.exp(lse_off - lse_all)
    mmin = np.where(mask, m, np.inf).min(axis=(-2, -1))
    gaps = np.where(off, m - mmin[..., None, None], np.inf)
    return pi, sc["kappa_phi"] * np.exp(-gaps).sum(axis=(-2, -1))


def sharpness_constant(data, opt, sc):
    r"""The best constant of ``lem-sharpness``, per trial:
    :math:`c^\star = \min\{\max_{k\in S}(-\langle A_k, h\rangle) : h\in\mathcal{A}_S,\
    \langle h, W_{mm}\rangle = 0,\ \|h\|_F = 1\}`, exactly, as :math:`1/\max\|h\|_F` over the
    vertices of the polytope :math:`\{h : \langle A_k, h\rangle \ge -1\ \forall k\in S\}` of that
    subspace (bounded under strict complementarity). The lemma's :math:`c_S` is at most
    :math:`c^\star` (``support_constants``, for the solver's multipliers)."""
    U, Zq = lifted_factors(data, opt)
    B, d = U.shape[0], U.shape[-1]
    out = np.empty(B)
    for b in range(B):
        A = np.einsum("ktd,ke->ktde", U[b], Zq[b])[sc["support"][b]].reshape(-1, d * d)
        out[b] = _sharpness_exact(A, sc["Q_S"][b], sc["W_mm"][b].ravel() * sc["gamma_A"][b])
    return out


def _sharpness_lower(gamma, lam_min, sigma_S, n_S):
    r"""The constant of ``lem-sharpness``,
    :math:`c_S = \gamma^2\lambda_{\min}\sigma_S/\sqrt{1 + |S|\gamma^4\lambda_{\min}^2}` for an SVM
    :math:`\min\|W\|_F` s.t. :math:`\langle A_k, W\rangle\ge1` with solution of norm :math:`1/\gamma`
    and multipliers :math:`\ge\lambda_{\min} > 0` on :math:`S` (Chapters 9 and 16)."""
    g2l = np.asarray(gamma, dtype=float) ** 2 * lam_min
    return g2l * sigma_S / np.sqrt(1 + n_S * g2l ** 2)


def _sharpness_exact(A_S, Q_S, u):
    r"""The best sharpness constant
    :math:`c^\star = \min\{\max_{k\in S}(-\langle A_k, h\rangle) : h\in\mathrm{span}_S,\
    \langle h, u\rangle = 0,\ \|h\| = 1\}` by vertex enumeration (see :func:`sharpness_constant`);
    ``A_S`` (|S|, D) the support features, ``Q_S`` (D, r) an orthonormal basis of their span,
    ``u`` (D,) the unit SVM direction (in that span). ``inf`` when the subspace is {0}."""
    uq = Q_S.T @ u                                                       # u* in the basis
    _, _, vt = np.linalg.svd(uq[None, :])
    QV = Q_S @ vt[1:].T                                                  # span_S ∩ u^perp
    G = A_S @ QV                                                         # (|S|, r - 1)
    r1 = G.shape[1]
    if r1 == 0:
        return np.inf
    best = 0.0
    for J in combinations(range(G.shape[0]), r1):
        GJ = G[list(J)]
        if abs(np.linalg.det(GJ)) < 1e-12 * max(1.0, np.abs(GJ).max() ** r1):
            continue
        y = np.linalg.solve(GJ, -np.ones(r1))
        if np.all(G @ y >= -1 - 1e-9):
            best = max(best, float(np.linalg.norm(y)))
    return 1 / best if best > 0 else np.inf


def residual_limit(data, opt, sc, *, weights="sequence"):
    r"""The limit of the residual in :math:`\mathcal{A}` and the constants of the restart theorem
    (book: ``thm-restart-residual``), per trial, for the support :math:`S` of
    :func:`support_constants`.

    With :math:`u^\star = \gamma_AW_{mm}`, :math:`V = \mathcal{A}_S\cap (u^\star)^\perp`, the
    limit weights :math:`w^\infty_k = \phi_i'(0) = \beta(\gamma^\star_i)\Delta_i` for
    :math:`k = (i, t)` (:math:`\beta = -\ell'`) and

    .. math::

        f(x) = \log\sum_{k\in S}w^\infty_k e^{-\langle A_k, x\rangle}\quad (x\in V),\qquad
        x^\star = \operatorname{argmin}_V f,

    (:func:`attnsvm.losses.lse_argmin` on an orthonormal basis of :math:`V`; :math:`f` is coercive
    on :math:`V` by ``lem-sharpness`` and strictly convex there, so :math:`x^\star` is unique).

    ``weights="constraint"`` takes the per-constraint weights
    :math:`w^\infty_k = \beta(\gamma^\star_i)(\gamma^\star_i - \gamma_{it})` instead, identical with
    equal scores within each sequence. With distinct scores these are the limit, as the attention
    on the optimal tokens tends to 1, of the gradient's coefficients :math:`w_ke^{m_k}` of
    :mod:`attnsvm.reduced` (:math:`s_{i,\mathrm{opt}_i}\to1`, :math:`u_i\to\gamma^\star_i`), and
    :math:`x^\star` is the centre of the local restart theorem with distinct scores (book:
    ``thm-distinct-restart``); that a run from an ordinary start reaches its condition is observed,
    not proved (``ch09d``). Returns a dict:
    ``x_star`` (B, d, d); ``grad`` the norm of
    :math:`\nabla f(x^\star)` (B,) (the Newton residual, about 1e-15); ``pi_star`` (B, n, T)
    :math:`\pi^\star_k = w^\infty_ke^{-\langle A_k, x^\star\rangle}/\sum_{j\in S}w^\infty_j
    e^{-\langle A_j, x^\star\rangle}` for :math:`k\notin S` (0 on :math:`S` and at the optimal
    tokens); ``delta_k`` (B, n, T) :math:`\langle A_k, W_{mm}\rangle - 1` (``inf`` on :math:`S`
    and at the optimal tokens); ``R_V`` :math:`\max_{k\in S}\|A_k - \gamma_Au^\star\|_F` and ``R_N``
    :math:`\max_{k\notin S}\|A_k - \langle A_k, u^\star\rangle u^\star\|_F` (B,); ``feat`` (B, n, T,
    d, d) the lifted features :math:`A_k` (for the restart centre of :func:`restart_constants`).
    """
    U, Zq = lifted_factors(data, opt)
    g, gs, mask, _ = tokens.opt_scores(data, opt)
    go = np.where(mask, g, np.inf).min(-1)
    check_choice("weights", weights, ("sequence", "constraint"))
    B, n, T, d = U.shape
    if weights == "sequence":                                                     # beta(gamma*_i) Delta_i
        logw = np.broadcast_to((np.log(_LOGISTIC.neg_deriv_np(gs)) + np.log(gs - go))[..., None],
                               (B, n, T))
    else:                                                                         # beta(gamma*_i) Delta_it
        gap = np.where(mask, gs[..., None] - g, 1.0)
        logw = np.log(_LOGISTIC.neg_deriv_np(gs))[..., None] + np.log(gap)
    out = dict(x_star=np.empty((B, d, d)), grad=np.empty(B), pi_star=np.zeros((B, n, T)),
               delta_k=np.full((B, n, T), np.inf), R_V=np.empty(B), R_N=np.zeros(B),
               feat=np.einsum("bktd,bke->bktde", U, Zq))
    for b in range(B):
        Af = out["feat"][b].reshape(n, T, d * d)
        S, N = sc["support"][b], mask[b] & ~sc["support"][b]
        u = sc["W_mm"][b].ravel() * sc["gamma_A"][b]
        AS, lw = Af[S], logw[b]
        QS = sc["Q_S"][b]
        _, _, vt = np.linalg.svd((QS.T @ u)[None, :])
        QV = QS @ vt[1:].T                                                        # basis of V
        G = AS @ QV
        z, out["grad"][b] = lse_argmin(lw[S], G)                                   # Newton on V
        x = QV @ z
        out["x_star"][b] = x.reshape(d, d)
        lse_S = logsumexp(lw[S] - AS @ x)
        out["pi_star"][b][N] = np.exp(lw[N] - Af[N] @ x - lse_S)
        cu = Af @ u                                                               # <A_k, u*>
        out["delta_k"][b][N] = cu[N] / sc["gamma_A"][b] - 1
        out["R_V"][b] = np.sqrt(np.maximum((AS ** 2).sum(-1) - cu[S] ** 2, 0)).max()
        if N.any():
            out["R_N"][b] = np.sqrt(np.maximum((Af[N] ** 2).sum(-1) - cu[N] ** 2, 0)).max()
    return out


def residual_limit_distance(W, sc, rl, W_t1=None):
    r""":math:`\rho = \|P_{\mathcal{A}}h - \zeta\|_F` (book: ``thm-restart-residual``), the distance
    of the residual in :math:`\mathcal{A}`, :math:`P_{\mathcal{A}}h = P_{\mathcal{A}}W -
    \langle W, u^\star\rangle u^\star`, from the restart centre :math:`\zeta = x^\star + h_N(t_1)`,
    :math:`h_N(t_1) = (P_{\mathcal{A}} - P_S)W_{t_1}` (``W_t1`` (B, d, d); :math:`\zeta = x^\star` when
    ``None``), with :math:`x^\star` of :func:`residual_limit`; ``W`` (..., B, d, d), returns
    (..., B). At :math:`W = W_{t_1}` this is :math:`\|P_Sh_{t_1} - x^\star\|_F`."""
    W = np.asarray(W, dtype=float)
    B, d = sc["W_mm"].shape[0], sc["W_mm"].shape[-1]
    w = W.reshape(W.shape[:-2] + (d * d,))
    out = np.empty(w.shape[:-1])
    for b in range(B):
        u = sc["W_mm"][b].ravel() * sc["gamma_A"][b]
        QA = sc["Q_A"][b]
        wb = w[..., b, :]
        PAh = (wb @ QA) @ QA.T - (wb @ u)[..., None] * u
        cen = rl["x_star"][b].ravel()
        if W_t1 is not None:
            w1 = np.asarray(W_t1, dtype=float)[b].ravel()
            cen = cen + (w1 @ QA) @ QA.T - (w1 @ sc["Q_S"][b]) @ sc["Q_S"][b].T
        out[..., b] = np.linalg.norm(PAh - cen, axis=-1)
    return out


def restart_constants(W_t1, E_t1, ell_bar, sc, rl, consts, *, pi_drift=None, iters=200):
    r"""The constants of the restart theorem (book: ``thm-restart-residual``), per trial, from the
    state :math:`W_{t_1}` of a run of steps along :math:`-\nabla\mathcal{L}` of lengths
    :math:`\ell_s \le \bar\ell` (``ell_bar``, at most :math:`2\gamma_A/R_V^2`) in the region from
    :math:`t_1` on, with :math:`E` decreasing and :math:`\sum_{s\ge t_1}\ell_sE(W_s) \le
    2E(W_{t_1})/\mu`:

    .. math::

        \hat\varepsilon = \frac{(2+\Delta_{\max})E(W_{t_1})}{2\varepsilon_0},\qquad
        \Omega = \frac{R_V}{\gamma_A}\,\frac{e^{\hat\varepsilon}-1}{\hat\varepsilon}\,
                 \frac{(2+\Delta_{\max})E(W_{t_1})}{\varepsilon_0\mu},

    the centre :math:`\zeta = x^\star + h_N(t_1)`, :math:`h_N(t_1) = (P_{\mathcal{A}} - P_S)W_{t_1}`,
    :math:`\rho_{t_1} = \|P_{\mathcal{A}}h_{t_1} - \zeta\|_F = \|P_Sh_{t_1} - x^\star\|_F`,
    :math:`\pi^\star_k = w^\infty_ke^{-\langle A_k, \zeta\rangle}/\sum_{j\in S}w^\infty_j
    e^{-\langle A_j, \zeta\rangle}` (:math:`k\notin S`; ``rl["pi_star"]`` times
    :math:`e^{-\langle A_k, h_N(t_1)\rangle}`), and :math:`\bar\rho`, the least solution (by
    monotone iteration from :math:`\rho_{t_1} + \Omega`) of

    .. math::

        \bar\rho \ge \rho_{t_1} + \Omega + \frac{R_N}{\gamma_A}e^{\hat\varepsilon + (R_N + R_V)\bar\rho}
            \sum_{k\notin S}\pi^\star_ke^{-\gamma_A\delta_ka_{t_1}}\frac{e^{c_k\bar\ell}}{c_k},
        \qquad c_k = \frac{\gamma_A^2\delta_k}{R_A}

    (``inf`` where none exists, i.e. where :math:`\Phi\kappa e^{1+\kappa(\rho_{t_1}+\Omega)} > 1`,
    :math:`\Phi` the coefficient of the exponential, :math:`\kappa = R_N + R_V`: the theorem's
    closed form does not apply from that :math:`t_1`). Then :math:`\|P_{\mathcal{A}}h_t\|_F \le
    \|\zeta\|_F + \bar\rho` for all :math:`t \ge t_1`, :math:`\|\zeta\|_F^2 = \|x^\star\|_F^2 +
    \|h_N(t_1)\|_F^2`, and ``H2`` :math:`= (\|\zeta\|_F + \bar\rho)^2 + \|P^\perp W_{t_1}\|_F^2`
    bounds :math:`\|h_t\|_F^2`. With ``pi_drift`` (the measured
    :math:`\sum_{t_1\le s<t}\ell_s\pi_s`, any shape broadcasting against (B,)), also
    ``rho_meas_bound`` :math:`= \rho_{t_1} + \Omega + (R_N/\gamma_A)\sum\ell_s\pi_s`, part 1 of the
    theorem with the off-support mass measured, and ``H2_meas`` :math:`= (\|\zeta\|_F +
    \rho_{\mathrm{meas}})^2 + \|P^\perp W_{t_1}\|_F^2`.

    Returns a dict: (B,) arrays ``a`` (:math:`a_{t_1}`), ``rho`` (:math:`\rho_{t_1}`), ``hN``
    (:math:`\|h_N(t_1)\|_F`), ``c_norm`` (:math:`\|\zeta\|_F`), ``hP``, ``eps_hat``, ``Omega``,
    ``Phi``, ``rho_bar``, ``H2`` (and ``rho_meas_bound``, ``H2_meas``), and ``pi_star``
    (B, n, T) at this centre.
    """
    c = consts
    gA, RA = sc["gamma_A"], c["R_A"]
    W_t1 = np.asarray(W_t1, dtype=float)
    p = residual_parts(W_t1, sc)
    rho = residual_limit_distance(W_t1, sc, rl, W_t1)
    B, d = W_t1.shape[0], W_t1.shape[-1]
    hN_vec = np.stack([(W_t1[b].ravel() @ sc["Q_A"][b]) @ sc["Q_A"][b].T
                       - (W_t1[b].ravel() @ sc["Q_S"][b]) @ sc["Q_S"][b].T for b in range(B)])
    feat = rl["feat"].reshape(rl["feat"].shape[:3] + (d * d,))
    pi_star = rl["pi_star"] * np.exp(-np.einsum("bntk,bk->bnt", feat, hN_vec))
    E = np.asarray(E_t1, dtype=float)
    eh = (2 + c["Delta_max"]) * E / (2 * c["eps0"])
    Omega = rl["R_V"] / gA * np.where(eh > 0, np.expm1(eh) / np.where(eh > 0, eh, 1), 1.0) \
        * (2 + c["Delta_max"]) * E / (c["eps0"] * c["mu"])
    dk = rl["delta_k"]
    ck = gA[:, None, None] ** 2 * dk / RA[:, None, None]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        terms = np.where(np.isfinite(dk), pi_star * np.exp(-gA[:, None, None] * dk * p["a"][:, None, None]
                                                             + ck * ell_bar) / ck, 0.0)
        Phi = rl["R_N"] / gA * np.exp(eh) * terms.sum((1, 2))
        base = rho + Omega
        rb = base.copy()
        for _ in range(iters):
            new = base + Phi * np.exp((rl["R_N"] + rl["R_V"]) * rb)
            if np.all(np.abs(new - rb) <= 1e-14 * np.maximum(1, rb)) or not np.all(np.isfinite(new)):
                rb = new
                break
            rb = new
        ok = np.isfinite(rb) & (base + Phi * np.exp((rl["R_N"] + rl["R_V"]) * rb) <= rb * (1 + 1e-12))
        rb = np.where(ok, rb, np.inf)
    cn = np.sqrt(np.linalg.norm(rl["x_star"], axis=(-2, -1)) ** 2 + p["hN"] ** 2)
    out = dict(a=p["a"], rho=rho, hN=p["hN"], c_norm=cn, hP=p["hP"], eps_hat=eh, Omega=Omega, Phi=Phi,
               rho_bar=rb, H2=(cn + rb) ** 2 + p["hP"] ** 2, pi_star=np.where(np.isfinite(dk), pi_star, 0.0))
    if pi_drift is not None:
        out["rho_meas_bound"] = rho + Omega + rl["R_N"] / gA * np.asarray(pi_drift, dtype=float)
        out["H2_meas"] = (cn + out["rho_meas_bound"]) ** 2 + p["hP"] ** 2
    return out


def restart_direction_bound(dL, rc, gamma_A, R_A, *, H2=None, D_a=None):
    r"""The restart bound on the direction (book: ``thm-restart-residual``):

    .. math::

        1 - \mathrm{corr}(W_t, W_{mm}) \le \frac{H^2}{2\,a_{\mathrm{low}}(t)^2},\qquad
        a_{\mathrm{low}}(t) = a_{t_1} + \max\Big(\frac{\gamma_A}{R_A}L,\ L - \frac{D_a}{\gamma_A}\Big),

    with :math:`L = \sum_{t_1\le s<t}\ell_s` (``dL``, (K, B) or broadcastable), ``rc`` from
    :func:`restart_constants`, :math:`H^2` = ``H2`` (default ``rc["H2"]`` :math:`=
    (\sqrt{\|x^\star\|_F^2 + \|h_N(t_1)\|_F^2} + \bar\rho)^2 + \|P^\perp W_{t_1}\|_F^2`; pass
    ``rc["H2_meas"]`` to evaluate part 1's measured-drift form) and the optional margin lag
    :math:`D_a = \gamma_Aa_{t_1} - B(t_1)` (:func:`ngd_margin_offset`, :func:`gd_margin_offset`
    restarted at :math:`t_1`). ``nan`` where :math:`a_{\mathrm{low}} \le 0`."""
    dL = np.asarray(dL, dtype=float)
    grow = gamma_A / R_A * dL
    if D_a is not None:
        grow = np.maximum(grow, dL - np.asarray(D_a, dtype=float) / gamma_A)
    a_low = rc["a"] + grow
    H2 = rc["H2"] if H2 is None else H2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(a_low > 0, H2 / (2 * a_low ** 2), np.nan)


_DISTINCT_RULES = ("ngd", "polyak_star", "gd")


def distinct_restart_constants(sys, m, a, r, x_star, *, optimizer, lr, iters=200):
    r"""The constants of the local restart theorem with distinct scores (book:
    ``thm-distinct-restart``), for one instance in margin coordinates.

    ``sys`` is :func:`attnsvm.reduced.margin_system` built with ``W_mm`` and the support
    :math:`S` of :func:`support_constants` (an ordinary dict with ``G``, ``cu``, ``support``,
    ``gap``, ``gs``, ``n``, ``feat``, ``hP2``); ``m`` (K,) the margins, ``a``
    :math:`= \langle W_{t_1}, u^\star\rangle` and ``r`` (K,) :math:`= m - a\langle A_k,
    u^\star\rangle` the state at the restart :math:`t_1` (:func:`attnsvm.reduced.reduced_run`'s
    records); ``x_star`` (d, d) the minimizer of the limit potential with the per-constraint
    weights :math:`w^\infty_k = \beta(\gamma^\star_i)\Delta_{it}`
    (:func:`residual_limit` with ``weights="constraint"``); ``optimizer`` (``"ngd"``, ``"polyak_star"``,
    ``"gd"``) and ``lr`` (:math:`\eta`) give the bound :math:`\bar\ell` on the step lengths in the
    region :math:`\kappa_\Delta\max_iq_i \le \frac12`: :math:`\eta`, :math:`3\eta/(2\gamma_A)`,
    :math:`\eta R_A\Delta_{\max}\bar Q` (with :math:`\bar Q` below).

    With :math:`\kappa_\Delta = \max_i\max_t\Delta_{it}/\min_t\Delta_{it}`, :math:`c_\varepsilon = 1 +
    2\kappa_\Delta + \Delta_{\max}`, :math:`Q_1 = \max_iq_i(W_{t_1})`, :math:`q_i = \sum_{t\ne
    \mathrm{opt}_i}e^{-m_{it}}`, :math:`R_\Pi = \max_k\|A_k - \langle A_k, u^\star\rangle
    u^\star\|_F`, :math:`c_0 = \gamma_A^2/R_A`, :math:`c_k = \gamma_A^2\delta_k/R_A`, and for
    :math:`\bar\rho \ge 0`

    .. math::

        \bar Q = Q_1e^{2R_\Pi\bar\rho},\quad \hat\varepsilon = c_\varepsilon\bar Q,\quad
        \Omega = \frac{R_VR_A}{\gamma_A^3}(e^{\hat\varepsilon} - 1)e^{c_0\bar\ell},\quad
        \Phi = \frac{R_N}{\gamma_A}e^{\hat\varepsilon + (R_N+R_V)\bar\rho}
               \sum_{k\notin S}\pi^\star_ke^{-\gamma_A\delta_ka_{t_1}}\frac{e^{c_k\bar\ell}}{c_k},

    ``rho_bar`` is the least :math:`\bar\rho \ge \rho_{t_1}` with :math:`\rho_{t_1} + \Omega +
    \Phi \le \bar\rho` (monotone iteration from :math:`\rho_{t_1}`, stopped when an iterate moves by
    at most :math:`10^{-14}\max(1, \bar\rho)`, so just below the fixed point; it is then raised by a relative
    :math:`10^{-12}`, :math:`10^{-9}` or :math:`10^{-6}`, the first at which the inequality holds
    exactly in floating point, as checked on return), provided also
    :math:`\kappa_\Delta\bar Q \le \frac12`, :math:`\bar\ell \le 2\gamma_A/R_V^2` and :math:`a_{t_1} > 0`;
    ``inf`` otherwise (the theorem does not apply from this :math:`t_1`). :math:`\kappa_\Delta\bar Q`
    and :math:`\bar\ell` increase with :math:`\bar\rho`, so checking them at the least
    :math:`\bar\rho` of the inequality decides them for all; for GD, :math:`\bar\ell` depends on :math:`\bar Q`, and
    the step condition and (C) are one joint condition on :math:`\bar\rho`.

    Returns
    -------
    dict with floats ``rho1`` (:math:`\rho_{t_1} = \|P_Sh_{t_1} - x^\star\|_F`), ``a1``, ``Q1``,
    ``kappa_Delta``, ``c_eps``, ``gamma_A``, ``R_A``, ``R_V``, ``R_N``, ``R_Pi``, ``ell_bar``,
    ``rho_bar``, ``Q_bar``, ``eps_hat``, ``Omega``, ``Phi``, ``pi_bar`` (the bound on the
    off-support mass), ``H2`` :math:`= (\sqrt{\|x^\star\|^2 + \|h_N(t_1)\|^2} + \bar\rho)^2 +
    \|P^\perp W_{t_1}\|^2`, ``lambda_a`` the slope of :math:`a_{\mathrm{low}}`,
    :math:`\max(\gamma_A/R_A, (1 + G^2/\gamma_A^2)^{-1/2})` with :math:`G = R_V^2\bar\rho +
    R_V(e^{\hat\varepsilon}-1) + R_N\bar\pi`, ``D_lag`` the lag of the slope-one lower bound
    :math:`a_t \ge a_{t_1} + L_t - D_{\mathrm{lag}}` (finite when :math:`\bar\ell \le \gamma_A/R_V^2` and
    :math:`\bar\pi < 1`),

    .. math::

        D_{\mathrm{lag}} = \frac{1}{2\gamma_A^2}\Big(\frac{2R_AR_V^2(\rho_{t_1}^2 + 2\bar\rho\Xi + \Xi^2)}{1 - \bar\pi}
              + 2\bar r\gamma_A\Xi\Big),\qquad \Xi = \Omega + \Phi,\quad
              \bar r = R_V(e^{\hat\varepsilon}-1) + R_N\bar\pi,

    ``c_lo``, ``c_hi`` (the constants of GD's logarithmic bounds on :math:`a_t`), ``hN2``,
    ``xs2``, ``Delta_max``.
    """
    optimizer = str(optimizer)
    if optimizer not in _DISTINCT_RULES:
        raise ValueError(f"optimizer must be one of {_DISTINCT_RULES}, got {optimizer!r}")
    G, cu, S = np.asarray(sys["G"]), np.asarray(sys["cu"]), np.asarray(sys["support"], dtype=bool)
    m, r = np.asarray(m, dtype=float), np.asarray(r, dtype=float)
    a = float(a)
    K, n = len(m), int(sys["n"])
    N = ~S
    gap = np.asarray(sys["gap"], dtype=float)
    gs = np.asarray(sys["gs"], dtype=float)[np.asarray(sys["seq"])]
    gA = float(cu[S].min())
    RA = float(np.sqrt(np.diag(G).max()))
    Pi2 = np.maximum(np.diag(G) - cu ** 2, 0.0)
    RV = float(np.sqrt(Pi2[S].max()))
    RN = float(np.sqrt(Pi2[N].max())) if N.any() else 0.0
    RPi = max(RV, RN)
    F = np.asarray(sys["feat"]).reshape(K, -1)
    rstar = F @ np.asarray(x_star, dtype=float).ravel()                   # <A_k, x*>
    GSp = np.linalg.pinv(G[np.ix_(S, S)], rcond=1e-12, hermitian=True)
    hN = r - G[:, S] @ (GSp @ r[S])                                        # <A_k, h_N(t1)>
    hN2 = max(float(r @ sys["Gpinv"] @ r - r[S] @ GSp @ r[S]), 0.0) if "Gpinv" in sys else \
        max(float(r @ np.linalg.pinv(G, rcond=1e-12, hermitian=True) @ r - r[S] @ GSp @ r[S]), 0.0)
    dS = r[S] - rstar[S]
    rho1 = float(np.sqrt(max(dS @ GSp @ dS, 0.0)))
    xs2 = float(np.sum(np.asarray(x_star) ** 2))
    zeta = rstar + hN                                                      # <A_k, zeta>
    T1 = K // n
    gp = gap.reshape(n, T1)
    kappa = float((gp.max(1) / gp.min(1)).max())
    Dmax = float(gap.max())
    c_eps = 1 + 2 * kappa + Dmax
    Q1 = float(np.exp(np.logaddexp.reduce(-m.reshape(n, T1), axis=1)).max())
    logw = -np.logaddexp(0.0, gs) + np.log(gap)                            # log beta(g*) Delta_k
    lz = logw - zeta
    lse_S = np.logaddexp.reduce(lz[S])
    delta = cu / gA - 1
    c0 = gA ** 2 / RA
    off = np.exp(lz[N] - lse_S - gA * delta[N] * a)                        # pi*_k e^{-gA delta_k a}
    ck = gA ** 2 * delta[N] / RA

    def ellb(Qb):                                                          # the step bound
        return {"ngd": lr, "polyak_star": 1.5 * lr / gA, "gd": lr * RA * Dmax * Qb}[optimizer]

    def parts(rb):
        Qb = Q1 * np.exp(2 * RPi * rb)
        eh, el = c_eps * Qb, ellb(Qb)
        Om = RV * RA / gA ** 3 * np.expm1(eh) * np.exp(c0 * el)
        off_sum = float(np.sum(off * np.exp(ck * el) / ck)) if N.any() else 0.0
        Ph = RN / gA * np.exp(eh + (RN + RV) * rb) * off_sum
        return Qb, eh, Om, Ph

    rb = rho1
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(iters):
            new = rho1 + sum(parts(rb)[2:])
            if not np.isfinite(new) or new > 1e6:
                rb = np.inf
                break
            if abs(new - rb) <= 1e-14 * max(1.0, rb):
                rb = new
                break
            rb = new
    with np.errstate(over="ignore", invalid="ignore"):
        Qb, eh, Om, Ph = parts(rb) if np.isfinite(rb) else (np.inf,) * 4
        if np.isfinite(rb):                    # the iteration stops just below the fixed point:
            for up in (1e-12, 1e-9, 1e-6):     # the least of these raises where (C) holds exactly
                if rho1 + Om + Ph <= rb:
                    break
                rb = rb * (1 + up)
                Qb, eh, Om, Ph = parts(rb)
    ell_bar = ellb(Qb)
    ok = (np.isfinite(rb) and rho1 + Om + Ph <= rb and kappa * Qb <= 0.5
          and ell_bar <= 2 * gA / RV ** 2 and a > 0)
    rb = float(rb) if ok else np.inf
    out = dict(rho1=rho1, a1=a, Q1=Q1, kappa_Delta=kappa, c_eps=c_eps, gamma_A=gA, R_A=RA, R_V=RV, R_N=RN,
               R_Pi=RPi, ell_bar=float(ell_bar), rho_bar=rb, hN2=hN2, xs2=xs2)
    if not ok:
        out.update(Q_bar=np.inf, eps_hat=np.inf, Omega=np.inf, Phi=np.inf, pi_bar=np.inf, H2=np.inf,
                   lambda_a=gA / RA, D_lag=np.inf, Delta_max=Dmax, c_lo=0.0, c_hi=np.inf)
        return out
    pi_bar = float(np.exp(eh + (RN + RV) * rb) * np.sum(off)) if N.any() else 0.0
    Gc = RV ** 2 * rb + RV * np.expm1(eh) + RN * pi_bar
    Xi = Om + Ph                                                           # sum of ||e_s||
    r_bar = RV * np.expm1(eh) + RN * pi_bar
    if ell_bar <= gA / RV ** 2 and pi_bar < 1:
        D_lag = (2 * RA * RV ** 2 * (rho1 ** 2 + 2 * rb * Xi + Xi ** 2) / (1 - pi_bar) + 2 * r_bar * gA * Xi) \
            / (2 * gA ** 2)
    else:
        D_lag = np.inf
    out.update(Q_bar=float(Qb), eps_hat=float(eh), Omega=float(Om), Phi=float(Ph), pi_bar=pi_bar,
               H2=(np.sqrt(xs2 + hN2) + rb) ** 2 + float(sys["hP2"]),
               lambda_a=max(gA / RA, 1 / np.sqrt(1 + Gc ** 2 / gA ** 2)), D_lag=float(D_lag), Delta_max=Dmax,
               c_lo=float(np.exp(np.logaddexp.reduce(logw[S] - rstar[S]) - eh - RV * rb) / n),
               c_hi=float(np.exp(np.logaddexp.reduce(lz) + eh + RPi * rb) / n))
    return out


def distinct_restart_bound(L, dc):
    r"""The bound of ``thm-distinct-restart``: :math:`1 - \mathrm{corr}(W_t, W_{mm}) \le
    H^2/(2a_{\mathrm{low}}^2)`, :math:`a_{\mathrm{low}} = a_{t_1} + \max(\lambda_a L, L - D_{\mathrm{lag}})`, with
    :math:`L = \sum_{t_1\le s<t}\ell_s` (``L``, any shape) and ``dc`` from
    :func:`distinct_restart_constants` (``H2``, ``a1``, ``lambda_a``, ``D_lag``); ``inf`` where the
    theorem does not apply."""
    L = np.asarray(L, dtype=float)
    with np.errstate(invalid="ignore"):
        a_low = dc["a1"] + np.maximum(dc["lambda_a"] * L, L - dc["D_lag"])
    return dc["H2"] / (2 * a_low ** 2)


def distinct_gd_margin_bounds(t, lr, dc):
    r"""GD's logarithmic bounds on :math:`a_t = \langle W_t, u^\star\rangle` of
    ``thm-distinct-restart`` (part 3), at ``t`` :math:`- t_1` steps after the restart (any shape):

    .. math::

        \frac1{\gamma_A}\log\big(e^{\gamma_Aa_{t_1}} + \eta\gamma_A^2c_{\mathrm{lo}}\,(t - t_1)\big)
        \le a_t \le
        \frac1{\gamma_A}\log\big(e^{\gamma_Aa_{t_1}} + \eta\gamma_AR_Ac_{\mathrm{hi}}e^{\gamma_A\bar\ell}(t - t_1)\big);

    returns ``(low, high)``."""
    t = np.asarray(t, dtype=float)
    gA, a1 = dc["gamma_A"], dc["a1"]
    low = a1 + np.log1p(lr * gA ** 2 * dc["c_lo"] * t * np.exp(-gA * a1)) / gA
    high = a1 + np.log1p(lr * gA * dc["R_A"] * dc["c_hi"] * np.exp(gA * dc["ell_bar"]) * t
                         * np.exp(-gA * a1)) / gA
    return low, high
