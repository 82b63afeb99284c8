"""Theory as tests for attnsvm.svm: KKT, duality, invariances, closed forms, infeasibility."""
import itertools

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnsvm.data import orthogonal, random_unit, separable
from attnsvm.svm import (InfeasibleError, att_svm, att_svm_batch, choose_formulation,
                         head_support, head_svm, in_cone, is_locally_optimal, linear_svm, p_svm, rank,
                         support_tokens)
from attnsvm.tokens import optimal_tokens, token_scores


def inst(n, T, d, seed=0, cross=True):
    D = random_unit(n, T, d, cross=cross, seed=seed)
    return D.X, D.y, D.Z, D.v, D.opt


def lifted(X, Z, sel):
    """A[i, t] = (x_{i,sel_i} - x_it) z_i^T, shape (n, T, d, d)."""
    n = X.shape[0]
    U = X[np.arange(n), sel][:, None, :] - X
    return U[..., :, None] * Z[:, None, None, :]


def margins(X, Z, sel, W):
    return np.einsum("ntjk,jk->nt", lifted(X, Z, sel), W)


def assert_kkt(X, Z, opt, W, lam, tol=1e-8):
    n, T, _ = X.shape
    A = lifted(X, Z, opt)
    off = np.ones((n, T), bool)
    off[np.arange(n), opt] = False
    mg = margins(X, Z, opt, W)[off]
    assert mg.min() >= 1 - 1e-10                                    # primal feasibility
    assert np.all(lam >= 0) and np.all(lam[~off] == 0)              # dual feasibility
    np.testing.assert_allclose(np.einsum("nt,ntjk->jk", lam, A), W,  # stationarity
                               atol=tol * np.abs(W).max())
    assert np.max(lam[off] * np.abs(mg - 1)) <= tol * max(lam.max(), 1)  # compl. slackness


# ----------------------------------------------------------------------------- Frobenius

@pytest.mark.parametrize("shape", [(6, 8, 10), (10, 4, 12), (40, 4, 8), (2, 5, 2), (1, 2, 3)])
@pytest.mark.parametrize("solver", ["primal", "dual"])
def test_kkt_frobenius(shape, solver):
    X, y, Z, v, opt = inst(*shape, seed=1)
    try:
        W, lam = att_svm(X, Z, opt, solver=solver, return_dual=True)
    except InfeasibleError:
        pytest.skip("infeasible draw")
    assert W.shape == (shape[2],) * 2 and W.dtype == np.float64
    assert_kkt(X, Z, opt, W, lam)


@pytest.mark.parametrize("shape", [(6, 8, 10), (10, 4, 12), (40, 4, 8), (2, 5, 2)])
def test_primal_dual_and_cvxpy_agree(shape):
    X, y, Z, v, opt = inst(*shape, seed=2)
    Ws = [att_svm(X, Z, opt, solver=s) for s in ("primal", "dual", "CLARABEL", None)]
    for W in Ws[1:]:
        np.testing.assert_allclose(W, Ws[0], rtol=0, atol=1e-6 * np.abs(Ws[0]).max())
    # objective values: primal 1/2||W||^2 equals dual sum(lam) - 1/2||W||^2
    W, lam = att_svm(X, Z, opt, return_dual=True)
    assert abs(np.sum(W * W) - lam.sum()) <= 1e-8 * np.sum(W * W)


def test_choose_formulation_rule():
    assert choose_formulation(140, 32 * 32) == "dual"
    assert choose_formulation(1400, 36) == "primal"


def test_rank_at_most_n():
    X, y, Z, v, opt = inst(3, 6, 12, seed=3)
    W = att_svm(X, Z, opt)
    assert rank(W) <= 3
    X, y, Z, v, opt = inst(5, 4, 8, seed=4, cross=False)
    assert rank(att_svm(X, Z, opt)) <= 5


def test_invariances():
    X, y, Z, v, opt = inst(7, 5, 9, seed=5)
    W = att_svm(X, Z, opt)
    rng = np.random.default_rng(0)
    # permuting the tokens of each sequence
    perm = np.stack([rng.permutation(5) for _ in range(7)])
    Xp = np.take_along_axis(X, perm[..., None], axis=1)
    optp = np.argmax(perm == opt[:, None], axis=1)
    np.testing.assert_allclose(att_svm(Xp, Z, optp), W, atol=1e-8)
    # permuting the sequences
    s = rng.permutation(7)
    np.testing.assert_allclose(att_svm(X[s], Z[s], opt[s]), W, atol=1e-8)
    # scaling the queries by c scales W by 1/c
    for c in (0.1, 3.0):
        np.testing.assert_allclose(att_svm(X, c * Z, opt), W / c, atol=1e-8 / c)


