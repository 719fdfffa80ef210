"""DeBERTa's disentangled attention and its layer (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", section 3.1; DeBERTa-v2/v3's log buckets and shared keys).

DeBERTa is BERT except, in its layers:

* **relative positions in attention**, no absolute ones: each query i and key j meet at their distance
  ``δ(i, j) = i - j`` (:func:`relative_positions`), put in ``position_buckets`` log buckets far from 0
  (:func:`log_bucket_position`); the table ``rel_embeddings`` (2k, H), k the span (``position_buckets``, else
  ``max_relative_positions``, else ``max_position_embeddings``), shared by every layer and LayerNormed where
  ``norm_rel_ebd`` says "layer_norm" (:func:`relative_embeddings`), gives each distance a key and a query;
* **three score terms** (:func:`disentangled_scores`): content to content ``q_i . k_j``, content to position
  ("c2p") ``q_i . k_r[δ(i,j)]`` and position to content ("p2c") ``k_j . q_r[δ(j,i)]``, the positional keys and
  queries ``k_r = W_k,r r``, ``q_r = W_q,r r`` by ``pos_key_proj``/``pos_query_proj``, or by the content
  projections themselves where ``share_att_key``; ``pos_att_type`` names the two positional terms in use, and
  each term is divided by ``sqrt(hd * (1 + len(pos_att_type)))``;
* **its mask**: a padding query's row is masked too (the 2D mask's outer product with itself), and masked scores
  are *set* to finfo.min (``masked_fill``) rather than shifted by it, so a padding row's probabilities are uniform;
* **names**: ``attention.self.query_proj|key_proj|value_proj|pos_key_proj|pos_query_proj`` (the key table in
  :mod:`bertfn.checkpoint.names.deberta`);
* **a convolution after the first layer** where ``conv_kernel_size`` is set (``ConvLayer``,
  :func:`~bertfn.model.members.deberta_conv.conv_layer`).

The attention output, the feed-forward block and their post-LN residuals are BERT's
(:func:`~bertfn.model.feed_forward.feed_forward`). The layer takes both layouts (:mod:`bertfn.model.layout`) as BERT's
does: on texts laid end to end each text attends to itself from its start and convolves its own slice (traced, on
their padded batch: :mod:`bertfn.model.segment_points`); the positional keys and queries are formed once per layer, at
the table's rows the longest text reaches (:func:`positional_terms`). Trace points are BERT's where the step is the
same (``query`` ... ``v``, ``masked_scores``, ``probs``, ``context``, ``merged``, ``dense``, ``output``) and DeBERTa's
own for its terms: ``scores`` is the content-to-content term as transformers forms it (already divided by the scale),
``c2p_scores`` and ``p2c_scores`` the positional terms (each divided), ``scaled_scores`` their sum.
"""

from __future__ import annotations

import torch

from ..attention import AttentionOutput, attention_output, merge_heads, separate_projections, split_heads
from ..config import BertConfig
from ..encoder import LayerOutput
from ..feed_forward import chunked_feed_forward
from ..functional import dropout, layer_norm, linear
from ..layout import Mask, Segments, with_keys
from ..params import Params
from ..recorder import NO_TRACE, Trace
from ..segment_points import PaddedView, inference_only, on_padded_view, padded_view
from .deberta_conv import conv_layer

Tensor = torch.Tensor


def log_bucket_position(relative_pos: Tensor, bucket_size: int, max_position: int) -> Tensor:
    """Distances put in log buckets: those within ``bucket_size // 2`` kept, the farther ones on a log scale.

    Mirrors ``make_log_bucket_position``: ``sign(δ) * (ceil(log(|δ| / mid) / log((max_position - 1) / mid) *
    (mid - 1)) + mid)`` for ``|δ| > mid``, ``mid = bucket_size // 2``.

    Args:
        relative_pos: (S_q, S_k) integer distances.
        bucket_size: the buckets (``position_buckets``).
        max_position: the longest distance (``max_relative_positions``).

    Returns:
        (S_q, S_k) float buckets.
    """
    mid = bucket_size // 2
    abs_pos = torch.where((relative_pos < mid) & (relative_pos > -mid), torch.tensor(mid - 1).type_as(relative_pos),
                          torch.abs(relative_pos))
    log_pos = torch.ceil(torch.log(abs_pos / mid) / torch.log(torch.tensor((max_position - 1) / mid)) * (mid - 1)) + mid
    return torch.where(abs_pos <= mid, relative_pos.type_as(log_pos), log_pos * torch.sign(relative_pos))


