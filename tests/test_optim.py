"""Step rules: per-trial norms, log-space Polyak, and torch.optim wrappers = engine."""
import math

import numpy as np
import pytest
import torch

from attnsvm.data import AttnData
from attnsvm.models import AttentionClassifier
from attnsvm.losses import get_loss
from attnsvm.optim import NGD, RULES, Adam, Polyak, SignGD, init_state, log_norm, update
from attnsvm.train import fit

EPS = float(np.finfo(np.float64).eps)


def _rand(*shape, seed=0):
    return torch.tensor(np.random.default_rng(seed).standard_normal(shape))


def test_ngd_norms_are_per_trial():
    g1, g2 = _rand(4, 3, 3, seed=1), _rand(4, 5, seed=2)
    g1[0] *= 1e6                             # one trial with a huge gradient
    out = update("ngd", [g1, g2], lr=0.1, batch_ndim=1)
    tot = torch.sqrt(out[0].flatten(1).pow(2).sum(1) + out[1].pow(2).sum(1))
    torch.testing.assert_close(tot, torch.full((4,), 0.1, dtype=torch.float64))
    outp = update("ngd_param", [g1, g2], lr=0.1, batch_ndim=1)
    torch.testing.assert_close(outp[0].flatten(1).norm(dim=1), torch.full((4,), 0.1, dtype=torch.float64))
    torch.testing.assert_close(outp[1].norm(dim=1), torch.full((4,), 0.1, dtype=torch.float64))


def test_log_scales_do_not_change_normalized_steps_and_scale_gd():
    g = [_rand(3, 2, 2, seed=3), _rand(3, 4, seed=4)]
    sig = torch.tensor([-800.0, 0.0, 3.0], dtype=torch.float64)
    a = update("ngd_param", g, lr=0.2, log_scale=sig, batch_ndim=1)
    b = update("ngd_param", g, lr=0.2, batch_ndim=1)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    # global ngd with per-parameter scales = ngd on the true gradients
    s1 = torch.tensor([0.0, -1.0, 2.0], dtype=torch.float64)
    s2 = torch.tensor([1.0, 0.5, -3.0], dtype=torch.float64)
    true = [g[0] * torch.exp(s1)[:, None, None], g[1] * torch.exp(s2)[:, None]]
    a = update("ngd", g, lr=0.3, log_scale=[s1, s2], batch_ndim=1)
    b = update("ngd", true, lr=0.3, batch_ndim=1)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y)
    a = update("gd", g, lr=0.3, log_scale=[s1, s2], batch_ndim=1)
    for x, y in zip(a, true):
        torch.testing.assert_close(x, -0.3 * y)


def test_polyak_log_space_at_tiny_loss():
    # true gradient 1e-300 * g~, loss 1e-300: eta = L/||g||^2 ~ 1e300 must stay finite
    g = [_rand(2, 3, 3, seed=5)]
    sig = torch.full((2,), math.log(1e-300), dtype=torch.float64)
    logL = torch.full((2,), math.log(1e-300), dtype=torch.float64)
    out = update("polyak", g, lr=1.0, log_scale=sig, log_loss=logL, batch_ndim=1)
    assert torch.isfinite(out[0]).all()
    # increment = -(L/||g||^2) g = -(1e-300 / (1e-600 ||g~||^2)) 1e-300 g~ = -g~/||g~||^2
    want = -g[0] / g[0].flatten(1).pow(2).sum(1)[:, None, None]
    torch.testing.assert_close(out[0], want)
    capped = update("polyak", g, lr=1.0, log_scale=sig, log_loss=logL, eta_max=0.5, batch_ndim=1)
    torch.testing.assert_close(capped[0], -0.5 * 1e-300 * g[0], rtol=1e-12, atol=0)
    assert torch.isfinite(log_norm([g[0] * 1e-300], batch_ndim=1)).all()


def test_zero_gradient_gives_zero_step():
    z = [torch.zeros(2, 3, dtype=torch.float64)]
    for rule in ("ngd", "ngd_param", "sign", "gd"):
        assert torch.equal(update(rule, z, lr=0.1, batch_ndim=1)[0], z[0])
    out = update("polyak", z, lr=1.0, log_loss=torch.zeros(2, dtype=torch.float64), batch_ndim=1)
    assert torch.equal(out[0], z[0])