def test_orthogonal_closed_form():
    D = orthogonal(4, 5, 24, cross=True, seed=3)
    opt = D.opt
    W, lam = att_svm(D.X, D.Z, opt, return_dual=True)
    xbar = D.X.mean(axis=1)
    zz = np.sum(D.Z ** 2, axis=1)
    Wc = sum(np.outer(D.X[i, opt[i]] - xbar[i], D.Z[i]) / zz[i] for i in range(4))
    np.testing.assert_allclose(W, Wc, atol=1e-10)
    np.testing.assert_allclose(np.sum(W * W), 4 / 5 * np.sum(1 / zz), rtol=1e-10)
    off = np.ones((4, 5), bool)
    off[np.arange(4), opt] = False
    np.testing.assert_allclose(lam[off], np.repeat(1 / (5 * zz), 4), rtol=1e-8)


def test_batch_matches_single_and_flags_infeasible():
    D = random_unit(12, 4, 2, cross=True, trials=4, seed=0)
    W, feas = att_svm_batch(D.X, D.Z, D.opt)
    assert W.shape == (4, 2, 2) and feas.dtype == bool
    for b in range(4):
        try:
            Wb = att_svm(D.X[b], D.Z[b], D.opt[b])
            assert feas[b]
            np.testing.assert_allclose(W[b], Wb, atol=1e-9)
        except InfeasibleError:
            assert not feas[b] and np.all(W[b] == 0)
    D = random_unit(3, 4, 6, trials=3, seed=1)
    W, feas = att_svm_batch(D.X, D.Z, D.opt)
    assert feas.all() and np.all(np.linalg.norm(W, axis=(1, 2)) > 0)


# ----------------------------------------------------------------------------- infeasible

def tiny_infeasible():
    # d = 1: sequence 0 needs W >= 1, sequence 1 needs W <= -1
    X = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])
    return X, np.ones((2, 1)), np.array([0, 0])


@pytest.mark.parametrize("solver", [None, "primal", "dual", "CLARABEL"])
@pytest.mark.parametrize("norm", ["fro", "nuc", 1.5])
def test_infeasible_raises(solver, norm):
    X, Z, opt = tiny_infeasible()
    if norm != "fro" and solver in ("primal", "dual"):
        pytest.skip("primal/dual select Frobenius formulations")
    with pytest.raises(InfeasibleError, match=r"n=2, T=2, d=1"):
        att_svm(X, Z, opt, norm=norm, solver=solver)


@pytest.mark.slow
def test_infeasible_many_sequences_small_d():
    X, y, Z, v, opt = inst(200, 8, 3, seed=0)
    for solver in (None, "dual"):
        with pytest.raises(InfeasibleError, match="n=200"):
            att_svm(X, Z, opt, solver=solver)
    assert not is_locally_optimal(X, y, Z, v, opt)


def test_infeasible_p_and_linear():
    X = np.array([[[1.0], [0.0]], [[0.0], [1.0]]])
    with pytest.raises(InfeasibleError, match="p-SVM"):
        p_svm(X, [0, 0])
    with pytest.raises(InfeasibleError, match="linear SVM"):
        linear_svm(np.array([[1.0, 0.0], [2.0, 0.0]]), np.array([1.0, -1.0]))
    with pytest.raises(InfeasibleError):  # a selected token equal to another one
        att_svm(np.ones((2, 3, 2)), np.ones((2, 2)), [0, 1])


# ----------------------------------------------------------------------------- other norms

