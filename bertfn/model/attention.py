"""Multi-head attention (``transformers.BertAttention`` = ``BertSelfAttention`` + ``BertSelfOutput``).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d) + M) V             (Vaswani et al. 2017, eq. 1)
    MultiHead(x)       = LayerNorm(x + Concat(head_1..head_nh) W_O)   (sec. 3.2.2, plus BERT's residual + LN)

Keys read (under ``bert.encoder.layer.{i}.attention.`` or ``...crossattention.``):
``self.query|key|value.weight`` (nh*hd, H) and ``.bias``, ``output.dense.weight`` (H, nh*hd) and
``.bias``, ``output.LayerNorm.weight|bias`` (H,), and for relative positions
``self.distance_embedding.weight`` (2P-1, hd) (:func:`~bertfn.model.embeddings.relative_position_scores`).

The tokens come in one of two layouts (:mod:`bertfn.model.layout`). Padded (B, S): masks are *additive*, 0 where a
key may be attended, ``finfo(dtype).min`` where it may not, shaped (B, 1, S_q or 1, S_k) so they broadcast over heads
(:func:`~bertfn.model.layout.extended_mask` builds one from the 0/1 padding mask a tokenizer gives); a query whose every
key is masked gets finite outputs on both paths in fp32, fp16 and bf16 (in fp32 it attends uniformly to all keys, as
in transformers). Segments (1, T): texts laid end to end, every step the same except that each text attends to its own
slice (:func:`text_attention`).

Two paths compute the same numbers. :func:`eager_attention` is the reference, written step by step.
``impl="sdpa"`` hands the same Q, K, V and additive mask to ``torch.nn.functional.scaled_dot_product_attention``
(fused, faster, but it never materialises the probabilities). The eager path is used whenever the
probabilities are needed: ``output_attentions``, a head mask, or attention dropout.

:func:`attention` is the encoder's block, step by step; a decoder's, over a cache of keys and values or an encoder's
states, is built of the same steps in :mod:`bertfn.model.decoding`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..errors import InputError
from .embeddings import position_scores, relative_position_scores
from .functional import dropout, fused_attention, layer_norm, linear, linears
from .layout import Mask, Segments, causal_scores, with_keys
from .masks import check_attention
from .params import Params, scoped
from .recorder import NO_TRACE, WEIGHT_POINTS, Trace
from .segment_points import PaddedView, inference_only, on_padded_view, padded_view

Tensor = torch.Tensor
KV = tuple[Tensor, Tensor]
"""One layer's cached keys and values, each (B, nh, S_k, hd)."""

ATTENTION_IMPLS = ("eager", "sdpa")

def split_heads(x: Tensor, nh: int) -> Tensor:
    """(B, S, nh*hd) -> (B, nh, S, hd): one slice of width hd per head (HF ``transpose_for_scores``).

    Args:
        x: (B, S, nh*hd).
        nh: the number of heads.

    Returns:
        (B, nh, S, hd).
    """
    B, S, _ = x.shape
    return x.view(B, S, nh, -1).transpose(1, 2)  # view: (B, S, nh, hd); transpose: (B, nh, S, hd)


def merge_heads(x: Tensor) -> Tensor:
    """(B, nh, S, hd) -> (B, S, nh*hd), the inverse of :func:`split_heads`.

    The transpose makes the tensor non-contiguous, so this needs ``reshape`` (a copy), not ``view``.

    Args:
        x: (B, nh, S, hd).

    Returns:
        (B, S, nh*hd).
    """
    B, nh, S, hd = x.shape
    return x.transpose(1, 2).reshape(B, S, nh * hd)


