"""Chapter 2 (the attention model and the Att-SVM): every statement, checked numerically."""
import numpy as np
import pytest

from attnsvm import tokens
from attnsvm import svm
from attnsvm.experiments import feasibility
import attnsvm.data as A_data


def _inst(n, T, d, seed, cross=False):
    data = A_data.keyed_instance(n, T, d, seed=seed, cross=cross)
    return data, tokens.optimal_tokens(data.X, data.y, data.v)


@pytest.mark.parametrize("n,T,d", [(3, 4, 5), (6, 3, 4), (4, 5, 3)])
def test_lifted_features_linear_svm(n, T, d):
    """ch02-prop-lifted: the Att-SVM is the hard-margin SVM without bias on vec(A_it)."""
    data, opt = _inst(n, T, d, seed=(1, n, T, d))
    A, idx = tokens.lifted_features(data.X, data.Z, opt)
    assert A.shape == (n * (T - 1), d, d)
    W = svm.att_svm(data.X, data.Z, opt)
    # <A_it, W> = (x_opt - x_t)^T W z_i
    direct = np.array([(data.X[i, opt[i]] - data.X[i, t]) @ W @ data.Z[i] for i, t in idx])
    assert np.allclose(np.einsum("kab,ab->k", A, W), direct, atol=1e-12)
    w = svm.linear_svm(A.reshape(len(A), -1), np.ones(len(A)))
    assert np.allclose(w.reshape(d, d), W, atol=1e-7 * np.linalg.norm(W))


@pytest.mark.parametrize("seed", range(4))
def test_kkt_representation_rank_and_duality(seed):
    """ch02-thm-dual: W_mm = sum lam A, lam >= 0, slackness, zero duality gap,
    weak duality for random feasible multipliers, rank <= dim span{z_i} <= n."""
    n, T, d = 5, 4, 8
    data, opt = _inst(n, T, d, seed=(2, seed))
    W, lam = svm.att_svm(data.X, data.Z, opt, return_dual=True)
    A, idx = tokens.lifted_features(data.X, data.Z, opt)
    lk = lam[idx[:, 0], idx[:, 1]]
    assert np.all(lk >= 0)
    assert np.allclose(np.einsum("k,kab->ab", lk, A), W, atol=1e-8 * np.linalg.norm(W))
    mg = np.einsum("kab,ab->k", A, W)
    assert mg.min() >= 1 - 1e-9
    assert np.max(lk * (mg - 1)) < 1e-7 * lk.max()
    primal = 0.5 * np.sum(W * W)
    dual = lk.sum() - 0.5 * np.sum(np.einsum("k,kab->ab", lk, A) ** 2)
    assert abs(primal - dual) < 1e-7 * primal
    rng = np.random.default_rng(seed)
    for _ in range(20):                                   # weak duality: D(mu) <= P for mu >= 0
        mu = rng.random(len(lk)) * rng.random() * 2 * lk.max()
        D = mu.sum() - 0.5 * np.sum(np.einsum("k,kab->ab", mu, A) ** 2)
        assert D <= primal + 1e-9
    assert svm.rank(W) <= min(n, d)
    assert svm.rank(W) == n          # generic: every sequence has a support token (observed)


def test_rank_bound_distinct_queries_and_projection():
    """ch02-prop-rank: rank(W_mm) <= dim span{z_i}; W_mm = W_mm P_z (and P_U W_mm = W_mm);
    with one shared query the solution has rank one, also for the nuclear norm."""
    n, T, d = 6, 4, 7
    for s in range(50):                  # repeated queries can make the SVM infeasible: skip those
        data, opt = _inst(n, T, d, seed=(3, s), cross=True)
        Z = data.Z.copy()
        Z[3:] = Z[[0, 1, 2]]                              # only 3 distinct queries
        Z1 = np.repeat(data.Z[:1], n, axis=0)             # one shared query
        try:
            svm.att_svm(data.X, Z, opt), svm.att_svm(data.X, Z1, opt)
            break
        except svm.InfeasibleError:
            continue
    for Zq, r in ((Z, 3), (Z1, 1)):
        W = svm.att_svm(data.X, Zq, opt)
        Pz = Zq.T @ np.linalg.pinv(Zq.T)                  # projector onto span{z_i}
        assert np.allclose(W @ Pz, W, atol=1e-9 * np.linalg.norm(W))
        assert svm.rank(W) == r
        Wn = svm.att_svm(data.X, Zq, opt, norm="nuc")
        assert svm.rank(Wn) <= r
    W = svm.att_svm(data.X, data.Z, opt)
    D = np.concatenate([data.X[i, opt[i]] - data.X[i] for i in range(n)])   # token differences
    PU = D.T @ np.linalg.pinv(D.T)
    assert np.allclose(PU @ W, W, atol=1e-9 * np.linalg.norm(W))


