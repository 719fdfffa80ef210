"""The smallest building blocks: a linear map, LayerNorm and the activations BERT configs name.

Everything else in bertfn is made of these. Each mirrors a torch / transformers primitive with
exactly the same numerics, so parity with transformers holds to float rounding. Beside them, what every step asks of
the tensors it is given: whether a ``torch.func`` transform or ``torch.compile`` sees them (:func:`transformed`,
:func:`checkable`: the kernels and checks that can run there), and the additive masks bertfn made (:data:`BUILT`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch._C._functorch import get_unwrapped, is_functorch_wrapped_tensor
from torch.autograd import forward_ad
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.weak import WeakIdKeyDictionary

from ..errors import InputError, clipped

Tensor = torch.Tensor


class Products(NamedTuple):
    """The kernels a forward pass multiplies with, whoever chose them (:func:`use_products`).

    Attributes:
        linear: ``(x, w, b, act) -> act(x W^T + b)``, act a name of :data:`ACTIVATIONS` or None.
        linears: ``(x, ws, bs) -> [x W_i^T + b_i ...]``, one input times several weights (attention's query, key
            and value), which a kernel may run as one product.
        rows: ``(x, w, b) -> rows``: how many rows the kernel runs a product of ``x`` by ``w`` at (it may pad them,
            :func:`product_rows`).
    """

    linear: Callable[[Tensor, Tensor, Tensor | None, str | None], Tensor]
    linears: Callable[[Tensor, tuple[Tensor, ...], tuple[Tensor | None, ...]], list[Tensor]]
    rows: Callable[[Tensor, Tensor, Tensor | None], int]


def _torch_linear(x: Tensor, w: Tensor, b: Tensor | None, act: str | None) -> Tensor:
    y = F.linear(x, w, b)
    return y if act is None else ACTIVATIONS[act](y)


TORCH_PRODUCTS = Products(
    linear=_torch_linear,
    linears=lambda x, ws, bs: [F.linear(x, w, b) for w, b in zip(ws, bs)],
    rows=lambda x, w, b: x.numel() // x.shape[-1],
)
"""``F.linear``, the definition every kernel is tested against."""

_products = TORCH_PRODUCTS


def use_products(products: Products) -> None:
    """Multiply with ``products`` from now on, in every function of bertfn/model/.

    :mod:`bertfn.fast.choice` installs the kernels it measures fastest on this CPU (oneDNN on packed weights, MKL, or
    ``F.linear``) when it is imported, which ``import bertfn`` does: the products are chosen beneath the forward pass,
    which does not import what chooses them. Every kernel computes ``x W^T + b`` (fp32 to float rounding, tested).

    Args:
        products: the kernels (:class:`Products`); :data:`TORCH_PRODUCTS` puts ``F.linear`` back.
    """
    global _products
    _products = products


def linear(x: Tensor, w: Tensor, b: Tensor | None = None, act: str | None = None) -> Tensor:
    """``y = act(x W^T + b)`` (``torch.nn.Linear``, then the activation where one is named).

    Any memory layout of ``w`` gives the same values (:func:`bertfn.load` lays each weight out
    (in, out) in memory, :func:`~bertfn.checkpoint.state.matmul_layout`). The product runs on the kernel
    :func:`use_products` installed (:mod:`bertfn.fast.kernels`, chosen per CPU; ``F.linear`` where none fits: a
    gradient to track, a ``torch.func`` transform, ``torch.compile``, another device or dtype), which may apply ``act``
    as it writes the result.

    Args:
        x: (..., in).
        w: (out, in), as named in HF checkpoints (or its packed copy, :func:`bertfn.fast.choice.pack_state`).
        b: (out,), or None for no bias.
        act: a name of :data:`ACTIVATIONS` applied to the result, or None.

    Returns:
        (..., out).

    Raises:
        InputError: ``x`` of another width than ``w`` reads, or another dtype (outside autocast).
    """
    check_product(x, w)
    return _products.linear(x, w, b, act)


def linears(x: Tensor, ws: tuple[Tensor, ...], bs: tuple[Tensor | None, ...]) -> list[Tensor]:
    """``[x W_i^T + b_i for each i]``: one input times several weights (attention's query, key and value).

    The same numbers as :func:`linear` of each; a kernel may run them as one product on the weights stacked.

    Args:
        x: (..., in).
        ws: each (out_i, in).
        bs: each (out_i,) or None.

    Returns:
        Each (..., out_i).
    """
    check_product(x, ws[0])
    return _products.linears(x, tuple(ws), tuple(bs))


def check_product(x: Tensor, w: Tensor) -> None:
    """Raise :class:`InputError` unless ``x`` (..., in) can be multiplied by ``w`` (out, in): as wide as ``w`` reads,
    in its dtype (outside ``torch.autocast``, which casts), where the kernels would fail in their own words.

    Args:
        x: the input.
        w: the weight.
    """
    if not isinstance(x, Tensor) or x.dim() == 0 or x.shape[-1] != w.shape[-1]:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InputError(f"this step multiplies by a weight of shape {tuple(w.shape)}, so its input must be "
                         f"(..., {w.shape[-1]}), got {got}: the hidden states of another model, or of another step?")
    if x.dtype != w.dtype and not torch.is_autocast_enabled(x.device.type):
        raise InputError(f"the input is {x.dtype} but the weights are {w.dtype}; cast one to the other "
                         f"(x.to({w.dtype}), or bertfn.load(..., dtype=...))")


def check_keep_mask(name: str, mask: object) -> None:
    """Raise :class:`InputError` unless ``mask`` is a tensor of 0s and 1s (bools included), the tokenizer's kind.

    Args:
        name: the argument's name, for the message.
        mask: what was passed.
    """
    if not isinstance(mask, Tensor):
        raise InputError(f"{name} must be a tensor of 0/1 (1 = attend, 0 = ignore), such as tokenizer(...)."
                         f"attention_mask; got {type(mask).__name__}")
    values = None if mask.dtype == torch.bool else checkable(mask)  # bools are 0/1 by their type
    if values is not None and bool(((values != 0) & (values != 1)).any()):  # an additive mask, or counts
        low, high = values.min().item(), values.max().item()
        raise InputError(f"{name} is the 0/1 mask of the keys to read (1 = attend, 0 = ignore), as the tokenizer gives "
                         f"it, but holds values from {low:g} to {high:g}; an additive mask (0 = attend, a large "
                         f"negative number = ignore) is what attention() takes: pass the 0/1 mask it was made from "
                         f"here, and an additive one to attention() as it is")


def checkable(t: Tensor) -> Tensor | None:
    """The values of ``t`` a check of the caller's input may read, or None where it reads none.

    ``t`` itself, outside any transform. Under a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ``jacrev`` ...)
    the plain tensor beneath it (under ``vmap``, every example's values at once), so the check is made without the
    data-dependent branch the transform refuses. None on the meta device (no values), and while ``torch.compile``
    traces the pass: a check of values would break its graph at every call, so a compiled pass does not make them
    (transformers' compiled models make none either); the checks of shapes and dtypes are made there too.

    Args:
        t: a tensor the caller passed.
    """
    if t.is_meta or torch.compiler.is_compiling():
        return None
    while is_functorch_wrapped_tensor(t):
        t = get_unwrapped(t)
    return t


BUILT: WeakIdKeyDictionary = WeakIdKeyDictionary()
"""The additive masks bertfn made (or checked once, :func:`~bertfn.model.masks.check_attention`): read as they are."""


def built(mask: Tensor) -> Tensor:
    """``mask``, noted in :data:`BUILT`: an additive mask bertfn made or checked, read as it is from now on.

    Not while ``torch.compile`` traces the pass, which cannot look into the weak dictionary without breaking its graph
    (and makes no checks of values there, :func:`checkable`).

    Args:
        mask: the additive mask.
    """
    if not torch.compiler.is_compiling():
        BUILT[mask] = True
    return mask


def transformed(*ts: Tensor | None) -> bool:
    """Whether any of ``ts`` is seen through a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ``jacrev`` ...) or
    carries a forward-mode tangent (``torch.autograd.forward_ad``): where only torch's composite ops give the
    transform's answer (oneDNN's products and the fused attention kernel have no forward derivative or batching rule).
    False while ``torch.compile`` traces, which cannot ask and handles the transforms it traces itself.

    Args:
        *ts: tensors, or None.
    """
    if torch.compiler.is_compiling():
        return False
    ts = [t for t in ts if t is not None]
    if any(map(is_functorch_wrapped_tensor, ts)):
        return True
    # forward_ad's own test of an open dual level (unpack_dual's), read first: a pass asks this at every product
    return forward_ad._current_level >= 0 and any(forward_ad.unpack_dual(t).tangent is not None for t in ts)


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """``softmax(q k^T / sqrt(hd) + mask) v`` by torch's ``scaled_dot_product_attention``.

    Its fused CPU kernel has no forward-mode derivative and no batching rule: under a ``torch.func`` transform or
    forward-mode AD (:func:`transformed`) torch's math kernel runs it, which has both (the same numbers to rounding).

    Args:
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        v: (B, nh, S_k, hd).
        mask: additive, broadcastable to (B, nh, S_q, S_k), or None.

    Returns:
        (B, nh, S_q, hd).
    """
    with sdpa_kernel(SDPBackend.MATH) if transformed(q, k, v, mask) else nullcontext():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def product_rows(x: Tensor, w: Tensor, b: Tensor | None = None) -> int:
    """The rows a product of ``x`` by ``w`` runs at: ``x``'s own, or more where the kernel pads them.

    oneDNN pads a product's rows to one of a few counts by copying its input; a pass over texts laid end to end adds
    that many zero rows once after the embeddings instead (:class:`~bertfn.model.layout.Segments`' ``pad``).

    Args:
        x: (..., in).
        w: (out, in).
        b: (out,), or None.
    """
    return _products.rows(x, w, b)


def layer_norm(x: Tensor, g: Tensor, b: Tensor, eps: float) -> Tensor:
    """LayerNorm over the last axis (``torch.nn.LayerNorm``; Ba et al. 2016, sec. 3: statistics over one token's
    hidden units).

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

    Raises:
        InputError: ``generator`` is neither None nor a ``torch.Generator`` (a seed, say).
    """
    if generator is None or p == 0.0:
        return x
    if not isinstance(generator, torch.Generator):
        raise InputError(f"generator= turns dropout on and draws its masks: it takes a torch.Generator (e.g. "
                         f"torch.Generator().manual_seed(0)), or None for no dropout; got {type(generator).__name__} "
                         f"{clipped(generator, 40)}")
    if p == 1.0:  # every element dropped: zeros, as torch's (the scale 1 / (1 - p) would make them 0 / 0 = NaN)
        return x * 0.0
    keep = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) >= p
    return x * keep / (1.0 - p)
