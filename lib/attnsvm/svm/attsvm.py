"""The SVMs: ``att_svm``, ``att_svm_batch``, ``p_svm`` (strict or relaxed), ``head_support``,
``linear_svm``, ``head_svm``."""
from __future__ import annotations


import numpy as np

from .._checks import as_float_array, renamed
from ..norms import parse_norm
from ._common import (InfeasibleError, SolverError, per_trial, _check_alpha, _check_X, _check_Z, _constraints,
                      _lam_array, _parse_selection, _Problem)
from ._cvx import _cvx_solve, _post_check
from ._ipm import _fro_ipm, choose_formulation

__all__ = ["att_svm", "att_svm_batch", "p_svm", "head_support", "linear_svm", "head_svm", "joint_references"]


# ----------------------------------------------------------------------------- driver

def _parse_solver(solver, norm):
    """-> (engine, form): engine "ipm" or a cvxpy solver name; form "auto"/"primal"/"dual"."""
    if solver is None or solver == "auto":
        return ("ipm" if norm == "fro" else "CLARABEL"), "auto"
    if not isinstance(solver, str):
        raise ValueError(f"solver must be None, 'auto', 'primal', 'dual' or a cvxpy solver "
                         f"name, got {solver!r}")
    if solver in ("primal", "dual"):
        if norm != "fro":
            raise ValueError(f"solver={solver!r} selects a Frobenius formulation; "
                             f"norm={norm!r} needs a cvxpy solver name or None")
        return "ipm", solver
    import cvxpy as cp  # deferred: cvxpy is heavy to import

    name = solver.upper()
    if name not in cp.installed_solvers():
        raise ValueError(f"solver must be None, 'auto', 'primal', 'dual' or one of the "
                         f"installed cvxpy solvers {cp.installed_solvers()}, got {solver!r}")
    return name, "auto"


def _solve(prob, norm, solver):
    engine, form = _parse_solver(solver, norm)
    one = ~prob.eq & ~prob.zero
    zero = np.linalg.norm(prob.U, axis=1) == 0
    if prob.kind == "att":
        zero |= np.linalg.norm(prob.Zs, axis=1) == 0
    if np.any(zero & one):         # A_k = 0 cannot satisfy <A_k, W> >= 1
        raise prob.infeasible()
    if form == "auto":
        form = choose_formulation(prob.K, prob.m) if norm == "fro" else "primal"
    if norm != "fro" and form == "dual":
        form = "primal"
    if engine == "ipm":
        if not prob.eq.any() and not prob.zero.any():
            out = _fro_ipm(prob, form)
            if out is not None:
                prob.status = "optimal"            # verified by the interior point's checks
                return out
        # certified fallback (and multi-token selections), in the cheaper cvxpy form
        engine, form = "CLARABEL", choose_formulation(prob.K, prob.m)
    W, lam = _cvx_solve(prob, norm, engine, form)
    return _post_check(prob, W, lam)


