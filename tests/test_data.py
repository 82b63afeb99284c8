"""Tests for attnsvm.data: shapes, seeds, batching, and each generator's guarantees."""
import itertools

import numpy as np
import pytest

from attnsvm.data import (AttnData, LinearData, orthogonal, overparameterized, prompt_2d,
                          random_unit, score_gap, separable, trial_seed)
from attnsvm import data as _data_module
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


# ----------------------------------------------------------------------------- seeding contract
#: sizes for every generator of attnsvm.data.GENERATORS; a generator missing here fails the
#: contract test below, so a new generator cannot skip the seeding contract
CONTRACT_ARGS = {
    "random_unit": dict(n=4, T=3, d=5),
    "score_gap": dict(n=4, T=5, d=6, gap=0.3),
    "orthogonal": dict(n=3, T=4, d=13),
    "overparameterized": dict(n=3, T=4, d=5),
    "prompt_2d": dict(n=3, T=5),
    "separable": dict(n=7, d=4),
    "prescribed_scores": dict(n=4, T=5, d=6, distinct=True),
    "planted_token": dict(n=4, T=5, d=6),
    "planted_prompt": dict(n=4, T=5, d=3),
    "ntp_sequences": dict(n=5, K=6, T=3),
    "ntp_synthetic": dict(m=3, V=6, d=5),
    "ntp_patterns": dict(m=6, V=7, n_patterns=2),
    "ntp_corpus": dict(k=1, vocab_size=10),
}

#: outputs (by position) that a generator draws once, not per trial (the support patterns of
#: ntp_patterns come from ``pattern_seed``): the same in every call, without a trials axis
SHARED = {"ntp_patterns": (2,)}


def _arrays(out, shared=()):
    """All per-trial arrays of a generator's output (the container's fields, then any extras;
    the outputs at the positions ``shared`` are left out)."""
    parts = out if isinstance(out, tuple) else (out,)
    arrays = []
    for k, p in enumerate(parts):
        if k in shared:
            continue
        if isinstance(p, _data_module.Corpus):
            p = p.data
        if isinstance(p, _data_module.TrialsData):
            arrays += [a for a in p._fields() if a is not None]
        else:
            arrays.append(np.asarray(p))
    return arrays


def test_every_public_generator_is_registered():
    from attnsvm import data
    # keyed_*/sized_trials: random_unit under the entropy-key seedings of Parts I's sweeps and
    # of Chapter 4 (their own contract: test_keyed_and_sized_trials_do_not_depend_on_trials)
    helpers = {"trial_seed", "stream", "stream_seed", "keyed_stream", "draw_rngs", "support_patterns",
               "support_sets", "zen_of_python", "tokenize",
               "keyed_instances", "keyed_instance", "keyed_trials", "sized_trials",
               # the chapters' named draws: registered generators on a named stream (same arrays
               # as the driver functions they replace: tests/test_data.py::test_named_draws)
               "unit_instances", "prompt_instances", "score_instances", "random_inits"}
    public = {n for n in data.__all__ if callable(getattr(data, n)) and n not in helpers
              and not isinstance(getattr(data, n), type)}
    assert public == set(data.GENERATORS)
    assert set(CONTRACT_ARGS) == set(data.GENERATORS), "add the new generator to CONTRACT_ARGS"


