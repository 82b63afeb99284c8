r"""The priority-graph Att-SVM of next-token prediction with self-attention (its finite part is
:func:`attnsvm.svm.finite.graph_finite`).

For NTP data (:class:`attnsvm.data.NTPSeqData`: sequences :math:`X_i` of distinct tokens, query
:math:`z_i = x_{iT}`, next token :math:`y_i`) let :math:`O_i` be the positions of the tokens of
sequence :math:`i` in the strongly connected component of :math:`y_i` in the token-priority graph
of its query (:func:`attnsvm.graphs.top_component`). The graph SVM is

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

from ..graphs import top_component
from ._common import InfeasibleError, _check_seq_data, _constraints, _index_sets, _Problem, per_trial
from .attsvm import _solve

__all__ = ["graph_svm"]


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
    data = _check_seq_data(data)
    if data.batched:
        return np.stack(per_trial(lambda b: graph_svm(data.trial(int(b)), solver=solver),
                                  np.arange(data.trials)))
    mask = top_component(data)
    if mask.all():
        raise ValueError("every sequence lies in its top component: the graph SVM has no margin "
                         "constraint")
    X, Z = data.X, data.Z
    sets = _index_sets(mask)

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
