"""Chapter "Gradient descent: global and local convergence": every statement, numerically.

Fixed seeds, small sizes. Each test names the result of book/ch04_convergence.md it checks.
"""
import itertools

import numpy as np
import pytest

import attnsvm.experiments.convergence as C
import attnsvm.experiments.trajectories as TR
from attnsvm import tokens
from attnsvm import losses, metrics, svm
import attnsvm.bounds as A_bounds
from attnsvm.data import AttnData
import attnsvm.data as A_data


@pytest.fixture(scope="module")
def inst():
    """A batch of small over-parameterized instances with their optimal tokens and W_mm."""
    data = A_data.sized_trials(4, 5, 6, trials=6, seed=3)
    opt = tokens.optimal_tokens(data.X, data.y, data.v)
    W, feas = svm.att_svm_batch(data.X, data.Z, opt)
    assert feas.all()
    return data, opt, W


@pytest.fixture(scope="module")
def choices(inst):
    """Locally optimal and non-locally-optimal choices alpha != opt (seeded search)."""
    data, _, _ = inst
    lo, f_lo = svm.find_choices(data, locally_optimal=True, seed=0)
    nlo, f_nlo = svm.find_choices(data, locally_optimal=False, seed=0)
    assert f_lo.any() and f_nlo.any()
    return lo, f_lo, nlo, f_nlo


# ------------------------------------------------------------------ lemma: saturation (proved)
def test_saturation_lemma_two_sided(inst, choices):
    """lem-saturation: at W = R W_a/|W_a|, 1 - s_{i,alpha_i} lies between
    e^-mu/(1+(T-1)e^-mu) (sequences with a support token) and (T-1)e^-mu/(1+(T-1)e^-mu)."""
    data, opt, Wmm = inst
    lo, f_lo, _, _ = choices
    cases = [(b, opt[b], Wmm[b]) for b in range(data.trials)]
    cases += [(b, lo[b], svm.att_svm(data.X[b], data.Z[b], lo[b])) for b in np.flatnonzero(f_lo)]
    T = data.T
    for b, alpha, Wa in cases:
        S = svm.support_tokens(data.X[b], data.Z[b], alpha, Wa)
        assert S.any()                                  # some constraint is active
        for R in (0.5, 3.0, 20.0, 200.0, 2000.0):
            W = R * Wa / np.linalg.norm(Wa)
            q = metrics.nonselected_mass(W, data.X[b], data.Z[b], alpha)
            mu = R / np.linalg.norm(Wa)
            up = (T - 1) * np.exp(-mu) / (1 + (T - 1) * np.exp(-mu))
            low = np.exp(-mu) / (1 + (T - 1) * np.exp(-mu))
            assert np.all(q <= up * (1 + 1e-9))
            assert np.all(q <= A_bounds.saturation_bound(Wa, R, T) * (1 + 1e-9))
            has = S.any(axis=1)
            assert np.all(q[has] >= low * (1 - 1e-9))
            # the exponent is exact: the bound with a doubled exponent is violated
            if 2 * np.log(T) < mu < 300:
                assert np.any(q[has] > (T - 1) * np.exp(-2 * mu))


def test_nonselected_mass_matches_softmax(inst):
    data, opt, Wmm = inst
    W = 2.0 * Wmm[0]
    s = metrics.attention(data.X[0], W, data.Z[0])
    q = metrics.nonselected_mass(W, data.X[0], data.Z[0], opt[0])
    np.testing.assert_allclose(q, 1 - s[np.arange(data.n), opt[0]], rtol=1e-10, atol=1e-15)


# ------------------------------------------------------------------ lemma: cone (proved)
def test_cone_lemma(inst):
    """lem-cone: min margin >= |W|(1/|W_a| - D sqrt(2 - 2 corr)); when positive, the argmax of
    every sequence is alpha and the non-selected mass is at most (T-1) e^-bound."""
    data, opt, Wmm = inst
    rng = np.random.default_rng(0)
    hits = 0
    for b in range(data.trials):
        Wa = Wmm[b]
        for eps in (0.0, 1e-3, 1e-2, 0.1, 0.5):
            for R in (1.0, 10.0, 100.0):
                G = rng.standard_normal(Wa.shape)
                W = Wa / np.linalg.norm(Wa) + eps * G / np.linalg.norm(G)
                W = R * W / np.linalg.norm(W)
                bound = A_bounds.cone_margin_bound(W, Wa, data.X[b], data.Z[b], opt[b])
                m = C.selection_margins(W, data.X[b], data.Z[b], opt[b])
                assert m.min() >= bound - 1e-9 * R
                if bound > 0:
                    hits += 1
                    a = np.einsum("ntd,nd->nt", data.X[b], data.Z[b] @ W.T)
                    assert np.all(a.argmax(1) == opt[b])
                    q = metrics.nonselected_mass(W, data.X[b], data.Z[b], opt[b])
                    assert np.all(q <= (data.T - 1) * np.exp(-bound) * (1 + 1e-9))
                    assert svm.in_cone(W, Wa, R0=R * (1 - 1e-12),
                                       eps=1 - metrics.corr(W, Wa) + 1e-12)
    assert hits >= 10


