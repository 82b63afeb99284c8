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

Two further pieces live here. A real corpus that ships with Python itself (the Zen of Python,
stored rot13-encoded in the standard-library module ``this``) turned into NTP data
(:func:`corpus`). And the NTP unconstrained-features model (UFM), in which the context
embeddings :math:`H` (m, d) and the word embeddings :math:`W` (V, d) are both trained, with the
logit matrix :math:`L = HW^\top` (m, V) (:class:`attnsvm.models.NTPUFM`, trained by
:func:`train_ufm`); its logit
geometry is read with :func:`logit_project_F`, :func:`logit_finite`, :func:`logit_svm` and
:func:`collapse_ratio`.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import log_softmax

from ._checks import as_float_array, check_choice, check_int, check_positive
from .data import trial_seed

__all__ = ["NTPData", "synthetic", "ce_loss", "ce_grad", "entropy", "projector_F", "train",
           "smoothness", "zen_of_python", "tokenize", "Corpus", "corpus", "pattern_synthetic",
           "support_patterns", "logit_project_F", "logit_finite", "logit_svm", "logit_margin",
           "train_ufm",
           "finite_part_bound", "collapse_ratio",
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


# --------------------------------------------------------------------------------------------
# A real corpus that ships with Python: the Zen of Python
# --------------------------------------------------------------------------------------------

def zen_of_python():
    """The text of the Zen of Python (PEP 20), decoded from the standard-library module ``this``
    (which stores it rot13-encoded in ``this.s``), without printing it."""
    import codecs
    import contextlib
    import importlib
    import io
    import sys

    if "this" in sys.modules:
        mod = sys.modules["this"]
    else:
        with contextlib.redirect_stdout(io.StringIO()):   # importing `this` prints the poem
            mod = importlib.import_module("this")
    return codecs.decode(mod.s, "rot13")


def tokenize(text):
    """Lower-case words (letters with an optional apostrophe suffix, e.g. ``"aren't"``), in order;
    punctuation and digits are dropped."""
    import re

    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())


@dataclass(frozen=True)
class Corpus:
    """NTP data built from a text: ``data`` (batched :class:`NTPData`, one trial per draw of the
    context embeddings), ``contexts`` (m strings, the distinct contexts), ``vocab`` (V strings,
    the token of each column of ``P``) and ``n_words`` (length of the token sequence)."""

    data: NTPData
    contexts: tuple
    vocab: tuple
    n_words: int


OTHER = "<other>"


