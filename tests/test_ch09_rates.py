"""Chapter 9 (finite-time rates): the statements of book/ch09_rates.md, checked numerically."""
import numpy as np
import pytest

import attnsvm as A
from attnsvm.experiments import rates


#: equal scores in every sequence, and heterogeneous per-sequence scores (gamma*_i, gamma°_i)
SCORES = {"equal": {}, "heterogeneous": dict(gamma_opt=[1.0, 2.0, 0.5, 1.5],
                                             gamma_other=[0.0, -0.5, 0.0, 1.0])}


@pytest.fixture(scope="module", params=list(SCORES))
def inst(request):
    data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=2, **SCORES[request.param])
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    rng = np.random.default_rng(0)
    W0 = 8 * W_mm + 0.3 * rng.standard_normal(W_mm.shape)     # a start in the region E <= eps0
    return data, opt, W_mm, c, W0


def _gnorm(data, W):
    return np.linalg.norm(A.losses.risk_grad(data, W), axis=(-2, -1))


def test_start_in_region(inst):
    data, opt, W_mm, c, W0 = inst
    assert np.all(A.losses.excess_loss(data, opt, W0) <= c["eps0"])


def test_sandwich(inst):
    data, opt, W_mm, c, W0 = inst
    rng = np.random.default_rng(1)
    for k in (2.0, 4.0, 8.0, 16.0):
        for _ in range(4):
            W = k * W_mm + rng.standard_normal(W_mm.shape)
            E = A.losses.excess_loss(data, opt, W)
            g = _gnorm(data, W)
            assert np.all(g <= c["R_A"] / c["lam"] * E * (1 + 1e-9))      # everywhere
            inreg = E <= c["eps0"]
            assert np.all(g[inreg] >= c["mu"][inreg] * E[inreg] * (1 - 1e-9))
    W = 3 * rng.standard_normal(W_mm.shape)                              # upper bound anywhere
    assert np.all(_gnorm(data, W) <= c["R_A"] / c["lam"] * A.losses.excess_loss(data, opt, W) * (1 + 1e-9))
    # the proof's lower bound, everywhere: ||grad|| >= gamma_A s_min E; median room below 5x
    ratios = []
    for k in (0.0, 1.0, 2.0, 4.0, 8.0):
        for _ in range(4):
            W = k * W_mm + rng.standard_normal(W_mm.shape)
            E = A.losses.excess_loss(data, opt, W)
            s_min = 1 - A.metrics.nonopt_mass(data, opt, W).max(-1)
            lo = c["gamma_A"] * s_min * E
            g = _gnorm(data, W)
            assert np.all(g >= lo * (1 - 1e-9))
            ratios.append(g / lo)
    assert np.median(ratios) <= 5.0


def test_curvature(inst):
    data, opt, W_mm, c, W0 = inst
    rng = np.random.default_rng(2)
    E0 = A.losses.excess_loss(data, opt, W0)
    h = 1e-3
    for _ in range(6):
        off = rng.standard_normal(W0.shape)
        off *= ((0.99 * np.log(2) / c["R_A"] * rng.uniform())[:, None, None]
                / np.linalg.norm(off, axis=(-2, -1), keepdims=True))
        M = rng.standard_normal(W0.shape)
        M /= np.linalg.norm(M, axis=(-2, -1), keepdims=True)
        W1 = W0 + off
        d2 = (A.losses.excess_loss(data, opt, W1 + h * M) - 2 * A.losses.excess_loss(data, opt, W1)
              + A.losses.excess_loss(data, opt, W1 - h * M)) / h ** 2
        assert np.all(np.abs(d2) <= c["H"] * E0 * (1 + 1e-3))


def test_ngd_linear_theorem(inst):
    """thm-ngd-linear on the proof's own inequalities: the one-step contraction, and the margin
    bounds m_min(W_t) >= log(2 eps0/E_t) >= log(2 eps0/E_t0) + t eta mu/2; from the fixture's
    start and from one on the edge of the region (E0 = 0.9 eps0), where the contraction is
    checked to be within a factor 8 of the observed per-step decrease (median)."""
    data, opt, W_mm, c, W0 = inst
    eta = float(c["eta_ngd"].min())
    steps = 300
    W_edge = A.losses.scale_to_excess(data, opt, W_mm, 0.9 * c["eps0"])[:, None, None] * W_mm
    for Wstart in (W0, W_edge):
        h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=steps, init=Wstart,
                        snapshots=True, record_every=1, device="cpu")
        E = A.losses.excess_loss(data, opt, h.snapshots)                     # (K, B)
        assert np.all(E <= c["eps0"])
        ratio = E[1:] / E[:-1]
        assert np.all(ratio <= (1 - eta * c["mu"] / 2) * (1 + 1e-9))
        assert np.all(np.median(1 - ratio, axis=0) <= 8 * eta * c["mu"] / 2)
        m = A.metrics.min_margin(data, opt, h.snapshots)
        assert np.all(m >= np.log(2 * c["eps0"] / E) - 1e-9)
        assert np.all(m >= np.log(2 * c["eps0"] / E[0]) + eta * c["mu"] / 2 * h.steps[:, None] - 1e-9)
        assert np.all(np.log(2 * c["eps0"] / E) <= m * 1.5 + 1.0)          # the margin bound is not slack


@pytest.mark.slow
def test_ngd_fastest(inst):
    data, opt, W_mm, c, W0 = inst
    h = A.train.fit(data, model="W", optimizer="ngd", lr=0.1, steps=1500, init=W0, snapshots=True,
                    device="cpu")
    logE = A.losses.excess_loss(data, opt, h.snapshots, log=True)
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    bound = np.log(2 * c["eps0"]) - c["gamma_A"] * (n0 + 0.1 * h.steps[:, None])
    assert np.all(logE >= bound - 1e-9)
    assert np.all(h.norm >= (np.log(2 * c["eps0"]) - logE) / c["gamma_A"] - 1e-9)


@pytest.mark.slow
def test_gd_theorem(inst):
    data, opt, W_mm, c, W0 = inst
    eta = 1.0
    E0 = A.losses.excess_loss(data, opt, W0)
    cond = np.minimum.reduce([1 / c["H"], c["lam"] * np.log(2) / c["R_A"] ** 2, c["lam"] ** 2 / (3 * c["R_A"] ** 2)])
    assert np.all(eta * E0 <= cond)
    h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=4000, init=W0, snapshots=True,
                    device="cpu")
    t = h.steps[:, None].astype(float)
    invE = 1 / A.losses.excess_loss(data, opt, h.snapshots)
    assert np.all(invE >= (1 / E0 + eta * c["mu"] ** 2 / 2 * t) * (1 - 1e-9))
    assert np.all(invE <= (1 / E0 + 3 * eta * c["R_A"] ** 2 / c["lam"] ** 2 * t) * (1 + 1e-9))
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    upper = (n0 + eta * c["R_A"] * E0 / c["lam"]
             + 2 * c["R_A"] / (c["lam"] * c["mu"] ** 2) * np.log1p(eta * c["mu"] ** 2 * E0 * t / 2))
    assert np.all(h.norm <= upper + 1e-9)
    late = t[:, 0] >= 1
    lower = np.log(c["eps0"] * eta * c["mu"] ** 2 * t[late]) / c["gamma_A"]
    assert np.all(h.norm[late] >= lower - 1e-9)
    assert np.all(lower[-1] > 0)                                  # the norm bound is not vacuous here
    # the lower bound on 1/E is not slack by orders of magnitude: the observed growth of 1/E is
    # within 20x of the guaranteed eta mu^2 t / 2 (the upper bound, with R_A^2/lambda^2, is looser)
    assert np.all((invE[-1] - 1 / E0) <= 20 * eta * c["mu"] ** 2 / 2 * t[-1])
    # logarithmic, not faster: the norm gains less over the second half of the run than over the first
    assert np.all(h.norm[-1] - h.norm[len(t) // 2] < 2 * (h.norm[len(t) // 2] - h.norm[0]) + 1)


def test_polyak_capped_equals_gd(inst):
    data, opt, W_mm, c, W0 = inst
    eta_max = 5.0
    W1 = 2 * W0                                     # deeper in the region
    assert np.all(A.losses.excess_loss(data, opt, W1) <= A.bounds.polyak_cap_threshold(c, eta_max))
    hp = A.train.fit(data, model="W", optimizer="polyak", lr=1.0, eta_max=eta_max, steps=500, init=W1, device="cpu")
    hg = A.train.fit(data, model="W", optimizer="gd", lr=eta_max, steps=500, init=W1, device="cpu")
    np.testing.assert_allclose(hp.W, hg.W, rtol=1e-12, atol=1e-12)
    # above the threshold the cap need not be active: at W = 0 with a huge cap the step is L/|g|^2
    Z0 = np.zeros_like(W0)
    hp0 = A.train.fit(data, model="W", optimizer="polyak", lr=1.0, eta_max=1e6, steps=1, init=Z0, device="cpu")
    g0 = A.losses.risk_grad(data, Z0)
    step = hp0.loss[0] / np.sum(g0 ** 2, axis=(-2, -1))
    assert np.all(step < 1e6)
    np.testing.assert_allclose(hp0.W, -step[:, None, None] * g0, rtol=1e-9, atol=1e-14)


@pytest.mark.slow
def test_invariance_and_floor():
    data, opt = A.data.score_instances(3, 3, 4, trials=3, distinct=True, seed=4)   # holds for any data
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    W0 = A.data.random_inits(4, 3, radius=2.0, seed=1)
    U, Z = A.bounds.lifted_factors(data, opt)
    for name, kw in (("gd", dict(lr=1.0)), ("ngd", dict(lr=0.1)), ("polyak", dict(eta_max=10.0))):
        h = A.train.fit(data, model="W", optimizer=name, steps=500, init=W0, snapshots=True, device="cpu", **kw)
        for b in range(3):
            Af = np.einsum("ktd,ke->ktde", U[b], Z[b]).reshape(-1, 16)
            Q, _ = np.linalg.qr(Af.T)
            perp = lambda w: w.ravel() - Q @ (Q.T @ w.ravel())  # noqa: E731
            np.testing.assert_allclose(perp(h.W[b]), perp(W0[b]), atol=1e-10)
        floor = A.bounds.orth_floor(data, opt, W0, h.norm)
        assert np.all(A.metrics.one_minus_corr(h.snapshots, W_mm[None]) >= floor * (1 - 1e-6))
    h = A.train.fit(data, model="W", optimizer="adam", lr=0.05, steps=200, init=W0, device="cpu")
    b = 0
    Af = np.einsum("ktd,ke->ktde", U[b], Z[b]).reshape(-1, 16)
    Q, _ = np.linalg.qr(Af.T)
    assert not np.allclose(h.W[b].ravel() - Q @ (Q.T @ h.W[b].ravel()),
                           W0[b].ravel() - Q @ (Q.T @ W0[b].ravel()), atol=1e-6)   # Adam is not invariant


@pytest.mark.slow
def test_observed_rates():
    data, opt = A.data.score_instances(6, 4, 8, trials=4, seed=0)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    W0 = A.data.random_inits(8, 4, radius=1.0, seed=0)
    runs = A.runs.fit_settings(data, W_mm, settings={"gd": dict(lr=1.0), "ngd": dict(lr=0.1)}, steps=3000,
                     init=W0, n_records=60, device="cpu")
    s = {k: np.median(A.metrics.slopes(h.steps, A.runs.trajectory_metrics(data, opt, W_mm, h)["one_minus_corr"]))
         for k, h in runs.items()}
    assert s["ngd"] < -1.5 and s["gd"] > -0.5 and s["ngd"] >= -2.2


# ----------------------------------------------------------------------------- (L - L*) Polyak
def test_polyak_star_engine_step(inst):
    """The engine's polyak_star step is W - (E/||g||^2) g with the exact E of the chapter."""
    data, opt, W_mm, c, W0 = inst
    rng = np.random.default_rng(5)
    for Wstart in (W0, 2 * rng.standard_normal(W0.shape)):
        h = A.train.fit(data, model="W", optimizer="polyak_star", steps=1, init=Wstart,
                        n_records=2, record_every=1)
        g = A.losses.risk_grad(data, Wstart)
        E = A.losses.excess_loss(data, opt, Wstart)
        expect = Wstart - (E / np.linalg.norm(g, axis=(-2, -1)) ** 2)[:, None, None] * g
        np.testing.assert_allclose(h.W, expect, rtol=1e-9, atol=1e-12)


def test_polyak_star_proposition(inst):
    """prop-polyak-star where its hypotheses hold, checked on the proof's own inequalities: every
    step has length eta E/||g|| >= lambda/R_A, at most 1/mu while E <= eps0, and adds at least
    kappa times its length to the projection on W_mm^ (observed room: 1.2-3.5x, not orders)."""
    data, opt, W_mm, c, W0 = inst
    rng = np.random.default_rng(4)
    starts = (W0, 2 * W_mm + 0.3 * rng.standard_normal(W_mm.shape))   # E0 << eps0; E0 a few eps0
    steps = 150
    for Wstart in starts:
        h = A.train.fit(data, model="W", optimizer="polyak_star", steps=steps, init=Wstart,
                        snapshots=True, record_every=1)
        S = h.snapshots                                                # (steps + 1, B, d, d)
        assert np.all(np.isfinite(S))
        steps_ = np.diff(S, axis=0)
        lengths = np.linalg.norm(steps_, axis=(-2, -1))                # (steps, B)
        E = A.losses.excess_loss(data, opt, S[:-1])
        g = np.stack([_gnorm(data, W) for W in S[:-1]])
        ok = E > 1e-4                # far below, the gradient loses digits to cancellation
        assert ok.any()
        np.testing.assert_allclose(lengths[ok], (E / g)[ok], rtol=1e-6)   # ell_t = E/||g||
        assert np.all(lengths >= c["lam"] / c["R_A"] * (1 - 1e-9))
        inreg = E <= c["eps0"]
        assert inreg.mean() > 0.9                                      # the region is where it runs
        mu = np.broadcast_to(c["mu"], E.shape)
        assert np.all(lengths[inreg] <= 1 / mu[inreg] * (1 + 1e-9))
        proj = np.einsum("kbij,bij->kb", S, W_mm) * c["gamma_A"]
        gain = np.diff(proj, axis=0)
        assert np.all(gain >= c["kappa"] * lengths * (1 - 1e-9))       # the proof's step inequality
        # summed: the proposition's bound, and the triangle inequality above it
        assert np.all(proj >= A.bounds.polyak_star_progress_bound(h.steps, c, proj[0]) - 1e-9)
        cum = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths, axis=0)])
        norms = np.linalg.norm(S, axis=(-2, -1))
        assert np.all(norms <= norms[0] + cum + 1e-9)
        assert np.all(proj[1:] - proj[0] >= c["kappa"] * cum[1:] * (1 - 1e-9))
        # in the region the norm grows at most like t/mu (the proposition's upper step bound)
        if inreg.all():
            assert np.all(norms[-1] <= norms[0] + steps / c["mu"])


