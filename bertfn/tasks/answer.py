"""Extractive question answering: the span of a context that answers a question, shaped like transformers'
``pipeline("question-answering")``.

The pipeline, one named step a function:

    inputs       question(s) and context(s), or dicts {"question", "context"}  (:func:`question_context_pairs`)
    windows      [CLS] question [SEP] context [SEP], the context cut into windows of at most max_seq_len tokens that
                 overlap by doc_stride tokens, as the fast tokenizer cuts them (:mod:`bertfn.tasks.answer_windows`)
    reader       the checkpoint's question-answering head on every window, on the fast path: start and end logits
                 (:func:`~bertfn.tasks.runner.head_logits`)
    spans        the best spans of each window, in characters of the context, the best over the windows
                 (:mod:`bertfn.tasks.answer_spans`)

A checkpoint fine-tuned on SQuAD is such a reader (``distilbert/distilbert-base-cased-distilled-squad``, the
pipeline's default and this call's); a checkpoint with another head is refused with the call that runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, flag
from ..checkpoint.model import Model
from ..checkpoint.resolve import flag_unknown, listed, refuse_empty, texts_and_model
from ..checkpoint.tokenizer import check_text
from ..errors import InputError, clipped
from ..model.family import longest_input
from ..model.recorder import Edit
from .answer_spans import best_answers
from .answer_windows import Pairs, answerable, context_windows, option, window_batch
from .pairs import longest_pair
from .runner import finished, head_logits, loaded
from .task import Task

DEFAULT_READER = "distilbert/distilbert-base-cased-distilled-squad"
"""The model :func:`answer` loads when given none: transformers' default for ``pipeline("question-answering")``."""

def question_context_pairs(question, context) -> tuple[Pairs, list[str], list, bool]:
    """The (question, context) pairs of a call, and how to give their answers back.

    What transformers' pipeline takes: a question and a context; a list of questions over one context; a list of
    each, paired in order; a dict ``{"question": ..., "context": ...}`` (each value a string or a list, as above) or
    a list of such dicts (one per item, as a corpus hands them over). One question over a list of contexts pairs it
    with each.

    Args:
        question (str | list[str] | dict | list[dict]): the question(s), or the dict(s) holding both.
        context (str | list[str] | None): the context(s); None when ``question`` holds dicts.

    Returns:
        ``(pairs, labels, shape, single)``: the pairs in order; how messages name each pair ("text 3", or
            "text 3 (question 1)" for the second pair of a dict of lists); per item, the index of its pair or a list
            of indices (an item of several pairs); and whether the call was of one item (its result alone).

    Raises:
        InputError: a missing or empty (``""``) question or context, as the pipeline refuses them (it answers a
            blank one, and so does this), lists of different lengths, or another kind of input.
    """
    if holds_dicts(question):
        if context is not None:
            raise InputError("the dicts hold the contexts, so context must not be given too; pass answer(dicts, model)")
        items, single = ([question], True) if isinstance(question, Mapping) else (list(question), False)
        for n, item in enumerate(items):
            missing = [k for k in ("question", "context") if item.get(k) is None]
            if missing:
                raise InputError(f"text {n} has no {' or '.join(missing)}; pass dicts "
                                 '{"question": "...", "context": "..."}')
        items = [(item["question"], item["context"]) for item in items]
    elif context is None:
        raise InputError("answer takes a question and the context that holds its answer, answer(question, context, "
                         'model), or dicts {"question": ..., "context": ...}; got no context')
    else:
        items, single = [(question, context)], True
    pairs: Pairs = []
    labels: list[str] = []
    shape: list = []
    for n, (q, c) in enumerate(items):
        many = _text_list(q, c, n)
        if many is None:
            shape.append(len(pairs))
            pairs.append((q, c))
            labels.append(f"text {n}")
        else:
            shape.append(list(range(len(pairs), len(pairs) + len(many))))
            pairs += many
            labels += [f"text {j}" if single and n == 0 else f"text {n} (question {j})" for j in range(len(many))]
    for (q, c), label in zip(pairs, labels):
        for text, what in ((q, "question"), (c, "context")):
            check_text(text, f"{label}'s {what}")
            refuse_empty(text, f"{label}'s {what}", "question-answering",  # "   " is answered, as the pipeline does
                         f"write the {what}{' to answer' if what == 'question' else ' that holds the answer'}")
    if single and isinstance(shape[0], list):  # one item of several pairs: a list of results, one per pair
        shape, single = shape[0], False
    return pairs, labels, shape, single


