"""The matrix-product kernels of the fast path, beside the reference :func:`~bertfn.model.functional.linear`.

The reference ``linear`` is ``F.linear``, whatever the dtype. The forward pass (:func:`bertfn.model.functional.linear`)
multiplies with :func:`bertfn.fast.choice.linear`, which runs (:func:`run`) one of :data:`KERNELS`, all
computing ``x W^T + b``:

* ``"F.linear"``: torch's own product on the weight as the state holds it (MKL's sgemm for fp32 on
  x86, oneDNN for bf16); what the reference path runs.
* ``"onednn"``: oneDNN's inner-product kernel (AVX-512, AVX-512-bf16, AMX where the CPU has them) on
  the weight as the state holds it: (in, out) in memory after :func:`bertfn.load`, no copy.
* ``"onednn-packed"``: the same kernel on a copy of the weight reordered once into oneDNN's blocked
  layout (:func:`packed`), which it streams fastest; one more copy of every weight the fast path
  reads (bert-base: 340 MB in fp32, 170 MB in bf16) unless the model holds only the packed copies
  (:func:`bertfn.fast.choice.pack_state`).

Which kernel runs is measured on the machine, per dtype and row band (:mod:`bertfn.fast.choice`:
once per CPU model and torch version, cached in a user file; ``BERTFN_KERNEL`` forces one). The fastest
differs between CPUs (oneDNN on packed weights well ahead of MKL's sgemm on an AMD EPYC without AMX, the two
close on a Xeon with AMX: bench/kernels.py measures them), so the choice cannot be written down once.

The state_dict stays the source of truth: a packed copy is derived from one of its tensors, is never
written back, and is rebuilt when that tensor changes in place (its version counter moves), so
edits to ``model.state`` are always seen (a weight made under ``torch.inference_mode`` has no version
counter: it is read as stored instead), but for one made through ``.data`` (``w.data.copy_(...)``), for which torch
moves no version counter. tests/test_fast_path.py checks that every kernel gives
the reference's numbers (fp32 to 1e-5; bf16 to bf16 rounding: oneDNN sums in another order).
"""

from __future__ import annotations

import threading
import weakref

import torch
import torch.nn.functional as F
from torch.utils.weak import WeakIdKeyDictionary

from ..model.functional import ACTIVATIONS, transformed

Tensor = torch.Tensor

ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
"""Whether this torch build has oneDNN and its linear kernel (x86 and ARM CPU builds do)."""

DTYPES = (torch.float32, torch.bfloat16)
"""The dtypes whose kernel is chosen by measurement; others (fp16, fp64) run ``F.linear``."""

ONEDNN_DTYPES = tuple(d for d in DTYPES if ONEDNN and (d == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported()))
"""The dtypes of :data:`DTYPES` that oneDNN's linear kernel runs on this CPU: fp32 wherever torch has oneDNN; bf16
only where the CPU has the instructions oneDNN's bf16 kernels need (AVX-512 BW, VL and DQ, or AVX-NE-CONVERT). On a
CPU with AVX2 alone (an AMD EPYC of the Zen 3 generation, many laptops) oneDNN cannot make a bf16 product, and bf16
runs ``F.linear``."""

_copies: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> (its version when packed, packed copy)
_joined: WeakIdKeyDictionary = WeakIdKeyDictionary()  # first weight -> ((weakref, version) of each, packed stack, joined bias)
_lock = threading.Lock()


def run(kernel: str, x: Tensor, w: Tensor, b: Tensor | None = None, act: str | None = None) -> Tensor:
    """``act(x W^T + b)`` by the named kernel of :data:`KERNELS`.

    Kernels other than ``"F.linear"`` need :func:`onednn_fits`.

    Args:
        kernel: a name of :data:`KERNELS`.
        x: (..., in).
        w: (out, in).
        b: (out,), or None.
        act: None, or a name of :data:`~bertfn.model.functional.ACTIVATIONS`; oneDNN applies those of
            :data:`FUSED` as it writes the product.

    Returns:
        (..., out).
    """
    if kernel == "onednn-packed" and not w.is_inference():
        return onednn_linear(x, packed(w), b, act)
    if kernel != "F.linear":  # "onednn", or a weight made under inference_mode, which has no version
        return onednn_linear(x, w, b, act)  # counter to tell when a packed copy is out of date: read as it is
    y = widened_linear(x, w, b) if _slow_bf16(x, w) else F.linear(x, w, b)
    return y if act is None else ACTIVATIONS[act](y)


