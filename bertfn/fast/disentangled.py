"""The fast path of DeBERTa's layer: its texts laid end to end, as unpadded.py lays BERT's.

The same layout as :mod:`bertfn.fast.unpadded`: the texts' tokens form one sequence (1, T, H) for every step that
treats tokens one at a time (the embeddings, the query, key, value and output products, the feed-forward, the
LayerNorms), on the kernels :mod:`bertfn.fast.choice` picks; attention runs on each text's slice alone, with
:func:`~bertfn.model.members.deberta_attention.disentangled_attention`'s three terms in its order (content to content,
then c2p and p2c, each divided by ``sqrt(hd * (1 + terms))``).

One saving is the fast path's own: the positional keys and queries (``rel_embeddings`` through ``pos_key_proj`` and
``pos_query_proj``) are formed once per layer for the whole group, and only at the table's rows that the longest
text's distances reach (:func:`reached_rows`): at most ``2n - 1`` of its ``2k`` rows (DeBERTa-v3: 512), where the
reference forms all of them in every layer, for every batch. For a sentence of 12 tokens those two products are most
of a layer's work. Which row each query and key reads is worked out once per call too (:func:`table_rows`). The rows
formed are the same products, so each text's hidden states equal the reference encoder's
on that text (tests/test_fast_path.py). Inference only: no dropout, head mask or trace.
"""

from __future__ import annotations

import torch

from ..model.attention import split_heads
from ..model.config import BertConfig
from ..model.family import family_of
from ..model.functional import layer_norm
from ..model.members.deberta_attention import conv_layer, relative_embeddings, relative_positions, scale_factor, span
from ..model.params import Params
from .choice import linear, linears
from ..model.encoder import feed_forward

Tensor = torch.Tensor


def reached_rows(n: int, config: BertConfig) -> tuple[int, int]:
    """The rows ``[lo, hi)`` of the distances' table that a text of ``n`` tokens reads (every shorter text reads
    fewer: its distances are the top-left corner of the longer text's).

    A distance d reads row ``clamp(d + k, 0, 2k - 1)`` (c2p) and -d the same way (p2c), d over the bucketed
    ``i - j`` of :func:`~bertfn.model.members.deberta_attention.relative_positions`, which are symmetric about 0.

    Args:
        n: the longest text's tokens.
        config: the model's config.
    """
    k2 = span(config)
    reach = int(relative_positions(n, config).abs().max())  # the farthest bucket, either side
    return max(k2 - reach, 0), min(k2 + reach, 2 * k2 - 1) + 1


def positional_projections(p: Params, rel: Tensor, nh: int) -> dict[str, Tensor]:
    """The positional keys (c2p) and queries (p2c) of one layer at the rows given, by the chosen kernels.

    As :func:`~bertfn.model.members.deberta_attention.disentangled_scores` forms them: ``pos_key_proj`` and
    ``pos_query_proj``, or the content projections where ``share_att_key``.

    Args:
        p: one layer's ``attention.`` scope.
        rel: (R, H), the table's reached rows.
        nh: the layer's heads.

    Returns:
        ``{"c2p": (1, nh, R, hd), "p2c": (1, nh, R, hd)}``, the terms ``pos_att_type`` names.
    """
    cfg = p.config
    names = {"c2p": "self.key" if cfg.share_att_key else "self.pos_key_proj",
             "p2c": "self.query" if cfg.share_att_key else "self.pos_query_proj"}
    return {term: split_heads(linear(rel[None], p[f"{name}.weight"], p[f"{name}.bias"]), nh)  # (1, nh, R, hd)
            for term, name in names.items() if term in cfg.pos_att_type}


def table_rows(n: int, config: BertConfig, lo: int, device: torch.device) -> dict[str, Tensor]:
    """The row of the distances' table that each query and key reads, for texts of up to ``n`` tokens: formed once
    per call, as a shorter text's distances are the top-left corner of the longest text's.

    Args:
        n: the longest text's tokens.
        config: the model's config.
        lo: the first row of the table that the positional projections were formed at (:func:`reached_rows`).
        device: where the indices go.

    Returns:
        ``{"c2p": (n, n), "p2c": (n, n)}`` long, counted from ``lo``: c2p's row for query i and key j at [i, j],
        p2c's for key i and query j at [i, j].
    """
    k2 = span(config)
    rel_pos = relative_positions(n, config, device)  # (n, n): the bucketed i - j
    return {"c2p": torch.clamp(rel_pos + k2, 0, 2 * k2 - 1) - lo, "p2c": torch.clamp(-rel_pos + k2, 0, 2 * k2 - 1) - lo}


