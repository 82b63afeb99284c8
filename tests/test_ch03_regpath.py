"""Chapter 3 (the regularization path): every statement, checked numerically."""
import numpy as np
import pytest

import attnsvm as A
from attnsvm import tokens
from attnsvm import losses, metrics, svm
from attnsvm import path
from attnsvm.experiments import regpath
import attnsvm.data as A_data


def _inst(n, T, d, seed, B=None):
    if B is None:
        data = A_data.keyed_instance(n, T, d, seed=seed)
    else:
        data = A_data.keyed_trials(n, T, d, B, seed=seed)
    return data, tokens.optimal_tokens(data.X, data.y, data.v)


def _outputs(W, data):
    S = metrics.attention(data.X, W, data.Z)                     # (n, T)
    gam = tokens.token_scores(data.X, data.y, data.v)
    return (S * gam).sum(-1), gam


@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0, 50.0])
def test_output_sandwich(scale):
    """ch03-lem-output: gamma* - Dbar S/(1+S) <= y f <= gamma* - delta S/(1+S)."""
    data, opt = _inst(5, 4, 6, seed=10)
    rng = np.random.default_rng(0)
    n = 5
    for _ in range(20):
        W = rng.standard_normal((6, 6)) * scale
        u, gam = _outputs(W, data)
        gs = gam[np.arange(n), opt]
        A, idx = tokens.lifted_features(data.X, data.Z, opt)
        m = np.einsum("kab,ab->k", A, W)
        S = np.zeros(n)
        np.add.at(S, idx[:, 0], np.exp(-m))
        gaps = (gs[:, None] - gam)[idx[:, 0], idx[:, 1]]
        delta, Dbar = gaps.min(), gaps.max()
        frac = S / (1 + S)
        assert np.all(u >= gs - Dbar * frac - 1e-12)
        assert np.all(u <= gs - delta * frac + 1e-12)


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_log_excess_is_loss_minus_infimum(loss):
    data, opt = _inst(4, 3, 5, seed=11)
    rng = np.random.default_rng(1)
    ell = {"logistic": lambda u: np.logaddexp(0, -u), "exponential": lambda u: np.exp(-u),
           "correlation": lambda u: -u}[loss]
    for s in [0.3, 1.0, 3.0]:
        W = rng.standard_normal((5, 5)) * s
        u, _ = _outputs(W, data)
        E = ell(u).mean() - losses.loss_floor(data, loss=loss)
        assert np.exp(path.log_excess(W, data, loss=loss)) == pytest.approx(E, rel=1e-8)
    # far along the SVM direction the excess is tiny but still exact in log space
    Wmm = svm.att_svm(data.X, data.Z, opt)
    le = path.log_excess(200 * Wmm / np.linalg.norm(Wmm), data, loss=loss)
    assert np.isfinite(le) and le < -20


def test_projections():
    rng = np.random.default_rng(2)
    for norm, f in (("fro", np.linalg.norm), ("nuc", lambda a: np.linalg.norm(a, "nuc"))):
        for _ in range(5):
            W = rng.standard_normal((4, 4)) * 3
            P = path.project_ball(W, 2.0, norm=norm)
            assert f(P) <= 2.0 + 1e-10
            assert np.allclose(path.project_ball(P, 2.0, norm=norm), P, atol=1e-10)
            for _ in range(10):                            # variational inequality
                Y = rng.standard_normal((4, 4))
                Y = Y / f(Y) * 2.0 * rng.random()
                assert np.sum((W - P) * (Y - P)) <= 1e-9
            small = W / f(W)
            assert np.allclose(path.project_ball(small, 2.0, norm=norm), small)


