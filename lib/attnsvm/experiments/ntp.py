r"""Chapter 15 drivers: the two limits of linear next-token prediction (Thrampoulidis 2024) for
several step rules, and the logit geometry of the NTP unconstrained-features model, read off
training runs that are batched over trials. The mathematics is :mod:`attnsvm.ntp`'s and
:mod:`attnsvm.svm`'s; the metric is :func:`attnsvm.metrics.corr`.
"""
from __future__ import annotations

import numpy as np
from scipy.special import log_softmax

from .. import bounds as _bounds
from .. import data as _data
from .. import losses as _losses
from .. import metrics, ntp
from .. import svm as _svm

__all__ = ["linear_limits", "ufm_geometry"]


def linear_limits(data, *, rules, W_star=None, W_mm=None):
    r"""Train the linear NTP decoder with each rule and measure both limits of Theorem 2.

    Parameters
    ----------
    data : NTPData (batched)
    rules : dict ``name -> dict(optimizer=..., steps=..., lr=..., record_steps=...)``, the keyword
        arguments of :func:`attnsvm.ntp.train`
    W_star, W_mm : optional precomputed :math:`W^*` and :math:`W^{mm}` (B, V, d)

    Returns
    -------
    dict: ``W_star``, ``W_mm``, ``runs`` (name -> the run) and ``res`` (name -> dict of arrays
    (K, B): ``relerr`` :math:`\|P_FW_t - W^*\|/\|W^*\|`, ``corr``
    :math:`\mathrm{corr}(P_\perp W_t, W^{mm})`, ``gap`` :math:`\mathrm{CE}(W_t) - H`, ``norm``).
    """
    W_star = _svm.ntp_finite(data.H, data.P) if W_star is None else W_star
    W_mm = _svm.ntp_svm(data.H, data.P) if W_mm is None else W_mm
    PF = _svm.projector_F(data)
    H_ent = _losses.entropy(data)
    runs, res = {}, {}
    for name, kw in rules.items():
        r = ntp.train(data, **kw)
        its = r["iterates"]
        flat = its.reshape(its.shape[:-2] + (-1,))
        pf = np.einsum("bij,kbj->kbi", PF, flat).reshape(its.shape)
        runs[name] = r
        res[name] = {"relerr": np.linalg.norm(pf - W_star, axis=(-2, -1))
                     / np.linalg.norm(W_star, axis=(-2, -1)),
                     "corr": metrics.corr(its - pf, W_mm, elem_ndim=2),
                     "gap": r["ce"] - H_ent,
                     "norm": np.linalg.norm(its, axis=(-2, -1))}
    return {"W_star": W_star, "W_mm": W_mm, "runs": runs, "res": res}


