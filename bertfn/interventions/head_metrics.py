"""Metrics of a fine-tuned head's outputs: what a study of a classifier's, a tagger's or a reader's decision measures.

    metric = bertfn.interventions.label_difference("positive", "negative")
    study = bertfn.interventions.sweep(positive_reviews, negative_reviews, classifier, metric, over="heads")

Each is a metric of the run, ``metric(run) -> scalar tensor``, as :func:`~bertfn.interventions.logit_difference` is
for a masked LM, read from the task head's points that :func:`bertfn.trace` and the studies record
(:mod:`bertfn.model.task_heads`):

=============================  ============================================  ======================================
metric                         reads                                         head
=============================  ============================================  ======================================
:func:`label_logit`            ``classifier.logits[0, label]``               a sequence classifier's (1, num_labels)
:func:`label_probability`      its softmax (sigmoid for multi-label) there   the same
:func:`label_difference`       ``classifier.logits[0, a] - [0, b]``          the same
:func:`entity_score`           ``classifier.logits[0, position, label]``     a tagger's (1, S, num_labels)
:func:`span_score`             ``qa.start_logits[0, start] + qa.end_logits[0, end]``  a reader's, (1, S) each
=============================  ============================================  ======================================

A label is a name of the head's (``config.id2label``, :attr:`~bertfn.model.config.BertConfig.labels`) or its id;
it is looked up on the run's config, so one metric serves any checkpoint that has the label. The logits are read
in float32 or wider, as :func:`~bertfn.interventions.at_masks` reads the MLM's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import InputError
from ..inspect.trace import Recording
from ..model.task_heads import problem_type
from .patching import Metric

Tensor = torch.Tensor


def label_index(labels: Sequence[str], label: int | str) -> int:
    """The index of ``label`` among a head's outputs: one of their names, or an id.

    Args:
        labels: the names of the head's outputs by index (``config.labels``: ``config.id2label``'s).
        label: a label's name (``"positive"``) or id.

    Raises:
        InputError: a name the head lacks or an id out of range, naming the head's labels.
    """
    known = f"its labels are {', '.join(map(repr, labels))} (ids 0 to {len(labels) - 1})"
    if isinstance(label, str):
        if label not in labels:
            raise InputError(f"the head has no label {label!r}; {known}")
        return labels.index(label)
    if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(labels):
        raise InputError(f"a label is a name of the head's or an id from 0 to {len(labels) - 1}, got {label!r}; {known}")
    return label


def _wide(x: Tensor) -> Tensor:
    """``x`` in float32 where it is half precision (a metric's arithmetic in fp32 or wider)."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _class_logits(run: Recording) -> Tensor:
    """(num_labels,): a sequence classifier's logits of the run's one text.

    Raises:
        InputError: the run's ``classifier.logits`` are a tagger's (one row per token).
    """
    logits = run["classifier.logits"]
    if logits.dim() != 2:
        raise InputError(f"classifier.logits here are {tuple(logits.shape)}, a tagger's (one row per token); read a "
                         "token's label with iv.entity_score(label, position)")
    return _wide(logits[0])


def _position(position: int, S: int, what: str) -> int:
    """``position`` checked against the text's S tokens."""
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < S:
        raise InputError(f"{what} must be a token's position from 0 to {S - 1} (the text has {S} tokens), got {position!r}")
    return position


def label_logit(label: int | str) -> Metric:
    """A metric: a sequence classifier's logit of ``label`` (``*ForSequenceClassification``'s ``logits[0, label]``).

    Args:
        label: the label's name (``config.id2label``) or id.

    Returns:
        ``metric(run) -> scalar tensor``, read from ``run["classifier.logits"]`` (1, num_labels).
    """
    def metric(run: Recording) -> Tensor:
        return _class_logits(run)[label_index(run.config.labels, label)]

    return metric


def label_probability(label: int | str) -> Metric:
    """A metric: a sequence classifier's probability of ``label``, as ``pipeline("text-classification")`` scores it.

    The softmax over the labels, or the label's sigmoid where the head is multi-label
    (``problem_type`` "multi_label_classification").

    Args:
        label: the label's name or id.

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["classifier.logits"]``.

    Raises:
        InputError: (when run) a regression head, whose one output is no probability.
    """
    def metric(run: Recording) -> Tensor:
        logits, i = _class_logits(run), label_index(run.config.labels, label)
        kind = problem_type(run.config)
        if kind == "regression":
            raise InputError("this head is a regression (one number, no labels' probabilities); read its value with "
                             "iv.label_logit(0)")
        return torch.sigmoid(logits[i]) if kind == "multi_label_classification" else logits.softmax(-1)[i]

    return metric


def label_difference(a: int | str, b: int | str) -> Metric:
    """A metric: a sequence classifier's logit of label ``a`` minus that of ``b`` (e.g. "positive" - "negative").

    Args:
        a: the label whose logit counts positively (name or id).
        b: the label whose logit is subtracted.

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["classifier.logits"]``.
    """
    def metric(run: Recording) -> Tensor:
        logits = _class_logits(run)
        return logits[label_index(run.config.labels, a)] - logits[label_index(run.config.labels, b)]

    return metric


def entity_score(label: int | str, position: int) -> Metric:
    """A metric: a tagger's logit of ``label`` at the token ``position`` (``*ForTokenClassification``'s
    ``logits[0, position, label]``), e.g. the "B-PER" logit of a name's first word piece.

    Args:
        label: the label's name (``"B-PER"``) or id.
        position: the token's position in the run's tokens (``[CLS]`` is 0).

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["classifier.logits"]`` (1, S, num_labels).
    """
    def metric(run: Recording) -> Tensor:
        logits = run["classifier.logits"]
        if logits.dim() != 3:
            raise InputError(f"classifier.logits here are {tuple(logits.shape)}, a sequence classifier's (one row per "
                             "text); read a label with iv.label_logit(label) or iv.label_difference(a, b)")
        return _wide(logits[0, _position(position, logits.shape[1], "position"), label_index(run.config.labels, label)])

    return metric


def span_score(start: int, end: int) -> Metric:
    """A metric: a reader's score of the answer span from token ``start`` to token ``end``, the sum of the start's and
    the end's logits (what ``pipeline("question-answering")`` ranks spans by before its softmax).

    Args:
        start: the span's first token's position (in the run's tokens: the question, then the context).
        end: its last token's position, ``start`` or after.

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["qa.start_logits"]`` and ``run["qa.end_logits"]`` (1, S) each.

    Raises:
        InputError: ``end`` before ``start`` (at once); positions past the text (when run).
    """
    if isinstance(start, int) and isinstance(end, int) and end < start:
        raise InputError(f"a span ends at or after its start, got start {start} and end {end}")

    def metric(run: Recording) -> Tensor:
        starts, ends = run["qa.start_logits"], run["qa.end_logits"]
        S = starts.shape[1]
        return _wide(starts[0, _position(start, S, "start")]) + _wide(ends[0, _position(end, S, "end")])

    return metric