def test_kq_budget_is_nuclear_ball():
    """ch03-lem-kq: ||K Q^T||_* <= (||K||^2 + ||Q||^2) / 2, with equality for the balanced SVD
    factorization, so {KQ^T : ||K||^2 + ||Q||^2 <= 2R} is the nuclear ball of radius R."""
    rng = np.random.default_rng(3)
    for m in (2, 5):
        for _ in range(10):
            K, Q = rng.standard_normal((5, m)), rng.standard_normal((5, m))
            assert np.linalg.norm(K @ Q.T, "nuc") <= 0.5 * (np.sum(K**2) + np.sum(Q**2)) + 1e-12
    W = rng.standard_normal((5, 5))
    U, s, Vt = np.linalg.svd(W)
    K, Q = U * np.sqrt(s), Vt.T * np.sqrt(s)
    assert np.allclose(K @ Q.T, W)
    assert 0.5 * (np.sum(K**2) + np.sum(Q**2)) == pytest.approx(np.linalg.norm(W, "nuc"))


def test_theorem_bounds_hold_on_the_path():
    """ch03-thm-regpath: for R >= R0, any W in the ball with L(W) <= L(R W_mm/||W_mm||) has
    margin >= R gamma_hat - log C, norm >= R - ||W_mm|| log C, 1 - corr <= ||W_mm|| log C / R."""
    data, opt = _inst(3, 3, 4, seed=12, B=2)
    Wmm, feas = svm.att_svm_batch(data.X, data.Z, opt)
    assert feas.all()
    consts = [path.path_constants(data.trial(b), Wmm[b]) for b in range(2)]
    R0 = max(c["R0"] for c in consts)
    R = R0 * np.array([1.01, 2.0, 4.0])
    rp = path.reg_path(data, R, inits=2, W_svm=Wmm, max_steps=600, device="cpu")
    assert np.all(rp.log_excess <= rp.log_excess_svm + 1e-12)   # the hypothesis on W_R
    for b, c in enumerate(consts):
        A, _ = tokens.lifted_features(data.X[b], data.Z[b], opt[b])
        nW = np.linalg.norm(Wmm[b])
        for k, Rk in enumerate(R):
            W = rp.W[k, b]
            margin = np.einsum("kab,ab->k", A, W).min()
            assert margin >= Rk * c["gamma_hat"] - np.log(c["C"])
            assert np.linalg.norm(W) >= Rk - nW * np.log(c["C"])
            assert 1 - rp.corr[k, b] <= nW * np.log(c["C"]) / Rk
    # the bound is loose: the observed gap is far below it at the largest radius
    assert np.all(1 - rp.corr[-1] < 0.1 * np.log([c["C"] for c in consts]) / R[-1]
                  * np.linalg.norm(Wmm, axis=(1, 2)))


def _boundary(f, lo, hi, iters=50):
    """Largest x in [lo, hi] (per row) with f(x) True, by bisection from f(lo) True."""
    lo, hi = np.array(lo, dtype=float), np.array(hi, dtype=float)
    ok_hi = f(hi)
    lo = np.where(ok_hi, hi, lo)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        ok = f(mid)
        lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return lo


