"""The fast path of the pre-LN members (ESM-2, ModernBERT): their texts laid end to end, as unpadded.py lays BERT's.

The same layout as :mod:`bertfn.fast.unpadded`: the texts' tokens form one sequence (1, T, H) for every step that
treats tokens one at a time (the LayerNorms, the products, the GeGLU or GELU), and attention runs on each text's
slice alone. Built from the reference pieces in :func:`~bertfn.model.members.prenorm.pre_ln_layer`'s order, with what
the member's :class:`~bertfn.model.family.Family` record says of it: each layer's rotary base (``rotary_base``)
turning each text's queries and keys by its own positions (from 0, as :func:`~bertfn.fast.batching.end_to_end`
counts them), ModernBERT's local window within each text (``window``, :func:`~bertfn.model.members.modernbert.window_mask`
of the text's length), a gated feed-forward (``gated``), ESM-2's token dropout counted per text (its embeddings
step runs one text at a time, which costs a lookup each). The queries, keys and values come from one fused
weight (``self.qkv``) where the checkpoint has one, else from three, as the reference reads them.

The products run on the kernels :mod:`bertfn.fast.choice` picks; each text's hidden states equal the reference
encoder's on that text (tests/test_fast_path.py), and so do its attention probabilities where they are asked for
(:func:`unpadded_pre_ln_attentions`: ESM-2's contacts). Inference only: no dropout, head mask or trace.
"""

from __future__ import annotations

import torch

from ..model.attention import eager_attention, sdpa_attention, split_heads
from ..model.family import family_of
from ..model.functional import ACTIVATIONS
from ..model.members.modernbert import window_mask
from ..model.params import Params
from ..model.members.prenorm import norm
from ..model.members.rotary import rotary_tables, rotate
from .choice import linear, linears

Tensor = torch.Tensor


def unpadded_rotary_attention(p: Params, x: Tensor, lengths: list[int], cos: Tensor, sin: Tensor,
                              window: int | None, rows: Tensor | None = None,
                              need_probs: bool = False) -> tuple[Tensor, list[Tensor] | None]:
    """:func:`~bertfn.model.members.prenorm.rotary_attention` for texts laid end to end: each attends to itself.

    By the fused kernel (SDPA), or with ``need_probs`` by :func:`~bertfn.model.attention.eager_attention`, whose
    probabilities each text's attention then returns (ESM-2's contact head reads them).

    Args:
        p: one layer's ``attention.`` scope.
        x: (1, T, H), the normalized input, T = sum(lengths).
        lengths: the texts' lengths.
        cos: (1, 1, T, hd), the rotary tables of every token's position within its text, or None (learned
            positions, ESM-1b: no turn).
        sin: the same.
        window: the layer's window (each text's keys within ``window // 2`` of the query), or None.
        rows: (r,) positions whose output is wanted (default: all T).
        need_probs: form each text's attention probabilities.

    Returns:
        ``(dense, probs)``: (1, T, H) or (1, r, H), the output projection, what is added to the residual stream; and
        with ``need_probs`` each text's probabilities (1, nh, n, n), else None.
    """
    cfg = p.config
    if "self.qkv.weight" in p:  # ModernBERT's one fused product
        query, key, value = linear(x, p["self.qkv.weight"], p.get("self.qkv.bias")).chunk(3, dim=-1)
    else:
        names = ("query", "key", "value")
        query, key, value = linears(x, tuple(p[f"self.{n}.weight"] for n in names),
                                    tuple(p[f"self.{n}.bias"] for n in names))  # 3 x (1, T, nh*hd)
    nh = query.shape[-1] // cfg.head_dim
    q, k = split_heads(query, nh), split_heads(key, nh)  # (1, nh, T, hd) each
    if cos is not None:
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)  # each token turned by its own position
    v = split_heads(value, nh)
    contexts = []  # each text's (1, n, nh, hd)
    maps = [] if need_probs else None  # each text's (1, nh, n, n)
    for qi, ki, vi in zip(q.split(lengths, dim=2), k.split(lengths, dim=2), v.split(lengths, dim=2)):
        n = qi.shape[2]
        mask = window_mask(None, n, window, x.dtype, x.device) if window is not None else None  # (1, 1, n, n)
        if need_probs:
            context, probs = eager_attention(qi, ki, vi, mask)  # (1, nh, n, hd), (1, nh, n, n)
            maps.append(probs)
        else:
            context = sdpa_attention(qi, ki, vi, mask)  # (1, nh, n, hd)
        contexts.append(context.transpose(1, 2))
    merged = torch.cat(contexts, dim=1).flatten(2) if len(contexts) > 1 else contexts[0].flatten(2)  # (1, T, nh*hd)
    if rows is not None:
        merged = merged[:, rows]  # (1, r, nh*hd)
    return linear(merged, p["output.dense.weight"], p.get("output.dense.bias")), maps


