"""The two layouts a forward pass takes its tokens in, and what attention reads of each.

* **Padded** (B, S): texts one per row, each padded to the longest; a 0/1 mask of the real tokens, made additive
  (:func:`extended_mask`: 0 where a key is read, ``finfo(dtype).min`` where not) and added to every score. This is
  the layout transformers runs, the one whose shapes ``trace`` records and edits address (on either layout), and the
  only one a decoder's cache or cross-attention takes.
* **Segments** (1, T): texts laid end to end, T the sum of their lengths, positions restarting at each text's start
  (:class:`Segments`). Every step that treats tokens one at a time (embeddings, every product, LayerNorm, the
  feed-forward) runs on the T real rows alone; attention runs on each text's slice as if the text were a padded
  batch of one with nothing to pad (:meth:`Segments.attend`). A batch of texts of mixed lengths spends no product on
  padding, and a text's hidden states equal the padded layout's for it (tests/test_layouts.py).

Padded (B=3, S=5)          Segments (1, T=9), lengths (5, 2, 2)
  a a a a a                  a a a a a b b c c
  b b . . .                  attention: [a a a a a] [b b] [c c]
  c c . . .

How many kernel calls attention makes on segments is the layout's ``batches``: by default one per run of texts of one
length (a run is a dense batch, a view of the sequence: [b b] and [c c] above attend in one call); or, given
``batches``, one per padded batch of neighbouring texts, gathered from the sequence with their keys' padding masked
and scattered back (a GPU pays a launch per call where a CPU pays little: :mod:`bertfn.fast.attention_batches` chooses,
by measurement on the device at hand). Either way each text attends to itself alone, and the numbers are the padded
layout's.

A step of the forward pass takes either: its ``mask`` argument is the padded layout's additive mask (or None) or a
:class:`Segments`. A trace sees a pass on segments in the padded layout's shapes: :meth:`Segments.padded` scatters a
tensor of the sequence into the texts' padded batch (b, S, ...), zeros where a text has no token, and
:meth:`Segments.laid` gathers it back (:class:`~bertfn.model.recorder.Trace`; attention's own points:
:mod:`bertfn.model.segment_points`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import accumulate

import torch

from ..errors import InputError
from .functional import built, check_keep_mask

Tensor = torch.Tensor

def extended_mask(mask: Tensor, dtype: torch.dtype, *, name: str = "extended_mask()'s mask") -> Tensor:
    """0/1 keep-mask -> additive mask ``(1 - m) * finfo(dtype).min`` that broadcasts over heads.

    Mirrors ``ModuleUtilsMixin.get_extended_attention_mask`` / ``invert_attention_mask``.

    Args:
        mask: (B, S_k) padding mask, (B, S_q, S_k) per-query mask, or (B, 1 or nh, S_q, S_k); 1 keeps a key.
        dtype: the dtype of the result (that of the scores it is added to).
        name: what ``mask`` is called in the message of a refusal (the encoder's ``attention_mask``).

    Returns:
        (B, 1, 1, S_k), (B, 1, S_q, S_k) or the 4D mask unchanged in shape, in ``dtype``.

    Raises:
        InputError: not a tensor, a mask of another number of dimensions, or values other than 0 and 1 (an additive
            mask made additive again would hide every key, so that each query read all of them alike).
    """
    check_keep_mask(name, mask)
    if mask.dim() == 2:
        mask = mask[:, None, None, :]  # (B, 1, 1, S_k)
    elif mask.dim() == 3:
        mask = mask[:, None, :, :]  # (B, 1, S_q, S_k)
    elif mask.dim() != 4:
        raise InputError(
            f"attention_mask must be (batch, seq), (batch, q, k) or (batch, heads, q, k); got {tuple(mask.shape)}"
        )
    out = (1.0 - mask.to(dtype)) * torch.finfo(dtype).min
    return built(out)


def causal_keep_mask(mask: Tensor, seq: int) -> Tensor:
    """Padding mask + "no peeking ahead": the decoder's 0/1 keep-mask.

    Mirrors ``ModuleUtilsMixin.create_extended_attention_mask_for_decoder``. Query i (at absolute
    position past+i) may see every cached key and the new keys 0..i.

    Args:
        mask: (B, past + S) 0/1.
        seq: S, the new positions.

    Returns:
        (B, S, past + S) 0/1.
    """
    B, S_k = mask.shape
    past = S_k - seq
    q_pos = torch.arange(past, S_k, device=mask.device)[:, None]  # (S, 1) absolute query positions
    k_pos = torch.arange(S_k, device=mask.device)[None, :]  # (1, S_k)
    causal = (k_pos <= q_pos).to(mask.dtype)  # (S, S_k)
    return causal[None, :, :] * mask[:, None, :]  # (B, S, S_k)


def causal_scores(seq: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> Tensor:
    """A decoder's additive "no peeking ahead" mask of one text of ``seq`` tokens (:func:`causal_keep_mask` of no
    padding, made additive).

    Args:
        seq: the text's tokens.
        dtype: the scores'.
        device: where they are.

    Returns:
        (1, 1, seq, seq): 0 where key j <= query i, ``finfo(dtype).min`` after.
    """
    return extended_mask(causal_keep_mask(torch.ones(1, seq, dtype=torch.bool, device=device), seq), dtype)


@dataclass(frozen=True)
class Segments:
    """Texts laid end to end in one sequence (1, T, H): the segments layout (module docstring).

    Attributes:
        lengths: each text's tokens, in the order they are laid; T = their sum.
        pad: zero rows after the texts (the rows a kernel pads a product to, :func:`~bertfn.model.functional.
            product_rows`, added once after the embeddings instead of copied at every product): they attend to
            nothing, nothing attends to them, and the encoder drops them.
        read: (r,) the positions whose last hidden states the caller reads (fill-mask's masks, a classifier's
            first tokens), or None for all: the last layer's attention output and feed-forward run at those
            alone (its keys and values still at every position), which spares most of that layer.
        batches: how many texts each attention call takes, in the order they are laid, as one padded batch (their
            sum the number of texts); None: one call per run of equal lengths (:meth:`runs`).
    """

    lengths: tuple[int, ...]
    pad: int = 0
    read: Tensor | None = None
    batches: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if not self.lengths or any(not isinstance(n, int) or n < 1 for n in self.lengths):
            raise InputError(f"Segments need each text's length, a positive int, for one text or more; "
                             f"got {self.lengths!r}")
        if self.pad < 0:
            raise InputError(f"Segments' pad counts zero rows after the texts, 0 or more; got {self.pad}")
        if self.batches is not None and (any(not isinstance(c, int) or c < 1 for c in self.batches)
                                         or sum(self.batches) != len(self.lengths)):
            raise InputError(f"Segments' batches count the texts of each attention call, positive ints summing to "
                             f"the {len(self.lengths)} texts; got {self.batches!r}")

    @property
    def tokens(self) -> int:
        """T, the texts' tokens (without the padding rows)."""
        return sum(self.lengths)

    def starts(self, device: torch.device | str = "cpu") -> Tensor:
        """Each text's first position in the sequence.

        Args:
            device: where the positions go (the hidden states').

        Returns:
            (b,).
        """
        return torch.tensor([0, *self.lengths[:-1]], device=device).cumsum(0)

    def runs(self) -> list[tuple[int, int]]:
        """The texts as runs of equal length, in order: ``(count, length)`` each (a text's masked copies, laid one after
        another by scoring, form one run)."""
        out: list[tuple[int, int]] = []
        for n in self.lengths:
            if out and out[-1][1] == n:
                out[-1] = (out[-1][0] + 1, n)
            else:
                out.append((1, n))
        return out

    def calls(self) -> list[tuple[int, ...]]:
        """The texts each attention call takes, in order: their lengths (a run's all equal: a dense batch)."""
        if self.batches is None:
            return [(n,) * c for c, n in self.runs()]
        cut = [0, *accumulate(self.batches)]  # each batch's first text
        return [self.lengths[a:b] for a, b in zip(cut, cut[1:])]

    def attend(self, q: Tensor, k: Tensor, v: Tensor,
               one: Callable[[Tensor, Tensor, Tensor, Tensor | None], Tensor]) -> Tensor:
        """Attention text by text: ``one`` on each call's texts as a batch (:meth:`calls`), the contexts laid end to end
        again.

        A run of c texts of n tokens each is a (c, nh, n, hd) batch with nothing to pad (a view of the sequence, no
        copy): one kernel call attends all c, where a call per text would pay its overhead c times (scoring's
        masked copies: one call per text and layer instead of one per copy). A batch of texts of several lengths is
        gathered into a padded (c, nh, m, hd) batch, m the longest, with the additive mask of its keys' padding;
        its padding rows' contexts are dropped.

        Args:
            q: (1, nh, T + pad, hd), the queries of every position.
            k: (1, nh, T + pad, hd).
            v: (1, nh, T + pad, hd).
            one: ``(q_i, k_i, v_i, keys) -> context_i``, each (c, nh, m, hd): c texts as a padded batch of m
                tokens, ``keys`` the padding's additive mask (c, 1, 1, m) (:func:`padding_keys`), or None where
                nothing is padded. A member adds ``keys`` to its own scores' mask (:func:`with_keys`).

        Returns:
            (1, T + pad, nh*hd), the heads' contexts merged (as :func:`~bertfn.model.attention.merge_heads` of the
            whole), the padding rows' zero.
        """
        nh, hd = q.shape[1], q.shape[3]
        if len(self.lengths) == 1 and not self.pad:  # one text: no slices to take or join
            return one(q, k, v, None).transpose(1, 2).flatten(2)  # (1, T, nh*hd)
        by_token = [t.transpose(1, 2)[0] for t in (q, k, v)]  # (T + pad, nh, hd) each, a view
        contexts = []  # each call's (its tokens, nh, hd)
        start = 0
        for ns in self.calls():
            c, m, tokens = len(ns), max(ns), sum(ns)
            if min(ns) == m:  # a run of one length: a view, nothing padded
                qi, ki, vi = (t[start:start + tokens].view(c, m, nh, hd).transpose(1, 2) for t in by_token)
                contexts.append(one(qi, ki, vi, None).transpose(1, 2).reshape(tokens, nh, hd))
            else:  # gathered into a padded batch, scattered back
                rows, real, keys = padded_batch(ns, start, q.device, q.dtype)  # (c*m,), (tokens,), (c, 1, 1, m)
                qi, ki, vi = (t.index_select(0, rows).view(c, m, nh, hd).transpose(1, 2) for t in by_token)
                context = one(qi, ki, vi, keys).transpose(1, 2).reshape(c * m, nh, hd)  # (c*m, nh, hd)
                contexts.append(context.index_select(0, real))  # (tokens, nh, hd)
            start += tokens
        if self.pad:
            contexts.append(q.new_zeros(self.pad, nh, hd))  # the padding rows' context
        return torch.cat(contexts).view(1, -1, nh * hd)  # (1, T + pad, nh*hd): one copy merges the heads

    def padding_mask(self, dtype: torch.dtype, device: torch.device | str = "cpu") -> Tensor:
        """The additive mask of the texts as one padded batch (b, S), S the longest: the padded layout's
        (:func:`extended_mask` of its 0/1 mask), what attention on the padded view adds (:mod:`bertfn.model.segment_points`).

        Args:
            dtype: the scores'.
            device: the hidden states'.

        Returns:
            (b, 1, 1, S): 0 at a text's tokens, ``finfo(dtype).min`` at its padding.
        """
        n = torch.tensor(self.lengths, device=device)  # (b,)
        return padding_keys(torch.arange(max(self.lengths), device=device)[None, :] < n[:, None], dtype)  # (b, S)

    def padded(self, x: Tensor) -> Tensor:
        """A tensor of the sequence in the padded layout's shape: each text's rows in its row of a batch (b, S), zeros
        at the padding (no token is there); the sequence's padding rows (``pad``) left out.

        Where a trace records or edits a point on this layout (:class:`~bertfn.model.recorder.Trace`): the shape the
        padded pass shows there. The inverse is :meth:`laid`.

        Args:
            x: (1, N, F) or (1, nh, N, F): the tokens on axis 1 (hidden states, a block's outputs) or 2 (per head), N
                the texts' T tokens, or T + pad.

        Returns:
            (b, S, F) or (b, nh, S, F), S the longest text.

        Raises:
            InputError: another shape (a point at the rows ``read`` names alone: a trace reads every row; a chunked
                feed-forward is sliced on the padded batch itself, :func:`~bertfn.model.feed_forward.chunked_feed_forward`).
        """
        axis = token_axis(x, self)
        b, S, T = len(self.lengths), max(self.lengths), self.tokens
        rows = x.movedim(axis, 0)[:T]  # (T, 1, [nh,] F): the texts' tokens first
        out = rows.new_zeros(b * S, *rows.shape[1:]).index_copy_(0, padded_places(self.lengths, x.device), rows)
        return out.view(b, S, *rows.shape[2:]).movedim(1, axis)  # (b, S, F) or (b, nh, S, F)

    def laid(self, y: Tensor, like: Tensor | None = None) -> Tensor:
        """A tensor in the padded layout's shape back on the sequence, the inverse of :meth:`padded`: each text's rows
        one after another; what ``y`` holds at the padding is dropped.

        Args:
            y: (b, S, F) or (b, nh, S, F).
            like: the tensor of the sequence it stands for, (1, N, ...) as :meth:`padded` takes: its rows past the
                texts' (the ``pad`` rows, N = T + pad) are kept; None: T + pad rows, those zero.

        Returns:
            (1, N, F) or (1, nh, N, F).
        """
        axis = y.dim() - 2  # the tokens' axis: 1 or 2
        T, places = self.tokens, padded_places(self.lengths, y.device)
        rows = y.movedim(axis, 1).flatten(0, 1).index_select(0, places)  # (T, [nh,] F)
        out = rows[None].movedim(1, axis)  # (1, T, F) or (1, nh, T, F)
        tail = like.narrow(axis, T, like.shape[axis] - T) if like is not None else \
            out.new_zeros(*out.shape[:axis], self.pad, out.shape[-1])  # the padding rows
        return torch.cat([out, tail], dim=axis) if tail.shape[axis] else out

    def reading(self, last: bool) -> Segments:
        """This layout for one layer: with ``read`` at the last layer, without it below.

        Args:
            last: whether the layer is the last.
        """
        return self if last or self.read is None else replace(self, read=None)

    def rows(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """Each (1, T + pad, ...) tensor at the positions read (all of them where ``read`` is None).

        Args:
            *tensors: each (1, T + pad, ...).

        Returns:
            Each (1, r, ...).
        """
        return tensors if self.read is None else tuple(t[:, self.read] for t in tensors)


@lru_cache(maxsize=256)
def padded_batch(lengths: tuple[int, ...], start: int, device: torch.device,
                 dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """Where a padded batch of texts laid end to end reads its rows, and where they go back (:meth:`Segments.attend`).

    Kept per layout (every layer of a pass gathers the same batches): the indices are made once, on the device.

    Args:
        lengths: the c texts' tokens, laid one after another from ``start``; m the longest.
        start: the first text's position in the sequence.
        device: the hidden states'.
        dtype: the scores' (the mask's dtype).

    Returns:
        ``(rows, real, keys)``: rows (c*m,), the sequence's row at each place of the (c, m) batch (a padding place
            reads its text's last token: finite, and masked out as a key); real (tokens,), the places of the real
            tokens, in order; keys (c, 1, 1, m), :func:`padding_keys`.
    """
    n = torch.tensor(lengths)  # (c,)
    first = start + torch.cat([torch.zeros(1, dtype=torch.long), n[:-1].cumsum(0)])  # (c,) each text's first row
    place = torch.arange(max(lengths))  # (m,)
    inside = place[None, :] < n[:, None]  # (c, m)
    rows = first[:, None] + torch.minimum(place[None, :], n[:, None] - 1)  # (c, m)
    real = inside.flatten().nonzero()[:, 0]  # (tokens,)
    return rows.flatten().to(device), real.to(device), padding_keys(inside, dtype).to(device)


def token_axis(x: Tensor, layout: Segments) -> int:
    """The axis of the tokens of a tensor of the sequence, checked (:meth:`Segments.padded`).

    Args:
        x: (1, N, F) or (1, nh, N, F), N = T or T + pad.
        layout: the layout.

    Returns:
        1 or 2.

    Raises:
        InputError: another shape.
    """
    axis = x.dim() - 2
    if x.dim() not in (3, 4) or x.shape[0] != 1 or x.shape[axis] not in (layout.tokens, layout.tokens + layout.pad):
        raise InputError(f"a traced point on texts laid end to end (Segments of {layout.tokens} tokens) is (1, T, F) "
                         f"or (1, heads, T, F), T the tokens (or with the {layout.pad} padding rows), got "
                         f"{tuple(x.shape)}; a trace reads every row: pass Segments without read= (the encoder does so "
                         f"where it traces), or a padded batch (B, S)")
    return axis


@lru_cache(maxsize=256)
def padded_places(lengths: tuple[int, ...], device: torch.device) -> Tensor:
    """Where each token of texts laid end to end sits in their padded batch (b, S) flattened: text i's token j at
    ``i * S + j`` (:meth:`Segments.padded`); kept per layout, made once on the device.

    Args:
        lengths: the texts' tokens; S the longest.
        device: the hidden states'.

    Returns:
        (T,) long.
    """
    S = max(lengths)
    return torch.cat([torch.arange(n) + i * S for i, n in enumerate(lengths)]).to(device)


def padding_keys(inside: Tensor, dtype: torch.dtype) -> Tensor:
    """The additive mask of a padded batch's keys: 0 at a text's tokens, ``finfo(dtype).min`` at its padding.

    Args:
        inside: (c, m) bool, True at a text's tokens.
        dtype: the scores'.

    Returns:
        (c, 1, 1, m), broadcast over heads and queries.
    """
    return extended_mask(inside, dtype)


def with_keys(mask: Tensor | None, keys: Tensor | None) -> Tensor | None:
    """A member's additive mask (its relative-position bias, window or causal mask) with a padded batch's keys
    masked too: their sum held at ``finfo.min``, so a fully masked row stays finite.

    Args:
        mask: broadcastable to (c, nh, m, m), or None.
        keys: :func:`padding_keys` (c, 1, 1, m), or None.

    Returns:
        The two added, or whichever is given (None for neither).
    """
    if keys is None or mask is None:
        return keys if mask is None else mask
    out = (mask + keys).clamp(min=torch.finfo(keys.dtype).min)
    return built(out)


Mask = Tensor | Segments | None
"""What attention reads of a layout: the padded layout's additive mask (B, 1|nh, S_q, S_k) or None, or the segments
layout itself."""
