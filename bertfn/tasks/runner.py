"""The one runner: every step of a pipeline but its own, written once.

    texts, single, model = texts_in(texts, model, TASK, blank=True)     the texts, whether one came, the model
    ... the options checked (bertfn/checkpoint/checks.py) ...
    m, tok, points = loaded(TASK, model, device, dtype, edits, head="token-classification")
    ... the texts tokenized, their lengths checked (checks.refuse_long) ...
    per_text(m, enc, lengths, step, batch_size=..., points=points)      the task's step on each group of texts
    head_logits(m, enc, lengths, "token-classification", ...)           or its head's logits per text
    attention_maps(m, enc, lengths, step, ...)                          or its step on every layer's attention maps
    return finished(results, unknown, single)                            one result, or the list

:func:`loaded` resolves the model (:func:`~bertfn.checkpoint.resolve.get_model`), its layers' weights packed where the
task's declaration says it runs on the fast path (:func:`packing`), checks its tokenizer and head, and turns the edits
into a :class:`~bertfn.model.recorder.Trace`. The three that run the texts lay them out for every task: a group of texts
(sorted by length, at most ``batch_size``) laid end to end (:func:`~bertfn.fast.batching.encoded_groups`,
:class:`~bertfn.model.layout.Segments`, on the model's device and in its dtype), under ``torch.inference_mode()``;
edits run there too, each point kept and edited in the shape the group's padded batch gives it (the shapes
:func:`bertfn.trace` shows, :mod:`bertfn.model.segment_points`), but for contacts' maps, which run as padded batches
then (:func:`attention_maps`: the contact head's points keep their batch's shape). :func:`finished` flags each result
of a text mostly [UNK] (:func:`~bertfn.checkpoint.resolve.flag_unknown`) and gives one result for one text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import NamedTuple

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import flag_unknown, get_model, require_head, require_tokenizer, text_list, texts_and_model
from ..checkpoint.tokenizer import Encoding, Tokenizer
from ..errors import InputError, syntax
from ..fast.attention_batches import batches
from ..fast.batching import GROUP_TOKENS, encoded_groups, end_to_end, head_outputs, text_groups
from ..fast.choice import pack_state
from ..model.encoder import encoder
from ..model.layout import Segments
from ..model.recorder import NO_TRACE, Edit, Trace, with_edits
from .task import Task

Tensor = torch.Tensor


class Loaded(NamedTuple):
    """What a pipeline runs on: the model, its tokenizer and the trace that carries the caller's edits."""

    model: Model
    tokenizer: Tokenizer
    points: Trace


def name_of(task: Task | str) -> str:
    """The call as the messages name it: a task's function's name (``"fill_mask"``), or the name of a call that is no
    task, as given (``"replaced_tokens"``)."""
    return task.function.__name__ if isinstance(task, Task) else task


def texts_in(texts, model, task: Task | str, *, blank: bool = False) -> tuple[list[str], bool, object]:
    """``(texts, single, model)`` of a pipeline written ``fill_mask(texts, model)``: its texts as a list, whether one
    text came (its result alone), and the model, with the order checked.

    Args:
        texts (str | Sequence[str]): what the caller passed first.
        model (object): what it passed second.
        task: the pipeline's task, or the name of a call that is no task (:func:`name_of`: the messages' name).
        blank: take an empty or blank text, as the task's transformers pipeline answers one
            (:func:`~bertfn.checkpoint.resolve.text_list`).

    Raises:
        InputError: the model first (:func:`~bertfn.checkpoint.resolve.texts_and_model`), no texts, or a text that is
            no string (or, without ``blank``, a blank one).
    """
    what = name_of(task)
    texts, model = texts_and_model(texts, model, what)
    batch, single = text_list(texts, what, blank=blank)
    return batch, single, model


def packing(task: Task, edits: Mapping[str, Edit] | None = None) -> Callable[[dict[str, Tensor]], bool] | None:
    """``load``'s ``prepare`` for a model that runs ``task``: :func:`~bertfn.fast.choice.pack_state` where the task runs
    on the fast path alone (declared :attr:`~bertfn.tasks.task.Task.fast`, and no edits), so the model holds its layers'
    weights once, as that path reads them; else None, the weights as stored.

    Args:
        task: the task's declaration.
        edits: the caller's edits, if any: a pass with edits may multiply by a layer's weight outside the chosen
            kernels (each head's write, ``head_outputs``), which a packed weight cannot be, so they keep them as stored.
    """
    return pack_state if task.fast and not edits else None


