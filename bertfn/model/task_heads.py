"""The heads of fine-tuned checkpoints: which one a checkpoint carries, and the function that runs it.

A fine-tuned model is the pretrained encoder with a small head on top, trained for one task. Its
config.json names the transformers class it was saved from (``architectures``), and the class's suffix
names the task; the head turns the last hidden states h (B, S, H) into that task's logits:

| task                        | class suffix                 | logits                                    |
|-----------------------------|------------------------------|-------------------------------------------|
| ``sequence-classification`` | ``ForSequenceClassification``| (B, num_labels): one row per text         |
| ``token-classification``    | ``ForTokenClassification``   | (B, S, num_labels): one row per token     |
| ``question-answering``      | ``ForQuestionAnswering``     | start (B, S), end (B, S): the answer span |
| ``multiple-choice``         | ``ForMultipleChoice``        | (B, 1): one score per (text, choice) row  |

BERT's heads are below (:data:`BERT_HEADS`): a classifier on the pooler's output, a linear layer on every
token, ``qa_outputs`` on every token. A member whose head is not BERT's holds its own in its module, listed in
its :class:`~bertfn.model.family.Family` record's ``task_heads`` (RoBERTa's classifier reads ``<s>`` through
dense, tanh and ``out_proj``; DistilBERT's through ``pre_classifier`` and ReLU; ModernBERT's through its
prediction head), and :func:`task_head` finds the one a config's member uses; which tasks a member has a head for at
all, as transformers has classes for them, its checkpoint names say (``tasks``, read through :mod:`bertfn.model.naming`). Every head takes the same
arguments, ``(params, h, mask, *, generator=None, trace=NO_TRACE)``, and passes what it computes through named
points of the trace (``pooler`` or ``classifier.input``, ``classifier.dense``, ``classifier.activation``,
``classifier.logits``; ``qa.start_logits``, ``qa.end_logits``).

:func:`head_of` reads which head a checkpoint carries (:class:`Head`, ``model.head``); :func:`head_shapes` the
weights that head reads, which loading checks as it checks the encoder's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from ..errors import CheckpointError, InputError
from .config import BertConfig
from .family import TaskHead, family_of, member_name
from .heads import multiple_choice, pooler, question_answering, sequence_classification, token_classification
from .naming import names_of
from .params import Params
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor

TASKS = ("sequence-classification", "token-classification", "question-answering", "multiple-choice")
"""The tasks of fine-tuned heads, as transformers' pipelines name them."""

SUFFIXES = {
    "ForSequenceClassification": "sequence-classification",
    "ForTokenClassification": "token-classification",
    "ForQuestionAnswering": "question-answering",
    "ForMultipleChoice": "multiple-choice",
    "ForMaskedLM": "masked-lm",
    "ForPreTraining": "pretraining",
    "ForNextSentencePrediction": "next-sentence",
    "LMHeadModel": "causal-lm",
    "ForCausalLM": "causal-lm",
    "Model": "encoder",
}
"""A transformers class's suffix -> what its checkpoint carries on top of the encoder (``pretraining``: BERT's MLM and
NSP heads, ELECTRA's discriminator)."""

CALLS = {
    "sequence-classification": ("bertfn.classify", "bertfn classify"),
    "token-classification": ("bertfn.tag", "bertfn tag"),
    "question-answering": ("bertfn.answer", "bertfn answer"),
    "multiple-choice": ("bertfn.choose", "bertfn choose"),
    "masked-lm": ("bertfn.fill_mask", "bertfn fill-mask"),
    "pretraining": ("bertfn.fill_mask", "bertfn fill-mask"),
    "causal-lm": ("bertfn.fill_mask", "bertfn fill-mask"),
    "encoder": ("bertfn.embed", "bertfn embed"),
}
"""What a checkpoint is for -> the call that runs it (Python, shell): what an error names when a call does not fit."""