# ------------------------------------------------------------------ gradient and ray lemma
def test_loss_grad_finite_differences(inst):
    data, opt, Wmm = inst
    rng = np.random.default_rng(1)
    for b in range(3):
        x = data.trial(b)
        for W in (rng.standard_normal((6, 6)), 4 * Wmm[b]):
            for loss in ("logistic", "exponential"):
                L, G = losses.loss_grad(W, x, loss=loss)
                assert L == pytest.approx(losses.loss_value(W, x, loss=loss))
                E = rng.standard_normal(W.shape)
                h = 1e-6
                fd = (losses.loss_value(W + h * E, x, loss=loss)
                      - losses.loss_value(W - h * E, x, loss=loss)) / (2 * h)
                assert fd == pytest.approx(np.sum(G * E), rel=1e-6, abs=1e-10)


def test_ray_alignment_identity(inst, choices):
    """eq-ray-identity: the cancellation-free form equals <-grad L(c W_a), W_a>."""
    data, opt, Wmm = inst
    lo, f_lo, nlo, f_nlo = choices
    for b in range(data.trials):
        for alpha in (opt[b], nlo[b]):
            Wa = svm.att_svm(data.X[b], data.Z[b], alpha)
            for c in (0.0, 0.7, 3.0, 10.0):
                _, G = losses.loss_grad(c * Wa, data.trial(b))
                got = svm.ray_alignment(data.trial(b), alpha, c, W_alpha=Wa)
                assert got == pytest.approx(-np.sum(G * Wa), rel=1e-8, abs=1e-13)
                assert svm.ray_alignment(data.trial(b), alpha, c, W_alpha=Wa, scaled=True) == \
                    pytest.approx(np.exp(c) * got, rel=1e-10, abs=1e-13)


def test_ray_theorem_limit_and_sign(inst, choices):
    """thm-ray: e^c <-grad L(c W_a), W_a> -> Lambda_alpha; Lambda_alpha > 0 when alpha is
    locally optimal (opt included), and then the loss decreases along the ray for large c."""
    data, opt, Wmm = inst
    lo, f_lo, nlo, f_nlo = choices
    cases = [(b, opt[b]) for b in range(data.trials)] + [(b, lo[b]) for b in np.flatnonzero(f_lo)]
    for b, alpha in cases:
        x = data.trial(b)
        Wa = svm.att_svm(x.X, x.Z, alpha)
        assert svm.is_locally_optimal(x.X, x.y, x.Z, x.v, alpha)
        for loss in ("logistic", "exponential"):
            lam = svm.ray_alignment_limit(x, alpha, W_alpha=Wa, loss=loss, tol=1e-7)
            assert lam > 0
            val = svm.ray_alignment(x, alpha, [1e6, 1e7], W_alpha=Wa, loss=loss, scaled=True)
            np.testing.assert_allclose(val, lam, rtol=1e-4)
        # the derivative of c -> L(c W_a) is -<-grad L, W_a>: negative on a grid of large c,
        # and the loss decreases there towards its floor
        assert np.all(svm.ray_alignment(x, alpha, np.geomspace(20, 1e6, 30), W_alpha=Wa,
                                      scaled=True) > 0)
        Ls = [losses.loss_value(c * Wa, x) for c in np.linspace(20, 26, 4)]
        assert np.all(np.diff(Ls) < 0)
        assert Ls[-1] > C.loss_floor(x, alpha)
        # prop-floor (3): L(c W_a) -> L*_alpha, which exceeds L* when alpha != opt
        assert losses.loss_value(40 * Wa, x) - C.loss_floor(x, alpha) < 1e-8
        if np.any(alpha != opt[b]):
            assert C.loss_floor(x, alpha) > C.loss_floor(x) + 1e-3


