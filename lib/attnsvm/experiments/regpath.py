r"""Chapter 3's study of the regularization path :math:`W_R = \arg\min_{\|W\| \le R} \mathcal{L}(W)`:
:func:`regpath_study` (:class:`RegPathStudy`) draws the instances, solves their Att-SVMs and runs
the path solver :func:`attnsvm.path.reg_path` (Frobenius and nuclear balls) with the constants
of the theorem (:func:`attnsvm.path.path_constants`); what is computed, and how, is
:mod:`attnsvm.path`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._checks import check_int, renamed
from ..data import AttnData, keyed_instances
from ..metrics import corr, fit_rate, nanmedian as _nanmedian
from ..path import RegPath, path_constants, reg_path
from ..svm import att_svm_batch, rank
from ..tokens import optimal_tokens

__all__ = ["RegPathStudy", "regpath_study"]


# ----------------------------------------------------------------------------- chapter 3 study

@dataclass
class RegPathStudy:
    r"""Chapter 3's study (:func:`regpath_study`): the Frobenius path against :math:`W_{mm}` and,
    optionally, the nuclear path against :math:`W^\star_{mm}` on the feasible instances.

    Attributes
    ----------
    data : AttnData (B feasible instances); instances : int drawn; R : (K,) radii
    W_mm : (B, d, d); path : RegPath (Frobenius); consts : dict of (B,) (:func:`path_constants`)
    W_nuc : (B, d, d) or None; path_nuc : RegPath or None (nuclear)
    config : dict, the study's parameters (``n``, ``T``, ``d``, ``trials``, ``inits``, ``R_min``,
        ``R_max``, ``n_R``, ``max_steps``, ``loss``, ``nuclear``, ``seed``)
    """
    data: AttnData
    instances: int
    R: np.ndarray
    W_mm: np.ndarray
    path: RegPath
    consts: dict
    W_nuc: np.ndarray | None = None
    path_nuc: RegPath | None = None
    config: dict = field(default_factory=dict)

    @property
    def tail(self):
        r"""The radii of the last decade, :math:`R \ge R_{\max}/10` (where the rate is fitted)."""
        return self.R >= self.R[-1] / 10

    @staticmethod
    def gap(path):
        r""":math:`1 - \mathrm{corr}(W_R, W_{svm})`, (K, B)."""
        return 1 - path.corr

    def slopes(self, path):
        """Fitted log-log slope of the gap over the last decade, per instance (B,)."""
        return fit_rate(self.R, self.gap(path), tail=(self.R[-1] / 10, self.R[-1]))

    def bound(self):
        r"""The theorem's bound :math:`\|W_{mm}\|_F \log C / R`, (K, B)."""
        return np.linalg.norm(self.W_mm, axis=(1, 2)) * np.log(self.consts["C"]) / self.R[:, None]

    @staticmethod
    def reach(path):
        """Fraction of the random starts reaching the kept objective (up to 1e-6), (K, B)."""
        nrand = path.config["inits"]
        return (path.log_excess_all[..., :nrand] <= path.log_excess[..., None] + 1e-6).mean(axis=-1)

    def summary(self):
        """The chapter's headline numbers (medians over instances unless named otherwise)."""
        path, R = self.path, self.R
        gap, slopes, bound, reach = self.gap(path), self.slopes(path), self.bound(), self.reach(path)
        B = self.data.trials
        out = {
            "B": int(B), "infeasible": int(self.instances - B),
            "slope_fro": _nanmedian(slopes),
            "slope_fro_min": float(np.min(slopes)), "slope_fro_max": float(np.max(slopes)),
            "gap_final_fro": _nanmedian(gap[-1]), "gap_first_fro": _nanmedian(gap[0]),
            "bound_final": _nanmedian(bound[-1]),
            "R0_median": _nanmedian(self.consts["R0"]),
            "logC_median": _nanmedian(np.log(self.consts["C"])),
            "below_svm": int(np.sum(path.log_excess <= path.log_excess_svm + 1e-12)),
            "pairs": int(path.log_excess.size),
            "residual_max": float(np.max(path.residual)),
            "reach_first": float(np.mean(reach[0])), "reach_final": float(np.mean(reach[-1])),
            "norm_ratio_final": _nanmedian(path.norm[-1] / R[-1]),
        }
        if self.path_nuc is not None:
            pn = self.path_nuc
            out.update({
                "slope_nuc": _nanmedian(self.slopes(pn)),
                "gap_final_nuc": _nanmedian(self.gap(pn)[-1]),
                "cross_nuc": _nanmedian(corr(pn.W[-1], self.W_mm)),
                "cross_fro": _nanmedian(corr(path.W[-1], self.W_nuc)),
                "residual_max_nuc": float(np.max(pn.residual)),
                "rank_nuc_path": _nanmedian(rank(pn.W[-1], rtol=1e-4)),
                "rank_nuc_svm": _nanmedian(rank(self.W_nuc)),
            })
        return out

    def claims(self):
        r"""The chapter's interpretive sentences, as ``name -> (holds, detail)``
        (:func:`attnsvm.claims.check`), on the Frobenius path:

        * ``steeper_than_proved``: every instance's fitted slope is below :math:`-1.5`, steeper
          than the proved :math:`R^{-1}`;
        * ``bound_room``: the gap is at most a quarter of the theorem's bound at every radius and
          instance;
        * ``nonconvex_visible``: every random start reaches the kept objective at the smallest
          radius, at most half of them at the largest.
        """
        slopes = self.slopes(self.path)
        ratio = float(np.max(self.gap(self.path) / self.bound()))
        reach = self.reach(self.path)
        first, final = float(np.mean(reach[0])), float(np.mean(reach[-1]))
        return {
            "steeper_than_proved": (bool(np.max(slopes) < -1.5),
                                    f"largest slope {np.max(slopes):.3f} (< -1.5)"),
            "bound_room": (bool(ratio <= 0.25), f"largest gap / bound {ratio:.3g} (<= 0.25)"),
            "nonconvex_visible": (bool(first == 1.0 and final <= 0.5),
                                  f"fraction of random starts reaching the objective: {first:.2f} "
                                  f"at the smallest radius (= 1), {final:.2f} at the largest (<= 0.5)"),
        }