def relative_positions(S: int, config: BertConfig, device: torch.device | None = None) -> Tensor:
    """``δ(i, j) = i - j`` for every query i and key j, bucketed where ``position_buckets`` > 0.

    Mirrors ``build_relative_position`` (queries and keys at 0 .. S-1).

    Args:
        S: the sequence length.
        config: the model's config (``position_buckets``, :func:`max_relative_positions`).
        device: where the tensor goes.

    Returns:
        (S, S) long.
    """
    ids = torch.arange(S, dtype=torch.long, device=device)
    rel = ids[:, None] - ids[None, :]  # (S, S)
    buckets, longest = config.position_buckets, max_relative_positions(config)
    if buckets > 0 and longest > 0:
        rel = log_bucket_position(rel, buckets, longest)
    return rel.to(torch.long)


def farthest(S: int, config: BertConfig) -> int:
    """The largest ``|δ|`` of :func:`relative_positions` (S, S): the farthest bucket S tokens reach, either side.

    Counted on the host over the distances 0 .. S-1 (a bucket is as far either side): a pass reads it without waiting
    for its device, and on the meta device too (:mod:`bertfn.model.dry_run`), whose tensors hold no values.

    Args:
        S: the sequence length.
        config: the model's config (``position_buckets``, :func:`max_relative_positions`).
    """
    d = torch.arange(S, dtype=torch.long)  # (S,)
    buckets, longest = config.position_buckets, max_relative_positions(config)
    return int((log_bucket_position(d, buckets, longest) if buckets > 0 and longest > 0 else d).abs().max())


def max_relative_positions(config: BertConfig) -> int:
    """The longest distance: ``max_relative_positions``, or ``max_position_embeddings`` where it is below 1.

    Args:
        config: the model's config.
    """
    return config.max_relative_positions if config.max_relative_positions >= 1 else config.max_position_embeddings


def span(config: BertConfig) -> int:
    """k, half the rows of ``rel_embeddings``: ``position_buckets`` where > 0, else :func:`max_relative_positions`.

    Args:
        config: the model's config.
    """
    return config.position_buckets if config.position_buckets > 0 else max_relative_positions(config)


def relative_embeddings(p: Params, generator: torch.Generator | None = None) -> Tensor:
    """The distances' table ``rel_embeddings`` (2k, H), LayerNormed where ``norm_rel_ebd`` says "layer_norm".

    Mirrors ``DebertaV2Encoder.get_rel_embedding`` and the attention's ``pos_dropout``.

    Args:
        p: the base model's scope (``bert.``; reads ``encoder.rel_embeddings.weight``, ``encoder.LayerNorm.*``).
        generator: turns dropout on (training).

    Returns:
        (2k, H).
    """
    cfg = p.config
    rel = p["encoder.rel_embeddings.weight"]
    if "layer_norm" in norm_rel_ebd(cfg):
        rel = layer_norm(rel, p["encoder.LayerNorm.weight"], p["encoder.LayerNorm.bias"], cfg.layer_norm_eps)
    return dropout(rel, cfg.hidden_dropout_prob, generator)


def norm_rel_ebd(config: BertConfig) -> list[str]:
    """``norm_rel_ebd``'s parts ("layer_norm|..." split at ``|``), as ``DebertaV2Encoder`` reads it.

    Args:
        config: the model's config.
    """
    return [x.strip() for x in (config.norm_rel_ebd or "none").lower().split("|")]