def test_ray_theorem_negative_constant_means_increase():
    """thm-ray, other direction: a (not locally optimal) alpha with Lambda_alpha < 0 has
    <-grad L, W_a> < 0 far along its ray: the loss increases along it."""
    data = A_data.sized_trials(4, 5, 6, trials=12, seed=3)
    alpha, found = svm.find_choices(data, locally_optimal=False, seed=0)
    neg = 0
    for b in np.flatnonzero(found):
        x = data.trial(b)
        Wa = svm.att_svm(x.X, x.Z, alpha[b])
        lam = svm.ray_alignment_limit(x, alpha[b], W_alpha=Wa, tol=1e-7)
        if lam < 0:
            neg += 1
            assert not svm.is_locally_optimal(x.X, x.y, x.Z, x.v, alpha[b])
            assert np.all(svm.ray_alignment(x, alpha[b], [1e5, 1e6], W_alpha=Wa, scaled=True) < 0)
    assert neg >= 1


# ------------------------------------------------------------------ loss floor (proved)
def test_loss_floor_proposition(inst):
    """prop-floor: L(W) > L* = mean ell(gamma_opt) for every W, L(c W_mm) -> L*, and
    u_i <= gamma_opt - (1 - s_opt) delta_i."""
    data, opt, Wmm = inst
    rng = np.random.default_rng(2)
    for b in range(data.trials):
        x = data.trial(b)
        Ls = C.loss_floor(x)
        for scale in (0.1, 1.0, 10.0, 100.0):
            W = scale * rng.standard_normal((x.d, x.d))
            assert losses.loss_value(W, x) > Ls
            g = tokens.token_scores(x.X, x.y, x.v)
            s = metrics.attention(x.X, W, x.Z)
            u = (s * g).sum(-1)
            gs = np.sort(g, axis=1)
            delta = gs[:, -1] - gs[:, -2]
            so = s[np.arange(x.n), opt[b]]
            assert np.all(u <= g.max(1) - (1 - so) * delta + 1e-12)
        gaps = [losses.loss_value(c * Wmm[b], x) - Ls for c in (1, 5, 10, 20)]
        assert np.all(np.diff(gaps) < 0) and gaps[-1] < 1e-6 and gaps[-1] > 0
    assert C.loss_floor(data).shape == (data.trials,)


# ------------------------------------------------------------------ feasibility (proved)
def test_every_choice_feasible_when_overparameterized():
    """prop-feasible: queries linearly independent and tokens of each sequence affinely
    independent (generic when d >= max(n, T-1)) => every alpha has an Att-SVM."""
    n, T = 3, 3
    d = max(n, T - 1)
    data = A_data.sized_trials(n, T, d, trials=2, seed=0)
    for b in range(2):
        x = data.trial(b)
        assert np.linalg.matrix_rank(x.Z) == n
        for alpha in itertools.product(range(T), repeat=n):
            W = svm.att_svm(x.X, x.Z, np.array(alpha))
            assert C.selection_margins(W, x.X, x.Z, np.array(alpha)).min() >= 1 - 1e-7
    # case 2: normalized (equal-norm, distinct) tokens need only d >= n, even with T - 1 > d
    n, T, d = 2, 5, 2
    data = A_data.sized_trials(n, T, d, trials=3, seed=1)
    for b in range(3):
        x = data.trial(b)
        for alpha in itertools.product(range(T), repeat=n):
            W = svm.att_svm(x.X, x.Z, np.array(alpha))
            assert C.selection_margins(W, x.X, x.Z, np.array(alpha)).min() >= 1 - 1e-7
    # without the condition the conclusion fails: rank-deficient queries, d < n
    data = A_data.sized_trials(6, 8, 2, trials=4, seed=0)
    opt = tokens.optimal_tokens(data.X, data.y, data.v)
    _, feas = svm.att_svm_batch(data.X, data.Z, opt)
    assert not feas.all()


# ------------------------------------------------------------------ classification and experiments
def test_classify_definitions(inst, choices):
    data, opt, Wmm = inst
    lo, f_lo, _, _ = choices
    B = data.trials
    sel = np.where(f_lo[:, None], lo, opt)
    Wsel = np.stack([svm.att_svm(data.X[b], data.Z[b], sel[b]) for b in range(B)])
    out = C.classify(data, 7.0 * Wsel, sel)
    assert np.array_equal(out.is_global, ~f_lo)
    assert np.array_equal(out.is_local, f_lo)
    assert np.all(out.locally_optimal)
    # a direction away from W_mm is not "global" even with the right selection
    rng = np.random.default_rng(0)
    Wbad = Wmm + 0.5 * np.linalg.norm(Wmm, axis=(1, 2), keepdims=True) * rng.standard_normal(Wmm.shape) / 6
    out2 = C.classify(data, Wbad, opt, threshold=0.999)
    assert not out2.is_global.any()


