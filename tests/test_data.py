"""Tests for attnsvm.data: shapes, seeds, batching, and each generator's guarantees."""
import itertools

import numpy as np
import pytest

from attnsvm.data import (AttnData, LinearData, orthogonal, overparameterized, prompt_2d,
                          random_unit, score_gap, separable, trial_seed)
from attnsvm.svm import att_svm, linear_svm, p_svm
from attnsvm.tokens import optimal_tokens

GENS = {
    "random_unit": lambda **k: random_unit(4, 3, 5, **k),
    "random_unit_cross": lambda **k: random_unit(4, 3, 5, cross=True, **k),
    "score_gap": lambda **k: score_gap(4, 5, 6, gap=0.3, **k),
    "orthogonal": lambda **k: orthogonal(3, 4, 13, **k),
    "overparameterized": lambda **k: overparameterized(3, 4, 5, **k),
    "prompt_2d": lambda **k: prompt_2d(3, 5, **k),
}


@pytest.mark.parametrize("name", GENS)
def test_shapes_dtype_and_seeds(name):
    gen = GENS[name]
    D = gen(seed=3)
    n, T, d = D.X.shape
    assert isinstance(D, AttnData) and not D.batched
    assert D.y.shape == (n,) and D.Z.shape == (n, d) and D.v.shape == (d,)
    assert all(a.dtype == np.float64 for a in (D.X, D.y, D.Z, D.v))
    assert set(np.unique(D.y)) <= {-1.0, 1.0}
    D2 = gen(seed=3)
    np.testing.assert_array_equal(D.X, D2.X)
    assert not np.array_equal(D.X, gen(seed=4).X)
    assert D.opt.shape == (n,)


@pytest.mark.parametrize("name", GENS)
def test_batched_trial_independent_of_B(name):
    gen = GENS[name]
    big, small = gen(trials=5, seed=11), gen(trials=2, seed=11)
    assert big.batched and big.trials == 5 and big.X.shape[0] == 5
    for b in range(2):
        for f in ("X", "y", "Z", "v"):
            np.testing.assert_array_equal(getattr(big.trial(b), f), getattr(small.trial(b), f))
    one = gen(seed=trial_seed(11, 3))
    for f in ("X", "y", "Z", "v"):
        np.testing.assert_array_equal(getattr(big.trial(3), f), getattr(one, f))
    assert not np.array_equal(big.X[0], big.X[1])
    assert big.opt.shape == (5, big.n)


def test_trial_seed_matches_spawn():
    kids = np.random.SeedSequence(5).spawn(4)
    for b in range(4):
        a = np.random.default_rng(kids[b]).standard_normal(3)
        np.testing.assert_array_equal(a, np.random.default_rng(trial_seed(5, b)).standard_normal(3))


def test_random_unit_norms_and_self_attention():
    D = random_unit(6, 4, 7, seed=0)
    np.testing.assert_allclose(np.linalg.norm(D.X, axis=-1), 1)
    np.testing.assert_allclose(np.linalg.norm(D.v), 1)
    np.testing.assert_array_equal(D.Z, D.X[:, 0])
    C = random_unit(6, 4, 7, cross=True, seed=0)
    np.testing.assert_allclose(np.linalg.norm(C.Z, axis=-1), 1)
    assert not np.allclose(C.Z, C.X[:, 0])


@pytest.mark.parametrize("gap, noise", [(0.2, 0.5), (1.0, 0.0), (2.0, 1.0)])
def test_score_gap_guarantee(gap, noise):
    D = score_gap(50, 6, 8, gap=gap, noise=noise, trials=3, seed=1)
    g = D.gamma
    top = np.sort(g, axis=-1)
    np.testing.assert_allclose(top[..., -1], 1.0, atol=1e-12)
    assert np.all(top[..., -1] - top[..., -2] >= gap - 1e-12)
    np.testing.assert_allclose(np.linalg.norm(D.X, axis=-1) ** 2, (g ** 2) + noise ** 2, atol=1e-12)
    assert len(np.unique(D.opt)) > 1          # the optimal position varies


