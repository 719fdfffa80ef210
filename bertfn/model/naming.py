"""How a member's checkpoint names BERT's weights: the seam through which the forward pass reads those names.

BERT's functions ask for BERT's names (``bert.encoder.layer.0.attention.self.query.weight``); a member's checkpoint
keeps its own (``roberta.encoder.layer.0...``, one ALBERT layer group for every layer). The tables that say how are
checkpoint code (:mod:`bertfn.checkpoint.names`), in a room above this one that model/ does not import. So model/
declares here what it reads of them (:class:`CheckpointNames`) and a registry by ``model_type`` (:data:`NAMES`),
and :mod:`bertfn.checkpoint.names` fills it on import, as bertfn/fast installs its kernels beneath
model/functional.py. Importing any module of bertfn runs ``bertfn/__init__.py`` first, which imports the checkpoint
room, so the registry is full before any model is read.

The model reads a member's names at four points: :class:`~bertfn.model.params.Params` turns each name into the
member's key (``renamer``) and lists its keys (``named_shapes``), :func:`~bertfn.model.params.as_params` reads a
bare state_dict as loading leaves it (``normalize``), and the task heads and the dry run ask which tasks the member
has (``tasks``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import torch

from ..errors import CheckpointError
from .config import BertConfig

Tensor = torch.Tensor


class CheckpointNames(ABC):
    """What the forward pass reads of a member's checkpoint names (:class:`bertfn.checkpoint.names.record.Names` is one).

    Attributes:
        normalize: ``(state, config) -> state``: what loading does to a state read from a file.
        tasks: the tasks transformers has a head for in the member (None: BERT's four).
    """

    normalize: Callable[[dict[str, Tensor], BertConfig], dict[str, Tensor]]
    tasks: tuple[str, ...] | None

    @abstractmethod
    def renamer(self, config: BertConfig) -> Callable[[str], str] | None:
        """``BERT name -> the checkpoint's key`` for a model of ``config``; None where the names are the keys.

        Args:
            config: the model's config.
        """

    @abstractmethod
    def named_shapes(self, config: BertConfig, present: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        """Every weight a model of ``config`` reads, by BERT's name, with its shape.

        Args:
            config: the model's config.
            present: the weights at hand: optional parts count as it holds them, asked by BERT's names.
        """


NAMES: dict[str, CheckpointNames] = {}
"""``model_type`` -> how its checkpoints name BERT's weights; filled by :mod:`bertfn.checkpoint.names` (:func:`register`)."""


def register(names: CheckpointNames, *model_types: str) -> CheckpointNames:
    """Add ``names`` under each of ``model_types`` (RoBERTa's serve XLM-RoBERTa and CamemBERT too).

    Args:
        names: a member's checkpoint names.
        *model_types: config.json's ``model_type`` of each model whose checkpoints name their weights so.

    Returns:
        ``names``.
    """
    for model_type in model_types:
        NAMES[model_type] = names
    return names


def names_of(config: BertConfig) -> CheckpointNames:
    """How the checkpoints of a model of ``config`` (its ``model_type``) name BERT's weights.

    Args:
        config: the model's config.

    Raises:
        CheckpointError: a ``model_type`` whose checkpoint names nobody registered.
    """
    try:
        return NAMES[config.model_type]
    except KeyError:
        raise CheckpointError(f"bertfn knows no checkpoint names for model_type {config.model_type!r}; it knows those of "
                              f"{', '.join(sorted(NAMES))}. A new member registers its key table with "
                              "bertfn.model.naming.register (bertfn/checkpoint/names/ has every member's)") from None
