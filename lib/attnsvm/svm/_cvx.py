"""The cvxpy path (nuclear and l_p norms, and the fallback of the interior point)."""
from __future__ import annotations


import numpy as np
import scipy.linalg as sla

from ._common import _RESCALE_TOL, CLARABEL_OPTIONS, SolverError, solve_quietly


# ----------------------------------------------------------------------------- cvxpy

def _cvx_solve(prob, norm, solver, form):
    """Solve with cvxpy; ``norm`` is "fro", "nuc", "spectral" or a float p; ``form``
    "primal"/"dual". The solver's status is left in ``prob.status``."""
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    opts = dict(CLARABEL_OPTIONS) if solver == "CLARABEL" else {}
    ineq = ~prob.eq
    one = ineq & ~prob.zero                      # margin-1 rows (zero rows: right side 0)
    if form == "dual":  # Frobenius only
        lam = cp.Variable(prob.K)
        obj = cp.Maximize(cp.sum(lam[np.flatnonzero(one)])
                          - 0.5 * cp.quad_form(lam, cp.psd_wrap(prob.gram())))
        cons = [lam[np.flatnonzero(ineq)] >= 0] if ineq.any() else []
        pr = cp.Problem(obj, cons)
        _cvx_run(pr, solver, opts)
        prob.status = pr.status
        if pr.status in ("unbounded", "unbounded_inaccurate"):
            raise prob.infeasible()
        if pr.status not in ("optimal", "optimal_inaccurate"):
            raise SolverError(f"{solver} returned status {pr.status!r} for the dual of the "
                              f"{prob.what} ({prob.sizes})")
        lv = np.asarray(lam.value, dtype=float)
        lv[ineq] = np.maximum(lv[ineq], 0.0)
        return prob.combine(lv), lv

    U, Zs = prob.U, prob.Zs
    reduce = prob.kind == "att" and norm in ("fro", "nuc", "spectral")
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
        cons.append(mg[np.flatnonzero(ineq)] >= one[ineq].astype(float))
    if prob.eq.any():
        cons.append(mg[np.flatnonzero(prob.eq)] == 0)
    if norm == "fro":
        obj = 0.5 * cp.sum_squares(W)
    elif norm == "nuc":
        obj = cp.normNuc(W) if prob.kind == "att" else cp.norm(W, 2)
    elif norm == "spectral":
        obj = cp.sigma_max(W) if prob.kind == "att" else cp.norm(W, 2)
    else:
        obj = cp.pnorm(cp.vec(W, order="C") if prob.kind == "att" else W, norm)
    pr = cp.Problem(cp.Minimize(obj), cons)
    _cvx_run(pr, solver, opts)
    prob.status = pr.status
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
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    try:
        solve_quietly(pr, solver, **opts)  # "inaccurate" is in pr.status, checked after
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
    one = ineq & ~prob.zero
    scale = max(float(np.max(np.abs(mg[ineq]))) if ineq.any() else 1.0, 1.0)
    if prob.eq.any():
        if np.max(np.abs(mg[prob.eq])) > 1e-7 * scale:
            raise SolverError(f"equality constraints violated by "
                              f"{np.max(np.abs(mg[prob.eq])):.2e} ({prob.what}, {prob.sizes})")
    if prob.zero.any() and np.min(mg[prob.zero]) < -1e-7 * scale:
        raise SolverError(f"nonnegativity constraints violated by "
                          f"{-np.min(mg[prob.zero]):.2e} ({prob.what}, {prob.sizes})")
    if one.any():
        mmin = float(np.min(mg[one]))
        if mmin < 1 - _RESCALE_TOL:
            raise SolverError(f"solution violates a margin constraint by {1 - mmin:.2e} "
                              f"({prob.what}, {prob.sizes}); try solver='CLARABEL'")
        if mmin < 1:
            W, lam = W / mmin, lam / mmin
    return W, lam
