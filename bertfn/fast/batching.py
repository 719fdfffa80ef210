"""Many texts through the fast path: sorted by length, laid end to end, a group of texts per encoder pass.

fill_mask, score (and the joint filling and whole-word targets built on it), embed and the heads of fine-tuned
checkpoints all read their texts this way: :func:`text_groups` sorts them by length and cuts them into groups of at
most :data:`GROUP_TOKENS` tokens, :func:`end_to_end` lays a group's tokens one after another without padding,
:func:`encoded_groups` runs each group through :func:`~bertfn.model.encoder.encoder` on that layout
(:class:`~bertfn.model.layout.Segments`, its texts attending in the calls :mod:`bertfn.fast.attention_batches` chose
for the device; a task's ``edits=`` run there too, each seeing the padded layout's shapes), and
:func:`head_outputs` runs a task's head on what it gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from ..checkpoint.model import Model
from ..checkpoint.tokenizer import Encoding
from ..model.encoder import encoder
from ..model.layout import Segments
from ..model.recorder import NO_TRACE, Trace
from ..model.task_heads import check_head_weights, task_head
from .attention_batches import batches

GROUP_TOKENS = 2048
"""Tokens per encoder pass: enough rows for the matrix products to run at
their peak (bench/kernels.py; the (T, 4H) intermediate is 25 MB for bert-base). Models with
relative positions take at most ``max_position_embeddings``, the longest input their embeddings accept."""


def text_groups(lengths: list[int], batch_size: int, max_tokens: int) -> list[list[int]]:
    """Which texts run through the encoder together: indices sorted by length, cut into groups.

    Sorting puts similar lengths together, so the last groups hold few long texts and the first many short ones.

    Args:
        lengths: each text's tokens.
        batch_size: texts per group at most.
        max_tokens: tokens per group, laid end to end, at most (a text longer than that runs alone).
    """
    groups: list[list[int]] = []
    tokens = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        if groups and len(groups[-1]) < batch_size and tokens + lengths[i] <= max_tokens:
            groups[-1].append(i)
            tokens += lengths[i]
        else:
            groups.append([i])
            tokens = lengths[i]
    return groups


def end_to_end(enc: Encoding, rows: list[int], lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The texts ``rows`` of ``enc`` one after another, without padding: the inputs of the encoder on
    :class:`~bertfn.model.layout.Segments` (which counts each text's positions from its start).

    Args:
        enc: the texts as a padded batch.
        rows: the texts to lay out, by index.
        lengths: each text's tokens.

    Returns:
        input_ids: (1, T), T the sum of the texts' lengths.
        token_type_ids: (1, T).
    """
    ns = [lengths[i] for i in rows]
    ids = torch.cat([enc.input_ids[i, :n] for i, n in zip(rows, ns)])[None]  # (1, T)
    types = torch.cat([enc.token_type_ids[i, :n] for i, n in zip(rows, ns)])[None]  # (1, T)
    return ids, types


