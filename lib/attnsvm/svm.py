r"""Attention SVMs: the max-margin problems that gradient descent on attention converges to.

Notation (the book's): ``X`` (n, T, d) tokens :math:`x_{it}`, ``y`` (n,) labels,
``Z`` (n, d) queries :math:`z_i`, ``v`` (d,) head, token scores
:math:`\gamma_{it} = y_i v^\top x_{it}`, ``opt`` :math:`= \arg\max_t \gamma_{it}`, and a
general choice of selected tokens ``alpha`` (n,).

The Att-SVM
-----------
For a choice :math:`\alpha` and a norm :math:`\|\cdot\|`,

.. math::

    W^{\alpha}_{mm} = \arg\min_W \|W\| \quad\text{s.t.}\quad
    (x_{i\alpha_i} - x_{it})^\top W z_i \ge 1 \quad \forall i,\ \forall t \ne \alpha_i .

With the lifted features :math:`A_{it} = (x_{i\alpha_i} - x_{it}) z_i^\top` the constraints
read :math:`\langle A_{it}, W\rangle \ge 1`: for the Frobenius norm this is a linear
hard-margin SVM without bias in :math:`\mathbb{R}^{d\times d}`. Its Lagrange dual is

.. math::

    \max_{\lambda \ge 0}\ \sum_k \lambda_k - \tfrac12 \Big\|\sum_k \lambda_k A_k\Big\|_F^2,
    \qquad G_{kl} = \langle A_k, A_l\rangle
    = \big((x_{i\alpha_i} - x_{it})^\top (x_{j\alpha_j} - x_{js})\big)\,(z_i^\top z_j),

with :math:`K = n(T-1)` variables, and the KKT conditions
:math:`W_{mm} = \sum_k \lambda_k A_k`, :math:`\lambda \ge 0`,
:math:`\lambda_k(\langle A_k, W_{mm}\rangle - 1) = 0`; in particular
:math:`\mathrm{rank}(W_{mm}) \le n`.

For the nuclear norm (:math:`W^*_{mm}`, the bias of the :math:`(K, Q)` parameterization)
and the entrywise :math:`\ell_p` norms the problem is solved as a cone program; the
multipliers then satisfy the dual :math:`\max \sum_k \lambda_k` s.t.
:math:`\|\sum_k \lambda_k A_k\|_\circ \le 1`, :math:`\lambda \ge 0`, where
:math:`\|\cdot\|_\circ` is the dual norm (spectral norm for the nuclear norm,
:math:`\ell_q` with :math:`1/p + 1/q = 1` for :math:`\ell_p`), and
:math:`\sum_k \lambda_k = \|W_{mm}\|`.

Solvers
-------
The Frobenius problem is solved by a dense primal-dual interior-point method (Mehrotra
predictor-corrector) written for this problem, whose Newton systems are solved either in
the :math:`K`-dimensional dual space (``"dual"``: Cholesky of :math:`G + D` for the
bounded NNLS form of the dual, :math:`\min_{u \ge 0} \tfrac12 u^\top (G + 11^\top) u - 1^\top u`,
:math:`\lambda = u / (1 - 1^\top u)`) or in the :math:`d^2`-dimensional primal space
(``"primal"``: normal equations :math:`I + F^\top \mathrm{diag}(\lambda/s) F` with the rows
:math:`F_k = \mathrm{vec}(A_k)`). The automatic choice (:func:`choose_formulation`) is
``"dual"`` when :math:`n(T-1) \le 1.5\,(d^2 + 1)`. The result is polished on its active set and
verified (constraints, complementary slackness, duality gap); anything that does not verify,
and every instance that looks infeasible, is handed to Clarabel through cvxpy, whose
certificate decides infeasibility (:class:`InfeasibleError`). The other norms always use
cvxpy with Clarabel at tight tolerances (:data:`CLARABEL_OPTIONS`).

Every returned solution satisfies its constraints exactly up to rounding: after solving,
``W`` is divided by its smallest margin when that margin is in :math:`[1 - 10^{-6}, 1)`, and a
smaller margin raises :class:`SolverError`. Nothing returns ``None`` or NaN.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from ._checks import as_float_array, check_choice, check_positive
from .tokens import TIE_TOL, optimal_tokens, token_scores  # noqa: F401  (used below)

__all__ = [
    "InfeasibleError",
    "SolverError",
    "CLARABEL_OPTIONS",
    "att_svm",
    "att_svm_batch",
    "choose_formulation",
    "p_svm",
    "linear_svm",
    "head_svm",
    "support_tokens",
    "is_locally_optimal",
    "in_cone",
    "rank",
]

#: Clarabel settings used for every cone program (tight; the defaults are 1e-8).
CLARABEL_OPTIONS = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=400,
                        direct_solve_method="faer")

#: tolerance for ties between token scores (relative to max(1, |gamma|))
#: largest relative constraint violation that is repaired by rescaling W
_RESCALE_TOL = 1e-6


class InfeasibleError(ValueError):
    """No matrix (or vector) satisfies the SVM's constraints; the message names the sizes."""


class SolverError(RuntimeError):
    """A solver failed to return a solution that passes the post-checks."""


# ----------------------------------------------------------------------------- validation

def _check_X(X, name="X"):
    X = as_float_array(name, X, ndim=3)
    n, T, _ = X.shape
    if n == 0:
        raise ValueError(f"{name} must hold at least one sequence (n >= 1), got n = 0")
    if T < 2:
        raise ValueError(f"{name} must have at least T = 2 tokens per sequence, got T = {T}")
    return X


