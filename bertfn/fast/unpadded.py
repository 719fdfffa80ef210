"""BERT over several texts laid end to end, with no padding anywhere: the fast path of fill_mask.

A padded batch (B, S) spends its matrix products on padding tokens; one long sequence with a
block-diagonal mask instead spends attention on pairs of tokens from different texts. Here the
texts' tokens form one sequence (1, T, H), T = the sum of their lengths, for everything that treats
tokens one at a time (embeddings, the Q/K/V and output projections, the feed-forward, LayerNorm),
so the products run on T real rows; attention alone runs on each text's slice, as if the text
were by itself. ESM-2 and ModernBERT, whose layer is not BERT's, take the same layout in :mod:`bertfn.fast.prenorm`,
DeBERTa in :mod:`bertfn.fast.disentangled`; :func:`~bertfn.fast.encoders.unpadded_encoder` picks the one a model needs.

Built from the reference functions (``embeddings``, ``split_heads``, ``sdpa_attention``, ``layer_norm``,
...) in the same order, except that heads are merged text by text straight into the (1, T, H)
layout, and the products run on the kernels :mod:`bertfn.fast.choice` picks for this machine (there the
query, key and value products may run as one, :func:`~bertfn.fast.choice.linears`, and the feed-forward's
activation inside its first product), so each text's hidden states equal the reference encoder's on that text (tests/test_fast_path.py). Inference only: no
dropout, cache, cross-attention, head mask or trace.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..model.attention import (
    causal_keep_mask,
    extended_mask,
    relative_position_scores,
    sdpa_attention,
    split_heads,
)
from ..model.embeddings import embeddings
from ..model.family import family_of
from ..model.functional import layer_norm
from ..model.heads import head_act
from ..model.params import Params
from .choice import linear, linears, run_rows

Tensor = torch.Tensor


def unpadded_attention(p: Params, x: Tensor, lengths: list[int], rows: Tensor | None = None,
                       added: Callable[[int], Tensor] | None = None) -> Tensor:
    """:func:`~bertfn.model.attention.attention` (SDPA path) for texts laid end to end: each attends to itself only.

    Relative positions count from each text's start; a decoder's texts see only their earlier tokens.

    Args:
        p: one layer's ``attention.`` scope.
        x: (1, T, H), the texts one after another, T = sum(lengths), then any padding rows
            (:func:`unpadded_encoder`), which attend to nothing: their context is zero.
        lengths: the texts' lengths.
        rows: (r,) positions whose output is wanted (default: all T); every position is still attended
            to, but the output projection and LayerNorm run at these alone.
        added: ``n -> (1, nh, n, n)``, scores added to a text's scaled scores (a member's ``attention_bias``: MPNet's
            relative position bias), or None.

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    cfg = p.config
    hd = cfg.head_dim
    nh = p["self.query.weight"].shape[0] // hd  # fewer than config heads if this layer was pruned
    qkv = linears(x, tuple(p[f"self.{n}.weight"] for n in ("query", "key", "value")),
                  tuple(p[f"self.{n}.bias"] for n in ("query", "key", "value")))  # 3 x (1, T, nh*hd), one product where it can be
    q, k, v = (split_heads(t, nh) for t in qkv)  # each (1, nh, T, hd)

    pad = x.shape[1] - sum(lengths)  # padding rows after the texts
    if len(lengths) == 1 and not pad:  # a single text: no slices to take or join (10-15 us a layer at a sentence's rows)
        texts = [(q, k, v)]
    else:
        spans = lengths + [pad] if pad else lengths
        texts = list(zip(q.split(spans, dim=2), k.split(spans, dim=2), v.split(spans, dim=2)))[:len(lengths)]
    contexts = []  # each text's (1, n, nh, hd), merged into (1, T, nh*hd) by one copy
    for qi, ki, vi in texts:
        n = qi.shape[2]  # this text's (1, nh, n, hd) slice
        bias = None
        if cfg.relative_positions:
            bias = relative_position_scores(qi, ki, p["self.distance_embedding.weight"], cfg.position_embedding_type, 0)
        mask = added(n) if added is not None else None  # (1, nh, n, n), after the scaling as the mask is
        if cfg.is_decoder:
            mask = extended_mask(causal_keep_mask(torch.ones(1, n, device=x.device), n), x.dtype)  # (1, 1, n, n)
        contexts.append(sdpa_attention(qi, ki, vi, mask, bias).transpose(1, 2))  # (1, n, nh, hd)
    if pad:
        contexts.append(q.new_zeros(1, pad, nh, hd))  # the padding rows' context
    merged = torch.cat(contexts, dim=1) if len(contexts) > 1 else contexts[0]  # (1, T, nh, hd)
    merged = merged.flatten(2)  # (1, T, nh*hd), as merge_heads of the whole
    if rows is not None:
        merged, x = merged[:, rows], x[:, rows]  # (1, r, nh*hd), (1, r, H): the wanted positions only

    out = linear(merged, p["output.dense.weight"], p["output.dense.bias"])  # (1, T, H)
    return layer_norm(out + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], cfg.layer_norm_eps)