def scale_factor(config: BertConfig) -> int:
    """1 + the positional terms in use (c2p, p2c): the scores are divided by ``sqrt(hd * scale_factor)``.

    Args:
        config: the model's config.
    """
    return 1 + sum(t in config.pos_att_type for t in ("c2p", "p2c"))


def positional_terms(p: Params, rel: Tensor, rel_pos: Tensor, nh: int) -> dict[str, tuple[Tensor, Tensor]]:
    """One layer's positional keys (c2p) and queries (p2c) at the table's rows ``rel_pos`` reaches; each pair's row.

    The projections of ``DisentangledSelfAttention.disentangled_attention_bias`` (``pos_key_proj``, ``pos_query_proj``,
    or the content ones where ``share_att_key``) at the rows ``[lo, hi)`` that ``c(d) = clamp(d + k, 0, 2k - 1)``
    reaches, c2p's and p2c's alike: at most ``2S - 1`` of the ``2k`` (DeBERTa-v3: 512), for a sentence a few dozen.

    Args:
        p: one attention block's scope (reads ``self.pos_key_proj.*``, ``self.pos_query_proj.*``, or with
            ``share_att_key`` ``self.key.*`` and ``self.query.*``).
        rel: (2k, H) the distances' table (:func:`relative_embeddings`).
        rel_pos: (S, S) the query-key distances (:func:`relative_positions`) of the longest text.
        nh: the layer's heads.

    Returns:
        ``{term: (projection (1, nh, R, hd), rows (S, S) long from lo)}`` for the terms of ``pos_att_type``: c2p's row
        for query i and key j at [i, j], p2c's for key i and query j; a text of n <= S tokens reads their (n, n) corner.
    """
    cfg = p.config
    k2 = span(cfg)
    # the farthest bucket, either side; under torch.compile every row (the count, read off a tensor, would break the
    # graph at each layer: the rows past the reach are computed and never gathered)
    reach = k2 if torch.compiler.is_compiling() else farthest(rel_pos.shape[0], cfg)
    lo, hi = max(k2 - reach, 0), min(k2 + reach, 2 * k2 - 1) + 1
    names = {"c2p": ("self.key" if cfg.share_att_key else "self.pos_key_proj", rel_pos),
             "p2c": ("self.query" if cfg.share_att_key else "self.pos_query_proj", -rel_pos)}
    return {term: (split_heads(linear(rel[None, lo:hi], p[f"{name}.weight"], p[f"{name}.bias"]), nh),  # (1, nh, R, hd)
                   torch.clamp(d + k2, 0, 2 * k2 - 1) - lo)  # (S, S)
            for term, (name, d) in names.items() if term in cfg.pos_att_type}


def disentangled_scores(q: Tensor, k: Tensor, terms: dict[str, tuple[Tensor, Tensor]], scale: Tensor,
                        trace: Trace = NO_TRACE) -> Tensor:
    """The three score terms summed, before the mask (``DisentangledSelfAttention``'s content scores plus its
    ``disentangled_attention_bias``): ``q_i . k_j / scale``, ``c2p[i, j] = q_i . k_r[c(δ(i, j))] / scale`` and
    ``p2c[i, j] = k_j . q_r[c(-δ(i, j))] / scale``, ``c(d) = clamp(d + k, 0, 2k - 1)`` the row of distance d.

    Args:
        q: (B, nh, S, hd).
        k: (B, nh, S, hd).
        terms: :func:`positional_terms` of this layer, for S tokens or more (empty without ``relative_attention``).
        scale: ``sqrt(hd * scale_factor)``, a 0-dim float tensor.
        trace: records (and edits) ``scores`` (the content term), ``c2p_scores``, ``p2c_scores`` and
            ``scaled_scores`` (their sum), each (B, nh, S, S).

    Returns:
        (B, nh, S, S).
    """
    B, nh, S, _ = q.shape
    scores = trace("scores", q @ (k.transpose(-1, -2) / scale.to(q.dtype)))  # (B, nh, S, S): content to content
    bias: Tensor | int = 0
    if "c2p" in terms:
        pos_key, rows = terms["c2p"]  # (1, nh, R, hd), (S', S')
        c2p = q @ pos_key.transpose(-1, -2)  # (B, nh, S, R)
        c2p = torch.gather(c2p, dim=-1, index=rows[:S, :S].expand(B, nh, S, S))  # query i at key j's distance
        bias = bias + trace("c2p_scores", c2p / scale.to(c2p.dtype))
    if "p2c" in terms:
        pos_query, rows = terms["p2c"]
        p2c = k @ pos_query.transpose(-1, -2)  # (B, nh, S_k, R)
        p2c = torch.gather(p2c, dim=-1, index=rows[:S, :S].expand(B, nh, S, S)).transpose(-1, -2)  # (B, nh, S_q, S_k)
        bias = bias + trace("p2c_scores", p2c / scale.to(p2c.dtype))
    return trace("scaled_scores", scores + bias)


