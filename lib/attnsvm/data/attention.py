"""Attention instances: unit-norm, score-gap, orthogonal and over-parameterized draws, the
entropy-key seedings of Part I and Chapter 4, the chapters' named draws."""
from __future__ import annotations


import numpy as np

from .._checks import check_bool, check_int, check_positive, renamed
from .containers import AttnData
from .seeding import _generate, _generator, stream, stream_seed


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