def test_nuclear_norm_duality_and_accuracy():
    X, y, Z, v, opt = inst(6, 5, 8, seed=6)
    W, lam = att_svm(X, Z, opt, norm="nuc", return_dual=True)
    off = np.ones((6, 5), bool)
    off[np.arange(6), opt] = False
    mg = margins(X, Z, opt, W)[off]
    assert mg.min() >= 1 - 1e-7
    nuc = np.linalg.svd(W, compute_uv=False).sum()
    # independent dual: max sum(lam) s.t. ||sum lam A||_2 <= 1, lam >= 0
    A = lifted(X, Z, opt)[off].reshape(-1, 64)
    mu = cp.Variable(A.shape[0])
    pr = cp.Problem(cp.Maximize(cp.sum(mu)),
                    [mu >= 0, cp.sigma_max(cp.reshape(A.T @ mu, (8, 8), order="C")) <= 1])
    pr.solve(solver="CLARABEL")
    assert abs(pr.value - nuc) <= 1e-6 * nuc
    # the returned multipliers are dual feasible and attain the value
    S = np.einsum("nt,ntjk->jk", lam, lifted(X, Z, opt))
    assert np.linalg.norm(S, 2) <= 1 + 1e-6
    assert abs(lam.sum() - nuc) <= 1e-6 * nuc
    # nuclear <= Frobenius solution's nuclear norm, and low rank
    Wf = att_svm(X, Z, opt)
    assert nuc <= np.linalg.svd(Wf, compute_uv=False).sum() * (1 + 1e-8)
    assert rank(W) <= rank(Wf)


def test_nuclear_orthogonal_value():
    D = orthogonal(3, 4, 12, seed=2)
    W = att_svm(D.X, D.Z, D.opt, norm="nuc")
    assert abs(np.linalg.svd(W, compute_uv=False).sum() - 3 * np.sqrt(3 / 4)) < 1e-7


@pytest.mark.parametrize("p", [1.5, 3.0, np.inf])
def test_lp_norm(p):
    X, y, Z, v, opt = inst(4, 3, 4, seed=7)
    W, lam = att_svm(X, Z, opt, norm=p, return_dual=True)
    off = np.ones((4, 3), bool)
    off[np.arange(4), opt] = False
    assert margins(X, Z, opt, W)[off].min() >= 1 - 1e-9
    q = 1.0 if p == np.inf else p / (p - 1)
    S = np.einsum("nt,ntjk->jk", lam, lifted(X, Z, opt)).ravel()
    assert np.linalg.norm(S, q) <= 1 + 1e-6
    assert abs(lam.sum() - np.linalg.norm(W.ravel(), p)) <= 1e-6 * lam.sum()


def test_lp_two_is_frobenius():
    X, y, Z, v, opt = inst(4, 3, 4, seed=8)
    np.testing.assert_allclose(att_svm(X, Z, opt, norm=2.0), att_svm(X, Z, opt), atol=1e-10)


def test_multi_token_selection():
    X, y, Z, v, opt = inst(3, 5, 6, seed=9)
    sets = [{int(opt[0]), (int(opt[0]) + 1) % 5}, [int(opt[1])], {int(opt[2])}]
    W, lam = att_svm(X, Z, sets, return_dual=True)
    assert lam.shape == (3, 5, 5)
    sc = np.einsum("ntd,nd->nt", X, Z @ W.T)      # x_it^T W z_i
    for i, S in enumerate(sets):
        S = sorted(S)
        rest = [t for t in range(5) if t not in S]
        assert np.ptp(sc[i, S]) <= 1e-7
        assert sc[i, S].min() - sc[i, rest].max() >= 1 - 1e-9
    A = np.einsum("nsd,ntd->nstd", X, np.ones_like(X)) - X[:, None]  # x_is - x_it
    Wsum = np.einsum("nst,nstd,ne->de", lam, A, Z)
    np.testing.assert_allclose(Wsum, W, atol=1e-6)
    # single-token sets are the ordinary problem
    np.testing.assert_allclose(att_svm(X, Z, [[int(o)] for o in opt]), att_svm(X, Z, opt),
                               atol=1e-12)


# ----------------------------------------------------------------------------- p, head, linear

def test_p_svm_kkt():
    X, y, Z, v, opt = inst(3, 4, 5, seed=10)
    p, lam = p_svm(X, opt, return_dual=True)
    U = X[np.arange(3), opt][:, None] - X
    off = np.ones((3, 4), bool)
    off[np.arange(3), opt] = False
    mg = (U @ p)[off]
    assert mg.min() >= 1 - 1e-10 and np.all(lam >= 0)
    np.testing.assert_allclose(np.einsum("nt,ntd->d", lam, U), p, atol=1e-9)
    assert np.max(lam[off] * np.abs(mg - 1)) <= 1e-8
    np.testing.assert_allclose(p_svm(X, opt, solver="CLARABEL"), p, atol=1e-6)


