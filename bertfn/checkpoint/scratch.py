"""A BERT from its config alone: the parameter count, and fresh weights for training from scratch.

Both start from the shapes the config implies (:meth:`~bertfn.checkpoint.names.record.Names.named_shapes`: BERT's table as the
config's family member changes it, the same table that checks a loaded checkpoint), so nothing here needs a
checkpoint or transformers.

* :func:`parameter_count` counts the parameters by part of the model, e.g. the bert-base table of the
  walkthroughs: per layer 2.36M in attention and 4.72M in the feed-forward block, 110M in all;
* :func:`init_model` draws new weights as transformers does for ``BertForPreTraining(config)``
  (``BertPreTrainedModel._init_weights``) and returns a :class:`~bertfn.checkpoint.loading.Model` to train.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from ..errors import InputError
from ..model.config import BertConfig, as_config
from .model import Model
from ..model.naming import names_of
from .tokenizer import Tokenizer

PARTS = {
    "pooler": ("bert.pooler.dense.weight",),  # BertPooler
    "mlm": ("cls.predictions.transform.dense.weight",  # BertLMPredictionHead (its decoder tied to the word
            "cls.predictions.decoder.weight"),  # embeddings): a member's table asks for one or the other
    "nsp": ("cls.seq_relationship.weight",),  # BertOnlyNSPHead
    "classifier": ("classifier.weight",),  # BertFor{Sequence,Token}Classification, config.num_labels outputs
    "contacts": ("bert.contact_head.regression.weight",),  # ESM-2's EsmContactPredictionHead (every EsmModel's)
}
"""The optional parts above the encoder, by name, and the keys that stand for each (a checkpoint holding them holds
the part)."""

TIED = {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
        "cls.predictions.decoder.bias": "cls.predictions.bias"}
"""Keys that name the same tensor as another key (one parameter, two names)."""


def model_shapes(config: BertConfig | dict, parts: str | Iterable[str] = ("pooler",)) -> dict[str, tuple[int, ...]]:
    """Every key of the encoder plus ``parts`` with its shape, tied keys included.

    Args:
        config: the model's config, or a config.json's dict.
        parts: names from :data:`PARTS` (one name, or several).

    Raises:
        InputError: an unknown part, or a config of another kind.
    """
    config, parts = as_config(config), part_names(parts)
    return names_of(config).named_shapes(config, {key: None for p in parts for key in PARTS[p]})


def part_names(parts: str | Iterable[str]) -> tuple[str, ...]:
    """``parts`` as a tuple of :data:`PARTS`' names: one name (``"mlm"``) or several.

    Args:
        parts: a name or names.

    Raises:
        InputError: an unknown name.
    """
    parts = (parts,) if isinstance(parts, str) else tuple(parts)
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise InputError(f"unknown part(s) {unknown}; choose from {list(PARTS)}")
    return parts


def part_of(key: str) -> str:
    """Which part of BERT a state_dict key belongs to.

    Args:
        key: a key, by BERT's names.

    Returns:
        embeddings, attention (self- and cross-), feed-forward, final norm (the pre-LN members'), shared by the
            layers (tables every layer reads: DeBERTa's, MPNet's relative positions), pooler, mlm head, nsp head,
            contact head (ESM-2's), or task heads (classifier, qa_outputs and any other).
    """
    if key.startswith("bert.embeddings."):
        return "embeddings"
    if re.search(r"\.layer\.\d+\.(attention\.|crossattention\.|attention_norm\.)", key):
        return "attention"
    if re.search(r"\.layer\.\d+\.(intermediate|output|ffn_norm)\.", key):
        return "feed-forward"
    if key.startswith("bert.encoder.final_norm."):
        return "final norm"
    if key.startswith("bert.encoder."):  # outside the layers, read by all: DeBERTa's rel_embeddings, its LayerNorm and
        return "shared by the layers"  # convolution, MPNet's relative_attention_bias
    if key.startswith("bert.pooler."):
        return "pooler"
    if key.startswith("cls.predictions."):
        return "mlm head"
    if key.startswith("cls.seq_relationship."):
        return "nsp head"
    if key.startswith("bert.contact_head."):
        return "contact head"
    return "task heads"


def parameter_count(config: BertConfig | dict, parts: str | Iterable[str] = ("pooler",)) -> dict[str, int]:
    """Parameters by part for ``config`` with the optional ``parts``, from the shapes alone (no weights).

    Each tensor counts once, as ``model.num_parameters()`` counts it in transformers: the MLM decoder
    shares the word embeddings' tensor, and ALBERT's layers their group's weights (counted in the first layer's
    part). The LayerNorm after a block belongs to the block. For the default config (bert-base) with the pooler:
    attention 12 x 2,363,904, feed-forward 12 x 4,723,968, total 109,482,240.

    Args:
        config: the model's config, or a config.json's dict.
        parts: the optional parts above the encoder, names from :data:`PARTS` (one name, or several).

    Returns:
        ``{part: count}`` in model order (see :func:`part_of`) and ``"total"``.

    Raises:
        InputError: an unknown part, or a config of another kind.
    """
    config, counts = as_config(config), {}
    rename = names_of(config).renamer(config)  # ALBERT's shared layers: one stored key for several layers
    stored: set[str] = set()
    for key, shape in model_shapes(config, parts).items():
        name = rename(key) if rename is not None else key
        if key not in TIED and name not in stored:
            stored.add(name)
            counts[part_of(key)] = counts.get(part_of(key), 0) + torch.Size(shape).numel()
    counts["total"] = sum(counts.values())
    return counts


def init_model(config: BertConfig | dict, parts: str | Iterable[str] = ("pooler", "mlm"), *,
               generator: torch.Generator | None = None, tokenizer: Tokenizer | None = None) -> Model:
    """A new model with random weights, as transformers initialises one (``BertPreTrainedModel._init_weights``).

    Linear weights and embedding tables ~ N(0, ``config.initializer_range``), biases 0, LayerNorm
    weight 1 and bias 0, the [PAD] row (``config.pad_token_id``) of the word embeddings 0; the MLM
    decoder is the word-embedding tensor itself (tied). The keys are those :func:`bertfn.load` gives;
    fp32 on the CPU (``model.to(...)`` moves it). To train it, see docs/guides/features.md (dropout / training).

    Args:
        config: the model's config, or a config.json's dict.
        parts: as in :func:`model_shapes`; the default gives ``BertForMaskedLM`` with a pooler.
        generator: what the weights are drawn from (default: seeded with 0), so one seed gives one model.
        tokenizer: the model's tokenizer, if any.

    Returns:
        The model, named "init_model".

    Raises:
        InputError: an unknown part, or a config of another kind.
    """
    config, parts = as_config(config), part_names(parts)
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    state: dict[str, torch.Tensor] = {}
    for key, shape in model_shapes(config, parts).items():
        if key in TIED:
            continue
        if key.endswith(("LayerNorm.weight", "_norm.weight")):  # BERT's and the pre-LN members' LayerNorms
            state[key] = torch.ones(shape)
        elif key.endswith("bias"):  # every bias, cls.predictions.bias included
            state[key] = torch.zeros(shape)
        else:  # linear weights and embedding tables
            state[key] = torch.empty(shape).normal_(0.0, config.initializer_range, generator=g)
    if config.pad_token_id is not None:
        state["bert.embeddings.word_embeddings.weight"][config.pad_token_id] = 0.0
    if "mlm" in parts:  # the decoder is the word-embedding tensor itself, its bias cls.predictions.bias
        for key, same in TIED.items():
            if same in state:
                state[key] = state[same]
    rename = names_of(config).renamer(config)  # a family member's checkpoint names (ALBERT's shared layers: one key for several)
    if rename is not None:
        state = {rename(k): t for k, t in state.items()}
    return Model(config, state, tokenizer, "init_model")
