r"""The batched training engine: many independent trials as one tensor program.

:func:`fit` trains ``B`` independent trials at once. Data and parameters carry a leading
trials axis; each trial has its own data, its own initialization (seeded from
``(seed, b)``) and its own mini-batch stream, and every norm in a step rule is taken per
trial. Trial ``b``'s trajectory does not depend on ``B`` or on the other trials: running the
trials one at a time (with ``seed=[(seed, b)]``) gives the same numbers up to the last bits:
the elementwise ``exp``/``log`` kernels round an element by its position in the tensor (README,
"The same numbers on every machine, to a stated tolerance").

One step, for every trial at once:

1. forward pass: margins :math:`u_i = y_i f(X_i)` (:mod:`attnsvm.models`);
2. log-scaled loss gradient :math:`\nabla L = e^{\sigma}\tilde g` from the hand-derived
   formulas (for the MLP head, with the head linearized at :math:`h_i`), see
   :func:`attnsvm.losses.grad_coefficients`;
3. the step rule's increment (:func:`attnsvm.optim.update`).

Metrics are computed only on the record grid (log-spaced by default).

The pieces: :class:`FitConfig` (the arguments, validated against the data before anything
runs); the model's terms, one interface for both kinds of model (``_MarginTerms`` for a
model name, ``_ObjectiveTerms`` for a model object on the objective interface of
:mod:`attnsvm.models.objective`): the gradient of a step and the records of a record step;
then one step (the rule's increment), one recorder (what is recorded at the record steps,
snapshots of any named parameter), one finite-value guard (:class:`NonFiniteError` naming
the trial and the step) and one loop. :func:`fit` builds the configuration and :func:`run`
runs it.

Part III's runs on top of :func:`fit` (one call per optimizer, every step recorded, the global
theorem checked) live in :mod:`attnsvm.runs`; the engine imports neither the bounds nor the metrics.
The records (:class:`~attnsvm.history.History`, :func:`~attnsvm.history.record_grid`,
:class:`~attnsvm.history.NonFiniteError`) live in :mod:`attnsvm.history`; ``attnsvm.train`` re-exports
them, the types its :func:`fit` returns and raises.
"""
from __future__ import annotations

import inspect
import math
import numbers
import os
import sys
import warnings
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from ._checks import as_float_array, check_choice, check_int, check_positive
from ._env import ENGINE_LOG_ENV
from .data import AttnData, LinearData, keyed_stream
from .losses import get_loss, log_excess_loss, log_mean_loss
from .models import AttentionClassifier, LinearClassifier, is_objective_model
from .models.parameterizations import SPAN_FIXED, span_coordinates
from .optim import OPTIMIZERS, Context, Descent, PerTrial, make_rule
from .devices import resolve_device
from .history import History, NonFiniteError, record_grid

__all__ = ["fit", "run", "FitConfig", "History", "NonFiniteError", "record_grid",
           "OPTIONS", "ENGINES", "ENGINE_LOG_ENV", "GRAPH_ENV", "POLYAK_CAP"]

#: the engine paths :func:`fit` may take (``engine=``; ``History.config["engine"]`` says which ran)
ENGINES = ("auto", "eager", "graph", "compiled")
#: the rules that ``coordinates="span"`` takes: each increment a per-trial multiple of the
#: gradient, with the Frobenius norm where it normalizes (invariant under the rotation of
#: :class:`attnsvm.models.parameterizations.WSpanScores`)
SPAN_RULES = frozenset({"gd", "ngd", "polyak", "polyak_star"})
#: ``coordinates="auto"`` takes the span coordinates from this dimension on, where ``n`` is at most
#: :data:`SPAN_MAX_RATIO` ``d``: measured by ``benchmarks/span_speed.py`` on the 2-core AMD EPYC
#: CPU (B = 100, one thread): 0.9x at (n, d) = (6, 10) (the small batched products' per-item
#: costs), 1.03-1.6x at every measured shape with d >= 12 and n <= 3d/4, 1.0x at (30, 32)
SPAN_MIN_D = 12
#: see :data:`SPAN_MIN_D`
SPAN_MAX_RATIO = 0.75
#: ``ATTNSVM_CUDA_GRAPH=0`` turns the CUDA-graph path off (``engine="auto"`` then runs eager)
GRAPH_ENV = "ATTNSVM_CUDA_GRAPH"
#: steps per captured block of the graph path
GRAPH_BLOCK = 32
#: compilations of the step (``engine="compiled"``: shapes and constants) allowed per process
COMPILE_LIMIT = 64

#: the default cap ``eta_max`` of the L-based Polyak step (``optimizer="polyak"`` or ``"sps"``
#: with ``eta_max="auto"``): the book's cap (chapters 1, 9-11). Uncapped, the step
#: :math:`\eta L/\|g\|^2` grows like :math:`1/L` as the loss falls and overflows within tens of
#: steps on a random instance (a smaller ``lr`` only delays it); ``eta_max=None`` asks for that.
POLYAK_CAP = 100.0


# ----------------------------------------------------------------------------- helpers
def _trial_keys(seed, B):
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        return [(int(seed), b) for b in range(B)]
    try:
        keys = [tuple(int(x) for x in np.atleast_1d(s)) for s in seed]
    except (TypeError, ValueError):
        raise ValueError(f"seed must be an int or a sequence of B per-trial seeds, got {seed!r}") from None
    if len(keys) != B:
        raise ValueError(f"seed as a sequence must have one entry per trial ({B}), got {len(keys)}")
    if any(x < 0 for k in keys for x in k):
        raise ValueError("seed entries must be >= 0")
    return keys


_M32 = 0xFFFFFFFF


def _hash32(x):
    """A 32-bit integer mixer on int64 tensors (values in [0, 2^32)); no int64 overflow."""
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & _M32
    return (x >> 16) ^ x


def _minibatch(keys32, step, n, bs, ar_n):
    """Per-trial sample of ``bs`` of ``n`` indices without replacement, a pure function of
    (trial key, step): a random permutation from hashed sort keys."""
    h = _hash32((keys32 + step * 0x9E3779B1) & _M32)                     # (B,)
    hk = _hash32((h.unsqueeze(-1) + (ar_n + 1) * 0x85EBCA6B) & _M32)      # (B,n)
    order = torch.argsort(hk * n + ar_n, dim=-1)
    return order[:, :bs]


def _bcast(x, g):
    return x.reshape(x.shape + (1,) * (g.ndim - 1))


def _gather(full, idx):
    rows = torch.arange(idx.shape[0], device=idx.device).unsqueeze(-1)
    return {k: (v[rows, idx] if k != "v" else v) for k, v in full.items()}


def _ref_tensor(name, R, B, shape, kw):
    a = as_float_array(f"refs[{name!r}]", R)
    if a.shape == shape:
        a = np.broadcast_to(a, (B,) + shape)
    elif a.shape != (B,) + shape:
        raise ValueError(f"refs[{name!r}] must have shape {shape} or {(B,) + shape}, got {a.shape}")
    return torch.as_tensor(np.array(a, copy=True), **kw)