def test_polyak_star_unbounded_outside_region():
    """Outside {E <= eps0} nothing bounds the (L - L*) Polyak step above (ch09, after
    prop-polyak-star). On this fixed instance one trial's step throws the iterate into
    saturation on a non-optimal token: E stays above eps0 while the gradient underflows, and the
    next step E/||g||^2 is non-finite. The capped rule min(E/||g||^2, eta_max) stays finite."""
    data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=9)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    W0 = A.data.random_inits(W_mm.shape[-1], W_mm.shape[0], radius=3.0, seed=7)
    h = A.train.fit(data, model="W", optimizer="polyak_star", steps=4, init=W0, snapshots=True,
                    record_every=1)
    W4 = h.snapshots[-1]
    E4, g4 = A.losses.excess_loss(data, opt, W4), _gnorm(data, W4)
    sat = (E4 > c["eps0"]) & (g4 < 1e-12 * E4)                         # wrong-token saturation
    assert sat.any()
    assert np.all(np.linalg.norm(W4[sat], axis=(-2, -1)) > 30 * 3.0)   # after a long step
    with pytest.raises(A.train.NonFiniteError):
        A.train.fit(data, model="W", optimizer="polyak_star", steps=150, init=W0)
    hc = A.train.fit(data, model="W", optimizer="polyak_star", eta_max=10.0, steps=150, init=W0)
    assert np.all(np.isfinite(hc.W))
    assert np.all(A.losses.excess_loss(data, opt, hc.W) <= c["eps0"])


def test_run_drops_a_diverging_polyak_star_trial_and_nothing_else():
    """The notebook's runs (attnsvm.runs.fit_settings with drop_nonfinite): on the diverging instance above the
    failing trial is dropped, recorded in config, NaN in the history and in the metrics, and the
    other trials are exactly the runs without it; a rule not named still raises."""
    data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=9)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    W0 = A.data.random_inits(W_mm.shape[-1], W_mm.shape[0], radius=3.0, seed=7)
    settings = {"polyak_star": dict(lr=1.0)}
    with pytest.raises(A.train.NonFiniteError):
        A.runs.fit_settings(data, W_mm, settings=settings, steps=150, init=W0, n_records=10)
    h = A.runs.fit_settings(data, W_mm, settings=settings, steps=150, init=W0, n_records=10,
                  drop_nonfinite=("polyak_star",))["polyak_star"]
    dropped = h.config["dropped_trials"]
    live = np.setdiff1d(np.arange(3), dropped)
    assert 1 <= len(dropped) < 3
    assert np.all(np.isnan(h.snapshots[:, dropped])) and np.all(np.isfinite(h.snapshots[:, live]))
    ref = A.train.fit(data.take(live), model="W", optimizer="polyak_star", steps=150,
                      init=W0[live], snapshots=True, n_records=10)
    np.testing.assert_array_equal(h.snapshots[:, live], ref.snapshots)
    m = A.runs.trajectory_metrics(data, opt, W_mm, h)
    assert np.all(np.isnan(m["excess"][:, dropped])) and np.all(np.isfinite(m["excess"][:, live]))


def test_polyak_star_arguments(inst):
    data, opt, W_mm, c, W0 = inst
    with pytest.raises(ValueError, match="L_star"):
        A.train.fit(data, model="W", optimizer="polyak", steps=1, L_star=0.1)
    with pytest.raises(ValueError, match="polyak_star"):
        A.train.fit(data, model="W", optimizer="polyak_star", train_v=True, steps=1)
    # an explicit L_star agrees with the exact default while L - L* is large
    h1 = A.train.fit(data, model="W", optimizer="polyak_star", steps=3, init=W0 / 8)
    B = W0.shape[0]
    Ws = [A.train.fit(data.trial(b), model="W", optimizer="polyak_star", steps=3, init=W0[b] / 8,
                      L_star=float(c["L_star"][b])).W for b in range(B)]
    np.testing.assert_allclose(h1.W, np.concatenate(Ws), rtol=1e-6)


def test_first_step_and_theorem_checks(inst):
    """The helpers behind the notebook's hypothesis steps: first_step finds the first record from
    which a condition holds for good; the NGD check rejects a run that violates the contraction."""
    t = np.array([0, 1, 2, 4, 8])
    mask = np.array([[0, 1, 0], [1, 1, 0], [0, 1, 0], [1, 1, 0], [1, 1, 1]], dtype=bool)
    np.testing.assert_array_equal(A.metrics.first_step(t, mask), [4.0, 0.0, 8.0])
    assert np.isnan(A.metrics.first_step(t, np.zeros((5, 1), dtype=bool))[0])
    data, opt, W_mm, c, W0 = inst
    eta = float(c["eta_ngd"].min())
    h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=200, init=W0, snapshots=True,
                    n_records=20, device="cpu")
    E = A.losses.excess_loss(data, opt, h.snapshots)
    t0 = A.metrics.first_step(h.steps, E <= c["eps0"])
    assert np.all(t0 == 0) and np.all(A.bounds.ngd_linear_holds(h.steps, E, t0, eta, c))
    flat = np.repeat(E[:1], len(h.steps), axis=0)                     # no decrease at all
    assert not np.any(A.bounds.ngd_linear_holds(h.steps, flat, t0, eta, c))


# ----------------------------------------------------------------------------- directional bounds
def test_direction_from_margin_lemma():
    """lem-dir-margin: corr(W, W_mm) >= m_min(W)/(gamma_A ||W||) wherever m_min > 0, on equal,
    heterogeneous and distinct scores; the bound sits above the invariant floor; it is attained
    (equality) at W = W_mm."""
    rng = np.random.default_rng(11)
    cases = [dict(), SCORES["heterogeneous"], dict(distinct=True)]
    for kw in cases:
        data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=7, **kw)
        W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
        gA = 1 / np.linalg.norm(W_mm, axis=(-2, -1))
        n_pos = 0
        for scale in (0.5, 1.0, 3.0):
            for k in (1.0, 4.0, 10.0):
                W = k * W_mm + scale * rng.standard_normal(W_mm.shape)
                m = A.metrics.min_margin(data, opt, W)
                nrm = np.linalg.norm(W, axis=(-2, -1))
                bound = A.bounds.direction_from_margin(m, nrm, gA)
                omc = A.metrics.one_minus_corr(W, W_mm)
                pos = m > 0
                n_pos += pos.sum()
                assert np.all(omc[pos] <= bound[pos] + 1e-12)
                floor = A.bounds.orth_floor(data, opt, W, nrm[None])[0]        # P_perp W, here of W itself
                assert np.all(bound[pos] >= floor[pos] - 1e-12)
        assert n_pos > 0
        np.testing.assert_allclose(A.bounds.direction_from_margin(
            A.metrics.min_margin(data, opt, W_mm), np.linalg.norm(W_mm, axis=(-2, -1)), gA), 0.0, atol=1e-7)
    with pytest.raises(ValueError, match="norm"):
        A.bounds.direction_from_margin(1.0, 0.0, 1.0)


@pytest.mark.slow
def test_ngd_direction_corollary(inst):
    """cor-ngd-direction (the decaying bound) along NGD at and below the theorem's step. From a
    start with a large component off the features (which NGD never changes) the observed
    1 - corr is large and the bound must follow it within a factor 1.6 while both decay; from the
    fixture's start it holds and, once above its limit eta H / (2 gamma_A), decreases."""
    data, opt, W_mm, c, W0 = inst
    eta = float(c["eta_ngd"].min())
    rng = np.random.default_rng(0)
    Q = A.bounds.orth_component(data, opt, rng.standard_normal(W_mm.shape))
    nmm = np.linalg.norm(W_mm, axis=(-2, -1))
    Q *= (24 * nmm / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    W_far = 8 * W_mm + Q                                        # same margins as 8 W_mm, corr ~ 0.3
    K = 3000
    kw = dict(mu=c["mu"], eps0=c["eps0"], gamma_A=c["gamma_A"], H=c["H"])
    for Wstart, tight in ((W_far, True), (W0, False)):
        E0 = A.losses.excess_loss(data, opt, Wstart)
        assert np.all(E0 <= c["eps0"])
        n0 = np.linalg.norm(Wstart, axis=(-2, -1))
        h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=Wstart,
                        snapshots=True, record_every=1, device="cpu")
        omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])          # (K + 1, B)
        bound = A.bounds.ngd_direction_bound(np.full(K, eta), E0, n0, **kw)
        assert bound.shape == omc.shape
        assert np.all(omc <= bound + 1e-12)
        lim = eta * c["H"] / (2 * c["gamma_A"])
        above = bound[0] > lim
        assert np.all(np.diff(bound[:, above], axis=0) <= 1e-15)       # decays towards the limit
        if tight:
            assert np.all(bound <= 1.6 * omc)
            assert np.all(bound[-1] < bound[0] - 0.01) and np.all(omc[-1] < omc[0] - 0.01)
    # a decaying schedule eta_s = eta / sqrt(s + 1), run piecewise constant on chunks
    W, etas, omcs = W_far, [], [A.metrics.one_minus_corr(W_far, W_mm)]
    for k in range(6):
        lr, n_steps = eta / np.sqrt(500 * k + 1), 500
        h = A.train.fit(data, model="W", optimizer="ngd", lr=lr, steps=n_steps, init=W,
                        snapshots=True, record_every=1, device="cpu")
        W = h.W
        etas += [lr] * n_steps
        omcs.append(A.metrics.one_minus_corr(h.snapshots[1:], W_mm[None]))
    omc = np.concatenate([omcs[0][None], *omcs[1:]])
    bound = A.bounds.ngd_direction_bound(np.array(etas), A.losses.excess_loss(data, opt, W_far),
                                         np.linalg.norm(W_far, axis=(-2, -1)), **kw)
    assert np.all(omc <= bound + 1e-12) and np.all(bound <= 1.6 * omc)
    with pytest.raises(ValueError, match="E_t0"):
        A.bounds.ngd_direction_bound([eta], 2 * c["eps0"], n0, **kw)
    with pytest.raises(ValueError, match="etas"):
        A.bounds.ngd_direction_bound([-eta], E0, n0, **kw)


def _gd_cap(c):
    """The step condition of thm-gd-rate: eta E_0 <= this, per trial."""
    return np.minimum.reduce([1 / c["H"], c["lam"] * np.log(2) / c["R_A"] ** 2,
                              c["lam"] ** 2 / (3 * c["R_A"] ** 2)])


