"""Tests of the chapter "Beyond a single token" (book/ch07_beyond.md)."""
import numpy as np
import pytest

import attnsvm.metrics as M
import attnsvm.svm as svm
import attnsvm.data as A_data
import attnsvm.metrics as A_metrics
from attnsvm.experiments import beyond as BY


@pytest.fixture(scope="module")
def inst():
    data = A_data.unit_instances(4, 5, 8, trials=1, seed=7).trial(0)
    sets = [(0, 1), (2,), (1, 3), (4,)]
    return data.X, data.Z, sets


def _scores(X, Z, W):
    return np.einsum("ntd,nd->nt", X, Z @ W.T)


def test_generalized_svm_constraints_and_rank(inst):
    X, Z, sets = inst
    W = svm.att_svm(X, Z, sets)
    a = _scores(X, Z, W)
    for i, s in enumerate(sets):
        assert np.ptp(a[i, list(s)]) < 1e-6
        out = [t for t in range(X.shape[1]) if t not in s]
        assert a[i, list(s)].min() - a[i, out].max() >= 1 - 1e-6
    assert svm.rank(W) <= X.shape[0]


def test_singletons_reduce_to_single_token_svm(inst):
    X, Z, _ = inst
    alpha = np.array([0, 2, 3, 4])
    W1 = svm.att_svm(X, Z, [(int(t),) for t in alpha])
    W2 = svm.att_svm(X, Z, alpha)
    assert np.allclose(W1, W2, atol=1e-6 * np.abs(W2).max())


def test_sufficient_direction_selects_sets(inst):
    X, Z, sets = inst
    W = svm.att_svm(X, Z, sets)
    for c in (1.0, 5.0, 20.0):
        s = M.attention(X, c * W, Z)
        for i, st in enumerate(sets):
            assert np.ptp(s[i, list(st)]) < 1e-6
            out = [t for t in range(X.shape[1]) if t not in st]
            assert np.all(s[i, out] <= np.exp(-c) / len(st) * (1 + 1e-6))


def test_necessary_mass_only_on_ties(inst):
    X, Z, sets = inst
    Wbar = svm.att_svm(X, Z, sets)
    B = np.random.default_rng(0).standard_normal(Wbar.shape)      # bounded part
    a = _scores(X, Z, Wbar)
    tied = np.isclose(a, a.max(1, keepdims=True), atol=1e-6)
    masses = [M.attention(X, c * Wbar + B, Z) for c in (10.0, 100.0, 1000.0)]
    assert np.all(masses[-1][~tied] < 1e-100)
    assert np.all(masses[-1][tied] > 1e-3)
    assert np.all(masses[-1][~tied] <= masses[0][~tied] + 1e-300)


def test_selected_sets_and_prediction_rule():
    X = np.zeros((1, 2, 3, 2))
    X[0, 0] = [[1, 0], [1, 0.01], [0, 1]]
    X[0, 1] = [[0, 0], [2, 0], [0, 2]]
    Z = np.tile(np.array([1.0, 0.0]), (1, 2, 1))
    W = 10 * np.eye(2)[None]
    sets = A_metrics.selected_sets(X, W, Z, mass_tol=1e-3)
    assert sets == [[(0, 1), (1,)]]
    with pytest.raises(ValueError):
        A_metrics.selected_sets(X, W, Z, mass_tol=1.5)


def test_linear_head_all_predicted_and_mlp_generalized_closer():
    data = A_data.unit_instances(6, 8, 10, trials=4, seed=0)
    lin = BY.multi_token_selection(data, head="linear", steps=1500, device="cpu")
    assert lin.fraction_predicted == 1.0
    assert np.all(lin.set_sizes == 1)
    mlp = BY.multi_token_selection(data, head="mlp", width=20, steps=1500, mass_tol=0.01,
                                  device="cpu")
    ok = mlp.feasible & mlp.feasible_single
    assert ok.any()
    assert np.all(mlp.corr_gen[-1][ok] >= mlp.corr_single[-1][ok] - 1e-9)
    # the prediction rule is exactly "feasible and corr >= threshold"
    assert np.array_equal(mlp.predicted, mlp.feasible & (np.nan_to_num(mlp.corr_gen[-1], nan=-1) >= 0.95))


def test_multi_token_summary_is_nan_safe_and_consistent():
    data = A_data.unit_instances(4, 5, 6, trials=3, seed=0)
    r = BY.multi_token_selection(data, head="linear", optimizer="ngd", lr=0.1, steps=60, seed=0,
                                device="cpu")
    s = r.summary()
    assert s["frac_pred"] == r.fraction_predicted
    assert s["n_unresolved"] + s["n_infeasible"] + int(r.feasible.sum()) == 3
    assert 1 <= s["mean_set_size"] <= 5 and s["norm_growth"] > 0
    r.corr_gen[-1] = np.nan                          # no generalized SVM anywhere: NaN, no warning
    assert np.isnan(r.summary()["corr_gen"])


