"""Chapter 8 (global convergence): the statements of book/ch08_global.md, checked numerically."""
import numpy as np
import pytest

import attnsvm as A
from attnsvm.experiments import rates


#: equal scores in every sequence, and heterogeneous per-sequence scores (gamma*_i, gamma°_i)
SCORES = {"equal": {}, "heterogeneous": dict(gamma_opt=[1.0, 2.0, 0.5, 1.5],
                                             gamma_other=[0.0, -0.5, 0.0, 1.0])}


@pytest.fixture(scope="module", params=list(SCORES))
def inst(request):
    data, opt = rates.score_data(4, 4, 6, trials=3, seed=1, **SCORES[request.param])
    W_mm = rates.svm_batch(data, opt)
    return data, opt, W_mm, rates.constants(data, opt, W_mm)


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
    U, Z = rates.features(data, opt)
    return c, np.einsum("bnt,bntd,bne->bde", c, U, Z), u, gs, Delta, si


def test_reduction_u_and_gradient(inst):
    data, opt, W_mm, c = inst
    rng = np.random.default_rng(0)
    for scale in (0.1, 1.0, 5.0):
        W = scale * rng.standard_normal((3, 6, 6))
        coef, comb, u, gs, Delta, si = _coef_sum(data, opt, W)
        assert np.all(coef >= 0)
        np.testing.assert_allclose(u, gs - Delta * (1 - si), rtol=1e-12, atol=1e-12)
        G = rates.grad(data, W)
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
            G = rates.grad(data, W)
            lhs = np.einsum("bij,bij->b", -G, Wh)
            rho = coef.sum((-2, -1))
            assert np.all(lhs >= c["gamma_A"] * rho * (1 - 1e-9))
            assert np.all(c["gamma_A"] * rho >= c["kappa"] * np.linalg.norm(G, axis=(-2, -1)) * (1 - 1e-9))


def test_cone_property_fails_off_model():
    """With distinct non-optimal scores the loss is not monotone in the margins: at W = 0 a
    non-optimal token scoring above the average u_i gets a negative weight on A_it."""
    data, opt = rates.score_data(4, 4, 6, trials=2, distinct=True, seed=3)
    W = np.zeros((2, 6, 6))
    _, u, s = _loss(data, W)
    g = data.y[..., None] * np.einsum("bntd,bd->bnt", data.X, data.v)
    coef = (1 / (1 + np.exp(u)))[..., None] * s * (u[..., None] - g) / data.n   # weight of A_it
    np.put_along_axis(coef, opt[..., None], 0.0, -1)
    assert coef.min() < 0
    U, Z = rates.features(data, opt)
    np.testing.assert_allclose(np.einsum("bnt,bntd,bne->bde", coef, U, Z), -rates.grad(data, W),
                               rtol=1e-9, atol=1e-15)
    # in the equal-score model the same weights are never negative (reduction lemma)
    data2, opt2 = rates.score_data(4, 4, 6, trials=2, seed=3)
    coef2, *_ = _coef_sum(data2, opt2, W)
    assert coef2.min() >= 0


def test_excess_loss_bounds(inst):
    data, opt, W_mm, c = inst
    rng = np.random.default_rng(2)
    for scale in (0.1, 1.0, 4.0):
        W = scale * rng.standard_normal((3, 6, 6)) + scale * W_mm
        L, u, s = _loss(data, W)
        E = rates.excess_loss(data, opt, W)
        np.testing.assert_allclose(E, L - c["L_star"], rtol=1e-9, atol=1e-14)
        _, _, _, gs, Delta, si = _coef_sum(data, opt, W)
        bm, bp = 1 / (1 + np.exp(gs)), 1 / (1 + np.exp(gs - Delta))
        assert np.all((bm * Delta * (1 - si)).mean(-1) <= E * (1 + 1e-9))
        assert np.all(E <= (bp * Delta * (1 - si)).mean(-1) * (1 + 1e-9))
    # E(c W_mm) -> 0 and E > 0
    Es = [rates.excess_loss(data, opt, k * W_mm) for k in (1, 5, 20)]
    assert np.all(Es[0] > Es[1]) and np.all(Es[1] > Es[2]) and np.all(Es[2] > 0)


def _adversarial_start(data, opt, R0):
    """R0 W_mm^alpha / |W_mm^alpha|, alpha = opt with sequence 0's token swapped for the next."""
    alpha = opt.copy()
    alpha[:, 0] = (alpha[:, 0] + 1) % data.T
    Wa = rates.svm_batch(data, alpha)
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
    one, o, a, _ = rates.find_trap(3, 3, 4, seed=0)
    Wm = A.svm.att_svm(one.X, one.Z, o)
    Wt = A.svm.att_svm(one.X, one.Z, a)
    assert A.svm.is_locally_optimal(one.X, one.y, one.Z, one.v, a) and np.any(a != o)
    d2 = A.data.AttnData.stack([one] * 2)
    for name, lr in (("gd", 1.0), ("ngd", 0.1)):
        h = A.train.fit(d2, model="W", optimizer=name, lr=lr, steps=2000, init=30 * Wt / np.linalg.norm(Wt),
                        refs={"W_mm": Wm, "W_a": Wt}, n_records=5, device="cpu")
        assert np.all(h.corr["W_a"][-1] > 0.999) and np.all(h.corr["W_mm"][-1] < 0.9)


def test_global_experiment_groups_and_ngd_guaranteed_progress():
    exp = rates.global_experiment(3, 3, 4, trials=2, steps=200, R0=10.0, radius=1.0, lr_gd=1.0,
                                  lr_ngd=0.1, n_records=10, seed=0, device="cpu")
    assert list(exp.slices) == list(rates.GLOBAL_GROUPS)
    assert exp.runs["ngd"].W.shape == (8, 4, 4) and exp.W0.shape == (8, 4, 4)
    # the adversarial starts point along W_mm^alpha with norm R0
    sl = exp.slices["equal-score, adversarial init"]
    np.testing.assert_allclose(np.linalg.norm(exp.W0[sl], axis=(1, 2)), 10.0)
    np.testing.assert_allclose(A.metrics.corr(exp.W0[sl], exp.W_alpha[sl]), 1.0, atol=1e-12)
    # proved: NGD's projection on W_mm grows at least eta * kappa per step
    assert exp.ngd_progress >= 1.0
    assert set(exp.final("ngd")) == set(rates.GLOBAL_GROUPS)
