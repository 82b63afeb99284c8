r"""Token-priority graphs of next-token prediction with self-attention (Chapter 16).

For NTP data with self-attention (:class:`attnsvm.data.NTPSeqData`: sequences of distinct
tokens, query :math:`q_i` = the last token, next token :math:`y_i`), the token-priority graph
:math:`G_q` of a query token :math:`q` has an edge :math:`y_i \to k` for every sequence
:math:`i` with query :math:`q` and every other token :math:`k` of it. Its strongly connected
components order the tokens; the tokens of a sequence in the component of :math:`y_i` are the
selected set :math:`O_i` (:func:`top_component`) of the graph SVM
(:func:`attnsvm.svm.graph_svm`).
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

from .data import NTPSeqData

__all__ = ["priority_graph", "priority_components", "top_component"]


def _seq_arrays(data):
    if not isinstance(data, NTPSeqData):
        raise ValueError(f"data must be an attnsvm.data.NTPSeqData, got {type(data).__name__}")
    if data.batched:
        raise ValueError("data must be one trial (use data.trial(b))")
    return data.tokens, data.y, data.K


def priority_graph(data):
    r"""The token-priority graphs of NTP data with self-attention, one per query token.

    For every sequence :math:`i` with query (last token) :math:`q_i` and next token
    :math:`y_i`, the graph :math:`G_{q_i}` gets an edge :math:`y_i \to k` for every other token
    :math:`k` of the sequence (:math:`y_i` has priority over :math:`k`).

    Parameters
    ----------
    data : attnsvm.data.NTPSeqData (one trial)

    Returns
    -------
    A : ndarray of bool, shape (K, K, K)
        ``A[q, a, b]``: the edge :math:`a \to b` of :math:`G_q`.
    """
    tokens, y, K = _seq_arrays(data)
    A = np.zeros((K, K, K), dtype=bool)
    q = tokens[:, -1]
    for i in range(tokens.shape[0]):
        A[q[i], y[i], tokens[i]] = True
        A[q[i], y[i], y[i]] = False
    return A


def priority_components(A):
    r"""Strongly connected components of each token-priority graph.

    Parameters
    ----------
    A : ndarray of bool, shape (Q, K, K) (from :func:`priority_graph`)

    Returns
    -------
    comp : ndarray of int, shape (Q, K)
        ``comp[q, k]``: the component of token :math:`k` in :math:`G_q` (ids per graph);
        tokens :math:`a, b` share a component iff each is reachable from the other.
    """
    A = np.asarray(A)
    if A.dtype != bool or A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"A must be a boolean array of shape (Q, K, K), got {A.dtype} {A.shape}")
    return np.stack([connected_components(csr_matrix(a), directed=True, connection="strong")[1]
                     for a in A]).astype(np.int64)


def top_component(data):
    r"""For each sequence, the tokens of the highest-priority component present in it.

    Every token of sequence :math:`i` is reachable from :math:`y_i` in :math:`G_{q_i}` (by one
    edge), so the component :math:`C(y_i)` of :math:`y_i` precedes the components of all the
    other tokens of the sequence; the selected set is
    :math:`O_i = \{t : x_{it} \in C(y_i)\}`.

    Parameters
    ----------
    data : attnsvm.data.NTPSeqData (one trial, or batched: one answer per trial)

    Returns
    -------
    mask : ndarray of bool, shape (n, T) or (B, n, T): ``mask[i, t]`` iff :math:`t \in O_i`.
    """
    if getattr(data, "batched", False):
        return np.stack([top_component(data.trial(b)) for b in range(data.trials)])
    tokens, y, _ = _seq_arrays(data)
    comp = priority_components(priority_graph(data))
    q = tokens[:, -1]
    cs = comp[q[:, None], tokens]                      # (n, T) component of each token
    return cs == comp[q, y][:, None]
