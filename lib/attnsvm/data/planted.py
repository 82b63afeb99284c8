"""Attention instances with planted structure: exact token scores, a planted token, a planted
prompt, two-dimensional prompt pictures."""
from __future__ import annotations


import numpy as np
from scipy.optimize import linprog

from .._checks import check_int, check_positive
from ..tokens import optimal_tokens, token_scores
from .attention import _signs, _sizes, _unit
from .seeding import Stream, _generate, _generator


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


def score_instances(n, T, d, *, trials=1, gamma_opt=1.0, gamma_other=0.0, distinct=False,
                    spread=0.8, queries="uniform", seed=0):
    r"""The prescribed-score model :func:`prescribed_scores` of Part III, batched with ``trials``
    trials, on the named data stream ``"scores"`` of ``seed`` (trial ``b`` does not depend on
    ``trials``). The token scores are exactly :math:`\gamma^\star` (``gamma_opt``) at the
    optimal position and :math:`\gamma^\circ` (``gamma_other``) elsewhere (the equal-score model,
    book: ``def-equal-scores``), or, with ``distinct=True``, distinct values in
    :math:`[\gamma^\circ, \gamma^\circ + \mathrm{spread}\,(\gamma^\star - \gamma^\circ)]`;
    numbers or per-sequence arrays (n,). ``queries="orthogonal"`` draws orthonormal queries (needs
    ``d >= n``): then :math:`\langle A_{it}, A_{js}\rangle = 0` for :math:`i \ne j`, the
    cross-sequence condition (Cx) of the global-convergence theorem
    (:func:`attnsvm.bounds.cross_gram_min`).

    Returns
    -------
    data : AttnData, batched (trials, n, T, d)
    opt : ndarray (trials, n) int
    """
    trials = check_int("trials", trials, minimum=1)
    return prescribed_scores(n, T, d, gamma_opt=gamma_opt, gamma_other=gamma_other,
                             distinct=distinct, spread=spread, queries=queries, trials=trials,
                             seed=Stream(seed, "scores"))
