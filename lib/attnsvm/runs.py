r"""The chapters' shared runs, each one or more calls of :func:`attnsvm.train.fit` on its record grid
(no second training loop).

* :func:`fit_rules` (several optimizers in one ``fit`` call, a rule per trial),
  :func:`fit_settings` (the chapters' optimizers that way, log-spaced snapshots) and
  :func:`trajectory_metrics` (exact metrics of its snapshots);
* :func:`tile_trials` / :func:`untile_trials`: ``V`` settings of one experiment as one ``fit`` over
  ``V B`` trials, and the split back; :func:`sensitivity_sweep` / :func:`sensitivity_sweeps`
  (step-size sweeps run that way);
* :func:`every_step` (one ``fit`` call recorded at every step) and :func:`global_run` /
  :func:`global_runs` (it, checked against the global theorem of :mod:`attnsvm.bounds`);
* :func:`fit_margin` (Part IV: one parameter of a model under a margin loss, its iterates kept);
* :func:`distinct_restart_runs` (the reduced dynamics of :mod:`attnsvm.reduced`, exact in margin
  space, from a restart point, checked against the local restart theorem with distinct scores).

The engine (:mod:`attnsvm.train`) knows nothing of these: it imports neither :mod:`attnsvm.bounds`
nor :mod:`attnsvm.metrics`.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import bounds, metrics, reduced, train
from ._checks import check_choice, check_int
from .data.seeding import stream
from .devices import resolve_device
from .history import NonFiniteError, record_grid
from .losses import excess_loss
from .models import MarginObjective
from .optim import OPTIMIZERS

__all__ = ["fit_rules", "fit_settings", "distinct_restart_runs", "trajectory_metrics", "tile_trials", "untile_trials",
           "sensitivity_sweep", "sensitivity_sweeps",
           "every_step", "global_run", "global_runs", "fit_margin"]


#: ``fit_rules(calls="auto")`` on a CPU: one call while the tiled data take at most this many
#: bytes, else one call per optimizer. Measured (benchmarks/one_call.py, 2-core AMD EPYC, 1 MiB
#: L2 per core): one call of chapter 9's four optimizers is 1.05x faster at n, T, d = 6, 8, 10,
#: B = 100 (1.5 MB of tokens tiled) and 1.4x *slower* at its paper shape 20, 8, 32 (16 MB): the
#: batched products outgrow the caches. On CUDA one call is always taken (launch-bound).
ONE_CALL_CPU_BYTES = 4 * 2 ** 20


def _one_call(data, V, device):
    """Whether :func:`fit_rules` with ``calls="auto"`` runs its ``V`` optimizers as one call."""
    try:
        if resolve_device(device).type != "cpu":
            return True
    except ValueError:        # e.g. CUDA asked for but absent: fit names the problem
        return True
    nbytes = sum(a.nbytes for a in data._fields() if isinstance(a, np.ndarray))
    return V * nbytes <= ONE_CALL_CPU_BYTES


def fit_rules(data, settings, *, seed=0, calls="auto", **common):
    r"""Train every optimizer of ``settings`` (name -> the ``lr`` and ``eta_max`` of
    :func:`~attnsvm.train.fit`, and ``optimizer`` when the name is not the rule's) on all trials
    of ``data`` in **one** :func:`~attnsvm.train.fit` call: the trials tiled once per optimizer
    (:func:`tile_trials`: copy ``j`` is optimizer ``j``), a rule per trial
    (:class:`attnsvm.optim.PerTrial`), ``lr`` and ``eta_max`` per trial, the trial keys
    ``(seed, b)`` of the original trial ``b`` (so ``init="random"`` draws each copy's start as a
    run of that optimizer alone would), and every per-trial array of ``common`` (``init``, the
    ``refs``) tiled alike. A trial does not depend on the others, so each optimizer's History
    equals that of its own ``fit`` call up to rounding (tests/test_batched_runs.py).

    ``calls``: ``"one"`` (as above), ``"per_rule"`` (one :func:`~attnsvm.train.fit` call per
    optimizer, the same runs to rounding) or ``"auto"``: one call on CUDA, and on a CPU while the
    tiled data fit :data:`ONE_CALL_CPU_BYTES` (beyond that, on a CPU, one call is slower).

    ``common``: the other keyword arguments of :func:`~attnsvm.train.fit`, the same for every
    optimizer (``model``, ``steps``, ``init``, ``refs``, the records, ``device``, ...). A model
    object that holds values per trial (e.g. the floor of
    :class:`~attnsvm.models.SelfAttentionNTP`) must hold them for the tiled trials: the values of
    trial ``b`` at ``j B + b`` for every optimizer ``j`` (``np.tile``).

    Returns
    -------
    dict name -> :class:`~attnsvm.history.History`
        Each with the trials axis of ``data``; its ``config`` gives that optimizer, its ``lr``
        and ``eta_max``, and ``config["joint"]`` the optimizers of the one call.

    Raises
    ------
    NonFiniteError
        A trial became non-finite: ``trial`` is its index in ``data`` and ``setting`` the name
        of its optimizer in ``settings``.
    """
    names = list(settings)
    if not names:
        raise ValueError("settings must name at least one optimizer")
    foreign = {nm: sorted(set(kw) - {"lr", "eta_max", "optimizer"}) for nm, kw in settings.items()}
    foreign = {nm: ks for nm, ks in foreign.items() if ks}
    if foreign:
        raise ValueError(f"settings take only lr, eta_max and optimizer per optimizer (the rest "
                         f"is common to the call); got {foreign}")
    check_choice("calls", calls, ("auto", "one", "per_rule"))
    B = data.trials
    rule = {nm: settings[nm].get("optimizer", nm) for nm in names}
    for nm in names:
        check_choice(f"settings[{nm!r}]['optimizer']", rule[nm], OPTIMIZERS)
    if calls == "per_rule" or (calls == "auto" and not _one_call(data, len(names),
                                                                common.get("device", "auto"))):
        return {nm: train.fit(data, optimizer=rule[nm], seed=seed, **common,
                              **{k: v for k, v in settings[nm].items() if k != "optimizer"})
                for nm in names}
    tiled, idx = tile_trials(data, len(names))
    lr = [settings[nm].get("lr", OPTIMIZERS[rule[nm]].lr) for nm in names]
    kw = dict(common)
    kw["lr"] = np.concatenate([np.broadcast_to(np.asarray(v, dtype=float), (B,)) for v in lr])
    caps = [settings[nm].get("eta_max", "auto") for nm in names]
    if not all(isinstance(c, str) and c == "auto" for c in caps):    # else fit's own "auto"
        kw["eta_max"] = np.concatenate([np.broadcast_to(np.asarray(
            _cap(rule[nm], c), dtype=float), (B,)) for nm, c in zip(names, caps)])
    init = kw.get("init")
    if isinstance(init, np.ndarray) and init.ndim >= 1 and init.shape[0] == B:    # one per trial
        kw["init"] = init[idx]
    if kw.get("refs"):
        kw["refs"] = {k: np.asarray(v)[idx] for k, v in kw["refs"].items()}
    try:
        h = train.fit(tiled, optimizer=[rule[nm] for nm in names for _ in range(B)],
                      seed=[(seed, int(b)) for b in idx], **kw)
    except NonFiniteError as err:     # name the setting and the trial of data, not the tiled one
        j, b = divmod(err.trial, B)
        new = NonFiniteError(f"settings[{names[j]!r}], trial {b} (tiled trial {err.trial}): {err}",
                             trial=b, step=err.step)
        new.setting = names[j]
        raise new from err
    out = {}
    for j, nm in enumerate(names):
        part = h.take(np.arange(j * B, (j + 1) * B))
        cap = _cap(rule[nm], caps[j])
        part.config.update(optimizer=rule[nm], lr=lr[j],
                           eta_max=None if np.all(np.isinf(cap)) else cap,
                           seed=seed, joint=[rule[m] for m in names])
        out[nm] = part
    return out


def _cap(rule, eta_max):
    """The Polyak cap of one optimizer as :func:`~attnsvm.train.fit` resolves it: ``"auto"`` is
    :data:`~attnsvm.train.POLYAK_CAP` for ``polyak`` and no cap (inf) otherwise; None: no cap."""
    if isinstance(eta_max, str):
        return train.POLYAK_CAP if rule == "polyak" else np.inf
    return np.inf if eta_max is None else eta_max


def fit_settings(data, W_mm, *, settings, steps=10000, init=None, n_records=120, seed=0,
                 device="auto", drop_nonfinite=()):
    r"""Train every optimizer of ``settings`` (name -> its ``lr`` and ``eta_max``, with an
    optional ``optimizer`` when the name is not the rule's) on all trials at once, the attention
    model ``"W"`` with the reference ``W_mm``, snapshots of ``W`` on the log-spaced record grid
    of ``n_records`` records: the optimizers not named in ``drop_nonfinite`` in one
    :func:`fit_rules` call, each optimizer of ``drop_nonfinite`` in its own
    :func:`~attnsvm.train.fit` call.

    For the optimizers named in ``drop_nonfinite``, a trial whose iterate becomes non-finite
    (:class:`~attnsvm.history.NonFiniteError`) is dropped and the others are trained again; the dropped trials are
    NaN in every float record of the returned history (its ``config["dropped_trials"]`` lists
    them). Any other optimizer raises.

    Returns dict name -> :class:`History` (in the order of ``settings``).
    """
    common = dict(model="W", steps=steps, refs={"W_mm": W_mm}, snapshots=True,
                  n_records=n_records, device=device)
    joint = {nm: kw for nm, kw in settings.items() if nm not in drop_nonfinite}
    out = fit_rules(data, joint, seed=seed, init=init, **common) if joint else {}
    B = W_mm.shape[0]
    for name in settings:
        if name in joint:
            continue
        kw = dict(settings[name])
        opt_name = kw.pop("optimizer", name)
        keep = np.arange(B)
        while True:
            sub = keep.size < B
            try:
                h = train.fit(data.take(keep) if sub else data, optimizer=opt_name,
                              init=(init[keep] if sub and init is not None else init), seed=seed,
                              **dict(common, refs={"W_mm": W_mm[keep] if sub else W_mm}), **kw)
                break
            except NonFiniteError as err:
                if keep.size == 1:
                    raise
                keep = np.delete(keep, err.trial)
        out[name] = _pad_trials(h, keep, B) if keep.size < B else h
    return {name: out[name] for name in settings}


def _pad_trials(h, keep, B):
    """History ``h`` of the trials ``keep`` as one of ``B`` trials: NaN (float) or 0 elsewhere.
    ``params`` and ``opt`` have the trial axis first, every recorded array second."""
    def pad(x, axis):
        if x is None:
            return None
        x = np.asarray(x)
        shape = list(x.shape)
        shape[axis] = B
        out = np.full(shape, np.nan) if x.dtype.kind == "f" else np.zeros(shape, x.dtype)
        out[(slice(None),) * axis + (keep,)] = x
        return out

    fields_ = {f: pad(getattr(h, f), 1) for f in ("loss", "log_loss", "norm", "opt_mass", "selected",
                                                   "margin", "excess", "snapshots")}
    return replace(
        h, **fields_, opt=pad(h.opt, 0), corr={k: pad(v, 1) for k, v in h.corr.items()},
        params={k: pad(v, 0) for k, v in h.params.items()},
        trajectory={k: pad(v, 1) for k, v in h.trajectory.items()},
        config={**h.config, "dropped_trials": sorted(set(range(B)) - set(keep.tolist()))})


def trajectory_metrics(data, opt, W_mm, hist):
    r"""Exact metrics along a run recorded with snapshots (:func:`fit_settings`): dict of (K, B)
    arrays, plus ``t`` (K,).

    ``one_minus_corr``, ``dir_err`` (:math:`\|\hat W_t - \hat W_{mm}\|_F`), ``norm``,
    ``excess`` (:math:`E(W_t)`), ``log_excess``, ``mass`` (mean over sequences of the
    non-optimal softmax mass), ``max_mass``, ``log_mass`` (log of ``mass``), ``min_margin``,
    ``loss``. The trials of ``hist.config["dropped_trials"]`` (see :func:`fit_settings`) are NaN.
    """
    dropped = hist.config.get("dropped_trials", [])
    if dropped:
        B = W_mm.shape[0]
        live = np.setdiff1d(np.arange(B), dropped)
        part = replace(hist, snapshots=hist.snapshots[:, live], norm=hist.norm[:, live],
                       loss=hist.loss[:, live],
                       config={k: v for k, v in hist.config.items() if k != "dropped_trials"})
        sub = trajectory_metrics(data.take(live), opt[live], W_mm[live], part)
        out = {"t": sub.pop("t")}
        for k, v in sub.items():
            full = np.full((v.shape[0], B) + v.shape[2:], np.nan)
            full[:, live] = v
            out[k] = full
        return out
    S = hist.snapshots                                              # (K, B, d, d)
    lm = metrics.nonopt_mass(data, opt, S, log=True)                # (K, B, n)
    mx = lm.max(-1, keepdims=True)
    log_mass = mx[..., 0] + np.log(np.exp(lm - mx).mean(-1))
    return dict(t=hist.steps, one_minus_corr=metrics.one_minus_corr(S, W_mm[None]),
                dir_err=metrics.direction_error(S, W_mm[None]), norm=hist.norm,
                excess=excess_loss(data, opt, S), log_excess=excess_loss(data, opt, S, log=True),
                mass=np.exp(log_mass), log_mass=log_mass, max_mass=np.exp(mx[..., 0]),
                min_margin=metrics.min_margin(data, opt, S), loss=hist.loss)


#: records evaluated at a time by :func:`every_step` (bounds its temporaries, not the run)
_EVAL_BLOCK = 500


def tile_trials(data, V):
    r"""The trials of ``data`` repeated ``V`` times, to run ``V`` settings of one experiment as
    one :func:`~attnsvm.train.fit` (copy ``j``, trial ``b``) = trial ``j B + b``.

    Returns
    -------
    (data, idx) : the tiled instances (:meth:`~attnsvm.data.Instances.take`) and ``idx`` (V B,)
        the original trial of each tiled one (index per-trial inputs with it: ``init[idx]``,
        ``opt[idx]``, the seeds ``(seed, idx[i])``).
    """
    V = check_int("V", V, minimum=1)
    idx = np.tile(np.arange(data.trials), V)
    return data.take(idx), idx


def untile_trials(x, V, axis=0):
    """Split the trials axis ``axis`` (length ``V B``) of ``x`` into ``(V, B)`` and move the
    ``V`` axis first: ``out[j]`` is copy ``j`` of :func:`tile_trials`, its other axes as in ``x``."""
    x = np.asarray(x)
    axis = axis % x.ndim
    if x.shape[axis] % V:
        raise ValueError(f"axis {axis} of x has {x.shape[axis]} trials, not a multiple of V = {V}")
    x = x.reshape(x.shape[:axis] + (V, x.shape[axis] // V) + x.shape[axis + 1:])
    return np.moveaxis(x, axis, 0)


def sensitivity_sweep(data, opt, W_mm, *, optimizer, values, key="lr", base=None, steps=5000,
                      init=None, seed=0, device="auto"):
    r"""Final ``1 - corr`` and ``norm`` for a sweep of one hyper-parameter (``lr`` or
    ``eta_max``) of one optimizer: :func:`sensitivity_sweeps` with one sweep.

    Returns dict with ``values`` (V,), ``one_minus_corr`` (V, B), ``norm`` (V, B),
    ``log_excess`` (V, B)."""
    return sensitivity_sweeps(data, opt, W_mm, sweeps={"sweep": dict(
        optimizer=optimizer, values=values, key=key, base=base)}, steps=steps, init=init,
        seed=seed, device=device)["sweep"]


def sensitivity_sweeps(data, opt, W_mm, *, sweeps, steps=5000, init=None, seed=0, device="auto"):
    r"""Final ``1 - corr`` and ``norm`` of several sweeps, each of one hyper-parameter (``key``:
    ``lr`` or ``eta_max``) of one optimizer: ``sweeps`` maps a name to ``dict(optimizer=...,
    values=[...], key="lr", base={...})`` (``base``: that optimizer's other ``lr`` / ``eta_max``).
    Every value of every sweep is one copy of the trials in **one** :func:`fit_rules` call (a
    rule, ``lr`` and ``eta_max`` per trial; the trial keys ``(seed, b)``, ``init`` tiled alike),
    so each value's run equals its own ``fit`` call up to rounding (tests/test_batched_runs.py).

    Returns dict name -> dict with ``values`` (V,), ``one_minus_corr`` (V, B), ``norm`` (V, B),
    ``log_excess`` (V, B)."""
    settings, where = {}, {}
    for name, sw in sweeps.items():
        sw = dict(sw)
        unknown = sorted(set(sw) - {"optimizer", "values", "key", "base"})
        if unknown:
            raise ValueError(f"sweeps[{name!r}] takes optimizer, values, key and base, got {unknown}")
        key = sw.get("key", "lr")
        check_choice("key", key, ("lr", "eta_max"))
        values = np.asarray(sw["values"], dtype=float)
        if values.ndim != 1 or values.size == 0:
            raise ValueError(f"sweeps[{name!r}]['values'] must be a non-empty list of numbers")
        where[name] = (values, [])
        for j, v in enumerate(values):
            label = f"{name}[{j}]"
            settings[label] = dict(sw.get("base") or {}, optimizer=sw["optimizer"], **{key: float(v)})
            where[name][1].append(label)
    hs = fit_rules(data, settings, seed=seed, model="W", steps=steps, init=init, n_records=2,
                   device=device)
    out = {}
    for name, (values, labels) in where.items():
        Ws = [hs[lab].W for lab in labels]
        out[name] = dict(values=values,
                         one_minus_corr=np.array([metrics.one_minus_corr(W, W_mm) for W in Ws]),
                         norm=np.array([hs[lab].norm[-1] for lab in labels]),
                         log_excess=np.array([excess_loss(data, opt, W, log=True) for W in Ws]))
    return out


def every_step(data, opt, *, optimizer, lr, steps, init, device="auto"):
    r"""One :func:`~attnsvm.train.fit` call of ``"gd"`` or ``"ngd"`` for ``steps`` steps on all trials of the
    attention model ``"W"``, recorded at every step (``record_every=1``, snapshots of ``W``):
    :math:`\log q_i(W_t)` (steps + 1, B, n) and :math:`E(W_t)` (steps + 1, B) at every step,
    and the final ``W`` (B, d, d). The snapshots take :math:`8(\mathrm{steps}+1)Bd^2` bytes."""
    if optimizer not in ("gd", "ngd"):
        raise ValueError(f"optimizer must be 'gd' or 'ngd', got {optimizer!r}")
    steps = check_int("steps", steps, minimum=1)
    h = train.fit(data, model="W", optimizer=optimizer, lr=lr, steps=steps, init=init, snapshots=True,
            records="snapshots", record_every=1, device=device)
    S = h.snapshots
    blocks = range(0, S.shape[0], _EVAL_BLOCK)
    lq = np.concatenate([metrics.log_q(data, opt, S[k:k + _EVAL_BLOCK]) for k in blocks])
    ex = np.concatenate([excess_loss(data, opt, S[k:k + _EVAL_BLOCK]) for k in blocks])
    return lq, ex, h.W


def global_run(data, opt, W_mm, W0, *, optimizer, lr="theorem", steps, device="auto"):
    r"""One GD or NGD run from ``W0`` on all trials (:func:`every_step`), checked against the
    global theorem (book: ``lem-no-attention-loss``, ``thm-global-region``,
    ``cor-sparsity-global``) at every step.

    ``lr="theorem"`` uses the smallest over the trials of the theorem's step
    (``eta_ngd_global`` or ``eta_gd_global`` of :func:`attnsvm.bounds.global_constants`), valid
    for every trial; a number runs that step, and the bounds are then evaluated only where it is
    within the theorem's step of the trial.

    Returns
    -------
    dict with ``eta`` (float), ``consts`` (:func:`attnsvm.bounds.global_constants`), ``proved``
    (B,) bool (the step is within the theorem's), ``noloss`` (B,) bool (the step is within
    :func:`attnsvm.bounds.noloss_steps`), ``excess`` (steps + 1, B), ``log_q`` (steps + 1, B, n),
    ``W`` (B, d, d) final, ``excess_bound`` (steps + 1, B) the theorem's bound on :math:`E(W_t)`
    (:func:`attnsvm.bounds.global_excess_bound`), ``t_reach`` (B,) the theorem's reaching time
    at ``eta`` (NaN where not ``proved``), ``first`` (B,) the observed first step from which
    :math:`E(W_t)\le\varepsilon_0` (:func:`attnsvm.metrics.first_step`; NaN where the run ends
    outside the region), ``mono``, ``mono_checked``, ``mono_worst``
    (:func:`attnsvm.bounds.q_monotone`), ``excess_holds`` and ``mass_holds`` (steps + 1, B)
    bool: :math:`E(W_t)` below the theorem's bound and :math:`\max_i(1-s_i(W_t))` below the
    corollary's (False where not ``proved``).
    """
    return global_runs(data, opt, W_mm, {"run": W0}, optimizer=optimizer, lr=lr, steps=steps,
                       device=device)["run"]


def global_runs(data, opt, W_mm, starts, *, optimizer, lr="theorem", steps, device="auto"):
    r""":func:`global_run` from each start of ``starts`` (dict name -> ``W0`` (B, d, d)) as one
    :func:`every_step` call over the stacked trials (start ``j``, trial ``b``) = trial
    ``j B + b``: each start keeps its own step ``eta`` (``lr="theorem"``: the smallest over
    *its* trials of the theorem's step, :func:`attnsvm.bounds.global_constants` depends on
    ``W0``), run as the per-trial step size of :func:`~attnsvm.train.fit`. A trial does not depend on the
    others, so the result equals ``{name: global_run(data, opt, W_mm, W0, ...)}`` up to the last
    bit (a trial's position in the batch can move its CPU kernels between the vector and the
    scalar path of ``exp``/``log``).

    Returns
    -------
    dict name -> dict of :func:`global_run`
    """
    if optimizer not in ("gd", "ngd"):
        raise ValueError(f"optimizer must be 'gd' or 'ngd', got {optimizer!r}")
    names = list(starts)
    if not names:
        raise ValueError("starts must name at least one initialization")
    gs = {k: bounds.global_constants(data, opt, W_mm, starts[k]) for k in names}
    etas = {k: _global_step(gs[k], optimizer, lr) for k in names}
    if len(names) == 1:
        runs = [every_step(data, opt, optimizer=optimizer, lr=etas[names[0]], steps=steps,
                           init=starts[names[0]], device=device)]
    else:
        V = len(names)
        tiled, idx = tile_trials(data, V)
        opt_all = np.asarray(opt)[idx] if np.ndim(opt) == 2 else opt
        lq, ex, W = every_step(tiled, opt_all, optimizer=optimizer,
                               lr=np.repeat([etas[k] for k in names], data.trials), steps=steps,
                               init=np.concatenate([np.asarray(starts[k], dtype=float) for k in names]),
                               device=device)
        lq, ex, W = untile_trials(lq, V, 1), untile_trials(ex, V, 1), untile_trials(W, V)
        runs = [tuple(np.ascontiguousarray(a[j]) for a in (lq, ex, W)) for j in range(V)]
    return {k: _global_checks(gs[k], etas[k], optimizer, *r) for k, r in zip(names, runs)}


def _global_step(g, optimizer, lr):
    """The step of a global run: ``"theorem"`` (the smallest over the trials of the theorem's
    step in the constants ``g``) or a positive number."""
    if isinstance(lr, str):
        if lr != "theorem":
            raise ValueError(f"lr must be a positive number or 'theorem', got {lr!r}")
        return float(g[f"eta_{optimizer}_global"].min())
    eta = float(lr)
    if not eta > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    return eta


def _global_checks(g, eta, optimizer, lq, ex, W):
    """The checks of :func:`global_run` on one run at step ``eta`` (its dict)."""
    thm = g[f"eta_{optimizer}_global"]
    proved = eta <= thm * (1 + 1e-12)
    noloss = eta <= g[f"eta_{optimizer}_noloss"]
    t = np.arange(ex.shape[0])
    mono, checked, worst = bounds.q_monotone(lq, ex)
    n = lq.shape[-1]
    bound = bounds.global_excess_bound(t, g["E0"], eta, g["mu0"], optimizer=optimizer)
    mass = np.exp(-np.logaddexp(0.0, -lq)).max(-1)                 # max_i q_i/(1+q_i)
    with np.errstate(divide="ignore"):
        excess_holds = np.log(ex) <= np.log(bound) + 1e-9
        mass_holds = (np.log(mass) <= np.log(bounds.mass_from_excess(bound, n, g["bD_minus"]))
                      + 1e-9)
    return dict(eta=eta, consts=g, proved=proved, noloss=noloss, excess=ex, log_q=lq, W=W,
                excess_bound=bound,
                t_reach=np.where(proved, bounds.t_reach(g["E0"], g["eps0"], eta, g["mu0"],
                                                        optimizer=optimizer), np.nan),
                first=metrics.first_step(t, ex <= g["eps0"]), mono=mono, mono_checked=checked,
                mono_worst=worst, excess_holds=excess_holds & proved, mass_holds=mass_holds & proved)


def fit_margin(model, init, batch, *, steps, record_steps=None, loss="exponential", **kw):
    r"""One :func:`attnsvm.train.fit` of the single trained parameter of ``model`` (wrapped as an
    :class:`attnsvm.models.MarginObjective` with ``loss``, from ``init``), recorded at
    ``record_steps`` (default 60 log-spaced steps): dict ``steps`` (K,), ``iterates`` (K, B, ...)
    and ``log_loss`` (K, B). ``kw``: the rule's keyword arguments of ``fit``
    (Part IV's runs, chapters 13 and 14)."""
    rec = (record_grid(steps, n_records=60, initial=False) if record_steps is None
           else np.unique(np.asarray(record_steps, dtype=int)))
    name = model.trainable[0]
    h = train.fit(batch, model=MarginObjective(model, loss), init=init, steps=steps,
                   record_every=rec, snapshots=(name,), device=init[name].device, **kw)
    idx = np.searchsorted(h.steps, rec)
    return {"steps": rec, "iterates": h.trajectory[name][idx], "log_loss": h.log_loss[idx]}


def distinct_restart_runs(data, opt, W_mm, *, scale=2000.0, noise=0.3, lr=0.05, steps=4000,
                          n_records=60, seed=0):
    r"""The local restart theorem with distinct scores (book: ``thm-distinct-restart``) on every
    trial of ``data``: NGD at step ``lr`` for ``steps`` steps of the reduced dynamics
    (:func:`attnsvm.reduced.reduced_run`, exact in margin space) from the restart point
    :math:`W_{t_1} = \mathrm{scale}\,W_{mm}/\|W_{mm}\| + x^\star + \mathrm{noise}\cdot N(0, 1)`
    (entries from the stream ``"restart-noise"`` of ``seed``, trial ``b``'s its own:
    :func:`attnsvm.data.seeding.stream`), with
    :math:`x^\star` of :func:`attnsvm.bounds.residual_limit` (per-constraint weights) and the
    theorem's constants from :func:`attnsvm.bounds.distinct_restart_constants` at :math:`t_1`.
    Where its condition (C) holds, the bound :math:`H^2/(2a_{\mathrm{low}}(t)^2)` of part 2
    (:func:`attnsvm.bounds.distinct_restart_bound`) is compared with the measured
    :math:`1 - \mathrm{corr}` at ``n_records`` log-spaced records.

    Returns
    -------
    dict of (B,) arrays: ``sc`` (strictly complementary), ``delta``, ``held`` ((C) holds at
    :math:`t_1`), and where it holds (NaN elsewhere) ``ratio_min`` (the least bound / measured
    ratio over the records: at least 1 where the bound holds), ``H2`` (the proved :math:`H^2`)
    and ``level`` (the measured :math:`2(1-\mathrm{corr})\|W_t\|_F^2` at the end, which the
    theorem bounds by :math:`H^2` up to :math:`a_t \le \|W_t\|`).
    """
    sc = bounds.support_constants(data, opt)
    ok = bounds.strictly_complementary(sc)
    x_star = bounds.residual_limit(data, opt, sc, weights="constraint")["x_star"]
    B, T = W_mm.shape[0], data.T
    rec = record_grid(steps, "log", n_records)
    out = dict(sc=ok, delta=np.asarray(sc["delta"], dtype=float), held=np.zeros(B, bool),
               **{k: np.full(B, np.nan) for k in ("ratio_min", "H2", "level")})
    for b in np.flatnonzero(ok):            # trial b's noise is its own stream: skipping is safe
        W0 = (scale * W_mm[b] / np.linalg.norm(W_mm[b]) + x_star[b]
              + noise * stream(seed, "restart-noise", int(b)).standard_normal(W_mm[b].shape))
        S = sc["support"][b][np.arange(T)[None, :] != opt[b][:, None]]
        sysm = reduced.margin_system(data.trial(b), W0, W_mm[b], opt=opt[b], support=S)
        run = reduced.reduced_run(sysm, optimizer="ngd", lr=lr, steps=steps, record=rec)
        dc = bounds.distinct_restart_constants(sysm, run["m"][0], run["a"][0], run["r"][0],
                                               x_star[b], optimizer="ngd", lr=lr)
        if not np.isfinite(dc["rho_bar"]):
            continue
        res = reduced.residual_sq(sysm, run["r"], run["a"])
        bound = bounds.distinct_restart_bound(run["L"], dc)
        out["held"][b] = True
        out["ratio_min"][b] = float(np.min(bound / res["omc"]))
        out["H2"][b] = float(dc["H2"])
        out["level"][b] = float(2 * res["omc"][-1] * res["norm"][-1] ** 2)
    return out
