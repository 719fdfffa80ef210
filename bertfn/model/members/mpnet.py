"""MPNet (Song et al. 2020): BERT pretrained by masked and permuted language modeling, with a relative position bias.

MPNet is BERT except:

* **no token types**: its embeddings are word + position, then LayerNorm (:func:`embeddings`), and its positions are
  RoBERTa's, counted from ``padding_idx + 1`` over the real tokens (``padding_idx`` is 1 whatever the config says,
  as ``MPNetEmbeddings`` has it: :func:`~bertfn.model.members.roberta.count_positions`);
* **a relative position bias** (:func:`position_bias`): one table ``mpnet.encoder.relative_attention_bias``
  (buckets, nh), shared by every layer, gives each head a score for each query-key offset, T5's log-spaced
  buckets (:func:`relative_buckets`: bidirectional, 32 buckets, exact up to 8 tokens either side, log-spaced to 128);
  every layer adds it to its scaled scores (:func:`attention`: ``softmax(q k^T / sqrt(hd) + bias + M)``, where BERT's
  relative positions add theirs before the scaling). The offsets are those of the padded batch (``arange(S)``, as
  ``MPNetEncoder.compute_position_bias``); a key's offset from a query is the same wherever padding puts the text,
  so a left-padded text gets the bias it gets alone;
* **names**: ``mpnet.*``; the attention block is ``attention.attn.q|k|v|o`` and ``attention.LayerNorm``; the MLM head
  is RoBERTa's ``lm_head.*``, its activation exact GELU (:mod:`bertfn.checkpoint.names.mpnet`);
* **its sequence classifier** is RoBERTa's (``classifier.dense``, tanh, ``classifier.out_proj`` on ``<s>``); its
  tagger, reader and multiple-choice head (on the pooler) are BERT's.

Its tokenizer (WordPiece, lowercased, with ``<s>`` 0, ``<pad>`` 1, ``</s>`` 2, ``<unk>`` 3 and ``<mask>`` (30526) and the
template ``<s> A </s></s> B </s>``) is the tokenizer's business. The layer is BERT's post-LN layer (the feed-forward is
BERT's own, :func:`~bertfn.model.feed_forward.chunked_feed_forward`); only its attention is MPNet's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..attention import attention_output, chosen_impl, merge_heads, separate_projections, split_heads
from ..config import BertConfig
from ..embeddings import check_ids, word_vectors
from ..encoder import LayerOutput
from ..family import Family, register
from ..feed_forward import chunked_feed_forward
from ..functional import dropout, fused_attention, layer_norm
from ..layout import Mask, Segments, with_keys
from ..params import Params, scoped
from ..recorder import NO_TRACE, WEIGHT_POINTS, Trace
from ..segment_points import inference_only, on_padded_view, padded_view
from .roberta import CLASSIFIER, count_positions

Tensor = torch.Tensor

PADDING_IDX = 1
"""The padding row of MPNet's word and position embeddings (``MPNetEmbeddings.padding_idx``, fixed at 1)."""

BUCKETS = 32
"""The buckets :func:`relative_buckets` sorts offsets into: ``compute_position_bias``'s default, which
``MPNetEncoder`` never overrides (the table has ``relative_attention_num_buckets`` rows, 32 in every MPNet)."""

MAX_DISTANCE = 128
"""The offset from which every offset shares the last bucket of its direction."""


