"""Next-token prediction data: sequences with a hidden priority order, synthetic contexts
and targets, support patterns, the Zen of Python as a corpus."""
from __future__ import annotations

import codecs
import contextlib
import importlib
import io
import re
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .._checks import as_float_array, check_int, check_positive
from .containers import NTPData, NTPSeqData
from .seeding import _generate, _generator, draw_rngs, keyed_stream


@_generator
def ntp_sequences(n, K, T, d=None, *, queries=2, levels=3, embedding="orthonormal", trials=None,
                  seed=0):
    r"""Sequences for next-token prediction with one self-attention layer (Chapter 16).

    A hidden priority :math:`\ell_q(k) \in \{0, \dots, \mathrm{levels}-1\}` is drawn
    uniformly for every query token :math:`q` and token :math:`k`. Each sequence draws its last
    token (the query) uniformly from the first ``queries`` tokens of the vocabulary and
    :math:`T - 1` further distinct tokens uniformly from the rest; its next token :math:`y_i` is
    drawn uniformly among the tokens of the sequence of highest priority :math:`\ell_{q_i}`
    (ties between equal priorities create cycles in the token-priority graph).

    Parameters
    ----------
    n, K, T : int
        Sequences, vocabulary size (``K >= T``), tokens per sequence (``T >= 2``).
    d : int, optional
        Embedding dimension (default ``K``).
    queries : int in [1, K]
        Number of distinct query tokens.
    levels : int >= 1
        Number of priority levels.
    embedding : {"orthonormal", "gaussian"}
        ``"orthonormal"``: :math:`e_k` orthonormal (needs ``d >= K``), the rows of a random
        orthogonal matrix; ``"gaussian"``: :math:`e_k \sim N(0, I_d/d)`.
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    data : NTPSeqData
    """
    n = check_int("n", n, minimum=1)
    K = check_int("K", K, minimum=2)
    T = check_int("T", T, minimum=2)
    if T > K:
        raise ValueError(f"T must be at most K = {K} (tokens are distinct), got {T}")
    d = K if d is None else check_int("d", d, minimum=1)
    queries = check_int("queries", queries, minimum=1)
    if queries > K:
        raise ValueError(f"queries must be at most K = {K}, got {queries}")
    levels = check_int("levels", levels, minimum=1)
    if embedding not in ("orthonormal", "gaussian"):
        raise ValueError(f"embedding must be 'orthonormal' or 'gaussian', got {embedding!r}")
    if embedding == "orthonormal" and d < K:
        raise ValueError(f"embedding='orthonormal' needs d >= K = {K}, got d = {d}")

    def one(rng):
        if embedding == "orthonormal":
            Q, _ = np.linalg.qr(rng.standard_normal((d, K)))
            E = Q.T.copy()
        else:
            E = rng.standard_normal((K, d)) / np.sqrt(d)
        prio = rng.integers(0, levels, size=(K, K))
        tokens = np.empty((n, T), dtype=np.int64)
        y = np.empty(n, dtype=np.int64)
        for i in range(n):
            q = int(rng.integers(0, queries))
            rest = np.delete(np.arange(K), q)
            tokens[i, :-1] = rng.choice(rest, size=T - 1, replace=False)
            tokens[i, -1] = q
            p = prio[q, tokens[i]]
            y[i] = tokens[i, rng.choice(np.flatnonzero(p == p.max()))]
        return E, tokens, y
    return _generate(one, trials, seed, cls=NTPSeqData)


# ----------------------------------------------------------------------------- next-token prediction

@_generator
def ntp_synthetic(m, V, d, *, support=3, concentration=1.0, trials=None, seed=0):
    r"""Seeded synthetic NTP data (:class:`NTPData`).

    Each context draws :math:`h_j \sim N(0, I_d/d)`, a support :math:`S_j` of ``support``
    distinct tokens uniformly from the ``V`` tokens, :math:`p_j` on :math:`S_j` from a
    Dirichlet(``concentration``) law, and the frequencies :math:`\pi` from Dirichlet(1) over the
    ``m`` contexts. ``trials``, ``seed``: the seeding contract of this module. With ``d > m``
    the embeddings have full rank almost surely, and the data are NTP_H-compatible and
    NTP-separable (Thrampoulidis 2024, Lemma 1).
    """
    m = check_int("m", m, minimum=1)
    V = check_int("V", V, minimum=2)
    d = check_int("d", d, minimum=1)
    support = check_int("support", support, minimum=1)
    if support >= V:
        raise ValueError(f"support must be < V = {V}, got {support}")
    concentration = check_positive("concentration", concentration)

    def one(rng):
        H = rng.standard_normal((m, d)) / np.sqrt(d)
        P = np.zeros((m, V))
        for j in range(m):
            S = rng.choice(V, size=support, replace=False)
            P[j, S] = rng.dirichlet(np.full(support, concentration))
            P[j, S] = np.maximum(P[j, S], 1e-3)
            P[j] /= P[j].sum()
        pi = rng.dirichlet(np.ones(m))
        return H, P, pi
    return _generate(one, trials, seed, cls=NTPData)


def support_sets(P):
    """``P`` (..., V) checked to hold probability vectors, and its supports ``P > 0``."""
    P = as_float_array("P", P, min_ndim=2)
    if np.any(P < 0) or not np.allclose(P.sum(-1), 1.0, atol=1e-10):
        raise ValueError("P must hold probability vectors (nonnegative rows summing to 1)")
    return P, P > 0