@renamed(opt="alpha")
def att_svm(X, Z, alpha, *, norm="fro", solver=None, return_dual=False, return_status=False):
    r"""The attention SVM :math:`W^{\alpha}_{mm}` for the selected tokens ``alpha``.

    .. math::

        \min_W \|W\| \quad\text{s.t.}\quad (x_{i,\alpha_i} - x_{it})^\top W z_i \ge 1
        \quad \forall i,\ t \ne \alpha_i .

    Parameters
    ----------
    X : array_like, shape (n, T, d)
        Tokens; ``n >= 1``, ``T >= 2``, finite.
    Z : array_like, shape (n, d)
        Queries :math:`z_i`.
    alpha : array_like of int, shape (n,), or list of n token sets
        The selected token of each sequence (e.g. ``opt`` from :func:`optimal_tokens`, or any
        choice). A list whose entries are sets (or lists) of tokens asks for a
        multi-token selection: the tokens :math:`s \in S_i` get equal scores,
        :math:`(x_{is} - x_{is'})^\top W z_i = 0`, and every other token scores at least 1
        lower, :math:`(x_{is} - x_{it})^\top W z_i \ge 1` for :math:`s\in S_i, t \notin S_i`.
        A set may hold all ``T`` tokens (a sequence whose attention stays a mixture of all
        of them): that sequence contributes only the equalities, no margin constraint. At
        least one sequence must leave a token out (else the solution would be 0).
    norm : {"fro", "nuc", "spectral"} or float
        ``"fro"``: Frobenius norm (:math:`W_{mm}`); ``"nuc"``: nuclear norm
        (:math:`W^*_{mm}`, an SDP); ``"spectral"``: the largest singular value
        :math:`\|W\|_2` (an SDP); a real ``p >= 1``: the entrywise :math:`\ell_p` norm
        :math:`(\sum_{jk} |W_{jk}|^p)^{1/p}` (``p = inf`` or ``"inf"`` allowed; ``p = 2`` is
        ``"fro"``).
    solver : None, "auto", "primal", "dual" or a cvxpy solver name
        ``None``/``"auto"``: Frobenius with the built-in interior-point method in the
        formulation of :func:`choose_formulation`; other norms with Clarabel.
        ``"primal"``/``"dual"`` (Frobenius only): force the built-in method's formulation.
        A cvxpy solver name (``"CLARABEL"``, ``"SCS"``, ...): solve the cvxpy model with that
        solver (Frobenius: the primal or dual QP as :func:`choose_formulation` says; other
        norms: the primal cone program). Whatever is asked, infeasibility is decided by a
        cvxpy solver's certificate (primal infeasible / dual unbounded), with Clarabel when
        the built-in method was used.
    return_dual : bool
        Also return the multipliers.
    return_status : bool
        Also return the solver's status (last): ``"optimal"``, or ``"optimal_inaccurate"``
        when Clarabel stopped short of its tolerances (the solution still passed the margin
        post-check below).

    Returns
    -------
    W : ndarray, shape (d, d), float64
        The solution; every margin constraint holds (smallest margin >= 1 up to rounding).
    lam : ndarray, only if ``return_dual``
        Shape (n, T) with ``lam[i, t]`` the multiplier of the constraint of token ``t`` in
        sequence ``i`` (0 at the selected token), or (n, T, T) for a multi-token selection
        with ``lam[i, s, t]`` that of the pair (s selected, t); equality rows (t the first
        token of :math:`S_i`) may have either sign. Then
        :math:`\sum_{i,t} \lambda_{it} (x_{i,\alpha_i} - x_{it}) z_i^\top` equals ``W``
        for ``norm="fro"`` (the multipliers of :math:`\tfrac12\|W\|_F^2`); for the other
        norms the sum lies in the subdifferential of the norm at ``W`` (its dual norm is
        at most 1) and :math:`\sum \lambda = \|W\|` (multipliers of :math:`\|W\|`).
    status : str, only if ``return_status``

    Raises
    ------
    InfeasibleError
        If no ``W`` satisfies the constraints (the message names n, T, d).
    ValueError
        Malformed input (the message names the argument).
    SolverError
        If the solver's answer does not pass the post-checks.
    """
    X = _check_X(X)
    n, T, d = X.shape
    Z = _check_Z(Z, n, d)
    norm = parse_norm(norm, matrix=("fro", "nuc", "spectral"))
    norm = "fro" if norm == 2 else norm
    alpha, sets = _parse_selection(alpha, n, T, "alpha")
    c = _constraints(X, alpha, sets)
    prob = _Problem("att", c.U, Z[c.seq], c.eq, "Att-SVM", f"n={n}, T={T}, d={d}")
    W, lam = _solve(prob, norm, solver)
    out = (W, _lam_array(c, lam, n, T, sets is not None)) if return_dual else (W,)
    if return_status:
        out += (prob.status,)
    return out if len(out) > 1 else W


#: the per-trial statuses of ``att_svm_batch(..., return_status=True)``
BATCH_STATUSES = ("optimal", "optimal_inaccurate", "infeasible", "failed")


