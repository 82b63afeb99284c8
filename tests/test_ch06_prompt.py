"""Tests of the chapter "Prompt attention and joint training of the head" (book/ch06_prompt.md)."""
import numpy as np
import pytest
import torch

import attnsvm.svm as svm
from attnsvm import tokens
import attnsvm.data as A_data
from attnsvm.experiments import selection as S
from attnsvm.losses import get_loss


def _risk_torch(p, X, y, v, loss):
    s = torch.softmax(X @ p, dim=-1)                     # (n, T)
    u = y * (s * (X @ v)).sum(-1)
    return get_loss(loss).value(u).mean(), u, s


@pytest.fixture(scope="module")
def inst():
    data, planted = A_data.prompt_instances(5, 4, 6, trials=1, gap=0.5, noise=0.1, seed=3)
    d = data.trial(0)
    return d.X, d.y, d.v, planted[0]


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_gradient_pair_form(inst, loss):
    X, y, v, _ = inst
    rng = np.random.default_rng(0)
    Xt, yt, vt = (torch.tensor(a) for a in (X, y, v))
    for _ in range(3):
        p = torch.tensor(rng.standard_normal(X.shape[-1]), requires_grad=True)
        L, u, s = _risk_torch(p, Xt, yt, vt, loss)
        (g,) = torch.autograd.grad(L, p)
        with torch.no_grad():
            w = -torch.func.grad(lambda uu: get_loss(loss).value(uu).sum())(u)   # -l'(u)
            gam = yt[:, None] * (Xt @ vt)                                          # (n, T)
            pair = (s[:, :, None] * s[:, None, :] * (gam[:, :, None] - gam[:, None, :]))[..., None] \
                * (Xt[:, :, None, :] - Xt[:, None, :, :])
            neg = (w[:, None] * 0.5 * pair.sum((1, 2))).mean(0)
        assert torch.allclose(-g, neg, atol=1e-12, rtol=1e-9)


def test_no_minimizer(inst):
    X, y, v, _ = inst
    Xt, yt, vt = (torch.tensor(a) for a in (X, y, v))
    gam = y[:, None] * (X @ v)
    opt = tokens.optimal_tokens(X, y, v)
    for loss in ("logistic", "exponential", "correlation"):
        lo = get_loss(loss)
        Lstar = float(lo.value(torch.tensor(gam.max(1))).mean())
        rng = np.random.default_rng(1)
        for _ in range(20):
            p = torch.tensor(rng.standard_normal(X.shape[-1]) * 3)
            assert float(_risk_torch(p, Xt, yt, vt, loss)[0]) > Lstar
        pm = torch.tensor(svm.p_svm(X, opt))
        vals = [float(_risk_torch(c * pm, Xt, yt, vt, loss)[0]) - Lstar for c in (1, 4, 16, 64)]
        assert all(a > b for a, b in zip(vals, vals[1:]))
        assert vals[-1] < 1e-6 * max(1.0, abs(Lstar)) + 1e-9
        # bounded prompts stay a fixed amount above L*
        bounded = min(float(_risk_torch(torch.tensor(q), Xt, yt, vt, loss)[0])
                      for q in np.random.default_rng(2).standard_normal((200, X.shape[-1])))
        assert bounded - Lstar > 1e-4


def test_weights_bounded_along_training(inst):
    X, y, v, _ = inst
    data = A_data.prompt_instances(5, 4, 6, trials=1, gap=0.5, noise=0.1, seed=3)[0]
    Gam = np.max(np.abs(y[:, None] * (X @ v)))
    run = S.prompt_joint(data, train_v=False, loss="logistic", steps=200, device="cpu")
    Xt, yt, vt = (torch.tensor(a) for a in (X, y, v))
    for P in run.history.snapshots[:, 0]:
        _, u, _ = _risk_torch(torch.tensor(P), Xt, yt, vt, "logistic")
        assert torch.all(u.abs() <= Gam + 1e-12)
        w = torch.sigmoid(-u)
        lo, hi = 1 / (1 + np.exp(Gam)), 1 / (1 + np.exp(-Gam))
        assert torch.all((w >= lo - 1e-12) & (w <= hi + 1e-12))


def test_fixed_head_all_losses_reach_p_mm():
    data, planted = A_data.prompt_instances(6, 5, 8, trials=2, gap=0.5, noise=0.1, seed=0)
    res = S.prompt_loss_sweep(data, train_v=False, steps=1500, device="cpu")
    for loss, r in res.items():
        assert np.all(r.final("corr_p") > 0.99), loss
        assert np.all(r.selected == planted)


def test_head_limit_depends_on_loss():
    data, planted = A_data.prompt_instances(6, 5, 8, trials=3, gap=0.5, noise=0.1, seed=0)
    res = S.prompt_loss_sweep(data, losses=("logistic", "correlation"), train_v=True, steps=1500,
                              device="cpu")
    lg, co = res["logistic"], res["correlation"]
    assert np.all(lg.final("corr_v") > lg.final("corr_v_centroid"))
    assert np.all(co.final("corr_v_centroid") > co.final("corr_v"))
    assert np.all(co.final("corr_v_centroid") > 0.999)


