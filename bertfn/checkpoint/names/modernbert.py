"""ModernBERT's checkpoint names: ``model.embeddings.tok_embeddings|norm``,
``model.layers.{i}.attn_norm|attn.Wqkv|attn.Wo|mlp_norm|mlp.Wi|mlp.Wo``, ``model.final_norm``, the MLM head
``head.dense``, ``head.norm``, ``decoder``; biases only where its config turns them on. Its own table of shapes
(:func:`shapes`): its layers share few of BERT's weights.
"""

from __future__ import annotations

import torch

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names

Tensor = torch.Tensor

LAYER = r"bert\.encoder\.layer\.(\d+)\."
KEYS = (
    (r"bert\.embeddings\.word_embeddings\.", "model.embeddings.tok_embeddings."),
    (r"bert\.embeddings\.LayerNorm\.", "model.embeddings.norm."),
    (LAYER + r"attention_norm\.", r"model.layers.\1.attn_norm."),
    (LAYER + r"attention\.self\.qkv\.", r"model.layers.\1.attn.Wqkv."),
    (LAYER + r"attention\.output\.dense\.", r"model.layers.\1.attn.Wo."),
    (LAYER + r"ffn_norm\.", r"model.layers.\1.mlp_norm."),
    (LAYER + r"intermediate\.dense\.", r"model.layers.\1.mlp.Wi."),
    (LAYER + r"output\.dense\.", r"model.layers.\1.mlp.Wo."),
    (r"bert\.encoder\.final_norm\.", "model.final_norm."),
    (r"bert\.", "model."),
    (r"cls\.predictions\.transform\.dense\.", "head.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "head.norm."),
    (r"cls\.predictions\.decoder\.weight", "decoder.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "decoder.bias"),
)
"""BERT's names (and the pre-LN layer's, :mod:`bertfn.model.members.prenorm`) -> ModernBERT's, first match wins."""


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """ModernBERT's keys and shapes by BERT's names (``ModernBertForMaskedLM``; its own table: its layers share few
    of BERT's weights).

    Args:
        config: the model's config.
        table: BERT's table (unused but for the word embeddings).
        present (Mapping[str, Tensor]): the weights at hand (the MLM head counts where they hold it).
    """
    H, I, V = config.hidden_size, config.intermediate_size, config.vocab_size
    out: dict[str, tuple[int, ...]] = {"bert.embeddings.word_embeddings.weight": (V, H)}

    def dense(name: str, shape: tuple[int, int], bias: bool) -> None:
        out[f"{name}.weight"] = shape
        if bias:
            out[f"{name}.bias"] = shape[:1]

    def ln(name: str) -> None:
        dense(name, (H,), config.norm_bias)

    ln("bert.embeddings.LayerNorm")
    for i in range(config.num_hidden_layers):
        layer_ = f"bert.encoder.layer.{i}"
        if i > 0:
            ln(f"{layer_}.attention_norm")
        dense(f"{layer_}.attention.self.qkv", (3 * H, H), config.attention_bias)
        dense(f"{layer_}.attention.output.dense", (H, H), config.attention_bias)
        ln(f"{layer_}.ffn_norm")
        dense(f"{layer_}.intermediate.dense", (2 * I, H), config.mlp_bias)
        dense(f"{layer_}.output.dense", (H, I), config.mlp_bias)
    ln("bert.encoder.final_norm")
    if "cls.predictions.decoder.weight" in present:  # a masked LM (a classifier holds head.* too, but no decoder)
        dense("cls.predictions.transform.dense", (H, H), config.classifier_bias)
        ln("cls.predictions.transform.LayerNorm")
        out["cls.predictions.decoder.weight"] = (V, H)
        if config.decoder_bias:
            out["cls.predictions.bias"] = (V,)
    return out


def normalize(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """What loading does to a ModernBERT state: a bare ``ModernBertModel``'s keys get ``model.``, and a masked LM's
    decoder stored once as the word embeddings (tied) gets its own name, as transformers' state_dict shows it (a
    classifier holds ``head.*`` too, and its ``classifier``, but no decoder).

    Args:
        state: a flat state_dict as read from a file.
        config: the model's config.
    """
    out = {("model." + k if k.startswith(("embeddings.", "layers.", "final_norm.")) else k): t for k, t in state.items()}
    if "head.dense.weight" in out and "classifier.weight" not in out and "decoder.weight" not in out \
            and "model.embeddings.tok_embeddings.weight" in out:
        out["decoder.weight"] = out["model.embeddings.tok_embeddings.weight"]
    return out


MODERNBERT = register(Names(prefix="model.", table=KEYS, shapes=shapes, normalize=normalize), "modernbert")
"""ModernBERT's names."""
