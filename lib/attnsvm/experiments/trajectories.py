r"""The two-dimensional trajectories of chapter 4 (notebook ``ch04a_trajectories``): the W,
(K, Q) and prompt parameterizations trained by normalized GD on one instance with ``d = 2``,
each against its own SVM (the Frobenius Att-SVM :math:`W_{mm}`, the nuclear-norm
:math:`W^*_{mm}`, the prompt SVM :math:`p_{mm}`).

* :func:`toy_2d`: a seeded two-dimensional instance whose SVMs exist and differ
  (:class:`Instance2D`; the data: :func:`attnsvm.data.sized_trials`).
* :func:`trajectories_2d`: the trajectories (:class:`Trajectories2D`, ``.summary()``,
  ``.claims()``).

The local and global convergence of the same chapter (notebooks ``ch04b_local``,
``ch04c_overparam``) is :mod:`attnsvm.experiments.convergence`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .._checks import check_int
from ..data import AttnData
from .. import data as _data
from .. import metrics as _metrics
from .. import svm as _svm
from .. import tokens as _tokens
from .. import train as _train
from ..losses import check_instance

__all__ = ["Instance2D", "toy_2d", "Trajectories2D", "trajectories_2d"]


class Instance2D(NamedTuple):
    """Result of :func:`toy_2d`: the instance and the seed that drew it."""
    data: AttnData
    key: int


def toy_2d(*, n=3, T=3, seed=0, min_corr_gap=0.02, max_tries=2000):
    r"""A two-dimensional instance (``d = 2``) for pictures: the first seed-derived draw of
    :func:`attnsvm.data.sized_trials` (``trials=1``) whose Frobenius and nuclear-norm
    Att-SVMs and whose prompt SVM all exist, and whose :math:`W_{mm}` and :math:`W^*_{mm}` differ
    (:math:`\mathrm{corr} \le 1 -` ``min_corr_gap``), so that the two parameterizations can be
    told apart.

    Returns
    -------
    Instance2D
        ``(data, key)``: the instance (unbatched ``AttnData``) and the seed of
        :func:`attnsvm.data.sized_trials` that produced it.
    """
    n = check_int("n", n, minimum=1)
    T = check_int("T", T, minimum=2)
    for k in range(max_tries):
        key = seed * max_tries + k
        data = _data.sized_trials(n, T, 2, trials=1, seed=key).trial(0)
        try:
            opt = _tokens.optimal_tokens(data.X, data.y, data.v)
            Wf = _svm.att_svm(data.X, data.Z, opt)
            Wn = _svm.att_svm(data.X, data.Z, opt, norm="nuc")
            _svm.p_svm(data.X, opt)
        except (_svm.InfeasibleError, ValueError):
            continue
        if _metrics.corr(Wf, Wn) <= 1 - min_corr_gap:
            return Instance2D(data, key)
    raise RuntimeError(f"no suitable 2-D instance in {max_tries} draws (n={n}, T={T})")


@dataclass
class Trajectories2D:
    r"""Trajectories of :func:`trajectories_2d` on one two-dimensional instance.

    Attributes
    ----------
    data : AttnData (unbatched, d = 2)
    opt : (n,) int
    W_mm, W_mm_nuc : (2, 2)     Frobenius and nuclear-norm Att-SVMs of opt
    p_mm : (2,)                 prompt SVM of opt
    steps : (K,)
    W : (K, 2, 2)               W-parameterization iterates
    W_kq : (K, 2, 2)            K Q^T iterates
    p : (K, 2)                  prompt iterates
    corr : dict                 final correlations (W vs W_mm, W vs W_mm_nuc, KQ vs both, p vs p_mm)
    """

    data: AttnData
    opt: np.ndarray
    W_mm: np.ndarray
    W_mm_nuc: np.ndarray
    p_mm: np.ndarray
    steps: np.ndarray
    W: np.ndarray
    W_kq: np.ndarray
    p: np.ndarray
    corr: dict
    config: dict = field(default_factory=dict)

    def summary(self):
        """The final correlations (``corr_w``, ``corr_kq``, ``corr_w_nuc``, ``corr_kq_fro``,
        ``corr_p``), the correlation of the two SVMs (``corr_fro_nuc``), and the early horizon
        ``steps_early`` (the record nearest ``steps / 10``) with ``gap_{w,kq,p}_early``, the
        ``1 - corr`` of each parameterization with its own SVM there."""
        c = self.corr
        return {"corr_w": c["W_vs_W_mm"], "corr_kq": c["KQ_vs_W_mm_nuc"],
                "corr_w_nuc": c["W_vs_W_mm_nuc"], "corr_kq_fro": c["KQ_vs_W_mm"],
                "corr_p": c["p_vs_p_mm"],
                "corr_fro_nuc": float(_metrics.corr(self.W_mm, self.W_mm_nuc)),
                "steps_early": int(self.steps[self._early]),
                **{f"gap_{k}_early": v for k, v in self._gaps(self._early).items()}}

    @property
    def _early(self):
        """The record nearest a tenth of the run's steps (the early horizon of ``approach``)."""
        return int(np.argmin(np.abs(self.steps - self.steps[-1] / 10)))

    def _gaps(self, k):
        """``1 - corr`` of each parameterization with its own SVM at record ``k``."""
        return {"w": float(1 - _metrics.corr(self.W[k], self.W_mm)),
                "kq": float(1 - _metrics.corr(self.W_kq[k], self.W_mm_nuc)),
                "p": float(1 - _metrics.corr(self.p[k], self.p_mm))}

    def claims(self):
        r"""Checked claims (``name -> (holds, detail)``).

        * ``own_svm``: after ``steps`` steps, W, :math:`KQ^\top` and p each have correlation at
          least 0.999 with their own SVM (:math:`W_{mm}`, :math:`W^*_{mm}`, :math:`p_{mm}`), and W
          and :math:`KQ^\top` are closer to their own SVM than to the other one;
        * ``approach``: for ``W`` and the prompt ``p``, ``1 - corr`` with the own SVM is at
          least 2 times smaller at the last record (``steps``) than at the record
          ``steps_early`` nearest ``steps / 10``: a trend, at two horizons. ``(K, Q)`` is not
          in it: on the instance of seed 0 its ``1 - corr`` falls to ~1e-6 by step 2000 and is
          larger again at the ``paper`` profile's 5000 steps.
        """
        s = self.summary()
        steps, early = int(self.steps[-1]), s["steps_early"]
        fin = {k: 1 - s[f"corr_{k}"] for k in ("w", "kq", "p")}
        own = (min(s["corr_w"], s["corr_kq"], s["corr_p"]) >= 0.999
               and s["corr_w"] > s["corr_w_nuc"] and s["corr_kq"] > s["corr_kq_fro"])
        return {
            "own_svm": (bool(own),
                        f"after {steps} steps: corr W {s['corr_w']:.5f} (vs W*_mm "
                        f"{s['corr_w_nuc']:.5f}), KQ {s['corr_kq']:.5f} (vs W_mm "
                        f"{s['corr_kq_fro']:.5f}), p {s['corr_p']:.5f} (>= 0.999)"),
            "approach": (bool(all(2 * fin[k] <= s[f"gap_{k}_early"] for k in ("w", "p"))),
                         f"1 - corr at step {early} -> {steps} (at least 2 times smaller): "
                         + ", ".join(f"{k} {s[f'gap_{k}_early']:.2e} -> {fin[k]:.2e}"
                                     for k in ("w", "p"))
                         + f" (kq, not claimed: {s['gap_kq_early']:.2e} -> {fin['kq']:.2e})"),
        }


