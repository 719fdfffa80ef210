"""The two layouts a forward pass takes its tokens in, and what attention reads of each.

* **Padded** (B, S): texts one per row, each padded to the longest; a 0/1 mask of the real tokens, made additive
  (:func:`extended_mask`: 0 where a key is read, ``finfo(dtype).min`` where not) and added to every score. This is
  the layout transformers runs, the one ``trace`` records and edits address, and the only one a decoder's cache or
  cross-attention takes.
* **Segments** (1, T): texts laid end to end, T the sum of their lengths, positions restarting at each text's start
  (:class:`Segments`). Every step that treats tokens one at a time (embeddings, every product, LayerNorm, the
  feed-forward) runs on the T real rows alone; attention runs on each text's slice as if the text were a padded
  batch of one with nothing to pad (:meth:`Segments.attend`). A batch of texts of mixed lengths spends no product on
  padding, and a text's hidden states equal the padded layout's for it (tests/test_layouts.py).

Padded (B=3, S=5)          Segments (1, T=9), lengths (5, 2, 2)
  a a a a a                  a a a a a b b c c
  b b . . .                  attention: [a a a a a] [b b] [c c]
  c c . . .

A step of the forward pass takes either: its ``mask`` argument is the padded layout's additive mask (or None) or a
:class:`Segments`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..errors import InputError

Tensor = torch.Tensor


def extended_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """0/1 keep-mask -> additive mask ``(1 - m) * finfo(dtype).min`` that broadcasts over heads.

    Mirrors ``ModuleUtilsMixin.get_extended_attention_mask`` / ``invert_attention_mask``.

    Args:
        mask: (B, S_k) padding mask, (B, S_q, S_k) per-query mask, or (B, 1 or nh, S_q, S_k); 1 keeps a key.
        dtype: the dtype of the result (that of the scores it is added to).

    Returns:
        (B, 1, 1, S_k), (B, 1, S_q, S_k) or the 4D mask unchanged in shape, in ``dtype``.

    Raises:
        InputError: a mask of another number of dimensions.
    """
    if mask.dim() == 2:
        mask = mask[:, None, None, :]  # (B, 1, 1, S_k)
    elif mask.dim() == 3:
        mask = mask[:, None, :, :]  # (B, 1, S_q, S_k)
    elif mask.dim() != 4:
        raise InputError(
            f"attention_mask must be (batch, seq), (batch, q, k) or (batch, heads, q, k); got {tuple(mask.shape)}"
        )
    return (1.0 - mask.to(dtype)) * torch.finfo(dtype).min


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
    """

    lengths: tuple[int, ...]
    pad: int = 0
    read: Tensor | None = None

    def __post_init__(self) -> None:
        if not self.lengths or any(not isinstance(n, int) or n < 1 for n in self.lengths):
            raise InputError(f"Segments need each text's length, a positive int, for one text or more; "
                             f"got {self.lengths!r}")
        if self.pad < 0:
            raise InputError(f"Segments' pad counts zero rows after the texts, 0 or more; got {self.pad}")

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

    def attend(self, q: Tensor, k: Tensor, v: Tensor, one: Callable[[Tensor, Tensor, Tensor], Tensor]) -> Tensor:
        """Attention text by text: ``one`` on each run of equal-length texts as a dense batch, the contexts laid end to
        end again.

        A run of c texts of n tokens each is a (c, nh, n, hd) batch with nothing to pad (a view of the sequence, no
        copy): one kernel call attends all c, where a call per text would pay its overhead c times (scoring's
        masked copies: one call per text and layer instead of one per copy).

        Args:
            q: (1, nh, T + pad, hd), the queries of every position.
            k: (1, nh, T + pad, hd).
            v: (1, nh, T + pad, hd).
            one: ``(q_i, k_i, v_i) -> context_i``, each (c, nh, n, hd): c texts of n tokens each, as a padded batch
                with no padding.

        Returns:
            (1, T + pad, nh*hd), the heads' contexts merged (as :func:`~bertfn.model.attention.merge_heads` of the
            whole), the padding rows' zero.
        """
        nh, hd = q.shape[1], q.shape[3]
        if len(self.lengths) == 1 and not self.pad:  # one text: no slices to take or join
            return one(q, k, v).transpose(1, 2).flatten(2)  # (1, T, nh*hd)
        runs = self.runs()
        spans = [c * n for c, n in runs] + ([self.pad] if self.pad else [])
        by_token = [t.transpose(1, 2).split(spans, dim=1) for t in (q, k, v)]  # each part (1, c*n, nh, hd), a view
        contexts = []  # each run's (c*n, nh, hd)
        for (c, n), *qkv in zip(runs, *by_token):
            qi, ki, vi = (t.view(c, n, nh, hd).transpose(1, 2) for t in qkv)  # (c, nh, n, hd) each, views
            contexts.append(one(qi, ki, vi).transpose(1, 2).reshape(c * n, nh, hd))  # (c*n, nh, hd)
        if self.pad:
            contexts.append(q.new_zeros(self.pad, nh, hd))  # the padding rows' context
        return torch.cat(contexts).view(1, -1, nh * hd)  # (1, T + pad, nh*hd): one copy merges the heads

    def reading(self, last: bool) -> Segments:
        """This layout for one layer: with ``read`` at the last layer, without it below.

        Args:
            last: whether the layer is the last.
        """
        return self if last or self.read is None else Segments(self.lengths, self.pad)

    def rows(self, *tensors: Tensor) -> tuple[Tensor, ...]:
        """Each (1, T + pad, ...) tensor at the positions read (all of them where ``read`` is None).

        Args:
            *tensors: each (1, T + pad, ...).

        Returns:
            Each (1, r, ...).
        """
        return tensors if self.read is None else tuple(t[:, self.read] for t in tensors)


Mask = Tensor | Segments | None
"""What attention reads of a layout: the padded layout's additive mask (B, 1|nh, S_q, S_k) or None, or the segments
layout itself."""


def inference_only(mask: Mask, given: dict[str, bool]) -> None:
    """Raise :class:`InputError` where attention meets the segments layout with what that layout does not run.

    Texts laid end to end run inference's self-attention: no cache, cross-attention, head mask, probabilities (but
    where a member's layer forms them per text), dropout or trace, each of which reads or writes the padded layout's
    (B, nh, S, S) shapes.

    Args:
        mask: the layout's mask.
        given: ``{what: whether the call asks for it}``, e.g. ``{"head mask": head_mask is not None}``.
    """
    asked = [what for what, wanted in given.items() if wanted]
    if isinstance(mask, Segments) and asked:
        raise InputError(f"attention on texts laid end to end (Segments) runs inference alone, without "
                         f"{', '.join(asked)}; pass a padded batch (B, S) with its mask for those")
