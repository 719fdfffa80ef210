"""DistilBERT (Sanh et al. 2019): BERT distilled to half its layers.

DistilBERT is BERT except:

* **no token types**: its embeddings are word + position, then LayerNorm (:func:`embeddings`); a
  second segment is told apart by ``[SEP]`` alone, and there is no pooler;
* **names**: ``distilbert.transformer.layer.{i}.attention.q_lin|k_lin|v_lin|out_lin``, ``sa_layer_norm``,
  ``ffn.lin1|lin2``, ``output_layer_norm``, and the MLM head ``vocab_transform``, ``vocab_layer_norm``,
  ``vocab_projector`` (:mod:`bertfn.checkpoint.names.distilbert`, which also drops the token types from BERT's
  table);
* **its config.json names**: ``dim``, ``n_layers``, ``n_heads``, ``hidden_dim``, ``activation``,
  ``dropout``, ``attention_dropout``, ``seq_classif_dropout`` (:class:`DistilBertConfig`); every LayerNorm's
  eps is 1e-12;
* **its classifiers** (sequence classification and multiple choice, :func:`pre_classifier_head`) read [CLS]
  through ``pre_classifier`` (H, H) and ReLU, having no pooler; its tagger and reader drop out at their own rates
  (``dropout``, ``qa_dropout``: :func:`token_classifier`, :func:`span_reader`).

Its layers are BERT's: post-LN attention and feed-forward with the same residuals (transformers
scales the queries before ``q k^T`` rather than the scores after it: the same numbers to float
rounding), except that training drops out no attention output
(:attr:`DistilBertConfig.attention_output_dropout`). Its positions are 0, 1, ... as BERT's, padding included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..config import BertConfig
from ..embeddings import check_ids, default_position_ids, word_vectors
from ..family import Family, TaskHead, register
from ..functional import dropout, layer_norm, linear
from ..heads import question_answering, token_classification
from ..params import Params, scoped
from ..recorder import NO_TRACE, Trace
from ..task_heads import linear_shapes

Tensor = torch.Tensor


@dataclass(frozen=True)
class DistilBertConfig(BertConfig):
    """``transformers.DistilBertConfig`` read into BertConfig's names (:meth:`renamed`).

    Attributes:
        num_hidden_layers: 6.
        type_vocab_size: 1: no token-type table; the field only keeps BertConfig's checks whole.
        classifier_dropout: 0.2 (``seq_classif_dropout``), the classifiers' dropout.
        qa_dropout: the reader's dropout, before ``qa_outputs``.
        model_type: "distilbert".
    """

    num_hidden_layers: int = 6
    type_vocab_size: int = 1  # no token-type table: the field only keeps BertConfig's checks whole
    classifier_dropout: float | None = 0.2
    qa_dropout: float = 0.1
    model_type: str = "distilbert"

    NAMES = {"dim": "hidden_size", "n_layers": "num_hidden_layers", "n_heads": "num_attention_heads",
             "hidden_dim": "intermediate_size", "activation": "hidden_act", "dropout": "hidden_dropout_prob",
             "attention_dropout": "attention_probs_dropout_prob", "seq_classif_dropout": "classifier_dropout"}

    @property
    def attention_output_dropout(self) -> float:
        """0: ``TransformerBlock`` adds ``out_lin``'s output to its input with no dropout (``dropout`` drops out the
        embeddings and the feed-forward's output)."""
        return 0.0

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """DistilBERT's config.json fields under BertConfig's names; eps is 1e-12 (hard-coded in transformers).

        Args:
            d: the parsed ``config.json``.
        """
        out = {cls.NAMES.get(k, k): v for k, v in d.items() if k not in cls.NAMES.values()}
        out["layer_norm_eps"] = 1e-12
        return out


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | None = None) -> Tensor:
    """Word + position embeddings, then LayerNorm and dropout: BERT's without the token types.

    Mirrors ``transformers.models.distilbert.Embeddings``.

    Args:
        p: ``bert.embeddings.`` scope.
        input_ids: (B, S).
        token_type_ids: accepted and ignored.
        position_ids: (B, S), default 0 .. S-1 (from ``past_length``).
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        past_length: the cached positions before these.
        generator: turns dropout on (training).
        trace: records (and edits) ``word``, ``position``, ``sum`` and ``output``.
        attention_mask: accepted and ignored (the encoder passes it to every member's embeddings; ESM-2's read it).

    Returns:
        (B, S, H).
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    cfg = p.config
    words = word_vectors(p, input_ids, inputs_embeds)  # (B, S, H)
    B, S = words.shape[:2]
    words = trace("word", words)
    if position_ids is None:
        position_ids = default_position_ids(B, S, past_length, words.device)
    check_ids("position_ids", position_ids, cfg.max_position_embeddings,
              f"this model has {cfg.max_position_embeddings} positions; shorten the input", (B, S))
    positions = trace("position", p["position_embeddings.weight"][position_ids])  # (B, S, H)
    x = trace("sum", words + positions)
    x = layer_norm(x, p["LayerNorm.weight"], p["LayerNorm.bias"], cfg.layer_norm_eps)  # (B, S, H)
    x = dropout(x, cfg.hidden_dropout_prob, generator)
    return trace("output", x)


def pre_classifier_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                        trace: Trace = NO_TRACE) -> Tensor:
    """``DistilBertForSequenceClassification``'s head: [CLS], ``pre_classifier`` (H, H), ReLU, dropout, ``classifier``.

    ``DistilBertForMultipleChoice``'s too, with one output per (text, choice) row.

    Args:
        params: the root view (reads ``pre_classifier.*`` and ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused (the head reads the first token).
        generator: turns dropout on (training; ``seq_classif_dropout``).
        trace: records ``classifier.input``, ``classifier.dense``, ``classifier.activation``, ``classifier.logits``.

    Returns:
        (B, num_labels), or (B, 1) for multiple choice.
    """
    x = trace("classifier.input", h[:, 0])  # (B, H): [CLS]
    x = trace("classifier.dense", linear(x, params["pre_classifier.weight"], params["pre_classifier.bias"]))  # (B, H)
    x = trace("classifier.activation", torch.relu(x))
    x = dropout(x, params.config.head_dropout, generator)
    return trace("classifier.logits", linear(x, params["classifier.weight"], params["classifier.bias"]))


def token_classifier(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                     trace: Trace = NO_TRACE) -> Tensor:
    """``DistilBertForTokenClassification``'s head: BERT's, dropping out at ``dropout`` (``hidden_dropout_prob``).

    Args:
        params: the root view (reads ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: turns dropout on (training).
        trace: records ``classifier.logits``.

    Returns:
        (B, S, num_labels).
    """
    x = dropout(h, params.config.hidden_dropout_prob, generator)
    return trace("classifier.logits", token_classification(params, x))


def span_reader(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                trace: Trace = NO_TRACE) -> tuple[Tensor, Tensor]:
    """``DistilBertForQuestionAnswering``'s head: dropout (``qa_dropout``), then BERT's ``qa_outputs``.

    Args:
        params: the root view (reads ``qa_outputs.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: turns dropout on (training).
        trace: records ``qa.start_logits`` and ``qa.end_logits``.

    Returns:
        start: (B, S); end: (B, S).
    """
    start, end = question_answering(params, dropout(h, params.config.qa_dropout, generator))
    return trace("qa.start_logits", start), trace("qa.end_logits", end)


def pre_classifier_shapes(config: BertConfig, outputs: int) -> dict[str, tuple[int, ...]]:
    """The keys of :func:`pre_classifier_head`: ``pre_classifier`` (H, H), ``classifier`` (outputs, H).

    Args:
        config: the model's config.
        outputs: the classifier's outputs (num_labels; 1 for multiple choice).
    """
    H = config.hidden_size
    return {**linear_shapes("pre_classifier", H, H), **linear_shapes("classifier", outputs, H)}


HEADS = {
    "sequence-classification": TaskHead(
        pre_classifier_head, lambda c: pre_classifier_shapes(c, c.num_labels), True),
    "token-classification": TaskHead(
        token_classifier, lambda c: linear_shapes("classifier", c.num_labels, c.hidden_size)),
    "question-answering": TaskHead(span_reader, lambda c: linear_shapes("qa_outputs", 2, c.hidden_size)),
    "multiple-choice": TaskHead(pre_classifier_head, lambda c: pre_classifier_shapes(c, 1), True),
}
"""DistilBERT's heads: every task's is its own."""

DISTILBERT = register(Family(
    name="DistilBERT", model_type="distilbert",
    embeddings=embeddings,
    task_heads=HEADS,
))