def test_named_draws():
    """The chapters' named draws (moved from the drivers into attnsvm.data) are their generators on
    a named stream, trial b does not depend on trials, and they give the arrays the driver
    functions gave before the move (values pinned from experiments.selection.unit_instances,
    prompt_instances and experiments.rates.random_inits at commit 4f808f0)."""
    from attnsvm import data
    u = data.unit_instances(4, 5, 6, trials=3, seed=2)
    np.testing.assert_allclose(u.X[2, 1, 3, :3], [0.59744164, -0.48976139, 0.02503219], atol=1e-8)
    np.testing.assert_allclose(u.v[1, :3], [-0.0586755, 0.25943948, 0.40323951], atol=1e-8)
    ref = data.random_unit(4, 5, 6, cross=True, trials=3, seed=data.stream_seed(2, "unit-instances"))
    np.testing.assert_array_equal(u.X, ref.X)
    np.testing.assert_array_equal(data.unit_instances(4, 5, 6, trials=1, seed=2).X[0], u.X[0])
    p, planted = data.prompt_instances(4, 3, 2, trials=2, gap=0.5, noise=0.15, seed=1)
    np.testing.assert_allclose(p.X[1, 2], [[0.12321842, -0.42677939], [-0.03278653, 0.05130103],
                                           [1.0679957, -0.73609078]], atol=1e-8)
    assert planted.tolist() == [[1, 0, 0, 0], [0, 0, 2, 2]]
    W = data.random_inits(5, 2, radius=3.0, seed=4)
    np.testing.assert_allclose(W[1, 2, :3], [1.40038813, -0.78008679, -0.08711253], atol=1e-8)
    np.testing.assert_allclose(np.linalg.norm(W, axis=(-2, -1)), 3.0, rtol=1e-12)
    # Part III's draws (experiments.rates.score_data before issue 28): prescribed_scores on "scores"
    sc, opt = data.score_instances(3, 4, 5, trials=3, seed=2, queries="orthogonal")
    ref, ref_opt = data.prescribed_scores(3, 4, 5, trials=3, queries="orthogonal",
                                          seed=data.Stream(2, "scores"))
    np.testing.assert_array_equal(sc.X, ref.X)
    np.testing.assert_array_equal(opt, ref_opt)
    one, _ = data.score_instances(3, 4, 5, trials=1, seed=2, queries="orthogonal")
    np.testing.assert_array_equal(one.X[0], sc.X[0])


def _generator_calls(path):
    """Lines of a module that make a numpy generator or seed numpy's global state (calls of
    ``default_rng``, ``RandomState``, ``np.random.seed``), read with ``ast``."""
    import ast
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            owner = getattr(getattr(f, "value", None), "attr", None)
            if name in ("default_rng", "RandomState") or (name == "seed" and owner == "random"):
                out.append(node.lineno)
    return out


def test_every_draw_goes_through_the_seeding_module(tmp_path):
    """One seeding scheme: no module of lib/attnsvm but the seeding module attnsvm.data.seeding
    makes a numpy generator or seeds the global numpy state; every stream is in STREAMS or
    KEYED_STREAMS, and the table of the book's page on the library lists them all."""
    from pathlib import Path
    import attnsvm
    from attnsvm import data
    lib = Path(attnsvm.__file__).resolve().parent
    seeding = lib / "data" / "seeding.py"
    assert _generator_calls(seeding), "the seeding module makes the generators"
    bad = [f"{p.relative_to(lib)}:{k}" for p in sorted(lib.rglob("*.py")) if p.resolve() != seeding
           for k in _generator_calls(p)]
    assert not bad, f"random generators made outside attnsvm.data.seeding: {bad}"
    planted = tmp_path / "m.py"
    planted.write_text("import numpy as np\nrng = np.random.default_rng(3)\n# default_rng( in a comment\n")
    assert _generator_calls(planted) == [2]
    page = (lib.parents[1] / "book" / "using_library.md").read_text()     # the seeding contract
    missing = [n for n in list(data.STREAMS) + list(data.KEYED_STREAMS) if f"`{n}`" not in page]
    assert not missing, f"streams missing from the table of book/using_library.md: {missing}"
    with pytest.raises(ValueError, match="keyed streams"):
        data.keyed_stream("no-such-stream", 1)
    np.testing.assert_array_equal(data.keyed_stream("fit-init", 3, 1, 0).standard_normal(4),
                                  np.random.default_rng([3, 1, 0]).standard_normal(4))


