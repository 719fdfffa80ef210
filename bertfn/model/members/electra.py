"""ELECTRA (Clark et al. 2020): a generator masked LM and a discriminator that spots replaced tokens.

ELECTRA is BERT except:

* **factorized embeddings**: the tables are ``embedding_size`` (E) wide, smaller than H in the small
  and generator models, and a linear map ``embeddings_project`` (H, E) takes them to H after the
  embeddings' LayerNorm (:func:`factorized_embeddings`; absent when E = H);
* **two heads**: the generator's MLM head is BERT's at width E (``generator_predictions.dense`` (E, H),
  ``generator_predictions.LayerNorm`` (E,), ``generator_lm_head`` (V, E) tied to the word embeddings) with
  exact GELU; the discriminator's (:func:`discriminator_head`) gives one logit per token, "was this token
  replaced?" (``ElectraForPreTraining``, read by :func:`bertfn.tasks.replaced.replaced_tokens`);
* **names**: ``electra.*``, the projection ``embeddings_project``; no pooler (the checkpoint side:
  :mod:`bertfn.checkpoint.names.electra`, which also widens BERT's table to E);
* **its classifiers**: the sequence classifier is RoBERTa's (``<s>`` through a dense layer and ``out_proj``) with
  GELU for tanh (:func:`classification_head`); the multiple-choice head sums the text up first
  (``ElectraSequenceSummary``: :func:`summary_scorer`).

The layers are BERT's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...errors import ConfigError
from ..config import BertConfig
from ..embeddings import embeddings as bert_embeddings
from ..encoder import EncoderOutput
from ..family import Family, TaskHead, register
from ..functional import ACTIVATIONS, dropout, linear
from ..params import Params, as_params
from ..recorder import NO_TRACE, Trace
from .roberta import classification_head as roberta_classification_head
from .roberta import classification_shapes
from ..task_heads import linear_shapes

Tensor = torch.Tensor


@dataclass(frozen=True)
class ElectraConfig(BertConfig):
    """``transformers.ElectraConfig``: BertConfig with the embeddings' width and ELECTRA-small's defaults.

    Attributes:
        embedding_size: E, the width of the embedding tables (128).
        hidden_size: H, 256.
        num_attention_heads: 4.
        intermediate_size: 1024.
        summary_type: how the multiple-choice head sums a text up: "first" (its first token; the one bertfn reads).
        summary_use_proj: the summary has a dense layer (``sequence_summary.summary``, (H, H)).
        summary_activation: the summary's activation after that layer (None: none).
        summary_first_dropout: the dropout before the summary's dense layer.
        summary_last_dropout: the dropout after its activation.
        summary_proj_to_labels: the summary's dense layer has num_labels outputs (refused: ELECTRA's has H).
        model_type: "electra".

    Raises:
        ConfigError: a ``summary_type`` other than "first", a projection to the labels, or an unknown activation.
    """

    embedding_size: int = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_first_dropout: float = 0.0
    summary_last_dropout: float = 0.1
    summary_proj_to_labels: bool = False
    model_type: str = "electra"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.summary_type != "first" or self.summary_proj_to_labels:
            raise ConfigError(f"config summary_type {self.summary_type!r} with summary_proj_to_labels="
                              f"{self.summary_proj_to_labels} is not a summary bertfn reads: ELECTRA's multiple-choice "
                              "head sums a text up by its first token (summary_type 'first', no projection to the "
                              "labels), as every released ELECTRA does")
        if self.summary_activation is not None and self.summary_activation not in ACTIVATIONS:
            raise ConfigError(f"config summary_activation {self.summary_activation!r} is not an activation bertfn "
                              f"knows; expected one of {sorted(ACTIVATIONS)}")


def factorized_embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
                          position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                          past_length: int = 0, generator: torch.Generator | None = None,
                          trace: Trace = NO_TRACE, *,
                          attention_mask: Tensor | None = None) -> Tensor:
    """BERT's embeddings at width E, then ``project`` (H, E) to the hidden size when the model has it.

    Mirrors ``ElectraEmbeddings`` + ``ElectraModel.embeddings_project`` (and ALBERT's
    ``AlbertEmbeddings`` + ``embedding_hidden_mapping_in``).

    Args:
        p: ``bert.embeddings.`` scope, whose ``project.*`` is the member's projection.
        input_ids: (B, S).
        token_type_ids: (B, S), as in BERT's.
        position_ids: (B, S), as in BERT's.
        inputs_embeds: (B, S, E), instead of ``input_ids``.
        past_length: the cached positions before these.
        generator: turns dropout on (training).
        trace: records (and edits) BERT's embedding points, then ``projected``.
        attention_mask: accepted and ignored (the encoder passes it to every member's embeddings; ESM-2's read it).

    Returns:
        (B, S, H).
    """
    x = bert_embeddings(p, input_ids, token_type_ids, position_ids, inputs_embeds, past_length, generator, trace)  # (B, S, E)
    if "project.weight" in p:
        x = trace("projected", linear(x, p["project.weight"], p["project.bias"]))  # (B, S, H)
    return x


def discriminator_head(params: Params, h: Tensor, *, config: BertConfig | dict | None = None,
                       trace: Trace = NO_TRACE) -> Tensor:
    """One logit per token: was it replaced? ``dense_prediction(act(dense h))`` (``ElectraDiscriminatorPredictions``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``. Reads
            ``discriminator_predictions.dense.*`` (H, H) and ``.dense_prediction.*`` (1, H).
        h: (..., H) last hidden states.
        config: the config of a bare state_dict.
        trace: records ``discriminator.transform`` (..., H), ``act(dense h)``, and ``discriminator.logits`` (...).

    Returns:
        (..., ) logits; sigmoid gives the probability that a token is not the original.
    """
    params = as_params(params, config, "discriminator_head")
    p = params.scope("discriminator_predictions")
    t = ACTIVATIONS[params.config.hidden_act](linear(h, p["dense.weight"], p["dense.bias"]))  # (..., H)
    t = trace("discriminator.transform", t)
    return trace("discriminator.logits", linear(t, p["dense_prediction.weight"], p["dense_prediction.bias"]).squeeze(-1))


def discriminator_of(params: Params, input_ids: Tensor, out: EncoderOutput, attention_mask: Tensor,
                     trace: Trace = NO_TRACE) -> Tensor | None:
    """:func:`discriminator_head` at every token, where the checkpoint has it (``ElectraForPreTraining``; ELECTRA's
    ``Family.own_head``), else None.

    Args:
        params: the root view.
        input_ids: (B, S), unread (the heads' common signature).
        out: the encoder's output; its ``last_hidden_state`` (B, S, H).
        attention_mask: (B, S), unread: a padding token's logit is computed and means nothing.
        trace: records the head's points.

    Returns:
        (B, S) logits, or None.
    """
    if "discriminator_predictions.dense.weight" not in params:
        return None
    return discriminator_head(params, out.last_hidden_state, trace=trace)


def classification_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                        trace: Trace = NO_TRACE) -> Tensor:
    """``ElectraClassificationHead``: RoBERTa's classifier (:func:`~bertfn.model.members.roberta.classification_head`) with
    exact GELU where RoBERTa has tanh.

    Args:
        params: the root view (reads ``classifier.dense.*`` and ``classifier.out_proj.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused.
        generator: turns dropout on (training).
        trace: records ``classifier.input``, ``classifier.dense``, ``classifier.activation``, ``classifier.logits``.

    Returns:
        (B, num_labels).
    """
    return roberta_classification_head(params, h, mask, generator=generator, trace=trace, activation="gelu")


def summary_scorer(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                   trace: Trace = NO_TRACE) -> Tensor:
    """``ElectraForMultipleChoice``'s head: the sequence summary (``ElectraSequenceSummary``: the first token, dropout,
    ``sequence_summary.summary`` (H, H), GELU, dropout), then ``classifier`` (1, H): one score per (text, choice) row.

    Args:
        params: the root view (reads ``sequence_summary.summary.*`` and ``classifier.*``).
        h: (B*C, S, H) last hidden states of the flattened (text, choice) pairs.
        mask: (B*C, S), unused.
        generator: turns dropout on (training; ``summary_first_dropout``, ``summary_last_dropout``).
        trace: records ``classifier.input``, ``classifier.dense`` and ``classifier.activation`` (where the summary has
            them), ``classifier.logits``.

    Returns:
        (B*C, 1).
    """
    cfg = params.config
    x = trace("classifier.input", h[:, 0])  # (B*C, H)
    x = dropout(x, cfg.summary_first_dropout, generator)
    if cfg.summary_use_proj:
        p = params.scope("sequence_summary.summary")
        x = trace("classifier.dense", linear(x, p["weight"], p["bias"]))  # (B*C, H)
    if cfg.summary_activation:
        x = trace("classifier.activation", ACTIVATIONS[cfg.summary_activation](x))
    x = dropout(x, cfg.summary_last_dropout, generator)
    return trace("classifier.logits", linear(x, params["classifier.weight"], params["classifier.bias"]))  # (B*C, 1)


def summary_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """The keys of :func:`summary_scorer`: ``sequence_summary.summary`` (H, H) where it projects, ``classifier`` (1, H).

    Args:
        config: the model's config.
    """
    H = config.hidden_size
    summary = linear_shapes("sequence_summary.summary", H, H) if config.summary_use_proj else {}
    return {**summary, **linear_shapes("classifier", 1, H)}


CLASSIFIER = TaskHead(classification_head, classification_shapes, True)
"""ELECTRA's sequence-classification head."""

ELECTRA = register(Family(
    name="ELECTRA", model_type="electra",
    embeddings=factorized_embeddings,
    head_act="gelu",
    task_heads={"sequence-classification": CLASSIFIER, "multiple-choice": TaskHead(summary_scorer, summary_shapes, True)},
    own_head=discriminator_of,
))
