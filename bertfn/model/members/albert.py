"""ALBERT (Lan et al. 2020): a lite BERT, whose layers share their weights.

ALBERT is BERT except:

* **one layer's weights for every layer**: the checkpoint holds ``num_hidden_groups`` layers (1 in every
  released ALBERT) under ``albert.encoder.albert_layer_groups.{g}.albert_layers.0``, and layer i reads
  group ``i * groups // L``: its key table, built per config, sends every layer's names to its group's
  (:mod:`bertfn.checkpoint.names.albert`). The pass still has L layers, each with its own activations:
  an edit at layer 3 (``layer.3.attention.probs``) changes layer 3 only;
* **factorized embeddings**, as ELECTRA's: E wide, then ``embedding_hidden_mapping_in`` (H, E) to the
  hidden size (:func:`~bertfn.model.members.electra.factorized_embeddings`), and an MLM head at width E
  (``predictions.dense`` (E, H), ``predictions.LayerNorm``, ``predictions.decoder`` (V, E) tied);
* **names** inside a layer: ``attention.query|key|value|dense|LayerNorm``, ``ffn``, ``ffn_output``,
  ``full_layer_layer_norm``; the pooler is ``albert.pooler`` (one linear, then tanh as BERT's); the checkpoint side
  has them (:mod:`bertfn.checkpoint.names.albert`);
* **its config**: ``embedding_size``, ``num_hidden_groups``, ``inner_group_num`` and ALBERT's defaults
  (``gelu_new``, no dropout; the classifiers' dropout is ``classifier_dropout_prob``: :class:`AlbertConfig`).

Its heads of fine-tuned checkpoints are BERT's (a classifier on the pooler, ``qa_outputs``, ...).

transformers' ALBERT applies ``head_mask[g * L / groups]`` (the first layer's row, with one group) at every
layer; bertfn applies row i at layer i, as BERT does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError
from ..config import BertConfig
from .electra import factorized_embeddings
from ..family import Family, register


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

    @property
    def feed_forward_dropout(self) -> float:
        """0: ``AlbertLayer`` makes a dropout at ``hidden_dropout_prob`` but its feed-forward never applies it (its
        attention's output and its embeddings drop out at that rate)."""
        return 0.0

    @classmethod
    def renamed(cls, d: dict[str, Any]) -> dict[str, Any]:
        """ALBERT's config.json fields under BertConfig's names: ``classifier_dropout_prob`` is ``classifier_dropout``.

        Args:
            d: the parsed ``config.json``.
        """
        return {("classifier_dropout" if k == "classifier_dropout_prob" else k): v for k, v in d.items()
                if k != "classifier_dropout"}

    @property
    def stored_layers(self) -> int:
        """The layer groups the checkpoint holds (``num_hidden_groups``): every layer reads one of them."""
        return self.num_hidden_groups

    def __post_init__(self) -> None:
        super().__post_init__()
        L, G = self.num_hidden_layers, self.num_hidden_groups
        if not isinstance(G, int) or isinstance(G, bool) or not 1 <= G <= L:
            raise ConfigError(f"config num_hidden_groups must be an integer from 1 to num_hidden_layers ({L}), got {G!r}")
        if self.inner_group_num != 1:
            raise ConfigError(f"config inner_group_num is {self.inner_group_num!r}; bertfn reads ALBERTs with one "
                              "layer per group (inner_group_num 1), as every released ALBERT is")


ALBERT = register(Family(
    name="ALBERT", model_type="albert",
    embeddings=factorized_embeddings,
))