def test_keyed_and_sized_trials_do_not_depend_on_trials():
    """Trial j of keyed_trials is keyed_instance at key (*seed, j); trial b of sized_trials does
    not depend on trials, and instances of other sizes are other draws."""
    from attnsvm import data
    four = data.keyed_trials(3, 4, 5, 4, seed=(7, 3))
    for j in range(4):
        alone = data.keyed_instance(3, 4, 5, seed=(7, 3, j))
        np.testing.assert_array_equal(four.X[j], alone.X)
        np.testing.assert_array_equal(four.y[j], alone.y)
    assert not np.array_equal(four.X[0], four.X[1])
    one, three = data.sized_trials(3, 4, 5, trials=1, seed=2), data.sized_trials(3, 4, 5, trials=3, seed=2)
    np.testing.assert_array_equal(one.X[0], three.X[0])
    other = data.sized_trials(3, 4, 6, trials=1, seed=2)
    assert not np.allclose(one.X[0][..., :5], other.X[0][..., :5])


@pytest.mark.parametrize("seed", [7, _data_module.Stream(7, "scores")], ids=["int", "stream"])
@pytest.mark.parametrize("name", sorted(_data_module.GENERATORS))
def test_trial_zero_does_not_depend_on_trials(name, seed):
    from attnsvm import data
    assert name in CONTRACT_ARGS, f"generator {name} has no entry in CONTRACT_ARGS"
    gen, kw, sh = data.GENERATORS[name], CONTRACT_ARGS[name], SHARED.get(name, ())
    one, four = _arrays(gen(trials=1, seed=seed, **kw), sh), _arrays(gen(trials=4, seed=seed, **kw), sh)
    assert len(one) == len(four)
    for a, b in zip(one, four):
        assert a.shape[0] == 1 and b.shape[0] == 4
        np.testing.assert_array_equal(a[0], b[0])
    # the trials differ (the streams are independent), and the seed matters
    assert not np.array_equal(four[0][0], four[0][1])
    assert not np.array_equal(one[0], _arrays(gen(trials=1, seed=8, **kw), sh)[0])
    # a trial drawn alone from its trial seed is the same trial
    alone = _arrays(gen(seed=data.trial_seed(seed, 2), **kw), sh)
    for a, b in zip(alone, four):
        np.testing.assert_array_equal(a, b[2])
    # what is drawn once is the same whatever the trials and the seed
    for k in sh:
        np.testing.assert_array_equal(gen(trials=1, seed=seed, **kw)[k], gen(trials=4, seed=8, **kw)[k])


def test_containers_share_the_trials_base():
    """take/trial/stack come from one base class and agree for every container."""
    from attnsvm import data
    items = [data.random_unit(3, 4, 5, trials=4, seed=1), data.separable(5, 3, trials=4, seed=1),
             data.ntp_sequences(4, 6, 3, trials=4, seed=1), data.ntp_synthetic(3, 6, 5, trials=4, seed=1)]
    for D in items:
        assert isinstance(D, data.TrialsData) and D.batched and D.trials == 4
        sub = D.take([2, 0])
        assert type(sub) is type(D) and sub.trials == 2
        for a, b in zip(sub.trial(0)._fields(), D.trial(2)._fields()):
            np.testing.assert_array_equal(a, b)
        back = type(D).stack([D.trial(b) for b in range(4)])
        for a, b in zip(back._fields(), D._fields()):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ValueError, match="b must be in"):
            D.trial(4)
        with pytest.raises(ValueError, match="needs batched data"):
            D.trial(0).take([0])


