r"""How the attention scores are parameterized, one small class each.

* :class:`WScores`: :math:`a_{it} = x_{it}^\top W z_i`, :math:`W \in \mathbb{R}^{d\times d}`;
* :class:`KQScores`: :math:`a_{it} = x_{it}^\top K Q^\top z_i`, :math:`K, Q \in \mathbb{R}^{d\times m}`;
* :class:`PromptScores`: :math:`a_{it} = x_{it}^\top p`, :math:`p \in \mathbb{R}^d`.

Each gives its parameter ``names`` and ``shapes``, the main attention parameter
(:meth:`matrix`), the scores (:meth:`scores`) and, from
:math:`\bar x_i = X_i^\top q_i` (the softmax-Jacobian-weighted tokens, see
:meth:`attnsvm.models.AttentionClassifier.grad`), the gradients
:math:`\nabla_W = \sum_i \bar x_i z_i^\top`, :math:`\nabla_K = \nabla_W Q`,
:math:`\nabla_Q = \nabla_W^\top K`, :math:`\nabla_p = \sum_i \bar x_i` (:meth:`grads`).
All tensors carry a leading trials axis.
"""
from __future__ import annotations

__all__ = ["WScores", "KQScores", "PromptScores", "PARAMETERIZATIONS"]


def _bilinear_scores(X, Z, W):
    Wz = Z @ W.transpose(-1, -2)                   # (B,n,d): rows W z_i
    return (X * Wz.unsqueeze(-2)).sum(-1)


class WScores:
    """:math:`a = X W z` with ``W`` (B,d,d)."""

    name = "W"
    names = ("W",)
    query = True                                    # uses the queries z_i

    @staticmethod
    def shapes(d, m):
        return {"W": (d, d)}

    @staticmethod
    def matrix(params):
        return params["W"]

    def scores(self, params, batch, W=None):
        return _bilinear_scores(batch["X"], batch["Z"], self.matrix(params) if W is None else W)

    @staticmethod
    def grads(params, xbar, batch, sig):
        gW = xbar.transpose(-1, -2) @ batch["Z"]    # (B,d,d)
        return {"W": gW}, {"W": sig}


class KQScores:
    """:math:`a = X K Q^\\top z` with ``K``, ``Q`` (B,d,m)."""

    name = "KQ"
    names = ("K", "Q")
    query = True

    @staticmethod
    def shapes(d, m):
        return {"K": (d, m), "Q": (d, m)}

    @staticmethod
    def matrix(params):
        return params["K"] @ params["Q"].transpose(-1, -2)

    def scores(self, params, batch, W=None):
        return _bilinear_scores(batch["X"], batch["Z"], self.matrix(params) if W is None else W)

    @staticmethod
    def grads(params, xbar, batch, sig):
        gW = xbar.transpose(-1, -2) @ batch["Z"]    # (B,d,d)
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
        return (batch["X"] * params["p"][:, None, None, :]).sum(-1)

    @staticmethod
    def grads(params, xbar, batch, sig):
        return {"p": xbar.sum(-2)}, {"p": sig}


#: model name -> parameterization
PARAMETERIZATIONS = {"W": WScores(), "KQ": KQScores(), "prompt": PromptScores()}
