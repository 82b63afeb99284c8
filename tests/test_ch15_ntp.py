"""Part IV, "Next-token prediction": every statement of the chapter, checked numerically.

Labels refer to book/ch15_ntp.md; "Definition/Theorem N" are those of Thrampoulidis (2024).
"""
from __future__ import annotations

import numpy as np
import pytest

import attnsvm as A
from attnsvm import ntp, svm_geometry as SG


@pytest.fixture(scope="module")
def data():
    return ntp.synthetic(3, 6, 5, support=3, trials=3, seed=11)


def _gens(H, P, kind):
    out = []
    for j in range(H.shape[0]):
        S = np.flatnonzero(P[j] > 0)
        if kind == "eq":
            out += [(a, b, j) for a in S for b in S if a != b]
        else:
            out += [(z, v, j) for z in S for v in np.flatnonzero(P[j] == 0)]
    return out


def test_lem_ntp_entropy(data):
    rng = np.random.default_rng(0)
    for _ in range(20):
        W = rng.standard_normal((3, 6, 5)) * rng.uniform(0.1, 10)
        q = np.exp(np.einsum("bvd,bmd->bmv", W, data.H))
        q /= q.sum(-1, keepdims=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            kl = np.where(data.P > 0, data.P * np.log(np.where(data.P > 0, data.P, 1) / q), 0).sum(-1)
        np.testing.assert_allclose(ntp.ce_loss(W, data) - ntp.entropy(data),
                                   (data.pi * kl).sum(-1), rtol=1e-10, atol=1e-13)
        assert np.all(ntp.ce_loss(W, data) > ntp.entropy(data))


def test_gradient_finite_differences(data):
    rng = np.random.default_rng(1)
    W = rng.standard_normal((3, 6, 5))
    G = ntp.ce_grad(W, data)
    for _ in range(5):
        D = rng.standard_normal(W.shape)
        h = 1e-6
        fd = (ntp.ce_loss(W + h * D, data) - ntp.ce_loss(W - h * D, data)) / (2 * h)
        np.testing.assert_allclose(fd, (G * D).sum((1, 2)), rtol=1e-6, atol=1e-9)


def test_lem_ntp_smooth(data):
    L = ntp.smoothness(data)
    rng = np.random.default_rng(2)
    for _ in range(50):
        W = rng.standard_normal((3, 6, 5)) * rng.uniform(0, 5)
        D = rng.standard_normal(W.shape)
        D /= np.linalg.norm(D, axis=(1, 2), keepdims=True)
        h = 1e-3
        sec = (ntp.ce_loss(W + h * D, data) - 2 * ntp.ce_loss(W, data) + ntp.ce_loss(W - h * D, data)) / h ** 2
        assert np.all(sec <= L * (1 + 1e-4) + 1e-8)


def test_lem_ntp_smooth_is_tight():
    """One context, q = (1/2, 1/2) at W = 0, D = (e_a - e_b) h^T/(sqrt2 ||h||): the curvature
    along D is (1/2)||h||^2 = L, so the bound of lem-ntp-smooth is attained (a too small L fails
    test_lem_ntp_smooth on this instance)."""
    h = np.array([[0.7, -1.3, 2.1]])
    dat = ntp.NTPData(h, np.array([[0.3, 0.7]]), np.array([1.0]))
    L = ntp.smoothness(dat)
    assert L == pytest.approx(0.5 * np.sum(h ** 2), rel=1e-12)
    D = np.outer([1.0, -1.0], h[0]) / (np.sqrt(2) * np.linalg.norm(h))
    W, s = np.zeros((2, 3)), 1e-4
    sec = (ntp.ce_loss(W + s * D, dat) - 2 * ntp.ce_loss(W, dat) + ntp.ce_loss(W - s * D, dat)) / s ** 2
    assert sec == pytest.approx(L, rel=1e-5)


def test_limits_and_subspaces(data):
    PF = ntp.projector_F(data)
    for b in range(3):
        H, P = data.H[b], data.P[b]
        Ws, Wm = SG.ntp_finite(H, P), SG.ntp_svm(H, P)
        for a, c, j in _gens(H, P, "eq"):
            assert (Ws[a] - Ws[c]) @ H[j] == pytest.approx(np.log(P[j, a] / P[j, c]), abs=1e-9)
            assert abs((Wm[a] - Wm[c]) @ H[j]) < 1e-7
        gaps = np.array([(Wm[z] - Wm[v]) @ H[j] for z, v, j in _gens(H, P, "ineq")])
        assert gaps.min() == pytest.approx(1.0, abs=1e-7)
        # lem-ntp-subspaces: W* in F, W_mm in F-perp
        np.testing.assert_allclose(PF[b] @ Ws.ravel(), Ws.ravel(), atol=1e-9)
        assert np.linalg.norm(PF[b] @ Wm.ravel()) < 1e-6 * np.linalg.norm(Wm)


def test_prop1_ce_tends_to_entropy(data):
    H = ntp.entropy(data)
    Ws = np.stack([SG.ntp_finite(data.H[b], data.P[b]) for b in range(3)])
    Wm = np.stack([SG.ntp_svm(data.H[b], data.P[b]) for b in range(3)])
    vals = np.array([ntp.ce_loss(Ws + g * Wm, data) - H for g in (1, 2, 4, 8, 16, 32)])
    assert np.all(np.diff(vals, axis=0) < 0)
    assert np.all(vals[-1] < 1e-8)


def test_thm2_gd_converges_to_both_limits(data):
    Ws = np.stack([SG.ntp_finite(data.H[b], data.P[b]) for b in range(3)])
    Wm = np.stack([SG.ntp_svm(data.H[b], data.P[b]) for b in range(3)])
    PF = ntp.projector_F(data)
    r = ntp.train(data, rule="gd", steps=40000, lr=1 / (2 * ntp.smoothness(data)),
                  record_steps=[1000, 40000])
    flat = r["iterates"].reshape(2, 3, -1)
    pf = np.einsum("bij,kbj->kbi", PF, flat).reshape(r["iterates"].shape)
    rel = np.linalg.norm(pf - Ws, axis=(-2, -1)) / np.linalg.norm(Ws, axis=(-2, -1))
    cor = A.metrics.corr(r["iterates"] - pf, Wm, elem_ndim=2)
    assert np.all(rel[1] < rel[0]) and np.all(cor[1] > cor[0])
    assert np.all(rel[1] < 0.1) and np.all(cor[1] > 0.9)
    assert np.all(np.diff(r["ce"], axis=0) < 0)


def test_not_separable_raises_naming_context():
    # two contexts with the same embedding but disjoint supports cannot be separated
    H = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    P = np.zeros((3, 4))
    P[0, [0, 1]] = 0.5
    P[1, [2, 3]] = 0.5
    P[2, [0, 2]] = 0.5
    with pytest.raises(A.svm.InfeasibleError, match="context 1"):
        SG.ntp_svm(H, P)
    # not NTP_H-compatible: the same embedding with different log-odds
    P2 = np.zeros((2, 3))
    P2[0, [0, 1]] = [0.5, 0.5]
    P2[1, [0, 1]] = [0.9, 0.1]
    with pytest.raises(A.svm.InfeasibleError, match="contexts"):
        SG.ntp_finite(H[:2], P2)


def test_generator_trial_independent_of_trials():
    a = ntp.synthetic(3, 6, 5, trials=2, seed=4)
    b = ntp.synthetic(3, 6, 5, trials=5, seed=4)
    np.testing.assert_array_equal(a.H, b.H[:2])
    np.testing.assert_array_equal(a.P, b.P[:2])


def test_bad_input():
    with pytest.raises(ValueError, match="support"):
        ntp.synthetic(3, 4, 5, support=4)
    with pytest.raises(ValueError, match="P must"):
        SG.ntp_svm(np.ones((2, 2)), np.ones((2, 3)))
    d = ntp.synthetic(2, 4, 3, trials=1)
    with pytest.raises(ValueError, match="rule"):
        ntp.train(d, rule="sgd", steps=1, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        ntp.train(d, rule="gd", steps=1, lr=-1.0)


def test_thm1_regularization_path(data):
    """Theorem 1: the norm-constrained CE minimizer turns towards W_mm as the budget grows."""
    Wm = np.stack([SG.ntp_svm(data.H[b], data.P[b]) for b in range(3)])
    L = ntp.smoothness(data)[:, None, None]
    cors = []
    W = np.zeros_like(Wm)
    for Bud in (2.0, 8.0, 32.0, 128.0):
        for _ in range(6000):                      # projected gradient descent on the ball
            W = W - ntp.ce_grad(W, data) / L
            nrm = np.linalg.norm(W, axis=(1, 2), keepdims=True)
            W = np.where(nrm > Bud, W * Bud / nrm, W)
        cors.append(A.metrics.corr(W, Wm, elem_ndim=2))
    cors = np.array(cors)
    assert np.all(np.diff(cors, axis=0) > 0)
    assert np.all(cors[-1] > 0.9)


def test_ntp_solvers_batched_equal_per_trial():
    data = ntp.synthetic(3, 6, 5, support=2, trials=2, seed=3)
    Ws, Wm = SG.ntp_finite(data.H, data.P), SG.ntp_svm(data.H, data.P)
    for b in range(2):
        np.testing.assert_allclose(Ws[b], SG.ntp_finite(data.H[b], data.P[b]), atol=1e-9)
        np.testing.assert_allclose(Wm[b], SG.ntp_svm(data.H[b], data.P[b]), atol=1e-6)
