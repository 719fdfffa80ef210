"""The feed-forward block of a layer (``BertIntermediate`` then ``BertOutput``), whole or in slices of positions.

    h' = LayerNorm(a + W_2 act(W_1 a + b_1) + b_2),  a = the attention block's output

Keys read per layer (under ``bert.encoder.layer.{i}.``): ``intermediate.dense.weight`` (I, H) and ``.bias``,
``output.dense.weight`` (H, I) and ``.bias``, ``output.LayerNorm.weight|bias`` (H,).
"""

from __future__ import annotations

import torch

from .functional import dropout, layer_norm, linear
from .params import Params, scoped
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


def feed_forward(p: Params, x: Tensor, generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> Tensor:
    """Position-wise FFN with residual + LayerNorm (``BertIntermediate`` then ``BertOutput``).

    ``h' = LayerNorm(a + W_2 act(W_1 a + b_1) + b_2)``. The hidden width I = ``config.intermediate_size``
    (4H in BERT).

    Args:
        p: one layer's scope (reads ``intermediate.dense.*`` and ``output.*``), e.g. ``model.params.layer(0)``.
        x: (B, S, H), the attention block's output.
        generator: turns dropout on (training).
        trace: records (and edits) ``intermediate``, ``dense`` and ``output``.

    Returns:
        (B, S, H).
    """
    p = scoped(p, "feed_forward()", "model.params.layer(0)")
    cfg = p.config
    h = linear(x, p["intermediate.dense.weight"], p["intermediate.dense.bias"], cfg.hidden_act)  # act(x W_1^T + b_1): (B, S, I)
    h = trace("intermediate", h)
    h = linear(h, p["output.dense.weight"], p["output.dense.bias"])  # (B, S, H)
    h = dropout(h, cfg.feed_forward_dropout, generator)
    h = trace("dense", h)
    h = layer_norm(h + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], cfg.layer_norm_eps)
    return trace("output", h)


def chunked_feed_forward(p: Params, x: Tensor, chunk_size: int, generator: torch.Generator | None = None,
                         trace: Trace = NO_TRACE) -> Tensor:
    """:func:`feed_forward` over slices of ``chunk_size`` positions (HF ``apply_chunking_to_forward``).

    The FFN treats each position alone, so slicing the sequence gives the same result while only
    one slice's (chunk, I) intermediate is alive at a time.

    Args:
        p: one layer's scope.
        x: (B, S, H), or (1, T + pad, H) on segments.
        chunk_size: positions per slice; 0 means one slice.
        generator: turns dropout on (training).
        trace: records slice n under ``chunk.{n}.`` (e.g. ``ffn.chunk.0.intermediate``); on segments, the slices of the
            texts' padded batch (its points' shapes, :meth:`~bertfn.model.layout.Segments.padded`).

    Returns:
        (B, S, H).
    """
    if trace.layout is not None and 0 < chunk_size:  # traced on segments: the chunks the padded batch (b, S) has
        return trace.layout.laid(chunked_feed_forward(p, trace.layout.padded(x), chunk_size, generator, trace.on(None)),
                                 like=x)  # (1, T + pad, H)
    if chunk_size <= 0 or chunk_size >= x.shape[1]:
        return feed_forward(p, x, generator, trace)
    parts = x.split(chunk_size, dim=1)  # ceil(S / chunk_size) of (B, <=chunk_size, H)
    return torch.cat([feed_forward(p, part, generator, trace.scope(f"chunk.{n}")) for n, part in enumerate(parts)],
                     dim=1)