def test_orthogonal_guarantees():
    D = orthogonal(3, 4, 12, seed=2)
    F = D.X.reshape(12, 12)
    np.testing.assert_allclose(F @ F.T, np.eye(12), atol=1e-12)
    J = orthogonal(3, 4, 20, jitter=0.1, seed=2)
    G = J.X.reshape(12, 20)
    off = G @ G.T - np.eye(12)
    assert 0 < np.abs(off).max() < 0.5
    with pytest.raises(ValueError, match="d"):
        orthogonal(3, 4, 11)


def test_overparameterized_every_alpha_feasible():
    D = overparameterized(3, 3, 3, seed=5)
    for alpha in itertools.product(range(3), repeat=3):
        W = att_svm(D.X, D.Z, np.array(alpha))
        assert np.isfinite(W).all()
    with pytest.raises(ValueError, match="d must be >= n"):
        overparameterized(5, 3, 4)


def test_prompt_2d_guarantees():
    for n, T in [(2, 2), (2, 3), (3, 7)]:
        D = prompt_2d(n, T, seed=1)
        assert D.X.shape == (n, T, 2)
        g = np.sort(D.gamma, axis=-1)
        assert np.all(g[:, -1] - g[:, -2] >= 0.1)
        p = p_svm(D.X, D.opt)
        assert p.shape == (2,)
    with pytest.raises(ValueError, match="n"):
        prompt_2d(9, 3)
    with pytest.raises(ValueError, match="T"):
        prompt_2d(2, 1)


def test_separable_margin():
    L = separable(60, 7, margin=0.25, trials=3, seed=0)
    assert isinstance(L, LinearData) and L.X.shape == (3, 60, 7) and L.w_star.shape == (3, 7)
    np.testing.assert_allclose(np.linalg.norm(L.w_star, axis=-1), 1)
    assert np.all(L.y * np.einsum("bnd,bd->bn", L.X, L.w_star) >= 0.25 - 1e-12)
    t = L.trial(1)
    np.testing.assert_array_equal(t.w_star, L.w_star[1])
    w = linear_svm(t.X, t.y)
    assert np.linalg.norm(w) <= 1 / 0.25 + 1e-9
    one = separable(60, 7, margin=0.25, seed=trial_seed(0, 1))
    np.testing.assert_array_equal(one.X, t.X)
    with pytest.raises(ValueError, match="margin"):
        separable(5, 2, margin=0)


def test_containers_backward_compatible():
    X = np.zeros((2, 3, 4))
    X[:, :, 0] = np.arange(3)
    D = AttnData(X, [1, -1], np.ones((2, 4)), np.eye(4)[0])
    assert (D.n, D.T, D.d, D.trials) == (2, 3, 4, 1)
    S = AttnData.stack([D, D])
    assert S.trials == 2 and S.trial(1).n == 2
    np.testing.assert_array_equal(D.opt, optimal_tokens(X, [1, -1], np.eye(4)[0]))
    L = LinearData(np.ones((3, 2)), [1, 1, -1])
    assert L.w_star is None and L.n == 3
    with pytest.raises(ValueError, match="w_star"):
        LinearData(np.ones((3, 2)), [1, 1, -1], np.ones(3))


@pytest.mark.parametrize("call, match", [
    (lambda: random_unit(0, 3, 2), "n"),
    (lambda: random_unit(2, 1, 2), "T"),
    (lambda: random_unit(2, 3, 0), "d"),
    (lambda: random_unit(2, 3, 2, trials=0), "trials"),
    (lambda: random_unit(2, 3, 2, seed=-1), "seed"),
    (lambda: random_unit(2, 3, 2, seed=1.5), "seed"),
    (lambda: score_gap(2, 3, 2, gap=3), "gap"),
    (lambda: score_gap(2, 3, 2, noise=-1), "noise"),
    (lambda: score_gap(2, 3, 1), "d"),
    (lambda: orthogonal(2, 3, 6, jitter=-0.1), "jitter"),
    (lambda: separable(0, 3), "n"),
])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