def test_local_experiment_and_cone(tmp_path):
    """Observed statements at small size: every trial that converges (global or local) ends on
    a locally optimal selection; GD started in a cone around a locally optimal W_mm^alpha
    (alpha != opt) keeps alpha and its correlation with W_mm^alpha increases (cited theorem)."""
    run = C.local_experiment(6, 8, 10, trials=16, steps=1500, seed=0, device="cpu")
    out = run.outcomes
    conv = out.is_global | out.is_local
    assert conv.mean() >= 0.75
    assert np.all(out.locally_optimal[conv])
    assert np.all(run.mass_sel[-1][conv] > 0.9)
    np.testing.assert_allclose(run.corr_sel[-1][out.is_opt & out.feasible_opt],
                               run.corr_opt[-1][out.is_opt & out.feasible_opt])
    # cone experiment on the local outcomes
    idx = np.flatnonzero(out.is_local)
    assert idx.size >= 1
    sub = AttnData.stack([run.data.trial(b) for b in idx])
    cone = C.cone_experiment(sub, out.selected[idx], R0=20.0, eps=0.05, steps=2000, device="cpu")
    assert np.all(cone.kept)
    assert np.all(cone.corr_alpha[-1] > cone.corr_init)
    assert np.all(cone.mass_alpha[-1] > 0.999)
    assert np.all(cone.lambda_alpha > 0)


def test_overparam_sweep_shape_and_trend():
    sw = C.overparam_sweep(shapes=((4, 4),), ds=(2, 16), trials=12, steps=1500, device="cpu")
    fg = sw.column("frac_global", n=4, T=4)
    assert fg.shape == (2,)
    assert fg[1] > fg[0]
    np.testing.assert_allclose(sw.rows["frac_global"] + sw.rows["frac_local"]
                               + sw.rows["frac_other"], 1.0)


def test_toy_2d_and_trajectories():
    data, key = TR.toy_2d(seed=0)
    assert data.d == 2 and not data.batched
    tr = TR.trajectories_2d(data, steps=1500, device="cpu")
    assert tr.corr["W_vs_W_mm"] > 0.99
    assert tr.corr["KQ_vs_W_mm_nuc"] > 0.99
    assert tr.corr["p_vs_p_mm"] > 0.99
    assert tr.corr["W_vs_W_mm_nuc"] < 0.99       # the two biases differ on this instance


def test_input_validation(inst):
    data, opt, Wmm = inst
    with pytest.raises(ValueError):
        metrics.nonselected_mass(Wmm[0], data.X[0], data.Z[0], opt[0][:2])
    with pytest.raises(ValueError):
        losses.loss_value(Wmm[0], data)                      # batched data
    with pytest.raises(ValueError):
        C.classify(data, Wmm, opt, threshold=1.5)
    with pytest.raises(ValueError):
        A_data.sized_trials(2, 1, 3)


def test_run_summaries_are_the_glued_numbers():
    run = C.local_experiment(4, 5, 6, trials=6, steps=200, lr=0.1, seed=0, device="cpu")
    s, out = run.summary(), run.outcomes
    assert s["frac_global"] + s["frac_local"] + s["frac_other"] == pytest.approx(1.0)
    assert s["n_local"] == int(out.is_local.sum())
    assert (s["n_local"] == 0) == np.isnan(s["corr_local_sel_median"])
    assert all(isinstance(v, (int, float)) for v in s.values())
    sw = C.overparam_sweep(shapes=[(3, 4)], ds=[2, 6], trials=4, steps=100, seed=0, device="cpu")
    ss = sw.summary()
    assert ss["frac_global_dmin"] == ss["frac_global_d2"] == ss["frac_global_n3_T4_d2"]
    assert ss["frac_global_dmax"] == ss["frac_global_d6"]


def test_local_followups_summary():
    run = C.local_experiment(4, 5, 6, trials=6, steps=100, lr=0.1, seed=1, device="cpu")
    fu = C.local_followups(run, more_steps=50, cone_R0=10.0, cone_steps=50, seed=1, device="cpu")
    s = fu.summary()
    assert s["more_n_lo"] + s["more_n_nlo"] == s["cone_n_lo"] == int(run.outcomes.is_local.sum())
    # the count the prose uses (defined with no such trial, where the fraction is NaN)
    kept = 0 if fu.more is None else int(fu.more.kept[~fu.locally_optimal].sum())
    assert s["more_kept_nlo_n"] == kept <= s["more_n_nlo"]
    assert s["cone_n_nlo"] == int(fu.found.sum()) == len(fu.cone_nlo.kept)
    assert (fu.cone_lo is None) == np.isnan(s["cone_kept_lo"])
    assert 0 <= s["cone_nlo_to_opt"] <= 1


