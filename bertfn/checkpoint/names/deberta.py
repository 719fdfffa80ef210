"""DeBERTa-v2's and v3's checkpoint names: ``deberta.*``, ``attention.self.query_proj|key_proj|value_proj``, the
encoder's ``rel_embeddings`` and ``LayerNorm``; the MLM head BERT's ``cls.predictions.*`` where the config is
``legacy`` (transformers' default), else ``lm_predictions.lm_head.dense|LayerNorm|bias`` (:func:`table`: one table per
config). A legacy config over a file that holds the other head reads it under the legacy names (:data:`LEGACY_NAMES`).
"""

from __future__ import annotations

import torch

from ...model.config import BertConfig
from ...model.members.deberta_attention import norm_rel_ebd, span
from ...model.naming import register
from .record import Names, Table

Tensor = torch.Tensor

LAYER = r"bert\.encoder\.layer\.(\d+)\."
KEYS = (
    (LAYER + r"attention\.self\.(query|key|value)\.", r"deberta.encoder.layer.\1.attention.self.\2_proj."),
    (r"bert\.", "deberta."),
)
"""BERT's names -> DeBERTa's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`)."""

MODERN_HEAD = (
    (r"cls\.predictions\.transform\.dense\.", "lm_predictions.lm_head.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_predictions.lm_head.LayerNorm."),
    (r"cls\.predictions\.decoder\.weight", "deberta.embeddings.word_embeddings.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "lm_predictions.lm_head.bias"),
)
"""The MLM head's names where ``legacy`` is false (``DebertaV2OnlyMLMHead``)."""


def table(config: BertConfig) -> Table:
    """DeBERTa's key table for a model of ``config``: :data:`KEYS`, after :data:`MODERN_HEAD` without ``legacy``.

    Args:
        config: the model's config (its ``legacy``).
    """
    return KEYS if config.legacy else MODERN_HEAD + KEYS


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """BERT's table with DeBERTa's embeddings, attention projections and encoder tables (``DebertaV2ForMaskedLM``).

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand, by BERT's names (the MLM head, the convolution).
    """
    H, E, V, A = config.hidden_size, config.width, config.vocab_size, config.num_attention_heads * config.head_dim
    out = {k: s for k, s in table.items() if not k.startswith(("bert.embeddings.", "cls.predictions."))}
    out["bert.embeddings.word_embeddings.weight"] = (V, E)
    if config.position_biased_input:
        out["bert.embeddings.position_embeddings.weight"] = (config.max_position_embeddings, E)
    if config.type_vocab_size > 0:
        out["bert.embeddings.token_type_embeddings.weight"] = (config.type_vocab_size, E)
    if E != H:
        out["bert.embeddings.embed_proj.weight"] = (H, E)
    out["bert.embeddings.LayerNorm.weight"] = out["bert.embeddings.LayerNorm.bias"] = (H,)
    if "layer_norm" in norm_rel_ebd(config):  # there even without relative attention
        out["bert.encoder.LayerNorm.weight"] = out["bert.encoder.LayerNorm.bias"] = (H,)
    if config.relative_attention:
        out["bert.encoder.rel_embeddings.weight"] = (2 * span(config), H)
        for i in range(config.num_hidden_layers):
            for term, proj in (("c2p", "pos_key_proj"), ("p2c", "pos_query_proj")):
                if term in config.pos_att_type and not config.share_att_key:
                    out[f"bert.encoder.layer.{i}.attention.self.{proj}.weight"] = (A, H)
                    out[f"bert.encoder.layer.{i}.attention.self.{proj}.bias"] = (A,)
    if config.conv_kernel_size > 0:
        out["bert.encoder.conv.conv.weight"] = (H, H // config.conv_groups, config.conv_kernel_size)
        out["bert.encoder.conv.conv.bias"] = (H,)
        out["bert.encoder.conv.LayerNorm.weight"] = out["bert.encoder.conv.LayerNorm.bias"] = (H,)
    if "cls.predictions.transform.dense.weight" in present:
        head = (E, H) if config.legacy else (H, H)
        out.update({"cls.predictions.transform.dense.weight": head, "cls.predictions.transform.dense.bias": head[:1],
                    "cls.predictions.transform.LayerNorm.weight": head[:1],
                    "cls.predictions.transform.LayerNorm.bias": head[:1],
                    "cls.predictions.decoder.weight": (V, E), "cls.predictions.bias": (V,)})
        if config.legacy:
            out["cls.predictions.decoder.bias"] = (V,)
    return out


LEGACY_NAMES = {"lm_predictions.lm_head.dense.weight": "cls.predictions.transform.dense.weight",
                "lm_predictions.lm_head.dense.bias": "cls.predictions.transform.dense.bias",
                "lm_predictions.lm_head.LayerNorm.weight": "cls.predictions.transform.LayerNorm.weight",
                "lm_predictions.lm_head.LayerNorm.bias": "cls.predictions.transform.LayerNorm.bias",
                "lm_predictions.lm_head.bias": "cls.predictions.bias"}
"""The non-legacy head's keys -> the legacy head's: the same function where E = H."""


def normalize(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """What loading does to a DeBERTa state: a bare base model's keys get ``deberta.``; buffers and ``mask_predictions``
    (the v3 replaced-token detector, which transformers ignores) are dropped; the tied decoder gets its second name.

    A ``legacy`` config (transformers' default) over a file that holds ``lm_predictions.lm_head.*`` (the hub's
    DeBERTa-v3 checkpoints) reads that head under the legacy names: the same function where E = H (transformers would
    draw a new head at random).

    Args:
        state: the state as read from the file.
        config: the model's config.
    """
    out = {}
    for k, t in state.items():
        k = "deberta." + k if k.startswith(("embeddings.", "encoder.")) else k
        if k.endswith((".position_ids", ".token_type_ids")) or k.startswith("mask_predictions."):
            continue
        if config.legacy and k in LEGACY_NAMES and "cls.predictions.transform.dense.weight" not in state:
            k = LEGACY_NAMES[k]
        out[k] = t
    if "cls.predictions.transform.dense.weight" in out:
        out.setdefault("cls.predictions.decoder.weight", out.get("deberta.embeddings.word_embeddings.weight"))
        if "cls.predictions.bias" in out:
            out.setdefault("cls.predictions.decoder.bias", out["cls.predictions.bias"])
        if out["cls.predictions.decoder.weight"] is None:
            del out["cls.predictions.decoder.weight"]
    return out


DEBERTA = register(Names(prefix="deberta.", table=table, shapes=shapes, normalize=normalize), "deberta-v2")
"""DeBERTa-v2's names (v3's too)."""