def test_relaxed_p_svm_kkt_reduction_and_direct_solve():
    """Relaxed p-SVM (margin 1 on the support sequences, >= 0 elsewhere): feasible, KKT
    certificate (p = sum lam U, lam >= 0, complementary slackness, zero duality gap), equal to a
    direct cvxpy solve, strictly shorter than the strict p-SVM here, and equal to it when every
    sequence is a support sequence."""
    import cvxpy as cp

    X, y, Z, v, opt = inst(6, 4, 20, seed=12)
    n, T, _ = X.shape
    sup = np.array([True, False, True, False, False, True])
    p, lam = p_svm(X, opt, support=sup, return_dual=True)
    U = X[np.arange(n), opt][:, None] - X
    off = np.ones((n, T), bool)
    off[np.arange(n), opt] = False
    b = np.broadcast_to(sup[:, None].astype(float), (n, T))
    mg = U @ p
    assert np.all(mg[off] >= b[off] - 1e-9) and np.all(lam >= 0)
    np.testing.assert_allclose(np.einsum("nt,ntd->d", lam, U), p, atol=1e-7)
    assert np.max(lam[off] * np.abs(mg - b)[off]) <= 1e-7
    assert abs(lam[sup].sum() - p @ p) <= 1e-7 * (p @ p)           # dual value = primal value
    q = cp.Variable(X.shape[2])
    cp.Problem(cp.Minimize(cp.sum_squares(q)),
               [U[i, t] @ q >= b[i, t] for i in range(n) for t in range(T) if off[i, t]]
               ).solve(solver="CLARABEL")
    np.testing.assert_allclose(p, q.value, atol=1e-6)
    strict = p_svm(X, opt)
    assert np.linalg.norm(p) < np.linalg.norm(strict) - 1e-3
    np.testing.assert_allclose(p_svm(X, opt, support=np.ones(n, bool)), strict, atol=1e-6)
    with pytest.raises(ValueError, match="support"):
        p_svm(X, opt, support=np.zeros(n, bool))
    with pytest.raises(ValueError, match="support"):
        p_svm(X, opt, support=np.ones(n - 1, bool))


def test_head_support_marks_the_head_svms_margin():
    X, y, Z, v, opt = inst(8, 3, 6, seed=13)
    sup = head_support(X, y, opt)
    vm = head_svm(X, y, opt)
    mg = y * (X[np.arange(8), opt] @ vm)
    assert sup.any() and not sup.all()
    np.testing.assert_array_equal(sup, mg <= 1 + 1e-6)


def test_linear_svm_kkt_and_separable_margin():
    L = separable(40, 5, margin=0.3, seed=1)
    w, lam = linear_svm(L.X, L.y, return_dual=True)
    mg = L.y * (L.X @ w)
    assert mg.min() >= 1 - 1e-10 and np.all(lam >= 0)
    np.testing.assert_allclose((lam * L.y) @ L.X, w, atol=1e-9)
    assert np.max(lam * np.abs(mg - 1)) <= 1e-8
    assert 1 / np.linalg.norm(w) >= 0.3 - 1e-9            # the promised margin
    np.testing.assert_allclose(linear_svm(L.X, L.y, solver="CLARABEL"), w, atol=1e-6)


def test_head_svm_uses_selected_tokens():
    X, y, Z, v, opt = inst(4, 3, 5, seed=11)
    alpha = (opt + 1) % 3
    np.testing.assert_allclose(head_svm(X, y, alpha), linear_svm(X[np.arange(4), alpha], y),
                               atol=1e-12)


# ----------------------------------------------------------------------------- tokens

def test_optimal_tokens_and_ties():
    X, y, Z, v, opt = inst(5, 4, 3, seed=12)
    g = y[:, None] * (X @ v)
    np.testing.assert_array_equal(opt, g.argmax(1))
    np.testing.assert_allclose(token_scores(X, y, v), g)
    X2 = X.copy()
    X2[3, (opt[3] + 1) % 4] = X2[3, opt[3]]
    with pytest.raises(ValueError, match="sequence i=3"):
        optimal_tokens(X2, y, v)
    D = random_unit(5, 4, 3, trials=3, seed=0)
    ob = optimal_tokens(D.X, D.y, D.v)
    assert ob.shape == (3, 5)
    for b in range(3):
        np.testing.assert_array_equal(ob[b], optimal_tokens(D.X[b], D.y[b], D.v[b]))


