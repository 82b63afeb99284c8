r"""Chapter 16: next-token prediction with one self-attention layer (token-priority graph).

:func:`ntp_attention_experiment` draws ``trials`` NTP data sets (:func:`attnsvm.data.ntp_sequences`),
computes, per trial, the top components :math:`O_i` of the token-priority graphs
(:func:`attnsvm.graphs.top_component`), the graph SVM :math:`W^G_{mm}`
(:func:`attnsvm.svm.graph_svm`), the finite part :math:`W^*` and the subspace :math:`F`
(:func:`attnsvm.svm.graph_finite`, :func:`attnsvm.svm.graph_subspace`), and trains
:class:`attnsvm.models.SelfAttentionNTP` with GD and NGD from a small random start, following

* ``corr_perp``: :math:`\mathrm{corr}(P_\perp W_t, W^G_{mm})` (the part orthogonal to :math:`F`);
* ``corr_full``: :math:`\mathrm{corr}(W_t, W^G_{mm})`;
* ``relerr``: :math:`\|P_F W_t - W^*\|_F / \|W^*\|_F` (NaN when :math:`F = \{0\}`);
* ``mass``: the smallest, over sequences, attention mass on :math:`O_i`;
* ``gap``: :math:`L(W_t) - L_O(W^*)`, the excess over the infimum of the loss;
* ``norm``: :math:`\|W_t\|_F`.

:meth:`NTPAttentionRun.summary` holds the chapter's headline numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .. import data as _data
from .. import metrics as _metrics
from .. import graphs as _graphs
from .. import svm as _svm
from ..runs import fit_rules
from ..devices import cpu_threads
from ..models import SelfAttentionNTP
from ..bounds import smoothness_bound
from ..history import record_grid

__all__ = ["NTPAttentionRun", "ntp_attention_experiment"]

_nanmedian = _metrics.nanmedian


@dataclass
class NTPAttentionRun:
    r"""Result of :func:`ntp_attention_experiment`.

    Attributes
    ----------
    data : NTPSeqData (batched)
    mask : (B, n, T) bool      the top components :math:`O_i`
    W_svm, W_fin : (B, d, d)   :math:`W^G_{mm}` and :math:`W^*`
    L_inf : (B,)               :math:`L_O(W^*)`, the infimum of the loss
    steps : (R,)               record steps
    curves : dict rule -> dict of (R, B) arrays (``corr_perp``, ``corr_full``, ``relerr``,
             ``mass``, ``gap``, ``norm``)
    """

    data: object
    mask: np.ndarray
    W_svm: np.ndarray
    W_fin: np.ndarray
    L_inf: np.ndarray
    steps: np.ndarray
    curves: dict
    config: dict = field(default_factory=dict)

    def summary(self):
        r"""Headline numbers (medians over trials, NaN-safe).

        For each rule (``gd``, ``ngd``): ``corr_<rule>`` and ``corr_full_<rule>`` (final
        correlations with :math:`W^G_{mm}` of :math:`P_\perp W` and :math:`W`), ``relerr_<rule>``,
        ``mass_<rule>`` (final smallest mass on :math:`O_i`), ``gap_<rule>`` (final excess loss),
        ``norm_<rule>`` (final norm), ``gap_monotone_<rule>`` (1 if the excess loss decreases
        between consecutive records in every trial), ``corr_gain_<rule>`` (median increase of
        ``corr_perp`` over the last decade of recorded steps), ``relerr_ratio_<rule>`` (median
        ratio of ``relerr`` at the end to ``relerr`` a decade earlier) and ``late_decrease_<rule>``
        (1 if the medians of :math:`1 - ` ``corr_perp``, ``relerr``, :math:`1 - ` ``mass`` and
        ``gap`` are all lower at the end than a decade earlier). Data: ``frac_multi`` (fraction of
        sequences whose top component holds at least two of their tokens), ``frac_full``
        (fraction whose tokens all lie in it), ``dim_F`` (median dimension of :math:`F`).
        """
        out = {}
        t = self.steps
        late = t >= t[-1] / 10
        first_late = int(np.flatnonzero(late)[0])
        for rule, c in self.curves.items():
            out[f"corr_{rule}"] = float(_nanmedian(c["corr_perp"][-1]))
            out[f"corr_full_{rule}"] = float(_nanmedian(c["corr_full"][-1]))
            out[f"relerr_{rule}"] = float(_nanmedian(c["relerr"][-1]))
            out[f"mass_{rule}"] = float(_nanmedian(c["mass"][-1]))
            out[f"gap_{rule}"] = float(_nanmedian(c["gap"][-1]))
            out[f"norm_{rule}"] = float(_nanmedian(c["norm"][-1]))
            out[f"gap_monotone_{rule}"] = int(bool(np.all(np.diff(c["gap"], axis=0) <= 0)))
            out[f"corr_gain_{rule}"] = float(_nanmedian(c["corr_perp"][-1]
                                                        - c["corr_perp"][first_late]))
            with np.errstate(all="ignore"):
                out[f"relerr_ratio_{rule}"] = float(_nanmedian(c["relerr"][-1]
                                                               / c["relerr"][first_late]))
            curves = (1 - c["corr_perp"], c["relerr"], 1 - c["mass"], c["gap"])
            out[f"late_decrease_{rule}"] = int(all(
                _nanmedian(x[-1]) < _nanmedian(x[first_late]) for x in curves))
        sizes = self.mask.sum(-1)
        out["frac_multi"] = float(np.mean(sizes >= 2))
        out["frac_full"] = float(np.mean(sizes == self.mask.shape[-1]))
        out["dim_F"] = float(_nanmedian(self.config["dim_F"]))
        return out

    def claims(self):
        r"""The chapter's checked sentences, ``name -> (holds, detail)``
        (:func:`attnsvm.claims.check`): the top components are non-trivial; under GD
        :math:`P_\perp W_T` aligns with :math:`W^G_{mm}` (correlation at least 0.97, above that of
        :math:`W_T`, still rising over the last decade), :math:`P_F W_T` fits :math:`W^*` (relative
        error at most 0.05), attention puts mass at least 0.99 on :math:`O_i`, the excess loss
        decreases between records and every curve of the figure is lower at the end than a decade
        earlier; NGD aligns better and fits :math:`W^*` worse, its finite part stalling (end over
        a decade earlier above 0.5)."""
        s = self.summary()
        corr_gd, relerr_gd, mass_gd = s["corr_gd"], s["relerr_gd"], s["mass_gd"]
        return {
            "graph_nontrivial": (s["frac_multi"] > 0, "fraction of sequences whose top component "
                                 f"holds >= 2 of their tokens: {s['frac_multi']}"),
            "corr_graph": (corr_gd >= 0.97, f"median corr(P_perp W_T, W_G) under GD: {corr_gd}"),
            "perp_above_full": (corr_gd > s["corr_full_gd"], f"corr of P_perp W_T {corr_gd} "
                                f"against corr of W_T {s['corr_full_gd']}"),
            "finite_fit": (relerr_gd <= 0.05, f"median relative error of P_F W_T: {relerr_gd}"),
            "mass_top": (mass_gd >= 0.99, f"median smallest mass on O_i: {mass_gd}"),
            "gd_monotone": (s["gap_monotone_gd"] == 1,
                            "the excess loss does not rise between recorded GD steps in any "
                            f"trial: {bool(s['gap_monotone_gd'])}"),
            "corr_rising": (s["corr_gain_gd"] > 0, "median gain of corr over the last decade of "
                            f"GD steps: {s['corr_gain_gd']}"),
            "ngd_corr_higher": (s["corr_ngd"] > corr_gd,
                                f"NGD {s['corr_ngd']} against GD {corr_gd}"),
            "ngd_finite_worse": (s["relerr_ngd"] > relerr_gd, "NGD relative error "
                                 f"{s['relerr_ngd']} against GD {relerr_gd}"),
            "gd_late_decrease": (s["late_decrease_gd"] == 1, "every GD curve of the figure (medians) "
                                 "is lower at the end than a decade earlier: "
                                 f"{bool(s['late_decrease_gd'])}"),
            "ngd_finite_stalls": (s["relerr_ratio_ngd"] > 0.5, "NGD relative error, end / a "
                                  f"decade earlier: {s['relerr_ratio_ngd']}"),
        }


def ntp_attention_experiment(n=40, K=8, T=4, d=None, *, queries=2, levels=3,
                             embedding="orthonormal", trials=8, steps=20000, lr=None,
                             lr_ngd=0.2, init_scale=0.01, n_records=40, seed=0,
                             device="auto"):
    r"""Train one self-attention layer by next-token prediction (one :func:`attnsvm.train.fit`
    call, :func:`attnsvm.runs.fit_rules`, on
    :class:`attnsvm.models.SelfAttentionNTP`, all trials at once) with GD (step ``lr``, default
    :math:`1/L` with :math:`L` of :func:`attnsvm.bounds.smoothness_bound`) and NGD (step ``lr_ngd``), each for
    ``steps`` steps, from :math:`W_0 \sim N(0, \mathrm{init\_scale}^2)` entrywise (fit's
    per-trial initialization streams), on ``trials`` data sets of
    :func:`attnsvm.data.ntp_sequences`.

    Returns
    -------
    NTPAttentionRun
    """
    with cpu_threads("cpu", 1):         # tiny tensors on the CPU: one thread (fit sets its own)
        return _experiment(n, K, T, d, queries, levels, embedding, trials, steps, lr, lr_ngd,
                           init_scale, n_records, seed, device)


def _experiment(n, K, T, d, queries, levels, embedding, trials, steps, lr, lr_ngd, init_scale,
                n_records, seed, device):
    data = _data.ntp_sequences(n, K, T, d, queries=queries, levels=levels, embedding=embedding,
                               trials=trials, seed=seed)
    B, dim = data.trials, data.d
    mask = _graphs.top_component(data)
    W_svm = _svm.graph_svm(data)
    W_fin = _svm.graph_finite(data)
    bases = [_svm.graph_subspace(data.trial(b)) for b in range(B)]
    Lsm = smoothness_bound(data)
    lr_gd = 1.0 / Lsm if lr is None else np.full(B, float(lr))
    model_O = SelfAttentionNTP(mask=mask)
    L_inf = model_O.objective({"W": torch.as_tensor(W_fin)}, model_O.batch(data))[0].numpy()
    model = SelfAttentionNTP(floor=L_inf)
    cpu_batch = model.batch(data)
    fin_norm = np.linalg.norm(W_fin, axis=(-2, -1))
    grid = record_grid(steps, "log", n_records)
    curves = {}
    rules = {"gd": dict(lr=lr_gd), "ngd": dict(lr=float(lr_ngd))}
    # one call, the trials tiled once per rule: the model's per-trial floor tiled alike
    hs = fit_rules(data, rules, seed=seed, model=SelfAttentionNTP(floor=np.tile(L_inf, len(rules))),
                   steps=steps, init="random", init_scale=init_scale,
                   refs={"svm": W_svm}, snapshots=True, record_every=grid[1:-1], device=device)
    for rule, h in hs.items():
        Wt = h.snapshots                                             # (R, B, d, d)
        flat = Wt.reshape(Wt.shape[:2] + (-1,))
        pf = np.stack([flat[:, b] @ Q @ Q.T for b, Q in enumerate(bases)], axis=1)
        with np.errstate(all="ignore"):
            relerr = np.where(fin_norm > 0, np.linalg.norm(pf - W_fin.reshape(B, -1), axis=-1)
                              / np.where(fin_norm > 0, fin_norm, 1.0), np.nan)
        A = np.stack([model.attention({"W": torch.as_tensor(w)}, cpu_batch).numpy() for w in Wt])
        curves[rule] = {"corr_perp": _metrics.corr(flat - pf, W_svm.reshape(B, -1), elem_ndim=1),
                        "corr_full": h.corr["svm"], "relerr": relerr,
                        "mass": (A * mask).sum(-1).min(-1), "gap": h.excess, "norm": h.norm}
        steps_rec = h.steps
    return NTPAttentionRun(data, mask, W_svm, W_fin, L_inf, steps_rec, curves,
                           config=dict(n=n, K=K, T=T, d=dim, queries=queries, levels=levels,
                                       embedding=embedding, trials=trials, steps=steps,
                                       lr=lr_gd, lr_ngd=lr_ngd, init_scale=init_scale, seed=seed,
                                       dim_F=np.array([Q.shape[1] for Q in bases])))
