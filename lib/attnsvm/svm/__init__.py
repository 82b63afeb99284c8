r"""Attention SVMs: the max-margin problems that gradient descent on attention converges to.

Notation (the book's): ``X`` (n, T, d) tokens :math:`x_{it}`, ``y`` (n,) labels,
``Z`` (n, d) queries :math:`z_i`, ``v`` (d,) head, token scores
:math:`\gamma_{it} = y_i v^\top x_{it}`, ``opt`` :math:`= \arg\max_t \gamma_{it}`, and a
general choice of selected tokens ``alpha`` (n,).

The Att-SVM
-----------
For a choice :math:`\alpha` and a norm :math:`\|\cdot\|`,

.. math::

    W^{\alpha}_{mm} = \arg\min_W \|W\| \quad\text{s.t.}\quad
    (x_{i\alpha_i} - x_{it})^\top W z_i \ge 1 \quad \forall i,\ \forall t \ne \alpha_i .

With the lifted features :math:`A_{it} = (x_{i\alpha_i} - x_{it}) z_i^\top` the constraints
read :math:`\langle A_{it}, W\rangle \ge 1`: for the Frobenius norm this is a linear
hard-margin SVM without bias in :math:`\mathbb{R}^{d\times d}`. Its Lagrange dual is

.. math::

    \max_{\lambda \ge 0}\ \sum_k \lambda_k - \tfrac12 \Big\|\sum_k \lambda_k A_k\Big\|_F^2,
    \qquad G_{kl} = \langle A_k, A_l\rangle
    = \big((x_{i\alpha_i} - x_{it})^\top (x_{j\alpha_j} - x_{js})\big)\,(z_i^\top z_j),

with :math:`K = n(T-1)` variables, and the KKT conditions
:math:`W_{mm} = \sum_k \lambda_k A_k`, :math:`\lambda \ge 0`,
:math:`\lambda_k(\langle A_k, W_{mm}\rangle - 1) = 0`; in particular
:math:`\mathrm{rank}(W_{mm}) \le n`.

For the nuclear norm (:math:`W^*_{mm}`, the bias of the :math:`(K, Q)` parameterization)
and the entrywise :math:`\ell_p` norms the problem is solved as a cone program; the
multipliers then satisfy the dual :math:`\max \sum_k \lambda_k` s.t.
:math:`\|\sum_k \lambda_k A_k\|_\circ \le 1`, :math:`\lambda \ge 0`, where
:math:`\|\cdot\|_\circ` is the dual norm (spectral norm for the nuclear norm,
:math:`\ell_q` with :math:`1/p + 1/q = 1` for :math:`\ell_p`), and
:math:`\sum_k \lambda_k = \|W_{mm}\|`.

Solvers
-------
The Frobenius problem is solved by a dense primal-dual interior-point method (Mehrotra
predictor-corrector) written for this problem, whose Newton systems are solved either in
the :math:`K`-dimensional dual space (``"dual"``: Cholesky of :math:`G + D` for the
bounded NNLS form of the dual, :math:`\min_{u \ge 0} \tfrac12 u^\top (G + 11^\top) u - 1^\top u`,
:math:`\lambda = u / (1 - 1^\top u)`) or in the :math:`d^2`-dimensional primal space
(``"primal"``: normal equations :math:`I + F^\top \mathrm{diag}(\lambda/s) F` with the rows
:math:`F_k = \mathrm{vec}(A_k)`). The automatic choice (:func:`choose_formulation`) is
``"dual"`` when :math:`n(T-1) \le 1.5\,(d^2 + 1)`. The result is polished on its active set and
verified (constraints, complementary slackness, duality gap); anything that does not verify,
and every instance that looks infeasible, is handed to Clarabel through cvxpy, whose
certificate decides infeasibility (:class:`InfeasibleError`). The other norms always use
cvxpy with Clarabel at tight tolerances (:data:`CLARABEL_OPTIONS`).

Every returned solution satisfies its constraints exactly up to rounding: after solving,
``W`` is divided by its smallest margin when that margin is in :math:`[1 - 10^{-6}, 1)`, and a
smaller margin raises :class:`SolverError`. Nothing returns ``None`` or NaN.

Layout
------
``attsvm``    the SVMs (:func:`att_svm`, :func:`att_svm_batch`, :func:`p_svm` strict or relaxed,
              :func:`head_support`, :func:`linear_svm`, :func:`head_svm`, :func:`joint_references`) and the choice of
              solver path
``geometry``  l_p linear SVMs, margins in a norm, the spectral-norm Att-SVM, margin ratios and gaps
              along a run, the comparison of iterates with the Att-SVMs of several norms (Part IV)
``ntp``       the NTP-SVM of the linear decoder and the logit-space SVM (Chapter 15)
``graph``     the priority-graph Att-SVM of next-token prediction (Chapter 16)
``finite``    the finite parts W* of next-token prediction (linear, logit space, attention)
``local``     support tokens, local optimality, cones, numerical rank, the ray alignment, the search
              for (non-)locally optimal choices, instances with a trap (``find_traps``)
``_ipm``      the dense interior point (Frobenius norm)
``_cvx``      the cvxpy path (nuclear and l_p norms; fallback)
``_common``   errors, validation, constraint lists, the problem object
"""
from ._common import CLARABEL_OPTIONS, InfeasibleError, SolverError
from ._ipm import choose_formulation
from .attsvm import att_svm, att_svm_batch, head_support, head_svm, joint_references, linear_svm, p_svm
from .finite import graph_finite, graph_subspace, logit_finite, logit_project_F, ntp_finite, projector_F
from .geometry import (AttSVMComparison, att_margin_gap, att_margin_in_norm, att_svm_spectral, compare_att_svms,
                       linear_svm_p, margin_gaps, margin_in_norm, margin_ratios, norm_key)
from .graph import graph_svm
from .local import (find_choices, find_traps, in_cone, is_locally_optimal, ray_alignment, ray_alignment_limit,
                    rank, support_tokens)
from .ntp import logit_margin, logit_svm, ntp_svm

__all__ = [
    "InfeasibleError",
    "SolverError",
    "CLARABEL_OPTIONS",
    "att_svm",
    "att_svm_batch",
    "choose_formulation",
    "p_svm",
    "head_support",
    "linear_svm",
    "head_svm",
    "joint_references",
    "graph_svm",
    "ntp_svm",
    "logit_svm",
    "logit_margin",
    "ntp_finite",
    "projector_F",
    "logit_finite",
    "logit_project_F",
    "graph_finite",
    "graph_subspace",
    "linear_svm_p",
    "margin_in_norm",
    "att_svm_spectral",
    "att_margin_in_norm",
    "norm_key",
    "margin_ratios",
    "margin_gaps",
    "att_margin_gap",
    "AttSVMComparison",
    "compare_att_svms",
    "support_tokens",
    "is_locally_optimal",
    "in_cone",
    "rank",
    "ray_alignment",
    "ray_alignment_limit",
    "find_choices",
    "find_traps",
]