def chosen_model(task: Task, model: Model | str | Path | None) -> Model | str | Path:
    """The model a task's call runs: the one given, else the task's default (:attr:`~bertfn.tasks.task.Task.model`).

    Args:
        task: the task.
        model: what the caller gave (None: nothing).

    Raises:
        InputError: no model given to a task without a default (a fine-tuned head's that transformers gives none in
            BERT's family), before anything is downloaded.
    """
    if model is not None:
        return model
    if task.model is None:
        raise InputError(f"{task.function.__name__} needs a model fine-tuned for it, and has no default: pass "
                         f"{syntax(python='model=', cli='--model ')}(a Model from bertfn.load, a folder or a hub id)")
    return task.model


def loaded(task: Task | str, model: Model | str | Path | None, device: str | torch.device | None = None,
           dtype: torch.dtype | str | None = None, edits: Mapping[str, Edit] | None = None, *, head: str | None = None,
           called: str | None = None) -> Loaded:
    """The model a call runs (loaded once per process by name, a folder again when its files change), its tokenizer
    and its edits' trace.

    Args:
        task: the pipeline's :class:`~bertfn.tasks.task.Task` (its ``fast`` says whether the weights are packed,
            :func:`packing`), or the name of a call that is no task (``"replaced_tokens"``, an intervention), which
            runs on the weights as stored.
        model: a loaded :class:`Model`, a local folder or a hub id (:func:`~bertfn.checkpoint.resolve.get_model`);
            None: the task's default (:func:`chosen_model`).
        device: where it runs.
        dtype: the precision it runs in.
        edits: ``{point name: edit(tensor, point) -> tensor}`` (:mod:`bertfn.interventions`), or None.
        head: the head the call reads (a task of :data:`~bertfn.model.task_heads.TASKS`,
            ``"token-classification"``); None: no check here (the caller checks its own part).
        called: the call as the messages name it; None: :func:`name_of` the task.

    Returns:
        ``(model, tokenizer, points)``.

    Raises:
        InputError: a ``model`` that is no model (:func:`~bertfn.checkpoint.resolve.get_model`), or none for a task
            without a default.
        MissingPartError: a model without a tokenizer, or without ``head``.
    """
    what = called or name_of(task)
    model = chosen_model(task, model) if isinstance(task, Task) else model
    m = get_model(model, device, dtype, prepare=packing(task, edits) if isinstance(task, Task) else None)
    tok = require_tokenizer(m, what)
    if head is not None:
        require_head(m, head, what)
    return Loaded(m, tok, with_edits(NO_TRACE, edits, m.config))


def placed(order: list[int], parts: list) -> list | Tensor:
    """The results of groups put back in the texts' order: ``parts[g]`` holds one result per text of group ``g``, the
    texts ``order`` lists group after group.

    Args:
        order: (N,) the texts' indices, in the order the groups ran them.
        parts: per group, a tensor (b, ...) or a sequence of b results.

    Returns:
        Tensors: one (N, ...) tensor, row i text i's, put in order by one index (no work per text); else a list.
    """
    if parts and isinstance(parts[0], Tensor):
        where = torch.tensor(order, device=parts[0].device).argsort()  # (N,): text i's row of the groups' rows
        return torch.cat(parts)[where]
    out: list = [None] * len(order)
    for i, result in zip(order, chain.from_iterable(parts)):
        out[i] = result
    return out


def per_text(m: Model, enc: Encoding, lengths: list[int],
             step: Callable[[list[int], Tensor | None, Tensor], Tensor | Sequence], *, batch_size: int,
             points: Trace = NO_TRACE, read: Callable[[list[int], Tensor], Tensor] | None = None) -> list | Tensor:
    """Each text's result of the task's ``step``, in the order of ``enc``: the texts through the encoder a group at a
    time (:func:`~bertfn.fast.batching.encoded_groups`: end to end, edits seeing the group's padded batch's shapes),
    under ``torch.inference_mode()``.

    Args:
        m: the model.
        enc: the texts as a padded batch.
        lengths: each text's tokens.
        step: ``step(rows, where, h)`` -> one result per text of ``rows`` (a tensor (b, ...) or a sequence of b): the
            group's texts (indices into ``enc``), the positions read (N,) (None without ``read``) and the last hidden
            states there (N, H), or every position's, the texts end to end (T, H).
        batch_size: texts per group at most.
        points: a :class:`~bertfn.model.recorder.Trace` with edits (each seeing its group's padded batch's shapes), or
            none.
        read: ``read(rows, ids)``: the positions of a group, (N,) indices into its ids end to end (1, T), whose last
            hidden states ``step`` reads (the encoder's last layer runs at those alone).

    Returns:
        (N, ...) where ``step`` gives tensors, else a list of N results.
    """
    order: list[int] = []
    parts: list = []
    with torch.inference_mode():
        for rows, where, h in encoded_groups(m, enc, lengths, batch_size, read, points):
            order += rows
            parts.append(step(rows, where, h))
    return placed(order, parts)


