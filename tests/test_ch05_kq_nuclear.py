"""Tests of the chapter "(K,Q) and the nuclear norm" (book/ch05_kq_nuclear.md)."""
import numpy as np
import pytest
import torch

import attnsvm.svm as svm
from attnsvm import tokens
import attnsvm.data as A_data
import attnsvm.metrics as A_metrics
from attnsvm.experiments import selection as S


@pytest.fixture(scope="module")
def inst():
    data = A_data.unit_instances(4, 5, 6, trials=3, seed=1)
    out = []
    for b in range(3):
        X, y, Z, v = data.X[b], data.y[b], data.Z[b], data.v[b]
        opt = tokens.optimal_tokens(X, y, v)
        out.append((X, Z, opt))
    return out


def _margins(X, Z, opt, W):
    n = X.shape[0]
    sel = X[np.arange(n), opt]
    mg = np.einsum("ntd,nd->nt", sel[:, None, :] - X, Z @ W.T)
    mg[np.arange(n), opt] = np.inf
    return mg


def test_rank_frobenius_at_most_n():
    data = A_data.unit_instances(3, 6, 8, trials=4, seed=2)
    for b in range(4):
        opt = tokens.optimal_tokens(data.X[b], data.y[b], data.v[b])
        W = svm.att_svm(data.X[b], data.Z[b], opt)
        assert svm.rank(W) <= 3


def test_variational_nuclear_norm():
    rng = np.random.default_rng(0)
    for r in (1, 3, 5):
        W = rng.standard_normal((6, r)) @ rng.standard_normal((r, 6))
        nuc = np.linalg.svd(W, compute_uv=False).sum()
        K, Q = A_metrics.balanced_factors(W, m=r)
        assert np.allclose(K @ Q.T, W, atol=1e-10)
        assert A_metrics.factor_cost(K, Q) == pytest.approx(nuc, rel=1e-10)
        # every other factorization costs at least as much: K G, Q G^{-T}
        for _ in range(20):
            G = rng.standard_normal((r, r)) + 2 * np.eye(r)
            K2, Q2 = K @ G, Q @ np.linalg.inv(G).T
            assert np.allclose(K2 @ Q2.T, W, atol=1e-8)
            assert A_metrics.factor_cost(K2, Q2) >= nuc * (1 - 1e-10)
        with pytest.raises(ValueError):
            if r > 1:
                A_metrics.balanced_factors(W, m=r - 1)
            else:
                raise ValueError
    # random factors: cost >= nuclear norm of the product
    for _ in range(50):
        K, Q = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
        assert A_metrics.factor_cost(K, Q) >= np.linalg.svd(K @ Q.T, compute_uv=False).sum() - 1e-12


def test_kq_svm_is_nuclear_svm(inst):
    for X, Z, opt in inst:
        Wn = svm.att_svm(X, Z, opt, norm="nuc")
        Wf = svm.att_svm(X, Z, opt, norm="fro")
        nuc = lambda M: np.linalg.svd(M, compute_uv=False).sum()  # noqa: E731
        K, Q = A_metrics.balanced_factors(Wn)
        assert _margins(X, Z, opt, K @ Q.T).min() >= 1 - 1e-6
        assert A_metrics.factor_cost(K, Q) == pytest.approx(nuc(Wn), rel=1e-8)
        # other feasible matrices (Wmm, random feasible mixtures) cost at least as much
        Kf, Qf = A_metrics.balanced_factors(Wf)
        assert A_metrics.factor_cost(Kf, Qf) >= nuc(Wn) * (1 - 1e-6)
        rng = np.random.default_rng(3)
        for _ in range(5):
            M = Wn + 0.3 * rng.standard_normal(Wn.shape)
            M = M / max(_margins(X, Z, opt, M).min(), 1e-9) if _margins(X, Z, opt, M).min() > 0 else Wf
            Km, Qm = A_metrics.balanced_factors(M)
            assert A_metrics.factor_cost(Km, Qm) >= nuc(Wn) * (1 - 1e-6)
        # and the Frobenius problem's own order
        assert np.linalg.norm(Wf) <= np.linalg.norm(Wn) * (1 + 1e-6)


