"""ALBERT's checkpoint names: one layer group's weights for every layer, and its own names inside a layer.

The checkpoint holds ``num_hidden_groups`` layers (1 in every released ALBERT) under
``albert.encoder.albert_layer_groups.{g}.albert_layers.0``, and layer i reads group ``i * groups // L``
(:func:`group`): its key table is built per config (:func:`table`), a row for each name inside a layer, whose
key is found from the layer's number. Inside a layer the names
are ``attention.query|key|value|dense|LayerNorm``, ``ffn``, ``ffn_output``, ``full_layer_layer_norm``; the
projection of the embeddings is ``albert.encoder.embedding_hidden_mapping_in``, the pooler ``albert.pooler``, the
MLM head ``predictions.*`` (E wide, as ELECTRA's: :func:`~bertfn.checkpoint.names.electra.factorized_shapes`), the
sentence-order head ``sop_classifier.classifier``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names, Table, normalizer
from .electra import factorized_shapes


def group(layer: int, config: BertConfig) -> int:
    """The layer group whose weights layer ``layer`` reads: ``int(i / (L / groups))`` (``AlbertTransformer``).

    Args:
        layer: i.
        config: the model's config.
    """
    return int(layer / (config.num_hidden_layers / config.num_hidden_groups))


IN_LAYER = (
    (r"attention\.self\.(query|key|value|distance_embedding)\.", r"attention.\2."),
    (r"attention\.output\.dense\.", "attention.dense."),
    (r"attention\.output\.LayerNorm\.", "attention.LayerNorm."),
    (r"intermediate\.dense\.", "ffn."),
    (r"output\.dense\.", "ffn_output."),
    (r"output\.LayerNorm\.", "full_layer_layer_norm."),
    ("", ""),  # any other name inside a layer: the group's, as BERT names it
)
r"""Names within one layer, BERT's -> ALBERT's (``AlbertLayer``); a template's ``\2`` is the pattern's first group
(the layer's number is group 1 of the rule :func:`table` makes of it)."""

KEYS = (
    (r"bert\.embeddings\.project\.", "albert.encoder.embedding_hidden_mapping_in."),
    (r"bert\.pooler\.dense\.", "albert.pooler."),
    (r"bert\.", "albert."),
    (r"cls\.predictions\.transform\.", "predictions."),
    (r"cls\.predictions\.", "predictions."),
    (r"cls\.seq_relationship\.", "sop_classifier.classifier."),
)
"""BERT's names outside the layers -> ALBERT's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`)."""


def table(config: BertConfig) -> Table:
    """ALBERT's key table for a model of ``config``: the names inside a layer (:data:`IN_LAYER`) under the group
    (:func:`group`) of the layer's number, then :data:`KEYS`.

    One rule per name, not per layer and name: a table of a rule for each of L layers made each rename read L rules
    (and recompile them, past the 512 patterns ``re`` keeps), so a config.json of 300 layers took minutes to load.

    Args:
        config: the model's config (its layers and groups).
    """
    def in_group(template: str) -> Callable[[re.Match], str]:
        return lambda m: f"albert.encoder.albert_layer_groups.{group(int(m[1]), config)}.albert_layers.0.{m.expand(template)}"

    return tuple((rf"bert\.encoder\.layer\.(\d+)\.{pattern}", in_group(template)) for pattern, template in IN_LAYER) + KEYS


ALBERT = register(Names(
    prefix="albert.", table=table,
    shapes=lambda config, table, present: factorized_shapes(config, table, present, project=True),
    normalize=normalizer("albert.", ("embeddings.", "encoder.", "pooler."),
                         (("predictions.decoder.weight", "albert.embeddings.word_embeddings.weight"),
                          ("predictions.decoder.bias", "predictions.bias"))),
), "albert")
"""ALBERT's names."""
