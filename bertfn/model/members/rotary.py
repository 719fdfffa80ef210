"""Rotary position embeddings (Su et al. 2021, RoFormer), as ESM-2 and ModernBERT use them.

BERT adds a learned vector per position to the word vectors. A rotary model adds nothing: it turns each
query and key instead, by an angle that grows with the token's position. Split a head's hd values into
hd/2 pairs; pair j of the vector at position m is turned by the angle ``m * theta_j``, with

    theta_j = base^(-2j / hd),   j = 0 .. hd/2 - 1                      (Su et al. 2021, eq. 15)

so the first pairs spin fast and the last slowly. A rotation keeps lengths, and turning q by ``m theta``
and k by ``n theta`` turns their dot product by ``(m - n) theta``: the score of query m and key n depends
on their distance ``m - n`` alone (eq. 16), never on where the pair sits in the text.

transformers (``apply_rotary_pos_emb`` in modeling_esm.py and modeling_modernbert.py) pairs value j with
value j + hd/2 (not 2j with 2j+1, as the paper writes it): ``rotate_half`` swaps the halves, so

    rotate(x) = x * cos + rotate_half(x) * sin,   rotate_half([x1, x2]) = [-x2, x1]

with cos and sin of the angles repeated over both halves. Same rotations, another order of the pairs;
the checkpoints were trained with this one. ESM-2 uses base 10000; ModernBERT 160000 in its global
layers and 10000 in its local ones.
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def inverse_frequencies(hd: int, base: float) -> Tensor:
    """The angle per position of each pair: ``theta_j = base^(-2j / hd)`` (Su et al. 2021, eq. 15).

    Computed as transformers computes it (``1 / base ** (arange(0, hd, 2) / hd)`` in float32), so the
    angles agree to the last bit.

    Args:
        hd: the head width (even).
        base: 10000 in RoFormer and ESM-2; ModernBERT's config names its own per layer kind.

    Returns:
        (hd/2,) float32.
    """
    return 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))


def rotary_tables(positions: Tensor, hd: int, base: float, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """cos and sin of every position's angles, laid out for :func:`rotate`.

    The angles ``m * theta_j`` are formed in float32 whatever ``dtype`` is (as ``ModernBertRotaryEmbedding``
    and ESM's ``RotaryEmbedding`` do), then cast.

    Args:
        positions: (B, S) or (S,) integer positions m.
        hd: the head width.
        base: the rotary base.
        dtype: the dtype of the queries and keys they turn.

    Returns:
        cos, sin: each (B or 1, 1, S, hd), broadcasting over the heads.
    """
    if positions.dim() == 1:
        positions = positions[None]  # (1, S)
    theta = inverse_frequencies(hd, base).to(positions.device)  # (hd/2,)
    angles = positions.float()[..., None] * theta  # (B, S, hd/2): m * theta_j
    angles = torch.cat([angles, angles], dim=-1)  # (B, S, hd): both halves of a pair turn by one angle
    return angles.cos()[:, None].to(dtype), angles.sin()[:, None].to(dtype)  # (B, 1, S, hd) each


def rotate_half(x: Tensor) -> Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the last axis: each pair (j, j + hd/2) turned by 90 degrees.

    Args:
        x: (..., hd).

    Returns:
        (..., hd).
    """
    x1, x2 = x.chunk(2, dim=-1)  # (..., hd/2) each
    return torch.cat([-x2, x1], dim=-1)


def rotate(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Turn each pair of ``x`` by its position's angle: ``x cos + rotate_half(x) sin`` (``apply_rotary_pos_emb``).

    Args:
        x: (B, nh, S, hd) queries or keys.
        cos: (B or 1, 1, S, hd), from :func:`rotary_tables`.
        sin: the same.

    Returns:
        (B, nh, S, hd).
    """
    return x * cos + rotate_half(x) * sin
