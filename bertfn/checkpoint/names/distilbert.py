"""DistilBERT's checkpoint names: ``distilbert.transformer.layer.{i}.attention.q_lin|k_lin|v_lin|out_lin``,
``sa_layer_norm``, ``ffn.lin1|lin2``, ``output_layer_norm``, and the MLM head ``vocab_transform``,
``vocab_layer_norm``, ``vocab_projector``; no token-type table.
"""

from __future__ import annotations

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names, normalizer

LAYER = r"bert\.encoder\.layer\.(\d+)\."
KEYS = (
    (LAYER + r"attention\.self\.query\.", r"distilbert.transformer.layer.\1.attention.q_lin."),
    (LAYER + r"attention\.self\.key\.", r"distilbert.transformer.layer.\1.attention.k_lin."),
    (LAYER + r"attention\.self\.value\.", r"distilbert.transformer.layer.\1.attention.v_lin."),
    (LAYER + r"attention\.output\.dense\.", r"distilbert.transformer.layer.\1.attention.out_lin."),
    (LAYER + r"attention\.output\.LayerNorm\.", r"distilbert.transformer.layer.\1.sa_layer_norm."),
    (LAYER + r"intermediate\.dense\.", r"distilbert.transformer.layer.\1.ffn.lin1."),
    (LAYER + r"output\.dense\.", r"distilbert.transformer.layer.\1.ffn.lin2."),
    (LAYER + r"output\.LayerNorm\.", r"distilbert.transformer.layer.\1.output_layer_norm."),
    (r"bert\.", "distilbert."),
    (r"cls\.predictions\.transform\.dense\.", "vocab_transform."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "vocab_layer_norm."),
    (r"cls\.predictions\.decoder\.weight", "vocab_projector.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "vocab_projector.bias"),
)
"""BERT's names -> DistilBERT's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`)."""


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """BERT's table without the token-type embeddings (``transformers.models.distilbert.Embeddings`` has none).

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand (unused).
    """
    return {k: s for k, s in table.items() if k != "bert.embeddings.token_type_embeddings.weight"}


DISTILBERT = register(Names(
    prefix="distilbert.", table=KEYS, shapes=shapes,
    normalize=normalizer("distilbert.", ("embeddings.", "transformer."),
                         (("vocab_projector.weight", "distilbert.embeddings.word_embeddings.weight"),)),
), "distilbert")
"""DistilBERT's names."""
