"""The smallest building blocks: a linear map, LayerNorm and the activations BERT configs name.

Everything else in bertfn is made of these. Each mirrors a torch / transformers primitive with
exactly the same numerics, so parity with transformers holds to float rounding.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

Tensor = torch.Tensor


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``y = x W^T + b`` (``torch.nn.Linear``).

    Any memory layout of ``w`` gives the same values (:func:`bertfn.load` lays each weight out
    (in, out) in memory, :func:`~bertfn.checkpoint.state.matmul_layout`). The fast path multiplies with
    kernels of its own choosing (:mod:`bertfn.fast.kernels`); this is the definition they are tested against.

    Args:
        x: (..., in).
        w: (out, in), as named in HF checkpoints.
        b: (out,), or None for no bias.

    Returns:
        (..., out).
    """
    return F.linear(x, w, b)


def layer_norm(x: Tensor, g: Tensor, b: Tensor, eps: float) -> Tensor:
    """LayerNorm over the last axis (``torch.nn.LayerNorm``; Ba et al. 2016, eq. 15-16).

    ``y = (x - mean) / sqrt(var + eps) * g + b`` with the biased variance.
    The step-by-step version of the same formula is in notebooks/01_bert_from_scratch.

    Args:
        x: (..., H).
        g: (H,) the gain (``LayerNorm.weight``).
        b: (H,) the bias (``LayerNorm.bias``).
        eps: added to the variance; it comes from ``config.layer_norm_eps`` (1e-12 for BERT).

    Returns:
        (..., H).
    """
    return F.layer_norm(x, (x.shape[-1],), g, b, eps)


def gelu(x: Tensor) -> Tensor:
    """Exact GELU ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (HF ``"gelu"``, the BERT default).

    Args:
        x: any shape.

    Returns:
        The same shape.
    """
    return F.gelu(x)


def gelu_new(x: Tensor) -> Tensor:
    """Tanh approximation of GELU as written in the original BERT/GPT code (HF ``"gelu_new"``).

    Args:
        x: any shape.

    Returns:
        The same shape.
    """
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_fast(x: Tensor) -> Tensor:
    """Tanh approximation of GELU with the constant folded (HF ``"gelu_fast"``).

    Args:
        x: any shape.

    Returns:
        The same shape.
    """
    return 0.5 * x * (1.0 + torch.tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))


def gelu_pytorch_tanh(x: Tensor) -> Tensor:
    """torch's own tanh-approximate GELU (HF ``"gelu_pytorch_tanh"``).

    Args:
        x: any shape.

    Returns:
        The same shape.
    """
    return F.gelu(x, approximate="tanh")


def quick_gelu(x: Tensor) -> Tensor:
    """Sigmoid approximation ``x * sigmoid(1.702 x)`` (HF ``"quick_gelu"``).

    Args:
        x: any shape.

    Returns:
        The same shape.
    """
    return x * torch.sigmoid(1.702 * x)


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_python": gelu,  # HF's pure-python erf GELU: the same function
    "gelu_new": gelu_new,
    "gelu_fast": gelu_fast,
    "gelu_pytorch_tanh": gelu_pytorch_tanh,
    "quick_gelu": quick_gelu,
    "relu": F.relu,
    "silu": F.silu,
    "swish": F.silu,
    "mish": F.mish,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "linear": lambda x: x,
}
"""``config.hidden_act`` name -> function, the subset of HF's ``ACT2FN`` that BERT configs use."""


def dropout(x: Tensor, p: float, generator: torch.Generator | None) -> Tensor:
    """Inverted dropout (``torch.nn.Dropout`` in training mode), active only when ``generator`` is given.

    bertfn never draws from torch's global random state: a caller who wants dropout passes a
    ``torch.Generator``, so the same generator seed gives the same masks.

    Args:
        x: any shape.
        p: the probability of dropping an element (0.0: none).
        generator: the random source of the masks; None turns dropout off.

    Returns:
        The same shape as ``x``.
    """
    if generator is None or p == 0.0:
        return x
    keep = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) >= p
    return x * keep / (1.0 - p)
