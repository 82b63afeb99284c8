"""Chapter 8 (global convergence): the statements of book/ch08_global.md, checked numerically."""
import numpy as np
import pytest

import attnsvm as A
from attnsvm.experiments import globalconv
from instances import SCORES, score_instance


@pytest.fixture(scope="module", params=list(SCORES))
def inst(request):
    data, opt, W_mm = score_instance(request.param)
    return data, opt, W_mm, A.bounds.constants(data, opt, W_mm)


def _loss(data, W):
    X, y, Z, v = data.X, data.y, data.Z, data.v
    s = A.metrics.softmax(np.einsum("bntd,bde,bne->bnt", X, W, Z))
    g = y[..., None] * np.einsum("bntd,bd->bnt", X, v)
    u = (s * g).sum(-1)
    return np.logaddexp(0, -u).mean(-1), u, s


def _coef_sum(data, opt, W):
    """c_it of the reduction lemma, and sum_it c_it A_it."""
    _, u, s = _loss(data, W)
    g = data.y[..., None] * np.einsum("bntd,bd->bnt", data.X, data.v)
    gs = np.take_along_axis(g, opt[..., None], -1)[..., 0]
    Delta = gs - np.where(np.arange(g.shape[-1]) == opt[..., None], -np.inf, g).max(-1)
    si = np.take_along_axis(s, opt[..., None], -1)[..., 0]
    beta = 1 / (1 + np.exp(u))
    c = (beta * Delta * si)[..., None] * s / data.n
    np.put_along_axis(c, opt[..., None], 0.0, -1)
    U, Z = A.bounds.lifted_factors(data, opt)
    return c, np.einsum("bnt,bntd,bne->bde", c, U, Z), u, gs, Delta, si


def test_reduction_u_and_gradient(inst):
    data, opt, W_mm, c = inst
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 5.0):
        W = scale * rng.standard_normal((3, 6, 6))
        coef, comb, u, gs, Delta, si = _coef_sum(data, opt, W)
        assert np.all(coef >= 0)
        np.testing.assert_allclose(u, gs - Delta * (1 - si), rtol=1e-12, atol=1e-12)
        G = A.losses.risk_grad(data, W)
        np.testing.assert_allclose(-G, comb, rtol=1e-10, atol=1e-14)
        # against finite differences of the loss and against one engine GD step
        E = np.zeros_like(W)
        E[:, 2, 3] = 1e-6
        fd = (_loss(data, W + E)[0] - _loss(data, W - E)[0]) / 2e-6
        np.testing.assert_allclose(fd, G[:, 2, 3], rtol=1e-6, atol=1e-10)
        h = A.train.fit(data, model="W", optimizer="gd", lr=1.0, steps=1, init=W, device="cpu")
        np.testing.assert_allclose(h.W - W, -G, rtol=1e-9, atol=1e-13)


def test_alignment_random_points(inst):
    data, opt, W_mm, c = inst
    rng = np.random.default_rng(1)
    Wh = W_mm / np.linalg.norm(W_mm, axis=(-2, -1), keepdims=True)
    for scale in (0.01, 0.5, 2.0, 10.0):
        for _ in range(5):
            W = scale * rng.standard_normal((3, 6, 6))
            coef, comb, *_ = _coef_sum(data, opt, W)
            G = A.losses.risk_grad(data, W)
            lhs = np.einsum("bij,bij->b", -G, Wh)
            rho = coef.sum((-2, -1))
            assert np.all(lhs >= c["gamma_A"] * rho * (1 - 1e-9))
            assert np.all(c["gamma_A"] * rho >= c["kappa"] * np.linalg.norm(G, axis=(-2, -1)) * (1 - 1e-9))


def test_cone_property_fails_off_model():
    """With distinct non-optimal scores the loss is not monotone in the margins: at W = 0 a
    non-optimal token scoring above the average u_i gets a negative weight on A_it."""
    data, opt = A.data.score_instances(4, 4, 6, trials=2, distinct=True, seed=3)
    W = np.zeros((2, 6, 6))
    _, u, s = _loss(data, W)
    g = data.y[..., None] * np.einsum("bntd,bd->bnt", data.X, data.v)
    coef = (1 / (1 + np.exp(u)))[..., None] * s * (u[..., None] - g) / data.n   # weight of A_it
    np.put_along_axis(coef, opt[..., None], 0.0, -1)
    assert coef.min() < 0
    U, Z = A.bounds.lifted_factors(data, opt)
    np.testing.assert_allclose(np.einsum("bnt,bntd,bne->bde", coef, U, Z), -A.losses.risk_grad(data, W),
                               rtol=1e-9, atol=1e-15)
    # in the equal-score model the same weights are never negative (reduction lemma)
    data2, opt2 = A.data.score_instances(4, 4, 6, trials=2, seed=3)
    coef2, *_ = _coef_sum(data2, opt2, W)
    assert coef2.min() >= 0


def test_excess_loss_bounds(inst):
    data, opt, W_mm, c = inst
    rng = np.random.default_rng(2)
    for scale in (0.1, 1.0, 4.0):
        W = scale * rng.standard_normal((3, 6, 6)) + scale * W_mm
        L, u, s = _loss(data, W)
        E = A.losses.excess_loss(data, opt, W)
        np.testing.assert_allclose(E, L - c["L_star"], rtol=1e-9, atol=1e-14)
        _, _, _, gs, Delta, si = _coef_sum(data, opt, W)
        bm, bp = 1 / (1 + np.exp(gs)), 1 / (1 + np.exp(gs - Delta))
        assert np.all((bm * Delta * (1 - si)).mean(-1) <= E * (1 + 1e-9))
        assert np.all(E <= (bp * Delta * (1 - si)).mean(-1) * (1 + 1e-9))
    # E(c W_mm) -> 0 and E > 0
    Es = [A.losses.excess_loss(data, opt, k * W_mm) for k in (1, 5, 20)]
    assert np.all(Es[0] > Es[1]) and np.all(Es[1] > Es[2]) and np.all(Es[2] > 0)


