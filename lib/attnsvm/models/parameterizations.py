r"""How the attention scores are parameterized, one small class each.

* :class:`WScores`: :math:`a_{it} = x_{it}^\top W z_i`, :math:`W \in \mathbb{R}^{d\times d}`;
* :class:`KQScores`: :math:`a_{it} = x_{it}^\top K Q^\top z_i`, :math:`K, Q \in \mathbb{R}^{d\times m}`;
* :class:`PromptScores`: :math:`a_{it} = x_{it}^\top p`, :math:`p \in \mathbb{R}^d`;
* :class:`WSpanScores`: the scores of :class:`WScores` with :math:`W = W_0 + B^\top\hat Z` held in
  the span of the queries (the engine's ``coordinates="span"``; not a model of its own).

Each gives its parameter ``names`` and ``shapes``, the main attention parameter
(:meth:`matrix`), the scores (:meth:`scores`) and, from
:math:`\bar x_i = X_i^\top q_i` (the softmax-Jacobian-weighted tokens, see
:meth:`attnsvm.models.AttentionClassifier.grad`), the gradients
:math:`\nabla_W = \sum_i \bar x_i z_i^\top`, :math:`\nabla_K = \nabla_W Q`,
:math:`\nabla_Q = \nabla_W^\top K`, :math:`\nabla_p = \sum_i \bar x_i` (:meth:`grads`).
All tensors carry a leading trials axis.
"""
from __future__ import annotations

import torch

__all__ = ["WScores", "KQScores", "PromptScores", "WSpanScores", "PARAMETERIZATIONS",
           "SPAN_FIXED", "span_coordinates", "token_products", "token_sums"]


def _bilinear_scores(X, Z, W):
    r""":math:`a_{it} = x_{it}^\top (W z_i)`: ``W z`` first (one small product per trial), then
    one batched matrix-vector product per sequence, so ``X`` (B,...,T,d) is read once with no
    temporary of its size."""
    Wz = torch.matmul(Z, W.transpose(-1, -2))      # (B,...,d): rows W z_i
    return token_products(X, Wz)


def token_products(X, w):
    r""":math:`X_i w_i` for every sequence: ``X`` (..., T, d), ``w`` (..., d) -> (..., T), one
    batched matrix-vector product (``X`` read once, no (..., T, d) temporary)."""
    lead, (T, d) = X.shape[:-2], X.shape[-2:]
    return torch.bmm(X.reshape(-1, T, d), w.reshape(-1, d, 1)).view(lead + (T,))


def token_sums(X, q, Xt=None):
    r""":math:`\bar x_i = X_i^\top q_i`: ``X`` (..., T, d), ``q`` (..., T) -> (..., d), one
    batched product; ``Xt``, the tokens stored transposed (..., d, T), makes it the same
    contiguous matrix-vector product as :func:`token_products`."""
    lead, (T, d) = X.shape[:-2], X.shape[-2:]
    if Xt is not None:
        return torch.bmm(Xt.reshape(-1, d, T), q.reshape(-1, T, 1)).view(lead + (d,))
    return torch.bmm(q.reshape(-1, 1, T), X.reshape(-1, T, d)).view(lead + (d,))


class _Bilinear:
    r"""A bilinear score :math:`a = X M z` with the matrix :math:`M` of :meth:`matrix`: the scores
    and the gradients through :math:`\tilde\nabla_W = \sum_i \bar x_i z_i^\top` (the subclass
    gives ``grads_from_gW``)."""

    query = True                                    # uses the queries z_i

    def scores(self, params, batch, W=None):
        return _bilinear_scores(batch["X"], batch["Z"], self.matrix(params) if W is None else W)

    def grads(self, params, xbar, batch, sig):
        return self.grads_from_gW(params, torch.bmm(xbar.transpose(-1, -2), batch["Z"]), sig)


class WScores(_Bilinear):
    """:math:`a = X W z` with ``W`` (B,d,d)."""

    name = "W"
    names = ("W",)

    @staticmethod
    def shapes(d, m):
        return {"W": (d, d)}

    @staticmethod
    def matrix(params):
        return params["W"]

    @staticmethod
    def grads_from_gW(params, gW, sig):
        r"""The gradients from :math:`\tilde\nabla_W = \sum_i \bar x_i z_i^\top` (B,d,d)."""
        return {"W": gW}, {"W": sig}


class KQScores(_Bilinear):
    """:math:`a = X K Q^\\top z` with ``K``, ``Q`` (B,d,m)."""

    name = "KQ"
    names = ("K", "Q")

    @staticmethod
    def shapes(d, m):
        return {"K": (d, m), "Q": (d, m)}

    @staticmethod
    def matrix(params):
        return params["K"] @ params["Q"].transpose(-1, -2)

    @staticmethod
    def grads_from_gW(params, gW, sig):
        r""":math:`\nabla_K = \tilde\nabla_W Q`, :math:`\nabla_Q = \tilde\nabla_W^\top K`."""
        return ({"K": gW @ params["Q"], "Q": gW.transpose(-1, -2) @ params["K"]},
                {"K": sig, "Q": sig})


