"""Chapter 3 (the regularization path): every statement, checked numerically."""
import numpy as np
import pytest

import attnsvm as A
from attnsvm import tokens
from attnsvm import losses, metrics, svm
from attnsvm import path
from attnsvm.experiments import regpath
import attnsvm.data as A_data


def _inst(n, T, d, seed, B=None):
    if B is None:
        data = A_data.keyed_instance(n, T, d, seed=seed)
    else:
        data = A_data.keyed_trials(n, T, d, B, seed=seed)
    return data, tokens.optimal_tokens(data.X, data.y, data.v)


def _outputs(W, data):
    S = metrics.attention(data.X, W, data.Z)                     # (n, T)
    gam = tokens.token_scores(data.X, data.y, data.v)
    return (S * gam).sum(-1), gam


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_output_sandwich(scale):
    """ch03-lem-output: gamma* - Dbar S/(1+S) <= y f <= gamma* - delta S/(1+S)."""
    data, opt = _inst(5, 4, 6, seed=10)
    rng = np.random.default_rng(0)
    n = 5
    for _ in range(20):
        W = rng.standard_normal((6, 6)) * scale
        u, gam = _outputs(W, data)
        gs = gam[np.arange(n), opt]
        A, idx = tokens.lifted_features(data.X, data.Z, opt)
        m = np.einsum("kab,ab->k", A, W)
        S = np.zeros(n)
        np.add.at(S, idx[:, 0], np.exp(-m))
        gaps = (gs[:, None] - gam)[idx[:, 0], idx[:, 1]]
        delta, Dbar = gaps.min(), gaps.max()
        frac = S / (1 + S)
        assert np.all(u >= gs - Dbar * frac - 1e-12)
        assert np.all(u <= gs - delta * frac + 1e-12)


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_log_excess_is_loss_minus_infimum(loss):
    data, opt = _inst(4, 3, 5, seed=11)
    rng = np.random.default_rng(1)
    ell = {"logistic": lambda u: np.logaddexp(0, -u), "exponential": lambda u: np.exp(-u),
           "correlation": lambda u: -u}[loss]
    for s in [0.3, 1.0, 3.0]:
        W = rng.standard_normal((5, 5)) * s
        u, _ = _outputs(W, data)
        E = ell(u).mean() - losses.loss_floor(data, loss=loss)
        assert np.exp(path.log_excess(W, data, loss=loss)) == pytest.approx(E, rel=1e-8)
    # far along the SVM direction the excess is tiny but still exact in log space
    Wmm = svm.att_svm(data.X, data.Z, opt)
    le = path.log_excess(200 * Wmm / np.linalg.norm(Wmm), data, loss=loss)
    assert np.isfinite(le) and le < -20


def test_projections():
    rng = np.random.default_rng(2)
    for norm, f in (("fro", np.linalg.norm), ("nuc", lambda a: np.linalg.norm(a, "nuc"))):
        for _ in range(5):
            W = rng.standard_normal((4, 4)) * 3
            P = path.project_ball(W, 2.0, norm=norm)
            assert f(P) <= 2.0 + 1e-10
            assert np.allclose(path.project_ball(P, 2.0, norm=norm), P, atol=1e-10)
            for _ in range(10):                            # variational inequality
                Y = rng.standard_normal((4, 4))
                Y = Y / f(Y) * 2.0 * rng.random()
                assert np.sum((W - P) * (Y - P)) <= 1e-9
            small = W / f(W)
            assert np.allclose(path.project_ball(small, 2.0, norm=norm), small)


def test_kq_budget_is_nuclear_ball():
    """ch03-lem-kq: ||K Q^T||_* <= (||K||^2 + ||Q||^2) / 2, with equality for the balanced SVD
    factorization, so {KQ^T : ||K||^2 + ||Q||^2 <= 2R} is the nuclear ball of radius R."""
    rng = np.random.default_rng(3)
    for m in (2, 5):
        for _ in range(10):
            K, Q = rng.standard_normal((5, m)), rng.standard_normal((5, m))
            assert np.linalg.norm(K @ Q.T, "nuc") <= 0.5 * (np.sum(K**2) + np.sum(Q**2)) + 1e-12
    W = rng.standard_normal((5, 5))
    U, s, Vt = np.linalg.svd(W)
    K, Q = U * np.sqrt(s), Vt.T * np.sqrt(s)
    assert np.allclose(K @ Q.T, W)
    assert 0.5 * (np.sum(K**2) + np.sum(Q**2)) == pytest.approx(np.linalg.norm(W, "nuc"))


