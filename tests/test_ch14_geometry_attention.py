"""Part IV, "Geometry in attention": the SVMs and the observed mirror-descent bias, checked.

Labels refer to book/ch14_geometry_attention.md.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import attnsvm as A
from attnsvm.experiments import geometry as G


@pytest.fixture(scope="module")
def inst():
    data = A.data.random_unit(4, 5, 6, cross=True, trials=4, seed=1)
    return data


def _margins(X, Z, opt, W):
    n, T, _ = X.shape
    return np.array([(X[i, opt[i]] - X[i, t]) @ W @ Z[i] for i in range(n) for t in range(T) if t != opt[i]])


def test_spectral_att_svm_is_optimal_in_its_norm(inst):
    X, Z, opt = inst.X[0], inst.Z[0], inst.opt[0]
    Ws = A.svm.att_svm_spectral(X, Z, opt)
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
    a = A.runs.fit_margin(model, W0, batch, optimizer="md", p=2.0, lr=0.1, normalize=True, steps=50, loss="logistic")
    b = A.runs.fit_margin(model, W0, batch, optimizer="sd", norm=2, lr=0.1, steps=50, loss="logistic")
    np.testing.assert_allclose(a["iterates"], b["iterates"], atol=1e-10)


def test_md_l3_selects_l3_att_svm():
    """Observed result of the chapter (Julistiono et al., abstract level), on other instances."""
    data = A.data.random_unit(4, 5, 8, cross=True, trials=4, seed=7)
    model = A.models.AttentionClassifier("W")
    batch = {k: torch.as_tensor(getattr(data, k)) for k in ("X", "y", "Z")}
    W0 = model.init_params(8, torch.as_tensor(data.v), [np.random.default_rng(b) for b in range(4)])
    r = A.runs.fit_margin(model, W0, batch, optimizer="md", p=3.0, lr=0.1, normalize=True, steps=1500,
               loss="logistic", record_steps=[1500])
    W = r["iterates"][-1]
    sel = A.metrics.attention(data.X, W, data.Z).argmax(-1)
    c3 = [A.metrics.corr(W[b], A.svm.att_svm(data.X[b], data.Z[b], sel[b], norm=3.0)) for b in range(4)]
    c175 = [A.metrics.corr(W[b], A.svm.att_svm(data.X[b], data.Z[b], sel[b], norm=1.75)) for b in range(4)]
    assert np.median(c3) >= 0.97
    assert np.median(c3) > np.median(c175)


def _constraints(X, Z, alpha):
    """The Att-SVM constraint matrices A_k = (x_{i alpha_i} - x_{it}) z_i^T, t != alpha_i: (K, d, d)."""
    n, T, _ = X.shape
    return np.array([np.outer(X[i, alpha[i]] - X[i, t], Z[i]) for i in range(n) for t in range(T)
                     if t != alpha[i]])


_DUAL = {np.inf: lambda M: np.abs(M).sum(), "spectral": lambda M: np.linalg.norm(M, "nuc")}


def _certificate_gap(Amat, W, norm):
    r"""Relative duality gap of a dual certificate for the Att-SVM min ||W|| s.t. <A_k, W> >= 1.

    The Lagrange dual is max sum(lam) s.t. lam >= 0, ||sum_k lam_k A_k||_* <= 1 (l_1 for the
    entrywise l_inf norm, nuclear for the spectral norm). lam is found by solving that dual as a
    problem of its own; it is then made exactly dual feasible (clipped at 0, divided by the dual
    norm of sum lam_k A_k when that exceeds 1), so sum(lam) is a lower bound of every feasible
    ||W'|| (weak duality). W, rescaled to smallest margin 1, is feasible; a gap ~0 proves it optimal.
    """
    import cvxpy as cp

    K, d, _ = Amat.shape
    lam = cp.Variable(K, nonneg=True)
    M = cp.reshape(Amat.reshape(K, -1).T @ lam, (d, d), order="C")
    dual = cp.norm1(cp.vec(M, order="C")) if norm == np.inf else cp.normNuc(M)
    cp.Problem(cp.Maximize(cp.sum(lam)), [dual <= 1]).solve(solver="CLARABEL")
    lv = np.clip(np.asarray(lam.value, dtype=float), 0.0, None)
    lv = lv / max(1.0, _DUAL[norm](np.tensordot(lv, Amat, axes=1)))
    W = W / np.tensordot(Amat, W, axes=2).min()                 # feasible: smallest margin 1
    primal = A.norms.matrix_norm(W, norm)
    return (primal - lv.sum()) / primal


@pytest.mark.parametrize("norm", [np.inf, "spectral"])
def test_att_svm_dual_certificate(inst, norm):
    """The l_inf and spectral Att-SVMs are optimal by a dual certificate: zero duality gap (to
    1e-6) against an independently solved, exactly feasible dual point. The check can fail: the
    Frobenius Att-SVM (feasible, not optimal in these norms) leaves a gap above 1e-2, and so does
    the solution of the other norm."""
    other = {np.inf: "spectral", "spectral": np.inf}[norm]
    for b in range(len(inst.X)):
        X, Z, opt = inst.X[b], inst.Z[b], inst.opt[b]
        Amat = _constraints(X, Z, opt)
        W = A.svm.att_svm(X, Z, opt, norm=norm)
        assert -1e-9 <= _certificate_gap(Amat, W, norm) <= 1e-6
        assert _certificate_gap(Amat, A.svm.att_svm(X, Z, opt), norm) >= 1e-2
        assert _certificate_gap(Amat, A.svm.att_svm(X, Z, opt, norm=other), norm) >= 1e-2


@pytest.mark.parametrize("decay", [0.0, 0.5])
def test_adam_without_moments_is_sign_descent(inst, decay):
    """Adam with beta_1 = beta_2 = 0 and eps = 0 takes m = g, v = g^2, so its step
    eta_t g / sqrt(g^2) = eta_t sign(g) is sign descent's, step for step (same schedule), on the
    attention model (to 1e-13 over 100 steps). The check can fail: with beta_2 = 0.5 the iterates
    differ after one step."""
    model = A.models.AttentionClassifier("W")
    batch = {k: torch.as_tensor(getattr(inst, k)) for k in ("X", "y", "Z")}
    W0 = model.init_params(6, torch.as_tensor(inst.v), [np.random.default_rng(b) for b in range(4)])
    rec = np.arange(1, 101)
    kw = dict(steps=100, lr=0.05, decay=decay, loss="logistic", record_steps=rec)
    sign = A.runs.fit_margin(model, W0, batch, optimizer="sd", norm="inf", **kw)["iterates"]
    adam = A.runs.fit_margin(model, W0, batch, optimizer="adam", betas=(0.0, 0.0), eps=0.0, **kw)
    # equal up to the rounding of (eta g)/|g| against eta sign(g): one ulp per step
    np.testing.assert_allclose(adam["iterates"], sign, rtol=0, atol=1e-13)
    np.testing.assert_allclose(
        A.runs.fit_margin(model, W0, batch, optimizer="sign", **kw)["iterates"], sign, rtol=0, atol=1e-13)
    other = A.runs.fit_margin(model, W0, batch, optimizer="adam", betas=(0.0, 0.5), eps=0.0, **kw)
    assert np.abs(other["iterates"][1] - sign[1]).max() > 1e-3


def test_bad_input(inst):
    X, Z = inst.X[0], inst.Z[0]
    with pytest.raises(ValueError, match="alpha"):
        A.svm.att_svm_spectral(X, Z, np.array([0, 1, 9, 0]))
    with pytest.raises(ValueError, match="Z"):
        A.svm.att_svm_spectral(X, Z[:2], inst.opt[0])


# ----------------------------------------------------------------------------- batched Att-SVMs, statuses

@pytest.mark.parametrize("norm", [np.inf, 3.0, "spectral"])
def test_att_svm_batch_status_equals_per_trial(inst, norm):
    """The batched solve (with each trial's status) gives the per-trial solutions."""
    W, ok, status = A.svm.att_svm_batch(inst.X, inst.Z, inst.opt, norm=norm, return_status=True)
    assert ok.all() and set(status) <= {"optimal", "optimal_inaccurate"}
    for b in range(len(W)):
        Wb, sb = A.svm.att_svm(inst.X[b], inst.Z[b], inst.opt[b], norm=norm, return_status=True)
        np.testing.assert_allclose(W[b], Wb, atol=1e-12)
        assert sb == status[b]
        # the solution attains the largest normalized margin in its norm: ratio 1 against itself,
        # and the Frobenius solution (another feasible point) is not better in this norm
        best = A.svm.att_margin_in_norm(Wb, inst.X[b], inst.Z[b], inst.opt[b], norm)
        assert best == pytest.approx(1.0 / A.norms.matrix_norm(Wb, norm), rel=1e-9)
        Wf = A.svm.att_svm(inst.X[b], inst.Z[b], inst.opt[b])
        assert A.svm.att_margin_in_norm(Wf, inst.X[b], inst.Z[b], inst.opt[b], norm) <= best * (1 + 1e-7)


def test_att_svm_batch_reports_failed_and_infeasible_trials(inst, monkeypatch):
    """A failed solve is reported by name for its trial (not raised, not counted from warnings),
    an infeasible selection as 'infeasible'; without return_status the failure propagates."""
    import attnsvm.svm.attsvm as mod
    real = mod.att_svm
    X, Z, opt = inst.X.copy(), inst.Z.copy(), inst.opt.copy()
    X[2, 0, :, :] = X[2, 0, 0, :]           # trial 2, sequence 0: all tokens equal -> infeasible

    def flaky(Xb, *args, **kw):
        if np.array_equal(Xb, X[1]):
            raise A.svm.SolverError("simulated failure")
        return real(Xb, *args, **kw)

    monkeypatch.setattr(mod, "att_svm", flaky)
    W, ok, status = A.svm.att_svm_batch(X, Z, opt, norm=3.0, return_status=True)
    assert status[1] == "failed" and status[2] == "infeasible"
    assert set(status[[0, 3]]) <= {"optimal", "optimal_inaccurate"}
    assert ok.tolist() == [True, False, False, True]
    assert np.all(W[1] == 0) and np.all(W[2] == 0)
    with pytest.raises(A.svm.SolverError, match="simulated"):
        A.svm.att_svm_batch(X, Z, opt, norm=3.0)
    with pytest.raises(A.svm.InfeasibleError, match=r"trials \[2\]"):
        A.svm.att_svm_batch(X, Z, opt, norm=3.0, strict=True, return_status=True)
    # the driver names both, per (run, norm, trial)
    fin = {"r": np.stack([A.svm.att_svm(inst.X[b], inst.Z[b], inst.opt[b]) for b in range(4)])}
    cmp = A.svm.compare_att_svms(X, Z, fin, {"r": [3.0]})
    flagged = {(b, s) for _, _, b, s in cmp.flagged()}
    assert (1, "failed") in flagged
    assert np.isnan(cmp.corr["r", 3.0][1]) and np.isnan(cmp.ratio["r", 3.0][1])
    assert cmp.summary()["n_failed"] >= 1


def test_compare_att_svms_equals_per_trial(inst):
    """Correlations and own-norm margin ratios of the driver equal a per-trial computation."""
    rng = np.random.default_rng(0)
    B, n, T, d = inst.X.shape
    fin = {"a": np.stack([A.svm.att_svm(inst.X[b], inst.Z[b], inst.opt[b]) for b in range(B)])
           + 0.05 * rng.standard_normal((B, d, d)), "b": rng.standard_normal((B, d, d))}
    norms = {"a": [2.0, np.inf, "spectral"], "b": [3.0]}
    cmp = A.svm.compare_att_svms(inst.X, inst.Z, fin, norms, opt=inst.opt)
    for k, qs in norms.items():
        for q in qs:
            for b in range(B):
                s = A.metrics.attention(inst.X[b], fin[k][b], inst.Z[b]).argmax(-1)
                np.testing.assert_array_equal(cmp.sel[k][b], s)
                try:
                    Ws = A.svm.att_svm(inst.X[b], inst.Z[b], s, norm=q)
                except A.svm.InfeasibleError:
                    assert np.isnan(cmp.corr[k, q][b]) and cmp.status[k, q][b] == "infeasible"
                    continue
                m = np.array([(inst.X[b, i, s[i]] - inst.X[b, i, t]) @ fin[k][b] @ inst.Z[b, i]
                              for i in range(n) for t in range(T) if t != s[i]])
                if q == "spectral":
                    nw, ns = np.linalg.norm(fin[k][b], 2), np.linalg.norm(Ws, 2)
                else:
                    pq = 2.0 if q == 2.0 else q
                    nw = np.linalg.norm(fin[k][b].ravel(), ord=pq)
                    ns = np.linalg.norm(Ws.ravel(), ord=pq)
                assert cmp.ratio[k, q][b] == pytest.approx(m.min() / nw * ns, rel=1e-9)
                assert cmp.corr[k, q][b] == pytest.approx(A.metrics.corr(fin[k][b], Ws), abs=1e-9)
    assert cmp.ratio["a", 2.0].max() <= 1 + 1e-9        # nothing beats the Att-SVM in its norm
    assert cmp.ratio["a", 2.0].min() > 0.5 and cmp.opt_frac["a"] == 1.0
    with pytest.raises(ValueError, match="norms"):
        A.svm.compare_att_svms(inst.X, inst.Z, fin, {"c": [2.0]})


def test_att_margin_gap(inst):
    """1 - gamma(W_t)/gamma(W_mm) is 0 at the Att-SVM (and its multiples), positive elsewhere."""
    W = A.svm.att_svm_batch(inst.X, inst.Z, inst.opt, strict=True)[0]
    rng = np.random.default_rng(3)
    its = np.stack([W, 3.0 * W, W + 0.1 * rng.standard_normal(W.shape)])
    gap = A.svm.att_margin_gap(its, inst.X, inst.Z, inst.opt, W)
    np.testing.assert_allclose(gap[:2], 0.0, atol=1e-9)
    assert np.all(gap[2] > 0)
    for b in range(len(W)):          # the per-trial computation
        m = _margins(inst.X[b], inst.Z[b], inst.opt[b], its[2, b]).min() / np.linalg.norm(its[2, b])
        assert gap[2, b] == pytest.approx(1 - m * np.linalg.norm(W[b]), rel=1e-9)


def test_prgd_attention_rate_observed():
    """Observed in the chapter, checked here on other instances: PRGD's attention margin gap has a
    nearly constant per-phase rate, NGD's falls."""
    data = A.data.random_unit(6, 8, 10, cross=True, trials=4, seed=5)
    model = A.models.AttentionClassifier("W")
    batch = {k: torch.as_tensor(getattr(data, k)) for k in ("X", "y", "Z")}
    W0 = model.init_params(10, torch.as_tensor(data.v), [np.random.default_rng(b) for b in range(4)])
    batch["G"] = model.head_values(W0, batch["X"])
    rec = np.arange(0, 4001, 100)
    ratio = {}
    for k, kw in {"ngd": dict(optimizer="sd", norm=2), "prgd": dict(optimizer="prgd", period=100, growth=1.5)}.items():
        r = A.runs.fit_margin(model, W0, batch, steps=4000, lr=0.3, loss="logistic", record_steps=rec, **kw)
        sel = A.tokens.selected_tokens(data.X, r["iterates"][-1], data.Z)     # the Att-SVM of the selected tokens
        W_sel = A.svm.att_svm_batch(data.X, data.Z, sel, strict=True)[0]
        gap = A.svm.att_margin_gap(r["iterates"], data.X, data.Z, sel, W_sel)
        early = A.metrics.phase_fit(r["steps"], gap, 100, stop=2000)[0]
        late = A.metrics.phase_fit(r["steps"], gap, 100, start=2000)[0]
        ratio[k] = np.median(late / early)
    assert 2 / 3 <= ratio["prgd"] <= 3 / 2
    assert ratio["ngd"] < 0.5



CLAIMS = {"md_diag", "md_l3_rises", "md_l3_short", "sign_linf", "spec", "adam_linf_rises",
          "adam_large_beta2_slow", "adam_beta2_order", "adam_fro_flat", "adam_lags_sign",
          "svms_solved", "prgd_beats_ngd_att", "prgd_att_rate_constant", "prgd_att_gap"}


def test_attention_geometry_small():
    """The chapter's driver at a small size: the claims the notebook checks, those that hold at
    this size, the summary in range, and a claim that turns false against its numbers."""
    r = G.attention_geometry(4, 5, 6, trials=2, steps=300, rate_steps=1000, device="cpu")
    c, s = r.claims(), r.summary()
    assert set(c) == CLAIMS
    assert all(isinstance(h, bool) and isinstance(t, str) for h, t in c.values())
    for name in ("md_diag", "sign_linf", "spec", "svms_solved", "prgd_beats_ngd_att",
                 "adam_linf_rises", "adam_beta2_order", "md_l3_short"):
        assert c[name][0], c[name][1]
    assert s["n_solves"] == sum(s.size for s in r.cmp.status.values()) > 0
    assert all(0 <= s[k] <= 1 + 1e-9 for k in s if k.startswith("own_ratio_"))
    assert r.flagged_solves() == "none"
    # the Adam records: one run per beta_2, at steps, 10 steps / 3, 10 steps, ratios in [0, 1]
    assert [s[f"adam_h{i}"] for i in range(3)] == [300, 1000, 3000]
    assert all(0 <= s[k] <= 1 + 1e-9 for k in s if k.startswith(("adam_linf_", "adam_fro_")))
    W = r.adam_cmp.svms["adam_0.99_1000", np.inf]
    assert np.allclose(W, A.svm.att_svm_batch(r.data.X, r.data.Z, r.adam_cmp.sel["adam_0.99_1000"],
                                              norm=np.inf)[0], atol=1e-12)
    # each claim is computed from the ratios: break the numbers, the claim turns false
    r.cmp.ratio["sign", np.inf][:] = 0.0                   # sign descent far from the l_inf SVM
    assert not r.claims()["sign_linf"][0]
    r.cmp.ratio["md3", 2.0][:] = 1.0                       # MD-3 best in the l_2 norm
    assert not r.claims()["md_diag"][0]
    r.adam_cmp.ratio["adam_0.99_3000", np.inf][:] = 0.0    # Adam's l_inf ratio falls at the end
    c = r.claims()
    assert not c["adam_linf_rises"][0] and not c["adam_fro_flat"][0]
    r.adam_cmp.ratio["adam_0.999_3000", np.inf][:] = 0.99  # beta_2 = 0.999 fastest
    c = r.claims()
    assert not c["adam_beta2_order"][0] and not c["adam_large_beta2_slow"][0]
    r.md_ratio[3.0][-1] = 0.99                             # MD-3 at its l_3 Att-SVM
    assert not r.claims()["md_l3_short"][0]
    with pytest.raises(ValueError, match="ps must contain 2.0"):
        G.attention_geometry(4, 5, 6, trials=1, steps=2, ps=(3.0,))


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 7, 12])
def test_quick_profile_claims(seed):
    """The notebook's quick-profile run: every claim of the chapter holds, at seed 0 and at two
    other seeds (a claim is a finding only if it survives a change of seed)."""
    c = G.attention_geometry(device="cpu", seed=seed).claims()
    assert all(h for h, _ in c.values()), {k: t for k, (h, t) in c.items() if not h}


