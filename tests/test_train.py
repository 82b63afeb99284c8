"""The batched engine: batched = one at a time, determinism, validation, NaN detection,
the linear model, and the known outcome of the (W) and (K,Q) parameterizations."""
import numpy as np
import pytest
import torch

from attnsvm.data import LinearData, random_unit
from attnsvm.metrics import corr
from attnsvm.train import History, NonFiniteError, fit, record_grid, resolve_device
from rounding import rounding_spread


def unit_data(B, n=6, T=8, d=10, seed=0):
    """Random unit tokens, self-attention (z_i = x_i1), unit v, Gaussian-sign labels."""
    return random_unit(n, T, d, trials=B, seed=seed)


def separable_data(B, n=12, d=5, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((B, d))
    X = rng.standard_normal((B, n, d))
    y = np.sign(np.einsum("bnd,bd->bn", X, w))
    X = X + 0.3 * y[..., None] * w[:, None, :] / np.linalg.norm(w, axis=-1)[:, None, None]
    return LinearData(X, y)


CASES = [
    dict(model="W", optimizer="ngd_param"),
    dict(model="W", optimizer="gd", loss="exponential"),
    dict(model="KQ", optimizer="ngd", m=4, init_scale=0.3),
    dict(model="KQ", optimizer="ngd_param", penalty=1e-3, init_scale=0.3),
    dict(model="prompt", optimizer="polyak", train_v=True, eta_max=1.0),
    dict(model="W", optimizer="sngd", batch_size=2),
    dict(model="W", optimizer="sps", batch_size=3, eta_max=0.5),
    dict(model="W", optimizer="adam", loss="correlation"),
    dict(model="prompt", optimizer="sign"),
    dict(model="W", head="mlp", width=4, train_v=True, optimizer="sgd", batch_size=4),
]


@pytest.mark.parametrize("kw", CASES, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_batched_equals_one_at_a_time(kw):
    """Trial ``b`` of a batched run equals the trial run alone, to the tolerance that rounding
    of the transcendental functions allows (see ``tests/rounding.py``): on a CPU an element of
    ``exp``/``log``/``softplus``/... takes the SIMD or the scalar kernel by its position in the
    whole tensor, so the two runs may differ by an ulp there (on AVX2, ``ATEN_CPU_CAPABILITY=avx2``,
    the (K,Q) ``ngd_param`` run with a penalty differs by 8.5e-12 after 60 steps: a normalized
    step near the regularized minimizer amplifies it). The tolerance of each series is derived
    from the run: 4 times the spread of three runs whose transcendental values move by one ulp
    at random (:class:`rounding.UlpJitter`), plus 8 ulp of the series' scale; where rounding
    cannot move a run (every case but that one) it is ~1e-15 of the scale. The test can fail:
    a relative change of 1e-12 in one trial's tokens (far less than reading another trial's
    data or norm) exceeds it in every case (measured on AVX2)."""
    data = unit_data(3, n=5, T=4, d=3, seed=1)
    steps = 60
    common = dict(steps=steps, seed=5, record_every=10, device="cpu", progress=False,
                  snapshots=True)
    refs = {"R": np.random.default_rng(2).standard_normal((3,) + ((3,) if kw["model"] == "prompt" else (3, 3)))}
    names = ("loss", "norm", "log_loss", "opt_mass", "snapshots")

    def run():
        h = fit(data, refs=refs, **common, **kw)
        return {**{name: getattr(h, name) for name in names}, "corr": h.corr["R"],
                **{"param " + k: P[None] for k, P in h.params.items()}, "selected": h.selected}

    hb, spread = rounding_spread(run)
    for b in range(3):
        one = fit(data.trial(b), refs={"R": refs["R"][b]}, **{**common, "seed": [(5, b)]}, **kw)
        got = {**{name: getattr(one, name) for name in names}, "corr": one.corr["R"],
               **{"param " + k: P[None] for k, P in one.params.items()}}
        for name, a in got.items():
            ref = hb[name][:, b]
            scale = np.nanmax(np.abs(ref)) if np.any(np.isfinite(ref)) else 0.0
            tol = 4 * np.nanmax(spread[name][:, b], initial=0.0) + 8 * EPS * scale
            np.testing.assert_allclose(a[:, 0], ref, rtol=0, atol=tol, err_msg=name)
        np.testing.assert_array_equal(one.selected[:, 0], hb["selected"][:, b])


EPS = np.finfo(np.float64).eps


def test_linear_batched_equals_one_at_a_time_and_history():
    data = separable_data(3)
    hb = fit(data, model="linear", optimizer="sgd", batch_size=4, steps=40, record_every=8,
             refs={"u": np.ones(5)}, progress=False, seed=3)
    for b in range(3):
        one = fit(data.trial(b), model="linear", optimizer="sgd", batch_size=4, steps=40,
                  record_every=8, refs={"u": np.ones(5)}, progress=False, seed=[(3, b)])
        np.testing.assert_allclose(one.w[0], hb.w[b], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(one.margin[:, 0], hb.margin[:, b], rtol=1e-10, atol=1e-12)
    assert hb.opt_mass is None and hb.selected is None
    assert hb.margin.shape == (6, 3) and hb.corr["u"].shape == (6, 3)


def test_deterministic_and_history_shapes():
    data = unit_data(4, seed=2)
    a = fit(data, model="KQ", optimizer="sngd", batch_size=3, steps=30, n_records=8,
            progress=False, seed=9, snapshots=True)
    b = fit(data, model="KQ", optimizer="sngd", batch_size=3, steps=30, n_records=8,
            progress=False, seed=9, snapshots=True)
    np.testing.assert_array_equal(a.W, b.W)
    c = fit(data, model="KQ", optimizer="sngd", batch_size=3, steps=30, n_records=8,
            progress=False, seed=10)
    assert not np.allclose(a.W, c.W)
    assert isinstance(a, History)
    K = len(a.steps)
    assert a.steps[0] == 0 and a.steps[-1] == 30
    assert a.loss.shape == a.norm.shape == a.opt_mass.shape == (K, 4)
    assert a.selected.shape == (K, 4, 6) and a.selected.dtype.kind == "i"
    assert a.snapshots.shape == (K, 4, 10, 10)
    assert a.W.shape == (4, 10, 10) and a.K.shape == (4, 10, 10) and a.v.shape == (4, 10)
    np.testing.assert_allclose(a.W, a.K @ np.swapaxes(a.Q, -1, -2))
    assert a.opt.shape == (4, 6)
    np.testing.assert_array_equal(a.final("norm"), a.norm[-1])
    with pytest.raises(AttributeError):
        a.p  # noqa: B018


def test_record_grid_and_device():
    g = record_grid(2000, "log", 50)
    assert g[0] == 0 and g[-1] == 2000 and np.all(np.diff(g) > 0) and len(g) <= 50
    np.testing.assert_array_equal(record_grid(10, 4), [0, 4, 8, 10])
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu").type == "cpu"


@pytest.mark.parametrize("steps", [7, 1500, 20000, 200000])
def test_record_grid_without_zero_and_with_extra_steps(steps):
    """``initial=False`` gives the ``n_records`` rounded log-spaced steps in [1, steps] of the
    chapters' own grids, and ``extra`` merges further steps (phase boundaries, horizons)."""
    log = np.round(np.logspace(0, np.log10(steps), 60))
    np.testing.assert_array_equal(record_grid(steps, n_records=60, initial=False),
                                  np.unique(log).astype(int))
    extra = [steps // 5, steps // 2]
    np.testing.assert_array_equal(record_grid(steps, n_records=60, initial=False, extra=extra),
                                  np.unique(np.concatenate([log, extra])).astype(int))
    period = max(1, steps // 10)
    np.testing.assert_array_equal(
        record_grid(steps, n_records=41, extra=np.arange(period, steps + 1, period)),
        np.unique(np.concatenate([np.round(np.logspace(0, np.log10(steps), 40)),
                                  np.arange(0, steps + 1, period)])).astype(int))
    assert record_grid(steps, 3, initial=False)[0] == 3 or steps < 3
    with pytest.raises(ValueError, match="extra"):
        record_grid(steps, extra=[steps + 1])


@pytest.mark.parametrize("kw,arg", [
    (dict(lr=0.0), "lr"), (dict(lr=-1.0), "lr"), (dict(steps=0), "steps"),
    (dict(optimizer="lbfgs"), "optimizer"), (dict(model="QK"), "model"),
    (dict(loss="hinge"), "loss"), (dict(optimizer="sgd"), "batch_size"),
    (dict(batch_size=99), "batch_size"), (dict(eta_max=0.1), "eta_max"),
    (dict(optimizer="polyak", loss="correlation"), "loss"), (dict(init="ones"), "init"),
    (dict(record_every=0), "record_every"), (dict(init_scale=-1.0), "init_scale"),
    (dict(model="KQ", init="zeros"), "init"), (dict(seed=[1, 2]), "seed"),
    (dict(model="linear"), "data"), (dict(penalty=-1.0), "penalty"),
    (dict(refs={"R": np.ones((3, 3))}), "refs"), (dict(device="tpu"), "device"),
])
def test_invalid_hyperparameters_name_the_argument(kw, arg):
    with pytest.raises(ValueError, match=arg):
        fit(unit_data(1, n=3, T=3, d=4), steps=kw.pop("steps", 5), progress=False, **kw)


def test_nonfinite_names_trial_and_step():
    data = separable_data(3, seed=4)
    X = data.X.copy()
    X[1] *= 1e200                                 # trial 1 overflows; the others are fine
    with pytest.raises(NonFiniteError, match=r"trial 1 .*step 1") as info:
        fit(LinearData(X, data.y), model="linear", loss="correlation", lr=1e100, steps=50,
            progress=False)
    assert info.value.trial == 1 and info.value.step == 1


def test_linear_model_converges_to_linear_svm():
    from attnsvm.svm import linear_svm
    data = separable_data(4, n=20, d=4, seed=7)
    w_svm = np.stack([linear_svm(data.X[b], data.y[b]) for b in range(4)])
    h = fit(data, model="linear", optimizer="ngd", lr=0.1, steps=2000, refs={"svm": w_svm},
            progress=False)
    assert np.all(np.diff(h.corr["svm"][1:], axis=0).sum(0) > 0)
    assert np.min(h.final("svm")) > 0.99
    margin_svm = 1 / np.linalg.norm(w_svm, axis=1)
    np.testing.assert_array_less(h.final("margin"), margin_svm * (1 + 1e-9))
    assert np.min(h.final("margin") / margin_svm) > 0.95


def test_stable_at_huge_norm_and_tiny_loss():
    """Exponential loss with a trainable v: the loss falls far below 1e-300; the Polyak step
    stays finite and log_loss keeps tracking it while loss underflows to 0."""
    data = unit_data(2, n=4, T=4, d=6, seed=3)
    h = fit(data, model="W", train_v=True, loss="exponential", optimizer="polyak", lr=1.0,
            eta_max=None, steps=1000, progress=False, init="random", init_scale=1.0, n_records=20)
    assert np.all(np.isfinite(h.log_loss)) and np.all(np.isfinite(h.W))
    assert np.min(h.final("log_loss")) < np.log(1e-300)
    h2 = fit(data, model="W", optimizer="ngd", lr=5e4, steps=30, progress=False)
    assert np.min(h2.final("norm")) > 1e5 and np.all(np.isfinite(h2.W))


def _median_corrs(data, h):
    from attnsvm.svm import InfeasibleError, att_svm
    sel = h.selected[-1]
    cf, cn = [], []
    for b in range(data.trials):
        try:
            Wf = att_svm(data.X[b], data.Z[b], sel[b], norm="fro")
            Wn = att_svm(data.X[b], data.Z[b], sel[b], norm="nuc")
        except InfeasibleError:          # pragma: no cover - never seen at d=10, n=6, T=8
            continue
        cf.append(corr(h.W[b], Wf))
        cn.append(corr(h.W[b], Wn))
    assert len(cf) >= 18
    return np.median(cf), np.median(cn)


@pytest.mark.slow
def test_known_outcome_W_to_Wmm_and_KQ_to_Wmm_star():
    """n=6, T=8, d=10, 20 trials, 2000 steps of per-parameter normalized GD at lr 0.1
    (the earlier public code's setup, with its vanishing penalty 2.2e-16 (||K||^2+||Q||^2)
    for (K,Q)): W iterates align with W_mm (Frobenius), (K,Q) iterates with W_mm^*
    (nuclear), both built on the tokens selected at the end, and each aligns clearly less
    with the other norm's solution."""
    data = unit_data(20, seed=2024)
    hW = fit(data, model="W", optimizer="ngd_param", lr=0.1, steps=2000, progress=False)
    hK = fit(data, model="KQ", optimizer="ngd_param", lr=0.1, steps=2000, penalty=2.2e-16,
             init="random", init_scale=0.01, progress=False)
    fW, nW = _median_corrs(data, hW)
    fK, nK = _median_corrs(data, hK)
    print(f"W: corr(W_mm)={fW:.4f} corr(W*_mm)={nW:.4f};  KQ: corr(W_mm)={fK:.4f} corr(W*_mm)={nK:.4f}")
    assert fW >= 0.99 and nK >= 0.99
    assert nW < 0.95 and fK < 0.95
    assert np.median(hW.final("opt_mass")) > 0.99 or np.median(hW.final("loss")) < 1


def test_cpu_threads_sets_and_restores_the_thread_count():
    import torch
    from attnsvm.devices import cpu_threads
    old = torch.get_num_threads()
    with cpu_threads("cpu", 1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == old
    with pytest.raises(ValueError, match="num_threads"):
        with cpu_threads("cpu", 0):
            pass
    assert torch.get_num_threads() == old


def test_snapshots_of_named_parameters_and_explicit_record_steps():
    from attnsvm.data import planted_token
    data = planted_token(6, 5, 8, trials=2, seed=1)[0]
    h = fit(data, model="W", train_v=True, optimizer="gd", lr=0.5, steps=30, device="cpu",
            record_every=[3, 10, 20], snapshots=("W", "v"))
    np.testing.assert_array_equal(h.steps, [0, 3, 10, 20, 30])
    assert h.trajectory["W"].shape == (5, 2, 8, 8) and h.trajectory["v"].shape == (5, 2, 8)
    np.testing.assert_array_equal(h.snapshots, h.trajectory["W"])
    np.testing.assert_array_equal(h.trajectory["v"][-1], h.v)
    np.testing.assert_array_equal(h.trajectory["v"][0], data.v)          # v moves from v_0
    assert not np.allclose(h.trajectory["v"][1], data.v)
    g = fit(data, model="W", train_v=True, optimizer="gd", lr=0.5, steps=10, device="cpu")
    np.testing.assert_array_equal(h.trajectory["v"][2], g.v)
    with pytest.raises(ValueError, match="snapshots"):
        fit(data, model="W", steps=2, snapshots=("K",))
    with pytest.raises(ValueError, match="record_every"):
        fit(data, model="W", steps=5, record_every=[3, 2])


# ---------------------------------------------------------------- Part IV rules in fit
def _ref_linear(rule, X, y, w, steps, lr, decay=0.0, norm=2, p=None, normalize=False,
                period=100, growth=2.0, R0=1.0, step_power=0.5, betas=(0.9, 0.999), eps=1e-8):
    """Hand-written one-trial reference (numpy) of the rules on the exponential loss of a linear
    classifier, L(w) = mean exp(-y_i w.x_i)."""
    w = np.array(w, dtype=float)
    theta = np.sign(w) * np.abs(w) ** (p - 1) if rule == "md" else None
    m = v = np.zeros_like(w)
    for t in range(steps):
        g = -(y * np.exp(-y * (X @ w))) @ X / len(y)
        eta = lr * (t + 1) ** (-decay)
        if rule == "gd":
            w = w - eta * g
        elif rule == "sd":
            if norm == "inf":
                d = np.sign(g)
            elif norm == 1:
                k = np.argmax(np.abs(g))
                d = np.zeros_like(g)
                d[k] = np.sign(g[k])
            else:
                q = norm / (norm - 1)
                d = np.sign(g) * np.abs(g) ** (q - 1) / np.sum(np.abs(g) ** q) ** ((q - 1) / q)
            w = w - eta * d
        elif rule == "md":
            q = p / (p - 1)
            step = g / np.sum(np.abs(g) ** q) ** (1 / q) if normalize else g
            theta = theta - eta * step
            w = np.sign(theta) * np.abs(theta) ** (1 / (p - 1))
        elif rule == "prgd":
            Rk = R0 * growth ** (t // period)
            if t % period == 0:
                w = Rk * w / np.linalg.norm(w)
            w = w - eta * Rk ** step_power * g / np.linalg.norm(g)
        elif rule == "adam":
            b1, b2 = betas
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            w = w - eta * (m / (1 - b1 ** (t + 1))) / (np.sqrt(v / (1 - b2 ** (t + 1))) + eps)
    return w


PART4 = [
    dict(optimizer="gd", lr=0.3, decay=0.5),
    dict(optimizer="sd", norm="inf", lr=0.05),
    dict(optimizer="sd", norm=1, lr=0.1),
    dict(optimizer="sd", norm=3.0, lr=0.1, decay=0.3),
    dict(optimizer="md", p=3.0, lr=0.2),
    dict(optimizer="md", p=1.75, lr=0.1, normalize=True, decay=0.2),
    dict(optimizer="prgd", lr=0.1, period=7, growth=1.5, R0=2.0),
    dict(optimizer="adam", lr=0.05, eps=0.0, decay=0.5),
    dict(optimizer="adam", lr=0.05, eps=1e-3, betas=(0.8, 0.99)),
]


@pytest.mark.parametrize("kw", PART4, ids=lambda kw: "-".join(str(v) for v in kw.values()))
def test_part4_rules_equal_hand_reference_and_batched(kw):
    """fit with each Part IV rule = a hand-written numpy loop (one trial), and trial b alone =
    trial b in the batch."""
    data = separable_data(3, n=8, d=4, seed=4)
    w0 = np.random.default_rng(0).standard_normal((3, 4)) * 0.3
    steps = 30
    h = fit(data, model="linear", loss="exponential", init=w0, steps=steps, record_every=steps,
            device="cpu", progress=False, **kw)
    opts = {k: v for k, v in kw.items() if k != "optimizer"}
    for b in range(3):
        want = _ref_linear(kw["optimizer"], data.X[b], data.y[b], w0[b], steps, **opts)
        np.testing.assert_allclose(h.w[b], want, rtol=1e-9, atol=1e-12)
        one = fit(data.trial(b), model="linear", loss="exponential", init=w0[b], steps=steps,
                  record_every=steps, device="cpu", progress=False, seed=[(0, b)], **kw)
        np.testing.assert_allclose(one.w[0], h.w[b], rtol=1e-12, atol=1e-14)


def test_part4_rules_on_attention_batched_and_spectral():
    data = unit_data(3, n=5, T=4, d=3, seed=2)
    W0 = np.random.default_rng(1).standard_normal((3, 3, 3)) * 0.2
    for kw in (dict(optimizer="sd", norm="spectral", lr=0.05), dict(optimizer="md", p=3.0, lr=0.3),
               dict(optimizer="prgd", period=5, lr=0.1)):
        hb = fit(data, init=W0, steps=20, record_every=5, device="cpu", snapshots=True, **kw)
        for b in range(3):
            one = fit(data.trial(b), init=W0[b], steps=20, record_every=5, device="cpu",
                      snapshots=True, seed=[(0, b)], **kw)
            np.testing.assert_allclose(one.snapshots[:, 0], hb.snapshots[:, b], rtol=1e-10,
                                       atol=1e-13)
    # spectral steepest descent moves W by exactly lr in operator norm per step from W = 0
    h = fit(data, optimizer="sd", norm="spectral", lr=0.05, steps=1, record_every=1, device="cpu")
    np.testing.assert_allclose(np.linalg.norm(h.W, ord=2, axis=(1, 2)), 0.05, rtol=1e-12)


def test_per_trial_lr_equals_separate_runs():
    data = separable_data(3, n=8, d=4, seed=1)
    lrs = np.array([0.05, 0.2, 0.7])
    h = fit(data, model="linear", optimizer="gd", lr=lrs, steps=25, record_every=25, device="cpu")
    for b in range(3):
        one = fit(data.trial(b), model="linear", optimizer="gd", lr=float(lrs[b]), steps=25,
                  record_every=25, device="cpu")
        np.testing.assert_allclose(one.w[0], h.w[b], rtol=1e-12)
    with pytest.raises(ValueError, match="lr"):
        fit(data, model="linear", lr=np.array([0.1, 0.2]), steps=2)
    with pytest.raises(ValueError, match="lr"):
        fit(data, model="linear", lr=np.array([0.1, -0.2, 0.1]), steps=2)


@pytest.mark.parametrize("kw,match", [
    (dict(optimizer="gd", p=3.0), r"\['p'\]"),
    (dict(optimizer="md"), "p must"),
    (dict(optimizer="md", p=1.0), "p must"),
    (dict(optimizer="sd", norm=0.5), "norm"),
    (dict(optimizer="sd", norm="fro"), "norm"),
    (dict(optimizer="prgd", period=0), "period"),
    (dict(optimizer="prgd", growth=-1.0), "growth"),
    (dict(optimizer="adam", eps=-1.0), "eps"),
    (dict(optimizer="adam", decay=-0.5), "decay"),
    (dict(optimizer="polyak", decay=0.5), "decay"),
    (dict(optimizer="ngd", normalize=True), "normalize"),
])
def test_rule_options_validated(kw, match):
    with pytest.raises(ValueError, match=match):
        fit(separable_data(1), model="linear", steps=2, **kw)


# ---------------------------------------------------------------- model objects (NTP)
def _ntp_data(trials=3, seed=0):
    from attnsvm.data import ntp_synthetic
    return ntp_synthetic(4, 6, 7, trials=trials, seed=seed)


def test_ntp_linear_objective_matches_autograd_and_entropy():
    from attnsvm import losses
    from attnsvm.models import NTPLinear
    data = _ntp_data()
    net = NTPLinear()
    batch = net.batch(data)
    W = torch.tensor(np.random.default_rng(3).standard_normal((3, 6, 7)), requires_grad=True)
    loss, grads, ls = net.objective({"W": W}, batch)
    assert ls is None
    (auto,) = torch.autograd.grad(loss.sum(), [W])
    np.testing.assert_allclose(grads["W"].detach().numpy(), auto.numpy(), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(loss.detach().numpy(), losses.ce_loss(W.detach().numpy(), data), rtol=1e-12)
    np.testing.assert_allclose(net.L_star(batch).numpy(), losses.entropy(data), rtol=1e-12)
    assert np.all(loss.detach().numpy() > net.L_star(batch).numpy())


@pytest.mark.parametrize("kw", [dict(optimizer="gd", lr=0.5), dict(optimizer="ngd", lr=0.1),
                                dict(optimizer="adam", lr=0.05, eps=0.0, decay=0.5),
                                dict(optimizer="md", p=3.0, lr=0.3),
                                dict(optimizer="polyak_star", lr=0.5),
                                dict(optimizer="sd", norm="spectral", lr=0.05)],
                         ids=lambda kw: kw["optimizer"])
def test_ntp_linear_in_fit_batched_equals_one_and_hand_gd(kw):
    from attnsvm import losses
    from attnsvm.models import NTPLinear
    data = _ntp_data()
    W0 = np.random.default_rng(5).standard_normal((3, 6, 7)) * 0.1
    hb = fit(data, model=NTPLinear(), init=W0, steps=40, record_every=10, snapshots=True,
             device="cpu", **kw)
    assert hb.excess.shape == hb.loss.shape and np.all(hb.excess > 0)
    np.testing.assert_allclose(hb.excess, hb.loss - losses.entropy(data), rtol=1e-12)
    for b in range(3):
        one = fit(data.trial(b), model=NTPLinear(), init=W0[b], steps=40, record_every=10,
                  snapshots=True, device="cpu", seed=[(0, b)], **kw)
        np.testing.assert_allclose(one.snapshots[:, 0], hb.snapshots[:, b], rtol=1e-11, atol=1e-14)
        np.testing.assert_allclose(one.loss[:, 0], hb.loss[:, b], rtol=1e-12)
    if kw["optimizer"] == "gd":                      # hand-written numpy GD on losses.ce_grad
        W = W0.copy()
        for _ in range(40):
            W = W - 0.5 * losses.ce_grad(W, data)
        np.testing.assert_allclose(hb.W, W, rtol=1e-10, atol=1e-13)
    if kw["optimizer"] == "polyak_star":             # the Polyak step with L* = H decreases L - L*
        assert np.all(hb.excess[-1] < hb.excess[0])


class _Quadratic:
    r"""A model object written from the interface alone: f(x) = 1/2 ||A x - b||^2 per trial,
    gradient returned in log-scaled form with sigma = log 2 (grads halved)."""

    trainable = ("x",)

    def __init__(self, log_scaled):
        self.log_scaled = log_scaled

    def batch(self, data, *, dtype, device):
        return {k: torch.as_tensor(v, dtype=dtype, device=device) for k, v in data.items()}

    def init_params(self, batch, rngs, *, init, init_scale, dtype, device):
        return {"x": torch.zeros(batch["A"].shape[::2], dtype=dtype, device=device)}

    def objective(self, params, batch):
        r = torch.einsum("bij,bj->bi", batch["A"], params["x"]) - batch["b"]
        g = torch.einsum("bij,bi->bj", batch["A"], r)
        loss = 0.5 * (r * r).sum(-1)
        if self.log_scaled:
            return loss, {"x": g / 2}, {"x": torch.full_like(loss, np.log(2.0))}
        return loss, {"x": g}, None


def test_model_object_interface_log_scales_and_validation():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, 5, 3)) / 3
    data = {"A": A, "b": rng.standard_normal((2, 5))}
    for kw in (dict(optimizer="gd"), dict(optimizer="ngd"), dict(optimizer="adam", eps=1e-3),
               dict(optimizer="md", p=3.0), dict(optimizer="prgd", period=4)):
        a = fit(data, model=_Quadratic(False), steps=30, record_every=30, device="cpu", **kw)
        b = fit(data, model=_Quadratic(True), steps=30, record_every=30, device="cpu", **kw)
        np.testing.assert_allclose(a.params["x"], b.params["x"], rtol=1e-10, atol=1e-13)
        assert a.excess is None and a.margin is None
    h = fit(data, model=_Quadratic(False), optimizer="gd", lr=1.0, steps=3000, record_every=3000,
            device="cpu")
    want = np.stack([np.linalg.lstsq(A[b], data["b"][b], rcond=None)[0] for b in range(2)])
    np.testing.assert_allclose(h.params["x"], want, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="loss"):
        fit(data, model=_Quadratic(False), loss="logistic", steps=2)
    with pytest.raises(ValueError, match="mini-batches"):
        fit(data, model=_Quadratic(False), optimizer="sgd", steps=2)
    with pytest.raises(ValueError, match="L_star"):
        fit(data, model=_Quadratic(False), optimizer="polyak_star", steps=2)
    with pytest.raises(ValueError, match="model"):
        fit(data, model=object(), steps=2)
    from attnsvm.models import NTPLinear
    with pytest.raises(ValueError, match="NTPData"):
        fit(data, model=NTPLinear(), steps=2)


@pytest.mark.parametrize("loss", ["correlation", "logistic"])
def test_margin_objective_records_like_the_margin_path(loss):
    """fit(model=MarginObjective(net, loss)) runs (the correlation loss included, whose log L is
    undefined: recorded as NaN) and gives the loss, log-loss and iterates of fit(model="W")."""
    from attnsvm.models import AttentionClassifier, MarginObjective
    data = random_unit(4, 5, 6, trials=3, seed=2)
    opts = dict(optimizer="ngd", lr=0.1, steps=40, record_every=10, device="cpu")
    h = fit(data, model="W", loss=loss, **opts)
    batch = {"X": data.X, "y": data.y, "Z": data.Z}
    init = {"W": np.zeros((3, 6, 6)), "v": data.v}
    ho = fit(batch, model=MarginObjective(AttentionClassifier("W"), loss), init=init, **opts)
    np.testing.assert_allclose(ho.params["W"], h.W, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ho.loss, h.loss, rtol=1e-12, atol=1e-14)
    assert np.isfinite(ho.loss).all()
    if loss == "correlation":
        assert np.isnan(ho.log_loss).all() and np.isnan(h.log_loss).all()
    else:
        np.testing.assert_allclose(ho.log_loss, h.log_loss, rtol=1e-12)