def _adversarial_start(data, opt, R0):
    """R0 W_mm^alpha / |W_mm^alpha|, alpha = opt with sequence 0's token swapped for the next."""
    alpha = opt.copy()
    alpha[:, 0] = (alpha[:, 0] + 1) % data.T
    Wa = A.svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    return R0 * Wa / np.linalg.norm(Wa, axis=(-2, -1), keepdims=True)


def test_ngd_progress_from_adversarial_start(inst):
    data, opt, W_mm, c = inst
    W0 = _adversarial_start(data, opt, 20.0)
    eta, steps = 0.1, 400
    h = A.train.fit(data, model="W", optimizer="ngd", lr=eta, steps=steps, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    Wh = W_mm / np.linalg.norm(W_mm, axis=(-2, -1), keepdims=True)
    proj = np.einsum("kbij,bij->kb", h.snapshots, Wh)
    t = h.steps[:, None]
    assert np.all(proj >= proj[0] + eta * c["kappa"] * t - 1e-9)
    assert np.all(h.norm <= 20 + eta * t + 1e-9)
    # GD: the projection is nondecreasing
    g = A.train.fit(data, model="W", optimizer="gd", lr=1.0, steps=200, init=W0 / 4, snapshots=True,
                    record_every=1, device="cpu")
    pg = np.einsum("kbij,bij->kb", g.snapshots, Wh)
    assert np.all(np.diff(pg, axis=0) >= -1e-12)


def test_observed_global_vs_trap(inst):
    data, opt, W_mm, c = inst
    W0 = _adversarial_start(data, opt, 20.0)
    h = A.train.fit(data, model="W", optimizer="ngd", lr=0.1, steps=3000, init=W0, refs={"W_mm": W_mm},
                    n_records=5, device="cpu")
    assert np.all(h.corr["W_mm"][-1] > 0.99)
    traps, o, a, _ = A.svm.find_traps(3, 3, 4, trials=1, seed=0)
    one, o, a = traps.trial(0), o[0], a[0]
    Wm = A.svm.att_svm(one.X, one.Z, o)
    Wt = A.svm.att_svm(one.X, one.Z, a)
    assert A.svm.is_locally_optimal(one.X, one.y, one.Z, one.v, a) and np.any(a != o)
    d2 = A.data.AttnData.stack([one] * 2)
    # GD stays at the trap from the adversarial start (its plateau time there is far beyond 2000
    # steps); NGD may leave a trap start (on the distinct trap instances of global_experiment it
    # leaves some), so it is not asserted here
    h = A.train.fit(d2, model="W", optimizer="gd", lr=1.0, steps=2000, init=30 * Wt / np.linalg.norm(Wt),
                    refs={"W_mm": Wm, "W_a": Wt}, n_records=5, device="cpu")
    assert np.all(h.corr["W_a"][-1] > 0.999) and np.all(h.corr["W_mm"][-1] < 0.9)


def test_global_experiment_groups_and_ngd_guaranteed_progress():
    exp = globalconv.global_experiment(3, 3, 4, trials=2, steps=200, R0=10.0, radius=1.0, lr_gd=1.0,
                                  lr_ngd=0.1, n_records=10, seed=0, device="cpu")
    assert list(exp.slices) == list(globalconv.GLOBAL_GROUPS)
    assert exp.runs["ngd"].W.shape == (8, 4, 4) and exp.W0.shape == (8, 4, 4)
    # the adversarial starts point along W_mm^alpha with norm R0
    sl = exp.slices["equal-score, adversarial init"]
    np.testing.assert_allclose(np.linalg.norm(exp.W0[sl], axis=(1, 2)), 10.0)
    np.testing.assert_allclose(A.metrics.corr(exp.W0[sl], exp.W_alpha[sl]), 1.0, atol=1e-12)
    # proved: NGD's projection on W_mm grows at least eta * kappa per step
    assert exp.ngd_progress >= 1.0
    assert set(exp.final("ngd")) == set(globalconv.GLOBAL_GROUPS)


# ----------------------------------------------------------------------------- global, under (Cx)
@pytest.fixture(scope="module", params=list(SCORES))
def cx_inst(request):
    """Orthogonal-query equal-score instances (the cross-sequence condition holds)."""
    data, opt = A.data.score_instances(4, 4, 6, trials=3, seed=5, queries="orthogonal",
                                 **SCORES[request.param])
    return data, opt, A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]


def _brute_cross_min(data, opt):
    U, Z = A.bounds.lifted_factors(data, opt)
    out = np.full(data.trials, np.inf)
    for b in range(data.trials):
        for i in range(data.n):
            for j in range(data.n):
                for t in range(data.T):
                    for s in range(data.T):
                        if i != j and t != opt[b, i] and s != opt[b, j]:
                            ip = np.sum(np.outer(U[b, i, t], Z[b, i]) * np.outer(U[b, j, s], Z[b, j]))
                            out[b] = min(out[b], ip)
    return out


def test_orthogonal_queries_and_cross_gram():
    u, opt_u = A.data.score_instances(4, 3, 5, trials=3, seed=7)
    o, opt_o = A.data.score_instances(4, 3, 5, trials=3, seed=7, queries="orthogonal")
    # only the queries change, and they are exactly orthonormal
    for name in ("X", "y", "v"):
        np.testing.assert_array_equal(getattr(u, name), getattr(o, name))
    np.testing.assert_array_equal(opt_u, opt_o)
    np.testing.assert_array_equal(np.einsum("bid,bjd->bij", o.Z, o.Z), np.broadcast_to(np.eye(4), (3, 4, 4)))
    # the checker against a brute-force loop: (Cx) holds with orthogonal queries, fails with uniform ones
    np.testing.assert_allclose(A.bounds.cross_gram_min(u, opt_u), _brute_cross_min(u, opt_u), rtol=1e-12)
    assert np.all(A.bounds.cross_gram_min(u, opt_u) < 0)
    assert np.all(A.bounds.cross_gram_min(o, opt_o) >= 0)
    one, opt1 = A.data.score_instances(1, 4, 3, trials=2, seed=0)
    assert np.all(np.isinf(A.bounds.cross_gram_min(one, opt1)))          # n = 1: (Cx) is empty
    with pytest.raises(ValueError, match="d >= n"):
        A.data.score_instances(5, 3, 4, queries="orthogonal")
    with pytest.raises(ValueError, match="queries"):
        A.data.score_instances(3, 3, 4, queries="sphere")