@renamed(opt="alpha")
def att_svm_batch(X, Z, alpha, *, norm="fro", solver=None, strict=False, return_status=False):
    r"""Solve :func:`att_svm` for each trial of a batch (the one batched Att-SVM of the library).

    Parameters
    ----------
    X : array_like, shape (B, n, T, d)
    Z : array_like, shape (B, n, d)
    alpha : array_like of int, shape (B, n), or a sequence of ``B`` selections
        One token per sequence and trial, or, per trial, anything :func:`att_svm` takes
        (e.g. a list of ``n`` token sets: the multi-token Att-SVM).
    norm, solver
        As in :func:`att_svm`.
    strict : bool
        Raise :class:`InfeasibleError`, naming the infeasible trials, instead of flagging them.
    return_status : bool
        Also return each trial's status, one of ``BATCH_STATUSES``: ``"optimal"``,
        ``"optimal_inaccurate"`` (a solution that passed the margin post-check although the
        solver stopped short of its tolerances), ``"infeasible"``, or ``"failed"`` (the solver
        raised :class:`SolverError`; without ``return_status`` that error propagates).

    Returns
    -------
    W : ndarray, shape (B, d, d)
        The solutions; the entries of infeasible (and failed) trials are all zeros.
    feasible : ndarray of bool, shape (B,)
        False exactly for the trials whose SVM is infeasible (:class:`InfeasibleError`), and,
        with ``return_status``, for those whose solve failed: the trials with a solution.
        Use ``W[feasible]``; never treat a zero matrix as a solution.
    status : ndarray of str, shape (B,), only if ``return_status``
    """
    X = as_float_array("X", X, ndim=4)
    B = X.shape[0]
    Z = as_float_array("Z", Z, shape=(B, X.shape[1], X.shape[3]))
    sels = _batch_selections(alpha, X.shape[:2])
    d = X.shape[-1]
    W = np.zeros((B, d, d))
    feasible = np.zeros(B, dtype=bool)
    status = np.full(B, "infeasible", dtype=object)
    for b in range(B):
        try:
            W[b], status[b] = att_svm(X[b], Z[b], sels[b], norm=norm, solver=solver,
                                      return_status=True)
            feasible[b] = True
        except InfeasibleError:
            pass
        except SolverError:
            if not return_status:
                raise
            status[b] = "failed"
    if strict and np.any(status == "infeasible"):
        raise InfeasibleError(f"the Att-SVM is infeasible in trials "
                              f"{np.flatnonzero(status == 'infeasible').tolist()}"
                              f" of {B} (n={X.shape[1]}, T={X.shape[2]}, d={d})")
    if return_status:
        return W, feasible, status.astype(str)
    return W, feasible


def _is_sets(sel):
    return not isinstance(sel, np.ndarray) and any(isinstance(s, (tuple, list, set)) for s in sel)


def _batch_selections(alpha, shape):
    """Per-trial selections of :func:`att_svm_batch`: an int array (B, n) or B selections."""
    B, n = shape
    if not isinstance(alpha, np.ndarray) and len(alpha) == B and any(_is_sets(o) for o in alpha):
        return [[tuple(s) for s in o] if _is_sets(o) else np.asarray(o, dtype=np.int64)
                for o in alpha]
    alpha = np.asarray(alpha)
    if alpha.shape != (B, n):
        raise ValueError(f"alpha must have shape {(B, n)}, got {alpha.shape}")
    return alpha