def test_theorem_bounds_on_adversarial_points_of_the_sublevel_set():
    """ch03-thm-regpath holds for EVERY W in {||W|| <= R, L(W) <= L(R W_bar)}, not only for a
    solver's output: in many random directions U orthogonal to W_bar, take the point of the
    sublevel set farthest in angle, W = R (cos th W_bar + sin th U), and then the shortest
    point s W (s <= 1) still in the set; check the three statements at both."""
    rng = np.random.default_rng(3)
    for seed in (12, 13):
        data, opt = _inst(3, 3, 4, seed=seed)
        Wmm = svm.att_svm(data.X, data.Z, opt)
        c = path.path_constants(data, Wmm)
        nW = np.linalg.norm(Wmm)
        Wbar = Wmm / nW
        Amat, _ = tokens.lifted_features(data.X, data.Z, opt)
        U = rng.standard_normal((64,) + Wmm.shape)
        U -= np.einsum("kab,ab->k", U, Wbar)[:, None, None] * Wbar
        U /= np.linalg.norm(U, axis=(1, 2), keepdims=True)
        for R in c["R0"] * np.array([1.01, 1.5, 3.0]):
            level = path.log_excess(R * Wbar, data)

            def at(th):
                return R * (np.cos(th)[:, None, None] * Wbar + np.sin(th)[:, None, None] * U)

            th = _boundary(lambda x: path.log_excess(at(x), data) <= level, np.zeros(64),
                           np.full(64, np.pi))
            W1 = at(th)
            sc = 1 - _boundary(lambda x: path.log_excess((1 - x)[:, None, None] * W1, data) <= level,
                               np.zeros(64), np.ones(64))
            W2 = sc[:, None, None] * W1
            for W in (W1, W2):
                assert np.all(path.log_excess(W, data) <= level + 1e-9)      # in the set
                margin = np.einsum("kab,jab->jk", Amat, W).min(-1)
                assert np.all(margin >= R * c["gamma_hat"] - np.log(c["C"]))
                assert np.all(np.linalg.norm(W, axis=(1, 2)) >= R - nW * np.log(c["C"]))
                corr = np.einsum("jab,ab->j", W, Wbar) / np.linalg.norm(W, axis=(1, 2))
                assert np.all(1 - corr <= nW * np.log(c["C"]) / R)
            assert np.any(th > 0)                                   # the set is not a single ray


def test_path_direction_and_observed_rate():
    """The direction of W_R tends to W_mm; observed: 1 - corr decays about like R^-2."""
    data, opt = _inst(4, 4, 5, seed=13, B=2)
    Wmm, feas = svm.att_svm_batch(data.X, data.Z, opt)
    R = np.geomspace(20, 400, 5)
    rp = path.reg_path(data, R, inits=1, W_svm=Wmm, max_steps=500, device="cpu")
    gap = 1 - rp.corr
    assert np.all(np.diff(gap, axis=0) < 0)
    assert np.all(gap[-1] < 1e-2)
    slope = metrics.fit_rate(R, gap, tail=0.6)
    assert np.all(slope < -1.5) and np.all(slope > -2.5)
    assert np.all(rp.residual < 1e-5)


def test_nuclear_path_tends_to_nuclear_svm():
    """ch03-cor-kq: the nuclear-ball path (the (K,Q) budget) tends to W_mm^*, not to W_mm."""
    data, opt = _inst(4, 4, 5, seed=14)
    Wn = svm.att_svm(data.X, data.Z, opt, norm="nuc")
    Wf = svm.att_svm(data.X, data.Z, opt)
    rp = path.reg_path(data, [10.0, 300.0], norm="nuc", inits=1, W_svm=Wn, max_steps=800,
                          device="cpu")
    assert 1 - rp.corr[-1, 0] < 1e-2
    assert rp.corr[-1, 0] > rp.corr[0, 0]
    assert metrics.corr(rp.W[-1, 0], Wf) < 0.99 < rp.corr[-1, 0]
    assert rp.norm[-1, 0] == pytest.approx(300.0, rel=1e-6)


def test_path_constants_batched_equals_one_at_a_time():
    data = A.data.random_unit(4, 3, 6, trials=3, seed=7)
    opt = A.tokens.optimal_tokens(data.X, data.y, data.v)
    W_mm, feas = A.svm.att_svm_batch(data.X, data.Z, opt)
    assert feas.all()
    batched = path.path_constants(data, W_mm)
    for b in range(3):
        one = path.path_constants(data.trial(b), W_mm[b])
        for k, v in one.items():
            assert batched[k][b] == pytest.approx(v, rel=1e-12)


def test_study_summary_states_the_chapter_claims():
    # the numbers the chapter glues, from the study object: the kept point is never worse than
    # the SVM direction (a monotone method started there), and the path turns towards W_mm
    st = regpath.regpath_study(5, 6, 8, 3, np.geomspace(1.0, 100.0, 4), inits=2, max_steps=150,
                               nuclear=False, device="cpu")
    s = st.summary()
    assert s["pairs"] == 4 * s["B"] and s["below_svm"] == s["pairs"]
    assert s["B"] + s["infeasible"] == 3
    assert s["gap_final_fro"] < s["gap_first_fro"]
    assert "slope_nuc" not in s
    assert np.isnan(metrics.nanmedian([])) and np.isnan(metrics.nanmedian([np.nan]))


