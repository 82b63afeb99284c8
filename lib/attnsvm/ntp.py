r"""Next-token prediction with a linear decoder (Thrampoulidis 2024), batched over trials.

Data: ``m`` distinct contexts with embeddings :math:`h_j \in \R^d` (rows of ``H``), empirical
frequencies :math:`\pi_j` (``pi``) and sparse next-token distributions :math:`p_j \in
\Delta^{V-1}` (rows of ``P``; support :math:`S_j`). The decoder :math:`W \in \R^{V\times d}` is
trained with the cross-entropy

.. math::

    \mathrm{CE}(W) = -\sum_j \pi_j \sum_{z} p_{jz} \log \mathrm{softmax}(W h_j)_z
    = H + \sum_j \pi_j \,\mathrm{KL}(p_j \,\|\, \mathrm{softmax}(W h_j)),

with :math:`H = -\sum_j\pi_j\sum_z p_{jz}\log p_{jz}` the entropy lower bound, and
:math:`\nabla\mathrm{CE}(W) = \sum_j \pi_j (\mathrm{softmax}(Wh_j) - p_j) h_j^\top`.

The data subspace is :math:`F = \mathrm{span}\{(e_z - e_{z'}) h_j^\top : z, z' \in S_j\}`;
:func:`projector_F` returns the orthogonal projector onto it. The finite solution :math:`W^*`
and the NTP-SVM :math:`W^{mm}` are :func:`attnsvm.svm_geometry.ntp_finite` and
:func:`attnsvm.svm_geometry.ntp_svm`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax

from ._checks import as_float_array, check_choice, check_int, check_positive
from .data import trial_seed

__all__ = ["NTPData", "synthetic", "ce_loss", "ce_grad", "entropy", "projector_F", "train",
           "smoothness",
           "priority_graph", "priority_components", "top_component"]


@dataclass(frozen=True)
class NTPData:
    """NTP data: ``H`` (m, d), ``P`` (m, V), ``pi`` (m,), optionally with a trials axis."""

    H: np.ndarray
    P: np.ndarray
    pi: np.ndarray

    def __post_init__(self):
        H = as_float_array("H", self.H, min_ndim=2, max_ndim=3)
        P = as_float_array("P", self.P, ndim=H.ndim)
        pi = as_float_array("pi", self.pi, shape=H.shape[:-1])
        if P.shape[:-1] != H.shape[:-1]:
            raise ValueError(f"P must have one row per context: H {H.shape}, P {P.shape}")
        if np.any(P < 0) or not np.allclose(P.sum(-1), 1.0, atol=1e-10):
            raise ValueError("P must hold probability vectors (nonnegative rows summing to 1)")
        if np.any(pi <= 0) or not np.allclose(pi.sum(-1), 1.0, atol=1e-10):
            raise ValueError("pi must be positive and sum to 1")
        object.__setattr__(self, "H", H)
        object.__setattr__(self, "P", P)
        object.__setattr__(self, "pi", pi)

    @property
    def batched(self):
        return self.H.ndim == 3

    def trial(self, b):
        if not self.batched:
            raise ValueError("trial(b) needs batched data")
        return NTPData(self.H[b], self.P[b], self.pi[b])


def synthetic(m, V, d, *, support=3, concentration=1.0, trials=None, seed=0):
    r"""Seeded synthetic NTP data.

    Each context draws :math:`h_j \sim N(0, I_d/d)`, a support :math:`S_j` of ``support``
    distinct tokens uniformly from the ``V`` tokens, :math:`p_j` on :math:`S_j` from a
    Dirichlet(``concentration``) law, and the frequencies :math:`\pi` from Dirichlet(1) over the
    ``m`` contexts. Trial ``b`` draws from ``attnsvm.data.trial_seed(seed, b)`` only, so it does
    not depend on ``trials``. With ``d > m`` the embeddings have full rank almost surely, and
    the data are NTP_H-compatible and NTP-separable (Thrampoulidis 2024, Lemma 1).
    """
    m = check_int("m", m, minimum=1)
    V = check_int("V", V, minimum=2)
    d = check_int("d", d, minimum=1)
    support = check_int("support", support, minimum=1)
    if support >= V:
        raise ValueError(f"support must be < V = {V}, got {support}")
    concentration = check_positive("concentration", concentration)

    def one(ss):
        rng = np.random.default_rng(ss)
        H = rng.standard_normal((m, d)) / np.sqrt(d)
        P = np.zeros((m, V))
        for j in range(m):
            S = rng.choice(V, size=support, replace=False)
            P[j, S] = rng.dirichlet(np.full(support, concentration))
            P[j, S] = np.maximum(P[j, S], 1e-3)
            P[j] /= P[j].sum()
        pi = rng.dirichlet(np.ones(m))
        return H, P, pi

    if trials is None:
        return NTPData(*one(np.random.SeedSequence(check_int("seed", seed, minimum=0))))
    trials = check_int("trials", trials, minimum=1)
    out = [one(trial_seed(seed, b)) for b in range(trials)]
    return NTPData(*(np.stack([o[k] for o in out]) for k in range(3)))


def _logq(W, H):
    return log_softmax(np.einsum("...vd,...md->...mv", W, H), axis=-1)


def ce_loss(W, data):
    r"""Cross-entropy :math:`\mathrm{CE}(W)` (log-sum-exp), per trial."""
    lq = _logq(W, data.H)
    with np.errstate(invalid="ignore"):
        terms = np.where(data.P > 0, data.P * lq, 0.0)
    return -np.einsum("...m,...m->...", data.pi, terms.sum(-1))


def entropy(data):
    r"""The lower bound :math:`H = -\sum_j \pi_j \sum_z p_{jz}\log p_{jz}`, per trial."""
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(data.P > 0, data.P * np.log(np.where(data.P > 0, data.P, 1.0)), 0.0)
    return -np.einsum("...m,...m->...", data.pi, t.sum(-1))


def ce_grad(W, data):
    r""":math:`\nabla\mathrm{CE}(W) = \sum_j \pi_j(\mathrm{softmax}(W h_j) - p_j)h_j^\top`."""
    q = np.exp(_logq(W, data.H))
    R = data.pi[..., :, None] * (q - data.P)                    # (..., m, V)
    return np.einsum("...mv,...md->...vd", R, data.H)


def smoothness(data):
    r"""An upper bound on the smoothness of CE: :math:`\frac12\|\sum_j\pi_j h_j h_j^\top\|_2`
    (the softmax Jacobian :math:`\mathrm{diag}(q) - qq^\top` has norm at most 1/2)."""
    C = np.einsum("...m,...md,...me->...de", data.pi, data.H, data.H)
    return 0.5 * np.linalg.eigvalsh(C)[..., -1]


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


def train(data, *, rule, steps, lr, betas=(0.9, 0.999), eps=1e-8, W0=None, record_steps=None):
    r"""Train the linear NTP decoder on every trial at once (float64).

    A thin wrapper over :func:`attnsvm.train.fit` with the model
    :class:`attnsvm.models.NTPLinear` (on CPU).

    Parameters
    ----------
    data : NTPData (batched)
    rule : {"gd", "ngd", "adam"}
        ``"gd"``: :math:`W_{k+1} = W_k - \eta\nabla\mathrm{CE}`; ``"ngd"``: the step divided by
        :math:`\|\nabla\mathrm{CE}\|_F`; ``"adam"``: Adam with bias correction.
    steps : int; lr : float or array (B,) (one step size per trial)
    W0 : array (B, V, d), optional (default zero)
    record_steps : array of int, optional (default 50 log-spaced steps; steps outside
        ``[0, steps]`` are ignored)

    Returns
    -------
    dict: ``steps`` (K,), ``iterates`` (K, B, V, d), ``ce`` (K, B).
    """
    from .models import NTPLinear
    from .train import fit

    rule = check_choice("rule", rule, ("gd", "ngd", "adam"))
    steps = check_int("steps", steps, minimum=1)
    if not data.batched:
        raise ValueError("data must be batched (a leading trials axis)")
    B, m, V = data.P.shape
    lr_a = np.asarray(lr, dtype=float)
    if lr_a.shape not in ((), (B,)) or not np.all(np.isfinite(lr_a)) or np.any(lr_a <= 0):
        raise ValueError(f"lr must be a positive float or an array of {B} positive floats")
    d = data.H.shape[-1]
    init = "zeros" if W0 is None else as_float_array("W0", W0, shape=(B, V, d))
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 50)).astype(int))
    rec = np.unique(np.asarray(record_steps, dtype=np.int64).ravel())
    rec = rec[(rec >= 0) & (rec <= steps)]
    h = fit(data, model=NTPLinear(), optimizer=rule, lr=float(lr_a) if lr_a.ndim == 0 else lr_a,
            steps=steps, init=init, record_every=rec if rec.size else "log", snapshots=True,
            device="cpu", **(dict(betas=betas, eps=eps) if rule == "adam" else {}))
    idx = np.searchsorted(h.steps, rec)
    return {"steps": rec, "iterates": h.snapshots[idx], "ce": h.loss[idx]}


# ----------------------------------------------------------------------------- self-attention NTP

def _seq_arrays(data):
    from .data import NTPSeqData
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
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

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
