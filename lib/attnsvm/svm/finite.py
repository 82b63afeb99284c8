r"""The finite parts :math:`W^*` of next-token prediction: one module for the three settings.

In next-token prediction the iterates grow like :math:`W_t \approx \|W_t\| \bar W^{mm} + W^*`:
a max-margin direction (:mod:`attnsvm.svm.ntp`, :func:`attnsvm.svm.graph_svm`) on the
orthogonal complement of a data subspace :math:`F`, and a finite part :math:`W^* \in F`.

* linear decoder (Chapter 15): :func:`ntp_finite` (:math:`W^*` on
  :math:`F = \mathrm{span}\{(e_z - e_{z'}) h_j^\top : z, z' \in S_j\}`) and :func:`projector_F`;
* unconstrained features, in logit space (Chapter 15): :func:`logit_finite`
  (:math:`L^* = P_{F_L}(\log p)`) and the projection :func:`logit_project_F`;
* one self-attention layer (Chapter 16): :func:`graph_finite` (the minimizer of the loss
  restricted to the top components on :math:`F`) and :func:`graph_subspace`.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

from .._checks import as_float_array
from ..data import support_sets
from ..devices import cpu_threads
from ..graphs import top_component
from ..losses import ntp_attention_objective
from ._common import (InfeasibleError, SolverError, _check_ntp, _check_seq_data, _gen_matrix, _index_sets,
                      _ntp_rows, per_trial)

__all__ = ["ntp_finite", "projector_F", "logit_finite", "logit_project_F", "graph_finite",
           "graph_subspace"]


def ntp_finite(H, P):
    r"""The finite solution :math:`W^*` of NTP (Thrampoulidis 2024, Definition 1).

    The unique :math:`W \in F = \mathrm{span}\{(e_z - e_{z'}) h_j^\top : z, z' \in S_j\}` with
    :math:`(e_z - e_{z'})^\top W h_j = \log(p_{jz}/p_{jz'})` for all in-support pairs; it is the
    minimum-Frobenius-norm solution of these equations (which lies in ``F``).

    Parameters
    ----------
    H : array_like (m, d) or (B, m, d), context embeddings; P : array_like (m, V) or (B, m, V),
    next-token distributions (with a leading trials axis, one problem per trial)
    (support :math:`S_j = \{z: p_{jz} > 0\}`).

    Raises
    ------
    InfeasibleError
        If the equations have no solution (the data are not NTP_H-compatible; the contexts
        with violated equations are named).
    """
    if np.ndim(H) == 3:   # a leading trials axis: one problem per trial
        return np.stack(per_trial(ntp_finite, np.asarray(H, dtype=float), np.asarray(P, dtype=float)))
    H, P = _check_ntp(H, P)
    support = P > 0
    eq, _, V = _ntp_rows(H, support)
    d = H.shape[1]
    if not eq:
        return np.zeros((V, d))
    G = _gen_matrix(eq, H, V)
    rhs = np.array([np.log(P[j, a] / P[j, b]) for a, b, j in eq])
    w, *_ = np.linalg.lstsq(G, rhs, rcond=None)
    res = G @ w - rhs
    bad = sorted({eq[k][2] for k in np.flatnonzero(np.abs(res) > 1e-8 * max(1.0, np.abs(rhs).max()))})
    if bad:
        raise InfeasibleError(f"NTP data are not NTP_H-compatible: the log-odds equations of "
                              f"contexts {bad} cannot all hold")
    return w.reshape(V, d)


def projector_F(data, tol=1e-10):
    r"""Orthogonal projector onto :math:`F` acting on ``vec(W)`` (row-major), shape
    (..., V d, V d)."""
    if data.batched:
        return np.stack([projector_F(data.trial(b), tol) for b in range(data.H.shape[0])])
    m, V = data.P.shape
    d = data.H.shape[1]
    gens = []
    for j in range(m):
        S = np.flatnonzero(data.P[j] > 0)
        for a in S[1:]:
            G = np.zeros((V, d))
            G[a] += data.H[j]
            G[S[0]] -= data.H[j]
            gens.append(G.ravel())
    if not gens:
        return np.zeros((V * d, V * d))
    U, s, _ = np.linalg.svd(np.array(gens).T, full_matrices=False)
    Q = U[:, s > tol * s.max()]
    return Q @ Q.T


def logit_project_F(L, P):
    r"""Orthogonal projection of logit matrices onto :math:`F_L = \mathrm{span}\{e_j(e_z - e_{z'})^\top
    : z, z' \in S_j\}`: row :math:`j` of the result is :math:`L_j` on :math:`S_j` minus its mean
    over :math:`S_j`, and zero off :math:`S_j`. ``L`` and ``P`` are (..., m, V)."""
    P, sup = support_sets(P)
    L = as_float_array("L", L, min_ndim=2, finite=False)
    Ls = np.where(sup, L, 0.0)
    mu = Ls.sum(-1, keepdims=True) / sup.sum(-1, keepdims=True)
    return np.where(sup, L - mu, 0.0)


def logit_finite(P):
    r"""The finite part in logit space, :math:`L^* = P_{F_L}(\log p)`: on :math:`S_j`,
    :math:`L^*_{jz} = \log p_{jz} - |S_j|^{-1}\sum_{z'\in S_j}\log p_{jz'}`; zero elsewhere. It is
    the only matrix in :math:`F_L` whose in-support differences are the log-odds
    :math:`\log(p_{jz}/p_{jz'})`."""
    P, sup = support_sets(P)
    return logit_project_F(np.log(np.where(sup, P, 1.0)), P)


def graph_subspace(data, tol=1e-10):
    r"""An orthonormal basis of :math:`F` (acting on ``vec(W)``, row-major), shape (d*d, r).

    One trial only. :math:`r = 0` when every top component is a single token.
    """
    data = _check_seq_data(data)
    if data.batched:
        raise ValueError("graph_subspace takes one trial (use data.trial(b))")
    mask = top_component(data)
    X, Z = data.X, data.Z
    gens = []
    for i, s in enumerate(_index_sets(mask)):
        for a in s[1:]:
            gens.append(np.outer(X[i, a] - X[i, s[0]], Z[i]).ravel())
    if not gens:
        return np.zeros((data.d * data.d, 0))
    U, sv, _ = np.linalg.svd(np.array(gens).T, full_matrices=False)
    return U[:, sv > tol * sv.max()]


def graph_finite(data, *, gtol=1e-12):
    r"""The finite part :math:`W^*`: the minimizer of :math:`L_O` on :math:`F`.

    :math:`L_O` is strictly convex and coercive on :math:`F` (Chapter 16), so the minimizer
    exists and is unique; it is found by BFGS in an orthonormal basis of :math:`F` and then
    polished by Newton steps.

    Parameters
    ----------
    data : attnsvm.data.NTPSeqData (one trial, or batched: one answer per trial)
    gtol : float
        Tolerance on the gradient norm (in the basis of :math:`F`).

    Returns
    -------
    W : ndarray, shape (d, d) or (B, d, d) (zero when :math:`F = \{0\}`)
    """
    data = _check_seq_data(data)
    if data.batched:
        return np.stack([graph_finite(data.trial(b), gtol=gtol) for b in range(data.trials)])
    import torch  # deferred: torch is heavy to import

    d = data.d
    Q = graph_subspace(data)
    if Q.shape[1] == 0:
        return np.zeros((d, d))
    X = torch.as_tensor(data.X[None])
    Z = torch.as_tensor(data.Z[None])
    ypos = torch.as_tensor(data.ypos[None])
    mask = torch.as_tensor(top_component(data)[None])

    def fg(c):
        W = torch.as_tensor((Q @ c).reshape(1, d, d))
        loss, grad, _ = ntp_attention_objective(W, X, Z, ypos, mask)
        return float(loss[0]), Q.T @ grad[0].numpy().ravel()

    with cpu_threads("cpu", 1):              # tiny tensors: one thread
        c = _minimize_F(fg, Q.shape[1], gtol)
    return (Q @ c).reshape(d, d)


def _minimize_F(fg, r, gtol):
    c = minimize(fg, np.zeros(r), jac=True, method="BFGS",
                 options=dict(gtol=gtol, maxiter=20000)).x
    for _ in range(5):                     # Newton polish with a finite-difference Hessian
        g = fg(c)[1]
        if np.linalg.norm(g) <= gtol:
            break
        h = 1e-6
        Hm = np.stack([(fg(c + h * e)[1] - fg(c - h * e)[1]) / (2 * h)
                       for e in np.eye(len(c))], axis=1)
        c = c - np.linalg.solve(0.5 * (Hm + Hm.T), g)
    g = fg(c)[1]
    if not np.linalg.norm(g) <= 1e-8:
        raise SolverError(f"graph_finite did not converge (gradient norm {np.linalg.norm(g):.2e})")
    return c
