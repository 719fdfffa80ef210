"""Direct attribution into a class: a fine-tuned head's logits as one part per head, per layer, per FFN and the biases.

    dla = bertfn.interventions.logit_attribution("A wonderful film.", classifier, ["positive", "negative"])
    dla.heads[:, :, 0] - dla.heads[:, :, 1]     # (L, nh): each head's direct push towards "positive"

What :func:`~bertfn.interventions.logit_attribution` does on a checkpoint with a task head (:attr:`Model.head`). The
last hidden states the head reads are sums of parts (:func:`~bertfn.interventions.residual_parts.stream_parts`), and
each member's head runs on the parts with its nonlinearities frozen at this run (:mod:`bertfn.interventions.head_parts`
finds the head's; :mod:`bertfn.interventions.linearized` has the steps):

=========================  ===================================================================================
head                       on the parts
=========================  ===================================================================================
BERT, ALBERT               the pooler's dense layer at [CLS], its tanh as a gate, ``classifier``
RoBERTa, XLM-R, ESM-2      ``classifier.dense`` at ``<s>``, tanh as a gate, ``out_proj``
ELECTRA                    the same with GELU
DistilBERT                 ``pre_classifier`` at [CLS], ReLU as a gate, ``classifier``
ModernBERT                 the first token's parts (``classifier_pooling`` "cls") or the mean of each part over the
                           tokens ("mean": each token's parts through the final LayerNorm frozen at that token),
                           ``head.dense``, its activation as a gate, ``head.norm`` frozen, ``classifier``
a tagger, a reader         their linear layers at one token (ModernBERT's after its prediction head, frozen)
an extra head (``head=``)  BERT's with the extra head's weight and bias for ``classifier``
                           (``pooled_classifier_parts(..., head)``)
=========================  ===================================================================================

The numbers split are the logits of the labels asked for: a sequence classifier's (``classifier.logits`` (1,
num_labels)), a tagger's at a token (``classifier.logits[0, position]``), a reader's start and end logits at a
token (labels "start" and "end"). ``total`` equals them to the pass's rounding.

With ``head=`` (:func:`bertfn.classify`'s, e.g. ``"cls.species"``) the head split is a linear head the checkpoint
stores beside its own parts (:attr:`~bertfn.checkpoint.model.Model.extra_heads`) on the pooler's output, AntiBERTy's
``W tanh(W_p h_[CLS] + b_p) + b``: BERT's sequence classifier with that head's weight and bias; its logits are
``W run["pooler"][0] + b``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..checkpoint.model import Model
from ..checkpoint.resolve import fits
from ..errors import InputError, clipped
from ..inspect.trace import trace
from ..model.task_heads import task_head
from .head_metrics import extra_head_logits, label_index
from .head_parts import head_on_parts
from .linearized import pooled_classifier_parts
from .residual_parts import Contributions, check_position, split, stream_parts

Tensor = torch.Tensor

READER_LABELS = ("start", "end")
"""A reader's two outputs at each token, as labels: the columns of ``qa_outputs``."""

PER_TOKEN = ("token-classification", "question-answering")
"""The tasks whose logits are one row per token: their attribution is at one ``position``."""


@dataclass(frozen=True)
class ClassAttribution(Contributions):
    """What :func:`~bertfn.interventions.logit_attribution` returns on a fine-tuned head: its logits of some labels,
    split into parts.

    The parts are those of :class:`~bertfn.interventions.residual_parts.Contributions`, each a (..., T) row of
    logits; ``total`` equals ``logits``.

    Attributes:
        logits: (T,), the head's logits of those labels (``classifier.logits``, or a reader's ``qa.*_logits``).
        labels: the T labels' names.
        ids: their indices among the head's outputs.
        task: the head's task (a key of :data:`~bertfn.model.task_heads.TASKS`; an extra head's is
            "sequence-classification").
        position: the token, for a tagger or a reader; None for a sequence classifier.
        head: the extra head's key prefix (``"cls.species"``), or None: the checkpoint's head.
    """

    logits: Tensor
    labels: list[str]
    ids: list[int]
    task: str
    position: int | None
    head: str | None = None

    def __repr__(self) -> str:
        """The labels, their logits and the parts' shapes, not the tensors."""
        L, nh, _ = self.heads.shape
        logits = ", ".join(f"{v:.3f}" for v in self.logits.tolist())
        at = "" if self.position is None else f" at position {self.position}"
        which = self.task if self.head is None else f"{self.head} (on the pooler)"
        return (f"ClassAttribution({which} labels {self.labels}{at}: logits [{logits}] = embeddings + {L}x{nh} heads "
                f"+ {L} attention biases + {L} FFN writes + bias)")