@pytest.mark.slow
def test_gd_direction_theorem(inst):
    """thm-gd-direction along GD runs, at every step from t0 = 0 (and restarted at later steps,
    where the hypotheses persist), with equal and heterogeneous per-sequence scores, at eta = 1
    and at the largest step the hypotheses allow (where C is of order 1): the per-step descent
    inequality E_{s+1} <= E_s - eta |g_s|^2 (1 - eta H E_s / 2), the summed inequality
    log E_t <= log E_0 - gamma_A sum_s |W_{s+1} - W_s| + C_t, the margin bound, and both
    directional bounds hold.

    What can fail and what cannot (measured): the per-step inequality is sharp (the decrease
    is 1.005-1.14 times its right side at the closest step) and without its curvature
    correction, E_{s+1} <= E_s - eta |g_s|^2, it fails at some step of every run (asserted).
    The summed inequality and the margin bound do not test C: the left side of the former is
    <= 0 at every step (|g_s| >= 1.01 gamma_A E_s on these runs), so it also holds with C
    removed or gamma_A raised by 10%, and the margin bound holds with at least 1.6 to spare,
    more than C. From a start with a large component off the features the bound D/||W_t|| is
    1.12-1.34 times the measured 1 - corr at every step (so the bound divided by 1.5 fails at
    every step, asserted), both decaying; but with C removed it still holds there (1 - corr is
    at most 0.89 of it), so that C is needed is not demonstrated."""
    data, opt, W_mm, c, W0 = inst
    rng = np.random.default_rng(3)
    Q = A.bounds.orth_component(data, opt, rng.standard_normal(W_mm.shape))
    Q *= (24 * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    # inside the region for every trial (Q is off the features, so it leaves E unchanged)
    k_in = np.maximum(8.0, A.losses.scale_to_excess(data, opt, W_mm, 0.5 * c["eps0"]))
    W_far = k_in[:, None, None] * W_mm + Q
    K = 2000
    kw = dict(mu=c["mu"], eps0=c["eps0"], gamma_A=c["gamma_A"], H=c["H"])
    # the fixture's start, moved along W_mm into the region where it is not (adding a multiple
    # of W_mm raises every margin by at least that multiple, so E falls)
    W_in = W0.copy()
    for _ in range(60):
        out = A.losses.excess_loss(data, opt, W_in) > 0.5 * c["eps0"]
        if not out.any():
            break
        W_in[out] += W_mm[out]
    for Wstart, tight in ((W_in, False), (W_far, True)):
        E0 = A.losses.excess_loss(data, opt, Wstart)
        # the largest step the hypotheses allow (less one part in 1e12: eta E_0 = cap exactly
        # can round above the cap in the trial that sets it)
        for eta in (1.0, float(np.min(_gd_cap(c) / E0)) * (1 - 1e-12)):
            assert np.all(A.bounds.gd_step_condition(c, eta, E0[None]))          # the hypotheses at t0 = 0
            h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=K, init=Wstart,
                            snapshots=True, record_every=1, device="cpu")
            S = h.snapshots
            logE = A.losses.excess_loss(data, opt, S, log=True)
            E = np.exp(logE)
            g2 = (np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1)) / eta) ** 2    # |g_s|^2
            dec = E[:-1] - E[1:]
            assert np.all(dec >= eta * g2 * (1 - eta * c["H"] * E[:-1] / 2) * (1 - 1e-9))
            assert np.all(np.any(dec < eta * g2, axis=0))          # the curvature term is needed
            path = np.concatenate([np.zeros((1, S.shape[1])),
                                   np.cumsum(np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1)), axis=0)])
            for k1 in (0, K // 4):                                             # restarts from t1 = k1
                Ct = (1 / c["eps0"] + 1.5 * eta * c["H"]) * (E[k1] - E[k1:])
                C = A.bounds.gd_error_constant(E[k1], eta=eta, **{k: kw[k] for k in ("eps0", "H")})
                assert np.all(Ct <= C * (1 + 1e-12)) and np.all(C <= 2.5)
                assert np.all(logE[k1:] - logE[k1] + c["gamma_A"] * (path[k1:] - path[k1]) <= Ct + 1e-10)
                norm, n1 = h.norm[k1:], h.norm[k1]
                m = A.metrics.min_margin(data, opt, S[k1:])
                assert np.all(m >= np.log(2 * c["eps0"] / E[k1]) + c["gamma_A"] * (norm - n1) - C - 1e-10)
                omc = A.metrics.one_minus_corr(S[k1:], W_mm[None])
                steps = h.steps[k1:] - h.steps[k1]
                sharp = A.bounds.gd_direction_bound(steps, E[k1], n1, eta=eta, norm=norm, **kw)
                det = A.bounds.gd_direction_bound(steps, E[k1], n1, eta=eta, **kw)
                assert sharp.shape == det.shape == omc.shape
                assert np.all(omc <= sharp + 1e-12) and np.all(sharp <= det * (1 + 1e-12))
                assert np.all(np.diff(det, axis=0) <= 1e-15)                 # the deterministic form decays
            if tight:
                sharp = A.bounds.gd_direction_bound(h.steps, E[0], h.norm[0], eta=eta, norm=h.norm, **kw)
                omc = A.metrics.one_minus_corr(S, W_mm[None])
                assert np.all(sharp <= 1.5 * omc)                             # sharp / 1.5 fails everywhere
                assert np.all(sharp[-1] < sharp[0]) and np.all(omc[-1] < omc[0])


def test_gd_direction_bound_decays_like_inverse_log(inst):
    """The deterministic bound of thm-gd-direction is O(1/log t) and no better: over t - t0 =
    10^3 ... 10^15 it decreases to 0 while bound * log t stays within a factor 2; and it is
    checked against bad input."""
    data, opt, W_mm, c, W0 = inst
    E0 = A.losses.excess_loss(data, opt, W0)
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    kw = dict(mu=c["mu"], eps0=c["eps0"], gamma_A=c["gamma_A"], H=c["H"])
    t = 10.0 ** np.arange(3, 16)
    b = A.bounds.gd_direction_bound(t, E0, n0, eta=1.0, **kw)                   # (13, B)
    assert b.shape == (t.size, W0.shape[0])
    b0 = A.bounds.gd_direction_bound([0.0], E0, n0, eta=1.0, **kw)[0]
    assert np.all(np.diff(b, axis=0) < 0) and np.all(b[-1] < 0.25 * b0)
    prod = b * np.log(t)[:, None]
    assert np.all(prod.max(0) <= 2 * prod.min(0))
    assert np.all(prod[-1] / prod[-4] < 1.05)                                    # tends to a constant
    with pytest.raises(ValueError, match="E_t0"):
        A.bounds.gd_direction_bound(t, 2 * c["eps0"], n0, eta=1.0, **kw)
    with pytest.raises(ValueError, match="1/H"):
        A.bounds.gd_direction_bound(t, E0, n0, eta=2 / float(np.min(E0 * c["H"])), **kw)
    with pytest.raises(ValueError, match="steps"):
        A.bounds.gd_direction_bound([-1.0], E0, n0, eta=1.0, **kw)
    with pytest.raises(ValueError, match="norm_t0"):
        A.bounds.gd_direction_bound(t, E0, 1e-3 * n0, eta=1.0, **kw)


def test_direction_bound_from_t0(inst):
    """The batched evaluator behind the notebook: per (trial, record) from each trial's t0 it
    gives the bounds of cor-ngd-direction and thm-gd-direction computed one trial at a time,
    skips a trial without t0, and reports a violation (it can fail)."""
    data, opt, W_mm, c, W0 = inst
    B = W0.shape[0]
    kw = dict(mu=c["mu"], eps0=c["eps0"], gamma_A=c["gamma_A"], H=c["H"])
    start = np.concatenate([W0[:1] / 8, W0[1:]])                    # trial 0 starts outside the region
    for name, eta in (("ngd", float(c["eta_ngd"].min())), ("gd", 1.0)):
        h = A.train.fit(data, model="W", optimizer=name, lr=eta, steps=400, init=start,
                        snapshots=True, n_records=30, device="cpu")
        M = A.runs.trajectory_metrics(data, opt, W_mm, h)
        t = M["t"]
        mask = (M["excess"] <= c["eps0"]) if name == "ngd" else A.bounds.gd_step_condition(c, eta, M["excess"])
        t0 = A.metrics.first_step(t, mask)
        t0[0] = np.nan if name == "gd" else t0[0]                   # a trial without t0 is skipped
        r = A.bounds.direction_bound_from_t0(t, t0, M, c, optimizer=name, eta=eta)
        assert r["bound"].shape == (t.size, B) and r["fraction"] == 1.0
        for b in range(B):
            if not np.isfinite(t0[b]):
                assert not r["later"][:, b].any() and np.all(np.isnan(r["bound"][:, b]))
                continue
            k0 = int(np.flatnonzero(t == t0[b])[0])
            one = {k: v[b] for k, v in kw.items()}
            if name == "ngd":
                full = A.bounds.ngd_direction_bound(np.full(int(t[-1] - t0[b]), eta), M["excess"][k0, b],
                                                    M["norm"][k0, b], **one)
                expect = full[(t[k0:] - t0[b]).astype(int)]
            else:
                expect = A.bounds.gd_direction_bound(t[k0:] - t0[b], M["excess"][k0, b], M["norm"][k0, b],
                                                     eta=eta, **one)
            np.testing.assert_allclose(r["bound"][k0:, b], expect, rtol=1e-12)
            assert np.all(np.isnan(r["bound"][:k0, b])) and r["first"][b] == expect[0]
            if name == "gd":                                          # the sharp form D/||W_t||
                sharp = A.bounds.gd_direction_bound(t[k0:] - t0[b], M["excess"][k0, b], M["norm"][k0, b],
                                                    eta=eta, norm=M["norm"][k0:, b], **one)
                rs = A.bounds.direction_bound_from_t0(t, t0, M, c, optimizer=name, eta=eta, measured_norm=True)
                np.testing.assert_allclose(rs["bound"][k0:, b], sharp, rtol=1e-12)
                assert rs["fraction"] == 1.0 and np.all(sharp <= expect * (1 + 1e-12))
        bad = dict(M, one_minus_corr=np.where(np.isnan(r["bound"]), 0.0, r["bound"]) + 1e-6)
        assert A.bounds.direction_bound_from_t0(t, t0, bad, c, optimizer=name, eta=eta)["fraction"] == 0.0
    with pytest.raises(ValueError, match="optimizer"):
        A.bounds.direction_bound_from_t0(t, t0, M, c, optimizer="adam", eta=1.0)
    with pytest.raises(ValueError, match="t0"):
        A.bounds.direction_bound_from_t0(t, t0 + 0.5, M, c, optimizer="gd", eta=1.0)
    with pytest.raises(ValueError, match="measured_norm"):
        A.bounds.direction_bound_from_t0(t, t0, M, c, optimizer="ngd", eta=1.0, measured_norm=True)


def test_curvature_outside_region(inst):
    """lem-att-curvature holds at every W, not only on E <= eps0: finite-difference second
    derivatives at points W' within log 2 / R_A of W, for W far outside the region (random
    points of norm up to 6, a start saturated on a wrong token) in random directions, stay below
    (2/3) H E(W). There the bound is loose by a factor of about 1000 (random directions, E
    spread over all sequences), so the test also takes worst-case directions: W = 6 W_mm -
    theta M with M = A_it / |A_it| for one token of one sequence (that sequence loses its
    attention as theta grows), second derivative along M, at the points with E(W) > eps0.
    Measured there: max |d2| / (H E) = 0.020 (equal scores) and 0.013 (heterogeneous) over the
    scan (0.0008-0.02 per sequence and trial), i.e. (2/3) H E is 34-50 times the largest
    curvature found; asserted: below 2/3 everywhere and above 0.008 somewhere (so a bound 80
    times smaller would fail)."""
    data, opt, W_mm, c, _ = inst
    rng = np.random.default_rng(7)
    alpha = opt.copy()
    alpha[:, 0] = (alpha[:, 0] + 1) % data.T
    Wa = A.svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    starts = [k * rng.standard_normal(W_mm.shape) for k in (0.0, 0.5, 2.0, 6.0)]
    starts.append(4 * Wa / np.linalg.norm(Wa, axis=(-2, -1), keepdims=True))
    W = np.repeat(np.stack(starts), 4, axis=0)                         # (S, B, d, d), 4 draws each
    E = A.losses.excess_loss(data, opt, W)                                 # (S, B)
    def unit(a):
        return a / np.linalg.norm(a, axis=(-2, -1), keepdims=True)
    def d2(Wp, M, h=1e-3):
        return (A.losses.excess_loss(data, opt, Wp + h * M) + A.losses.excess_loss(data, opt, Wp - h * M)
                - 2 * A.losses.excess_loss(data, opt, Wp)) / h ** 2
    radius = 0.99 * np.log(2) / c["R_A"] * rng.uniform(size=E.shape)   # |W' - W| <= log 2 / R_A
    W1 = W + radius[..., None, None] * unit(rng.standard_normal(W.shape))
    D = d2(W1, unit(rng.standard_normal(W.shape)))
    assert np.all(np.abs(D) <= 2 / 3 * c["H"] * E * (1 + 1e-3) + 1e-9)
    assert np.sum(E > c["eps0"]) >= 10                                 # most points are outside the region
    # worst-case directions: along one lifted feature, as that sequence loses its attention
    U, Z = A.bounds.lifted_factors(data, opt)
    B = W_mm.shape[0]
    theta = np.linspace(0.0, 40.0, 401)[:, None, None, None]
    worst = 0.0
    for i in range(data.n):
        t = (opt[:, i] + 1) % data.T
        M = unit(np.einsum("bd,be->bde", U[np.arange(B), i, t], Z[:, i]))
        Ws = 6 * W_mm[None] - theta * M[None]
        Es = A.losses.excess_loss(data, opt, Ws)
        out = Es > c["eps0"]
        assert np.all(out.sum(0) >= 50)
        ratio = np.abs(d2(Ws, np.broadcast_to(M, Ws.shape))) / (c["H"] * Es)
        assert np.all(ratio <= 2 / 3 * (1 + 1e-3))
        worst = max(worst, float(ratio[out].max()))
    assert worst > 0.008, worst


@pytest.mark.slow
def test_ngd_no_floor(inst):
    """thm-ngd-no-floor along NGD at the step mu/H of cor-ngd-direction (where the variance
    condition theta <= 1 also holds on these instances: theta = 0.13-0.27), from the fixture's
    start and from a start with a large component off the features, and cor-polyak-star-rate
    along the (L - L*) Polyak step with a small multiplier: the per-step inequality
    psi_{s+1} >= psi_s + eta gamma_A - eta c_psi E_s / eps0 (psi = -log E) holds at every step,
    and the bound holds at every step.

    What it catches: from the far start the bound is 1.12-1.18 times the measured 1 - corr at
    its closest, so the bound / 1.25 fails (asserted); with equal scores it ends below the limit
    eta H / (2 gamma_A) of cor-ngd-direction (measured 0.09 against 0.21-0.33 at 10^4 steps;
    asserted), so it is not that bound in disguise; and it is O(1/t): bound * t tends to a
    constant (doubling t from 5 10^5 to 10^6 multiplies bound * t by 1.06-1.10,
    asserted < 1.15, where a floor would give 2 and a 1/sqrt(t) rate 1.41). The correction
    c_psi E_s / eps0 is not needed on these runs (psi gains at least eta gamma_A at every step);
    test_ngd_no_floor_correction_needed shows where it is (c_psi / 7 fails there); the gain
    eta gamma_A is nearly attained (smallest gain measured at 1.0005 eta gamma_A with equal
    scores, 1.03 heterogeneous), so a gamma_A inflated by 5% fails (asserted: some gain below
    1.05 eta gamma_A in every trial).
    cor-polyak-star-rate from the far start: its bound within a factor 1.25 of 1 - corr at every
    step, the deterministic form within 1.63; bound / 1.2 and deterministic / 1.65 fail
    (asserted; numbers in the comment at that run)."""
    data, opt, W_mm, c, W0 = inst
    kw = {k: c[k] for k in ("mu", "eps0", "gamma_A", "H", "R_A", "Delta_max", "b_minus", "b_plus")}
    eta = float(c["eta_ngd"].min())
    theta, c_psi = A.bounds.ngd_floorless_constants(eta, **{k: kw[k] for k in ("R_A", "gamma_A", "Delta_max",
                                                                              "b_minus", "b_plus")})
    assert np.all(theta <= 1)
    rng = np.random.default_rng(0)
    Q = A.bounds.orth_component(data, opt, rng.standard_normal(W_mm.shape))
    Q *= (24 * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    equal = np.allclose(c["Delta_min"], 1.0)
    K = 10000
    for Ws, far in ((W0, False), (8 * W_mm + Q, True)):
        E0, n0 = A.losses.excess_loss(data, opt, Ws), np.linalg.norm(Ws, axis=(-2, -1))
        h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=Ws, snapshots=True,
                        record_every=1, device="cpu")
        logE = A.losses.excess_loss(data, opt, h.snapshots, log=True)
        gain = -np.diff(logE, axis=0)
        assert np.all(gain >= eta * c["gamma_A"] - eta * c_psi * np.exp(logE[:-1]) / c["eps0"] - 1e-12)
        assert np.all(np.any(gain < 1.05 * eta * c["gamma_A"], axis=0)), (gain / (eta * c["gamma_A"])).min(0)
        omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
        b = A.bounds.ngd_floorless_bound(np.full(K, eta), E0, n0, **kw)
        assert b.shape == omc.shape and np.all(omc <= b)
        if far:
            assert np.all(np.any(omc > b / 1.25, axis=0)), (b / omc).min(0)
        elif equal:
            assert np.all(b[-1] < eta * c["H"] / (2 * c["gamma_A"]))
    long = A.bounds.ngd_floorless_bound(np.full(10 ** 6, eta), E0, n0, **kw)
    ratio = long[-1] * 10 ** 6 / (long[5 * 10 ** 5] * 5 * 10 ** 5)
    assert np.all(ratio < 1.15) and np.all(long[-1] < 0.2 * long[0])    # a floor gives 2, 1/sqrt(t) 1.41
    # the (L - L*) Polyak step, multiplier m with m / mu <= eta: steps of length in [m lam / R_A, eta]
    m = float(np.min(c["mu"])) * eta
    K = 4000
    h = A.train.fit(data, model="W", optimizer="polyak_star", lr=m, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    lengths = np.linalg.norm(np.diff(h.snapshots, axis=0), axis=(-2, -1))
    assert np.all(lengths <= eta * (1 + 1e-9)) and np.all(lengths >= m * c["lam"] / c["R_A"] * (1 - 1e-9))
    E0, n0 = A.losses.excess_loss(data, opt, W0), np.linalg.norm(W0, axis=(-2, -1))
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    S = np.concatenate([np.zeros((1, lengths.shape[1])), np.cumsum(lengths, axis=0)])
    for b in range(S.shape[1]):
        one = {k: v[b] for k, v in kw.items()}
        bb = A.bounds.ngd_floorless_bound(lengths[:, b], E0[b], n0[b], **one)[:, 0]
        assert np.all(omc[:, b] <= bb)
        # the deterministic O(1/t) form: 1 - P_t <= 1 and sum of lengths >= m lam t / R_A
        num = (n0[b] - np.log(2 * c["eps0"][b] / E0[b]) / c["gamma_A"][b]
               + 2 * c_psi[b] * E0[b] / (c["gamma_A"][b] * c["mu"][b] * c["eps0"][b]))
        det = num / (n0[b] + m * c["lam"][b] / c["R_A"][b] * np.arange(K + 1))
        assert np.all(bb <= det * (1 + 1e-12))
    # cor-polyak-star-rate, how tight: from the far start (8 W_mm plus 24 |W_mm| off the
    # features), the bound with the measured step lengths is 1.12-1.17 times 1 - corr at its
    # closest (t >= 1) and at most 1.25 over the 4000 steps; the corollary's deterministic form
    # (lengths replaced by m lam / R_A, 1 - P_t by 1) is 1.13-1.59 times it at its closest and at
    # most 1.63. Measured by dividing each bound by a factor: the sharp bound / 1.2 and the
    # deterministic bound / 1.65 fail at some step of every trial (asserted), the sharp bound / 1.1
    # passes. (From the fixture's start, in the region with no off-feature part, the bound is
    # 39-206 times 1 - corr: linear in the angle where 1 - corr is quadratic.)
    Wf = 8 * W_mm + Q
    h = A.train.fit(data, model="W", optimizer="polyak_star", lr=m, steps=K, init=Wf, snapshots=True,
                    record_every=1, device="cpu")
    lengths = np.linalg.norm(np.diff(h.snapshots, axis=0), axis=(-2, -1))
    E0, n0 = A.losses.excess_loss(data, opt, Wf), np.linalg.norm(Wf, axis=(-2, -1))
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    for b in range(omc.shape[1]):
        one = {k: v[b] for k, v in kw.items()}
        bb = A.bounds.ngd_floorless_bound(lengths[:, b], E0[b], n0[b], **one)[:, 0]
        num = (n0[b] - np.log(2 * c["eps0"][b] / E0[b]) / c["gamma_A"][b]
               + 2 * c_psi[b] * E0[b] / (c["gamma_A"][b] * c["mu"][b] * c["eps0"][b]))
        det = num / (n0[b] + m * c["lam"][b] / c["R_A"][b] * np.arange(K + 1))
        assert np.all(omc[:, b] <= bb) and np.all(bb <= det * (1 + 1e-12))
        assert np.all(bb[1:] <= 1.3 * omc[1:, b]) and np.all(det[1:] <= 1.8 * omc[1:, b]), b
        assert np.any(omc[1:, b] > bb[1:] / 1.2) and np.any(omc[1:, b] > det[1:] / 1.65), b
    with pytest.raises(ValueError, match="theta"):
        A.bounds.ngd_floorless_bound([eta], E0, n0, **dict(kw, gamma_A=c["gamma_A"] / 100))


@pytest.mark.slow
def test_chapter_result_object():
    """The notebook's numbers and claims at small size (4 trials): every claim of
    :class:`rates.RatesRun` holds and the summary numbers sit in range. With a too-short run the
    rate and theorem claims fail (NGD's slope, the theorem's region not reached);
    ``strictly_complementary`` and ``distinct_restart_bound`` fail on contradicting numbers."""
    res = rates.rates_experiment(6, 4, 8, trials=4, steps=5000, sweep_steps=1000, thm_steps=20000,
                                 seed=0, device="cpu")
    s = res.summary()
    assert len(s) == 75 and all(isinstance(v, (int, float)) for v in s.values())
    claims = res.claims()
    assert len(claims) == 25 and all(bool(h) for h, _ in claims.values()), claims
    # distinct_restart_bound turns false where a draw's bound falls below the measured 1 - corr
    # (a ratio of 0.99 on one draw), and where (C) holds on fewer than half of the draws
    dr = res.distinct
    assert dr["held"].sum() >= dr["held"].size / 2 and np.all(dr["ratio_min"][dr["held"]] >= 1)
    for mutate in ("ratio", "held"):
        saved_d = {k: v.copy() for k, v in dr.items()}
        if mutate == "ratio":
            dr["ratio_min"][np.flatnonzero(dr["held"])[0]] = 0.99
        else:
            dr["held"][: dr["held"].size // 2 + 1] = False
        res._cache = None
        assert not res.claims()["distinct_restart_bound"][0], mutate
        dr.update(saved_d)
    res._cache = None
    # strictly_complementary turns false on an instance whose delta is at the rounding level
    assert s["sc_delta_min"] > A.bounds.SC_FACTOR * np.finfo(float).eps
    saved = res.consts["sc_delta"].copy()
    res.consts["sc_delta"][1] = 1e3 * max(res.consts["sc_active_err"].max(), np.finfo(float).eps)
    res._cache = None
    assert not res.claims()["strictly_complementary"][0]
    res.consts["sc_delta"][:] = saved
    res._cache = None
    assert s["slope_ngd"] < -1.5 < -0.5 < s["slope_gd"] and s["floor_ratio"] > 1
    assert s["ngd_bound_holds"] == s["gd_bound_holds"] == s["margin_bound_holds"] == 1.0
    assert 0 < s["gd_C"] <= 2.5 and s["t0_ngd_max"] <= 20000 and s["sens_ngd"] > 10
    short = rates.rates_experiment(6, 4, 8, trials=2, steps=300, sweep_steps=100, thm_steps=300,
                                   seed=0, device="cpu").claims()
    assert not (short["ngd_fast"][0] and short["ngd_theorem_reached"][0])


# ----------------------------------------------------------------------------- tight instances
@pytest.fixture(scope="module")
def tight():
    """One sequence, two tokens, a small score gap (gamma* = 0.05, gamma° = 0): here b+/b- and
    Delta are close to their limits 1 and 0, so the sandwich, the curvature bound and the summed
    error of the GD rate theorem are close to equalities (measured below)."""
    data, opt = A.data.score_instances(1, 2, 3, trials=3, seed=0, gamma_opt=0.05, gamma_other=0.0)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    return data, opt, W_mm, c


def test_sandwich_tight_at_region_edge(tight):
    """lem-att-sandwich's mu = (2/3) gamma_A is sharp at the edge of the region: along W_mm, at
    E = 0.999 eps0, ||grad L|| / (mu E) is 1.007 (asserted in [1, 1.05]), and 1.06 at 0.9 eps0.
    Catches mu = gamma_A (or any mu above 1.05 (2/3) gamma_A), which the random points of
    test_sandwich do not: there ||grad L|| >= 1.01 gamma_A E."""
    data, opt, W_mm, c = tight
    for frac, room in ((0.999, 1.05), (0.9, 1.1)):
        k = A.losses.scale_to_excess(data, opt, W_mm, frac * c["eps0"])
        W = k[:, None, None] * W_mm
        E = A.losses.excess_loss(data, opt, W)
        assert np.all(E <= c["eps0"])
        ratio = _gnorm(data, W) / (c["mu"] * E)
        assert np.all(ratio >= 1 - 1e-9) and np.all(ratio <= room), (frac, ratio)


def test_curvature_tight(tight):
    """lem-att-curvature is within a factor 5 of sharp: deep in the region (E(W) = 1e-4 eps0
    along W_mm) and at the far end of the ball (W' = W - 0.99 log 2 / R_A along W_mm), the second
    derivative along W_mm is 0.21 H E(W) (asserted >= 0.15 H E(W)) and below (2/3) H E(W).
    Catches the curvature constant H/10 (and anything below H/6.6), which the random directions
    of test_curvature do not."""
    data, opt, W_mm, c = tight
    M = W_mm / np.linalg.norm(W_mm, axis=(-2, -1), keepdims=True)
    k = A.losses.scale_to_excess(data, opt, W_mm, 1e-4 * c["eps0"])
    W = k[:, None, None] * W_mm
    E = A.losses.excess_loss(data, opt, W)
    W1 = W - (0.99 * np.log(2) / c["R_A"])[:, None, None] * M
    h = 1e-4
    d2 = (A.losses.excess_loss(data, opt, W1 + h * M) - 2 * A.losses.excess_loss(data, opt, W1)
          + A.losses.excess_loss(data, opt, W1 - h * M)) / h ** 2
    ratio = d2 / (c["H"] * E)
    assert np.all(ratio <= 2 / 3 * (1 + 1e-3)) and np.all(ratio >= 0.15), ratio


def test_gd_error_constant_needed(tight):
    """thm-gd-direction's summed error C of bounds.gd_error_constant is needed and within a
    factor 4 of sharp: GD from the edge of the region (E_0 = eps0), at eta = 1 and at the largest
    step eta E_0 H = 1, keeps Q_t = log E_t - log E_0 + gamma_A sum_{s<t} ||W_{s+1} - W_s|| <= C,
    and max_t Q_t is 0.05-0.21 C over 400 steps (asserted > 0 in every trial and >= 0.1 C in
    one). Catches C = 0 (and C/10, through the trial at 0.2 C). (On the
    module's instances Q_t <= 0 at every step, since there ||grad L|| >= 1.01 gamma_A E.)"""
    data, opt, W_mm, c = tight
    k = A.losses.scale_to_excess(data, opt, W_mm, c["eps0"])
    W0 = k[:, None, None] * W_mm
    E0 = A.losses.excess_loss(data, opt, W0)
    for eta in (1.0, float(np.min(1 / (c["H"] * E0)))):
        h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=400, init=W0,
                        snapshots=True, record_every=1, device="cpu")
        S = h.snapshots
        logE = A.losses.excess_loss(data, opt, S, log=True)
        path = np.concatenate([np.zeros((1, S.shape[1])),
                               np.cumsum(np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1)), axis=0)])
        Q = logE - logE[0] + c["gamma_A"] * path
        C = A.bounds.gd_error_constant(E0, eta=eta, eps0=c["eps0"], H=c["H"])
        assert np.all(Q <= C * (1 + 1e-12))
        assert np.max(Q.max(0) / C) >= 0.1 and np.all(Q.max(0) > 0), Q.max(0) / C


