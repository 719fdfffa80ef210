"""Pre-LN layers with rotary attention: the layer ESM-2 and ModernBERT put where BERT's stands.

BERT normalizes *after* each residual sum (post-LN); these members normalize each block's *input* and
leave the residual stream itself un-normalized until one LayerNorm after the last layer:

    BERT (post-LN):  a = LN(x + Attn(x)),        h = LN(a + FFN(a))
    pre-LN:          a = x + Attn(LN_1(x)),      h = a + FFN(LN_2(a)),     out = LN_f(h_L)

(Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"). In the pre-LN layer the
identity path from the input to the output is never rescaled, so the gradient reaches the first layers
undamped, and deep stacks train without BERT's learning-rate warm-up.

Attention is BERT's (:func:`~bertfn.model.attention.eager_attention` or the fused SDPA kernel) on queries
and keys turned by their positions (:mod:`bertfn.model.members.rotary`); there are no position embeddings. What
differs between the two members is passed in: how x becomes the queries, keys and values (``project``:
ESM-2's three products, ModernBERT's one fused product) and the feed-forward branch (``feed_forward``:
ESM-2's GELU MLP, :func:`mlp`; ModernBERT's GeGLU). A bias or a LayerNorm's bias the checkpoint lacks
(ModernBERT turns them off in its config) is left out (``Params.get``).

Names by which these layers are read (BERT's names; each member's key table maps them to its own):
``attention_norm.*`` (LN_1; absent from ModernBERT's layer 0, whose input is the normalized embeddings),
``attention.self.query|key|value.*`` or ``attention.self.qkv.*``, ``attention.output.dense.*``,
``ffn_norm.*`` (LN_2), ``intermediate.dense.*``, ``output.dense.*``; the final LayerNorm
``bert.encoder.final_norm.*``.

Both layouts of a pass (:mod:`bertfn.model.layout`) run here: on the segments layout (texts laid end to end) every
step is the same but attention, which each text runs on its own slice (:meth:`~bertfn.model.layout.Segments.attend`):
its own rotary positions from its start, its own window (ModernBERT's local layers), and where they are asked for
(ESM-2's contact head) its own probabilities; traced (or head-masked), on the texts' padded view, so that its points
are the padded pass's (:mod:`bertfn.model.segment_points`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..attention import AttentionOutput, chosen_impl, eager_attention, head_outputs, merge_heads, sdpa_attention, split_heads
from ..encoder import LayerOutput
from ..functional import dropout, layer_norm, linear
from ..layout import Mask, Segments, with_keys
from ..params import Params
from ..recorder import NO_TRACE, WEIGHT_POINTS, Trace
from ..segment_points import inference_only, on_padded_view, padded_view, text_probs
from .rotary import rotate

Tensor = torch.Tensor
Project = Callable[[Params, Tensor], tuple[Tensor, Tensor, Tensor]]
"""``project(p, x) -> (query, key, value)``: one attention block's scope and its input (B, S, H) to three (B, S, nh*hd)."""
FeedForward = Callable[[Params, Tensor, "torch.Generator | None", Trace], Tensor]
"""``feed_forward(p, x, generator, trace) -> (B, S, H)``: one layer's scope and the normalized input to the branch
that is added to the residual stream."""


def norm(p: Params, name: str, x: Tensor) -> Tensor:
    """LayerNorm with the weights ``{name}.weight`` and, where the checkpoint has one, ``{name}.bias``.

    Args:
        p: the scope that holds the norm.
        name: its name there, e.g. ``attention_norm``.
        x: (..., H).

    Returns:
        (..., H).
    """
    return layer_norm(x, p[f"{name}.weight"], p.get(f"{name}.bias"), p.config.layer_norm_eps)