@renamed(instances="trials")
def regpath_study(n, T, d, trials, R, *, inits=3, max_steps=2400, loss="logistic", nuclear=True,
                  seed=0, device="auto"):
    r"""Chapter 3: draw ``trials`` instances (:func:`attnsvm.data.keyed_instances`, keys
    ``(seed, j)``), keep the feasible ones, and compute the regularization path over the radii
    ``R`` in the Frobenius ball (and, with ``nuclear``, the nuclear ball), each started also from
    its SVM direction, with at most ``max_steps`` projected-gradient iterations (a converged run
    stops; the default is the chapter's, enough for the nuclear path's largest radii to reach the
    tolerance at its sizes). Returns a :class:`RegPathStudy`."""
    data = keyed_instances(n, T, d, [(seed, j) for j in range(check_int("trials", trials, minimum=1))])
    opt = optimal_tokens(data.X, data.y, data.v)
    W_mm, feasible = att_svm_batch(data.X, data.Z, opt)
    keep = np.flatnonzero(feasible)
    data = AttnData(data.X[keep], data.y[keep], data.Z[keep], data.v[keep])
    W_mm, opt = W_mm[keep], opt[keep]
    R = np.asarray(R, dtype=float)
    path = reg_path(data, R, loss=loss, inits=inits, W_svm=W_mm, max_steps=max_steps, seed=seed,
                    device=device)
    consts = path_constants(data, W_mm, loss=loss)
    W_nuc = path_nuc = None
    if nuclear:
        W_nuc, _ = att_svm_batch(data.X, data.Z, opt, norm="nuc")   # same constraints: feasible
        path_nuc = reg_path(data, R, norm="nuc", loss=loss, inits=inits, W_svm=W_nuc,
                            max_steps=max_steps, seed=seed, device=device)
    config = dict(n=n, T=T, d=d, trials=int(trials), inits=inits, R_min=float(R[0]), R_max=float(R[-1]),
                  n_R=int(R.size), max_steps=max_steps, loss=loss, nuclear=bool(nuclear), seed=seed)
    return RegPathStudy(data, int(trials), R, W_mm, path, consts, W_nuc, path_nuc, config)