def test_ngd_step_of_a_subnormal_gradient_is_finite():
    """A gradient of norm ~1e-320 (the engine's log-scaled gradient when every sequence's factor
    underflows but one) still gives a step of length lr: e^{-log||g||} alone overflows to inf
    (ch07's horizon study at seed 1 put W at inf this way); a normal trial's step is unchanged."""
    g = _rand(3, 2, 2, seed=6)
    tiny = g.clone()
    tiny[0] = torch.tensor([[3e-320, 0.0], [-1e-320, 5e-321]], dtype=torch.float64)
    out = update("ngd", [tiny], lr=0.1, batch_ndim=1)[0]
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.flatten(1).norm(dim=1), torch.full((3,), 0.1, dtype=torch.float64))
    torch.testing.assert_close(out[0] / out[0].abs().max(), -tiny[0] / tiny[0].abs().max(),
                               rtol=0.05, atol=0)        # subnormals carry a few digits only
    assert torch.equal(out[1:], update("ngd", [g], lr=0.1, batch_ndim=1)[0][1:])


def test_unknown_rule():
    with pytest.raises(ValueError, match="optimizer"):
        update("lbfgs", [torch.ones(2)], lr=0.1)
    with pytest.raises(ValueError, match="optimizer"):
        init_state("lbfgs", [])
    assert set(RULES) == {"gd", "ngd", "ngd_param", "polyak", "polyak_star", "adam", "sign",
                          "sd", "md", "prgd"}


# ---------------------------------------------------------------- wrappers = engine
def _problem(seed=0, n=5, T=4, d=3):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, T, d))
    y = np.sign(rng.standard_normal(n))
    Z = rng.standard_normal((n, d))
    v = rng.standard_normal(d)
    return AttnData(X, y, Z, v)


def _torch_run(data, opt_factory, steps, model="KQ", W0=None):
    """One-trial training through a torch.optim optimizer on the autograd loss."""
    net = AttentionClassifier(model)
    t = lambda a: torch.tensor(a[None], dtype=torch.float64)  # noqa: E731
    batch = {"X": t(data.X), "y": t(data.y), "Z": t(data.Z)}
    params = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in W0.items()}
    params["v"] = t(data.v)
    opt = opt_factory([params[k] for k in net.trainable])
    L = get_loss("logistic")

    def closure():
        opt.zero_grad()
        u, _ = net.forward(params, batch)
        loss = L.value(u).mean()
        loss.backward()
        return loss

    for _ in range(steps):
        opt.step(closure)
    return {k: params[k].detach().numpy() for k in net.trainable}


@pytest.mark.parametrize("name,factory,kw", [
    ("ngd_param", lambda p: NGD(p, lr=0.1, per_param=True), {}),
    ("ngd", lambda p: NGD(p, lr=0.1), {}),
    ("polyak", lambda p: Polyak(p, lr=1.0, eta_max=0.5), {"lr": 1.0, "eta_max": 0.5}),
    ("sign", lambda p: SignGD(p, lr=0.01), {"lr": 0.01}),
    ("adam", lambda p: Adam(p, lr=0.01), {"lr": 0.01}),
    ("adam", lambda p: torch.optim.Adam(p, lr=0.01), {"lr": 0.01}),
    ("gd", lambda p: torch.optim.SGD(p, lr=0.1), {}),
])
def test_torch_optimizers_match_engine(name, factory, kw):
    data = _problem()
    rng = np.random.default_rng(11)
    K0, Q0 = rng.standard_normal((1, 3, 3)) * 0.3, rng.standard_normal((1, 3, 3)) * 0.3
    steps = 25
    h = fit(data, model="KQ", optimizer=name, steps=steps, init={"K": K0, "Q": Q0},
            record_every=steps, device="cpu", progress=False, **({"lr": 0.1} | kw))
    got = _torch_run(data, factory, steps, W0={"K": K0, "Q": Q0})
    np.testing.assert_allclose(h.K, got["K"], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h.Q, got["Q"], rtol=1e-10, atol=1e-12)


def test_polyak_wrapper_needs_loss():
    p = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    p.grad = torch.ones(3, dtype=torch.float64)
    with pytest.raises(ValueError, match="loss"):
        Polyak([p]).step()
    with pytest.raises(ValueError, match="lr"):
        NGD([p], lr=-1.0)


# ---------------------------------------------------------------- the registry (Part IV rules)
def test_steepest_rules_per_trial_and_schedule():
    from attnsvm.norms import dual_norm
    from attnsvm.optim import steepest_direction
    g = _rand(3, 4, 2, seed=7)
    g[1] *= 1e8
    for norm in (1, 2, 3.0, "inf", "spectral"):
        out = update("sd", [g], lr=0.1, norm=norm, batch_ndim=1)[0]
        d = steepest_direction(g, norm)
        torch.testing.assert_close(out, -0.1 * d)
        # <g, d> equals the dual norm, trial by trial (the big trial does not leak)
        torch.testing.assert_close((g * d).sum((1, 2)), dual_norm(g, norm), rtol=1e-12, atol=0)
    U, S, Vh = torch.linalg.svd(g, full_matrices=False)
    torch.testing.assert_close(update("sd", [g], lr=0.1, norm="spectral", batch_ndim=1)[0],
                               -0.1 * U @ Vh)
    st = init_state("gd", [g], decay=0.5)
    for t in range(3):                    # eta_t = lr (t+1)^(-1/2)
        out = update("gd", [g], st, lr=0.2, decay=0.5, batch_ndim=1)[0]
        torch.testing.assert_close(out, -0.2 * (t + 1) ** -0.5 * g)


