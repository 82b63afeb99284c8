"""Data models: seeded, float64 instances of the attention model and of linear classification.

Shapes follow the book's notation (see the notation page):

* ``X`` : (n, T, d) tokens, row ``X[i, t]`` is :math:`x_{it}`;
* ``y`` : (n,) labels in :math:`\\{\\pm 1\\}`;
* ``Z`` : (n, d) queries :math:`z_i` (self-attention: :math:`z_i = x_{i1}`);
* ``v`` : (d,) the linear head.

Every array may carry an optional leading trials axis ``B`` for batched experiments.

Generators
----------
All generators are seeded and return float64 arrays. With ``trials=None`` they return one
instance drawn from ``np.random.default_rng(seed)``; with ``trials=B`` trial ``b`` is drawn
from the independent stream ``default_rng(trial_seed(seed, b))``, so trial ``b`` is the same
whatever ``B`` is, and ``gen(..., seed=trial_seed(s, b))`` reproduces it unbatched.

* :func:`random_unit`: the setting of "Transformers as SVMs" (unit-norm Gaussian tokens).
* :func:`score_gap`: one optimal token per sequence, all others at least ``gap`` lower.
* :func:`orthogonal`: mutually orthonormal tokens, with a closed-form Att-SVM.
* :func:`overparameterized`: ``d >= n``; every choice of tokens has a feasible Att-SVM.
* :func:`prompt_2d`: tiny 2-D prompt-attention instances for trajectory pictures.
* :func:`separable`: linearly separable data with a planted margin.
* :func:`prescribed_scores`: exact token scores (one optimal token, equal or distinct others).
* :func:`planted_token`: Gaussian tokens with one planted label-carrying token per sequence.
* :func:`planted_prompt`: a relevant token, a distractor and background (prompt attention).
* :func:`ntp_synthetic`, :func:`ntp_patterns`, :func:`ntp_corpus`: next-token prediction with a
  linear decoder (:class:`NTPData`): synthetic contexts, targets with a repeated support
  pattern, and the Zen of Python as a corpus.
* :func:`ntp_sequences`: sequences of distinct vocabulary tokens with a next-token label drawn
  from a hidden priority order (next-token prediction with self-attention, :class:`NTPSeqData`).

Every generator is registered in :data:`GENERATORS` (a test checks the seeding contract above
for each registered generator, and that every public generator is registered).

Named random streams
--------------------
Randomness that is not a data draw (an initialization, a random search) comes from a *named*
stream, :func:`stream`: ``stream(seed, name, b)`` is ``default_rng(SeedSequence([seed, b,
key]))`` with the name's key from :data:`STREAMS` (one table, distinct keys, so two modules never
share a stream by accident; an unknown name raises). A new stream adds a name with a fresh key.
"""
from __future__ import annotations

import codecs
import contextlib
import dataclasses
import importlib
import io
import re
import sys
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.optimize import linprog

from ._checks import as_float_array, check_bool, check_int, check_positive, renamed
from .tokens import optimal_tokens, token_scores

__all__ = ["AttnData", "LinearData", "NTPSeqData", "trial_seed", "STREAMS", "Stream", "stream", "stream_seed",
           "GENERATORS", "random_unit", "score_gap", "orthogonal", "overparameterized",
           "prompt_2d", "separable", "prescribed_scores", "planted_token", "planted_prompt",
           "ntp_sequences", "keyed_instances", "keyed_instance", "keyed_trials", "sized_trials",
           "random_inits", "unit_instances", "prompt_instances",
           "TrialsData", "NTPData", "ntp_synthetic", "ntp_patterns",
           "support_patterns", "support_sets", "Corpus",
           "KEYED_STREAMS", "keyed_stream", "ntp_corpus", "zen_of_python", "tokenize"]


class TrialsData:
    """Base of the data containers: frozen dataclasses whose array fields share an optional
    leading trials axis ``B``. A subclass names the field that tells whether it is batched
    (``_lead``) and that field's number of dimensions without the trials axis (``_ndim``);
    ``None`` fields (an optional planted direction) are carried as ``None``."""

    _lead = "X"
    _ndim = 3

    @property
    def batched(self) -> bool:
        """Whether the arrays carry a leading trials axis."""
        return getattr(self, self._lead).ndim == self._ndim + 1

    @property
    def trials(self) -> int:
        """Number of trials ``B`` (1 when not batched)."""
        return getattr(self, self._lead).shape[0] if self.batched else 1

    def _fields(self):
        return [getattr(self, f.name) for f in dataclasses.fields(self)]

    def trial(self, b: int):
        """The ``b``-th trial as an unbatched instance."""
        if not self.batched:
            raise ValueError("trial(b) needs batched data (a leading trials axis)")
        if not 0 <= b < self.trials:
            raise ValueError(f"b must be in [0, {self.trials}), got {b}")
        return type(self)(*(None if a is None else a[b] for a in self._fields()))

    def take(self, idx):
        """The trials ``idx`` (int array, boolean mask or slice) as a batched instance."""
        if not self.batched:
            raise ValueError("take(idx) needs batched data (a leading trials axis)")
        idx = _trial_index("idx", idx, self.trials)
        return type(self)(*(None if a is None else a[idx] for a in self._fields()))

    @classmethod
    def stack(cls, items):
        """Stack unbatched instances of equal shape along a new leading trials axis."""
        items = list(items)
        if not items:
            raise ValueError(f"items must contain at least one {cls.__name__}")
        if any(not isinstance(it, cls) or it.batched for it in items):
            raise ValueError(f"items must be unbatched {cls.__name__} instances")
        cols = zip(*(it._fields() for it in items))
        return cls(*(None if c[0] is None else np.stack(c) for c in cols))