def _check_Z(Z, n, d):
    return as_float_array("Z", Z, shape=(n, d))


def _check_alpha(alpha, n, T, name="opt"):
    """Validate a choice of one token per sequence: int array (n,) with entries in [0, T)."""
    a = np.asarray(alpha)
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or a.dtype == object
                               or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{name} must be an integer array of shape ({n},), got dtype {a.dtype}")
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if np.issubdtype(a.dtype, np.floating):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError(f"{name} must contain integers")
    a = a.astype(np.int64)
    if np.any(a < 0) or np.any(a >= T):
        bad = int(np.flatnonzero((a < 0) | (a >= T))[0])
        raise ValueError(f"{name}[{bad}] = {a[bad]} is out of range [0, {T})")
    return a


def _parse_selection(opt, n, T, name="opt"):
    """Return ``(alpha, sets)``: ``alpha`` (n,) int for single-token selections (sets None),
    or ``sets`` a list of sorted tuples for a multi-token selection (alpha None)."""
    if isinstance(opt, (list, tuple)) and any(
            isinstance(o, (set, frozenset, list, tuple, np.ndarray)) for o in opt):
        if len(opt) != n:
            raise ValueError(f"{name} must list one token set per sequence ({n}), got {len(opt)}")
        sets = []
        for i, o in enumerate(opt):
            s = [o] if isinstance(o, numbers.Integral) else list(o)
            if not s or any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in s):
                raise ValueError(f"{name}[{i}] must be a non-empty set of integer token indices")
            s = sorted({int(t) for t in s})
            if s[0] < 0 or s[-1] >= T:
                raise ValueError(f"{name}[{i}] = {s} has a token out of range [0, {T})")
            if len(s) == T:
                raise ValueError(f"{name}[{i}] selects all {T} tokens; leave at least one out")
            sets.append(tuple(s))
        if all(len(s) == 1 for s in sets):
            return np.array([s[0] for s in sets], dtype=np.int64), None
        return None, sets
    return _check_alpha(opt, n, T, name), None


# ----------------------------------------------------------------------------- constraints

@dataclass(frozen=True)
class _Cons:
    """Constraint rows k: margin_k(W) = U[k]^T W Z[seq[k]] (``>= 1``, or ``== 0`` if eq[k])."""

    U: np.ndarray      # (K, d) x_{i,sel} - x_{it}
    seq: np.ndarray    # (K,) i
    sel: np.ndarray    # (K,) selected token s
    tok: np.ndarray    # (K,) other token t
    eq: np.ndarray     # (K,) bool


def _constraints(X, alpha, sets):
    n, T, _ = X.shape
    if sets is None:
        mask = np.ones((n, T), dtype=bool)
        mask[np.arange(n), alpha] = False
        seq, tok = np.nonzero(mask)
        sel = alpha[seq]
        eq = np.zeros(seq.size, dtype=bool)
    else:
        rows = []
        for i, s in enumerate(sets):
            rows += [(i, a, t, False) for a in s for t in range(T) if t not in s]
            rows += [(i, a, s[0], True) for a in s[1:]]
        seq, sel, tok, eq = (np.array(c) for c in zip(*rows))
        eq = eq.astype(bool)
    U = X[seq, sel] - X[seq, tok]
    return _Cons(U, seq, sel, tok, eq)


def _lam_array(c, lam, n, T, multi):
    """Multipliers per constraint -> (n, T) (single token) or (n, T, T) [i, s, t] (sets)."""
    if not multi:
        out = np.zeros((n, T))
        out[c.seq, c.tok] = lam
    else:
        out = np.zeros((n, T, T))
        np.add.at(out, (c.seq, c.sel, c.tok), lam)
    return out


# ----------------------------------------------------------------------------- dense IPM

def choose_formulation(K, m):
    """The automatic Frobenius-solver formulation for ``K`` constraints in ``m`` unknowns.

    ``"dual"`` (Newton systems of size ``K`` on the Gram matrix) when ``K <= 1.5 (m + 1)``,
    else ``"primal"`` (normal equations of size ``m``). For the Att-SVM ``K = n(T-1)`` and
    ``m = d**2``: the dual when :math:`n(T-1) \\le 1.5\\,(d^2 + 1)`.

    Why 1.5 and not 1: an iteration costs about :math:`K^3/3` flops in the dual and
    :math:`m^2 K + m^3/3` (forming and factoring the normal matrix) in the primal, which
    balance at :math:`K \\approx 1.9\\,m`; the primal also needs a few more iterations. The
    measured crossover on this machine lies between :math:`K/m = 1.2` and :math:`2`
    (``benchmarks/svm_speed.py``), and 1.5 keeps the automatic choice within 1.5x of the
    faster formulation on the benchmark grid.
    """
    return "dual" if K <= 1.5 * (m + 1) else "primal"


def _cholesky_solver(H):
    """Factor a symmetric positive definite H; add jitter if rounding made it indefinite."""
    scale = max(float(np.max(np.abs(np.diag(H)))), 1e-300)
    jitter = 0.0
    for _ in range(6):
        try:
            cf = sla.cho_factor(H + jitter * np.eye(len(H)) if jitter else H,
                                lower=True, check_finite=False)
            return lambda r: sla.cho_solve(cf, r, check_finite=False)
        except np.linalg.LinAlgError:
            jitter = scale * (1e-14 if jitter == 0 else 100 * jitter / scale)
    raise np.linalg.LinAlgError("Newton matrix is not positive definite")


