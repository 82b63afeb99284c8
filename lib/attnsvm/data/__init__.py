"""Data models: seeded, float64 instances of the attention model and of linear classification.

Shapes follow the book's notation (see the notation page):

* ``X`` : (n, T, d) tokens, row ``X[i, t]`` is :math:`x_{it}`;
* ``y`` : (n,) labels in :math:`\\{\\pm 1\\}`;
* ``Z`` : (n, d) queries :math:`z_i` (self-attention: :math:`z_i = x_{i1}`);
* ``v`` : (d,) the linear head.

Every array may carry an optional leading trials axis ``B`` for batched experiments.

Generators
----------
All generators are seeded and return float64 arrays. With ``trials=None`` they return one
instance drawn from ``np.random.default_rng(seed)``; with ``trials=B`` trial ``b`` is drawn
from the independent stream ``default_rng(trial_seed(seed, b))``, so trial ``b`` is the same
whatever ``B`` is, and ``gen(..., seed=trial_seed(s, b))`` reproduces it unbatched.

* :func:`random_unit`: the setting of "Transformers as SVMs" (unit-norm Gaussian tokens).
* :func:`score_gap`: one optimal token per sequence, all others at least ``gap`` lower.
* :func:`orthogonal`: mutually orthonormal tokens, with a closed-form Att-SVM.
* :func:`overparameterized`: ``d >= n``; every choice of tokens has a feasible Att-SVM.
* :func:`prompt_2d`: tiny 2-D prompt-attention instances for trajectory pictures.
* :func:`separable`: linearly separable data with a planted margin.
* :func:`prescribed_scores`: exact token scores (one optimal token, equal or distinct others);
  :func:`score_instances`, its batched draw on the named stream ``"scores"`` (Part III).
* :func:`planted_token`: Gaussian tokens with one planted label-carrying token per sequence.
* :func:`planted_prompt`: a relevant token, a distractor and background (prompt attention).
* :func:`ntp_synthetic`, :func:`ntp_patterns`, :func:`ntp_corpus`: next-token prediction with a
  linear decoder (:class:`NTPData`): synthetic contexts, targets with a repeated support
  pattern, and the Zen of Python as a corpus.
* :func:`ntp_sequences`: sequences of distinct vocabulary tokens with a next-token label drawn
  from a hidden priority order (next-token prediction with self-attention, :class:`NTPSeqData`).

Every generator is registered in :data:`GENERATORS` (a test checks the seeding contract above
for each registered generator, and that every public generator is registered).

Named random streams
--------------------
Randomness that is not a data draw (an initialization, a random search) comes from a *named*
stream, :func:`stream`: ``stream(seed, name, b)`` is ``default_rng(SeedSequence([seed, b,
key]))`` with the name's key from :data:`STREAMS` (one table, distinct keys, so two modules never
share a stream by accident; an unknown name raises). A new stream adds a name with a fresh key.
"""

from .attention import (keyed_instance, keyed_instances, keyed_trials, orthogonal, overparameterized,
                        random_inits, random_unit, score_gap, sized_trials, unit_instances)
from .containers import AttnData, LinearData, NTPData, NTPSeqData, TrialsData
from .linear import separable
from .ntp import (OTHER, Corpus, ntp_corpus, ntp_patterns, ntp_sequences, ntp_synthetic,  # noqa: F401
                  support_patterns, support_sets, tokenize, zen_of_python)
from .planted import (planted_prompt, planted_token, prescribed_scores, prompt_2d, prompt_instances,
                      score_instances)
from .seeding import (GENERATORS, KEYED_STREAMS, STREAMS, Stream, draw_rngs, keyed_stream, stream, stream_seed,
                      trial_seed)

__all__ = ["AttnData", "LinearData", "NTPSeqData", "trial_seed", "STREAMS", "Stream", "stream", "stream_seed",
           "GENERATORS", "random_unit", "score_gap", "orthogonal", "overparameterized",
           "prompt_2d", "separable", "prescribed_scores", "planted_token", "planted_prompt",
           "ntp_sequences", "keyed_instances", "keyed_instance", "keyed_trials", "sized_trials",
           "random_inits", "unit_instances", "prompt_instances", "score_instances",
           "TrialsData", "NTPData", "ntp_synthetic", "ntp_patterns",
           "support_patterns", "support_sets", "Corpus",
           "KEYED_STREAMS", "keyed_stream", "draw_rngs", "ntp_corpus", "zen_of_python", "tokenize"]