@_generator
def ntp_patterns(m, V, n_patterns, *, support=3, concentration=1.0, floor=1e-2, trials=None,
                 seed=0, pattern_seed=0):
    r"""Synthetic NTP targets whose support sets repeat: a sparsity pattern shared by trials.

    ``n_patterns`` support sets of ``support`` tokens each are drawn once from
    ``pattern_seed``; context :math:`j` gets the pattern :math:`j \bmod` ``n_patterns``. Each
    trial draws (under the seeding contract of this module) the probabilities on each context's
    support (Dirichlet(``concentration``), floored at ``floor`` and renormalized) and the
    frequencies :math:`\pi` (Dirichlet(1)). So every trial has the same support pattern and
    different probabilities.

    Returns
    -------
    P : ndarray (m, V) or (trials, m, V); pi : ndarray (m,) or (trials, m);
    groups : ndarray (m,) of pattern labels (the same for every trial)
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
    prng = keyed_stream("ntp-patterns", check_int("pattern_seed", pattern_seed, minimum=0))
    pats = []
    while len(pats) < n_patterns:                       # distinct support sets
        S = tuple(sorted(prng.choice(V, size=support, replace=False)))
        if S not in pats:
            pats.append(S)
    groups = np.arange(m) % n_patterns

    def one(rng):
        P = np.zeros((m, V))
        for j in range(m):
            S = list(pats[groups[j]])
            P[j, S] = np.maximum(rng.dirichlet(np.full(support, concentration)), floor)
            P[j] /= P[j].sum()
        return P, rng.dirichlet(np.ones(m))
    rngs = draw_rngs(seed, trials)
    if trials is None:
        P, pi = one(rngs)
    else:
        P, pi = (np.stack(a) for a in zip(*[one(rng) for rng in rngs]))
    return P, pi, groups


def support_patterns(P):
    """Pattern labels: contexts ``j`` and ``j'`` get the same label iff they have the same support
    set (labels in order of first occurrence). ``P`` is (m, V) (one data set)."""
    P, sup = support_sets(P)
    if P.ndim != 2:
        raise ValueError(f"P must be (m, V), got shape {P.shape}")
    labels, seen = np.zeros(P.shape[0], dtype=int), {}
    for j, row in enumerate(sup):
        labels[j] = seen.setdefault(row.tobytes(), len(seen))
    return labels



# ----------------------------------------------------------------------------- a real corpus

def zen_of_python():
    """The text of the Zen of Python (PEP 20), decoded from the standard-library module ``this``
    (which stores it rot13-encoded in ``this.s``), without printing it."""
    if "this" in sys.modules:
        mod = sys.modules["this"]
    else:
        with contextlib.redirect_stdout(io.StringIO()):   # importing `this` prints the poem
            mod = importlib.import_module("this")
    return codecs.decode(mod.s, "rot13")


def tokenize(text):
    """Lower-case words (letters with an optional apostrophe suffix, e.g. ``"aren't"``), in order;
    punctuation and digits are dropped."""
    if not isinstance(text, str):
        raise ValueError(f"text must be a str, got {type(text).__name__}")
    return re.findall(r"[a-z]+(?:'[a-z]+)?", text.lower())


@dataclass(frozen=True)
class Corpus:
    """NTP data built from a text: ``data`` (:class:`NTPData`, one trial per draw of the
    context embeddings), ``contexts`` (m strings, the distinct contexts), ``vocab`` (V strings,
    the token of each column of ``P``) and ``n_words`` (length of the token sequence)."""

    data: NTPData
    contexts: tuple
    vocab: tuple
    n_words: int


OTHER = "<other>"


@_generator
def ntp_corpus(text=None, *, k=1, vocab_size=20, d=None, trials=None, seed=0):
    r"""Next-token-prediction data from a text (default: :func:`zen_of_python`).

    The text is tokenized by :func:`tokenize`; the ``vocab_size - 1`` most frequent words (ties
    broken by first occurrence) keep their identity and every other word becomes the token
    ``"<other>"`` (so :math:`V =` ``vocab_size``, or less for a short text). The contexts are the
    distinct tuples of ``k`` consecutive tokens that are followed by a token; context :math:`j`
    gets the frequency :math:`\pi_j` (its share of the positions) and the empirical distribution
    :math:`p_j` of the next token (its support :math:`S_j` is the set of words seen after it).
    Each trial draws fixed random context embeddings :math:`h_j \sim N(0, I_d/d)` from
    :func:`trial_seed` ``(seed, b)`` (the seeding contract; ``trials=None``: one unbatched data
    set); ``P`` and ``pi`` are the same in every trial.

    With ``d > m`` (default ``d = m + 4``) the embeddings have full rank almost surely, so the data
    are NTP_H-compatible and NTP-separable (Thrampoulidis 2024, Lemma 1); with ``d <= m`` they may
    not be, and :func:`attnsvm.svm.ntp_svm` then raises ``InfeasibleError`` naming a
    context.

    Returns
    -------
    Corpus
    """
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

    def one(rng):
        return rng.standard_normal((m, d)) / np.sqrt(d), P.copy(), pi.copy()
    data = _generate(one, trials, seed, cls=NTPData)
    return Corpus(data, tuple(" ".join(c) for c in ctxs), vocab, len(words))