def _ipm_nnls(K, matvec, newton, *, tol=1e-13, maxit=100):
    r"""Mehrotra predictor-corrector for :math:`\min_{u\ge0} \tfrac12 u^\top Q u - 1^\top u`.

    ``matvec(u) = Q u`` and ``newton(dvec)`` returns a solver for :math:`(Q + \mathrm{diag}(dvec))`.
    :math:`Q = G + 1 1^\top` is the Gram matrix of the least-distance problem's NNLS form,
    which is bounded below even when the SVM is infeasible. Returns ``(u, s)`` with
    :math:`s = Qu - 1`.
    """
    u = np.full(K, 1.0 / K)
    s = np.ones(K)
    for _ in range(maxit):
        rd = matvec(u) - 1.0 - s
        gap = float(u @ s)
        if np.max(np.abs(rd)) <= tol and gap <= tol:
            break
        mu = gap / K
        solve = newton(s / u)
        # predictor (affine scaling)
        du = solve(-rd - s)
        ds = -s - s * du / u
        a = min(_step(u, du), _step(s, ds))
        mu_aff = float((u + a * du) @ (s + a * ds)) / K
        sigma = min(1.0, (mu_aff / mu) ** 3)
        # corrector
        rc = u * s + du * ds - sigma * mu
        du = solve(-rd - rc / u)
        ds = -(rc + s * du) / u
        a = min(1.0, 0.995 * min(_step(u, du), _step(s, ds)))
        u = u + a * du
        s = s + a * ds
        if not (np.all(np.isfinite(u)) and np.all(np.isfinite(s))):
            raise np.linalg.LinAlgError("interior-point iterates are not finite")
    s = matvec(u) - 1.0
    return u, s


def _step(x, dx):
    neg = dx < 0
    return float(np.min(-x[neg] / dx[neg])) if np.any(neg) else np.inf


def _ipm_dual_backend(G):
    Q = G + 1.0
    def newton(dvec):
        H = Q.copy()
        H[np.diag_indices_from(H)] += dvec
        return _cholesky_solver(H)
    return (lambda u: Q @ u), newton


def _ipm_primal(F, *, tol=1e-9, maxit=100):
    r"""Mehrotra predictor-corrector for :math:`\min \tfrac12\|w\|^2` s.t. :math:`Fw \ge 1`.

    Newton systems in the primal space, :math:`(I + F^\top \mathrm{diag}(\lambda/s) F)\,
    \Delta w = \dots` (size ``m``). Returns ``(lam, s)`` (multipliers and slacks, (K,) each), or None when the
    iteration does not converge (e.g. an infeasible problem, where :math:`\lambda` diverges).
    The normal equations limit the attainable accuracy to about ``1e-9``; the caller polishes
    the answer on its active set.
    """
    K, m = F.shape
    w = np.zeros(m)
    lam = np.ones(K)
    s = np.ones(K)
    for _ in range(maxit):
        rd = w - F.T @ lam
        rp = F @ w - 1.0 - s
        gap = float(lam @ s)
        if (np.max(np.abs(rd)) <= 1e3 * tol * (1 + np.max(np.abs(w)))
                and np.max(np.abs(rp)) <= tol and gap <= 0.1 * tol * (1 + float(w @ w))):
            return lam, s
        if np.max(lam) > 1e14:
            return None
        mu = gap / K
        ratio = lam / s
        H = (F.T * ratio) @ F
        H[np.diag_indices_from(H)] += 1.0
        try:
            solve = _cholesky_solver(H)
        except np.linalg.LinAlgError:
            return None

        def direction(rc):
            dw = solve(-rd - F.T @ ((rc + lam * rp) / s))
            ds = F @ dw + rp
            dl = -(rc + lam * ds) / s
            return dw, ds, dl
        dw, ds, dl = direction(lam * s)
        a = min(_step(s, ds), _step(lam, dl), 1.0)
        mu_aff = float((s + a * ds) @ (lam + a * dl)) / K
        sigma = min(1.0, (mu_aff / mu) ** 3)
        dw, ds, dl = direction(lam * s + ds * dl - sigma * mu)
        a = min(1.0, 0.995 * min(_step(s, ds), _step(lam, dl)))
        w, s, lam = w + a * dw, s + a * ds, lam + a * dl
        if not np.all(np.isfinite(lam)):
            return None
    return None


class _Problem:
    """A hard-margin SVM without bias, ``min ||w|| s.t. <A_k, w> >= 1`` (``== 0`` for eq rows).

    ``kind="att"``: :math:`A_k = U_k z_{seq_k}^\\top` (w is d x d); ``kind="vec"``: ``A_k = U_k``.
    """

    def __init__(self, kind, U, Zs=None, eq=None, what="SVM", sizes=""):
        self.kind, self.U, self.Zs = kind, U, Zs
        self.K, self.d = U.shape
        self.eq = np.zeros(self.K, dtype=bool) if eq is None else eq
        self.m = self.d * self.d if kind == "att" else self.d
        self.what, self.sizes = what, sizes

    def infeasible(self):
        return InfeasibleError(
            f"{self.what} is infeasible ({self.sizes}; {int(np.sum(~self.eq))} margin "
            f"constraints in {self.m} unknowns): no solution satisfies the constraints")

    def gram(self):
        G = self.U @ self.U.T
        if self.kind == "att":
            G *= self.Zs @ self.Zs.T
        return G

    def features(self):
        """Explicit rows vec(A_k), shape (K, m)."""
        if self.kind == "att":
            return (self.U[:, :, None] * self.Zs[:, None, :]).reshape(self.K, -1)
        return self.U

    def combine(self, lam):
        """sum_k lam_k A_k."""
        if self.kind == "att":
            return self.U.T @ (lam[:, None] * self.Zs)
        return self.U.T @ lam

    def margins(self, W):
        if self.kind == "att":
            return np.einsum("kd,kd->k", self.U @ W, self.Zs)
        return self.U @ W


