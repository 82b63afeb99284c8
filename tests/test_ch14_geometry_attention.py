"""Part IV, "Geometry in attention": the SVMs and the observed mirror-descent bias, checked.

Labels refer to book/ch14_geometry_attention.md.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import attnsvm as A
from attnsvm import optim_geometry as OG, svm_geometry as SG


@pytest.fixture(scope="module")
def inst():
    data = A.data.random_unit(4, 5, 6, cross=True, trials=4, seed=1)
    return data


def _margins(X, Z, opt, W):
    n, T, _ = X.shape
    return np.array([(X[i, opt[i]] - X[i, t]) @ W @ Z[i] for i in range(n) for t in range(T) if t != opt[i]])


def test_spectral_att_svm_is_optimal_in_its_norm(inst):
    X, Z, opt = inst.X[0], inst.Z[0], inst.opt[0]
    Ws = SG.att_svm_spectral(X, Z, opt)
    assert _margins(X, Z, opt, Ws).min() == pytest.approx(1.0, abs=1e-8)
    others = {"fro": A.svm.att_svm(X, Z, opt), 3.0: A.svm.att_svm(X, Z, opt, norm=3.0)}
    spec = np.linalg.norm(Ws, 2)
    for key, W in others.items():
        W = W / _margins(X, Z, opt, W).min()
        assert spec <= np.linalg.norm(W, 2) + 1e-7
        own = np.linalg.norm(W) if key == "fro" else np.sum(np.abs(W) ** 3) ** (1 / 3)
        own_s = np.linalg.norm(Ws) if key == "fro" else np.sum(np.abs(Ws) ** 3) ** (1 / 3)
        assert own <= own_s + 1e-7


def test_md_p2_is_ngd_on_attention(inst):
    model = A.models.AttentionClassifier("W")
    batch = {k: torch.as_tensor(getattr(inst, k)) for k in ("X", "y", "Z")}
    W0 = model.init_params(6, torch.as_tensor(inst.v), [np.random.default_rng(b) for b in range(4)])
    a = OG.run(model, W0, batch, rule="md", p=2.0, lr=0.1, normalize=True, steps=50, loss="logistic")
    b = OG.run(model, W0, batch, rule="sd", norm=2, lr=0.1, steps=50, loss="logistic")
    np.testing.assert_allclose(a["iterates"], b["iterates"], atol=1e-10)


def test_md_l3_selects_l3_att_svm():
    """Observed result of the chapter (Julistiono et al., abstract level), on other instances."""
    data = A.data.random_unit(4, 5, 8, cross=True, trials=4, seed=7)
    model = A.models.AttentionClassifier("W")
    batch = {k: torch.as_tensor(getattr(data, k)) for k in ("X", "y", "Z")}
    W0 = model.init_params(8, torch.as_tensor(data.v), [np.random.default_rng(b) for b in range(4)])
    r = OG.run(model, W0, batch, rule="md", p=3.0, lr=0.1, normalize=True, steps=1500,
               loss="logistic", record_steps=[1500])
    W = r["iterates"][-1]
    sel = A.metrics.attention(data.X, W, data.Z).argmax(-1)
    c3 = [A.metrics.corr(W[b], A.svm.att_svm(data.X[b], data.Z[b], sel[b], norm=3.0)) for b in range(4)]
    c175 = [A.metrics.corr(W[b], A.svm.att_svm(data.X[b], data.Z[b], sel[b], norm=1.75)) for b in range(4)]
    assert np.median(c3) >= 0.97
    assert np.median(c3) > np.median(c175)


def test_bad_input(inst):
    X, Z = inst.X[0], inst.Z[0]
    with pytest.raises(ValueError, match="opt"):
        SG.att_svm_spectral(X, Z, np.array([0, 1, 9, 0]))
    with pytest.raises(ValueError, match="Z"):
        SG.att_svm_spectral(X, Z[:2], inst.opt[0])