def _slow_bf16(x: Tensor, w: Tensor) -> bool:
    """Whether ``x W^T`` is a bf16 product on a CPU that has no bf16 kernel (oneDNN's: :data:`ONEDNN_DTYPES`)."""
    return w.dtype == torch.bfloat16 and x.dtype == torch.bfloat16 and x.device.type == "cpu" and \
        torch.bfloat16 not in ONEDNN_DTYPES


def widened_linear(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """``x W^T + b`` of bf16 tensors multiplied in fp32, the result rounded to bf16: what a bf16 kernel computes (bf16
    inputs, an fp32 sum), on a CPU with AVX2 alone, where torch's own bf16 products are emulated. There they took 7x
    fp32's time on (out, in) weights and 150x on the (in, out) layout :func:`bertfn.load` gives them (484 rows x 512 x
    2048 on an AMD EPYC of the Zen 3 generation: 117 and 2404 ms, fp32 16 ms); widened, 49 ms, the weight's fp32 copy
    made for the product and let go, so the bf16 mode still holds each weight in half fp32's memory.

    Args:
        x: (..., in), bf16.
        w: (out, in), bf16.
        b: (out,), bf16, or None.

    Returns:
        (..., out), bf16.
    """
    return F.linear(x.float(), w.float(), None if b is None else b.float()).to(torch.bfloat16)


KERNELS = ("F.linear", "onednn", "onednn-packed")
"""The kernels :func:`run` knows, as ``BERTFN_KERNEL`` and the cache name them."""


def onednn_fits(x: Tensor, w: Tensor, b: Tensor | None) -> bool:
    """Whether ``x W^T + b`` may run on another kernel than ``F.linear``.

    A dtype of :data:`ONEDNN_DTYPES` on the CPU, one dtype throughout, no gradient to track, none of ``x``, ``w``, ``b``
    seen through a ``torch.func`` transform (``vmap``, ``grad``, ``jvp``, ``jacrev`` ...) or carrying a forward-mode
    tangent, and not inside ``torch.compile``: oneDNN's ops have no derivative and no batching rule (a ``jvp``
    through them would drop its tangent, silently), and the compiler makes its own kernels of ``F.linear``.

    Args:
        x: (..., in).
        w: (out, in).
        b: (out,), or None.
    """
    if not (x.dtype == w.dtype and w.dtype in ONEDNN_DTYPES and x.device.type == "cpu" and x.numel() > 0):
        return False
    if x.shape[-1] != w.shape[-1] or (b is not None and (b.dtype != w.dtype or b.shape != w.shape[:1])):
        return False  # shapes that do not fit: F.linear says which (oneDNN: "could not create a primitive descriptor")
    tracked = x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)
    return not (tracked and torch.is_grad_enabled()) and not (torch.compiler.is_compiling() or transformed(x, w, b))


FUSED = {"gelu": ("gelu", "none"), "gelu_python": ("gelu", "none"), "gelu_new": ("gelu", "tanh"),
         "gelu_pytorch_tanh": ("gelu", "tanh"), "relu": ("relu", "")}
"""Activations (:data:`~bertfn.model.functional.ACTIVATIONS` names) that oneDNN applies as it writes a
product's result, with its name and algorithm for them: ``"none"`` is GELU's exact erf form (``F.gelu``),
``"tanh"`` its tanh approximation. The feed-forward's first product and its activation then read and write
the (T, 3072) block once instead of twice; fp32 results agree with ``F.gelu(F.linear(...))`` to 1e-6."""


def onednn_linear(x: Tensor, w: Tensor, b: Tensor | None = None, act: str | None = None) -> Tensor:
    """``act(x W^T + b)`` through oneDNN's inner-product kernel, on ``w`` as it is or on its :func:`packed` copy.

    oneDNN compiles and caches a kernel for every shape it meets (up to 1024 of them, about 150 KB
    each): a file run, whose groups of texts come in every length, would hold 150 MB of them. So
    the rows are padded with zeros up to one of a few sizes (:func:`padded_rows`) and the padding's
    results dropped. It has no backward, hence inference only. It sums in another order than
    ``F.linear``: results agree to rounding (tests/test_fast_path.py).

    Args:
        x: (..., in).
        w: (out, in).
        b: (out,), or None.
        act: None, or an activation's name (applied by oneDNN where :data:`FUSED` has it, after the
            product otherwise).

    Returns:
        (..., out).
    """
    attr, algorithm = FUSED.get(act, ("none", ""))
    m = x.numel() // x.shape[-1]
    pad = padded_rows(m) - m
    if pad:
        rows = x.reshape(m, x.shape[-1])  # (m, in)
        rows = torch.cat([rows, rows.new_zeros(pad, rows.shape[1])])  # (m + pad, in)
        y = torch.ops.mkldnn._linear_pointwise(rows, w, b, attr, [], algorithm)  # (m + pad, out)
        y = y[:m].reshape(*x.shape[:-1], y.shape[-1])  # (..., out)
    else:  # oneDNN takes the leading dims as rows itself: no reshape, no slice (a few us a call at a sentence's rows)
        y = torch.ops.mkldnn._linear_pointwise(x, w, b, attr, [], algorithm)  # (..., out)
    return y if act is None or act in FUSED else ACTIVATIONS[act](y)


