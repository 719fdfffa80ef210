"""Attention's own trace points on the segments layout, in the padded layout's shapes.

On texts laid end to end (:class:`~bertfn.model.layout.Segments`) a point outside attention is a tensor of the
sequence, (1, T + pad, ...), which a trace keeps and edits in the padded shape (b, S, ...)
(:class:`~bertfn.model.recorder.Trace` told the layout). The points inside attention are not: each text's scores,
probabilities and context are formed call by call (:meth:`~bertfn.model.layout.Segments.attend`), never as one
tensor, and an edit written for the padded batch reads the whole of one. So where a trace keeps them or edits one
(:data:`INSIDE`), or a head mask scales the heads, attention runs on the padded view of the texts instead
(:func:`on_padded_view`): the queries, keys and values scattered into the padded batch (b, nh, S, hd), zeros at the
padding (no token is there), attending as the padded pass does with the padding's keys masked (the member's own mask,
a window or a causal one, added), the points kept and edited there as they come, and the context laid end to end
again. Every product outside attention still runs on the texts' rows alone.

There the points are the padded pass's at every real query: ``scores`` ... ``probs`` (b, nh, S, S), ``context``
(b, nh, S, hd), a member's own (``relative_scores``, MPNet's ``position_bias``, DeBERTa's ``c2p_scores`` ...). A
padding query's row holds what a query of zeros gives (a row of zero scores where they are q . k), the padded pass's
what its padding token's query gives: neither reaches a real token; the keys of padding are masked in both.

What the segments layout does not run, :func:`inference_only` refuses: dropout (training), and probabilities returned
but where a member's layer forms them per text (the pre-LN members'); a decoder's cache and cross-attention the
encoder refuses (:func:`~bertfn.model.masks.check_segments`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..errors import InputError
from .layout import Mask, Segments, with_keys
from .recorder import WEIGHT_POINTS, Trace

Tensor = torch.Tensor

INSIDE = (*WEIGHT_POINTS, "relative_scores", "position_bias", "c2p_scores", "p2c_scores", "context")
"""The points a member's attention forms per call on segments (its scope's names): kept or edited, they make the
attention run on the padded view."""


def on_padded_view(mask: Mask, trace: Trace, head_mask: Tensor | None) -> bool:
    """Whether attention on ``mask`` runs on the padded view of its texts (module docstring): on segments, where the
    trace keeps its points or edits one of :data:`INSIDE`, or where a head mask is given (the eager path's, per head).

    Args:
        mask: the layout (the padded one's mask, None, or :class:`~bertfn.model.layout.Segments`).
        trace: the attention block's trace (falsy :data:`~bertfn.model.recorder.NO_TRACE`: never).
        head_mask: (nh,), or None.
    """
    return isinstance(mask, Segments) and (head_mask is not None or (
        bool(trace) and (trace.keep or trace.edits_any(INSIDE))))


class PaddedView(NamedTuple):
    """The texts' attention inputs as the padded pass has them (:func:`padded_view`).

    Attributes:
        q: (b, nh, S, hd) the queries, zeros at the padding.
        k: (b, nh, S, hd) the keys.
        v: (b, nh, S, hd) the values.
        mask: (b, 1, 1 or S, S) additive: the padding's keys, with the member's own mask.
        trace: the attention block's trace, keeping the points as they come (already padded).
    """

    q: Tensor  # (b, nh, S, hd)
    k: Tensor  # (b, nh, S, hd)
    v: Tensor  # (b, nh, S, hd)
    mask: Tensor  # (b, 1, 1 or S, S) additive
    trace: Trace  # the attention block's trace


def padded_view(layout: Segments, q: Tensor, k: Tensor, v: Tensor, trace: Trace,
                own: Tensor | None = None) -> PaddedView:
    """The queries, keys and values of texts laid end to end as one padded batch, with its additive mask.

    What the padded pass's attention reads (``BertSelfAttention`` on a (b, S) batch with its padding mask): each
    text's rows in its row, zeros at the padding (:meth:`~bertfn.model.layout.Segments.padded`).

    Args:
        layout: the texts.
        q: (1, nh, T + pad, hd).
        k: (1, nh, T + pad, hd).
        v: (1, nh, T + pad, hd).
        trace: the attention block's trace.
        own: the member's additive mask of the longest text, broadcastable to (1, 1, S, S) (a decoder's causal mask,
            ModernBERT's window), or None.

    Returns:
        :class:`PaddedView`; the context it gives goes back by :meth:`~bertfn.model.layout.Segments.laid`.
    """
    keys = layout.padding_mask(q.dtype, q.device)  # (b, 1, 1, S)
    return PaddedView(layout.padded(q), layout.padded(k), layout.padded(v), with_keys(own, keys), trace.on(None))


def text_probs(layout: Segments, probs: Tensor) -> tuple[Tensor, ...]:
    """The probabilities of the padded view as the segments layout returns them: each text's own (1, nh, n, n).

    Args:
        layout: the texts.
        probs: (b, nh, S, S).
    """
    return tuple(probs[j:j + 1, :, :n, :n] for j, n in enumerate(layout.lengths))


def inference_only(mask: Mask, given: dict[str, bool]) -> None:
    """Raise :class:`InputError` where attention meets the segments layout with what that layout does not run.

    Texts laid end to end run inference's self-attention: no dropout (training), and no probabilities returned but
    where a member's layer forms them per text (the pre-LN members', for ESM-2's contact head). A trace and edits run
    there, every point in the padded layout's shapes, and so does a head mask (:mod:`bertfn.model.segment_points`);
    a decoder's cache and cross-attention the encoder refuses (:func:`~bertfn.model.masks.check_segments`).

    Args:
        mask: the layout's mask.
        given: ``{what: whether the call asks for it}``, e.g. ``{"dropout": generator is not None}``.
    """
    asked = [what for what, wanted in given.items() if wanted]
    if isinstance(mask, Segments) and asked:
        raise InputError(f"attention on texts laid end to end (Segments) runs inference alone, without "
                         f"{', '.join(asked)}; pass a padded batch (B, S) with its mask for those (or, for the "
                         f"probabilities, record layer.*.attention.probs with a trace, which runs on Segments)")
