"""BERT's family: what a descendant changes in the forward pass, as one small record per member.

RoBERTa, XLM-RoBERTa, CamemBERT, DistilBERT, ELECTRA, ALBERT, MPNet, DeBERTa-v2, ESM-2 and ModernBERT run BERT's own
functions (embeddings.py, attention.py, encoder.py, heads.py) with a few exceptions. Each member's module
(members/roberta.py, distilbert.py, ...) states them in its docstring ("X is BERT except: ...") and holds them as
named pure functions, which its :class:`Family` record lists. Every field left None is BERT's own. The kinds of
exception the forward pass reads are:

* **embeddings**: the first step, if it is not BERT's (DistilBERT has no token types; ELECTRA and
  ALBERT project their embeddings to the hidden size); **position_ids**: RoBERTa's count from
  ``padding_idx + 1`` over the real tokens; **longest**: the tokens one input may hold where the positions decide
  it otherwise (ESM's).
* **head_act**: the MLM head's activation when it is not ``config.hidden_act`` (RoBERTa's and ELECTRA's
  generator's are always exact GELU; ModernBERT's config names its own).
* **task_heads**: the heads of fine-tuned checkpoints (sequence classification, token classification, question
  answering, multiple choice) where the member's is not BERT's (RoBERTa's classifier reads ``<s>`` through dense,
  tanh and ``out_proj``; :mod:`bertfn.model.task_heads` has BERT's); **own_head**: a head of the member's own that
  :func:`bertfn.trace` runs after the encoder (ESM-2's contacts on every layer's attention maps, ELECTRA's
  discriminator on every token).
* **layer**, **final_norm**, **window**: a layer other than BERT's post-LN one (ESM-2's and ModernBERT's pre-LN
  layers with rotary attention, :mod:`bertfn.model.members.prenorm`), the LayerNorm after the last layer, and which
  layers attend within a window (ModernBERT's local ones).
* **variant**: the model a config describes, where one record reads several under one ``model_type`` (ESM-1b
  beside ESM-2: :func:`member_name`).

A member's checkpoint names are not here: its key table (``roberta.encoder.layer.0...``), the shapes its config
implies where they differ from BERT's, what loading does to its state and which tasks transformers has a head for
in it live beside the checkpoint code (:mod:`bertfn.checkpoint.names`), and the model reads them through
:mod:`bertfn.model.naming`. A head on parts of the last hidden states (direct attribution into a class) lives beside
the interventions (:mod:`bertfn.interventions.head_parts`), and no record lists trace points: the names a member's
steps pass come from running them (:func:`~bertfn.model.point_names.point_names`, :mod:`bertfn.model.dry_run`).

:func:`family_of` gives a config's record. The encoder and the heads ask it at the
few points where a member differs; nothing in BERT's functions names a member.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import CheckpointError
from .config import BertConfig

Tensor = torch.Tensor


class TaskHead(NamedTuple):
    """A task's head in one member: the function that runs it, the weights it reads, where it reads the text (its
    linearization, for direct attribution into a class, is beside the interventions: :mod:`bertfn.interventions.head_parts`).

    Attributes:
        run: ``(params, h, mask, *, generator=None, trace=NO_TRACE) -> logits``: h (B, S, H) the last hidden
            states, mask (B, S) 1 for real tokens; the logits as the task has them (:mod:`bertfn.model.task_heads`).
        shapes: ``config -> {key: shape}``, the weights it reads by BERT's names (its own keys, e.g.
            ``classifier.out_proj.weight``, are the same under the member's names), the pooler included where it
            reads one.
        first_only: it reads each text's first position alone (a classifier on ``[CLS]``), so that the fast path can
            run the last layer at those positions only: True or False, or ``config -> bool`` where the config says
            (ModernBERT's ``classifier_pooling``); :meth:`reads_first` answers for a config.
    """

    run: Callable[..., object]
    shapes: Callable[[BertConfig], dict[str, tuple[int, ...]]]
    first_only: bool | Callable[[BertConfig], bool] = False

    def reads_first(self, config: BertConfig) -> bool:
        """Whether the head reads each text's first position alone, for this config (:attr:`first_only`).

        Args:
            config: the model's config.
        """
        return self.first_only(config) if callable(self.first_only) else self.first_only


@dataclass(frozen=True)
class Family:
    """One member of BERT's family: its name and its exceptions to BERT's forward pass (None: BERT's own).

    Attributes:
        name: as people write it: "RoBERTa".
        model_type: config.json's model_type: "roberta".
        embeddings: the embeddings step, with BERT's signature plus ``attention_mask=`` (the 0/1 padding mask or None).
        position_ids: ``(input_ids (B, S), pad, past) -> (B, S)`` positions.
        longest: ``config -> the tokens one input may hold``, where the member's positions decide it other than by
            ``position_ids`` (ESM-1b's learned table, ESM-2's rotary positions: :func:`longest_input`).
        head_act: the MLM head's activation when not ``config.hidden_act``: a name, or ``config -> name``.
        layer: the member's layer, ``(p, x, mask, *, index, position_ids, head_mask, impl, need_probs,
            generator, trace) -> LayerOutput``, in place of :func:`~bertfn.model.encoder.layer`.
        final_norm: ``(p, x, trace) -> x``: the step after the last layer, where there is one.
        window: ``(config, layer) -> window or None``: the tokens a layer's queries see, where it attends within a
            window (ModernBERT's local layers: ``local_attention``, half on either side); None attends to all.
        task_heads: ``{task: TaskHead}``, the member's heads where they are not BERT's.
        own_head: a head of the member's own, none of BERT's, ``(params, input_ids (B, S), out (the encoder's
            :class:`~bertfn.model.encoder.EncoderOutput`, with its attentions), attention_mask (B, S), trace) ->
            tensor``, or None where the weights lack it: ESM-2's contact head on every layer's attention maps,
            ELECTRA's discriminator on the last hidden states. :func:`bertfn.trace` runs it after the encoder.
        variant: ``config -> name``: the model a config describes, where one record reads several under one
            ``model_type`` (ESM: "ESM-2", or "ESM-1b" with learned positions); None: ``name``.
    """

    name: str  # as people write it: "RoBERTa"
    model_type: str  # config.json's model_type: "roberta"
    embeddings: Callable[..., Tensor] | None = None  # the embeddings step, BERT's signature + attention_mask=
    position_ids: Callable[[Tensor, int | None, int], Tensor] | None = None  # (input_ids (B, S), pad, past) -> (B, S)
    longest: Callable[[BertConfig], int] | None = None  # config -> the tokens one input may hold (ESM's)
    head_act: str | Callable[[BertConfig], str] | None = None  # the MLM head's activation, when not config.hidden_act
    layer: Callable[..., object] | None = None  # the member's own layer (returns a LayerOutput)
    final_norm: Callable[..., Tensor] | None = None  # the step after the last layer
    window: Callable[[BertConfig, int], int | None] | None = None  # a layer's attention window (None: every token)
    task_heads: Mapping[str, TaskHead] | None = None  # {task: its head}, where not BERT's
    own_head: Callable[..., object] | None = None  # traced after the encoder: ESM-2's contacts, ELECTRA's discriminator
    variant: Callable[[BertConfig], str] | None = None  # config -> the model's name, where not ``name`` (ESM-1b)


BERT = Family("BERT", "bert")

FAMILIES: dict[str, Family] = {"bert": BERT}
"""``model_type`` -> :class:`Family`; each member's module adds its own (:func:`register`)."""


def register(family: Family) -> Family:
    """Add ``family`` under its model_type.

    Args:
        family: the member's record.

    Returns:
        ``family``.
    """
    FAMILIES[family.model_type] = family
    return family


def family_of(config: BertConfig) -> Family:
    """The :class:`Family` that reads a model of ``config`` (its ``model_type``).

    Args:
        config: the model's config.

    Raises:
        CheckpointError: a ``model_type`` no member claims.
    """
    try:
        return FAMILIES[config.model_type]
    except KeyError:
        raise CheckpointError(f"config model_type {config.model_type!r} is not a model bertfn reads; it reads "
                              f"{', '.join(sorted(FAMILIES))}") from None


def member_name(config: BertConfig) -> str:
    """The name of the model ``config`` describes, as people write it: its family's, or the variant's where one
    family record reads several models (ESM-1b beside ESM-2).

    Args:
        config: the model's config.
    """
    family = family_of(config)
    return family.variant(config) if family.variant is not None else family.name


def longest_input(config: BertConfig) -> int:
    """The tokens one input may hold, its special tokens included: the model's positions, less those a member's
    count skips before its first (RoBERTa's start at ``padding_idx + 1``: its 514 positions hold 512 tokens).

    What the hub's tokenizers give as ``model_max_length``; every call that reads text holds its inputs to it.

    Args:
        config: the model's config.
    """
    family = family_of(config)
    if family.longest is not None:  # the member says (ESM: learned positions from padding_idx + 1, or rotary)
        return family.longest(config)
    count = family.position_ids
    if count is None:
        return config.max_position_embeddings
    pad = config.pad_token_id if config.pad_token_id is not None else 0
    first = int(count(torch.tensor([[pad + 1]]), pad, 0)[0, 0])  # one real token's position: the first a text gets
    return config.max_position_embeddings - first