def test_study_claims_hold_and_can_fail():
    """RegPathStudy.claims(), the checked sentences of the chapter: all hold on the notebook's
    setting (n = 6, T = 8, d = 10, four instances, radii 1-300, no nuclear path), and each fails
    on numbers that contradict it (the gap raised to the bound, a slope-1 gap, every random start
    marked as reaching the objective at the largest radius)."""
    st = regpath.regpath_study(6, 8, 10, 4, np.geomspace(1.0, 300.0, 8), inits=3, max_steps=600,
                               nuclear=False, seed=0, device="cpu")
    c = st.claims()
    assert set(c) == {"steeper_than_proved", "bound_room", "nonconvex_visible"}
    assert all(holds for holds, _ in c.values()), c
    corr = st.path.corr.copy()
    st.path.corr = 1 - st.bound()                                   # gap = bound, slope -1
    c = st.claims()
    assert not c["bound_room"][0] and not c["steeper_than_proved"][0]
    st.path.corr = corr
    st.path.log_excess_all = np.minimum(st.path.log_excess_all, st.path.log_excess[..., None])
    assert not st.claims()["nonconvex_visible"][0]


@pytest.mark.slow
def test_spg_active_set_changes_no_run(monkeypatch):
    """path._spg drops converged runs from its batch (COMPACT_FRACTION); each run's iterations
    are its own, so the result equals that of the whole batch run to the end (compaction
    disabled by a fraction above 1) up to rounding: a smaller batch moves some elements across
    the SIMD block boundary of exp/log (README, "The same numbers on every machine"), and a run
    far from converged amplifies that chaotically (its residual is not a smooth function of the
    rounding), so the runs here go on until every one has converged. The objective stacks each
    instance's runs into one matrix product (path._scores), whose kernel, and so whose order of
    summation, may change with the batch's shape: products round like the transcendental
    functions here. The tolerance is derived from the runs (tests/rounding.py): per run (radius,
    instance, start), 4 times the spread of three runs whose transcendental values and matrix
    products move by one ulp at random, plus 8 ulp of the scale.
    Here the kept start may differ between starts that reach the same minimizer (a tie, checked
    on the objectives). Checked that the batch was cut, more than once (a spy on take with a
    mask; path._armijo_batched's takes are index lists); the cut runs' state written back to
    the wrong rows, or their objective given the wrong rows (the two instances differ), fails.
    Slow: the jittered runs (267 s on the loaded 2-core machine, 2026-11-28)."""
    import torch
    from rounding import PRODUCTS, TRANSCENDENTAL, rounding_spread
    data, opt = _inst(4, 4, 5, seed=3, B=2)       # two instances: a run given another's rows fails
    Wn, feasible = svm.att_svm_batch(data.X, data.Z, opt, norm="nuc")
    assert feasible.all()
    R = np.geomspace(1.0, 50.0, 4)                 # every run converges, the last after ~1,200 steps
    kw = dict(norm="nuc", inits=2, W_svm=Wn, max_steps=4000, device="cpu")
    names = ("log_excess_all", "corr_all")

    def run():
        rp = path.reg_path(data, R, **kw)
        return {**{k: getattr(rp, k) for k in names}, "W": rp.W, "best": rp.best_init,
                "residual_all": rp.residual_all, "steps": rp.steps}

    takes = []
    take = path._Objective.take
    def spy(self, idx):                        # the cuts (a mask); Armijo's takes are indices
        if idx.dtype == torch.bool:
            takes.append(int(idx.sum()))
        return take(self, idx)

    monkeypatch.setattr(path._Objective, "take", spy)
    cut = run()
    assert len(takes) >= 2 and takes[-1] < takes[0]                  # the batch was cut, more than once
    monkeypatch.setattr(path, "COMPACT_FRACTION", 2.0)
    n_takes = len(takes)
    whole, spread = rounding_spread(run, ops=TRANSCENDENTAL | PRODUCTS)
    assert len(takes) == n_takes                                      # never cut
    for r in (cut, whole):                                            # every run converged, late
        assert r["steps"] < kw["max_steps"] and np.all(r["residual_all"] < 1e-10)
    assert whole["steps"] > 800
    eps = np.finfo(np.float64).eps
    tols = {}
    for name in names:                                                # per run (K, B, I)
        tols[name] = 4 * spread[name] + 8 * eps * np.abs(whole[name])
        assert np.all(np.abs(cut[name] - whole[name]) <= tols[name]), name
    # the kept start: the same, or a tie (starts that reach the same minimizer; argmin then
    # follows the rounding): the two kept points' objectives agree to the tolerance
    f, tf = whole["log_excess_all"], tols["log_excess_all"]
    kb = np.nonzero(cut["best"] != whole["best"])
    i, j = cut["best"][kb], whole["best"][kb]
    assert np.all(np.abs(f[kb + (i,)] - f[kb + (j,)]) <= tf[kb + (i,)] + tf[kb + (j,)])
    W_tol = 4 * np.max(spread["W"], axis=(-2, -1)) + 8 * eps * np.max(np.abs(whole["W"]), axis=(-2, -1))
    same = cut["best"] == whole["best"]
    assert np.all((np.max(np.abs(cut["W"] - whole["W"]), axis=(-2, -1)) <= W_tol)[same])