def keep_mask(mask: Tensor | None) -> Tensor | None:
    """The additive mask the encoder passes, as DeBERTa's boolean one: a 2D padding mask's outer product with itself
    (a padding query attends to nothing), a fuller mask as given (``DebertaV2Encoder.get_attention_mask``).

    Args:
        mask: additive, (B, 1, 1, S) from a 2D mask or (B, 1 or nh, S, S), or None.

    Returns:
        (B, 1 or nh, S, S) bool, True where query i may read key j; None for no mask.
    """
    if mask is None:
        return None
    keep = mask == 0  # (B, 1, 1, S) or (B, 1|nh, S, S)
    if keep.shape[-2] == 1:
        keep = keep & keep.transpose(-1, -2)  # (B, 1, S, S): both the query and the key real
    return keep


def disentangled_attention(p: Params, x: Tensor, mask: Mask, rel: Tensor | None, *,
                           head_mask: Tensor | None = None, need_probs: bool = False,
                           generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> AttentionOutput:
    """DeBERTa's attention block: its three score terms, softmax, BERT's output dense, residual and LayerNorm.

    Mirrors ``DebertaV2Attention`` (``DisentangledSelfAttention`` + ``DebertaV2SelfOutput``). The probabilities are
    always formed (there is no fused kernel for the positional terms).

    Args:
        p: one layer's ``attention.`` scope.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: the encoder's additive mask (:func:`keep_mask` reads it) or None; or
            :class:`~bertfn.model.layout.Segments`: each text attends to itself, the output at its ``read`` rows.
        rel: (2k, H) the distances' table, or None without ``relative_attention``.
        head_mask: (nh,), 1 keeps a head (multiplies the probabilities, as BERT's).
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) ``query`` ... ``v``, ``scores``, ``c2p_scores``, ``p2c_scores``,
            ``scaled_scores``, ``masked_scores``, ``probs``, ``context``, ``merged``, ``head_outputs`` (when asked),
            ``dense`` and ``output``.

    Returns:
        ``(hidden (B, S, H), probs (B, nh, S, S) or None, (k, v))``; on segments hidden is (1, T + pad or r, H).

    Raises:
        InputError: segments with probabilities or dropout.
    """
    cfg, hd = p.config, p.config.head_dim
    segments = mask if isinstance(mask, Segments) else None
    inference_only(mask, {"probabilities": need_probs, "dropout": generator is not None})
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    names = ("query", "key", "value")
    query, key, value = (trace(n, t) for n, t in zip(names, separate_projections(p, x)))  # (B, S, nh*hd) each
    nh = query.shape[-1] // hd
    q, k, v = (trace(n, split_heads(t, nh)) for n, t in (("q", query), ("k", key), ("v", value)))  # (B, nh, S, hd)

    scale = torch.sqrt(torch.tensor(hd, dtype=torch.float) * scale_factor(cfg))  # sqrt(hd * (1 + terms))
    S = max(segments.lengths) if segments is not None else x.shape[1]  # the longest text's tokens
    terms = positional_terms(p, rel, relative_positions(S, cfg, x.device), nh) if cfg.relative_attention else {}
    view = on_padded_view(mask, trace, head_mask)
    if segments is not None and not view:  # each text as a batch with nothing to pad, its distances from its start
        merged = segments.attend(q, k, v, lambda qi, ki, vi, keys:  # (c, nh, m, hd) each: c texts, their keys' mask
                                 with_keys(disentangled_scores(qi, ki, terms, scale), keys).softmax(-1) @ vi)
        probs = None
    else:  # on segments the texts as a padded batch (b, S): the padded pass's points
        inner = padded_view(segments, q, k, v, trace) if view else PaddedView(q, k, v, mask, trace)  # (b, nh, S, hd)
        scores = disentangled_scores(inner.q, inner.k, terms, scale, inner.trace)  # (B, nh, S, S)
        keep = keep_mask(inner.mask)
        if keep is not None:
            scores = scores.masked_fill(~keep, torch.finfo(q.dtype).min)  # set, not shifted: a padding row is uniform
        scores = inner.trace("masked_scores", scores)
        p_drop = cfg.attention_probs_dropout_prob if generator is not None else 0.0
        probs = dropout(torch.softmax(scores, dim=-1), p_drop, generator)  # (B, nh, S, S)
        if head_mask is not None:
            probs = probs * head_mask.view(-1, 1, 1)
        probs = inner.trace("probs", probs)
        merged = merge_heads(inner.trace("context", probs @ inner.v))  # (B, S, nh*hd)
    if segments is not None:  # on the sequence again, at the positions read
        merged, x = segments.rows(segments.laid(merged) if view else merged, x)  # (1, T + pad or r, ...)
    out = attention_output(p, merged, x, generator, trace)  # BERT's output block (BertSelfOutput)
    return AttentionOutput(out, probs if need_probs else None, (k, v))


def layer(p: Params, x: Tensor, mask: Mask, *, index: int, position_ids: Tensor | None = None,
          head_mask: Tensor | None = None, impl: str = "eager", need_probs: bool = False,
          generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> LayerOutput:
    """One DeBERTa layer (``DebertaV2Layer``): disentangled attention, then BERT's feed-forward; after the first,
    the convolution where the model has one (``DebertaV2Encoder``).

    Args:
        p: ``bert.encoder.layer.{i}.`` scope.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: the encoder's additive mask or None, or :class:`~bertfn.model.layout.Segments` (``read``: those rows).
        index: the layer's index (the convolution follows layer 0).
        position_ids: unused: the layer reads the distances 0 .. S-1 apart, as transformers' (``position_biased_input``
            models read absolute positions in the embeddings).
        head_mask: (nh,), 1 keeps a head.
        impl: accepted; the eager path always runs.
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) ``attention.*``, ``ffn.*``, ``conv`` (layer 0 of a model with the convolution) and
            ``output``.

    Returns:
        :class:`~bertfn.model.encoder.LayerOutput`.
    """
    cfg, trace = p.config, trace.on(mask)  # on segments: each point in the padded layout's shape
    base = p.at(p.prefix.split("encoder.layer.")[0])  # the base model's scope, "bert."
    rel = relative_embeddings(base, generator) if cfg.relative_attention else None  # (2k, H)
    conv = index == 0 and cfg.conv_kernel_size > 0
    layout = mask.reading(False) if conv and isinstance(mask, Segments) else mask  # the convolution reads every row
    a = disentangled_attention(p.scope("attention"), x, layout, rel, head_mask=head_mask, need_probs=need_probs,
                               generator=generator, trace=trace.scope("attention"))
    h = chunked_feed_forward(p, a.hidden, cfg.chunk_size_feed_forward, generator, trace.scope("ffn"))
    if conv:
        h = conv_layer(base, x, h, layout, generator, trace)
        h = mask.rows(h)[0] if isinstance(mask, Segments) else h  # the rows read, where this layer is the last
    return LayerOutput(trace("output", h), a.probs, None, a.kv, None)

