"""ESM's embeddings step (``EsmEmbeddings``): ESM-2's word vectors alone, ESM-1b's with learned positions.

ESM's embeddings are BERT's except:

* **no token types**, and no LayerNorm unless the config asks for one (``emb_layer_norm_before``: ESM-1b's
  ``esm.embeddings.layer_norm``; false in ESM-2);
* **token dropout** (:func:`token_dropout`): every ``<mask>``'s vector is zeroed and the rest scaled by
  ``(1 - 0.12) / (1 - m)``, m the share of ``<mask>`` among the text's real tokens. ESM was trained with
  15% x 80% = 12% of tokens zeroed this way; the scaling keeps the sum of the vectors the layers see as in
  training. It changes every number with a mask in the input: a text with one ``<mask>`` in 10 tokens is
  scaled by 0.88 / 0.9, one with 2 by 0.88 / 0.8;
* **positions**: ESM-2's are rotary (turned in attention, :mod:`bertfn.model.members.rotary`: none added here);
  ESM-1b's and the nucleotide transformers' (v1) ``position_embedding_type`` "absolute" adds a learned table
  ``esm.embeddings.position_embeddings`` (P, H) at RoBERTa's positions (:func:`positions`): ``padding_idx + 1``
  onward over the real tokens, padding keeping ``padding_idx``, so the table holds ``P - padding_idx - 1`` tokens
  (:func:`longest_input`: 1024 of ESM-1b's 1026 rows);
* **padding's vectors are zeroed** (times the attention mask) after everything else.

In transformers' order: ``e = dropout_tokens(word(x)) [+ pos(x)]``, ``[LayerNorm(e)]``, times the mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...errors import InputError
from ..config import BertConfig
from ..embeddings import check_ids, word_vectors
from ..layout import Segments
from ..params import Params, scoped
from ..recorder import NO_TRACE, Trace
from .prenorm import norm
from .roberta import count_positions

Tensor = torch.Tensor

TRAINING_MASK_RATIO = 0.15 * 0.8
"""The share of tokens ESM's training replaced by ``<mask>`` (15% chosen, 80% of those masked), hard-coded
in transformers' ``EsmEmbeddings`` as in the original ESM code."""


def learned(config: BertConfig) -> bool:
    """Whether the model adds learned positions (ESM-1b: ``position_embedding_type`` "absolute") rather than turning
    queries and keys (ESM-2: "rotary").

    Args:
        config: the model's config.
    """
    return config.position_embedding_type == "absolute"


def longest_input(config: BertConfig) -> int:
    """The tokens one input may hold: with learned positions, the table's rows less ``padding_idx + 1`` (the
    positions :func:`positions` skips: 1024 of 1026 in ESM-1b); with rotary ones, ``max_position_embeddings``.

    Args:
        config: the model's config.
    """
    if not learned(config):
        return config.max_position_embeddings
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    return config.max_position_embeddings - pad - 1


def positions(config: BertConfig, input_ids: Tensor | None, inputs_embeds: Tensor | None,
              segments: Segments | None = None) -> Tensor:
    """The learned table's rows each token reads (``create_position_ids_from_input_ids`` with ``padding_idx``).

    From the ids, RoBERTa's count (:func:`~bertfn.model.members.roberta.count_positions`): ``padding_idx + 1,
    + 2, ...`` over the real tokens, ``padding_idx`` at padding; for ``inputs_embeds`` (no ids to find padding in)
    ``padding_idx + 1 .. padding_idx + S`` (``create_position_ids_from_inputs_embeds``). On the segments layout, each
    text's count from its own start, as the padded layout counts its row.

    Args:
        config: the model's config.
        input_ids: (B, S), or None.
        inputs_embeds: (B, S, H) when ``input_ids`` is None.
        segments: the texts' lengths where they are laid end to end (:class:`~bertfn.model.layout.Segments`), or None.

    Returns:
        (B, S).
    """
    if segments is not None:  # each text as a row of its own
        lengths = list(segments.lengths)
        ids = input_ids.split(lengths, dim=1) if input_ids is not None else [None] * len(lengths)
        embeds = inputs_embeds.split(lengths, dim=1) if inputs_embeds is not None else [None] * len(lengths)
        return torch.cat([positions(config, i, e) for i, e in zip(ids, embeds)], dim=1)  # (1, T)
    pad = config.pad_token_id
    if input_ids is not None:
        return count_positions(input_ids, pad)
    B, S = inputs_embeds.shape[:2]
    return torch.arange(pad + 1, pad + 1 + S, device=inputs_embeds.device).expand(B, S)