def _verify_fro(prob, lam):
    """Check a Frobenius candidate; return (W, lam) rescaled to exact feasibility, or None."""
    if not np.all(np.isfinite(lam)) or np.any(lam < 0):
        return None
    W = prob.combine(lam)
    mg = prob.margins(W)
    mmin = float(np.min(mg))
    if not (1 - _RESCALE_TOL <= mmin):
        return None
    norm2 = float(np.sum(W * W))
    # duality gap of 1/2||W||^2 vs sum(lam) - 1/2||W||^2, and complementary slackness
    if abs(norm2 - float(np.sum(lam))) > 1e-7 * max(norm2, 1e-300):
        return None
    if np.max(lam * np.abs(mg - 1)) > 1e-7 * max(float(np.max(lam)), 1e-300):
        return None
    if mmin < 1:
        W, lam = W / mmin, lam / mmin
    return W, lam


def _fro_ipm(prob, form):
    """Solve the Frobenius SVM (no equality rows) with a dense IPM; None if unverified."""
    if form == "primal":
        F = prob.features()
        out = _ipm_primal(F)
        if out is None:
            return None
        lam, s = out
        return _polish(prob, lam, lam > s, None) or _verify_fro(prob, lam)
    G = prob.gram()
    matvec, newton = _ipm_dual_backend(G)
    try:
        u, s = _ipm_nnls(prob.K, matvec, newton)
    except np.linalg.LinAlgError:
        return None
    sigma = float(np.sum(u))
    if not sigma < 1 - 1e-7:          # looks infeasible: let a certified solver decide
        return None
    lam = u / (1 - sigma)
    return _polish(prob, lam, u > s, G) or _verify_fro(prob, lam)


def _polish(prob, lam, active, G):
    """Re-solve G_PP lam_P = 1 exactly on the active set P; None unless it verifies."""
    P = np.flatnonzero(active)
    if P.size == 0 or (G is None and P.size > 4 * prob.m):
        return None
    if G is not None:
        GP = G[np.ix_(P, P)]
    else:
        FP = prob.features()[P]
        GP = FP @ FP.T
    try:
        lp = _cholesky_solver(GP)(np.ones(P.size))
    except np.linalg.LinAlgError:
        return None
    cand = np.zeros(prob.K)
    cand[P] = lp
    return _verify_fro(prob, cand)


# ----------------------------------------------------------------------------- cvxpy

def _cvx_solve(prob, norm, solver, form):
    """Solve with cvxpy; ``norm`` is "fro", "nuc" or a float p; ``form`` "primal"/"dual"."""
    import cvxpy as cp

    opts = dict(CLARABEL_OPTIONS) if solver == "CLARABEL" else {}
    ineq = ~prob.eq
    if form == "dual":  # Frobenius only
        lam = cp.Variable(prob.K)
        obj = cp.Maximize(cp.sum(lam[np.flatnonzero(ineq)])
                          - 0.5 * cp.quad_form(lam, cp.psd_wrap(prob.gram())))
        cons = [lam[np.flatnonzero(ineq)] >= 0] if ineq.any() else []
        pr = cp.Problem(obj, cons)
        _cvx_run(pr, solver, opts)
        if pr.status in ("unbounded", "unbounded_inaccurate"):
            raise prob.infeasible()
        if pr.status not in ("optimal", "optimal_inaccurate"):
            raise SolverError(f"{solver} returned status {pr.status!r} for the dual of the "
                              f"{prob.what} ({prob.sizes})")
        lv = np.asarray(lam.value, dtype=float)
        lv[ineq] = np.maximum(lv[ineq], 0.0)
        return prob.combine(lv), lv

    U, Zs = prob.U, prob.Zs
    reduce = prob.kind == "att" and norm in ("fro", "nuc")
    if reduce:
        # W -> P_U W P_Z keeps every margin and does not increase a unitarily invariant
        # norm, so the solution is Q1 V Q2^T with orthonormal bases of span{U_k}, span{z_i}
        Q1, Q2 = sla.orth(U.T), sla.orth(Zs.T)
        U, Zs = U @ Q1, Zs @ Q2
    shape = (U.shape[1], Zs.shape[1]) if prob.kind == "att" else (prob.d,)
    W = cp.Variable(shape)
    if prob.kind == "att":
        mg = cp.sum(cp.multiply(U @ W, Zs), axis=1)
    else:
        mg = U @ W
    cons = []
    if ineq.any():
        cons.append(mg[np.flatnonzero(ineq)] >= 1)
    if prob.eq.any():
        cons.append(mg[np.flatnonzero(prob.eq)] == 0)
    if norm == "fro":
        obj = 0.5 * cp.sum_squares(W)
    elif norm == "nuc":
        obj = cp.normNuc(W) if prob.kind == "att" else cp.norm(W, 2)
    else:
        obj = cp.pnorm(cp.vec(W, order="C") if prob.kind == "att" else W, norm)
    pr = cp.Problem(cp.Minimize(obj), cons)
    _cvx_run(pr, solver, opts)
    if pr.status in ("infeasible", "infeasible_inaccurate"):
        raise prob.infeasible()
    if pr.status not in ("optimal", "optimal_inaccurate") or W.value is None:
        raise SolverError(f"{solver} returned status {pr.status!r} for the {prob.what} "
                          f"({prob.sizes})")
    lam = np.zeros(prob.K)
    if ineq.any():
        lam[ineq] = np.maximum(np.asarray(cons[0].dual_value, dtype=float).ravel(), 0.0)
    if prob.eq.any():
        lam[prob.eq] = -np.asarray(cons[-1].dual_value, dtype=float).ravel()
    Wv = np.asarray(W.value, dtype=float)
    if reduce:
        Wv = Q1 @ Wv @ Q2.T
    return Wv, lam


