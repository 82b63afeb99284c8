r"""The max-margin problems of next-token prediction (Chapter 15).

* :func:`ntp_svm`: the NTP-SVM :math:`W^{mm}` of the linear decoder (Thrampoulidis 2024,
  Definition 3), for :class:`attnsvm.data.NTPData` arrays ``H`` (m, d) and ``P`` (m, V);
* :func:`logit_svm`: its unconstrained-features version in logit space (Frobenius or nuclear
  norm), and :func:`logit_margin`, the smallest margin of logit matrices on a support pattern.

The finite parts :math:`W^*` and :math:`L^*` that complete these directions are in
:mod:`attnsvm.svm.finite`. All problems are solved with cvxpy + Clarabel at tight tolerances;
infeasibility raises :class:`attnsvm.svm.InfeasibleError`.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._checks import as_float_array, check_choice
from ..data import support_patterns, support_sets
from ._common import InfeasibleError, SolverError, _check_ntp, _gen_matrix, _ntp_rows, per_trial
from .geometry import _run

__all__ = ["ntp_svm", "logit_svm", "logit_margin"]


def ntp_svm(H, P):
    r"""The NTP-SVM :math:`W^{mm}` (Thrampoulidis 2024, Definition 3).

    .. math::

        \min_W \|W\|_F \ \text{s.t.}\ (e_z - e_{z'})^\top W h_j = 0,\ \
        (e_z - e_v)^\top W h_j \ge 1 \quad (z, z' \in S_j,\ v \notin S_j,\ j = 1..m).

    Returns
    -------
    W : ndarray (V, d); it lies in :math:`F^\perp` (the equalities say so).

    Raises
    ------
    InfeasibleError
        If the data are not NTP-separable; the message names the context whose addition (to
        the contexts before it, in order) makes the constraints infeasible.
    """
    if np.ndim(H) == 3:   # a leading trials axis: one problem per trial
        return np.stack(per_trial(ntp_svm, np.asarray(H, dtype=float), np.asarray(P, dtype=float)))
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    H, P = _check_ntp(H, P)
    support = P > 0
    m, d = H.shape
    eq, ineq, V = _ntp_rows(H, support)
    if not ineq:
        raise ValueError("every context has full support: there is no out-of-support token")

    def solve(ctx):
        e = [r for r in eq if r[2] in ctx]
        q = [r for r in ineq if r[2] in ctx]
        w = cp.Variable(V * d)
        cons = []
        if q:
            cons.append(_gen_matrix(q, H, V) @ w >= 1)
        if e:
            cons.append(_gen_matrix(e, H, V) @ w == 0)
        pr = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(w)), cons)
        _run(pr, f"NTP-SVM (m={m}, V={V}, d={d})")
        return np.asarray(w.value, dtype=float), q, e

    try:
        w, q, e = solve(set(range(m)))
    except InfeasibleError:
        for j in range(m):
            try:
                solve(set(range(j + 1)))
            except InfeasibleError:
                if j == 0:
                    raise InfeasibleError(
                        "NTP data are not NTP-separable: context 0 alone makes the NTP-SVM "
                        "infeasible") from None
                raise InfeasibleError(
                    f"NTP data are not NTP-separable: contexts 0..{j - 1} are jointly separable "
                    f"but adding context {j} makes the NTP-SVM infeasible") from None
        raise
    Gq = _gen_matrix(q, H, V)
    mmin = float((Gq @ w).min())
    if mmin < 1 - 1e-6:
        raise SolverError(f"NTP-SVM solution violates a margin by {1 - mmin:.2e}")
    if e:
        viol = float(np.abs(_gen_matrix(e, H, V) @ w).max())
        if viol > 1e-6 * max(1.0, float(np.abs(w).max())):
            raise SolverError(f"NTP-SVM equality constraints violated by {viol:.2e}")
    return (w / mmin).reshape(V, d)


def logit_margin(L, P):
    r"""The smallest margin of logit matrices on the support pattern of ``P``:
    :math:`\min_j\big(\min_{z\in S_j}L_{jz} - \max_{v\notin S_j}L_{jv}\big)` over the contexts
    with an out-of-support token. ``L`` and ``P`` are (..., m, V); returns shape (...). A matrix
    with equal in-support logits and margin :math:`\gamma > 0` becomes feasible for
    :func:`logit_svm` when divided by :math:`\gamma`."""
    P, sup = support_sets(P)
    L = as_float_array("L", L, min_ndim=2)
    if L.shape[-2:] != P.shape[-2:]:
        raise ValueError(f"L must be (..., m, V) with (m, V) = {P.shape[-2:]}, got {L.shape}")
    sup = np.broadcast_to(sup, np.broadcast_shapes(sup.shape, L.shape))
    has_out = (~sup).any(-1)
    if not has_out.any():
        raise ValueError("P: every context has full support, there is no margin")
    lo = np.where(sup, L, np.inf).min(-1)
    hi = np.where(sup, -np.inf, L).max(-1)
    return np.where(has_out, lo - hi, np.inf).min(-1)


def logit_svm(P, norm="fro"):
    r"""The NTP-SVM in logit space (the unconstrained-features version of Definition 3).

    .. math::

        L^{mm} = \arg\min_L \|L\| \ \text{s.t.}\ L_{jz} = L_{jz'},\ \
        L_{jz} - L_{jv} \ge 1 \quad (z, z' \in S_j,\ v \notin S_j),

    with ``norm="fro"`` (Frobenius; closed form, row by row: :math:`(V - |S_j|)/V` on
    :math:`S_j` and :math:`-|S_j|/V` off it) or ``norm="nuc"`` (nuclear norm; a semidefinite
    program solved with cvxpy/Clarabel). For ``"nuc"`` the returned minimizer is the one whose
    rows are averaged over contexts with the same support set (a minimizer too, by convexity
    and permutation invariance; see the chapter), rescaled so that its smallest margin is 1.
    Both depend on ``P`` only through the support pattern.

    Parameters
    ----------
    P : array_like (m, V) or (B, m, V)

    Raises
    ------
    ValueError
        If every context has full support (no margin constraint).
    """
    norm = check_choice("norm", norm, ("fro", "nuc"))
    P, sup = support_sets(P)
    if P.ndim == 3:
        return np.stack([logit_svm(P[b], norm) for b in range(P.shape[0])])
    if P.ndim != 2:
        raise ValueError(f"P must be (m, V) or (B, m, V), got shape {P.shape}")
    if sup.all():
        raise ValueError("every context has full support: there is no out-of-support token")
    m, V = P.shape
    s = sup.sum(-1, keepdims=True)
    if norm == "fro":
        return np.where(sup, (V - s) / V, -s / V)
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    X = cp.Variable((m, V))
    cons = []
    for j in range(m):
        S, O = np.flatnonzero(sup[j]), np.flatnonzero(~sup[j])
        if len(S) > 1:
            cons.append(X[j, S[1:]] == X[j, S[0]])
        if len(O):
            cons.append(X[j, S[0]] - X[j, O] >= 1)
    pr = cp.Problem(cp.Minimize(cp.normNuc(X)), cons)
    try:
        with warnings.catch_warnings():          # "optimal_inaccurate" is checked below
            warnings.simplefilter("ignore", UserWarning)
            pr.solve(solver="CLARABEL")
    except cp.error.SolverError as exc:
        raise SolverError(f"Clarabel failed on the nuclear-norm logit SVM: {exc}") from None
    if pr.status not in ("optimal", "optimal_inaccurate") or X.value is None:
        raise SolverError(f"Clarabel returned status {pr.status!r} for the nuclear-norm logit SVM")
    L = np.asarray(X.value, dtype=float)
    g = support_patterns(P)
    for k in np.unique(g):
        L[g == k] = L[g == k].mean(0)
    L = np.where(sup, np.where(sup, L, 0).sum(-1, keepdims=True) / s, L)   # exact equalities
    marg = float(logit_margin(L, P))
    if marg < 1 - 1e-4:
        raise SolverError(f"nuclear-norm logit SVM violates a margin by {1 - marg:.2e}")
    return L / marg