@pytest.mark.parametrize("kw", [
    dict(gamma_opt=1.5, gamma_other=-0.5),
    dict(),                                                    # the rates chapters' default
    dict(gamma_opt=[1.0, 2.0, 0.3, 1e-3, 7.0], gamma_other=[0.0, -1.0, 0.1, -1e-3, 3.3]),
    dict(distinct=True, gamma_opt=0.7, gamma_other=-0.2),
    dict(queries="orthogonal", gamma_opt=0.1),
])
def test_prescribed_scores_exact_scores(kw):
    """The scores y_i x_it . v equal the prescribed c_it with ``==`` (not to a tolerance): the
    equal-score theorems rest on equal scores, and at saturation a 1e-16 difference outweighs
    the gradient terms they compare (notes/paper_claims.md). The same instance rotated by a
    random rotation (same law) misses ``==`` in most scores, so the check can fail."""
    from attnsvm import tokens
    from attnsvm.data import prescribed_scores
    n = 5
    D, opt = prescribed_scores(n, 4, 6, trials=40, seed=2, **kw)
    for g in (D.gamma, tokens.token_scores(D.X, D.y, D.v),
              D.y[..., None] * np.einsum("bntd,bd->bnt", D.X, D.v)):
        top = np.take_along_axis(g, opt[..., None], -1)[..., 0]
        assert np.all(top == np.broadcast_to(np.asarray(kw.get("gamma_opt", 1.0), float), (n,)))
        mask = np.ones_like(g, dtype=bool)
        np.put_along_axis(mask, opt[..., None], False, axis=-1)
        if not kw.get("distinct"):
            other = np.broadcast_to(np.asarray(kw.get("gamma_other", 0.0), float), (n,))
            assert np.all(g == np.where(mask, other[:, None], g))
    assert np.all(D.v == np.eye(6)[0]) and np.all(D.y ** 2 == 1.0)
    np.testing.assert_array_equal(D.opt, opt)
    R = np.linalg.qr(np.random.default_rng(0).standard_normal((6, 6)))[0]
    g_rot = tokens.token_scores(D.X @ R.T, D.y, D.v @ R.T)
    np.testing.assert_allclose(g_rot, D.gamma, atol=1e-12)
    assert np.mean(g_rot != D.gamma) > 0.3                     # a rotation breaks ==


def test_prescribed_scores_bad_gammas():
    from attnsvm.data import prescribed_scores
    with pytest.raises(ValueError, match="gamma_opt"):
        prescribed_scores(3, 3, 3, gamma_opt=0.0, gamma_other=0.0)


def test_planted_generators():
    from attnsvm.data import planted_prompt, planted_token
    D, r = planted_token(5, 4, 6, signal=3.0, trials=2, seed=1)
    assert np.all(D.v == 0) and r.shape == (2, 5)
    P, planted = planted_prompt(5, 4, 3, gap=0.5, noise=0.0, trials=2, seed=1)
    np.testing.assert_array_equal(P.opt, planted)         # without noise, the relevant token wins
    np.testing.assert_allclose(P.X[np.arange(2)[:, None], np.arange(5), planted][..., 0], 1.0)


def test_take_keeps_the_trials_axis():
    D = random_unit(3, 4, 5, trials=5, seed=0)
    sub = D.take([3, 1])
    assert sub.trials == 2 and sub.batched
    np.testing.assert_array_equal(sub.X[0], D.X[3])
    np.testing.assert_array_equal(D.take(np.arange(5) % 2 == 0).X, D.X[::2])
    np.testing.assert_array_equal(D.take(slice(1, 3)).y, D.y[1:3])
    np.testing.assert_array_equal(D.take(4).Z, D.Z[4:5])
    with pytest.raises(ValueError, match="idx"):
        D.take([5])
    with pytest.raises(ValueError, match="idx"):
        D.take(np.ones(3, dtype=bool))
    with pytest.raises(ValueError, match="batched"):
        D.trial(0).take([0])
    L = separable(4, 3, trials=3, seed=0).take([2])
    assert L.trials == 1 and L.w_star.shape == (1, 3)


def test_named_streams():
    from attnsvm.data import STREAMS, stream, stream_seed
    a = stream(3, "init").standard_normal(4)
    np.testing.assert_array_equal(a, np.random.default_rng([3, STREAMS["init"]]).standard_normal(4))
    assert not np.array_equal(stream(3, "init", 0).standard_normal(4),
                              stream(3, "init", 1).standard_normal(4))
    assert not np.array_equal(a, stream(3, "cone-start").standard_normal(4))
    assert len(set(STREAMS.values())) == len(STREAMS)
    with pytest.raises(ValueError, match="name"):
        stream_seed(0, "no-such-stream")