@dataclass(frozen=True)
class AttnData(TrialsData):
    """One instance (or a batch of ``B`` instances) of the attention classification problem.

    Attributes
    ----------
    X : ndarray, shape (n, T, d) or (B, n, T, d)
    y : ndarray, shape (n,) or (B, n), entries +1 or -1
    Z : ndarray, shape (n, d) or (B, n, d)
    v : ndarray, shape (d,) or (B, d)
    """

    X: np.ndarray
    y: np.ndarray
    Z: np.ndarray
    v: np.ndarray

    def __post_init__(self):
        X = as_float_array("X", self.X, min_ndim=3, max_ndim=4)
        batched = X.ndim == 4
        lead = X.shape[:1] if batched else ()
        n, T, d = X.shape[-3:]
        if n == 0:
            raise ValueError("X must hold at least one sequence (n >= 1), got n = 0")
        if T < 2:
            raise ValueError(f"X must have at least T = 2 tokens per sequence, got T = {T}")
        y = as_float_array("y", self.y, shape=lead + (n,))
        if not np.all(np.abs(y) == 1):
            raise ValueError("y must contain only +1 and -1")
        Z = as_float_array("Z", self.Z, shape=lead + (n, d))
        v = as_float_array("v", self.v, shape=lead + (d,))
        for name, val in (("X", X), ("y", y), ("Z", Z), ("v", v)):
            object.__setattr__(self, name, val)

    @property
    def n(self) -> int:
        return self.X.shape[-3]

    @property
    def T(self) -> int:
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        return self.X.shape[-1]

    @property
    def gamma(self) -> np.ndarray:
        """Token scores :math:`\\gamma_{it} = y_i v^\\top x_{it}`, shape (n, T) or (B, n, T)."""
        return token_scores(self.X, self.y, self.v)

    @property
    def opt(self) -> np.ndarray:
        """Optimal tokens :math:`\\arg\\max_t \\gamma_{it}`, shape (n,) or (B, n) (see
        :func:`attnsvm.svm.optimal_tokens`; raises ValueError on a tie)."""
        return optimal_tokens(self.X, self.y, self.v)


@dataclass(frozen=True)
class LinearData(TrialsData):
    """Linear binary classification data: features ``X`` (n, d) and labels ``y`` (n,).

    Optionally batched with a leading trials axis: ``X`` (B, n, d), ``y`` (B, n).
    ``w_star`` (d,) or (B, d), optional: a planted unit direction (set by :func:`separable`).
    """

    X: np.ndarray
    y: np.ndarray
    w_star: np.ndarray | None = None

    def __post_init__(self):
        X = as_float_array("X", self.X, min_ndim=2, max_ndim=3)
        if X.shape[-2] == 0:
            raise ValueError("X must hold at least one sample (n >= 1), got n = 0")
        y = as_float_array("y", self.y, shape=X.shape[:-1])
        if not np.all(np.abs(y) == 1):
            raise ValueError("y must contain only +1 and -1")
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", y)
        if self.w_star is not None:
            w = as_float_array("w_star", self.w_star, shape=X.shape[:-2] + X.shape[-1:])
            object.__setattr__(self, "w_star", w)

    _ndim = 2

    @property
    def n(self) -> int:
        return self.X.shape[-2]

    @property
    def d(self) -> int:
        return self.X.shape[-1]


@dataclass(frozen=True)
class NTPSeqData(TrialsData):
    r"""Next-token prediction with self-attention: sequences of distinct vocabulary tokens.

    Attributes
    ----------
    E : ndarray, shape (K, d) or (B, K, d)
        The embeddings :math:`e_k` of the ``K`` vocabulary tokens (rows).
    tokens : ndarray of int, shape (n, T) or (B, n, T)
        Token ids :math:`x_{i1}, \dots, x_{iT}` of each sequence, distinct within a sequence; the
        last one, :math:`q_i = x_{iT}`, is the query.
    y : ndarray of int, shape (n,) or (B, n)
        The next token :math:`y_i` of each sequence; it occurs in the sequence.

    The derived arrays are ``X = E[tokens]`` (n, T, d), the queries ``Z = X[:, -1]`` (n, d) and
    ``ypos`` (n,), the position of :math:`y_i` in its sequence.
    """

    E: np.ndarray
    tokens: np.ndarray
    y: np.ndarray

    def __post_init__(self):
        E = as_float_array("E", self.E, min_ndim=2, max_ndim=3)
        batched = E.ndim == 3
        lead = E.shape[:1] if batched else ()
        K = E.shape[-2]
        tok = _int_array("tokens", self.tokens, ndim=len(lead) + 2)
        if tok.shape[:len(lead)] != lead:
            raise ValueError(f"tokens must have the trials axis of E {lead}, got {tok.shape}")
        n, T = tok.shape[-2:]
        if n == 0 or T < 2:
            raise ValueError(f"tokens must hold n >= 1 sequences of T >= 2 tokens, got {tok.shape}")
        if tok.min() < 0 or tok.max() >= K:
            raise ValueError(f"tokens must be ids in [0, {K}) (K = E.shape[-2])")
        srt = np.sort(tok, axis=-1)
        if np.any(srt[..., 1:] == srt[..., :-1]):
            raise ValueError("tokens must be distinct within each sequence")
        y = _int_array("y", self.y, ndim=tok.ndim - 1)
        if y.shape != tok.shape[:-1]:
            raise ValueError(f"y must have shape {tok.shape[:-1]}, got {y.shape}")
        inside = tok == y[..., None]
        if not np.all(inside.any(-1)):
            bad = np.argwhere(~inside.any(-1))[0].tolist()
            raise ValueError(f"y must occur in its sequence: y{bad} does not")
        object.__setattr__(self, "E", E)
        object.__setattr__(self, "tokens", tok)
        object.__setattr__(self, "y", y)

    _lead, _ndim = "E", 2

    @property
    def K(self) -> int:
        return self.E.shape[-2]

    @property
    def n(self) -> int:
        return self.tokens.shape[-2]

    @property
    def T(self) -> int:
        return self.tokens.shape[-1]

    @property
    def d(self) -> int:
        return self.E.shape[-1]

    @property
    def X(self) -> np.ndarray:
        """Token embeddings :math:`x_{it} = e_{x_{it}}`, shape (n, T, d) or (B, n, T, d)."""
        if self.batched:
            return np.take_along_axis(self.E[:, None], self.tokens[..., None], axis=2)
        return self.E[self.tokens]

    @property
    def Z(self) -> np.ndarray:
        """Queries :math:`z_i = e_{q_i}` (the last token), shape (n, d) or (B, n, d)."""
        return self.X[..., -1, :]

    @property
    def ypos(self) -> np.ndarray:
        """Position of :math:`y_i` in sequence :math:`i`, shape (n,) or (B, n)."""
        return np.argmax(self.tokens == self.y[..., None], axis=-1)