def holds_dicts(question: object) -> bool:
    """Whether ``question`` is a dict ``{"question", "context"}`` or a non-empty list of them.

    Args:
        question: what :func:`answer` got first.
    """
    return isinstance(question, Mapping) or isinstance(question, (list, tuple)) and bool(question) \
        and all(isinstance(q, Mapping) for q in question)


def _text_list(q, c, n: int) -> Pairs | None:
    """The pairs of item ``n`` when its question or context is a list (None when both are strings).

    Args:
        q (str | list[str]): the item's question(s).
        c (str | list[str]): its context(s): one for every question, or one for them all.
        n: the item's index, for the messages.

    Raises:
        InputError: neither a string nor a non-empty list, or lists of different lengths.
    """
    def strings(x) -> list[str] | None:
        if isinstance(x, str):
            return None
        x = listed(x)  # a numpy array, a pandas Series
        if isinstance(x, (list, tuple)) and x:
            return [str(t) if isinstance(t, str) else t for t in x]  # numpy's str_ -> str
        raise InputError(f"text {n}: a question and a context are strings or non-empty lists of strings, got "
                         f"{type(x).__name__}: {clipped(x, 80)}")

    qs, cs = strings(q), strings(c)
    if qs is None and cs is None:
        return None
    if qs is not None and cs is not None and len(qs) != len(cs):
        raise InputError(f"text {n}: {len(qs)} questions but {len(cs)} contexts; pass one context per question, "
                         "or one context for them all")
    qs, cs = qs or [q] * len(cs), cs or [c] * len(qs)
    return list(zip(qs, cs))