def test_theorem_bounds_hold_on_the_path():
    """ch03-thm-regpath: for R >= R0, any W in the ball with L(W) <= L(R W_mm/||W_mm||) has
    margin >= R gamma_hat - log C, norm >= R - ||W_mm|| log C, 1 - corr <= ||W_mm|| log C / R."""
    data, opt = _inst(3, 3, 4, seed=12, B=2)
    Wmm, feas = svm.att_svm_batch(data.X, data.Z, opt)
    assert feas.all()
    consts = [path.path_constants(data.trial(b), Wmm[b]) for b in range(2)]
    R0 = max(c["R0"] for c in consts)
    R = R0 * np.array([1.01, 2.0, 4.0])
    rp = path.reg_path(data, R, inits=2, W_svm=Wmm, max_steps=600, device="cpu")
    assert np.all(rp.log_excess <= rp.log_excess_svm + 1e-12)   # the hypothesis on W_R
    for b, c in enumerate(consts):
        A, _ = tokens.lifted_features(data.X[b], data.Z[b], opt[b])
        nW = np.linalg.norm(Wmm[b])
        for k, Rk in enumerate(R):
            W = rp.W[k, b]
            margin = np.einsum("kab,ab->k", A, W).min()
            assert margin >= Rk * c["gamma_hat"] - np.log(c["C"])
            assert np.linalg.norm(W) >= Rk - nW * np.log(c["C"])
            assert 1 - rp.corr[k, b] <= nW * np.log(c["C"]) / Rk
    # the bound is loose: the observed gap is far below it at the largest radius
    assert np.all(1 - rp.corr[-1] < 0.1 * np.log([c["C"] for c in consts]) / R[-1]
                  * np.linalg.norm(Wmm, axis=(1, 2)))