def head_logits(m: Model, enc: Encoding, lengths: list[int], head: str, *, batch_size: int,
                points: Trace = NO_TRACE) -> list:
    """The logits of the model's ``head`` for each text of ``enc``, in its order
    (:func:`~bertfn.fast.batching.head_outputs`: the texts in groups as :func:`per_text` runs them), under
    ``torch.inference_mode()``.

    Args:
        m: the model.
        enc: the texts as a padded batch.
        lengths: each text's tokens.
        head: one of :data:`~bertfn.model.task_heads.TASKS` (``"sequence-classification"``).
        batch_size: texts per group at most.
        points: a Trace with edits (of the encoder's points and the head's), or none.

    Returns:
        Per text, its logits without the batch axis: (num_labels,) for a sequence classifier, (1,) for a
        multiple-choice row, (n, num_labels) for a tagger, ``(start, end)`` of (n,) each for a reader.
    """
    with torch.inference_mode():
        return head_outputs(m, enc, lengths, head, batch_size, points)


def attention_maps(m: Model, enc: Encoding, lengths: list[int], step: Callable[[Tensor, Tensor, Tensor], Sequence], *,
                   batch_size: int, points: Trace = NO_TRACE) -> list:
    """Each text's result of ``step`` on every layer's attention probabilities, in the order of ``enc``, under
    ``torch.inference_mode()``.

    Without edits, on the fast path: a group of texts (:func:`~bertfn.fast.batching.text_groups`) laid end to end
    (:class:`~bertfn.model.layout.Segments`, each text's probabilities formed on its own slice; the last layer's output
    projection and feed-forward run at one row alone, as no hidden state is read), ``step`` called on each text alone.
    With edits, the encoder on padded batches of up to ``batch_size`` texts sorted by length, with
    ``output_attentions``, ``step`` called per batch: the contact head's points (``contacts.*``) then have the batch's
    shape, as :func:`bertfn.trace` shows them, which the per-text step on segments would not give.

    Args:
        m: the model.
        enc: the texts as a padded batch (N, S).
        lengths: each text's tokens.
        step: ``step(ids, attentions, mask)`` -> one result per row: ids (b, S), attentions (b, L, nh, S, S), mask
            (b, S) (1 for each row's tokens).
        batch_size: texts per group at most (a group's maps are held together).
        points: a Trace with edits, or none.

    Returns:
        Per text, its result of ``step``.
    """
    order: list[int] = []
    parts: list = []
    with torch.inference_mode():
        if not points:
            first = torch.zeros(1, dtype=torch.long, device=m.device)  # the one row read
            for rows in text_groups(lengths, batch_size, GROUP_TOKENS):
                ids = end_to_end(enc, rows, lengths)[0].to(m.device)  # (1, T)
                ns = [lengths[i] for i in rows]
                layout = Segments(tuple(ns), read=first, batches=batches(tuple(ns), m.device, m.dtype))
                out = encoder(m.params, ids, layout, output_attentions=True)  # L of b (1, nh, n, n)
                for t, ids_i in enumerate(ids.split(ns, dim=1)):  # (1, n): the text's ids, every one real
                    att = torch.cat([layer[t] for layer in out.attentions])[None]  # (1, L, nh, n, n)
                    parts.append(step(ids_i, att, torch.ones_like(ids_i)))
                order += rows
        else:
            by_length = sorted(range(len(lengths)), key=lambda i: lengths[i])  # similar lengths together: little padding
            for start in range(0, len(by_length), batch_size):
                rows = by_length[start:start + batch_size]
                S = max(lengths[i] for i in rows)
                ids, mask = enc.input_ids[rows, :S].to(m.device), enc.attention_mask[rows, :S].to(m.device)  # (b, S)
                out = encoder(m.params, ids, mask, output_attentions=True, trace=points.of_rows(rows))
                parts.append(step(ids, torch.stack(out.attentions, dim=1), mask))  # attentions (b, L, nh, S, S)
                order += rows
    return placed(order, parts)


def finished(results: list, unknown: Mapping[int, str] | None, single: bool) -> object:
    """A pipeline's return: its results, each of a text mostly [UNK] flagged with ``"warning"``
    (:func:`~bertfn.checkpoint.resolve.flag_unknown`); the one result alone where one text came.

    Args:
        results: one per text, in order (their dicts changed in place).
        unknown: ``{text: what the tokenizer says of it}`` for the texts mostly [UNK], or None.
        single: one text came.
    """
    results = flag_unknown(results, unknown)
    return results[0] if single else results
