"""The precisions a model runs in, as Python calls and the ``--dtype`` option spell them alike."""

from __future__ import annotations

import torch

from ..errors import InputError

DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
}
"""Every accepted spelling (``torch.`` in front is allowed too) and the dtype it names."""


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """A floating-point ``torch.dtype`` from itself or a name in :data:`DTYPES` (``"bfloat16"``, ``"bf16"``, ...).

    Args:
        dtype: a ``torch.dtype``, a name, or None (stays None: keep the stored precision).

    Raises:
        InputError: anything else.
    """
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        return dtype
    if _name(dtype) in DTYPES:
        return DTYPES[_name(dtype)]
    raise InputError(f"dtype must be a floating-point torch.dtype or one of {', '.join(map(repr, DTYPES))}, "
                     f"got {dtype!r}")


def _name(dtype: object) -> str | None:
    """A string's key in :data:`DTYPES` (``" torch.BFloat16"`` -> ``"bfloat16"``), None for anything else."""
    return dtype.strip().lower().removeprefix("torch.") if isinstance(dtype, str) else None


def names_dtype(x: object) -> bool:
    """Whether ``x`` stands for a dtype: a ``torch.dtype`` (floating-point or not) or a name in :data:`DTYPES`.

    Args:
        x: anything, e.g. the first argument of ``Model.to``, which torch's ``.to(torch.bfloat16)`` fills with a dtype.
    """
    return isinstance(x, torch.dtype) or _name(x) in DTYPES