@dataclass(frozen=True)
class Head:
    """What a checkpoint carries on top of its encoder, as its config and weights say.

    Attributes:
        task: one of :data:`TASKS`, or "masked-lm", "pretraining", "causal-lm", "next-sentence", "encoder" (none).
        architecture: the transformers class it was saved from (``config.architectures[0]``), or None when the
            config names none (the task was then read from the weights).
        labels: the names of the head's outputs by index (``config.labels``), for the classification tasks.
        problem_type: for a sequence classifier, what its outputs mean: "single_label_classification" (softmax),
            "multi_label_classification" (sigmoid, each label alone) or "regression" (one number).
    """

    task: str
    architecture: str | None
    labels: tuple[str, ...] = ()
    problem_type: str | None = None

    @property
    def call(self) -> tuple[str, str]:
        """The call that runs a checkpoint with this head: ``("bertfn.classify", "bertfn classify")``."""
        return CALLS.get(self.task, ("bertfn.encoder", "bertfn view"))

    def __str__(self) -> str:
        """The class and what it does in a line: ``RobertaForSequenceClassification (3 labels: ...)``, or for a class
        whose name does not say it, its task: ``AntiBERTy (masked-lm)``."""
        name = self.architecture or self.task
        if self.task in ("sequence-classification", "token-classification"):
            shown = ", ".join(self.labels[:6]) + (", ..." if len(self.labels) > 6 else "")
            kind = f"; {self.problem_type.replace('_', ' ')}" if self.problem_type else ""
            return f"{name} ({len(self.labels)} label{'s' * (len(self.labels) != 1)}: {shown}{kind})"
        said = self.architecture is None or any(self.architecture.endswith(s) for s in SUFFIXES)
        return name if said else f"{name} ({self.task})"


def problem_type(config: BertConfig) -> str:
    """What a sequence classifier's outputs mean: ``config.problem_type``, else "regression" for one label and
    "single_label_classification" for more (``*ForSequenceClassification.forward``'s rule without labels).

    Args:
        config: the model's config.
    """
    if config.problem_type is not None:
        return config.problem_type
    return "regression" if config.num_labels == 1 else "single_label_classification"


def task_of_keys(state: Mapping[str, Tensor], config: BertConfig) -> str:
    """The task of a checkpoint whose config names no class: read from the keys it holds.

    ``qa_outputs`` is a reader, ELECTRA's ``sequence_summary`` a multiple-choice head; a classifier with a dense
    layer (``classifier.dense``, ``pre_classifier``) or on a pooler is a sequence classifier, a bare ``classifier``
    on no pooler a tagger; MLM weights a masked LM. (Other multiple-choice heads look like sequence classifiers with
    one label, and ModernBERT's heads all alike: their config.json says which they are.)

    Args:
        state: the weights.
        config: the model's config.
    """
    root = Params(state, config)
    if "qa_outputs.weight" in state:
        return "question-answering"
    if "sequence_summary.summary.weight" in state:
        return "multiple-choice"
    if "classifier.dense.weight" in state or "pre_classifier.weight" in state:
        return "sequence-classification"
    if "classifier.weight" in state:
        pooled = "bert.pooler.dense.weight" in root or "pooler.dense.weight" in state  # DeBERTa's ContextPooler: a root key
        return "sequence-classification" if pooled else "token-classification"
    if "cls.predictions.decoder.weight" in root:
        return "pretraining" if "cls.seq_relationship.weight" in root else "masked-lm"
    return "encoder"


def named_task(config: BertConfig) -> str | None:
    """What the class ``config.architectures`` names carries on top of the encoder: its suffix's task
    (:data:`SUFFIXES`: ``"sequence-classification"``, ``"masked-lm"``, ...), or None (no ``architectures``, or a class
    of no known suffix).

    Args:
        config: the model's config.
    """
    architecture = config.architectures[0] if config.architectures else ""
    return next((t for suffix, t in SUFFIXES.items() if architecture.endswith(suffix)), None)