def unpadded_feed_forward(p: Params, x: Tensor) -> Tensor:
    """:func:`~bertfn.model.encoder.feed_forward` on the fast path's kernels.

    Args:
        p: one layer's scope.
        x: (1, T, H).

    Returns:
        (1, T, H).
    """
    h = linear(x, p["intermediate.dense.weight"], p["intermediate.dense.bias"], p.config.hidden_act)  # (1, T, I)
    h = linear(h, p["output.dense.weight"], p["output.dense.bias"])  # (1, T, H)
    return layer_norm(h + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], p.config.layer_norm_eps)


def unpadded_bert_encoder(params: Params, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor,
                     lengths: list[int], rows: Tensor | None = None) -> Tensor:
    """The last hidden states of :func:`~bertfn.model.encoder.encoder` with BERT's layer (MPNet's attention bias
    included) for texts laid end to end.

    Each text must fit the model's positions, and so must T with relative positions (the embeddings check).

    Where the products run on oneDNN, which pads their rows to one of a few counts by copying its
    input (:func:`~bertfn.fast.kernels.padded_rows`), zero rows up to that count are added once after
    the embeddings instead (:func:`~bertfn.fast.choice.run_rows`): they attend to nothing, no text
    attends to them, and they are dropped at the end. In bf16 on an AMD EPYC, scoring's groups of up
    to 2048 rows ran 9-11% faster this way than with a copy of every product's input.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        token_type_ids: (1, T).
        position_ids: (1, T), restarting at 0 for each text.
        lengths: the texts' lengths, summing to T.
        rows: (r,) the positions the caller reads (fill_mask: the masks; scoring: one per copy). Then the
            last layer's attention output and feed-forward run at those alone (its keys and values still
            at all T), which spares most of that layer.

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    cfg = params.config
    family = family_of(cfg)
    p = params.scope("bert")
    x = (family.embeddings or embeddings)(p.scope("embeddings"), input_ids, token_type_ids, position_ids)  # (1, T, H)
    T = x.shape[1]
    pad = run_rows(x, p["encoder.layer.0.attention.self.query.weight"], p["encoder.layer.0.attention.self.query.bias"]) - T
    if pad:
        x = torch.cat([x, x.new_zeros(1, pad, x.shape[2])], dim=1)  # (1, T + pad, H)
    last = cfg.num_hidden_layers - 1
    for i in range(cfg.num_hidden_layers):
        layer = p.scope(f"encoder.layer.{i}")
        added = None if family.attention_bias is None else functools.partial(family.attention_bias, layer)  # MPNet's bias
        x = unpadded_attention(layer.scope("attention"), x, lengths, rows if i == last else None, added)  # (1, T + pad or r, H)
        x = unpadded_feed_forward(layer, x)  # (1, T + pad or r, H)
    return x if rows is not None else x[:, :T]  # (1, r or T, H)


def fast_mlm_head(params: Params, h: Tensor) -> Tensor:
    """:func:`~bertfn.model.heads.mlm_head` on the fast path's kernels (its decoder is most of the head's cost).

    Args:
        params: the root view of a loaded model.
        h: (..., H) hidden states at the positions read.

    Returns:
        (..., V) logits.
    """
    cfg = params.config
    p = params.scope("cls.predictions")
    t = linear(h, p["transform.dense.weight"], p.get("transform.dense.bias"), head_act(cfg))  # (..., H)
    t = layer_norm(t, p["transform.LayerNorm.weight"], p.get("transform.LayerNorm.bias"), cfg.layer_norm_eps)
    return linear(t, p["decoder.weight"], p.get("bias"))  # (..., V)
