"""Part IV, "The geometry of the margin on separable data": every statement, checked numerically.

Labels refer to book/ch13_geometry_linear.md.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import attnsvm as A
from attnsvm.experiments import geometry as G

N, D, B = 20, 5, 4
NORMS = {1.0: np.inf, 2.0: 2.0, np.inf: 1.0}       # norm -> dual norm


@pytest.fixture(scope="module")
def setup():
    data = A.data.separable(N, D, margin=0.1, trials=B, seed=3)
    batch = {"X": torch.as_tensor(data.X), "y": torch.as_tensor(data.y)}
    model = A.models.LinearClassifier()
    w0 = model.init_params(D, None, [None] * B)
    gam = {q: 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(data.X, data.y, q), q) for q in (1.0, 2.0, 3.0, np.inf)}
    return data, batch, model, w0, gam


def _loss_grad(w, X, y):
    e = np.exp(-y * (X @ w))
    return e.mean(), -(e * y) @ X / len(y)


def test_linear_svm_p_is_max_margin(setup):
    data, *_ , gam = setup
    rng = np.random.default_rng(0)
    for q in (1.0, 2.0, 3.0, np.inf):
        w = A.svm.linear_svm_p(data.X[0], data.y[0], q)
        assert (data.y[0] * (data.X[0] @ w)).min() == pytest.approx(1.0, abs=1e-9)
        U = rng.standard_normal((4000, D))
        U /= np.linalg.norm(U, ord=q, axis=1, keepdims=True)
        assert (data.y[0] * (U @ data.X[0].T)).min(axis=1).max() <= gam[q][0] + 1e-9
    # l2 agrees with the Part I solver
    np.testing.assert_allclose(A.svm.linear_svm_p(data.X, data.y, 2.0), A.svm.linear_svm(data.X, data.y),
                               atol=1e-6)


@pytest.mark.parametrize("q", [1.0, np.inf])
def test_linear_svm_p_matches_lp(setup, q):
    """l1 and l_inf SVMs are LPs: the optimal norm equals scipy's linprog optimum."""
    from scipy.optimize import linprog
    data = setup[0]
    for b in range(B):
        A_ = data.y[b][:, None] * data.X[b]                      # margins A w >= 1
        n = len(A_)
        I = np.eye(D)
        if q == 1.0:        # variables (w, t), min sum t, -t <= w <= t
            c = np.r_[np.zeros(D), np.ones(D)]
            A_ub = np.block([[-A_, np.zeros((n, D))], [I, -I], [-I, -I]])
        else:               # variables (w, t), min t, -t <= w_k <= t
            c = np.r_[np.zeros(D), 1.0]
            one = np.ones((D, 1))
            A_ub = np.block([[-A_, np.zeros((n, 1))], [I, -one], [-I, -one]])
        b_ub = np.r_[-np.ones(n), np.zeros(2 * D)]
        lp = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(None, None)] * len(c), method="highs")
        assert lp.status == 0
        w = A.svm.linear_svm_p(data.X[b], data.y[b], q)
        assert A.norms.vector_norm(w, q) == pytest.approx(lp.fun, rel=1e-6)


def test_linear_svm_p3_kkt(setup):
    """p = 3: grad ||w||_3 = sign(w)|w|^2/||w||_3^2 is a nonnegative combination of the active
    constraints' normals y_i x_i (KKT), checked by NNLS. With d = 30 > n = 10 the active set is
    smaller than d, so the check discriminates (the l_2 or l_3.5 solutions leave residuals >= 0.08)."""
    from scipy.optimize import nnls
    data = A.data.separable(10, 30, margin=0.1, trials=B, seed=5)
    for b in range(B):
        A_ = data.y[b][:, None] * data.X[b]
        w = A.svm.linear_svm_p(data.X[b], data.y[b], 3.0)
        act = A_ @ w <= 1 + 1e-6
        g = np.sign(w) * np.abs(w) ** 2 / np.linalg.norm(w, ord=3) ** 2
        lam, res = nnls(A_[act].T, g)
        assert res <= 1e-4 * np.linalg.norm(g)


def test_lem_dual_grad(setup):
    data, *_, gam = setup
    rng = np.random.default_rng(1)
    for q, qd in NORMS.items():
        for _ in range(200):
            w = rng.standard_normal(D) * rng.uniform(0.1, 30)
            L, g = _loss_grad(w, data.X[0], data.y[0])
            assert np.linalg.norm(g, ord=qd) >= gam[q][0] * L * (1 - 1e-12)



def test_lem_dual_grad_tight():
    """lem-dual-grad is an equality where it should be: with one point (n = 1),
    grad L = -y x L and gamma = ||x||_*, so ||grad L||_* = gamma L at every w, in l_1, l_2, l_3
    and l_inf (gamma from linear_svm_p, ratio 1 within 1e-6); and for symmetric data all of
    whose points are support vectors (y x = (1, +-1), l_2, u* = e_1) it is an equality along
    u*. Catches the lemma with 2 gamma (or any factor above 1 + 1e-5), which the random points
    of test_lem_dual_grad do not."""
    rng = np.random.default_rng(7)
    X1 = rng.standard_normal((1, 1, D))
    y1 = np.ones((1, 1))
    for q, qd in {1.0: np.inf, 2.0: 2.0, 3.0: 1.5, np.inf: 1.0}.items():
        gamma = 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(X1, y1, q), q)[0]
        np.testing.assert_allclose(gamma, np.linalg.norm(X1[0, 0], ord=qd), rtol=1e-6)
        for _ in range(20):
            w = rng.standard_normal(D) * rng.uniform(0.1, 3)
            L, g = _loss_grad(w, X1[0], y1[0])
            np.testing.assert_allclose(np.linalg.norm(g, ord=qd), gamma * L, rtol=1e-6)
    Xs = np.array([[[1.0, 1.0], [1.0, -1.0]]])
    ys = np.ones((1, 2))
    gamma = 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(Xs, ys, 2.0), 2.0)[0]
    np.testing.assert_allclose(gamma, 1.0, rtol=1e-6)
    for a in (-1.0, 0.0, 2.0, 10.0):
        L, g = _loss_grad(np.array([a, 0.0]), Xs[0], ys[0])
        np.testing.assert_allclose(np.linalg.norm(g), gamma * L, rtol=1e-6)


