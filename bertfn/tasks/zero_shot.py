"""Zero-shot classification: labels chosen at call time, scored by an NLI classifier, as transformers'
``pipeline("zero-shot-classification")`` scores them.

A model trained on natural language inference (MNLI: does a premise entail a hypothesis, contradict it, or
neither?) classifies a text into any labels: each label becomes a hypothesis through a template ("This example is
sports."), and each (text, hypothesis) pair runs through the sequence classifier
(:func:`~bertfn.tasks.pairs.pair_logits`).
Its logits z (K labels, C NLI classes) become one score per label:

    one label at most true (default)   softmax over the K labels of z[:, entailment]: the scores sum to 1
    multi_label, or a single label     per label, softmax of (z[contradiction], z[entailment]), its second part

The entailment output is the config's label (``label2id``) whose name starts with "entail", case aside, as the
pipeline finds it; the contradiction output the one whose name starts with "contradict" (the pipeline takes
output 0, or the last when entailment is 0: the same on the usual MNLI checkpoints, which order their labels
contradiction, neutral, entailment or the reverse), or in a two-label model the other one ("not_entailment"). A
config that names no entailment label raises :class:`~bertfn.errors.MissingPartError` where the pipeline would
use output -1 with a logged warning.

Long texts: a pair longer than the model reads loses the end of its text, the hypothesis kept whole (truncation
"only_first", as the pipeline's tokenizer cuts it), with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from ..checkpoint.checks import count, flag
from ..checkpoint.model import Model
from ..checkpoint.resolve import fits, listed, refuse_empty
from ..checkpoint.tokenizer import check_text
from ..errors import InputError, MissingPartError, syntax
from ..model.config import BertConfig
from ..model.recorder import Edit
from .pairs import pair_logits
from .runner import finished, loaded, texts_in
from .task import Task

DEFAULT_TEMPLATE = "This example is {}."
"""The pipeline's hypothesis template: the label goes where ``{}`` is."""


def candidate_list(candidate_labels: str | list[str] | None) -> list[str]:
    """The labels as the pipeline reads them: a list as given, or a string split at its commas (``"politics, sports"``
    -> ``["politics", "sports"]``, spaces around each trimmed, empty pieces dropped).

    Args:
        candidate_labels: a string or a non-empty list of non-empty strings.

    Raises:
        InputError: none given, an empty list, or a label that is not a non-empty string.
    """
    if candidate_labels is None:
        raise InputError(f"zero-shot classification needs the labels to choose from: pass "
                         f"{syntax(python='candidate_labels=[...]', cli='--labels LABEL ...')}")
    candidate_labels = listed(candidate_labels)  # a numpy array, a pandas Series
    if isinstance(candidate_labels, str):
        check_text(candidate_labels, "candidate_labels")
        labels = [label.strip() for label in candidate_labels.split(",") if label.strip()]
    elif isinstance(candidate_labels, (list, tuple)):
        labels = list(candidate_labels)
        for i, label in enumerate(labels):
            check_text(label, f"label {i}")
            if not label.strip():
                raise InputError(f"label {i} is empty; each candidate label is a word or a phrase, e.g. 'sports'")
    else:
        raise InputError(f"candidate_labels must be a list of strings or one string of labels separated by commas, "
                         f"got {type(candidate_labels).__name__}")
    if not labels:
        raise InputError(f"candidate_labels holds no label ({candidate_labels!r}); pass at least one, e.g. ['sports']")
    return labels


def hypotheses(template: str, labels: list[str]) -> list[str]:
    """Each label put into the template: ``"This example is {}."`` -> ``"This example is sports."``.

    Args:
        template: a string with ``{}`` where the label goes (``str.format``'s syntax).
        labels: the K labels.

    Raises:
        InputError: a template with no place for the label (it formats to itself, as the pipeline checks) or one
            that ``str.format`` cannot fill with one value (``{name}``, a lone brace).
    """
    check_text(template, "hypothesis_template")
    try:
        filled = [template.format(label) for label in labels]
    except (IndexError, KeyError, ValueError) as e:
        raise InputError(f"hypothesis_template {template!r} cannot be filled with a label ({type(e).__name__}: {e}); "
                         "write {} where the label goes and double any other brace ({{ }})") from None
    if filled[0] == template:
        raise InputError(f"hypothesis_template {template!r} has no {{}} for the label, so every hypothesis would be "
                         f"the same; write e.g. {DEFAULT_TEMPLATE!r}")
    return filled


def nli_outputs(config: BertConfig) -> tuple[int | None, int | None]:
    """``(entailment, contradiction)``: the classifier's outputs of those names (see the module docstring), None
    where the config names none.

    Args:
        config: the model's config (``label2id``, else ``id2label``'s names).
    """
    label2id = config.label2id or {label: i for i, label in enumerate(config.labels)}
    entailment = next((i for label, i in label2id.items() if label.lower().startswith("entail")), None)
    contradiction = next((i for label, i in label2id.items() if label.lower().startswith("contradict")), None)
    if contradiction is None and entailment is not None and config.num_labels == 2:
        contradiction = 1 - entailment  # {entailment, not_entailment}
    return entailment, contradiction