def test_mirror_descent_keeps_its_dual_iterate():
    from attnsvm.optim import mirror_map
    w = _rand(2, 5, seed=8)
    g = _rand(2, 5, seed=9)
    st = init_state("md", [w], p=3.0)
    w1 = w + update("md", [g], st, lr=0.1, p=3.0, batch_ndim=1, params=[w])[0]
    torch.testing.assert_close(mirror_map(w1, 3.0), mirror_map(w, 3.0) - 0.1 * g)
    torch.testing.assert_close(st["theta"][0], mirror_map(w, 3.0) - 0.1 * g)
    with pytest.raises(ValueError, match="params"):
        update("md", [g], st, lr=0.1, p=3.0, batch_ndim=1)


def test_adam_without_eps_is_exact_at_any_log_scale():
    g = [_rand(3, 4, seed=10)]
    sig0 = torch.zeros(3, dtype=torch.float64)
    tiny = torch.full((3,), -900.0, dtype=torch.float64)     # true gradient e^-900 g: underflows
    s0, s1 = init_state("adam", g, eps=0.0), init_state("adam", g, eps=0.0)
    for k in range(4):
        gk = [g[0] * (k + 1)]
        a = update("adam", gk, s0, lr=0.1, eps=0.0, decay=0.5, log_scale=sig0, batch_ndim=1)
        # the same true gradients times e^-900, split differently into g~ and sigma each step
        b = update("adam", [gk[0] * math.exp(k)], s1, lr=0.1, eps=0.0, decay=0.5,
                   log_scale=tiny - k, batch_ndim=1)
        torch.testing.assert_close(a[0], b[0], rtol=1e-12, atol=0)
    assert a[0].abs().min() > 0          # a real step (the naive e^sigma g would be 0/0)


