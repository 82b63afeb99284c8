"""attnsvm: the implicit bias of gradient descent in self-attention.

The helper library of the book *Attention as an SVM*. Modules, by concept:

``tokens``   token scores, optimal tokens, attention scores, margins, lifted features
``losses``   margin losses with stable log-space companions, the log excess loss, NTP losses
``data``     data containers and seeded generators (one seeding contract, named streams), NTP data
``svm``      every max-margin problem (a package): Att-SVMs (Frobenius, nuclear, l_p, spectral),
             local optimality, l_p linear SVMs, NTP / logit / graph SVMs, the finite parts W*
``models``   the attention classifier: score parameterizations and heads (a package)
``jacobian`` the softmax Jacobian of the margins, cancellation-free in log space: every attention gradient
``norms``    the norms: one parser, matrix, dual and vector norms, the regularization path's ball
``optim``    step rules (GD, normalized GD, Polyak, Adam, sign; Part IV's steepest, mirror, PRGD,
             scheduled Adam) for the engine and torch.optim
``history``  the records of a run: the record grid, ``History``, ``NonFiniteError``
``train``    the batched training engine ``fit`` (FitConfig, recorder, finite guard, step)
``runs``     Part III's shared runs on top of ``fit``: one call per optimizer, every step recorded,
             the global theorem checked, V settings as one call (``tile_trials``)
``metrics``  correlations, direction errors, attention sparsity, rate fits
``plot``     the book's figure style
``devices``  CPU/CUDA resolution and thread control
``bounds``   proved bounds of the book, as functions (a package, one module per group of chapters)
``reduced``  the reduced dynamics: GD, NGD and the Polyak step run exactly in margin space
``claims``   checked claims: a chapter's interpretive sentences, computed and checked
``graphs``   token-priority graphs of next-token prediction (SCCs, top components)
``path``     the regularization path: norm-constrained risk minimization (spectral projected gradient)
``datasets`` offline loaders of real data sets (images, labelled text, the MiniLM files)

The book's build is the sibling package ``attnsvm_book`` (``python -m attnsvm_book build``, the
``book`` extra); nothing here imports it.

``experiments`` holds the chapter drivers (sweeps, trial batches, classification of outcomes), one
module per group of chapters: ``separable``, ``feasibility``, ``regpath``, ``trajectories``,
``convergence``, ``selection``, ``beyond``, ``globalconv``, ``rates``, ``sparsity``, ``joint``,
``nets``, ``geometry``, ``ntp``, ``ntpattn``.

Each module's public names are its ``__all__``, documented one by one in the book's API pages
(generated from the docstrings); this overview is checked against the modules
(``tests/test_api_lists.py``). The names of ``_EXPORTS`` are re-exported here (``attnsvm.att_svm``
is ``attnsvm.svm.att_svm``), imported on first use, so ``import attnsvm`` stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

_SUBMODULES = ("tokens", "jacobian", "losses", "data", "svm", "models", "norms", "optim", "history", "train", "runs",
               "metrics", "plot", "devices", "bounds", "reduced", "claims", "experiments", "path", "graphs", "datasets")

#: public name -> submodule that defines it
_EXPORTS = {
    "data": ["AttnData", "LinearData", "random_unit", "score_gap", "orthogonal",
             "overparameterized", "prompt_2d", "separable", "prescribed_scores", "planted_token",
             "planted_prompt"],
    "tokens": ["token_scores", "optimal_tokens", "attention_scores", "selection_margins",
               "lifted_features"],
    "losses": ["Loss", "get_loss", "loss_floor"],
    "svm": ["InfeasibleError", "SolverError", "att_svm",
            "att_svm_batch", "p_svm", "linear_svm", "head_svm", "support_tokens",
            "is_locally_optimal", "in_cone", "rank"],
    "models": ["AttentionClassifier", "LinearClassifier"],
    "train": ["fit", "FitConfig", "History", "NonFiniteError"],
    "devices": ["resolve_device", "cpu_threads"],
    "metrics": ["corr", "direction_error", "direction_error_from_corr", "softmax", "attention",
                "opt_mass", "fit_rate"],
    "plot": ["use_style", "figure", "trial_band", "save_or_glue", "sweep_plot"],
}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    for mod, names in _EXPORTS.items():
        if name in names:
            return getattr(importlib.import_module(f".{mod}", __name__), name)
    raise AttributeError(f"module 'attnsvm' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBMODULES) | {n for v in _EXPORTS.values() for n in v})


__all__ = [n for v in _EXPORTS.values() for n in v]
