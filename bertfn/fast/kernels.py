"""The matrix-product kernels of the fast path, beside the reference :func:`~bertfn.model.functional.linear`.

The reference ``linear`` is ``F.linear``, whatever the dtype. The fast path (:mod:`bertfn.fast.unpadded`)
multiplies with :func:`linear` here, which picks a kernel per call:

* bf16 inference on the CPU runs through oneDNN's inner-product kernel (AMX / AVX-512-bf16 where
  the CPU has them, :func:`onednn_linear`), reading a copy of the weight reordered once into
  oneDNN's blocked layout (:func:`packed`). Handed the plain (out, in) tensor, oneDNN would reorder
  it on every call, which for one sentence costs about as much as the product itself.
* everything else (fp32, a gradient to track, another device) runs ``F.linear``. fp32 keeps no
  packed copies: laying the weights out (in, out) at load (:func:`bertfn.checkpoint.state.matmul_layout`)
  brings ``F.linear`` within 5-7% of a packed copy on a Xeon with AMX (``python bench/kernels.py``)
  while the state_dict holds each weight once.

The state_dict stays the source of truth: a packed copy is derived from one of its tensors, is never
written back, and is rebuilt when that tensor changes in place (its version counter moves), so
edits to ``model.state`` are always seen. It costs one more copy of each bf16 weight that a
fast-path product reads (bert-base: 170 MB). tests/test_fast_path.py checks that every kernel gives
the reference's numbers (to bf16 rounding: oneDNN sums in another order).
"""

from __future__ import annotations

import threading

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

Tensor = torch.Tensor

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
"""Whether this torch build has oneDNN and its linear kernel (x86 and ARM CPU builds do)."""

_copies: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> (its version when packed, packed copy)
_lock = threading.Lock()


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``x W^T + b`` as :func:`~bertfn.model.functional.linear` computes it, by the kernel that fits the call.

    x: (..., in) ; w: (out, in) ; b: (out,) -> (..., out).
    """
    if onednn_fits(x, w, b):
        return onednn_linear(x, w, b)
    return F.linear(x, w, b)


def onednn_fits(x: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether :func:`linear` runs ``x W^T + b`` as :func:`onednn_linear`: bf16 on the CPU, no gradient to track."""
    if not (x.dtype == w.dtype == torch.bfloat16 and ONEDNN and x.device.type == "cpu" and x.numel() > 0):
        return False  # the dtype first: fp32 calls, the common case, stop at the cheapest test
    tracked = x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)
    return not (tracked and torch.is_grad_enabled())


def onednn_linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """``x W^T + b`` in bf16 through oneDNN's inner-product kernel, on the :func:`packed` copy of ``w``.

    It has no backward, hence inference only. It sums in another order than ``F.linear``: results
    agree to bf16 rounding (tests/test_fast_path.py). Shapes as in :func:`linear`.
    """
    return torch.ops.mkldnn._linear_pointwise(x, packed(w), b, "none", [], "")


def packed(w: Tensor) -> Tensor:
    """``w`` (out, in) reordered for oneDNN, made once per version of ``w``: an opaque mkldnn tensor, same shape.

    A weight already packed comes back as it is, so a caller may keep the packed copy alone and pass it to
    :func:`linear` (the explorer's per-layer MLM head: no second 47 MB copy of bert-base's decoder)."""
    if w.is_mkldnn:
        return w
    with _lock:
        entry = _copies.get(w)
        if entry is None or entry[0] != w._version:
            entry = (w._version, torch.ops.mkldnn._reorder_linear_weight(w))
            _copies[w] = entry
        return entry[1]
