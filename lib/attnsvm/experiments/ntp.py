r"""Chapter 15 drivers: the two limits of linear next-token prediction (Thrampoulidis 2024) for
several step rules, and the logit geometry of the NTP unconstrained-features model, read off
training runs of :func:`attnsvm.train.fit` that are batched over trials. The mathematics is
:mod:`attnsvm.data`'s, :mod:`attnsvm.losses`'s, :mod:`attnsvm.svm`'s and
:mod:`attnsvm.bounds`'s; the metric is :func:`attnsvm.metrics.corr`.

* :func:`ntp_linear_experiment` (synthetic data) and :func:`zen_experiment` (the Zen of Python)
  train the linear decoder with GD, NGD and Adam (:class:`NTPLinearRun`, :class:`ZenRun`);
* :func:`ufm_experiment` trains the unconstrained-features model and reads its logit geometry
  (:func:`attnsvm.bounds.ufm_geometry`, :class:`UFMRun`).

Each result has ``.summary()`` (the chapter's glued numbers) and ``.claims()`` (its checked
sentences, for :func:`attnsvm.claims.check`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import bounds as _bounds
from .. import data as _data
from .. import losses as _losses
from .. import metrics
from .. import svm as _svm
from .. import train as _train
from ..history import record_grid
from ..models import NTPUFM, NTPLinear

__all__ = ["NTPLinearRun", "ZenRun", "UFMRun",
           "ntp_linear_experiment", "zen_experiment", "ufm_experiment"]


def _fit_at(data, rec, device="cpu", **kw):
    """:func:`attnsvm.train.fit` on ``device`` recording at ``rec`` (fit adds 0 and ``steps`` to
    a grid); the History and the indices of ``rec`` in its records."""
    h = _train.fit(data, record_every=rec, device=device, **kw)
    return h, np.searchsorted(h.steps, rec)


def _linear_limits(data, *, rules, W_star=None, W_mm=None, device="cpu"):
    r"""Train the linear NTP decoder (:class:`attnsvm.models.NTPLinear`, from 0, with
    :func:`attnsvm.train.fit`) with each rule and measure both limits of Theorem 2.

    Parameters
    ----------
    data : NTPData (batched)
    rules : dict ``name -> dict(optimizer=..., steps=..., lr=..., record_steps=...)``:
        ``optimizer`` one of ``"gd"``, ``"ngd"``, ``"adam"`` (Adam with ``betas=(0.9, 0.999)``,
        ``eps=1e-8``), ``lr`` a float or one step per trial, ``record_steps`` (optional, default 50
        log-spaced steps) the steps kept
    W_star, W_mm : optional precomputed :math:`W^*` and :math:`W^{mm}` (B, V, d)
    device : the device of the runs (:func:`attnsvm.train.fit`'s ``device``)

    Returns
    -------
    dict: ``W_star``, ``W_mm``, ``runs`` (name -> dict ``steps`` (K,), ``iterates``
    (K, B, V, d), ``ce`` (K, B)) and ``res`` (name -> dict of arrays (K, B): ``relerr``
    :math:`\|P_FW_t - W^*\|/\|W^*\|`, ``corr`` :math:`\mathrm{corr}(P_\perp W_t, W^{mm})`,
    ``gap`` :math:`\mathrm{CE}(W_t) - H`, ``norm``).
    """
    if not data.batched:
        raise ValueError("data must be batched (a leading trials axis)")
    W_star = _svm.ntp_finite(data.H, data.P) if W_star is None else W_star
    W_mm = _svm.ntp_svm(data.H, data.P) if W_mm is None else W_mm
    PF = _svm.projector_F(data)
    H_ent = _losses.entropy(data)
    runs, res = {}, {}
    for name, kw in rules.items():
        kw = dict(kw)
        steps, rule = kw.pop("steps"), kw.pop("optimizer")
        rec = kw.pop("record_steps", None)
        rec = (record_grid(steps, n_records=50, initial=False) if rec is None
               else np.unique(np.asarray(rec, dtype=np.int64)))
        extra = dict(betas=(0.9, 0.999), eps=1e-8) if rule == "adam" else {}
        h, idx = _fit_at(data, rec, device, model=NTPLinear(), optimizer=rule, steps=steps,
                         init="zeros", snapshots=True, **extra, **kw)
        its = h.snapshots[idx]
        flat = its.reshape(its.shape[:-2] + (-1,))
        pf = np.einsum("bij,kbj->kbi", PF, flat).reshape(its.shape)
        runs[name] = {"steps": rec, "iterates": its, "ce": h.loss[idx]}
        res[name] = {"relerr": np.linalg.norm(pf - W_star, axis=(-2, -1))
                     / np.linalg.norm(W_star, axis=(-2, -1)),
                     "corr": metrics.corr(its - pf, W_mm, elem_ndim=2),
                     "gap": h.loss[idx] - H_ent,
                     "norm": np.linalg.norm(its, axis=(-2, -1))}
    return {"W_star": W_star, "W_mm": W_mm, "runs": runs, "res": res}


def _med(a):
    return float(np.median(a))


@dataclass
class NTPLinearRun:
    r"""Result of :func:`ntp_linear_experiment`: the linear NTP decoder trained by GD (``steps``
    steps, :math:`\eta = 1/(2L)` per trial), NGD and Adam (``steps_fast`` steps).

    Attributes
    ----------
    data : NTPData (batched)
    W_star, W_mm : (B, V, d)   the finite part and the NTP-SVM
    PF : (B, Vd, Vd)           the projector on :math:`F`
    runs, res : as returned by ``_linear_limits`` (rules ``gd``, ``ngd``, ``adam``)
    """

    data: object
    W_star: np.ndarray
    W_mm: np.ndarray
    PF: np.ndarray
    runs: dict
    res: dict
    config: dict = field(default_factory=dict)

    def _at(self, rule, k):
        """(median relerr, median corr) of ``rule`` at record ``k``."""
        return _med(self.res[rule]["relerr"][k]), _med(self.res[rule]["corr"][k])

    def _gd_fast(self):
        return self._at("gd", int(np.flatnonzero(self.runs["gd"]["steps"]
                                                 == self.config["steps_fast"])[0]))

    def _rank_ok(self):
        m, d = self.data.H.shape[-2:]
        return bool(np.all(np.linalg.matrix_rank(self.data.H) == m)) and d > m

    def _gap_rise(self):
        """Largest rise of GD's excess loss between recorded steps, every trial."""
        return float(np.max(np.diff(self.res["gd"]["gap"], axis=0)))

    def summary(self):
        r"""``ntp_finite_relerr``, ``corr_ntp_mm``, ``excess_final`` (GD's final relative error of
        :math:`P_FW_T`, correlation of :math:`P_\perp W_T` with :math:`W^{mm}`, excess loss),
        ``norm_growth`` (:math:`\|W_T\|/\|W_{T/100}\|` under GD), ``relerr_<rule>``,
        ``corr_<rule>`` for NGD and Adam, ``relerr_gd_fast``, ``corr_gd_fast`` (GD at the same
        step) and ``perp_leak`` (largest :math:`\|P_FW^{mm}\|/\|W^{mm}\|`). Medians over trials."""
        res, T, B = self.res, self.config["steps"], self.data.P.shape[0]
        at100 = int(np.flatnonzero(self.runs["gd"]["steps"] == T // 100)[0])
        mm_in_F = np.einsum("bij,bj->bi", self.PF, self.W_mm.reshape(B, -1))
        gd_fast = self._gd_fast()
        return {"ntp_finite_relerr": _med(res["gd"]["relerr"][-1]),
                "corr_ntp_mm": _med(res["gd"]["corr"][-1]),
                "excess_final": _med(res["gd"]["gap"][-1]),
                "norm_growth": _med(res["gd"]["norm"][-1] / res["gd"]["norm"][at100]),
                "relerr_ngd": self._at("ngd", -1)[0], "corr_ngd": self._at("ngd", -1)[1],
                "relerr_adam": self._at("adam", -1)[0], "corr_adam": self._at("adam", -1)[1],
                "relerr_gd_fast": gd_fast[0], "corr_gd_fast": gd_fast[1],
                "perp_leak": float(np.max(np.linalg.norm(mm_in_F, axis=-1)
                                          / np.linalg.norm(self.W_mm, axis=(-2, -1))))}

    def claims(self):
        r"""Lemma 1's condition; :math:`W^{mm} \perp F`; GD approaches both limits (correlation at
        least 0.95 at the end and larger than at ``steps_fast``, relative error at most 0.05)
        with a decreasing loss and a norm growing slower than linearly (factor below 10 over two
        decades); at the same step NGD aligns faster and fits :math:`W^*` slower; Adam fits
        :math:`W^*` best and aligns worst."""
        s = self.summary()
        m, d = self.data.H.shape[-2:]
        fast = {k: (s[f"relerr_{k}"], s[f"corr_{k}"]) for k in ("ngd", "adam")}
        gd_fast = (s["relerr_gd_fast"], s["corr_gd_fast"])
        rise = self._gap_rise()
        return {
            "rank_ok": (self._rank_ok(), f"Lemma 1's condition: d = {d} > m = {m} and rank(H) = m "
                        "in every trial"),
            "mm_orthogonal_to_F": (s["perp_leak"] < 1e-8, f"W_mm has a component in F: "
                                   f"{s['perp_leak']}"),
            "ntp_mm_corr": (s["corr_ntp_mm"] >= 0.95 and s["corr_ntp_mm"] > s["corr_gd_fast"],
                            f"corr(P_perp W_T, W_mm) = {s['corr_ntp_mm']} at the end, "
                            f"{s['corr_gd_fast']} at steps_fast"),
            "ntp_finite_fit": (s["ntp_finite_relerr"] <= 0.05, "relative error of P_F W_T = "
                               f"{s['ntp_finite_relerr']}"),
            "norm_slow": (s["norm_growth"] < 10.0,      # linear growth would give a factor 100
                          f"norm growth over two decades: {s['norm_growth']}"),
            **_race_claims(gd_fast, fast["ngd"], fast["adam"], rise),
        }


def _race_claims(gd_fast, ngd, adam, rise, prefix=""):
    """The claims both corpora share (``(relative error of P_F W_T, corr(P_perp W_T, W_mm))``
    pairs): GD's excess loss never rises between recorded steps; at GD's ``steps_fast`` NGD
    aligns faster and fits W* slower; Adam fits W* best and aligns worst."""
    vs_gd = f"NGD {ngd} against GD at the same step {gd_fast}"
    return {
        f"{prefix}gd_monotone": (rise <= 1e-13, "largest rise of the GD excess loss between "
                                 f"recorded steps: {rise:.2e}"),
        f"{prefix}ngd_corr_faster": (ngd[1] > gd_fast[1], vs_gd),
        f"{prefix}ngd_finite_slower": (ngd[0] > gd_fast[0], vs_gd),
        f"{prefix}adam_finite": (adam[0] < min(gd_fast[0], ngd[0]),
                                 f"Adam {adam}, NGD {ngd}, GD {gd_fast}"),
        f"{prefix}adam_lower_corr": (adam[1] < gd_fast[1], f"Adam {adam} against GD {gd_fast}"),
    }


def _rules(data, steps, steps_fast, lr_ngd, lr_adam, n_records, *extra):
    return {"gd": dict(optimizer="gd", steps=steps, lr=1.0 / (2.0 * _losses.ce_smoothness(data)),
                       record_steps=record_grid(steps, n_records=n_records, initial=False,
                                                       extra=(steps_fast, *extra))),
            "ngd": dict(optimizer="ngd", steps=steps_fast, lr=lr_ngd),
            "adam": dict(optimizer="adam", steps=steps_fast, lr=lr_adam)}


def ntp_linear_experiment(m=4, V=8, d=6, *, support=3, trials=8, steps=200000,
                          steps_fast=20000, lr_ngd=0.5, lr_adam=0.01, seed=0, device="auto"):
    r"""Chapter 15: the linear NTP decoder on ``trials`` data sets of
    :func:`attnsvm._data.ntp_synthetic`, GD with :math:`\eta = 1/(2L)` (:func:`attnsvm._losses.ce_smoothness`,
    one per trial) for ``steps`` steps (recorded at 50 log-spaced steps, ``steps_fast`` and
    ``steps // 100``), NGD and Adam for ``steps_fast`` steps, on ``device``.

    Returns
    -------
    NTPLinearRun
    """
    data = _data.ntp_synthetic(m, V, d, support=support, trials=trials, seed=seed)
    W_star, W_mm = _svm.ntp_finite(data.H, data.P), _svm.ntp_svm(data.H, data.P)
    out = _linear_limits(data, W_star=W_star, W_mm=W_mm, device=device, rules=_rules(
        data, steps, steps_fast, lr_ngd, lr_adam, 50, steps // 100))
    return NTPLinearRun(data, W_star, W_mm, _svm.projector_F(data), out["runs"], out["res"],
                        config=dict(m=m, V=V, d=d, support=support, trials=trials, steps=steps,
                                    steps_fast=steps_fast, lr_ngd=lr_ngd, lr_adam=lr_adam,
                                    seed=seed))


@dataclass
class ZenRun(NTPLinearRun):
    r"""Result of :func:`zen_experiment`: :class:`NTPLinearRun` on the Zen of Python
    (``corpus`` the :class:`attnsvm.data.Corpus`); its numbers carry the prefix ``zen_``."""

    corpus: object = None

    def summary(self):
        r"""``zen_m``, ``zen_V``, ``zen_words`` (contexts, vocabulary, words of the text),
        ``zen_singletons``, ``zen_max_support`` (contexts with one next word, largest support),
        ``zen_relerr_<rule>``, ``zen_corr_<rule>`` (final medians) and ``zen_relerr_gd_fast``,
        ``zen_corr_gd_fast`` (GD at NGD's and Adam's last step)."""
        sizes = (self.data.P[0] > 0).sum(-1)
        out = {"zen_m": len(self.corpus.contexts), "zen_V": len(self.corpus.vocab),
               "zen_words": self.corpus.n_words, "zen_singletons": int(np.sum(sizes == 1)),
               "zen_max_support": int(sizes.max())}
        for r in ("gd", "ngd", "adam"):
            out[f"zen_relerr_{r}"], out[f"zen_corr_{r}"] = self._at(r, -1)
        out["zen_relerr_gd_fast"], out["zen_corr_gd_fast"] = self._gd_fast()
        return out

    def claims(self):
        """As :meth:`NTPLinearRun.claims` (names with the prefix ``zen_``), on the corpus."""
        s = self.summary()
        fin = {r: (s[f"zen_relerr_{r}"], s[f"zen_corr_{r}"]) for r in ("gd", "ngd", "adam")}
        gd_fast = (s["zen_relerr_gd_fast"], s["zen_corr_gd_fast"])
        rise = self._gap_rise()
        return {
            "zen_rank": (self._rank_ok(), f"d = {self.data.H.shape[-1]} > m = {s['zen_m']} and "
                         "rank(H) = m in every trial"),
            "zen_gd_finite": (fin["gd"][0] <= 0.05, f"GD relative error of P_F W_T = {fin['gd'][0]}"),
            "zen_gd_corr": (fin["gd"][1] >= 0.95 and fin["gd"][1] > gd_fast[1],
                            f"GD corr(P_perp W_T, W_mm) = {fin['gd'][1]} at the end, "
                            f"{gd_fast[1]} at steps_fast"),
            **_race_claims(gd_fast, fin["ngd"], fin["adam"], rise, prefix="zen_"),
        }


def zen_experiment(*, k=1, vocab_size=20, extra_dims=4, trials=4, steps=200000,
                   steps_fast=20000, lr_ngd=0.5, lr_adam=0.01, seed=0, device="auto"):
    r"""Chapter 15: the linear NTP decoder on the Zen of Python (:func:`attnsvm._data.ntp_corpus`,
    contexts of ``k`` words, ``vocab_size`` tokens, :math:`d = m +` ``extra_dims``, ``trials``
    draws of the embeddings), trained as in :func:`ntp_linear_experiment` (GD recorded at 40
    log-spaced steps and ``steps_fast``), on ``device``.

    Returns
    -------
    ZenRun
    """
    m = len(_data.ntp_corpus(k=k, vocab_size=vocab_size, trials=1, seed=seed).contexts)
    zen = _data.ntp_corpus(k=k, vocab_size=vocab_size, d=m + extra_dims, trials=trials, seed=seed)
    data = zen.data
    out = _linear_limits(data, device=device,
                        rules=_rules(data, steps, steps_fast, lr_ngd, lr_adam, 40))
    return ZenRun(data, out["W_star"], out["W_mm"], _svm.projector_F(data), out["runs"],
                  out["res"], config=dict(k=k, vocab_size=vocab_size, extra_dims=extra_dims,
                                          trials=trials, steps=steps, steps_fast=steps_fast,
                                          lr_ngd=lr_ngd, lr_adam=lr_adam, seed=seed),
                  corpus=zen)


def _train_ufm(P, pi, *, d, steps, lr, init_scale, seed, rec, device="cpu"):
    """GD on :class:`attnsvm.models.NTPUFM` (:func:`attnsvm.train.fit`, per-trial random start of
    scale ``init_scale``), kept at the steps ``rec``: dict ``steps``, ``W``, ``H``, ``loss``."""
    h, idx = _fit_at({"P": P, "pi": pi}, rec, device, model=NTPUFM(d), optimizer="gd", lr=lr,
                     steps=steps, init="random", init_scale=init_scale, seed=seed,
                     snapshots=("W", "H"))
    if not np.all(np.isfinite(h.loss)):
        raise FloatingPointError(f"UFM training diverged: lower lr (now {lr})")
    return {"steps": rec, "W": h.trajectory["W"][idx], "H": h.trajectory["H"][idx],
            "loss": h.loss[idx]}


@dataclass
class UFMRun:
    r"""Result of :func:`ufm_experiment`.

    Attributes
    ----------
    P, pi, groups : the data (:func:`attnsvm._data.ntp_patterns`)
    geo : dict, :func:`attnsvm.bounds.ufm_geometry` of the run (at 40 log-spaced steps)
    geo_control : dict, :func:`attnsvm.bounds.ufm_geometry` of the control run (other support patterns, final
        step only)
    cross_corr : (B, B) correlations of the final orthogonal parts of the two runs
    early : int, the record two decades before the end
    sharpness : (K, B) the sharpness :math:`\lambda_{\max}(\nabla^2\mathcal L)` at the records
        (:meth:`attnsvm.models.NTPUFM.sharpness`)
    """

    P: np.ndarray
    pi: np.ndarray
    groups: np.ndarray
    geo: dict
    geo_control: dict
    cross_corr: np.ndarray
    early: int
    config: dict = field(default_factory=dict)
    sharpness: np.ndarray | None = None

    def _rises(self):
        """Rises of the excess loss between consecutive records (K-1, B) and whether the
        sharpness at the later record is at the edge of stability (within 1% of 2/lr)."""
        rise = np.diff(self.geo["gap"], axis=0)
        return rise, self.sharpness[1:] >= 0.99 * 2 / self.config["lr_ufm"]

    def summary(self):
        r"""``ufm_rise`` (largest rise of the excess loss between records), ``ufm_sharpness_max``
        (largest final sharpness over trials), ``ufm_eos_trials`` (trials whose final sharpness
        is within 1% of 2/lr), ``ufm_step_early`` (the step two decades before the end), final medians
        ``ufm_relerr``, ``ufm_corr_nuc``, ``ufm_collapse``, ``ufm_nuc_ratio``-style numbers and
        their ``_early`` values, ``ufm_pattern_corr`` / ``ufm_cross_corr`` (smallest correlation
        of same-pattern trials, largest across patterns), ``ufm_tail`` (largest energy share
        beyond the pattern count), ``rank_nuc``, ``corr_nuc_fro``, ``ufm_sv2`` / ``ufm_sv2_nuc``
        (second singular value ratio of GD and of the nuclear-norm SVM), ``ufm_bound_ratio``,
        ``ufm_gap``."""
        g, e = self.geo, self.early
        sv_nuc = np.linalg.svd(g["L_nuc"][0], compute_uv=False)
        lam = self.sharpness[-1]
        return {"ufm_rise": max(float(np.max(self._rises()[0])), 0.0),
                "ufm_sharpness_max": float(np.max(lam)),
                "ufm_eos_trials": int(np.sum(lam >= 0.99 * 2 / self.config["lr_ufm"])),
                "ufm_step_early": int(g["steps"][e]),
                "ufm_relerr": _med(g["relerr"][-1]),
                "ufm_pattern_corr": float(np.min(np.r_[g["pattern_corr"],
                                                       self.geo_control["pattern_corr"]])),
                "ufm_cross_corr": float(np.max(self.cross_corr)),
                "ufm_tail": float(np.max(g["tail"][-1])),
                "rank_nuc": int(np.max(g["rank_nuc"])),
                "corr_nuc_fro": float(np.min(metrics.corr(g["L_nuc"], g["L_fro"], elem_ndim=2))),
                "ufm_corr_nuc": _med(g["corr_nuc"][-1]), "ufm_corr_nuc_early": _med(g["corr_nuc"][e]),
                "ufm_collapse": _med(g["collapse"][-1]), "ufm_collapse_early": _med(g["collapse"][e]),
                "ufm_sv2": _med(g["sv"][-1][:, 1]), "ufm_sv2_nuc": float(sv_nuc[1] / sv_nuc[0]),
                "ufm_nuc_ratio": float(np.min(g["nuc_ratio"][-1])),
                "ufm_nuc_ratio_early": _med(g["nuc_ratio"][e]),
                "ufm_bound_ratio": float(np.max(g["bound_ratio"])),
                "ufm_gap": _med(g["gap"][-1])}

    def claims(self):
        r"""lem-ufm-finite's bound at every record; the finite part reached (relative error at
        most 0.05) with a decreasing loss; the orthogonal part set by the support pattern only
        (same-pattern correlation at least 0.9 and above every cross-pattern one) and of rank the
        pattern count (energy beyond it at most 0.01), as is the symmetrized nuclear-norm SVM;
        the nuclear-norm SVM not reached (ratio above 1.01) but approached (ratio falling,
        correlation rising); the embeddings collapsing; GD of lower rank than the SVM."""
        s, g, e = self.summary(), self.geo, self.early
        ts, patterns = g["steps"], self.config["patterns"]
        rise, edge = self._rises()
        up = rise > 1e-13
        return {
            "ufm_finite_bound": (bool(np.all(g["bound_ok"])), "lem-ufm-finite's bound holds at "
                                 "every recorded step in every trial"),
            "ufm_finite_fit": (s["ufm_relerr"] <= 0.05, "median relative error of the finite "
                               f"part {s['ufm_relerr']}"),
            # GD decreases the loss at every step where eta * (sharpness) < 2 (descent lemma);
            # the sharpness grows along the run, and a trial where it reaches 2/lr stays at the
            # edge of stability, where the loss can rise (paper size: notes/paper_claims.md)
            "ufm_monotone": (not np.any(up & ~edge), "the UFM excess loss decreases between "
                             "records in every trial until its sharpness reaches 2/lr = "
                             f"{2 / self.config['lr_ufm']:g}: largest rise {s['ufm_rise']:.2e} in "
                             f"{int(up.any(0).sum())} trials, all at the edge of stability; "
                             f"{s['ufm_eos_trials']} trials end there; largest final sharpness "
                             f"{s['ufm_sharpness_max']:.4f}"),
            "ufm_pattern_only": (s["ufm_pattern_corr"] > s["ufm_cross_corr"], "same pattern: "
                                 f"smallest correlation {s['ufm_pattern_corr']}; other pattern: "
                                 f"largest {s['ufm_cross_corr']}"),
            "ufm_pattern_high": (s["ufm_pattern_corr"] >= 0.9, "smallest correlation between "
                                 f"same-pattern trials {s['ufm_pattern_corr']}"),
            "ufm_low_rank": (s["ufm_tail"] <= 0.01, f"largest energy share beyond {patterns} "
                             f"singular values {s['ufm_tail']}"),
            "ufm_nuc_rank": (s["rank_nuc"] <= patterns, "rank of the symmetrized nuclear-norm "
                             f"SVM {s['rank_nuc']}"),
            # GD's orthogonal part rescaled to margin 1 is feasible for the nuclear-norm SVM: a
            # ratio above 1 means it is none of the SVM's minimizers (not only the symmetrized one)
            "ufm_svm_not_reached": (s["ufm_nuc_ratio"] > 1.01, "smallest final "
                                    f"||L_perp/margin||_* / ||L_mm_*||_* over trials "
                                    f"{s['ufm_nuc_ratio']}"),
            "ufm_nuc_ratio_falls": (bool(np.all(g["nuc_ratio"][-1] < g["nuc_ratio"][e])),
                                    f"nuclear-norm ratio at step {ts[e]}: {g['nuc_ratio'][e]}, "
                                    f"final {g['nuc_ratio'][-1]}"),
            "ufm_svm_rising": (bool(np.all(g["corr_nuc"][-1] > g["corr_nuc"][e])),
                               f"corr at step {ts[e]}: {g['corr_nuc'][e]}, final "
                               f"{g['corr_nuc'][-1]}"),
            "ufm_collapse_falls": (bool(np.all(g["collapse"][-1] < g["collapse"][e])),
                                   f"collapse ratio at step {ts[e]}: {g['collapse'][e]}, final "
                                   f"{g['collapse'][-1]}"),
            "ufm_lower_rank_than_svm": (s["ufm_sv2"] < s["ufm_sv2_nuc"], "second singular value "
                                        f"ratio: GD {s['ufm_sv2']}, SVM {s['ufm_sv2_nuc']}"),
        }


def ufm_experiment(m=12, V=16, patterns=3, *, support=3, d=24, trials=4, init_scale=0.01,
                   lr=0.5, steps=100000, seed=0, device="auto"):
    r"""Chapter 15: GD on the NTP unconstrained-features model (:class:`attnsvm.models.NTPUFM`)
    from a small random start, on ``trials`` draws of :func:`attnsvm._data.ntp_patterns`
    (``patterns`` support sets, the same in every trial), recorded at 40 log-spaced steps and
    read by :func:`attnsvm.bounds.ufm_geometry`; a control run (``seed + 1``, ``pattern_seed=1``: other
    support sets of the same sizes) gives the cross-pattern correlations. Both run on
    ``device``.

    Returns
    -------
    UFMRun
    """
    P, pi, groups = _data.ntp_patterns(m, V, patterns, support=support, trials=trials,
                                          seed=seed)
    kw = dict(d=d, steps=steps, lr=lr, init_scale=init_scale, device=device)
    rec = record_grid(steps, n_records=40, initial=False)
    run = _train_ufm(P, pi, seed=seed, rec=rec, **kw)
    geo = _bounds.ufm_geometry(P, pi, groups, run)
    sharp = NTPUFM(d).sharpness(run["W"], run["H"], {"P": P, "pi": pi}, iters=200)
    P2, pi2, groups2 = _data.ntp_patterns(m, V, patterns, support=support, trials=trials,
                                             seed=seed + 1, pattern_seed=1)
    geo2 = _bounds.ufm_geometry(P2, pi2, groups2,
                        _train_ufm(P2, pi2, seed=seed + 1, rec=np.array([steps]), **kw))
    cross = metrics.corr(geo["L_perp"][:, None], geo2["L_perp"][None], elem_ndim=2)
    early = int(np.searchsorted(geo["steps"], steps // 100))
    return UFMRun(P, pi, groups, geo, geo2, cross, early,
                  config=dict(m_ufm=m, V_ufm=V, patterns=patterns, support_ufm=support, d_ufm=d,
                              trials_ufm=trials, init_scale=init_scale, lr_ufm=lr, steps_ufm=steps,
                              seed=seed),
                  sharpness=sharp)