# ------------------------------------------------------------------ the solver's pieces (issue 36)
def _ref_log_excess_copied(W, Xt, Zt, gt, ot, inst):
    """log E of each run with its instance's data copied per run and the scores as
    (X * Wz).sum(-1): the solver's objective before issue 36, the reference of the indexed one."""
    import torch
    X, Z, gam, opt = Xt[inst], Zt[inst], gt[inst], ot[inst]
    g1, lgap = path._consts(gam, opt)
    a = (X * (Z @ W.transpose(-1, -2)).unsqueeze(-2)).sum(-1)
    return losses.log_excess_loss(torch.log_softmax(a, -1), lgap, g1, "logistic", small_gap=0.0)


def _runs(seed=5, B=3, M=11, scale=2.0):
    import torch
    data, _ = _inst(4, 5, 6, seed=seed, B=B)
    Xt, Zt, gt, ot = path._prep(data, "logistic")
    gen = torch.Generator().manual_seed(seed)
    inst = torch.randint(0, B, (M,), generator=gen)                 # unsorted, uneven counts
    W = scale * torch.randn(M, 6, 6, generator=gen, dtype=torch.float64)
    return (Xt, Zt, gt, ot), inst, W


def test_objective_indexing_equals_copying():
    """path._Objective holds each instance's data once and groups the runs by instance (a padded
    grid); its value and gradient equal those of the per-run copies of the data (the solver
    before issue 36; gradient by autograd on the reference) to rounding, for runs in any order
    with uneven counts per instance (padding), and for take() with a mask and with repeated
    indices (Armijo's candidates). A run given another instance's rows, or the value of its
    row's padding (another run's) fails: every run's value moves by more than 0.01 (measured
    0.05 at least) when its rows are another instance's."""
    import torch
    tens, inst, W = _runs()
    obj = path._Objective(*tens, "logistic", inst)
    assert not obj.full and obj.grid.shape[0] == 3 and obj.grid.numel() > inst.numel()  # padded
    Wr = W.clone().requires_grad_(True)
    ref = _ref_log_excess_copied(Wr, *tens, inst)
    (gref,) = torch.autograd.grad(ref.sum(), Wr)
    f, g = obj(W)
    assert torch.allclose(f, ref.detach(), rtol=1e-13, atol=0)
    assert torch.allclose(g, gref, rtol=1e-10, atol=1e-14 * gref.abs().max())
    assert torch.equal(obj(W, grad=False), f)
    other = (inst + 1) % 3                                          # another instance's rows
    assert torch.min((_ref_log_excess_copied(W, *tens, other) - ref).abs()) > 0.01
    for idx in (inst == 1, torch.tensor([4, 4, 0, 9, 4, 2])):
        sub = obj.take(idx)
        assert torch.allclose(sub(W[idx], grad=False), ref.detach()[idx], rtol=1e-13, atol=0)
    # the solver's own batch (instance-major, as many runs each): the grid is the batch itself
    full = path._Objective(*tens, "logistic", torch.arange(3).repeat_interleave(4))
    assert full.full
    W12 = W[:12] if W.shape[0] >= 12 else torch.cat([W, W])[:12]
    assert torch.allclose(full(W12, grad=False),
                          _ref_log_excess_copied(W12, *tens, torch.arange(3).repeat_interleave(4)),
                          rtol=1e-13, atol=0)