def separate_projections(p: Params, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values by three products, as BERT's attention forms them (a member's
    layer that forms them so: ESM-2's ``project``, DeBERTa's, MPNet's).

    Args:
        p: one attention block's scope (reads ``self.query|key|value.weight`` and their biases).
        x: (B, S, H).

    Returns:
        query, key, value: each (B, S, nh*hd).
    """
    names = ("query", "key", "value")
    return tuple(linears(x, tuple(p[f"self.{n}.weight"] for n in names), tuple(p.get(f"self.{n}.bias") for n in names)))


def eager_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, bias: Tensor | None = None,
                    head_mask: Tensor | None = None, p_drop: float = 0.0, generator: torch.Generator | None = None,
                    trace: Trace = NO_TRACE) -> tuple[Tensor, Tensor]:
    """The reference scaled dot-product attention, one step per line.

    ``softmax(Q K^T / sqrt(d) + M) V`` (Vaswani et al. 2017, eq. 1), as ``BertSelfAttention``'s eager path.

    Args:
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        v: (B, nh, S_k, hd).
        mask: additive (0 = attend, ``finfo.min`` = ignore; :func:`~bertfn.model.layout.extended_mask` makes it
            of a 0/1 mask, which is refused here), broadcastable to (B, nh, S_q, S_k).
        bias: relative-position scores added before scaling.
        head_mask: (nh,) or broadcastable to the probabilities, multiplies them (1 keeps a head, 0 silences it).
        p_drop: the dropout probability of the attention probabilities (with ``generator``).
        generator: turns dropout on (training).
        trace: records (and edits) ``scores``, ``scaled_scores``, ``masked_scores`` and ``probs``.

    Returns:
        context: (B, nh, S_q, hd).
        probs: (B, nh, S_q, S_k), the probabilities.
    """
    check_attention(q, k, v, mask, head_mask)
    hd = q.shape[-1]
    scores = q @ k.transpose(-1, -2)  # (B, nh, S_q, S_k)
    scores = trace("scores", scores)
    if bias is not None:
        scores = scores + bias
    scores = scores / math.sqrt(hd)  # keeps the logits' spread independent of hd
    scores = trace("scaled_scores", scores)
    if mask is not None:
        # Masked keys get finfo.min, i.e. probability 0 after softmax. In fp16 finfo.min plus a negative
        # score overflows to -inf, and a row with every key masked would softmax to NaN: the clamp puts
        # such scores back at finfo.min (a no-op in fp32, where no score comes near it).
        scores = (scores + mask).clamp(min=torch.finfo(scores.dtype).min)
    scores = trace("masked_scores", scores)
    probs = torch.softmax(scores, dim=-1)  # (B, nh, S_q, S_k), each row sums to 1
    probs = dropout(probs, p_drop, generator)
    if head_mask is not None:
        probs = probs * (head_mask.view(-1, 1, 1) if head_mask.dim() == 1 else head_mask)
    probs = trace("probs", probs)
    context = probs @ v  # (B, nh, S_q, hd)
    return context, probs


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, bias: Tensor | None = None) -> Tensor:
    """The same attention as :func:`eager_attention` through torch's fused kernel (no probabilities).

    A relative-position ``bias`` is folded into the additive mask as ``bias / sqrt(hd)``.

    Args:
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        v: (B, nh, S_k, hd).
        mask: additive (0 = attend, ``finfo.min`` = ignore; :func:`~bertfn.model.layout.extended_mask` makes it
            of a 0/1 mask, which is refused here), broadcastable to (B, nh, S_q, S_k).
        bias: relative-position scores, as in :func:`eager_attention`.

    Returns:
        context (B, nh, S_q, hd).
    """
    check_attention(q, k, v, mask)
    if bias is not None:
        bias = bias / math.sqrt(q.shape[-1])
        mask = bias if mask is None else (bias + mask).clamp(min=torch.finfo(mask.dtype).min)  # as in eager
    return fused_attention(q, k, v, mask)


def chosen_impl(impl: str, need_probs: bool, head_mask: Tensor | None, p_drop: float) -> str:
    """The attention path that runs: ``impl``, except eager whenever the probabilities are needed.

    They are needed when returned, multiplied by a head mask, or dropped out, which the fused kernel
    cannot give.

    Args:
        impl: "eager" or "sdpa".
        need_probs: whether the probabilities are returned (or edited).
        head_mask: the head mask, if any.
        p_drop: the attention dropout probability in effect.

    Returns:
        "eager" or "sdpa".

    Raises:
        InputError: an unknown ``impl``.
    """
    if impl not in ATTENTION_IMPLS:
        raise InputError(f"impl must be one of {ATTENTION_IMPLS}, got {impl!r}")
    return "eager" if need_probs or head_mask is not None or p_drop > 0 else impl


def head_outputs(merged: Tensor, weight: Tensor, nh: int) -> Tensor:
    """Each head's write into the residual stream: its context times its hd columns of ``W_O``, no bias.

    ``Concat(head_1..head_nh) W_O^T = sum_h head_h W_O[:, h*hd:(h+1)*hd]^T`` (Vaswani et al. 2017, sec. 3.2.2,
    split by head; Elhage et al. 2021's "heads write independently into the residual stream"), the
    product ``BertSelfOutput.dense`` computes in one step. Summed over the heads, plus the bias, it is that
    product to float rounding (about 1e-6 in fp32: the sum runs in another order than the fused matmul's).

    Args:
        merged: (B, S, nh*hd), the heads' contexts side by side (the ``merged`` point).
        weight: (H, nh*hd), ``output.dense.weight``; its columns h*hd .. (h+1)*hd - 1 belong to head h.
        nh: the heads this layer has (fewer than the config's when pruned).

    Returns:
        (B, nh, S, H): head h's term of the output projection at every position.
    """
    H = weight.shape[0]
    hd = weight.shape[1] // nh
    per_head = split_heads(merged, nh)  # (B, nh, S, hd): the (possibly edited) merged point, split again
    w = weight.reshape(H, nh, hd)  # (H, nh, hd): head h's columns of W_O
    return torch.einsum("bnsd,knd->bnsk", per_head, w)  # (B, nh, S, H)


class AttentionOutput(NamedTuple):
    hidden: Tensor  # (B, S_q, H) after output dense, residual and LayerNorm
    probs: Tensor | None  # (B, nh, S_q, S_k) when the eager path ran, else None
    kv: KV  # the keys and values attended to, each (B, nh, S_k, hd): the new cache entry


def attention(
    p: Params,
    x: Tensor,
    mask: Mask = None,
    *,
    head_mask: Tensor | None = None,
    impl: str = "eager",
    need_probs: bool = False,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
) -> AttentionOutput:
    """One BERT attention block: Q/K/V, heads, attention, merge, output dense, residual + LayerNorm.

    Mirrors ``transformers.BertAttention`` (``BertSelfAttention`` + ``BertSelfOutput``):
    ``LayerNorm(x + Concat(head_1..head_nh) W_O)``, the keys and values from x itself. A decoder's self-attention
    over cached keys and its cross-attention to an encoder's states are :mod:`bertfn.model.decoding`'s, built of the
    same steps.

    Args:
        p: the ``attention.`` scope of one layer, e.g. ``model.params.layer(0).scope("attention")``.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: the layout (:mod:`bertfn.model.layout`): the padded one's additive mask from
            :func:`~bertfn.model.layout.extended_mask`, broadcastable to (B, nh, S, S), or None; or
            :class:`~bertfn.model.layout.Segments`, texts laid end to end, each attending to itself alone (no
            probabilities or dropout; a decoder's see their earlier tokens; :mod:`bertfn.model.segment_points`).
        head_mask: (nh,), 1 keeps a head, 0 silences it (runs the eager path).
        impl: "eager" (reference) or "sdpa" (fused); eager runs anyway where the probabilities are needed.
        need_probs: return the probabilities (runs the eager path).
        generator: turns dropout on (training).
        trace: records (and edits) every step under its name (``query`` ... ``output``,
            :func:`~bertfn.model.point_names.point_names`), on segments in the padded layout's shapes. Where it asks for ``head_outputs``
            (:meth:`~bertfn.model.recorder.Trace.wants`: ``Trace(optional=...)`` or an edit naming it),
            the output projection is computed as the sum of :func:`head_outputs` plus the bias, so an edit
            of one head's write changes the pass; that sum equals the fused product to float rounding
            (about 1e-6 in fp32). Otherwise the pass is the fused product, exactly as without a trace.

    Returns:
        ``(hidden (B, S, H), probs (B, nh, S, S) or None, kv)``: the block's output after the output dense,
            residual and LayerNorm; the probabilities when the eager path ran; the keys and values, each
            (B, nh, S, hd).

    Raises:
        InputError: the scope of a whole layer instead of its attention block, or an unknown ``impl``.
    """
    p, nh = block_scope(p, x)  # nh: fewer than the config's heads where this layer was pruned
    inference_only(mask, {"probabilities": need_probs, "dropout": generator is not None})
    trace = trace.on(mask)  # on segments: each point in the padded layout's shape

    query, key, value = separate_projections(p, x)  # (B, S, nh*hd) each, one product where the kernel can
    query, key, value = trace("query", query), trace("key", key), trace("value", value)
    q, k, v = split_heads(query, nh), split_heads(key, nh), split_heads(value, nh)  # (B, nh, S, hd) each
    q, k, v = trace("q", q), trace("k", k), trace("v", v)

    segments = mask if isinstance(mask, Segments) else None
    if segments is not None and not on_padded_view(segments, trace, head_mask):  # each text attends to itself alone
        merged, probs = segments.attend(q, k, v, lambda *batch: text_attention(p, *batch)), None  # (1, T + pad, nh*hd)
    else:  # on segments the texts as a padded batch (b, S): attention's points as the padded pass forms them
        causal = causal_scores(max(segments.lengths), q.dtype, q.device) if segments and p.config.is_decoder else None
        view = padded_view(segments, q, k, v, trace, causal) if segments else PaddedView(q, k, v, mask, trace)
        context, probs = attend(p, *view[:4], position_scores(p, view.q, view.k, 0, view.trace), head_mask=head_mask,
                                impl=impl, need_probs=need_probs or bool(segments and trace.keep), generator=generator,
                                trace=view.trace)  # (B, nh, S, hd); bias: relative positions' scores, or None
        merged = merge_heads(context) if segments is None else segments.laid(merge_heads(context))  # (B, S, nh*hd)
    if segments is not None:
        merged, x = segments.rows(merged, x)  # (1, T or r, ...): the positions read
        probs = None

    out = attention_output(p, merged, x, generator, trace)  # (B, S, H)
    return AttentionOutput(out, probs, (k, v))


# --- the steps attention() and a decoder's attention (decoding.py) share --------------------------------------------


def block_scope(p: Params, x: Tensor) -> tuple[Params, int]:
    """``p`` checked to be one attention block's scope (``BertAttention``'s weights), not a layer's or the model's,
    and the block's heads; ``x`` checked to be hidden states (B, S, H).

    Args:
        p: what was passed as the block's weights.
        x: the block's input.

    Returns:
        The block's scope, and nh: the config's heads, fewer where the block was pruned (``prune_heads``).

    Raises:
        InputError: the whole model's weights, or a whole layer's.
    """
    p = scoped(p, "attention()", "model.params.layer(0).scope('attention')")
    if "self.query.weight" not in p and "attention.self.query.weight" in p:
        raise InputError(f"attention() reads one attention block, but got the scope of a whole layer ({p.prefix!r}); "
                         "pass its attention scope, e.g. model.params.layer(0).scope('attention')")
    if not isinstance(x, Tensor) or x.dim() != 3:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise InputError(f"attention() takes hidden states (B, S, H), got {got}; a single text is x[None]")
    return p, p["self.query.weight"].shape[0] // p.config.head_dim  # (nh*hd, H) // hd


def attend(p: Params, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, *,
           head_mask: Tensor | None, impl: str, need_probs: bool, generator: torch.Generator | None,
           trace: Trace) -> tuple[Tensor, Tensor | None]:
    """The heads' attention on the padded layout, through the path that runs (:func:`chosen_impl`): eager where the
    probabilities are needed (returned, edited, head-masked or dropped out), else ``impl``.

    Args:
        p: one attention block's scope (reads the config's attention dropout).
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        v: (B, nh, S_k, hd).
        mask: additive, broadcastable to (B, nh, S_q, S_k), or None.
        bias: relative-position scores, or None.
        head_mask: (nh,), or None.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the eager path's points and ``context``.

    Returns:
        ``(context (B, nh, S_q, hd), probs (B, nh, S_q, S_k) or None)``: probs where the eager path ran.

    Raises:
        InputError: an unknown ``impl``.
    """
    p_drop = p.config.attention_probs_dropout_prob if generator is not None else 0.0
    need_probs = need_probs or trace.edits_any(WEIGHT_POINTS)  # an edit of the weights needs them formed
    if chosen_impl(impl, need_probs, head_mask, p_drop) == "eager":
        context, probs = eager_attention(q, k, v, mask, bias, head_mask, p_drop, generator, trace)
    else:
        context, probs = sdpa_attention(q, k, v, mask, bias), None
    return trace("context", context), probs


def attention_output(p: Params, merged: Tensor, x: Tensor, generator: torch.Generator | None,
                     trace: Trace) -> Tensor:
    """The block's output: the heads' merged contexts through the output dense, dropout, then residual + LayerNorm
    (``BertSelfOutput``).

    Args:
        p: one attention block's scope (reads ``output.dense.*`` and ``output.LayerNorm.*``).
        merged: (B, S, nh*hd), the heads' contexts side by side (:func:`merge_heads`).
        x: (B, S, H), the block's input (the residual).
        generator: turns dropout on (training).
        trace: records (and edits) ``merged``, ``head_outputs`` where it asks for them, ``dense`` and ``output``.

    Returns:
        (B, S, H).
    """
    cfg = p.config
    merged = trace("merged", merged)
    if trace.wants("head_outputs"):  # each head's write, the sum of which is the output projection
        heads = trace("head_outputs", head_outputs(merged, p["output.dense.weight"], merged.shape[-1] // cfg.head_dim))
        out = heads.sum(dim=1) + p["output.dense.bias"]  # (B, S, H), heads: (B, nh, S, H)
    else:
        out = linear(merged, p["output.dense.weight"], p["output.dense.bias"])  # (B, S, H)
    out = dropout(out, cfg.attention_output_dropout, generator)
    out = trace("dense", out)
    out = layer_norm(out + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], cfg.layer_norm_eps)
    return trace("output", out)


def text_attention(p: Params, q: Tensor, k: Tensor, v: Tensor, keys: Tensor | None = None) -> Tensor:
    """The attention of c texts on the segments layout (:meth:`~bertfn.model.layout.Segments.attend`): a batch of c
    texts of m tokens each, nothing padded or its padding's keys masked, relative positions counted from each text's
    start, a decoder's queries seeing only their text's earlier tokens.

    Args:
        p: one layer's ``attention.`` scope (reads ``self.distance_embedding.weight`` for relative positions).
        q: (c, nh, m, hd), the texts' queries.
        k: (c, nh, m, hd).
        v: (c, nh, m, hd).
        keys: (c, 1, 1, m), the padding's additive mask (:func:`~bertfn.model.layout.padding_keys`), or None.

    Returns:
        context (c, nh, m, hd).
    """
    cfg = p.config
    m = q.shape[2]
    bias = mask = None
    if cfg.relative_positions:
        bias = relative_position_scores(q, k, p["self.distance_embedding.weight"], cfg.position_embedding_type, 0)
    if cfg.is_decoder:
        mask = causal_scores(m, q.dtype, q.device)  # (1, 1, m, m)
    return sdpa_attention(q, k, v, with_keys(mask, keys), bias)
