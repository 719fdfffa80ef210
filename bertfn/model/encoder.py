"""The transformer stack: one layer (attention, then the feed-forward block), and the whole encoder (``BertModel``).

:func:`encoder` runs its pass in named steps: the embeddings (BERT's or the member's), the masks checked and made
additive (:mod:`bertfn.model.masks`), each layer with its share of the masks, cache and head mask
(:func:`layer_runner`), the layers one after another keeping what is returned (:mod:`bertfn.model.stack`), a pre-LN
member's final norm, and the outputs (:func:`outputs`).

A decoder's step (:func:`decoder_layer`, last) runs :mod:`bertfn.model.decoding`'s attention, then the same
feed-forward. Keys read per layer (under ``bert.encoder.layer.{i}.``): ``attention.*`` (attention.py),
``intermediate.*`` and ``output.*`` (feed_forward.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import InputError
from .attention import KV, attention, chosen_impl
from .config import BertConfig
from .decoding import Cache, Decoding, check_cache, cross_attention, decoding_of, self_attention
from .embeddings import embeddings
from .family import Family, family_of, member_name
from .feed_forward import chunked_feed_forward
from .heads import pooler
from .layout import Mask, Segments
from .masks import (attention_masks, check_segments, head_masks, laid_out, segment_positions,
                    warn_if_padding_without_mask)
from .params import Params, as_params, scoped
from .point_names import point_names
from .recorder import NO_TRACE, WEIGHT_POINTS, Edit, Trace, with_edits
from .stack import Stack, run_layers

Tensor = torch.Tensor


class LayerOutput(NamedTuple):
    hidden: Tensor  # (B, S, H)
    probs: Tensor | None  # self-attention probabilities (B, nh, S, S_k) or None
    cross_probs: Tensor | None  # cross-attention probabilities (B, nh, S, S_e) or None
    self_kv: KV  # keys/values of self-attention, cache included
    cross_kv: KV | None  # keys/values of cross-attention


def layer(
    p: Params,
    x: Tensor,
    mask: Mask = None,
    *,
    head_mask: Tensor | None = None,
    impl: str = "eager",
    need_probs: bool = False,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
) -> LayerOutput:
    """One transformer layer (``BertLayer``): the attention block, then the feed-forward block.

    A decoder's layer, with its cache and cross-attention, is :func:`decoder_layer`.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope (``model.params.layer(i)``).
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: the layout: the additive self-attention mask (:func:`~bertfn.model.layout.extended_mask`) or None, or
            :class:`~bertfn.model.layout.Segments` (:func:`~bertfn.model.attention.attention`).
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa", as in :func:`~bertfn.model.attention.attention`.
        need_probs: return the attention probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the steps under ``attention.*``, ``ffn.*`` and ``output``.

    Returns:
        The new hidden states (B, S, H) with the probabilities and keys/values (see :class:`LayerOutput`).
    """
    p = scoped(p, "layer()", "model.params.layer(0)")
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    a = attention(p.scope("attention"), x, mask, head_mask=head_mask, impl=impl, need_probs=need_probs,
                  generator=generator, trace=trace.scope("attention"))  # (B, S, H)
    h = chunked_feed_forward(p, a.hidden, p.config.chunk_size_feed_forward, generator, trace.scope("ffn"))  # (B, S, H)
    h = trace("output", h)
    return LayerOutput(h, a.probs, None, a.kv, None)


@dataclass(frozen=True)
class EncoderOutput:
    """What :func:`encoder` returns (``BaseModelOutputWithPoolingAndCrossAttentions``, named fields).

    Attributes:
        last_hidden_state: (B, S, H).
        pooler_output: (B, H) when the checkpoint has a pooler.
        hidden_states: L+1 of (B, S, H): embeddings, then every layer (``output_hidden_states``).
        attentions: L of (B, nh, S, S_k) (``output_attentions``); a padding query's row is kept as
            computed (it attends to the real keys and sums to 1, as in transformers): read only the rows
            of real tokens.
        cross_attentions: L of (B, nh, S, S_e).
        cache: pass back as ``cache=`` for the next decoding step (``use_cache``).
        attn_impl: the attention path that ran: "eager" or "sdpa".
    """

    last_hidden_state: Tensor  # (B, S, H)
    pooler_output: Tensor | None  # (B, H) when the checkpoint has a pooler
    hidden_states: tuple[Tensor, ...] | None  # L+1 of (B, S, H): embeddings, then every layer
    attentions: tuple[Tensor, ...] | None  # L of (B, nh, S, S_k); read only the rows of real tokens
    cross_attentions: tuple[Tensor, ...] | None  # L of (B, nh, S, S_e)
    cache: Cache | None  # pass back as ``cache=`` for the next decoding step
    attn_impl: str  # the attention path that ran: "eager" or "sdpa"


def encoder(
    params: Params,
    input_ids: Tensor | None = None,
    attention_mask: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    *,
    head_mask: Tensor | None = None,
    encoder_hidden_states: Tensor | None = None,
    encoder_attention_mask: Tensor | None = None,
    cache: Cache | None = None,
    use_cache: bool = False,
    output_hidden_states: bool = False,
    output_attentions: bool = False,
    impl: str = "sdpa",
    generator: torch.Generator | None = None,
    checkpoint: bool = False,
    trace: Trace = NO_TRACE,
    edits: Mapping[str, Edit] | None = None,
    config: BertConfig | dict | None = None,
) -> EncoderOutput:
    """BERT's forward pass (``BertModel.forward``): embeddings, L layers, pooler.

    A family member's model runs the same pass with its exceptions (:mod:`bertfn.model.family`): its own
    embeddings step where it has one, its own layer and final LayerNorm where it has them (ESM-2, ModernBERT),
    its weights read under its own names. A decoder (``config.is_decoder``, ``BertLMHeadModel``) adds the causal
    mask to a 2D mask (:func:`~bertfn.model.masks.attention_masks`) and, given a cache or encoder states, runs
    :func:`decoder_layer` (:mod:`bertfn.model.decoding`). In a padded batch the probabilities of a padding position's
    query row are what the softmax gives (they sum to 1 over the real keys, as in transformers) and mean nothing:
    read the real tokens' rows.

    Args:
        params: a loaded ``Model``, its ``params`` (reads ``bert.*``), or a flat HF-keyed state_dict with its
            ``config``.
        input_ids: (B, S).
        attention_mask: 0/1 (B, S_k) padding mask (S_k = cached + S), or a full (B, S, S_k) /
            (B, 1|nh, S, S_k) 0/1 mask; or :class:`~bertfn.model.layout.Segments`: ``input_ids`` (1, T) hold texts laid
            end to end, each attending to itself alone (:mod:`bertfn.model.layout`; positions restart at each text;
            inference without cache, cross-attention or dropout; a trace and edits in the padded layout's shapes;
            probabilities where the layer forms them per text, the pre-LN members' for ESM-2's contact head). Then
            ``last_hidden_state`` is (1, T, H), or (1, r, H) at the rows ``Segments.read`` names, and
            ``pooler_output`` (b, H) reads each text's first token.
        token_type_ids: (B, S), default all zeros.
        position_ids: (B, S) or (S,), default counting from the cache's length.
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        head_mask: (nh,) for every layer or (L, nh), 1 keeps a head.
        encoder_hidden_states: (B, S_e, H), what a decoder's cross-attention reads.
        encoder_attention_mask: 0/1 mask of the encoder states, as ``attention_mask``.
        cache: continue from the keys and values of earlier decoding steps (token-by-token decoding).
        use_cache: return the keys and values (:class:`Cache`) for the next step.
        output_hidden_states: return every layer's hidden states.
        output_attentions: return every layer's attention probabilities (runs the eager path).
        impl: "sdpa" (fast) or "eager" (reference); eager runs anyway where probabilities are needed
            (``output_attentions``, a ``trace`` that keeps, an edit of the scores or probabilities, head_mask,
            dropout), and ``EncoderOutput.attn_impl`` says which ran.
        generator: turns dropout on (training).
        checkpoint: recompute each layer in backward (activation checkpointing) to save memory; with
            ``loss.backward()``, ``torch.autograd.grad``, ``torch.func.vmap`` or ``jvp``, not under ``torch.func.grad``,
            ``vjp``, ``jacrev`` or ``hessian`` (:class:`~bertfn.errors.InputError`: torch cannot run it there).
        trace: a :class:`~bertfn.model.recorder.Trace` that keeps every intermediate by name. One that keeps
            (``keep=True``, the default) makes every layer run the eager path, whatever ``impl`` says, so it holds
            the attention scores and probabilities too: every point :func:`bertfn.trace` records, never fewer.
        edits: ``{point name: edit(tensor, point) -> tensor}`` replaces the tensor at those points (names
            as :func:`bertfn.trace` records them, ``*`` matching any run of characters; see
            :mod:`bertfn.model.recorder` and :mod:`bertfn.interventions`). An edit of the attention scores or
            probabilities makes every layer run the eager path, which forms them.
        config: the config of a bare state_dict (a BertConfig or config.json dict).

    Returns:
        The outputs, named (:class:`EncoderOutput`).

    Raises:
        InputError: inputs, masks or edits the model cannot read (each message says which and why).

    Warns:
        UserWarning: ``input_ids`` start or end with padding and no ``attention_mask`` was given.
    """
    params = as_params(params, config, "encoder")
    cfg = params.config
    trace = with_edits(trace, edits, cfg)
    p = params.scope("bert")
    tokens = input_ids if input_ids is not None else inputs_embeds  # (B, S) or (B, S, H); neither: embeddings says
    if cache is not None and tokens is not None:
        check_cache(cache, tokens.shape[0], cfg)
    past = cache.length if cache is not None else 0
    family = family_of(cfg)
    if family.layer is not None and (cache is not None or use_cache or encoder_hidden_states is not None):
        raise InputError(f"{member_name(cfg)} is an encoder: its layers keep no cache and have no cross-attention, so "
                         "cache=, use_cache=True and encoder_hidden_states= do not apply to it")

    segments = attention_mask if isinstance(attention_mask, Segments) else None
    if trace.edits and isinstance(attention_mask, Tensor) and attention_mask.dim() == 2 and not past:  # padded texts
        trace = trace.counted(attention_mask)  # where each ends, for its edits (Point.lengths)
    if segments is not None:
        check_segments(tokens.shape, segments, cache=cache, use_cache=use_cache,
                       encoder_hidden_states=encoder_hidden_states)
        if position_ids is None and input_ids is not None:
            position_ids = segment_positions(input_ids, segments, cfg)  # (1, T), restarting at each text
    own = {} if family.embeddings is None else {"attention_mask": attention_mask}  # the padding, or the texts (ESM's)
    x = (family.embeddings or embeddings)(p.scope("embeddings"), input_ids, token_type_ids, position_ids, inputs_embeds,
                                          past, generator, trace.on(segments).scope("embeddings"), **own)  # (B, S, H)
    if segments is not None:  # texts end to end: the layout is the mask, with the kernels' padding rows added
        x, mask = laid_out(x, segments, p.get("encoder.layer.0.attention.output.dense.weight"), trace)  # (1, T + pad, H)
        decoding = None
    else:
        warn_if_padding_without_mask(input_ids, attention_mask, cfg.pad_token_id)
        mask, enc_mask = attention_masks(cfg, x, past, attention_mask, encoder_hidden_states, encoder_attention_mask)
        decoding = decoding_of(cache, encoder_hidden_states, enc_mask)  # None: no cache or encoder states to read
    head_mask = head_masks(cfg, head_mask, x.dtype)  # (L, nh) or None
    formed = trace.keep or (bool(trace.edits) and trace.edits_any(  # kept or edited probabilities: formed by eager
        [n for n in point_names(cfg) if n.rpartition(".")[2] in WEIGHT_POINTS]))  # (on segments: the padded view)
    need_probs, p_drop = output_attentions or (formed and segments is None), cfg.attention_probs_dropout_prob
    ran = chosen_impl(impl, output_attentions or formed, head_mask, p_drop if generator is not None else 0.0)

    run = layer_runner(p, family, mask, decoding, position_ids, head_mask, impl=impl, need_probs=need_probs,
                       generator=generator, trace=trace)
    stack = run_layers(run, x, cfg.num_hidden_layers, checkpoint=checkpoint, generator=generator,
                       keep_hidden=output_hidden_states, keep_probs=output_attentions, keep_cache=use_cache)
    x = stack.last
    if family.final_norm is not None:  # pre-LN members (hidden_states keep the last layer's output before it)
        x = family.final_norm(p, x, trace.on(mask))
    if segments is not None and segments.read is not None and mask.read is None:  # traced: every row ran (laid_out)
        x = x[:, segments.read]  # (1, r, H): the rows read
    return outputs(params, x, stack, trace, output_hidden_states=output_hidden_states,
                   output_attentions=output_attentions, use_cache=use_cache,
                   cross=encoder_hidden_states is not None, attn_impl=ran, segments=segments)


def layer_runner(p: Params, family: Family, mask: Mask, decoding: Decoding | None, position_ids: Tensor | None,
                 head_mask: Tensor | None, *, impl: str, need_probs: bool, generator: torch.Generator | None,
                 trace: Trace) -> Callable[[int, Tensor], LayerOutput]:
    """``run(i, h) -> LayerOutput``: layer i of the stack on its input h (B, S, H), with what every layer of one pass
    shares: the mask, layer i's head mask; a decoder's layer with its cache and cross-attention where the pass has
    them; the member's own layer where it has one (ESM-2's, ModernBERT's pre-LN layers: no cache, no cross-attention).

    Args:
        p: the base model's scope (``bert.``).
        family: the member's record (:func:`~bertfn.model.family.family_of`).
        mask: the additive self-attention mask, or None; or the segments layout (its ``read`` rows at the last layer).
        decoding: the cache and encoder states of a decoder's step, or None (:class:`~bertfn.model.decoding.Decoding`).
        position_ids: (B, S) or (S,), or None (a member's layer counts its own).
        head_mask: (L, nh), or None.
        impl: "eager" or "sdpa".
        need_probs: every layer forms its probabilities (the eager path).
        generator: turns dropout on (training).
        trace: records layer i under ``layer.{i}.``.

    Returns:
        The function that runs layer i.
    """
    last = p.config.num_hidden_layers - 1

    def run(i: int, h: Tensor) -> LayerOutput:
        layout = mask.reading(i == last) if isinstance(mask, Segments) else mask  # read rows at the last layer
        common = {"head_mask": head_mask[i] if head_mask is not None else None, "impl": impl,
                  "need_probs": need_probs, "generator": generator, "trace": trace.scope(f"layer.{i}")}
        if family.layer is not None:  # a member's own layer (ESM-2's, ModernBERT's pre-LN layers)
            return family.layer(p.scope(f"encoder.layer.{i}"), h, layout, index=i, position_ids=position_ids, **common)
        if decoding is not None:
            return decoder_layer(p.scope(f"encoder.layer.{i}"), h, layout, decoding, i, **common)
        return layer(p.scope(f"encoder.layer.{i}"), h, layout, **common)

    return run


def outputs(params: Params, x: Tensor, stack: Stack, trace: Trace, *, output_hidden_states: bool,
            output_attentions: bool, use_cache: bool, cross: bool, attn_impl: str,
            segments: Segments | None = None) -> EncoderOutput:
    """The pass's :class:`EncoderOutput`: the last hidden state, the pooler's output where the checkpoint has a
    pooler, and what was asked for of the stack.

    Args:
        params: the root view.
        x: (B, S, H), the last hidden state (after a pre-LN member's final norm).
        stack: what :func:`run_layers` kept.
        trace: records the pooler's points.
        output_hidden_states: return every layer's hidden states.
        output_attentions: return every layer's probabilities.
        use_cache: return the keys and values.
        cross: the pass had cross-attention (encoder states).
        attn_impl: the attention path that ran.
        segments: the segments layout the pass ran on, or None: then the padding rows are dropped, a text's pooled
            output is read at its first token, and where it read some rows alone there is no pooled output.

    Returns:
        :class:`EncoderOutput`.
    """
    hidden = stack.hidden
    pooled = "pooler.dense.weight" in params.scope("bert")
    if segments is not None:
        T = segments.tokens
        hidden = [h[:, :T] for h in hidden]  # (1, T, H) each, without the padding rows
        if segments.read is None:
            x = x[:, :T]  # (1, T, H)
            first = x[0, segments.starts(x.device)][:, None]  # (b, 1, H): each text's first token, as a batch
        pooled = pooled and segments.read is None
    return EncoderOutput(
        last_hidden_state=x,
        pooler_output=pooler(params, first if segments is not None else x, trace) if pooled else None,
        hidden_states=tuple(hidden) if output_hidden_states else None,
        attentions=tuple(stack.attentions) if output_attentions else None,
        cross_attentions=tuple(stack.cross_attentions) if output_attentions and cross else None,
        cache=Cache(tuple(stack.self_kvs), tuple(stack.cross_kvs) if cross else None) if use_cache else None,
        attn_impl=attn_impl,
    )


def decoder_layer(p: Params, x: Tensor, mask: Tensor | None, decoding: Decoding, index: int, *,
                  head_mask: Tensor | None = None, impl: str = "eager", need_probs: bool = False,
                  generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> LayerOutput:
    """One decoder layer (``BertLayer`` with ``is_decoder``): self-attention over the cache, cross-attention to the
    encoder states where the pass has them, then :func:`layer`'s feed-forward (:mod:`bertfn.model.decoding`).

    Args:
        p: ``bert.encoder.layer.{i}.`` scope (``model.params.layer(i)``).
        x: (B, S, H), this step's tokens.
        mask: the additive, causal self-attention mask, broadcastable to (B, nh, S, past + S), or None.
        decoding: the pass's cache, encoder states and cross-attention mask.
        index: i, the layer (its share of the cache).
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa", as in :func:`~bertfn.model.attention.attention`.
        need_probs: return the attention probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the steps under ``attention.*``, ``crossattention.*``, ``ffn.*`` and ``output``.

    Returns:
        The new hidden states (B, S, H) with the probabilities and keys/values of both blocks (:class:`LayerOutput`).

    Raises:
        InputError: encoder states for a layer without cross-attention weights.
    """
    p = scoped(p, "decoder_layer()", "model.params.layer(0)")
    common = dict(head_mask=head_mask, impl=impl, need_probs=need_probs, generator=generator)
    past_self, past_cross = decoding.cached(index)
    a = self_attention(p.scope("attention"), x, mask, past_self, decoding.past, trace=trace.scope("attention"),
                       **common)  # (B, S, H)
    h, c = a.hidden, None
    if decoding.encoder_hidden is not None:
        c = cross_attention(p.scope("crossattention"), h, decoding.encoder_hidden, decoding.encoder_mask, past_cross,
                            trace=trace.scope("crossattention"), **common)
        h = c.hidden  # (B, S, H)
    h = chunked_feed_forward(p, h, p.config.chunk_size_feed_forward, generator, trace.scope("ffn"))  # (B, S, H)
    h = trace("output", h)
    return LayerOutput(h, a.probs, c.probs if c else None, a.kv, c.kv if c else None)
