"""attnsvm.tokens (scores, margins, lifted features) and attnsvm.losses (numpy and torch forms)."""
import numpy as np
import pytest
import torch

from attnsvm import losses, tokens
from attnsvm.data import random_unit


def test_margins_are_inner_products_with_the_lifted_features():
    D = random_unit(4, 5, 3, cross=True, seed=1)
    W = np.random.default_rng(0).standard_normal((3, 3))
    alpha = np.array([0, 2, 4, 1])
    A, idx = tokens.lifted_features(D.X, D.Z, alpha)
    m = tokens.selection_margins(W, D.X, D.Z, alpha)
    np.testing.assert_allclose(m[idx[:, 0], idx[:, 1]], np.einsum("kde,de->k", A, W), atol=1e-12)
    assert np.all(np.isinf(m[np.arange(4), alpha]))
    # the margins are differences of the attention scores
    a = tokens.attention_scores(D.X, W, D.Z)
    np.testing.assert_allclose(m[idx[:, 0], idx[:, 1]],
                               (a[np.arange(4), alpha][:, None] - a)[idx[:, 0], idx[:, 1]], atol=1e-12)


def test_margins_broadcast_over_snapshots_and_trials():
    D = random_unit(3, 4, 5, cross=True, trials=2, seed=2)
    W = np.random.default_rng(1).standard_normal((6, 2, 5, 5))
    alpha = np.zeros((2, 3), dtype=int)
    m = tokens.selection_margins(W, D.X, D.Z, alpha)
    assert m.shape == (6, 2, 3, 4)
    for k in range(6):
        for b in range(2):
            np.testing.assert_allclose(m[k, b], tokens.selection_margins(W[k, b], D.X[b], D.Z[b],
                                                                         alpha[b]), rtol=1e-13)
    with pytest.raises(ValueError, match="alpha"):
        tokens.selection_margins(W, D.X, D.Z, np.zeros((2, 2), dtype=int))
    with pytest.raises(ValueError, match="alpha"):
        tokens.selection_margins(W, D.X, D.Z, np.full((2, 3), 4))


@pytest.mark.parametrize("name", sorted(losses.LOSSES))
def test_numpy_and_torch_forms_agree(name):
    L = losses.get_loss(name)
    u = np.linspace(-30, 60, 181)
    ut = torch.as_tensor(u)
    # (torch.softplus is linear above 20: agreement to 1e-9 relative)
    np.testing.assert_allclose(L.value_np(u), L.value(ut).numpy(), rtol=1e-9)
    np.testing.assert_allclose(L.neg_deriv_np(u), np.exp(L.log_neg_deriv(ut).numpy()), rtol=1e-8)
    # -l' is the derivative of -l (central differences)
    h = 1e-5
    np.testing.assert_allclose(L.neg_deriv_np(u[:60]),
                               -(L.value_np(u[:60] + h) - L.value_np(u[:60] - h)) / (2 * h),
                               rtol=1e-6, atol=1e-12)


def test_logistic_neg_deriv_keeps_relative_precision():
    L = losses.get_loss("logistic")
    assert L.neg_deriv_np(np.array([50.0]))[0] == pytest.approx(np.exp(-50.0), rel=1e-14)


def test_loss_floor_is_the_limit_along_the_svm():
    from attnsvm.losses import loss_value
    from attnsvm.svm import att_svm
    D = random_unit(3, 3, 8, seed=0)
    Wmm = att_svm(D.X, D.Z, D.opt)
    gap = loss_value(60 * Wmm, D) - losses.loss_floor(D)
    assert 0 <= gap < 1e-8
    assert losses.loss_floor(random_unit(3, 3, 8, trials=2, seed=0)).shape == (2,)
    with pytest.raises(ValueError, match="data"):
        losses.loss_floor(np.zeros(3))


# ----------------------------------------------------------------------------- log excess loss
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_log_excess_loss_is_the_excess_of_the_loss(loss):
    """numpy and torch agree, and both equal log(mean_i l(g*_i - delta_i) - l(g*_i)) computed
    directly where that is accurate; the small-gap expansion keeps tiny excesses finite."""
    import torch

    from attnsvm.losses import get_loss, log_excess_loss
    rng = np.random.default_rng(0)
    G = rng.standard_normal((3, 4, 5))                          # token scores (B, n, T)
    a = rng.standard_normal((3, 4, 5)) * 2                      # attention scores
    gs = G.max(-1)
    D = gs[..., None] - G
    log_gap = np.where(D > 0, np.log(np.where(D > 0, D, 1.0)), -np.inf)
    log_s = a - np.log(np.exp(a).sum(-1, keepdims=True))
    out_np = log_excess_loss(log_s, log_gap, gs, loss)
    out_t = log_excess_loss(torch.as_tensor(log_s), torch.as_tensor(log_gap), torch.as_tensor(gs), loss)
    np.testing.assert_allclose(out_t.numpy(), out_np, rtol=1e-12)
    ell = get_loss(loss)
    delta = (np.exp(log_s) * D).sum(-1)
    direct = np.log(np.mean(ell.value_np(gs - delta) - ell.value_np(gs), axis=-1))
    np.testing.assert_allclose(out_np, direct, rtol=1e-10)
    # a tiny excess: the expansion (default) is finite and matches the direct formula's limit
    tiny = log_s - 40.0 * (D > 0)                              # weights ~e^-40 off the best token
    fine = log_excess_loss(tiny, log_gap, gs, loss)
    assert np.all(np.isfinite(fine))
    ref = log_excess_loss(tiny, log_gap, gs, loss, small_gap=0.0)
    np.testing.assert_allclose(fine, ref, rtol=1e-12)
    huge = log_s - 800.0 * (D > 0)                             # the direct formula underflows
    assert np.all(np.isfinite(log_excess_loss(huge, log_gap, gs, loss)))
    if loss != "correlation":
        with np.errstate(divide="ignore", invalid="ignore"):        # the direct formula fails
            assert not np.any(np.isfinite(log_excess_loss(huge, log_gap, gs, loss, small_gap=0.0)))