class _Quadratic:
    """f(W) = ||W - C||^2 per run, with take (the contract of path._Objective): along
    D = -s (W - C) Armijo accepts lam iff lam s < 2 (1 - 1e-4), so the number of halvings is
    known, ceil(log2(s / 1.9998))."""

    def __init__(self, C):
        self.C = C

    def take(self, idx):
        return _Quadratic(self.C[idx])

    def __call__(self, W, grad=True):
        r = W - self.C
        f = (r * r).sum((-1, -2))
        return (f, 2 * r) if grad else f


def test_batched_armijo_picks_the_sequential_step():
    """path._armijo_batched (step 1 with the gradient, then the failing runs' halvings
    ARMIJO_CHUNK at a time in one batched pass) picks, for every run, the step of the sequential
    halving path._armijo (the whole batch at every halving), and returns the objective and
    gradient at the new point. On a quadratic (known steps): runs that accept the step 1, runs
    that need 1 to 23 halvings (three batched passes), a converged run (done, zero direction) and
    an ascent direction that no step of the 60 accepts (step 0, the point and its value kept);
    on Chapter 3's objective, random points and descent directions (steps 1 and 2^-12). Checked
    to fail: the last acceptable candidate of a pass instead of the first, and a pass that
    starts one halving late, each change the steps."""
    import torch
    gen = torch.Generator().manual_seed(6)
    M = 12
    C = torch.randn(M, 4, 4, generator=gen, dtype=torch.float64)
    W = torch.randn(M, 4, 4, generator=gen, dtype=torch.float64)
    obj = _Quadratic(C)
    f, g = obj(W)
    s = torch.tensor([0.5, 1.0, 1.9, 2.5, 5, 30, 300, 3e3, 3e4, 3e5, 1e7, 1e3], dtype=torch.float64)
    D = -s[:, None, None] * (W - C)
    D[-1] = -D[-1]                                                  # ascent: no step accepted
    done = torch.zeros(M, dtype=torch.bool)
    done[0] = True
    D[0] = 0
    slope = path._ip(g, D)
    ref = path._armijo(obj, W, D, f, slope, done)
    expect = torch.ceil(torch.log2(s / 1.9998)).clamp(min=0)
    assert torch.equal(-torch.log2(ref[1:-1]), expect[1:-1]) and ref[0] == 1 and ref[-1] == 0
    assert expect.max() > 2 * path.ARMIJO_CHUNK                      # three passes
    lam, Wn, fn, gn = path._armijo_batched(obj, W, D, f, g, slope, done)
    assert torch.equal(lam, ref)
    assert torch.equal(Wn, W + lam[:, None, None] * D)
    assert torch.equal(Wn[-1], W[-1]) and fn[-1] == f[-1]
    f2, g2 = obj(Wn)
    assert torch.equal(fn, f2) and torch.equal(gn, g2)