@renamed(opt="alpha")
def p_svm(X, alpha, *, support=None, solver=None, return_dual=False):
    r"""The prompt-attention SVM :math:`p_{mm}`, or its relaxed form.

    .. math::

        p_{mm} = \arg\min_p \|p\|_2 \quad\text{s.t.}\quad
        (x_{i,\alpha_i} - x_{it})^\top p \ge b_i \quad \forall i,\ t\ne \alpha_i,

    with :math:`b_i = 1` for every sequence (the strict p-SVM) or, given ``support``,
    :math:`b_i = 1` on the support sequences and :math:`b_i = 0` elsewhere (the *relaxed* p-SVM:
    the selection margin is required only where the head is a support vector; elsewhere the
    selected token must merely not lose). When :math:`(p, v)` are trained jointly and the head
    tends to :math:`v_{mm}` (:func:`head_svm`), the loss of a sequence that is not a support
    vector of :math:`v_{mm}` decays faster than that of a support sequence, so only the support
    sequences need to push :math:`p` along; the relaxed p-SVM is the reference this suggests
    (:func:`head_support` gives its mask). KKT: :math:`p = \sum_{it}\lambda_{it}
    (x_{i,\alpha_i} - x_{it})`, :math:`\lambda \ge 0`,
    :math:`\lambda_{it}((x_{i,\alpha_i} - x_{it})^\top p - b_i) = 0`. Relaxing can only
    lower the norm; with every sequence a support sequence it is the strict p-SVM.

    Parameters
    ----------
    X : array_like, shape (n, T, d)
    alpha : array_like of int (n,), or list of token sets (as in :func:`att_svm`)
    support : array_like of bool, shape (n,), optional
        The sequences that keep margin 1 (at least one); None: all (the strict p-SVM).
    solver : as in :func:`att_svm` (norm is Euclidean; the relaxed problem is solved by cvxpy)
    return_dual : bool
        Also return multipliers ``lam`` (n, T) with
        :math:`p_{mm} = \sum_{it} \lambda_{it}(x_{i,\alpha_i} - x_{it})` (or (n, T, T)
        for sets).

    Returns
    -------
    p : ndarray, shape (d,)

    Raises
    ------
    InfeasibleError
        If no ``p`` satisfies the constraints.
    ValueError
        Malformed input, or a ``support`` without any True entry (the solution would be 0).
    """
    X = _check_X(X)
    n, T, d = X.shape
    alpha, sets = _parse_selection(alpha, n, T, "alpha")
    c = _constraints(X, alpha, sets)
    zero = None
    if support is not None:
        sup = np.asarray(support)
        if sup.shape != (n,) or sup.dtype != bool:
            raise ValueError(f"support must be a boolean array of shape ({n},), got "
                             f"{sup.dtype} {sup.shape}")
        if not sup.any():
            raise ValueError("support must mark at least one sequence (with none, the relaxed "
                             "p-SVM's solution is 0)")
        zero = ~sup[c.seq]
    prob = _Problem("vec", c.U, None, c.eq, "p-SVM", f"n={n}, T={T}, d={d}", zero=zero)
    p, lam = _solve(prob, "fro", solver)
    if return_dual:
        return p, _lam_array(c, lam, n, T, sets is not None)
    return p


def head_support(X, y, alpha, *, tol=1e-6, solver=None):
    r"""The support sequences of the max-margin head :math:`v_{mm}` = :func:`head_svm`: the
    ``i`` with :math:`y_i v_{mm}^\top x_{i\alpha_i} \le 1 + \mathrm{tol}` (on the margin), the
    mask ``support`` of the relaxed :func:`p_svm`.

    Parameters
    ----------
    X : array_like, shape (n, T, d); y : (n,); alpha : int (n,)
    tol : float
        Margin tolerance (relative to 1).

    Returns
    -------
    support : ndarray of bool, shape (n,)

    Raises
    ------
    InfeasibleError
        If the selected tokens are not linearly separable through the origin.
    """
    X = _check_X(X)
    n, T, _ = X.shape
    alpha = _check_alpha(alpha, n, T, "alpha")
    y = _check_labels(y, n)
    v = head_svm(X, y, alpha, solver=solver)
    return y * (X[np.arange(n), alpha] @ v) <= 1 + float(tol)


