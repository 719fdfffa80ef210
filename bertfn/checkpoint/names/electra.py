"""ELECTRA's checkpoint names: ``electra.*``, the projection ``electra.embeddings_project``, the generator's MLM head
``generator_predictions.dense|LayerNorm`` and ``generator_lm_head`` (tied to the word embeddings), the discriminator's
``discriminator_predictions.*``; the embeddings and the generator's head E wide (:func:`factorized_shapes`, ALBERT's too).
"""

from __future__ import annotations

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names, normalizer

KEYS = (
    (r"bert\.embeddings\.project\.", "electra.embeddings_project."),
    (r"bert\.", "electra."),
    (r"cls\.predictions\.transform\.dense\.", "generator_predictions.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "generator_predictions.LayerNorm."),
    (r"cls\.predictions\.decoder\.weight", "generator_lm_head.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "generator_lm_head.bias"),
)
"""BERT's names -> ELECTRA's, first match wins (:func:`~bertfn.checkpoint.names.record.renamed`)."""

DISCRIMINATOR = ("discriminator_predictions.dense.weight", "discriminator_predictions.dense.bias",
                 "discriminator_predictions.dense_prediction.weight", "discriminator_predictions.dense_prediction.bias")
"""The keys of the discriminator's head (``ElectraDiscriminatorPredictions``)."""


def factorized_shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present,
                      project: bool) -> dict[str, tuple[int, ...]]:
    """BERT's table with the embeddings and the MLM head's transform at width E, plus the (H, E) projection
    (``ElectraEmbeddings`` + ``embeddings_project``, ``AlbertEmbeddings`` + ``embedding_hidden_mapping_in``).

    The part ELECTRA and ALBERT share.

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand (unused).
        project: add the (H, E) projection.
    """
    E, H = config.embedding_size, config.hidden_size
    out = {}
    for k, shape in table.items():
        if k.startswith("bert.embeddings.") or k.startswith("cls.predictions.transform.LayerNorm."):
            shape = shape[:-1] + (E,)  # the tables' rows, LayerNorm: E wide
        elif k == "cls.predictions.decoder.weight":
            shape = (shape[0], E)
        elif k.startswith("cls.predictions.transform.dense."):
            shape = (E, H) if k.endswith("weight") else (E,)
        out[k] = shape
    if project:
        out["bert.embeddings.project.weight"] = (H, E)
        out["bert.embeddings.project.bias"] = (H,)
    return out


def shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present) -> dict[str, tuple[int, ...]]:
    """ELECTRA's keys: :func:`factorized_shapes`, and the discriminator head where the checkpoint has one.

    Args:
        config: the model's config.
        table: BERT's table of keys and shapes.
        present (Mapping[str, Tensor]): the weights at hand.
    """
    H = config.hidden_size
    out = factorized_shapes(config, table, present, config.embedding_size != H)
    if any(k in present for k in DISCRIMINATOR):
        out.update(zip(DISCRIMINATOR, ((H, H), (H,), (1, H), (1,))))
    return out


ELECTRA = register(Names(
    prefix="electra.", table=KEYS, shapes=shapes,
    normalize=normalizer("electra.", ("embeddings.", "embeddings_project.", "encoder."),
                         (("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),)),
    heads={"discriminator head": DISCRIMINATOR[2]},
), "electra")
"""ELECTRA's names."""
