"""BERT's checkpoint names: the names the forward pass asks for are the keys, under ``bert.`` and ``cls.``.

What loading does to a BERT state read from a file (:func:`normalize_keys`) is the only work: a bare ``BertModel``'s
keys get their prefix, TF-era LayerNorm names become PyTorch's, and the tied decoder gets its second name.
"""

from __future__ import annotations

import torch

from ...model.config import BertConfig
from ...model.naming import register
from .record import Names

BUFFERS = ("bert.embeddings.position_ids", "bert.embeddings.token_type_ids")  # non-weights some files carry


def normalize_keys(state: dict[str, torch.Tensor], config: BertConfig) -> dict[str, torch.Tensor]:
    """Rename to ``BertForPreTraining`` names and tie the decoder; returns a new dict (same tensors).

    * bare ``BertModel`` keys (``embeddings.…``, ``encoder.…``, ``pooler.…``) get the ``bert.`` prefix;
    * TF-era ``LayerNorm.gamma`` / ``LayerNorm.beta`` become ``LayerNorm.weight`` / ``LayerNorm.bias``;
    * buffers (``position_ids``, ``token_type_ids``) are dropped: bertfn computes them;
    * a missing ``cls.predictions.decoder.weight`` is the word embeddings (tied), and
      ``cls.predictions.decoder.bias`` and ``cls.predictions.bias`` are one tensor.

    Args:
        state: a flat state_dict as read from a file.
        config: the model's config.
    """
    out = {}
    for k, t in state.items():
        if k.startswith(("embeddings.", "encoder.", "pooler.")):
            k = "bert." + k
        if k.endswith(".gamma"):
            k = k[: -len("gamma")] + "weight"
        elif k.endswith(".beta"):
            k = k[: -len("beta")] + "bias"
        if k not in BUFFERS:
            out[k] = t
    if "cls.predictions.transform.dense.weight" in out:
        if "cls.predictions.decoder.weight" not in out and "bert.embeddings.word_embeddings.weight" in out:
            out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
        if "cls.predictions.bias" not in out and "cls.predictions.decoder.bias" in out:
            out["cls.predictions.bias"] = out["cls.predictions.decoder.bias"]
        if "cls.predictions.decoder.bias" not in out and "cls.predictions.bias" in out:
            out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


BERT = register(Names(prefix="bert.", normalize=normalize_keys), "bert")
"""BERT's names: the keys themselves (an empty table)."""