def linear_svm(X, y, *, solver=None, return_dual=False):
    r"""The hard-margin linear SVM without bias for separable data.

    .. math::

        w_{mm} = \arg\min_w \|w\|_2 \quad\text{s.t.}\quad y_i w^\top x_i \ge 1 \ \forall i,

    whose geometric margin is :math:`1/\|w_{mm}\|`. KKT:
    :math:`w_{mm} = \sum_i \lambda_i y_i x_i`, :math:`\lambda \ge 0`,
    :math:`\lambda_i (y_i w_{mm}^\top x_i - 1) = 0`.

    Parameters
    ----------
    X : array_like, shape (n, d) or (B, n, d)
        With a leading trials axis, one SVM is solved per trial.
    y : array_like, shape (n,) or (B, n), entries +1 or -1
    solver : as in :func:`att_svm` (norm is Euclidean)
    return_dual : bool
        Also return ``lam`` (n,) (or (B, n)).

    Returns
    -------
    w : ndarray, shape (d,) or (B, d)

    Raises
    ------
    InfeasibleError
        If the data (of some trial, named in the message) are not linearly separable through the
        origin.
    """
    X = as_float_array("X", X, min_ndim=2, max_ndim=3)
    if X.ndim == 3:
        y = as_float_array("y", y, shape=X.shape[:2])
        out = per_trial(lambda Xb, yb: linear_svm(Xb, yb, solver=solver, return_dual=True), X, y)
        w = np.stack([o[0] for o in out])
        return (w, np.stack([o[1] for o in out])) if return_dual else w
    n, d = X.shape
    if n == 0:
        raise ValueError("X must hold at least one sample (n >= 1), got n = 0")
    y = _check_labels(y, n)
    prob = _Problem("vec", y[:, None] * X, None, None, "linear SVM", f"n={n}, d={d}")
    w, lam = _solve(prob, "fro", solver)
    return (w, lam) if return_dual else w


def _check_labels(y, n, name="y"):
    y = as_float_array(name, y, shape=(n,))
    if not np.all(np.abs(y) == 1):
        raise ValueError(f"{name} must contain only +1 and -1")
    return y


def head_svm(X, y, alpha, *, solver=None, return_dual=False):
    r"""The max-margin head on the selected tokens: :func:`linear_svm` of
    :math:`(x_{i,\alpha_i}, y_i)`.

    .. math::

        v_{mm} = \arg\min_v \|v\|_2 \quad\text{s.t.}\quad y_i v^\top x_{i\alpha_i} \ge 1 .

    When :math:`p` (or :math:`W`) and :math:`v` are trained jointly and attention selects
    the tokens :math:`\alpha`, the head's direction tends to :math:`v_{mm}`, while
    :math:`p` tends to the direction of ``p_svm(X, alpha)`` (or ``att_svm(X, Z, alpha)``).

    Parameters
    ----------
    X : array_like, shape (n, T, d) or (B, n, T, d)
    y : array_like, shape (n,) or (B, n)
    alpha : array_like of int, shape (n,) or (B, n)
    solver, return_dual : as in :func:`linear_svm`

    Returns
    -------
    v : ndarray, shape (d,) or (B, d) (one SVM per trial; an infeasible trial is named)

    Raises
    ------
    InfeasibleError
        If the selected tokens are not linearly separable through the origin.
    """
    if np.ndim(X) == 4:
        out = per_trial(lambda Xb, yb, ab: head_svm(Xb, yb, ab, solver=solver, return_dual=True),
                        np.asarray(X, dtype=float), np.asarray(y, dtype=float), np.asarray(alpha))
        v = np.stack([o[0] for o in out])
        return (v, np.stack([o[1] for o in out])) if return_dual else v
    X = _check_X(X)
    n, T, _ = X.shape
    y = _check_labels(y, n)
    alpha = _check_alpha(alpha, n, T, "alpha")
    return linear_svm(X[np.arange(n), alpha], y, solver=solver, return_dual=return_dual)


def joint_references(data, alpha):
    """Per trial, the Frobenius attention SVM (``att_svm_batch(X, Z, alpha, strict=True)``) and the max-margin head
    ``head_svm(X, y, alpha)``; an infeasible trial raises (it is reported, never zero-filled)."""
    W = att_svm_batch(data.X, data.Z, alpha, strict=True)[0]
    v = np.stack([head_svm(data.X[b], data.y[b], alpha[b]) for b in range(data.trials)])
    return W, v
