"""ALBERT (Lan et al. 2020): a lite BERT, whose layers share their weights.

ALBERT is BERT except:

* **one layer's weights for every layer**: the checkpoint holds ``num_hidden_groups`` layers (1 in every
  released ALBERT) under ``albert.encoder.albert_layer_groups.{g}.albert_layers.0``, and layer i reads
  group ``i * groups // L`` (:func:`key`). The pass still has L layers, each with its own activations:
  an edit at layer 3 (``layer.3.attention.probs``) changes layer 3 only;
* **factorized embeddings**, as ELECTRA's: E wide, then ``embedding_hidden_mapping_in`` (H, E) to the
  hidden size (:func:`~bertfn.model.members.electra.factorized_embeddings`), and an MLM head at width E
  (``predictions.dense`` (E, H), ``predictions.LayerNorm``, ``predictions.decoder`` (V, E) tied);
* **names** inside a layer: ``attention.query|key|value|dense|LayerNorm``, ``ffn``, ``ffn_output``,
  ``full_layer_layer_norm``; the pooler is ``albert.pooler`` (one linear, then tanh as BERT's);
* **its config**: ``embedding_size``, ``num_hidden_groups``, ``inner_group_num`` and ALBERT's defaults
  (``gelu_new``, no dropout; the classifiers' dropout is ``classifier_dropout_prob``: :class:`AlbertConfig`).

Its heads of fine-tuned checkpoints are BERT's (a classifier on the pooler, ``qa_outputs``, ...).

transformers' ALBERT applies ``head_mask[g * L / groups]`` (the first layer's row, with one group) at every
layer; bertfn applies row i at layer i, as BERT does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..config import BertConfig
from .electra import factorized_embeddings, factorized_shapes
from ..family import Family, normalizer, register, renamed


@dataclass(frozen=True)
class AlbertConfig(BertConfig):
    """``transformers.AlbertConfig``: BertConfig with the embeddings' width, the layer groups and ALBERT's defaults.

    Attributes:
        vocab_size: 30000.
        embedding_size: E, the width of the embedding tables (128).
        hidden_size: H, 4096.
        num_attention_heads: 64.
        intermediate_size: 16384.
        num_hidden_groups: the layer groups the checkpoint holds, from 1 to ``num_hidden_layers``.
        inner_group_num: layers per group; bertfn reads 1, as every released ALBERT has.
        hidden_act: "gelu_new".
        hidden_dropout_prob: 0.0.
        attention_probs_dropout_prob: 0.0.
        classifier_dropout: 0.1 (``classifier_dropout_prob``), the classifiers' dropout.
        model_type: "albert".

    Raises:
        ConfigError: ``num_hidden_groups`` out of range, or ``inner_group_num`` other than 1.
    """

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 4096
    num_attention_heads: int = 64
    intermediate_size: int = 16384
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    hidden_act: str = "gelu_new"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    classifier_dropout: float | None = 0.1
    model_type: str = "albert"

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """ALBERT's config.json fields under BertConfig's names: ``classifier_dropout_prob`` is ``classifier_dropout``.

        Args:
            d: the parsed ``config.json``.
        """
        return {("classifier_dropout" if k == "classifier_dropout_prob" else k): v for k, v in d.items()
                if k != "classifier_dropout"}

    def __post_init__(self) -> None:
        super().__post_init__()
        L, G = self.num_hidden_layers, self.num_hidden_groups
        if not isinstance(G, int) or isinstance(G, bool) or not 1 <= G <= L:
            raise ConfigError(f"config num_hidden_groups must be an integer from 1 to num_hidden_layers ({L}), got {G!r}")
        if self.inner_group_num != 1:
            raise ConfigError(f"config inner_group_num is {self.inner_group_num!r}; bertfn reads ALBERTs with one "
                              "layer per group (inner_group_num 1), as every released ALBERT is")


def group(layer: int, config: BertConfig) -> int:
    """The layer group whose weights layer ``layer`` reads: ``int(i / (L / groups))`` (``AlbertTransformer``).

    Args:
        layer: i.
        config: the model's config.
    """
    return int(layer / (config.num_hidden_layers / config.num_hidden_groups))


IN_LAYER = (
    (r"attention\.self\.(query|key|value|distance_embedding)\.", r"attention.\1."),
    (r"attention\.output\.dense\.", "attention.dense."),
    (r"attention\.output\.LayerNorm\.", "attention.LayerNorm."),
    (r"intermediate\.dense\.", "ffn."),
    (r"output\.dense\.", "ffn_output."),
    (r"output\.LayerNorm\.", "full_layer_layer_norm."),
)
"""Names within one layer, BERT's -> ALBERT's."""

KEYS = (
    (r"bert\.embeddings\.project\.", "albert.encoder.embedding_hidden_mapping_in."),
    (r"bert\.pooler\.dense\.", "albert.pooler."),
    (r"bert\.", "albert."),
    (r"cls\.predictions\.transform\.", "predictions."),
    (r"cls\.predictions\.", "predictions."),
    (r"cls\.seq_relationship\.", "sop_classifier.classifier."),
)
"""BERT's names outside the layers -> ALBERT's, first match wins (:func:`~bertfn.model.family.renamed`)."""

LAYER = re.compile(r"bert\.encoder\.layer\.(\d+)\.(.*)")


def key(name: str, config: BertConfig) -> str:
    """The ALBERT checkpoint key that holds BERT's ``name``: a layer's weights are its group's (:func:`group`).

    Args:
        name: a BERT name.
        config: the model's config (its layers and groups).
    """
    m = LAYER.fullmatch(name)
    if m is None:
        return renamed(name, KEYS)
    g = group(int(m.group(1)), config)
    return f"albert.encoder.albert_layer_groups.{g}.albert_layers.0.{renamed(m.group(2), IN_LAYER)}"


ALBERT = register(Family(
    name="ALBERT", model_type="albert", prefix="albert.", key=key,
    shapes=lambda config, table, present: factorized_shapes(config, table, present, project=True),
    normalize=normalizer("albert.", ("embeddings.", "encoder.", "pooler."),
                         (("predictions.decoder.weight", "albert.embeddings.word_embeddings.weight"),
                          ("predictions.decoder.bias", "predictions.bias"))),
    embeddings=factorized_embeddings,
))