def encoded_groups(m: Model, enc: Encoding, lengths: list[int], batch_size: int,
                   read: Callable[[list[int], torch.Tensor], torch.Tensor] | None = None,
                   points: Trace = NO_TRACE) -> Iterator[tuple[list[int], torch.Tensor | None, torch.Tensor]]:
    """The texts of ``enc`` through the encoder on the fast path, a group at a time (:func:`text_groups`).

    Each text's tokens sit where :func:`end_to_end` put them, with edits too. Call it under
    ``torch.inference_mode()`` (or ``torch.no_grad()``).

    Args:
        m: the model.
        enc: the texts as a padded batch.
        lengths: each text's tokens (a text longer than its row's real tokens is not allowed; a shorter
            one is cut there).
        batch_size: texts per group at most.
        read: ``read(rows, ids)``: the positions of a group whose last hidden states the caller wants,
            (N,) indices into its input ids end to end ``ids`` (1, T); the encoder's last layer runs at
            those alone.
        points: a :class:`~bertfn.model.recorder.Trace` with edits, run on the same layout: each group's edits see
            the named tensors with the shapes :func:`bertfn.trace` shows, the group's texts as a padded batch (b, S)
            (b <= batch_size texts, sorted by length; :mod:`bertfn.model.segment_points`; which texts the rows are:
            :attr:`~bertfn.model.recorder.Point.rows`), and the last layer runs at every position.

    Yields:
        ``(rows, where, h)`` per group: the texts' indices in ``enc``, those positions (N,) and the last
            hidden states there (N, H); without ``read``, where is None and h is every position's (T, H).
    """
    P = m.config.max_position_embeddings
    group_tokens = GROUP_TOKENS if not m.config.relative_positions else min(GROUP_TOKENS, P)
    for rows in text_groups(lengths, batch_size, group_tokens):
        ids, types = (t.to(m.device) for t in end_to_end(enc, rows, lengths))
        where = read(rows, ids) if read is not None else None  # (N,) or all T
        ns = tuple(lengths[i] for i in rows)
        segments = Segments(ns, read=where, batches=batches(ns, m.device, m.dtype))  # read at where
        yield rows, where, encoder(m.params, ids, segments, types, trace=points.of_rows(rows)).last_hidden_state[0]


def head_outputs(m: Model, enc: Encoding, lengths: list[int], task: str, batch_size: int,
                 points: Trace = NO_TRACE) -> list:
    """The logits of ``task``'s head for each text of ``enc``, on the fast path (:func:`encoded_groups`).

    A head that reads each text's first position alone (a classifier on [CLS]) has the encoder's last layer run at
    those positions only; the others get each group's texts as a padded batch of their last hidden states. Call it
    under ``torch.inference_mode()``.

    Args:
        m: the model.
        enc: the texts as a padded batch.
        lengths: each text's tokens.
        task: one of :data:`~bertfn.model.task_heads.TASKS`.
        batch_size: texts per group at most.
        points: a :class:`~bertfn.model.recorder.Trace` with edits, as :func:`encoded_groups` takes it; its edits
            of the head's points apply too.

    Returns:
        Per text, in the order of ``enc``: the head's logits for it, without the batch axis: (num_labels,) for a
        sequence classifier (and (1,) for a multiple-choice row), (n, num_labels) for a tagger, ``(start, end)`` of
        (n,) each for a reader, n the text's tokens.
    """
    head = task_head(m.config, task)
    check_head_weights(m.params, head.shapes(m.config))
    first = head.reads_first(m.config)
    read = (lambda rows, ids: torch.tensor([0, *[lengths[i] for i in rows[:-1]]], device=ids.device).cumsum(0)) \
        if first else None
    out: list = [None] * len(lengths)
    for rows, _, h in encoded_groups(m, enc, lengths, batch_size, read, points):
        if first:  # h: (b, H), each text's first position
            hidden, mask = h[:, None], torch.ones(len(rows), 1, dtype=torch.long, device=h.device)  # (b, 1, H), (b, 1)
        else:  # h: (T, H), the texts end to end: padded again, (b, S, H)
            pieces = h.split([lengths[i] for i in rows])
            hidden = torch.nn.utils.rnn.pad_sequence(list(pieces), batch_first=True)  # (b, S, H)
            mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(p), dtype=torch.long, device=h.device)
                                                    for p in pieces], batch_first=True)  # (b, S)
        logits = head.run(m.params, hidden, mask, trace=points.of_rows(rows))  # its points say the group's texts
        for j, i in enumerate(rows):
            if isinstance(logits, tuple):  # a reader's start and end, (b, S) each
                out[i] = tuple(t[j, :lengths[i]] for t in logits)
            elif first or logits.dim() == 2:  # one row per text: (b, num_labels)
                out[i] = logits[j]
            else:  # one row per token: (b, S, num_labels)
                out[i] = logits[j, :lengths[i]]
    return out