# ------------------------------------------------- strict complementarity: the squared orders
@pytest.fixture(scope="module")
def sc_inst(inst):
    data, opt, W_mm, c, W0 = inst
    return inst, A.bounds.support_constants(data, opt)


def test_strict_complementarity_holds(sc_inst):
    """The hypothesis of lem-bounded-residual and thm-squared-orders, computed on the fixture's
    instances (equal and heterogeneous scores, 3 trials each), with S = {k : lambda_k > 0} the
    support of the solver's multipliers (a conservative choice when they are not unique): the
    multipliers reproduce W_mm = sum_S lambda_k A_k and sum lambda = ||W_mm||^2, every k in S is
    active, and strict complementarity delta = min_{k not in S} <A_k, W_mm> - 1 > 0 holds.

    Thresholds from the computation, not from the draw: the active margins are exact to
    active_err <= 1.4e-15 (asserted < 1e-12), so delta > 1e4 * max(active_err, eps) says that
    delta is no rounding artefact of an active constraint left out of S (delta = 0 in exact
    arithmetic would give |delta| of the order of active_err and fail); measured delta =
    0.026-0.24, 1e14 times above. The support is decided at lambda_k > 1e-7 sum lambda; the
    multipliers dropped are exactly 0 (lam_off, asserted < 1e-7) and lambda_min / sum lambda =
    0.010-0.097 is asserted > 1e4 * 1e-7, so S does not depend on that tolerance. Other draws
    of the same generator have delta down to 0.0015 (seeds 0-11), still far above the threshold."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    assert np.allclose(sc["W_mm"], W_mm, atol=1e-9)
    U, Zq = A.bounds.lifted_factors(data, opt)
    Af = np.einsum("bktd,bke->bktde", U, Zq)
    lam = np.where(sc["support"], sc["lam"], 0.0)
    assert np.allclose(np.einsum("bkt,bktde->bde", lam, Af), W_mm, atol=1e-7)
    assert np.allclose(lam.sum((1, 2)) * sc["gamma_A"] ** 2, 1.0, atol=1e-7)
    assert np.all(sc["active_err"] < 1e-12) and np.all(sc["lam_off"] < 1e-7)
    assert np.all(sc["lam_min"] > 1e4 * 1e-7 * lam.sum((1, 2)))
    assert np.all(sc["delta"] > 1e4 * np.maximum(sc["active_err"], np.finfo(float).eps)), sc["delta"]
    assert np.all(sc["sigma_S"] > 0) and np.all(sc["K_N"] >= 1)       # the drift part is exercised


def test_sharpness_lemma(sc_inst):
    """lem-sharpness: the lemma's c_S = gamma_A^2 lambda_min sigma_S / sqrt(1 + |S| gamma_A^4
    lambda_min^2) is at most the best constant c* (computed exactly by
    `bounds.sharpness_constant`, vertex enumeration), and the consequence
    m_min(W) <= gamma_A a - c_S ||P_S h|| holds at 400 random W.

    What it catches (measured): c*/c_S is 1.40-1.94 on these six trials, so c_S multiplied by
    1.40 violates c_S <= c* on one trial (by 1.94 on every trial); the assertion c*/c_S <= 2.5
    catches c_S divided by 1.29 or more (the cruder constant gamma_A^2 lambda_min sigma_S / sqrt 2
    of the first version, up to sqrt 2 smaller, gave 1.98-2.68). The bound c*/c_S <= 2.5 is a
    property of these draws, not of the lemma: over the 72 trials of seeds 0-11 of the same
    fixture (both score settings) c*/c_S ranges over 1.34-5.69."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    cstar = A.bounds.sharpness_constant(data, opt, sc)
    assert np.all(sc["c_S"] <= cstar * (1 + 1e-9)) and np.all(cstar <= 2.5 * sc["c_S"]), cstar / sc["c_S"]
    rng = np.random.default_rng(5)
    B, d = W_mm.shape[0], W_mm.shape[-1]
    for _ in range(400):
        W = rng.uniform(0, 8) * W_mm + rng.uniform(0.1, 3) * rng.standard_normal((B, d, d))
        p = A.bounds.residual_parts(W, sc)
        gap = sc["gamma_A"] * p["a"] - A.metrics.min_margin(data, opt, W)
        assert np.all(gap >= sc["c_S"] * p["hS"] - 1e-9)
        # the first statement at h = W - a u*, restricted to the support: min_S <A_k, h> <= -c_S ||P_S h||
        h = W - p["a"][:, None, None] * W_mm * sc["gamma_A"][:, None, None]
        m = A.tokens.opt_margins(data, opt, h)
        vmin = np.where(sc["support"], m, np.inf).min(axis=(-2, -1))
        assert np.all(vmin <= -sc["c_S"] * p["hS"] + 1e-9)


def _chain(data, opt, S, sc, c, offset, ell_bar, lengths):
    """The four parts of lem-bounded-residual along a recorded run S (K+1, B, d, d) with step
    lengths (K, B); returns the measured ratios that the docstrings quote."""
    gA = sc["gamma_A"]
    rc = A.bounds.residual_constants(S[0], offset, ell_bar, sc, c)
    p = A.bounds.residual_parts(S, sc)
    m = A.metrics.min_margin(data, opt, S)
    assert np.all(m > 0)
    gap = gA * p["a"] - m
    # 1
    assert np.all(sc["c_S"] * p["hS"] <= gap + 1e-9) and np.all(gap <= rc["D_a"] + 1e-9)
    # 2
    pi, pib = A.bounds.nonsupport_mass(data, opt, S, sc)
    L = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths, axis=0)])
    nA = np.sqrt(p["a"][0] ** 2 + p["hS"][0] ** 2 + p["hN"][0] ** 2)
    with np.errstate(over="ignore"):
        pib2 = sc["K_N"] * sc["kappa_phi"] * np.exp(rc["X"] - gA * sc["delta"] * (nA + L) / 2)
    assert np.all(pi <= pib * (1 + 1e-9)) and np.all(pib <= pib2 * (1 + 1e-9))
    # 3
    hN_vec = _hN_vectors(S, sc)
    drift = np.linalg.norm(hN_vec - hN_vec[:1], axis=-1)
    chain3 = c["R_A"] / gA * np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths * pi[:-1], axis=0)])
    assert np.all(drift <= chain3 * (1 + 1e-9) + 1e-12) and np.all(chain3[-1] <= rc["M"])
    # 4
    omc = A.metrics.one_minus_corr(S, sc["W_mm"][None])
    h2 = p["hS"] ** 2 + p["hN"] ** 2 + p["hP"] ** 2
    nrm = np.linalg.norm(S, axis=(-2, -1))
    assert np.allclose(omc, h2 / (nrm * (nrm + p["a"])), rtol=1e-6, atol=1e-15)
    b4 = A.bounds.squared_direction_bound(m, h2, gA)
    assert np.all(omc <= b4 * (1 + 1e-9))
    assert np.all(h2 <= rc["H2"] * (1 + 1e-9))
    return dict(b4=b4, omc=omc, m=m, h2=h2, gap_over_Da=(gap / rc["D_a"]).max(0), rc=rc,
                drift_ratio=np.min(np.where(drift > 1e-8, chain3 / np.maximum(drift, 1e-300), np.inf), 0),
                pi_ratio=(pib / pi).min(0), sharp_ratio=(gap / np.maximum(sc["c_S"] * p["hS"], 1e-300)).min(0))