def text_context(q: Tensor, k: Tensor, v: Tensor, positional: dict[str, Tensor], table: dict[str, Tensor],
                 config: BertConfig) -> Tensor:
    """One text's attention context: the content term plus c2p and p2c, softmax, times the values (no mask: the
    text is whole).

    Args:
        q: (1, nh, n, hd), the text's queries.
        k: (1, nh, n, hd).
        v: (1, nh, n, hd).
        positional: :func:`positional_projections` of this layer, over the table's rows from ``lo``.
        table: :func:`table_rows` of the longest text, counted from that ``lo``.
        config: the model's config.

    Returns:
        (1, nh, n, hd).
    """
    n, hd = q.shape[2], q.shape[3]
    scale = torch.sqrt(torch.tensor(hd, dtype=torch.float) * scale_factor(config)).to(q.dtype)
    scores = q @ (k.transpose(-1, -2) / scale)  # (1, nh, n, n): content to content
    shape = (1, q.shape[1], n, n)
    if "c2p" in positional:
        index = table["c2p"][:n, :n].expand(shape)  # (1, nh, n_q, n_k)
        scores = scores + torch.gather(q @ positional["c2p"].transpose(-1, -2), -1, index) / scale
    if "p2c" in positional:
        index = table["p2c"][:n, :n].expand(shape)  # (1, nh, n_k, n_q)
        scores = scores + torch.gather(k @ positional["p2c"].transpose(-1, -2), -1, index).transpose(-1, -2) / scale
    return torch.softmax(scores, dim=-1) @ v  # (1, nh, n, hd)


def unpadded_disentangled_attention(p: Params, x: Tensor, lengths: list[int], rel: Tensor | None,
                                    table: dict[str, Tensor], rows: Tensor | None = None) -> Tensor:
    """:func:`~bertfn.model.members.deberta_attention.disentangled_attention` for texts laid end to end.

    Args:
        p: one layer's ``attention.`` scope.
        x: (1, T, H), the texts one after another, T = sum(lengths).
        lengths: the texts' lengths.
        rel: (R, H), the distances' table at the rows the texts reach (:func:`reached_rows`), or None without
            ``relative_attention``.
        table: :func:`table_rows` of the longest text, counted from the row ``rel`` starts at (empty without
            ``relative_attention``).
        rows: (r,) positions whose output is wanted (default: all T); every position is still attended to.

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    cfg = p.config
    names = ("query", "key", "value")
    qkv = linears(x, tuple(p[f"self.{n}.weight"] for n in names), tuple(p[f"self.{n}.bias"] for n in names))
    nh = qkv[0].shape[-1] // cfg.head_dim
    q, k, v = (split_heads(t, nh) for t in qkv)  # each (1, nh, T, hd)
    positional = positional_projections(p, rel, nh) if rel is not None else {}
    contexts = [text_context(qi, ki, vi, positional, table, cfg).transpose(1, 2)  # (1, n, nh, hd) each
                for qi, ki, vi in zip(q.split(lengths, dim=2), k.split(lengths, dim=2), v.split(lengths, dim=2))]
    merged = torch.cat(contexts, dim=1).flatten(2)  # (1, T, nh*hd)
    if rows is not None:
        merged, x = merged[:, rows], x[:, rows]  # (1, r, nh*hd), (1, r, H)
    out = linear(merged, p["output.dense.weight"], p["output.dense.bias"])  # (1, T or r, H)
    return layer_norm(out + x, p["output.LayerNorm.weight"], p["output.LayerNorm.bias"], cfg.layer_norm_eps)


def unpadded_deberta_encoder(params: Params, input_ids: Tensor, token_type_ids: Tensor, position_ids: Tensor,
                             lengths: list[int], rows: Tensor | None = None) -> Tensor:
    """The last hidden states of DeBERTa's encoder for texts laid end to end.

    The convolution after the first layer (``conv_kernel_size``) runs on each text's slice, its padding at the
    text's own ends.

    Args:
        params: the root view of a loaded model.
        input_ids: (1, T), the texts one after another.
        token_type_ids: (1, T).
        position_ids: (1, T), restarting at 0 for each text (read where ``position_biased_input``).
        lengths: the texts' lengths, summing to T.
        rows: (r,) the positions the caller reads; the last layer's attention output and feed-forward run at those
            alone (not when that layer is the first and a convolution follows it: it reads every position).

    Returns:
        (1, T, H), or (1, r, H) with ``rows``.
    """
    cfg = params.config
    p = params.scope("bert")
    x = family_of(cfg).embeddings(p.scope("embeddings"), input_ids, token_type_ids, position_ids)  # (1, T, H)
    rel, table = None, {}
    if cfg.relative_attention:
        lo, hi = reached_rows(max(lengths), cfg)
        rel = relative_embeddings(p)[lo:hi]  # (R, H): LayerNormed row by row, so the rows alone are the same
        table = table_rows(max(lengths), cfg, lo, x.device)  # every layer reads the same rows
    conv = cfg.conv_kernel_size > 0
    last = cfg.num_hidden_layers - 1
    for i in range(cfg.num_hidden_layers):
        layer = p.scope(f"encoder.layer.{i}")
        at = rows if i == last and not (conv and i == 0) else None
        h = unpadded_disentangled_attention(layer.scope("attention"), x, lengths, rel, table, at)
        h = feed_forward(layer, h)  # (1, T or r, H)
        if conv and i == 0:  # each text's slice: its layer input e, its layer output o, every token real
            h = torch.cat([conv_layer(p, e, o, x.new_ones(1, e.shape[1]))
                           for e, o in zip(x.split(lengths, dim=1), h.split(lengths, dim=1))], dim=1)  # (1, T, H)
            if i == last and rows is not None:
                h = h[:, rows]
        x = h
    return x