def head_of(config: BertConfig, state: Mapping[str, Tensor]) -> Head:
    """The head a checkpoint carries: the task its ``architectures`` names (:data:`SUFFIXES`), else its keys'.

    Args:
        config: the model's config.
        state: the weights, normalized as loading leaves them.

    Raises:
        CheckpointError: a task head the member does not have in transformers (``EsmForQuestionAnswering``).
    """
    architecture = config.architectures[0] if config.architectures else None
    task = named_task(config)
    if task is None:
        task = task_of_keys(state, config)
    tasks = names_of(config).tasks or TASKS
    if task in TASKS and task not in tasks:
        raise CheckpointError(f"config.json names {architecture}, but transformers has no {task} head for "
                              f"{member_name(config)} and neither has bertfn; its heads are {', '.join(tasks)}")
    classifying = task in ("sequence-classification", "token-classification")
    return Head(task, architecture, config.labels if classifying else (),
                problem_type(config) if task == "sequence-classification" else None)


def task_head(config: BertConfig, task: str) -> TaskHead:
    """The head that runs ``task`` in the member of ``config``: the member's own, else BERT's (:data:`BERT_HEADS`).

    Args:
        config: the model's config.
        task: one of :data:`TASKS`.

    Raises:
        InputError: a task that is none of :data:`TASKS`, or one the member has no head for.
    """
    if task not in TASKS:
        raise InputError(f"task must be one of {', '.join(map(repr, TASKS))}, got {task!r}")
    tasks = names_of(config).tasks or TASKS
    if task not in tasks:
        raise InputError(f"{member_name(config)} has no {task} head (transformers has none either); its heads are "
                         f"{', '.join(tasks)}")
    return (family_of(config).task_heads or {}).get(task) or BERT_HEADS[task]


