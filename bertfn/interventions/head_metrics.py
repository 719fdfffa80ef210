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

The sequence classifier's metrics take ``head=`` and ``labels=`` as :func:`bertfn.classify` does
(:func:`~bertfn.checkpoint.resolve.head_labels`): ``head="cls.species"`` reads a linear head the checkpoint stores beside its own parts
(:attr:`~bertfn.checkpoint.model.Model.extra_heads`, AntiBERTy's species and chain heads) on the pooler's output,
``W run["pooler"][0] + b``, and ``labels=`` names the head's outputs (default: ``LABEL_0``, ``LABEL_1``, ...; for
the checkpoint's classifier its ``id2label``)::

    metric = bertfn.interventions.label_difference("Mouse", "Human", head="cls.species", labels=SPECIES)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..checkpoint.resolve import head_labels
from ..errors import InputError
from ..inspect.trace import Recording
from ..model.functional import linear
from ..model.task_heads import problem_type
from ..tasks.classify import class_scores, default_function
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


def extra_head_logits(run: Recording, head: str) -> Tensor:
    """(n,): the logits of the run's one text of the linear head ``head`` on the pooler's output,
    ``W run["pooler"][0] + b``.

    Mirrors AntiBERTy's ``AntiBERTyHeads`` (``self.species(pooled_output)``) as
    :func:`~bertfn.tasks.classify.pooled_linear_outputs` runs it, on a recorded run.

    Args:
        run: a recording of the model (``run.model``) that holds ``pooler`` (1, H).
        head: a key prefix of :attr:`~bertfn.checkpoint.model.Model.extra_heads` (reads ``{head}.weight`` (n, H) and
            ``{head}.bias`` (n,)).
    """
    state = run.model.state
    return linear(run["pooler"][0], state[f"{head}.weight"], state[f"{head}.bias"])


def _head_logits(run: Recording, head: str | None, labels: Sequence[str] | None,
                 what: str) -> tuple[Tensor, tuple[str, ...]]:
    """(n,) the logits of the run's one text and the n names of the head that ``head`` and ``labels`` choose
    (:func:`~bertfn.checkpoint.resolve.head_labels`): the checkpoint's sequence classifier's, or an extra head's (:func:`extra_head_logits`).

    Raises:
        InputError: as :func:`head_labels`, and as :func:`_class_logits`.
        MissingPartError: as :func:`head_labels`.
    """
    if head is None and labels is None:
        return _class_logits(run), run.config.labels
    names = head_labels(run.model, head, labels, what)
    if head is None:
        return _class_logits(run), names
    return _wide(extra_head_logits(run, head)), names


def _position(position: int, S: int, what: str) -> int:
    """``position`` checked against the text's S tokens."""
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < S:
        raise InputError(f"{what} must be a token's position from 0 to {S - 1} (the text has {S} tokens), got {position!r}")
    return position


def label_logit(label: int | str, *, head: str | None = None, labels: Sequence[str] | None = None) -> Metric:
    """A metric: a sequence classifier's logit of ``label`` (``*ForSequenceClassification``'s ``logits[0, label]``),
    or an extra head's on the pooler (AntiBERTy's ``species_logits[0, label]``).

    Args:
        label: the label's name (``config.id2label``, or ``labels``) or id.
        head: None: the checkpoint's classifier; an extra head's key prefix (``"cls.species"``), as
            :func:`bertfn.classify` takes it (:func:`~bertfn.checkpoint.resolve.head_labels`).
        labels: the names of the head's outputs, in order (as :func:`bertfn.classify` takes them).

    Returns:
        ``metric(run) -> scalar tensor``, read from ``run["classifier.logits"]`` (1, num_labels), or with ``head``
        from ``run["pooler"]`` (1, H) through ``{head}.weight`` (n, H) and ``{head}.bias`` (n,).
    """
    def metric(run: Recording) -> Tensor:
        logits, names = _head_logits(run, head, labels, "label_logit")
        return logits[label_index(names, label)]

    return metric


def label_probability(label: int | str, *, head: str | None = None, labels: Sequence[str] | None = None) -> Metric:
    """A metric: a sequence classifier's probability of ``label``, as ``pipeline("text-classification")`` scores it.

    The softmax over the labels, or the label's sigmoid where the head is multi-label
    (``problem_type`` "multi_label_classification"); an extra head's as :func:`bertfn.classify` scores it (the softmax,
    the sigmoid for a head of one output: :func:`~bertfn.tasks.classify.default_function`).

    Args:
        label: the label's name or id.
        head: None: the checkpoint's classifier; an extra head's key prefix, as in :func:`label_logit`.
        labels: the names of the head's outputs, as in :func:`label_logit`.

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["classifier.logits"]`` (with ``head``: from ``run["pooler"]``).

    Raises:
        InputError: (when run) a regression head, whose one output is no probability.
    """
    def metric(run: Recording) -> Tensor:
        logits, names = _head_logits(run, head, labels, "label_probability")
        i = label_index(names, label)
        if head is not None:
            return class_scores(logits[None], default_function(None, len(names)))[0, i]
        kind = problem_type(run.config)
        if kind == "regression":
            raise InputError("this head is a regression (one number, no labels' probabilities); read its value with "
                             "iv.label_logit(0)")
        return torch.sigmoid(logits[i]) if kind == "multi_label_classification" else logits.softmax(-1)[i]

    return metric


def label_difference(a: int | str, b: int | str, *, head: str | None = None,
                     labels: Sequence[str] | None = None) -> Metric:
    """A metric: a sequence classifier's logit of label ``a`` minus that of ``b`` (e.g. "positive" - "negative"), or an
    extra head's on the pooler (e.g. "Mouse" - "Human").

    Args:
        a: the label whose logit counts positively (name or id).
        b: the label whose logit is subtracted.
        head: None: the checkpoint's classifier; an extra head's key prefix, as in :func:`label_logit`.
        labels: the names of the head's outputs, as in :func:`label_logit`.

    Returns:
        ``metric(run) -> scalar tensor`` from ``run["classifier.logits"]`` (with ``head``: from ``run["pooler"]``).
    """
    def metric(run: Recording) -> Tensor:
        logits, names = _head_logits(run, head, labels, "label_difference")
        return logits[label_index(names, a)] - logits[label_index(names, b)]

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
