"""The seeding module: per-trial seeds, the named and keyed streams, the registry of
generators. No other module of ``attnsvm`` makes a random generator."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._checks import check_int
from .containers import AttnData


def trial_seed(seed, b):
    """The seed of trial ``b`` of a batch generated with ``seed``.

    ``np.random.SeedSequence(seed, spawn_key=(b,))``, i.e. ``SeedSequence(seed).spawn(B)[b]``
    for every ``B > b``; for a named stream ``Stream(s, name)``, ``stream_seed(s, name, b)``.
    Pass it as ``seed`` to get trial ``b`` unbatched.
    """
    seed = _check_seed(seed)
    b = check_int("b", b, minimum=0)
    if isinstance(seed, Stream):
        return stream_seed(seed.seed, seed.name, b)
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=tuple(seed.spawn_key) + (b,))
    return np.random.SeedSequence(seed, spawn_key=(b,))


#: named random streams (name -> key); keys are distinct, a new stream gets a fresh key.
#: The keys of the first streams are those the drivers used before the streams were named, so
#: their draws are unchanged.
STREAMS = {
    "unit-instances": 5,        # unit_instances (data seed)
    "prompt-instances": 6,      # prompt_instances (data)
    "choice-search": 7,         # svm.find_choices (random search)
    "scores": 8,                # score_instances (data, Part III)
    "init": 9,                  # random initial matrices (random_inits)
    "cone-start": 11,           # experiments.convergence.cone_experiment (perturbation)
    "prompt-head-init": 12,     # experiments.selection.prompt_joint (initial head)
    "trap-search": 13,          # experiments.globalconv.global_experiment (trap candidates)
    "restart-noise": 14,        # runs.distinct_restart_runs (the restart point's perturbation)
}
if len(set(STREAMS.values())) != len(STREAMS):      # pragma: no cover - a table error
    raise RuntimeError("attnsvm.data.STREAMS: two stream names share a key")

#: streams keyed by an entropy tuple: name -> (its key, what draws from it). The keys are those the
#: engine and the drivers used before the table, so their draws are unchanged (``default_rng(b)``
#: and ``default_rng([b])`` are the same generator).
KEYED_STREAMS = {
    "fit-init": ("(seed, b, 0)", "attnsvm.train.fit: the initial parameters of trial b"),
    "fit-noise": ("(seed, b, 1)", "attnsvm.train.fit: the mini-batch and noise seed of trial b"),
    "regpath-start": ("(seed, b, k, i)", "path.reg_path: start i of instance b at radius k"),
    "geometry-init": ("(b,)", "experiments.geometry.attention_geometry: the initial W of trial b"),
    "dataset-split": ("(seed,)", "attnsvm.datasets: the seeded subsets of the real data sets"),
    "ntp-patterns": ("(pattern_seed,)", "data.ntp_patterns: the support sets every trial shares"),
}


def keyed_stream(name, *key):
    """A ``numpy.random.Generator`` on the keyed stream ``name`` (one of :data:`KEYED_STREAMS`)
    at the entropy key ``key`` (integers >= 0): ``default_rng(list(key))``."""
    if name not in KEYED_STREAMS:
        raise ValueError(f"name must be one of the keyed streams {sorted(KEYED_STREAMS)}, got {name!r}")
    return np.random.default_rng([check_int("key", k, minimum=0) for k in key])


def stream_seed(seed, name, b=None):
    """The ``SeedSequence`` of the named stream ``name`` (of trial ``b``, if given) of ``seed``:
    ``SeedSequence([seed, key])`` or ``SeedSequence([seed, b, key])``, ``key = STREAMS[name]``.
    """
    seed = check_int("seed", seed, minimum=0)
    if name not in STREAMS:
        raise ValueError(f"name must be one of the streams {sorted(STREAMS)}, got {name!r}")
    if b is None:
        return np.random.SeedSequence([seed, STREAMS[name]])
    b = check_int("b", b, minimum=0)
    return np.random.SeedSequence([seed, b, STREAMS[name]])


def stream(seed, name, b=None):
    """A ``numpy.random.Generator`` on the named stream :func:`stream_seed` ``(seed, name, b)``.

    Trial ``b``'s stream does not depend on how many trials are drawn."""
    return np.random.default_rng(stream_seed(seed, name, b))


class Stream(NamedTuple):
    """A named stream of ``seed`` passed as a generator's ``seed``: the unbatched instance is
    drawn from ``stream_seed(seed, name)`` and trial ``b`` from ``stream_seed(seed, name, b)``
    (so trial ``b`` does not depend on the number of trials)."""

    seed: int
    name: str


def _check_seed(seed):
    if isinstance(seed, Stream):
        stream_seed(seed.seed, seed.name)          # validates both
        return seed
    if isinstance(seed, np.random.SeedSequence):
        return seed
    return check_int("seed", seed, minimum=0)


#: name -> generator function; every generator of this module registers itself
GENERATORS = {}


def _generator(fn):
    GENERATORS[fn.__name__] = fn
    return fn


def draw_rngs(seed, trials):
    """The generators of one draw under the seeding contract: ``default_rng(seed)`` (or of the
    named stream ``Stream(seed, name)``) when ``trials`` is None, else one per trial ``b``,
    ``default_rng(trial_seed(seed, b))``."""
    seed = _check_seed(seed)
    if trials is None:
        return np.random.default_rng(stream_seed(*seed) if isinstance(seed, Stream) else seed)
    B = check_int("trials", trials, minimum=1)
    return [np.random.default_rng(trial_seed(seed, b)) for b in range(B)]


def _generate(one, trials, seed, cls=None, extra=0):
    """Call ``one(rng)`` -> tuple of arrays once (trials None, ``default_rng(seed)``) or once per
    trial (trial ``b`` from ``default_rng(trial_seed(seed, b))``) and wrap the first fields in
    ``cls``. With ``extra > 0`` the last ``extra`` arrays are returned beside the container
    (stacked over trials): ``(data, *extras)``."""
    cls = cls or AttnData
    rngs = draw_rngs(seed, trials)
    if trials is None:
        parts = one(rngs)
    else:
        parts = [np.stack(a) for a in zip(*[one(rng) for rng in rngs])]
    if not extra:
        return cls(*parts)
    return (cls(*parts[:-extra]), *parts[-extra:])
