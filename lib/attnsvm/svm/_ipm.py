"""The dense interior-point path (Frobenius norm): formulations, Newton steps, polishing.

BLAS threads: the whole solve (Gram matrix, Cholesky factorizations, triangular solves) runs
with at most :data:`BLAS_THREADS` BLAS threads (``threadpoolctl``). Its matrices are small
(a Newton system of n(T-1) = 1500 rows for n = 100, T = 16): one thread is at most ~2x slower
on an idle machine and 10-20x faster on a busy one, where OpenBLAS's threads spin against the
other processes (``benchmarks/svm_threads.py`` prints both).
"""
from __future__ import annotations

import functools

import numpy as np
import scipy.linalg as sla
from threadpoolctl import ThreadpoolController

from ._common import _RESCALE_TOL

#: BLAS threads of a dense solve; None leaves the BLAS library's own setting
BLAS_THREADS: int | None = 1


@functools.cache
def _controller() -> ThreadpoolController:
    # built once: it inspects the loaded shared libraries, which takes milliseconds
    return ThreadpoolController()


def _blas_limit():
    """A context manager bounding the BLAS threads to :data:`BLAS_THREADS` (None: no bound)."""
    return _controller().limit(limits=BLAS_THREADS, user_api="blas")


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
    """Solve the Frobenius SVM (no equality rows) with a dense IPM; None if unverified.

    Runs with at most :data:`BLAS_THREADS` BLAS threads (see the module's documentation).
    """
    with _blas_limit():
        return _fro_ipm_body(prob, form)


def _fro_ipm_body(prob, form):
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
