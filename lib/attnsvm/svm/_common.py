"""Shared pieces of the SVM solvers: errors, validation, constraint lists, the problem."""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass

import numpy as np

from .._checks import as_float_array
from ..data import NTPSeqData, support_sets


#: Clarabel settings used for every cone program (tight; the defaults are 1e-8).
CLARABEL_OPTIONS = dict(tol_gap_abs=1e-10, tol_gap_rel=1e-10, tol_feas=1e-10, max_iter=400,
                        direct_solve_method="faer")

#: tolerance for ties between token scores (relative to max(1, |gamma|))
#: largest relative constraint violation that is repaired by rescaling W
_RESCALE_TOL = 1e-6


class InfeasibleError(ValueError):
    """No matrix (or vector) satisfies the SVM's constraints; the message names the sizes."""


class SolverError(RuntimeError):
    """A solver failed to return a solution that passes the post-checks."""


def solve_quietly(problem, solver: str = "CLARABEL", **opts) -> None:
    """``problem.solve(solver=solver, **opts)`` without cvxpy's "Solution may be inaccurate"
    warning: the caller reads the same fact from ``problem.status`` (``"optimal_inaccurate"``)
    and checks or reports it, so the warning would only print a line (and a path of this
    machine) on a notebook page. Other warnings and every error pass through."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Solution may be inaccurate",
                                category=UserWarning)
        problem.solve(solver=solver, **opts)


# ----------------------------------------------------------------------------- validation

def per_trial(solve, *arrays):
    """Solve one problem per trial: ``solve(*(a[b] for a in arrays))`` for every index ``b`` of
    the leading (trials) axis, as a list. An infeasible trial raises :class:`InfeasibleError`
    naming it (the batched form of every solver of this package)."""
    out = []
    for b in range(len(arrays[0])):
        try:
            out.append(solve(*(a[b] for a in arrays)))
        except InfeasibleError as exc:
            raise InfeasibleError(f"trial {b}: {exc}") from None
    return out


def _check_X(X, name="X"):
    X = as_float_array(name, X, ndim=3)
    n, T, _ = X.shape
    if n == 0:
        raise ValueError(f"{name} must hold at least one sequence (n >= 1), got n = 0")
    if T < 2:
        raise ValueError(f"{name} must have at least T = 2 tokens per sequence, got T = {T}")
    return X


def _check_Z(Z, n, d):
    return as_float_array("Z", Z, shape=(n, d))


def _check_alpha(alpha, n, T, name="opt"):
    """Validate a choice of one token per sequence: int array (n,) with entries in [0, T)."""
    a = np.asarray(alpha)
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or a.dtype == object
                               or np.issubdtype(a.dtype, np.floating)):
        raise ValueError(f"{name} must be an integer array of shape ({n},), got dtype {a.dtype}")
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {a.shape}")
    if np.issubdtype(a.dtype, np.floating):
        if not np.all(np.isfinite(a)) or np.any(a != np.round(a)):
            raise ValueError(f"{name} must contain integers")
    a = a.astype(np.int64)
    if np.any(a < 0) or np.any(a >= T):
        bad = int(np.flatnonzero((a < 0) | (a >= T))[0])
        raise ValueError(f"{name}[{bad}] = {a[bad]} is out of range [0, {T})")
    return a


def _parse_selection(opt, n, T, name="opt"):
    """Return ``(alpha, sets)``: ``alpha`` (n,) int for single-token selections (sets None),
    or ``sets`` a list of sorted tuples for a multi-token selection (alpha None). A set may hold
    all ``T`` tokens (that sequence then contributes equalities only, no margin row), but not
    every set."""
    if isinstance(opt, (list, tuple)) and any(
            isinstance(o, (set, frozenset, list, tuple, np.ndarray)) for o in opt):
        if len(opt) != n:
            raise ValueError(f"{name} must list one token set per sequence ({n}), got {len(opt)}")
        sets = []
        for i, o in enumerate(opt):
            s = [o] if isinstance(o, numbers.Integral) else list(o)
            if not s or any(isinstance(t, bool) or not isinstance(t, numbers.Integral) for t in s):
                raise ValueError(f"{name}[{i}] must be a non-empty set of integer token indices")
            s = sorted({int(t) for t in s})
            if s[0] < 0 or s[-1] >= T:
                raise ValueError(f"{name}[{i}] = {s} has a token out of range [0, {T})")
            sets.append(tuple(s))
        if all(len(s) == T for s in sets):
            raise ValueError(f"every set of {name} holds all {T} tokens: no margin constraint "
                             f"is left and the only solution is 0 (no direction)")
        if all(len(s) == 1 for s in sets):
            return np.array([s[0] for s in sets], dtype=np.int64), None
        return None, sets
    return _check_alpha(opt, n, T, name), None


# ----------------------------------------------------------------------------- constraints

@dataclass(frozen=True)
class _Cons:
    """Constraint rows k: margin_k(W) = U[k]^T W Z[seq[k]] (``>= 1``, or ``== 0`` if eq[k])."""

    U: np.ndarray      # (K, d) x_{i,sel} - x_{it}
    seq: np.ndarray    # (K,) i
    sel: np.ndarray    # (K,) selected token s
    tok: np.ndarray    # (K,) other token t
    eq: np.ndarray     # (K,) bool


def _constraints(X, alpha, sets):
    n, T, _ = X.shape
    if sets is None:
        mask = np.ones((n, T), dtype=bool)
        mask[np.arange(n), alpha] = False
        seq, tok = np.nonzero(mask)
        sel = alpha[seq]
        eq = np.zeros(seq.size, dtype=bool)
    else:
        rows = []
        for i, s in enumerate(sets):
            rows += [(i, a, t, False) for a in s for t in range(T) if t not in s]
            rows += [(i, a, s[0], True) for a in s[1:]]
        seq, sel, tok, eq = (np.array(c) for c in zip(*rows))
        eq = eq.astype(bool)
    U = X[seq, sel] - X[seq, tok]
    return _Cons(U, seq, sel, tok, eq)


def _lam_array(c, lam, n, T, multi):
    """Multipliers per constraint -> (n, T) (single token) or (n, T, T) [i, s, t] (sets)."""
    if not multi:
        out = np.zeros((n, T))
        out[c.seq, c.tok] = lam
    else:
        out = np.zeros((n, T, T))
        np.add.at(out, (c.seq, c.sel, c.tok), lam)
    return out



class _Problem:
    """A hard-margin SVM without bias, ``min ||w|| s.t. <A_k, w> >= 1`` (``== 0`` for eq rows,
    ``>= 0`` for zero rows).

    ``kind="att"``: :math:`A_k = U_k z_{seq_k}^\\top` (w is d x d); ``kind="vec"``: ``A_k = U_k``.
    """

    def __init__(self, kind, U, Zs=None, eq=None, what="SVM", sizes="", zero=None):
        self.kind, self.U, self.Zs = kind, U, Zs
        self.K, self.d = U.shape
        self.eq = np.zeros(self.K, dtype=bool) if eq is None else eq
        #: inequality rows with right-hand side 0 (``<A_k, w> >= 0``; the relaxed p-SVM)
        self.zero = np.zeros(self.K, dtype=bool) if zero is None else zero & ~self.eq
        self.m = self.d * self.d if kind == "att" else self.d
        self.what, self.sizes = what, sizes
        #: the solver's status once solved: "optimal" (the built-in interior point, verified)
        #: or cvxpy's status string (e.g. "optimal_inaccurate")
        self.status = None

    def infeasible(self):
        return InfeasibleError(
            f"{self.what} is infeasible ({self.sizes}; {int(np.sum(~self.eq))} margin "
            f"constraints in {self.m} unknowns): no solution satisfies the constraints")

    def gram(self):
        G = self.U @ self.U.T
        if self.kind == "att":
            G *= self.Zs @ self.Zs.T
        return G

    def features(self):
        """Explicit rows vec(A_k), shape (K, m)."""
        if self.kind == "att":
            return (self.U[:, :, None] * self.Zs[:, None, :]).reshape(self.K, -1)
        return self.U

    def combine(self, lam):
        """sum_k lam_k A_k."""
        if self.kind == "att":
            return self.U.T @ (lam[:, None] * self.Zs)
        return self.U.T @ lam

    def margins(self, W):
        if self.kind == "att":
            return np.einsum("kd,kd->k", self.U @ W, self.Zs)
        return self.U @ W


# ----------------------------------------------------------------------------- next-token data
def _check_ntp(H, P):
    """Validate NTP data: contexts ``H`` (m, d) and next-token distributions ``P`` (m, V)."""
    H = as_float_array("H", H, ndim=2)
    P = as_float_array("P", P, ndim=2)
    if P.shape[0] != H.shape[0]:
        raise ValueError(f"P must have one row per context: H has {H.shape[0]}, P has {P.shape[0]}")
    P, _ = support_sets(P)
    return H, P


def _check_seq_data(data):
    """``data``, checked to be an :class:`attnsvm.data.NTPSeqData`."""
    if not isinstance(data, NTPSeqData):
        raise ValueError(f"data must be an attnsvm.data.NTPSeqData, got {type(data).__name__}")
    return data


def _index_sets(mask):
    """The indices of the True entries of each row of ``mask``, as tuples."""
    return [tuple(int(t) for t in np.flatnonzero(row)) for row in mask]


def _ntp_rows(H, support):
    """Equality generators (z, z', j) and inequality generators (z, v, j)."""
    m, d = H.shape
    V = support.shape[1]
    eq, ineq = [], []
    for j in range(m):
        S = np.flatnonzero(support[j])
        out = np.flatnonzero(~support[j])
        for a in S[1:]:
            eq.append((a, S[0], j))
        for z in S:
            for v in out:
                ineq.append((z, v, j))
    return eq, ineq, V


def _gen_matrix(rows, H, V):
    """Vectorized generators (e_a - e_b) h_j^T as rows of shape (len(rows), V*d)."""
    d = H.shape[1]
    G = np.zeros((len(rows), V, d))
    for k, (a, b, j) in enumerate(rows):
        G[k, a] += H[j]
        G[k, b] -= H[j]
    return G.reshape(len(rows), V * d)
