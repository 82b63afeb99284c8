r"""The heads :math:`\psi` of the attention classifier :math:`f(X) = \psi(X^\top s)`.

* :class:`LinearHead`: :math:`\psi(h) = v^\top h`, ``v`` (B,d) (from the data, or trained);
* :class:`MLPHead`: :math:`\psi(h) = c^\top \mathrm{relu}(U h)`, ``U`` (B,k,d) and ``c`` (B,k)
  drawn at initialization (:math:`U_{jl} \sim N(0, 1/d)`, :math:`c_j = \pm 1/\sqrt k`).

Each gives its parameter ``names``, its per-trial initial draws (:meth:`draw`) and the head
values :math:`\psi(x)` of any tokens (:meth:`values`).
"""
from __future__ import annotations

import math

import torch

__all__ = ["LinearHead", "MLPHead", "HEADS"]


class LinearHead:
    """:math:`\\psi(h) = v^\\top h`."""

    name = "linear"
    names = ("v",)

    @staticmethod
    def draw(r, d, k):
        """Per-trial random draws (none: ``v`` comes from the data)."""
        return {}

    @staticmethod
    def values(params, X):
        v = params["v"]
        return (X * v.reshape(v.shape[:1] + (1,) * (X.ndim - 2) + v.shape[1:])).sum(-1)


class MLPHead:
    """:math:`\\psi(h) = c^\\top \\mathrm{relu}(U h)`."""

    name = "mlp"
    names = ("U", "c")

    @staticmethod
    def shapes(d, k):
        return {"U": (k, d), "c": (k,)}

    @staticmethod
    def draw(r, d, k):
        """Trial draws from the numpy Generator ``r``: ``U`` then ``c``."""
        U = r.standard_normal((k, d)) / math.sqrt(d)
        c = r.choice([-1.0, 1.0], size=k) / math.sqrt(k)
        return {"U": U, "c": c}

    @staticmethod
    def values(params, X):
        U, c = params["U"], params["c"]
        lead = (1,) * (X.ndim - 2)
        hid = torch.relu((X.unsqueeze(-2) * U.reshape(U.shape[:1] + lead + U.shape[1:])).sum(-1))
        return (hid * c.reshape(c.shape[:1] + lead + c.shape[1:])).sum(-1)


#: head name -> head
HEADS = {"linear": LinearHead(), "mlp": MLPHead()}
