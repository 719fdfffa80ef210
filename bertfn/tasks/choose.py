"""Multiple choice: which of a prompt's choices a ``*ForMultipleChoice`` checkpoint finds the best, with its probability.

transformers has no pipeline for this head; :func:`choose` is one in the spirit of the zero-shot classification
pipeline, whose result it shares: per prompt ``{"prompt", "choices", "scores"}``, the choices best first with the
softmax of their logits over the prompt's choices.

The steps, as a SWAG-style model reads its inputs (transformers' ``examples/pytorch/multiple-choice/run_swag.py``):

    items     (prompt, [choice_1 .. choice_C])  ->  C rows, each the text pair (prompt, choice_c):
              [CLS] prompt [SEP] choice_c [SEP] (or the member's template: <s> prompt </s></s> choice_c </s>)
    logits    the model's multiple-choice head on each row: one number per row (:func:`choice_logits`);
              ``{Prefix}ForMultipleChoice(**enc)`` computes the same on the rows padded to (B, C, S)
    scores    softmax over each prompt's C logits, choices sorted best first (:func:`ranked`)

The rows run on the fast path (:func:`~bertfn.tasks.runner.head_logits`: sorted by length, laid end to end, the
last layer at each row's first token alone where the head reads only that), so prompts may have different numbers
of choices and one long choice costs nothing to the short ones. A row longer than the model's positions is refused
(:class:`~bertfn.errors.InputError` naming the prompt and the choice); run_swag cuts such rows to
``max_seq_length`` instead, which changes the question: shorten the prompt.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, refuse_long
from ..checkpoint.model import Model
from ..checkpoint.resolve import listed
from ..checkpoint.tokenizer import check_text, warn_texts
from ..errors import InputError, UnknownTokensWarning, clipped
from ..model.family import longest_input
from ..model.recorder import NO_TRACE, Edit, Trace
from .runner import finished, head_logits, loaded
from .task import Task

Tensor = torch.Tensor

Item = tuple[str, list[str]]
"""One question: the prompt and its choices."""


def _checked(i: int, prompt: object, choices: object) -> Item:
    """Item ``i`` as ``(prompt, choices)``, or the :class:`InputError` saying what is wrong with it.

    Args:
        i: the item's index (messages speak of it as "text i", as every task's do).
        prompt: its prompt.
        choices: its choices.
    """
    check_text(prompt, f"text {i}'s prompt")  # "" and "   " are scored, as the model scores [CLS] [SEP] choice [SEP]
    if isinstance(choices, str) or not isinstance(choices, (list, tuple)):
        raise InputError(f"text {i}'s choices must be a list of strings, got {type(choices).__name__}: {clipped(choices, 60)}")
    if not choices:
        raise InputError(f"text {i} has no choices; give at least one (a prompt's scores are over its choices)")
    for j, c in enumerate(choices):
        check_text(c, f"text {i}'s choice {j}")
    return prompt, [str(c) for c in choices]


def choice_items(prompts, choices) -> tuple[list[Item], bool]:
    """``(items, single)``: each question's prompt and choices as :func:`choose` takes them, and whether one came.

    The forms: one prompt and its list of choices; a list of prompts and one list of choices for all of them (as the
    zero-shot pipeline shares its labels) or a list of lists, one per prompt; or items ``{"prompt": ..., "choices":
    [...]}``, one or a list of them (as a corpus file's JSON lines give them), with no ``choices`` argument.

    Args:
        prompts (str | Sequence[str] | dict | Sequence[dict]): the prompts, or the items.
        choices (Sequence[str] | Sequence[Sequence[str]] | None): the choices, or None with items.

    Raises:
        InputError: a form that is none of these, a prompt or choice that is no string, a prompt without choices,
            or a list of lists of another length than the prompts (an empty or blank prompt or choice is scored, as
            transformers' tokenizer and model score it).
    """
    single = isinstance(prompts, (str, dict))
    given = [prompts] if single else prompts
    if isinstance(given, (set, frozenset, bytes)) or not hasattr(given, "__len__") or not hasattr(given, "__iter__"):
        raise InputError(f"choose takes a prompt, a list of prompts, or items {{'prompt': ..., 'choices': [...]}}; got "
                         f"{type(prompts).__name__}: {clipped(prompts, 80)}")
    given = list(given)
    if not given:
        raise InputError(f"choose takes at least one prompt, got an empty {type(prompts).__name__}")
    if any(isinstance(p, dict) for p in given):
        if choices is not None:
            raise InputError("the items hold their own choices; pass the model as model=, not a second list of choices")
        items = []
        for i, item in enumerate(given):
            if not isinstance(item, dict) or set(item) != {"prompt", "choices"}:
                got = sorted(item) if isinstance(item, dict) else type(item).__name__
                raise InputError(f"text {i} must be a dict {{'prompt': ..., 'choices': [...]}}, got {got}")
            items.append(_checked(i, item["prompt"], item["choices"]))
        return items, single
    choices = listed(choices)  # a numpy array, a pandas Series
    if choices is None or isinstance(choices, str) or not isinstance(choices, (list, tuple)) or not choices:
        raise InputError(f"choices must be a non-empty list of strings (or one list per prompt), got {clipped(choices, 80)}")
    if all(isinstance(c, (list, tuple)) for c in choices):  # one list per prompt
        if single or len(choices) != len(given):
            raise InputError(f"got {len(given)} prompt(s) and {len(choices)} lists of choices; pass one list per "
                             "prompt, or one list of strings for all of them")
        return [_checked(i, p, c) for i, (p, c) in enumerate(zip(given, choices))], single
    return [_checked(i, p, choices) for i, p in enumerate(given)], single


def choice_logits(m: Model, items: list[Item], batch_size: int = 32,
                  points: Trace = NO_TRACE) -> tuple[list[Tensor], dict[int, str]]:
    """Each item's logits, one per choice: the model's multiple-choice head on its (prompt, choice) rows.

    ``{Prefix}ForMultipleChoice(input_ids (B, C, S), ...).logits`` (B, C) for B prompts of C choices each, the rows
    tokenized as text pairs (run_swag's ``tokenizer(first_sentences, second_sentences)``); here the prompts may have
    different numbers of choices, and the rows run on the fast path (:func:`~bertfn.tasks.runner.head_logits`).
    Call it with the model's tokenizer and head checked (:func:`choose` does).

    Args:
        m: a model with a multiple-choice head and its tokenizer.
        items: ``(prompt, choices)`` per question (:func:`choice_items`).
        batch_size: rows per encoder pass, at most.
        points: a :class:`~bertfn.model.recorder.Trace` with edits (each point in the shape of its group's padded
            batch, and edits of ``classifier.logits`` apply).

    Returns:
        Per item, (C,) float32 logits in the order of its choices, on the model's device; and ``{item: what the
            tokenizer says of it}`` for the items with a row of mostly [UNK] (:meth:`~bertfn.checkpoint.tokenizer.
            Tokenizer.unknown`), which the caller says per item, not per row.

    Raises:
        InputError: a (prompt, choice) row longer than the model reads.
    """
    rows = [(i, j) for i, (_, choices) in enumerate(items) for j in range(len(choices))]  # N rows: (item, choice)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnknownTokensWarning)  # it would name rows; the caller names items
        enc = m.tokenizer([items[i][0] for i, _ in rows], [items[i][1][j] for i, j in rows])  # (N, S), text pairs
    unknown: dict[int, str] = {}
    for row, said in sorted((enc.unknown or {}).items()):
        unknown.setdefault(rows[row][0], said)
    lengths = enc.attention_mask.sum(dim=1).tolist()
    limit = longest_input(m.config)
    refuse_long(lengths, limit, "shorten the prompt or that choice (each choice is read with all of the prompt)",
                named=lambda r: f"text {rows[r][0]} with choice {rows[r][1]}")
    scores = head_logits(m, enc, lengths, "multiple-choice", batch_size=batch_size, points=points)  # per row: (1,)
    flat = torch.cat(scores).float()  # (N,)
    return list(flat.split([len(choices) for _, choices in items])), unknown  # per item: (C,)


def ranked(prompt: str, choices: list[str], logits: Tensor) -> dict:
    """The zero-shot pipeline's result for one prompt: its choices best first, with the softmax of their logits.

    Args:
        prompt: the prompt.
        choices: its C choices.
        logits: (C,) their logits.

    Returns:
        ``{"prompt": prompt, "choices": [best first], "scores": [probabilities, best first]}``.
    """
    probs = logits.float().softmax(dim=-1)  # (C,)
    order = probs.argsort(descending=True, stable=True).tolist()
    probs = probs.tolist()
    return {"prompt": prompt, "choices": [choices[k] for k in order], "scores": [probs[k] for k in order]}


def choose(
    prompts: str | list[str] | dict | list[dict],
    choices: list[str] | list[list[str]] | Model | str | Path | None = None,
    model: Model | str | Path | None = None,
    *,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> dict | list[dict]:
    """Score each prompt's choices with a multiple-choice checkpoint (``*ForMultipleChoice``, SWAG-style).

    Each (prompt, choice) is a text pair, [CLS] prompt [SEP] choice [SEP] in BERT's template, and the head gives
    it one logit (:func:`choice_logits`); a prompt's scores are the softmax over its own choices. The result is the
    zero-shot classification pipeline's shape, with ``prompt`` and ``choices`` in place of its ``sequence`` and
    ``labels``. A prompt whose tokens are mostly [UNK] is warned about, and its result holds ``"warning"``.

    Args:
        prompts: a prompt (str), a list of them, or items ``{"prompt": str, "choices": [str, ...]}`` (one dict, or a
            list: a corpus file's lines), see :func:`choice_items`.
        choices: the choices: a list of strings (for one prompt, or shared by every prompt of a list), or one list
            per prompt. With items there are none: the second argument is then the model
            (``choose(items, model)``, as a corpus runs it).
        model: a ``*ForMultipleChoice`` checkpoint: a loaded :class:`Model`, a local folder or a hub id (no default: one must be given).
        batch_size: (prompt, choice) rows per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the bf16 mode; scores are computed in float32).
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder` takes them;
            the edits see each point in the shape of its group's padded batch, and edits of the head's points (``pooler``,
            ``classifier.logits``) apply too.

    Returns:
        For one prompt ``{"prompt": str, "choices": [str, ...] best first, "scores": [float, ...] best first}`` (the
            scores sum to 1); for a list, a list of such dicts in the order of the prompts.

    Raises:
        InputError: bad prompts or choices (:func:`choice_items`), a (prompt, choice) longer than the model reads, a
            bad batch_size.
        MissingPartError: a model without a tokenizer, or one that is not a multiple-choice checkpoint (naming
            the call that runs it).

    Warns:
        UnknownTokensWarning: prompts or choices whose tokens are mostly [UNK].

    Example:
        ``choose("The man picked up the guitar.", ["He played a song.", "He ate it."], "./swag-model")``
        -> ``{"prompt": ..., "choices": [the likelier ending, the other], "scores": [its probability, the other's]}``.
    """
    listed = prompts if isinstance(prompts, (list, tuple)) else [prompts]
    is_items = any(isinstance(p, dict) for p in listed)
    if is_items and model is None and choices is not None and not isinstance(choices, (list, tuple)):
        choices, model = None, choices  # choose(items, model): the items hold their choices
    items, single = choice_items(prompts, choices)
    count("batch_size", batch_size)

    m, _, points = loaded(TASK, model, device, dtype, edits, head="multiple-choice")
    logits, unknown = choice_logits(m, items, batch_size, points)
    warn_texts(unknown, UnknownTokensWarning)
    return finished([ranked(p, c, x) for (p, c), x in zip(items, logits)], unknown, single)


TASK = Task("choose", choose, probe={"prompt": "a", "choices": ["a", "b"]}, inputs=("prompt", "choices"), fast=True, model=None)
"""The task (:mod:`bertfn.tasks.task`) :func:`choose` is: ``bertfn choose``, the corpus's ``Choose``."""