def test_local_optimality():
    X, y, Z, v, opt = inst(4, 3, 8, seed=13)
    assert is_locally_optimal(X, y, Z, v, opt)
    worst = np.argmin(y[:, None] * (X @ v), axis=1)
    # in this over-parameterized instance every token is a support token, so choosing the
    # worst token cannot be locally optimal
    mask = support_tokens(X, Z, worst)
    assert mask.sum() > 0 and not mask[np.arange(4), worst].any()
    assert not is_locally_optimal(X, y, Z, v, worst)
    # support tokens are exactly the positive multipliers here
    W, lam = att_svm(X, Z, opt, return_dual=True)
    np.testing.assert_array_equal(support_tokens(X, Z, opt, W), lam > 1e-9)


def test_in_cone_and_rank():
    X, y, Z, v, opt = inst(4, 3, 6, seed=14)
    W = att_svm(X, Z, opt)
    nw = np.linalg.norm(W)
    assert in_cone(3 * W, W, R0=nw, eps=1e-9)
    assert not in_cone(0.5 * W, W, R0=nw, eps=0.1)
    assert not in_cone(-W, W, R0=0, eps=0.5)
    E = np.random.default_rng(0).standard_normal(W.shape)
    batch = np.stack([W + 1e-3 * E, W + 10 * E, np.zeros_like(W)])
    np.testing.assert_array_equal(in_cone(batch, W, R0=0, eps=0.01), [True, False, False])
    assert rank(np.diag([1.0, 1e-8, 0])) == 1
    assert rank(1e-20 * np.diag([1.0, 1e-8, 0])) == 1
    assert rank(np.diag([1.0, 1e-5, 0])) == 2
    assert rank(np.zeros((3, 3))) == 0
    np.testing.assert_array_equal(rank(np.stack([np.eye(3), np.diag([1.0, 0, 0])])), [3, 1])


# ----------------------------------------------------------------------------- malformed input

GOOD = inst(3, 4, 5, seed=15)


@pytest.mark.parametrize("kwargs, match", [
    (dict(X=np.full((3, 4, 5), np.nan)), "X"),
    (dict(X=np.zeros((3, 1, 5))), "X"),
    (dict(X=np.zeros((0, 4, 5))), "X"),
    (dict(X=np.zeros((3, 4))), "X"),
    (dict(Z=np.zeros((3, 4))), "Z"),
    (dict(Z=np.full((3, 5), np.inf)), "Z"),
    (dict(alpha=np.array([0, 1, 4])), "alpha"),
    (dict(alpha=np.array([0, 1])), "alpha"),
    (dict(alpha=np.array([0.5, 1, 2])), "alpha"),
    (dict(alpha=[{0, 1}, {0}, set()]), "alpha"),
    (dict(alpha=[{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 1, 2, 3}]), "alpha"),
    (dict(norm="operator"), "norm"),
    (dict(norm=0.5), "norm"),
    (dict(solver="NOPE"), "solver"),
    (dict(norm="nuc", solver="dual"), "solver"),
])
def test_att_svm_malformed(kwargs, match):
    X, y, Z, v, opt = GOOD
    args = dict(X=X, Z=Z, alpha=opt)
    args.update(kwargs)
    extra = {k: args.pop(k) for k in ("norm", "solver") if k in args}
    with pytest.raises(ValueError, match=match):
        att_svm(args["X"], args["Z"], args["alpha"], **extra)


def test_other_malformed():
    X, y, Z, v, opt = GOOD
    with pytest.raises(ValueError, match="y"):
        optimal_tokens(X, y[:2], v)
    with pytest.raises(ValueError, match="v"):
        optimal_tokens(X, y, np.full(5, np.nan))
    with pytest.raises(ValueError, match="y"):
        linear_svm(X[:, 0], 2 * y)
    with pytest.raises(ValueError, match="alpha"):
        head_svm(X, y, [0, 0, 9])
    with pytest.raises(ValueError, match="alpha"):
        support_tokens(X, Z, [0, 0])
    with pytest.raises(ValueError, match="W"):
        support_tokens(X, Z, opt, W=np.zeros((4, 4)))
    with pytest.raises(ValueError, match="R0"):
        in_cone(np.eye(2), np.eye(2), R0=-1, eps=0.1)
    with pytest.raises(ValueError, match="W_mm_alpha"):
        in_cone(np.eye(2), np.zeros((2, 2)), R0=0, eps=0.1)
    with pytest.raises(ValueError, match="rtol"):
        rank(np.eye(2), rtol=0)
    with pytest.raises(ValueError, match="alpha"):
        att_svm_batch(X[None], Z[None], opt)


