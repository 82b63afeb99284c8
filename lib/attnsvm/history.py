r"""The records of a batched run: the record grid (:func:`record_grid`), the recorded trajectory
(:class:`History`, what :func:`attnsvm.train.fit` returns) and the error of a trial whose iterate
became non-finite (:class:`NonFiniteError`, raised by the engine's finite-value guard naming the
trial and the step). The engine imports these; they import no engine.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

import numpy as np

from ._checks import check_choice, check_int

__all__ = ["History", "NonFiniteError", "record_grid"]


class NonFiniteError(FloatingPointError):
    """A trial's iterate became NaN or inf. Attributes ``trial`` and ``step``."""

    def __init__(self, msg, trial, step):
        super().__init__(msg)
        self.trial = trial
        self.step = step


def record_grid(steps, record_every="log", n_records=100, *, extra=(), initial=True):
    """Sorted unique record steps in ``[0, steps]`` (always containing ``steps``, and 0 unless
    ``initial=False``).

    ``record_every="log"``: 0 and ``n_records - 1`` log-spaced steps in ``[1, steps]``
    (rounded, duplicates removed); an int ``k``: ``0, k, 2k, ...`` and ``steps``; a sequence of
    ints: those steps (strictly increasing, in ``[0, steps]``) with 0 and ``steps`` added.
    ``extra``: further steps in ``[0, steps]`` merged into the grid (phase boundaries, horizons).
    ``initial=False`` leaves the step 0 out (the records a chapter compares, of a run that
    :func:`~attnsvm.train.fit` records from 0 anyway; ``"log"`` then has ``n_records`` log-spaced steps).
    """
    extra = np.asarray(extra, dtype=np.int64).ravel()
    if extra.size and (extra.min() < 0 or extra.max() > steps):
        raise ValueError(f"extra steps must lie in [0, steps={steps}], got {extra.min()}..{extra.max()}")
    start = [0] if initial else []
    if not isinstance(record_every, (str, numbers.Integral)):
        try:
            g = np.asarray(record_every)
        except (TypeError, ValueError):
            g = None
        if (g is None or g.ndim != 1 or g.size == 0 or not np.issubdtype(g.dtype, np.integer)
                or np.any(np.diff(g) <= 0) or g[0] < 0 or g[-1] > steps):
            raise ValueError(f"record_every must be 'log', a positive int or strictly increasing "
                             f"ints in [0, steps={steps}], got {record_every!r}")
        if not initial:
            g = g[g > 0]
        return np.unique(np.concatenate([start, g, [steps], extra])).astype(np.int64)
    if isinstance(record_every, str):
        check_choice("record_every", record_every, ("log",))
        n_records = check_int("n_records", n_records, minimum=2 if initial else 1)
        g = np.round(np.geomspace(1, steps, n_records - len(start))).astype(np.int64)
        return np.unique(np.concatenate([start, g, [steps], extra])).astype(np.int64)
    k = check_int("record_every", record_every, minimum=1)
    g = np.arange(0 if initial else k, steps + 1, k)
    return np.unique(np.concatenate([g, [steps], extra])).astype(np.int64)