def test_score_gap_speed():
    res = S.prompt_gap_sweep(6, 5, 8, gaps=[0.05, 0.5], trials=3, train_v=False, optimizer="gd",
                             lr=1.0, steps=500, device="cpu")
    small, large = res[0.05].history.final("opt_mass"), res[0.5].history.final("opt_mass")
    assert np.all(large > small)


def test_prompt_instances_gap():
    data, planted = A_data.prompt_instances(10, 6, 5, trials=2, gap=0.3, noise=0.0, seed=1)
    g = tokens.token_scores(data.X, data.y, data.v)
    top = np.take_along_axis(g, planted[..., None], -1)[..., 0]
    g2 = g.copy()
    np.put_along_axis(g2, planted[..., None], -np.inf, -1)
    assert np.allclose(top - g2.max(-1), 0.3)
    assert np.array_equal(tokens.optimal_tokens(data.X, data.y, data.v), planted)


def test_prompt_run_summary_and_learned_references():
    data, planted = A_data.prompt_instances(6, 4, 5, trials=3, gap=0.5, noise=0.1, seed=0)
    r = S.prompt_joint(data, planted=planted, train_v=True, steps=150, seed=0, device="cpu")
    s = r.summary(data)
    assert s["frac_planted"] == pytest.approx(np.mean(r.selected == planted))
    ref = r.learned_references(data)
    cp, cv, opt_T = ref[:3]
    assert np.array_equal(opt_T, tokens.optimal_tokens(data.X, data.y, r.history.params["v"]))
    cr = ref.corr_p_relaxed
    assert np.all(np.isnan(cr) | (np.abs(cr) <= 1 + 1e-12))
    # all-support trials: the relaxed p-SVM is the strict one
    allsup = ref.support.all(1) & ~np.isnan(cp)
    np.testing.assert_allclose(cr[allsup], cp[allsup], atol=1e-6)
    assert s["n_relaxed_closer"] + s["n_strict_closer"] <= data.trials
    assert s["n_relaxed_closer"] == int(np.sum(cr > cp + 1e-6))
    assert np.all(np.isnan(cp) | (np.abs(cp) <= 1 + 1e-12))
    if np.any(~np.isnan(cp)):
        assert s["corr_p_learned"] == pytest.approx(np.nanmedian(cp))
    else:
        assert np.isnan(s["corr_p_learned"])
    fixed = S.prompt_joint(data, train_v=False, steps=50, seed=0, device="cpu").summary()
    assert "corr_v" not in fixed and np.isnan(fixed["frac_planted"])


def test_relaxed_and_strict_references_claims_hold_on_the_book_setting():
    """The chapter's claims on the book's instances (quick profile): with the logistic loss each
    reference is the closer one in some trial; with the correlation loss the relaxed one never."""
    data, planted = A_data.prompt_instances(8, 6, 10, trials=8, gap=0.5, noise=0.1, seed=0)
    for loss, name in (("logistic", "relaxed_sometimes_closer"),
                       ("correlation", "relaxed_never_closer")):
        r = S.prompt_joint(data, planted=planted, train_v=True, loss=loss, steps=2000, seed=0,
                           device="cpu")
        c = r.claims(data)
        assert c[name][0], c


def test_direction_claims_hold_and_can_fail():
    """PromptRun.claims(): with the head fixed p ends near p_mm; trained jointly, the
    logistic head ends near v_mm and the correlation head near the centroid, and the selected
    token is mostly the one optimal under v_T; each claim fails when its numbers are set
    against it (p's correlation lowered, v's two correlations exchanged, selected tokens
    shifted)."""
    data, planted = A_data.prompt_instances(6, 5, 8, trials=3, gap=0.5, noise=0.1, seed=0)
    fixed = S.prompt_joint(data, train_v=False, steps=1500, device="cpu")
    c = fixed.claims(data)
    assert list(c) == ["p_near_pmm"] and c["p_near_pmm"][0], c
    fixed.corr_p[-1] = 0.98
    assert not fixed.claims(data)["p_near_pmm"][0]
    for loss, name in (("logistic", "v_near_vmm"), ("correlation", "v_near_centroid")):
        r = S.prompt_joint(data, planted=planted, train_v=True, loss=loss, steps=1500, seed=0,
                           device="cpu")
        c = r.claims(data)
        assert c[name][0] and c["selected_mostly_opt"][0], c
        r.corr_v, r.corr_v_centroid = r.corr_v_centroid, r.corr_v
        assert not r.claims(data)[name][0]
        r.selected = (r.selected + 1) % data.X.shape[2]
        assert not r.claims(data)["selected_mostly_opt"][0]


def test_gap_sweep_claim_holds_and_can_fail():
    """PromptGapSweep.claims(): the mass on opt grows with the score gap (small gaps select
    late); with the runs assigned to the gaps in reverse order the claim fails."""
    gaps = [0.05, 0.5, 1.0]
    sw = S.prompt_gap_sweep(6, 5, 8, gaps=gaps, trials=3, train_v=False, optimizer="gd",
                            lr=1.0, steps=500, device="cpu")
    assert isinstance(sw, dict) and list(sw) == gaps
    c = sw.claims()
    assert c["small_gap_late"][0], c
    rev = S.PromptGapSweep({g: sw[h] for g, h in zip(gaps, reversed(gaps))})
    assert not rev.claims()["small_gap_late"][0]