def _hN_vectors(S, sc):
    """(P_A - P_S) W for every record, as vectors (K+1, B, d^2)."""
    B, d = sc["W_mm"].shape[0], sc["W_mm"].shape[-1]
    w = S.reshape(S.shape[0], B, d * d)
    out = np.empty_like(w)
    for b in range(B):
        QA, QS = sc["Q_A"][b], sc["Q_S"][b]
        out[:, b] = (w[:, b] @ QA) @ QA.T - (w[:, b] @ QS) @ QS.T
    return out


def test_squared_orders_ngd(sc_inst):
    """lem-bounded-residual and thm-squared-orders (1) along NGD at the step of thm-ngd-no-floor
    (theta <= 1 asserted), 1500 steps from the fixture's start in the region: the four parts of
    the lemma at every step, and the theorem's deterministic bound with B + gamma_A S_t.

    What it catches (measured): part 4's order-carrying inequality
    1 - corr <= gamma_A^2 ||h_t||^2 / (2 m_min^2) is 1.04-1.14 times the measured 1 - corr at the
    last step (asserted < 1.5): that bound divided by 1.04 fails (1 - corr <= bound), multiplied
    by 1.32 fails (1.5 / 1.14), so halving or doubling it fails. Part 1's D_a is 3.9-19 times the
    largest gap gamma_A a_t - m_min, and c_S ||P_S h_t|| is 9.9-103 times below the gap at its
    closest; part 2's first bound is 11-217 times the measured off-support mass at its closest;
    part 3's sum is 2.4-6.8 times the measured drift: none is caught at a factor 2 (D_a halved,
    kappa_phi / 2.25 and X = 0 pass). Part 3's M is astronomically large (log M = 129-577 with
    equal scores; it overflows with heterogeneous ones), so the theorem's explicit constant
    H-bar^2 is not tested at any factor: what binds is part 4 with the measured residual, and
    parts 1-3 as inequalities. The c_psi term of the offset B is not exercised either (0.13-8.9
    here; without it the margins still exceed log(2 eps0/E0) + gamma_A S_t by 1.6-2.4). The
    theorem's form with B + gamma_A S_t is checked where that is positive (with heterogeneous
    scores B is negative on two trials and stays so within the 1500 steps)."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    eta = float(c["eta_ngd"].min())
    theta, _ = A.bounds.ngd_floorless_constants(eta, R_A=c["R_A"], gamma_A=c["gamma_A"],
                                                Delta_max=c["Delta_max"], b_minus=c["b_minus"],
                                                b_plus=c["b_plus"])
    assert np.all(theta <= 1)
    K = 1500
    h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    S = h.snapshots
    E0 = A.losses.excess_loss(data, opt, W0)
    B = A.bounds.ngd_margin_offset(E0, eta, c)
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    assert np.allclose(lengths, eta)
    r = _chain(data, opt, S, sc, c, B, eta, lengths)
    St = eta * np.arange(K + 1)[:, None]
    assert np.all(r["m"] >= B + sc["gamma_A"] * St - 1e-9)                  # the lemma's hypothesis
    det = A.bounds.squared_direction_bound(B + sc["gamma_A"] * St, r["rc"]["H2"], sc["gamma_A"])
    on = B + sc["gamma_A"] * St > 0                                         # where the theorem speaks
    assert np.all((r["b4"] <= det * (1 + 1e-9))[on])
    ratio = r["b4"][-1] / r["omc"][-1]
    assert np.all(ratio < 1.5), ratio                           # bound * 1.32 fails at the last step


def test_squared_orders_gd_and_polyak_star(sc_inst):
    """lem-bounded-residual and thm-squared-orders (2, 3) along GD (step 1, the hypotheses of
    thm-gd-rate asserted at t0 = 0) and along the (L - L*) Polyak step (multiplier mu eta_bar,
    eta_bar the step of test_squared_orders_ngd), 1000 steps each from the fixture's start: the
    four parts of the lemma at every step with the run's own step lengths, the margin hypothesis
    m_min(W_t) >= B + gamma_A L_t, and the intermediate forms of the theorem with the measured
    residual, gamma_A^2 ||h_t||^2 / (2 log^2(2 eps0/E0 + eps0 eta mu^2 t)) for GD and
    gamma_A^2 ||h_t||^2 / (2 (B + gamma_A eta lam t / R_A)^2) for the Polyak step (where the
    denominator is positive).

    What it catches (measured): part 4's first bound ends within a factor 1.09-1.17 of the
    measured 1 - corr for GD and 1.03-1.23 for the Polyak step (asserted < 1.5: the bound
    divided by 1.03 or multiplied by 1.23 (1.5 / 1.227) fails, GD's by 1.09 or 1.29; a factor 2
    either way fails); the GD log form with the measured residual is 1.9-3.2 times the measured value at the last
    step (asserted < 4). For the Polyak step the form with B + gamma_A L_t is 1.8-2.2 times the
    measured value with equal scores, but 112 (one trial) or undefined (B + gamma_A L_t <= 0
    still, two trials) with heterogeneous scores, where B is small or negative: not asserted.
    Part 3 (the drift of the off-support residual) is 2.4-7.7 times the measured drift at its
    closest. Not tested at any factor: the explicit constant H-bar^2 (M overflows), D_a (3.6-19
    times the gap), and GD's error constant C in B (0.016-0.18 here; without it the margins still
    exceed log(2 eps0/E0) + gamma_A L_t by 1.6-2.5, so C halved passes)."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    gA = sc["gamma_A"]
    E0 = A.losses.excess_loss(data, opt, W0)
    K = 1000
    # GD
    eta = 1.0
    assert np.all(A.bounds.gd_step_condition(c, eta, E0[None]))
    S = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    B = A.bounds.gd_margin_offset(E0, eta, c)
    r = _chain(data, opt, S, sc, c, B, np.log(2) / c["R_A"], lengths)
    assert np.all(lengths <= np.log(2) / c["R_A"])
    L = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths, axis=0)])
    assert np.all(r["m"] >= B + gA * L - 1e-9)
    lg = np.log(2 * c["eps0"] / E0 + c["eps0"] * eta * c["mu"] ** 2 * np.arange(K + 1)[:, None])
    assert np.all(r["m"] >= lg - 1e-9)
    inter = A.bounds.squared_direction_bound(lg, r["h2"], gA)
    assert np.all(r["omc"] <= r["b4"] * (1 + 1e-9)) and np.all(r["b4"] <= inter * (1 + 1e-9))
    assert np.all(r["b4"][-1] / r["omc"][-1] < 1.5), r["b4"][-1] / r["omc"][-1]
    assert np.all(inter[-1] / r["omc"][-1] < 4), inter[-1] / r["omc"][-1]
    # the (L - L*) Polyak step
    eta_bar = float(c["eta_ngd"].min())
    mult = float(np.min(c["mu"])) * eta_bar
    S = A.train.fit(data, model="W", optimizer="polyak_star", lr=mult, steps=K, init=W0,
                    snapshots=True, record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    assert np.all(lengths <= eta_bar * (1 + 1e-9))
    B = A.bounds.ngd_margin_offset(E0, eta_bar, c)
    r = _chain(data, opt, S, sc, c, B, eta_bar, lengths)
    L = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths, axis=0)])
    assert np.all(r["m"] >= B + gA * L - 1e-9)
    low = B + gA * mult * c["lam"] / c["R_A"] * np.arange(K + 1)[:, None]
    assert np.all(low <= B + gA * L + 1e-9)
    inter = A.bounds.squared_direction_bound(B + gA * L, r["h2"], gA)
    det = A.bounds.squared_direction_bound(low, r["h2"], gA)
    assert np.all((r["b4"] <= inter * (1 + 1e-9))[B + gA * L > 0])
    assert np.all((inter <= det * (1 + 1e-9))[low > 0])
    assert np.all(r["b4"][-1] / r["omc"][-1] < 1.5), r["b4"][-1] / r["omc"][-1]