def _cvx_run(pr, solver, opts):
    import cvxpy as cp

    try:
        pr.solve(solver=solver, **opts)
    except cp.error.SolverError:
        # Clarabel can stop short of the tight tolerances; the post-check decides
        if pr.status is None:
            raise SolverError(f"{solver} failed") from None


def _post_check(prob, W, lam):
    """Exact feasibility by rescaling (tiny violations only); raise SolverError otherwise."""
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(lam))):
        raise SolverError(f"solver returned non-finite values for the {prob.what} ({prob.sizes})")
    mg = prob.margins(W)
    ineq = ~prob.eq
    if prob.eq.any():
        scale = float(np.max(np.abs(mg[ineq]))) if ineq.any() else 1.0
        if np.max(np.abs(mg[prob.eq])) > 1e-7 * max(scale, 1.0):
            raise SolverError(f"equality constraints violated by "
                              f"{np.max(np.abs(mg[prob.eq])):.2e} ({prob.what}, {prob.sizes})")
    if ineq.any():
        mmin = float(np.min(mg[ineq]))
        if mmin < 1 - _RESCALE_TOL:
            raise SolverError(f"solution violates a margin constraint by {1 - mmin:.2e} "
                              f"({prob.what}, {prob.sizes}); try solver='CLARABEL'")
        if mmin < 1:
            W, lam = W / mmin, lam / mmin
    return W, lam


# ----------------------------------------------------------------------------- driver

def _parse_norm(norm):
    if isinstance(norm, str):
        return check_choice("norm", norm, {"fro", "nuc"})
    if isinstance(norm, bool) or not isinstance(norm, numbers.Real):
        raise ValueError(f"norm must be 'fro', 'nuc' or a real p >= 1, got {norm!r}")
    p = float(norm)
    if np.isnan(p) or p < 1:
        raise ValueError(f"norm must be 'fro', 'nuc' or a real p >= 1, got {norm!r}")
    return "fro" if p == 2 else p


def _parse_solver(solver, norm):
    """-> (engine, form): engine "ipm" or a cvxpy solver name; form "auto"/"primal"/"dual"."""
    if solver is None or solver == "auto":
        return ("ipm" if norm == "fro" else "CLARABEL"), "auto"
    if not isinstance(solver, str):
        raise ValueError(f"solver must be None, 'auto', 'primal', 'dual' or a cvxpy solver "
                         f"name, got {solver!r}")
    if solver in ("primal", "dual"):
        if norm != "fro":
            raise ValueError(f"solver={solver!r} selects a Frobenius formulation; "
                             f"norm={norm!r} needs a cvxpy solver name or None")
        return "ipm", solver
    import cvxpy as cp

    name = solver.upper()
    if name not in cp.installed_solvers():
        raise ValueError(f"solver must be None, 'auto', 'primal', 'dual' or one of the "
                         f"installed cvxpy solvers {cp.installed_solvers()}, got {solver!r}")
    return name, "auto"


def _solve(prob, norm, solver):
    engine, form = _parse_solver(solver, norm)
    ineq = ~prob.eq
    zero = np.linalg.norm(prob.U, axis=1) == 0
    if prob.kind == "att":
        zero |= np.linalg.norm(prob.Zs, axis=1) == 0
    if np.any(zero & ineq):        # A_k = 0 cannot satisfy <A_k, W> >= 1
        raise prob.infeasible()
    if form == "auto":
        form = choose_formulation(prob.K, prob.m) if norm == "fro" else "primal"
    if norm != "fro" and form == "dual":
        form = "primal"
    if engine == "ipm":
        if not prob.eq.any():
            out = _fro_ipm(prob, form)
            if out is not None:
                return out
        # certified fallback (and multi-token selections), in the cheaper cvxpy form
        engine, form = "CLARABEL", choose_formulation(prob.K, prob.m)
    W, lam = _cvx_solve(prob, norm, engine, form)
    return _post_check(prob, W, lam)


