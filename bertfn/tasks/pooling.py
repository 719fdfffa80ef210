"""From token vectors to a text's vector: sentence-transformers' Pooling, Dense and Normalize modules as functions.

    pool:       (B, S, H) token vectors, (B, S) mask  ->  (B, k H), the k modes concatenated   (``Pooling.forward``)
    dense:      y = activation(x W^T + b)                                                    (``Dense.forward``)
    normalize:  y = x / ||x||_2                                                              (``Normalize.forward``)

The modes (``Pooling._forward_padded`` of sentence-transformers 5.x), over the tokens whose mask is 1:

    cls                   the first of them (the [CLS] token's, or the first after a left-out prompt)
    max                   the largest value of each dimension
    mean                  sum / n
    mean_sqrt_len_tokens  sum / sqrt(n)
    weightedmean          sum_t t h_t / sum_t t, t = 1, 2, ... the token's position (later tokens weigh more)
    lasttoken             the last of them

A prompt left out of the pooling (``include_prompt`` false) has its tokens' mask set to 0 first, [CLS] included
(:func:`exclude_prompt`). :func:`bertfn.embed` runs these on what a folder lists
(:class:`~bertfn.checkpoint.sentence_folder.SentenceFolder`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..checkpoint.sentence_folder import NORMALIZE, POOLINGS, Dense

Tensor = torch.Tensor

ACTIVATION = {"tanh": torch.tanh, "identity": lambda x: x, "relu": torch.relu, "gelu": F.gelu, "sigmoid": torch.sigmoid,
              "silu": F.silu}
"""Each of :data:`~bertfn.checkpoint.sentence_folder.ACTIVATIONS` as a function (``gelu``: exact erf, as ``nn.GELU()``)."""


def exclude_prompt(mask: Tensor, prompt_length: int) -> Tensor:
    """The mask with each text's first ``prompt_length`` tokens set to 0 (``Pooling._exclude_prompt_from_mask``, right
    padding): [CLS] and the prompt's tokens are left out of the pooling.

    Args:
        mask: (B, S) 1 for real tokens, 0 for padding.
        prompt_length: the prompt's tokens with [CLS], without its closing [SEP].

    Returns:
        (B, S), a copy.
    """
    mask = mask.clone()
    mask[:, :prompt_length] = 0
    return mask


def pool(h: Tensor, mask: Tensor, modes: str | tuple[str, ...]) -> Tensor:
    """One vector per row from the token vectors whose mask is 1 (sentence-transformers' ``Pooling``).

    Args:
        h: (B, S, H) last hidden states.
        mask: (B, S) 1 for the tokens pooled, 0 for padding (and a left-out prompt).
        modes: one of :data:`~bertfn.checkpoint.sentence_folder.POOLINGS` or several (the module docstring).

    Returns:
        (B, k H): the k modes' vectors side by side, in the order given.
    """
    modes = (modes,) if isinstance(modes, str) else tuple(modes)
    keep = mask[:, :, None].to(h.dtype)  # (B, S, 1)
    out = []
    for mode in modes:
        if mode == "cls":  # the first pooled token
            first = mask.to(torch.int).argmax(dim=1)  # (B,)
            out.append(h[torch.arange(len(h), device=h.device), first])  # (B, H)
        elif mode == "max":
            out.append(h.masked_fill(keep == 0, float("-inf")).amax(dim=1))  # (B, H)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            total, n = (h * keep).sum(dim=1), keep.sum(dim=1).clamp(min=1e-9)  # (B, H), (B, 1)
            out.append(total / n if mode == "mean" else total / n.sqrt())  # (B, H)
        elif mode == "weightedmean":
            w = keep * torch.arange(1, h.shape[1] + 1, device=h.device, dtype=h.dtype)[None, :, None]  # (B, S, 1)
            out.append((h * w).sum(dim=1) / w.sum(dim=1).clamp(min=1e-9))  # (B, H)
        elif mode == "lasttoken":
            last = h.shape[1] - 1 - mask.flip(1).to(torch.int).argmax(dim=1)  # (B,) the last pooled token
            out.append((h * keep)[torch.arange(len(h), device=h.device), last])  # (B, H)
        else:
            raise ValueError(f"unknown pooling mode {mode!r}: one of {POOLINGS}")
    return torch.cat(out, dim=-1)  # (B, k H)


def dense(x: Tensor, layer: Dense) -> Tensor:
    """A Dense module: ``activation(x W^T + b)``.

    Args:
        x: (B, in_features).
        layer: its weights and activation.

    Returns:
        (B, out_features).
    """
    w = layer.weight.to(x.device, x.dtype)  # (out, in)
    b = layer.bias.to(x.device, x.dtype) if layer.bias is not None else None  # (out,)
    return ACTIVATION[layer.activation](F.linear(x, w, b))


def after_pooling(x: Tensor, modules: tuple[Dense | str, ...]) -> Tensor:
    """The modules a folder lists after its Pooling, in order: :func:`dense` and Normalize.

    Args:
        x: (B, D) pooled vectors.
        modules: :class:`~bertfn.checkpoint.sentence_folder.Dense` layers and
            :data:`~bertfn.checkpoint.sentence_folder.NORMALIZE`.

    Returns:
        (B, D'), D' the last Dense's out_features (else D).
    """
    for module in modules:
        x = F.normalize(x, p=2.0, dim=1) if module == NORMALIZE else dense(x, module)
    return x