def padded_rows(m: int) -> int:
    """The row count oneDNN runs ``m`` rows as: a multiple of 4 up to 64, of 16 up to 256, of 128 beyond.

    So at most 46 sizes up to the 2048 rows of a group (:data:`bertfn.fast.batching.GROUP_TOKENS`).

    Args:
        m: the rows.
    """
    step = 4 if m <= 64 else 16 if m <= 256 else 128
    return -(-m // step) * step


def joined(ws: tuple[Tensor, ...], bs: tuple[Tensor, ...]) -> tuple[Tensor, Tensor]:
    """The weights ``ws`` stacked into one and :func:`packed`, with their biases ``bs`` joined into one.

    Attention's query, key and value weights multiplied as one product (:func:`bertfn.fast.choice.linears`).
    At a sentence's few rows a product's time is reading its weight, and oneDNN reads one 2304 x 768
    weight faster than three 768 x 768 ones (bert-base, one sentence: 6-10% of the forward pass in fp32,
    10-14% in bf16 on an AMD EPYC). Made once, and again when any of ``ws`` or ``bs`` changes in place
    (its version) or is replaced by another tensor; it takes the place of the three packed copies.

    Args:
        ws: the weights, each (out_i, in).
        bs: their biases, each (out_i,).

    Returns:
        weight: (sum out_i, in), packed.
        bias: (sum out_i,).
    """
    parts = ws + bs
    entry = _joined.get(ws[0])
    if entry is None or not made_from(entry[0], parts):
        with _lock:
            entry = _joined.get(ws[0])
            if entry is None or not made_from(entry[0], parts):
                entry = (stamp(parts), torch.ops.mkldnn._reorder_linear_weight(torch.cat(ws)), torch.cat(bs))
                _joined[ws[0]] = entry
    return entry[1], entry[2]


Stamp = tuple[tuple[weakref.ref, int], ...]
"""What a copy derived from some tensors was made from (:func:`stamp`): a weak reference to each and its version."""


def stamp(parts: tuple[Tensor, ...]) -> Stamp:
    """The :data:`Stamp` of ``parts`` as they are now, for :func:`made_from` to hold them to later.

    Weak references, not ids: a tensor replaced and freed may hand its id to a later one, which an id would take
    for the old (a stale copy, silently); nor does a stamp keep a replaced tensor alive.

    Args:
        parts: the tensors (none made under ``torch.inference_mode``, which have no version).
    """
    return tuple((weakref.ref(t), t._version) for t in parts)


def versioned(state: dict[str, Tensor]) -> tuple[Tensor, ...]:
    """The weights of ``state`` that a :func:`stamp` can hold to: all but those made under ``torch.inference_mode``,
    which have no version.

    Args:
        state: a model's weights by name.
    """
    return tuple(t for t in state.values() if not t.is_inference())


def made_from(made: Stamp, parts: tuple[Tensor, ...]) -> bool:
    """Whether a copy stamped ``made`` (:func:`stamp`) was made from ``parts`` as they are now: the same tensors,
    none changed in place since (its version).

    Args:
        made: the copy's stamp.
        parts: the tensors now.
    """
    return len(made) == len(parts) and all(r() is t and v == t._version for (r, v), t in zip(made, parts))


def packed(w: Tensor) -> Tensor:
    """``w`` (out, in) reordered for oneDNN, made once per version of ``w``: an opaque mkldnn tensor, same shape.

    A weight already packed comes back as it is, so a caller may keep the packed copy alone and pass it to
    :func:`linear` (the explorer's per-layer MLM head: no second 47 MB copy of bert-base's decoder).

    Args:
        w: (out, in).
    """
    if w.is_mkldnn:
        return w
    entry = _copies.get(w)
    if entry is not None and entry[0] == w._version:  # made already: no lock for a read
        return entry[1]
    with _lock:
        entry = _copies.get(w)
        if entry is None or entry[0] != w._version:
            entry = (w._version, torch.ops.mkldnn._reorder_linear_weight(w))
            _copies[w] = entry
        return entry[1]
