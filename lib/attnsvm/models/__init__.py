r"""Models: the single-layer attention classifier, its parameterizations and heads.

Everything here is a batched torch program: every parameter and data tensor carries a
leading trials axis ``B``, and trials never interact.

The attention classifier
------------------------
For a sequence :math:`X \in \mathbb{R}^{T\times d}` (rows :math:`x_t`) and a query
:math:`z \in \mathbb{R}^d`,

.. math::

    a = X W z \in \mathbb{R}^T, \qquad s = \mathrm{softmax}(a), \qquad
    h = X^\top s, \qquad f(X) = \psi(h),

with the linear head :math:`\psi(h) = v^\top h` (so :math:`f = \sum_t s_t\, g_t` with token
values :math:`g_t = v^\top x_t`) or a ReLU MLP head :math:`\psi(h) = c^\top \mathrm{relu}(U h)`.
The scores are parameterized as

* ``"W"``: :math:`a = X W z`, :math:`W \in \mathbb{R}^{d\times d}`;
* ``"KQ"``: :math:`a = X K Q^\top z`, :math:`K, Q \in \mathbb{R}^{d\times m}`;
* ``"prompt"``: :math:`a = X p`, :math:`p \in \mathbb{R}^d`.

Gradients (hand-derived, used by the engine)
---------------------------------------------
The margin of sequence :math:`i` is :math:`u_i = y_i f(X_i)`. For any coefficients
:math:`c_i` the engine needs :math:`\nabla \sum_i c_i u_i` (with :math:`c_i = \ell'(u_i)/n`
this is :math:`\nabla L`). The softmax Jacobian :math:`\mathrm{diag}(s) - s s^\top` gives, for
the linear head,

.. math::

    \frac{\partial f}{\partial a} = r, \qquad r_t = s_t\,(g_t - f),

and with :math:`q_{it} = c_i y_i r_{it}` and :math:`\bar x_i = \sum_t q_{it} x_{it} = X_i^\top q_i`,

.. math::

    \nabla_W = \sum_i \bar x_i z_i^\top, \qquad
    \nabla_K = \nabla_W\, Q, \qquad \nabla_Q = \nabla_W^\top K, \qquad
    \nabla_p = \sum_i \bar x_i, \qquad
    \nabla_v = \sum_i c_i y_i\, X_i^\top s_i .

(:math:`\nabla_W = \sum_i c_i y_i \sum_t s_{it}(g_{it} - f_i)\, x_{it} z_i^\top
= \sum_i c_i y_i X_i^\top(\mathrm{diag}(s_i) - s_i s_i^\top) X_i v\, z_i^\top`.)
The linear classifier :math:`f(x) = w^\top x` has :math:`\nabla_w = \sum_i c_i y_i x_i`.
A nonlinear head :math:`\psi` (the ReLU MLP) has the same formulas with :math:`v` replaced,
in sequence :math:`i`, by :math:`\nabla\psi(h_i)` (the head linearized at :math:`h_i`), so it
shares the linear head's cancellation-free evaluation (derivation in :mod:`attnsvm.models.heads`).

The losses live in :mod:`attnsvm.losses`.


Models with their own objective
-------------------------------
Any other model trains through :func:`attnsvm.train.fit` by passing the model *object*
(``fit(data, model=net, optimizer=..., ...)``), on this interface (details in
:mod:`attnsvm.models.objective`; base class :class:`ObjectiveModel`):

* ``trainable`` (tuple of names), optional ``param_names`` and ``main`` (the recorded
  parameter, default ``trainable[0]``);
* ``batch(data, *, dtype, device) -> dict`` of tensors with a leading trials axis ``B``
  (validates ``data``);
* ``init_params(batch, rngs, *, init, init_scale, dtype, device) -> dict`` of parameters with
  the trials axis (trial ``b`` draws only from ``rngs[b]``);
* ``objective(params, batch) -> (loss (B,), grads dict, log_scale or None[, log_loss (B,)])``,
  the true gradient of parameter ``j`` being :math:`e^{\sigma_j}` ``grads[j]``;
* optional ``L_star(batch) -> (B,)``, the infimum (for ``polyak_star`` and ``History.excess``).

Implemented: :class:`NTPLinear` (linear next-token prediction, data :class:`attnsvm.data.NTPData`),
:class:`NTPUFM` (the NTP unconstrained-features model: context and word embeddings trained) and
:class:`MarginObjective` (a margin model and a loss on a ready batch of tensors).


The package: :mod:`~attnsvm.models.parameterizations` (how the scores are parameterized:
``W``, ``K Q^T``, the prompt ``p``), :mod:`~attnsvm.models.heads` (the linear and the MLP head),
:mod:`~attnsvm.models.attention` (:class:`AttentionClassifier`, composing one of each) and
:mod:`~attnsvm.models.linear` (:class:`LinearClassifier`), :mod:`~attnsvm.models.objective`
(the objective interface), :mod:`~attnsvm.models.ntp_linear` (:class:`NTPLinear`) and
:mod:`~attnsvm.models.ntp_ufm` (:class:`NTPUFM`) and
:mod:`~attnsvm.models.ntp_attention` (:class:`SelfAttentionNTP`, next-token prediction with one
self-attention layer); :mod:`~attnsvm.models.nets` holds Chapter 12's networks (multi-head
attention, a small ViT, the pretrained MiniLM encoder and its tokenizer), imported on its own.
"""
from .attention import AttentionClassifier
from .heads import LinearHead, MLPHead
from .linear import LinearClassifier
from .ntp_attention import SelfAttentionNTP
from .ntp_linear import NTPLinear
from .ntp_ufm import NTPUFM
from .objective import MarginObjective, ObjectiveModel, is_objective_model
from .parameterizations import KQScores, PromptScores, WScores

__all__ = ["AttentionClassifier", "LinearClassifier", "WScores", "KQScores", "PromptScores",
           "LinearHead", "MLPHead", "ObjectiveModel", "MarginObjective", "NTPLinear", "NTPUFM",
           "is_objective_model", "SelfAttentionNTP"]
