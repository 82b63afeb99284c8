"""The data containers: a base with an optional leading trials axis, and the attention,
linear-classification and next-token containers."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .._checks import as_float_array
from ..tokens import optimal_tokens, token_scores


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
