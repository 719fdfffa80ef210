"""Weights reordered once into oneDNN's blocked layout, for the bf16 fast path of :func:`~bertfn.functional.linear`.

oneDNN's bf16 matrix kernels (AMX / AVX-512 on recent x86) read the weight in a blocked layout of
their own. Handed the plain (out, in) tensor of the state_dict, they reorder it on every call,
which for one sentence costs about as much as the product itself. :func:`packed` reorders each
weight once, on first use, and keeps the copy for as long as the tensor lives.

The state_dict stays the source of truth: a packed copy is derived from one of its tensors, is
never written back, and is rebuilt when that tensor changes in place (its version counter moves),
so edits to ``model.state`` are always seen. It costs one more copy of each bf16 weight that a
fast-path product reads (bert-base: 170 MB). fp32 keeps no packed copies: laying the weights out
(in, out) at load (:func:`bertfn.state.matmul_layout`) brings ``F.linear`` within 5-7% of a packed
copy (``python bench/kernels.py``) while the state_dict holds each weight once.
"""

from __future__ import annotations

import threading

import torch
from torch.utils.weak import WeakIdKeyDictionary

_copies: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> (its version when packed, packed copy)
_lock = threading.Lock()


def packed(w: torch.Tensor) -> torch.Tensor:
    """``w`` (out, in) reordered for oneDNN, made once per version of ``w``: an opaque mkldnn tensor, same shape."""
    with _lock:
        entry = _copies.get(w)
        if entry is None or entry[0] != w._version:
            entry = (w._version, torch.ops.mkldnn._reorder_linear_weight(w))
            _copies[w] = entry
        return entry[1]
