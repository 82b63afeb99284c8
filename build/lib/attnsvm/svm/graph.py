r"""The priority-graph Att-SVM of next-token prediction with self-attention, and its finite part.

For NTP data (:class:`attnsvm.data.NTPSeqData`: sequences :math:`X_i` of distinct tokens, query
:math:`z_i = x_{iT}`, next token :math:`y_i`) let :math:`O_i` be the positions of the tokens of
sequence :math:`i` in the strongly connected component of :math:`y_i` in the token-priority graph
of its query (:func:`attnsvm.ntp.top_component`). The graph SVM is

.. math::

    W^{G}_{mm} = \arg\min_W \|W\|_F \quad\text{s.t.}\quad
    (x_{ia} - x_{ib})^\top W z_i \ge 1,\quad (x_{ia} - x_{ia'})^\top W z_i = 0
    \qquad (a, a' \in O_i,\ b \notin O_i),

the multi-token Att-SVM of :func:`attnsvm.svm.att_svm` with the selection :math:`O_i` (a sequence
whose tokens all lie in :math:`O_i` contributes equalities only). The finite part is the
minimizer, on :math:`F = \mathrm{span}\{(x_{ia} - x_{ia'}) z_i^\top : a, a' \in O_i\}`, of the
loss restricted to the top components,

.. math::

    L_O(W) = \frac1n\sum_i\Big(\log\sum_{t\in O_i} e^{x_{it}^\top W z_i}
             - x_{i\tau_i}^\top W z_i\Big).
"""
from __future__ import annotations

import numpy as np

from ._common import InfeasibleError, SolverError, _constraints, _Problem, per_trial
from .attsvm import _solve

__all__ = ["graph_svm", "graph_finite", "graph_subspace"]


def _check(data):
    from ..data import NTPSeqData
    if not isinstance(data, NTPSeqData):
        raise ValueError(f"data must be an attnsvm.data.NTPSeqData, got {type(data).__name__}")
    return data


def _sets(mask):
    return [tuple(int(t) for t in np.flatnonzero(row)) for row in mask]


def graph_svm(data, *, solver=None):
    r"""The priority-graph Att-SVM :math:`W^{G}_{mm}` (see the module docstring).

    Parameters
    ----------
    data : attnsvm.data.NTPSeqData
        One trial, or batched (one SVM per trial; an infeasible trial is named).
    solver : as in :func:`attnsvm.svm.att_svm` (the equality rows use Clarabel)

    Returns
    -------
    W : ndarray, shape (d, d) or (B, d, d)

    Raises
    ------
    InfeasibleError
        If no ``W`` satisfies the constraints; the message names the sequence whose addition
        (to the sequences before it, in order) makes them infeasible.
    ValueError
        If ``data`` is not NTP data, or no sequence has a token outside its top component
        (there is nothing to separate).
    """
    data = _check(data)
    if data.batched:
        return np.stack(per_trial(lambda b: graph_svm(data.trial(int(b)), solver=solver),
                                  np.arange(data.trials)))
    from ..ntp import top_component

    mask = top_component(data)
    if mask.all():
        raise ValueError("every sequence lies in its top component: the graph SVM has no margin "
                         "constraint")
    X, Z = data.X, data.Z
    sets = _sets(mask)

    def solve(upto):
        c = _constraints(X[:upto], None, sets[:upto])
        prob = _Problem("att", c.U, Z[:upto][c.seq], c.eq, "graph SVM",
                        f"n={upto}, T={data.T}, d={data.d}")
        if not (~prob.eq).any():
            return np.zeros((data.d, data.d))
        return _solve(prob, "fro", solver)[0]

    try:
        return solve(data.n)
    except InfeasibleError:
        for j in range(data.n):
            try:
                solve(j + 1)
            except InfeasibleError:
                raise InfeasibleError(
                    f"the graph SVM is infeasible: sequences 0..{j - 1} are jointly feasible but "
                    f"adding sequence {j} (tokens {data.tokens[j].tolist()}, next token "
                    f"{int(data.y[j])}) makes the constraints infeasible") from None
        raise


def graph_subspace(data, tol=1e-10):
    r"""An orthonormal basis of :math:`F` (acting on ``vec(W)``, row-major), shape (d*d, r).

    One trial only. :math:`r = 0` when every top component is a single token.
    """
    data = _check(data)
    if data.batched:
        raise ValueError("graph_subspace takes one trial (use data.trial(b))")
    from ..ntp import top_component

    mask = top_component(data)
    X, Z = data.X, data.Z
    gens = []
    for i, s in enumerate(_sets(mask)):
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
    data = _check(data)
    if data.batched:
        return np.stack([graph_finite(data.trial(b), gtol=gtol) for b in range(data.trials)])
    import torch

    from ..devices import cpu_threads
    from ..models.ntp_attention import ntp_attention_objective
    from ..ntp import top_component

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
    from scipy.optimize import minimize

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