def label_ids(names: Sequence[str], labels: int | str | Sequence[int | str]) -> list[int]:
    """``labels`` (names or ids, one or a list) as indices among the head's outputs ``names``.

    Args:
        names: the head's outputs' names by index.
        labels: a name, an id, or a non-empty list of them.

    Raises:
        InputError: not a label or a list of them, or one the head lacks (:func:`~bertfn.interventions.head_metrics.label_index`).
    """
    many = [labels] if isinstance(labels, (int, str)) else labels
    if not isinstance(many, Sequence) or not many:
        raise InputError(f"labels must be a label's name or id or a non-empty list of them, got {clipped(labels, 60)}; the "
                         f"head's are {', '.join(map(repr, names))}")
    return [label_index(names, label) for label in many]


def class_attribution(m: Model, text: str, labels: int | str | Sequence[int | str], *, position: int | None = None,
                      pair: str | None = None, head: str | None = None,
                      names: Sequence[str] | None = None) -> ClassAttribution:
    """The logits of ``labels`` of the task head ``m`` carries (or of the extra head ``head``), on ``text``, split into
    per-head, per-layer and bias parts.

    The parts of the last hidden states at the positions the head reads (the first token; every token for
    ModernBERT's mean pooling; ``position`` for a tagger or a reader) through the head's run on parts
    (:func:`~bertfn.interventions.head_parts.head_on_parts`, module docstring), or for ``head`` through
    :func:`~bertfn.interventions.linearized.pooled_classifier_parts` with its weights.

    Args:
        m: a model with a task head (:attr:`Model.head`), or with the extra head ``head``, and a tokenizer.
        text: one text.
        labels: the labels whose logits to split: names of ``config.id2label`` (or of ``names``) or ids (a reader's:
            "start", "end"), one or a list of T.
        position: a tagger's or a reader's token (None for a sequence classifier).
        pair: the text's second segment, or None.
        head: None: the checkpoint's task head; an extra head's key prefix (``"cls.species"``), checked by
            :func:`~bertfn.interventions.head_metrics.head_labels`.
        names: the names of the sequence classifier's or the extra head's outputs
            (:func:`~bertfn.interventions.head_metrics.head_labels`); None: the config's.

    Returns:
        :class:`ClassAttribution`, every part (..., T) float64 on the CPU.

    Raises:
        InputError: a head bertfn cannot split (multiple choice), a label the head lacks, a ``position`` missing
            where the head has a row per token, given where it has one per text, or out of range.
    """
    cfg = m.config
    task = m.head.task if head is None else "sequence-classification"  # an extra head: one row of logits per text
    own = task_head(cfg, task) if head is None else None  # the checkpoint's task head
    on_parts = head_on_parts(cfg, task) if head is None else None
    if own is not None and on_parts is None:
        raise InputError(f"logit_attribution splits a sequence classifier's, a tagger's or a reader's logits, and "
                         f"{fits(m)}, whose scores are one per (text, choice) pair; split a choice's score by studying "
                         "it with iv.sweep and a metric of classifier.logits")
    names = names or (READER_LABELS if task == "question-answering" else cfg.labels)
    ids = label_ids(names, labels)
    per_token = task in PER_TOKEN
    if per_token and position is None:
        raise InputError(f"a {task} head has logits at every token; give position= (the token whose logits to split, "
                         "from 0: bertfn.trace(text, model).tokens lists them)")
    if not per_token and position is not None:
        raise InputError(f"a {task} head has one row of logits per text, so it takes no position (a tagger's and a "
                         f"reader's do); {fits(m) if head is None else 'leave position= out'}")
    rec = trace(text, m, pair, head_outputs=True)
    if per_token:
        check_position(rec, position)
    S = rec.input_ids.shape[1]
    positions = [position] if per_token else [0] if head is not None or own.reads_first(cfg) else list(range(S))
    parts = stream_parts(rec, m.params, positions)  # (K, P, H)
    ones = torch.ones(parts.shape[:2], dtype=torch.long)
    out = on_parts(m.params, parts, ones) if head is None else \
        pooled_classifier_parts(m.params, parts, ones, head)  # (K, ...)
    if head is not None:
        actual = extra_head_logits(rec, head)  # (n,)
    elif task == "question-answering":
        out = torch.stack(out, dim=-1)  # (K, 1, 2): start, end
        actual = torch.stack([rec["qa.start_logits"][0, position], rec["qa.end_logits"][0, position]])  # (2,)
    elif per_token:
        actual = rec["classifier.logits"][0, position]  # (num_labels,)
    else:
        actual = rec["classifier.logits"][0]  # (num_labels,)
    out = out[:, 0] if per_token else out  # (K, num_labels)
    rows = torch.tensor(ids)
    return ClassAttribution(**split(out[:, rows], cfg.num_hidden_layers, cfg.num_attention_heads),
                            logits=actual.detach().to("cpu", torch.float64)[rows], labels=[names[i] for i in ids],
                            ids=ids, task=task, position=position, head=head)
