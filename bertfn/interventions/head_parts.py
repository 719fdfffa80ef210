"""The heads of fine-tuned checkpoints on parts of the last hidden states: each member's head, linearized.

Direct attribution into a class (:mod:`bertfn.interventions.class_attribution`) runs a model's task head on K parts
of one text's last hidden states (parts (K, S, H) in the batch axis, the last row the bias part; mask (K, S)), its
activations and LayerNorms frozen at the run the parts sum to (:mod:`bertfn.interventions.linearized`), so that the
logits are the sum of the parts' logits. BERT's heads on parts are in linearized.py; the members' whose heads are
not BERT's are here, beside no forward-pass code: the heads themselves stay in each member's module.

:data:`LINEARIZED` maps each head, as :func:`~bertfn.model.task_heads.task_head` gives it, to its function on parts;
:func:`head_on_parts` finds a model's. A head not in it has none (the multiple-choice heads: one score per
(text, choice) row, which class attribution does not split).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..model.config import BertConfig
from ..model.family import TaskHead
from ..model.members import deberta, distilbert, electra, modernbert_heads, roberta
from ..model.members.modernbert_heads import pooled
from ..model.params import Params
from ..model.task_heads import BERT_HEADS, task_head
from .linearized import (pooled_classifier_parts, span_reader_parts, through_activation, through_linear, through_norm,
                         token_classifier_parts)

Tensor = torch.Tensor


def classification_parts(params: Params, parts: Tensor, mask: Tensor, *, activation: str = "tanh") -> Tensor:
    """RoBERTa's :func:`~bertfn.model.members.roberta.classification_head` (``RobertaClassificationHead``) on parts
    of the last hidden states: ``dense`` on each part of ``<s>``'s vector, its tanh frozen as a gate, ``out_proj``.

    Args:
        params: the root view (reads ``classifier.dense.*`` and ``classifier.out_proj.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.
        activation: the dense layer's activation (ELECTRA's: GELU).

    Returns:
        (K, num_labels).
    """
    p = params.scope("classifier")
    x = through_activation(through_linear(parts[:, 0], p["dense.weight"], p["dense.bias"]), activation)  # (K, H)
    return through_linear(x, p["out_proj.weight"], p["out_proj.bias"])  # (K, num_labels)


def electra_classification_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """ELECTRA's :func:`~bertfn.model.members.electra.classification_head` (``ElectraClassificationHead``) on parts of
    the last hidden states: RoBERTa's (:func:`classification_parts`) with its GELU frozen as a gate.

    Args:
        params: the root view (reads ``classifier.dense.*`` and ``classifier.out_proj.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        (K, num_labels).
    """
    return classification_parts(params, parts, mask, activation="gelu")


def pre_classifier_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """DistilBERT's :func:`~bertfn.model.members.distilbert.pre_classifier_head`
    (``DistilBertForSequenceClassification``'s) on parts of the last hidden states: ``pre_classifier`` on each part of
    [CLS]'s vector, its ReLU frozen as a gate (1 where this run's unit is positive, else 0), ``classifier``.

    Args:
        params: the root view (reads ``pre_classifier.*`` and ``classifier.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        (K, num_labels).
    """
    x = through_linear(parts[:, 0], params["pre_classifier.weight"], params["pre_classifier.bias"])  # (K, H)
    return through_linear(through_activation(x, "relu"), params["classifier.weight"], params["classifier.bias"])


def context_pooler_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """DeBERTa's :func:`~bertfn.model.members.deberta.context_pooler_head` (``ContextPooler`` and ``classifier``) on
    parts of the last hidden states: ``pooler.dense`` on each part of [CLS]'s vector, its activation frozen as a
    gate, ``classifier``.

    Args:
        params: the root view.
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        (K, num_labels).
    """
    x = through_linear(parts[:, 0], params["pooler.dense.weight"], params["pooler.dense.bias"])  # (K, P)
    x = through_activation(x, params.config.pooler_hidden_act)
    return through_linear(x, params["classifier.weight"], params["classifier.bias"])


def prediction_parts(params: Params, parts: Tensor) -> Tensor:
    """ModernBERT's :func:`~bertfn.model.members.modernbert_heads.prediction_head` (``ModernBertPredictionHead``) on
    parts: ``dense`` on each, the activation frozen as a gate and the LayerNorm's 1/sigma fixed at the parts' sum.

    Args:
        params: the root view (reads ``head.dense.*`` and ``head.norm.*``).
        parts: (K, ..., H), the last the bias part.

    Returns:
        (K, ..., H).
    """
    p = params.scope("head")
    x = through_activation(through_linear(parts, p["dense.weight"], p.get("dense.bias")),
                           params.config.classifier_activation)
    return through_norm(x, p["norm.weight"], p.get("norm.bias"), params.config.layer_norm_eps)


def modernbert_classification_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """ModernBERT's :func:`~bertfn.model.members.modernbert_heads.classification_head`
    (``ModernBertForSequenceClassification``'s) on parts of the last hidden states: each part pooled as the run's
    states are (:func:`~bertfn.model.members.modernbert_heads.pooled`: the first token's, or the mean over the real
    tokens, each token's part having passed through the final LayerNorm frozen at that token), the prediction head
    frozen (:func:`prediction_parts`), ``classifier``.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S) 1 for real tokens.

    Returns:
        (K, num_labels).
    """
    x = prediction_parts(params, pooled(parts, mask, params.config.classifier_pooling))  # (K, H)
    return through_linear(x, params["classifier.weight"], params.get("classifier.bias"))


def modernbert_token_parts(params: Params, parts: Tensor, mask: Tensor) -> Tensor:
    """ModernBERT's :func:`~bertfn.model.members.modernbert_heads.token_head` (``ModernBertForTokenClassification``'s)
    on parts of the last hidden states: the prediction head frozen at each token, ``classifier``.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*``).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        (K, S, num_labels).
    """
    return through_linear(prediction_parts(params, parts), params["classifier.weight"], params.get("classifier.bias"))


def modernbert_span_parts(params: Params, parts: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """ModernBERT's :func:`~bertfn.model.members.modernbert_heads.span_reader` (``ModernBertForQuestionAnswering``'s)
    on parts of the last hidden states: :func:`modernbert_token_parts` with two outputs.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*`` (2, H)).
        parts: (K, S, H) the parts, the last the bias part.
        mask: (K, S), unused.

    Returns:
        start: (K, S); end: (K, S).
    """
    start, end = modernbert_token_parts(params, parts, mask).unbind(dim=-1)
    return start, end


LINEARIZED: dict[TaskHead, Callable[..., object]] = {
    BERT_HEADS["sequence-classification"]: pooled_classifier_parts,
    BERT_HEADS["token-classification"]: token_classifier_parts,
    BERT_HEADS["question-answering"]: span_reader_parts,
    roberta.CLASSIFIER: classification_parts,  # XLM-R's, CamemBERT's, MPNet's and ESM-2's too
    electra.CLASSIFIER: electra_classification_parts,
    distilbert.HEADS["sequence-classification"]: pre_classifier_parts,
    distilbert.HEADS["token-classification"]: token_classifier_parts,  # BERT's with its own dropout: the same parts
    distilbert.HEADS["question-answering"]: span_reader_parts,
    deberta.HEADS["sequence-classification"]: context_pooler_parts,
    modernbert_heads.HEADS["sequence-classification"]: modernbert_classification_parts,
    modernbert_heads.HEADS["token-classification"]: modernbert_token_parts,
    modernbert_heads.HEADS["question-answering"]: modernbert_span_parts,
}
"""A task head (:class:`~bertfn.model.family.TaskHead`) -> ``(params, parts (K, S, H), mask (K, S)) -> the logits'
parts``: its run on parts; the multiple-choice heads have none."""


def head_on_parts(config: BertConfig, task: str) -> Callable[..., object] | None:
    """The function that runs the ``task`` head of a model of ``config`` on parts of its last hidden states
    (:data:`LINEARIZED`), or None where bertfn has none (the multiple-choice heads).

    Args:
        config: the model's config.
        task: one of :data:`~bertfn.model.task_heads.TASKS`.

    Raises:
        InputError: a task the member has no head for (:func:`~bertfn.model.task_heads.task_head`).
    """
    return LINEARIZED.get(task_head(config, task))