def token_positions(x: Tensor, mask: Mask, position_ids: Tensor | None) -> Tensor:
    """The position each row of ``x`` is turned by (:func:`~bertfn.model.members.rotary.rotary_tables`): transformers'
    0 .. S-1 (``EsmRotaryEmbedding``, ``ModernBertRotaryEmbedding``) where none are given; on the segments layout
    each text's count from its start, the padding rows' 0.

    Args:
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: the layout: the padded one's additive mask or None, or :class:`~bertfn.model.layout.Segments`.
        position_ids: (B, S) or (S,), or on segments (1, T) (restarting at 0 for each text), or None.

    Returns:
        (B or 1, S) or (S,); on segments (1, T + pad).
    """
    if not isinstance(mask, Segments):
        return position_ids if position_ids is not None else torch.arange(x.shape[1], device=x.device)
    if position_ids is None:
        position_ids = torch.cat([torch.arange(n, device=x.device) for n in mask.lengths])[None]  # (1, T)
    return F.pad(position_ids, (0, mask.pad)) if mask.pad else position_ids  # (1, T + pad)


def rotary_attention(p: Params, x: Tensor, mask: Mask, cos: Tensor, sin: Tensor, *, project: Project,
                     text_mask: Tensor | None = None, head_mask: Tensor | None = None, impl: str = "eager",
                     need_probs: bool = False, generator: torch.Generator | None = None,
                     trace: Trace = NO_TRACE) -> AttentionOutput:
    """Self-attention on rotated queries and keys, up to the output projection (no residual, no LayerNorm).

    Without rotary tables (``cos`` None: ESM-1b, whose positions the embeddings added) the queries and keys are
    BERT's, unturned.

    ``Concat_h softmax(R_m q_h . R_n k_h / sqrt(hd) + M) V_h  W_O``: BERT's attention (:func:`eager_attention`,
    or the fused kernel where the probabilities are not needed) after each query and key is turned by its
    position (:func:`~bertfn.model.members.rotary.rotate`). Mirrors ``EsmSelfAttention`` + ``EsmSelfOutput.dense``
    and ``ModernBertAttention``. ESM-2 scales the queries before turning them and ModernBERT the scores
    after the product: the same numbers to float rounding as dividing the scores by sqrt(hd) here.

    On the segments layout each text attends to its own slice (by the fused kernel, or eager with ``need_probs``), and
    the output projection runs at the rows the layout reads (``Segments.read`` at the last layer).

    Args:
        p: one attention block's scope.
        x: (B, S, H), the block's normalized input; or (1, T + pad, H) on the segments layout.
        mask: additive, broadcastable to (B, nh, S, S) (ModernBERT's local layers: the window's), or None; or
            :class:`~bertfn.model.layout.Segments` (inference: no dropout; traced or head-masked on the padded view,
            :mod:`bertfn.model.segment_points`).
        cos: (B or 1, 1, S, hd), :func:`~bertfn.model.members.rotary.rotary_tables`, or None (no turn).
        sin: the same.
        project: ``(p, x) -> (query, key, value)``.
        text_mask: on the segments layout, (1, 1, n, n) additive scores of the longest text, whose top-left (m, m)
            a text of m tokens adds (ModernBERT's window), or None.
        head_mask: (nh,), 1 keeps a head (runs the eager path).
        impl: "eager" or "sdpa".
        need_probs: return the probabilities (runs the eager path).
        generator: turns dropout on (training).
        trace: records (and edits) ``query`` ... ``v``, ``q_rotated``, ``k_rotated`` (rotary), the scores and
            probabilities (eager path), ``context``, ``merged``, ``head_outputs`` (when asked) and ``dense``.

    Returns:
        ``(dense (B, S, H), probs or None, (k, v))``: the output projection (what is added to the residual
        stream; on segments (1, T + pad or r, H)), the probabilities where the eager path ran (on segments each text's
        (1, nh, n, n), a tuple in the texts' order), the rotated keys and the values.

    Raises:
        InputError: the segments layout with dropout.
    """
    cfg = p.config
    hd = cfg.head_dim
    segments = mask if isinstance(mask, Segments) else None
    inference_only(mask, {"dropout": generator is not None})
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    query, key, value = project(p, x)  # (B, S, nh*hd) each
    query, key, value = trace("query", query), trace("key", key), trace("value", value)
    nh = query.shape[-1] // hd
    q, k, v = (split_heads(t, nh) for t in (query, key, value))  # (B, nh, S, hd) each
    q, k, v = trace("q", q), trace("k", k), trace("v", v)
    if cos is not None:
        q = trace("q_rotated", rotate(q, cos, sin))  # each pair of q turned by its position's angle
        k = trace("k_rotated", rotate(k, cos, sin))

    p_drop = cfg.attention_probs_dropout_prob if generator is not None else 0.0
    if on_padded_view(mask, trace, head_mask):  # the texts as a padded batch (b, S): the padded pass's points
        q_, k_, v_, mask, inner = padded_view(segments, q, k, v, trace, text_mask)  # (b, nh, S, hd) each
        context, probs = attend(q_, k_, v_, mask, head_mask, impl, need_probs or inner.keep, p_drop, generator,
                                inner)  # (b, nh, S, hd)
        (merged,) = segments.rows(segments.laid(merge_heads(context)))  # (1, T + pad or r, nh*hd)
        probs = text_probs(segments, probs) if need_probs else None  # each text's (1, nh, n, n)
    elif segments is not None:  # each text attends to itself
        maps: list[Tensor] = []  # with need_probs, each call's (c, nh, m, m)

        def one(qi: Tensor, ki: Tensor, vi: Tensor, keys: Tensor | None) -> Tensor:  # (c, nh, m, hd): c texts
            m = qi.shape[2]
            added = with_keys(text_mask[..., :m, :m] if text_mask is not None else None, keys)  # (c or 1, 1, m, m)
            if not need_probs:
                return sdpa_attention(qi, ki, vi, added)
            context, probs = eager_attention(qi, ki, vi, added)
            maps.append(probs)
            return context

        (merged,) = segments.rows(segments.attend(q, k, v, one))  # (1, T + pad or r, nh*hd)
        probs = tuple(call[j:j + 1, :, :n, :n] for call, ns in zip(maps, segments.calls()) for j, n in enumerate(ns)) \
            if need_probs else None  # each text's (1, nh, n, n)
    else:
        context, probs = attend(q, k, v, mask, head_mask, impl, need_probs, p_drop, generator, trace)  # (B, nh, S, hd)
        merged = merge_heads(context)  # (B, S, nh*hd)
    merged = trace("merged", merged)
    weight, bias = p["output.dense.weight"], p.get("output.dense.bias")
    if trace.wants("head_outputs"):
        heads = trace("head_outputs", head_outputs(merged, weight, nh))  # (B, nh, S, H)
        out = heads.sum(dim=1) if bias is None else heads.sum(dim=1) + bias
    else:
        out = linear(merged, weight, bias)  # (B, S, H)
    out = dropout(out, cfg.attention_output_dropout, generator)
    return AttentionOutput(trace("dense", out), probs, (k, v))


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, head_mask: Tensor | None, impl: str,
           need_probs: bool, p_drop: float, generator: torch.Generator | None,
           trace: Trace) -> tuple[Tensor, Tensor | None]:
    """The heads' attention on the padded layout (or the padded view of segments), through the path that runs:
    eager where the probabilities are needed (returned, edited, head-masked or dropped out), else ``impl``
    (:func:`~bertfn.model.attention.chosen_impl`), as ``EsmSelfAttention`` and ``ModernBertAttention`` attend.

    Args:
        q: (B, nh, S, hd), rotated.
        k: (B, nh, S, hd), rotated.
        v: (B, nh, S, hd).
        mask: additive, broadcastable to (B, nh, S, S), or None.
        head_mask: (nh,), or None.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        p_drop: the attention dropout probability in effect.
        generator: turns dropout on (training).
        trace: records (and edits) the eager path's points and ``context``.

    Returns:
        ``(context (B, nh, S, hd), probs (B, nh, S, S) or None)``.
    """
    need_probs = need_probs or trace.edits_any(WEIGHT_POINTS)
    if chosen_impl(impl, need_probs, head_mask, p_drop) == "eager":
        context, probs = eager_attention(q, k, v, mask, None, head_mask, p_drop, generator, trace)
    else:
        context, probs = sdpa_attention(q, k, v, mask), None
    return trace("context", context), probs