# ------------------------------------------------------------------ thm-sd-att (proved here)
#: the start of each run: the Att-SVM of another norm, far from the own-norm one
_SD_START = {np.inf: 1.0, 3.0: 1.0, "spectral": "nuc"}
#: regression pins (not the theorem): max over t of gap_t / r_t, measured at seed 0, 1500 steps,
#: reached at t = t0 for every norm; they keep the factors quoted in the docstring true
_SD_TIGHT = {np.inf: 0.89, 3.0: 0.81, "spectral": 0.74}


def _sd_run(norm, steps=1500, n=2, decay=0.0, start=0.01):
    """Normalized steepest descent in ``norm`` on an equal-score instance (n sequences, T = 2,
    d = 3), from W_{t0} = k W^{start}_mm with E(W_{t0}) = start eps0, at the theorem's largest step
    eta_max (t - t0 + 1)^{-decay}. Returns the constants, the steps, N0, the gaps and E."""
    from attnsvm.bounds import sd_att_constants
    from attnsvm.data import score_instances
    from attnsvm.losses import excess_loss, risk_grad, scale_to_excess
    from attnsvm.optim import steepest_direction
    from attnsvm.norms import matrix_norm
    from attnsvm.tokens import opt_margins

    data, opt = score_instances(n, 2, 3, seed=0)
    X, Z = data.X[0], data.Z[0]
    W_own = A.svm.att_svm(X, Z, opt[0], norm=norm)
    c = {k: float(v[0]) for k, v in sd_att_constants(data, opt, W_own[None], norm).items()}
    W_start = A.svm.att_svm(X, Z, opt[0], norm=_SD_START[norm])
    W = scale_to_excess(data, opt, W_start[None], c["eps0"] * start)[0] * W_start
    eta = c["eta_max"] * (np.arange(steps) + 1.0) ** -decay
    gaps, E = np.empty(steps + 1), np.empty(steps + 1)
    N0 = float(matrix_norm(W, norm))
    for t in range(steps + 1):
        gaps[t] = c["gamma"] - opt_margins(data, opt, W[None]).min() / matrix_norm(W, norm)
        E[t] = excess_loss(data, opt, W[None])[0]
        if t < steps:
            D = steepest_direction(torch.as_tensor(risk_grad(data, W[None])), norm).numpy()[0]
            W = W - eta[t] * D
    return c, eta, N0, gaps, E


