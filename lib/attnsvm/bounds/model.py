r"""Part III's equal-score model, shared by the chapters' bounds (book: ``def-equal-scores``;
chapters 8, 9, 10 and 14): the lifted features :math:`A_{it} = (x_{i,\mathrm{opt}_i} - x_{it})
z_i^\top` (:func:`lifted_factors`), the proofs' constants :math:`R_A, \gamma_A, \kappa, \lambda, \mu,
H, \varepsilon_0, \dots` (:func:`constants`) and the cross-sequence condition (Cx)
(:func:`cross_gram_min`); the token scores split at ``opt`` are :func:`attnsvm.tokens.opt_scores`.
"""
from __future__ import annotations

import numpy as np

from .. import tokens
from ..losses import get_loss


__all__ = ["lifted_factors", "constants", "cross_gram_min"]


def _arrays(**kw):
    out = {}
    for name, val in kw.items():
        a = np.asarray(val, dtype=float)
        if np.any(~np.isfinite(a)) or np.any(a <= 0):
            raise ValueError(f"{name} must be finite and positive, got {val!r}")
        out[name] = a
    return out.values()


#: the logistic loss of Part III (:math:`\ell` and :math:`-\ell'` from attnsvm.losses)
_LOGISTIC = get_loss("logistic")


def lifted_factors(data, opt):
    r"""The lifted features :math:`A_{it} = (x_{i,\mathrm{opt}_i} - x_{it}) z_i^\top` as their two
    factors, for every trial and every token (:func:`attnsvm.tokens.lifted_features` gives the
    matrices of one instance, constraints only).

    Returns ``U`` (B, n, T, d) with rows :math:`x_{i,\mathrm{opt}_i} - x_{it}` (zero at the
    optimal token) and ``Z`` (B, n, d); :math:`A_{it} = U_{it} z_i^\top`.
    """
    X, _, Z, _ = tokens.trial_arrays(data)
    opt = np.asarray(opt).reshape(X.shape[0], X.shape[1])
    return tokens.token_differences(X, opt), Z


def constants(data, opt, W_mm):
    r"""The constants of the proofs, per trial (dict of (B,) arrays).

    ``R_A`` :math:`\max_{it}\|A_{it}\|_F`; ``gamma_A`` :math:`1/\|W_{mm}\|_F`;
    ``kappa`` :math:`\gamma_A/R_A`; ``Delta_min``, ``Delta_max`` (equal-score model:
    :math:`\Delta_i = \gamma^\star_i - \max_{t\neq\mathrm{opt}}\gamma_{it}`);
    ``b_minus`` :math:`\min_i -\ell'(\gamma^\star_i)`, ``b_plus`` :math:`\max_i
    -\ell'(\gamma^\circ_i)`; ``lam`` :math:`\lambda = \min_i \ell'(\gamma^\star_i)/\ell'(\gamma^\circ_i)`;
    ``mu`` :math:`\tfrac23\gamma_A` (the gradient-excess sandwich on :math:`E \le \varepsilon_0`);
    ``H`` :math:`3R_A^2\max_i(3 b^+_i/b^-_i + \Delta_i/(4b^-_i))`;
    ``eps0`` :math:`\min_i b^-_i\Delta_i/(3n)`; ``L_star`` :math:`\frac1n\sum_i\ell(\gamma^\star_i)`;
    ``eta_ngd`` :math:`\min(\log 2/R_A, \mu/H)` (NGD step of the linear-rate theorem);
    ``bD_plus`` :math:`\max_i b^+_i\Delta_i` and ``bD_minus`` :math:`\min_i b^-_i\Delta_i` (the
    global theorem and the sparsity corollaries).
    """
    U, Z = lifted_factors(data, opt)
    g, gs, mask, _ = tokens.opt_scores(data, opt)
    W_mm = np.asarray(W_mm).reshape(U.shape[0], U.shape[-1], U.shape[-1])
    n = U.shape[1]
    RA = (np.linalg.norm(U, axis=-1) * np.linalg.norm(Z, axis=-1)[..., None]).max(axis=(1, 2))
    gA = 1.0 / np.linalg.norm(W_mm, axis=(-2, -1))
    go = np.where(mask, g, -np.inf).max(axis=-1)          # best non-optimal score
    Delta = gs - go
    bm, bp = _LOGISTIC.neg_deriv_np(gs), _LOGISTIC.neg_deriv_np(np.where(mask, g, np.inf).min(axis=-1))
    lam = (bm / bp).min(axis=-1)
    mu = 2.0 / 3.0 * gA
    H = 3 * RA ** 2 * (3 * bp / bm + Delta / (4 * bm)).max(axis=-1)
    return dict(R_A=RA, gamma_A=gA, kappa=gA / RA, Delta_min=Delta.min(-1), Delta_max=Delta.max(-1),
                b_minus=bm.min(-1), b_plus=bp.max(-1), lam=lam, mu=mu, H=H,
                eps0=(bm * Delta).min(-1) / (3 * n), L_star=_LOGISTIC.value_np(gs).mean(-1),
                eta_ngd=np.minimum(np.log(2) / RA, mu / H), bD_plus=(bp * Delta).max(-1),
                bD_minus=(bm * Delta).min(-1))


def cross_gram_min(data, opt):
    r"""The smallest cross-sequence inner product
    :math:`\min_{i\ne j,\ t\ne\mathrm{opt}_i,\ s\ne\mathrm{opt}_j}\langle A_{it}, A_{js}\rangle`
    per trial, shape (B,): the cross-sequence condition (Cx) of the global theorem holds iff it is
    :math:`\ge 0`. ``+inf`` when ``n = 1`` (the condition is then empty). Uses
    :math:`\langle A_{it}, A_{js}\rangle = \langle x_{i,\mathrm{opt}_i} - x_{it},
    x_{j,\mathrm{opt}_j} - x_{js}\rangle\langle z_i, z_j\rangle`.
    """
    U, Z = lifted_factors(data, opt)
    _, _, mask, _ = tokens.opt_scores(data, opt)
    n = U.shape[1]
    G = np.einsum("bitd,bjsd->bitjs", U, U) * np.einsum("bid,bjd->bij", Z, Z)[:, :, None, :, None]
    valid = (mask[:, :, :, None, None] & mask[:, None, None, :, :]
             & ~np.eye(n, dtype=bool)[None, :, None, :, None])
    return np.where(valid, G, np.inf).min(axis=(1, 2, 3, 4))