def ufm_geometry(P, pi, groups, run):
    r"""The logit geometry of a UFM run (:func:`attnsvm.ntp.train_ufm`), at every recorded step.

    With :math:`L_t = H_tW_t^\top`, :math:`L^* =` :func:`attnsvm.svm.logit_finite` and the logit
    SVMs :math:`L^{mm}_F, L^{mm}_*` (:func:`attnsvm.svm.logit_svm`, Frobenius and nuclear):

    - ``relerr``: :math:`\|P_{F_L}L_t - L^*\|_F/\|L^*\|_F`;
    - ``bound_ok``: every entry of :math:`P_{F_L}L_t - L^*` within
      :func:`attnsvm.bounds.finite_part_bound` of the per-context excess loss (bool);
    - ``corr_nuc``, ``corr_fro``: correlation of :math:`L_t - P_{F_L}L_t` with the two SVMs;
    - ``tail``: share of :math:`\|L_t - P_{F_L}L_t\|_F^2` outside its top-G singular values
      (G = number of support patterns);
    - ``collapse``: :func:`attnsvm.metrics.collapse_ratio` of the context embeddings :math:`H_t`;
    - ``bound_ratio``: the largest ratio, over contexts where the bound is finite, of the entry
      error of :math:`P_{F_L}L_t - L^*` to the bound (at most 1 by the lemma);
    - ``nuc_ratio``: :math:`\|L_t - P_{F_L}L_t\|_*/\gamma_t` over :math:`\|L^{mm}_*\|_*`, with
      :math:`\gamma_t` the margin of :math:`L_t - P_{F_L}L_t` (:func:`attnsvm.svm.logit_margin`;
      ``inf`` while :math:`\gamma_t \le 0`). The rescaled orthogonal part is feasible for the
      nuclear-norm logit SVM, so the ratio is at least 1, and it equals 1 exactly when the rescaled
      part is one of the SVM's minimizers;
    - ``gap``: loss minus entropy;
    - ``pattern_corr`` (final step only): correlations of the normalized orthogonal parts of
      every pair of trials (same support pattern, different probabilities and initializations).

    Returns
    -------
    dict of arrays (K, B) (``pattern_corr``: (B(B-1)/2,)), plus ``L_nuc``, ``L_fro``, ``L_perp``
    (the final orthogonal part) (B, m, V), ``sv`` (K, B, min(m, V)) (singular values of the
    orthogonal part over the largest) and
    ``rank_nuc`` (B,), the numerical rank of :math:`L^{mm}_*`.
    """
    L = np.einsum("kbmd,kbvd->kbmv", run["H"], run["W"])
    Lstar = _svm.logit_finite(P)
    PFL = _svm.logit_project_F(L, np.broadcast_to(P, L.shape))
    Lperp = L - PFL
    L_fro = _svm.logit_svm(P, "fro")
    L_nuc = _svm.logit_svm(P, "nuc")
    G = int(len(np.unique(groups)))
    sv = np.linalg.svd(Lperp, compute_uv=False)
    tail = (sv[..., G:] ** 2).sum(-1) / (sv ** 2).sum(-1)
    data = _data.NTPData(np.zeros(P.shape[:2] + (1,)), P, pi)
    ent = _losses.entropy(data)
    # per-context KL(p_j || softmax(L_j)) and the proved bound on the finite part
    lq = log_softmax(L, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl = np.where(P > 0, P * (np.log(np.where(P > 0, P, 1.0)) - lq), 0.0).sum(-1)
    bound = _bounds.finite_part_bound(np.maximum(kl, 0.0), np.broadcast_to(P, L.shape))
    err = np.abs(PFL - Lstar).max(-1)
    ok = np.isfinite(bound) & (bound > 0)
    bound_ratio = np.where(ok, err / np.where(ok, bound, 1.0), 0.0).max(-1)
    gam = _svm.logit_margin(Lperp, np.broadcast_to(P, L.shape))
    nuc_svm = np.linalg.svd(L_nuc, compute_uv=False).sum(-1) / _svm.logit_margin(L_nuc, P)
    with np.errstate(divide="ignore", invalid="ignore"):
        nuc_ratio = np.where(gam > 0, np.linalg.svd(Lperp, compute_uv=False).sum(-1)
                             / np.where(gam > 0, gam, 1.0) / nuc_svm, np.inf)
    B = P.shape[0]
    iu = np.triu_indices(B, 1)
    pc = metrics.corr(Lperp[-1][:, None], Lperp[-1][None], elem_ndim=2)[iu]
    s_nuc = np.linalg.svd(L_nuc, compute_uv=False)
    return {"steps": run["steps"],
            "relerr": np.linalg.norm(PFL - Lstar, axis=(-2, -1)) / np.linalg.norm(Lstar, axis=(-2, -1)),
            "bound_ok": np.all(err <= bound + 1e-9, axis=-1), "bound_ratio": bound_ratio,
            "nuc_ratio": nuc_ratio,
            "corr_nuc": metrics.corr(Lperp, L_nuc, elem_ndim=2),
            "corr_fro": metrics.corr(Lperp, L_fro, elem_ndim=2),
            "tail": tail, "collapse": metrics.collapse_ratio(run["H"], groups),
            "gap": run["loss"] - ent, "pattern_corr": pc, "L_nuc": L_nuc, "L_fro": L_fro,
            "L_perp": Lperp[-1],
            "rank_nuc": (s_nuc > 1e-6 * s_nuc[..., :1]).sum(-1),
            "sv": sv / sv[..., :1]}
