"""MPNet's checkpoint names: ``mpnet.*``; the attention block ``attention.attn.q|k|v|o`` and ``attention.LayerNorm``;
one relative position bias table ``mpnet.encoder.relative_attention_bias`` that every layer reads; the MLM head
RoBERTa's ``lm_head.*``; no token-type table.
"""

from __future__ import annotations

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names, normalizer

LAYER = r"bert\.encoder\.layer\.(\d+)\."
KEYS = (
    (LAYER + r"attention\.relative_attention_bias\.", "mpnet.encoder.relative_attention_bias."),
    (LAYER + r"attention\.self\.query\.", r"mpnet.encoder.layer.\1.attention.attn.q."),
    (LAYER + r"attention\.self\.key\.", r"mpnet.encoder.layer.\1.attention.attn.k."),
    (LAYER + r"attention\.self\.value\.", r"mpnet.encoder.layer.\1.attention.attn.v."),
    (LAYER + r"attention\.output\.dense\.", r"mpnet.encoder.layer.\1.attention.attn.o."),
    (LAYER + r"attention\.output\.LayerNorm\.", r"mpnet.encoder.layer.\1.attention.LayerNorm."),
    (r"bert\.", "mpnet."),
    (r"cls\.predictions\.transform\.dense\.", "lm_head.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "lm_head.layer_norm."),
    (r"cls\.predictions\.decoder\.", "lm_head.decoder."),
    (r"cls\.predictions\.bias", "lm_head.bias"),
)
"""BERT's names -> MPNet's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`): every layer's
``attention.relative_attention_bias`` is the one shared table."""


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """BERT's table without the token-type embeddings, with the shared bias table (buckets, nh)
    (``MPNetEncoder.relative_attention_bias``).

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand (unused).
    """
    out = {k: s for k, s in table.items() if k != "bert.embeddings.token_type_embeddings.weight"}
    out["bert.encoder.relative_attention_bias.weight"] = (config.relative_attention_num_buckets,
                                                          config.num_attention_heads)
    return out


MPNET = register(Names(
    prefix="mpnet.", table=KEYS, shapes=shapes,
    normalize=normalizer("mpnet.", ("embeddings.", "encoder.", "pooler."),
                         (("lm_head.decoder.weight", "mpnet.embeddings.word_embeddings.weight"),
                          ("lm_head.decoder.bias", "lm_head.bias"))),
), "mpnet")
"""MPNet's names."""