@dataclass(frozen=True)
class MPNetConfig(BertConfig):
    """``transformers.MPNetConfig``: BertConfig with MPNet's vocabulary, special ids and bias buckets.

    Attributes:
        vocab_size: 30527.
        type_vocab_size: 1: no token-type table; the field only keeps BertConfig's checks whole.
        pad_token_id: 1.
        bos_token_id: ``<s>``, 0.
        eos_token_id: ``</s>``, 2.
        relative_attention_num_buckets: the rows of the relative attention bias table (32).
        model_type: "mpnet".
    """

    vocab_size: int = 30527
    type_vocab_size: int = 1
    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    relative_attention_num_buckets: int = 32
    model_type: str = "mpnet"

    @property
    def head_dropout(self) -> float:
        """``MPNetClassificationHead``'s dropout: ``hidden_dropout_prob`` (it never reads ``classifier_dropout``)."""
        return self.hidden_dropout_prob


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | None = None) -> Tensor:
    """Word + position embeddings, LayerNorm, dropout (``MPNetEmbeddings``): BERT's without token types, at RoBERTa's
    positions.

    Args:
        p: ``bert.embeddings.`` scope (read as ``mpnet.embeddings.``).
        input_ids: (B, S).
        token_type_ids: accepted and ignored (MPNet has none).
        position_ids: (B, S); default counted from the ids (``PADDING_IDX + 1``, ... over the real tokens), or
            ``PADDING_IDX + 1 ..`` for ``inputs_embeds``.
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        past_length: the cached positions before these.
        generator: turns dropout on (training).
        trace: records (and edits) ``word``, ``position``, ``sum`` and ``output``.
        attention_mask: accepted and ignored.

    Returns:
        (B, S, H).
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    cfg = p.config
    words = trace("word", word_vectors(p, input_ids, inputs_embeds))  # (B, S, H)
    B, S = words.shape[:2]
    if position_ids is None and isinstance(input_ids, Tensor):
        position_ids = count_positions(input_ids, PADDING_IDX, past_length)  # (B, S)
    elif position_ids is None:
        position_ids = torch.arange(PADDING_IDX + 1, PADDING_IDX + 1 + S, device=words.device).expand(B, S)
    check_ids("position_ids", position_ids, cfg.max_position_embeddings,
              f"this model has {cfg.max_position_embeddings} positions; shorten the input", (B, S))
    positions = F.embedding(position_ids, p["position_embeddings.weight"], padding_idx=PADDING_IDX)  # no grad to row 1
    positions = trace("position", positions)  # (B, S, H)
    x = trace("sum", words + positions)
    x = layer_norm(x, p["LayerNorm.weight"], p["LayerNorm.bias"], cfg.layer_norm_eps)
    return trace("output", dropout(x, cfg.hidden_dropout_prob, generator))


def relative_buckets(offset: Tensor, buckets: int = BUCKETS, max_distance: int = MAX_DISTANCE) -> Tensor:
    """Each key-minus-query offset's bucket (``MPNetEncoder.relative_position_bucket``, T5's bidirectional buckets).

    Half the buckets hold keys before the query, half keys after it; in each half the first ``buckets / 4`` offsets
    get a bucket each and the rest share log-spaced buckets up to ``max_distance``, beyond which all share the last.

    Args:
        offset: (S_q, S_k) key position minus query position.
        buckets: the buckets of both directions together.
        max_distance: the offset from which all share their direction's last bucket.

    Returns:
        (S_q, S_k) bucket ids, 0 .. buckets - 1.
    """
    n = -offset
    half = buckets // 2
    out = (n < 0).to(torch.long) * half  # keys after the query: the upper half
    n = torch.abs(n)
    exact = half // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, half - 1))
    return out + torch.where(n < exact, n, large)


def position_bias(table: Tensor, seq: int) -> Tensor:
    """The scores every layer adds for each head and offset (``MPNetEncoder.compute_position_bias``).

    Args:
        table: (buckets, nh), ``encoder.relative_attention_bias.weight``.
        seq: S, the (padded) sequence's length: query i and key j sit at i and j.

    Returns:
        (1, nh, S, S).
    """
    pos = torch.arange(seq, device=table.device)
    bucket = relative_buckets(pos[None, :] - pos[:, None])  # (S, S): key j - query i
    return table[bucket].permute(2, 0, 1)[None]  # (S, S, nh) -> (1, nh, S, S)


def layer_bias(p: Params, seq: int) -> Tensor:
    """:func:`position_bias` from a layer's scope.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope: its ``attention.relative_attention_bias.weight`` is the one shared table.
        seq: S.

    Returns:
        (1, nh, S, S).
    """
    return position_bias(p["attention.relative_attention_bias.weight"], seq)


def attention(p: Params, x: Tensor, mask: Mask, bias: Tensor, *, head_mask: Tensor | None = None,
              impl: str = "eager", need_probs: bool = False, generator: torch.Generator | None = None,
              trace: Trace = NO_TRACE) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor]]:
    """One MPNet attention block (``MPNetAttention``): BERT's, with the position bias added to the scaled scores.

    ``LayerNorm(x + Concat_h softmax(q_h k_h^T / sqrt(hd) + bias_h + M) V_h W_O)``.

    Args:
        p: one layer's ``attention.`` scope (BERT's names; ``attention.attn.q|k|v|o`` in the checkpoint).
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: additive, broadcastable to (B, nh, S, S), or None; or :class:`~bertfn.model.layout.Segments` (each text
            attends to itself, its bias the top-left (n, n) of ``bias``; traced or head-masked, on the texts' padded
            view: :mod:`bertfn.model.segment_points`).
        bias: (B or 1, nh, S, S), :func:`position_bias` (on segments, of the longest text's length, B the texts).
        head_mask: (nh,), 1 keeps a head (runs the eager path).
        impl: "eager" or "sdpa" (fused; the bias and the mask are its additive mask); eager runs wherever the
            probabilities are needed.
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) ``query`` ... ``v``, ``scores``, ``scaled_scores``, ``masked_scores``, ``probs``
            (eager path), ``context``, ``merged``, ``head_outputs`` (when asked), ``dense``, ``output``.

    Returns:
        ``(hidden (B, S, H), probs (B, nh, S, S) or None, (k, v))``.
    """
    cfg = p.config
    hd = cfg.head_dim
    inference_only(mask, {"probabilities": need_probs, "dropout": generator is not None})
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    names = ("query", "key", "value")
    query, key, value = (trace(n, t) for n, t in zip(names, separate_projections(p, x)))  # (B, S, nh*hd) each
    nh = query.shape[-1] // hd
    q, k, v = (trace(n, split_heads(t, nh)) for n, t in (("q", query), ("k", key), ("v", value)))  # (B, nh, S, hd)

    p_drop = cfg.attention_probs_dropout_prob if generator is not None else 0.0
    need_probs = need_probs or trace.edits_any(WEIGHT_POINTS)
    segments, outer, kv = (mask if isinstance(mask, Segments) else None), trace, (k, v)
    view = on_padded_view(mask, trace, head_mask)
    if view:  # the texts as a padded batch (b, S): the padded pass's points
        q, k, v, mask, trace = padded_view(segments, q, k, v, trace)  # (b, nh, S, hd) each; mask (b, 1, 1, S)
        need_probs = need_probs or trace.keep
    if isinstance(mask, Segments):  # each text attends to itself, its bias counted from its start
        def one(qi: Tensor, ki: Tensor, vi: Tensor, keys: Tensor | None) -> Tensor:  # (c, nh, m, hd): c texts
            m = qi.shape[2]
            return F.scaled_dot_product_attention(qi, ki, vi, attn_mask=with_keys(bias[:1, :, :m, :m], keys))
        merged = mask.attend(q, k, v, one)  # (1, T + pad, nh*hd)
        probs = None
    elif chosen_impl(impl, need_probs, head_mask, p_drop) == "eager":
        scores = trace("scores", q @ k.transpose(-1, -2))  # (B, nh, S, S)
        scores = trace("scaled_scores", scores / math.sqrt(hd))
        scores = scores + bias
        if mask is not None:
            scores = (scores + mask).clamp(min=torch.finfo(scores.dtype).min)  # as BERT's eager_attention
        scores = trace("masked_scores", scores)
        probs = dropout(torch.softmax(scores, dim=-1), p_drop, generator)  # (B, nh, S, S)
        if head_mask is not None:
            probs = probs * (head_mask.view(-1, 1, 1) if head_mask.dim() == 1 else head_mask)
        probs = trace("probs", probs)
        context = probs @ v  # (B, nh, S, hd)
    else:
        full = bias if mask is None else (bias + mask).clamp(min=torch.finfo(q.dtype).min)
        context, probs = fused_attention(q, k, v, full), None
    if not isinstance(mask, Segments):
        merged = merge_heads(trace("context", context))  # (B, S, nh*hd)
    if segments is not None:  # on the sequence again, at the positions read
        merged, x = segments.rows(segments.laid(merged) if view else merged, x)  # (1, T + pad or r, ...)
        trace, probs = outer, None
    out = attention_output(p, merged, x, generator, trace)  # BERT's output block (BertSelfOutput)
    return out, probs, kv


def layer(p: Params, x: Tensor, mask: Mask, *, index: int, position_ids: Tensor | None = None,
          head_mask: Tensor | None = None, impl: str = "eager", need_probs: bool = False,
          generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> LayerOutput:
    """One MPNet layer (``MPNetLayer``): :func:`attention` with the shared position bias, then BERT's feed-forward.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope (its ``attention.relative_attention_bias.weight`` is the one shared table).
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: additive padding mask, or None; or :class:`~bertfn.model.layout.Segments`.
        index: the layer's index (unused: every layer is alike).
        position_ids: accepted and ignored (the bias reads the padded batch's offsets).
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) ``attention.position_bias`` (B, nh, S, S), the attention block's points,
            ``ffn.*`` and ``output`` (on segments in the padded layout's shapes, :mod:`bertfn.model.segment_points`).

    Returns:
        :class:`~bertfn.model.encoder.LayerOutput`.
    """
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    B, S = (len(mask.lengths), max(mask.lengths)) if isinstance(mask, Segments) else x.shape[:2]  # on segments: the
    # texts as a padded batch
    bias = layer_bias(p, S).to(x.dtype)  # (1, nh, S, S)
    bias = trace.on(None)("attention.position_bias", bias.expand(B, -1, -1, -1))  # (B, nh, S, S)
    h, probs, kv = attention(p.scope("attention"), x, mask, bias, head_mask=head_mask, impl=impl,
                             need_probs=need_probs, generator=generator, trace=trace.scope("attention"))
    h = chunked_feed_forward(p, h, p.config.chunk_size_feed_forward, generator, trace.scope("ffn"))
    return LayerOutput(trace("output", h), probs, None, kv, None)


MPNET = register(Family(
    name="MPNet", model_type="mpnet",
    embeddings=embeddings,
    position_ids=lambda ids, pad, past: count_positions(ids, PADDING_IDX, past), head_act="gelu",
    layer=layer, task_heads={"sequence-classification": CLASSIFIER},
))
