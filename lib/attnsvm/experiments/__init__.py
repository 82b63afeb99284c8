"""Chapter drivers: sweeps, batched trials and classification of outcomes, one module per group
of chapters. They own no mathematics of their own: the losses, token scores, SVMs, models, step
rules and the training engine are the core modules' (:mod:`attnsvm.losses`,
:mod:`attnsvm.tokens`, :mod:`attnsvm.svm`, :mod:`attnsvm.models`, :mod:`attnsvm.optim`,
:mod:`attnsvm.train`).

=================  ========  =====================================================================
module             chapters  what
=================  ========  =====================================================================
``separable``      1         implicit bias on separable data: rates of GD, NGD, Polyak, Adam
``feasibility``    2         feasibility and rank of the Att-SVM over a grid of sizes
``regpath``        3         the regularization path (norm-constrained risk minimization)
``trajectories``   4         the W, (K,Q) and prompt trajectories of a two-dimensional instance
``convergence``    4         local and global convergence, cones, over-parameterization
``selection``      5-6       (K,Q) vs W, prompt attention
``beyond``         7         selection beyond one token: token sets of an MLP head, their Att-SVM
``globalconv``     8         global convergence from any start; the global theorem under (Cx)
``rates``          9         finite-time rates of GD, NGD, Polyak, Adam; their proved bounds
``sparsity``       10        sparsification of the attention map along the runs
``joint``          11        joint training of W and the head
``nets``           12        a small ViT and a pretrained text encoder, stochastic training
``geometry``       13-14     optimizer geometry: margins in other norms, Att-SVMs, their rates
``ntp``            15        linear NTP limits per step rule; the logit geometry of the NTP UFM
``ntpattn``        16        next-token prediction with self-attention: priority graph, graph SVM
=================  ========  =====================================================================
"""
import importlib

_MODULES = ("separable", "feasibility", "regpath", "trajectories", "convergence", "selection", "beyond",
            "globalconv", "rates", "sparsity", "joint", "nets",
            "geometry", "ntp", "ntpattn")

__all__ = list(_MODULES)


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'attnsvm.experiments' has no attribute {name!r}")