@pytest.mark.parametrize("norm", [np.inf, 3.0, "spectral"])
def test_sd_att_margin_rate(norm):
    """thm-sd-att: sign descent (l_inf), l_3 steepest descent and spectral descent on an
    equal-score instance, from inside the region (E = eps0/100) along the Att-SVM of another
    norm (l_1, l_1, nuclear), at the theorem's largest constant step, 1,500 steps. Checked: (a) the
    excess risk contracts by (1 - eta mu/2) per step (the proof's one-step inequality; the measured
    contraction is about 3 times the guaranteed one); (b) the proof's summed descent inequality
    log(E_t0/E_t) >= gamma S_t - E_t0/eps0 - H Q_t/2 at every step; (c) the own-norm margin gap
    stays below r_t at every step.

    What binds where (measured). (c) binds only at t = t0: max_t gap_t/r_t = 0.89 (l_inf), 0.81
    (l_3), 0.74 (spectral), attained at t0, where r_t0 = gamma + c0/N0 involves none of eta, H,
    B, S; the factors 1.12, 1.23, 1.34 by which r_t may be divided before (c) fails measure the
    static inequality m_min >= log(2 eps0/E) - E/eps0 at the start, not the descent argument. In
    r_t, doubling the rate term (gamma S_t -> 2 gamma S_t) is caught by (c) only after 146-222
    steps (57-79 on the n = 1 runs below), and a factor 1.2 on it not at all (only in the n = 1
    l_inf run, from step 1407). (b) binds the descent part along the run: the
    smallest factor on gamma S_t that it catches is 1.36 (l_inf), 1.34 (l_3), 1.37 (spectral)
    (at the last step), and doubling gamma S_t is caught from step 3-4 on. H and B are not
    exercised: H enters only through the carried-over curvature term H Q_t/2, and the tests are
    one-sided, so an overestimated H passes unless the constant-step floor H eta/2 binds, which it
    does not here (deleting the H Q_t/2 term from r_t leaves every gap below r_t; without it (b)
    still holds with margin 1.03, 1.01, 1.03); B enters only through the step condition.
    The pins ratio.max() == 0.89/0.81/0.74 are regression pins of the measured values above, not
    part of the theorem. Later the ratio gap/r_t falls (its minimum over the run: 0.68, 0.35,
    0.34): the bound is looser there, where its H Q_t/2 term grows."""
    from attnsvm.bounds import sd_att_margin_bound

    c, eta, N0, gaps, E = _sd_run(norm)
    r = sd_att_margin_bound(eta, E[0], N0, gamma=c["gamma"], eps0=c["eps0"], H=c["H"], B=c["B"])
    S, Q = np.concatenate([[0.0], np.cumsum(eta)]), np.concatenate([[0.0], np.cumsum(eta ** 2)])
    assert E[0] <= c["eps0"]
    assert np.all(E[1:] <= (1 - eta * c["mu"] / 2) * E[:-1] * (1 + 1e-9))
    assert np.all(np.log(E[0] / E) >= c["gamma"] * S - E[0] / c["eps0"] - c["H"] * Q / 2 - 1e-9)
    assert np.all(gaps <= r + 1e-9)
    ratio = gaps / r
    assert ratio.max() > 0.5                       # r_t / 2 is violated (at t0)
    assert ratio.max() == pytest.approx(_SD_TIGHT[norm], abs=0.02)      # regression pin
    assert r[-1] < r[0] and gaps[-1] < gaps[0]     # the bound decays, and so does the gap


