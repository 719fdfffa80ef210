"""Reading one weights file, safely: ``.safetensors`` with safetensors, ``.bin`` with ``torch.load(weights_only=True)``,
or the shards a sharded checkpoint's index (``model.safetensors.index.json``) lists, as ``save_pretrained`` writes a
model larger than its ``max_shard_size``.

Loading never runs pickled code: a ``.bin`` whose pickle names a function or class to call is refused
unrun, with a message saying so (:func:`read_weights`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CheckpointError, require_readable
from .tokenizer_files import read_json, stays_inside

SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
"""The index of a sharded checkpoint (``{"weight_map": {key: shard file}}``), as ``save_pretrained`` names it."""


def read_weights(path: str | Path, mapped: bool = False) -> dict[str, torch.Tensor]:
    """Tensors of one weights file. ``.safetensors`` via safetensors; ``.bin`` via ``weights_only`` torch.load; a
    shard index (:data:`SHARD_INDEXES`) via :func:`read_shards`.

    Args:
        path: the file.
        mapped: a safetensors file is memory-mapped (privately: an edit in place never reaches the file) instead
            of read into memory, for a caller that keeps the weights as they are; reading is the default because
            laying the weights out or packing them copies them, and mapped pages would stay resident beside the copies.

    Raises:
        CheckpointError: a file this user may not read, a corrupt file, or one that holds code.
    """
    path = Path(path)
    require_readable(path)
    if path.name in SHARD_INDEXES:
        return read_shards(path, mapped)
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        try:
            return load_file(str(path)) if mapped else load_file(str(path), backend="pread")
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(
                f"{path} is not a readable safetensors file ({e}); it may be truncated or corrupt, download it again"
            ) from e
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # UnpicklingError from the restricted unpickler, RuntimeError / EOFError for broken zips
        reason = torch_load_reason(e)
        if "global" in reason.lower():  # the pickle names a function or class to call: code, refused unrun
            raise CheckpointError(
                f"{path} holds more than plain tensors ({reason}); bertfn reads .bin files with "
                "torch.load(weights_only=True) and never runs code a pickle carries. If you trust the file, "
                "convert it to model.safetensors; if you do not, delete it"
            ) from e
        raise CheckpointError(
            f"{path} is not a PyTorch checkpoint bertfn can read ({reason}); it may be truncated or corrupt "
            "(download it again) or not written by torch.save"
        ) from e
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
        raise CheckpointError(f"{path} does not hold a flat state_dict of tensors by name")
    return one_tensor_per_view(state)


def one_tensor_per_view(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with keys that read the same view of one storage given one tensor: tied in the file, tied in the state.

    ``torch.save`` writes a tied weight's storage once (BERT's MLM decoder and its word embeddings), and
    ``torch.load`` makes a tensor of it per key, each with a version counter of its own: an edit in place through one
    moved the other's values but not its version, so a copy derived from it (the fast path's packed decoder) stayed
    stale, silently, and :meth:`~bertfn.checkpoint.model.Model.to` made two copies of it. One tensor, as a
    safetensors file loads a tied weight (stored once, named twice by the names' ``normalize``).

    Args:
        state: a state as ``torch.load`` gives it.
    """
    first: dict[tuple, torch.Tensor] = {}
    for k, t in state.items():
        if t.numel():  # an empty tensor reads no storage
            view = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype)
            state[k] = first.setdefault(view, t)
    return state


def shard_map(index: Path) -> dict[str, str]:
    """A sharded checkpoint's ``weight_map``: ``{key: the shard file that holds it}``.

    Args:
        index: the ``*.index.json`` file.

    Raises:
        CheckpointError: a file that is not JSON or has no such map.
    """
    content = read_json(index, object)
    weight_map = content.get("weight_map") if isinstance(content, dict) else None
    if not isinstance(weight_map, dict) or not weight_map or not all(isinstance(f, str) for f in weight_map.values()):
        raise CheckpointError(f"{index} has no weight_map of keys to shard files, as save_pretrained writes a "
                              "sharded checkpoint's index; download it again")
    return weight_map


def read_shards(index: Path, mapped: bool = False) -> dict[str, torch.Tensor]:
    """The tensors of a sharded checkpoint: each shard its index names (``modeling_utils.load_sharded_checkpoint``),
    read by :func:`read_weights`, with the keys the index gives it.

    Args:
        index: the ``*.index.json`` file; the shards lie beside it.
        mapped: as in :func:`read_weights`.

    Raises:
        CheckpointError: an index without a ``weight_map``, a shard missing or not holding the keys the index gives it.
    """
    weight_map = shard_map(index)
    state: dict[str, torch.Tensor] = {}
    for name in dict.fromkeys(weight_map.values()):
        shard = index.parent / name
        if not stays_inside(name) or name in SHARD_INDEXES or not shard.is_file():
            raise CheckpointError(f"{index} names the shard {name!r}, which is not a file beside it; download every "
                                  "shard the index lists into that folder")
        tensors = read_weights(shard, mapped)
        absent = [k for k, f in weight_map.items() if f == name and k not in tensors]
        if absent:
            raise CheckpointError(f"{shard} lacks {len(absent)} key(s) its index {index.name} puts there (e.g. "
                                  f"{absent[0]}); the shards and the index are of different checkpoints: download "
                                  "them again together")
        state.update(tensors)
    return state


def torch_load_reason(e: Exception) -> str:
    """The informative line of a torch.load error (its message wraps the reason in paragraphs of advice).

    Args:
        e: the error torch.load raised.
    """
    boilerplate = ("Weights only load failed", "(1) ", "(2) ", "Please file an issue", "Check the documentation")
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    reason = next((line for line in lines if not line.startswith(boilerplate)), lines[0] if lines else "")
    return f"{type(e).__name__}: {reason.split(' Please')[0]}"