def test_overparam_claims_hold_and_can_fail():
    """OverparamSweep.claims() on a small sweep: all hold; each fails when its numbers are set
    against it (the global fractions reversed, a trial at d >= n made infeasible, the global
    fraction flat from the first fully feasible d)."""
    sw = C.overparam_sweep(shapes=((6, 8),), ds=(2, 4, 30), trials=12, steps=1500, device="cpu")
    c = sw.claims()
    assert set(c) == {"global_grows", "feasible_from_n", "global_beyond_feasible"}
    assert all(h for h, _ in c.values()), c
    r = sw.rows
    order = np.argsort(r["d"])
    g = r["frac_global"].copy()
    r["frac_global"][order] = g[order][::-1]
    assert not sw.claims()["global_grows"][0]
    r["frac_global"][:] = g
    k = np.flatnonzero(sw.column("frac_feasible", 6, 8) == 1)[0]
    r["frac_global"][order[k:]] = g[order[k]]
    assert not sw.claims()["global_beyond_feasible"][0]
    r["frac_global"][:] = g
    r["frac_feasible"][r["d"] >= 6] = 11 / 12
    assert not sw.claims()["feasible_from_n"][0]


def _against(result, **numbers):
    """``result.claims()`` with some of its summary numbers replaced (set against a claim)."""
    s = result.summary()
    assert set(numbers) <= set(s), set(numbers) - set(s)
    result.summary = lambda: {**s, **numbers}
    try:
        return result.claims()
    finally:
        del result.summary


def test_local_claims_hold_and_can_fail():
    """The checked claims of ch04b (LocalRun, LocalFollowups) hold at small size, and each turns
    false when its numbers are set against it."""
    run = C.local_experiment(6, 8, 10, trials=12, steps=1000, seed=0, device="cpu")
    fu = C.local_followups(run, more_steps=1000, cone_R0=20.0, cone_steps=2000, seed=0,
                           device="cpu")
    c, cf = run.claims(), fu.claims()
    assert set(c) == {"local_exists", "local_floor", "converged_lo"}
    assert set(cf) == {"lo_persists", "cone_lo_stable", "cone_nlo_unstable"}
    assert all(h for h, _ in {**c, **cf}.values()), (c, cf)
    assert "1000 steps" in c["local_exists"][1] and "2000 steps" in cf["cone_lo_stable"][1]
    s = run.summary()
    assert not _against(run, frac_local=0.0)["local_exists"][0]
    assert not _against(run, corr_local_opt_median=s["corr_local_sel_median"] - 0.05)["local_exists"][0]
    assert not _against(run, excess_local_median=0.4 * s["floor_gap_local_median"])["local_floor"][0]
    assert not _against(run, floor_gap_local_median=0.0)["local_floor"][0]
    assert not _against(run, frac_conv_lo=0.85)["converged_lo"][0]
    sf = fu.summary()
    assert not _against(fu, more_kept_lo=0.8)["lo_persists"][0]
    assert not _against(fu, cone_kept_lo=0.8)["cone_lo_stable"][0]
    assert not _against(fu, cone_corr_lo_median=sf["cone_corr_lo_init"])["cone_lo_stable"][0]
    assert not _against(fu, cone_kept_nlo=0.2)["cone_nlo_unstable"][0]
    assert not _against(fu, cone_kept_nlo_lambda_pos=0.2)["cone_nlo_unstable"][0]
    assert not _against(fu, cone_nlo_lambda_neg=1.0)["cone_nlo_unstable"][0]


def test_trajectories_claims_hold_and_can_fail():
    """The checked claims of ch04a (Trajectories2D) hold on the 2-D instance, and each turns
    false when its numbers are set against it."""
    data, _ = TR.toy_2d(seed=0)
    tr = TR.trajectories_2d(data, steps=1500, device="cpu")
    c = tr.claims()
    assert set(c) == {"own_svm", "approach"} and all(h for h, _ in c.values()), c
    s = tr.summary()
    assert not _against(tr, corr_p=0.998)["own_svm"][0]
    assert not _against(tr, corr_w_nuc=s["corr_w"] + 1e-9)["own_svm"][0]
    assert not _against(tr, corr_kq_fro=s["corr_kq"] + 1e-9)["own_svm"][0]
    assert not _against(tr, gap_w_early=1.5 * (1 - s["corr_w"]))["approach"][0]
    assert not _against(tr, gap_p_early=1.5 * (1 - s["corr_p"]))["approach"][0]
    assert _against(tr, gap_kq_early=1.5 * (1 - s["corr_kq"]))["approach"][0]   # not claimed