def att_svm(X, Z, opt, *, norm="fro", solver=None, return_dual=False):
    r"""The attention SVM :math:`W^{\alpha}_{mm}` for the selected tokens ``opt``.

    .. math::

        \min_W \|W\| \quad\text{s.t.}\quad (x_{i,\mathrm{opt}_i} - x_{it})^\top W z_i \ge 1
        \quad \forall i,\ t \ne \mathrm{opt}_i .

    Parameters
    ----------
    X : array_like, shape (n, T, d)
        Tokens; ``n >= 1``, ``T >= 2``, finite.
    Z : array_like, shape (n, d)
        Queries :math:`z_i`.
    opt : array_like of int, shape (n,), or list of n token sets
        The selected token of each sequence (``opt`` from :func:`optimal_tokens`, or any
        choice ``alpha``). A list whose entries are sets (or lists) of tokens asks for a
        multi-token selection: the tokens :math:`s \in S_i` get equal scores,
        :math:`(x_{is} - x_{is'})^\top W z_i = 0`, and every other token scores at least 1
        lower, :math:`(x_{is} - x_{it})^\top W z_i \ge 1` for :math:`s\in S_i, t \notin S_i`.
    norm : {"fro", "nuc"} or float
        ``"fro"``: Frobenius norm (:math:`W_{mm}`); ``"nuc"``: nuclear norm
        (:math:`W^*_{mm}`, an SDP); a real ``p >= 1``: the entrywise :math:`\ell_p` norm
        :math:`(\sum_{jk} |W_{jk}|^p)^{1/p}` (``p = inf`` allowed; ``p = 2`` is ``"fro"``).
    solver : None, "auto", "primal", "dual" or a cvxpy solver name
        ``None``/``"auto"``: Frobenius with the built-in interior-point method in the
        formulation of :func:`choose_formulation`; other norms with Clarabel.
        ``"primal"``/``"dual"`` (Frobenius only): force the built-in method's formulation.
        A cvxpy solver name (``"CLARABEL"``, ``"SCS"``, ...): solve the cvxpy model with that
        solver (Frobenius: the primal or dual QP as :func:`choose_formulation` says; other
        norms: the primal cone program). Whatever is asked, infeasibility is decided by a
        cvxpy solver's certificate (primal infeasible / dual unbounded), with Clarabel when
        the built-in method was used.
    return_dual : bool
        Also return the multipliers.

    Returns
    -------
    W : ndarray, shape (d, d), float64
        The solution; every margin constraint holds (smallest margin >= 1 up to rounding).
    lam : ndarray, only if ``return_dual``
        Shape (n, T) with ``lam[i, t]`` the multiplier of the constraint of token ``t`` in
        sequence ``i`` (0 at the selected token), or (n, T, T) for a multi-token selection
        with ``lam[i, s, t]`` that of the pair (s selected, t); equality rows (t the first
        token of :math:`S_i`) may have either sign. Then
        :math:`\sum_{i,t} \lambda_{it} (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top` equals ``W``
        for ``norm="fro"`` (the multipliers of :math:`\tfrac12\|W\|_F^2`); for the other
        norms the sum lies in the subdifferential of the norm at ``W`` (its dual norm is
        at most 1) and :math:`\sum \lambda = \|W\|` (multipliers of :math:`\|W\|`).

    Raises
    ------
    InfeasibleError
        If no ``W`` satisfies the constraints (the message names n, T, d).
    ValueError
        Malformed input (the message names the argument).
    SolverError
        If the solver's answer does not pass the post-checks.
    """
    X = _check_X(X)
    n, T, d = X.shape
    Z = _check_Z(Z, n, d)
    norm = _parse_norm(norm)
    alpha, sets = _parse_selection(opt, n, T, "opt")
    c = _constraints(X, alpha, sets)
    prob = _Problem("att", c.U, Z[c.seq], c.eq, "Att-SVM", f"n={n}, T={T}, d={d}")
    W, lam = _solve(prob, norm, solver)
    if return_dual:
        return W, _lam_array(c, lam, n, T, sets is not None)
    return W


def att_svm_batch(X, Z, opt, *, norm="fro", solver=None, strict=False):
    r"""Solve :func:`att_svm` for each trial of a batch (the one batched Att-SVM of the library).

    Parameters
    ----------
    X : array_like, shape (B, n, T, d)
    Z : array_like, shape (B, n, d)
    opt : array_like of int, shape (B, n), or a sequence of ``B`` selections
        One token per sequence and trial, or, per trial, anything :func:`att_svm` takes
        (e.g. a list of ``n`` token sets: the multi-token Att-SVM).
    norm, solver
        As in :func:`att_svm`.
    strict : bool
        Raise :class:`InfeasibleError`, naming the infeasible trials, instead of flagging them.

    Returns
    -------
    W : ndarray, shape (B, d, d)
        The solutions; the entries of infeasible trials are all zeros.
    feasible : ndarray of bool, shape (B,)
        False exactly for the trials whose SVM is infeasible (:class:`InfeasibleError`).
        Use ``W[feasible]``; never treat a zero matrix as a solution.
    """
    X = as_float_array("X", X, ndim=4)
    B = X.shape[0]
    Z = as_float_array("Z", Z, shape=(B, X.shape[1], X.shape[3]))
    sels = _batch_selections(opt, X.shape[:2])
    d = X.shape[-1]
    W = np.zeros((B, d, d))
    feasible = np.zeros(B, dtype=bool)
    for b in range(B):
        try:
            W[b] = att_svm(X[b], Z[b], sels[b], norm=norm, solver=solver)
            feasible[b] = True
        except InfeasibleError:
            pass
    if strict and not feasible.all():
        raise InfeasibleError(f"the Att-SVM is infeasible in trials {np.flatnonzero(~feasible).tolist()}"
                              f" of {B} (n={X.shape[1]}, T={X.shape[2]}, d={d})")
    return W, feasible


def _is_sets(sel):
    return not isinstance(sel, np.ndarray) and any(isinstance(s, (tuple, list, set)) for s in sel)


def _batch_selections(opt, shape):
    """Per-trial selections of :func:`att_svm_batch`: an int array (B, n) or B selections."""
    B, n = shape
    if not isinstance(opt, np.ndarray) and len(opt) == B and any(_is_sets(o) for o in opt):
        return [[tuple(s) for s in o] if _is_sets(o) else np.asarray(o, dtype=np.int64)
                for o in opt]
    opt = np.asarray(opt)
    if opt.shape != (B, n):
        raise ValueError(f"opt must have shape {(B, n)}, got {opt.shape}")
    return opt