def trajectories_2d(data, *, steps=2000, lr=0.1, init_scale=0.1, n_records=80, seed=0,
                    device="auto"):
    r"""Train the W, (K,Q) and prompt parameterizations on one instance with ``d = 2``
    (normalized GD: ``"ngd"`` for W and p, ``"ngd_param"`` — each of K, Q normalized by its own
    gradient norm — for (K,Q); random initialization :math:`N(0,` ``init_scale`` :math:`^2)`)
    and record the iterates.

    Returns
    -------
    Trajectories2D
    """
    data = check_instance(data)
    if data.d != 2:
        raise ValueError(f"trajectories_2d needs d = 2, got d = {data.d}")
    opt = _tokens.optimal_tokens(data.X, data.y, data.v)
    W_mm = _svm.att_svm(data.X, data.Z, opt)
    W_nuc = _svm.att_svm(data.X, data.Z, opt, norm="nuc")
    p_mm = _svm.p_svm(data.X, opt)
    kw = dict(steps=steps, lr=lr, init="random", init_scale=init_scale, n_records=n_records,
              snapshots=True, seed=seed, device=device)
    hW = _train.fit(data, model="W", optimizer="ngd", **kw)
    hK = _train.fit(data, model="KQ", optimizer="ngd_param", **kw)
    hp = _train.fit(data, model="prompt", optimizer="ngd", **kw)
    W, Wk, p = hW.snapshots[:, 0], hK.snapshots[:, 0], hp.snapshots[:, 0]
    corr = {"W_vs_W_mm": float(_metrics.corr(W[-1], W_mm)),
            "W_vs_W_mm_nuc": float(_metrics.corr(W[-1], W_nuc)),
            "KQ_vs_W_mm_nuc": float(_metrics.corr(Wk[-1], W_nuc)),
            "KQ_vs_W_mm": float(_metrics.corr(Wk[-1], W_mm)),
            "p_vs_p_mm": float(_metrics.corr(p[-1], p_mm))}
    return Trajectories2D(data=data, opt=opt, W_mm=W_mm, W_mm_nuc=W_nuc, p_mm=p_mm,
                          steps=hW.steps, W=W, W_kq=Wk, p=p, corr=corr,
                          config=dict(n=data.n, T=data.T, steps=steps, lr=lr, init_scale=init_scale,
                                      seed=seed))
