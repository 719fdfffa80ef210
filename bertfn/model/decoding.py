"""Decoding: BERT as a decoder (``BertLMHeadModel``, ``config.is_decoder``), token by token with a cache of keys and
values, and with cross-attention to an encoder's states (``config.add_cross_attention``).

    self-attention:   K = [K_past; x W_K],  V = [V_past; x W_V]    query i at position past + i
    cross-attention:  K = e W_K,  V = e W_V  (e: the encoder states, projected at the first step, then cached)

The encoder's attention (:func:`~bertfn.model.attention.attention`) has neither: both are built here of its steps
(the projections, :func:`~bertfn.model.attention.split_heads`, :func:`~bertfn.model.attention.attend`,
:func:`~bertfn.model.attention.merge_heads`, :func:`~bertfn.model.attention.attention_output`), so a decoder runs the
encoder's arithmetic, one implementation of each step. A decoder's layer
(:func:`~bertfn.model.encoder.decoder_layer`) runs them before the encoder's feed-forward; its causal mask (no query
reads a later key) is made with the padding mask (:func:`~bertfn.model.masks.attention_masks`).

Keys read (under ``bert.encoder.layer.{i}.``): ``attention.*`` as the encoder's, and ``crossattention.*`` under the
same names (``self.query|key|value``, ``output.dense``, ``output.LayerNorm``); cross-attention's keys and values
project the encoder states (B, S_e, H).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import InputError
from .attention import (KV, AttentionOutput, attend, attention_output, block_scope, merge_heads, separate_projections,
                        split_heads)
from .config import BertConfig
from .embeddings import position_scores
from .functional import linear, linears
from .params import Params
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


class Cache(NamedTuple):
    """Keys and values kept between decoding steps: one (k, v) pair per layer, each (B, nh, S, hd).

    Attributes:
        self_attention: the self-attention keys and values, one pair per layer.
        cross_attention: the cross-attention keys and values (of the encoder states), one pair per
            layer; None without cross-attention.
    """

    self_attention: tuple[KV, ...]
    cross_attention: tuple[KV, ...] | None = None

    @property
    def length(self) -> int:
        """How many positions the self-attention cache holds (the next token's position)."""
        return self.self_attention[0][0].shape[2]


class Decoding(NamedTuple):
    """What a decoder's pass reads besides its tokens (``BertModel.forward``'s ``past_key_values``,
    ``encoder_hidden_states`` and ``encoder_attention_mask``).

    Attributes:
        cache: the keys and values of earlier steps, or None at the first step.
        encoder_hidden: (B, S_e, H), the encoder states cross-attention reads, or None.
        encoder_mask: the additive cross-attention mask, broadcastable to (B, nh, S, S_e), or None.
    """

    cache: Cache | None
    encoder_hidden: Tensor | None
    encoder_mask: Tensor | None

    @property
    def past(self) -> int:
        """The cached positions: the absolute position of this step's first token."""
        return self.cache.length if self.cache is not None else 0

    def cached(self, i: int) -> tuple[KV | None, KV | None]:
        """Layer i's cached keys and values.

        Args:
            i: the layer.

        Returns:
            ``(self_kv, cross_kv)``, each (k, v) of (B, nh, S_k or S_e, hd), or None where nothing is cached.
        """
        if self.cache is None:
            return None, None
        return self.cache.self_attention[i], self.cache.cross_attention[i] if self.cache.cross_attention else None


def check_cache(cache: object, batch: int, config: BertConfig) -> None:
    """Refuse a cache this pass cannot continue: not a :class:`Cache` (transformers' ``past_key_values`` among
    them), or one of another batch size, layer count or head count than the pass's.

    Args:
        cache: what ``encoder(..., cache=)`` was given (not None).
        batch: the pass's B.
        config: the model's config (``num_hidden_layers``, ``num_attention_heads``).

    Raises:
        InputError: saying which and what to pass instead.
    """
    if not isinstance(cache, Cache):
        raise InputError(f"cache must be the Cache an earlier bertfn.encoder(..., use_cache=True) returned (its "
                         f".cache), got {type(cache).__name__}; transformers' past_key_values are not read")
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    for name, pairs in (("self_attention", cache.self_attention), ("cross_attention", cache.cross_attention)):
        if pairs is None:
            continue
        if len(pairs) != layers:
            raise InputError(f"cache.{name} holds {len(pairs)} layers' keys and values; this model has {layers} "
                             "(a cache continues the model that made it)")
        got = tuple(pairs[0][0].shape[:2])  # (B, nh) of layer 0's keys
        if got != (batch, heads):
            raise InputError(f"cache.{name}'s keys are of {got[0]} texts and {got[1]} heads; this pass has {batch} "
                             f"texts and the model {heads} heads (a cache continues the batch that made it)")


def decoding_of(cache: Cache | None, encoder_hidden: Tensor | None, encoder_mask: Tensor | None) -> Decoding | None:
    """A pass's :class:`Decoding`, or None where it has no cache to continue and no encoder states to read (BERT's
    layers run then, a decoder's first step among them: their keys and values start its cache).

    Args:
        cache: the keys and values of earlier steps, or None.
        encoder_hidden: (B, S_e, H), or None.
        encoder_mask: the additive cross-attention mask, or None.

    Returns:
        :class:`Decoding`, or None.
    """
    return None if cache is None and encoder_hidden is None else Decoding(cache, encoder_hidden, encoder_mask)


def self_attention(
    p: Params,
    x: Tensor,
    mask: Tensor | None,
    past_kv: KV | None,
    past: int,
    *,
    head_mask: Tensor | None = None,
    impl: str = "eager",
    need_probs: bool = False,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
) -> AttentionOutput:
    """A decoder's self-attention: the encoder's attention block over the cached keys and values and x's own.

    Mirrors ``BertSelfAttention`` with ``past_key_values`` (then ``BertSelfOutput``): x's keys and values are appended
    to the cache's, and query i sits at position ``past + i`` (for relative positions).

    Args:
        p: one layer's ``attention.`` scope.
        x: (B, S, H), this step's tokens.
        mask: additive, broadcastable to (B, nh, S, past + S) (a decoder's is causal), or None.
        past_kv: the cached keys and values, each (B, nh, past, hd), or None.
        past: the cached positions (the absolute position of x's first token).
        head_mask: (nh,), 1 keeps a head, 0 silences it (runs the eager path).
        impl: "eager" or "sdpa", as in :func:`~bertfn.model.attention.attention`.
        need_probs: return the probabilities (runs the eager path).
        generator: turns dropout on (training).
        trace: records (and edits) the same points as :func:`~bertfn.model.attention.attention`.

    Returns:
        ``(hidden (B, S, H), probs (B, nh, S, past + S) or None, kv)``, kv the keys and values attended to, each
            (B, nh, past + S, hd): the layer's new cache entry.

    Raises:
        InputError: the scope of a whole layer instead of its attention block, or an unknown ``impl``.
    """
    p, nh = block_scope(p, x)
    query, key, value = separate_projections(p, x)  # (B, S, nh*hd) each, as the encoder's
    query, key, value = trace("query", query), trace("key", key), trace("value", value)
    q, k, v = split_heads(query, nh), split_heads(key, nh), split_heads(value, nh)  # (B, nh, S, hd) each
    if past_kv is not None:
        k = torch.cat([past_kv[0], k], dim=2)  # (B, nh, past + S, hd)
        v = torch.cat([past_kv[1], v], dim=2)
    q, k, v = trace("q", q), trace("k", k), trace("v", v)
    bias = position_scores(p, q, k, past, trace)  # relative positions' scores, or None
    context, probs = attend(p, q, k, v, mask, bias, head_mask=head_mask, impl=impl, need_probs=need_probs,
                            generator=generator, trace=trace)  # (B, nh, S, hd)
    out = attention_output(p, merge_heads(context), x, generator, trace)  # (B, S, H)
    return AttentionOutput(out, probs, (k, v))


def cross_attention(
    p: Params,
    x: Tensor,
    encoder_hidden: Tensor,
    mask: Tensor | None,
    past_kv: KV | None,
    *,
    head_mask: Tensor | None = None,
    impl: str = "eager",
    need_probs: bool = False,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
) -> AttentionOutput:
    """A decoder's cross-attention: queries from x, keys and values from the encoder states.

    Mirrors ``BertAttention`` built with ``is_cross_attention`` (absolute positions: no relative scores). The encoder
    states do not change while decoding, so their keys and values are projected at the first step and cached after.

    Args:
        p: one layer's ``crossattention.`` scope.
        x: (B, S, H), the self-attention block's output.
        encoder_hidden: (B, S_e, H), the states read.
        mask: additive, broadcastable to (B, nh, S, S_e), or None.
        past_kv: the encoder states' keys and values of the first step, each (B, nh, S_e, hd), or None.
        head_mask: (nh,), 1 keeps a head, 0 silences it (runs the eager path).
        impl: "eager" or "sdpa", as in :func:`~bertfn.model.attention.attention`.
        need_probs: return the probabilities (runs the eager path).
        generator: turns dropout on (training).
        trace: records (and edits) the points of :func:`~bertfn.model.attention.attention` (``key`` and ``value``
            where they are projected, not where the cache gives them).

    Returns:
        ``(hidden (B, S, H), probs (B, nh, S, S_e) or None, kv)``, kv the encoder states' keys and values, each
            (B, nh, S_e, hd).

    Raises:
        InputError: a layer without cross-attention weights (``add_cross_attention=false``), the scope of a whole
            layer instead of its attention block, or an unknown ``impl``.
    """
    if "self.query.weight" not in p:
        raise InputError("encoder_hidden_states were given but this model has no cross-attention "
                         "weights (config add_cross_attention=false)")
    p, nh = block_scope(p, x)
    query = trace("query", linear(x, p["self.query.weight"], p["self.query.bias"]))  # (B, S, nh*hd)
    q = split_heads(query, nh)  # (B, nh, S, hd)
    if past_kv is None:  # the first step: the encoder states' keys and values
        names = ("key", "value")
        key, value = linears(encoder_hidden, tuple(p[f"self.{n}.weight"] for n in names),
                             tuple(p[f"self.{n}.bias"] for n in names))  # (B, S_e, nh*hd) each
        k, v = split_heads(trace("key", key), nh), split_heads(trace("value", value), nh)  # (B, nh, S_e, hd) each
    else:
        k, v = past_kv  # (B, nh, S_e, hd) each, as the first step made them
    q, k, v = trace("q", q), trace("k", k), trace("v", v)
    context, probs = attend(p, q, k, v, mask, None, head_mask=head_mask, impl=impl, need_probs=need_probs,
                            generator=generator, trace=trace)  # (B, nh, S, hd)
    out = attention_output(p, merge_heads(context), x, generator, trace)  # (B, S, H)
    return AttentionOutput(out, probs, (k, v))