@dataclass
class History:
    """Recorded trajectory of a batched :func:`~attnsvm.train.fit` (numpy arrays; ``K`` records, ``B`` trials).

    Attributes
    ----------
    steps : (K,) int
        Record steps (number of updates applied; 0 = initialization).
    loss, log_loss : (K, B)
        Full-data loss :math:`L` and :math:`\\log L` (``log_loss`` is NaN for the correlation
        loss). ``log_loss`` stays accurate when ``loss`` underflows to 0.
    norm : (K, B)
        :math:`\\|W\\|_F` (``K Q^T`` for "KQ"), :math:`\\|p\\|` or :math:`\\|w\\|`.
    corr : dict name -> (K, B)
        Correlation of that matrix with each reference in ``refs`` (NaN while it is 0).
    opt_mass : (K, B) or None
        Mean over sequences of the softmax mass on the optimal token.
    selected : (K, B, n) int or None
        :math:`\\arg\\max_t` of the attention scores of each sequence.
    margin : (K, B) or None
        Linear model: normalized margin :math:`\\min_i y_i w^\\top x_i / \\|w\\|`.
    excess : (K, B) or None
        A model object with ``L_star``: the excess loss :math:`L - L^\\star`.
    opt : (B, n) int or None
        The optimal tokens used for ``opt_mass`` at initialization.
    params : dict name -> ndarray
        Final parameters with the trials axis (``W`` always present for "W"/"KQ").
    snapshots : (K, B, ...) or None
        The main matrix at each record step (``snapshots=True``, or its name in ``snapshots``).
    trajectory : dict name -> (K, B, ...)
        Every parameter named in ``snapshots`` at each record step (e.g. ``"W"`` and ``"v"``).
    config : dict
        The resolved arguments of the run.
    """

    steps: np.ndarray
    loss: np.ndarray
    log_loss: np.ndarray
    norm: np.ndarray
    corr: dict = field(default_factory=dict)
    opt_mass: np.ndarray | None = None
    selected: np.ndarray | None = None
    margin: np.ndarray | None = None
    excess: np.ndarray | None = None
    opt: np.ndarray | None = None
    params: dict = field(default_factory=dict)
    snapshots: np.ndarray | None = None
    trajectory: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)

    @property
    def trials(self):
        """Number of trials ``B`` (1 for the History of one trial, :meth:`trial`)."""
        if self.loss is not None:
            return self.loss.shape[1] if self.loss.ndim == 2 else 1
        return int(self.config["trials"])

    def trial(self, b):
        """The History of trial ``b`` alone, without the trials axis: ``loss`` (K,),
        ``selected`` (K, n), ``W`` (d, d), ``snapshots`` (K, d, d), ... :func:`attnsvm.train.fit`
        always returns the batched History (``B = 1`` for data without a trials axis);
        ``.trial(0)`` gives arrays shaped like such data, e.g.
        ``att_svm(data.X, data.Z, h.trial(0).selected[-1])``.
        """
        B = self.trials
        if self.loss is not None and self.loss.ndim != 2:
            raise ValueError("trial(b) needs a batched History (this one holds one trial)")
        b = check_int("b", b, minimum=-B)
        if b >= B:
            raise ValueError(f"b must be < {B} (the number of trials), got {b}")

        return self._select(lambda a, axis: a[(slice(None),) * axis + (b,)],
                            dict(self.config, trials=1, trial=b % B))

    def _select(self, pick, config):
        """A History of the same steps with every per-trial array ``a`` replaced by
        ``pick(a, axis)`` (``axis`` its trials axis: 0 for ``params`` and ``opt``, else 1)."""
        def at(a, axis=1):
            return None if a is None else pick(a, axis)
        return History(steps=self.steps, loss=at(self.loss), log_loss=at(self.log_loss),
                       norm=at(self.norm), corr={k: at(v) for k, v in self.corr.items()},
                       opt_mass=at(self.opt_mass), selected=at(self.selected),
                       margin=at(self.margin), excess=at(self.excess), opt=at(self.opt, 0),
                       params={k: at(v, 0) for k, v in self.params.items()},
                       snapshots=at(self.snapshots),
                       trajectory={k: at(v) for k, v in self.trajectory.items()},
                       config=config)

    def take(self, trials):
        """The History of the trials ``trials`` (int indices), keeping the trials axis: the
        records of those trials only, in that order (``config["trials"]`` their number). The
        runs of :func:`attnsvm.runs.fit_settings` are one ``fit`` with a rule per trial, split
        back into one History per rule with this."""
        B = self.trials
        if self.loss is not None and self.loss.ndim != 2:
            raise ValueError("take(trials) needs a batched History (this one holds one trial)")
        idx = np.asarray(trials)
        if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer) or idx.size == 0 or (
                idx.min() < -B or idx.max() >= B):
            raise ValueError(f"trials must be a non-empty sequence of trial indices in "
                             f"[{-B}, {B}), got {trials!r}")

        return self._select(lambda a, axis: np.take(a, idx, axis=axis),
                            dict(self.config, trials=int(idx.size)))

    def _p(self, name):
        if name not in self.params:
            raise AttributeError(f"this run has no parameter {name!r}; it has {sorted(self.params)}")
        return self.params[name]

    W = property(lambda self: self._p("W"), doc="Final W (B,d,d) (K Q^T for 'KQ').")
    K = property(lambda self: self._p("K"), doc="Final K (B,d,m).")
    Q = property(lambda self: self._p("Q"), doc="Final Q (B,d,m).")
    p = property(lambda self: self._p("p"), doc="Final prompt p (B,d).")
    v = property(lambda self: self._p("v"), doc="Final head v (B,d).")
    w = property(lambda self: self._p("w"), doc="Final linear classifier w (B,d).")

    def series(self, name):
        """The recorded (K, B) series ``name``: a metric field or a key of :attr:`corr`."""
        if name in self.corr:
            return self.corr[name]
        if name in ("loss", "log_loss", "norm", "opt_mass", "margin", "selected", "excess"):
            val = getattr(self, name)
            if val is None:
                raise ValueError(f"{name!r} was not recorded for this model")
            return val
        raise ValueError(f"name must be a metric ('loss', 'log_loss', 'norm', 'opt_mass', "
                         f"'margin', 'selected', 'excess') or a corr key {sorted(self.corr)}, got {name!r}")

    def final(self, name):
        """The last record of ``name`` (one value per trial)."""
        return self.series(name)[-1]