def test_set_of_all_tokens_gives_equalities_only(inst):
    """A sequence whose set holds all T tokens contributes only equal scores (no margin row):
    the solution equals a direct cvxpy solve of that problem, and the equalities bind (the SVM
    of the other sequences alone violates them). Every set full: a clear error."""
    import cvxpy as cp

    X, Z, sets = inst
    n, T, d = X.shape
    full = [tuple(range(T))] + list(sets[1:])
    W = svm.att_svm(X, Z, full)
    a = _scores(X, Z, W)
    assert np.ptp(a[0]) < 1e-7 * np.abs(a).max()
    for i, s in enumerate(full[1:], start=1):
        out = [t for t in range(T) if t not in s]
        assert np.ptp(a[i, list(s)]) < 1e-6 and a[i, list(s)].min() - a[i, out].max() >= 1 - 1e-6
    V = cp.Variable((d, d))
    sc = lambda i, t: X[i, t] @ V @ Z[i]  # noqa: E731
    cons = [sc(0, t) == sc(0, 0) for t in range(1, T)]
    for i, s in enumerate(full[1:], start=1):
        cons += [sc(i, u) == sc(i, s[0]) for u in s[1:]]
        cons += [sc(i, u) - sc(i, t) >= 1 for u in s for t in range(T) if t not in s]
    cp.Problem(cp.Minimize(cp.sum_squares(V)), cons).solve(solver="CLARABEL")
    np.testing.assert_allclose(W, V.value, atol=1e-6 * np.abs(W).max())
    W_rest = svm.att_svm(X[1:], Z[1:], list(sets[1:]))
    assert np.ptp(_scores(X[:1], Z[:1], W_rest)) > 1e-3                   # the equalities bind
    with pytest.raises(ValueError, match="every set"):
        svm.att_svm(X, Z, [tuple(range(T))] * n)


def test_multi_token_horizons_summary_and_claims():
    """The horizon study: one run per (d, horizon) from the same instances and initializations
    (the short run is the start of the long one), position-keyed summary, claims that follow the
    numbers (and fail when the rate falls)."""
    kw = dict(head="mlp", mass_tol=0.01, device="cpu")
    r = BY.multi_token_horizons(3, 4, (4, 6), trials=3, horizons=(40, 200), **kw)
    s = r.summary()
    assert (s["horizon_short"], s["horizon_long"], s["d_0"], s["d_1"]) == (40, 200, 4, 6)
    assert s["trials"] == 3 and s["n_instances"] == 6
    direct = BY.multi_token_selection(A_data.unit_instances(3, 4, 6, trials=3, seed=0), steps=200, **kw)
    np.testing.assert_array_equal(direct.predicted, r.runs[6][200].predicted)
    np.testing.assert_allclose(direct.history.params["W"], r.runs[6][200].history.params["W"])
    both = np.concatenate([r.runs[d][200].predicted for d in (4, 6)])
    assert s["frac_pred_long"] == pytest.approx(both.mean())
    c = r.claims()
    assert c["rate_rises"][0] == (s["frac_pred_long"] > s["frac_pred_short"])
    for d in (4, 6):                                  # force a falling rate: the claims fail
        r.runs[d][40].predicted[:] = True
        r.runs[d][200].predicted[:] = False
    assert not r.claims()["rate_rises"][0] and not r.claims()["rate_rises_each_d"][0]
    with pytest.raises(ValueError, match="horizons"):
        BY.multi_token_horizons(3, 4, (4,), trials=1, horizons=(200, 40), **kw)


def test_run_claims_hold_and_can_fail():
    """MultiTokenRun.claims(): linear head, single-token sets; ReLU head, most instances keep a
    larger set, the generalized SVM is mostly at least as close as the single-token one but
    clears the threshold on fewer, and the norm grows slower than with the linear head. Each
    fails when its numbers are set against it."""
    data = A_data.unit_instances(6, 8, 10, trials=4, seed=0)
    lin = BY.multi_token_selection(data, head="linear", steps=1500, device="cpu")
    mlp = BY.multi_token_selection(data, head="mlp", width=20, steps=1500, mass_tol=0.01,
                                  device="cpu")
    assert list(lin.claims()) == ["sets_single"] and lin.claims()["sets_single"][0]
    c = mlp.claims(control=lin)
    assert set(c) == {"most_multi", "gen_mostly_closer", "threshold_partial", "norm_grows_slower"}
    assert all(h for h, _ in c.values()), c
    assert "norm_grows_slower" not in mlp.claims()
    assert not mlp.claims(control=mlp)["norm_grows_slower"][0]     # no slower than itself
    lin.set_sizes[0, 0] = 2
    assert not lin.claims()["sets_single"][0]
    mlp.predicted[:] = True
    assert not mlp.claims()["threshold_partial"][0]
    mlp.corr_gen[-1] = mlp.corr_single[-1] - 0.1
    assert not mlp.claims()["gen_mostly_closer"][0]
    mlp.set_sizes[:] = 1
    assert not mlp.claims()["most_multi"][0]