def _positive_per_trial(name, value, what, allow_inf=False):
    """A positive float, or one positive ``what`` per trial (a float array (B,); with
    ``allow_inf``, ``inf`` entries too: ``eta_max``'s "no cap" for that trial).

    Used for ``lr`` and ``eta_max``; the length against the trials is checked where the number
    of trials is known (``FitConfig._check_lr_trials``).
    """
    if isinstance(value, (numbers.Real, np.number)) and not isinstance(value, bool):
        return check_positive(name, value)
    a = as_float_array(name, value, ndim=1, finite=not allow_inf)
    if np.any(np.isnan(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be positive (a float or one positive {what} per trial)")
    return a


def _excess_gaps(G):
    r"""The data of :math:`\log(\mathcal{L} - \mathcal{L}^\star)` of the logistic risk with fixed
    token scores ``G`` (B,n,T) (:math:`\gamma_{it} = y_i\psi(x_{it})`), constant along a run:
    ``(log_gap, gamma_star)`` with :math:`\gamma^\star_i = \max_t G_{it}` (B,n) and
    :math:`\log(\gamma^\star_i - G_{it})` (B,n,T) (``-inf`` where the gap is 0). At attention
    :math:`s`, :math:`\mathcal{L} - \mathcal{L}^\star = \frac1n\sum_i[\ell(\gamma^\star_i -
    \delta_i) - \ell(\gamma^\star_i)]` with :math:`\delta_i = \sum_t s_{it}(\gamma^\star_i -
    G_{it})` summed in log space: :func:`attnsvm.losses.log_excess_loss` (``log_s``,
    ``log_gap``, ``gamma_star``), :math:`\mathcal{L}^\star = \frac1n\sum_i\ell(\gamma^\star_i)`."""
    gs = G.max(-1, keepdim=True).values
    D = gs - G
    log_gap = torch.where(D > 0, torch.log(torch.where(D > 0, D, 1.0)), -torch.inf)
    return log_gap, gs[..., 0]


# ----------------------------------------------------------------------------- configuration
#: the options of the step rules (:data:`attnsvm.optim.RULES`), None = the rule's default
RULE_OPTIONS = ("norm", "p", "normalize", "decay", "period", "growth", "R0", "step_power")

@dataclass
class FitConfig:
    r"""The validated arguments of one :func:`fit` run (see :func:`fit` for their meaning).

    Build it with :meth:`FitConfig.build`, which checks every argument against the data and
    resolves the defaults (step size, initialization, device, record grid) before anything runs.
    Fields after ``num_threads`` are derived: the step ``rule`` and whether it is ``stochastic``,
    the torch ``dev``, the record ``grid``, the ``net`` (model object) and the tensor keyword
    arguments ``kw``.
    """

    model: object = "W"
    m: int | None = None
    head: str = "linear"
    width: int | None = None
    train_v: bool = False
    loss: str | None = None
    optimizer: str = "gd"
    lr: object = None
    eta_max: object = "auto"
    L_star: float | None = None
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    norm: object = None
    p: float | None = None
    normalize: bool | None = None
    decay: float | None = None
    period: int | None = None
    growth: float | None = None
    R0: float | None = None
    step_power: float | None = None
    steps: int = 2000
    batch_size: int | None = None
    penalty: float = 0.0
    init: object = None
    init_scale: float | None = None
    refs: dict | None = None
    opt: object = None
    record_every: object = "log"
    n_records: int = 100
    snapshots: object = False
    records: str = "all"
    seed: object = 0
    device: object = "auto"
    dtype: object = torch.float64
    progress: bool | None = None
    num_threads: int | None = None
    engine: str = "auto"
    coordinates: str = "auto"
    # derived by build() (not options of fit)
    rule: str = field(default="", repr=False, init=False)
    rule_obj: object = field(default=None, repr=False, init=False)
    rules: tuple | None = field(default=None, repr=False, init=False)
    objective: bool = field(default=False, repr=False, init=False)
    trials: int = field(default=0, repr=False, init=False)
    obj_batch: dict | None = field(default=None, repr=False, init=False)
    stochastic: bool = field(default=False, repr=False, init=False)
    lossobj: object = field(default=None, repr=False, init=False)
    dev: object = field(default=None, repr=False, init=False)
    net: object = field(default=None, repr=False, init=False)
    grid: np.ndarray | None = field(default=None, repr=False, init=False)

    @classmethod
    def build(cls, data, **kwargs):
        """Validate ``kwargs`` (the keyword arguments of :func:`fit`) against ``data``.

        Raises
        ------
        ValueError
            An invalid argument (the message names it).
        """
        unknown = set(kwargs) - set(OPTIONS)
        if unknown:
            raise TypeError(f"fit() got unexpected keyword arguments {sorted(unknown)}")
        cfg = cls(**kwargs)
        cfg._validate(data)
        return cfg

    @property
    def kw(self):
        """Tensor keyword arguments (dtype, device)."""
        return dict(dtype=self.dtype, device=self.dev)

    def _validate(self, data):
        """Every check, one concern per method, in the order of the messages of :func:`fit`."""
        self._check_model_kind()
        lr_default = self._check_optimizer()
        self._check_polyak_options()
        if self.objective:
            self._validate_objective(data)
        else:
            self._validate_margin(data)
        self.lr = self._check_lr(lr_default)
        self.steps = check_int("steps", self.steps, minimum=1)
        self._check_rule_options()
        self._check_run_options()
        self._check_init_and_penalty()
        self._check_coordinates(data)
        self.refs = {} if self.refs is None else dict(self.refs)
        self.snapshots = _snapshot_names(self.snapshots, self.model, self.net)
        self._check_records()
        if self.objective:
            self._objective_batch(data)

    def _check_records(self):
        """``records``: "all" or "snapshots" (which needs snapshots to record)."""
        check_choice("records", self.records, ("all", "snapshots"))
        if self.records == "snapshots" and not self.snapshots:
            raise ValueError("records='snapshots' records only the snapshots: pass snapshots=True "
                             "or parameter names")

    def _check_model_kind(self):
        """``model``: a model name or an object on the objective interface."""
        self.objective = is_objective_model(self.model)
        if not self.objective and (not isinstance(self.model, str)
                                   or self.model not in ("W", "KQ", "prompt", "linear")):
            raise ValueError(f"model must be one of ['KQ', 'W', 'linear', 'prompt'] or a model "
                             f"object with objective() (attnsvm.models.ObjectiveModel), "
                             f"got {self.model!r}")

    def _check_optimizer(self):
        """``optimizer``: sets the step ``rule`` and ``stochastic``; returns the default lr.

        A sequence of names gives one optimizer per trial (full-batch rules only): ``rule`` is
        then ``"per_trial"``, ``rules`` the rule of each trial and the default lr per trial."""
        if isinstance(self.optimizer, str):
            check_choice("optimizer", self.optimizer, OPTIMIZERS)
            self.rule, self.stochastic, lr_default = OPTIMIZERS[self.optimizer]
            return lr_default
        try:
            names = [str(nm) if isinstance(nm, (str, np.str_)) else None for nm in self.optimizer]
        except TypeError:
            raise ValueError(f"optimizer must be a name or one name per trial, "
                             f"got {self.optimizer!r}") from None
        if not names or None in names:
            raise ValueError(f"optimizer must be a name or a non-empty sequence of names (one "
                             f"per trial), got {self.optimizer!r}")
        for nm in names:
            check_choice("optimizer", nm, OPTIMIZERS)
        stoch = sorted({nm for nm in names if OPTIMIZERS[nm].stochastic})
        if stoch:
            raise ValueError(f"optimizer as one name per trial takes full-batch rules only; "
                             f"{stoch} draw mini-batches")
        self.optimizer = names
        if len(set(names)) == 1:            # one rule after all: the plain run
            self.optimizer = names[0]
            return self._check_optimizer()
        self.rule, self.stochastic = "per_trial", False
        self.rules = tuple(OPTIMIZERS[nm].rule for nm in names)
        return np.array([OPTIMIZERS[nm].lr for nm in names])

    def uses(self, *rules):
        """Whether some trial takes one of the step ``rules`` (names of :data:`attnsvm.optim.RULES`)."""
        return (self.rule in rules) if self.rules is None else any(r in rules for r in self.rules)

    def trials_of(self, *rules):
        """(B,) bool: the trials whose step rule is one of ``rules`` (a run with rules per trial)."""
        return np.array([r in rules for r in self.rules])

    def _check_polyak_options(self):
        r"""``eta_max`` and ``L_star``: only for the Polyak rules. ``eta_max="auto"`` is
        :data:`POLYAK_CAP` for the L-based step (polyak, sps) and no cap for polyak_star (its
        step :math:`(L - L^\star)/\|g\|^2` stays bounded where its theorem holds)."""
        optimizer = self.optimizer
        if isinstance(self.eta_max, str):
            if self.eta_max != "auto":
                raise ValueError(f"eta_max must be a positive float, one per trial, None (no cap) "
                                 f"or 'auto', got {self.eta_max!r}")
            if self.rules is None:
                self.eta_max = POLYAK_CAP if self.rule == "polyak" else None
            elif self.uses("polyak"):    # per trial: the cap of polyak, none (inf) elsewhere
                self.eta_max = np.array([POLYAK_CAP if r == "polyak" else np.inf for r in self.rules])
                return self._check_L_star()
            else:
                self.eta_max = None
        if self.eta_max is not None:
            if not self.uses("polyak", "polyak_star"):
                raise ValueError(f"eta_max applies only to optimizer='polyak', 'polyak_star' or "
                                 f"'sps', got {optimizer!r}")
            self.eta_max = _positive_per_trial("eta_max", self.eta_max, "cap", allow_inf=True)
        self._check_L_star()

    def _check_L_star(self):
        if self.L_star is not None:
            if not self.uses("polyak_star"):
                raise ValueError(f"L_star applies only to optimizer='polyak_star', "
                                 f"got {self.optimizer!r}")
            self.L_star = check_positive("L_star", self.L_star, allow_zero=True)

    def _check_rule_options(self):
        """The step rule's own options (:data:`RULE_OPTIONS`, Adam's constants), by
        :func:`attnsvm.optim.make_rule` (a ValueError names a bad or foreign option)."""
        opts = {k: getattr(self, k) for k in RULE_OPTIONS if getattr(self, k) is not None}

        def make(rule):
            return make_rule(rule, **(dict(opts, betas=self.betas, eps=self.eps)
                                      if rule == "adam" else opts))
        if self.rules is None:
            self.rule_obj = make(self.rule)
        else:
            self.rule_obj = PerTrial({r: make(r) for r in dict.fromkeys(self.rules)}, self.rules)

    def _check_run_options(self):
        """``dtype``, ``device``, the record grid and the progress bar."""
        if self.dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be torch.float64 or torch.float32, got {self.dtype!r}")
        self.dev = resolve_device(self.device)
        self.grid = record_grid(self.steps, self.record_every, self.n_records)
        if self.progress is None:
            self.progress = self.steps >= 20000 and sys.stderr.isatty()
        check_choice("engine", self.engine, ENGINES)

    def _check_coordinates(self, data):
        """``coordinates``: "matrix", or "span" where the run moves ``W`` in the queries' span
        by a rotation-invariant rule (:data:`SPAN_RULES`); "auto" resolves to "span" where it
        applies, ``d >=`` :data:`SPAN_MIN_D` and ``n <=`` :data:`SPAN_MAX_RATIO` ``d``, else
        "matrix"."""
        check_choice("coordinates", self.coordinates, ("auto", "matrix", "span"))
        if self.coordinates == "matrix":
            return
        why = self._span_blocker(data)
        if self.coordinates == "auto":
            self.coordinates = ("span" if why is None and data.d >= SPAN_MIN_D
                                and data.n <= SPAN_MAX_RATIO * data.d else "matrix")
        elif why is not None:
            raise ValueError(f"coordinates='span' needs {why} (optimizer={self.optimizer!r}, "
                             f"model={self.model!r})")

    def _span_blocker(self, data):
        """What keeps this run from the span coordinates (None: nothing)."""
        rules = set(self.rules) if self.rules is not None else {self.rule}
        if self.objective or self.model != "W" or self.head != "linear" or self.train_v:
            return "model='W' with a fixed linear head"
        if self.stochastic or self.batch_size is not None or not rules <= SPAN_RULES:
            return f"the full-batch rules {sorted(SPAN_RULES)}"
        if self.penalty:
            return "no penalty"
        if data.n >= data.d:
            return f"fewer sequences than dimensions (n < d), got n={data.n}, d={data.d}"
        return None

    def _check_init_and_penalty(self):
        if self.init_scale is not None:
            self.init_scale = check_positive("init_scale", self.init_scale)
        self.penalty = check_positive("penalty", self.penalty, allow_zero=True)

    def _objective_batch(self, data):
        """A model object's tensors (its ``batch(data)``) and the number of trials."""
        self.obj_batch = self.net.batch(data, dtype=self.dtype, device=self.dev)
        if not self.obj_batch:
            raise ValueError("the model's batch(data) returned no tensors")
        self.trials = int(next(iter(self.obj_batch.values())).shape[0])
        self._check_lr_trials()

    def _check_lr(self, default):
        """``lr``: a positive float, or one positive step size per trial (array (B,))."""
        return default if self.lr is None else _positive_per_trial("lr", self.lr, "step size")

    def _check_lr_trials(self):
        # lr may still be as given here (a list too): its shape, not its type, is checked
        if self.rules is not None and len(self.rules) != self.trials:
            raise ValueError(f"optimizer as a sequence must have one name per trial "
                             f"({self.trials}), got {len(self.rules)}")
        for name, what in (("lr", "step size"), ("eta_max", "cap")):
            value = getattr(self, name)
            if value is not None and np.ndim(value) >= 1 and np.shape(value) != (self.trials,):
                raise ValueError(f"{name} as an array must have one {what} per trial "
                                 f"({self.trials}), got shape {np.shape(value)}")

    def lr_value(self):
        """The step size as the rules take it: a float or a (B,) tensor."""
        return torch.as_tensor(self.lr, **self.kw) if isinstance(self.lr, np.ndarray) else self.lr

    def eta_max_value(self):
        """The Polyak cap as the rules take it: None, a float or a (B,) tensor."""
        if isinstance(self.eta_max, np.ndarray):
            return torch.as_tensor(self.eta_max, **self.kw)
        return self.eta_max

    def _validate_objective(self, data):
        net = self.model
        for attr in ("trainable", "batch", "init_params"):
            if not hasattr(net, attr):
                raise ValueError(f"model object {type(net).__name__} lacks {attr!r} (see "
                                 f"attnsvm.models.ObjectiveModel)")
        foreign = [k for k, v, d in (("m", self.m, None), ("head", self.head, "linear"),
                                     ("width", self.width, None), ("train_v", self.train_v, False),
                                     ("loss", self.loss, None), ("batch_size", self.batch_size, None),
                                     ("opt", self.opt, None)) if v != d]
        if self.penalty:
            foreign.append("penalty")
        if foreign:
            raise ValueError(f"{foreign} do not apply to a model object (its objective defines the "
                             f"loss; no mini-batches)")
        if self.stochastic:
            raise ValueError(f"optimizer={self.optimizer!r} needs mini-batches, which a model "
                             f"object does not support")
        if self.uses("polyak_star") and self.L_star is None and not hasattr(net, "L_star"):
            raise ValueError(f"optimizer='polyak_star' needs L_star= or a model with L_star(batch); "
                             f"{type(net).__name__} has none")
        self.net = net

    def _validate_margin(self, data):
        """A margin model (a model name): its loss, the model object and its data, the
        mini-batches, the default init and ``opt``."""
        self._check_margin_loss()
        self._margin_net(data)
        self.trials = data.trials
        self._check_batch_size(data.n)
        if self.init is None:
            self.init = "random" if self.model == "KQ" else "zeros"
        if self.opt is not None and self.model == "linear":
            raise ValueError("opt does not apply to model='linear'")
        self._check_lr_trials()

    def _check_margin_loss(self):
        """``loss`` (default logistic) and what the Polyak rules need of it."""
        optimizer = self.optimizer
        if self.loss is None:
            self.loss = "logistic"
        if self.uses("polyak_star") and self.L_star is None and (
                self.model not in ("W", "KQ", "prompt") or self.head != "linear" or self.train_v
                or self.loss != "logistic"):
            raise ValueError("optimizer='polyak_star' without L_star needs a fixed linear head "
                             "(model 'W', 'KQ' or 'prompt', train_v=False) and loss='logistic'")
        self.lossobj = get_loss(self.loss)
        if self.uses("polyak", "polyak_star") and not self.lossobj.nonnegative:
            raise ValueError(f"loss={self.loss!r} can be negative; the Polyak step (optimizer="
                             f"{optimizer!r}) needs a nonnegative loss")

    def _margin_net(self, data):
        """The model object of a model name, checked against the kind of ``data``."""
        if self.model == "linear":
            if not isinstance(data, LinearData):
                raise ValueError(f"data must be LinearData for model='linear', got {type(data).__name__}")
            if self.head != "linear" or self.train_v or self.m is not None or self.width is not None:
                raise ValueError("head, train_v, m and width do not apply to model='linear'")
            self.net = LinearClassifier()
            return
        if not isinstance(data, AttnData):
            raise ValueError(f"data must be AttnData for model={self.model!r}, "
                             f"got {type(data).__name__}")
        self.net = AttentionClassifier(self.model, m=self.m, head=self.head, width=self.width,
                                       train_v=self.train_v)

    def _check_batch_size(self, n):
        """``batch_size`` in [1, n] (required by the stochastic rules; n means full batch)."""
        if self.stochastic and self.batch_size is None:
            raise ValueError(f"batch_size is required for optimizer={self.optimizer!r}")
        if self.batch_size is not None:
            self.batch_size = check_int("batch_size", self.batch_size, minimum=1)
            if self.batch_size > n:
                raise ValueError(f"batch_size must be <= n = {n}, got {self.batch_size}")
            if self.batch_size == n:
                self.batch_size = None

    def as_dict(self, trials):
        """The resolved arguments, as recorded in :attr:`History.config`."""
        opts = {k: getattr(self, k) for k in RULE_OPTIONS if getattr(self, k) is not None}
        lr = self.lr.tolist() if isinstance(self.lr, np.ndarray) else self.lr
        eta_max = self.eta_max.tolist() if isinstance(self.eta_max, np.ndarray) else self.eta_max
        model = self.model if isinstance(self.model, str) else type(self.model).__name__
        init = self.init if isinstance(self.init, str) or self.init is None else "array"
        return dict(model=model, m=self.m, head=self.head, width=self.width,
                    train_v=self.train_v, loss=self.loss,
                    optimizer=self.optimizer if self.rules is None else list(self.optimizer), lr=lr,
                    eta_max=eta_max, steps=self.steps, batch_size=self.batch_size,
                    penalty=self.penalty, init=init, init_scale=self.init_scale, seed=self.seed,
                    device=str(self.dev), dtype=str(self.dtype), records=self.records,
                    coordinates=self.coordinates, trials=trials, **opts)


def _main_name(model):
    if not isinstance(model, str):
        return getattr(model, "main", model.trainable[0])
    return {"W": "W", "KQ": "W", "prompt": "p", "linear": "w"}[model]


def _snapshot_names(snapshots, model, net):
    """``snapshots`` as a tuple of parameter names (``True``: the main matrix; ``False``: none)."""
    if isinstance(snapshots, bool):
        return (_main_name(model),) if snapshots else ()
    if isinstance(snapshots, str):
        snapshots = (snapshots,)
    try:
        names = tuple(snapshots)
    except TypeError:
        raise ValueError(f"snapshots must be a bool or a sequence of parameter names, "
                         f"got {snapshots!r}") from None
    allowed = tuple(dict.fromkeys((_main_name(model),) + tuple(getattr(net, "param_names",
                                                                        net.trainable))))
    bad = [s for s in names if s not in allowed]
    if bad or len(set(names)) != len(names):
        raise ValueError(f"snapshots must name distinct parameters of model={model!r} among "
                         f"{list(allowed)}, got {list(names)}")
    return names


# ----------------------------------------------------------------------------- finite guard
class _FiniteGuard:
    """Non-finite detection without per-step host syncs: each step writes
    :math:`\\sum_i u_i` (NaN/inf iff some margin is) into a ring buffer of ``CHECK`` rows,
    inspected every ``CHECK`` steps and at records; :meth:`check` raises
    :class:`NonFiniteError` naming the first bad trial and its step."""

    CHECK = 256

    def __init__(self, B, kw, hint):
        self.buf = torch.empty((self.CHECK, B), **kw)
        self.first = 0                               # step held by buf[0]
        self.hint = hint

    def write(self, step, u):
        torch.sum(u, -1, out=self.buf[step - self.first])

    def write_block(self, step, sums):
        """The values of steps ``step, step + 1, ...`` at once (``sums`` (S, B))."""
        i = step - self.first
        self.buf[i:i + sums.shape[0]].copy_(sums)

    def full(self, upto):
        return upto - self.first == self.CHECK

    def check(self, upto):
        """Raise if any step in [first, upto) produced a non-finite margin."""
        cnt = upto - self.first
        if cnt > 0:
            fin = torch.isfinite(self.buf[:cnt])
            if not bool(fin.all()):
                bad = (~fin).cpu().numpy()
                trials = np.flatnonzero(bad.any(0))
                steps_bad = self.first + bad.argmax(0)
                b = int(trials[np.argmin(steps_bad[trials])])
                k = int(steps_bad[b])
                more = f" ({len(trials)} trials in all)" if len(trials) > 1 else ""
                raise NonFiniteError(f"trial {b} became non-finite (NaN or inf) at step {k}{more}; "
                                     f"{self.hint}", trial=b, step=k)
        self.first = upto

    def check_final(self, u, steps):
        """Check the final iterate itself (``u``: its margins (B,n), or losses (B,1))."""
        torch.sum(u, -1, out=self.buf[0])
        self.first = steps
        self.check(steps + 1)


def _nonfinite_hint(cfg):
    """What helps a run of ``cfg`` that became non-finite, naming the knob of its rule: the cap
    ``eta_max`` for the Polyak steps (a smaller ``lr``, their multiplier, only delays the
    overflow), ``lr`` otherwise."""
    if cfg.uses("polyak", "polyak_star"):
        if cfg.eta_max is None:
            return (f"the uncapped Polyak step grows as the loss falls: cap it with eta_max "
                    f"(e.g. eta_max={POLYAK_CAP:g}; a smaller lr only delays the overflow)")
        return (f"try a smaller cap eta_max (now {_describe(cfg.eta_max)}; a smaller lr only "
                f"delays the overflow)")
    hint = f"try a smaller lr (now {_describe(cfg.lr)})"
    if cfg.uses("adam") and cfg.eps == 0:
        hint += " or eps > 0"
    return hint


def _describe(value):
    """A float, or the range of a per-trial array, for a message."""
    if isinstance(value, np.ndarray):
        return f"{value.min():g} to {value.max():g} per trial"
    return f"{value:g}"


# ----------------------------------------------------------------------------- setup
def _tensors(cfg, data):
    """Data tensors (with trials axis), initial parameters, references, optimal tokens and the
    mini-batch keys of a run."""
    kw, net, model, dev = cfg.kw, cfg.net, cfg.model, cfg.dev
    B, d, n = data.trials, data.d, data.n
    lead = (lambda a: a) if data.batched else (lambda a: a[None])
    full = {"X": torch.as_tensor(lead(data.X), **kw), "y": torch.as_tensor(lead(data.y), **kw)}
    if model != "linear":
        full["Z"] = torch.as_tensor(lead(data.Z), **kw)
        v0 = torch.as_tensor(lead(data.v), **kw)
    else:
        v0 = None
    keys = _trial_keys(cfg.seed, B)
    rngs = [keyed_stream("fit-init", *k, 0) for k in keys]
    params = net.init_params(d, v0, rngs, init=cfg.init, init_scale=cfg.init_scale, **kw)
    if model != "linear" and net.head == "linear" and not cfg.train_v:
        full["G"] = net.head_values(params, full["X"])            # token values X v, fixed
        full["Gy"] = full["y"].unsqueeze(-1) * full["G"]           # token scores y X v
    if model != "linear":
        # the tokens transposed (B,n,d,T): X^T q is then a contiguous matrix-vector product
        full["Xt"] = full["X"].transpose(-1, -2).contiguous()
    main_shape = (d,) if model in ("prompt", "linear") else (d, d)
    ref_t = {name: _ref_tensor(name, R, B, main_shape, kw) for name, R in cfg.refs.items()}
    opt_t = None
    if cfg.opt is not None:
        o = np.asarray(cfg.opt)
        if not np.issubdtype(o.dtype, np.integer) or o.shape not in ((n,), (B, n)):
            raise ValueError(f"opt must be an integer array of shape ({n},) or ({B}, {n}), got {o.shape}")
        if np.any(o < 0) or np.any(o >= data.T):
            raise ValueError(f"opt entries must lie in [0, {data.T})")
        opt_t = torch.as_tensor(np.broadcast_to(o, (B, n)).copy(), device=dev)
    keys32 = torch.as_tensor([int(keyed_stream("fit-noise", *k, 1).integers(2 ** 32))
                              for k in keys], dtype=torch.int64, device=dev)
    return full, params, ref_t, opt_t, keys32


# ----------------------------------------------------------------------------- fit
def fit(data, **options):
    r"""Train ``B`` independent trials of a model at once and record their trajectories.

    Parameters
    ----------
    data : AttnData, LinearData, or what a model object takes
        With or without a leading trials axis (without it, ``B = 1``: the History keeps the
        axis, and ``History.trial(0)`` drops it).
    model : {"W", "KQ", "prompt", "linear"} or a model object
        Attention parameterization (see :class:`attnsvm.models.AttentionClassifier`), or the
        linear classifier :math:`f(x) = w^\top x` (needs :class:`LinearData`), or a model with
        its own objective (the interface of :mod:`attnsvm.models.objective`, e.g.
        :class:`attnsvm.models.NTPLinear` on :class:`attnsvm.data.NTPData`): its ``batch(data)``
        reads ``data``; ``m``, ``head``, ``width``, ``train_v``, ``loss``, ``batch_size``,
        ``penalty`` and ``opt`` do not apply; ``init`` defaults to the model's choice.
    m : int, optional
        Inner dimension of K, Q (default d).
    head : {"linear", "mlp"}
        Linear head :math:`v^\top h` (``v`` from the data) or a ReLU MLP head
        :math:`c^\top\mathrm{relu}(Uh)` of hidden size ``width`` (default 2d).
    train_v : bool
        Train the head jointly with the attention (``v``, or ``U`` and ``c``).
    loss : {"logistic", "exponential", "correlation"}, optional
        Default "logistic" (margin models only).
    optimizer : str
        One of "gd", "ngd", "ngd_param", "polyak", "polyak_star", "adam", "sign", "sd", "md",
        "prgd", "sgd", "sngd", "sps" (:data:`attnsvm.optim.OPTIMIZERS`): a step rule of :mod:`attnsvm.optim`;
        "sgd", "sngd", "sps" are "gd", "ngd", "polyak" on mini-batches and need ``batch_size``;
        every other rule also accepts ``batch_size`` (margin models only).
    lr : float or array (B,), optional
        Step size :math:`\eta` (> 0), or one per trial. Default 0.1 (gd, ngd, ngd_param, sd, md,
        prgd, sgd, sngd), 1.0 (the Polyak multiplier: polyak, sps), 0.01 (adam, sign).
    eta_max : float, array (B,), None or "auto"
        Cap on the Polyak step size (polyak, polyak_star, sps only), or one per trial; None:
        no cap. Default "auto": :data:`POLYAK_CAP` (100) for polyak and sps, whose uncapped
        step grows like :math:`1/L` and overflows within tens of steps on a random instance;
        no cap for polyak_star. History.config["eta_max"] records the cap used.
    L_star : float, optional
        ``polyak_star`` only: the loss floor :math:`L^\star` of the step
        :math:`\eta_t = \eta\,(L - L^\star)/\|g\|^2`. Default ``None``: the exact infimum
        :math:`\frac1n\sum_i \ell(\max_t \gamma_{it})` of the logistic risk of a fixed linear
        head (the infimum whenever the Att-SVM of the optimal tokens is feasible), with
        :math:`L - L^\star` evaluated exactly from the attention weights (no cancellation).
        A float uses :math:`L - L^\star` as computed, which loses all accuracy once
        :math:`L - L^\star \lesssim 10^{-16} L` (the step is then 0 where it is not positive).
    betas, eps : Adam's constants (``eps=0``: Adam without its stability constant, exact in the
        log-scaled form).
    norm : 2, "inf", 1, real p >= 1 or "spectral"
        ``sd`` only: the norm of steepest descent (default 2).
    p : float > 1
        ``md`` only (required): the potential :math:`\frac1p\|w\|_p^p` of mirror descent.
    normalize : bool
        ``md`` only: divide the gradient by its dual norm :math:`\|g\|_{p/(p-1)}`.
    decay : float >= 0
        The step schedule :math:`\eta_t = \eta\,(t+1)^{-\mathrm{decay}}` (every rule but the
        Polyak ones; default 0).
    period, growth, R0, step_power
        ``prgd`` only: phase length (100), radius growth factor (2), first radius (1) and step
        exponent (1/2) of progressive rescaling (:mod:`attnsvm.optim`).
        An option given to a rule that does not take it raises ValueError naming it.
    steps : int
        Number of updates (>= 1).
    batch_size : int, optional
        Mini-batch size in [1, n]: each step, trial ``b`` draws ``batch_size`` sequences without
        replacement, a deterministic function of ``(seed_b, step)``.
    penalty : float
        :math:`\lambda \ge 0`: adds :math:`\lambda \sum_j \|\theta_j\|_F^2` over the attention
        parameters (W; K and Q; p; w) to the training objective (the recorded ``loss`` is the
        data loss alone). The earlier public code used :math:`\lambda \approx 2.2\cdot 10^{-16}`
        for (K,Q); it matters only once the loss gradient has become that small.
    init : {"zeros", "random"}, array or dict, optional
        Default "zeros" ("random" for "KQ", where zero is a saddle). "random": i.i.d.
        :math:`N(0, \mathrm{init\_scale}^2)`, default scale 0.01. An array is the main parameter
        (with or without trials axis); a dict maps parameter names to arrays.
    refs : dict name -> array, optional
        Reference directions for ``History.corr``: shape of the main matrix ((d,d) for "W"/"KQ",
        (d,) for "prompt"/"linear"), with or without trials axis.
    opt : array of int (n,) or (B, n), optional
        Optimal tokens for ``opt_mass``; default :math:`\arg\max_t y_i \psi(x_{it})` under the
        current head (the data's ``v`` when the head is fixed).
    record_every : "log", int or sequence of int
        Record grid (:func:`record_grid`): log-spaced, every ``k`` steps, or explicit steps.
    n_records : int
        Number of log-spaced records (``record_every="log"``).
    snapshots : bool or sequence of str
        Record parameters at every record step: ``True`` the main matrix (``W``, ``K Q^T`` for
        "KQ", ``p`` or ``w``), into ``History.snapshots``; names (e.g. ``("W", "v")``) any of the
        model's parameters, into ``History.trajectory`` (and ``History.snapshots`` when the main
        matrix is among them).
    records : {"all", "snapshots"}
        What a record step records: ``"all"`` (default) the metrics of :class:`History` and the
        snapshots; ``"snapshots"`` the snapshots only (``loss``, ``log_loss``, ``norm``,
        ``corr`` and the model's metrics are None or empty), for a caller that computes its
        own quantities from ``History.trajectory`` (:func:`every_step`: ~40% of a run recorded
        at every step went to the unused metrics). The finite guard then checks at the end of
        each ring of :attr:`_FiniteGuard.CHECK` steps and at the end, not at every record (no
        host synchronization per record on a GPU); a non-finite trial is still named with its
        first non-finite step. On the block path the snapshots are taken inside the blocks
        (static buffers, captured with the steps on CUDA), so a record step no longer ends a
        block.
    seed : int or sequence
        Trial ``b`` draws its init and mini-batches from the key ``(seed, b)``; a sequence
        gives each trial's key explicitly (e.g. ``seed=[(0, 3)]`` reruns trial 3 of ``seed=0``).
    device : "auto", "cpu", "cuda" or torch.device
    dtype : torch.float64 (default) or torch.float32
    progress : bool, optional
        tqdm progress bar; default on for runs of >= 20000 steps on a terminal.
    num_threads : int, optional
        CPU threads for the run (restored afterwards). Default: 1 for small problems
        (``B n T max(T, d) < 2^18``), where intra-op threading only adds overhead; else torch's
        setting.
    engine : {"auto", "eager", "graph"}
        How the step loop runs. ``"auto"`` (default): on CUDA, when the step can be replayed
        (full batch, a rule of :class:`attnsvm.optim.Descent` with a constant step size or the
        Polyak step, a model name, not spectral steepest descent), the steps between two records
        replay a captured CUDA graph of the eager step in blocks of :data:`GRAPH_BLOCK` steps
        (``torch.cuda.CUDAGraph`` over the run's own parameter tensors; the finite guard's
        values written per block); elsewhere the eager loop. ``"eager"``: always the eager loop.
        ``"graph"``: the block path where the step can be replayed (else ValueError); off CUDA
        each block is executed eagerly (the same bookkeeping, testable on a CPU).
        ``"compiled"``: the block path with the eager step compiled by ``torch.compile``
        (``fullgraph=True``, no host branch: the step's CPU-only checks take their branch-free
        form, equal values) so that its elementwise chain is fused; on CUDA the compiled steps
        are captured as above (``"cuda-graph-compiled"``), elsewhere called one by one
        (``"compiled"``). It compiles once per process and shape (seconds), and on this
        project's 2-core CPU it is slower than eager (``benchmarks/graph_speed.py --cpu``), so
        ``"auto"`` never takes it; it exists to be measured on a GPU (issue 25).
        ``History.config["engine"]`` says which path ran (``"cuda-graph"``, ``"graph-eager"``,
        ``"cuda-graph-compiled"``, ``"compiled"``, ``"eager"``); ``ATTNSVM_CUDA_GRAPH=0`` turns
        the CUDA-graph path of ``"auto"`` off.
    coordinates : {"auto", "matrix", "span"}
        How the ``W`` model holds its matrix. ``"matrix"``: ``W`` itself. ``"span"``:
        :math:`W = W_0 + B^\top\hat Z` with :math:`\hat Z` an orthonormal basis of the queries'
        span and ``B`` (trials, n, d) trained
        (:class:`attnsvm.models.parameterizations.WSpanScores`): every rule of
        :data:`SPAN_RULES` moves ``W`` by multiples of the gradient, which lies in that span, so
        the run is the same (equal to rounding, ``tests/test_span.py``) and its step needs two
        :math:`n\times n` products instead of two :math:`d\times d` ones. Needs ``model="W"``
        with a fixed linear head, full batches, no penalty, a rule of :data:`SPAN_RULES` (per
        trial too) and ``n < d`` (else ValueError naming ``coordinates``). ``"auto"`` (default):
        ``"span"`` where it applies, ``d >=`` :data:`SPAN_MIN_D` and ``n <=``
        :data:`SPAN_MAX_RATIO` ``d`` (where ``benchmarks/span_speed.py`` measures it faster),
        else ``"matrix"``. Records, snapshots and
        ``History.params["W"]`` are the matrix either way; ``History.config["coordinates"]``
        says which ran.

    Returns
    -------
    History

    Notes
    -----
    **Recording.** Records are taken only at the steps of the record grid (:func:`record_grid`),
    never in between: ``record_every="log"`` (``n_records`` log-spaced steps), an int ``k``
    (every ``k`` steps) or an explicit, strictly increasing sequence of steps (0 and ``steps``
    are always added). What is recorded at each grid step is in :class:`History` (loss,
    log-loss, norm, correlations with ``refs``, and for attention models the optimal-token mass
    and the selected tokens); ``snapshots`` adds any named parameter (``History.trajectory``).
    A caller that needs its own quantity along a trajectory (e.g. the iterates of
    the Part IV geometry runs, a rate measured at every step) passes the steps it needs
    as ``record_every`` and the parameters as ``snapshots``, and computes from
    ``History.trajectory``: there is no second training loop.

    **Options.** The keyword options are the fields of :class:`FitConfig` (:data:`OPTIONS`,
    declared there once); ``fit(data, **options)`` validates them with
    :meth:`FitConfig.build` (an unknown keyword raises TypeError, a bad value ValueError naming
    it) and runs them with :func:`run`.

    Raises
    ------
    ValueError
        Invalid hyper-parameters or data (the message names the argument).
    NonFiniteError
        A trial's iterate became NaN/inf (the message names the trial and the step).
    """
    return run(FitConfig.build(data, **options), data)


#: the options of :func:`fit`: the fields of :class:`FitConfig` (declared there, once)
OPTIONS = tuple(f.name for f in fields(FitConfig) if f.init)
# the keyword-only signature of fit, with the defaults of the fields (for help() and
# introspection; the call itself is fit(data, **options) validated by FitConfig.build)
fit.__signature__ = inspect.Signature(
    [inspect.Parameter("data", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
       for f in fields(FitConfig) if f.init])


def run(cfg, data):
    """Run a validated :class:`FitConfig` on ``data`` (what :func:`fit` does after validation).

    One path for every model: the model's terms (:class:`_MarginTerms` for a model name,
    :class:`_ObjectiveTerms` for a model object) give the step's gradient and the records;
    one :class:`_Step`, one :class:`_Recorder` and one loop do the rest."""
    terms = _ObjectiveTerms(cfg) if cfg.objective else _MarginTerms(cfg, data)
    params = terms.params
    record = _Recorder(cfg, terms)
    step = _Step(cfg, terms, params)
    engine = _engine(cfg)
    engine = _loop(cfg, terms.trials, params, record, step, lambda: terms.final_check(params),
                   terms.small, engine)
    hist = record.history(params)
    hist.config["engine"] = engine
    _log_engine(cfg.dev, engine)
    return hist


def _graph_blocker(cfg):
    """Why the step of ``cfg`` cannot be replayed from a captured graph (None: it can). A graph
    replays the kernels of one capture, so every value the step computes on the host from the
    step number must stay the same: no mini-batches (keyed by the step), no decaying step size,
    no rule with host-side state (Adam's bias correction, mirror descent, PRGD's phases), no SVD;
    model objects may synchronize in their own code."""
    rule = cfg.rule_obj
    rules = list(rule.rules.values()) if isinstance(rule, PerTrial) else [rule]
    if cfg.objective:
        return "a model object (its own objective may synchronize with the host)"
    if cfg.batch_size is not None:
        return "mini-batches (drawn from the step number on the host)"
    if not all(isinstance(r, Descent) for r in rules):
        return f"optimizer={cfg.optimizer!r} keeps per-step state on the host"
    if any(getattr(r.step, "decay", 0) for r in rules):
        return "a decaying step size (computed on the host at each step)"
    if any(getattr(r.direction, "norm", None) == "spectral" for r in rules):
        return "spectral steepest descent (an SVD per step)"
    return None


def _engine(cfg):
    """The engine path of a run: ``"cuda-graph"`` (CUDA, ``engine`` "auto" or "graph", a step
    that can be replayed), ``"graph-eager"`` (``engine="graph"`` off CUDA: the same blocks and
    static buffers, each block executed eagerly instead of replayed), ``"cuda-graph-compiled"``
    and ``"compiled"`` (``engine="compiled"`` on and off CUDA: the blocks' steps compiled) or
    ``"eager"``."""
    if cfg.engine == "eager":
        return "eager"
    why = _graph_blocker(cfg)
    if cfg.engine in ("graph", "compiled"):
        if why is not None:
            raise ValueError(f"engine={cfg.engine!r} cannot run this step: {why}")
        if cfg.engine == "compiled":
            return "cuda-graph-compiled" if cfg.dev.type == "cuda" else "compiled"
        return "cuda-graph" if cfg.dev.type == "cuda" else "graph-eager"
    off = os.environ.get(GRAPH_ENV, "1").strip().lower() in ("0", "false", "no", "off")
    return "cuda-graph" if cfg.dev.type == "cuda" and why is None and not off else "eager"


def _log_engine(dev, engine):
    path = os.environ.get(ENGINE_LOG_ENV)
    if path:
        try:
            with open(path, "a") as fh:
                fh.write(f"{dev.type} {engine}\n")
        except OSError:
            pass          # the log is a report, never a reason for a run to fail


def _loop(cfg, B, params, record, step, final_u, small, engine="eager"):
    """The step loop shared by both kinds of model: records on the grid, the finite guard, the
    progress bar and the thread setting (``small``: 1 CPU thread unless ``num_threads``).
    ``engine`` "cuda-graph" or "graph-eager" runs the steps between records in blocks
    (:func:`_graph_loop`). Returns the engine path that ran."""
    steps, dev = cfg.steps, cfg.dev
    guard = _FiniteGuard(B, cfg.kw, _nonfinite_hint(cfg))
    is_rec = np.zeros(steps + 1, dtype=bool)
    is_rec[cfg.grid] = True
    pbar = None
    if cfg.progress:
        from tqdm.auto import tqdm  # deferred: tqdm is optional (progress bars only)
        name = cfg.model if isinstance(cfg.model, str) else type(cfg.model).__name__
        opt = cfg.optimizer if cfg.rules is None else "per-trial"
        pbar = tqdm(total=steps, desc=f"fit {name}/{opt} B={B}", leave=False)
    tick = max(1, steps // 200)
    old_threads = torch.get_num_threads()
    num_threads = cfg.num_threads
    if num_threads is None and dev.type == "cpu" and small:
        num_threads = 1          # tiny tensors: intra-op threading is pure overhead
    try:
        if num_threads is not None and dev.type == "cpu":
            torch.set_num_threads(num_threads)
        with torch.no_grad():
            record(params)
            blocks = engine != "eager"
            if blocks:          # runs every step (eagerly after a failed capture: "eager")
                engine = _graph_loop(cfg, B, params, record, step, guard, is_rec, engine,
                                     pbar.update if pbar is not None else None)
            at_records = cfg.records == "all"      # else the guard checks per ring (no sync)
            for k in range(0 if blocks else steps):
                guard.write(k, step(params, k))
                if (at_records and is_rec[k + 1]) or guard.full(k + 1):
                    guard.check(k + 1)
                if is_rec[k + 1]:
                    record(params)
                if pbar is not None and (k + 1) % tick == 0:
                    pbar.update(tick)
            guard.check_final(final_u(), steps)
    finally:
        torch.set_num_threads(old_threads)
        if pbar is not None:
            pbar.close()
    return engine


def _graph_loop(cfg, B, params, record, step, guard, is_rec, engine, progress=None):
    """The steps of :func:`_loop` in blocks of :data:`GRAPH_BLOCK` steps.

    Between two events (a record step, a full ring of the finite guard) the steps run as whole
    blocks of a :class:`_GraphBlock` (replayed from one CUDA graph, or executed eagerly for
    ``engine="graph-eager"``; its steps compiled for the ``"compiled"`` paths), the rest one at a
    time (eagerly); every step writes its finite-guard value
    and the parameters stay in the same static tensors throughout. The guard is checked and
    the records taken at the same steps as in the eager loop. With ``records="snapshots"`` a
    record step is no event: each block also writes the snapshots of each of its steps into
    static buffers, and those of the record steps are appended after the replay (so a run
    recorded at every step, :func:`every_step`, still replays whole blocks). A capture that
    fails warns and the run goes on eagerly (returns ``"eager"`` then, else ``engine``)."""
    steps, S = cfg.steps, int(GRAPH_BLOCK)
    rec_steps = np.flatnonzero(is_rec)
    in_block = cfg.records == "snapshots"
    block = None
    k = 0
    while k < steps:
        k0 = k
        nxt = steps if in_block else int(rec_steps[np.searchsorted(rec_steps, k, side="right")])
        end = min(nxt, guard.first + guard.CHECK)
        if end - k >= S and block is None:
            try:
                block = _GraphBlock(step, params, S, B, cfg.kw,
                                    capture=engine.startswith("cuda-graph"),
                                    compiled=engine.endswith("compiled"),
                                    snap_fn=record.snap_values if in_block else None)
            except Exception as exc:  # noqa: BLE001 (any capture failure: the eager path)
                what = "compilation" if engine.endswith("compiled") else "CUDA-graph capture"
                warnings.warn(f"attnsvm.fit: the {what} failed, running eagerly "
                              f"({type(exc).__name__}: {exc})", RuntimeWarning, stacklevel=4)
                engine, S = "eager", steps + 1
        while end - k >= S:
            block.replay()
            guard.write_block(k, block.sums)
            if in_block:
                for j in np.flatnonzero(is_rec[k + 1:k + S + 1]):
                    record.append_snapshots({n: b[j] for n, b in block.snap_buf.items()})
            k += S
        while k < end:
            guard.write(k, _step_into(step, params, k))
            k += 1
            if in_block and is_rec[k]:
                record(params)
        guard.check(end)
        if not in_block and is_rec[end]:
            record(params)
        if progress is not None:
            progress(end - k0)
    return engine


def _step_into(step, params, k):
    """One eager step whose new parameters are copied into the tensors of ``params`` (the
    static buffers of the graph path); returns what the finite guard checks."""
    new = dict(params)
    check = step(new, k)
    for name, t in params.items():
        if new[name] is not t:
            t.copy_(new[name])
    return check


class _GraphBlock:
    """``S`` consecutive steps of the eager step (:class:`_Step`, unchanged) over static
    tensors: the run's parameter tensors, updated in place at the end of the block, and
    ``sums`` (S, B), the finite-guard value of each step. ``capture=True`` (CUDA) records the
    block once into a ``torch.cuda.CUDAGraph`` (after a warm-up step on copies, on a side stream)
    and :meth:`replay` replays it; ``capture=False`` executes the same callable eagerly at each
    :meth:`replay` (the bookkeeping of the graph path, testable on a CPU). The step's host-side
    state is restored after the capture, which ran its Python once without applying it."""

    def __init__(self, step, params, S, B, kw, capture, compiled=False, snap_fn=None):
        self.step, self.params, self.S = step, params, S
        self.sums = torch.empty((S, B), **kw)
        self.snap_fn, self.snap_buf = snap_fn, None
        if snap_fn is not None:                 # the snapshots after each step of the block
            self.snap_buf = {n: torch.empty((S,) + v.shape, dtype=v.dtype, device=v.device)
                             for n, v in snap_fn(params).items()}
        self.graph = None
        self.fn = _compiled_step(step) if compiled else None
        if compiled:
            # compile now (a failure, e.g. a graph break under fullgraph, falls back to eager
            # in _graph_loop) on copies: the run is not advanced
            self.fn({n: t.clone() for n, t in params.items()})
        if capture:
            self._capture()

    def _one(self, new, j):
        if self.fn is None:
            return self.step(new, j)
        upd, check = self.fn(new)
        new.update(upd)
        return check

    def _body(self):
        new = dict(self.params)
        for j in range(self.S):
            torch.sum(self._one(new, j), -1, out=self.sums[j])
            if self.snap_buf is not None:
                for n, v in self.snap_fn(new).items():
                    self.snap_buf[n][j].copy_(v)
        for name, t in self.params.items():
            if new[name] is not t:
                t.copy_(new[name])

    def _capture(self):
        state = self.step.state
        saved = dict(state)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):              # warm-up on copies: the run is not advanced
            self._one({n: t.clone() for n, t in self.params.items()}, 0)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self._body()
        finally:
            state.clear()
            state.update(saved)
        self.graph = graph

    def replay(self):
        if self.graph is None:
            self._body()
        else:
            self.graph.replay()


def _compiled_step(step):
    r"""``torch.compile`` of one eager step (:class:`_Step`, unchanged): a function of the
    parameters (dict) that returns ``(new parameters, finite-guard value)``. The rule's host
    counter is a fresh ``{"k": 0}`` inside (the rules the block path admits never read it, see
    :func:`_graph_blocker`), so the compiled graph does not depend on the step number and is
    not recompiled; ``fullgraph=True``: a graph break is an error, not a silent split. Another
    run of the same shapes and constants reuses the compiled code (the step's tensors are inputs
    of the graph); each new one (a shape, a float step size) compiles again, up to
    :data:`COMPILE_LIMIT` per process, after which the compilation fails (the run goes on
    eagerly and says so) rather than running eagerly under the compiled path's name."""
    def one(params):
        new = dict(params)
        check = step(new, 0, state={"k": 0})
        return new, check

    compiled = torch.compile(one, dynamic=False, fullgraph=True)

    def call(params):
        with torch._dynamo.config.patch(recompile_limit=COMPILE_LIMIT,
                                        fail_on_recompile_limit_hit=True):
            return compiled(params)
    return call


# ----------------------------------------------------------------------------- the model's terms
class _MarginTerms:
    r"""A margin model (``model`` a name: "W", "KQ", "prompt", "linear") on the engine's one
    interface: the data tensors and initial parameters, the log-scaled gradient of a step
    (mini-batch, penalty merged into the log scale, and the loss or excess loss the Polyak
    rules need) and the records (loss, log-loss; the normalized margin of the linear model,
    or the optimal-token mass and the selected tokens of an attention model)."""

    def __init__(self, cfg, data):
        self.cfg, self.net = cfg, cfg.net
        self.full, self.params, self.ref_t, self.opt_t, self.keys32 = _tensors(cfg, data)
        self.trials, self.n = data.trials, data.n
        if cfg.coordinates == "span":        # W = W0 + B^T Zh (models.parameterizations)
            self.net = self.net.in_span()
            W0 = self.params.pop("W")
            self.params = {"B": W0.new_zeros(W0.shape[:1] + (data.n, data.d)),
                           **span_coordinates(W0, self.full["Z"]), **self.params}
        self.trainable = tuple(self.net.trainable)
        self.main = _main_name(cfg.model)
        self.ar_n = torch.arange(data.n, device=cfg.dev)
        self.pen_names = [name for name in self.trainable if name in ("W", "K", "Q", "p", "w")]
        self.log2pen = math.log(2 * cfg.penalty) if cfg.penalty else None
        self.opt_init = None
        Tn = data.T if cfg.model != "linear" else 1
        self.small = data.trials * data.n * Tn * max(Tn, data.d) < 2 ** 18
        self.gaps = (_excess_gaps(self.full["Gy"]) if cfg.uses("polyak_star")
                     and cfg.L_star is None else None)
        self.star = _star_mask(cfg)

    def step_terms(self, params, k, want_log_loss):
        """``(grads, log_scales, log_loss, margins)`` of step ``k``."""
        cfg, net, lossobj = self.cfg, self.net, self.cfg.lossobj
        penalty = cfg.penalty
        batch = self.full if cfg.batch_size is None else _gather(
            self.full, _minibatch(self.keys32, k, self.n, cfg.batch_size, self.ar_n))
        star = self.star
        excess = cfg.uses("polyak_star") and cfg.L_star is None
        out = {} if excess else None
        u, grads, sigma = net.grad(params, batch, lossobj, out) if excess else net.grad(
            params, batch, lossobj)
        if star is None:       # every trial polyak_star: the excess replaces the loss
            want_log_loss = want_log_loss and not excess
        if penalty:
            log2pen = self.log2pen
            for name in self.pen_names:      # + 2 lambda theta, merged into the log scale
                sg = torch.clamp(sigma[name], min=log2pen)
                grads[name] = (grads[name] * _bcast(torch.exp(sigma[name] - sg), grads[name])
                               + params[name] * _bcast(torch.exp(log2pen - sg), grads[name]))
                sigma[name] = sg
        log_loss = log_mean_loss(lossobj, u) if want_log_loss else None
        if want_log_loss and penalty:
            sq = sum(params[name].flatten(1).pow(2).sum(1) for name in self.pen_names)
            log_loss = torch.logaddexp(log_loss, math.log(penalty) + torch.log(sq))
        if excess:                        # L - L* in log space, from the step's log-attention
            gaps = self.gaps if batch is self.full else _excess_gaps(batch["Gy"])
            log_star = log_excess_loss(out["log_s"], *gaps)
        elif cfg.uses("polyak_star"):
            log_star = torch.log(torch.clamp(torch.exp(log_loss) - cfg.L_star, min=0.0))
        else:
            return grads, sigma, log_loss, u
        # per trial, what its rule's step needs: L - L* (polyak_star) or L
        log_loss = log_star if star is None else torch.where(star, log_star, log_loss)
        return grads, sigma, log_loss, u

    def matrix(self, params):
        return self.net.matrix(params)

    def metrics(self, params, nrm):
        """The records of one record step, name -> (B,) (or (B, n) for ``selected``)."""
        cfg, net, full = self.cfg, self.net, self.full
        lossobj = cfg.lossobj
        u, cache = net.forward(params, full)
        out = {"loss": lossobj.value(u).mean(-1),
               "log_loss": (log_mean_loss(lossobj, u) if lossobj.nonnegative
                            else torch.full((self.trials,), float("nan"), **cfg.kw))}
        if cfg.model == "linear":
            out["margin"] = u.amin(-1) / nrm
            return out
        o = self.opt_t
        if o is None:
            o = net.token_scores(params, full).argmax(-1)
            if self.opt_init is None:
                self.opt_init = o
        out["opt_mass"] = cache["s"].gather(-1, o.unsqueeze(-1)).squeeze(-1).mean(-1)
        out["selected"] = net.scores(params, full, cache.get("W")).argmax(-1)
        return out

    def final_params(self, params):
        if self.cfg.coordinates == "span":   # the matrix, not its coordinates
            return {"W": self.net.matrix(params).cpu().numpy(),
                    **{k: p.cpu().numpy() for k, p in params.items()
                       if k not in ("B",) + SPAN_FIXED}}
        final = {k: p.cpu().numpy() for k, p in params.items()}
        if self.cfg.model == "KQ":
            final["W"] = self.net.matrix(params).cpu().numpy()
        return final

    def opt(self):
        src = self.opt_t if self.opt_t is not None else self.opt_init
        return None if src is None else src.cpu().numpy()

    def final_check(self, params):
        """The margins of the final iterate (the finite guard's last check)."""
        return self.net.forward(params, self.full)[0]


def _star_mask(cfg):
    r"""(B,) bool tensor of the ``polyak_star`` trials of a run with rules per trial that mixes
    them with others (their ``log_loss`` is :math:`\log(L - L^\star)`); None otherwise."""
    if cfg.rules is None or not cfg.uses("polyak_star"):
        return None
    return torch.as_tensor(cfg.trials_of("polyak_star"), device=cfg.dev)


def _evaluate(net, params, batch):
    """``net.objective`` as ``(loss (B,), grads, log_scale dict or None, log_loss (B,))``."""
    out = net.objective(params, batch)
    if not isinstance(out, tuple) or len(out) not in (3, 4):
        raise ValueError(f"{type(net).__name__}.objective must return (loss, grads, log_scale"
                         f"[, log_loss]), got {type(out).__name__}")
    loss, grads, ls = out[:3]
    log_loss = out[3] if len(out) == 4 and out[3] is not None else torch.log(loss)
    return loss, grads, ls, log_loss


class _ObjectiveTerms:
    r"""A model object (the objective interface of :mod:`attnsvm.models.objective`) on the
    engine's one interface: its batch and initial parameters, the gradient of a step (its
    ``gradient`` when the rule needs no loss, else its ``objective``, and the excess loss
    :math:`L - L^\star` for ``polyak_star``) and the records (loss, log-loss, excess)."""

    def __init__(self, cfg):
        net, batch, B = cfg.net, cfg.obj_batch, cfg.trials
        self.cfg, self.net, self.batch, self.trials = cfg, net, batch, B
        rngs = [keyed_stream("fit-init", *k, 0) for k in _trial_keys(cfg.seed, B)]
        self.params = dict(net.init_params(batch, rngs, init=cfg.init, init_scale=cfg.init_scale,
                                           **cfg.kw))
        missing = [k for k in net.trainable if k not in self.params]
        if missing:
            raise ValueError(f"{type(net).__name__}.init_params gave no {missing}")
        self.trainable = tuple(net.trainable)
        self.main = _main_name(net)
        shape = tuple(self.params[self.main].shape[1:])
        self.ref_t = {name: _ref_tensor(name, R, B, shape, cfg.kw) for name, R in cfg.refs.items()}
        self.fast = (not cfg.rule_obj.needs_log_loss
                     and callable(getattr(net, "gradient", None)))
        self.L_star_step = None
        if cfg.uses("polyak_star"):
            self.L_star_step = (net.L_star(batch) if cfg.L_star is None
                                else torch.full((B,), cfg.L_star, **cfg.kw))
        self.star = _star_mask(cfg)
        self.L_star = net.L_star(batch) if callable(getattr(net, "L_star", None)) else None
        self.small = sum(v.numel() for v in batch.values()) < 2 ** 18

    def step_terms(self, params, k, want_log_loss):
        """``(grads, log_scales, log_loss, check)``; ``check`` (B, 1) is finite iff the step is."""
        if self.fast:                     # the rule needs no loss: the model's gradient alone
            grads, ls = self.net.gradient(params, self.batch)
            log_loss = None
            first = self.trainable[0]     # finite iff the step is (a log-scale is NaN/inf with u)
            check = grads[first].flatten(1).sum(1) if ls is None else ls[first]
        else:
            loss, grads, ls, log_loss = _evaluate(self.net, params, self.batch)
            check = loss
        if self.L_star_step is not None:
            log_star = torch.log(torch.clamp(loss - self.L_star_step, min=0.0))
            log_loss = log_star if self.star is None else torch.where(self.star, log_star, log_loss)
        return grads, ls, log_loss, check.unsqueeze(-1)

    def matrix(self, params):
        return params[self.main]

    def metrics(self, params, nrm):
        loss, _, _, log_loss = _evaluate(self.net, params, self.batch)
        out = {"loss": loss, "log_loss": log_loss}
        if self.L_star is not None:
            out["excess"] = loss - self.L_star
        return out

    def final_params(self, params):
        return {k: p.cpu().numpy() for k, p in params.items()}

    def opt(self):
        return None

    def final_check(self, params):
        return _evaluate(self.net, params, self.batch)[0].unsqueeze(-1)


# ----------------------------------------------------------------------------- step
class _Step:
    """One update of every trial, for every kind of model: the model's terms (gradient in
    log-scaled form, the loss the Polyak rules need) and the rule's increment
    (:mod:`attnsvm.optim`). ``__call__`` returns what the finite guard checks (the margins of
    the batch, or the loss of a model object)."""

    def __init__(self, cfg, terms, params):
        self.terms, self.trainable = terms, terms.trainable
        self.rule = cfg.rule_obj
        self.state = self.rule.init_state([params[k] for k in self.trainable])
        self.ctx = Context(lr=cfg.lr_value(), log_scale=[], eta_max=cfg.eta_max_value(),
                           batch_ndim=1)
        self.want_log_loss = self.rule.needs_log_loss

    @property
    def net(self):
        return self.terms.net

    def __call__(self, params, k, state=None):
        """Update ``params`` (dict, in place: new tensors) by one step ``k``; ``state`` replaces
        the rule's state for this call (the compiled path's fresh counter)."""
        grads, sigma, log_loss, check = self.terms.step_terms(params, k, self.want_log_loss)
        names, ctx = self.trainable, self.ctx
        ctx.log_scale = [None if sigma is None else sigma[n] for n in names]
        ctx.log_loss, ctx.params = log_loss, [params[n] for n in names]
        new = self.rule.apply(ctx.params, [grads[n] for n in names],
                              self.state if state is None else state, ctx)
        for n, p in zip(names, new):
            params[n] = p
        return check


# ----------------------------------------------------------------------------- recorder
class _Recorder:
    """What is recorded at a record step, for every kind of model: the model's metrics
    (loss, log-loss, and what the model adds), the norm and correlations of the main matrix
    and snapshots of the parameters named in ``cfg.snapshots``."""

    def __init__(self, cfg, terms):
        self.cfg, self.terms = cfg, terms
        self.ref_t = terms.ref_t
        self.ref_n = {name: R.flatten(1).norm(dim=1) for name, R in self.ref_t.items()}
        self.rec = {"norm": []}
        self.corr = {name: [] for name in self.ref_t}
        self.snap = {name: [] for name in cfg.snapshots}

    def snap_values(self, params, M=None):
        """The parameters to snapshot, name -> tensor (the main one as its matrix ``M``,
        computed here unless given)."""
        main = self.terms.main
        if M is None and main in self.snap:
            M = self.terms.matrix(params)
        return {name: (M if name == main else params[name]) for name in self.snap}

    def append_snapshots(self, values):
        """Append one record of snapshots (copies of ``values``, name -> tensor)."""
        for name, v in values.items():
            self.snap[name].append(v.clone())

    def __call__(self, params):
        if self.cfg.records == "snapshots":
            self.append_snapshots(self.snap_values(params))
            return
        M = self.terms.matrix(params)
        nrm = M.flatten(1).norm(dim=1)
        for name, val in self.terms.metrics(params, nrm).items():
            self.rec.setdefault(name, []).append(val)
        self.rec["norm"].append(nrm)
        for name, R in self.ref_t.items():
            self.corr[name].append((M * R).flatten(1).sum(1) / (nrm * self.ref_n[name]))
        self.append_snapshots(self.snap_values(params, M))

    def history(self, params):
        """The records as a :class:`History` (numpy arrays)."""
        def stack(name):
            lst = self.rec.get(name)
            return torch.stack(lst).cpu().numpy() if lst else None

        traj = {name: torch.stack(v).cpu().numpy() for name, v in self.snap.items() if v}
        return History(
            steps=self.cfg.grid, loss=stack("loss"), log_loss=stack("log_loss"),
            norm=stack("norm"),
            corr={name: torch.stack(v).cpu().numpy() for name, v in self.corr.items() if v},
            opt_mass=stack("opt_mass"), selected=stack("selected"), margin=stack("margin"),
            excess=stack("excess"), opt=self.terms.opt(), params=self.terms.final_params(params),
            snapshots=traj.get(self.terms.main), trajectory=traj,
            config=self.cfg.as_dict(self.terms.trials))
