"""DeBERTa-v2's convolution after its first layer (``ConvLayer``), on either layout.

Where ``conv_kernel_size`` is set, the first layer's output h gets ``LN(h + act(conv(e)))``, e that layer's input,
at the real tokens (:func:`conv_layer`); :mod:`bertfn.model.members.deberta_attention`'s ``layer`` runs it.
"""

from __future__ import annotations

import torch

from ..functional import ACTIVATIONS, dropout, layer_norm
from ..layout import Mask, Segments
from ..params import Params
from ..recorder import NO_TRACE, Trace

Tensor = torch.Tensor


def input_mask(mask: Tensor | None, x: Tensor) -> Tensor:
    """The 0/1 padding mask (B, S) behind the encoder's additive one (``DebertaV2Encoder``'s ``input_mask``).

    Args:
        mask: additive, (B, 1, 1, S) or (B, 1|nh, S, S), or None.
        x: (B, S, H), for the shape where there is no mask.

    Returns:
        (B, S) in x's dtype.
    """
    if mask is None:
        return torch.ones(x.shape[:2], dtype=x.dtype, device=x.device)
    keep = mask == 0  # (B, 1, 1, S) or (B, 1|nh, S, S)
    return (keep[:, 0, 0] if keep.shape[-2] == 1 else keep[:, 0].sum(-2) > 0).to(x.dtype)  # (B, S)


def conv_layer(p: Params, embedded: Tensor, h: Tensor, mask: Mask, generator: torch.Generator | None = None,
               trace: Trace = NO_TRACE) -> Tensor:
    """DeBERTa-v2's convolution after the first layer: ``LN(h + act(conv(e)))`` at the real tokens, 0 at padding.

    Mirrors ``ConvLayer`` (a 1D convolution over the positions of the layer's *input* e, kernel
    ``conv_kernel_size``, ``conv_groups`` groups, same padding; ``conv_act``, default tanh).

    Args:
        p: the base model's scope (reads ``encoder.conv.conv.*`` and ``encoder.conv.LayerNorm.*``).
        embedded: (B, S, H) the first layer's input, or (1, T + pad, H) on the segments layout.
        h: (B, S, H) the first layer's output, or (1, T + pad, H).
        mask: the encoder's additive mask (:func:`input_mask` reads the real tokens) or None; or
            :class:`~bertfn.model.layout.Segments`: each text's convolution on its slice, padded at its own ends
            (traced: on the texts' padded batch, ``conv`` the padded pass's).
        generator: turns dropout on (training).
        trace: records (and edits) ``conv``, the convolution's activated output.

    Returns:
        (B, S, H), or (1, T + pad, H) on segments (the padding rows as ``h`` has them: nothing reads them).
    """
    if isinstance(mask, Segments) and trace:  # the texts as a padded batch (b, S, H), zeros at the padding as there
        padded = mask.padded(embedded), mask.padded(h), mask.padding_mask(h.dtype, h.device)
        return mask.laid(conv_layer(p, *padded, generator, trace.on(None)), like=h)  # (1, T + pad, H)
    if isinstance(mask, Segments):  # each text as a batch of one with nothing to pad
        spans = [*mask.lengths, mask.pad]
        texts = zip(embedded.split(spans, dim=1), h.split(spans, dim=1), mask.lengths)  # each (1, n, H)
        return torch.cat([*(conv_layer(p, e, o, None) for e, o, _ in texts), h[:, mask.tokens:]], dim=1)
    cfg = p.config
    real = input_mask(mask, embedded)  # (B, S)
    w = p["encoder.conv.conv.weight"]  # (H, H / groups, kernel)
    kernel = w.shape[-1]
    out = torch.nn.functional.conv1d(embedded.permute(0, 2, 1), w, p["encoder.conv.conv.bias"],
                                     padding=(kernel - 1) // 2, groups=cfg.conv_groups).permute(0, 2, 1)  # (B, S, H)
    out = out.masked_fill(~real.bool()[..., None], 0)
    out = trace("conv", ACTIVATIONS[cfg.conv_act](dropout(out, cfg.hidden_dropout_prob, generator)))
    out = layer_norm(h + out, p["encoder.conv.LayerNorm.weight"], p["encoder.conv.LayerNorm.bias"], cfg.layer_norm_eps)
    return out * real[..., None]