def zero_shot(
    texts: str | list[str],
    model: Model | str | Path | None = None,
    *,
    candidate_labels: str | list[str] | None = None,
    hypothesis_template: str = DEFAULT_TEMPLATE,
    multi_label: bool = False,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    edits: Mapping[str, Edit] | None = None,
) -> dict | list[dict]:
    """Score ``candidate_labels`` for each text with an NLI classifier (``pipeline("zero-shot-classification")``).

    The N texts x K labels pairs (text, hypothesis) run ``batch_size`` at a time through the sequence classifier,
    sorted by length and laid end to end without padding.

    Args:
        texts: one text, or a list of N texts.
        model: a sequence classifier trained on NLI (e.g. ``FacebookAI/roberta-large-mnli``): a loaded
            :class:`Model`, a local folder or a hub id (no default: one must be given).
        candidate_labels: the K labels, a list or one string separated by commas (:func:`candidate_list`).
        hypothesis_template: each label's hypothesis, the label where ``{}`` is (:func:`hypotheses`).
        multi_label: score each label alone (entailment against contradiction), so that several may be true;
            False: the scores are a softmax over the labels and sum to 1. One label is always scored alone.
        batch_size: pairs per encoder pass, at most.
        device: where the model runs (:func:`~bertfn.checkpoint.resolve.get_model`).
        dtype: the precision it runs in (``"bfloat16"``: the bf16 mode).
        edits: ``{point name: edit(tensor, point) -> tensor}`` (:mod:`bertfn.interventions`), the head's points
            (``classifier.logits``, ...) included, each seeing its group's padded batch's shapes.

    Returns:
        For one text, ``{"sequence": text, "labels": [K labels, best first], "scores": [their K scores]}``; for a list,
            a list of those. A text whose pairs are mostly [UNK] has ``"warning"`` too.

    Raises:
        InputError: an empty text (``""``, as the pipeline refuses it; a blank one is classified, as it is there), bad
            labels, template or options; a hypothesis that leaves no room for the text.
        MissingPartError: a model without a tokenizer, without a sequence-classification head, or whose labels name
            no entailment (or, for ``multi_label``, no contradiction) output.

    Warns:
        UserWarning: texts cut to fit the model with their hypothesis.
        UnknownTokensWarning: texts whose pairs are mostly [UNK].
    """
    batch, single, model = texts_in(texts, model, TASK, blank=True)
    if isinstance(model, (list, tuple)):
        raise InputError("zero_shot takes the model second and the labels as a keyword: "
                         "zero_shot(texts, model, candidate_labels=[...])")
    for i, text in enumerate(batch):  # "" is refused, as the pipeline refuses it; "   " is classified, as it is there
        refuse_empty(text, f"text {i}", "zero-shot-classification", "write the text to classify, or leave it out")
    labels = candidate_list(candidate_labels)
    hyps = hypotheses(hypothesis_template, labels)
    flag("multi_label", multi_label)
    count("batch_size", batch_size)

    called = syntax(python="zero_shot", cli="zero-shot")  # the messages name the call as the caller wrote it
    m, _, points = loaded(TASK, model, device, dtype, edits, head="sequence-classification", called=called)
    entailment, contradiction = nli_outputs(m.config)
    alone = multi_label or len(labels) == 1
    if entailment is None or alone and contradiction is None:
        missing = "an entailment output" if entailment is None else "a contradiction output, which " \
            f"{syntax(python='multi_label', cli='--multi-label')} (or a single candidate label) weighs each label's " \
            "entailment against,"
        raise MissingPartError(
            f"{called} needs an NLI classifier with {missing} named in its config.json (a label starting with "
            f"'{'entail' if entailment is None else 'contradict'}'), and {fits(m)}; if it was trained on NLI, name its "
            "outputs in config.json's id2label and label2id (e.g. 0: contradiction, 1: neutral, 2: entailment)")

    N, K = len(batch), len(labels)
    logits, unknown = pair_logits(m, [t for t in batch for _ in hyps], hyps * N, [i for i in range(N) for _ in hyps],
                                  truncation="only_first", batch_size=batch_size, points=points,
                                  named=lambda p: f"the hypothesis {hyps[p % K]!r}")
    logits = logits.view(N, K, -1)  # (N, K, C)
    if alone:
        scores = logits[..., [contradiction, entailment]].softmax(dim=-1)[..., 1]  # (N, K): each label alone
    else:
        scores = logits[..., entailment].softmax(dim=-1)  # (N, K): over the labels
    results = []
    for text, row in zip(batch, scores.float().cpu().numpy()):  # (K,) each
        order = row.argsort()[::-1].tolist()  # best first, as the pipeline's reversed(argsort): tied labels last first
        results.append({"sequence": text, "labels": [labels[k] for k in order],
                        "scores": [float(row[k]) for k in order]})
    return finished(results, unknown, single)


TASK = Task("zero-shot", zero_shot, probe="a", fast=True, model=None)
"""The task (:mod:`bertfn.tasks.task`) :func:`zero_shot` is: ``bertfn zero-shot``, the corpus's ``ZeroShot``."""
