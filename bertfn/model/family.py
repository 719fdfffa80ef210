"""BERT's family: what a descendant changes, as one small record per member.

RoBERTa, XLM-RoBERTa, DistilBERT, ELECTRA, ALBERT, ESM-2 and ModernBERT run BERT's own functions
(embeddings.py, attention.py, encoder.py, heads.py) with a few exceptions. Each member's module (roberta.py,
distilbert.py, electra.py, albert.py, esm.py, modernbert.py) states them in its docstring ("X is BERT except: ...") and
holds them as named pure functions, which its :class:`Family` record lists. Every field left None
is BERT's own. The kinds of exception are:

* **names** (``key``): the member's checkpoint keeps its own HF key names (``roberta.encoder.layer.0...``,
  ``distilbert.transformer.layer.0.attention.q_lin.weight``). The model's state stays as the file
  has it; the :class:`~bertfn.model.params.Params` view reads it through the member's ``key``, which
  turns each BERT name a function asks for into the member's. ALBERT's shares one layer's weights
  with every layer this way: its ``key`` sends layer 3's names to its one layer group's.
* **shapes**: the keys and shapes the config implies, where they differ from BERT's table
  (:func:`~bertfn.model.shapes.expected_shapes`): ELECTRA's and ALBERT's narrower embeddings and
  their projection to the hidden size.
* **normalize**: what loading does to a state read from a file (a bare base model's keys get the
  member's prefix; a tied decoder stored once gets its second name, as transformers' state_dict shows it).
* **embeddings**: the first step, if it is not BERT's (DistilBERT has no token types; ELECTRA and
  ALBERT project their embeddings to the hidden size); **position_ids**: RoBERTa's count from
  ``padding_idx + 1`` over the real tokens.
* **head_act**: the MLM head's activation when it is not ``config.hidden_act`` (RoBERTa's and ELECTRA's
  generator's are always exact GELU; ModernBERT's config names its own).
* **task_heads**, **tasks**: the heads of fine-tuned checkpoints (sequence classification, token
  classification, question answering, multiple choice) where the member's is not BERT's (RoBERTa's classifier
  reads ``<s>`` through dense, tanh and ``out_proj``; :mod:`bertfn.model.task_heads` has BERT's), and which of
  those tasks transformers has a class for in the member (ESM-2: the two classifications).
* **layer**, **final_norm**, **window**: a layer other than BERT's post-LN one (ESM-2's and ModernBERT's pre-LN
  layers with rotary attention, :mod:`bertfn.model.members.prenorm`), the LayerNorm after the last layer, and which
  layers attend within a window (ModernBERT's local ones).

No record lists trace points: the names a member's steps pass come from running them
(:func:`~bertfn.model.recorder.point_names`, :mod:`bertfn.model.dry_run`).

:func:`family_of` gives a config's record. The encoder and the heads ask it at the
few points where a member differs; nothing in BERT's functions names a member.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..errors import CheckpointError
from .config import BertConfig
from .shapes import expected_shapes

Tensor = torch.Tensor
Names = tuple[tuple[str, str], ...]
"""A member's table of checkpoint names: ``(regex of BERT's name, the member's)`` rules, read by :func:`renamed`."""


class TaskHead(NamedTuple):
    """A task's head in one member: the function that runs it, the weights it reads, where it reads the text.

    Attributes:
        run: ``(params, h, mask, *, generator=None, trace=NO_TRACE) -> logits``: h (B, S, H) the last hidden
            states, mask (B, S) 1 for real tokens; the logits as the task has them (:mod:`bertfn.model.task_heads`).
        shapes: ``config -> {key: shape}``, the weights it reads by BERT's names (its own keys, e.g.
            ``classifier.out_proj.weight``, are the same under the member's names), the pooler included where it
            reads one.
        first_only: it reads each text's first position alone (a classifier on ``[CLS]``), so that the fast path can
            run the last layer at those positions only: True or False, or ``config -> bool`` where the config says
            (ModernBERT's ``classifier_pooling``); :meth:`reads_first` answers for a config.
        linearized: ``(params, parts, mask) -> the logits' parts``: ``run`` on K parts of one text's last hidden
            states in its batch axis (parts (K, S, H), the last row the bias part; mask (K, S)), its activations and
            LayerNorms frozen at the run the parts sum to (:mod:`bertfn.model.linearized`), so that the logits are
            the sum of the parts' logits (direct attribution into a class: :mod:`bertfn.interventions.class_attribution`);
            None where bertfn has none (the multiple-choice heads).
    """

    run: Callable[..., object]
    shapes: Callable[[BertConfig], dict[str, tuple[int, ...]]]
    first_only: bool | Callable[[BertConfig], bool] = False
    linearized: Callable[..., object] | None = None

    def reads_first(self, config: BertConfig) -> bool:
        """Whether the head reads each text's first position alone, for this config (:attr:`first_only`).

        Args:
            config: the model's config.
        """
        return self.first_only(config) if callable(self.first_only) else self.first_only


