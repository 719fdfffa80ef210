"""What every pipeline does before and after its own step, written once.

    texts, single, model = texts_in(texts, model, "tag", blank=True)    the texts, whether one came, the model
    ... the options checked (bertfn/tasks/checks.py) ...
    m, tok, points = loaded("tag", model, device, dtype, edits, head="token-classification")
    ... the pipeline's own step: results per text, and the texts mostly [UNK] ...
    return finished(results, unknown, single)                            one result, or the list

:func:`loaded` resolves the model (:func:`~bertfn.checkpoint.resolve.get_model`), with its layers' weights packed
for the fast path where the pipeline runs on it alone (no edits: :func:`~bertfn.fast.choice.pack_state`), checks its
tokenizer and head, and turns the edits into a :class:`~bertfn.model.recorder.Trace`. :func:`finished` flags each
result of a text mostly [UNK] (:func:`~bertfn.checkpoint.resolve.flag_unknown`) and gives one result for one text.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import flag_unknown, get_model, require_head, require_tokenizer, text_list, texts_and_model
from ..checkpoint.tokenizer import Tokenizer
from ..fast.choice import pack_state
from ..model.recorder import NO_TRACE, Edit, Trace, with_edits


class Loaded(NamedTuple):
    """What a pipeline runs on: the model, its tokenizer and the trace that carries the caller's edits."""

    model: Model
    tokenizer: Tokenizer
    points: Trace


def texts_in(texts, model, what: str, *, blank: bool = False) -> tuple[list[str], bool, object]:
    """``(texts, single, model)`` of a pipeline written ``what(texts, model)``: its texts as a list, whether one text
    came (its result alone), and the model, with the order checked.

    Args:
        texts (str | Sequence[str]): what the caller passed first.
        model (object): what it passed second.
        what: the call, for the messages (``"fill_mask"``).
        blank: take an empty or blank text, as the task's transformers pipeline answers one
            (:func:`~bertfn.checkpoint.resolve.text_list`).

    Raises:
        InputError: the model first (:func:`~bertfn.checkpoint.resolve.texts_and_model`), no texts, or a text that is
            no string (or, without ``blank``, a blank one).
    """
    texts, model = texts_and_model(texts, model, what)
    batch, single = text_list(texts, what, blank=blank)
    return batch, single, model


def loaded(what: str, model: Model | str | Path | None, device: str | torch.device | None,
           dtype: torch.dtype | str | None, edits: Mapping[str, Edit] | None, *, head: str | None = None,
           fast: bool = True) -> Loaded:
    """The model a pipeline runs (loaded once per process by name), its tokenizer and its edits' trace.

    Args:
        what: the call, for the messages (``"classify"``).
        model: a loaded :class:`Model`, a local folder or a hub id (:func:`~bertfn.checkpoint.resolve.get_model`).
        device: where it runs.
        dtype: the precision it runs in.
        edits: ``{point name: edit(tensor, point) -> tensor}`` (:mod:`bertfn.interventions`), or None.
        head: the head the pipeline reads (a task of :data:`~bertfn.model.task_heads.TASKS`,
            ``"token-classification"``); None: no check here (the caller checks its own part).
        fast: without edits the pipeline runs on the fast path alone: the model is the one whose weights are packed
            as that path reads them (:func:`~bertfn.fast.choice.pack_state`); False: the plain one.

    Returns:
        ``(model, tokenizer, points)``.

    Raises:
        InputError: a ``model`` that is no model (:func:`~bertfn.checkpoint.resolve.get_model`).
        MissingPartError: a model without a tokenizer, or without ``head``.
    """
    m = get_model(model, device, dtype, prepare=pack_state if fast and not edits else None)
    tok = require_tokenizer(m, what)
    if head is not None:
        require_head(m, head, what)
    return Loaded(m, tok, with_edits(NO_TRACE, edits, m.config))


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