def _starts(data, opt, W_mm, R):
    """A random start of norm R and an adversarial one, R W_mm^alpha/|W_mm^alpha|."""
    return {"random": A.data.random_inits(data.d, data.trials, radius=R, seed=3),
            "adversarial": _adversarial_start(data, opt, R)}


def test_every_step_is_one_fit_call(monkeypatch):
    """attnsvm.runs.every_step records every step of one fit call (record_every=1), not of a run
    split into pieces: its records (more than one evaluation block) end at the iterate of a plain
    run of the same steps, bit for bit."""
    calls, real = [], A.train.fit
    monkeypatch.setattr(A.train, "fit", lambda *a, **k: calls.append(k) or real(*a, **k))
    data, opt = A.data.score_instances(2, 3, 3, trials=2, seed=0)
    W0 = np.zeros((2, 3, 3))
    lq, ex, W = A.runs.every_step(data, opt, optimizer="ngd", lr=0.1, steps=700, init=W0, device="cpu")
    assert len(calls) == 1 and calls[0]["record_every"] == 1
    assert lq.shape == (701, 2, 2) and ex.shape == (701, 2)
    h = real(data, model="W", optimizer="ngd", lr=0.1, steps=700, init=W0, n_records=2, device="cpu")
    np.testing.assert_array_equal(W, h.W)
    np.testing.assert_array_equal(ex[-1], A.losses.excess_loss(data, opt, h.W))
    np.testing.assert_array_equal(lq[-1], A.metrics.log_q(data, opt, h.W))


def test_no_attention_loss_every_step(cx_inst):
    """lem-no-attention-loss: every q_i is nonincreasing at every step of GD at eta_GD and of NGD
    at eta_NGD (the largest steps of the lemma), from random and adversarial starts of norm 3
    and 12 (the latter saturated on a wrong token). Catches bounds.noloss_steps 100 times too
    large (some q_i then rises)."""
    data, opt, W_mm = cx_inst
    c = A.bounds.constants(data, opt, W_mm)
    eta_gd, eta_ngd = A.bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], data.n)
    for R in (3.0, 12.0):
        for W0 in _starts(data, opt, W_mm, R).values():
            for name, eta in (("gd", eta_gd.min()), ("ngd", eta_ngd.min())):
                lq, ex, _ = A.runs.every_step(data, opt, optimizer=name, lr=eta, steps=400,
                                             init=W0, device="cpu")
                ok, checked, worst = A.bounds.q_monotone(lq, ex)
                assert np.all(checked >= 100) and np.all(ok), (name, R, worst)
                s = np.exp(-np.logaddexp(0, lq))
                assert np.all(s.min(-1) >= A.bounds.s0_lower(c["R_A"], data.T, R) * (1 - 1e-12))


def _positive_cross_instance(trials=3, n=4, T=3, d=6, seed=0):
    """Equal-score data whose cross inner products <A_it, A_js> are all strictly positive (so the
    sequences are coupled, unlike with orthogonal queries): head v = e_0, token 0 optimal
    (score 1, the others 0); every token difference x_i0 - x_it shares the component 2 e_1
    and every query is close to e_2, so that <A_it, A_js> = <x_i0 - x_it, x_j0 - x_js><z_i, z_j>
    is about 4 - 1 > 0 whatever the labels."""
    rng = np.random.default_rng(seed)
    v = np.zeros((trials, d))
    v[:, 0] = 1.0
    y = rng.choice([-1.0, 1.0], size=(trials, n))
    X = 0.2 * rng.standard_normal((trials, n, T, d))
    X[..., 0] = 0.0
    X[:, :, 0, 1] += 1.0                                   # the optimal token shares +e_1,
    X[:, :, 1:, 1] -= 1.0                                  # the others -e_1
    X[:, :, 0, 0] = y                                      # score y_i v^T x_i0 = 1, others 0
    Z = 0.2 * rng.standard_normal((trials, n, d))
    Z[..., 0] = 0.0
    Z[..., 2] += 1.0
    Z /= np.linalg.norm(Z, axis=-1, keepdims=True)
    return A.data.AttnData(X=X, y=y, Z=Z, v=v), np.zeros((trials, n), dtype=int)


def test_no_attention_loss_positive_cross_terms():
    """lem-no-attention-loss where (Cx) holds with strictly positive cross terms (smallest
    <A_it, A_js> 0.88-3.0 over the trials), so GD and NGD stay coupled across sequences: every
    q_i is nonincreasing at every checked step of GD at eta_GD and NGD at eta_NGD, from random
    and wrong-token starts of norms 3 and 12. (NGD leaves the checked range E >= 1e-10 within
    50-90 steps, so fewer steps are checked for it.)"""
    data, opt = _positive_cross_instance()
    assert np.all(A.bounds.cross_gram_min(data, opt) > 0.5)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    np.testing.assert_allclose(c["Delta_min"], 1.0)
    eta_gd, eta_ngd = A.bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], data.n)
    alpha = opt.copy()
    alpha[:, 0] = 1
    Wa = A.svm.att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    for R in (3.0, 12.0):
        for W0 in (A.data.random_inits(data.d, data.trials, radius=R, seed=3),
                   R * Wa / np.linalg.norm(Wa, axis=(-2, -1), keepdims=True)):
            for name, eta in (("gd", eta_gd.min()), ("ngd", eta_ngd.min())):
                lq, ex, _ = A.runs.every_step(data, opt, optimizer=name, lr=eta, steps=400,
                                             init=W0, device="cpu")
                ok, checked, worst = A.bounds.q_monotone(lq, ex)
                assert np.all(checked >= 40) and np.all(ok), (name, R, worst)


