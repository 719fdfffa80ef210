"""ESM-2's and ESM-1b's checkpoint names: ``esm.encoder.layer.{i}.attention.self.query|key|value``,
``attention.output.dense``, ``attention.LayerNorm`` (the pre-LN layer's LN_1), ``LayerNorm`` (LN_2),
``intermediate.dense``, ``output.dense``; ``esm.encoder.emb_layer_norm_after``; ESM-1b's
``esm.embeddings.position_embeddings`` and ``esm.embeddings.layer_norm``; the MLM head ``lm_head.dense|layer_norm|decoder``,
``lm_head.bias``; the contact head ``esm.contact_head.regression``. The rotary ``inv_freq`` buffers the file stores
are dropped (bertfn computes them). transformers has a sequence classifier and a tagger for it, no other head.
"""

from __future__ import annotations

import torch

from ...model.config import BertConfig
from ...model.members.esm_embeddings import learned
from ...model.naming import register
from .record import Names, normalizer

Tensor = torch.Tensor

LAYER = r"bert\.encoder\.layer\.(\d+)\."
KEYS = (
    (LAYER + r"attention_norm\.", r"esm.encoder.layer.\1.attention.LayerNorm."),
    (LAYER + r"ffn_norm\.", r"esm.encoder.layer.\1.LayerNorm."),
    (r"bert\.encoder\.final_norm\.", "esm.encoder.emb_layer_norm_after."),
    (r"bert\.embeddings\.LayerNorm\.", "esm.embeddings.layer_norm."),
    (r"bert\.", "esm."),
    (r"cls\.predictions\.transform\.dense\.", "lm_head.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_head.layer_norm."),
    (r"cls\.predictions\.decoder\.weight", "lm_head.decoder.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "lm_head.bias"),
)
"""BERT's names (and the pre-LN layer's, :mod:`bertfn.model.members.prenorm`) -> ESM's, first match wins."""


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """ESM's keys and shapes by BERT's names (``EsmForMaskedLM``): BERT's table without token types and post-LNs
    (and without positions where they are rotary), with the pre-LNs, the final norm and, where the file has it, the
    contact head.

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand (their optional parts count).
    """
    H, L, nh = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
    dropped = ("token_type_embeddings.", "embeddings.LayerNorm.", "output.LayerNorm.") + \
        (() if learned(config) else ("position_embeddings.",))
    out = {k: s for k, s in table.items() if not any(d in k for d in dropped) and k != "cls.predictions.decoder.bias"}
    if config.emb_layer_norm_before:
        out.update({"bert.embeddings.LayerNorm.weight": (H,), "bert.embeddings.LayerNorm.bias": (H,)})
    for i in range(L):
        for n in ("attention_norm", "ffn_norm"):
            out[f"bert.encoder.layer.{i}.{n}.weight"] = out[f"bert.encoder.layer.{i}.{n}.bias"] = (H,)
    out["bert.encoder.final_norm.weight"] = out["bert.encoder.final_norm.bias"] = (H,)
    if "bert.contact_head.regression.weight" in present:
        out.update({"bert.contact_head.regression.weight": (1, L * nh), "bert.contact_head.regression.bias": (1,)})
    return out


_tie = normalizer("esm.", ("embeddings.", "encoder.", "pooler.", "contact_head."),
                  (("lm_head.decoder.weight", "esm.embeddings.word_embeddings.weight"),))


def normalize(state: dict[str, Tensor], config: BertConfig) -> dict[str, Tensor]:
    """What loading does to an ESM state: the rotary ``inv_freq`` buffers dropped, a bare ``EsmModel``'s keys
    prefixed with ``esm.``, the tied decoder named (:func:`~bertfn.checkpoint.names.record.normalizer`).

    Args:
        state: a flat state_dict as read from a file.
        config: the model's config.
    """
    return _tie({k: t for k, t in state.items() if not k.endswith("rotary_embeddings.inv_freq")}, config)


ESM = register(Names(
    prefix="esm.", table=KEYS, shapes=shapes, normalize=normalize,
    tasks=("sequence-classification", "token-classification"),
), "esm")
"""ESM's names, ESM-1b's with them."""