@pytest.mark.parametrize("norm", [np.inf, 3.0])
def test_sd_att_rate_tight_along_the_run(norm):
    """thm-sd-att at the rate schedule eta_s = eta_max (s - t0 + 1)^{-1/2}, on one sequence
    (n = 1, T = 2, d = 3), from E = eps0/100 along the l_1 Att-SVM, 2,000 steps.

    This instance is degenerate for every norm: with n = 1 and T = 2, -grad L = c A for the single
    constraint matrix A, so the steepest direction D_t is the same at every step and the margin is
    exactly m(W_t) = m0 + gamma S_t (the spectral case is degenerate even as a steepest-descent
    run, so it is checked on n = 2 above only). The run is also short: S_T/N0 = 0.15 (l_inf) and
    0.26 (l_3), so the O(log t/sqrt t) order of the theorem is not probed; what this test checks is
    that r_t stays valid and close along a run whose gap falls by 13% and 28%. Measured: gap_t/r_t
    is at least 0.967 (l_inf) and 0.834 (l_3) at every step (at t0: 0.973 and 0.934), so halving
    r_t fails at every step, and dividing r_t by 1.03 (l_inf) or 1.071 (l_3) fails at t0 (by 1.07
    it still passes for l_3: 0.93414 x 1.07 = 0.9995). The summed descent inequality of the proof,
    log(E_t0/E_t) >= gamma S_t - E_t0/eps0 - H Q_t/2, binds here to a factor 1.034 on gamma S_t
    (a factor 1.2 is caught from step 19 on). The pinned ratio.min() values are regression pins,
    not the theorem. H is not exercised (H Q_T/2 = 0.09)."""
    from attnsvm.bounds import sd_att_margin_bound

    c, eta, N0, gaps, E = _sd_run(norm, steps=2000, n=1, decay=0.5)
    r = sd_att_margin_bound(eta, E[0], N0, gamma=c["gamma"], eps0=c["eps0"], H=c["H"], B=c["B"])
    S, Q = np.concatenate([[0.0], np.cumsum(eta)]), np.concatenate([[0.0], np.cumsum(eta ** 2)])
    assert np.all(E[1:] <= (1 - eta * c["mu"] / 2) * E[:-1] * (1 + 1e-9))
    assert np.all(np.log(E[0] / E) >= c["gamma"] * S - E[0] / c["eps0"] - c["H"] * Q / 2 - 1e-9)
    ratio = gaps / r
    assert np.all(ratio <= 1 + 1e-9)
    assert np.all(ratio > 0.5)                      # r_t / 2 is violated at every step
    assert ratio.min() == pytest.approx({np.inf: 0.97, 3.0: 0.84}[norm], abs=0.02)  # regression pin
    assert gaps[-1] < {np.inf: 0.9, 3.0: 0.8}[norm] * gaps[0]