def test_no_attention_loss_can_fail():
    """The lemma's two hypotheses are not vacuous. (i) Without (Cx) (uniform queries), one GD
    step at a hundredth of eta_GD raises some q_i. (ii) With (Cx) (n = 1), a step 100 times
    eta_GD (GD) or eta_NGD (NGD) raises q, while the lemma's step lowers it. Catches the steps
    of bounds.noloss_steps made 100 times too large (then the lemma's own step raises q)."""
    data, opt = A.data.score_instances(3, 3, 4, trials=8, seed=0)
    assert np.all(A.bounds.cross_gram_min(data, opt) < 0)
    c = A.bounds.constants(data, opt, A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0])
    eta_gd, _ = A.bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], data.n)
    W = 3.0 * np.random.default_rng(0).standard_normal((8, 4, 4))
    W1 = W - (0.01 * eta_gd)[:, None, None] * A.losses.risk_grad(data, W)
    rise = (A.metrics.log_q(data, opt, W1) - A.metrics.log_q(data, opt, W)).max(-1)
    assert rise.max() > 1e-5
    # (ii) one sequence, tokens whose lifted features have a negative inner product
    # (an instance with such a pair: seed 9; with seed 1 the pair's second step is too short)
    data, opt = A.data.score_instances(1, 3, 4, trials=4, seed=9, queries="orthogonal", gamma_opt=0.1)
    c = A.bounds.constants(data, opt, A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0])
    eta_gd, eta_ngd = A.bounds.noloss_steps(c["R_A"], c["gamma_A"], c["bD_plus"], 1)
    U, Z = A.bounds.lifted_factors(data, opt)

    def feats(b):
        return np.stack([np.outer(U[b, 0, t], Z[b, 0]).ravel() for t in range(3) if t != opt[b, 0]])

    cos = [feats(b)[0] @ feats(b)[1] / np.prod(np.linalg.norm(feats(b), axis=1)) for b in range(4)]
    b = int(np.argmin(cos))                  # the trial whose two features point most apart
    Af = feats(b)
    assert Af[0] @ Af[1] < 0
    W = np.broadcast_to((np.linalg.pinv(Af) @ np.array([0.0, 8.0])).reshape(4, 4), (4, 4, 4))
    G = A.losses.risk_grad(data, W)
    Gn = G / np.linalg.norm(G, axis=(1, 2), keepdims=True)
    lq = A.metrics.log_q(data, opt, W)[b, 0]
    for f, sign in ((1.0, -1), (100.0, 1)):
        for step in (eta_gd[:, None, None] * G, eta_ngd[:, None, None] * Gn):
            change = A.metrics.log_q(data, opt, W - f * step)[b, 0] - lq
            assert sign * change > 0.1


@pytest.mark.slow
def test_global_theorem_ngd_and_gd(cx_inst):
    """thm-global-region and cor-sparsity-global at the theorem's steps, at every step from t = 0:
    no q_i increases, E(W_t) and max_i(1 - s_i(W_t)) stay below the bounds, E is nonincreasing
    for GD, and the region is reached no later than t_reach.

    Starts: random and adversarial (along W_mm^alpha) of norm 1.5, run 6000 steps (equal
    scores) or 2000 (heterogeneous, where the theorem's steps are much smaller: there the bound
    falls by only about 1% and the region is not reached, so these runs check the bounds and
    monotonicity only); and a start just outside the region, E_0 = 4 eps0 along W_mm, run 8000
    steps, where every run reaches the region and the bounds become informative. Measured
    slack on that start (the asserted factors are set from it): E / bound at the last step
    0.24-0.34 for GD (asserted <= 0.5), and 2e-7 to 0.16 for NGD, whose observed rate is much
    faster than the proved eta mu0 / 2; t_reach / observed first step in the region 2.8-7.1
    (asserted <= 10 somewhere); the mass bound of cor-sparsity-global is below 1 on 38-96% of
    the steps (asserted: a quarter) and holds there."""
    data, opt, W_mm = cx_inst
    c = A.bounds.constants(data, opt, W_mm)
    equal = np.allclose(c["Delta_min"], 1.0)
    starts = dict(_starts(data, opt, W_mm, 1.5),
                  near=A.losses.scale_to_excess(data, opt, W_mm, 4 * c["eps0"])[:, None, None] * W_mm)
    for label, W0 in starts.items():
        g = A.bounds.global_constants(data, opt, W_mm, W0)
        # the NGD step condition implies the lemma's and log 2 / R_A
        assert np.all(g["eta_ngd_global"] <= g["eta_ngd_noloss"])
        assert np.all(g["eta_ngd_global"] <= np.log(2) / g["R_A"])
        assert np.all(g["s0"] >= g["s0_lower"])
        for name in ("ngd", "gd"):
            steps = 8000 if label == "near" else 6000 if equal else 2000
            r = A.runs.global_run(data, opt, W_mm, W0, optimizer=name, steps=steps, device="cpu")
            assert np.all(r["proved"]) and np.all(r["mono"])
            assert np.all(r["excess_holds"]) and np.all(r["mass_holds"])
            reached = np.isfinite(r["first"])
            if equal or label == "near":
                assert np.all(reached), (label, name, r["first"])
            assert np.all(r["first"][reached] <= r["t_reach"][reached])
            assert np.all(r["t_reach"][~reached] > steps)
            if name == "gd":
                assert np.all(np.diff(r["excess"], axis=0) <= 0)      # E nonincreasing
            if label == "near":
                tt = np.arange(steps + 1)
                bound = A.bounds.global_excess_bound(tt, g["E0"], r["eta"], g["mu0"], optimizer=name)
                mass_bound = A.bounds.mass_from_excess(bound, data.n, g["bD_minus"])
                assert np.all((mass_bound < 1).mean(0) >= 0.25), (name, (mass_bound < 1).mean(0))
                assert np.min(r["t_reach"] / r["first"]) <= 10, (name, r["t_reach"] / r["first"])
                if name == "gd":
                    assert np.all(r["excess"][-1] / bound[-1] <= 0.5), r["excess"][-1] / bound[-1]


