"""DeBERTa-v2 and DeBERTa-v3 (He et al. 2021; 2023), ``model_type`` "deberta-v2".

DeBERTa is BERT except:

* **attention** (its layers: :mod:`bertfn.model.members.deberta_attention`): disentangled, with content and
  relative-position terms, and a convolution after the first layer in some v2 models;
* **embeddings** (:func:`embeddings`): word (+ absolute position where ``position_biased_input``, which v3 turns
  off) (+ token type where ``type_vocab_size`` > 0; v3 has none), projected from ``embedding_size`` to H by
  ``embed_proj`` (no bias) where they differ, LayerNorm, then *multiplied by the padding mask* (padding's vectors
  are 0);
* **names** (:mod:`bertfn.checkpoint.names.deberta`): ``deberta.*``, ``attention.self.query_proj|key_proj|value_proj``; the encoder's
  ``rel_embeddings`` and its ``LayerNorm`` (``norm_rel_ebd``); its MLM head is BERT's ``cls.predictions.*``
  where ``legacy`` (transformers' default), else ``lm_predictions.lm_head.dense|LayerNorm|bias`` (the decoder the
  word embeddings), the same function;
* **its config**: eps 1e-7, no token types, pad 0, and its own fields (:class:`DebertaV2Config`);
* **its classifiers** (sequence classification, multiple choice: :func:`context_pooler_head`) read ``[CLS]``
  through ``ContextPooler``: ``pooler.dense`` (a root key, not the base model's), ``pooler_hidden_act`` (GELU), then
  ``classifier``; its tagger and reader are BERT's.

No pooler in the base model. Its tokenizer (SentencePiece unigram, ``[CLS] A [SEP] B [SEP]``) is the tokenizer's
business: a folder with ``tokenizer.json`` reads as any other; one with only ``spm.model`` is read as
``DebertaV2TokenizerFast`` converts it (bertfn/checkpoint/sentencepiece.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import ConfigError
from ..config import BertConfig
from ..embeddings import check_ids, default_position_ids, word_vectors
from ..family import Family, TaskHead, register
from ..functional import ACTIVATIONS, dropout, layer_norm, linear
from ..layout import Segments
from ..params import Params, scoped
from ..recorder import NO_TRACE, Trace
from ..task_heads import linear_shapes
from . import deberta_attention

Tensor = torch.Tensor


@dataclass(frozen=True)
class DebertaV2Config(BertConfig):
    """``transformers.DebertaV2Config``: BertConfig with DeBERTa's defaults and fields.

    Attributes:
        vocab_size: 128100 (DeBERTa-v3's).
        hidden_size: 1536, num_hidden_layers 24, num_attention_heads 24, intermediate_size 6144: transformers' defaults
            (DeBERTa-v2-xlarge's shape).
        num_hidden_layers: 24.
        num_attention_heads: 24.
        intermediate_size: 6144.
        type_vocab_size: 0: no token-type table (v3); BertConfig's check of it is relaxed to >= 0.
        layer_norm_eps: 1e-7.
        relative_attention: attention adds the positional terms (every released model).
        max_relative_positions: the longest distance; < 1: ``max_position_embeddings``.
        position_buckets: log buckets of the distances (256 in v3); <= 0: none.
        pos_att_type: the positional terms: "c2p", "p2c" (a "p2c|c2p" string is split as transformers does).
        share_att_key: the positional keys and queries use the content projections.
        norm_rel_ebd: "layer_norm" LayerNorms ``rel_embeddings``; "none" leaves it.
        position_biased_input: absolute position embeddings are added (False in v3).
        embedding_size: E, the embeddings' width (None: H).
        conv_kernel_size: the convolution after the first layer (0: none), ``conv_groups``, ``conv_act``.
        conv_groups: its groups.
        conv_act: its activation.
        pooler_hidden_size: the ContextPooler's width (None: H).
        pooler_hidden_act: its activation (GELU).
        pooler_dropout: its dropout.
        cls_dropout: the classifier's dropout (None: ``hidden_dropout_prob``).
        legacy: the MLM head is ``cls.predictions.*`` (True) or ``lm_predictions.lm_head.*``.
        model_type: "deberta-v2".

    Raises:
        ConfigError: a negative ``type_vocab_size``, an unknown positional term or activation, or ``embedding_size``
            unlike H without ``legacy`` (transformers' head then cannot multiply by the word embeddings either).
    """

    vocab_size: int = 128100
    hidden_size: int = 1536
    num_hidden_layers: int = 24
    num_attention_heads: int = 24
    intermediate_size: int = 6144
    type_vocab_size: int = 0
    layer_norm_eps: float = 1e-7
    relative_attention: bool = False
    max_relative_positions: int = -1
    position_buckets: int = -1
    pos_att_type: tuple[str, ...] = ()
    share_att_key: bool = False
    norm_rel_ebd: str = "none"
    position_biased_input: bool = True
    embedding_size: int | None = None
    conv_kernel_size: int = 0
    conv_groups: int = 1
    conv_act: str = "tanh"
    pooler_hidden_size: int | None = None
    pooler_hidden_act: str = "gelu"
    pooler_dropout: float = 0.0
    cls_dropout: float | None = None
    legacy: bool = True
    model_type: str = "deberta-v2"

    def __post_init__(self) -> None:
        if isinstance(self.type_vocab_size, int) and self.type_vocab_size == 0:
            object.__setattr__(self, "type_vocab_size", 1)  # BertConfig asks for >= 1; DeBERTa allows 0
            try:
                super().__post_init__()
            finally:
                object.__setattr__(self, "type_vocab_size", 0)
        else:
            super().__post_init__()
        terms = self.pos_att_type
        if isinstance(terms, str):
            terms = [t.strip() for t in terms.lower().split("|")]
        object.__setattr__(self, "pos_att_type", tuple(terms or ()))
        unknown = [t for t in self.pos_att_type if t not in ("c2p", "p2c")]
        if unknown:
            raise ConfigError(f"config pos_att_type holds {unknown}, not terms bertfn reads; expected 'c2p' "
                              "and/or 'p2c'")
        for name in ("conv_act", "pooler_hidden_act"):
            if getattr(self, name) not in ACTIVATIONS:
                raise ConfigError(f"config {name} {getattr(self, name)!r} is not an activation bertfn knows; "
                                  f"expected one of {sorted(ACTIVATIONS)}")
        if not self.legacy and self.width != self.hidden_size:
            raise ConfigError("config legacy=false with embedding_size unlike hidden_size: DeBERTa's non-legacy MLM "
                              "head multiplies H-wide vectors by the E-wide word embeddings (transformers fails too)")

    @property
    def width(self) -> int:
        """E, the embeddings' width: ``embedding_size``, else H."""
        return self.embedding_size or self.hidden_size

    def to_dict(self) -> dict[str, Any]:
        """The config as a ``config.json``-style dict, without ``embedding_size`` and ``pooler_hidden_size`` where they
        are None (transformers reads them with ``getattr(config, name, hidden_size)``, which a null would defeat)."""
        d = super().to_dict()
        for name in ("embedding_size", "pooler_hidden_size"):
            if d.get(name) is None:
                d.pop(name, None)
        d["pos_att_type"] = list(self.pos_att_type)
        return d

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """DeBERTa's config.json as BertConfig's reader takes it: ``pos_att_type`` a tuple, ``position_embedding_type``
        left to BERT's default (DeBERTa's positions are its own fields).

        Args:
            d: the parsed ``config.json``.
        """
        out = dict(d)
        out.pop("position_embedding_type", None)
        terms = out.get("pos_att_type")
        if isinstance(terms, list):
            out["pos_att_type"] = tuple(terms)
        return out


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | Segments | None = None) -> Tensor:
    """``DebertaV2Embeddings``: word (+ position) (+ token type), ``embed_proj`` to H, LayerNorm, times the mask.

    Args:
        p: ``bert.embeddings.`` scope.
        input_ids: (B, S).
        token_type_ids: (B, S), read where the model has token types (``type_vocab_size`` > 0), else ignored.
        position_ids: (B, S), read where ``position_biased_input``; default 0 .. S-1.
        inputs_embeds: (B, S, E), instead of ``input_ids``.
        past_length: the cached positions before these (0: DeBERTa keeps no cache).
        generator: turns dropout on (training).
        trace: records (and edits) ``word``, ``position`` (absolute positions), ``token_type`` (token types),
            ``sum``, ``projected`` (E < H) and ``output``.
        attention_mask: (B, S) 0/1: padding's vectors are set to 0 after the LayerNorm (None: all kept); or
            :class:`~bertfn.model.layout.Segments`, texts laid end to end (1, T), every token real.

    Returns:
        (B, S, H).
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    cfg = p.config
    words = trace("word", word_vectors(p, input_ids, inputs_embeds))  # (B, S, E)
    B, S = words.shape[:2]
    x = words
    if cfg.position_biased_input:
        if position_ids is None:
            position_ids = default_position_ids(B, S, past_length, words.device)
        check_ids("position_ids", position_ids, cfg.max_position_embeddings,
                  f"this model has {cfg.max_position_embeddings} positions; shorten the input", (B, S))
        x = x + trace("position", p["position_embeddings.weight"][position_ids])  # (B, S, E)
    if cfg.type_vocab_size > 0:
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, S, dtype=torch.long, device=words.device)
        check_ids("token_type_ids", token_type_ids, cfg.type_vocab_size,
                  f"this model has {cfg.type_vocab_size} segment types", (B, S))
        x = x + trace("token_type", p["token_type_embeddings.weight"][token_type_ids])  # (B, S, E)
    x = trace("sum", x)
    if "embed_proj.weight" in p:
        x = trace("projected", linear(x, p["embed_proj.weight"]))  # (B, S, H)
    x = layer_norm(x, p["LayerNorm.weight"], p["LayerNorm.bias"], cfg.layer_norm_eps)  # (B, S, H)
    if attention_mask is not None and not isinstance(attention_mask, Segments):
        real = attention_mask if attention_mask.dim() == 2 else (attention_mask.reshape(B, -1, S).sum(-2) > 0)
        x = x * real[..., None].to(x.dtype)  # padding's vectors set to 0
    x = dropout(x, cfg.hidden_dropout_prob, generator)
    return trace("output", x)


def context_pooler_head(params: Params, h: Tensor, mask: Tensor, *, generator: torch.Generator | None = None,
                        trace: Trace = NO_TRACE) -> Tensor:
    """``DebertaV2ForSequenceClassification``'s head: [CLS], dropout, ``pooler.dense``, ``pooler_hidden_act``
    (``ContextPooler``), dropout, ``classifier``. ``DebertaV2ForMultipleChoice``'s too (one output per row).

    Args:
        params: the root view (reads ``pooler.dense.*`` and ``classifier.*``).
        h: (B, S, H) last hidden states.
        mask: (B, S), unused (the head reads the first token).
        generator: turns dropout on (training; ``pooler_dropout``, then ``cls_dropout`` or ``hidden_dropout_prob``).
        trace: records ``classifier.input``, ``classifier.dense``, ``classifier.activation``, ``classifier.logits``.

    Returns:
        (B, num_labels), or (B, 1) for multiple choice.
    """
    cfg = params.config
    x = trace("classifier.input", h[:, 0])  # (B, H): [CLS]
    x = dropout(x, cfg.pooler_dropout, generator)
    x = trace("classifier.dense", linear(x, params["pooler.dense.weight"], params["pooler.dense.bias"]))
    x = trace("classifier.activation", ACTIVATIONS[cfg.pooler_hidden_act](x))
    x = dropout(x, cfg.cls_dropout if cfg.cls_dropout is not None else cfg.hidden_dropout_prob, generator)
    return trace("classifier.logits", linear(x, params["classifier.weight"], params["classifier.bias"]))


def context_pooler_shapes(config: BertConfig, outputs: int) -> dict[str, tuple[int, ...]]:
    """The keys of :func:`context_pooler_head`: ``pooler.dense`` (P, H), ``classifier`` (outputs, P).

    Args:
        config: the model's config.
        outputs: the classifier's outputs (num_labels; 1 for multiple choice).
    """
    P = config.pooler_hidden_size or config.hidden_size
    return {**linear_shapes("pooler.dense", P, config.hidden_size), **linear_shapes("classifier", outputs, P)}


HEADS = {
    "sequence-classification": TaskHead(context_pooler_head, lambda c: context_pooler_shapes(c, c.num_labels), True),
    "multiple-choice": TaskHead(context_pooler_head, lambda c: context_pooler_shapes(c, 1), True),
}
"""DeBERTa's own heads; its tagger and reader are BERT's."""

DEBERTA_V2 = register(Family(
    name="DeBERTa-v2", model_type="deberta-v2",
    embeddings=embeddings,
    layer=deberta_attention.layer,
    task_heads=HEADS,
))
