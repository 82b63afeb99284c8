r"""The heads :math:`\psi` of the attention classifier :math:`f(X) = \psi(X^\top s)`.

* :class:`LinearHead`: :math:`\psi(h) = v^\top h`, ``v`` (B,d) (from the data, or trained);
* :class:`MLPHead`: :math:`\psi(h) = c^\top \mathrm{relu}(U h)`, ``U`` (B,k,d) and ``c`` (B,k)
  drawn at initialization (:math:`U_{jl} \sim N(0, 1/d)`, :math:`c_j = \pm 1/\sqrt k`).

Each gives its parameter ``names``, its per-trial initial draws (:meth:`draw`), the head
values :math:`\psi(x)` of any tokens (:meth:`values`), its linearization at the attention
output (:meth:`linearize`: :math:`\psi(h)` and :math:`\nabla\psi(h)`) and the gradient of
:math:`\sum_i c_i\,\psi(h_i)` in its own parameters (:meth:`param_grads`).

The gradient of a nonlinear head, exact at any saturation
----------------------------------------------------------
With :math:`s = \mathrm{softmax}(a)` and :math:`h = X^\top s`, a differentiable head gives

.. math::

    \frac{\partial \psi(h)}{\partial a_t} = \nabla\psi(h)^\top \frac{\partial h}{\partial a_t}
    = \nabla\psi(h)^\top s_t (x_t - h) = s_t\,(\tilde g_t - \tilde f), \qquad
    \tilde g_t = w^\top x_t,\quad \tilde f = \sum_\tau s_\tau \tilde g_\tau = w^\top h,
    \quad w = \nabla\psi(h),

since :math:`\partial s_\tau/\partial a_t = s_\tau(\delta_{\tau t} - s_t)` gives
:math:`\partial h/\partial a_t = s_t (x_t - h)`. This is exactly the linear head's Jacobian with
the head *linearized at* :math:`h_i`, i.e. with :math:`v` replaced by :math:`w_i = \nabla\psi(h_i)`
(one per sequence). So the score gradient of any head is the linear head's, evaluated with the
token values :math:`\tilde g_{it} = w_i^\top x_{it}`, and it inherits the linear head's
cancellation-free, log-space evaluation
(:meth:`attnsvm.models.AttentionClassifier.grad`): the top token's term
:math:`s_{t^\star}\sum_\tau s_\tau(\tilde g_{t^\star} - \tilde g_\tau)` is formed from the
rescaled masses :math:`\hat s_\tau = s_\tau / s_{(2)} = O(1)` (never from :math:`\tilde g_{t^\star} -
\tilde f`, the difference of two nearly equal numbers), and the non-selected masses are
factored out as :math:`e^{\lambda_{2,i}}`, :math:`\lambda_{2,i} = \log s_{(2)}` the second largest
log-probability, kept in log space. Autograd through the softmax forms :math:`\tilde g_{t^\star} - \tilde f`
in floating point: once :math:`1 - s_{t^\star} < 10^{-16}` that term is rounding noise larger than
the true gradient, and a normalized step follows the noise.

For the ReLU head :math:`\psi(h) = c^\top\mathrm{relu}(Uh)`,
:math:`w = U^\top(c \odot \mathbb{1}[Uh > 0])` (derivative 0 at a kink, as autograd), and
:math:`\psi` is positively homogeneous, so :math:`\tilde f = w^\top h = \psi(h)`. Nothing here
cancels: :math:`h` is a convex combination of the tokens and :math:`w` is piecewise constant in
:math:`h`. The head's own parameters have :math:`\partial\psi/\partial c = \mathrm{relu}(Uh)` and
:math:`\partial\psi/\partial U = (c \odot \mathbb{1}[Uh>0])\,h^\top`.
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

    @staticmethod
    def linearize(params, h):
        """:math:`\\psi(h) = v^\\top h` and :math:`\\nabla\\psi(h) = v` for ``h`` (B,n,d)."""
        v = params["v"].unsqueeze(-2).expand_as(h)
        return (h * v).sum(-1), v

    @staticmethod
    def param_grads(params, h, cy):
        """:math:`\\nabla_v \\sum_i c_i\\,v^\\top h_i` with ``cy`` (B,n), ``h`` (B,n,d)."""
        return {"v": (cy.unsqueeze(-1) * h).sum(-2)}


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

    @staticmethod
    def linearize(params, h):
        r""":math:`\psi(h_i)` (B,n) and :math:`w_i = \nabla\psi(h_i) = U^\top(c\odot
        \mathbb{1}[Uh_i > 0])` (B,n,d) for ``h`` (B,n,d) (see the module docstring)."""
        U, c = params["U"], params["c"]
        pre = torch.einsum("bkd,bnd->bnk", U, h)
        act = (pre > 0).to(h.dtype) * c.unsqueeze(-2)                 # (B,n,k)
        return (torch.relu(pre) * c.unsqueeze(-2)).sum(-1), torch.einsum("bnk,bkd->bnd", act, U)

    @staticmethod
    def param_grads(params, h, cy):
        r""":math:`\nabla_{U, c} \sum_i c_i\,\psi(h_i)` with ``cy`` (B,n) the coefficients
        :math:`c_i` and ``h`` (B,n,d): :math:`\sum_i c_i (c\odot\mathbb{1}[Uh_i>0]) h_i^\top`
        and :math:`\sum_i c_i\,\mathrm{relu}(Uh_i)`."""
        U, c = params["U"], params["c"]
        pre = torch.einsum("bkd,bnd->bnk", U, h)
        gc = (cy.unsqueeze(-1) * torch.relu(pre)).sum(-2)
        gU = torch.einsum("bnk,bnd->bkd", cy.unsqueeze(-1) * (pre > 0).to(h.dtype), h) * c.unsqueeze(-1)
        return {"U": gU, "c": gc}


#: head name -> head
HEADS = {"linear": LinearHead(), "mlp": MLPHead()}