def test_t_reach_is_where_the_excess_bound_enters_region(cx_inst):
    """thm-global-region's t_reach is the step at which the theorem's own excess bound (which
    every run obeys, test_global_theorem_ngd_and_gd) first reaches eps0, not earlier: for GD
    global_excess_bound(t_reach) <= eps0 < global_excess_bound(t_reach - 1); for NGD, whose
    t_reach uses exp(-x t) for (1 - x)^t (x = eta mu0 / 2), the bound is still above eps0 at
    (t_reach - 1)/(1 + x) - 1. From the random and adversarial starts of norm 1.5 and the starts
    at 4 and 1.5 eps0 along W_mm, at the theorem's steps. Catches t_reach halved (or any factor
    below 1 - x), which no run can: the observed first step in the region is 2.8-7.1 times below
    t_reach (the descent step of the proof gives up half of eta mu0, and s only grows), so
    t_reach / 2 is probably also true, only not what the proof gives."""
    data, opt, W_mm = cx_inst
    c = A.bounds.constants(data, opt, W_mm)
    starts = dict(_starts(data, opt, W_mm, 1.5),
                  near=A.losses.scale_to_excess(data, opt, W_mm, 4 * c["eps0"])[:, None, None] * W_mm,
                  edge=A.losses.scale_to_excess(data, opt, W_mm, 1.5 * c["eps0"])[:, None, None] * W_mm)
    for label, W0 in starts.items():
        g = A.bounds.global_constants(data, opt, W_mm, W0)
        assert np.all(g["E0"] > g["eps0"]), label
        for name in ("ngd", "gd"):
            eta = g[f"eta_{name}_global"]
            tr = A.bounds.t_reach(g["E0"], g["eps0"], eta, g["mu0"], optimizer=name)
            assert np.all(tr >= 2), (label, name, tr)
            def bound(t):
                return np.array([A.bounds.global_excess_bound(np.array([tb]), E0b, etab, mub, optimizer=name)[0]
                                 for tb, E0b, etab, mub in zip(t, g["E0"], eta, g["mu0"])])
            assert np.all(bound(tr) <= g["eps0"] * (1 + 1e-12)), (label, name)
            x = eta * g["mu0"] / 2
            before = tr - 1 if name == "gd" else np.floor((tr - 1) / (1 + x)) - 1
            assert np.all(bound(before) > g["eps0"]), (label, name)


def test_global_bounds_reject_bad_input():
    with pytest.raises(ValueError, match="s0"):
        A.bounds.global_mu0(1.0, 1.5)
    with pytest.raises(ValueError, match="optimizer"):
        A.bounds.t_reach(1.0, 0.1, 0.1, 0.1, optimizer="adam")
    with pytest.raises(ValueError, match="eta"):
        A.bounds.global_excess_bound([0, 1], 1.0, -0.1, 0.1, optimizer="ngd")
    with pytest.raises(ValueError, match="optimizer"):
        A.runs.global_run(*A.data.score_instances(2, 3, 3), np.eye(3)[None], np.zeros((1, 3, 3)),
                         optimizer="adam", steps=1)
    data, opt = A.data.score_instances(2, 3, 3, trials=2)
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    E_zero = A.losses.excess_loss(data, opt, 0 * W_mm)
    k = A.losses.scale_to_excess(data, opt, W_mm, E_zero / 2)
    np.testing.assert_allclose(A.losses.excess_loss(data, opt, k[:, None, None] * W_mm), E_zero / 2, rtol=1e-9)
    with pytest.raises(ValueError, match="target"):
        A.losses.scale_to_excess(data, opt, W_mm, 2 * E_zero)