def token_dropout(x: Tensor, input_ids: Tensor, mask_id: int, attention_mask: Tensor | Segments | None) -> Tensor:
    """Zero every ``<mask>``'s vector and scale the rest by ``(1 - 0.12) / (1 - m_b)`` (``EsmEmbeddings``'
    token dropout), m_b the share of ``<mask>`` among text b's real tokens (all S without an attention mask; on the
    segments layout, among the tokens of the text it is laid in).

    Args:
        x: (B, S, H), the word vectors.
        input_ids: (B, S).
        mask_id: ``<mask>``'s id.
        attention_mask: (B, S) 0/1, the real tokens, or None; or :class:`~bertfn.model.layout.Segments`.

    Returns:
        (B, S, H).
    """
    masks = input_ids == mask_id  # (B, S)
    x = x.masked_fill(masks[..., None], 0.0)
    if isinstance(attention_mask, Segments):
        lengths = torch.tensor(attention_mask.lengths, device=x.device)  # (b,)
        text = torch.repeat_interleave(torch.arange(len(lengths), device=x.device), lengths)  # (T,): each token's text
        counts = torch.zeros_like(lengths).index_add_(0, text, masks[0].long())  # (b,): each text's masks
        observed = (counts.float() / lengths)[text][None]  # (1, T): its text's share of masks, at each token
    else:
        real = attention_mask.sum(-1) if attention_mask is not None else input_ids.shape[1]  # (B,) or S
        observed = (masks.sum(-1).float() / real)[:, None]  # (B, 1): the share of masks in each text
    return (x * (1 - TRAINING_MASK_RATIO) / (1 - observed)[..., None]).to(x.dtype)


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | Segments | None = None) -> Tensor:
    """ESM's embeddings (``EsmEmbeddings``): word vectors, token dropout, learned positions where the config has
    them, the LayerNorm where it has one, padding zeroed.

    ``e = word(x)``, with token dropout (:func:`token_dropout`) zero where x is ``<mask>`` and the rest rescaled;
    ``+ pos(positions(x))`` with learned positions; ``LayerNorm(e)`` with ``emb_layer_norm_before``; then times the
    attention mask. No token types. On the segments layout (texts laid end to end) each text's share of masks and
    learned positions are its own, as the padded layout gives its row.

    Args:
        p: ``bert.embeddings.`` scope (``esm.embeddings.``).
        input_ids: (B, S), or (1, T) on the segments layout.
        token_type_ids: accepted and ignored.
        position_ids: (B, S) or (S,) rows of the learned table, default :func:`positions`; ignored with rotary
            positions (transformers' ESM turns by 0 .. S-1) and on the segments layout (whose rotary positions from 0
            the encoder passes: each text's rows are counted by :func:`positions`).
        inputs_embeds: (B, S, H) word vectors, instead of ``input_ids`` (as BERT's step reads them): no token
            dropout, as in transformers; the positions and the LayerNorm still apply, as ``EsmEmbeddings`` applies
            them (transformers 4.57's ``EsmModel`` instead takes ``inputs_embeds`` as the step's output).
        past_length: accepted and ignored.
        generator: accepted (ESM's embeddings have no dropout).
        trace: records (and edits) ``word``, ``token_dropout`` (with token dropout), ``position`` (learned
            positions) and ``output``.
        attention_mask: (B, S) 0/1, the real tokens, or None; or :class:`~bertfn.model.layout.Segments`, the texts'
            lengths (every token real).

    Returns:
        (B, S, H).

    Raises:
        InputError: ids or positions outside their tables (an input longer than :func:`longest_input`); an
            ``attention_mask`` that is not (B, S).
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    cfg = p.config
    segments = attention_mask if isinstance(attention_mask, Segments) else None
    x = trace("word", word_vectors(p, input_ids, inputs_embeds))  # (B, S, H)
    if attention_mask is not None and segments is None and not (
            isinstance(attention_mask, torch.Tensor) and tuple(attention_mask.shape) == tuple(x.shape[:2])):
        got = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else type(attention_mask).__name__
        raise InputError(f"ESM's embeddings read attention_mask as the 0/1 mask of the real tokens, of shape "
                         f"{tuple(x.shape[:2])} (1 = a residue or special token, 0 = padding), got {got}; "
                         "tokenizer(...).attention_mask has that form (ESM takes no 3D or 4D mask)")
    if cfg.token_dropout and input_ids is not None:
        x = trace("token_dropout", token_dropout(x, input_ids, cfg.mask_token_id, attention_mask))
    if learned(cfg):
        B, S, _ = x.shape
        if position_ids is None or segments is not None:
            position_ids = positions(cfg, input_ids, inputs_embeds, segments)
        check_ids("position_ids", position_ids, cfg.max_position_embeddings,
                  f"this model has {cfg.max_position_embeddings} positions, which hold {longest_input(cfg)} tokens "
                  "(they start at padding_idx + 1); shorten the input", (B, S))
        table = p["position_embeddings.weight"]  # EsmEmbeddings' nn.Embedding has padding_idx=pad_token_id
        x = x + trace("position", F.embedding(position_ids, table, padding_idx=cfg.pad_token_id))  # (B, S, H)
    if "LayerNorm.weight" in p:  # emb_layer_norm_before (ESM-1b; false in ESM-2)
        x = norm(p, "LayerNorm", x)
    if attention_mask is not None and segments is None:
        x = (x * attention_mask[..., None]).to(x.dtype)  # padding's vectors zeroed
    return trace("output", x)
