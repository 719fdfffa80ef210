"""The names of a forward pass's points: those a model's pass has, in order, read from the code by a dry run; the
points above the layers; layer 0's input; the layer a name belongs to.

:mod:`bertfn.model.recorder` passes tensors through these points and edits them by these names. :func:`point_names`
lists a config's as a pass on the meta device records them (:mod:`bertfn.model.dry_run`, which sits above this
module and adds itself to :data:`DRY_RUN` when imported).
"""

from __future__ import annotations

from collections.abc import Callable

from .config import BertConfig

DRY_RUN: list[Callable[[BertConfig, bool], tuple[str, ...]]] = []
"""Who finds a config's points: :func:`bertfn.model.dry_run.recorded_points`, which runs the pass on the meta device
and keeps what it recorded; its module adds it when it is imported (the pass sits above this module)."""


def point_names(config: BertConfig, *, optional: bool = False) -> list[str]:
    """Every point a full pass of a model with ``config`` can pass through, in the order the pass records them.

    Read from the code: a pass on the meta device records them (:func:`bertfn.model.dry_run.dry_run`), once per
    config. That pass runs what :func:`bertfn.trace` runs: the embeddings (the member's own where it has them:
    ``embeddings.position`` only with absolute positions, ELECTRA's ``embeddings.projected``, ...), every layer
    (``relative_scores`` only with relative positions, ``crossattention.*`` only for decoders with cross-attention;
    ESM-2's and ModernBERT's pre-LN layers with their ``attention.norm``, ``attention.q_rotated``, ``ffn.gate``, ...),
    ``final_norm`` where the member has one, ``pooler`` and ``mlm.*`` where the member has those parts (whatever the
    weights hold), the task head the config's ``architectures`` names (``classifier.input`` ...
    ``classifier.logits``, ``qa.start_logits``, ...) and a member's own head (ESM-2's ``contacts.*``).

    Args:
        config: the model's config.
        optional: list the :data:`~bertfn.model.recorder.OPTIONAL_POINTS` too (a pass computes them only when asked).
    """
    return list(DRY_RUN[0](config, optional))


def head_point_names(config: BertConfig) -> list[str]:
    """The points above the encoder's layers: ``pooler``, the MLM head's, the task head's, a member's own head's.

    Args:
        config: the model's config.
    """
    return [n for n in point_names(config) if n.split(".")[0] not in ("embeddings", "layer", "final_norm")]


def layer_input(config: BertConfig) -> str:
    """The point whose tensor is layer 0's input (B, S, H): the embeddings' last.

    ``embeddings.output`` in BERT, ``embeddings.projected`` in a member whose embeddings are narrower
    than H (ELECTRA, ALBERT).

    Args:
        config: the model's config.
    """
    return [n for n in point_names(config) if n.startswith("embeddings.")][-1]


def layer_of(name: str) -> int | None:
    """The layer a point belongs to: 3 for ``layer.3.attention.probs``, None for ``embeddings.sum``.

    Args:
        name: a point's full name.
    """
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "layer" and len(parts) > 1 and parts[1].isdigit() else None