#: regression pins (not the theorem): max over t of gap_t / r_t from the edge of the region
#: (E(W_t0) = 0.999 eps0), seed 0, 400 steps; with c_0 = 0, and with c_0's part E(W_t0)/eps0 dropped
_SD_EDGE = {np.inf: (0.557, 0.597, 0.717), 3.0: (0.390, 0.430, 0.562), "spectral": (0.305, 0.340, 0.468)}


@pytest.mark.parametrize("norm", [np.inf, 3.0, "spectral"])
def test_sd_att_from_the_edge_of_the_region(norm):
    """thm-sd-att from the edge of the region, E(W_t0) = 0.999 eps0 (the runs of
    test_sd_att_margin_rate otherwise: n = 2, T = 2, d = 3, seed 0, the Att-SVM of another norm,
    the largest constant step; 400 steps), where c_0 = E/eps0 - log(2 eps0/E) = 0.305 > 0 (it
    is -5.29 at eps0/100): (a) the contraction, (b) the summed descent inequality with its term
    E(W_t0)/eps0, (c) gap_t <= r_t at every step.

    Measured: max_t gap_t/r_t = 0.557 (l_inf, at t0), 0.390 (l_3, step 23), 0.305 (spectral,
    step 33), so dividing r_t by 1.80, 2.56, 3.28 fails (c); the bound is looser at the edge than
    at eps0/100 (0.89, 0.81, 0.74). What does not bind (observed, pinned below): c_0 itself.
    With c_0 = 0 the ratio is at most 0.597, 0.430, 0.340, and with its part E(W_t0)/eps0
    dropped 0.717, 0.562, 0.468, so dropping c_0, or dividing it by any factor, is not caught.
    The reason: at t0, gap <= r_t0 with c_0 >= 0 says only m_min(W_t0) >= 0, which holds on the
    region (m_min >= log 2 there), and along the run the margin gains more than
    gamma S_t - H Q_t/2. In (b) too the term E(W_t0)/eps0 is not needed: log(E_t0/E_t) >=
    gamma S_t - H Q_t/2 holds at every step without it (here even gamma S_t alone; on the n = 1
    instance from the same start, 300 steps, gamma S_t alone fails by 0.25 at the last step, and
    either term covers it)."""
    from attnsvm.bounds import sd_att_margin_bound

    c, eta, N0, gaps, E = _sd_run(norm, steps=400, start=0.999)
    e0 = E[0] / c["eps0"]
    assert 0.99 <= e0 <= 1.0
    r = sd_att_margin_bound(eta, E[0], N0, gamma=c["gamma"], eps0=c["eps0"], H=c["H"], B=c["B"])
    S, Q = np.concatenate([[0.0], np.cumsum(eta)]), np.concatenate([[0.0], np.cumsum(eta ** 2)])
    c0 = e0 - np.log(2 / e0)
    assert c0 > 0.3
    assert np.all(E[1:] <= (1 - eta * c["mu"] / 2) * E[:-1] * (1 + 1e-9))
    assert np.all(np.log(E[0] / E) >= c["gamma"] * S - e0 - c["H"] * Q / 2 - 1e-9)
    assert np.all(gaps <= r + 1e-9)
    ratio = gaps / r
    assert ratio.max() > 0.25                                               # r_t / 4 fails
    no_c0 = gaps * (N0 + S) / (c["gamma"] * N0 + c["H"] * Q / 2)            # r_t with c_0 = 0
    no_e0 = gaps * (N0 + S) / (c["gamma"] * N0 + c0 - e0 + c["H"] * Q / 2)  # without E(W_t0)/eps0
    pins = _SD_EDGE[norm]
    for got, want in zip((ratio.max(), no_c0.max(), no_e0.max()), pins):
        assert got == pytest.approx(want, abs=0.02)                         # regression pins
    assert np.all(np.log(E[0] / E) >= c["gamma"] * S - c["H"] * Q / 2 - 1e-9)   # observed


def test_sd_att_bound_rejects_bad_input():
    from attnsvm.bounds import sd_att_margin_bound

    kw = dict(gamma=1.0, eps0=0.1, H=10.0, B=2.0)
    with pytest.raises(ValueError, match="etas"):
        sd_att_margin_bound([1.0], 0.05, 1.0, **kw)
    with pytest.raises(ValueError, match="E_t0"):
        sd_att_margin_bound([0.01], 0.2, 1.0, **kw)