# ------------------------------------------------- global directional convergence under (Cx)
def _far_start(data, opt, W_mm, excess, scale=100.0, seed=3):
    """k W_mm (E(k W_mm) = excess) plus a component off the features of norm scale |W_mm|: GD and
    NGD never change that component, so 1 - corr stays large and a directional bound that is
    off by a constant factor shows."""
    Q = A.bounds.orth_component(data, opt, np.random.default_rng(seed).standard_normal(W_mm.shape))
    Q *= (scale * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    return A.losses.scale_to_excess(data, opt, W_mm, excess)[:, None, None] * W_mm + Q


@pytest.fixture(scope="module")
def cx_far():
    data, opt = A.data.score_instances(4, 4, 6, trials=3, seed=5, queries="orthogonal")
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    W0 = _far_start(data, opt, W_mm, 4 * c["eps0"])                 # outside the region: E0 = 4 eps0
    return data, opt, W_mm, W0, A.bounds.global_constants(data, opt, W_mm, W0)


@pytest.mark.slow
def test_global_direction_gd_from_zero(cx_far):
    """cor-global-direction (b): GD at the global theorem's step, from t = 0 outside the region
    (E_0 = 4 eps0) on an orthogonal-query instance, satisfies 1 - corr <= D_bar/||W_t|| <=
    gamma_A D_bar / log(2 eps0/E_0 + eps0 eta mu0^2 t) at every t >= t_r.

    What it catches: measured D_bar/||W_t|| / (1 - corr) is 1.117-1.129 over the run (the start
    carries a component off the features of 100 |W_mm|), so D_bar halved (or divided by 1.15)
    fails at every step (asserted below on the weakened constant). The bound itself stays above 1
    (smallest 1.066 from t_r), where 1 - corr <= 1 anyway: test_global_direction_gd_below_one
    takes the bound below 1."""
    data, opt, W_mm, W0, g = cx_far
    assert np.all(g["cross_min"] >= 0) and np.all(g["E0"] > g["eps0"])
    eta = float(g["eta_gd_global"].min())
    kw = _gd_kw(g, eta)
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    D, t_r = A.bounds.global_gd_direction_constant(g["E0"], n0, **kw)
    K = int(t_r.max()) + 2000
    h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    t = np.arange(K + 1)
    sharp = A.bounds.global_gd_direction_bound(t, g["E0"], n0, norm=h.norm, **kw)
    det = A.bounds.global_gd_direction_bound(t, g["E0"], n0, **kw)
    later = t[:, None] >= t_r[None, :]
    assert np.all(np.isnan(sharp[~later])) and np.all(np.isfinite(sharp[later]))
    assert np.all(omc[later] <= sharp[later]) and np.all(sharp[later] <= det[later] * (1 + 1e-12))
    assert np.all(np.diff(det[t >= t_r.max()], axis=0) < 0)         # the deterministic form decays
    # the region is reached by t_r (thm-global-region (b)), so t_r is the corollary's t0
    assert np.all(A.losses.excess_loss(data, opt, h.snapshots)[later] <= np.broadcast_to(g["eps0"], later.shape)[later])
    # a weaker constant fails: D_bar / 1.15 (a fortiori D_bar / 2) is below 1 - corr at every step
    assert np.all(omc[later] > (sharp / 1.15)[later])
    assert np.all(sharp[later] > 1)             # vacuous here (smallest 1.066): the next test goes below 1
    with pytest.raises(ValueError, match="1/H"):
        A.bounds.global_gd_direction_constant(g["E0"], n0, **dict(kw, eta=2 / float(np.min(g["E0"] * g["H"])),
                                                                  eta_gd_noloss=1e9, lam=1e9))
    # every other step condition of thm-global-region (b) is checked, by name
    for name, big in (("eta_gd_noloss", dict(eta_gd_noloss=eta / 2)),
                      ("lam log 2", dict(lam=eta * g["R_A"] ** 2 * g["E0"])),
                      ("lam\\^2", dict(lam=np.sqrt(eta * g["R_A"] ** 2 * g["E0"])))):
        with pytest.raises(ValueError, match=name):
            A.bounds.global_gd_direction_constant(g["E0"], n0, **dict(kw, **big))


def _gd_kw(g, eta):
    """The keyword arguments of bounds.global_gd_direction_* for GD at step eta."""
    return dict(eta=eta, mu0=g["mu0"], eps0=g["eps0"], gamma_A=g["gamma_A"], H=g["H"],
                eta_gd_noloss=g["eta_gd_noloss"], lam=g["lam"], R_A=g["R_A"])


def test_global_direction_gd_pre_region_term(cx_far):
    """cor-global-direction (b), its pre-region term (2/mu0) log(2 E_0/eps0): from a start of
    norm 1 saturated on a wrong token (W_mm^alpha direction, s_0 about 0.22, no off-feature part,
    E_0 about 10 eps0), GD at the global theorem's step enters the region at an observed step t_0
    (2953-4346, well before t_r), and the proof's chain holds there: the path bound
    ||W_{t_0}|| <= ||W_0|| + (2/mu0) log(E_0/E_{t_0}) (measured ratio 0.15), the constant of
    thm-gd-direction at t_0, D = ||W_{t_0}|| + (C - log(2 eps0/E_{t_0}))/gamma_A, is at most
    D_bar, and 1 - corr <= D/||W_t|| <= D_bar/||W_t|| for t >= t_0.

    What it catches: here the pre-region term is 96% of D_bar and ||W_{t_0}|| is 4.5-5.5 times
    ||W_0||, so D_bar with the pre-region term deleted is below D (checked by hand: the
    assertion D <= D_bar then fails on every trial; the far start of the test above cannot see
    this, its tightness comes from the off-feature part); asserted: the term is over 90% of
    D_bar and D exceeds D_bar minus the term."""
    data, opt, W_mm, _, _ = cx_far
    W0 = _adversarial_start(data, opt, 1.0)
    g = A.bounds.global_constants(data, opt, W_mm, W0)
    assert np.all(g["cross_min"] >= 0) and np.all(g["E0"] > 5 * g["eps0"]) and np.all(g["s0"] < 0.25)
    eta = float(g["eta_gd_global"].min())
    kw = _gd_kw(g, eta)
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    D_bar, t_r = A.bounds.global_gd_direction_constant(g["E0"], n0, **kw)
    pre = 2 / g["mu0"] * np.log(2 * g["E0"] / g["eps0"])
    assert np.all(pre > 0.9 * D_bar)
    K = 5000
    h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=1, device="cpu")
    E = A.losses.excess_loss(data, opt, h.snapshots)
    inr = E <= g["eps0"]
    assert np.all(inr.any(0)) and np.all(inr.argmax(0) < t_r)
    b = np.arange(data.trials)
    t0 = inr.argmax(0)
    E_t0 = E[t0, b]
    nrm = np.linalg.norm(h.snapshots, axis=(-2, -1))
    assert np.all(nrm[t0, b] <= n0 + 2 / g["mu0"] * np.log(g["E0"] / E_t0))
    assert np.all(nrm[t0, b] > 4 * n0)
    C = A.bounds.gd_error_constant(E_t0, eta=eta, eps0=g["eps0"], H=g["H"])
    D = nrm[t0, b] + (C - np.log(2 * g["eps0"] / E_t0)) / g["gamma_A"]
    assert np.all(D <= D_bar) and np.all(D > D_bar - pre)
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    later = np.arange(K + 1)[:, None] >= t0[None, :]
    assert np.all((omc * nrm)[later] <= np.broadcast_to(D, later.shape)[later])


@pytest.mark.slow
def test_global_direction_gd_below_one():
    """cor-global-direction (b) where its bound says something: GD from outside the region
    (E_0 = 1.05 eps0, so the pre-region term (2/mu0) log(2 E_0/eps0) is in D_bar), with a
    component off the features of 3.6 |W_mm| (which GD never changes, so 1 - corr stays
    measurable), at a fifth of the largest step of thm-global-region (b), for 40 000 steps on an
    orthogonal-query instance (n = 2, T = 2): the bound D_bar/||W_t|| holds at every recorded
    step from t_r (every 20th step; t_r = 66-76), lies below the deterministic form, and falls
    below 1 within the run (from step 740-820 on; at the end 0.89-0.90, where 1 - corr is 0.12).

    What it catches (measured by dividing D_bar by a factor): bound / (1 - corr) is 3.00-3.07 at
    its smallest (near t_r) and 7.2-7.3 at the end, so D_bar / 3.1 fails at some step of every
    trial (asserted), D_bar / 3.0 passes. A factor 2 is not seen here: the bound is linear in the
    angle and 1 - corr quadratic, so while the bound is below 1 it is loose by a factor
    cot(theta/2) at least; the far start of test_global_direction_gd_from_zero (bound above 1)
    catches D_bar / 1.15. Slow: about 8 s idle (36 s under load)."""
    data, opt = A.data.score_instances(2, 2, 4, trials=3, seed=5, queries="orthogonal")
    W_mm = A.svm.att_svm_batch(data.X, data.Z, opt, strict=True)[0]
    c = A.bounds.constants(data, opt, W_mm)
    Q = A.bounds.orth_component(data, opt, np.random.default_rng(3).standard_normal(W_mm.shape))
    Q *= (3.6 * np.linalg.norm(W_mm, axis=(-2, -1)) / np.linalg.norm(Q, axis=(-2, -1)))[:, None, None]
    W0 = A.losses.scale_to_excess(data, opt, W_mm, 1.05 * c["eps0"])[:, None, None] * W_mm + Q
    g = A.bounds.global_constants(data, opt, W_mm, W0)
    assert np.all(g["cross_min"] >= -1e-12) and np.all(g["E0"] > g["eps0"])
    eta = 0.2 * float(g["eta_gd_global"].min())
    kw = _gd_kw(g, eta)
    n0 = np.linalg.norm(W0, axis=(-2, -1))
    D_bar, t_r = A.bounds.global_gd_direction_constant(g["E0"], n0, **kw)
    assert np.all(2 / g["mu0"] * np.log(2 * g["E0"] / g["eps0"]) > 0.3 * D_bar)    # the term: 33% of D_bar
    K, every = 40000, 20
    h = A.train.fit(data, model="W", optimizer="gd", lr=eta, steps=K, init=W0, snapshots=True,
                    record_every=every, device="cpu")
    t = np.arange(0, K + 1, every)
    omc = A.metrics.one_minus_corr(h.snapshots, W_mm[None])
    sharp = A.bounds.global_gd_direction_bound(t, g["E0"], n0, norm=h.norm, **kw)
    det = A.bounds.global_gd_direction_bound(t, g["E0"], n0, **kw)
    later = t[:, None] >= t_r[None, :]
    assert np.all(omc[later] <= sharp[later]) and np.all(sharp[later] <= det[later] * (1 + 1e-12))
    assert np.all(sharp[-1] < 0.95) and np.all(omc[-1] > 0.1)                # below 1, not vacuous
    assert np.all(np.any(later & (omc > sharp / 3.1), axis=0)), np.nanmin(np.where(later, sharp / omc, np.nan), 0)
    assert np.all(sharp[-1] / omc[-1] < 8)                                   # within a factor 8 at the end


