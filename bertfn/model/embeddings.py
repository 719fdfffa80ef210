"""Token ids -> the first hidden states (``transformers.BertEmbeddings``).

    e = LayerNorm(word[ids] + token_type[type_ids] + position[pos_ids])      (BERT paper, fig. 2)

Keys read (under ``bert.embeddings.``): ``word_embeddings.weight`` (V, H),
``position_embeddings.weight`` (P, H), ``token_type_embeddings.weight`` (T, H),
``LayerNorm.weight`` / ``LayerNorm.bias`` (H,).

Relative positions (``position_embedding_type`` ``relative_key`` or ``relative_key_query``) add no embedding here:
each attention block adds scores of the distance between query and key (:func:`relative_position_scores`, read by
:mod:`bertfn.model.attention` from its ``self.distance_embedding.weight``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import InputError, clipped
from .functional import checkable, dropout, layer_norm
from .params import Params, scoped
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def check_ids(name: str, ids: Tensor, limit: int, what_to_do: str, shape: tuple[int, int] | None = None) -> None:
    """Raise :class:`InputError` unless ``ids`` is an integer tensor whose values index an embedding table.

    The values of ids on the meta device are not checked: they have none (:mod:`bertfn.model.dry_run`'s pass).

    Args:
        name: the argument's name, for the message.
        ids: the ids to check.
        limit: the table's rows: every id must lie in ``[0, limit)``.
        what_to_do: the advice the message ends with.
        shape: (B, S) when given: ``ids`` must also fit the batch, (B, S), (1, S) or (S,).

    Raises:
        InputError: text instead of ids, a tensor that is not of integers, the wrong shape, or an id
            outside the table.
    """
    if isinstance(ids, str) or (isinstance(ids, (list, tuple)) and ids and isinstance(ids[0], str)):
        raise InputError(f"{name} must be token ids, got text ({clipped(ids, 40)}); the model functions read ids: "
                         "enc = model.tokenizer([text, ...]), then pass enc.input_ids and enc.attention_mask "
                         "(or call bertfn.fill_mask / score / embed / trace, which take text)")
    if not isinstance(ids, Tensor) or ids.dtype not in INTEGER_DTYPES:
        kind = f"a {ids.dtype} tensor" if isinstance(ids, Tensor) else f"a {type(ids).__name__}"
        raise InputError(f"{name} must be an integer tensor (torch.long), got {kind}; "
                         f"e.g. torch.tensor(ids, dtype=torch.long)")
    if shape is not None and (ids.dim() not in (1, 2) or ids.shape[-1] != shape[1]
                              or (ids.dim() == 2 and ids.shape[0] not in (1, shape[0]))):
        raise InputError(f"{name} must have shape {shape} (batch, seq) like the input, or ({shape[1]},); "
                         f"got {tuple(ids.shape)}")
    values = checkable(ids)
    if ids.numel() and values is not None and (int(values.min()) < 0 or int(values.max()) >= limit):
        raise InputError(
            f"{name} must lie in [0, {limit}), got values from {int(values.min())} to {int(values.max())}; {what_to_do}"
        )


def default_position_ids(batch: int, seq: int, past: int, device: torch.device) -> Tensor:
    """Positions ``past, past+1, ..., past+seq-1`` for every row (HF's ``position_ids`` buffer).

    Args:
        batch: B.
        seq: S.
        past: the first position (the KV cache's length).
        device: where the tensor goes.

    Returns:
        (B, S).
    """
    return torch.arange(past, past + seq, device=device).expand(batch, seq)


def word_vectors(p: Params, input_ids: Tensor | None, inputs_embeds: Tensor | None) -> Tensor:
    """The word-embedding rows of ``input_ids``, or ``inputs_embeds`` given instead, checked.

    The first term of every embeddings step (BERT's and the family's).

    Args:
        p: ``bert.embeddings.`` scope.
        input_ids: (B, S), or None.
        inputs_embeds: (B, S, H) (the width of the word embeddings), or None; exactly one of the two.

    Returns:
        (B, S, H).

    Raises:
        InputError: both or neither given, or either of the wrong kind, shape or dtype.
    """
    cfg = p.config
    if (input_ids is None) == (inputs_embeds is None):
        raise InputError("pass exactly one of input_ids (B, S) or inputs_embeds (B, S, H)")
    if input_ids is not None:
        check_ids("input_ids", input_ids, cfg.vocab_size, "use the tokenizer that came with the model")
        if input_ids.dim() != 2 or not input_ids.numel():
            raise InputError(f"input_ids must have shape (batch, seq) with at least one token, "
                             f"got {tuple(input_ids.shape)}")
        # a row lookup; padding_idx leaves the [PAD] row out of the gradient, as HF's
        # nn.Embedding(V, H, padding_idx=pad_token_id) does (the forward values are the same)
        words = F.embedding(input_ids, p["word_embeddings.weight"], padding_idx=cfg.pad_token_id)  # (B, S, H)
    else:
        width = p["word_embeddings.weight"].shape[-1]  # H in BERT; E in a member with factorized embeddings
        if not isinstance(inputs_embeds, Tensor) or inputs_embeds.dim() != 3 or not inputs_embeds.numel() \
                or inputs_embeds.shape[-1] != width:
            got = tuple(inputs_embeds.shape) if isinstance(inputs_embeds, Tensor) else type(inputs_embeds).__name__
            raise InputError(f"inputs_embeds must be a tensor of shape (batch, seq, {width}), got {got}")
        weight_dtype = p["word_embeddings.weight"].dtype
        if inputs_embeds.dtype != weight_dtype:
            raise InputError(f"inputs_embeds must have the model's dtype {weight_dtype}, got {inputs_embeds.dtype}; "
                             f"convert it with .to({weight_dtype})")
        words = inputs_embeds
    return words


def embeddings(
    p: Params,
    input_ids: Tensor | None = None,
    token_type_ids: Tensor | None = None,
    position_ids: Tensor | None = None,
    inputs_embeds: Tensor | None = None,
    past_length: int = 0,
    generator: torch.Generator | None = None,
    trace: Trace = NO_TRACE,
    *,
    position_padding: int | None = None,
) -> Tensor:
    """Word + token-type (+ absolute position) embeddings, then LayerNorm and dropout.

    Mirrors ``transformers.BertEmbeddings``. With relative position embeddings no absolute positions are
    added (HF does the same).

    Args:
        p: ``bert.embeddings.`` scope.
        input_ids: (B, S) int.
        token_type_ids: (B, S), default all zeros (segment A).
        position_ids: (B, S) or (S,), default ``past_length .. past_length+S-1``.
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        past_length: the KV cache's length when decoding (the first default position).
        generator: turns dropout on (training; :func:`~bertfn.model.functional.dropout`).
        trace: records (and edits) the steps under ``word``, ``token_type``, ``position``, ``sum``
            and ``output`` (:class:`~bertfn.model.recorder.Trace`).
        position_padding: the position table's row that gets no gradient (``nn.Embedding``'s ``padding_idx``):
            None in BERT; RoBERTa's padding position (``pad_token_id``), which its padding reads.

    Returns:
        (B, S, H).

    Raises:
        InputError: ids of the wrong kind, shape or range, or an input longer than the model's positions.
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    cfg = p.config
    words = word_vectors(p, input_ids, inputs_embeds)  # (B, S, H)
    B, S, _ = words.shape
    device = words.device
    words = trace("word", words)

    if token_type_ids is None:
        token_type_ids = torch.zeros(B, S, dtype=torch.long, device=device)
    check_ids("token_type_ids", token_type_ids, cfg.type_vocab_size,
              f"this model has {cfg.type_vocab_size} segment types (0 = first text, 1 = second)", (B, S))
    token_types = p["token_type_embeddings.weight"][token_type_ids]  # (B, S, H)
    token_types = trace("token_type", token_types)
    x = words + token_types

    if cfg.position_embedding_type == "absolute":
        if position_ids is None:
            position_ids = default_position_ids(B, S, past_length, device)
        check_ids("position_ids", position_ids, cfg.max_position_embeddings,
                  f"this model has {cfg.max_position_embeddings} positions; shorten the input", (B, S))
        # (B, S, H); a padding row as the member's nn.Embedding has one: the same values, no gradient to that row
        positions = F.embedding(position_ids, p["position_embeddings.weight"], padding_idx=position_padding)
        positions = trace("position", positions)
        x = x + positions
    elif past_length + S > cfg.max_position_embeddings:  # relative: attention looks up distances up to P - 1
        raise InputError(f"the input reaches position {past_length + S} but this model has "
                         f"{cfg.max_position_embeddings} positions; shorten the input")
    x = trace("sum", x)

    x = layer_norm(x, p["LayerNorm.weight"], p["LayerNorm.bias"], cfg.layer_norm_eps)  # (B, S, H)
    x = dropout(x, cfg.hidden_dropout_prob, generator)
    x = trace("output", x)
    return x


# --- relative positions: distances, read by attention ---------------------------------------------------------


def relative_position_scores(q: Tensor, k: Tensor, distance_weight: Tensor, kind: str, past: int) -> Tensor:
    """Scores from relative-position embeddings (Shaw et al. 2018; Huang et al. 2020, "method 4").

    Query i sits at absolute position ``past + i`` and key j at ``j``; their distance ``i - j`` is
    shifted by ``P - 1`` to index ``distance_weight``. ``relative_key`` adds q·e(i-j),
    ``relative_key_query`` adds q·e(i-j) + k·e(i-j). Mirrors the ``distance_embedding`` branch
    of ``BertSelfAttention``; with a KV cache and one new token HF's ``key_length - 1`` equals our
    ``past + 0``.

    Args:
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        distance_weight: (2P-1, hd), ``self.distance_embedding.weight``.
        kind: ``relative_key`` or ``relative_key_query`` (``config.position_embedding_type``).
        past: the absolute position of the first query.

    Returns:
        (B, nh, S_q, S_k), *before* the 1/sqrt(d) scaling.
    """
    S_q, S_k = q.shape[2], k.shape[2]
    P = (distance_weight.shape[0] + 1) // 2
    pos_q = torch.arange(past, past + S_q, device=q.device)[:, None]  # (S_q, 1)
    pos_k = torch.arange(S_k, device=q.device)[None, :]  # (1, S_k)
    e = distance_weight[pos_q - pos_k + P - 1].to(q.dtype)  # (S_q, S_k, hd)
    scores = torch.einsum("bhld,lrd->bhlr", q, e)
    if kind == "relative_key_query":
        scores = scores + torch.einsum("bhrd,lrd->bhlr", k, e)
    return scores


def position_scores(p: Params, q: Tensor, k: Tensor, past: int, trace: Trace) -> Tensor | None:
    """The relative-position scores a self-attention block adds (:func:`relative_position_scores`), or None where
    the config's positions are absolute (``config.position_embedding_type``).

    Args:
        p: one attention block's scope (reads ``self.distance_embedding.weight``).
        q: (B, nh, S_q, hd).
        k: (B, nh, S_k, hd).
        past: the absolute position of the first query.
        trace: records (and edits) ``relative_scores``.

    Returns:
        (B, nh, S_q, S_k), or None.
    """
    cfg = p.config
    if not cfg.relative_positions:
        return None
    bias = relative_position_scores(q, k, p["self.distance_embedding.weight"], cfg.position_embedding_type, past)
    return trace("relative_scores", bias)