def unpadded_feed_forward_branch(p: Params, x: Tensor, gated: bool) -> Tensor:
    """The feed-forward branch on the fast path's kernels: :func:`~bertfn.model.members.prenorm.mlp` or, ``gated``,
    :func:`~bertfn.model.members.modernbert.geglu`.

    Args:
        p: one layer's scope.
        x: (1, T, H), the normalized input.
        gated: ``Wo (act(a) * g)`` with ``[a, g] = Wi x``, else ``Wo act(Wi x)``.

    Returns:
        (1, T, H).
    """
    act = p.config.hidden_act
    if gated:
        a, g = linear(x, p["intermediate.dense.weight"], p.get("intermediate.dense.bias")).chunk(2, dim=-1)
        h = ACTIVATIONS[act](a) * g  # (1, T, I)
    else:
        h = linear(x, p["intermediate.dense.weight"], p.get("intermediate.dense.bias"), act)  # (1, T, I)
    return linear(h, p["output.dense.weight"], p.get("output.dense.bias"))


def unpadded_pre_ln_encoder(params: Params, input_ids: Tensor, position_ids: Tensor, lengths: list[int],
                            rows: Tensor | None = None) -> Tensor:
    """The last hidden states (after the final LayerNorm) of a pre-LN member for texts laid end to end.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        position_ids: (1, T), restarting at 0 for each text.
        lengths: the texts' lengths, summing to T.
        rows: (r,) the positions the caller reads; the last layer's output projection, feed-forward and the final
            LayerNorm run at those alone (its keys and values still at all T).

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    return pre_ln_layers(params, input_ids, position_ids, lengths, rows)[0]


def unpadded_pre_ln_attentions(params: Params, input_ids: Tensor, position_ids: Tensor,
                               lengths: list[int]) -> list[Tensor]:
    """Every layer's attention probabilities of each text laid end to end, as the reference encoder returns them with
    ``output_attentions`` for that text alone (what ESM-2's contact head reads).

    No hidden state is read: the last layer's output projection and feed-forward run at one row alone.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        position_ids: (1, T), restarting at 0 for each text.
        lengths: the texts' lengths, summing to T.

    Returns:
        Per text of n tokens, (L, nh, n, n): layer l's probabilities at [l].
    """
    one = torch.zeros(1, dtype=torch.long, device=input_ids.device)
    _, maps = pre_ln_layers(params, input_ids, position_ids, lengths, one, need_probs=True)
    return [torch.cat([layer[t] for layer in maps]) for t in range(len(lengths))]  # each (L, nh, n, n)


def pre_ln_layers(params: Params, input_ids: Tensor, position_ids: Tensor, lengths: list[int],
                  rows: Tensor | None = None, need_probs: bool = False) -> tuple[Tensor, list[list[Tensor]] | None]:
    """The pre-LN encoder over texts laid end to end: :func:`unpadded_pre_ln_encoder`'s hidden states and, with
    ``need_probs``, each layer's attention probabilities (:func:`unpadded_rotary_attention`).

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        position_ids: (1, T), restarting at 0 for each text.
        lengths: the texts' lengths, summing to T.
        rows: as :func:`unpadded_pre_ln_encoder` takes them.
        need_probs: form every layer's probabilities.

    Returns:
        ``(hidden, maps)``: (1, T or r, H), and per layer the texts' (1, nh, n, n) probabilities, or None.
    """
    cfg = params.config
    family = family_of(cfg)
    p = params.scope("bert")
    texts = input_ids.split(lengths, dim=1)  # one embeddings step per text: ESM-2 counts each text's masks
    x = torch.cat([family.embeddings(p.scope("embeddings"), ids) for ids in texts], dim=1)  # (1, T, H)
    tables: dict[float, tuple[Tensor, Tensor]] = {}  # rotary base -> (cos, sin), shared by the layers of one base
    maps = [] if need_probs else None  # per layer, each text's (1, nh, n, n)
    last = cfg.num_hidden_layers - 1
    for i in range(cfg.num_hidden_layers):
        layer = p.scope(f"encoder.layer.{i}")
        base = family.rotary_base(cfg, i)  # None: learned positions (ESM-1b), no turn
        if base is None:
            tables[base] = (None, None)
        elif base not in tables:
            tables[base] = rotary_tables(position_ids, cfg.head_dim, base, x.dtype)  # (1, 1, T, hd) each
        window = family.window(cfg, i) if family.window is not None else None
        at = rows if i == last else None
        h = norm(layer, "attention_norm", x) if "attention_norm.weight" in layer else x
        a, probs = unpadded_rotary_attention(layer.scope("attention"), h, lengths, *tables[base], window, at, need_probs)
        if need_probs:
            maps.append(probs)
        x = (x if at is None else x[:, at]) + a  # (1, T or r, H)
        x = x + unpadded_feed_forward_branch(layer, norm(layer, "ffn_norm", x), family.gated)
    return family.final_norm(p, x), maps