def test_nuclear_projection_keeps_feasible_and_norm():
    """ch02-prop-rank for the nuclear norm: W* P_z is feasible with no larger nuclear norm."""
    n, T, d = 3, 4, 6
    data, opt = _inst(n, T, d, seed=4)
    Wn = svm.att_svm(data.X, data.Z, opt, norm="nuc")
    Pz = data.Z.T @ np.linalg.pinv(data.Z.T)
    A, _ = tokens.lifted_features(data.X, data.Z, opt)
    WP = Wn @ Pz
    assert np.einsum("kab,ab->k", A, WP).min() >= 1 - 1e-7
    assert np.linalg.norm(WP, "nuc") <= np.linalg.norm(Wn, "nuc") * (1 + 1e-7)
    assert svm.rank(Wn) <= n


@pytest.mark.parametrize("n,T,d", [(3, 3, 3), (4, 2, 4), (2, 6, 5), (5, 5, 6)])
def test_linear_independence_implies_feasible(n, T, d):
    """ch02-prop-feasible-indep and ch02-cor-generic: n <= d and T <= d + 1 give independent A_it,
    and then W = lstsq(<A_k, W> = 1) is feasible; the SVM solver agrees."""
    for s in range(5):
        data, opt = _inst(n, T, d, seed=(5, n, T, d, s))
        A, _ = tokens.lifted_features(data.X, data.Z, opt)
        F = A.reshape(len(A), -1)
        assert np.linalg.matrix_rank(F) == len(A)
        W = np.linalg.lstsq(F, np.ones(len(A)), rcond=None)[0]
        assert np.allclose(F @ W, 1.0, atol=1e-9)
        svm.att_svm(data.X, data.Z, opt)                  # does not raise


def test_dependent_features_can_be_infeasible_or_feasible():
    """The condition of ch02-prop-feasible-indep is sufficient, not necessary: with n > d many
    instances stay feasible although the A_it are dependent (counted here)."""
    feas = 0
    for s in range(20):
        data, opt = _inst(12, 3, 3, seed=(6, s))
        A, _ = tokens.lifted_features(data.X, data.Z, opt)
        assert np.linalg.matrix_rank(A.reshape(len(A), -1)) < len(A)      # 24 > d^2 = 9
        try:
            svm.att_svm(data.X, data.Z, opt)
            feas += 1
        except svm.InfeasibleError:
            pass
    assert 0 < feas < 20


def test_d1_feasible_iff_signs_agree():
    """ch02-prop-d1: for d = 1 the SVM is feasible iff all y_i z_i have the same sign."""
    rng = np.random.default_rng(7)
    seen = {True: 0, False: 0}
    for s in range(60):
        n, T = rng.integers(1, 5), rng.integers(2, 5)
        X = rng.standard_normal((n, T, 1))
        Z = rng.standard_normal((n, 1))
        y = rng.choice([-1.0, 1.0], n)
        v = np.array([rng.choice([-1.0, 1.0]) * (0.5 + rng.random())])
        opt = tokens.optimal_tokens(X, y, v)
        predicted = len(set(np.sign(y * Z[:, 0]))) == 1
        try:
            W = svm.att_svm(X, Z, opt)
            ok = True
            assert np.sign(W[0, 0]) == np.sign(y[0] * Z[0, 0] * v[0])
        except svm.InfeasibleError:
            ok = False
        assert ok == predicted
        seen[ok] += 1
    assert seen[True] > 5 and seen[False] > 5


@pytest.mark.parametrize("d,T", [(3, 2), (5, 4)])
def test_flipped_label_copy_is_infeasible(d, T):
    """ch02-prop-conflict: a sequence and its copy with the opposite label (same query)."""
    data, opt = _inst(2, T, d, seed=(8, d))
    X = np.concatenate([data.X[:1], data.X[:1]])
    Z = np.concatenate([data.Z[:1], data.Z[:1]])
    y = np.array([data.y[0], -data.y[0]])
    opt = tokens.optimal_tokens(X, y, data.v)
    assert opt[0] != opt[1]
    with pytest.raises(svm.InfeasibleError):
        svm.att_svm(X, Z, opt)
    svm.att_svm(X[:1], Z[:1], opt[:1])                    # each alone is feasible