def p_svm(X, opt, *, solver=None, return_dual=False):
    r"""The prompt-attention SVM :math:`p_{mm}`.

    .. math::

        p_{mm} = \arg\min_p \|p\|_2 \quad\text{s.t.}\quad
        (x_{i,\mathrm{opt}_i} - x_{it})^\top p \ge 1 \quad \forall i,\ t\ne \mathrm{opt}_i .

    Parameters
    ----------
    X : array_like, shape (n, T, d)
    opt : array_like of int (n,), or list of token sets (as in :func:`att_svm`)
    solver : as in :func:`att_svm` (norm is Euclidean)
    return_dual : bool
        Also return multipliers ``lam`` (n, T) with
        :math:`p_{mm} = \sum_{it} \lambda_{it}(x_{i,\mathrm{opt}_i} - x_{it})` (or (n, T, T)
        for sets).

    Returns
    -------
    p : ndarray, shape (d,)

    Raises
    ------
    InfeasibleError
        If no ``p`` satisfies the constraints.
    """
    X = _check_X(X)
    n, T, d = X.shape
    alpha, sets = _parse_selection(opt, n, T, "opt")
    c = _constraints(X, alpha, sets)
    prob = _Problem("vec", c.U, None, c.eq, "p-SVM", f"n={n}, T={T}, d={d}")
    p, lam = _solve(prob, "fro", solver)
    if return_dual:
        return p, _lam_array(c, lam, n, T, sets is not None)
    return p


def linear_svm(X, y, *, solver=None, return_dual=False):
    r"""The hard-margin linear SVM without bias for separable data.

    .. math::

        w_{mm} = \arg\min_w \|w\|_2 \quad\text{s.t.}\quad y_i w^\top x_i \ge 1 \ \forall i,

    whose geometric margin is :math:`1/\|w_{mm}\|`. KKT:
    :math:`w_{mm} = \sum_i \lambda_i y_i x_i`, :math:`\lambda \ge 0`,
    :math:`\lambda_i (y_i w_{mm}^\top x_i - 1) = 0`.

    Parameters
    ----------
    X : array_like, shape (n, d) or (B, n, d)
        With a leading trials axis, one SVM is solved per trial.
    y : array_like, shape (n,) or (B, n), entries +1 or -1
    solver : as in :func:`att_svm` (norm is Euclidean)
    return_dual : bool
        Also return ``lam`` (n,) (or (B, n)).

    Returns
    -------
    w : ndarray, shape (d,) or (B, d)

    Raises
    ------
    InfeasibleError
        If the data (of some trial, named in the message) are not linearly separable through the
        origin.
    """
    X = as_float_array("X", X, min_ndim=2, max_ndim=3)
    if X.ndim == 3:
        y = as_float_array("y", y, shape=X.shape[:2])
        out = []
        for b in range(X.shape[0]):
            try:
                out.append(linear_svm(X[b], y[b], solver=solver, return_dual=True))
            except InfeasibleError as exc:
                raise InfeasibleError(f"trial {b}: {exc}") from None
        w = np.stack([o[0] for o in out])
        return (w, np.stack([o[1] for o in out])) if return_dual else w
    n, d = X.shape
    if n == 0:
        raise ValueError("X must hold at least one sample (n >= 1), got n = 0")
    y = _check_labels(y, n)
    prob = _Problem("vec", y[:, None] * X, None, None, "linear SVM", f"n={n}, d={d}")
    w, lam = _solve(prob, "fro", solver)
    return (w, lam) if return_dual else w


def _check_labels(y, n, name="y"):
    y = as_float_array(name, y, shape=(n,))
    if not np.all(np.abs(y) == 1):
        raise ValueError(f"{name} must contain only +1 and -1")
    return y


def head_svm(X, y, alpha, *, solver=None, return_dual=False):
    r"""The max-margin head on the selected tokens: :func:`linear_svm` of
    :math:`(x_{i,\alpha_i}, y_i)`.

    .. math::

        v_{mm} = \arg\min_v \|v\|_2 \quad\text{s.t.}\quad y_i v^\top x_{i\alpha_i} \ge 1 .

    When :math:`p` (or :math:`W`) and :math:`v` are trained jointly and attention selects
    the tokens :math:`\alpha`, the head's direction tends to :math:`v_{mm}`, while
    :math:`p` tends to the direction of ``p_svm(X, alpha)`` (or ``att_svm(X, Z, alpha)``).

    Parameters
    ----------
    X : array_like, shape (n, T, d)
    y : array_like, shape (n,)
    alpha : array_like of int, shape (n,)
    solver, return_dual : as in :func:`linear_svm`

    Returns
    -------
    v : ndarray, shape (d,)

    Raises
    ------
    InfeasibleError
        If the selected tokens are not linearly separable through the origin.
    """
    X = _check_X(X)
    n, T, _ = X.shape
    y = _check_labels(y, n)
    alpha = _check_alpha(alpha, n, T, "alpha")
    return linear_svm(X[np.arange(n), alpha], y, solver=solver, return_dual=return_dual)


# ----------------------------------------------------------------------------- local optimality

