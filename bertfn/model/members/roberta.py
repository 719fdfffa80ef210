"""RoBERTa (Liu et al. 2019), XLM-RoBERTa (Conneau et al. 2020) and CamemBERT (Martin et al. 2020).

RoBERTa is BERT except:

* **positions** count the real tokens from ``padding_idx + 1`` (fairseq's ``make_positions``,
  :func:`count_positions`): padding keeps position ``padding_idx``, so a left-padded text gets the same
  positions as alone, and the table has two rows more than the longest text (514 for 512 tokens);
* **names**: its weights are ``roberta.*`` and its MLM head is ``lm_head.dense``, ``lm_head.layer_norm``,
  ``lm_head.decoder`` (the word embeddings, stored once) and ``lm_head.bias``, as the checkpoint side has them
  (:mod:`bertfn.checkpoint.names.roberta`);
* **the MLM head's activation** is exact GELU whatever ``hidden_act`` says (``RobertaLMHead``);
* **its config's defaults**: pad 1, ``<s>`` 0, ``</s>`` 2 (:class:`RobertaConfig`); checkpoints have
  one token type;
* **its sequence classifier** (:func:`classification_head`) reads ``<s>`` through a dense layer of its own, tanh and
  ``out_proj``, where BERT's reads the pooler: RoBERTa was pretrained without next-sentence prediction, so no
  trained pooler comes with it, and its classifier checkpoints hold none (its multiple-choice head is BERT's,
  on a pooler trained with the task).

Its tokenizer (byte-level BPE, ``<s> A </s></s> B </s>``, ``<mask>``) is the tokenizer's business
(bertfn/checkpoint/tokenizer.py). XLM-RoBERTa is RoBERTa with a SentencePiece vocabulary of 250,002
pieces: the same functions and names, ``model_type`` "xlm-roberta" (``XLMRobertaForMaskedLM``). CamemBERT is
RoBERTa too, trained on French with a SentencePiece vocabulary of 32,005 pieces: ``model_type`` "camembert"
(``CamembertForMaskedLM``, whose keys are ``roberta.*`` and ``lm_head.*``), ``<s>`` 5 and ``</s>`` 6 in its
checkpoints' configs (its vocabulary begins with fairseq's ``<s>NOTUSED``, ``<pad>``, ``</s>NOTUSED``, ``<unk>``).
Everything else (attention, the layers, post-LN, the head's shape) is BERT's own.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import BertConfig
from ..embeddings import embeddings as bert_embeddings
from ..family import Family, TaskHead, register
from ..functional import ACTIVATIONS, dropout, linear
from ..params import Params
from ..recorder import NO_TRACE, Trace
from ..task_heads import linear_shapes

Tensor = torch.Tensor


@dataclass(frozen=True)
class RobertaConfig(BertConfig):
    """``transformers.RobertaConfig``: BertConfig with RoBERTa's special token ids.

    Attributes:
        pad_token_id: 1.
        bos_token_id: ``<s>``, 0.
        eos_token_id: ``</s>``, 2.
        model_type: "roberta".
    """

    pad_token_id: int | None = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    model_type: str = "roberta"

    @property
    def choice_dropout(self) -> float:
        """``RobertaForMultipleChoice``'s dropout: ``hidden_dropout_prob`` (it never reads ``classifier_dropout``, which
        its sequence classifier and tagger read)."""
        return self.hidden_dropout_prob


@dataclass(frozen=True)
class XLMRobertaConfig(RobertaConfig):
    """``transformers.XLMRobertaConfig``: RoBERTa's, under its own model_type.

    Attributes:
        model_type: "xlm-roberta".
    """

    model_type: str = "xlm-roberta"


@dataclass(frozen=True)
class CamembertConfig(RobertaConfig):
    """``transformers.CamembertConfig``: RoBERTa's, under its own model_type (its defaults are RoBERTa's; camembert-base's
    config.json says ``<s>`` 5 and ``</s>`` 6).

    Attributes:
        model_type: "camembert".
    """

    model_type: str = "camembert"


def count_positions(input_ids: Tensor, padding_idx: int | None, past: int = 0) -> Tensor:
    """RoBERTa's positions: ``padding_idx + 1, + 2, ...`` over the real tokens, ``padding_idx`` at padding.

    Mirrors ``create_position_ids_from_input_ids`` (fairseq's ``utils.make_positions``).

    Args:
        input_ids: (B, S).
        padding_idx: the pad id.
        past: the number of cached positions before these.

    Returns:
        (B, S).
    """
    real = input_ids.ne(padding_idx).int()  # (B, S): 1 for a real token, 0 for padding
    return ((torch.cumsum(real, dim=1) + past) * real).long() + padding_idx  # (B, S)


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | None = None) -> Tensor:
    """BERT's :func:`~bertfn.model.embeddings.embeddings` at RoBERTa's positions (``RobertaEmbeddings``).

    Args:
        p: ``bert.embeddings.`` scope (read as ``roberta.embeddings.``).
        input_ids: (B, S).
        token_type_ids: (B, S), as in BERT's.
        position_ids: (B, S); when not given they come from the ids (:func:`count_positions`) or, for
            ``inputs_embeds`` (no ids to find padding in), run ``padding_idx + 1 ..`` as in transformers.
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        past_length: the cached positions before these.
        generator: turns dropout on (training).
        trace: records (and edits) the steps, as BERT's.
        attention_mask: accepted and ignored (the encoder passes it to every member's embeddings; ESM-2's read it).

    Returns:
        (B, S, H).
    """
    pad = p.config.pad_token_id
    if position_ids is None and input_ids is not None and isinstance(input_ids, Tensor) and input_ids.dim() == 2:
        position_ids = count_positions(input_ids, pad, past_length)
    elif position_ids is None and isinstance(inputs_embeds, Tensor) and inputs_embeds.dim() == 3:
        B, S = inputs_embeds.shape[:2]
        position_ids = torch.arange(pad + 1, pad + 1 + S, device=inputs_embeds.device).expand(B, S)
    return bert_embeddings(p, input_ids, token_type_ids, position_ids, inputs_embeds, past_length, generator, trace,
                           position_padding=pad)  # RobertaEmbeddings' position table has padding_idx=pad_token_id


def classification_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                        trace: Trace = NO_TRACE, activation: str = "tanh") -> Tensor:
    """``RobertaClassificationHead``: the first token (``<s>``), dropout, ``dense``, tanh, dropout, ``out_proj``.

    ESM-2's (``EsmClassificationHead``) is the same; ELECTRA's the same with GELU (``activation``).

    Args:
        params: the root view (reads ``classifier.dense.*`` (H, H) and ``classifier.out_proj.*`` (num_labels, H)).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused (the head reads the first token).
        generator: turns dropout on (training; ``config.classifier_dropout``, else ``hidden_dropout_prob``).
        trace: records ``classifier.input``, ``classifier.dense``, ``classifier.activation``, ``classifier.logits``.
        activation: the dense layer's activation (a name of :data:`~bertfn.model.functional.ACTIVATIONS`).

    Returns:
        (B, num_labels).
    """
    p = params.scope("classifier")
    rate = params.config.head_dropout
    x = trace("classifier.input", h[:, 0])  # (B, H): <s>
    x = dropout(x, rate, generator)
    x = trace("classifier.dense", linear(x, p["dense.weight"], p["dense.bias"]))  # (B, H)
    x = trace("classifier.activation", ACTIVATIONS[activation](x))
    x = dropout(x, rate, generator)
    return trace("classifier.logits", linear(x, p["out_proj.weight"], p["out_proj.bias"]))  # (B, num_labels)


def classification_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """The keys of :func:`classification_head`: ``classifier.dense`` (H, H), ``classifier.out_proj`` (num_labels, H).

    Args:
        config: the model's config.
    """
    H = config.hidden_size
    return {**linear_shapes("classifier.dense", H, H), **linear_shapes("classifier.out_proj", config.num_labels, H)}


CLASSIFIER = TaskHead(classification_head, classification_shapes, True)
"""RoBERTa's sequence-classification head, shared with ESM-2."""

ROBERTA = register(Family(
    name="RoBERTa", model_type="roberta",
    embeddings=embeddings, position_ids=count_positions, head_act="gelu",
    task_heads={"sequence-classification": CLASSIFIER},
))

XLM_ROBERTA = register(replace(ROBERTA, name="XLM-RoBERTa", model_type="xlm-roberta"))

CAMEMBERT = register(replace(ROBERTA, name="CamemBERT", model_type="camembert"))