def head_shapes(config: BertConfig, state: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
    """The weights the checkpoint's task head reads, by BERT's names, with their shapes ({} for other heads).

    Args:
        config: the model's config.
        state: the weights.
    """
    task = head_of(config, state).task
    return task_head(config, task).shapes(config) if task in TASKS else {}


def run_head(params: Params, task: str, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
             trace: Trace = NO_TRACE) -> Tensor | tuple[Tensor, Tensor]:
    """``task``'s head of the model on its last hidden states: :func:`task_head`'s function, run.

    Args:
        params: the root view of the model.
        task: one of :data:`TASKS`.
        h: (B, S, H) last hidden states.
        mask: (B, S) 1 for real tokens, 0 for padding.
        generator: turns the head's dropout on (training).
        trace: records (and edits) the head's points.

    Returns:
        The task's logits (see the module's table).

    Raises:
        InputError: an unknown task, or ``h`` and ``mask`` not of the shapes above.
    """
    head = task_head(params.config, task)
    H = params.config.hidden_size
    if not (isinstance(h, Tensor) and h.dim() == 3 and h.shape[-1] == H and isinstance(mask, Tensor)
            and tuple(mask.shape) == tuple(h.shape[:2])):
        got = [tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__ for x in (h, mask)]
        raise InputError(f"run_head takes the last hidden states h (batch, seq, {H}) and their mask (batch, seq), as "
                         "bertfn.encoder(...).last_hidden_state and the tokenizer's attention_mask; got h "
                         f"{got[0]} and mask {got[1]}")
    check_head_weights(params, head.shapes(params.config))
    return head.run(params, h, mask, generator=generator, trace=trace)


def check_head_weights(params: Params, shapes: dict[str, tuple[int, ...]]) -> None:
    """The head's weights are of the shapes its config implies: a weight replaced by hand (a new classifier of
    other labels, its bias left as it was) would fail inside the product with a kernel's message.

    Args:
        params: the root view of the model.
        shapes: the head's keys (BERT's names) and shapes, :attr:`TaskHead.shapes`'s.

    Raises:
        CheckpointError: a weight of another shape, named with the shape its config implies.
    """
    root = params.at("")
    wrong = {name: tuple(root[name].shape) for name in shapes if name in root and tuple(root[name].shape) != shapes[name]}
    if wrong:
        said = "; ".join(f"{root.key(n)} is {got} where the config implies {shapes[n]}" for n, got in wrong.items())
        raise CheckpointError(f"the task head's weights do not fit together: {said} (config: {params.config.num_labels} "
                              f"labels, {', '.join(params.config.labels[:6])}{', ...' if len(params.config.labels) > 6 else ''}); "
                              "set the weight, its bias and the config's id2label to the same labels")


# --- BERT's heads ------------------------------------------------------------------------------------


def pooled_classifier(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                      trace: Trace = NO_TRACE) -> Tensor:
    """``BertForSequenceClassification``'s head: the pooler (``tanh(W h_[CLS] + b)``), dropout, ``classifier``.

    Also ``BertForMultipleChoice``'s (one output per (text, choice) row), ALBERT's and RoBERTa's multiple choice.

    Args:
        params: the root view (reads ``bert.pooler.dense.*`` and ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused (the pooler reads the first token).
        generator: turns dropout on (training).
        trace: records ``pooler`` and ``classifier.logits``.

    Returns:
        (B, num_labels).
    """
    pooled = pooler(params, h, trace)  # (B, H)
    return trace("classifier.logits", sequence_classification(params, pooled, generator))  # (B, num_labels)


def token_classifier(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                     trace: Trace = NO_TRACE) -> Tensor:
    """``BertForTokenClassification``'s head: dropout, ``classifier`` on every token.

    Args:
        params: the root view (reads ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused (every position gets its row; the padding's mean nothing).
        generator: turns dropout on (training).
        trace: records ``classifier.logits``.

    Returns:
        (B, S, num_labels).
    """
    return trace("classifier.logits", token_classification(params, h, generator))


def span_reader(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                trace: Trace = NO_TRACE) -> tuple[Tensor, Tensor]:
    """``BertForQuestionAnswering``'s head: ``qa_outputs`` (2, H) on every token, its two columns the answer's start
    and end logits.

    Args:
        params: the root view (reads ``qa_outputs.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: unused (BERT's reader has no dropout).
        trace: records ``qa.start_logits`` and ``qa.end_logits``.

    Returns:
        start: (B, S); end: (B, S).
    """
    start, end = question_answering(params, h)
    return trace("qa.start_logits", start), trace("qa.end_logits", end)


def choice_scorer(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                  trace: Trace = NO_TRACE) -> Tensor:
    """``BertForMultipleChoice``'s head: the pooler, dropout, ``classifier`` (1, H): one score per row.

    The rows are the (text, choice) pairs flattened; the caller reshapes the scores to (texts, choices).

    Args:
        params: the root view (reads ``bert.pooler.dense.*`` and ``classifier.*``).
        h: (B*C, S, H) last hidden states of the flattened pairs.
        mask: (B*C, S), unused.
        generator: turns dropout on (training).
        trace: records ``pooler`` and ``classifier.logits``.

    Returns:
        (B*C, 1).
    """
    pooled = pooler(params, h, trace)  # (B*C, H)
    return trace("classifier.logits", multiple_choice(params, pooled, 1, generator))  # (B*C, 1)


def linear_shapes(name: str, rows: int, H: int) -> dict[str, tuple[int, ...]]:
    """``{name.weight: (rows, H), name.bias: (rows,)}``: a linear layer's keys and shapes.

    Args:
        name: the layer's key, e.g. ``classifier``.
        rows: its outputs.
        H: its inputs.
    """
    return {f"{name}.weight": (rows, H), f"{name}.bias": (rows,)}


def pooler_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """The pooler's keys, by BERT's names (a member's key table renames them: ``roberta.pooler.dense.*``).

    Args:
        config: the model's config (its hidden size H).

    Returns:
        ``{"bert.pooler.dense.weight": (H, H), "bert.pooler.dense.bias": (H,)}``.
    """
    return linear_shapes("bert.pooler.dense", config.hidden_size, config.hidden_size)


BERT_HEADS: dict[str, TaskHead] = {
    "sequence-classification": TaskHead(
        pooled_classifier, lambda c: {**pooler_shapes(c), **linear_shapes("classifier", c.num_labels, c.hidden_size)},
        True),
    "token-classification": TaskHead(
        token_classifier, lambda c: linear_shapes("classifier", c.num_labels, c.hidden_size)),
    "question-answering": TaskHead(span_reader, lambda c: linear_shapes("qa_outputs", 2, c.hidden_size)),
    "multiple-choice": TaskHead(
        choice_scorer, lambda c: {**pooler_shapes(c), **linear_shapes("classifier", 1, c.hidden_size)},
        True),
}
"""BERT's head of each task: :data:`TASKS` -> :class:`~bertfn.model.family.TaskHead`."""