class PromptScores:
    """:math:`a = X p` with the prompt ``p`` (B,d)."""

    name = "prompt"
    names = ("p",)
    query = False

    @staticmethod
    def shapes(d, m):
        return {"p": (d,)}

    @staticmethod
    def matrix(params):
        return params["p"]

    @staticmethod
    def scores(params, batch, W=None):
        X, p = batch["X"], params["p"]
        B, n, T, d = X.shape
        return torch.bmm(X.reshape(B, n * T, d), p.reshape(B, d, 1)).view(B, n, T)

    @staticmethod
    def grads(params, xbar, batch, sig):
        return {"p": xbar.sum(-2)}, {"p": sig}


#: the fixed tensors of :class:`WSpanScores` (held with the parameters, never trained)
SPAN_FIXED = ("W0", "Zh", "Cz", "CzT", "U0")


def span_coordinates(W0, Z):
    r"""The fixed tensors of :class:`WSpanScores` for the start ``W0`` (B,d,d) and the queries
    ``Z`` (B,n,d), ``n < d``: an orthonormal basis ``Zh`` (B,n,d) of the span of the
    :math:`z_i` (rows; from the QR factorization of :math:`Z^\top`), the queries' coordinates
    ``Cz`` :math:`= Z\hat Z^\top` (B,n,n) (so :math:`Z = C_z\hat Z`), its transpose ``CzT``
    (contiguous) and ``U0`` :math:`= Z W_0^\top` (rows :math:`W_0 z_i`)."""
    Qm = torch.linalg.qr(Z.transpose(-1, -2)).Q              # (B,d,n), orthonormal columns
    Cz = torch.matmul(Z, Qm)
    return {"W0": W0, "Zh": Qm.transpose(-1, -2).contiguous(), "Cz": Cz,
            "CzT": Cz.transpose(-1, -2).contiguous(), "U0": torch.matmul(Z, W0.transpose(-1, -2))}


class WSpanScores:
    r""":math:`a = X W z` with :math:`W = W_0 + B^\top\hat Z` held by ``B`` (trials, n, d): the
    coordinates of the queries' span (:func:`span_coordinates`), for the runs whose every step
    is a multiple of the gradient.

    Every gradient of the ``W`` model is :math:`\tilde\nabla_W = \sum_i\bar x_i z_i^\top =
    \bar X^\top Z` (:class:`WScores`), so a rule whose increment is a per-trial multiple of it
    (gradient descent, normalized GD, both Polyak steps) keeps :math:`W_t - W_0` in
    :math:`\{A^\top Z\} = \{B^\top\hat Z\}` (:math:`\hat Z` an orthonormal basis of the rows
    of :math:`Z`). With :math:`W = W_0 + B^\top\hat Z`, :math:`\partial L/\partial B =
    \hat Z\tilde\nabla_W^\top = C_z^\top\bar X` (:math:`Z = C_z\hat Z`) and, as
    :math:`\hat Z\hat Z^\top = I`, :math:`\|\partial L/\partial B\|_F = \|\nabla_W L\|_F` and
    the step :math:`B \leftarrow B - \eta\,\partial L/\partial B` moves :math:`W` by
    :math:`-\eta(C_z^\top\bar X)^\top\hat Z = -\eta\bar X^\top Z = -\eta\nabla_W L`: the
    same rule in other coordinates, equal in exact arithmetic (and to rounding in floating point,
    ``tests/test_span.py``). Adam, sign and steepest descent in other norms are not invariant
    under the rotation and do not apply.

    The step then needs :math:`U = ZW^\top = U_0 + C_zB` (one ``baddbmm``,
    :math:`n^2 d` per trial) and :math:`C_z^\top\bar X` (:math:`n^2 d`) instead of
    :math:`ZW^\top` and :math:`\bar X^\top Z` (:math:`n d^2` each): fewer operations when
    :math:`n < d` (``benchmarks/span_speed.py``; at small ``d`` the small batched products'
    own costs win, and ``fit(coordinates="auto")`` takes it only from
    :data:`attnsvm.train.SPAN_MIN_D` on). :meth:`matrix`
    gives :math:`W` itself (records, snapshots, the final iterate)."""

    name = "W"
    names = ("B",)
    query = True

    @staticmethod
    def matrix(params):
        return torch.baddbmm(params["W0"], params["B"].transpose(-1, -2), params["Zh"])

    @staticmethod
    def scores(params, batch, W=None):
        if W is not None:
            return _bilinear_scores(batch["X"], batch["Z"], W)
        return token_products(batch["X"], torch.baddbmm(params["U0"], params["Cz"], params["B"]))

    @staticmethod
    def grads(params, xbar, batch, sig):
        r""":math:`\partial L/\partial B = C_z^\top\bar X` (B,n,d), log-scaled like
        :math:`\tilde\nabla_W`."""
        return {"B": torch.bmm(params["CzT"], xbar)}, {"B": sig}


#: model name -> parameterization
PARAMETERIZATIONS = {"W": WScores(), "KQ": KQScores(), "prompt": PromptScores()}