def _int_array(name, x, *, ndim):
    a = np.asarray(x)
    if a.dtype == bool or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    return a.astype(np.int64)


def _trial_index(name, idx, B):
    """Validate a trial selection: a slice, a boolean mask of length ``B`` or integer indices in
    ``[0, B)``; returns something that indexes the leading axis and keeps it."""
    if isinstance(idx, slice):
        return idx
    a = np.asarray(idx)
    if a.dtype == bool:
        if a.shape != (B,):
            raise ValueError(f"{name} as a boolean mask must have shape ({B},), got {a.shape}")
        return a
    if a.ndim == 0:
        a = a[None]
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be a slice, a boolean mask or 1-D integer indices")
    if a.size and (a.min() < 0 or a.max() >= B):
        raise ValueError(f"{name} must index trials in [0, {B}), got {a.tolist()}")
    return a


# ----------------------------------------------------------------------------- generators

def trial_seed(seed, b):
    """The seed of trial ``b`` of a batch generated with ``seed``.

    ``np.random.SeedSequence(seed, spawn_key=(b,))``, i.e. ``SeedSequence(seed).spawn(B)[b]``
    for every ``B > b``; for a named stream ``Stream(s, name)``, ``stream_seed(s, name, b)``.
    Pass it as ``seed`` to get trial ``b`` unbatched.
    """
    seed = _check_seed(seed)
    b = check_int("b", b, minimum=0)
    if isinstance(seed, Stream):
        return stream_seed(seed.seed, seed.name, b)
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=tuple(seed.spawn_key) + (b,))
    return np.random.SeedSequence(seed, spawn_key=(b,))


#: named random streams (name -> key); keys are distinct, a new stream gets a fresh key.
#: The keys of the first streams are those the drivers used before the streams were named, so
#: their draws are unchanged.
STREAMS = {
    "unit-instances": 5,        # unit_instances (data seed)
    "prompt-instances": 6,      # prompt_instances (data)
    "choice-search": 7,         # experiments.convergence.find_choices (random search)
    "scores": 8,                # experiments.rates.score_data, find_trap (data)
    "init": 9,                  # random initial matrices (random_inits)
    "cone-start": 11,           # experiments.convergence.cone_experiment (perturbation)
    "prompt-head-init": 12,     # experiments.selection.prompt_joint (initial head)
}
if len(set(STREAMS.values())) != len(STREAMS):      # pragma: no cover - a table error
    raise RuntimeError("attnsvm.data.STREAMS: two stream names share a key")

#: streams keyed by an entropy tuple: name -> (its key, what draws from it). The keys are those the
#: engine and the drivers used before the table, so their draws are unchanged (``default_rng(b)``
#: and ``default_rng([b])`` are the same generator).
KEYED_STREAMS = {
    "fit-init": ("(seed, b, 0)", "attnsvm.train.fit: the initial parameters of trial b"),
    "fit-noise": ("(seed, b, 1)", "attnsvm.train.fit: the mini-batch and noise seed of trial b"),
    "regpath-start": ("(seed, b, k, i)", "experiments.regpath: start i of instance b at radius k"),
    "geometry-init": ("(b,)", "experiments.geometry.attention_geometry: the initial W of trial b"),
    "dataset-split": ("(seed,)", "attnsvm.datasets: the seeded subsets of the real data sets"),
}


def keyed_stream(name, *key):
    """A ``numpy.random.Generator`` on the keyed stream ``name`` (one of :data:`KEYED_STREAMS`)
    at the entropy key ``key`` (integers >= 0): ``default_rng(list(key))``."""
    if name not in KEYED_STREAMS:
        raise ValueError(f"name must be one of the keyed streams {sorted(KEYED_STREAMS)}, got {name!r}")
    return np.random.default_rng([check_int("key", k, minimum=0) for k in key])


def stream_seed(seed, name, b=None):
    """The ``SeedSequence`` of the named stream ``name`` (of trial ``b``, if given) of ``seed``:
    ``SeedSequence([seed, key])`` or ``SeedSequence([seed, b, key])``, ``key = STREAMS[name]``.
    """
    seed = check_int("seed", seed, minimum=0)
    if name not in STREAMS:
        raise ValueError(f"name must be one of the streams {sorted(STREAMS)}, got {name!r}")
    if b is None:
        return np.random.SeedSequence([seed, STREAMS[name]])
    b = check_int("b", b, minimum=0)
    return np.random.SeedSequence([seed, b, STREAMS[name]])


def stream(seed, name, b=None):
    """A ``numpy.random.Generator`` on the named stream :func:`stream_seed` ``(seed, name, b)``.

    Trial ``b``'s stream does not depend on how many trials are drawn."""
    return np.random.default_rng(stream_seed(seed, name, b))


class Stream(NamedTuple):
    """A named stream of ``seed`` passed as a generator's ``seed``: the unbatched instance is
    drawn from ``stream_seed(seed, name)`` and trial ``b`` from ``stream_seed(seed, name, b)``
    (so trial ``b`` does not depend on the number of trials)."""

    seed: int
    name: str


def _check_seed(seed):
    if isinstance(seed, Stream):
        stream_seed(seed.seed, seed.name)          # validates both
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return seed
    return check_int("seed", seed, minimum=0)


#: name -> generator function; every generator of this module registers itself
GENERATORS = {}


def _generator(fn):
    GENERATORS[fn.__name__] = fn
    return fn


