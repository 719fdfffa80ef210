"""Reading one weights file, safely: ``.safetensors`` with safetensors, ``.bin`` with ``torch.load(weights_only=True)``.

Loading never runs pickled code: a ``.bin`` whose pickle names a function or class to call is refused
unrun, with a message saying so (:func:`read_weights`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..errors import CheckpointError, require_readable


def read_weights(path: str | Path, mapped: bool = False) -> dict[str, torch.Tensor]:
    """Tensors of one weights file. ``.safetensors`` via safetensors; ``.bin`` via ``weights_only`` torch.load.

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
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a flat state_dict of tensors")
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
