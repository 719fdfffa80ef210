"""A head's steps on a vector split into parts, with its nonlinearities frozen at one run.

Direct attribution (:mod:`bertfn.interventions.logit_attribution`) writes a head's input, one vector, as a sum of K
parts (one per attention head, per layer's feed-forward write, ...) and pushes each part through the head alone, so
that the head's output is the sum of the parts' outputs. A linear layer does that by itself; an activation and a
LayerNorm do it once they are *frozen* at this run's values:

* an activation at its input z is ``act(z) = g * z + r``, the gate ``g = (act(z) - act(0)) / z`` (``act'(0)`` where
  ``|z| <`` :data:`SMALL`) and the remainder ``r = act(z) - g * z`` fixed at this run (:func:`gate`): tanh, ReLU
  and GELU each become a number per unit;
* a LayerNorm with its ``1 / sigma`` fixed at this run is affine:
  ``LN(v) = gamma * (v - mean(v)) / sigma + beta`` is the sum over the parts ``v_c`` of
  ``gamma * (v_c - mean(v_c)) / sigma``, plus beta (:func:`frozen_norm`).

The parts are a tensor (K, ..., D) whose last row is the *bias part*: what no write of the encoder owns (the
LayerNorms' betas, the layers' biases, the remainders). The ``through_*`` functions are a head's steps on such
parts, each taking the run's value of its input to be the parts' sum, so that a head written with them gives parts
that sum to its output. BERT's heads written with them are at the end (:func:`pooled_classifier_parts`, ...: each
the linearization of the head it names in :mod:`bertfn.model.task_heads`); the members' heads whose heads are not
BERT's have theirs in :mod:`bertfn.interventions.head_parts`, which also finds the one a model's head has.
"""

from __future__ import annotations

import torch

from ..model.functional import ACTIVATIONS
from ..model.params import Params

Tensor = torch.Tensor

SMALL = 1e-6
"""Below this |z| an activation's gate is its slope at 0 (the quotient loses its digits there)."""


def frozen_norm(parts: Tensor, whole: Tensor, gamma: Tensor, eps: float) -> Tensor:
    """Each part through a LayerNorm whose 1/sigma is that of ``whole``: ``gamma * (v_c - mean(v_c)) / sigma``.

    Summed over the parts, plus beta, it is ``torch.nn.LayerNorm(whole)`` when the parts sum to ``whole``.

    Args:
        parts: (K, ..., D), the parts of the LayerNorm's input.
        whole: (..., D), the input as the run computed it (its sigma, over D, is frozen).
        gamma: (D,), ``LayerNorm.weight``.
        eps: the LayerNorm's eps.

    Returns:
        (K, ..., D), without beta.
    """
    sigma = (whole.var(dim=-1, unbiased=False, keepdim=True) + eps).sqrt()  # (..., 1)
    return gamma * (parts - parts.mean(dim=-1, keepdim=True)) / sigma


def gate(name: str, z: Tensor) -> tuple[Tensor, Tensor]:
    """The activation ``name`` at ``z`` written ``act(z) = g * z + r``, g frozen at this run.

    ``g = (act(z) - act(0)) / z``, and ``act'(0)`` (from autograd) where ``|z| <`` :data:`SMALL`;
    ``r = act(z) - g * z``.

    Args:
        name: a key of :data:`~bertfn.model.functional.ACTIVATIONS`.
        z: (..., D) the pre-activation, float64.

    Returns:
        g: (..., D) the gate.
        r: (..., D) the remainder.
    """
    act = ACTIVATIONS[name]
    zero = torch.zeros((), dtype=z.dtype, requires_grad=True)
    with torch.enable_grad():
        at_zero = act(zero)
        (slope,) = torch.autograd.grad(at_zero, zero)
    y = act(z)
    small = z.abs() < SMALL
    g = torch.where(small, slope, (y - at_zero.detach()) / torch.where(small, torch.ones_like(z), z))
    return g, y - g * z