def _generate(one, trials, seed, cls=None, extra=0):
    """Call ``one(rng)`` -> tuple of arrays once (trials None, ``default_rng(seed)``) or once per
    trial (trial ``b`` from ``default_rng(trial_seed(seed, b))``) and wrap the first fields in
    ``cls``. With ``extra > 0`` the last ``extra`` arrays are returned beside the container
    (stacked over trials): ``(data, *extras)``."""
    cls = cls or AttnData
    seed = _check_seed(seed)
    if trials is None:
        parts = one(np.random.default_rng(stream_seed(*seed) if isinstance(seed, Stream)
                                          else seed))
    else:
        B = check_int("trials", trials, minimum=1)
        parts = [np.stack(a) for a in
                 zip(*[one(np.random.default_rng(trial_seed(seed, b))) for b in range(B)])]
    if not extra:
        return cls(*parts)
    return (cls(*parts[:-extra]), *parts[-extra:])


def _unit(rng, shape):
    g = rng.standard_normal(shape)
    return g / np.linalg.norm(g, axis=-1, keepdims=True)


def _signs(rng, n):
    return np.where(rng.standard_normal(n) >= 0, 1.0, -1.0)


def _sizes(n, T, d, *, min_T=2, min_d=1):
    return (check_int("n", n, minimum=1), check_int("T", T, minimum=min_T),
            check_int("d", d, minimum=min_d))


@_generator
def random_unit(n, T, d, *, cross=False, trials=None, seed=0):
    r"""Random unit-norm tokens, queries and head (the setting of "Transformers as SVMs").

    Tokens :math:`x_{it}` and the head :math:`v` are :math:`N(0, I_d)` draws normalized to
    unit length; :math:`y_i = \mathrm{sign}(g_i)` with :math:`g_i \sim N(0,1)`. Queries:
    self-attention :math:`z_i = x_{i1}` (``Z = X[:, 0]``) or, with ``cross=True``, separate
    unit-norm Gaussian draws. Guarantees: unit norms; the optimal tokens are unique and the
    tokens of a sequence are distinct with probability one. Nothing is guaranteed about the
    feasibility of the Att-SVM (it is typically infeasible when :math:`d^2 \ll n(T-1)`).

    Parameters
    ----------
    n, T, d : int
        Sequences (>= 1), tokens per sequence (>= 2), dimension (>= 1).
    cross : bool
        Draw the queries separately (cross-attention).
    trials : int, optional
        Number of independent trials ``B`` (a leading axis); None for one instance.
    seed : int or numpy.random.SeedSequence

    Returns
    -------
    AttnData
    """
    n, T, d = _sizes(n, T, d)

    def one(rng):
        X = _unit(rng, (n, T, d))
        Z = _unit(rng, (n, d)) if cross else X[:, 0].copy()
        return X, _signs(rng, n), Z, _unit(rng, (d,))
    return _generate(one, trials, seed)


def keyed_instances(n, T, d, keys, *, cross=False):
    r"""One :func:`random_unit` instance per entropy key, stacked on a trials axis: trial ``j``
    is ``random_unit(n, T, d, cross=cross, seed=np.random.SeedSequence(keys[j]))`` (the seeding of
    Parts I's sweeps, whose trials are named by tuples such as ``(seed, n, T, d, j)``).

    Parameters
    ----------
    n, T, d : int
    keys : sequence of int or of sequences of int (the entropy of each trial)
    cross : bool
        Queries drawn independently (``True``) or :math:`z_i = x_{i1}` (``False``).

    Returns
    -------
    AttnData (batched)
    """
    keys = list(keys)
    if not keys:
        raise ValueError("keys must name at least one trial")
    return AttnData.stack([random_unit(n, T, d, cross=cross,
                                       seed=np.random.SeedSequence([int(k) for k in np.atleast_1d(key)]))
                           for key in keys])


@renamed(query="cross (a bool: cross=True for query='cross', False for 'self')")
def keyed_instance(n, T, d, *, seed, cross=False):
    r"""One :func:`random_unit` instance from an entropy key: tokens, queries and head drawn
    :math:`N(0, I)` and normalized to unit length, labels :math:`y_i = \pm 1` with probability
    1/2 each (the seeding of Part I's feasibility sweeps, whose instances are named by tuples
    such as ``(seed, n, T, d, j)``).

    Parameters
    ----------
    n, T, d : int
        Sequences, tokens per sequence (>= 2), dimension.
    seed : int or sequence of int
        Entropy of the ``numpy.random.SeedSequence`` passed to :func:`random_unit`.
    cross : bool
        ``False``: :math:`z_i = x_{i1}` (the first token, index 0); ``True``: :math:`z_i`
        drawn independently (unit length).

    Returns
    -------
    AttnData (unbatched)
    """
    key = [int(k) for k in np.atleast_1d(seed)]
    return random_unit(n, T, d, cross=check_bool("cross", cross), seed=np.random.SeedSequence(key))


@renamed(query="cross (a bool: cross=True for query='cross', False for 'self')")
def keyed_trials(n, T, d, trials, *, seed, cross=False):
    """``trials`` instances of :func:`keyed_instance`, trial ``j`` from the key ``(*seed, j)``,
    stacked as a batched ``AttnData`` (trial ``j`` does not depend on ``trials``)."""
    trials = check_int("trials", trials, minimum=1)
    key = tuple(np.atleast_1d(seed).tolist())
    return keyed_instances(n, T, d, [key + (j,) for j in range(trials)],
                           cross=check_bool("cross", cross))


