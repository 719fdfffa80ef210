"""ELECTRA (Clark et al. 2020): a generator masked LM and a discriminator that spots replaced tokens.

ELECTRA is BERT except:

* **factorized embeddings**: the tables are ``embedding_size`` (E) wide, smaller than H in the small
  and generator models, and a linear map ``embeddings_project`` (H, E) takes them to H after the
  embeddings' LayerNorm (:func:`factorized_embeddings`; absent when E = H);
* **two heads**: the generator's MLM head is BERT's at width E (``generator_predictions.dense`` (E, H),
  ``generator_predictions.LayerNorm`` (E,), ``generator_lm_head`` (V, E) tied to the word embeddings) with
  exact GELU; the discriminator's (:func:`discriminator_head`) gives one logit per token, "was this token
  replaced?" (``ElectraForPreTraining``, read by :func:`bertfn.tasks.replaced.replaced_tokens`);
* **names**: ``electra.*``; no pooler.

The layers are BERT's.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import BertConfig
from .embeddings import embeddings as bert_embeddings
from .family import Family, normalizer, register, renamed
from .functional import ACTIVATIONS, linear
from .params import Params, as_params
from .recorder import NO_TRACE, Trace

Tensor = torch.Tensor


@dataclass(frozen=True)
class ElectraConfig(BertConfig):
    """``transformers.ElectraConfig``: BertConfig with the embeddings' width and ELECTRA-small's defaults.

    Attributes:
        embedding_size: E, the width of the embedding tables (128).
        hidden_size: H, 256.
        num_attention_heads: 4.
        intermediate_size: 1024.
        model_type: "electra".
    """

    embedding_size: int = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    model_type: str = "electra"


def factorized_embeddings(p: Params, input_ids: Tensor | None = None, token_type_ids: Tensor | None = None,
                          position_ids: Tensor | None = None, inputs_embeds: Tensor | None = None,
                          past_length: int = 0, generator: torch.Generator | None = None,
                          trace: Trace = NO_TRACE, *,
                          attention_mask: Tensor | None = None) -> Tensor:
    """BERT's embeddings at width E, then ``project`` (H, E) to the hidden size when the model has it.

    Mirrors ``ElectraEmbeddings`` + ``ElectraModel.embeddings_project`` (and ALBERT's
    ``AlbertEmbeddings`` + ``embedding_hidden_mapping_in``).

    Args:
        p: ``bert.embeddings.`` scope, whose ``project.*`` is the member's projection.
        input_ids: (B, S).
        token_type_ids: (B, S), as in BERT's.
        position_ids: (B, S), as in BERT's.
        inputs_embeds: (B, S, E), instead of ``input_ids``.
        past_length: the cached positions before these.
        generator: turns dropout on (training).
        trace: records (and edits) BERT's embedding points, then ``projected``.
        attention_mask: accepted and ignored (the encoder passes it to every member's embeddings; ESM-2's read it).

    Returns:
        (B, S, H).
    """
    x = bert_embeddings(p, input_ids, token_type_ids, position_ids, inputs_embeds, past_length, generator, trace)  # (B, S, E)
    if "project.weight" in p:
        x = trace("projected", linear(x, p["project.weight"], p["project.bias"]))  # (B, S, H)
    return x


def factorized_points(config: BertConfig, project: bool) -> tuple[str, ...]:
    """The trace points of :func:`factorized_embeddings`: BERT's, then the projection where ``project``.

    Args:
        config: the model's config.
        project: whether the model projects its embeddings (E < H).
    """
    projected = ("projected",) if project else ()
    positions = ("position",) if config.position_embedding_type == "absolute" else ()
    return ("word", "token_type", *positions, "sum", "output", *projected)


def factorized_shapes(config: BertConfig, table: dict[str, tuple[int, ...]], present,
                      project: bool) -> dict[str, tuple[int, ...]]:
    """BERT's table with the embeddings and the MLM head's transform at width E, plus the (H, E) projection.

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


DISCRIMINATOR = ("discriminator_predictions.dense.weight", "discriminator_predictions.dense.bias",
                 "discriminator_predictions.dense_prediction.weight", "discriminator_predictions.dense_prediction.bias")


def discriminator_head(params: Params, h: Tensor, *, config: BertConfig | dict | None = None) -> Tensor:
    """One logit per token: was it replaced? ``dense_prediction(act(dense h))`` (``ElectraDiscriminatorPredictions``).

    Args:
        params: a loaded ``Model``, its ``Params``, or a flat HF-keyed state_dict with ``config``. Reads
            ``discriminator_predictions.dense.*`` (H, H) and ``.dense_prediction.*`` (1, H).
        h: (..., H) last hidden states.
        config: the config of a bare state_dict.

    Returns:
        (..., ) logits; sigmoid gives the probability that a token is not the original.
    """
    params = as_params(params, config, "discriminator_head")
    p = params.scope("discriminator_predictions")
    t = ACTIVATIONS[params.config.hidden_act](linear(h, p["dense.weight"], p["dense.bias"]))  # (..., H)
    return linear(t, p["dense_prediction.weight"], p["dense_prediction.bias"]).squeeze(-1)  # (...,)


KEYS = (
    (r"bert\.embeddings\.project\.", "electra.embeddings_project."),
    (r"bert\.", "electra."),
    (r"cls\.predictions\.transform\.dense\.", "generator_predictions.dense."),
    (r"cls\.predictions\.transform\.LayerNorm\.", "generator_predictions.LayerNorm."),
    (r"cls\.predictions\.decoder\.weight", "generator_lm_head.weight"),
    (r"cls\.predictions\.(decoder\.)?bias", "generator_lm_head.bias"),
)
"""BERT's names -> ELECTRA's, first match wins (:func:`~bertfn.model.family.renamed`)."""


def key(name: str, config: BertConfig) -> str:
    """The ELECTRA checkpoint key that holds BERT's ``name`` (:data:`KEYS`).

    Args:
        name: a BERT name.
        config: the model's config (unused).
    """
    return renamed(name, KEYS)


ELECTRA = register(Family(
    name="ELECTRA", model_type="electra", prefix="electra.", key=key, shapes=shapes,
    normalize=normalizer("electra.", ("embeddings.", "embeddings_project.", "encoder."),
                         (("generator_lm_head.weight", "electra.embeddings.word_embeddings.weight"),)),
    embeddings=factorized_embeddings, embedding_points=lambda config: factorized_points(config, config.embedding_size != config.hidden_size),
    head_act="gelu",
    heads={"discriminator head": DISCRIMINATOR[2]},
))
