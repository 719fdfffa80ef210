"""The transformer stack: feed-forward block, one layer, and the whole encoder (``BertModel``).

    h' = LayerNorm(a + W_2 act(W_1 a + b_1) + b_2),  a = attention block output   (BertIntermediate + BertOutput)

Keys read per layer (under ``bert.encoder.layer.{i}.``): ``attention.*`` (see attention.py),
``crossattention.*`` in decoders with cross-attention, ``intermediate.dense.weight`` (I, H) and
``.bias``, ``output.dense.weight`` (H, I) and ``.bias``, ``output.LayerNorm.weight|bias`` (H,).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint as activation_checkpoint

from ..errors import InputError
from .attention import KV, attention, causal_keep_mask, chosen_impl, extended_mask
from .config import BertConfig
from .embeddings import embeddings
from .family import family_of
from .functional import ACTIVATIONS, dropout, layer_norm, linear
from .heads import pooler
from .params import Params, as_params, scoped
from .recorder import NO_TRACE, WEIGHT_POINTS, Edit, Trace, point_names, with_edits

Tensor = torch.Tensor


def check_mask(name: str, mask: object, B: int, S: int, S_k: int, nh: int) -> None:
    """Raise :class:`InputError` unless ``mask`` is a 0/1 tensor of one of the shapes attention accepts:
    (B, S_k), (B, S, S_k) or (B, 1 or nh, S, S_k), where S_k counts the keys (cached + new, or encoder)."""
    allowed = [(B, S_k), (B, S, S_k), (B, 1, S, S_k), (B, nh, S, S_k)]
    if not isinstance(mask, Tensor) or tuple(mask.shape) not in allowed:
        got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
        raise InputError(f"{name} must be a tensor of shape {' or '.join(map(str, allowed))} "
                         f"(1 = attend, 0 = ignore), got {got}; tokenizer(...).attention_mask has the 2D form")


def warn_if_padding_without_mask(input_ids: Tensor | None, attention_mask: Tensor | None, pad: int | None) -> None:
    """Warn when ``input_ids`` (B, S) start or end with the pad id but no attention_mask hides the padding:
    it is then attended to and changes every output (``PreTrainedModel.warn_if_padding_and_no_attention_mask``)."""
    if attention_mask is None and input_ids is not None and pad is not None and bool((input_ids[:, [0, -1]] == pad).any()):
        warnings.warn(f"input_ids hold padding (id {pad}) but no attention_mask was given, so the padding is "
                      "attended to and changes the results; pass the tokenizer's attention_mask", stacklevel=3)


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
    act = ACTIVATIONS[cfg.hidden_act]
    h = act(linear(x, p["intermediate.dense.weight"], p["intermediate.dense.bias"]))  # (B, S, I)
    h = trace("intermediate", h)
    h = linear(h, p["output.dense.weight"], p["output.dense.bias"])  # (B, S, H)
    h = dropout(h, cfg.hidden_dropout_prob, generator)
    h = trace("dense", h)
    h = layer_norm(h + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], cfg.layer_norm_eps)
    h = trace("output", h)
    return h


def chunked_feed_forward(p: Params, x: Tensor, chunk_size: int, generator: torch.Generator | None = None,
                         trace: Trace = NO_TRACE) -> Tensor:
    """:func:`feed_forward` over slices of ``chunk_size`` positions (HF ``apply_chunking_to_forward``).

    The FFN treats each position alone, so slicing the sequence gives the same result while only
    one slice's (chunk, I) intermediate is alive at a time.

    Args:
        p: one layer's scope.
        x: (B, S, H).
        chunk_size: positions per slice; 0 means one slice.
        generator: turns dropout on (training).
        trace: records slice n under ``chunk.{n}.`` (e.g. ``ffn.chunk.0.intermediate``).

    Returns:
        (B, S, H).
    """
    if chunk_size <= 0 or chunk_size >= x.shape[1]:
        return feed_forward(p, x, generator, trace)
    parts = x.split(chunk_size, dim=1)  # ceil(S / chunk_size) of (B, <=chunk_size, H)
    return torch.cat([feed_forward(p, part, generator, trace.scope(f"chunk.{n}")) for n, part in enumerate(parts)],
                     dim=1)


class LayerOutput(NamedTuple):
    hidden: Tensor  # (B, S, H)
    probs: Tensor | None  # self-attention probabilities (B, nh, S, S_k) or None
    cross_probs: Tensor | None  # cross-attention probabilities (B, nh, S, S_e) or None
    self_kv: KV  # keys/values of self-attention, cache included
    cross_kv: KV | None  # keys/values of cross-attention


def layer(
    p: Params,
    x: Tensor,
    mask: Tensor | None = None,
    *,
    encoder_hidden: Tensor | None = None,
    encoder_mask: Tensor | None = None,
    past_self_kv: KV | None = None,
    past_cross_kv: KV | None = None,
    past_length: int = 0,
    head_mask: Tensor | None = None,
    impl: str = "eager",
    need_probs: bool = False,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
) -> LayerOutput:
    """One transformer layer (``BertLayer``): self-attention, [cross-attention,] feed-forward.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope (``model.params.layer(i)``).
        x: (B, S, H).
        mask: additive self-attention mask (:func:`~bertfn.model.attention.extended_mask`).
        encoder_hidden: (B, S_e, H), used when the layer has ``crossattention.*`` weights.
        encoder_mask: additive cross-attention mask.
        past_self_kv: the self-attention cache of this layer.
        past_cross_kv: the cross-attention cache of this layer.
        past_length: the absolute position of x's first token.
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa", as in :func:`~bertfn.model.attention.attention`.
        need_probs: return the attention probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the steps under ``attention.*``, ``crossattention.*``, ``ffn.*`` and ``output``.

    Returns:
        The new hidden states (B, S, H) with probabilities and keys/values (see :class:`LayerOutput`).

    Raises:
        InputError: ``encoder_hidden`` for a layer without cross-attention weights.
    """
    p = scoped(p, "layer()", "model.params.layer(0)")
    common = dict(head_mask=head_mask, impl=impl, need_probs=need_probs, generator=generator)
    a = attention(p.scope("attention"), x, mask, past_kv=past_self_kv, past_length=past_length,
                  trace=trace.scope("attention"), **common)
    h, cross_probs, cross_kv = a.hidden, None, None
    if encoder_hidden is not None:
        if "crossattention.self.query.weight" not in p:
            raise InputError("encoder_hidden_states were given but this model has no cross-attention "
                             "weights (config add_cross_attention=false)")
        c = attention(p.scope("crossattention"), h, encoder_mask, encoder_hidden=encoder_hidden,
                      past_kv=past_cross_kv, trace=trace.scope("crossattention"), **common)
        h, cross_probs, cross_kv = c.hidden, c.probs, c.kv
    h = chunked_feed_forward(p, h, p.config.chunk_size_feed_forward, generator, trace.scope("ffn"))
    h = trace("output", h)
    return LayerOutput(h, a.probs, cross_probs, a.kv, cross_kv)


@contextmanager
def rewound(generator: torch.Generator, state: Tensor) -> Iterator[None]:
    """Run a block with ``generator`` set back to ``state``, then return it to where it was."""
    resume = generator.get_state()
    generator.set_state(state)
    try:
        yield
    finally:
        generator.set_state(resume)


def checkpointed(run: Callable[[Tensor], LayerOutput], x: Tensor,
                 generator: torch.Generator | None) -> LayerOutput:
    """``run(x)`` under activation checkpointing (``torch.utils.checkpoint``, as HF's ``gradient_checkpointing``).

    Only ``x`` is kept for backward; the layer's activations are recomputed when the gradient reaches
    it. torch restores its own global RNG for that recomputation but knows nothing of the dropout
    ``generator`` bertfn draws from, so the recomputation rewinds it to where it stood before the
    layer: it draws the same dropout masks, and the gradients equal those without checkpointing.

    Args:
        run: one layer, ``x -> LayerOutput``.
        x: (B, S, H), the layer's input.
        generator: the dropout generator, or None.
    """
    if generator is None:
        return activation_checkpoint(run, x, use_reentrant=False)
    start = generator.get_state()
    return activation_checkpoint(run, x, use_reentrant=False,
                                 context_fn=lambda: (nullcontext(), rewound(generator, start)))


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
    attentions: tuple[Tensor, ...] | None  # L of (B, nh, S, S_k); a padding query's row is kept as computed
    # (it attends to the real keys and sums to 1, as in transformers): read only the rows of real tokens
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
    its weights read under its own names. Decoders
    (``config.is_decoder``) add the causal mask to a 2D mask. In a padded batch the probabilities of a
    padding position's query row are what the softmax gives (they sum to 1 over the real keys, as in
    transformers) and mean nothing: read the real tokens' rows.

    Args:
        params: a loaded ``Model``, its ``params`` (reads ``bert.*``), or a flat HF-keyed state_dict with its
            ``config``.
        input_ids: (B, S).
        attention_mask: 0/1 (B, S_k) padding mask (S_k = cached + S), or a full (B, S, S_k) /
            (B, 1|nh, S, S_k) 0/1 mask.
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
        checkpoint: recompute each layer in backward (activation checkpointing) to save memory.
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
    past = cache.length if cache is not None else 0
    family = family_of(cfg)
    if family.layer is not None and (cache is not None or use_cache or encoder_hidden_states is not None):
        raise InputError(f"{family.name} is an encoder: its layers keep no cache and have no cross-attention, so "
                         "cache=, use_cache=True and encoder_hidden_states= do not apply to it")

    own = {} if family.embeddings is None else {"attention_mask": attention_mask}  # a member's step sees the padding
    x = (family.embeddings or embeddings)(p.scope("embeddings"), input_ids, token_type_ids, position_ids, inputs_embeds,
                                          past, generator, trace.scope("embeddings"), **own)  # (B, S, H)
    B, S, _ = x.shape
    warn_if_padding_without_mask(input_ids, attention_mask, cfg.pad_token_id)

    S_k = past + S  # keys: the cached positions and the new ones
    if attention_mask is None and cfg.is_decoder:
        attention_mask = torch.ones(B, S_k, device=x.device)
    if attention_mask is not None:
        check_mask("attention_mask", attention_mask, B, S, S_k, cfg.num_attention_heads)
        if cfg.is_decoder and attention_mask.dim() == 2:
            attention_mask = causal_keep_mask(attention_mask, S)  # (B, S, past + S)
        mask = extended_mask(attention_mask, x.dtype)
    else:
        mask = None  # nothing to hide: the same as an all-zero additive mask
    enc_mask = None
    if encoder_hidden_states is not None and encoder_attention_mask is not None:
        check_mask("encoder_attention_mask", encoder_attention_mask, B, S, encoder_hidden_states.shape[1],
                   cfg.num_attention_heads)
        enc_mask = extended_mask(encoder_attention_mask, x.dtype)

    L, nh = cfg.num_hidden_layers, cfg.num_attention_heads
    if head_mask is not None:
        if not isinstance(head_mask, Tensor) or head_mask.shape not in ((nh,), (L, nh)):
            got = tuple(head_mask.shape) if isinstance(head_mask, Tensor) else type(head_mask).__name__
            raise InputError(f"head_mask must be a tensor of shape ({nh},) or ({L}, {nh}) (1 keeps a head, "
                             f"0 silences it), got {got}")
        if cfg.pruned_heads:
            raise InputError("head_mask needs every layer to have all its heads, but this model was pruned "
                             f"({cfg.pruned_heads}); mask heads of the unpruned model, or prune more instead")
        head_mask = head_mask.to(x.dtype).expand(L, nh)  # (L, nh)
    weights = [n for n in point_names(cfg) if n.rpartition(".")[2] in WEIGHT_POINTS]
    # returned, kept or edited probabilities: every layer runs eager, the path that forms them (NO_TRACE keeps nothing)
    need_probs = output_attentions or trace.keep or trace.edits_any(weights)
    ran = chosen_impl(impl, need_probs, head_mask, cfg.attention_probs_dropout_prob if generator is not None else 0.0)

    hidden, attns, cross_attns, self_kvs, cross_kvs = [x], [], [], [], []
    for i in range(L):
        def run_layer(h: Tensor, i: int = i) -> LayerOutput:
            if family.layer is not None:  # a member's own layer (ESM-2's, ModernBERT's pre-LN layers)
                return family.layer(p.scope(f"encoder.layer.{i}"), h, mask, index=i, position_ids=position_ids,
                                    head_mask=head_mask[i] if head_mask is not None else None, impl=impl,
                                    need_probs=need_probs, generator=generator, trace=trace.scope(f"layer.{i}"))
            return layer(
                p.scope(f"encoder.layer.{i}"), h, mask,
                encoder_hidden=encoder_hidden_states, encoder_mask=enc_mask,
                past_self_kv=cache.self_attention[i] if cache is not None else None,
                past_cross_kv=cache.cross_attention[i] if cache is not None and cache.cross_attention else None,
                past_length=past, head_mask=head_mask[i] if head_mask is not None else None,
                impl=impl, need_probs=need_probs, generator=generator, trace=trace.scope(f"layer.{i}"),
            )
        out = checkpointed(run_layer, x, generator) if checkpoint else run_layer(x)
        x = out.hidden
        # only what the output returns stays alive: at 512 tokens on bert-base's shape every layer's
        # probabilities (eager path) would hold 150 MB until the last layer has run
        if output_hidden_states:
            hidden.append(x)
        if output_attentions:
            attns.append(out.probs)
            cross_attns.append(out.cross_probs)
        if use_cache:
            self_kvs.append(out.self_kv)
            cross_kvs.append(out.cross_kv)

    if family.final_norm is not None:  # pre-LN members (hidden_states keep the last layer's output before it)
        x = family.final_norm(p, x, trace)
    has_cross = encoder_hidden_states is not None
    return EncoderOutput(
        last_hidden_state=x,
        pooler_output=pooler(params, x, trace) if "pooler.dense.weight" in p else None,
        hidden_states=tuple(hidden) if output_hidden_states else None,
        attentions=tuple(attns) if output_attentions else None,
        cross_attentions=tuple(cross_attns) if output_attentions and has_cross else None,
        cache=Cache(tuple(self_kvs), tuple(cross_kvs) if has_cross else None) if use_cache else None,
        attn_impl=ran,
    )
