"""ModernBERT's heads of fine-tuned checkpoints: each one its prediction head, then a linear layer.

ModernBERT's heads are BERT's except that every one of them first runs the **prediction head** its masked LM
has too (``head.dense``, ``classifier_activation``, ``head.norm``: :func:`prediction_head`), on what it reads:

* the sequence classifier and the multiple-choice head read one vector per text, :func:`pooled`:
  ``classifier_pooling`` "cls" (the first token) or "mean" (the mean of the text's real tokens), then
  ``classifier`` (num_labels, H), or (1, H) for multiple choice (:func:`classification_head`);
* the tagger and the reader run it on every token, then ``classifier`` (num_labels, H), the reader's 2 columns
  being the answer's start and end (:func:`token_head`, :func:`span_reader`).

On parts of the last hidden states (direct attribution into a class) each head has its linearization beside the
interventions (:mod:`bertfn.interventions.head_parts`).

transformers' sequence classifier takes position 0 as the "cls" token even where a left-padded text has padding
there; its multiple-choice head takes each text's first real token. bertfn takes the first real token in both
(the same numbers on right padding, and on a left-padded text those of the text alone).
"""

from __future__ import annotations

import torch

from ..config import BertConfig
from ..family import TaskHead
from ..functional import ACTIVATIONS, dropout, linear
from ..params import Params
from .prenorm import norm
from ..recorder import NO_TRACE, Trace
from ..task_heads import linear_shapes

Tensor = torch.Tensor


def prediction_head(params: Params, x: Tensor, trace: Trace = NO_TRACE) -> Tensor:
    """``ModernBertPredictionHead``: ``norm(act(dense x))``, act ``classifier_activation``.

    Args:
        params: the root view (reads ``head.dense.*`` (H, H) and ``head.norm.*`` (H,), their biases where the config
            has them).
        x: (..., H).
        trace: records ``classifier.dense``, ``classifier.activation`` and ``classifier.norm``.

    Returns:
        (..., H).
    """
    p = params.scope("head")
    x = trace("classifier.dense", linear(x, p["dense.weight"], p.get("dense.bias")))  # (..., H)
    x = trace("classifier.activation", ACTIVATIONS[params.config.classifier_activation](x))
    return trace("classifier.norm", norm(p, "norm", x))


def pooled(h: Tensor, mask: Tensor, pooling: str) -> Tensor:
    """One vector per text: its first real token's ("cls") or the mean of its real tokens' ("mean").

    Args:
        h: (B, S, H) last hidden states.
        mask: (B, S) 1 for real tokens.
        pooling: ``config.classifier_pooling``.

    Returns:
        (B, H).
    """
    if pooling == "mean":
        keep = mask[..., None].to(h.dtype)  # (B, S, 1)
        return (h * keep).sum(dim=1) / keep.sum(dim=1)  # (B, H)
    first = mask.argmax(dim=-1)  # (B,): each text's first real token (0 on right padding)
    return h[torch.arange(h.shape[0], device=h.device), first]  # (B, H)


def classification_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                        trace: Trace = NO_TRACE) -> Tensor:
    """``ModernBertForSequenceClassification``'s (and ``ForMultipleChoice``'s) head: :func:`pooled`, the prediction
    head, dropout (``classifier_dropout``), ``classifier``.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S) 1 for real tokens.
        generator: turns dropout on (training).
        trace: records ``classifier.input``, the prediction head's points, ``classifier.logits``.

    Returns:
        (B, num_labels), or (B, 1) for multiple choice.
    """
    x = trace("classifier.input", pooled(h, mask, params.config.classifier_pooling))  # (B, H)
    x = dropout(prediction_head(params, x, trace), params.config.head_dropout, generator)
    return trace("classifier.logits", linear(x, params["classifier.weight"], params.get("classifier.bias")))


def token_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
               trace: Trace = NO_TRACE) -> Tensor:
    """``ModernBertForTokenClassification``'s head: the prediction head on every token, dropout, ``classifier``.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: turns dropout on (training).
        trace: records the prediction head's points and ``classifier.logits``.

    Returns:
        (B, S, num_labels).
    """
    x = dropout(prediction_head(params, h, trace), params.config.head_dropout, generator)  # (B, S, H)
    return trace("classifier.logits", linear(x, params["classifier.weight"], params.get("classifier.bias")))


def span_reader(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                trace: Trace = NO_TRACE) -> tuple[Tensor, Tensor]:
    """``ModernBertForQuestionAnswering``'s head: :func:`token_head` with two outputs, the answer's start and end.

    Args:
        params: the root view (reads ``head.*`` and ``classifier.*`` (2, H)).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: turns dropout on (training).
        trace: records the prediction head's points, ``qa.start_logits`` and ``qa.end_logits``.

    Returns:
        start: (B, S); end: (B, S).
    """
    x = dropout(prediction_head(params, h, trace), params.config.head_dropout, generator)  # (B, S, H)
    start, end = linear(x, params["classifier.weight"], params.get("classifier.bias")).unbind(-1)  # each (B, S)
    return trace("qa.start_logits", start), trace("qa.end_logits", end)


def head_shapes(config: BertConfig, outputs: int) -> dict[str, tuple[int, ...]]:
    """The keys of a ModernBERT head: ``head.dense`` (H, H), ``head.norm`` (H,), biases as the config has them, and
    ``classifier`` (outputs, H) with its bias.

    Args:
        config: the model's config.
        outputs: the classifier's outputs.
    """
    H = config.hidden_size
    out = {"head.dense.weight": (H, H), "head.norm.weight": (H,), **linear_shapes("classifier", outputs, H)}
    if config.classifier_bias:
        out["head.dense.bias"] = (H,)
    if config.norm_bias:
        out["head.norm.bias"] = (H,)
    return out


def reads_first(config: BertConfig) -> bool:
    """The classifier reads one token per text where it pools by "cls".

    Args:
        config: the model's config (its ``classifier_pooling``: "cls" or "mean").
    """
    return config.classifier_pooling == "cls"


HEADS = {
    "sequence-classification": TaskHead(
        classification_head, lambda c: head_shapes(c, c.num_labels), reads_first),
    "token-classification": TaskHead(token_head, lambda c: head_shapes(c, c.num_labels)),
    "question-answering": TaskHead(span_reader, lambda c: head_shapes(c, 2)),
    "multiple-choice": TaskHead(
        classification_head, lambda c: head_shapes(c, 1), reads_first),
}
"""ModernBERT's heads: every task's is its own."""