@pytest.mark.slow
def test_global_direction_ngd_from_zero(cx_far):
    """cor-global-direction (a): NGD from t = 0 outside the region, at the global theorem's step
    mu0/H for 3000 steps and then on a decaying schedule eta_s = eta / sqrt(k + 1) in chunks k of
    1000 steps (any schedule below mu0/H is covered), satisfies the bound at every t >= t_r; the
    bound decays on the decaying part.

    What it catches: measured bound / (1 - corr) is 1.35 at its smallest (near t_r), so the
    bound halved fails there (asserted: the bound / 1.4 fails at some step of every trial)."""
    data, opt, W_mm, W0, g = cx_far
    eta = float(np.min(g["mu0"] / g["H"]))
    kw = dict(mu0=g["mu0"], eps0=g["eps0"], gamma_A=g["gamma_A"], H=g["H"])
    W, etas, snaps = W0, [], [W0[None]]
    for k, (lr, n_steps) in enumerate([(eta, 3000)] + [(eta / np.sqrt(k + 1), 1000) for k in range(1, 6)]):
        h = A.train.fit(data, model="W", optimizer="ngd", lr=lr, steps=n_steps, init=W,
                        snapshots=True, record_every=1, device="cpu")
        W = h.W
        etas += [lr] * n_steps
        snaps.append(h.snapshots[1:])
    S = np.concatenate(snaps)
    omc = A.metrics.one_minus_corr(S, W_mm[None])
    bound, t_r = A.bounds.global_ngd_direction_bound(np.array(etas), g["E0"], np.linalg.norm(W0, axis=(-2, -1)), **kw)
    assert bound.shape == omc.shape and np.all(t_r < 3000)
    later = np.isfinite(bound)
    assert np.all(later.sum(0) == len(etas) + 1 - t_r)
    assert np.all(omc[later] <= bound[later])
    assert np.all(A.losses.excess_loss(data, opt, S)[later] <= np.broadcast_to(g["eps0"], later.shape)[later])
    assert np.all(np.diff(bound[3000:], axis=0) <= 1e-15)          # decays on the decaying schedule
    assert np.all(np.any(later & (omc > bound / 1.4), axis=0))    # a constant 1.4 smaller fails
    with pytest.raises(ValueError, match="mu0/H"):
        A.bounds.global_ngd_direction_bound([2 * eta], g["E0"], 1.0, **kw)
    short, t_short = A.bounds.global_ngd_direction_bound([eta], g["E0"], 1.0, **kw)
    assert np.all(np.isinf(t_short)) and np.all(np.isnan(short))


@pytest.mark.slow
def test_chapter_result_objects():
    """The notebook's numbers and claims at small size: every claim of both result objects holds,
    and the summary numbers sit in range (a false claim, e.g. NGD not reaching W_mm from random
    starts or a run leaving the proved bound, makes the ``all(holds)`` assertion fail)."""
    exp = globalconv.global_experiment(3, 3, 4, trials=4, steps=3000, R0=30.0, radius=3.0, lr_gd=1.0,
                                  lr_ngd=0.1, seed=0, device="cpu")
    s = exp.summary()
    assert len(s) == 45 and all(isinstance(v, (int, float)) for v in s.values())
    claims = exp.claims()
    assert all(bool(h) for h, _ in claims.values()), claims
    assert s["ngd_rand_reach"] >= 0.8 * 4 and s["trap_stay"] > 0.999 and s["ngd_progress"] >= 1.0
    assert -1 <= s["gd_rand_start"] < s["gd_rand_min"] <= 1 and s["eq_cx_count"] < 2
    assert s["gd_adv_far"] > 0 and s["gd_tp_spearman"] <= -0.9
    cx = globalconv.global_cx_experiment(3, 3, 4, trials=2, steps=6000, radius=1.0, R_adv=1.5, R_big=30.0,
                                    lr_gd=1.0, lr_ngd=0.1, seed=0, device="cpu")
    c = cx.summary()
    claims = cx.claims()
    assert all(bool(h) for h, _ in claims.values()), claims
    assert c["cx_cross_min"] >= 0 and c["cx_bound_over_first_min"] >= 1
    assert c["cx_excess_frac"] == 1.0 and c["cx_mass_frac"] == 1.0 and c["cx_mono_pairs"] > 0
    assert c["cx_default_gd_within"] in ("is", "is not")