def corpus(text=None, *, k=1, vocab_size=20, d=None, trials=1, seed=0):
    r"""Next-token-prediction data from a text (default: :func:`zen_of_python`).

    The text is tokenized by :func:`tokenize`; the ``vocab_size - 1`` most frequent words (ties
    broken by first occurrence) keep their identity and every other word becomes the token
    ``"<other>"`` (so :math:`V =` ``vocab_size``, or less for a short text). The contexts are the
    distinct tuples of ``k`` consecutive tokens that are followed by a token; context :math:`j`
    gets the frequency :math:`\pi_j` (its share of the positions) and the empirical distribution
    :math:`p_j` of the next token (its support :math:`S_j` is the set of words seen after it).
    Each trial draws fixed random context embeddings :math:`h_j \sim N(0, I_d/d)` from
    ``attnsvm.data.trial_seed(seed, b)``; ``P`` and ``pi`` are the same in every trial.

    With ``d > m`` (default ``d = m + 4``) the embeddings have full rank almost surely, so the data
    are NTP_H-compatible and NTP-separable (Thrampoulidis 2024, Lemma 1); with ``d <= m`` they may
    not be, and :func:`attnsvm.svm_geometry.ntp_svm` then raises ``InfeasibleError`` naming a
    context.

    Returns
    -------
    Corpus
    """
    from collections import Counter

    text = zen_of_python() if text is None else text
    words = tokenize(text)
    k = check_int("k", k, minimum=1)
    vocab_size = check_int("vocab_size", vocab_size, minimum=2)
    if len(words) <= k:
        raise ValueError(f"text has {len(words)} words, it needs more than k = {k}")
    counts = Counter(words)
    order = {w: i for i, w in reversed(list(enumerate(words)))}       # first occurrence
    ranked = sorted(counts, key=lambda w: (-counts[w], order[w]))
    keep = ranked[:vocab_size - 1] if len(ranked) > vocab_size else ranked
    toks = [w if w in keep else OTHER for w in words]
    vocab = tuple(keep) + ((OTHER,) if OTHER in toks else ())
    col = {w: i for i, w in enumerate(vocab)}
    table = {}
    for i in range(k, len(toks)):
        table.setdefault(tuple(toks[i - k:i]), Counter())[toks[i]] += 1
    ctxs = list(table)                                     # in order of first occurrence
    m, V = len(ctxs), len(vocab)
    P = np.zeros((m, V))
    nj = np.zeros(m)
    for j, c in enumerate(ctxs):
        for w, n in table[c].items():
            P[j, col[w]] = n
        nj[j] = P[j].sum()
        P[j] /= nj[j]
    pi = nj / nj.sum()
    d = m + 4 if d is None else check_int("d", d, minimum=1)
    trials = check_int("trials", trials, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    Hs = np.stack([np.random.default_rng(trial_seed(seed, b)).standard_normal((m, d)) / np.sqrt(d)
                   for b in range(trials)])
    data = NTPData(Hs, np.broadcast_to(P, (trials, m, V)).copy(),
                   np.broadcast_to(pi, (trials, m)).copy())
    return Corpus(data, tuple(" ".join(c) for c in ctxs), vocab, len(words))


# --------------------------------------------------------------------------------------------
# Logit space: the geometry of the unconstrained-features model
# --------------------------------------------------------------------------------------------

def _support(P):
    P = as_float_array("P", P, min_ndim=2)
    if np.any(P < 0) or not np.allclose(P.sum(-1), 1.0, atol=1e-10):
        raise ValueError("P must hold probability vectors (nonnegative rows summing to 1)")
    return P, P > 0


def pattern_synthetic(m, V, n_patterns, *, support=3, concentration=1.0, floor=1e-2, trials=1,
                      seed=0, pattern_seed=0):
    r"""Synthetic NTP targets whose support sets repeat: a sparsity pattern shared by trials.

    ``n_patterns`` support sets of ``support`` tokens each are drawn once from
    ``pattern_seed``; context :math:`j` gets the pattern :math:`j \bmod` ``n_patterns``. Each
    trial ``b`` draws (from ``trial_seed(seed, b)``) the probabilities on each context's support
    (Dirichlet(``concentration``), floored at ``floor`` and renormalized) and the frequencies
    :math:`\pi` (Dirichlet(1)). So every trial has the same support pattern and different
    probabilities.

    Returns
    -------
    P : ndarray (trials, m, V); pi : ndarray (trials, m); groups : ndarray (m,) of pattern labels
    """
    m = check_int("m", m, minimum=2)
    V = check_int("V", V, minimum=2)
    n_patterns = check_int("n_patterns", n_patterns, minimum=1)
    if n_patterns > m:
        raise ValueError(f"n_patterns must be <= m = {m}, got {n_patterns}")
    support = check_int("support", support, minimum=1)
    if support >= V:
        raise ValueError(f"support must be < V = {V}, got {support}")
    concentration = check_positive("concentration", concentration)
    floor = check_positive("floor", floor)
    trials = check_int("trials", trials, minimum=1)
    prng = np.random.default_rng(check_int("pattern_seed", pattern_seed, minimum=0))
    pats = []
    while len(pats) < n_patterns:                       # distinct support sets
        S = tuple(sorted(prng.choice(V, size=support, replace=False)))
        if S not in pats:
            pats.append(S)
    groups = np.arange(m) % n_patterns
    Ps, pis = [], []
    for b in range(trials):
        rng = np.random.default_rng(trial_seed(check_int("seed", seed, minimum=0), b))
        P = np.zeros((m, V))
        for j in range(m):
            S = list(pats[groups[j]])
            P[j, S] = np.maximum(rng.dirichlet(np.full(support, concentration)), floor)
            P[j] /= P[j].sum()
        Ps.append(P)
        pis.append(rng.dirichlet(np.ones(m)))
    return np.stack(Ps), np.stack(pis), groups


def support_patterns(P):
    """Pattern labels: contexts ``j`` and ``j'`` get the same label iff they have the same support
    set (labels in order of first occurrence). ``P`` is (m, V) (one data set)."""
    P, sup = _support(P)
    if P.ndim != 2:
        raise ValueError(f"P must be (m, V), got shape {P.shape}")
    labels, seen = np.zeros(P.shape[0], dtype=int), {}
    for j, row in enumerate(sup):
        labels[j] = seen.setdefault(row.tobytes(), len(seen))
    return labels


def logit_project_F(L, P):
    r"""Orthogonal projection of logit matrices onto :math:`F_L = \mathrm{span}\{e_j(e_z - e_{z'})^\top
    : z, z' \in S_j\}`: row :math:`j` of the result is :math:`L_j` on :math:`S_j` minus its mean
    over :math:`S_j`, and zero off :math:`S_j`. ``L`` and ``P`` are (..., m, V)."""
    P, sup = _support(P)
    L = as_float_array("L", L, min_ndim=2, finite=False)
    Ls = np.where(sup, L, 0.0)
    mu = Ls.sum(-1, keepdims=True) / sup.sum(-1, keepdims=True)
    return np.where(sup, L - mu, 0.0)


def logit_finite(P):
    r"""The finite part in logit space, :math:`L^* = P_{F_L}(\log p)`: on :math:`S_j`,
    :math:`L^*_{jz} = \log p_{jz} - |S_j|^{-1}\sum_{z'\in S_j}\log p_{jz'}`; zero elsewhere. It is
    the only matrix in :math:`F_L` whose in-support differences are the log-odds
    :math:`\log(p_{jz}/p_{jz'})`."""
    P, sup = _support(P)
    return logit_project_F(np.log(np.where(sup, P, 1.0)), P)


def finite_part_bound(gap_j, P):
    r"""The bound of the chapter's lemma on the finite part (proved there): if the per-context
    excess :math:`\mathrm{KL}(p_j\,\|\,\mathrm{softmax}(L_j)) = \kappa_j` and
    :math:`\delta_j = \sqrt{\kappa_j/2} < p_{\min,j} = \min_{z\in S_j}p_{jz}`, then every entry of
    :math:`P_{F_L}L - L^*` in row :math:`j` is at most
    :math:`2\log(1 + \delta_j/(p_{\min,j} - \delta_j))` in absolute value. Returns the bound per
    row (``inf`` where :math:`\delta_j \ge p_{\min,j}`), shape of ``gap_j``."""
    P, sup = _support(P)
    gap_j = as_float_array("gap_j", gap_j, shape=P.shape[:-1])
    if np.any(gap_j < -1e-12):
        raise ValueError("gap_j must be nonnegative (a KL divergence)")
    delta = np.sqrt(0.5 * np.maximum(gap_j, 0.0))       # Pinsker: TV <= sqrt(KL/2)
    pmin = np.where(sup, P, np.inf).min(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = 2.0 * np.log1p(delta / (pmin - delta))
    return np.where(delta < pmin, b, np.inf)


def logit_margin(L, P):
    r"""The smallest margin of logit matrices on the support pattern of ``P``:
    :math:`\min_j\big(\min_{z\in S_j}L_{jz} - \max_{v\notin S_j}L_{jv}\big)` over the contexts
    with an out-of-support token. ``L`` and ``P`` are (..., m, V); returns shape (...). A matrix
    with equal in-support logits and margin :math:`\gamma > 0` becomes feasible for
    :func:`logit_svm` when divided by :math:`\gamma`."""
    P, sup = _support(P)
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
    from .svm import SolverError

    norm = check_choice("norm", norm, ("fro", "nuc"))
    P, sup = _support(P)
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
    import cvxpy as cp

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


# --------------------------------------------------------------------------------------------
# The NTP unconstrained-features model
# --------------------------------------------------------------------------------------------

def train_ufm(P, pi, *, d, steps, lr, init_scale=0.01, seed=0, record_steps=None):
    r"""Gradient descent on the NTP unconstrained-features model, every trial at once (float64).

    A thin wrapper over :func:`attnsvm.train.fit` with the model
    :class:`attnsvm.models.NTPUFM` (on CPU), recording both embeddings.

    Parameters
    ----------
    P : (B, m, V); pi : (B, m)
    d : int, embedding dimension; steps : int; lr : positive float
    init_scale : float
        Gaussian initialization :math:`N(0, \mathrm{init\_scale}^2)` of every entry of
        :math:`W` and :math:`H`; trial ``b`` draws from the key ``(seed, b)`` only.
    record_steps : array of int, optional (default 40 log-spaced steps)

    Returns
    -------
    dict: ``steps`` (K,), ``W`` (K, B, V, d), ``H`` (K, B, m, d), ``loss`` (K, B).
    """
    from .models import NTPUFM
    from .train import fit

    steps = check_int("steps", steps, minimum=1)
    lr = check_positive("lr", lr)
    if record_steps is None:
        record_steps = np.unique(np.round(np.logspace(0, np.log10(steps), 40)).astype(int))
    rec = np.unique(np.asarray(record_steps, dtype=np.int64).ravel())
    rec = rec[(rec >= 0) & (rec <= steps)]
    if not rec.size:
        raise ValueError(f"record_steps must contain a step in [0, {steps}]")
    h = fit({"P": P, "pi": pi}, model=NTPUFM(d), optimizer="gd", lr=lr, steps=steps,
            init="random", init_scale=check_positive("init_scale", init_scale), seed=seed,
            record_every=rec, snapshots=("W", "H"), device="cpu")
    idx = np.searchsorted(h.steps, rec)
    if not np.all(np.isfinite(h.loss)):
        raise FloatingPointError(f"UFM training diverged: lower lr (now {lr})")
    return {"steps": rec, "W": h.trajectory["W"][idx], "H": h.trajectory["H"][idx],
            "loss": h.loss[idx]}


def collapse_ratio(E, groups):
    r"""Subspace-collapse measure of embeddings ``E`` (..., m, d) with pattern labels ``groups``
    (m,): the mean distance between the normalized embeddings :math:`E/\|E\|_F` of two contexts
    with the same label, divided by the mean distance between contexts with different labels.
    0 means complete collapse of each pattern to one point."""
    E = as_float_array("E", E, min_ndim=2)
    groups = np.asarray(groups)
    if groups.shape != (E.shape[-2],):
        raise ValueError(f"groups must have one label per context ({E.shape[-2]}), got {groups.shape}")
    same = (groups[:, None] == groups[None]) & ~np.eye(len(groups), dtype=bool)
    diff = groups[:, None] != groups[None]
    if not same.any() or not diff.any():
        raise ValueError("groups needs two contexts with one label and two different labels")
    En = E / np.linalg.norm(E, axis=(-2, -1), keepdims=True)
    D = np.linalg.norm(En[..., :, None, :] - En[..., None, :, :], axis=-1)
    return D[..., same].mean(-1) / D[..., diff].mean(-1)


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
