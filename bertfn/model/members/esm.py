"""ESM-2 (Lin et al. 2023) and ESM-1b (Rives et al. 2021): BERT trained on protein sequences, one residue per token.

ESM-2 is BERT except:

* **pre-LN layers with rotary attention** (:func:`~bertfn.model.members.prenorm.pre_ln_layer`): each block's input
  is normalized (``attention.LayerNorm`` before attention, the layer's ``LayerNorm`` before the
  feed-forward), the residual stream is not, and ``emb_layer_norm_after`` normalizes the last layer's output;
  queries and keys are turned by their positions (:mod:`bertfn.model.members.rotary`, base 10000) instead of
  position embeddings being added;
* **embeddings** are the word vectors alone (no positions, no token types, no LayerNorm), with *token
  dropout*: every ``<mask>``'s vector is zeroed and the rest scaled by ``(1 - 0.12) / (1 - m)``, m the share of
  ``<mask>`` among the text's real tokens (:mod:`bertfn.model.members.esm_embeddings`);
* **the feed-forward's activation** is the exact-erf GELU whatever ``hidden_act`` says (``EsmIntermediate``; a
  config that says otherwise is read as GELU, with an :class:`~bertfn.errors.IgnoredConfigWarning`);
* **names**: ``esm.encoder.layer.{i}.attention.self.query|key|value``, ``attention.output.dense``,
  ``attention.LayerNorm`` (LN_1), ``LayerNorm`` (LN_2), ``intermediate.dense``, ``output.dense``;
  ``esm.encoder.emb_layer_norm_after``; ESM-1b's ``esm.embeddings.position_embeddings`` and
  ``esm.embeddings.layer_norm``; the MLM head ``lm_head.dense|layer_norm|decoder``, ``lm_head.bias``;
  the contact head ``esm.contact_head.regression``; the rotary ``inv_freq`` buffers the file stores are dropped
  (bertfn computes them): the checkpoint side has them (:mod:`bertfn.checkpoint.names.esm`);
* **its config** (:class:`EsmConfig`): ``token_dropout``, ``mask_token_id``, ``emb_layer_norm_before``;
  positions "rotary" or "absolute".

ESM-1b (and the nucleotide transformers v1, which transformers reads as ``model_type`` "esm") is ESM-2 except its
positions: ``position_embedding_type`` "absolute", a learned table ``esm.embeddings.position_embeddings`` added to the
word vectors at RoBERTa's positions (``padding_idx + 1`` onward) and no rotary turn in attention; and its
``emb_layer_norm_before`` (true in ESM-1b: ``esm.embeddings.layer_norm`` normalizes the embeddings before the first
layer). Its layers, final norm, heads and vocabulary are ESM-2's.

Its MLM head is BERT's (dense, exact GELU, LayerNorm, the tied decoder and a bias). Beside it, and unlike any
other member, a **contact head** (:func:`contact_head`) reads which residues touch from the attention maps of every
layer and head (Rao et al. 2021): the maps of the residues (``<cls>`` and ``<eos>`` left out) made symmetric, the
average product correction (APC) taken off, and a logistic regression over the L * nh maps at each pair. Its
sequence classifier is RoBERTa's (``<s>`` through dense, tanh and ``out_proj``), its tagger BERT's; transformers
has no other head for it.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from ...errors import ConfigError, IgnoredConfigWarning
from ..attention import separate_projections
from ..config import BertConfig
from ..encoder import EncoderOutput, LayerOutput
from ..family import Family, register
from ..functional import linear
from ..layout import Mask
from ..params import Params
from .esm_embeddings import TRAINING_MASK_RATIO, embeddings, learned, longest_input  # noqa: F401
from .prenorm import final_norm, mlp, pre_ln_layer, token_positions
from ..recorder import NO_TRACE, Trace
from .roberta import CLASSIFIER
from .rotary import rotary_tables

Tensor = torch.Tensor

ROTARY_BASE = 10000.0
"""The base of ESM-2's rotary angles, in every layer (RoFormer's)."""

EOS_ID = 2
"""``<eos>``, whose row and column the contact head leaves out: id 2 in every ESM vocabulary (hard-coded in
transformers' ``EsmContactPredictionHead`` as in fair-esm)."""

FEED_FORWARD_ACT = "gelu"
"""The activation of ESM's feed-forward, whatever ``hidden_act`` says: ``EsmIntermediate`` calls ESM's own ``gelu``
(the exact erf form) and never reads the config's."""


@dataclass(frozen=True)
class EsmConfig(BertConfig):
    """``transformers.EsmConfig``: BertConfig with token dropout and rotary positions (ESM-2's sizes by default).

    Attributes:
        vocab_size: 33 (the residues, the specials, ``<mask>``).
        hidden_size: 320 (esm2_t6_8M_UR50D).
        num_hidden_layers: 6.
        num_attention_heads: 20.
        intermediate_size: 1280.
        max_position_embeddings: 1026.
        type_vocab_size: 1: no token-type table; the field only keeps BertConfig's checks whole.
        layer_norm_eps: 1e-5.
        pad_token_id: 1 (``<pad>``).
        mask_token_id: 32 (``<mask>``), which token dropout zeroes.
        token_dropout: rescale the embeddings by the share of masks (ESM-2: true).
        emb_layer_norm_before: a LayerNorm on the embeddings (``esm.embeddings.layer_norm``; false in ESM-2, true
            in ESM-1b).
        is_folding_model: ESMFold's config (refused: bertfn reads the masked language model).
        position_embedding_type: "rotary" (ESM-2) or "absolute" (ESM-1b's learned table).
        model_type: "esm".

    Raises:
        ConfigError: token dropout without a mask token, or an ESMFold config.

    Warns:
        IgnoredConfigWarning: ``hidden_act`` other than "gelu", which transformers' ESM does not read: the field is
            read as "gelu" (:data:`FEED_FORWARD_ACT`), so every path computes transformers' numbers.
    """

    vocab_size: int = 33
    hidden_size: int = 320
    num_hidden_layers: int = 6
    num_attention_heads: int = 20
    intermediate_size: int = 1280
    max_position_embeddings: int = 1026
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_token_id: int | None = 1
    mask_token_id: int | None = 32
    token_dropout: bool = True
    emb_layer_norm_before: bool | None = False
    is_folding_model: bool = False
    position_embedding_type: str = "rotary"
    model_type: str = "esm"

    POSITIONS = ("rotary", "absolute")  # ESM-2's rotary, ESM-1b's learned table

    @property
    def head_dropout(self) -> float:
        """``EsmClassificationHead``'s and ``EsmForTokenClassification``'s dropout: ``hidden_dropout_prob`` (they
        never read ``classifier_dropout``)."""
        return self.hidden_dropout_prob

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.token_dropout and self.mask_token_id is None:
            raise ConfigError("config token_dropout is true but mask_token_id is null: token dropout zeroes the "
                              "mask token's vectors; set mask_token_id (32 in ESM-2) in config.json")
        if self.is_folding_model:
            raise ConfigError("config is_folding_model is true: this is ESMFold, a structure model; bertfn reads "
                              "ESM-2's masked language model (EsmForMaskedLM)")
        if self.hidden_act != FEED_FORWARD_ACT:
            warnings.warn(f"config hidden_act is {self.hidden_act!r}, but transformers' ESM (EsmIntermediate) always "
                          f"applies the exact GELU and never reads it; bertfn reads it as {FEED_FORWARD_ACT!r} too",
                          IgnoredConfigWarning, stacklevel=3)
            object.__setattr__(self, "hidden_act", FEED_FORWARD_ACT)  # frozen: the one field read as transformers reads it


def layer(p: Params, x: Tensor, mask: Mask, *, index: int, position_ids: Tensor | None = None,
          head_mask: Tensor | None = None, impl: str = "eager", need_probs: bool = False,
          generator: torch.Generator | None = None, trace: Trace = NO_TRACE) -> LayerOutput:
    """One ESM layer (``EsmLayer``): pre-LN, rotary attention (base 10000; none with learned positions), GELU MLP.

    Args:
        p: ``bert.encoder.layer.{i}.`` scope.
        x: (B, S, H), or (1, T + pad, H) on the segments layout.
        mask: additive padding mask, or None; or :class:`~bertfn.model.layout.Segments` (each text attends to itself,
            turned by its own positions; with ``need_probs`` each text's probabilities, which ESM-2's contact head reads).
        index: the layer's index (unused: every ESM-2 layer is alike).
        position_ids: (B, S) or (S,), default 0 .. S-1 (transformers' ESM always turns by 0 .. S-1); on segments
            (1, T), each text's from 0 (:func:`~bertfn.model.members.prenorm.token_positions`); unused with learned
            positions (the embeddings added them).
        head_mask: (nh,), 1 keeps a head.
        impl: "eager" or "sdpa".
        need_probs: return the probabilities.
        generator: turns dropout on (training).
        trace: records (and edits) the layer's points (:func:`~bertfn.model.members.prenorm.pre_ln_layer`).

    Returns:
        :class:`~bertfn.model.encoder.LayerOutput`.
    """
    cos = sin = None  # learned positions (ESM-1b): nothing turns the queries and keys
    if not learned(p.config):
        cos, sin = rotary_tables(token_positions(x, mask, position_ids), p.config.head_dim, ROTARY_BASE, x.dtype)
    return pre_ln_layer(p, x, mask, cos, sin, project=separate_projections, feed_forward=mlp, head_mask=head_mask,
                        impl=impl, need_probs=need_probs, generator=generator, trace=trace)


def symmetrize(x: Tensor) -> Tensor:
    """``x + x^T`` over the last two axes: a contact of i and j is one of j and i (``symmetrize``).

    Args:
        x: (..., n, n).
    """
    return x + x.transpose(-1, -2)


def apc(x: Tensor) -> Tensor:
    """The average product correction: ``x_ij - (sum_k x_ik)(sum_k x_kj) / sum_kl x_kl`` for each map
    (``average_product_correct``; Dunn et al. 2008). It takes off what a map gives a pair for its residues' overall
    weights alone, leaving what is specific to the pair.

    Args:
        x: (..., n, n).
    """
    rows, cols, total = x.sum(-1, keepdim=True), x.sum(-2, keepdim=True), x.sum((-1, -2), keepdim=True)
    return x - rows * cols / total


def contact_head(params: Params, input_ids: Tensor, attentions: Tensor, attention_mask: Tensor,
                 trace: Trace = NO_TRACE) -> Tensor:
    """The probability that residues i and j touch, from every layer's attention maps (``EsmContactPredictionHead``,
    as ``EsmModel.predict_contacts`` feeds it).

    The maps of padding, ``<eos>`` and ``<cls>`` are left out, each of the L * nh maps is made symmetric
    (:func:`symmetrize`) and corrected (:func:`apc`), and ``contact_head.regression`` (1, L * nh) weighs them at each
    pair of residues, then a sigmoid.

    Args:
        params: the root view (reads ``esm.contact_head.regression.*``).
        input_ids: (B, S), ``<cls>`` first.
        attentions: (B, L, nh, S, S), every layer's probabilities.
        attention_mask: (B, S) 1 for real tokens.
        trace: records ``contacts.maps`` (B, L*nh, n, n) symmetric, ``contacts.apc`` after the correction and
            ``contacts.logits`` (B, n, n), n = S - 2.

    Returns:
        (B, n, n): for a text of r residues, its r x r block at the top left.
    """
    p = params.scope("bert.contact_head.regression")
    keep = attention_mask.to(attentions.dtype) * input_ids.ne(EOS_ID).to(attentions.dtype)  # (B, S): no padding, no <eos>
    maps = attentions * keep[:, None, None, :, None] * keep[:, None, None, None, :]  # (B, L, nh, S, S)
    maps = maps[..., 1:-1, 1:-1]  # (B, L, nh, n, n): <cls> and the last position (<eos> or padding) left out
    B, L, nh, n, _ = maps.shape
    maps = trace("contacts.maps", symmetrize(maps.reshape(B, L * nh, n, n)))  # (B, L*nh, n, n)
    maps = trace("contacts.apc", apc(maps))
    logits = linear(maps.permute(0, 2, 3, 1), p["weight"], p["bias"]).squeeze(-1)  # (B, n, n)
    return torch.sigmoid(trace("contacts.logits", logits))


def contacts_of(params: Params, input_ids: Tensor, out: EncoderOutput, attention_mask: Tensor,
                trace: Trace = NO_TRACE) -> Tensor | None:
    """:func:`contact_head` on an encoder's attention probabilities, where the checkpoint has the head and every head
    of every layer (ESM-2's ``Family.own_head``), else None.

    Args:
        params: the root view.
        input_ids: (B, S).
        out: the encoder's output; its ``attentions``: L of (B, nh, S, S).
        attention_mask: (B, S) 1 for real tokens.
        trace: records the head's points.

    Returns:
        (B, n, n) contact probabilities, n = S - 2, or None.
    """
    if "bert.contact_head.regression.weight" not in params or params.config.pruned_heads:  # it reads all L*nh maps
        return None
    return contact_head(params, input_ids, torch.stack(out.attentions, dim=1), attention_mask, trace)  # (B, L, nh, S, S) in


ESM = register(Family(
    name="ESM-2", model_type="esm",
    embeddings=embeddings, longest=longest_input,
    head_act="gelu",
    layer=layer,
    final_norm=final_norm,
    task_heads={"sequence-classification": CLASSIFIER},
    own_head=contacts_of,
    variant=lambda config: "ESM-1b" if learned(config) else "ESM-2",
))