def support_tokens(X, Z, alpha, W=None, *, tol=1e-6):
    r"""The support tokens of the choice :math:`\alpha`.

    The non-selected tokens whose constraint is active at :math:`W^{\alpha}_{mm}`
    (Frobenius): :math:`(x_{i\alpha_i} - x_{it})^\top W^{\alpha}_{mm} z_i \le 1 + \mathrm{tol}`.
    Margins are normalized to 1, so ``tol`` is relative.

    Parameters
    ----------
    X, Z : as in :func:`att_svm`
    alpha : array_like of int, shape (n,)
    W : array_like, shape (d, d), optional
        :math:`W^{\alpha}_{mm}` if already computed (otherwise solved here).
    tol : float
        Activity tolerance (default 1e-6).

    Returns
    -------
    mask : ndarray of bool, shape (n, T)
        ``mask[i, t]`` is True for support tokens; always False at :math:`t = \alpha_i`.

    Raises
    ------
    InfeasibleError
        If :math:`W^{\alpha}_{mm}` does not exist (and ``W`` is not given).
    """
    X = _check_X(X)
    n, T, d = X.shape
    Z = _check_Z(Z, n, d)
    alpha = _check_alpha(alpha, n, T, "alpha")
    tol = check_positive("tol", tol, allow_zero=True)
    if W is None:
        W = att_svm(X, Z, alpha)
    else:
        W = as_float_array("W", W, shape=(d, d))
    sel = X[np.arange(n), alpha]                                  # (n, d)
    mg = np.einsum("ntd,nd->nt", sel[:, None, :] - X, Z @ W.T)   # (x_sel - x_t)^T W z
    mask = mg <= 1 + tol
    mask[np.arange(n), alpha] = False
    return mask


def is_locally_optimal(X, y, Z, v, alpha, *, tol=1e-6):
    r"""Whether the choice :math:`\alpha` is locally optimal (Tarzanagh et al.).

    True when :math:`W^{\alpha}_{mm}` exists and every support token (see
    :func:`support_tokens`) scores strictly below the selected one,
    :math:`\gamma_{i\alpha_i} > \gamma_{it}` (by more than ``1e-12 * max(1, |gamma|)``).
    False when the SVM is infeasible. ``opt`` itself is always locally optimal when its
    SVM is feasible (every other token scores lower).

    Parameters
    ----------
    X, y, Z, v : the instance
    alpha : array_like of int, shape (n,)
    tol : float
        Activity tolerance for the support tokens.

    Returns
    -------
    bool
    """
    X = _check_X(X)
    n, T, d = X.shape
    g = token_scores(X, y, v)
    Z = _check_Z(Z, n, d)
    alpha = _check_alpha(alpha, n, T, "alpha")
    try:
        mask = support_tokens(X, Z, alpha, tol=tol)
    except InfeasibleError:
        return False
    gsel = g[np.arange(n), alpha][:, None]
    strict = gsel - g > TIE_TOL * np.maximum(1.0, np.abs(gsel))
    return bool(np.all(strict[mask]))


def in_cone(W, W_mm_alpha, *, R0, eps):
    r"""Whether ``W`` lies in the cone
    :math:`\{W : \|W\|_F \ge R_0,\ \mathrm{corr}(W, W^{\alpha}_{mm}) \ge 1 - \epsilon\}`.

    Parameters
    ----------
    W : array_like, shape (d, d) or (B, d, d)
    W_mm_alpha : array_like, shape (d, d), nonzero
    R0 : float >= 0
    eps : float >= 0

    Returns
    -------
    bool, or ndarray of bool (B,) for a batch
    """
    W_mm_alpha = as_float_array("W_mm_alpha", W_mm_alpha, ndim=2)
    d = W_mm_alpha.shape[0]
    if W_mm_alpha.shape != (d, d):
        raise ValueError(f"W_mm_alpha must be square, got {W_mm_alpha.shape}")
    nm = np.linalg.norm(W_mm_alpha)
    if nm == 0:
        raise ValueError("W_mm_alpha must be nonzero")
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    if W.shape[-2:] != (d, d):
        raise ValueError(f"W must have shape (..., {d}, {d}), got {W.shape}")
    R0 = check_positive("R0", R0, allow_zero=True)
    eps = check_positive("eps", eps, allow_zero=True)
    nw = np.linalg.norm(W, axis=(-2, -1))
    inner = np.einsum("...jk,jk->...", W, W_mm_alpha)
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(nw > 0, inner / np.where(nw > 0, nw, 1.0) / nm, -np.inf)
    out = (nw >= R0) & (c >= 1 - eps)
    return bool(out) if out.ndim == 0 else out


def rank(W, rtol=1e-6):
    r"""Numerical rank: the number of singular values :math:`\sigma_j > \mathrm{rtol}\,\sigma_1`.

    The threshold is relative to the largest singular value, so the rank does not depend on
    the scale of ``W``; ``rtol = 1e-6`` sits far above the trailing singular values of the
    tightly solved SVMs (about 1e-9 relative or less) and far below the genuine ones.
    The zero matrix has rank 0.

    Parameters
    ----------
    W : array_like, shape (d1, d2) or (B, d1, d2)
    rtol : float in (0, 1)

    Returns
    -------
    int, or ndarray of int (B,)
    """
    W = as_float_array("W", W, min_ndim=2, max_ndim=3)
    rtol = check_positive("rtol", rtol)
    if rtol >= 1:
        raise ValueError(f"rtol must be < 1, got {rtol}")
    sv = np.linalg.svd(W, compute_uv=False)
    if sv.shape[-1] == 0:
        out = np.zeros(W.shape[:-2], dtype=np.int64)
    else:
        top = sv[..., :1]
        out = np.sum((sv > rtol * top) & (top > 0), axis=-1)
    return int(out) if out.ndim == 0 else out.astype(np.int64)