@dataclass(frozen=True)
class Family:
    """One member of BERT's family: its name and its exceptions to BERT (None: BERT's own).

    Attributes:
        name: as people write it: "RoBERTa".
        model_type: config.json's model_type: "roberta".
        prefix: the base model's key prefix in its checkpoints: "roberta.".
        key: the member's checkpoint names: a table of ``(BERT name pattern, the member's)`` that :func:`renamed`
            reads, first match wins (:data:`~bertfn.model.members.roberta.KEYS`); or ``(BERT name, config) -> the
            member's checkpoint name`` where the renaming reads the config (ALBERT's layer groups, DeBERTa's head).
        shapes: ``(config, BERT's table, present weights) -> the member's table`` of keys and shapes.
        normalize: ``(state, config) -> state``: what loading does to a state read from a file.
        embeddings: the embeddings step, with BERT's signature plus ``attention_mask=`` (the 0/1 padding mask or None).
        position_ids: ``(input_ids (B, S), pad, past) -> (B, S)`` positions.
        longest: ``config -> the tokens one input may hold``, where the member's positions decide it other than by
            ``position_ids`` (ESM-1b's learned table, ESM-2's rotary positions: :func:`longest_input`).
        head_act: the MLM head's activation when not ``config.hidden_act``: a name, or ``config -> name``.
        heads: the member's head parts: ``{part name: a key that stands for it}``.
        layer: the member's layer, ``(p, x, mask, *, index, position_ids, head_mask, impl, need_probs,
            generator, trace) -> LayerOutput``, in place of :func:`~bertfn.model.encoder.layer`.
        final_norm: ``(p, x, trace) -> x``: the step after the last layer, where there is one.
        window: ``(config, layer) -> window or None``: the tokens a layer's queries see, where it attends within a
            window (ModernBERT's local layers: ``local_attention``, half on either side); None attends to all.
        task_heads: ``{task: TaskHead}``, the member's heads where they are not BERT's.
        tasks: the tasks transformers has a head for in this member (None: BERT's four).
        attention_head: a head of the member's that reads every layer's attention maps, ``(params, input_ids (B, S),
            attentions (L of (B, nh, S, S)), attention_mask (B, S), trace) -> tensor``, or None where the weights lack
            it (ESM-2's contact head); :func:`bertfn.trace` runs it after the encoder.
        variant: ``config -> name``: the model a config describes, where one record reads several under one
            ``model_type`` (ESM: "ESM-2", or "ESM-1b" with learned positions); None: ``name``.
    """

    name: str  # as people write it: "RoBERTa"
    model_type: str  # config.json's model_type: "roberta"
    prefix: str  # the base model's key prefix in its checkpoints: "roberta."
    key: Names | Callable[[str, BertConfig], str] | None = None  # BERT name -> the member's checkpoint name
    shapes: Callable[[BertConfig, dict[str, tuple[int, ...]], Mapping[str, Tensor]], dict[str, tuple[int, ...]]] | None = None
    normalize: Callable[[dict[str, Tensor], BertConfig], dict[str, Tensor]] | None = None
    embeddings: Callable[..., Tensor] | None = None  # the embeddings step, BERT's signature + attention_mask=
    position_ids: Callable[[Tensor, int | None, int], Tensor] | None = None  # (input_ids (B, S), pad, past) -> (B, S)
    longest: Callable[[BertConfig], int] | None = None  # config -> the tokens one input may hold (ESM's)
    head_act: str | Callable[[BertConfig], str] | None = None  # the MLM head's activation, when not config.hidden_act
    heads: Mapping[str, str] | None = None  # the member's head parts: {part name: a key that stands for it}
    layer: Callable[..., object] | None = None  # the member's own layer (returns a LayerOutput)
    final_norm: Callable[..., Tensor] | None = None  # the step after the last layer
    window: Callable[[BertConfig, int], int | None] | None = None  # a layer's attention window (None: every token)
    task_heads: Mapping[str, TaskHead] | None = None  # {task: its head}, where not BERT's
    tasks: tuple[str, ...] | None = None  # the tasks transformers has a head for (None: BERT's four)
    attention_head: Callable[..., object] | None = None  # a head on every layer's attention maps (ESM-2's contacts)
    variant: Callable[[BertConfig], str] | None = None  # config -> the model's name, where not ``name`` (ESM-1b)