def _as(parts: Tensor, w: Tensor) -> Tensor:
    """A weight in the parts' dtype and device (float64 on the CPU, where the sums are taken)."""
    return w.detach().to(parts.device, parts.dtype)


def through_linear(parts: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """A linear layer (``nn.Linear``) on each part: ``W v_c``, and its bias to the bias part.

    Args:
        parts: (K, ..., D_in), the last row the bias part.
        weight: (D_out, D_in).
        bias: (D_out,) or None (a layer without one).

    Returns:
        (K, ..., D_out).
    """
    out = parts @ _as(parts, weight).T  # (K, ..., D_out)
    if bias is not None:
        out[-1] += _as(parts, bias)
    return out


def through_activation(parts: Tensor, name: str) -> Tensor:
    """The activation ``name`` frozen as a gate at the parts' sum (:func:`gate`): ``g * v_c``, and ``r`` to the bias part.

    Args:
        parts: (K, ..., D), the last row the bias part.
        name: a key of :data:`~bertfn.model.functional.ACTIVATIONS` (``"tanh"``, ``"relu"``, ``"gelu"``).

    Returns:
        (K, ..., D).
    """
    g, r = gate(name, parts.sum(dim=0))  # (..., D) each
    out = parts * g
    out[-1] += r
    return out


def through_norm(parts: Tensor, weight: Tensor, bias: Tensor | None, eps: float) -> Tensor:
    """A LayerNorm frozen at the parts' sum (:func:`frozen_norm`), its beta to the bias part.

    Args:
        parts: (K, ..., D), the last row the bias part.
        weight: (D,) gamma.
        bias: (D,) beta, or None (ModernBERT's norms without one).
        eps: the LayerNorm's eps.

    Returns:
        (K, ..., D).
    """
    out = frozen_norm(parts, parts.sum(dim=0), _as(parts, weight), eps)
    if bias is not None:
        out[-1] += _as(parts, bias)
    return out


# --- BERT's heads on parts -----------------------------------------------------------------------


def pooled_classifier_parts(params: Params, parts: Tensor, mask: Tensor, head: str = "classifier") -> Tensor:
    """``pooled_classifier`` (``BertForSequenceClassification``'s head) on parts of the last hidden states: the
    pooler's dense layer on each part of the first token's vector, its tanh frozen as a gate, then ``classifier``
    (or the linear head ``head`` names: AntiBERTy's ``AntiBERTyHeads``, ``self.species(pooled_output)``).

    Args:
        params: the root view (reads ``bert.pooler.dense.*`` and ``{head}.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused (the pooler reads the first token).
        head: the key prefix of the linear layer on the pooler: ``classifier``, or an extra head of
            :attr:`~bertfn.checkpoint.model.Model.extra_heads` (``cls.species``).

    Returns:
        (K, num_labels).
    """
    p = params.scope("bert.pooler.dense")
    pooled = through_activation(through_linear(parts[:, 0], p["weight"], p["bias"]), "tanh")  # (K, H)
    return through_linear(pooled, params[f"{head}.weight"], params[f"{head}.bias"])  # (K, num_labels)


def token_classifier_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """``token_classifier`` (``BertForTokenClassification``'s head) on parts of the last hidden states: ``classifier``
    on each (it is linear).

    Args:
        params: the root view (reads ``classifier.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        (K, S, num_labels).
    """
    return through_linear(parts, params["classifier.weight"], params["classifier.bias"])


def span_reader_parts(params: Params, parts: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """``span_reader`` (``BertForQuestionAnswering``'s head) on parts of the last hidden states: ``qa_outputs`` on
    each (it is linear).

    Args:
        params: the root view (reads ``qa_outputs.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        start: (K, S); end: (K, S).
    """
    start, end = through_linear(parts, params["qa_outputs.weight"], params["qa_outputs.bias"]).unbind(dim=-1)
    return start, end