def test_prgd_rescales_at_each_phase_start():
    w = _rand(2, 3, seed=11)
    g = _rand(2, 3, seed=12)
    st = init_state("prgd", [w], period=2, growth=3.0, R0=2.0)
    for t in range(5):
        new = w + update("prgd", [g], st, lr=0.1, period=2, growth=3.0, R0=2.0, batch_ndim=1,
                         params=[w])[0]
        Rk = 2.0 * 3.0 ** (t // 2)
        base = Rk * w / w.norm(dim=1, keepdim=True) if t % 2 == 0 else w
        torch.testing.assert_close(new, base - 0.1 * Rk ** 0.5 * g / g.norm(dim=1, keepdim=True))
        w = new


def test_make_rule_validates_options():
    from attnsvm.optim import make_rule
    with pytest.raises(ValueError, match=r"\['norm'\]"):
        make_rule("gd", norm=2)
    with pytest.raises(ValueError, match="p must"):
        make_rule("md")
    with pytest.raises(ValueError, match="norm"):
        make_rule("sd", norm=0.5)
    with pytest.raises(ValueError, match="betas"):
        make_rule("adam", betas=(0.9, 1.0))


def test_settings_config_names_the_step_sizes_as_the_parameters_cells():
    from attnsvm.optim import settings_config
    s = {"gd": dict(lr=1.0), "ngd": dict(optimizer="ngd", lr=0.1), "polyak": dict(eta_max=10.0),
         "adam": dict(lr=0.01, eta_max=None)}
    assert settings_config(s) == {"lr_gd": 1.0, "lr_ngd": 0.1, "lr_adam": 0.01, "eta_max": 10.0}
    # two different caps: no single eta_max to name
    assert "eta_max" not in settings_config({"a": dict(eta_max=1.0), "b": dict(eta_max=2.0)})


# ---------------------------------------------------------------- the one table of optimizer names
@pytest.mark.parametrize("name", sorted(__import__("attnsvm.optim", fromlist=["OPTIMIZERS"]).OPTIMIZERS))
def test_fit_takes_each_optimizer_with_the_tables_rule_and_default(name):
    """``optim.OPTIMIZERS`` is the one table of ``fit``'s optimizer names: each names a rule of
    ``RULES``; ``fit`` without ``lr`` runs at the table's default and records whether the run is
    stochastic (a stochastic name without ``batch_size`` is refused, naming it). Can fail: a
    default changed in ``fit`` but not in the table (or the reverse) differs here."""
    from attnsvm.data import score_instances
    from attnsvm.optim import OPTIMIZERS
    spec = OPTIMIZERS[name]
    assert spec.rule in RULES
    data, _ = score_instances(3, 3, 4, trials=2, seed=0)
    kw = {"p": 3.0} if spec.rule == "md" else {}
    if spec.stochastic:
        with pytest.raises(ValueError, match="batch_size"):
            fit(data, model="W", optimizer=name, steps=1, device="cpu", **kw)
        kw["batch_size"] = 2
    h = fit(data, model="W", optimizer=name, steps=2, device="cpu", **kw)
    assert h.config["lr"] == spec.lr and h.config["optimizer"] == name
    assert (h.config["batch_size"] is not None) == spec.stochastic

def test_adam_keeps_its_moments_through_a_zero_gradient_at_scale_finfo_min():
    """A trial whose every token is tied (``jacobian_products``) has a zero gradient with the
    log-scale ``finfo.min``; Adam then keeps the old scale for its moments. Without that guard
    the rescaling factor ``exp(s_old - finfo.min)`` is inf and the moments become inf/NaN (the
    rule of 74e9e46 fails this test: its engine reported the scale 0 there instead)."""
    g = _rand(2, 3, 3, seed=11)
    st = init_state("adam", [g])
    update("adam", [g], st, lr=0.1, log_scale=[torch.tensor([-5.0, -3.0], dtype=torch.float64)],
           batch_ndim=1)
    z = g.clone()
    z[0] = 0.0
    tied = torch.tensor([torch.finfo(torch.float64).min, -3.0], dtype=torch.float64)
    out = update("adam", [z], st, lr=0.1, log_scale=[tied], batch_ndim=1)
    assert torch.isfinite(out[0]).all() and torch.isfinite(st["m"][0]).all()
    assert torch.isfinite(st["v"][0]).all()


@pytest.mark.parametrize("scale", [1.0, 1e200, 1e-200, 1e-319])
def test_fused_ngd_equals_the_generic_normalized_direction(scale):
    """NGD has two definitions in ``optim.Descent``: the fused step of ``_plan`` (parameters
    sharing one log-scale: ``g / ||g||`` with the plain norm where exact, else ``unit_scaled``,
    applied by ``addcdiv``) and the generic ``_dir_normalized`` x schedule (taken here by giving
    the same scale as two distinct tensors). They agree per trial to 4 eps (1 + |sigma| + |log||g~|||)
    relative (the generic form's exponent sigma - (sigma + log||g~||) rounds at that scale;
    measured: at most 0.09 of that) on gradients of any size, subnormal included, with
    log-scales -800 to 3, and a zero gradient gives no step in both. Can fail: the wrong trial's
    norm, or ||g||^2 for ||g||, moves the step by O(1); a relative change of 1e-11 of the fused
    step fails on every trial (the tolerance is at most 1.4e-12)."""
    g = [_rand(4, 3, 3, seed=7) * scale, _rand(4, 5, seed=8) * scale]
    for x in g:
        x[2] = 0.0                                   # trial 2: a zero gradient
    sig = torch.tensor([-800.0, 0.0, 3.0, 1.5], dtype=torch.float64)
    lr = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    log_big = abs(math.log(float(max(x.abs().max() for x in g))))     # |log||g~|||, to +-2
    fused = update("ngd", g, lr=lr, log_scale=[sig, sig], batch_ndim=1)
    generic = update("ngd", g, lr=lr, log_scale=[sig, sig.clone()], batch_ndim=1)
    for a, b in zip(fused, generic):
        assert torch.isfinite(a).all() and torch.isfinite(b).all()
        assert torch.equal(a[2], torch.zeros_like(a[2])) and torch.equal(b[2], a[2])
        live = [0, 1, 3]
        num = (a[live] - b[live]).flatten(1).norm(dim=1)
        den = b[live].flatten(1).norm(dim=1)
        # the generic form computes e^{sigma - log||g||_true}, log||g||_true = sigma + log||g~||:
        # rounding of order eps (|sigma| + |log||g~|||) in the exponent (the fused form forms
        # neither logarithm where the plain norm is exact)
        tol = 4 * EPS * (1 + sig[live].abs() + log_big)
        assert bool(((num / den) <= tol).all()), (num / den / tol)
    tot = torch.sqrt(fused[0].flatten(1).pow(2).sum(1) + fused[1].pow(2).sum(1))
    torch.testing.assert_close(tot[[0, 1, 3]], lr[[0, 1, 3]], rtol=1e-3 if scale < 1e-300 else 1e-14,
                               atol=0)