BERT = Family("BERT", "bert", "bert.")

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


def renamed(name: str, table: Names) -> str:
    r"""``name`` rewritten by the first rule of ``table`` whose pattern matches its start, or unchanged.

    A member's key table, read top to bottom.

    Args:
        name: a BERT name.
        table: ``(regex, template)`` rules as :func:`re.sub` takes them (``\1`` for a group).
    """
    for pattern, template in table:
        new, n = re.subn(f"^{pattern}", template, name, count=1)
        if n:
            return new
    return name


def normalizer(prefix: str, bare: tuple[str, ...], ties: tuple[tuple[str, str], ...]) -> Callable:
    """A member's ``normalize``: what loading does to a state read from the member's checkpoint file.

    * a bare base model's keys (starting with one of ``bare``, e.g. ``embeddings.``) get ``prefix``;
    * buffers (``*.position_ids``, ``*.token_type_ids``) are dropped: bertfn computes them;
    * each ``(alias, source)`` of ``ties`` names a weight stored once under two names, as
      transformers' ``state_dict()`` shows it (``lm_head.decoder.weight`` is the word embeddings): where the
      file has the alias's head but not the alias, the alias is added for the same tensor.

    Args:
        prefix: the base model's key prefix, e.g. ``roberta.``.
        bare: the starts of a bare base model's keys.
        ties: ``(alias, source)`` pairs.

    Returns:
        ``normalize(state, config)``, which returns a new dict of the same tensors.
    """
    def normalize(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
        out = {}
        for k, t in state.items():
            k = prefix + k if k.startswith(bare) else k
            if not k.endswith((".position_ids", ".token_type_ids")):
                out[k] = t
        for alias, source in ties:
            head = alias.split(".")[0] + "."
            if alias not in out and source in out and any(k.startswith(head) for k in out):
                out[alias] = out[source]
        return out

    return normalize


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


def named_shapes(config: BertConfig, present: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
    """Every weight a model of ``config`` reads, by BERT's name, with its shape.

    BERT's table (:func:`~bertfn.model.shapes.expected_shapes`) with the member's ``shapes`` exceptions.

    Args:
        config: the model's config.
        present: the weights at hand: optional parts count as it holds them, asked by BERT's names.
    """
    table = expected_shapes(config, present)
    family = family_of(config)
    return family.shapes(config, table, present) if family.shapes is not None else table


_renamers: dict[int, tuple[BertConfig, Callable[[str], str]]] = {}


def renamer(config: BertConfig) -> Callable[[str], str] | None:
    """``name -> checkpoint key`` for a model of ``config``.

    The member's ``key`` with its answers remembered (a pass asks for the same few hundred names again
    and again).

    Args:
        config: the model's config.

    Returns:
        None for BERT (the names are the keys), else the renaming function.
    """
    family = family_of(config)
    if family.key is None:
        return None
    found = _renamers.get(id(config))
    if found is not None and found[0] is config:
        return found[1]
    memo: dict[str, str] = {}

    def rename(name: str) -> str:
        k = memo.get(name)
        if k is None:
            k = memo[name] = family.key(name, config) if callable(family.key) else renamed(name, family.key)
        return k

    _renamers[id(config)] = (config, rename)  # the config is kept alive with it, so its id stays its own
    return rename
