"""ModernBERT (Warner et al. 2024): BERT rebuilt with what decoders learned since 2018.

ModernBERT is BERT except:

* **pre-LN layers with rotary attention** (:func:`~bertfn.model.members.prenorm.pre_ln_layer`): ``attn_norm``
  before attention (none in layer 0, whose input is the normalized embeddings), ``mlp_norm`` before the
  feed-forward, ``final_norm`` after the last layer; no position embeddings (:mod:`bertfn.model.members.rotary`);
* **local attention in two layers of three** (:func:`is_local`, :func:`window_mask`): layer i attends to
  every token when ``i % global_attn_every_n_layers == 0`` (0, 3, 6, ...) and otherwise only to the tokens
  within ``local_attention / 2`` positions of the query (64 either side in ModernBERT-base). The local
  layers turn their queries and keys with base ``local_rope_theta`` (10000), the global ones with
  ``global_rope_theta`` (160000);
* **one product for the queries, keys and values** (``attn.Wqkv`` (3 nh hd, H): :func:`fused_projections`);
* **GeGLU feed-forward** (:func:`geglu`): ``Wo (act(a) * g)`` with ``[a, g] = Wi x`` (Shazeer 2020), Wi
  (2I, H): half of its outputs gate the other half;
* **no biases** (``attention_bias``, ``mlp_bias``, ``norm_bias`` and ``classifier_bias`` false in its configs),
  but the decoder's (``decoder_bias``);
* **embeddings**: the word vectors and a LayerNorm (``embeddings.tok_embeddings``, ``embeddings.norm``), no
  positions, no token types;
* **names**: ``model.layers.{i}.attn_norm|attn.Wqkv|attn.Wo|mlp_norm|mlp.Wi|mlp.Wo``, ``model.final_norm``,
  the MLM head ``head.dense``, ``head.norm``, ``decoder`` (:mod:`bertfn.checkpoint.names.modernbert`); its
  config.json's own field names (:class:`ModernBertConfig`).

The MLM head is BERT's (dense, activation, LayerNorm, the decoder tied to the word embeddings) with
``classifier_activation`` as its activation; the heads of fine-tuned checkpoints run the same dense, activation and
LayerNorm (``head.*``) before their classifier (:mod:`bertfn.model.members.modernbert_heads`). transformers unpads its batches where flash-attention is
installed; that is a speed choice: bertfn runs padded batches, whose numbers are those of transformers' eager and
SDPA paths, or the texts laid end to end without padding (:mod:`bertfn.model.layout`), each text's the same. Its attention output drops out at ``attention_dropout``, as
``ModernBertAttention``'s ``out_drop`` (:attr:`ModernBertConfig.attention_output_dropout`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ...errors import ConfigError
from ..config import BertConfig
from ..embeddings import word_vectors
from ..encoder import LayerOutput
from ..family import Family, register
from ..functional import ACTIVATIONS, dropout, linear
from ..layout import Mask, Segments
from ..params import Params, scoped
from .prenorm import final_norm, norm, pre_ln_layer, token_positions
from .modernbert_heads import HEADS
from ..recorder import NO_TRACE, Trace
from .rotary import rotary_tables

Tensor = torch.Tensor


@dataclass(frozen=True)
class ModernBertConfig(BertConfig):
    """``transformers.ModernBertConfig`` read into BertConfig's names (:meth:`renamed`), ModernBERT-base's sizes.

    Attributes:
        vocab_size: 50368.
        intermediate_size: 1152: I, the width of the GeGLU's gated half (Wi is (2I, H)).
        num_hidden_layers: 22.
        hidden_act: "gelu" (``hidden_activation``): the GeGLU's activation.
        max_position_embeddings: 8192.
        type_vocab_size: 1: no token-type table; the field only keeps BertConfig's checks whole.
        layer_norm_eps: 1e-5 (``norm_eps``).
        hidden_dropout_prob: 0.0 (``mlp_dropout``).
        attention_probs_dropout_prob: 0.0 (``attention_dropout``).
        pad_token_id: 50283.
        global_rope_theta: the rotary base of the global layers.
        local_rope_theta: the rotary base of the local layers (None: the global one).
        global_attn_every_n_layers: layer i is global where ``i % n == 0``.
        local_attention: the window of a local layer: ``local_attention // 2`` tokens either side.
        norm_bias: the LayerNorms have biases.
        attention_bias: Wqkv and Wo have biases.
        mlp_bias: Wi and Wo have biases.
        decoder_bias: the decoder has a bias.
        classifier_bias: the head's dense has a bias.
        classifier_activation: the MLM head's activation (and the classifiers' prediction head's).
        classifier_pooling: what the sequence classifier reads of a text: "cls" (its first token) or "mean".
        classifier_dropout: 0.0, the classifiers' dropout.
        embedding_dropout: the dropout after the embeddings' LayerNorm.
        rope_scaling: must be null (bertfn turns by the plain rotary angles).
        position_embedding_type: "rotary".
        model_type: "modernbert".

    Raises:
        ConfigError: a rope_scaling (bertfn turns by the plain angles), or a window or layer period that is
            not a positive integer.
    """

    vocab_size: int = 50368
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    hidden_act: str = "gelu"
    max_position_embeddings: int = 8192
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    pad_token_id: int | None = 50283
    global_rope_theta: float = 160000.0
    local_rope_theta: float | None = 10000.0
    global_attn_every_n_layers: int = 3
    local_attention: int = 128
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    decoder_bias: bool = True
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    classifier_pooling: str = "cls"
    classifier_dropout: float | None = 0.0
    embedding_dropout: float = 0.0
    rope_scaling: dict | None = None
    position_embedding_type: str = "rotary"
    model_type: str = "modernbert"

    POSITIONS = ("rotary",)
    NAMES = {"hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps", "mlp_dropout": "hidden_dropout_prob",
             "attention_dropout": "attention_probs_dropout_prob"}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("global_attn_every_n_layers", "local_attention"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"config {name} must be a positive integer, got {value!r}; fix config.json")
        if self.rope_scaling is not None:
            raise ConfigError(f"config rope_scaling is {self.rope_scaling!r}; bertfn turns queries and keys by the "
                              "plain rotary angles (rope_scaling null), as every released ModernBERT does")
        if self.classifier_pooling not in ("cls", "mean"):
            raise ConfigError(f"config classifier_pooling must be 'cls' or 'mean', got {self.classifier_pooling!r}")
        if self.classifier_activation not in ACTIVATIONS:
            raise ConfigError(f"config classifier_activation {self.classifier_activation!r} is not an activation "
                              f"bertfn knows; expected one of {sorted(ACTIVATIONS)}")

    @property
    def attention_output_dropout(self) -> float:
        """``ModernBertAttention``'s ``out_drop``: ``attention_dropout`` (``attention_probs_dropout_prob``), as on its
        probabilities, where BERT's is ``hidden_dropout_prob`` (ModernBERT's ``mlp_dropout``)."""
        return self.attention_probs_dropout_prob

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """ModernBERT's config.json fields under BertConfig's names (:attr:`NAMES`).

        Args:
            d: the parsed ``config.json``.
        """
        return {cls.NAMES.get(k, k): v for k, v in d.items() if k not in cls.NAMES.values()}


def embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
               position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None, past_length: int = 0,
               generator: torch.Generator | None = None, trace: Trace = NO_TRACE, *,
               attention_mask: Tensor | None = None) -> Tensor:
    """The word vectors, LayerNorm and dropout (``ModernBertEmbeddings``): no positions, no token types.

    Args:
        p: ``bert.embeddings.`` scope (``model.embeddings.``).
        input_ids: (B, S).
        token_type_ids: accepted and ignored.
        position_ids: accepted and ignored here (the layers turn by them).
        inputs_embeds: (B, S, H), instead of ``input_ids``.
        past_length: accepted and ignored.
        generator: turns dropout on (training; ``embedding_dropout``).
        trace: records (and edits) ``word`` and ``output``.
        attention_mask: accepted and ignored.

    Returns:
        (B, S, H).
    """
    p = scoped(p, "embeddings()", "model.params.scope('bert.embeddings')")
    x = trace("word", word_vectors(p, input_ids, inputs_embeds))  # (B, S, H)
    x = dropout(norm(p, "LayerNorm", x), p.config.embedding_dropout, generator)
    return trace("output", x)


def is_local(layer: int, config: BertConfig) -> bool:
    """Whether ``layer`` attends within a window (``layer_id % global_attn_every_n_layers != 0``).

    Args:
        layer: the layer's index.
        config: the model's config.
    """
    return layer % config.global_attn_every_n_layers != 0


def rotary_base(config: BertConfig, layer: int) -> float:
    """The rotary base of ``layer``: ``local_rope_theta`` in a local layer (the global one where it is None),
    ``global_rope_theta`` in a global one (``ModernBertAttention``).

    Args:
        config: the model's config.
        layer: the layer's index.
    """
    if is_local(layer, config) and config.local_rope_theta is not None:
        return config.local_rope_theta
    return config.global_rope_theta


def window_mask(mask: Tensor | None, seq: int, window: int, dtype: torch.dtype, device: torch.device) -> Tensor:
    """A local layer's additive mask: the padding mask where ``|i - j| <= window // 2``, ``finfo.min`` elsewhere.

    Mirrors ``ModernBertModel._update_attention_mask``'s ``sliding_window_mask``.

    Args:
        mask: the additive padding mask (B, 1, 1 or S, S), or None (nothing hidden).
        seq: S.
        window: ``config.local_attention``.
        dtype: the scores' dtype.
        device: their device.

    Returns:
        (B or 1, 1, S, S).
    """
    pos = torch.arange(seq, device=device)
    near = (pos[:, None] - pos[None, :]).abs() <= window // 2  # (S, S): query i may see key j
    keep = mask if mask is not None else torch.zeros(1, 1, 1, seq, dtype=dtype, device=device)
    return torch.where(near, keep, torch.finfo(dtype).min)  # (B or 1, 1, S, S)


def fused_projections(p: Params, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Queries, keys and values by one product, ``Wqkv`` (3 nh hd, H), cut in three (``ModernBertAttention``).

    transformers views the product as (B, S, 3, nh, hd): its first nh*hd outputs are the queries, the next the
    keys, the last the values.

    Args:
        p: one attention block's scope (reads ``self.qkv.weight`` and, where it has one, its bias).
        x: (B, S, H).

    Returns:
        query, key, value: each (B, S, nh*hd).
    """
    qkv = linear(x, p["self.qkv.weight"], p.get("self.qkv.bias"))  # (B, S, 3 nh*hd)
    return qkv.chunk(3, dim=-1)