def _boundary(f, lo, hi, iters=50):
    """Largest x in [lo, hi] (per row) with f(x) True, by bisection from f(lo) True."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    ok_hi = f(hi)
    lo = np.where(ok_hi, hi, lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        ok = f(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo


def test_theorem_bounds_on_adversarial_points_of_the_sublevel_set():
    """ch03-thm-regpath holds for EVERY W in {||W|| <= R, L(W) <= L(R W_bar)}, not only for a
    solver's output: in many random directions U orthogonal to W_bar, take the point of the
    sublevel set farthest in angle, W = R (cos th W_bar + sin th U), and then the shortest
    point s W (s <= 1) still in the set; check the three statements at both."""
    rng = np.random.default_rng(3)
    for seed in (12, 13):
        data, opt = _inst(3, 3, 4, seed=seed)
        Wmm = svm.att_svm(data.X, data.Z, opt)
        c = path.path_constants(data, Wmm)
        nW = np.linalg.norm(Wmm)
        Wbar = Wmm / nW
        Amat, _ = tokens.lifted_features(data.X, data.Z, opt)
        U = rng.standard_normal((64,) + Wmm.shape)
        U -= np.einsum("kab,ab->k", U, Wbar)[:, None, None] * Wbar
        U /= np.linalg.norm(U, axis=(1, 2), keepdims=True)
        for R in c["R0"] * np.array([1.01, 1.5, 3.0]):
            level = path.log_excess(R * Wbar, data)

            def at(th):
                return R * (np.cos(th)[:, None, None] * Wbar + np.sin(th)[:, None, None] * U)

            th = _boundary(lambda x: path.log_excess(at(x), data) <= level, np.zeros(64),
                           np.full(64, np.pi))
            W1 = at(th)
            sc = 1 - _boundary(lambda x: path.log_excess((1 - x)[:, None, None] * W1, data) <= level,
                               np.zeros(64), np.ones(64))
            W2 = sc[:, None, None] * W1
            for W in (W1, W2):
                assert np.all(path.log_excess(W, data) <= level + 1e-9)      # in the set
                margin = np.einsum("kab,jab->jk", Amat, W).min(-1)
                assert np.all(margin >= R * c["gamma_hat"] - np.log(c["C"]))
                assert np.all(np.linalg.norm(W, axis=(1, 2)) >= R - nW * np.log(c["C"]))
                corr = np.einsum("jab,ab->j", W, Wbar) / np.linalg.norm(W, axis=(1, 2))
                assert np.all(1 - corr <= nW * np.log(c["C"]) / R)
            assert np.any(th > 0)                                   # the set is not a single ray


def test_path_direction_and_observed_rate():
    """The direction of W_R tends to W_mm; observed: 1 - corr decays about like R^-2."""
    data, opt = _inst(4, 4, 5, seed=13, B=2)
    Wmm, feas = svm.att_svm_batch(data.X, data.Z, opt)
    R = np.geomspace(20, 400, 5)
    rp = path.reg_path(data, R, inits=1, W_svm=Wmm, max_steps=500, device="cpu")
    gap = 1 - rp.corr
    assert np.all(np.diff(gap, axis=0) < 0)
    assert np.all(gap[-1] < 1e-2)
    slope = metrics.fit_rate(R, gap, tail=0.6)
    assert np.all(slope < -1.5) and np.all(slope > -2.5)
    assert np.all(rp.residual < 1e-5)


def test_nuclear_path_tends_to_nuclear_svm():
    """ch03-cor-kq: the nuclear-ball path (the (K,Q) budget) tends to W_mm^*, not to W_mm."""
    data, opt = _inst(4, 4, 5, seed=14)
    Wn = svm.att_svm(data.X, data.Z, opt, norm="nuc")
    Wf = svm.att_svm(data.X, data.Z, opt)
    rp = path.reg_path(data, [10.0, 300.0], norm="nuc", inits=1, W_svm=Wn, max_steps=800,
                          device="cpu")
    assert 1 - rp.corr[-1, 0] < 1e-2
    assert rp.corr[-1, 0] > rp.corr[0, 0]
    assert metrics.corr(rp.W[-1, 0], Wf) < 0.99 < rp.corr[-1, 0]
    assert rp.norm[-1, 0] == pytest.approx(300.0, rel=1e-6)


def test_path_constants_batched_equals_one_at_a_time():
    data = A.data.random_unit(4, 3, 6, trials=3, seed=7)
    opt = A.tokens.optimal_tokens(data.X, data.y, data.v)
    W_mm, feas = A.svm.att_svm_batch(data.X, data.Z, opt)
    assert feas.all()
    batched = path.path_constants(data, W_mm)
    for b in range(3):
        one = path.path_constants(data.trial(b), W_mm[b])
        for k, v in one.items():
            assert batched[k][b] == pytest.approx(v, rel=1e-12)


def test_study_summary_states_the_chapter_claims():
    # the numbers the chapter glues, from the study object: the kept point is never worse than
    # the SVM direction (a monotone method started there), and the path turns towards W_mm
    st = regpath.regpath_study(5, 6, 8, 3, np.geomspace(1.0, 100.0, 4), inits=2, max_steps=150,
                               nuclear=False, device="cpu")
    s = st.summary()
    assert s["pairs"] == 4 * s["B"] and s["below_svm"] == s["pairs"]
    assert s["B"] + s["infeasible"] == 3
    assert s["gap_final_fro"] < s["gap_first_fro"]
    assert "slope_nuc" not in s
    assert np.isnan(metrics.nanmedian([])) and np.isnan(metrics.nanmedian([np.nan]))


def test_study_claims_hold_and_can_fail():
    """RegPathStudy.claims(), the checked sentences of the chapter: all hold on the notebook's
    setting (n = 6, T = 8, d = 10, four instances, radii 1-300, no nuclear path), and each fails
    on numbers that contradict it (the gap raised to the bound, a slope-1 gap, every random start
    marked as reaching the objective at the largest radius)."""
    st = regpath.regpath_study(6, 8, 10, 4, np.geomspace(1.0, 300.0, 8), inits=3, max_steps=600,
                               nuclear=False, seed=0, device="cpu")
    c = st.claims()
    assert set(c) == {"steeper_than_proved", "bound_room", "nonconvex_visible"}
    assert all(holds for holds, _ in c.values()), c
    corr = st.path.corr.copy()
    st.path.corr = 1 - st.bound()                                   # gap = bound, slope -1
    c = st.claims()
    assert not c["bound_room"][0] and not c["steeper_than_proved"][0]
    st.path.corr = corr
    st.path.log_excess_all = np.minimum(st.path.log_excess_all, st.path.log_excess[..., None])
    assert not st.claims()["nonconvex_visible"][0]


@pytest.mark.slow
def test_spg_active_set_changes_no_run(monkeypatch):
    """path._spg drops converged runs from its batch (COMPACT_FRACTION); each run's iterations
    are its own, so the result equals that of the whole batch run to the end (compaction
    disabled by a fraction above 1) up to rounding: a smaller batch moves some elements across
    the SIMD block boundary of exp/log (README, "The same numbers on every machine"), and a run
    far from converged amplifies that chaotically (its residual is not a smooth function of the
    rounding), so the runs here go on until every one has converged. The tolerance is derived
    from the runs (tests/rounding.py): per run (radius, instance, start), 4 times the spread of
    three runs whose transcendental values move by one ulp at random, plus 8 ulp of the scale.
    Measured: bit for bit at ch03's quick size (600 steps); here the kept start may differ
    between starts that reach the same minimizer (a tie, checked on the objectives). Checked
    that the batch was cut, more than once (a spy on take); the cut runs' state written back to
    the wrong rows, or their objective given the wrong rows (the two instances differ), fails.
    Slow: about 40 s (the jittered runs)."""
    from rounding import rounding_spread
    data, opt = _inst(4, 4, 5, seed=3, B=2)       # two instances: a run given another's rows fails
    Wn, feasible = svm.att_svm_batch(data.X, data.Z, opt, norm="nuc")
    assert feasible.all()
    R = np.geomspace(1.0, 50.0, 4)                 # every run converges, the last after ~1,200 steps
    kw = dict(norm="nuc", inits=2, W_svm=Wn, max_steps=4000, device="cpu")
    names = ("log_excess_all", "corr_all")

    def run():
        rp = path.reg_path(data, R, **kw)
        return {**{k: getattr(rp, k) for k in names}, "W": rp.W, "best": rp.best_init,
                "residual_all": rp.residual_all, "steps": rp.steps}

    takes = []
    take = path._Objective.take
    monkeypatch.setattr(path._Objective, "take", lambda self, idx: takes.append(int(idx.sum())) or take(self, idx))
    cut = run()
    assert len(takes) >= 2 and takes[-1] < takes[0]                  # the batch was cut, more than once
    monkeypatch.setattr(path, "COMPACT_FRACTION", 2.0)
    n_takes = len(takes)
    whole, spread = rounding_spread(run)
    assert len(takes) == n_takes                                      # never cut
    for r in (cut, whole):                                            # every run converged, late
        assert r["steps"] < kw["max_steps"] and np.all(r["residual_all"] < 1e-10)
    assert whole["steps"] > 800
    eps = np.finfo(np.float64).eps
    tols = {}
    for name in names:                                                # per run (K, B, I)
        tols[name] = 4 * spread[name] + 8 * eps * np.abs(whole[name])
        assert np.all(np.abs(cut[name] - whole[name]) <= tols[name]), name
    # the kept start: the same, or a tie (starts that reach the same minimizer; argmin then
    # follows the rounding): the two kept points' objectives agree to the tolerance
    f, tf = whole["log_excess_all"], tols["log_excess_all"]
    kb = np.nonzero(cut["best"] != whole["best"])
    i, j = cut["best"][kb], whole["best"][kb]
    assert np.all(np.abs(f[kb + (i,)] - f[kb + (j,)]) <= tf[kb + (i,)] + tf[kb + (j,)])
    W_tol = 4 * np.max(spread["W"], axis=(-2, -1)) + 8 * eps * np.max(np.abs(whole["W"]), axis=(-2, -1))
    same = cut["best"] == whole["best"]
    assert np.all((np.max(np.abs(cut["W"] - whole["W"]), axis=(-2, -1)) <= W_tol)[same])