def _mp_neg_grad(X, y, Z, v, W, mp):
    """-grad L(W), the softmax masses s (n, T) and beta_i, by the chain rule (the general
    gradient formula below lem-att-reduction) in mpmath at the current precision."""
    n, T, d = X.shape
    G = mp.matrix(d, d)
    S, B = [], []
    for i in range(n):
        a = [mp.fsum(mp.mpf(X[i, t, k]) * mp.mpf(W[k, j]) * mp.mpf(Z[i, j])
                     for k in range(d) for j in range(d)) for t in range(T)]
        top = max(a)
        e = [mp.exp(x - top) for x in a]
        s = [x / mp.fsum(e) for x in e]
        gam = [mp.mpf(y[i]) * mp.fsum(mp.mpf(X[i, t, k]) * mp.mpf(v[k]) for k in range(d))
               for t in range(T)]
        u = mp.fsum(s[t] * gam[t] for t in range(T))
        beta = 1 / (1 + mp.exp(u))
        for t in range(T):
            w = beta * s[t] * (gam[t] - u) / n           # -dL/da_it
            for k in range(d):
                for j in range(d):
                    G[k, j] += w * mp.mpf(X[i, t, k]) * mp.mpf(Z[i, j])
        S.append(s)
        B.append(beta)
    return G, S, B, gam


@pytest.mark.parametrize("delta", [0.0, 1e-3])
def test_alignment_with_scores_equal_up_to_delta(delta):
    """prop-score-perturbation, in 60-digit arithmetic (float64 cannot resolve the gradient of a
    saturated sequence: torch's autograd gives cos 0.09 < kappa = 0.38 at R = 100 on exact
    data, where the exact cosine is 0.63). Scores gamma_it = gamma° + delta_it, |delta_it| <=
    delta, with the extreme pattern on sequence 0 (delta on the token it saturates on, -delta on
    the other), along R W^alpha/||W^alpha||, R = 0 ... 100 (sequence 0 saturated on a wrong
    token, s_min down to 1e-40). Checks (a) |eps_it| <= 2 delta for the coefficient error
    e_it = beta_i s_it eps_it / n, with max |eps|/(2 delta) >= 0.99999 over the points, so a
    constant below 2 (by a factor 1.00001) is caught; (b) the cosine bound (kappa - r)/(1 + r),
    r = 2 delta/(Delta_min s_min), wherever it is positive; with delta = 0 it is kappa
    (lem-att-alignment on exact data); (c) the decomposition: -grad L equals
    sum (c_it + e_it) A_it to 1e-30 relative."""
    mp = pytest.importorskip("mpmath")
    from attnsvm import svm
    from attnsvm.data import Stream, prescribed_scores
    mp.mp.dps = 60
    D, opt = prescribed_scores(3, 3, 4, trials=4, seed=Stream(3, "scores"))
    X = D.X.copy()
    trials, n, T, d = X.shape
    alpha = opt.copy()
    alpha[:, 0] = (opt[:, 0] + 1) % T
    dl = np.where(np.random.default_rng(3).random((trials, n, T)) < 0.5, -delta, delta)
    dl[np.arange(trials), 0, alpha[:, 0]] = delta
    dl[np.arange(trials), 0, (opt[:, 0] + 2) % T] = -delta
    np.put_along_axis(dl, opt[..., None], 0.0, axis=-1)
    X[..., 0] += D.y[..., None] * dl                      # v = e_1: gamma_it = c_it + delta_it
    W_mm = svm.att_svm_batch(X, D.Z, opt, strict=True)[0]
    W_a = svm.att_svm_batch(X, D.Z, alpha, strict=True)[0]
    worst, slack = 0.0, np.inf
    for b in range(trials):
        o = opt[b]
        mask = np.ones((n, T), bool)
        mask[np.arange(n), o] = False
        A_ = np.einsum("ntd,ne->ntde", X[b][np.arange(n), o][:, None] - X[b], D.Z[b])
        kappa = 1 / np.linalg.norm(W_mm[b]) / np.linalg.norm(A_[mask].reshape(-1, d * d), axis=1).max()
        for R in (0.0, 3.0, 10.0, 30.0, 60.0, 100.0):
            W = R * W_a[b] / np.linalg.norm(W_a[b])
            G, S, B, _ = _mp_neg_grad(X[b], D.y[b], D.Z[b], D.v[b], W, mp)
            rebuilt = mp.matrix(d, d)
            for i in range(n):
                gam = [mp.mpf(D.y[b, i]) * mp.mpf(X[b, i, t, 0]) for t in range(T)]
                u = mp.fsum(S[i][t] * gam[t] for t in range(T))
                for t in range(T):
                    if t == o[i]:
                        continue
                    eps = (u - gam[t]) - S[i][o[i]] * (gam[o[i]] - (gam[t] - mp.mpf(dl[b, i, t])))
                    assert abs(eps) <= 2 * delta * (1 + 1e-12) + mp.mpf(10) ** -50
                    if delta:
                        worst = max(worst, float(abs(eps) / (2 * delta)))
                    coef = B[i] * S[i][t] * (u - gam[t]) / n       # c_it + e_it
                    for k in range(d):
                        for j in range(d):
                            diff_x = mp.mpf(X[b, i, o[i], k]) - mp.mpf(X[b, i, t, k])
                            rebuilt[k, j] += coef * diff_x * mp.mpf(D.Z[b, i, j])
            diff = mp.sqrt(mp.fsum((G[k, j] - rebuilt[k, j]) ** 2 for k in range(d) for j in range(d)))
            norm = mp.sqrt(mp.fsum(G[k, j] ** 2 for k in range(d) for j in range(d)))
            assert diff <= mp.mpf(10) ** -30 * norm
            cos = float(mp.fsum(G[k, j] * W_mm[b][k, j] for k in range(d) for j in range(d)) / norm)
            cos /= np.linalg.norm(W_mm[b])
            r = 2 * delta / float(min(S[i][o[i]] for i in range(n)))     # Delta_min = 1
            bound = (kappa - r) / (1 + r)
            assert cos >= bound - 1e-12
            if bound > 0:
                slack = min(slack, cos / bound)
    if delta:
        assert worst >= 0.99999, worst                    # the constant 2 is attained in the limit
    assert 1.0 <= slack < 10.0, slack                      # the bound binds within a factor 10