def geglu(p: Params, x: Tensor, generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> Tensor:
    """The gated feed-forward ``Wo (act(a) * g)``, ``[a, g] = Wi x`` (``ModernBertMLP``; Shazeer 2020's GeGLU).

    Args:
        p: one layer's scope (reads ``intermediate.dense.weight`` (2I, H) and ``output.dense.weight`` (H, I),
            with their biases where it has them).
        x: (B, S, H), the normalized input.
        generator: turns dropout on (training).
        trace: records (and edits) ``gate`` (B, S, I), ``intermediate`` (B, S, I): act(a) * g, the neurons, and
            ``dense`` (B, S, H).

    Returns:
        (B, S, H).
    """
    cfg = p.config
    a, g = linear(x, p["intermediate.dense.weight"], p.get("intermediate.dense.bias")).chunk(2, dim=-1)  # (B, S, I) each
    g = trace("gate", g)
    h = trace("intermediate", ACTIVATIONS[cfg.hidden_act](a) * g)  # (B, S, I)
    h = dropout(h, cfg.hidden_dropout_prob, generator)
    return trace("dense", linear(h, p["output.dense.weight"], p.get("output.dense.bias")))  # (B, S, H)


def layer(p: Params, x: Tensor, mask: Mask, *, index: int, position_ids: Tensor | None = None,
          head_mask: Tensor | None = None, impl: str = "eager", need_probs: bool = False,
          generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> LayerOutput:
    """One ModernBERT layer (``ModernBertEncoderLayer``): pre-LN, rotary attention (local or global), GeGLU.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: additive padding mask, or None; or :class:`~bertfn.model.layout.Segments` (each text attends to itself,
            a local layer within the window inside the text).
        index: the layer's index: local or global (:func:`is_local`).
        position_ids: (B, S) or (S,), default 0 .. S-1; on segments (1, T), each text's from 0
            (:func:`~bertfn.model.members.prenorm.token_positions`).
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the layer's points (:func:`~bertfn.model.members.prenorm.pre_ln_layer`).

    Returns:
        :class:`~bertfn.model.encoder.LayerOutput`.
    """
    cfg = p.config
    cos, sin = rotary_tables(token_positions(x, mask, position_ids), cfg.head_dim, rotary_base(cfg, index), x.dtype)
    text_mask = None
    if is_local(index, cfg) and isinstance(mask, Segments):  # the longest text's window, each text's its top-left
        text_mask = window_mask(None, max(mask.lengths), cfg.local_attention, x.dtype, x.device)  # (1, 1, n, n)
    elif is_local(index, cfg):  # the window within the padding mask
        mask = window_mask(mask, x.shape[1], cfg.local_attention, x.dtype, x.device)  # (B or 1, 1, S, S)
    return pre_ln_layer(p, x, mask, cos, sin, project=fused_projections, feed_forward=geglu, text_mask=text_mask,
                        head_mask=head_mask, impl=impl, need_probs=need_probs, generator=generator, trace=trace)


MODERNBERT = register(Family(
    name="ModernBERT", model_type="modernbert",
    embeddings=embeddings,
    head_act=lambda config: config.classifier_activation,
    layer=layer,
    final_norm=final_norm, window=lambda config, i: config.local_attention if is_local(i, config) else None,
    task_heads=HEADS,
))
