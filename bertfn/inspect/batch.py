"""The pass :func:`bertfn.trace` records, for one text or a padded batch, and a batch's tensors cut back to one text.

:func:`record_pass` runs the encoder and the MLM head into a trace. ``bertfn.trace([...], model)`` gives it
the texts as one padded batch (:func:`padded_batch`, each text with its second segment or none);
:class:`~bertfn.inspect.trace.Recordings` reads that whole, or one text at a time
through :func:`text_tensors`: every position axis cut to the text's length, so what is left equals tracing
the text alone (the padding's keys were masked out of every real query's softmax, and every other step
treats each position on its own).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence

from ..checkpoint.model import Model
from ..checkpoint.tokenizer import Tokenizer, check_text
from ..errors import InputError, clipped
from ..model.encoder import encoder
from ..model.heads import mlm_head
from ..model.recorder import Trace
from ..model.segment_points import INSIDE
from ..model.task_heads import TASKS, run_head

Tensor = torch.Tensor

KEY_AXIS_POINTS = tuple(name for name in INSIDE if name != "context")
"""The (B, nh, S, S) attention points, whose last axis (the keys) is a position axis too: the scores and
probabilities, and a member's own terms (``relative_scores``, MPNet's ``position_bias``, DeBERTa's ``c2p_scores``,
``p2c_scores``)."""

CHUNK = re.compile(r"(layer\.\d+\.ffn\.)chunk\.(\d+)\.(\w+)")
"""A slice of a chunked feed-forward block (``chunk_size_feed_forward``): prefix, slice number, point."""


def padded_batch(tok: Tokenizer, texts: list[str], pairs: Sequence[str | None] | None
                 ) -> tuple[Tensor, Tensor, Tensor, list[list[str]]]:
    """``texts`` (each with its second segment in ``pairs``, or none) as one batch padded to the longest.

    One tokenizer call where every text has a second segment or none has; where only some have, one per
    text, padded here as the tokenizer pads (the pad id, token type 0, attention mask 0).

    Args:
        tok: the model's tokenizer.
        texts: B texts, checked non-empty strings.
        pairs: B second segments (None for a text without), or None for none at all.

    Returns:
        ``(input_ids, token_type_ids, attention_mask, tokens)``: three (B, S) int64 tensors and each
        text's word pieces without the padding.

    Raises:
        InputError: ``pairs`` is not a list of one string or None per text, or holds an empty string.
    """
    if pairs is not None:
        if isinstance(pairs, str) or not isinstance(pairs, Sequence):
            raise InputError(f"for several texts pair takes a list of second segments, one per text (None where a "
                             f"text has none), got {type(pairs).__name__}: {clipped(pairs, 60)}")
        if len(pairs) != len(texts):
            raise InputError(f"got {len(texts)} texts but {len(pairs)} second segments; pass one per text "
                             "(None where a text has none)")
        for i, p in enumerate(pairs):
            if p is not None:
                check_text(p, f"second segment {i}")
                if not p.strip():
                    raise InputError(f"second segment {i} is empty; write a sentence, or None for a text without one")
    if pairs is None or all(p is None for p in pairs) or all(p is not None for p in pairs):
        enc = tok(texts, None if pairs is None or pairs[0] is None else list(pairs))
        lengths = enc.attention_mask.sum(dim=1).tolist()
        return enc.input_ids, enc.token_type_ids, enc.attention_mask, [t[:n] for t, n in zip(enc.tokens, lengths)]
    encs = [tok([t], None if p is None else [p]) for t, p in zip(texts, pairs)]

    def padded(field: str, value: int) -> Tensor:  # (B, S)
        return pad_sequence([getattr(e, field)[0] for e in encs], batch_first=True, padding_value=value)

    return (padded("input_ids", tok.pad_token_id), padded("token_type_ids", 0), padded("attention_mask", 0),
            [e.tokens[0] for e in encs])


def record_pass(m: Model, ids: Tensor, types: Tensor, mask: Tensor, record: Trace) -> list[tuple[int, int]]:
    """The encoder on the eager path, then the MLM head at every [MASK] (if the model has one), then the task head the
    checkpoint carries (a classifier's, a tagger's, a reader's: :attr:`Model.head`) and a member's own head on the
    attention maps (ESM-2's contacts) or tokens (ELECTRA's discriminator), into ``record``.

    The functions :func:`~bertfn.tasks.fill_mask.fill_mask` (and the pipelines of the heads) run, in their order;
    the padding's positions are masked out of attention and never read by the heads.

    Args:
        m: the model.
        ids: (B, S) token ids, on the model's device.
        types: (B, S) token types (on any device).
        mask: (B, S), 1 for real tokens, 0 for padding (on any device).
        record: the trace that keeps (and edits) every point.

    Returns:
        (text, position) of each [MASK], text by text: row n of ``mlm.*`` belongs to the n-th.
    """
    mask = mask.to(m.device)
    own = m.family.own_head
    with torch.no_grad():
        out = encoder(m.params, ids, mask, types.to(m.device), impl="eager", trace=record, output_attentions=own is not None)
        where = ((ids == m.tokenizer.mask_token_id) & mask.bool()).nonzero()  # (N, 2): (text, position)
        if len(where) and "cls.predictions.decoder.weight" in m.params:
            mlm_head(m.params, out.last_hidden_state[where[:, 0], where[:, 1]], trace=record)  # (N, V)
        checkpoint_head(m, out.last_hidden_state, mask, record)
        if own is not None:
            own(m.params, ids, out, mask, record)
    return [(text, position) for text, position in where.tolist()]


def checkpoint_head(m: Model, h: Tensor, mask: Tensor, record: Trace) -> None:
    """The task head the checkpoint carries (:attr:`Model.head`: a classifier, a tagger, a reader), run on the last
    hidden states into ``record``; nothing for a masked LM or an encoder alone.

    What every pass that records a run calls after the encoder (:func:`record_pass`, the studies' runs and their
    patched copies, :mod:`bertfn.interventions`), so that a metric can read the head's points wherever it runs.

    Args:
        m: the model.
        h: (B, S, H) last hidden states (a study's copies may pass the first position alone, (B, 1, H), to a head
            that reads it alone).
        mask: (B, S) 1 for real tokens.
        record: the trace that keeps (and edits) the head's points.
    """
    if m.head.task in TASKS:
        run_head(m.params, m.head.task, h, mask, trace=record)


def text_tensors(tensors: dict[str, Tensor], i: int, length: int, mask_rows: list[tuple[int, int]],
                 chunk_size: int) -> dict[str, Tensor]:
    """Text ``i``'s part of a padded batch's recorded tensors, as tracing it alone records them.

    (B, S, X) -> (1, length, X); (B, nh, S, hd) -> (1, nh, length, hd); (B, nh, S, S) -> (1, nh, length,
    length) for the scores and probabilities (the padding's keys cut too); (B, H) -> (1, H); ``mlm.*`` (N, X)
    -> the rows of the text's own [MASK]s. A chunked feed-forward's slices (``ffn.chunk.{n}.*``) are cut to the
    text's positions in them; slices wholly past its end are left out, and a text that fits in one slice gets
    the names of an unchunked block, as its own pass records them.

    Args:
        tensors: the batch's tensors by name, in the order computed (batch axis first, padded to S).
        i: the text, 0 .. B-1.
        length: its number of tokens.
        mask_rows: (text, position) of each row of ``mlm.*``.
        chunk_size: the model's ``chunk_size_feed_forward`` (0: unchunked).

    Returns:
        The text's tensors by name, in the same order (views of the batch's).
    """
    rows = [n for n, (text, _) in enumerate(mask_rows) if text == i]
    out = {}
    for name, x in tensors.items():
        n = length
        chunk = CHUNK.fullmatch(name)
        if chunk:
            n = length - int(chunk[2]) * chunk_size  # the text's positions in this slice
            if n <= 0:
                continue
            if length <= chunk_size:
                name = chunk[1] + chunk[3]
        if name.startswith("mlm."):
            if not rows:  # a text without [MASK]: its own pass never runs the head
                continue
            x = x[rows]  # (N_i, X)
        elif name.startswith(("qa.", "discriminator.")):
            x = x[i:i + 1, :n]  # (1, n[, H]): a reader's or a discriminator's logit per token
        elif name.startswith("contacts."):  # (B, [L*nh,] S-2, S-2): the text's residues, its <cls> and <eos> left out
            x = x[i:i + 1, ..., :n - 2, :n - 2]
        elif x.dim() == 2:
            x = x[i:i + 1]  # (1, H)
        elif x.dim() == 3:
            x = x[i:i + 1, :n]  # (1, n, X)
        else:
            x = x[i:i + 1, :, :n]  # (1, nh, n, hd)
            if name.rpartition(".")[2] in KEY_AXIS_POINTS:
                x = x[..., :n]  # (1, nh, n, n)
        out[name] = x
    return out