@pytest.mark.slow
def test_squared_orders_ngd_order(sc_inst):
    """thm-squared-orders (1, 4) along NGD at the step of thm-ngd-no-floor, 10^4 steps from a
    start with a component off the features of norm 4 ||W_mm|| (a generic start): the lemma's
    chain holds at every step; the residual ||h_t|| stays within 10% of its start (its maximum is
    1.007-1.038 times its start); (1 - corr) ||W_t||^2 changes by a factor 0.996-1.018 between
    t = 5000 and 10^4 (asserted within [0.9, 1.1]); and the floor r_t^2-form of prop-invariant
    is below 1 - corr by a factor 1.03-1.09 at the last step (asserted <= 1.2, so the floor
    times 1.2 fails).

    What this shows and what it does not: the lower side of Theta(1/t^2), the floor, attained.
    It does NOT observe the upper order. Here the invariant component P_perp W_0 carries
    92-97% of ||h_t||^2 at t = 10^4, so (1 - corr) ||W_t||^2 would stay as flat if the part in A had
    order 1/t. The part in A on its own does not level off over any horizon this tier affords:
    from the fixture's start with its component off A removed, the residual ||P_A h_t|| grows by a
    factor 1.7-2.8 over 2 * 10^4 steps on the six trials (0.83 -> 2.32 on the first one), because
    the mass off the support decays like exp(-gamma_A delta eta t), with gamma_A delta eta =
    3.6e-5 to 3.2e-4 per step (ten e-folds take 3 * 10^4 to 2.8 * 10^5 steps, at about 1.6 ms a
    step here). The upper order 1/t^2 is proved (thm-squared-orders), not observed."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    eta = float(c["eta_ngd"].min())
    rng = np.random.default_rng(7)
    Q = A.bounds.orth_component(data, opt, rng.standard_normal(W_mm.shape))
    Q *= (4 * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    Ws = W0 + Q
    K = 10000
    S = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=Ws, snapshots=True,
                    record_every=1, device="cpu").snapshots
    E0 = A.losses.excess_loss(data, opt, Ws)
    B = A.bounds.ngd_margin_offset(E0, eta, c)
    r = _chain(data, opt, S, sc, c, B, eta, np.full((K, W_mm.shape[0]), eta))
    hn = np.sqrt(r["h2"])
    assert np.all(hn.max(0) <= 1.1 * hn[0]), hn.max(0) / hn[0]
    nrm = np.linalg.norm(S, axis=(-2, -1))
    x = r["omc"] * nrm ** 2
    ratio = x[K] / x[K // 2]
    assert np.all((0.9 < ratio) & (ratio < 1.1)), ratio
    floor = A.bounds.orth_floor(data, opt, Ws, nrm)
    assert np.all(r["omc"] >= floor * (1 - 1e-9)) and np.all(r["omc"][-1] <= 1.2 * floor[-1])


def test_ngd_no_floor_correction_needed(tight):
    """thm-ngd-no-floor's correction c_psi E_s / eps0 in the one-step inequality
    psi_{s+1} >= psi_s + eta gamma_A - eta c_psi E_s / eps0 (psi = -log E) is needed: on one
    sequence with two tokens (one lifted feature, so ||grad psi|| / r = N_p = gamma_A exactly)
    and a small score gap, the ratio r = Z/E of the proof is below 1 and NGD at the theorem's step
    min(log 2/R_A, mu/H) (theta = 0.07-0.23 <= 1), from the edge of the region (E_0 = 0.999 eps0),
    gains only 0.674-0.679 eta gamma_A at its first step; the inequality without the correction
    fails there (asserted), and with it holds at every step.

    What it catches (measured by dividing c_psi by a factor): the correction needed,
    max_s (eta gamma_A - gain_s) eps0 / (eta E_s), is c_psi / 6.41 - c_psi / 6.92 (at the first
    step), so c_psi / 7 fails in every trial (asserted) and c_psi / 6 passes. The directional
    bound of the theorem does not see the correction on this instance: there the margin bound
    m_min >= log(2 eps0/E) absorbs it (with the term deleted the bound still holds, checked)."""
    data, opt, W_mm, c = tight
    eta = float(c["eta_ngd"].min())
    theta, c_psi = A.bounds.ngd_floorless_constants(eta, **{k: c[k] for k in ("R_A", "gamma_A", "Delta_max",
                                                                              "b_minus", "b_plus")})
    assert np.all(theta <= 1)
    np.testing.assert_allclose(c["R_A"], c["gamma_A"])                    # one feature: N_p = gamma_A
    W0 = A.losses.scale_to_excess(data, opt, W_mm, 0.999 * c["eps0"])[:, None, None] * W_mm
    K = 300
    h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    logE = A.losses.excess_loss(data, opt, h.snapshots, log=True)
    E = np.exp(logE[:-1])
    gain = -np.diff(logE, axis=0)
    assert np.all(gain >= eta * c["gamma_A"] - eta * c_psi * E / c["eps0"] - 1e-12)
    assert np.all(np.any(gain < eta * c["gamma_A"] - 1e-12, axis=0))              # without c_psi: fails
    weak = c_psi / 7
    assert np.all(np.any(gain < eta * c["gamma_A"] - eta * weak * E / c["eps0"] - 1e-12, axis=0))
    # the directional bound with and without the correction, from a start with an off-feature part
    Q = A.bounds.orth_component(data, opt, np.random.default_rng(0).standard_normal(W_mm.shape))
    Q *= (5 * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=W0 + Q, snapshots=True,
                    record_every=1, device="cpu")
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    E0, n0 = A.losses.excess_loss(data, opt, W0 + Q), np.linalg.norm(W0 + Q, axis=(-2, -1))
    kw = {k: c[k] for k in ("mu", "eps0", "gamma_A", "H", "R_A", "Delta_max", "b_minus", "b_plus")}
    b = A.bounds.ngd_floorless_bound(np.full(K, eta), E0, n0, **kw)
    b0 = (n0 - np.log(2 * c["eps0"] / E0) / c["gamma_A"]) / (n0 + eta * np.arange(K + 1)[:, None])
    assert np.all(omc <= b0) and np.all(b0 <= b)


def _near_limit_start(W0, sc, rl, data, opt, *, margin=10.0, dist=0.1, seed=11):
    """a u* + x* + P_perp W0 + a perturbation of norm `dist` in A ∩ (W_mm)^perp, with a chosen so
    that gamma_A delta a = `margin` (delta the smallest off-support slack)."""
    gA = sc["gamma_A"]
    u = sc["W_mm"] * gA[:, None, None]
    dmin = np.where(np.isfinite(rl["delta_k"]), rl["delta_k"], np.inf).min((1, 2))
    pert = np.random.default_rng(seed).standard_normal(W0.shape)
    pert -= A.bounds.orth_component(data, opt, pert)
    pert -= np.einsum("bij,bij->b", pert, u)[:, None, None] * u
    pert *= dist / np.linalg.norm(pert, axis=(-2, -1))[:, None, None]
    a0 = margin / (gA * dmin)
    return a0[:, None, None] * u + rl["x_star"] + A.bounds.orth_component(data, opt, W0) + pert


def _restart_chain(data, opt, S, lengths, ell_bar, t1s, sc, rl, c, offset_fn, closed=True):
    """thm-restart-residual along a recorded run S (K+1, B, d, d) with step lengths (K, B), from
    each restart step t1 in t1s: the run hypotheses (E decreasing; sum_{s >= t1} l_s E_s <=
    2 E_t1 / mu over the recorded horizon; the margin hypothesis m_min(W_t) >= B + gamma_A L_t
    behind D, with B = offset_fn(E_t1)), parts 1 and 2 at every step t >= t1 with the centre
    zeta = x* + h_N(t1), and either (closed) part 3 and the direction bound with its constant, or
    (not closed) the direction bound with part 1's measured-drift residual. Returns the ratios
    bound / (1 - corr) over t >= t1, one (K+1-t1, B) array per t1, and the restart constants."""
    gA, RA = sc["gamma_A"], c["R_A"]
    E = A.losses.excess_loss(data, opt, S)
    assert np.all(E <= c["eps0"])
    assert np.all(np.diff(E, axis=0) <= 0), "E not decreasing"                     # hypothesis
    pi, _ = A.bounds.nonsupport_mass(data, opt, S, sc)
    a = A.bounds.residual_parts(S, sc)["a"]
    omc = A.metrics.one_minus_corr(S, sc["W_mm"][None])
    m = A.tokens.opt_margins(data, opt, S)
    fin_m = np.isfinite(m)
    m_min = np.where(fin_m, m, np.inf).min((-2, -1))
    # eps_s = (2 + Delta_max) max_i q_i(W_s), for part 2
    q = np.exp(np.logaddexp.reduce(np.where(fin_m, -m, -np.inf), axis=-1)).max(-1)
    eps = (2 + c["Delta_max"]) * q
    fin = np.isfinite(rl["delta_k"])
    decay = np.exp(-gA[:, None, None] * np.where(fin, rl["delta_k"], 0) * a[..., None, None])
    out, rcs = [], []
    for t1 in t1s:
        L = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths[t1:], axis=0)])
        assert np.all((lengths[t1:] * E[t1:-1]).sum(0) <= 2 * E[t1] / c["mu"])          # hypothesis
        B = offset_fn(E[t1])
        assert np.all(m_min[t1:] >= B + gA * L - 1e-9)                                  # margin hyp.
        drift = np.concatenate([np.zeros((1, S.shape[1])), np.cumsum(lengths[t1:] * pi[t1:-1], axis=0)])
        rc = A.bounds.restart_constants(S[t1], E[t1], ell_bar, sc, rl, c, pi_drift=drift)
        rho = A.bounds.residual_limit_distance(S[t1:], sc, rl, S[t1])                   # centre x* + h_N(t1)
        assert np.allclose(rho[0], rc["rho"])
        assert np.all(rho <= rc["rho_meas_bound"] * (1 + 1e-9) + 1e-12)                 # part 1
        mass = np.where(fin, rc["pi_star"] * decay[t1:], 0.0).sum((-2, -1))
        assert np.all(pi[t1:] <= np.exp(eps[t1:] + (rl["R_N"] + rl["R_V"]) * rho) * mass * (1 + 1e-9))  # part 2
        assert np.all(a[t1:] >= rc["a"] + gA / RA * L - 1e-9)                           # part 2, a_t
        D_a = gA * rc["a"] - B
        if closed:
            assert np.all(np.isfinite(rc["rho_bar"])), rc["rho_bar"]                  # part 3 applies
            assert np.all(rho <= rc["rho_bar"] * (1 + 1e-9))
            H2 = None
        else:
            H2 = rc["H2_meas"]
        b = A.bounds.restart_direction_bound(L, rc, gA, RA, H2=H2, D_a=D_a)
        assert np.all(omc[t1:] <= b * (1 + 1e-9))                                       # the bound
        out.append(b / omc[t1:])
        rcs.append(rc)
    return out, rcs


def test_restart_residual_near_limit(sc_inst):
    """thm-restart-residual, fully from the state at t1: along NGD (step of thm-ngd-no-floor,
    1500 steps) and the (L - L*) Polyak step (multiplier mu eta_bar, 1000 steps) from a start
    a u* + x* + P_perp W0 + (0.1 in A, off x*), a with gamma_A delta a = 10, restarted at
    t1 = 0, 500, 1000 (Polyak: 0, 500). The run hypotheses are asserted (E decreasing;
    sum_{s>=t1} l_s E_s <= 2 E_t1/mu, measured at most 0.33 of it; the margin hypothesis
    m_min >= B + gamma_A L_t behind D, with room >= 1.35). With the centre zeta = x* + h_N(t1):
    part 1 (rho_t = ||P_A h_t - zeta|| <= rho_t1 + Omega + (R_N/gamma_A) sum l_s pi_s, measured pi)
    and part 2 (pi_s against its bound, with pi*_k carrying e^{-<A_k, zeta>}; a_t's lower bound) at
    every step, the closed form of part 3 applies (rho_bar finite) and rho_t <= rho_bar, and
    1 - corr <= ((sqrt(||x*||^2 + ||h_N(t1)||^2) + rho_bar)^2 + ||P_perp W_t1||^2) / (2 a_low(t)^2)
    at every step t >= t1.

    What it catches (measured by mutation of `restart_constants`): bound / (1 - corr) over every
    t >= t1, trial and restart is 1.026-1.114 (NGD) and 1.038-1.094 (Polyak*) with equal scores,
    1.014-1.094 and 1.019-1.091 with heterogeneous ones (asserted max < 1.15, and < 1.13 at the
    last step). So H^2 divided by 1.014 fails (heterogeneous scores; / 1.013 passes), divided by
    1.026 fails on both settings, and halving it fails at every step. The old centre x* (rho_t1 =
    ||P_A h_t1 - x*||, H^2 = (||x*|| + rho_bar)^2 + ...) gives 1.035-1.163 and exceeds the upper
    assertion with equal scores (not with heterogeneous ones, max 1.121). The constant is the limit of
    the residual: x* (the minimizer of log sum_S w_k e^{-<A_k, x>} on V, with the limit weights
    w_k = beta(gamma*_i) Delta_i) plus h_N(t1) plus the invariant part. Computing x* and pi* with
    uniform weights (or without the factor Delta_i) fails part 2 on the heterogeneous instances (a
    no-op with equal scores, whose weights are uniform); x* = 0 fails part 2 everywhere. NOT
    exercised: Omega (<= 2e-16 here, E tiny), the off-support term of rho_bar (rho_bar - rho_t1
    <= 0.004), the factor e^{-<A_k, h_N(t1)>} of pi* (dropping it passes), ||h_N(t1)||^2 in ||zeta||^2
    (h_N <= 0.092 against ||x*|| >= 1.0: dropping it passes), the exponent (R_N + R_V) and the
    a-lower bound's rate (a_t1 >> L_t): the test binds H^2 through ||x*||, rho_t1 and
    ||P_perp W_t1||."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    rl = A.bounds.residual_limit(data, opt, sc)
    # the Newton residual of residual_limit (losses.lse_argmin): <= 1e-15 on these instances
    assert np.all(rl["grad"] < 1e-12)
    gA = sc["gamma_A"]
    eta = float(c["eta_ngd"].min())
    assert np.all(eta <= 2 * gA / rl["R_V"] ** 2)                    # the step condition of part 1
    theta, _ = A.bounds.ngd_floorless_constants(eta, R_A=c["R_A"], gamma_A=gA, Delta_max=c["Delta_max"],
                                                b_minus=c["b_minus"], b_plus=c["b_plus"])
    assert np.all(theta <= 1)                                        # thm-ngd-no-floor: the offset B
    Ws = _near_limit_start(W0, sc, rl, data, opt)
    K = 1500
    S = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=Ws, snapshots=True,
                    record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    assert np.allclose(lengths, eta)
    ratios, _ = _restart_chain(data, opt, S, lengths, eta, (0, 500, 1000), sc, rl, c,
                               lambda E: A.bounds.ngd_margin_offset(E, eta, c))
    assert max(r.max() for r in ratios) < 1.15, [r.max(0) for r in ratios]
    assert all(np.all(r[-1] < 1.13) for r in ratios), [r[-1] for r in ratios]
    # the (L - L*) Polyak step: NGD steps of length delta_s <= eta/mu <= eta_bar in the region
    mult = float(np.min(c["mu"])) * eta
    S = A.train.fit(data, model="W", optimizer="polyak_star", lr=mult, steps=1000, init=Ws,
                    snapshots=True, record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    assert np.all(lengths <= eta * (1 + 1e-9))
    ratios, _ = _restart_chain(data, opt, S, lengths, eta, (0, 500), sc, rl, c,
                               lambda E: A.bounds.ngd_margin_offset(E, eta, c))
    assert max(r.max() for r in ratios) < 1.15, [r.max(0) for r in ratios]


def test_restart_residual_far_start(sc_inst):
    """thm-restart-residual from the fixture's start (8 W_mm + noise: the support part P_S h of
    the residual is far from its limit x*), along NGD (1500 steps) and GD (step 1, 1000 steps,
    the hypotheses of thm-gd-rate asserted), restarted at t1 = 0 and at the middle of the run:
    the run hypotheses (E decreasing; sum l_s E_s <= 2 E_t1/mu, measured <= 0.31 of it; the
    margin hypothesis behind D, room >= 1.66), part 1 with the measured off-support mass and the
    centre zeta = x* + h_N(t1), part 2 at every step, and the direction bound with part 1's
    residual, 1 - corr <= ((||zeta|| + rho_t1 + Omega + (R_N/gamma_A) sum l_s pi_s)^2
    + ||P_perp W||^2) / (2 a_low^2), at every step t >= t1.

    What it shows (observed): here the closed form of part 3 does not apply (rho_bar = inf at
    both restarts on every trial). What binds is the small off-support slack: gamma_A delta a_0
    = 0.20-1.8, so the coefficient Phi of the fixed point is 5-51 and Phi kappa e > 1 even with
    rho_t1 = 0. The bound is loose: bound / (1 - corr) at the last step is 4.4-27 (NGD) and
    4.1-24 (GD), as with the old centre x* (rho_t1 = ||P_S h_t1 - x*|| = 1.3-3.3 is the support
    part, which the new centre does not shrink; h_N(t1) = 0.13-0.71). Part of this is not slack
    of the proof: the distance ||P_S h_t - x*|| falls along every NGD run (end / start =
    0.49-0.89, asserted < 0.95), and the limit ||x*||^2 + ||h_N||^2 + ||P_perp W||^2 of ||h_t||^2 is
    1.25-4.9 times the measured ||h_t||^2 at the end (asserted > 1.2), so a bound valid for every
    t >= t1 must exceed the current 1 - corr by that factor. Not a test of the constant at a
    factor (test_restart_residual_near_limit is); the ratio is not asserted (not within 2)."""
    (data, opt, W_mm, c, W0), sc = sc_inst
    rl = A.bounds.residual_limit(data, opt, sc)
    gA = sc["gamma_A"]
    eta = float(c["eta_ngd"].min())
    K = 1500
    S = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    ratios, rbars = _restart_chain(data, opt, S, lengths, eta, (0, K // 2), sc, rl, c,
                                   lambda E: A.bounds.ngd_margin_offset(E, eta, c), closed=False)
    rS = [A.bounds.residual_limit_distance(S[t], sc, rl, S[t]) for t in (0, K)]    # ||P_S h_t - x*||
    assert np.all(rS[1] < 0.95 * rS[0])                 # observed: P_S h_t approaches x*
    p = A.bounds.residual_parts(S[-1], sc)
    lim = np.linalg.norm(rl["x_star"], axis=(-2, -1)) ** 2 + p["hN"] ** 2 + p["hP"] ** 2
    assert np.all(lim > 1.2 * (p["hS"] ** 2 + p["hN"] ** 2 + p["hP"] ** 2))   # observed: h_t not yet at its limit
    # GD, step 1: lengths l_s <= eta R_A E(W_t1) / lam, and the part-1 step condition
    eta_gd, K = 1.0, 1000
    E0 = A.losses.excess_loss(data, opt, W0)
    assert np.all(A.bounds.gd_step_condition(c, eta_gd, E0[None]))
    ell_bar = eta_gd * c["R_A"] * E0 / c["lam"]
    assert np.all(ell_bar <= 2 * gA / rl["R_V"] ** 2)
    S = A.train.fit(data, model="W", optimizer="gd", lr=eta_gd, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu").snapshots
    lengths = np.linalg.norm(np.diff(S, axis=0), axis=(-2, -1))
    assert np.all(lengths <= ell_bar * (1 + 1e-9))
    gratios, _ = _restart_chain(data, opt, S, lengths, ell_bar, (0, K // 2), sc, rl, c,
                                lambda E: A.bounds.gd_margin_offset(E, eta_gd, c), closed=False)


# ------------------------------------------------- the reduced dynamics (attnsvm.reduced)
def test_reduced_step_equals_library_gradient(inst):
    """attnsvm.reduced: one step of GD, NGD and the (L - L*) Polyak step computed in margin space
    (m + l G w / sqrt(w^T G w), a + l <u*, sum w_k A_k> / ||.||) equals the step of the library's
    gradient (attnsvm.losses.risk_grad) in W space, to rounding: on the fixture's six instances
    (equal and heterogeneous scores) and on distinct-score draws (outside the equal-score model,
    where the coefficients w_k change sign), the margins' increments agree to <= 1e-10 of their
    size plus 64 eps |m| (measured: at most about 4e-11 relative, the rounding of m ~ 8 against
    increments ~ 1e-4), a to 64 eps |a|, the step lengths to 1e-9 relative, and the log excess
    risk to 1e-12 (attnsvm.losses.excess_loss). A coefficient off by any factor (e.g. beta_i
    dropped, or the 1/n) moves the GD increment by that factor and fails; NGD and the Polyak step
    see the direction only, which a wrong sign or a dropped s_opt term changes by O(1). Also on
    the instance of thm-sc-necessity and its control at margins 9 and 30: at 30 the former
    textbook risk_grad moved the control's NGD increment by 1.5e-5, 8e5 times its tolerance
    (measured; on the necessity instance at W = k W_mm the two sequences' coefficients are equal
    and the direction comes out exact in either form). Both are checked against a 60-digit
    reference up to m = 300 in test_gradient_direction_exact_at_large_margins."""
    data, opt, W_mm, c, W0 = inst
    ddist, odist = A.data.score_instances(4, 3, 5, trials=3, seed=5, distinct=True)
    Wd = A.svm.att_svm_batch(ddist.X, ddist.Z, odist, strict=True)[0]
    cases = [(data, opt, W_mm, W0), (ddist, odist, Wd, 8 * Wd)]
    for delta in (0.0, 0.25):                      # thm-sc-necessity's instance and its control
        d1 = _sc_instance(delta)
        batch = A.data.AttnData(X=d1.X[None], y=d1.y[None], Z=d1.Z[None], v=d1.v[None])
        Wn = np.zeros((1, 3, 3))
        Wn[0, :, 0] = (0.5, 0.0, 0.5)
        cases += [(batch, np.zeros((1, 2), int), Wn, k * Wn) for k in (9, 30)]
    eps = np.finfo(float).eps
    for dat, op, Wm, Ws in cases:
        logE = A.losses.excess_loss(dat, op, Ws, log=True)
        G = A.losses.risk_grad(dat, Ws)
        for b in range(Ws.shape[0]):
            sysm = A.reduced.margin_system(dat.trial(b), Ws[b], Wm[b], opt=op[b])
            F = sysm["feat"].reshape(len(sysm["feat"]), -1)
            u = Wm[b].ravel() / np.linalg.norm(Wm[b])
            gn = np.linalg.norm(G[b])
            E = np.exp(logE[b])
            for rule, lr, step in (("gd", 1.0, G[b]), ("ngd", 0.1, 0.1 * G[b] / gn),
                                   ("polyak_star", 0.5, 0.5 * E * G[b] / gn ** 2)):
                W1 = Ws[b] - step
                new, ell = A.reduced.reduced_step(sysm, dict(m=sysm["m0"], a=sysm["a0"]), optimizer=rule, lr=lr)
                inc_W, inc_r = F @ W1.ravel() - sysm["m0"], new["m"] - sysm["m0"]
                tol = 1e-10 * np.abs(inc_W).max() + 64 * eps * np.abs(sysm["m0"]).max()
                assert np.abs(inc_r - inc_W).max() <= tol, (rule, np.abs(inc_r - inc_W).max(), tol)
                assert abs(new["a"] - u @ W1.ravel()) <= 64 * eps * abs(sysm["a0"]) + 1e-10 * abs(ell)
                assert np.isclose(ell, np.linalg.norm(step), rtol=1e-9, atol=0)
            lE = A.reduced.reduced_run(sysm, optimizer="ngd", lr=0.1, steps=1, record=[0])["log_E"][0]
            assert abs(lE - logE[b]) <= 1e-12 * abs(logE[b])
            Wr = A.reduced.reconstruct(sysm, sysm["m0"])
            assert np.allclose(Wr, Ws[b], atol=1e-12 * np.abs(Ws[b]).max())


def _mp_descent_direction(data, W, digits):
    """-grad L(W) / ||grad L(W)||_F of one instance (logistic loss, fixed head) in mpmath at
    ``digits`` digits, from the definition: the softmax, u_i = sum_t s_it gamma_it and
    -grad L = (1/n) sum_i beta_i sum_t s_it (gamma_it - u_i) x_it z_i^T, the textbook form, whose
    cancellation (of order e^-m) the digits absorb. W's float entries are taken exactly."""
    import mpmath as mp

    X, y, Z, v = (np.asarray(a, dtype=float) for a in (data.X, data.y, data.Z, data.v))
    n, T, d = X.shape
    with mp.workdps(digits):
        f = lambda a: [[mp.mpf(float(e)) for e in row] for row in a]  # noqa: E731
        Wm, Xm, Zm = f(W), [f(Xi) for Xi in X], f(Z)
        G = [[mp.mpf(0)] * d for _ in range(d)]
        for i in range(n):
            Wz = [mp.fsum(Wm[p][q] * Zm[i][q] for q in range(d)) for p in range(d)]
            a = [mp.fsum(Xm[i][t][p] * Wz[p] for p in range(d)) for t in range(T)]
            e = [mp.exp(x - max(a)) for x in a]
            s = [x / mp.fsum(e) for x in e]
            g = [y[i] * mp.fsum(Xm[i][t][p] * mp.mpf(float(v[p])) for p in range(d)) for t in range(T)]
            u = mp.fsum(st * gt for st, gt in zip(s, g))
            beta = 1 / (1 + mp.exp(u))
            for t in range(T):
                c = beta * s[t] * (g[t] - u) / n
                for p in range(d):
                    for q in range(d):
                        G[p][q] += c * Xm[i][t][p] * Zm[i][q]
        norm = mp.sqrt(mp.fsum(x * x for row in G for x in row))
        return np.array([[float(x / norm) for x in row] for row in G])


def _large_margin_cases():
    """(name, instance, opt, W_mm, offset): thm-sc-necessity's instance (delta = 0), whose
    constraint 2 has multiplier 0, and one distinct-score draw (seed 5, trial 0); W = m W_mm +
    offset has smallest margin about m."""
    Wn = np.zeros((3, 3))
    Wn[:, 0] = (0.5, 0.0, 0.5)
    off = np.zeros((3, 3))
    off[1, 0] = 0.7                                  # margins (m, m + 0.7)
    dd, od = A.data.score_instances(4, 3, 5, trials=1, seed=5, distinct=True)
    Wd = A.svm.att_svm_batch(dd.X, dd.Z, od, strict=True)[0][0]
    return [("necessity", _sc_instance(0.0), np.zeros(2, int), Wn, off),
            ("distinct", dd.trial(0), od[0], Wd, 0.3 * np.random.default_rng(0).standard_normal((5, 5)))]


#: the margins of the large-margin check (the masses off the optimal tokens e^-m, down to 1e-130)
_LARGE_M = (15.0, 25.0, 30.0, 100.0, 300.0)


def _direction_errors(data, opt, W, digits):
    """Relative max-norm errors of the descent direction at W against the mpmath reference:
    the reduced dynamics' (sum_k w_k A_k), the library's numpy risk gradient
    (attnsvm.losses.risk_grad) and the engine's step (AttentionClassifier('W').grad)."""
    import torch

    ref = _mp_descent_direction(data, W, digits)
    sysm = A.reduced.margin_system(data, W, opt=opt)
    w_hat = A.reduced._coefficients(sysm, sysm["m0"])[0]
    t = lambda a: torch.as_tensor(np.asarray(a, dtype=float))[None]  # noqa: E731
    _, g, _ = A.models.AttentionClassifier("W").grad(
        {"W": t(W), "v": t(data.v)}, {"X": t(data.X), "y": t(data.y), "Z": t(data.Z)},
        A.losses.get_loss("logistic"))
    dirs = {"reduced": np.einsum("k,kde->de", w_hat, sysm["feat"]),
            "risk_grad": -A.losses.risk_grad(data, W[None])[0], "engine": -g["W"][0].numpy()}
    return {k: float(np.abs(D / np.linalg.norm(D) - ref).max() / np.abs(ref).max()) for k, D in dirs.items()}


def test_gradient_direction_exact_at_large_margins():
    """The descent direction at large margins, against a 60-digit mpmath reference (plus m/2.3
    digits for the cancellation of the textbook formula, of order e^-m), at smallest margins
    m = 15, 25, 30, 100, 300 on thm-sc-necessity's instance (W = m W_mm + 0.7 e2 e1^T, margins
    (m, m + 0.7)) and on a distinct-score draw (n, T, d) = (4, 3, 5), seed 5, trial 0
    (W = m W_mm + 0.3 N(0, 1)): the reduced dynamics' direction (attnsvm.reduced), the library's
    numpy risk gradient (attnsvm.losses.risk_grad) and the engine's step (AttentionClassifier
    grad) each agree with it to 4 eps (8 + m), about 1e-13 at m = 100, 2.7e-13 at m = 300 (the
    rounding of scores of size m, which moves the masses by eps m relative).

    Measured: errors at most 2.7e-15 on the necessity instance and 3.9e-14 on the distinct draw
    (at m = 300); the tolerance is met with room 6.7 at worst (distinct draw, m = 30), so a
    tolerance divided by 6.7 fails. Finding: before this test, risk_grad formed the textbook
    s_it (gamma_it - u_i) in float64, whose optimal-token term is rounding noise once 1 - s < 1e-16:
    its error grew like eps e^m (6.8e-11 at m = 15, 2.9e-6 at m = 25, 6.3e-5 at m = 30, 1.0 from
    m ~ 40 on the necessity instance), while the engine's step and the reduced dynamics stayed at
    rounding; risk_grad is now evaluated by the engine's Jacobian (attnsvm.jacobian). The planted
    textbook direction below fails the tolerance by a factor 2.3e3 at m = 15 and 6.7e7 at m = 25.
    A coefficient of sequence 2 scaled by 1 + f in the reduced direction is caught from
    f = 1e-13 on (7e-14 passes; necessity instance, m = 15). The returned gradient itself
    underflows to 0 past margins of about 740 (e^-m below the float range): there only its
    direction (the engine's log-scaled step, the reduced dynamics) exists."""
    eps = np.finfo(float).eps
    for name, data, opt, W_mm, off in _large_margin_cases():
        for m in _LARGE_M:
            W = m * W_mm + off
            tol = 4 * eps * (8 + m)
            err = _direction_errors(data, opt, W, 60 + int(m / 2.3))
            assert max(err.values()) <= tol, (name, m, err, tol)
    # the planted failure: the textbook form in float64 (the former risk_grad) at m = 15 and 25
    data, opt, W_mm, off = _large_margin_cases()[0][1:]
    X, y, Z, v = (np.asarray(a, dtype=float) for a in (data.X, data.y, data.Z, data.v))
    for m in (15.0, 25.0):
        W = m * W_mm + off
        s = A.metrics.softmax(np.einsum("ntd,de,ne->nt", X, W, Z))
        g = y[:, None] * (X @ v)
        u = (s * g).sum(-1)
        D = np.einsum("nt,ntd,ne->de", s * (g - u[:, None]) / (1 + np.exp(u))[:, None], X, Z)
        ref = _mp_descent_direction(data, W, 60 + int(m / 2.3))
        assert np.abs(D / np.linalg.norm(D) - ref).max() > 1e3 * 4 * eps * (8 + m)


def _sc_instance(delta):
    """The two-sequence equal-score instance of thm-sc-necessity (delta = 0) and its control
    (delta > 0): z_i = e1, v = e3, x_{1,opt} = (1, 0, 1), x_{2,opt} = (1 + 2 delta, 1 - 2 delta, 1),
    the other token 0; W_mm = (e1 + e3) e1^T / 2 with multipliers (1/2, 0)."""
    X = np.zeros((2, 2, 3))
    X[0, 0], X[1, 0] = (1.0, 0.0, 1.0), (1.0 + 2 * delta, 1.0 - 2 * delta, 1.0)
    return A.data.AttnData(X=X, y=np.ones(2), Z=np.array([[1.0, 0, 0], [1.0, 0, 0]]), v=np.array([0.0, 0, 1]))


def _sc_sandwich(sysm, r):
    """thm-sc-necessity (ii) along a reduced run: (G(y_t) - G(y_0)) / (m_t - m_0) against the
    constants e^{-3 Qbar}/2 and e^{3 Qbar + lbar/sqrt 2}/2; returns the two room factors (the
    lower bound's constant times f_lo still holds, times f_lo (1 + 1e-9) fails; likewise f_up)."""
    y, m = r["p"][:, 0], r["m"][:, 0]
    G = np.exp(y) + y
    Qbar = np.exp(-m[0]) * max(1.0, np.exp(-y[0]))
    lo, hi = np.exp(-3 * Qbar) / 2, np.exp(3 * Qbar + r["ell"].max() / np.sqrt(2)) / 2
    dm, dG = m[1:] - m[0], G[1:] - G[0]
    assert np.all(np.diff(m) > 0) and np.all(np.diff(y) > 0)              # (i): both increase
    assert np.all(dG >= lo * dm * (1 - 1e-12)) and np.all(dG <= hi * dm * (1 + 1e-12))
    return float(np.min(dG / (lo * dm))), float(np.min(hi * dm / dG))


def test_sc_necessity():
    """thm-sc-necessity on its instance (delta = 0: constraint 2 active with a zero multiplier)
    against the control delta = 0.25 (strictly complementary), both run exactly in margin space
    (attnsvm.reduced, checked against the library's gradient above), from a start with an
    off-feature component (P_perp W_0 != 0, a generic start). Deterministic (no random draw).

    The instance: the solver's W_mm is (e1 + e3) e1^T / 2 to 1e-8 with multipliers (1/2, 0), and
    support_constants reports delta = 0 (to 1e-8, the solver's accuracy) and 0.25 for the control.
    NGD (step 0.5, 8000 steps from 4 W_mm + P_perp part) and GD (step 10^3 from 12 W_mm +
    P_perp part, where the hypotheses of thm-gd-rate hold at t0 = 0, asserted; 8000 steps):
    part (ii), the sandwich of G(y_t) - G(y_0) (G(y) = e^y + y, y = <e2 e1^T, W>) between
    c_-(m_t - m_0) and c_+(m_t - m_0), m = <A_1, W>, holds at every step of both runs. Smallest
    factors caught (measured room, asserted): the lower constant c_- = e^{-3 Qbar}/2 multiplied by
    1.057 fails on NGD and by 1.00008 on GD (room 1.0570 and 1.0000761; asserted < 1.1 and
    < 1.001); the upper constant c_+ = e^{3 Qbar + lbar/sqrt 2}/2 divided by 1.45 fails on NGD
    and by 1.0016 on GD (room 1.440 and 1.00157; asserted < 1.5 and < 1.01). What binds is the
    factor 1/2 of both constants: the NGD room 1.057 is almost all the correction e^{-3 Qbar}
    (Qbar = e^{-4}), so c_- = 1/2 without it still passes, and the corrections e^{+-3 Qbar},
    e^{lbar/sqrt 2} are not exercised (from a start with m_0 <= 0 they are very loose, the
    referee measured c_+ = 2478 against dG/dm <= 0.56). Part (iii): the part
    of the residual in A is y_t e2 e1^T (||P_A h||^2 = y^2 to 1e-9). Part (iv) along NGD, over
    the last 90% of the run, where m_t grows tenfold: y_t - log m_t stays within 0.018 of a
    constant (asserted 0.05) while y_t grows by log 10 + 0.012 (asserted >= log 10 - 0.05): the
    residual diverges like log t; and (1 - corr) ||W_t||^2 doubles there (factor 1.99, asserted
    >= 1.3). Part (v) along GD: m_t >= log(2 eps0/E_0 + eps0 eta mu^2 t) and the explicit lower
    bound y_t >= log((G(y_0) + c_-(that - m_0)) / 2) (log log t) hold at every step. The control:
    under NGD, ||h_N||^2 changes by < 1e-9 relative over the second half of the run, y_t not at
    all, and (1 - corr) ||W_t||^2 by < 1e-7 (the factor ||W||/(||W|| + a) -> 1/2): the residual
    is bounded, as lem-bounded-residual proves for strictly complementary instances."""
    W_mm = np.zeros((3, 3))
    W_mm[:, 0] = (0.5, 0.0, 0.5)
    V = np.zeros((1, 3, 3))
    V[0, 1, 0] = 1.0                                             # y = <e2 e1^T, W>
    perp = np.zeros((3, 3))
    perp[:, 1] = (0.3, -0.2, 0.1)                                # off the features (column 1)
    K = 8000
    out = {}
    for delta in (0.0, 0.25):
        d1 = _sc_instance(delta)
        Wsol, lam = A.svm.att_svm(d1.X, d1.Z, np.zeros(2, int), return_dual=True)
        assert np.allclose(Wsol, W_mm, atol=1e-8) and np.allclose(lam[:, 1], (0.5, 0.0), atol=1e-8)
        batch = A.data.AttnData(X=d1.X[None], y=d1.y[None], Z=d1.Z[None], v=d1.v[None])
        sc = A.bounds.support_constants(batch, np.zeros((1, 2), int))
        assert abs(sc["delta"][0] - delta) <= 1e-8, sc["delta"]
        assert sc["support"][0, 0, 1] and not sc["support"][0, 1, 1]
        S = np.array([True, False])
        # NGD from 4 W_mm + perp
        sysm = A.reduced.margin_system(d1, 4 * W_mm + perp, W_mm, directions=V, support=S)
        assert np.isclose(sysm["hP2"], np.sum(perp ** 2))
        r = A.reduced.reduced_run(sysm, optimizer="ngd", lr=0.5, steps=K)
        res = A.reduced.residual_sq(sysm, r["r"], r["a"])
        x = res["omc"] * res["norm"] ** 2                                 # (1 - corr) ||W||^2
        y, m = r["p"][:, 0], r["m"][:, 0]
        if delta == 0:
            out["ngd"] = _sc_sandwich(sysm, r)
            assert np.allclose(res["N"], y ** 2, rtol=1e-9)              # P_A h = y e2 e1^T
            dev = (y - np.log(m))[K // 10:]
            assert dev.max() - dev.min() < 0.05, dev.max() - dev.min()
            assert y[K] - y[K // 10] >= np.log(10) - 0.05
            assert x[K] >= 1.3 * x[K // 10], x[K] / x[K // 10]
        else:
            assert abs(res["N"][K] - res["N"][K // 2]) <= 1e-9 * res["N"][K]
            assert abs(x[K] - x[K // 2]) <= 1e-7 * x[K]          # ||W||/(||W|| + a) -> 1/2
            assert y[K] - y[K // 2] < 1e-9
        # GD where thm-gd-rate's hypotheses hold at t0 = 0
        if delta == 0:
            eta, W0 = 1e3, 12 * W_mm + perp
            c = A.bounds.constants(batch, np.zeros((1, 2), int), W_mm[None])
            E0 = A.losses.excess_loss(batch, np.zeros((1, 2), int), W0[None])[0]
            assert E0 <= c["eps0"][0] and np.all(A.bounds.gd_step_condition(c, eta, np.array([E0])))
            sysg = A.reduced.margin_system(d1, W0, W_mm, directions=V, support=S)
            rg = A.reduced.reduced_run(sysg, optimizer="gd", lr=eta, steps=K)
            out["gd"] = _sc_sandwich(sysg, rg)
            yg, mg = rg["p"][:, 0], rg["m"][:, 0]
            Qbar = np.exp(-mg[0]) * max(1.0, np.exp(-yg[0]))
            t = np.arange(K + 1)
            m_lo = np.log(2 * c["eps0"][0] / E0 + c["eps0"][0] * eta * c["mu"][0] ** 2 * t)
            assert np.all(mg >= m_lo - 1e-9)                              # thm-gd-rate, region
            G0 = np.exp(yg[0]) + yg[0]
            y_lo = np.log((G0 + np.exp(-3 * Qbar) / 2 * (m_lo - mg[0])) / 2)
            assert np.all(yg >= y_lo - 1e-12)
    (lo_n, up_n), (lo_g, up_g) = out["ngd"], out["gd"]
    assert 1 <= lo_n < 1.1 and 1 <= lo_g < 1.001, (lo_n, lo_g)            # both sides bind
    assert 1 <= up_n < 1.5 and 1 <= up_g < 1.01, (up_n, up_g)


def test_sc_generic_on_the_notebooks_data():
    """thm-sc-generic, checked through the certificate of the claim strictly_complementary
    (attnsvm.bounds.strictly_complementary: support margins exact to 1e-10, delta > 1e4 times
    their rounding). Three regimes, each at seeds 0, 1, 2 and with equal and distinct scores:
    the notebook's quick size (n, T, d) = (6, 4, 8), 12 instances, where the support features
    are independent and the multipliers unique (smallest delta 1.5e-3 at seeds 0-2 with equal
    scores; rounding <= 2e-15): every instance is certified; and (5, 6, 3), 40 draws, where many
    supports are linearly dependent (more constraints than d^2 = 9 can be active), so that the
    "some choice of multipliers" of the theorem and the solver's choice are exercised. There 228
    of the 240 draws are feasible; on 208 the default solver's polished multipliers are exact and
    every one of them is certified (smallest delta 2.2e-4, asserted > 1e-5); on the other 20 the
    solver falls back to unpolished Clarabel multipliers (support margins off by more than 1e-10)
    and the certificate is inconclusive, as designed (asserted: certified exactly when exact),
    although the solver's delta is positive there too (> 1e-5, asserted). So the check is
    conservative on degenerate supports; the theorem, not the check, covers them.

    The certificate is not vacuous (planted failures): on the delta = 0 instance of
    thm-sc-necessity the default (polished) solver returns delta = 0.0 exactly with exact support
    margins, below the threshold 1e4 eps, and the certificate rejects it; with Clarabel's
    unpolished multipliers (solver="CLARABEL") the same instance gets a spurious multiplier of
    order 1e-5 on constraint 2 (so delta = inf, no constraint left off the support) but a support
    margin slack of the same order, and the exactness condition rejects it; the control
    delta = 0.25 is certified."""
    for seed in (0, 1, 2):
        for kw in ({}, dict(distinct=True)):
            data, opt = A.data.score_instances(6, 4, 8, trials=12, seed=seed, **kw)
            sc = A.bounds.support_constants(data, opt)
            assert np.all(A.bounds.strictly_complementary(sc)), (seed, kw, sc["delta"].min(),
                                                                 sc["active_err"].max())
    smallest, counts = np.inf, []
    for seed in (0, 1, 2):
        for kw in ({}, dict(distinct=True)):
            data, opt = A.data.score_instances(5, 6, 3, trials=40, seed=seed, **kw)
            ok = []
            for b in range(40):
                try:
                    ok.append(b)
                    A.svm.att_svm(data.X[b], data.Z[b], opt[b])
                except A.svm.InfeasibleError:
                    ok.pop()
            sub, osub = data.take(ok), opt[ok]
            sc = A.bounds.support_constants(sub, osub)
            cert = A.bounds.strictly_complementary(sc)
            exact = sc["active_err"] <= A.bounds.SC_EXACT
            assert np.all(cert == exact), (seed, kw, sc["delta"][~cert], sc["active_err"][~cert])
            assert np.all(sc["delta"] > 1e-5)
            counts.append((len(ok), int(exact.sum())))
            smallest = min(smallest, float(sc["delta"][exact].min()))
    assert smallest > 1e-5, smallest
    for delta, ok in ((0.0, False), (0.25, True)):
        d1 = _sc_instance(delta)
        batch = A.data.AttnData(X=d1.X[None], y=d1.y[None], Z=d1.Z[None], v=d1.v[None])
        sc = A.bounds.support_constants(batch, np.zeros((1, 2), int))
        assert bool(A.bounds.strictly_complementary(sc)[0]) == ok, (delta, sc["delta"], sc["active_err"])
    sc = A.bounds.support_constants(batch.__class__(X=_sc_instance(0.0).X[None], y=np.ones((1, 2)),
                                                    Z=np.array([[[1.0, 0, 0], [1.0, 0, 0]]]),
                                                    v=np.array([[0.0, 0, 1]])),
                                    np.zeros((1, 2), int), solver="CLARABEL")
    assert not A.bounds.strictly_complementary(sc)[0], (sc["delta"], sc["active_err"])


@pytest.mark.slow
def test_upper_orders_observed_on_reduced_dynamics():
    """The upper order of thm-squared-orders observed, and thm-restart-residual from an ordinary
    start, on the reduced dynamics (attnsvm.reduced: exact in margin space, one step checked
    against the library's gradient in test_reduced_step_equals_library_gradient). The fixture's
    equal-score instances 0 and 1 (seed 2; the third is left out: its off-support mass decays
    five times slower), NGD at the step of thm-ngd-no-floor (eta = min eta_ngd over the three)
    for 10^5 steps from the fixture's start 8 W_mm + noise (a component off A included), about
    45 s a run on the shared CPU (hence slow).

    (1 - corr) ||W_t||^2 levels off at ||h_inf||^2 / 2 = (||x*||^2 + ||h_N(t)||^2 +
    ||P_perp W_0||^2) / 2, the limit of thm-restart-residual: at t = 10^5 the two differ by
    5e-6 and 1e-5 relative (asserted < 1e-4), and (1 - corr) ||W_t||^2 moves by 0.27% and 1e-5
    between t = 5 * 10^4 and 10^5 (asserted < 1%); the support part ||P_S h_t||^2 is within 1e-4
    of ||x*||^2 at the end. Restarted at t1 = 5 * 10^4 (W_t1 rebuilt from its margins,
    attnsvm.reduced.reconstruct; its excess risk equals attnsvm.losses.excess_loss to 1e-12), the
    run hypotheses hold (E decreasing; sum_{s >= t1} l_s E_s = 0.334 of 2 E_t1 / mu; the margin
    hypothesis m_min >= B + gamma_A L_t of thm-ngd-no-floor with room >= 1.35), the closed form
    of part 3 applies (rho_bar finite), and 1 - corr <= H^2 / (2 a_low(t)^2) at every step
    t >= t1, with bound / (1 - corr) in [1.0015, 1.046] (trial 1: min 1.0015; trial 0: 1.006),
    asserted max < 1.1: so H^2 divided by 1.0015 fails (1.006 on trial 0 alone) and halving it
    fails at every step."""
    full, optf = A.data.score_instances(4, 3, 5, trials=3, seed=2)
    Wf = A.svm.att_svm_batch(full.X, full.Z, optf, strict=True)[0]
    eta = float(A.bounds.constants(full, optf, Wf)["eta_ngd"].min())
    rng = np.random.default_rng(0)
    W0 = (8 * Wf + 0.3 * rng.standard_normal(Wf.shape))[[0, 1]]          # the fixture's start
    data, opt, W_mm = full.take([0, 1]), optf[[0, 1]], Wf[[0, 1]]
    c = A.bounds.constants(data, opt, W_mm)
    sc = A.bounds.support_constants(data, opt)
    rl = A.bounds.residual_limit(data, opt, sc)
    K, t1 = 100000, 50000
    rec = np.concatenate([[0], np.arange(t1, K + 1)])
    runs = []
    for b in range(2):
        S = sc["support"][b][np.arange(3)[None, :] != opt[b][:, None]]
        sysm = A.reduced.margin_system(data.trial(b), W0[b], W_mm[b], opt=opt[b], support=S)
        runs.append((sysm, A.reduced.reduced_run(sysm, optimizer="ngd", lr=eta, steps=K, record=rec)))
    Wt1 = np.stack([A.reduced.reconstruct(s, r["m"][1]) for s, r in runs])
    Et1 = np.exp([r["log_E"][1] for _, r in runs])
    assert np.allclose(Et1, A.losses.excess_loss(data, opt, Wt1), rtol=1e-12, atol=0)
    rc = A.bounds.restart_constants(Wt1, Et1, eta, sc, rl, c)
    assert np.all(np.isfinite(rc["rho_bar"])), rc["rho_bar"]                  # part 3 applies
    B = A.bounds.ngd_margin_offset(Et1, eta, c)
    D_a = sc["gamma_A"] * rc["a"] - B
    ratios = []
    for b, (sysm, r) in enumerate(runs):
        res = A.reduced.residual_sq(sysm, r["r"], r["a"])
        x = res["omc"] * res["norm"] ** 2
        xs2 = np.linalg.norm(rl["x_star"][b]) ** 2
        lim = (xs2 + res["N"][-1] + sysm["hP2"]) / 2
        assert abs(x[-1] - lim) < 1e-4 * lim and abs(x[-1] - x[1]) < 0.01 * x[-1], (x[1], x[-1], lim)
        assert abs(res["S"][-1] - xs2) < 1e-4 * xs2
        assert np.isclose(r["a"][1], rc["a"][b], rtol=1e-12)
        L = r["L"][1:] - r["L"][1]
        logE = r["log_E"][1:]
        assert np.all(np.diff(logE) <= 0)                                          # E decreasing
        assert np.sum(r["ell"][t1:] * np.exp(logE[:-1])) <= 2 * Et1[b] / c["mu"][b]
        assert np.all(r["m"][1:].min(-1) >= B[b] + sc["gamma_A"][b] * L - 1e-9)    # margin hyp.
        rcb = {k: v[b] for k, v in rc.items() if k != "pi_star"}
        bound = A.bounds.restart_direction_bound(L, rcb, sc["gamma_A"][b], c["R_A"][b], D_a=D_a[b])
        omc = res["omc"][1:]
        assert np.all(omc <= bound * (1 + 1e-9))
        ratios.append(bound / omc)
    assert max(q.max() for q in ratios) < 1.1, [q.max() for q in ratios]


def test_limit_potential_beyond_equal_scores():
    """attnsvm.bounds.residual_limit with per-constraint weights (weights="constraint"): with
    equal scores its minimizer x* equals the one of thm-restart-residual (the per-sequence
    weights) to 1e-10 on the fixture's instances (the weights agree there); with distinct scores
    (outside the equal-score model, where nothing of the squared orders is proved) the limit
    (||x*||^2 + ||h_N(t)||^2 + ||P_perp W_0||^2) / 2 with the per-constraint weights
    beta(gamma*_i) (gamma*_i - gamma_it) is where (1 - corr) ||W_t||^2 levels off along NGD
    (observed: score_instances(4, 3, 5, distinct=True, seed=6), trials 0 and 1, step 0.02,
    2 * 10^4 steps on the reduced dynamics attnsvm.reduced: relative gap 9e-6 and 2.8e-5 at the
    end, asserted < 1e-3; the support part ||P_S h||^2 within 1e-4 of ||x*||^2). The
    per-sequence weights of the equal-score formula (the smallest gap of each sequence) give a
    limit off by 7.7% and 11.4% on these two trials (asserted > 1%), so wrong weights are caught
    with a margin of about 300 over the observed gap."""
    data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=2)           # the fixture's
    sc = A.bounds.support_constants(data, opt)
    rl = A.bounds.residual_limit(data, opt, sc)
    rc = A.bounds.residual_limit(data, opt, sc, weights="constraint")
    assert np.abs(rc["x_star"] - rl["x_star"]).max() < 1e-10 and np.all(rc["grad"] < 1e-12)
    with pytest.raises(ValueError, match="weights"):
        A.bounds.residual_limit(data, opt, sc, weights="token")
    data, opt = A.data.score_instances(4, 3, 5, trials=3, seed=6, distinct=True)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    sc = A.bounds.support_constants(data, opt)
    rl = A.bounds.residual_limit(data, opt, sc)                   # per-sequence weights
    rc = A.bounds.residual_limit(data, opt, sc, weights="constraint")
    W0 = 8 * W_mm + 0.3 * np.random.default_rng(0).standard_normal(W_mm.shape)
    K = 20000
    for b in (0, 1):
        S = sc["support"][b][np.arange(3)[None, :] != opt[b][:, None]]
        sysm = A.reduced.margin_system(data.trial(b), W0[b], W_mm[b], opt=opt[b], support=S)
        xs2 = np.linalg.norm(rc["x_star"][b]) ** 2
        r = A.reduced.reduced_run(sysm, optimizer="ngd", lr=0.02, steps=K, record=[K])
        res = A.reduced.residual_sq(sysm, r["r"], r["a"])
        x = (res["omc"] * res["norm"] ** 2)[-1]
        pred = (xs2 + res["N"][-1] + sysm["hP2"]) / 2
        wrong = (np.linalg.norm(rl["x_star"][b]) ** 2 + res["N"][-1] + sysm["hP2"]) / 2
        assert abs(x - pred) < 1e-3 * pred and abs(res["S"][-1] - xs2) < 1e-4 * xs2, (x, pred)
        assert abs(x - wrong) > 1e-2 * x, (b, x, wrong)