def answer(
    question: str | list[str] | dict[str, str] | list[dict[str, str]],
    context: str | list[str] | None = None,
    model: Model | str | Path | None = None,
    *,
    top_k: int = 1,
    doc_stride: int | None = None,
    max_answer_len: int = 15,
    max_seq_len: int | None = None,
    max_question_len: int = 64,
    handle_impossible_answer: bool = False,
    align_to_words: bool = True,
    batch_size: int = 16,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> dict | list:
    """The span of each context that answers its question, as ``transformers.pipeline("question-answering")``.

    The pipeline's own example: ``answer("Where do I live?", "My name is Wolfgang and I live in Berlin",
    "deepset/roberta-base-squad2")`` -> ``{"score": 0.9191, "start": 34, "end": 40, "answer": "Berlin"}`` (the score as
    transformers' docstring gives it).

    Args:
        question: a question, a list of questions (over one context, or each over its own), a dict
            ``{"question": ..., "context": ...}`` or a list of such dicts (:func:`question_context_pairs`).
        context: the context(s) the answers are taken from; none when ``question`` holds dicts (then the second
            argument, when given, is the model).
        model: a reader (a ``*ForQuestionAnswering`` checkpoint): a hub id, a local folder or a loaded
            :class:`Model` (default: :data:`DEFAULT_READER`).
        top_k: answers per question, at most (fewer when the context has fewer).
        doc_stride: context tokens consecutive windows share, when a context does not fit in one (default:
            ``min(max_seq_len // 2, 128)``); at most ``max_seq_len``, and less than a window's room for the context.
        max_answer_len: tokens per answer, at most.
        max_seq_len: tokens per window, question and special tokens included (default: ``min(384, the tokens the
            model reads)``, those the tokenizer's ``model_max_length`` allows where fewer, as the pipeline's default:
            :func:`~bertfn.tasks.pairs.longest_pair`); at most what the model reads.
        max_question_len: accepted as the pipeline accepts it; its fast-tokenizer path, which this mirrors, does not
            read it (a longer question is kept whole, and one that leaves no room for the context is an error).
        handle_impossible_answer: let "no answer" compete: ``{"answer": "", "start": 0, "end": 0}`` scored by the
            lowest [CLS] score (``p_start[CLS] * p_end[CLS]``) over the windows.
        align_to_words: widen each answer to the whole words its first and last tokens belong to.
        batch_size: windows per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the faster bf16 mode; the softmax runs in float32).
        edits: ``{point name: edit(tensor, point) -> tensor}``, as :func:`~bertfn.model.encoder.encoder` takes them,
            the head's ``qa.start_logits`` and ``qa.end_logits`` included; the edits see each point in the shape of its
            group's padded batch (:func:`~bertfn.tasks.runner.head_logits`).

    Returns:
        Per question, its best answer ``{"score", "start", "end", "answer"}`` (``start``/``end`` index the
            characters of its context, ``answer`` is ``context[start:end]``), or with ``top_k`` > 1 a list of up to
            ``top_k`` of them, best first (one alone is given as the dict, as in the pipeline); for one question
            that, for several a list of those, one per question (a list even of one: the pipeline gives a list of
            one question its result alone). An answer found in several windows scores the sum of its scores there.

    Raises:
        InputError: an empty question or context (``""``, as the pipeline refuses it; a blank one is answered), bad
            options, a ``max_seq_len`` that leaves a question no room for its context or that the model cannot read.
        MissingPartError: a model without a tokenizer or without a question-answering head.

    Warns:
        UnknownTokensWarning: pairs whose tokens are mostly [UNK] (their results hold ``"warning"`` too).
    """
    if isinstance(context, Model) and not holds_dicts(question):  # answer(questions, model): a stream's plain texts
        raise InputError("answer takes a question and the context that holds its answer, answer(question, context, "
                         'model), or dicts {"question": ..., "context": ...} (a list of them: a file\'s or a '
                         "stream's items); got the model where the context goes")
    if holds_dicts(question) and context is not None and model is None:  # answer(dicts, model)
        context, model = None, context
    question, model = texts_and_model(question, model, "answer")
    pairs, labels, shape, single = question_context_pairs(question, context)
    for name, value in (("top_k", top_k), ("max_answer_len", max_answer_len), ("batch_size", batch_size),
                        ("max_question_len", max_question_len)):
        count(name, value)
    count("max_seq_len", max_seq_len, none="as the model reads, at most 384")  # None: defaults that depend on the model
    count("doc_stride", doc_stride, least=0, none="half a window, at most 128")
    flag("handle_impossible_answer", handle_impossible_answer)
    flag("align_to_words", align_to_words)

    m, tok, points = loaded(TASK, model, device, dtype, edits,
                            head="question-answering")
    longest = longest_input(m.config)
    if max_seq_len is None:  # the pipeline's min(384, the tokenizer's model_max_length)
        max_seq_len = min(384, longest_pair(m))
    elif max_seq_len > longest:
        raise InputError(f"{option('max_seq_len', max_seq_len)}, but model {m.name!r} reads at most {longest} tokens "
                         f"at a time; pass {option('max_seq_len', longest)} or less")
    if doc_stride is None:
        doc_stride = min(max_seq_len // 2, 128)
    elif doc_stride > max_seq_len:
        raise InputError(f"{option('doc_stride', doc_stride)} is more than {option('max_seq_len', max_seq_len)}; the "
                         f"windows share {option('doc_stride')} tokens of context, so pass a smaller one")

    windows, unknown = context_windows(tok, pairs, labels, max_seq_len, doc_stride)
    flat = [w for ws in windows for w in ws]
    enc, lengths = window_batch(tok, flat, m.config.type_vocab_size > 1)
    logits = head_logits(m, enc, lengths, "question-answering", batch_size=batch_size, points=points)
    logits = [(start.float().cpu().numpy(), end.float().cpu().numpy()) for start, end in logits]  # (n,) each
    results, first = [], 0
    for (_, c), ws in zip(pairs, windows):
        results.append(best_answers(c, ws, logits[first:first + len(ws)], [answerable(tok, w) for w in ws],
                                    top_k=top_k, handle_impossible_answer=handle_impossible_answer,
                                    max_answer_len=max_answer_len, align_to_words=align_to_words))
        first += len(ws)
    results = flag_unknown(results, unknown)  # per pair; an item of several pairs gets the list of theirs
    return finished([results[i] if isinstance(i, int) else [results[j] for j in i] for i in shape], None, single)


TASK = Task("answer", answer, probe={"question": "a", "context": "a"}, inputs=("question", "context"), fast=True,
            model=DEFAULT_READER)
"""The task (:mod:`bertfn.tasks.task`) :func:`answer` is: ``bertfn answer``, the corpus's ``Answer``."""