def test_balanced_and_flow_conservation():
    rng = np.random.default_rng(4)
    W = rng.standard_normal((5, 5))
    K, Q = A_metrics.balanced_factors(W)
    assert A_metrics.imbalance(K, Q) < 1e-10
    nuc = np.linalg.svd(W, compute_uv=False).sum()
    assert np.sum(K * K) == pytest.approx(nuc, rel=1e-10)
    assert np.sum(Q * Q) == pytest.approx(nuc, rel=1e-10)
    # GD on a smooth loss of KQ^T: imbalance drift is O(eta^2) per step, so over a fixed time
    # horizon it shrinks like eta (it would stay O(1) if K^T K - Q^T Q were not conserved)
    A = rng.standard_normal((5, 5))
    K0, Q0 = rng.standard_normal((5, 5)) * 0.3, rng.standard_normal((5, 5)) * 0.3
    D0 = K0.T @ K0 - Q0.T @ Q0
    drift = []
    for eta in (0.01, 0.001):
        K, Q = K0.copy(), Q0.copy()
        for _ in range(int(1.0 / eta)):
            G = K @ Q.T - A                  # gradient of 1/2 ||KQ^T - A||^2
            K, Q = K - eta * G @ Q, Q - eta * G.T @ K
        drift.append(np.linalg.norm(K.T @ K - Q.T @ Q - D0))
    assert drift[1] < 0.2 * drift[0]


def test_nuclear_dual(inst):
    for X, Z, opt in inst:
        W, lam = svm.att_svm(X, Z, opt, norm="nuc", return_dual=True)
        n = X.shape[0]
        sel = X[np.arange(n), opt]
        M = np.einsum("nt,ntd,ne->de", lam, sel[:, None, :] - X, Z)
        nuc = np.linalg.svd(W, compute_uv=False).sum()
        assert np.all(lam >= 0)
        assert np.linalg.norm(M, 2) <= 1 + 1e-6
        assert lam.sum() == pytest.approx(nuc, rel=1e-6)
        assert np.sum(M * W) == pytest.approx(nuc, rel=1e-6)
        mg = _margins(X, Z, opt, W)
        mg[np.arange(n), opt] = 1.0
        assert np.max(lam * np.abs(mg - 1)) < 1e-6 * max(1.0, lam.max())


def test_observed_w_fro_kq_nuc():
    torch.manual_seed(0)
    data = A_data.unit_instances(6, 8, 10, trials=4, seed=0)
    res = S.compare_w_kq(data, steps=1500, lr=0.1, init_scale=0.1, seed=0, device="cpu")
    cwf, cwn = res.final_corr("W", "fro"), res.final_corr("W", "nuc")
    ckn, ckf = res.final_corr("KQ", "nuc"), res.final_corr("KQ", "fro")
    assert np.all(cwf > cwn)
    assert np.all(ckn > ckf)
    assert np.median(cwf) > 0.99
    assert np.median(ckn) > 0.93
    # the nuclear SVM never has larger rank than the Frobenius one of the same selection
    assert np.all(svm.rank(res.svm[("nuc", "W")]) <= svm.rank(res.svm[("fro", "W")]))
    # the glued summary carries the same numbers
    s = res.summary()
    assert s["corr_w_fro"] == pytest.approx(np.median(cwf)) and s["corr_kq_nuc"] == pytest.approx(np.median(ckn))
    assert s["rank_fro_max"] <= 6 and 0 <= s["frac_rank_gap"] <= 1 and "corr_kq_nuc_nopen" not in s


def test_claims_hold_and_can_fail():
    """KQComparison.claims(): on seeded instances the (K,Q) iterate's median correlation is
    below W's, each iterate is closer to its own norm's SVM, and the factors are balanced; each
    claim fails when its numbers are set against it (KQ's final correlations set to 1, W's
    crossed correlation set to its matched one, Q doubled)."""
    data = A_data.unit_instances(6, 8, 10, trials=4, seed=0)
    res = S.compare_w_kq(data, steps=1500, lr=0.1, init_scale=0.1, penalty=2.2e-16, seed=0,
                         device="cpu")
    c = res.claims()
    assert set(c) == {"kq_slower", "own_norm_closer", "kq_balanced"}
    assert all(h for h, _ in c.values()), c
    res.corr[("W", "nuc", "W")][-1] = res.corr[("W", "fro", "W")][-1]
    assert not res.claims()["own_norm_closer"][0]
    res.corr[("KQ", "nuc", "KQ")][-1] = 1.0
    assert not res.claims()["kq_slower"][0]
    res.history["KQ"].params["Q"] = 2 * res.history["KQ"].params["Q"]
    assert not res.claims()["kq_balanced"][0]