def mlp(p: Params, x: Tensor, generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> Tensor:
    """BERT's feed-forward without its residual and LayerNorm: ``W_2 act(W_1 x + b_1) + b_2`` (ESM-2's).

    Mirrors ``EsmIntermediate`` + ``EsmOutput.dense`` (ESM's own ``gelu`` is the exact-erf GELU).

    Args:
        p: one layer's scope (reads ``intermediate.dense.*`` and ``output.dense.*``).
        x: (B, S, H), the normalized input.
        generator: turns dropout on (training).
        trace: records (and edits) ``intermediate`` (B, S, I) and ``dense`` (B, S, H).

    Returns:
        (B, S, H).
    """
    cfg = p.config
    h = linear(x, p["intermediate.dense.weight"], p.get("intermediate.dense.bias"), cfg.hidden_act)  # (B, S, I)
    h = trace("intermediate", h)
    h = linear(h, p["output.dense.weight"], p.get("output.dense.bias"))  # (B, S, H)
    return trace("dense", dropout(h, cfg.hidden_dropout_prob, generator))


def pre_ln_layer(p: Params, x: Tensor, mask: Mask, cos: Tensor, sin: Tensor, *, project: Project,
                 feed_forward: FeedForward, text_mask: Tensor | None = None, head_mask: Tensor | None = None,
                 impl: str = "eager", need_probs: bool = False, generator: torch.Generator | None = None,
                 trace: Trace = NO_TRACE) -> LayerOutput:
    """One pre-LN layer: ``a = x + Attn(LN_1(x))``, ``h = a + FFN(LN_2(a))`` (``EsmLayer``, ``ModernBertEncoderLayer``).

    LN_1 is left out where the checkpoint has no ``attention_norm`` (ModernBERT's layer 0). On the segments layout
    every step after attention runs at the rows the layout reads (``Segments.read`` at the last layer).

    Args:
        p: one layer's scope.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: additive attention mask, or None; or :class:`~bertfn.model.layout.Segments`.
        cos: the rotary tables of this layer's positions and base, or None (learned positions: no turn).
        sin: the same.
        project: how the queries, keys and values are formed (:data:`Project`).
        feed_forward: the feed-forward branch (:data:`FeedForward`).
        text_mask: on segments, the scores each text adds (:func:`rotary_attention`), or None.
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) ``attention.norm``, the attention block's points, ``attention.output``
            (the residual sum), ``ffn.norm``, the branch's points, ``ffn.output`` and ``output``.

    Returns:
        The new hidden states (B, S, H) (on segments (1, T + pad or r, H)) with the probabilities and keys/values
        (:class:`LayerOutput`).
    """
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape
    h = trace("attention.norm", norm(p, "attention_norm", x)) if "attention_norm.weight" in p else x
    a = rotary_attention(p.scope("attention"), h, mask, cos, sin, project=project, text_mask=text_mask,
                         head_mask=head_mask, impl=impl, need_probs=need_probs, generator=generator,
                         trace=trace.scope("attention"))
    if isinstance(mask, Segments):
        (x,) = mask.rows(x)  # (1, T + pad or r, H): the residual stream at the rows read
    x = trace("attention.output", x + a.hidden)  # (B, S, H): the residual stream after attention
    h = trace("ffn.norm", norm(p, "ffn_norm", x))
    x = trace("ffn.output", x + feed_forward(p, h, generator, trace.scope("ffn")))  # (B, S, H)
    return LayerOutput(trace("output", x), a.probs, None, a.kv, None)


def final_norm(p: Params, x: Tensor, trace: Trace = NO_TRACE) -> Tensor:
    """The LayerNorm after the last pre-LN layer (ESM-2's ``emb_layer_norm_after``, ModernBERT's ``final_norm``).

    Args:
        p: the base model's scope (``bert.``; reads ``encoder.final_norm.*``).
        x: (B, S, H), the last layer's output.
        trace: records (and edits) ``final_norm``.

    Returns:
        (B, S, H): the last hidden state the heads read.
    """
    return trace("final_norm", norm(p, "encoder.final_norm", x))