def test_sweep_is_tidy_and_counts_infeasible_separately():
    res = feasibility.feasibility_sweep([2, 8], [4], [2, 3, 8], 6, seed=1, nuclear=True)
    s, p = res.per_point, res.per_instance
    assert len(s["n"]) == 6 and len(p["n"]) == 36
    assert np.all(s["feasible"] + s["infeasible"] + s["ties"] == s["instances"])
    assert np.all(p["rank_fro"][~p["feasible"]] == -1)
    for k in range(6):
        m = (p["n"] == s["n"][k]) & (p["d"] == s["d"][k]) & p["feasible"]
        if m.any():
            assert s["rank_fro_mean"][k] == pytest.approx(p["rank_fro"][m].mean())
            assert s["rank_fro_max"][k] <= s["rank_bound"][k]
            assert s["rank_nuc_max"][k] <= s["rank_bound"][k]
        else:
            assert np.isnan(s["rank_fro_mean"][k])
    # ch02-cor-generic: n <= d and T <= d + 1 -> always feasible
    sure = (s["n"] <= s["d"]) & (s["T"] <= s["d"] + 1)
    assert np.all(s["feasible_frac"][sure] == 1.0)
    assert s["feasible_frac"][(s["n"] == 8) & (s["d"] == 2)][0] < 1.0
    # rank threshold well separated
    f = p["feasible"]
    assert np.nanmax(p["left_fro"][f]) < 1e-8 and np.nanmin(p["kept_fro"][f]) > 1e-4
    # instances do not depend on the grid
    again = feasibility.feasibility_sweep([8], [4], [3], 6, seed=1)
    m = (p["n"] == 8) & (p["d"] == 3)
    assert np.array_equal(again.per_instance["feasible"], p["feasible"][m])
    x, y = res.curve("d", "feasible_frac", n=8)
    assert list(x) == [2, 3, 8]


def test_study_summary_states_the_chapter_claims():
    # the headline numbers the chapter glues: every guaranteed point (n <= d, T <= d + 1) is fully
    # feasible and no feasible instance has rank above min(n, d); empty reductions are NaN
    st = feasibility.feasibility_study([2, 4], 4, 4, [2, 4], [2, 4, 6], 4, n_rank=4, T_rank=4,
                                       ds_rank=[3, 6], trials_rank=3, seed=2)
    s = st.summary()
    assert s["sure_points"] > 0 and s["sure_feasible"] == s["sure_points"]
    assert s["rank_violations"] == 0
    assert s["rank_total"] == 6 and 0 <= s["rank_infeasible"] <= 6
    assert s["full_d_nmax"] == st.over_n.first_full_d(4)
    empty = feasibility.SweepResult(st.ranks.per_point, {k: v[:0] for k, v in
                                                         st.ranks.per_instance.items()}, {})
    assert np.isnan(empty.summary()["left_nuc_max"]) and empty.summary()["total"] == 0


def test_study_claims_hold_and_can_fail():
    """FeasibilityStudy.claims() on a small study: all hold; each fails when its numbers are set
    against it (a guaranteed point made infeasible, the first point made feasible, a singular
    value left out near the cut, a rank above the bound, the nuclear ranks set to the Frobenius
    ones, a Frobenius rank one below the bound)."""
    st = feasibility.feasibility_study([2, 8], 4, 4, [2, 4], [2, 6], 6, n_rank=4, T_rank=6,
                                       ds_rank=[3, 8], trials_rank=4, seed=0)
    c = st.claims()
    assert set(c) == {"sure_all_feasible", "feasibility_fades", "rank_bound_holds",
                      "rank_cut_clean", "fro_on_bound", "nuc_lower"}
    assert all(h for h, _ in c.values()), c
    on, rk = st.over_n.per_point, st.ranks.per_point
    frac = on["feasible_frac"].copy()
    on["feasible_frac"][st.over_n.sure_points()] = 0.5
    assert not st.claims()["sure_all_feasible"][0]
    on["feasible_frac"][:] = 1.0
    assert not st.claims()["feasibility_fades"][0]
    on["feasible_frac"][:] = frac
    pi = st.ranks.per_instance
    f = np.flatnonzero(pi["feasible"])[0]
    kept0, left0 = pi["kept_nuc"][f], pi["left_nuc"][f]
    pi["kept_nuc"][f], pi["left_nuc"][f] = 2e-6, 1e-7      # a gap of 20 around rtol 1e-6
    assert not st.claims()["rank_cut_clean"][0]
    pi["kept_nuc"][f], pi["left_nuc"][f] = kept0, left0
    pi["rank_fro"][f] = 99
    assert not st.claims()["rank_bound_holds"][0]
    big = st.ranks.rows(d=8)
    rk["rank_nuc_mean"][big] = rk["rank_fro_mean"][big]
    assert not st.claims()["nuc_lower"][0]
    rk["rank_fro_mean"][big] -= 1
    assert not st.claims()["fro_on_bound"][0]