# ----------------------------------------------------------------------------- property-based

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 6), T=st.integers(2, 5), d=st.integers(1, 6),
       seed=st.integers(0, 10 ** 6), cross=st.booleans())
def test_property_kkt_or_infeasible(n, T, d, seed, cross):
    D = random_unit(n, T, d, cross=cross, seed=seed)
    opt = np.argmax(D.gamma, axis=1)
    try:
        W, lam = att_svm(D.X, D.Z, opt, return_dual=True)
    except InfeasibleError:
        # the certified answer must not depend on the formulation
        with pytest.raises(InfeasibleError):
            att_svm(D.X, D.Z, opt, solver="CLARABEL")
        return
    assert_kkt(D.X, D.Z, opt, W, lam, tol=1e-7)
    assert rank(W) <= n
    other = "primal" if choose_formulation(n * (T - 1), d * d) == "dual" else "dual"
    W2 = att_svm(D.X, D.Z, opt, solver=other)
    assert np.linalg.norm(W2 - W) <= 1e-6 * np.linalg.norm(W)


@settings(max_examples=15, deadline=None)
@given(alpha_seed=st.integers(0, 10 ** 6))
def test_property_every_alpha_feasible_overparameterized(alpha_seed):
    D = random_unit(3, 3, 4, seed=alpha_seed % 97)          # d >= n
    alpha = np.random.default_rng(alpha_seed).integers(0, 3, size=3)
    W, lam = att_svm(D.X, D.Z, alpha, return_dual=True)
    assert_kkt(D.X, D.Z, alpha, W, lam, tol=1e-7)


def test_every_choice_feasible_small_enumeration():
    D = random_unit(2, 3, 2, seed=4)
    for alpha in itertools.product(range(3), repeat=2):
        att_svm(D.X, D.Z, np.array(alpha))


def test_linear_svm_batched_equals_one_at_a_time():
    data = separable(12, 4, trials=3, seed=4)
    from attnsvm.svm import linear_svm
    W, lam = linear_svm(data.X, data.y, return_dual=True)
    assert W.shape == (3, 4) and lam.shape == (3, 12)
    for b in range(3):
        np.testing.assert_allclose(W[b], linear_svm(data.X[b], data.y[b]), rtol=1e-9, atol=1e-12)


def test_linear_svm_batched_names_the_infeasible_trial():
    from attnsvm.svm import InfeasibleError, linear_svm
    X = np.ones((2, 2, 1))
    y = np.array([[1.0, 1.0], [1.0, -1.0]])
    with pytest.raises(InfeasibleError, match="trial 1"):
        linear_svm(X, y)


def test_att_svm_batch_strict_names_the_infeasible_trials():
    X = np.ones((2, 2, 2, 1))
    X[:, :, 1, 0] = 0.0
    Z = np.ones((2, 2, 1))
    Z[1, 1, 0] = -1.0                      # trial 1: y_i z_i of both signs in d = 1 -> infeasible
    opt = np.zeros((2, 2), dtype=int)
    W, feas = att_svm_batch(X, Z, opt)
    assert feas.tolist() == [True, False] and np.all(W[1] == 0)
    with pytest.raises(InfeasibleError, match=r"trials \[1\] of 2"):
        att_svm_batch(X, Z, opt, strict=True)


def test_head_svm_batched_equals_per_trial_and_names_an_infeasible_trial():
    from attnsvm.data import random_unit
    from attnsvm.svm import head_svm

    data = random_unit(5, 4, 6, trials=3, seed=11)
    alpha = data.opt
    V = head_svm(data.X, data.y, alpha)
    assert V.shape == (3, 6)
    for b in range(3):
        np.testing.assert_allclose(V[b], head_svm(data.X[b], data.y[b], alpha[b]), atol=1e-10)
    X = data.X.copy()
    X[2, 1, alpha[2, 1]] = X[2, 0, alpha[2, 0]]           # two sequences share a token ...
    y = data.y.copy()
    y[2, 1] = -y[2, 0]                                    # ... with opposite labels: infeasible
    with pytest.raises(InfeasibleError, match="trial 2"):
        head_svm(X, y, alpha)