@renamed(query="cross (a bool: cross=True for query='cross', False for 'self')")
def sized_trials(n, T, d, *, trials=1, seed=0, cross=True):
    r""":func:`random_unit` instances (the setting of "Transformers as SVMs") whose seed also
    names their size: the data seed is ``numpy.random.SeedSequence([seed, n, T, d])``, so
    instances of different sizes are independent, and trial ``b`` does not depend on
    ``trials`` (the seeding of Chapter 4). ``cross=True`` draws the queries separately,
    ``cross=False`` sets :math:`z_i = x_{i1}` (token 0).

    Returns
    -------
    AttnData, batched (``trials`` trials).
    """
    n = check_int("n", n, minimum=1)
    T = check_int("T", T, minimum=2)
    d = check_int("d", d, minimum=1)
    trials = check_int("trials", trials, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    return random_unit(n, T, d, cross=check_bool("cross", cross), trials=trials,
                       seed=np.random.SeedSequence([seed, n, T, d]))


def random_inits(d, trials, *, radius, seed=0):
    r"""``trials`` Gaussian matrices (trials, d, d) rescaled to Frobenius norm ``radius``, from
    the named stream ``"init"`` of ``seed`` (the random initializations of Part III)."""
    rng = stream(seed, "init")
    W = rng.standard_normal((trials, d, d))
    return radius * W / np.linalg.norm(W, axis=(-2, -1), keepdims=True)


@_generator
def score_gap(n, T, d, *, gap=0.5, noise=0.5, cross=False, trials=None, seed=0):
    r"""One optimal token per sequence with a score gap; the other tokens are noise.

    The head :math:`v` is a uniform unit vector and :math:`y_i = \pm 1` with probability
    1/2. In sequence :math:`i` a position :math:`o_i` (uniform) holds the optimal token

    .. math::

        x_{io_i} = y_i\, v + \mathrm{noise}\cdot \xi_{io_i}, \qquad
        x_{it} = s_{it}\, y_i\, v + \mathrm{noise}\cdot \xi_{it}\ (t \ne o_i),\quad
        s_{it} \sim \mathrm{U}[-1, 1 - \mathrm{gap}],

    where the :math:`\xi_{it}` are uniform unit vectors orthogonal to :math:`v`. Guarantees
    (exact, for every draw): :math:`\gamma_{io_i} = 1` and
    :math:`\gamma_{it} = s_{it} \le 1 - \mathrm{gap}` for :math:`t \ne o_i`, so
    :math:`\mathrm{opt}_i = o_i` with
    :math:`\gamma_{i\,\mathrm{opt}_i} - \gamma_{it} \ge \mathrm{gap}`;
    :math:`\|x_{it}\|^2 = s_{it}^2 + \mathrm{noise}^2` (:math:`s = 1` for the optimal
    token), so all tokens have norm at most :math:`\sqrt{1 + \mathrm{noise}^2}`; the noise is
    orthogonal to :math:`v` and does not change the scores. Queries: :math:`z_i = x_{i1}`
    (self-attention) or, with ``cross=True``, uniform unit vectors. Feasibility of the
    Att-SVM is not guaranteed in general (see :func:`overparameterized`).

    Parameters
    ----------
    n, T, d : int
        ``d >= 2`` (the noise lives in the complement of :math:`v`).
    gap : float in (0, 2]
    noise : float >= 0
    cross, trials, seed : as in :func:`random_unit`

    Returns
    -------
    AttnData
    """
    n, T, d = _sizes(n, T, d, min_d=2)
    gap = check_positive("gap", gap)
    if gap > 2:
        raise ValueError(f"gap must be in (0, 2], got {gap}")
    noise = check_positive("noise", noise, allow_zero=True)

    def one(rng):
        v = _unit(rng, (d,))
        y = _signs(rng, n)
        o = rng.integers(0, T, size=n)
        s = rng.uniform(-1.0, 1.0 - gap, size=(n, T))
        s[np.arange(n), o] = 1.0
        xi = rng.standard_normal((n, T, d))
        xi -= (xi @ v)[..., None] * v
        xi /= np.linalg.norm(xi, axis=-1, keepdims=True)
        X = (s * y[:, None])[..., None] * v + noise * xi
        Z = _unit(rng, (n, d)) if cross else X[:, 0].copy()
        return X, y, Z, v
    return _generate(one, trials, seed)


@_generator
def orthogonal(n, T, d, *, cross=False, jitter=0.0, trials=None, seed=0):
    r"""Mutually orthonormal tokens (``d >= n*T``), with a closed-form Att-SVM.

    The :math:`nT` tokens are the columns of a uniformly random :math:`d \times nT` matrix
    with orthonormal columns; :math:`v` is a uniform unit vector, :math:`y_i = \pm1`; queries
    :math:`z_i = x_{i1}` (self-attention) or uniform unit vectors (``cross=True``).

    Guarantee (``jitter=0``): for every choice :math:`\alpha` the Att-SVM is feasible and

    .. math::

        W^{\alpha}_{mm} = \sum_i \frac{(x_{i\alpha_i} - \bar x_i)\, z_i^\top}{\|z_i\|^2},
        \qquad \bar x_i = \tfrac1T \sum_t x_{it},\qquad
        \|W^{\alpha}_{mm}\|_F^2 = \frac{T-1}{T} \sum_i \|z_i\|^{-2},

    with all :math:`n(T-1)` constraints active and equal multipliers
    :math:`\lambda_{it} = 1/(T\|z_i\|^2)` (the Gram matrix is block diagonal with blocks
    :math:`\|z_i\|^2 (I + 11^\top)`). In self-attention the queries are orthonormal too and
    the nuclear-norm solution has the same value, :math:`\|W^*_{mm}\|_* = n\sqrt{(T-1)/T}`.
    With ``jitter > 0`` every token gets an independent :math:`N(0, \mathrm{jitter}^2 I/d)`
    perturbation and is renormalized: the tokens are near-orthogonal and the formulas hold
    only approximately.

    Parameters
    ----------
    n, T, d : int
        ``d >= n * T``.
    cross : bool
    jitter : float >= 0
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    AttnData
    """
    n, T, d = _sizes(n, T, d)
    if d < n * T:
        raise ValueError(f"d must be >= n*T = {n * T} for orthogonal tokens, got d = {d}")
    jitter = check_positive("jitter", jitter, allow_zero=True)

    def one(rng):
        Q, R = np.linalg.qr(rng.standard_normal((d, n * T)))
        Q = Q * np.sign(np.diag(R))            # Haar-distributed orthonormal columns
        X = Q.T.reshape(n, T, d)
        if jitter > 0:
            X = X + jitter * rng.standard_normal((n, T, d)) / np.sqrt(d)
            X /= np.linalg.norm(X, axis=-1, keepdims=True)
        Z = _unit(rng, (n, d)) if cross else X[:, 0].copy()
        return X, _signs(rng, n), Z, _unit(rng, (d,))
    return _generate(one, trials, seed)


@_generator
def overparameterized(n, T, d, *, cross=False, trials=None, seed=0):
    r"""The over-parameterized regime ``d >= n``: random unit tokens as in :func:`random_unit`.

    Guarantee: with probability one the queries :math:`z_1, \dots, z_n` are linearly
    independent and the tokens of each sequence are distinct unit vectors. Then the Att-SVM
    :math:`W^{\alpha}_{mm}` is feasible for **every** choice :math:`\alpha`: with the dual
    basis :math:`\tilde z_i^\top z_j = \delta_{ij}`, the matrix
    :math:`W = c \sum_i x_{i\alpha_i} \tilde z_i^\top` has margins
    :math:`c\,(1 - x_{i\alpha_i}^\top x_{it}) > 0`, which are :math:`\ge 1` for large
    :math:`c`. (Feasibility for all :math:`\alpha` is what makes the optimization landscape
    free of infeasible directions; statements about global convergence are the rates
    chapter's.)

    Parameters
    ----------
    n, T, d : int
        ``d >= n``.
    cross, trials, seed : as in :func:`random_unit`

    Returns
    -------
    AttnData
    """
    n, T, d = _sizes(n, T, d)
    if d < n:
        raise ValueError(f"d must be >= n = {n} in the over-parameterized regime, got d = {d}")
    return random_unit(n, T, d, cross=cross, trials=trials, seed=seed)


@_generator
def prompt_2d(n=2, T=3, *, min_gap=0.1, trials=None, seed=0, max_tries=1000):
    r"""A small 2-D prompt-attention instance for trajectory pictures (``d = 2``).

    Tokens are :math:`N(0, I_2)`, :math:`v` a uniform unit vector, :math:`y_i = \pm1`.
    Draws are repeated (deterministically, from the same stream) until (a) in every sequence
    the best score beats the second best by at least ``min_gap`` and (b) the prompt SVM
    :math:`p_{mm}` for ``opt`` is feasible (:func:`attnsvm.svm.p_svm`). Guarantees: both
    (a) and (b). Prompt attention does not use queries: ``Z`` is set to the first tokens
    ``X[:, 0]`` only so that the container is valid; ignore it.

    Parameters
    ----------
    n : int, 1 <= n <= 5 (intended 2..3)
    T : int, 2 <= T <= 8 (intended 2..7)
    min_gap : float > 0
    trials, seed : as in :func:`random_unit`
    max_tries : int
        Give up (RuntimeError) after this many draws.

    Returns
    -------
    AttnData with d = 2
    """
    n = check_int("n", n, minimum=1)
    T = check_int("T", T, minimum=2)
    if n > 5:
        raise ValueError(f"n must be <= 5 for a 2-D picture, got {n}")
    if T > 8:
        raise ValueError(f"T must be <= 8 for a 2-D picture, got {T}")
    min_gap = check_positive("min_gap", min_gap)
    max_tries = check_int("max_tries", max_tries, minimum=1)

    def one(rng):
        for _ in range(max_tries):
            X = rng.standard_normal((n, T, 2))
            y = _signs(rng, n)
            v = _unit(rng, (2,))
            g = np.sort(token_scores(X, y, v), axis=-1)
            if np.min(g[:, -1] - g[:, -2]) < min_gap:
                continue
            if not _prompt_feasible(X, optimal_tokens(X, y, v)):
                continue
            return X, y, X[:, 0].copy(), v
        raise RuntimeError(f"no feasible 2-D instance with n={n}, T={T} in {max_tries} draws")
    return _generate(one, trials, seed)


def _prompt_feasible(X, opt):
    r"""Whether some prompt :math:`p` has :math:`(x_{i,\mathrm{opt}_i} - x_{it})^\top p \ge 1` for
    all :math:`i, t \ne \mathrm{opt}_i` (the constraints of :func:`attnsvm.svm.p_svm`): a
    feasibility linear program (HiGHS)."""
    n, T, d = X.shape
    D = (X[np.arange(n), opt][:, None, :] - X).reshape(n * T, d)
    keep = np.ones((n, T), dtype=bool)
    keep[np.arange(n), opt] = False
    res = linprog(np.zeros(d), A_ub=-D[keep.ravel()], b_ub=-np.ones(int(keep.sum())),
                  bounds=[(None, None)] * d, method="highs")
    if res.status not in (0, 2):
        raise RuntimeError(f"the prompt feasibility program failed: {res.message}")
    return res.status == 0


@_generator
def separable(n, d, *, margin=0.1, trials=None, seed=0):
    r"""Linearly separable data with a planted margin (Part I).

    A planted unit direction :math:`w_\star` (uniform, stored as ``w_star``), labels
    :math:`y_i = \pm 1` with probability 1/2, and

    .. math::

        x_i = P^\perp g_i + y_i\,(\mathrm{margin} + |w_\star^\top g_i|)\, w_\star,
        \qquad g_i \sim N(0, I_d/d),\quad P^\perp = I - w_\star w_\star^\top,

    so :math:`\|x_i\| \approx 1` for large :math:`d`. Guarantee (exact, for every draw):
    :math:`y_i w_\star^\top x_i \ge \mathrm{margin}` for all :math:`i`; hence the data are
    separable through the origin, the max-margin classifier exists with geometric margin
    :math:`1/\|w_{mm}\| \ge \mathrm{margin}`, i.e. :math:`\|w_{mm}\| \le 1/\mathrm{margin}`.

    Parameters
    ----------
    n, d : int >= 1
    margin : float > 0
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    LinearData (with ``w_star``)
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    margin = check_positive("margin", margin)

    def one(rng):
        w = _unit(rng, (d,))
        y = _signs(rng, n)
        g = rng.standard_normal((n, d)) / np.sqrt(d)
        proj = g @ w
        X = g - proj[:, None] * w + (y * (margin + np.abs(proj)))[:, None] * w
        return X, y, w
    return _generate(one, trials, seed, LinearData)


@_generator
def prescribed_scores(n, T, d, *, gamma_opt=1.0, gamma_other=0.0, distinct=False, spread=0.8,
                      queries="uniform", trials=None, seed=0):
    r"""Attention instances with prescribed token scores (cross-attention queries).

    Token :math:`x_{it} = P_{v^\perp} g_{it} + y_i c_{it} v` with
    :math:`g_{it}\sim N(0, I_d/d)`, the head :math:`v = e_1` (the first coordinate axis),
    uniform unit queries :math:`z_i`, labels :math:`y_i = \pm 1` and a uniform optimal position
    :math:`\mathrm{opt}_i`. The model is invariant under a rotation of the token space
    (:math:`x \mapsto Rx`, :math:`v \mapsto Rv`, :math:`W \mapsto RW`), so this is the law of a
    uniform unit head up to that rotation; fixing :math:`v = e_1` makes the scores exact in
    floating point: :math:`x_{it,1} = y_i c_{it}` and :math:`P_{v^\perp} g_{it}` is
    :math:`g_{it}` with its first coordinate set to :math:`0`, so every term of
    :math:`\sum_k x_{it,k} v_k` but one is an exact zero and
    :math:`y_i\, x_{it}^\top v = y_i^2 c_{it} = c_{it}` holds with ``==`` (a uniform random
    head made them equal only to about :math:`10^{-16}`, which at saturation outweighs the
    gradient terms the equal-score theorems rest on: ``notes/paper_claims.md``).
    Guarantee (exact, for every draw): the token scores are
    :math:`\gamma_{it} = c_{it}` with :math:`c_{i,\mathrm{opt}_i} = \gamma^\star`
    (``gamma_opt``) and, for the other tokens, :math:`\gamma^\circ` (``gamma_other``, the
    equal-score model, ``distinct=False``) or, with ``distinct=True``, values drawn uniformly in
    :math:`[\gamma^\circ, \gamma^\circ + \mathrm{spread}\,(\gamma^\star - \gamma^\circ)]`.
    With ``queries="orthogonal"`` the queries are distinct coordinate axes with random signs
    (exactly orthonormal, :math:`\langle z_i, z_j\rangle = \delta_{ij}`; the law of the
    problem is invariant under a common rotation of tokens, head and queries, so this is a
    uniformly rotated orthonormal frame up to that rotation), so that
    :math:`\langle A_{it}, A_{js}\rangle = \langle x_{i,\mathrm{opt}_i} - x_{it},
    x_{j,\mathrm{opt}_j} - x_{js}\rangle\langle z_i, z_j\rangle = 0` for :math:`i \ne j`
    (the cross-sequence condition of the book's global-convergence theorem); every other draw is
    the one of ``queries="uniform"``.

    Parameters
    ----------
    n, T, d : int
        ``d >= 2``; ``d >= n`` with ``queries="orthogonal"``.
    gamma_opt, gamma_other : float or array_like (n,), ``gamma_opt > gamma_other``
        Numbers (the same scores in every sequence) or per-sequence arrays (heterogeneous scores
        :math:`\gamma^\star_i`, :math:`\gamma^\circ_i`).
    distinct : bool
    spread : float in (0, 1)
    queries : {"uniform", "orthogonal"}
        Uniform unit queries (default), or orthonormal ones (drawn after all other arrays, so
        the tokens, head, labels and optimal positions are those of ``"uniform"``).
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    data : AttnData
    opt : ndarray of int, shape (n,) or (trials, n): the optimal positions
    """
    n, T, d = _sizes(n, T, d, min_d=2)
    if queries not in ("uniform", "orthogonal"):
        raise ValueError(f"queries must be 'uniform' or 'orthogonal', got {queries!r}")
    if queries == "orthogonal" and d < n:
        raise ValueError(f"queries='orthogonal' needs d >= n (n orthonormal queries in R^d), "
                         f"got d = {d} < n = {n}")
    try:
        g_opt = np.broadcast_to(np.asarray(gamma_opt, dtype=float), (n,)).copy()
        g_oth = np.broadcast_to(np.asarray(gamma_other, dtype=float), (n,)).copy()
    except ValueError as exc:
        raise ValueError(f"gamma_opt and gamma_other must be numbers or arrays of shape ({n},), "
                         f"got {gamma_opt!r} and {gamma_other!r}") from exc
    if not (np.all(np.isfinite(g_opt)) and np.all(np.isfinite(g_oth))):
        raise ValueError(f"gamma_opt and gamma_other must be finite, got {gamma_opt!r}, {gamma_other!r}")
    if not np.all(g_opt > g_oth):
        raise ValueError(f"gamma_opt must exceed gamma_other, got {gamma_opt} <= {gamma_other}")
    if not 0 < spread < 1:
        raise ValueError(f"spread must be in (0, 1), got {spread}")

    def one(rng):
        v = np.zeros(d)
        v[0] = 1.0                                          # the head e_1: exact scores
        X = rng.standard_normal((n, T, d)) / np.sqrt(d)     # P_{v^perp} g: coordinate 0 below
        y = rng.choice([-1.0, 1.0], size=n)
        opt = rng.integers(T, size=n)
        c = np.repeat(g_oth[:, None], T, axis=1)
        if distinct:
            c = g_oth[:, None] + spread * (g_opt - g_oth)[:, None] * rng.uniform(size=(n, T))
        np.put_along_axis(c, opt[:, None], g_opt[:, None], axis=-1)
        X[..., 0] = y[:, None] * c                          # y_i x_it . e_1 = c_it exactly
        Z = rng.standard_normal((n, d))
        if queries == "orthogonal":                        # signed distinct coordinate axes
            Z = np.zeros((n, d))
            Z[np.arange(n), rng.permutation(d)[:n]] = _signs(rng, n)
        Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
        return X, y, Z, v, opt.astype(np.int64)
    return _generate(one, trials, seed, extra=1)


@_generator
def planted_token(n, T, d, *, signal=1.0, trials=None, seed=0):
    r"""Gaussian tokens with one planted label-carrying token per sequence (joint training).

    Every token is :math:`N(0, I_d/d)`; in sequence :math:`i` the token at a uniform position
    :math:`r_i` gets :math:`y_i\,\mathrm{signal}\,\mu` added, with a uniform unit vector
    :math:`\mu` (one per instance); queries :math:`z_i \sim N(0, I_d/d)` are drawn separately;
    :math:`y_i = \pm 1`. The head is :math:`v = 0` (the start of joint training; the container
    then has no optimal tokens).

    Parameters
    ----------
    n, T, d : int
    signal : float >= 0
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    data : AttnData (``v = 0``)
    planted : ndarray of int, shape (n,) or (trials, n): the positions :math:`r_i`
    """
    n, T, d = _sizes(n, T, d)
    signal = check_positive("signal", signal, allow_zero=True)

    def one(rng):
        X = rng.standard_normal((n, T, d)) / np.sqrt(d)
        Z = rng.standard_normal((n, d)) / np.sqrt(d)
        y = _signs(rng, n)
        mu = _unit(rng, (d,))
        r = rng.integers(0, T, size=n)
        X[np.arange(n), r] += signal * y[:, None] * mu
        return X, y, Z, np.zeros(d), r.astype(np.int64)
    return _generate(one, trials, seed, extra=1)


@_generator
def planted_prompt(n, T, d, *, gap=0.5, noise=0.1, trials=None, seed=0):
    r"""A planted selection model for prompt attention with score gap ``gap``.

    With the *key* direction :math:`a = e_1` and the *label* direction :math:`b = e_2`
    (so ``d >= 2``), sequence :math:`i` has one relevant token
    :math:`x = a + y_i b + \sigma\xi`, one distractor :math:`x = (1 - \mathrm{gap})\, y_i b +
    \sigma\xi` and :math:`T - 2` background tokens :math:`x = c\, y_i b + \sigma \xi` with
    :math:`c \sim U[0, 1 - \mathrm{gap}]` (:math:`c = 0` when ``gap >= 1``), all
    :math:`\xi \sim N(0, I_d)`, at random positions; :math:`v = b`. Without noise the token
    scores are :math:`1` (relevant), :math:`1 - \mathrm{gap}` (distractor) and at most
    :math:`1 - \mathrm{gap}` (background), so the score gap
    :math:`\gamma_{i,\mathrm{opt}_i} - \max_{t\ne\mathrm{opt}_i}\gamma_{it}` is ``gap``; with
    noise :math:`\sigma` (``noise``) it is ``gap`` up to :math:`O(\sigma)`.

    Parameters
    ----------
    n, T, d : int
        ``d >= 2``.
    gap : float > 0
    noise : float >= 0
    trials, seed : as in :func:`random_unit`

    Returns
    -------
    data : AttnData (``Z`` is unused by prompt attention; it holds the key direction)
    planted : ndarray of int, shape (n,) or (trials, n): the position of the relevant token
    """
    n, T, d = _sizes(n, T, d, min_d=2)
    gap = check_positive("gap", gap)
    noise = check_positive("noise", noise, allow_zero=True)
    a, bvec = np.eye(d)[0], np.eye(d)[1]

    def one(rng):
        y = _signs(rng, n)
        c = np.empty((n, T))
        c[:, 0] = 1.0
        c[:, 1] = 1.0 - gap
        c[:, 2:] = rng.uniform(0.0, 1.0 - gap, size=(n, T - 2)) if gap < 1 else 0.0
        X = (c * y[:, None])[..., None] * bvec + noise * rng.standard_normal((n, T, d))
        X[:, 0] += a
        perm = np.argsort(rng.random((n, T)), axis=1)
        X = np.take_along_axis(X, perm[..., None], axis=1)
        planted = np.argmax(perm == 0, axis=1).astype(np.int64)
        return X, y, np.broadcast_to(a, (n, d)).copy(), bvec.copy(), planted
    return _generate(one, trials, seed, extra=1)


def unit_instances(n, T, d, *, trials=1, seed=0):
    r"""Random instances in the setting of "Transformers as SVMs": tokens, queries and head
    uniform unit vectors, random signs, queries drawn separately (cross-attention).

    :func:`random_unit` with ``cross=True`` on the named data stream
    ``"unit-instances"`` of ``seed``; trial ``b`` does not depend on ``trials``.

    Returns
    -------
    AttnData, batched with ``trials`` trials.
    """
    trials = check_int("trials", trials, minimum=1)
    return random_unit(n, T, d, cross=True, trials=trials,
                       seed=stream_seed(seed, "unit-instances"))


def prompt_instances(n, T, d, *, trials=1, gap=0.5, noise=0.1, seed=0):
    r"""The planted prompt-attention model :func:`planted_prompt` (score gap
    ``gap``, noise ``noise``), batched with ``trials`` trials, on the named data stream
    ``"prompt-instances"`` of ``seed``.

    Returns
    -------
    data : AttnData (``Z`` is unused by prompt attention; it holds the key direction)
    planted : ndarray of int, shape (trials, n): the position of the relevant token
    """
    trials = check_int("trials", trials, minimum=1)
    return planted_prompt(n, T, d, gap=gap, noise=noise, trials=trials,
                          seed=Stream(seed, "prompt-instances"))


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

@dataclass(frozen=True)
class NTPData(TrialsData):
    r"""Next-token-prediction data with a linear decoder (Chapter 15): context embeddings ``H``
    (m, d) (rows :math:`h_j`), next-token distributions ``P`` (m, V) (rows :math:`p_j`, support
    :math:`S_j = \{z : p_{jz} > 0\}`) and context frequencies ``pi`` (m,), optionally with a
    leading trials axis."""

    H: np.ndarray
    P: np.ndarray
    pi: np.ndarray

    _lead, _ndim = "H", 2

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
    prng = np.random.default_rng(check_int("pattern_seed", pattern_seed, minimum=0))
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
    seed = _check_seed(seed)
    if trials is None:
        P, pi = one(np.random.default_rng(stream_seed(*seed) if isinstance(seed, Stream)
                                          else seed))
    else:
        B = check_int("trials", trials, minimum=1)
        P, pi = (np.stack(a) for a in
                 zip(*[one(np.random.default_rng(trial_seed(seed, b))) for b in range(B)]))
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