@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_batched_armijo_in_the_solver(norm, monkeypatch):
    """At every iteration of a path solve (Chapter 3's objective, two instances, four radii, the
    Frobenius and the nuclear ball, 300 iterations), path._armijo_batched's steps equal those of
    the sequential halving path._armijo on the same state, and some iterations need halvings
    (more than one step size occurs). Except where the decision is rounding: the candidates are
    evaluated in other batches than the sequential search's (the objective's rounding depends on
    the batch by an ulp, tests/rounding.py), so a run whose sufficient decrease
    1e-4 lam |slope| is below 64 ulp of its objective (a run at convergence, where Armijo's
    test compares values equal to rounding) may stop one halving apart; measured: a few such
    runs per solve, none other."""
    import torch
    data, opt = _inst(4, 4, 5, seed=3, B=2)
    Ws, _ = svm.att_svm_batch(data.X, data.Z, opt, norm=norm)
    seen, eps = [], torch.finfo(torch.float64).eps
    batched = path._armijo_batched

    def spy(obj, W, D, f, g, slope, done, chunk=None):
        out = batched(obj, W, D, f, g, slope, done, chunk)
        ref = path._armijo(obj, W, D, f, slope, done)
        differ = out[0] != ref
        big = torch.maximum(out[0], ref)
        assert torch.all(1e-4 * big[differ] * slope[differ].abs() <= 64 * eps * f[differ].abs())
        seen.append(out[0][~done & ~differ])
        return out

    monkeypatch.setattr(path, "_armijo_batched", spy)
    path.reg_path(data, np.geomspace(1.0, 50.0, 4), norm=norm, inits=2, W_svm=Ws, max_steps=300,
                  device="cpu")
    lams = torch.cat(seen)
    assert len(seen) > 100 and torch.any(lams < 1) and torch.any(lams == 1)


@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_residual_bound_decides_as_the_residual(norm, monkeypatch):
    """path._converged computes the projected-gradient residual only where its lower bound
    min(1, 1/alpha) ||P(W - alpha g) - W|| (Gafni-Bertsekas: ||P(W - a g) - W|| nondecreasing
    in a, divided by a nonincreasing) is below 2 tol. Checked: the bound holds on random points
    of the ball (both sides of alpha = 1, all scales of g); the decisions equal those of the
    residual computed for every run (_residual(...) < tol), on runs at, near and far from
    convergence; and the residual is computed for the near runs only (a spy). The bound holds
    up to 100 ulp of ||W|| + ||g|| (the slack _converged adds; measured: violations of 1% at
    residuals of 3e-14, rounding) and is tight: multiplied by 1.01 it fails."""
    import torch
    gen = torch.Generator().manual_seed(7 if norm == "fro" else 8)
    M, d = 400, 5
    R = torch.full((M,), 3.0, dtype=torch.float64)
    W = path._project(4 * torch.randn(M, d, d, generator=gen, dtype=torch.float64), R, norm)
    g = torch.randn(M, d, d, generator=gen, dtype=torch.float64)
    g *= torch.logspace(-14, 1, M, dtype=torch.float64)[:, None, None]
    alpha = torch.logspace(-3, 3, M, dtype=torch.float64)[torch.randperm(M, generator=gen)]
    D = path._project(W - alpha[:, None, None] * g, R, norm) - W
    res = path._residual(W, g, R, norm)
    lower = torch.linalg.matrix_norm(D) * (1 / alpha).clamp(max=1)
    ulp = torch.finfo(torch.float64).eps * (torch.linalg.matrix_norm(W) + torch.linalg.matrix_norm(g))
    assert torch.all(lower <= res + 100 * ulp)                      # the slack of _converged
    assert torch.any(lower * 1.01 > res + 100 * ulp)                # tight (alpha near 1)
    tol = 1e-10
    calls = []
    real = path._residual
    monkeypatch.setattr(path, "_residual", lambda W_, *a: calls.append(W_.shape[0]) or real(W_, *a))
    fast = path._converged(W, g, D, alpha, R, norm, tol)
    full = path._residual(W, g, R, norm) < tol
    assert torch.equal(fast, full) and 0 < int(full.sum()) < M
    assert calls[0] < M / 2 and calls[1] == M