def test_thm_sd_margin_terms_needed(setup):
    """Both terms of thm-sd-margin's r_t = (log n + B^2 Q_t / 2) / S_t are needed.

    (i) The second-order term: constant-step sign descent (l_inf) and greedy coordinate
    descent (l_1), eta = 1, on the module's data: at some recorded step log n / S_t < gamma and
    yet the margin gap exceeds 10 log n / S_t (12 and 17 times, on one trial of four, within
    600 steps; 60-86 times by 3000 steps), so the theorem without its
    second-order term is false (there r_t itself is above gamma: the theorem says nothing).
    (ii) The log n term: two points in the plane (found by a search; l_2, eta = 0.04): at the
    first steps where r_t < gamma, gap S_t - B^2 Q_t / 2 reaches 0.470 log n (asserted >= 0.45
    log n), and the theorem holds there. Catches the bound with log n replaced by 0.45 log n or
    dropped. It does not catch (1/2) log n: no instance found (a search over small n, d and the
    three norms) exceeds 0.477 log n, so that strengthening is not shown to be false."""
    data, batch, model, w0, gam = setup
    logn = np.log(N)
    for q in (np.inf, 1.0):
        r = A.runs.fit_margin(model, w0, batch, optimizer="sd", norm=q, lr=1.0, steps=600,
                   record_steps=list(range(50, 601, 10)))
        S = r["steps"][:, None].astype(float)
        gap = gam[q] - A.svm.margin_in_norm(r["iterates"], data.X, data.y, q)
        ok = logn / S < gam[q]
        assert np.any((gap > 10 * logn / S) & ok), q
    X = np.array([[[0.0221, -0.0108], [-0.0743, -0.0436]]])
    y = np.ones((1, 2))
    b2 = {"X": torch.as_tensor(X), "y": torch.as_tensor(y)}
    gamma = 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(X, y, 2.0), 2.0)[0]
    Bq = np.linalg.norm(X[0], axis=-1).max()
    lr, steps = 0.04, 1200
    r = A.runs.fit_margin(model, model.init_params(2, None, [None]), b2, optimizer="sd", norm=2, lr=lr,
               steps=steps, record_steps=list(range(steps // 2, steps + 1)))
    t = r["steps"].astype(float)
    S, Q = lr * t, lr ** 2 * np.exp(lr * Bq) * t
    gap = gamma - A.svm.margin_in_norm(r["iterates"], X, y, 2.0)[:, 0]
    rt = (np.log(2) + Bq ** 2 * Q / 2) / S
    ok = rt < gamma
    assert ok.sum() >= 20 and np.all(gap[ok] <= rt[ok] + 1e-12)
    assert np.max(((gap * S - Bq ** 2 * Q / 2) / np.log(2))[ok]) >= 0.45

@pytest.mark.parametrize("norm", [1, 2, "inf", 3.0, 1.5])
def test_steepest_direction_attains_dual_norm(norm):
    g = torch.as_tensor(np.random.default_rng(2).standard_normal((6, 7)))
    d = A.optim.steepest_direction(g, norm)
    p = np.inf if norm == "inf" else float(norm)
    np.testing.assert_allclose(np.linalg.norm(d.numpy(), ord=p, axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose((g * d).sum(1).numpy(), A.norms.dual_norm(g, norm).numpy(), rtol=1e-12)


def test_spectral_direction():
    g = torch.as_tensor(np.random.default_rng(3).standard_normal((3, 4, 4)))
    d = A.optim.steepest_direction(g, "spectral")
    np.testing.assert_allclose(torch.linalg.matrix_norm(d, ord=2).numpy(), 1.0, rtol=1e-10)
    np.testing.assert_allclose((g * d).sum((1, 2)).numpy(), A.norms.dual_norm(g, "spectral").numpy(), rtol=1e-10)


@pytest.mark.slow
@pytest.mark.parametrize("q,lr,decay", [(2.0, 0.2, 0.5), (np.inf, 0.2, 0.5), (1.0, 0.2, 0.5),
                                        (2.0, 0.1, 0.0)])
def test_thm_sd_margin_bound(setup, q, lr, decay):
    data, batch, model, w0, gam = setup
    steps = 20000
    r = A.runs.fit_margin(model, w0, batch, optimizer="sd", norm=q, lr=lr, decay=decay, steps=steps)
    s = lr * (np.arange(steps) + 1.0) ** (-decay)
    Bq = np.linalg.norm(data.X, ord=NORMS[q], axis=-1).max(-1)
    checked = 0
    for k, t in enumerate(r["steps"]):
        if t == 0:
            continue
        S = s[:t].sum()
        Q = (s[:t, None] ** 2 * np.exp(s[:t, None] * Bq)).sum(0)
        rhs = (np.log(N) + Bq ** 2 * Q / 2) / S
        rho = A.svm.margin_in_norm(r["iterates"][k], data.X, data.y, q)
        ok = rhs <= gam[q]
        assert np.all((gam[q] - rho)[ok] <= rhs[ok] + 1e-12)
        # the one-step loss recursion summed: -log L(w_t) >= gamma S_t - B^2 Q_t / 2
        assert np.all(-r["log_loss"][k] >= gam[q] * S - Bq ** 2 * Q / 2 - 1e-9)
        checked += ok.sum()
    assert checked > 0
    if decay > 0:
        final = A.svm.margin_in_norm(r["iterates"][-1], data.X, data.y, q)
        assert np.all(final > 0.8 * gam[q])


def test_mirror_map_inverse():
    w = torch.as_tensor(np.random.default_rng(4).standard_normal((5, 6)))
    for p in (1.5, 2.0, 3.0):
        np.testing.assert_allclose(A.optim.mirror_map(A.optim.mirror_map(w, p), p, inverse=True).numpy(),
                                   w.numpy(), rtol=1e-12)


def test_md_p2_is_ngd(setup):
    data, batch, model, w0, _ = setup
    a = A.runs.fit_margin(model, w0, batch, optimizer="md", p=2.0, lr=0.1, normalize=True, steps=200)
    b = A.runs.fit_margin(model, w0, batch, optimizer="sd", norm=2, lr=0.1, steps=200)
    np.testing.assert_allclose(a["iterates"], b["iterates"], atol=1e-10)


@pytest.mark.parametrize("p", [1.75, 3.0])
def test_md_normalized_step_has_unit_dual_norm(setup, p):
    """The normalized mirror step g/||g||_{p/(p-1)} has dual norm 1 before eta is applied."""
    data, batch, model, w0, _ = setup
    eta, q = 0.05, p / (p - 1)
    out = A.runs.fit_margin(model, w0, batch, optimizer="md", p=p, lr=eta, normalize=True, steps=3,
                 record_steps=[0, 1, 2, 3])
    th = A.optim.mirror_map(torch.as_tensor(out["iterates"]), p).numpy()
    steps = (th[:-1] - th[1:]) / eta                      # (3, B, D)
    np.testing.assert_allclose(np.linalg.norm(steps, ord=q, axis=-1), 1.0, rtol=1e-9)
    # and it points along the gradient at each recorded iterate
    for k in range(3):
        for b in range(B):
            _, g = _loss_grad(out["iterates"][k, b], data.X[b], data.y[b])
            np.testing.assert_allclose(steps[k, b], g / np.linalg.norm(g, ord=q), rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("eps,decay", [(0.0, 0.5), (1e-8, 0.0)])
def test_adam_matches_direct_implementation(setup, eps, decay):
    """The log-scaled moments give the same iterates as plain float64 Adam on the true gradient."""
    data, batch, model, w0, _ = setup
    r = A.runs.fit_margin(model, w0, batch, optimizer="adam", lr=0.05, decay=decay, eps=eps, steps=300,
               betas=(0.9, 0.99), record_steps=[300])
    b1, b2 = 0.9, 0.99
    for b in range(B):
        w = np.zeros(D)
        m = np.zeros(D)
        v = np.zeros(D)
        for t in range(300):
            _, g = _loss_grad(w, data.X[b], data.y[b])
            m = b1 * m + (1 - b1) * g
            v = b2 * v + (1 - b2) * g * g
            w = w - 0.05 * (t + 1) ** (-decay) * (m / (1 - b1 ** (t + 1))) / (
                np.sqrt(v / (1 - b2 ** (t + 1))) + eps)
        np.testing.assert_allclose(r["iterates"][-1][b], w, rtol=1e-9, atol=1e-12)


def test_linear_log_grad_norm_matches_direct(setup):
    """attnsvm.losses.linear_log_grad_norm is log ||grad L||_q of the exponential risk (direct
    float64 gradient), and stays finite where the gradient underflows."""
    data, *_ = setup
    w = np.random.default_rng(0).standard_normal((3, B, D))
    for q in (2.0, np.inf):
        direct = np.array([[np.log(np.linalg.norm(_loss_grad(w[k, b], data.X[b], data.y[b])[1], ord=q))
                            for b in range(B)] for k in range(3)])
        np.testing.assert_allclose(A.losses.linear_log_grad_norm(w, data.X, data.y, ord=q), direct,
                                   rtol=1e-12, atol=1e-12)
    w_svm = A.svm.linear_svm_p(data.X, data.y, 2.0)
    far = A.losses.linear_log_grad_norm(1e5 * w_svm, data.X, data.y)
    assert np.all(np.isfinite(far)) and np.all(far < -1e4)


@pytest.mark.slow
def test_adam_eps_split_at_t_eps():
    """Chapter 13's Adam with eps, past t_eps within a short run (eps = 1e-4 instead of 1e-8;
    t_eps ~ 9000-11000 steps here): the eps = 0 run's largest gradient entry decays like
    beta_2^(t/2) (fitted rate within 0.1 of (log beta_2)/2), t_eps predicted from the records of
    the first half of the run (none reached) falls within 3% of the measured one, and past t_eps the eps run's
    correlation with the l2 max-margin direction is the larger one (median). The split is needed:
    at the final record the two runs differ by more than 0.005 (so the old claim, eps changes
    nothing at the horizon, fails here), and a t_eps predicted with twice the rate misses the
    measured one by more than 10% (15-22%). (The part before t_eps, eps <= G_t/30, is the
    notebook's claim at eps = 1e-8; at eps = 1e-4 the first steps, where the margin ratios of a
    tiny iterate move by 0.1 under a 3% change of its direction, already see eps against the
    gradient's small entries.) About 20 s on an idle core, hence slow."""
    data = A.data.separable(30, 8, margin=0.1, trials=4, seed=1)
    batch = {"X": torch.as_tensor(data.X), "y": torch.as_tensor(data.y)}
    model = A.models.LinearClassifier()
    w0 = model.init_params(8, None, [None] * 4)
    norms = {"1": 1.0, "2": 2.0, "inf": np.inf}
    w_p = {k: A.svm.linear_svm_p(data.X, data.y, q) for k, q in norms.items()}
    gam = {k: 1.0 / A.norms.vector_norm(w_p[k], q) for k, q in norms.items()}
    runs = [A.runs.fit_margin(model, w0, batch, steps=14000, optimizer="adam", lr=0.01, decay=0.0, eps=eps,
                              betas=(0.9, 0.999)) for eps in (0.0, 1e-4)]
    split = A.bounds.adam_eps_split(*runs, data.X, data.y, norms, gam, w_p["2"], eps=1e-4, beta2=0.999)
    assert np.all(split["measured"]) and np.all(split["past"]), split["t_eps"]
    assert np.all(np.abs(split["rate_ratio"] - 1) < 0.1), split["rate_ratio"]
    assert np.median(split["gain"]) > 0, split["gain"]
    final = max(np.max(np.abs(a - b)) for a, b in zip(
        A.svm.margin_ratios(runs[1]["iterates"][-1], data.X, data.y, norms, gam).values(),
        A.svm.margin_ratios(runs[0]["iterates"][-1], data.X, data.y, norms, gam).values()))
    assert final > 0.005, final
    half = [{k: r[k][r["steps"] <= 7000] for k in ("steps", "iterates")} for r in runs]
    early = A.bounds.adam_eps_split(*half, data.X, data.y, norms, gam, w_p["2"], eps=1e-4, beta2=0.999)
    assert not np.any(early["measured"])
    np.testing.assert_allclose(early["t_eps"], split["t_eps"], rtol=0.03)
    wrong = A.bounds.adam_eps_split(*half, data.X, data.y, norms, gam, w_p["2"], eps=1e-4, beta2=0.999 ** 2)
    assert np.all(np.abs(wrong["t_eps"] / split["t_eps"] - 1) > 0.1)


@pytest.mark.slow
def test_rates_order(setup):
    """Observed in the chapter, checked here on other seeds: PRGD < NGD < GD in margin gap."""
    data, batch, model, w0, gam = setup
    gaps = {}
    for k, kw in {"gd": dict(optimizer="gd", lr=1.0), "ngd": dict(optimizer="sd", norm=2, lr=0.1),
                  "prgd": dict(optimizer="prgd", lr=0.1, period=100, growth=1.5)}.items():
        r = A.runs.fit_margin(model, w0, batch, steps=3000, record_steps=[3000], **kw)
        gaps[k] = np.median(gam[2.0] - A.svm.margin_in_norm(r["iterates"][-1], data.X, data.y, 2.0))
    assert gaps["prgd"] < gaps["ngd"] < gaps["gd"]


def test_errors():
    X = np.array([[1.0, 0.0], [1.0, 0.0]])
    with pytest.raises(A.svm.InfeasibleError):
        A.svm.linear_svm_p(X, np.array([1.0, -1.0]), 3.0)
    with pytest.raises(ValueError, match="p must"):
        A.svm.linear_svm_p(X, np.array([1.0, 1.0]), 0.5)
    with pytest.raises(ValueError, match="norm"):
        A.optim.steepest_direction(torch.zeros(2, 3), 0.3)
    model = A.models.LinearClassifier()
    w0 = model.init_params(2, None, [None])
    batch = {"X": torch.as_tensor(X[None]), "y": torch.ones(1, 2, dtype=torch.float64)}
    with pytest.raises(ValueError, match="optimizer"):
        A.runs.fit_margin(model, w0, batch, optimizer="bogus", steps=1, lr=0.1)
    with pytest.raises(ValueError, match="p must"):
        A.runs.fit_margin(model, w0, batch, optimizer="md", steps=1, lr=0.1)
    with pytest.raises(ValueError, match="lr"):
        A.runs.fit_margin(model, w0, batch, optimizer="gd", steps=1, lr=-1.0)


# ----------------------------------------------------------------------------- the driver, batched

def test_linear_svm_p3_dual_certificate():
    """p = 3: a dual certificate. lambda >= 0 on the active constraints with U^T lambda equal to
    grad ||w||_3 (the KKT system, by NNLS) is dual feasible, ||U^T lambda||_{3/2} <= 1, and its
    value sum(lambda) equals ||w||_3. By weak duality (sum lambda <= ||w'||_3 for every feasible
    w') the solution is optimal to that accuracy. The l_2 solution, a feasible point that is not
    l_3-optimal, fails the same certificate."""
    from scipy.optimize import nnls
    data = A.data.separable(10, 30, margin=0.1, trials=B, seed=5)

    def certificate_gap(U, w):
        act = U @ w <= 1 + 1e-6
        g = np.sign(w) * np.abs(w) ** 2 / np.linalg.norm(w, ord=3) ** 2   # ||g||_{3/2} = 1
        lam, _ = nnls(U[act].T, g)
        scale = max(1.0, np.linalg.norm(U[act].T @ lam, ord=1.5))          # make it dual feasible
        lam = lam / scale
        assert np.all(lam >= 0) and np.linalg.norm(U[act].T @ lam, ord=1.5) <= 1 + 1e-12
        return np.linalg.norm(w, ord=3) - lam.sum()                        # >= 0 by weak duality

    for b in range(B):
        U = data.y[b][:, None] * data.X[b]
        w3 = A.svm.linear_svm_p(data.X[b], data.y[b], 3.0)
        assert -1e-9 <= certificate_gap(U, w3) <= 1e-5 * np.linalg.norm(w3, ord=3)
        w2 = A.svm.linear_svm_p(data.X[b], data.y[b], 2.0)
        assert certificate_gap(U, w2) >= 1e-2 * np.linalg.norm(w2, ord=3)


@pytest.mark.slow
def test_check_sd_bound_equals_inline(setup):
    """experiments.geometry's bound r_t and its check equal a direct per-step computation."""
    data, batch, model, w0, gam = setup
    lr, decay, steps = 0.2, 0.5, 20000
    for q in (1.0, 2.0, np.inf):
        r = A.runs.fit_margin(model, w0, batch, optimizer="sd", norm=q, lr=lr, decay=decay, steps=steps)
        s = lr * (np.arange(steps) + 1.0) ** (-decay)
        Bq = np.linalg.norm(data.X, ord=NORMS[q], axis=-1).max(-1)
        rt = A.bounds.sd_margin_radius(r["steps"], data.X, q, lr=lr, decay=decay)
        live = 0
        for k, t in enumerate(r["steps"]):
            if t == 0:
                assert np.all(np.isinf(rt[k]))
                continue
            Q = (s[:t, None] ** 2 * np.exp(s[:t, None] * Bq)).sum(0)
            rhs = (np.log(N) + Bq ** 2 * Q / 2) / s[:t].sum()
            np.testing.assert_allclose(rt[k], rhs, rtol=1e-10)
            live += int(np.sum(rhs < gam[q]))
        holds, n_live = A.bounds.check_sd_bound(r, data.X, data.y, q, gam[q], lr=lr, decay=decay)
        assert holds and n_live == live and live > 0
        # with a wrong (doubled) maximum margin the gap exceeds the bound: the check fails
        bad, bad_live = A.bounds.check_sd_bound(r, data.X, data.y, q, 2 * gam[q], lr=lr, decay=decay)
        assert bad_live > 0 and not bad
    with pytest.raises(ValueError, match="norm"):
        A.bounds.sd_margin_radius(r["steps"], data.X, 3.0, lr=lr, decay=decay)


def test_margin_ratios_and_gaps(setup):
    data, *_, gam = setup
    norms = {"1": 1.0, "2": 2.0, "inf": np.inf}
    gammas = {k: gam[q] for k, q in norms.items()}
    w2 = A.svm.linear_svm_p(data.X, data.y, 2.0)
    rat = A.svm.margin_ratios(w2, data.X, data.y, norms, gammas)
    np.testing.assert_allclose(rat["2"], 1.0, rtol=1e-8)
    assert np.all(rat["1"] <= 1 + 1e-9) and np.all(rat["inf"] <= 1 + 1e-9)
    for b in range(B):       # per trial, the same as margin_in_norm on that trial alone
        assert rat["inf"][b] == pytest.approx(
            A.svm.margin_in_norm(w2[b], data.X[b], data.y[b], np.inf) / gam[np.inf][b], rel=1e-12)
    its = np.stack([w2, 2 * w2, -w2])
    gap = A.svm.margin_gaps(its, data.X, data.y, 2.0, gam[2.0])
    np.testing.assert_allclose(gap[:2], 0.0, atol=1e-9)
    assert np.all(gap[2] > gam[2.0])


def test_phase_fit_and_slopes():
    """An exponential series has a constant per-phase rate (R^2 = 1), a power law does not."""
    P, t = 100, np.arange(0, 5001, 50)
    expo = np.exp(-0.002 * t)[:, None] * np.array([[1.0, 3.0]])
    rate, r2, k = A.metrics.phase_fit(t, expo, P)
    np.testing.assert_allclose(rate, 0.2, rtol=1e-10)
    np.testing.assert_allclose(r2, 1.0, atol=1e-12)
    assert k == 50
    power = np.where(t > 0, 1.0 / np.maximum(t, 1), np.nan)[:, None]
    early = A.metrics.phase_fit(t, power, P, stop=2500)[0]
    late = A.metrics.phase_fit(t, power, P, start=2500)[0]
    assert late[0] / early[0] < 0.5
    np.testing.assert_allclose(A.metrics.slopes(t, np.where(t > 0, np.maximum(t, 1.0) ** -0.5, 1.0)[:, None]), -0.5)
    with pytest.raises(ValueError, match="phase boundaries"):
        A.metrics.phase_fit(t, expo, 10000)
    with pytest.raises(ValueError, match="positive"):
        A.metrics.phase_fit(t, -expo, P)


@pytest.mark.slow
def test_observed_rates_in_each_geometry():
    """Observed in the chapter, checked here on other data sets: with eta_0 (t+1)^-1/2 the own-norm
    gap of NGD falls like t^-1/2, that of l_1.5 mirror descent faster, that of l_3 mirror descent
    slower."""
    data = A.data.separable(30, 8, margin=0.1, trials=4, seed=11)
    batch = {"X": torch.as_tensor(data.X), "y": torch.as_tensor(data.y)}
    model = A.models.LinearClassifier()
    w0 = model.init_params(8, None, [None] * 4)
    slope = {}
    for k, p, kw in [("ngd", 2.0, dict(optimizer="sd", norm=2, lr=1.0)),
                     ("md15", 1.5, dict(optimizer="md", p=1.5, lr=3.0, normalize=True)),
                     ("md3", 3.0, dict(optimizer="md", p=3.0, lr=3.0, normalize=True))]:
        r = A.runs.fit_margin(model, w0, batch, steps=20000, decay=0.5, **kw)
        gam = 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(data.X, data.y, p), p)
        slope[k] = np.median(A.metrics.slopes(r["steps"], A.svm.margin_gaps(r["iterates"], data.X, data.y, p, gam)))
    assert -0.6 <= slope["ngd"] <= -0.4
    assert slope["md15"] < slope["ngd"] - 0.2
    assert slope["md3"] > slope["ngd"] + 0.1


# ----------------------------------------------------- thm-ngd-margin-rate (NGD's O(1/t) margin rate)
def _ngd_psi(Zs, etas):
    """NGD (l2, exponential loss) from w = 0 on z_i = y_i x_i, (B, n, d), in float64: returns the
    iterates (K + 1, B, d) and psi(w_t) = -log sum_i exp(-<z_i, w_t>) (K + 1, B)."""
    w = np.zeros(Zs.shape[::2])
    W = [w]
    for eta in etas:
        m = np.einsum("bnd,bd->bn", Zs, w)
        q = np.exp(-(m - m.min(1, keepdims=True)))
        G = np.einsum("bn,bnd->bd", q / q.sum(1, keepdims=True), Zs)
        w = w + eta * G / np.linalg.norm(G, axis=1, keepdims=True)
        W.append(w)
    W = np.array(W)
    m = np.einsum("bnd,kbd->kbn", Zs, W)
    return W, m.min(-1) - np.log(np.exp(-(m - m.min(-1, keepdims=True))).sum(-1))


def _gap(W, Zs, gamma):
    nrm = np.linalg.norm(W, axis=-1)
    return gamma - np.einsum("bnd,kbd->kbn", Zs, W).min(-1) / np.where(nrm > 0, nrm, np.nan)


def test_ngd_margin_rate(setup):
    """thm-ngd-margin-rate on the chapter's data model, at the theorem's largest constant step and
    on a decaying schedule eta_t = eta min(1, 4/sqrt(t + 4)) (never above the theorem's step):
    psi(w_{t+1}) - psi(w_t) >= eta_t gamma at every step, and the gap is at most log n / S_t
    wherever gamma S_t >= log n (the bound is NaN exactly elsewhere).

    What it catches: the per-step constant gamma cannot be raised much: psi's increment per unit
    step approaches gamma (measured: its smallest ratio to eta_t gamma over the run is
    1.0000-1.0004 at the constant step, 1.014-1.059 on the decaying schedule), so the
    inequality with 1.1 gamma fails at some step of every trial (asserted)."""
    data, batch, model, w0, gam = setup
    Zs = data.y[..., None] * data.X
    R = np.linalg.norm(data.X, axis=-1).max(-1)
    eta = float(np.min(A.bounds.ngd_margin_step(gam[2.0], R)))
    assert np.all(eta * np.exp(2 * eta * R) <= gam[2.0] / (2 * R ** 2) * (1 + 1e-12))
    K = 20000
    for etas in (np.full(K, eta), eta * np.minimum(1.0, 4 * (np.arange(K) + 4.0) ** -0.5)):
        assert np.all(etas[:, None] * np.exp(2 * etas[:, None] * R) <= gam[2.0] / (2 * R ** 2) * (1 + 1e-12))
        W, psi = _ngd_psi(Zs, etas)
        np.testing.assert_allclose(psi[0], -np.log(N))
        inc = np.diff(psi, axis=0) / (etas[:, None] * gam[2.0])
        assert np.all(inc >= 1 - 1e-9)
        assert np.all(np.any(inc < 1.1, axis=0)), inc.min(0)         # 1.1 gamma fails
        bound = A.bounds.ngd_margin_gap_bound(etas, N, gamma=gam[2.0], R=R)
        S = np.concatenate([[0.0], np.cumsum(etas)])
        ok = gam[2.0][None] * S[:, None] >= np.log(N)
        assert ok[-1].all() and ok.mean() > 0.5
        assert bound.shape == ok.shape and np.array_equal(np.isnan(bound), ~ok)
        gap = _gap(W, Zs, gam[2.0])
        assert np.all(gap[ok] <= bound[ok] + 1e-12)


def test_ngd_margin_rate_constant_is_near_tight():
    """thm-ngd-margin-rate, how tight: on three points in the plane (found by a random search
    over small instances for the largest gap * eta t / log n), NGD at the theorem's step has
    gap * eta t / log n up to 0.475 and 0.37 at the end, the same at a quarter of the step (the
    gap is C / (eta t) with C independent of eta). So the bound with log n replaced by
    log n / 2.2 fails at some step, and by log n / 3 at the last step (asserted)."""
    X = np.array([[[0.22, -0.92], [0.72, -0.10], [0.24, -0.89]]])
    y = np.ones((1, 3))
    gamma = 1.0 / A.norms.vector_norm(A.svm.linear_svm_p(X, y, 2.0), 2.0)
    R = np.linalg.norm(X, axis=-1).max(-1)
    for eta in (float(A.bounds.ngd_margin_step(gamma, R)[0]), float(A.bounds.ngd_margin_step(gamma, R)[0]) / 4):
        K = int(300 / eta)
        W, _ = _ngd_psi(X, np.full(K, eta))
        bound = A.bounds.ngd_margin_gap_bound(np.full(K, eta), 3, gamma=gamma, R=R)[:, 0]
        gap = _gap(W, X, gamma)[:, 0]
        ok = gamma * eta * np.arange(K + 1) >= np.log(3)
        assert np.array_equal(np.isnan(bound), ~ok)
        assert np.all(gap[ok] <= bound[ok])
        assert np.any(gap[ok] > bound[ok] / 2.2) and gap[-1] > bound[-1] / 3
    with pytest.raises(ValueError, match="gamma"):
        A.bounds.ngd_margin_step(2.0, 1.0)
    with pytest.raises(ValueError, match="etas"):
        A.bounds.ngd_margin_gap_bound([0.0], 3, gamma=gamma, R=R)
    big = 1.01 * float(A.bounds.ngd_margin_step(gamma, R)[0])
    with pytest.raises(ValueError, match="etas must satisfy"):           # the step condition
        A.bounds.ngd_margin_gap_bound([big / 2, big], 3, gamma=gamma, R=R)
    with pytest.raises(ValueError, match="gamma"):
        A.bounds.ngd_margin_gap_bound([big / 2], 3, gamma=0.0, R=R)


def _weighted_support(n, r, seed=0):
    """n points z_i = e_0 + v_i in R^n, v_i orthogonal to e_0, all support vectors of the l2 SVM
    with dual weights lam (one weight a, the others (1 - a)/(n - 1)): |v_i| = r for i >= 1 and
    v_0 = -sum_{i>=1} lam_i v_i / lam_0, so sum_i lam_i z_i = e_0. The margin is exactly 1 (every
    margin of e_0 is 1; for a unit u, min_i <z_i, u> <= <sum_i lam_i z_i, u> <= 1). The weight a
    maximizes C(lam) = H(lam) + log max(lam), the limit of gap * S_t along NGD (see the test)."""
    from scipy.optimize import brentq
    x = brentq(lambda x: 1 + (n - 1) / x - np.log(x), 1.0001, 1e6)     # dC/dx = 0, x = a(n-1)/(1-a)
    lam = np.full(n, (1 - x / (x + n - 1)) / (n - 1))
    lam[0] = x / (x + n - 1)
    V = np.random.default_rng(seed).standard_normal((n, n - 1))
    V *= r / np.linalg.norm(V, axis=1, keepdims=True)
    V[0] = -(lam[1:] @ V[1:]) / lam[0]
    return np.hstack([np.ones((n, 1)), V]), lam


def test_ngd_margin_rate_sees_half_log_n():
    """thm-ngd-margin-rate, tight to within a factor 1.74 of log n: on n = 100 points that are
    all support vectors with unequal dual weights lam (_weighted_support), NGD at the theorem's
    step has gap * S_t / log n rising to 0.577 (0.576 at the last step), at the largest step and
    at a quarter of it. So the bound with log n halved fails (asserted at the last step of both
    runs); the smallest factor detected is 1/0.577 = 1.73.

    Why: along NGD the softmax weights tend to lam, so the offset rho of w_t off the max-margin
    direction has <z_i, rho> = -log lam_i - H(lam), and gap * S_t -> C = H(lam) + log max(lam),
    which is at most log n - log log n - 1 + o(1): the theorem's log n is the right order, and
    C / log n exceeds 1/2 only for n of several dozen (0.42 at n = 3, the planar instance above;
    0.53 at n = 30; 0.57 at n = 100, the predicted limit here)."""
    n = 100
    Z, lam = _weighted_support(n, 2.0)
    np.testing.assert_allclose(lam @ Z, np.eye(n)[0], atol=1e-12)       # the certificate: gamma = 1
    assert np.all(lam > 0) and np.all(np.abs(Z[:, 0] - 1) == 0)
    gamma, R = 1.0, float(np.linalg.norm(Z, axis=1).max())
    C = -(lam * np.log(lam)).sum() + np.log(lam.max())
    assert 0.57 < C / np.log(n) < 0.575
    eta_max = float(A.bounds.ngd_margin_step(gamma, R))
    for eta in (eta_max, eta_max / 4):
        K = int(300 / eta)
        W, _ = _ngd_psi(Z[None], np.full(K, eta))
        bound = A.bounds.ngd_margin_gap_bound(np.full(K, eta), n, gamma=gamma, R=R)
        gap = _gap(W, Z[None], gamma)[:, 0]
        ok = np.isfinite(bound)
        assert ok[-1] and np.all(gap[ok] <= bound[ok])
        assert gap[-1] > bound[-1] / 1.74 > bound[-1] / 2, gap[-1] / bound[-1]


def _ball_minimizer_2d(Z, R):
    """The minimizer of the exponential loss over the disc |w| <= R for data z_i = y_i x_i in the
    plane (separable data: the minimizer is on the circle), by a grid over the angle refined by
    a bounded scalar search; returns w (2,)."""
    from scipy.optimize import minimize_scalar
    from scipy.special import logsumexp

    def f(th):
        return logsumexp(-R * (Z @ np.array([np.cos(th), np.sin(th)])))
    grid = np.linspace(-np.pi, np.pi, 20001)
    th0 = grid[np.argmin([f(t) for t in grid])]
    th = minimize_scalar(f, bounds=(th0 - 1e-3, th0 + 1e-3), method="bounded",
                         options=dict(xatol=1e-13)).x
    return R * np.array([np.cos(th), np.sin(th)])


@pytest.mark.slow
def test_prgd_ideal():
    """prop-prgd-ideal: the exact minimizer of the loss on the disc of radius R_k = c^k has a
    margin gap at most log n / R_k (exponentially small in k), and a point whose log-loss exceeds
    the minimum by delta has a gap at most (log n + delta) / R_k.

    What it catches: on the three points of the test above the exact minimizer has
    gap * R / log n rising from 0.23 to 0.40 (R = 2.25 ... 58) and staying near 0.36-0.40, so the
    bound with log n / 3 fails for the larger radii (asserted); and the inexact bound is nearly
    attained by rotating the minimizer by -0.2 rad (measured gap / bound 0.91-0.98 for R >= 25,
    asserted > 0.9 there, so the bound times 0.9 fails). The weakened form with delta's
    coefficient lowered is asserted to fail directly: the gap is (log n + c delta)/R with c
    measured 0.84-0.98 for R >= 25, so (log n + 0.8 delta)/R fails at every such radius and
    (log n + 0.95 delta)/R at the largest ones. The bound is NaN where R gamma < log n + delta
    (checked)."""
    Z = np.array([[0.22, -0.92], [0.72, -0.10], [0.24, -0.89]])
    n = len(Z)
    gamma = float(1.0 / A.norms.vector_norm(A.svm.linear_svm_p(Z[None], np.ones((1, n)), 2.0), 2.0)[0])
    radii = 1.5 ** np.arange(2, 14)
    ratio, weak95 = [], []
    for R in radii:
        w = _ball_minimizer_2d(Z, R)
        gap = gamma - (Z @ w).min() / R
        bound = float(A.bounds.prgd_ideal_gap_bound(R, n, gamma=gamma))
        assert np.isnan(bound) == (R * gamma < np.log(n))
        if R * gamma >= np.log(n):
            assert gap <= bound
        ratio.append(gap / bound)
        # inexact: rotate w by an angle phi, delta = log L(w_phi) - log L(w)
        for phi in (0.05, -0.2):
            c, s = np.cos(phi), np.sin(phi)
            wp = np.array([[c, -s], [s, c]]) @ w
            delta = np.log(np.exp(-Z @ wp).sum()) - np.log(np.exp(-Z @ w).sum())
            assert delta >= 0
            b = float(A.bounds.prgd_ideal_gap_bound(R, n, delta, gamma=gamma))
            assert np.isnan(b) == (R * gamma < np.log(n) + delta)
            if R * gamma >= np.log(n) + delta:
                gp = gamma - (Z @ wp).min() / R
                assert gp <= b, (R, phi, gp, b)
                if phi < 0 and R >= 25:
                    assert gp > 0.9 * b, (R, gp / b)
                    assert gp > (np.log(n) + 0.8 * delta) / R, (R, (gp * R - np.log(n)) / delta)
                    weak95.append(gp > (np.log(n) + 0.95 * delta) / R)
    ratio = np.array(ratio)
    assert len(weak95) == 6 and any(weak95)
    assert np.all(np.diff(np.log(A.bounds.prgd_ideal_gap_bound(radii, n, gamma=gamma))) < 0)   # geometric decay
    # below the condition R gamma >= log n + delta the proposition says nothing: NaN
    assert np.isnan(A.bounds.prgd_ideal_gap_bound(0.5 * np.log(n) / gamma, n, gamma=gamma))
    assert np.any(ratio > 1 / 3) and ratio.max() < 1, ratio
    with pytest.raises(ValueError, match="delta"):
        A.bounds.prgd_ideal_gap_bound(1.0, 3, -1.0, gamma=gamma)
    with pytest.raises(ValueError, match="gamma"):
        A.bounds.prgd_ideal_gap_bound(1.0, 3, gamma=-1.0)


# ----------------------------------------------------------------------------- the chapter's result
CLAIMS = {"sd_own_best", "sd_own_close", "md_l3", "md_small_own", "md_slower", "adam_linf",
          "adam999_worse", "adam_const_linf", "adam_eps_noop", "adam_eps_rate", "adam_eps_l2",
          "adam_eps_below",
          "adam999_const_below", "bound", "sd_rate_half", "md_small_faster", "md_large_slower",
          "order", "ngd_1_over_t", "prgd_line", "prgd_rate_constant", "prgd_exp"}


def test_linear_geometry_small():
    """The chapter's driver at a small size: the claims the notebook checks (a (bool, str) pair
    each), those that hold already at this size, the summary in range, and a claim that turns
    false when the numbers contradict it."""
    r = G.linear_geometry(20, 5, trials=2, steps=3000, rate_steps=1000, device="cpu")
    c, s = r.claims(), r.summary()
    assert set(c) == CLAIMS
    assert all(isinstance(h, bool) and isinstance(t, str) for h, t in c.values())
    for name in ("sd_own_best", "md_l3", "md_small_own", "order", "sd_rate_half"):
        assert c[name][0], c[name][1]
    ratios = np.array([v for k, v in s.items() if k.startswith("ratio_")])
    assert ratios.size == 10 * 5 and np.all((ratios > 0) & (ratios <= 1 + 1e-9))
    assert s["records"] == 2 * np.sum(r.runs["sign"]["steps"] > 0) and s["prgd_phases"] >= 3
    r.ratio["cd"]["inf"] = 1.5                             # coordinate descent best in l_inf
    assert not r.claims()["sd_own_best"][0]


@pytest.mark.slow
def test_quick_profile_claims():
    """The notebook's quick-profile run: every claim of the chapter holds."""
    c = G.linear_geometry(device="cpu").claims()
    assert all(h for h, _ in c.values()), {k: t for k, (h, t) in c.items() if not h}
